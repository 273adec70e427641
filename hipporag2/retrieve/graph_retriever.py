"""HippoRAG 2 retrieval (SPEC §3) and its graph-based variants (SPEC §4).

Per query: link the query to phrase nodes (query-to-triple + recognition memory by
default), seed phrases and passages (`seeds`), run Personalized PageRank, rank passages
by their PPR probability. Queries go in blocks so the PPR solver solves many resets at
once, each block in pieces of what the solver takes (resets as CSR rows, answers in one
reused array); `damping` and `passage_node_weight` enter only in the resets and the
solver call, so a sweep re-runs only this module.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.config import RetrievalConfig
from hipporag2.data.loaders import Query
from hipporag2.embed.store import EmbeddingStore
from hipporag2.graph.build import CONTEXT, drop_edge_kind, to_igraph
from hipporag2.graph.store import Index
from hipporag2.retrieve import instructions as ins
from hipporag2.retrieve import seeds as seeding
from hipporag2.retrieve.base import FactFilter, NoFilter
from hipporag2.results import QueryResult
from hipporag2.retrieve.ppr import OutputBuffer, make_index_solver
from hipporag2.retrieve.scoring import min_max, min_max_rows, min_max_top_k_product, rank_desc
from hipporag2.text import normalise_phrase

if TYPE_CHECKING:  # scipy.sparse only for the variants without passage nodes (csr.py says why)
    import scipy.sparse as sp

log = logging.getLogger(__name__)

# Query NER for ner_to_node linking: questions -> list of entity strings per question.
QueryNER = Callable[[Sequence[str]], List[List[str]]]


def dense_scores(store: EmbeddingStore, passage_emb: np.ndarray, questions: Sequence[str], progress: bool) -> np.ndarray:
    """Min-max normalised query x passage dot products (float32, like the reference)."""
    q = store.embed(list(questions), instruction=ins.QUERY_TO_PASSAGE, desc="embed queries (passage)", progress=progress)
    return min_max_rows(q @ np.asarray(passage_emb).T)


class GraphRetriever:
    def __init__(
        self,
        index: Index,
        store: EmbeddingStore,
        cfg: RetrievalConfig,
        fact_filter: Optional[FactFilter] = None,
        query_ner: Optional[QueryNER] = None,
        progress: bool = True,
    ):
        self.index = index
        self.store = store
        self.cfg = cfg
        self.fact_filter = fact_filter or NoFilter()
        self.query_ner = query_ner
        self.progress = progress
        self.uniform_seeds = cfg.method == "hipporag1"
        # HippoRAG 1 as the legacy v1 code scores it (docs/quirks.md); `spec` = SPEC §4
        self.v1_legacy = cfg.method == "hipporag1" and getattr(cfg, "v1_scoring", "legacy") == "legacy"
        if self.v1_legacy and index.passage_facts is None:
            raise ValueError(
                "retrieval.v1_scoring=legacy scores passages through their facts, but this index has no "
                "passage -> fact table (made by an older hipporag2): rebuild it, or set retrieval.v1_scoring=spec"
            )
        self.with_passage_nodes = cfg.passage_nodes and cfg.method != "hipporag1"
        from hipporag2.registry import LINKING

        self._linking = LINKING.load(cfg.linking)  # one of the link_* methods below
        if cfg.linking == "ner_to_node" and query_ner is None:
            raise ValueError("retrieval.linking=ner_to_node needs query NER from an LLM (set llm=...)")
        edges = index.edges if self.with_passage_nodes else drop_edge_kind(index.edges, CONTEXT)
        # Without passage nodes: no context edges; passages score by their phrases' PPR mass.
        graph = index.graph if self.with_passage_nodes else (lambda: to_igraph(edges))
        cache = None if index.path is None else index.path / "ppr"
        self.solver = make_index_solver(cfg.ppr_solver, edges, graph, cache, threads=cfg.ppr_threads, tol=cfg.ppr_tol)
        self._ppr_out = OutputBuffer()  # PPR answers of one piece of a block, reused by the next
        self.passages_per_phrase = list(map(len, index.phrase_passages))
        self._passage_phrase = None
        self._fact_chain = None

    @property
    def passage_phrase(self) -> sp.csr_matrix:
        """passage x phrase membership, for scoring passages without passage nodes."""
        if self._passage_phrase is None:
            import scipy.sparse as sp

            idx = self.index
            rows = [i for i, ps in enumerate(idx.phrase_passages) for _ in ps]
            cols = [p for ps in idx.phrase_passages for p in ps]
            self._passage_phrase = sp.csr_matrix((np.ones(len(rows)), (cols, rows)), shape=(idx.n_passages, idx.n_phrases))
        return self._passage_phrase

    @property
    def fact_chain(self) -> Tuple[sp.csr_matrix, sp.csr_matrix]:
        """(passage x fact, fact x phrase) 0/1 matrices: the legacy v1 code's
        `docs_to_facts` and `facts_to_phrases` (a fact whose subject is its object
        has one 1)."""
        if self._fact_chain is None:
            self._fact_chain = legacy_fact_chain(self.index)
        return self._fact_chain

    def passage_scores(self, phrase_ppr: np.ndarray) -> np.ndarray:
        """Passage scores of a graph without passage nodes, from the phrases' PPR mass."""
        if self.v1_legacy:
            return legacy_passage_scores(*self.fact_chain, phrase_ppr)
        return self.passage_phrase @ phrase_ppr

    # ---- linking (registry LINKING; the embeddings here, the seeds in `seeds`) -------
    def link_facts(self, questions: Sequence[str]) -> List[seeding.Link]:
        idx, cfg = self.index, self.cfg
        if len(idx.facts) == 0:
            return [([], {"candidate_facts": [], "kept_facts": []}) for _ in questions]
        q = self.store.embed(list(questions), instruction=ins.QUERY_TO_FACT, desc="embed queries (fact)", progress=self.progress)
        # products of a fixed number of queries (a dot product's rounding depends on the
        # call's shape), normalised only at the candidates
        top, top_scores = min_max_top_k_product(q, idx.fact_emb, cfg.linking_top_k)
        return seeding.link_facts(questions, top, top_scores, idx.facts, idx.phrases, idx.phrase_index,
                                  self.passages_per_phrase, self.fact_filter.select, cfg.linking_top_k,
                                  cfg.node_specificity)

    def link_nodes(self, questions: Sequence[str]) -> List[seeding.Link]:
        """query_to_node: the query embedding against phrase nodes; top linking_top_k."""
        idx, cfg = self.index, self.cfg
        q = self.store.embed(list(questions), instruction=ins.QUERY_TO_PHRASE, desc="embed queries (phrase)", progress=self.progress)
        scores = min_max_rows(q @ np.asarray(idx.phrase_emb).T)
        return seeding.link_nodes(scores, idx.phrases, self.passages_per_phrase, cfg.linking_top_k,
                                  self.uniform_seeds, cfg.node_specificity)

    def link_ner(self, questions: Sequence[str]) -> List[seeding.Link]:
        """ner_to_node: each query entity is linked to its nearest phrase node."""
        idx = self.index
        entities = self.query_ner(list(questions))
        if self.v1_legacy:
            entities = [legacy_query_entities(ents) for ents in entities]
        else:
            entities = [[e for e in ents if isinstance(e, str)] for ents in entities]
        flat = [e for ents in entities for e in ents]
        emb = self.store.embed(flat, instruction=ins.NER_TO_PHRASE, desc="embed query entities", progress=self.progress)
        sims = emb @ np.asarray(idx.phrase_emb).T if len(flat) else np.zeros((0, idx.n_phrases))
        return seeding.link_ner(entities, sims, idx.phrases, self.passages_per_phrase, self.v1_legacy,
                                self.uniform_seeds, self.cfg.node_specificity)

    # ---- retrieval -----------------------------------------------------------------
    def link_and_dense(self, queries: Sequence[Query]) -> Tuple[np.ndarray, List[Tuple[List[Tuple[int, float]], Dict]]]:
        """The parts of retrieval that do not depend on damping or passage_node_weight:
        min-max normalised dense scores (q, n_passages) and, per query, (phrase seeds
        [(phrase_idx, weight)], details) from linking (and the fact filter, if any)."""
        questions = [q.question for q in queries]
        dense = dense_scores(self.store, self.index.passage_emb, questions, self.progress)
        return dense, self._linking(self, questions)

    def retrieve(self, queries: Sequence[Query]) -> List[QueryResult]:
        cfg = self.cfg
        results: List[QueryResult] = []
        for start in range(0, len(queries), cfg.query_batch_size):
            block = queries[start : start + cfg.query_batch_size]
            dense, links = self.link_and_dense(block)
            ranked = self._graph_results(block, dense, links)
            for r, q in enumerate(block):
                res = ranked.get(r)
                if res is None:
                    res = query_result(q.id, links[r], self.index, None, dense[r], cfg.retrieval_top_k,
                                       uniform=self.v1_legacy)
                results.append(res)
        return results

    def _graph_results(self, block: Sequence[Query], dense: np.ndarray, links) -> Dict[int, QueryResult]:
        """Results by PPR for the rows of a block that seed the graph (the others fall
        back to dense, SPEC §3.4). Resets are written piece by piece (as many queries as
        the solver runs at once) into one reused array, and each answer is ranked as
        soon as it is there, so memory is a piece, not the block."""
        cfg, idx = self.cfg, self.index
        n_phr, n = idx.n_phrases, idx.n_phrases + idx.n_passages
        rows, pseeds = [], {}
        for r, (seeds, _) in enumerate(links):
            if not seeds:
                continue
            if self.with_passage_nodes:
                ps = seeding.passage_seed_vector(dense[r], cfg.passage_node_weight, cfg.passage_seed_top_k)
            else:
                ps = None  # passage vertices stay, unseeded and unlinked
            if seeding.seeds_anything(seeds, ps):
                rows.append(r)
                pseeds[r] = ps
        piece = max(1, self.solver.batch_size)
        out: Dict[int, QueryResult] = {}
        for s in range(0, len(rows), piece):
            part = rows[s : s + piece]
            R = seeding.reset_rows([links[r][0] for r in part], [pseeds[r] for r in part], n_phr, n)
            # only the nodes that are scored: the passages, or the phrases whose mass they sum
            cols = slice(n_phr, n) if self.with_passage_nodes else slice(0, n_phr)
            width = cols.stop - cols.start
            ppr = self.solver.solve(R, cfg.damping, out=self._ppr_out.view((len(part), width)), columns=cols)
            for i, r in enumerate(part):
                vec = ppr[i]
                scores = vec if self.with_passage_nodes else self.passage_scores(vec)
                out[r] = query_result(block[r].id, links[r], idx, scores, dense[r], cfg.retrieval_top_k)
        self.solver.release()  # its block arrays need not stay beside the next block's fact scores
        return out


