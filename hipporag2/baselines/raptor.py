"""RAPTOR (Sarthi et al., ICLR 2024), written here from the paper's description.

A tree over the corpus: leaves are ~100-token chunks of each passage; a level above is
made by reducing the level's embeddings with UMAP, fitting Gaussian mixtures (the number
of components chosen by BIC), letting a node join every cluster whose posterior passes a
threshold (soft membership), clustering again any cluster whose texts are too long for
one summary, and summarising each cluster with the LLM. Levels are added until a level
has too few nodes to cluster. Retrieval is over the "collapsed tree": every node, leaf
or summary, scored by cosine with the query.

This module is the algorithm only: embedding and summarising are functions passed in,
so it holds no model, cache or file (those are in `raptor_index`).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.baselines.config import RaptorConfig

log = logging.getLogger("hipporag2.raptor")

_TOKEN = re.compile(r"\w+|[^\w\s]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# RAPTOR's local (second-stage) UMAP neighbourhood.
_LOCAL_NEIGHBOURS = 10


def count_tokens(text: str) -> int:
    """Words and punctuation marks: a tokenizer that needs no download (docs/quirks.md)."""
    return len(_TOKEN.findall(text))


def _pack(items: List[str], max_tokens: int) -> List[str]:
    """Consecutive items joined by spaces into chunks of at most `max_tokens` tokens (an
    item longer than that alone is a chunk of its own)."""
    chunks: List[str] = []
    cur, n = [], 0
    for item in items:
        t = count_tokens(item)
        if cur and n + t > max_tokens:
            chunks.append(" ".join(cur))
            cur, n = [], 0
        cur.append(item)
        n += t
    if cur:
        chunks.append(" ".join(cur))
    return chunks


def split_leaves(text: str, max_tokens: int) -> List[str]:
    """`text` cut at sentence ends into chunks of at most `max_tokens` tokens; a single
    sentence longer than that is cut between words."""
    pieces: List[str] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        if count_tokens(sentence) <= max_tokens:
            pieces.append(sentence)
        else:
            pieces.extend(_pack(sentence.split(), max_tokens))
    return [c for c in _pack(pieces, max_tokens) if c.strip()] or [text]


@dataclass
class Node:
    text: str
    level: int  # 0 = leaf
    children: List[int]  # node ids one level down
    passages: List[int]  # passage indices beneath (a leaf: its own passage)


@dataclass
class Tree:
    nodes: List[Node]
    embeddings: np.ndarray  # one unit-length row per node
    # per level: node count (level 0 = leaves)
    stats: Dict[str, object] = field(default_factory=dict)

    def levels(self) -> List[int]:
        counts: Dict[int, int] = {}
        for n in self.nodes:
            counts[n.level] = counts.get(n.level, 0) + 1
        return [counts[k] for k in sorted(counts)]


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def _reduce(emb: np.ndarray, dim: int, n_neighbors: int, seed: int) -> np.ndarray:
    import umap

    n = len(emb)
    reducer = umap.UMAP(n_neighbors=max(2, min(n_neighbors, n - 1)), n_components=min(dim, n - 2),
                        metric="cosine", random_state=seed, n_jobs=1, init="random" if n < dim + 4 else "spectral")
    return reducer.fit_transform(emb)


def _soft_clusters(x: np.ndarray, max_clusters: int, threshold: float, seed: int) -> List[List[int]]:
    """Members of each mixture component (a point may be in several); the component
    count minimises BIC. A point whose posteriors are all under the threshold joins its
    most likely component (RAPTOR's code would drop it from the level above)."""
    from sklearn.mixture import GaussianMixture

    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    best_k, best_bic, best = 1, np.inf, None
    for k in range(1, max(2, min(max_clusters, n))):
        try:
            gm = GaussianMixture(n_components=k, random_state=seed).fit(x)
        except ValueError:
            continue  # a component collapsed onto too few points: that k cannot be fitted
        bic = gm.bic(x)
        if bic < best_bic:
            best_k, best_bic, best = k, bic, gm
    if best is None:
        return [list(range(n))]
    gm = best
    probs = gm.predict_proba(x)
    members: List[List[int]] = [[] for _ in range(best_k)]
    for i, row in enumerate(probs):
        chosen = np.flatnonzero(row > threshold)
        for c in chosen if len(chosen) else [int(np.argmax(row))]:
            members[int(c)].append(i)
    return [m for m in members if m]


def cluster(emb: np.ndarray, tokens: Sequence[int], cfg: RaptorConfig) -> List[List[int]]:
    """Clusters (lists of row indices, possibly overlapping) of one level: a global
    UMAP + GMM, then a local one inside each global cluster, then any cluster over
    `max_cluster_tokens` clustered again on its own."""
    n = len(emb)
    if n <= cfg.umap_dim + 1:
        return [list(range(n))]
    global_x = _reduce(emb, cfg.umap_dim, int((n - 1) ** 0.5), cfg.seed)
    out: List[List[int]] = []
    for g in _soft_clusters(global_x, cfg.max_clusters, cfg.membership_threshold, cfg.seed):
        if len(g) <= cfg.umap_dim + 1:
            local = [list(range(len(g)))]
        else:
            local_x = _reduce(emb[g], cfg.umap_dim, _LOCAL_NEIGHBOURS, cfg.seed)
            local = _soft_clusters(local_x, cfg.max_clusters, cfg.membership_threshold, cfg.seed)
        for members in local:
            rows = [g[i] for i in members]
            if sum(tokens[r] for r in rows) > cfg.max_cluster_tokens and 1 < len(rows) < n:
                out.extend([[rows[i] for i in sub] for sub in cluster(emb[rows], [tokens[r] for r in rows], cfg)])
            else:
                out.append(rows)
    return out


def build_tree(passages: Sequence[str], cfg: RaptorConfig, embed: Callable[[List[str]], np.ndarray],
               summarize: Callable[[List[List[str]]], List[str]],
               on_level: Optional[Callable[[int, int], None]] = None) -> Tree:
    """The tree of `passages`. `embed(texts)` gives one row per text; `summarize(groups)`
    one summary per group of texts (a level's clusters in one call, so a batching
    backend answers them together)."""
    nodes: List[Node] = []
    for p, text in enumerate(passages):
        for chunk in split_leaves(text, cfg.leaf_tokens):
            nodes.append(Node(chunk, 0, [], [p]))
    emb = [_unit(embed([n.text for n in nodes]))]
    current = list(range(len(nodes)))
    level = 0
    while level < cfg.max_levels and len(current) > cfg.umap_dim + 1:
        groups = cluster(emb[-1], [count_tokens(nodes[i].text) for i in current], cfg)
        if len(groups) >= len(current):
            break  # nothing merged: another level would copy this one
        summaries = summarize([[nodes[current[i]].text for i in g] for g in groups])
        level += 1
        new = []
        for g, text in zip(groups, summaries):
            kids = [current[i] for i in g]
            beneath = sorted({p for k in kids for p in nodes[k].passages})
            nodes.append(Node(text, level, kids, beneath))
            new.append(len(nodes) - 1)
        emb.append(_unit(embed([nodes[i].text for i in new])))
        current = new
        if on_level is not None:
            on_level(level, len(new))
    tree = Tree(nodes, np.vstack(emb) if emb else np.zeros((0, 0), np.float32))
    tree.stats = {"levels": tree.levels(), "nodes": len(nodes), "leaves": tree.levels()[0] if nodes else 0}
    return tree


# ---- collapsed-tree retrieval -----------------------------------------------------------


def score_nodes(tree: Tree, query_emb: np.ndarray) -> np.ndarray:
    """Cosine of each node with the query (rows of `query_emb`)."""
    return _unit(np.atleast_2d(query_emb)) @ tree.embeddings.T


def passage_ranking(tree: Tree, scores: np.ndarray, mode: str, top_k: int) -> Tuple[List[int], List[float]]:
    """Passages in the order the collapsed tree reaches them: a leaf gives its passage; a
    summary gives the passages beneath it (`expand`, best-scored leaf first) or nothing
    (`skip`). A passage's score is that of the first node that gave it."""
    order = np.argsort(-scores, kind="stable")
    best_leaf: Dict[int, float] = {}
    for i in order:
        node = tree.nodes[i]
        if node.level == 0 and node.passages[0] not in best_leaf:
            best_leaf[node.passages[0]] = float(scores[i])
    ranked: List[int] = []
    out_scores: List[float] = []
    seen = set()
    for i in order:
        node = tree.nodes[i]
        if node.level > 0 and mode == "skip":
            continue
        beneath = node.passages if node.level == 0 else sorted(node.passages, key=lambda p: -best_leaf.get(p, -np.inf))
        for p in beneath:
            if p not in seen:
                seen.add(p)
                ranked.append(p)
                out_scores.append(float(scores[i]))
        if len(ranked) >= top_k:
            break
    return ranked[:top_k], out_scores[:top_k]


def context_nodes(tree: Tree, scores: np.ndarray, top_k: int, max_tokens: int) -> List[int]:
    """The reader's nodes: best first, at most `top_k`, stopping before the one that
    would pass `max_tokens` (RAPTOR's collapsed-tree selection)."""
    chosen, total = [], 0
    for i in np.argsort(-scores, kind="stable")[:top_k]:
        t = count_tokens(tree.nodes[i].text)
        if total + t > max_tokens:
            break
        chosen.append(int(i))
        total += t
    return chosen
