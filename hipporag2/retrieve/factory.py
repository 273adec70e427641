"""Building the retriever a config names, from whatever the caller has indexed.

`hipporag2.registry.RETRIEVERS` maps each `retrieval.method` to one builder here (a new
method: a builder registered there, plus one configs/retrieval/*.yaml);
`build_retriever` is the one way every client builds one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from hipporag2.config import Config, ConfigError


@dataclass
class RetrieverParts:
    """What a builder may use. Graph methods need `index`; dense needs passage
    embeddings (`passage_emb`, else `index.passage_emb`) and `store` for queries;
    BM25 needs only `passages`. `llm` has `.get()` (the run's lazily built LLM)."""

    cfg: Config
    passages: Sequence[str]
    store: Any = None
    index: Any = None
    passage_emb: Optional[np.ndarray] = None
    llm: Any = None


def unread_embeddings(cfg: Config) -> Tuple[str, ...]:
    """The index's embedding matrices (`graph.store.EMB_NAMES`) that the configured
    graph retriever never reads, whose checksums the pipeline defers to a first read
    (`graph.store.load_index(defer=...)`): facts serve triple linking, phrases node
    and NER linking, passages every graph method."""
    linking = cfg.retrieval.linking
    if linking == "query_to_triple":
        return ("phrase",)
    if linking in ("query_to_node", "ner_to_node"):
        return ("fact",)
    return ()


def build_retriever(parts: RetrieverParts):
    from hipporag2.registry import RETRIEVERS

    return RETRIEVERS.load(parts.cfg.retrieval.method)(parts)


def graph_retriever(parts: RetrieverParts):
    """HippoRAG 2 / HippoRAG 1 and their ablations, with the configured filter and NER."""
    from hipporag2.retrieve.graph_retriever import GraphRetriever

    cfg = parts.cfg
    if parts.index is None:
        raise ValueError(f"retrieval.method={cfg.retrieval.method} needs the graph index")
    fact_filter = query_ner = None
    if cfg.retrieval.linking == "query_to_triple":  # the filter reads the linked facts
        from hipporag2.registry import FILTERS

        fact_filter = FILTERS.load(cfg.retrieval.filter)(cfg, parts.llm)
    if cfg.retrieval.linking == "ner_to_node" and cfg.openie.name == "spacy":
        from hipporag2.openie.spacy_extract import SpacyQueryNER  # the index's pipeline, no LLM

        query_ner = SpacyQueryNER(cfg.openie)
    elif cfg.retrieval.linking == "ner_to_node":
        from hipporag2.openie.query_ner import build_query_ner

        query_ner = build_query_ner(cfg, parts.llm.get())
    from hipporag2.registry import FUSIONS

    retriever = GraphRetriever(parts.index, parts.store, cfg.retrieval, fact_filter, query_ner, progress=cfg.progress)
    return FUSIONS.load(cfg.retrieval.fusion)(retriever, parts)


def dense_retriever(parts: RetrieverParts):
    from hipporag2.retrieve.graph_retriever import DenseRetriever

    emb = parts.passage_emb if parts.passage_emb is not None else getattr(parts.index, "passage_emb", None)
    if emb is None or parts.store is None:
        raise ConfigError("retrieval.method=dense needs passage embeddings and an encoder")
    return DenseRetriever(emb, parts.store, parts.cfg.retrieval, progress=parts.cfg.progress)


def bm25_retriever(parts: RetrieverParts):
    from hipporag2.retrieve.bm25 import BM25Retriever

    return BM25Retriever(list(parts.passages), parts.cfg.retrieval)


def no_retriever(parts: RetrieverParts):
    from hipporag2.retrieve.base import NoRetrieval

    return NoRetrieval()

