"""Knowledge-graph construction (SPEC §2): a pure function from triples and phrase
embeddings to nodes, typed weighted edges and statistics. I/O lives in graph/store.py.

Vertex order follows the reference: phrase nodes sorted by text, then passages in
corpus order. Edges are first collected in one map keyed by ORDERED pair, exactly as
the reference does, because its quirks (doubled edges, synonym scores replacing
relation counts) are properties of that map.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np

from hipporag2.config import GraphConfig
from hipporag2.graph.synonyms import SynonymPairs, synonym_arrays
from hipporag2.graph.triples import (
    Triple,
    TripleStats,
    clean_triples,
    passage_phrases,
    phrase_nodes,
    phrase_passages,
    unique_facts,
)

RELATION, CONTEXT, SYNONYM = 0, 1, 2
EDGE_TYPES = ("relation", "context", "synonym")


@dataclass
class GraphStats:
    phrase_nodes: int = 0
    passage_nodes: int = 0
    facts: int = 0
    relation_edges: int = 0
    context_edges: int = 0
    synonym_edges: int = 0
    edges_total: int = 0
    raw_triples: int = 0
    triples_kept: int = 0
    triples_wrong_length: int = 0
    triples_duplicate: int = 0
    triples_non_string: int = 0
    relation_pairs_replaced_by_synonym: int = 0
    self_loops_dropped: int = 0
    passages_without_triples: int = 0
    isolated_vertices: int = 0

    def as_dict(self) -> Dict[str, int]:
        return asdict(self)


@dataclass
class IndexContent:
    """What OpenIE contributes to the index, before any embedding."""

    passages: List[str]
    chunk_triples: List[List[Triple]]
    phrases: List[str]
    facts: List[Triple]
    phrase_passages: List[List[int]]
    triple_stats: TripleStats = field(default_factory=TripleStats)

    @property
    def phrase_index(self) -> Dict[str, int]:
        return {p: i for i, p in enumerate(self.phrases)}


def index_content(passages: Sequence[str], raw_triples: Sequence[Sequence], cfg: GraphConfig) -> IndexContent:
    """raw_triples[i] are passage i's triples exactly as extracted."""
    stats = TripleStats()
    chunk_triples = [clean_triples(raw, cfg.dedup_before_normalise, stats) for raw in raw_triples]
    phrases = phrase_nodes(chunk_triples)
    index = {p: i for i, p in enumerate(phrases)}
    return IndexContent(
        passages=list(passages),
        chunk_triples=chunk_triples,
        phrases=phrases,
        facts=unique_facts(chunk_triples),
        phrase_passages=phrase_passages(chunk_triples, index),
        triple_stats=stats,
    )


@dataclass
class GraphEdges:
    """Undirected weighted multigraph in vertex indices, with each edge's type."""

    n_vertices: int
    source: np.ndarray
    target: np.ndarray
    weight: np.ndarray
    kind: np.ndarray


