"""The indexing stage: OpenIE extractions + embeddings -> a saved Index (SPEC §2)."""
from __future__ import annotations

import logging
from typing import Dict

import numpy as np

from hipporag2.config import GraphConfig
from hipporag2.data.loaders import Corpus
from hipporag2.embed.store import EmbeddingStore
from hipporag2.graph.build import build_edges, index_content
from hipporag2.graph.store import Index
from hipporag2.openie.interchange import Extraction
from hipporag2.text import fact_string, passage_id

log = logging.getLogger(__name__)


def build_index(
    corpus: Corpus,
    extractions: Dict[str, Extraction],
    store: EmbeddingStore,
    cfg: GraphConfig,
    progress: bool = True,
) -> Index:
    """extractions: by passage id; a passage without one contributes no triples."""
    passages = corpus.strings
    raw = [extractions[passage_id(p)].triples if passage_id(p) in extractions else [] for p in passages]
    content = index_content(passages, raw, cfg)
    log.info(
        "OpenIE content: %d passages, %d phrases, %d facts (%d raw triples, %d kept)",
        len(passages), len(content.phrases), len(content.facts), content.triple_stats.raw, content.triple_stats.kept,
    )
    passage_emb = store.embed(passages, desc="embed passages", progress=progress)
    phrase_emb = store.embed(content.phrases, desc="embed phrases", progress=progress)
    fact_emb = store.embed([fact_string(f) for f in content.facts], desc="embed facts", progress=progress)
    edges, stats = build_edges(content, phrase_emb, cfg, progress=progress)
    return Index(
        passages=passages,
        titles=[p.title for p in corpus.passages],
        corpus_idx=[p.corpus_idx for p in corpus.passages],
        phrases=content.phrases,
        facts=content.facts,
        phrase_passages=content.phrase_passages,
        edges=edges,
        stats=stats.as_dict(),
        passage_emb=passage_emb,
        phrase_emb=phrase_emb if len(content.phrases) else np.zeros((0, passage_emb.shape[1]), np.float32),
        fact_emb=fact_emb if len(content.facts) else np.zeros((0, passage_emb.shape[1]), np.float32),
    )


