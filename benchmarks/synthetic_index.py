"""A seeded synthetic HippoRAG 2 index shaped like the paper's MuSiQue one, built by our own code.

`benchmarks/synthetic_graph.py` makes a graph with the right counts for timing PPR
alone; timing a whole query (fact linking, seeds, PPR, ranking) and the index build
needs everything the retriever reads: passages, phrases, facts, the node
specificity table and embeddings. This module makes OpenIE-like triples and 384-d
embeddings and runs the real stages on them (`clean_passage` + `content_of`, `synonym_arrays`,
`build_edges`), so the synonym edges come from a real thresholded KNN over phrase
embeddings that cluster the way surface variants of one entity do (about a dozen
phrases around one centre), not from random pairs.

Counts at scale 1 follow the paper's MuSiQue graph: 11,656 passages, ~85k phrases,
~147k facts (~12.6 per passage), ~133k context and ~1.1M synonym edges.

Queries: each is built around one passage (its embedding plus those of two of its
facts, plus noise), so fact linking finds related facts as a real question does.
`QueryVectors` stands in for the encoder: these benchmarks time everything AFTER
query encoding, so it returns precomputed vectors by question text.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import numpy as np

from hipporag2.config import GraphConfig
from hipporag2.data.loaders import Query
from hipporag2.graph.build import build_edges, clean_passage, content_of
from hipporag2.graph.store import Index
from hipporag2.graph.synonyms import synonym_arrays

N_PASSAGES = 11_656
N_PHRASES = 85_288
N_CONTEXT = 133_000
FACTS_PER_PASSAGE = 12.6
DIM = 384
CLUSTER = 12  # phrases per entity cluster
N_RELATIONS = 400


@dataclass
class Timed:
    """Seconds per build stage, in order."""

    stages: Dict[str, float] = field(default_factory=dict)

    def run(self, name, fn, *args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - t
        return out


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _zipf(k: int, exponent: float, rng) -> np.ndarray:
    w = (np.arange(k) + 1.0) ** -exponent
    return rng.permutation(w / w.sum())


def _sample(rng, p: np.ndarray, size: int) -> np.ndarray:
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(p) - 1)


def synthetic_openie(scale: float, seed: int = 0):
    """(passages, raw triples per passage, phrase texts, phrase embeddings by text)."""
    rng = np.random.default_rng(seed)
    n_pas = max(8, round(N_PASSAGES * scale))
    n_phr = max(16, round(N_PHRASES * scale))
    n_ctx = max(n_phr, round(N_CONTEXT * scale))
    names = [f"entity {i // CLUSTER} form {i % CLUSTER}" for i in range(n_phr)]
    n_clusters = (n_phr + CLUSTER - 1) // CLUSTER
    centres = rng.normal(size=(n_clusters, DIM)).astype(np.float32)
    phrase_vec = _unit(centres[np.arange(n_phr) // CLUSTER] + 0.45 * rng.normal(size=(n_phr, DIM)).astype(np.float32))
    pop = _zipf(n_phr, 0.9, rng)
    slots = np.concatenate([rng.permutation(n_phr), _sample(rng, pop, n_ctx - n_phr)])
    host = rng.integers(0, n_pas, size=len(slots))
    by_passage: List[List[int]] = [[] for _ in range(n_pas)]
    for h, p in zip(host.tolist(), slots.tolist()):
        by_passage[h].append(p)
    rels = [f"relation {r}" for r in range(N_RELATIONS)]
    raw: List[List[List[str]]] = []
    for members in by_passage:
        members = list(dict.fromkeys(members))
        if not members:
            raw.append([])
            continue
        if len(members) == 1:
            members.append(int(_sample(rng, pop, 1)[0]))
        n_t = max(len(members) // 2 + 1, int(round(FACTS_PER_PASSAGE * len(members) / (n_ctx / n_pas))))
        # every member in at least one triple, then random pairs of members
        perm = rng.permutation(len(members))
        pairs = [(perm[i], perm[(i + 1) % len(perm)]) for i in range(0, len(perm), 2)]
        extra = rng.integers(0, len(members), size=(max(0, n_t - len(pairs)), 2))
        triples = []
        for a, b in list(pairs) + [tuple(x) for x in extra]:
            if a == b:
                continue
            triples.append([names[members[a]], rels[int(rng.integers(N_RELATIONS))], names[members[b]]])
        raw.append(triples)
    passages = [f"Passage {i}\nsynthetic text of passage {i}" for i in range(n_pas)]
    return passages, raw, names, phrase_vec


def build_synthetic_index(scale: float, seed: int = 0, block_size: int = 1024, timed: Timed | None = None) -> Index:
    """The index of `synthetic_openie(scale, seed)`, stage by stage (timed into `timed`)."""
    timed = timed or Timed()
    rng = np.random.default_rng(seed + 7)
    passages, raw, names, phrase_vec = timed.run("synthetic OpenIE (not a stage of ours)", synthetic_openie, scale, seed)
    cfg = GraphConfig(knn_block_size=block_size)
    content = timed.run("triples -> phrases, facts", lambda: content_of(passages, [clean_passage(t, cfg) for t in raw]))
    by_name = {n: i for i, n in enumerate(names)}
    order = np.array([by_name[p] for p in content.phrases], dtype=np.int64)

    def embeddings():
        phrase_emb = phrase_vec[order]
        idx = content.phrase_index
        s = np.array([idx[f[0]] for f in content.facts])
        o = np.array([idx[f[2]] for f in content.facts])
        fact_emb = _unit(phrase_emb[s] + phrase_emb[o] + 0.5 * rng.normal(size=(len(s), DIM)).astype(np.float32))
        passage_emb = np.zeros((len(passages), DIM), dtype=np.float32)
        for p_idx, triples in enumerate(content.chunk_triples):
            for t in triples:
                passage_emb[p_idx] += phrase_emb[idx[t[0]]] + phrase_emb[idx[t[2]]]
        passage_emb = _unit(passage_emb + 0.3 * rng.normal(size=passage_emb.shape).astype(np.float32))
        return phrase_emb, fact_emb, passage_emb

    phrase_emb, fact_emb, passage_emb = timed.run("embeddings (synthetic, not a stage of ours)", embeddings)
    pairs = timed.run("synonym KNN", synonym_arrays, content.phrases, phrase_emb, cfg.synonymy_edge_sim_threshold,
                      cfg.synonymy_edge_topk, cfg.synonymy_edge_max_neighbours, block_size)
    edges, stats = timed.run("edges (relation, context, synonym map)", build_edges, content, phrase_emb, cfg, synonyms=pairs)
    return Index(
        passages=passages,
        titles=[p.split("\n", 1)[0] for p in passages],
        corpus_idx=list(range(len(passages))),
        phrases=content.phrases,
        facts=content.facts,
        phrase_passages=content.phrase_passages,
        edges=edges,
        stats=stats.as_dict(),
        passage_emb=passage_emb,
        phrase_emb=phrase_emb,
        fact_emb=fact_emb,
    )


def synthetic_queries(index: Index, n: int, seed: int = 1):
    """(queries, their vectors): each around one passage and two facts about its phrases."""
    rng = np.random.default_rng(seed)
    pe, fe = np.asarray(index.passage_emb), np.asarray(index.fact_emb)
    facts_of_passage: Dict[int, List[int]] = {}
    pidx = index.phrase_index
    for fi, f in enumerate(index.facts):
        for p in index.phrase_passages[pidx[f[0]]][:3]:
            facts_of_passage.setdefault(p, []).append(fi)
    vecs = np.empty((n, pe.shape[1]), dtype=np.float32)
    queries = []
    for i in range(n):
        p = int(rng.integers(index.n_passages))
        fs = facts_of_passage.get(p, [])
        v = pe[p].astype(np.float64)
        for f in rng.choice(fs, size=min(2, len(fs)), replace=False) if fs else []:
            v = v + fe[f]
        vecs[i] = v + 0.4 * rng.normal(size=pe.shape[1])
        queries.append(Query(id=f"q{i}", question=f"synthetic question {i} about passage {p}"))
    return queries, _unit(vecs)


class QueryVectors:
    """The encoder's place in these benchmarks: precomputed vectors by question text
    (the benchmarks time what comes after encoding)."""

    def __init__(self, queries: Sequence[Query], vectors: np.ndarray):
        self._row = {q.question: i for i, q in enumerate(queries)}
        self._vectors = vectors

    def embed(self, texts, instruction=None, desc="", progress=False) -> np.ndarray:
        return self._vectors[[self._row[t] for t in texts]]
