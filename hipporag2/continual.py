"""Continual indexing (the paper's Figure 3 protocol): the corpus arrives in segments.

The corpus (unique passages, corpus order) is cut into `dataset.corpus_segments`
contiguous, near-equal segments; a run indexes the first `dataset.segments_indexed`
of them. Nothing else changes: OpenIE results and embeddings are cached per passage /
per text, so indexing segments 1..K after 1..K-1 extracts and embeds only segment K's
passages (and the phrases, facts and questions that are new), and the graph is
rebuilt from the cached pieces. Indexing all segments gives exactly the corpus of an
unsegmented run, hence the same index.

A question belongs to the segment by which all of its gold passages are indexed
(the largest segment among them); a question with no gold passage in the corpus
belongs to the last segment. `dataset.segment_queries` selects what a run evaluates:
`indexed` (questions of segments 1..K, the default) or `all`.
"""
from __future__ import annotations

import logging
from typing import List, Sequence, Tuple

from hipporag2.config import ConfigError, DatasetConfig
from hipporag2.registry import SEGMENT_QUERIES
from hipporag2.data.loaders import Corpus, Query

log = logging.getLogger("hipporag2")

def passage_segments(n_passages: int, n_segments: int) -> List[int]:
    """Segment (0-based) of each passage position: contiguous, sizes differ by <= 1."""
    return [(i * n_segments) // n_passages for i in range(n_passages)]


def query_segments(queries: Sequence[Query], corpus: Corpus, n_segments: int) -> List[int]:
    """Segment (0-based) by which each question's gold passages are all indexed."""
    seg = passage_segments(len(corpus), n_segments)
    out = []
    for q in queries:
        positions = [corpus.index_of[g] for g in q.gold_passages if g in corpus.index_of]
        out.append(max(seg[i] for i in positions) if positions else n_segments - 1)
    return out


def check(ds: DatasetConfig) -> None:
    problems = []
    if ds.corpus_segments < 1:
        problems.append(f"dataset.corpus_segments={ds.corpus_segments} must be >= 1")
    if ds.segments_indexed is not None and not 1 <= ds.segments_indexed <= max(ds.corpus_segments, 1):
        problems.append(
            f"dataset.segments_indexed={ds.segments_indexed} must be between 1 and dataset.corpus_segments={ds.corpus_segments}"
        )
    if not SEGMENT_QUERIES.accepts(ds.segment_queries):
        problems.append(f"dataset.segment_queries={ds.segment_queries!r} is not one of {list(SEGMENT_QUERIES.names())}")
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))


def restrict(corpus: Corpus, queries: List[Query], ds: DatasetConfig) -> Tuple[Corpus, List[Query]]:
    """The corpus of segments 1..K and the questions the run evaluates."""
    check(ds)
    n = ds.corpus_segments
    k = n if ds.segments_indexed is None else ds.segments_indexed
    if n <= 1 or (k >= n and ds.segment_queries == "all"):
        return corpus, queries
    qseg = query_segments(queries, corpus, n)
    seg = passage_segments(len(corpus), n)
    kept = [p for p, s in zip(corpus.passages, seg) if s < k]
    sub = Corpus(passages=kept, path=corpus.path, duplicates=corpus.duplicates)
    if ds.segment_queries == "indexed":
        queries = [q for q, s in zip(queries, qseg) if s < k]
    log.info(
        "continual indexing: segments 1..%d of %d = %d of %d passages; %d questions (%s)",
        k, n, len(kept), len(corpus), len(queries), ds.segment_queries,
    )
    return sub, queries
