"""`retrieval.fusion` (registry FUSIONS): what becomes of a graph retriever's ranking.
`none` keeps PPR as the final ranker; `rrf` makes the PPR ranking one channel beside
dense and BM25, fused by reciprocal rank (`retrieve/fusion.py`). A query whose graph
fell back to dense (no seed) has no graph channel: dense and BM25 decide it."""
from __future__ import annotations

from dataclasses import replace
from typing import List, Sequence

from hipporag2.config import RetrievalConfig
from hipporag2.data.loaders import Query
from hipporag2.results import Fusion, QueryResult
from hipporag2.retrieve.fusion import reciprocal_rank_fusion
from hipporag2.retrieve.graph_retriever import dense_scores
from hipporag2.retrieve.scoring import rank_desc

CHANNELS = ("ppr", "dense", "bm25")


def no_fusion(graph, parts):
    """retrieval.fusion=none: the graph retriever's own (PPR) ranking."""
    return graph


def rrf_fusion(graph, parts):
    """retrieval.fusion=rrf: PPR, dense and BM25 by reciprocal rank."""
    from hipporag2.retrieve.bm25 import BM25Retriever

    return FusedRetriever(graph, BM25Retriever(list(parts.passages), parts.cfg.retrieval), parts.cfg.retrieval)


class FusedRetriever:
    def __init__(self, graph, bm25, cfg: RetrievalConfig):
        self.graph, self.bm25, self.cfg = graph, bm25, cfg
        # the graph's LLM stages (filter, query NER) are this retriever's, for metrics.json
        self.fact_filter = getattr(graph, "fact_filter", None)
        self.query_ner = getattr(graph, "query_ner", None)

    def retrieve(self, queries: Sequence[Query]) -> List[QueryResult]:
        cfg, idx = self.cfg, self.graph.index
        graph = self.graph.retrieve(queries)
        lexical = self.bm25.retrieve(queries)
        dense = dense_scores(self.graph.store, idx.passage_emb, [q.question for q in queries], self.graph.progress)
        out = []
        for g, b, d in zip(graph, lexical, dense):
            rankings = [None if g.fallback else g.ranked, rank_desc(d, cfg.retrieval_top_k).tolist(), b.ranked]
            order, scores = reciprocal_rank_fusion(rankings, cfg.rrf_weights, cfg.rrf_k, idx.n_passages, cfg.retrieval_top_k)
            channels = [c for c, r in zip(CHANNELS, rankings) if r is not None]
            out.append(replace(g, ranked=order.tolist(), scores=scores.tolist(), fusion=Fusion("rrf", channels)))
        return out
