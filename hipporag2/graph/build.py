"""Knowledge-graph construction (SPEC §2): a pure function from triples and phrase
embeddings to nodes, typed weighted edges and statistics. I/O lives in graph/store.py.

Vertex order follows the reference: phrase nodes sorted by text, then passages in
corpus order. Edges are first collected in one map keyed by ORDERED pair, exactly as
the reference does, because its quirks (doubled edges, synonym scores replacing
relation counts) are properties of that map.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.config import GraphConfig
from hipporag2.graph.synonyms import SynonymPairs, query_mask, synonym_arrays
from hipporag2.graph.triples import (
    Triple,
    TripleStats,
    clean_triples,
    passage_facts,
    phrase_nodes,
    phrase_passages,
    passage_phrases,
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
    # None for a content read back from a save_dir (`indexing.content_of_index`): an
    # insert needs only `pairs`, the triples themselves stay in the OpenIE files
    chunk_triples: Optional[List[List[Triple]]]
    phrases: List[str]
    facts: List[Triple]
    phrase_passages: List[List[int]]
    triple_stats: TripleStats = field(default_factory=TripleStats)
    # Derived, filled on first use and carried over by `extend_content`: the triples'
    # endpoints as arrays (`passage_phrase_pairs`) and which phrases are synonym queries.
    pairs: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default=None, repr=False)
    query: Optional[np.ndarray] = field(default=None, repr=False)
    # each passage's distinct facts (indices into `facts`): HippoRAG 1's legacy scoring
    passage_facts: List[List[int]] = field(default_factory=list)
    # A content without triples (openie=spacy): each phrase mention as (phrase index,
    # passage index) arrays, passage then first-seen order; the context edges come from
    # these instead of triple endpoints, and `pairs` holds sentence co-occurrences.
    mentions: Optional[Tuple[np.ndarray, np.ndarray]] = field(default=None, repr=False)

    @property
    def phrase_index(self) -> Dict[str, int]:
        if getattr(self, "_phrase_index", None) is None or len(self._phrase_index) != len(self.phrases):
            self._phrase_index = {p: i for i, p in enumerate(self.phrases)}
        return self._phrase_index

    def query_mask(self) -> np.ndarray:
        if self.query is None:
            self.query = query_mask(self.phrases)
        return self.query


@dataclass
class CleanTriples:
    """One passage's triples after the length / duplicate filter and normalisation,
    with their counts: a pure function of the passage's raw triples, so an insert
    reuses it for every passage it already had."""

    triples: List[Triple]
    stats: TripleStats


def clean_passage(raw: Sequence, cfg: GraphConfig) -> CleanTriples:
    stats = TripleStats()
    return CleanTriples(clean_triples(raw, cfg.dedup_before_normalise, stats), stats)


def content_of(passages: Sequence[str], cleaned: Sequence[CleanTriples]) -> IndexContent:
    """Phrases, facts and node specificity of passages with cleaned triples."""
    stats = _sum_stats([c.stats for c in cleaned])
    chunk_triples = [c.triples for c in cleaned]
    phrases = phrase_nodes(chunk_triples)
    index = {p: i for i, p in enumerate(phrases)}
    facts = unique_facts(chunk_triples)
    return IndexContent(
        passages=list(passages),
        chunk_triples=chunk_triples,
        phrases=phrases,
        facts=facts,
        phrase_passages=phrase_passages(chunk_triples, index),
        triple_stats=stats,
        passage_facts=passage_facts(chunk_triples, facts),
    )


def _sum_stats(parts: Sequence[TripleStats]) -> TripleStats:
    total = TripleStats()
    for c in parts:
        for f in ("raw", "kept", "wrong_length", "duplicates", "non_string"):
            setattr(total, f, getattr(total, f) + getattr(c, f))
    return total


def extend_content(old: IndexContent, passages: Sequence[str], cleaned: Sequence[CleanTriples]) -> Tuple[IndexContent, np.ndarray]:
    """`content_of(old.passages + passages, ...)` computed from `old`, touching only what
    the appended passages change (an insert): phrases merged in text order, facts and
    node specificity extended, the endpoint arrays and query mask remapped. Returns the
    content and each old phrase's new index. `old` is left unchanged."""
    added = [c.triples for c in cleaned]
    known = set(old.phrases)
    fresh = sorted({p for triples in added for t in triples for p in (t[0], t[2])} - known)
    phrases = sorted(old.phrases + fresh)  # two sorted runs: a linear merge
    index = {p: i for i, p in enumerate(phrases)}
    old_to_new = np.fromiter((index[p] for p in old.phrases), dtype=np.int64, count=len(old.phrases))
    spec: List[Optional[List[int]]] = [None] * len(phrases)
    for i, lst in zip(old_to_new.tolist(), old.phrase_passages):
        spec[i] = lst
    copied = set()
    n_old = len(old.passages)
    for j, triples in enumerate(added):
        for phrase in passage_phrases(triples):
            i = index[phrase]
            if spec[i] is None:
                spec[i] = []
                copied.add(i)
            elif i not in copied:  # the old index's list stays as it was
                spec[i] = list(spec[i])
                copied.add(i)
            spec[i].append(n_old + j)
    facts = list(dict.fromkeys([*old.facts, *(t for triples in added for t in triples)]))  # old facts: a prefix
    content = IndexContent(
        passages=list(old.passages) + list(passages),
        chunk_triples=None if old.chunk_triples is None else list(old.chunk_triples) + added,
        phrases=phrases,
        facts=facts,
        phrase_passages=spec,  # type: ignore[arg-type]
        triple_stats=_sum_stats([old.triple_stats] + [c.stats for c in cleaned]),
        passage_facts=list(old.passage_facts) + passage_facts(added, facts),
    )
    content._phrase_index = index
    if old.pairs is not None:
        subj, obj, owner, lengths = old.pairs
        s_new = np.fromiter((index[t[0]] for triples in added for t in triples), dtype=np.int64)
        o_new = np.fromiter((index[t[2]] for triples in added for t in triples), dtype=np.int64)
        own_new = np.repeat(np.arange(n_old, n_old + len(added), dtype=np.int64), [len(t) for t in added])
        content.pairs = (np.r_[old_to_new[subj], s_new], np.r_[old_to_new[obj], o_new], np.r_[owner, own_new],
                         np.r_[lengths, np.asarray([len(t) for t in added], dtype=np.int64)])
    if old.query is not None:
        q = np.zeros(len(phrases), dtype=bool)
        q[old_to_new] = old.query
        fresh_pos = np.fromiter((index[p] for p in fresh), dtype=np.int64, count=len(fresh))
        q[fresh_pos] = query_mask(fresh)
        content.query = q
    return content, old_to_new


