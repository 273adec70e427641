"""A seeded synthetic graph shaped like HippoRAG 2's MuSiQue graph, for PPR benchmarks.

Benchmarking PPR on the real graph needs the OpenIE output and embeddings of the whole
MuSiQue corpus; what PPR cost depends on is only the graph's size, degree shape and
the shape of the reset vectors, so this module reproduces those from the counts the
paper's MuSiQue graph has (defaults below), scaled by ``scale``:

* vertex order as the retriever builds it: phrase nodes first, then passage nodes;
* context edges passage-phrase (weight 1); every phrase sits in at least one passage,
  popular phrases in many (power-law-ish), and a few passages have no phrase at all
  (isolated vertices);
* relation edges between two phrases of the same passage, each key added as two
  parallel edges (a, b) and (b, a) with the same integer count as weight, as the
  reference adds both directions of a triple to an undirected graph;
* synonym edges between phrases, similarity weights in [0.8, 1], power-law-ish degrees;
* reset vectors like the reference's: 5 seed phrases weighted U(0.2, 1) divided by
  how many passages contain the phrase, plus ``passage_node_weight`` times min-max
  normalised dense scores on every passage.

``python -m benchmarks.synthetic_graph --scale 0.1`` prints the graph's statistics.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import igraph as ig
import numpy as np

# Counts of the paper's MuSiQue graph (HippoRAG 2, Table 8 / released graph).
N_PASSAGES = 11_656
N_PHRASES = 85_288
N_RELATION_KEYS = 141_000
N_CONTEXT_EDGES = 133_000
N_SYNONYM_EDGES = 1_130_000
N_ISOLATED_PASSAGES = 5
N_SEEDS = 5


@dataclass
class SyntheticGraph:
    graph: ig.Graph
    n_phrase: int
    n_passage: int
    # passages containing each phrase: the reference divides a seed phrase's weight by it
    phrase_passage_count: np.ndarray
    popularity: np.ndarray  # phrase sampling weights, reused to pick query seeds

    @property
    def n(self) -> int:
        return self.n_phrase + self.n_passage


@dataclass
class QuerySet:
    """Reset vectors kept as their two parts, so a passage_node_weight sweep can
    rebuild them without regenerating (and without holding q x n floats per weight)."""

    n_phrase: int
    n_passage: int
    seed_nodes: np.ndarray  # (q, N_SEEDS) phrase ids
    seed_weights: np.ndarray  # (q, N_SEEDS), already divided by passage counts
    passage_scores: np.ndarray  # (q, n_passage), min-max normalised to [0, 1]

    def __len__(self) -> int:
        return len(self.seed_nodes)

    def resets(self, passage_node_weight: float, rows: slice | np.ndarray = slice(None)) -> np.ndarray:
        seeds = self.seed_nodes[rows]
        weights = self.seed_weights[rows]
        out = np.zeros((len(seeds), self.n_phrase + self.n_passage))
        np.add.at(out, (np.arange(len(seeds))[:, None], seeds), weights)
        out[:, self.n_phrase :] = passage_node_weight * self.passage_scores[rows]
        return out


def _zipf_weights(k: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Power-law popularity over a random permutation, so hubs are spread over ids."""
    w = (np.arange(k) + 1.0) ** -exponent
    return rng.permutation(w / w.sum())


def _sample(rng: np.random.Generator, p: np.ndarray, size: int) -> np.ndarray:
    # inverse-CDF sampling: rng.choice with p is much slower for millions of draws
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(p) - 1)