def build_edges(
    content: IndexContent,
    phrase_embeddings: np.ndarray | None,
    cfg: GraphConfig,
    progress: bool = False,
    synonyms: SynonymPairs | None = None,
) -> Tuple[GraphEdges, GraphStats]:
    """The edges of SPEC §2. `synonyms`: the synonym KNN's pairs when the caller has
    them already (computed from `phrase_embeddings` with `cfg`'s settings otherwise)."""
    n_phr, n_pas = len(content.phrases), len(content.passages)
    index = content.phrase_index
    edge_map: Dict[Tuple[int, int], Tuple[float, int]] = {}
    stats = GraphStats(
        phrase_nodes=n_phr,
        passage_nodes=n_pas,
        facts=len(content.facts),
        raw_triples=content.triple_stats.raw,
        triples_kept=content.triple_stats.kept,
        triples_wrong_length=content.triple_stats.wrong_length,
        triples_duplicate=content.triple_stats.duplicates,
        triples_non_string=content.triple_stats.non_string,
        passages_without_triples=sum(1 for t in content.chunk_triples if not t),
    )

    def key(a: int, b: int) -> Tuple[int, int]:
        return (a, b) if cfg.double_edges or a <= b else (b, a)

    # Relation edges: +1 per triple for each ordered pair (s, o) and (o, s).
    for triples in content.chunk_triples:
        for s, _, o in triples:
            a, b = index[s], index[o]
            for pair in ((a, b), (b, a)) if cfg.double_edges else (key(a, b),):
                w, _ = edge_map.get(pair, (0.0, RELATION))
                edge_map[pair] = (w + 1.0, RELATION)
    # Context edges: passage -> each phrase of its triples, weight 1.
    for p_idx, triples in enumerate(content.chunk_triples):
        for phrase in passage_phrases(triples):
            edge_map[(n_phr + p_idx, index[phrase])] = (1.0, CONTEXT)
    # Synonym edges, written into the same map (replacing relation weights by default).
    extra_synonyms: List[Tuple[int, int, float]] = []
    if cfg.synonym_edges and n_phr:
        if phrase_embeddings is None or len(phrase_embeddings) != n_phr:
            raise ValueError("phrase embeddings must have one row per phrase node")
        if synonyms is None:
            synonyms = synonym_arrays(
                content.phrases,
                phrase_embeddings,
                threshold=cfg.synonymy_edge_sim_threshold,
                top_k=cfg.synonymy_edge_topk,
                max_neighbours=cfg.synonymy_edge_max_neighbours,
                block_size=cfg.knn_block_size,
                progress=progress,
            )
        pairs = synonyms.as_tuples()
        for a, b, score in pairs:
            pair = key(a, b)
            prev = edge_map.get(pair)
            if prev is not None and prev[1] == RELATION and not cfg.synonym_overwrites_relation:
                extra_synonyms.append((pair[0], pair[1], score))
                continue
            if prev is not None and prev[1] == RELATION:
                stats.relation_pairs_replaced_by_synonym += 1
            edge_map[pair] = (score, SYNONYM)

    src, dst, wts, kinds = [], [], [], []
    for (a, b), (w, kind) in edge_map.items():
        if a == b:
            stats.self_loops_dropped += 1
            continue
        src.append(a)
        dst.append(b)
        wts.append(w)
        kinds.append(kind)
    for a, b, w in extra_synonyms:
        src.append(a)
        dst.append(b)
        wts.append(w)
        kinds.append(SYNONYM)
    edges = GraphEdges(
        n_vertices=n_phr + n_pas,
        source=np.asarray(src, dtype=np.int64),
        target=np.asarray(dst, dtype=np.int64),
        weight=np.asarray(wts, dtype=np.float64),
        kind=np.asarray(kinds, dtype=np.int8),
    )
    counts = np.bincount(edges.kind, minlength=3) if edges.kind.size else np.zeros(3, dtype=int)
    stats.relation_edges, stats.context_edges, stats.synonym_edges = (int(c) for c in counts)
    stats.edges_total = int(edges.kind.size)
    degree = np.bincount(np.concatenate([edges.source, edges.target]), minlength=edges.n_vertices)
    stats.isolated_vertices = int((degree == 0).sum())
    return edges, stats


def to_igraph(edges: GraphEdges, names: Sequence[str] | None = None, contents: Sequence[str] | None = None):
    import igraph as ig

    g = ig.Graph(n=edges.n_vertices, edges=np.column_stack([edges.source, edges.target]).tolist(), directed=False)
    g.es["weight"] = edges.weight.tolist()
    if names is not None:
        g.vs["name"] = list(names)
    if contents is not None:
        g.vs["content"] = list(contents)
    return g


def drop_edge_kind(edges: GraphEdges, kind: int) -> GraphEdges:
    """The graph without one type of edge (e.g. context edges for the no-passage-node ablation)."""
    keep = edges.kind != kind
    return GraphEdges(edges.n_vertices, edges.source[keep], edges.target[keep], edges.weight[keep], edges.kind[keep])


