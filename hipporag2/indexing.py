"""The indexing stage: OpenIE extractions + embeddings -> an Index (SPEC §2).

`assemble_index` is the one place an index is put together, for the CLI's
from-scratch build (`build_index`) and for the library's insert and delete
(`hipporag2.api`), which pass the synonym pairs of the previous index so that only
the changed part of the synonym KNN is searched (`hipporag2.graph.update`).
Both give the same Index for the same passages: an insert is not an approximation.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.config import GraphConfig
from hipporag2.data.loaders import Corpus
from hipporag2.embed.store import EmbeddingStore
from hipporag2.graph.build import CleanTriples, IndexContent, build_edges, clean_passage, content_of, extend_content
from hipporag2.graph.store import Index, RowLayout
from hipporag2.graph.triples import TripleStats
from hipporag2.graph.update import Pairs, UpdateStats, empty_pairs, update_synonyms
from hipporag2.openie.interchange import Extraction
from hipporag2.runtime.stagetime import StageClock
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
    clock: StageClock = field(default_factory=StageClock)  # seconds by stage


def _rows(store: EmbeddingStore, texts: Sequence[str], old_texts: Optional[Sequence[str]], old_rows: Optional[np.ndarray],
          desc: str, progress: bool) -> Tuple[np.ndarray, Tuple[np.ndarray, np.ndarray, int]]:
    """Embeddings of `texts`: rows the previous index holds are copied from it, only the
    others are looked up in (or encoded into) the store. The previous rows came from
    the same store, so the result is what looking everything up would give. Also
    returns which rows came from where (`_carry_layouts`)."""
    none = np.zeros(0, dtype=np.int64)
    if old_texts is None or old_rows is None or len(old_texts) == 0 or np.asarray(old_rows).shape[1] == 0:
        return store.embed(texts, desc=desc, progress=progress), (none, none, len(texts))
    where = {t: i for i, t in enumerate(old_texts)}
    pos = np.array([where.get(t, -1) for t in texts], dtype=np.int64)
    fresh = np.nonzero(pos < 0)[0]
    old_rows = np.asarray(old_rows)
    out = np.empty((len(texts), old_rows.shape[1]), dtype=np.float32)
    have = pos >= 0
    out[have] = old_rows[pos[have]]
    if fresh.size:
        out[fresh] = store.embed([texts[i] for i in fresh], desc=desc, progress=progress)
    return out, (np.nonzero(have)[0], pos[have], len(texts))


def _carry_layouts(old: Optional[Index], moves: Dict[str, Tuple[np.ndarray, np.ndarray, int]]) -> Optional[Dict[str, RowLayout]]:
    """Where the new matrices' rows are on disk already: `moves[name]` = (new positions,
    old rows, new row count) of the rows taken from the previous index."""
    if old is None or not old.layout:
        return None
    return {name: old.layout[name].carried(*moves[name]) for name in moves if name in old.layout}


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


def _content(passages: List[str], extractions: Dict[str, Extraction], cfg: GraphConfig, previous: Optional[Previous],
             graph: bool) -> Tuple[IndexContent, Dict[str, CleanTriples], Optional[np.ndarray]]:
    """The content of `passages`, its cleaned triples, and (when the previous content
    could be extended: passages only appended) each old phrase's new index."""
    known = previous.cleaned if previous is not None and previous.cleaned is not None else {}
    prev = previous.content if previous is not None and graph else None
    extend = prev is not None and len(passages) >= len(prev.passages) and passages[: len(prev.passages)] == prev.passages
    n_old = len(prev.passages) if extend else 0
    # extending: only the new passages' triples are needed (the old ones' may not be at hand)
    cleaned: Dict[str, CleanTriples] = {p: known[p] for p in passages[:n_old] if p in known}
    for p in passages[n_old:]:
        if p in known:
            cleaned[p] = known[p]
        else:
            ex = extractions.get(passage_id(p)) if graph else None
            cleaned[p] = clean_passage(ex.triples if ex is not None else [], cfg)
    if extend:
        content, old_to_new = extend_content(prev, passages[n_old:], [cleaned[p] for p in passages[n_old:]])
        return content, cleaned, old_to_new
    return content_of(passages, [cleaned[p] for p in passages]), cleaned, None


def content_of_index(index: Index, arrays: Dict[str, np.ndarray]) -> IndexContent:
    """The content of a saved index, for the next insert: its phrases, facts and node
    specificity, with the endpoint arrays and query mask saved beside it (`arrays`:
    subject, object, owner, lengths, query). The triples themselves are not needed."""
    st = index.stats
    stats = TripleStats(raw=st["raw_triples"], kept=st["triples_kept"], wrong_length=st["triples_wrong_length"],
                        duplicates=st["triples_duplicate"], non_string=st["triples_non_string"])
    content = IndexContent(passages=list(index.passages), chunk_triples=None, phrases=index.phrases, facts=index.facts,
                           phrase_passages=index.phrase_passages, triple_stats=stats,
                           passage_facts=index.passage_facts if index.passage_facts is not None else [])
    content.pairs = tuple(np.asarray(arrays[k], dtype=np.int64) for k in ("subject", "object", "owner", "lengths"))
    content.query = np.asarray(arrays["query"], dtype=bool)
    return content