@dataclass
class GraphEdges:
    """Undirected weighted multigraph in vertex indices, with each edge's type."""

    n_vertices: int
    source: np.ndarray
    target: np.ndarray
    weight: np.ndarray
    kind: np.ndarray


def graph_synonyms(phrases: Sequence[str], phrase_embeddings: np.ndarray | None, cfg: GraphConfig,
                   progress: bool = False) -> SynonymPairs:
    """The synonym pairs of a graph config (SPEC §2.8), in `synonyms.synonym_arrays` order."""
    if phrase_embeddings is None or len(phrase_embeddings) != len(phrases):
        raise ValueError("phrase embeddings must have one row per phrase node")
    return synonym_arrays(
        phrases,
        phrase_embeddings,
        threshold=cfg.synonymy_edge_sim_threshold,
        top_k=cfg.synonymy_edge_topk,
        max_neighbours=cfg.synonymy_edge_max_neighbours,
        block_size=cfg.knn_block_size,
        progress=progress,
    )


def _first_order_unique(keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique keys in order of first occurrence, their counts and their last positions."""
    if keys.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy(), z.copy()
    uniq, first, counts = np.unique(keys, return_index=True, return_counts=True)
    _, first_of_reversed = np.unique(keys[::-1], return_index=True)
    last = keys.size - 1 - first_of_reversed
    order = np.argsort(first, kind="stable")
    return uniq[order], counts[order], last[order]


def passage_phrase_pairs(content: IndexContent) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Triple endpoints as phrase indices (subject, object, passage of each triple, in
    passage then triple order), and each passage's triple count; kept on the content."""
    if content.pairs is not None:
        return content.pairs
    index = content.phrase_index
    subj = [index[t[0]] for triples in content.chunk_triples for t in triples]
    obj = [index[t[2]] for triples in content.chunk_triples for t in triples]
    owner = [p for p, triples in enumerate(content.chunk_triples) for _ in triples]
    content.pairs = (np.asarray(subj, dtype=np.int64), np.asarray(obj, dtype=np.int64), np.asarray(owner, dtype=np.int64),
                     np.asarray([len(t) for t in content.chunk_triples], dtype=np.int64))
    return content.pairs


def build_edges(
    content: IndexContent,
    phrase_embeddings: np.ndarray | None,
    cfg: GraphConfig,
    progress: bool = False,
    synonyms=None,
) -> Tuple[GraphEdges, GraphStats]:
    """The edges of SPEC §2 in the order the reference's edge map holds them.

    The reference writes relation counts, then context edges, then synonym scores
    into one map keyed by ordered pair; a synonym score replaces the relation count of
    the same key in place, new keys are appended, self-loop keys are dropped when the
    map becomes edges. This is that map computed with array operations (keys encoded
    as a * n_vertices + b), in the same order, so PPR sums edge weights in the same
    order too. `synonyms`: the pairs when already known (`synonym_arrays` order, a list
    of tuples or (query, neighbour, score) arrays), e.g. from an incremental update
    (`hipporag2.graph.update`); computed here when None."""
    n_phr, n_pas = len(content.phrases), len(content.passages)
    n = n_phr + n_pas
    stats = GraphStats(
        phrase_nodes=n_phr,
        passage_nodes=n_pas,
        facts=len(content.facts),
        raw_triples=content.triple_stats.raw,
        triples_kept=content.triple_stats.kept,
        triples_wrong_length=content.triple_stats.wrong_length,
        triples_duplicate=content.triple_stats.duplicates,
        triples_non_string=content.triple_stats.non_string,
    )
    subj, obj, owner, lengths = passage_phrase_pairs(content)
    stats.passages_without_triples = int((lengths == 0).sum())

    def key(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if cfg.double_edges:
            return a * n + b
        return np.minimum(a, b) * n + np.maximum(a, b)

    # Relation edges: +1 per triple for each ordered pair (s, o) and (o, s); none when
    # switched off (`relation_edges`), and for a phrase-only content (openie=spacy) the
    # pairs are its sentence co-occurrences, kept only when `cooccurrence_edges` is on.
    use_pairs = cfg.relation_edges if content.mentions is None else cfg.cooccurrence_edges
    rs, ro = (subj, obj) if use_pairs else (subj[:0], obj[:0])
    rel_seq = np.stack([rs * n + ro, ro * n + rs], axis=1).ravel() if cfg.double_edges else key(rs, ro)
    rel_keys, rel_counts, _ = _first_order_unique(rel_seq)
    # Context edges: passage -> each phrase of its triples (first-seen order), weight 1;
    # a phrase-only content lists its (phrase, passage) mentions instead.
    if content.mentions is None:
        ends = np.stack([subj, obj], axis=1).ravel()
        ctx_seq = (n_phr + np.repeat(owner, 2)) * n + ends
    else:
        m_phrase, m_passage = content.mentions
        ctx_seq = (n_phr + m_passage) * n + m_phrase
    ctx_keys, _, _ = _first_order_unique(ctx_seq)
    keys = np.concatenate([rel_keys, ctx_keys])
    weight = np.concatenate([rel_counts.astype(np.float64), np.ones(ctx_keys.size)])
    kind = np.concatenate([np.full(rel_keys.size, RELATION, np.int8), np.full(ctx_keys.size, CONTEXT, np.int8)])
    extra = (np.zeros(0, np.int64), np.zeros(0, np.float64))
    # Synonym edges, written into the same map (replacing relation weights by default).
    if cfg.synonym_edges and n_phr:
        pairs = synonyms if synonyms is not None else graph_synonyms(content.phrases, phrase_embeddings, cfg, progress)
        if isinstance(pairs, tuple) and len(pairs) == 3 and isinstance(pairs[0], np.ndarray):
            q, c, sc = (np.asarray(x) for x in pairs)
        else:
            arr = list(pairs)
            q = np.asarray([p[0] for p in arr], dtype=np.int64)
            c = np.asarray([p[1] for p in arr], dtype=np.int64)
            sc = np.asarray([p[2] for p in arr], dtype=np.float64)
        sc = np.asarray(sc, dtype=np.float32).astype(np.float64) if np.asarray(sc).dtype == np.float32 else np.asarray(sc, np.float64)
        syn_seq = key(np.asarray(q, np.int64), np.asarray(c, np.int64))
        order = np.argsort(rel_keys, kind="stable")
        sorted_rel = rel_keys[order]
        pos = np.searchsorted(sorted_rel, syn_seq)
        hits_rel = (pos < sorted_rel.size) & (sorted_rel[np.minimum(pos, max(sorted_rel.size - 1, 0))] == syn_seq) if sorted_rel.size else np.zeros(syn_seq.size, bool)
        if cfg.synonym_overwrites_relation:
            hit_keys, _, hit_last = _first_order_unique(syn_seq[hits_rel])
            if hit_keys.size:
                at = order[np.searchsorted(sorted_rel, hit_keys)]
                weight[at] = sc[hits_rel][hit_last]
                kind[at] = SYNONYM
            stats.relation_pairs_replaced_by_synonym = int(hit_keys.size)
        else:
            extra = (syn_seq[hits_rel], sc[hits_rel])
        new_keys, _, new_last = _first_order_unique(syn_seq[~hits_rel])
        keys = np.concatenate([keys, new_keys])
        weight = np.concatenate([weight, sc[~hits_rel][new_last]])
        kind = np.concatenate([kind, np.full(new_keys.size, SYNONYM, np.int8)])
    src, dst = keys // n if n else keys, keys % n if n else keys
    loop = src == dst
    stats.self_loops_dropped = int(loop.sum())
    src, dst, weight, kind = src[~loop], dst[~loop], weight[~loop], kind[~loop]
    if extra[0].size:
        src = np.concatenate([src, extra[0] // n])
        dst = np.concatenate([dst, extra[0] % n])
        weight = np.concatenate([weight, extra[1]])
        kind = np.concatenate([kind, np.full(extra[0].size, SYNONYM, np.int8)])
    edges = GraphEdges(
        n_vertices=n,
        source=src.astype(np.int64),
        target=dst.astype(np.int64),
        weight=weight.astype(np.float64),
        kind=kind.astype(np.int8),
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