def make_graph(scale: float = 1.0, seed: int = 0) -> SyntheticGraph:
    rng = np.random.default_rng(seed)
    n_passage = max(4, round(N_PASSAGES * scale))
    n_phrase = max(8, round(N_PHRASES * scale))
    n_context = max(n_phrase, round(N_CONTEXT_EDGES * scale))
    n_relation = max(1, round(N_RELATION_KEYS * scale))
    n_synonym = max(1, round(N_SYNONYM_EDGES * scale))
    n_isolated = min(n_passage - 1, max(1, round(N_ISOLATED_PASSAGES * scale)))

    popularity = _zipf_weights(n_phrase, 0.9, rng)
    isolated = rng.choice(n_passage, size=n_isolated, replace=False)
    hosts = np.setdiff1d(np.arange(n_passage), isolated)

    # context edges: each phrase once (so none is orphaned), the rest by popularity
    ctx_phrase = np.concatenate([np.arange(n_phrase), _sample(rng, popularity, n_context - n_phrase)])
    ctx_passage = hosts[rng.integers(0, len(hosts), size=len(ctx_phrase))]
    pairs = np.unique(np.stack([ctx_passage, ctx_phrase], axis=1), axis=0)  # sorted by passage
    ctx_passage, ctx_phrase = pairs[:, 0], pairs[:, 1]
    phrase_passage_count = np.bincount(ctx_phrase, minlength=n_phrase)

    # relation keys: two phrases of one passage, as OpenIE triples are
    starts = np.searchsorted(ctx_passage, np.arange(n_passage))
    counts = np.bincount(ctx_passage, minlength=n_passage)
    first = rng.integers(0, len(ctx_passage), size=n_relation)
    p_of = ctx_passage[first]
    second = starts[p_of] + rng.integers(0, counts[p_of])
    a, b = ctx_phrase[first], ctx_phrase[second]
    keep = a != b
    a, b = a[keep], b[keep]
    rel_w = rng.geometric(0.85, size=len(a)).astype(np.float64)

    # synonym edges: power-law-ish endpoints, similarity weights in [0.8, 1]
    syn_pop = _zipf_weights(n_phrase, 0.6, rng)
    s, t = _sample(rng, syn_pop, n_synonym), _sample(rng, syn_pop, n_synonym)
    keep = s != t
    s, t = s[keep], t[keep]
    syn_w = rng.uniform(0.8, 1.0, size=len(s))

    src = np.concatenate([a, b, s, ctx_passage + n_phrase])
    dst = np.concatenate([b, a, t, ctx_phrase])
    weight = np.concatenate([rel_w, rel_w, syn_w, np.ones(len(ctx_passage))])
    graph = ig.Graph(n=n_phrase + n_passage, edges=np.stack([src, dst], axis=1).tolist(), directed=False)
    graph.es["weight"] = weight.tolist()
    return SyntheticGraph(graph, n_phrase, n_passage, phrase_passage_count, popularity)


def make_queries(sg: SyntheticGraph, n_queries: int, seed: int = 1) -> QuerySet:
    rng = np.random.default_rng(seed)
    q = n_queries
    # distinct seeds per query, drawn by popularity as retrieved facts favour common entities
    seeds = np.empty((q, N_SEEDS), dtype=np.int64)
    for i in range(q):
        while True:
            cand = np.unique(_sample(rng, sg.popularity, N_SEEDS * 2))
            if len(cand) >= N_SEEDS:
                seeds[i] = rng.permutation(cand)[:N_SEEDS]
                break
    weights = rng.uniform(0.2, 1.0, size=(q, N_SEEDS)) / np.maximum(sg.phrase_passage_count[seeds], 1)
    # dense scores: cosine-like background plus a few clearly relevant passages
    dense = rng.normal(0.30, 0.05, size=(q, sg.n_passage))
    hot = rng.integers(0, sg.n_passage, size=(q, 20))
    dense[np.arange(q)[:, None], hot] += rng.uniform(0.1, 0.3, size=(q, 20))
    lo, hi = dense.min(axis=1, keepdims=True), dense.max(axis=1, keepdims=True)
    dense = (dense - lo) / (hi - lo)
    return QuerySet(sg.n_phrase, sg.n_passage, seeds, weights, dense)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the MuSiQue graph's size")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sg = make_graph(args.scale, args.seed)
    g = sg.graph
    deg = np.asarray(g.degree())
    print(f"built in {time.perf_counter() - t0:.1f}s: {sg.n_phrase} phrase + {sg.n_passage} passage nodes, "
          f"{g.ecount()} edges, {int((deg == 0).sum())} isolated vertices")
    phr = deg[: sg.n_phrase]
    print("phrase degree: median %d, p99 %d, max %d" % (np.median(phr), np.percentile(phr, 99), phr.max()))


if __name__ == "__main__":
    main()