def query_result(query_id: str, link, idx: Index, scores: Optional[np.ndarray], dense_row: np.ndarray,
                 top_k: int, uniform: bool = False) -> QueryResult:
    """One query's ranked passages: by its PPR passage scores, or, when it had no PPR,
    by its dense scores (the fallback of SPEC §3) or, with `uniform` (HippoRAG 1 as the
    legacy code runs it), by one equal score for every passage, which our tie rule
    (and the legacy's reversed stable sort) lists in reverse corpus order. Seeds go in
    the details; `fallback` is true for both. Shared by `retrieve` and the sweep, so a
    sweep point's rows equal a run's."""
    seeds, details = link
    fallback = None
    if scores is None:
        fallback = "uniform" if uniform else "dense"
        scores = np.full(idx.n_passages, 1.0 / max(idx.n_passages, 1)) if uniform else dense_row
    order = rank_desc(scores, top_k)
    # .tolist() gives each score as float() of it would: one call instead of 200
    return QueryResult(query_id, order.tolist(), np.asarray(scores)[order].tolist(), **details,
                       seed_phrases=[(idx.phrases[i], float(w)) for i, w in seeds], fallback=fallback is not None,
                       fallback_ranking=fallback)


def legacy_query_entities(entities: Sequence) -> List[str]:
    """Query entities as the legacy v1 code links them: each normalised like a phrase
    (an entity that normalises to "" stays, and links like any other); an entity that
    is not a string makes its normalisation fail, and the legacy then drops them all."""
    if not all(isinstance(e, str) for e in entities):
        return []
    return [normalise_phrase(e) for e in entities]