def _embedding_rows(store: Optional[EmbeddingStore], passages: List[str], content: IndexContent, old: Optional[Index],
                    old_to_new: Optional[np.ndarray], progress: bool):
    """Passage, phrase and fact rows (phrase/fact None without a store), and the width."""
    if store is None:  # BM25: no encoder at all
        return np.zeros((len(passages), 0), np.float32), None, None, 0, None
    if old is not None and old_to_new is not None:
        # appended passages: old passages and facts are prefixes, old phrases sit at old_to_new
        passage_emb = _extend_rows(store, passages, old.passage_emb, np.arange(old.n_passages), "embed passages", progress)
        phrase_emb = _extend_rows(store, content.phrases, old.phrase_emb, old_to_new, "embed phrases", progress)
        texts = [None] * len(old.facts) + [fact_string(f) for f in content.facts[len(old.facts):]]
        fact_emb = _extend_rows(store, texts, old.fact_emb, np.arange(len(old.facts)), "embed facts", progress)
        prefix_p, prefix_f = np.arange(old.n_passages), np.arange(len(old.facts))
        moves = {"passage": (prefix_p, prefix_p, len(passages)),
                 "phrase": (old_to_new, np.arange(old.n_phrases), len(content.phrases)),
                 "fact": (prefix_f, prefix_f, len(content.facts))}
    else:
        passage_emb, mp = _rows(store, passages, old.passages if old else None, old.passage_emb if old else None,
                                "embed passages", progress)
        phrase_emb, mh = _rows(store, content.phrases, old.phrases if old else None, old.phrase_emb if old else None,
                               "embed phrases", progress)
        fact_emb, mf = _rows(store, [fact_string(f) for f in content.facts], [fact_string(f) for f in old.facts] if old else None,
                             old.fact_emb if old else None, "embed facts", progress)
        moves = {"passage": mp, "phrase": mh, "fact": mf}
    return passage_emb, phrase_emb, fact_emb, passage_emb.shape[1], _carry_layouts(old, moves)


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
    content: Optional[IndexContent] = None,
) -> Assembled:
    """extractions: by passage id; a passage without one contributes no triples.
    graph=False: passages (and their embeddings, if a store is given) only, for
    retrievers that need no graph (dense, BM25). `content`: the passages' content made
    without triples (`graph.phrase_content`, openie=spacy), used instead of `extractions`."""
    passages = list(passages)
    clock = StageClock()
    with clock.stage("content"):
        if content is not None and previous is None:
            cleaned, old_to_new = {}, None
        elif content is not None:
            raise ValueError("a phrase-only content (openie=spacy) is built from scratch, not as an update")
        else:
            content, cleaned, old_to_new = _content(passages, extractions, cfg, previous, graph)
    if graph:
        log.info(
            "OpenIE content: %d passages, %d phrases, %d facts (%d raw triples, %d kept)",
            len(passages), len(content.phrases), len(content.facts), content.triple_stats.raw, content.triple_stats.kept,
        )
    with clock.stage("embedding rows"):
        old = previous.index if previous is not None else None
        passage_emb, phrase_emb, fact_emb, dim, layout = _embedding_rows(store, passages, content, old, old_to_new, progress)
    synonyms, update = empty_pairs(), None
    if graph and cfg.synonym_edges and content.phrases:
        with clock.stage("synonym KNN"):
            synonyms, update = update_synonyms(
                previous.phrases if previous is not None else [], previous.synonyms if previous is not None else None,
                content.phrases, phrase_emb, cfg, progress=progress, is_query=content.query_mask(),
            )
    with clock.stage("edges"):
        edges, stats = build_edges(content, phrase_emb, cfg, progress=progress, synonyms=synonyms)
    index = Index(
        passages=passages,
        titles=list(titles),
        corpus_idx=list(corpus_idx),
        phrases=content.phrases,
        facts=content.facts,
        phrase_passages=content.phrase_passages,
        passage_facts=content.passage_facts,
        edges=edges,
        stats=stats.as_dict(),
        passage_emb=passage_emb,
        phrase_emb=phrase_emb if content.phrases else np.zeros((0, dim), np.float32),
        fact_emb=fact_emb if content.facts else np.zeros((0, dim), np.float32),
        layout=layout,
    )
    return Assembled(index, synonyms, cleaned, update, content, clock)


def build_index(
    corpus: Corpus,
    extractions: Dict[str, Extraction],
    store: EmbeddingStore,
    cfg: GraphConfig,
    progress: bool = True,
    sentence_phrases: Optional[Sequence] = None,
) -> Index:
    """A from-scratch index of a corpus (the CLI's indexing stage). `sentence_phrases`:
    each passage's phrases by sentence (openie=spacy), used instead of `extractions`."""
    content = None
    if sentence_phrases is not None:
        from hipporag2.graph.phrase_content import phrase_content

        content = phrase_content(corpus.strings, sentence_phrases)
    return assemble_index(
        corpus.strings, [p.title for p in corpus.passages], [p.corpus_idx for p in corpus.passages],
        extractions, store, cfg, progress, content=content,
    ).index
