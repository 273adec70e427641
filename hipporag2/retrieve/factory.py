"""Building the retriever a config names, from whatever the caller has indexed.

`hipporag2.registry.RETRIEVERS` maps each `retrieval.method` to one builder here; the
CLI pipeline and the library (`hipporag2.api`) both call `build_retriever`, so a
method behaves the same whichever way it is run. A new method = one builder function
(and its retriever class) registered there, plus one configs/retrieval/*.yaml.
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
    graph retriever never reads: the pipeline defers their checksums to a first read
    (`graph.store.load_index(defer=...)`), so a HippoRAG 2 run does not hash the
    phrase embeddings (a third of the index's bytes) it has no use for. A matrix named
    here that is read after all is still checked before its content is returned.
    Passages are read by every graph method (dense scores); facts by triple linking;
    phrases by node and NER linking."""
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
    if cfg.retrieval.filter == "llm" and cfg.retrieval.linking == "query_to_triple":
        from hipporag2.retrieve.filter_llm import build_filter

        fact_filter = build_filter(cfg, parts.llm.get())
    if cfg.retrieval.linking == "ner_to_node" and cfg.openie.name == "spacy":
        from hipporag2.openie.spacy_extract import SpacyQueryNER  # the index's pipeline, no LLM

        query_ner = SpacyQueryNER(cfg.openie)
    elif cfg.retrieval.linking == "ner_to_node":
        from hipporag2.openie.query_ner import build_query_ner

        query_ner = build_query_ner(cfg, parts.llm.get())
    retriever = GraphRetriever(parts.index, parts.store, cfg.retrieval, fact_filter, query_ner, progress=cfg.progress)
    if getattr(cfg.retrieval, "fusion", "none") == "rrf":
        from hipporag2.retrieve.fused_retriever import FusedRetriever

        return FusedRetriever(retriever, bm25_retriever(parts), cfg.retrieval)
    return retriever


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