def legacy_fact_chain(idx: Index) -> Tuple[sp.csr_matrix, sp.csr_matrix]:
    """The legacy v1 code's `docs_to_facts` (passage x fact) and `facts_to_phrases`
    (fact x phrase) 0/1 matrices, from the index's facts."""
    if idx.passage_facts is None:
        raise ValueError("this index has no passage -> fact table (made by an older hipporag2): rebuild it")
    import scipy.sparse as sp

    rows = [p for p, fs in enumerate(idx.passage_facts) for _ in fs]
    cols = [f for fs in idx.passage_facts for f in fs]
    docs_to_facts = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(idx.n_passages, len(idx.facts)))
    pi = idx.phrase_index
    f_rows, f_cols = [], []
    for f, (s, _, o) in enumerate(idx.facts):
        for phrase in dict.fromkeys((s, o)):  # a self-loop fact has its phrase once
            j = pi.get(phrase)
            if j is not None:
                f_rows.append(f)
                f_cols.append(j)
    facts_to_phrases = sp.csr_matrix((np.ones(len(f_rows)), (f_rows, f_cols)), shape=(len(idx.facts), idx.n_phrases))
    return docs_to_facts, facts_to_phrases


def legacy_passage_scores(docs_to_facts: sp.csr_matrix, facts_to_phrases: sp.csr_matrix,
                          phrase_ppr: np.ndarray) -> np.ndarray:
    """docs_to_facts . (facts_to_phrases . ppr), min-max normalised: a passage counts a
    phrase once per distinct fact of its that mentions it. When every passage scores the
    same the legacy divides 0 by 0 (all NaN, listed in reverse corpus order); `min_max`
    gives all ones, which our tie rule lists in the same order."""
    return min_max(docs_to_facts @ (facts_to_phrases @ np.asarray(phrase_ppr, dtype=np.float64)))


class DenseRetriever:
    """Dense baseline: passages by dot product with the query (SPEC §3.8)."""

    def __init__(self, passage_emb: np.ndarray, store: EmbeddingStore, cfg: RetrievalConfig, progress: bool = True):
        self.passage_emb, self.store, self.cfg, self.progress = passage_emb, store, cfg, progress

    def retrieve(self, queries: Sequence[Query]) -> List[QueryResult]:
        dense = dense_scores(self.store, self.passage_emb, [q.question for q in queries], self.progress)
        out = []
        for q, row in zip(queries, dense):
            order = rank_desc(row, self.cfg.retrieval_top_k)
            out.append(QueryResult(q.id, order.tolist(), [float(row[i]) for i in order]))
        return out
