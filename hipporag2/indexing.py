"""The indexing stage: OpenIE extractions + embeddings -> an Index (SPEC §2).

`assemble_index` is the one place an index is put together, for the CLI's
from-scratch build (`build_index`) and for the library's insert and delete
(`hipporag2.api`), which pass the synonym pairs of the previous index so that only
the changed part of the synonym KNN is searched (`hipporag2.graph.update`).
Both give the same Index for the same passages: an insert is not an approximation.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

import numpy as np

from hipporag2.config import GraphConfig
from hipporag2.data.loaders import Corpus
from hipporag2.embed.store import EmbeddingStore
from hipporag2.graph.build import CleanTriples, IndexContent, build_edges, clean_passage, content_of, extend_content
from hipporag2.graph.store import Index
from hipporag2.graph.update import Pairs, UpdateStats, empty_pairs, update_synonyms
from hipporag2.openie.interchange import Extraction
from hipporag2.text import fact_string, passage_id

log = logging.getLogger(__name__)


@dataclass
class Previous:
    """What an update reuses from the index it changes."""

    phrases: Sequence[str]
    synonyms: Pairs
    # Cleaned triples by passage string (reused instead of cleaning again).
    cleaned: Optional[Dict[str, CleanTriples]] = None
    # The previous index: its embedding rows are reused for unchanged texts.
    index: Optional[Index] = None
    # The previous index's content (phrases, facts, endpoint arrays): an insert that only
    # appends passages extends it instead of recomputing it over every passage.
    content: Optional[IndexContent] = None


@dataclass
class Assembled:
    index: Index
    synonyms: Pairs  # (query, neighbour, score) over index.phrases, for the next update
    cleaned: Dict[str, CleanTriples]
    update: Optional[UpdateStats] = None
    content: Optional[IndexContent] = None  # for the next update (`Previous.content`)


def _rows(store: EmbeddingStore, texts: Sequence[str], old_texts: Optional[Sequence[str]], old_rows: Optional[np.ndarray],
          desc: str, progress: bool) -> np.ndarray:
    """Embeddings of `texts`: rows the previous index holds are copied from it, only the
    others are looked up in (or encoded into) the store. The previous rows came from
    the same store, so the result is what looking everything up would give."""
    if old_texts is None or old_rows is None or len(old_texts) == 0 or np.asarray(old_rows).shape[1] == 0:
        return store.embed(texts, desc=desc, progress=progress)
    where = {t: i for i, t in enumerate(old_texts)}
    pos = np.array([where.get(t, -1) for t in texts], dtype=np.int64)
    fresh = np.nonzero(pos < 0)[0]
    old_rows = np.asarray(old_rows)
    out = np.empty((len(texts), old_rows.shape[1]), dtype=np.float32)
    have = pos >= 0
    out[have] = old_rows[pos[have]]
    if fresh.size:
        out[fresh] = store.embed([texts[i] for i in fresh], desc=desc, progress=progress)
    return out


def _extend_rows(store: EmbeddingStore, texts: Sequence[str], old_rows: np.ndarray, old_at: np.ndarray,
                 desc: str, progress: bool) -> np.ndarray:
    """Embeddings of `texts` when row `old_at[i]` holds the previous index's row i (an
    insert: the positions are known, no text is looked up); only the others come from
    the store."""
    old_rows = np.asarray(old_rows)
    if old_rows.shape[1] == 0 and len(old_at):
        return store.embed(texts, desc=desc, progress=progress)
    fresh = np.ones(len(texts), dtype=bool)
    fresh[old_at] = False
    fresh_at = np.nonzero(fresh)[0]
    new = store.embed([texts[i] for i in fresh_at], desc=desc, progress=progress) if fresh_at.size else None
    dim = old_rows.shape[1] if len(old_at) else (new.shape[1] if new is not None else store.dim)
    out = np.empty((len(texts), dim), dtype=np.float32)
    if len(old_at):
        if np.array_equal(old_at, np.arange(len(old_at))):  # a prefix (passages, facts)
            out[: len(old_at)] = old_rows
        else:
            out[old_at] = old_rows
    if new is not None:
        out[fresh_at] = new
    return out


def assemble_index(
    passages: Sequence[str],
    titles: Sequence[str],
    corpus_idx: Sequence[int],
    extractions: Dict[str, Extraction],
    store: Optional[EmbeddingStore],
    cfg: GraphConfig,
    progress: bool = True,
    previous: Optional[Previous] = None,
    graph: bool = True,
) -> Assembled:
    """extractions: by passage id; a passage without one contributes no triples.
    graph=False: passages (and their embeddings, if a store is given) only, for
    retrievers that need no graph (dense, BM25)."""
    passages = list(passages)
    known = previous.cleaned if previous is not None and previous.cleaned is not None else {}
    cleaned: Dict[str, CleanTriples] = {}
    for p in passages:
        if p in known:
            cleaned[p] = known[p]
        else:
            ex = extractions.get(passage_id(p)) if graph else None
            cleaned[p] = clean_passage(ex.triples if ex is not None else [], cfg)
    prev_content = previous.content if previous is not None and graph else None
    old_to_new = None
    if (prev_content is not None and len(passages) >= len(prev_content.passages)
            and passages[: len(prev_content.passages)] == prev_content.passages):
        n_old = len(prev_content.passages)
        content, old_to_new = extend_content(prev_content, passages[n_old:], [cleaned[p] for p in passages[n_old:]])
    else:
        content = content_of(passages, [cleaned[p] for p in passages])
    if graph:
        log.info(
            "OpenIE content: %d passages, %d phrases, %d facts (%d raw triples, %d kept)",
            len(passages), len(content.phrases), len(content.facts), content.triple_stats.raw, content.triple_stats.kept,
        )
    old = previous.index if previous is not None else None
    if store is not None and old is not None and old_to_new is not None:
        # appended passages: old passages and facts are prefixes, old phrases sit at old_to_new
        passage_emb = _extend_rows(store, passages, old.passage_emb, np.arange(old.n_passages), "embed passages", progress)
        phrase_emb = _extend_rows(store, content.phrases, old.phrase_emb, old_to_new, "embed phrases", progress)
        texts = [None] * len(old.facts) + [fact_string(f) for f in content.facts[len(old.facts):]]
        fact_emb = _extend_rows(store, texts, old.fact_emb, np.arange(len(old.facts)), "embed facts", progress)
        dim = passage_emb.shape[1]
    elif store is not None:
        passage_emb = _rows(store, passages, old.passages if old else None, old.passage_emb if old else None, "embed passages", progress)
        phrase_emb = _rows(store, content.phrases, old.phrases if old else None, old.phrase_emb if old else None, "embed phrases", progress)
        fact_emb = _rows(store, [fact_string(f) for f in content.facts], [fact_string(f) for f in old.facts] if old else None,
                         old.fact_emb if old else None, "embed facts", progress)
        dim = passage_emb.shape[1]
    else:  # BM25: no encoder at all
        passage_emb = np.zeros((len(passages), 0), np.float32)
        phrase_emb = fact_emb = None
        dim = 0
    synonyms, update = empty_pairs(), None
    if graph and cfg.synonym_edges and content.phrases:
        synonyms, update = update_synonyms(
            previous.phrases if previous is not None else [], previous.synonyms if previous is not None else None,
            content.phrases, phrase_emb, cfg, progress=progress, is_query=content.query_mask(),
        )
    edges, stats = build_edges(content, phrase_emb, cfg, progress=progress, synonyms=synonyms)
    index = Index(
        passages=passages,
        titles=list(titles),
        corpus_idx=list(corpus_idx),
        phrases=content.phrases,
        facts=content.facts,
        phrase_passages=content.phrase_passages,
        edges=edges,
        stats=stats.as_dict(),
        passage_emb=passage_emb,
        phrase_emb=phrase_emb if content.phrases else np.zeros((0, dim), np.float32),
        fact_emb=fact_emb if content.facts else np.zeros((0, dim), np.float32),
    )
    return Assembled(index, synonyms, cleaned, update, content)


def build_index(
    corpus: Corpus,
    extractions: Dict[str, Extraction],
    store: EmbeddingStore,
    cfg: GraphConfig,
    progress: bool = True,
) -> Index:
    """A from-scratch index of a corpus (the CLI's indexing stage)."""
    return assemble_index(
        corpus.strings, [p.title for p in corpus.passages], [p.corpus_idx for p in corpus.passages],
        extractions, store, cfg, progress,
    ).index
