"""The JSON lines of retrieval results: retrieval.jsonl, which is also the retrieval
checkpoint (`run_files.RetrievalFile`), each line `json.dumps(row, ensure_ascii=False)`
of its row."""
from __future__ import annotations

import json
from typing import Iterable, Iterator

from hipporag2.retrieve.base import RetrievalResult

# keys a retrieval.jsonl line sets before the retriever's details (which may not replace them)
LINE_KEYS = ("id", "question", "ranked")


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


class RetrievalLines:
    """retrieval.jsonl lines of one corpus."""

    def __init__(self, corpus):
        self.corpus = corpus

    def row(self, query, result: RetrievalResult) -> dict:
        passages = self.corpus.passages
        row = {
            "id": query.id,
            "question": query.question,
            "ranked": [
                {"title": passages[i].title, "corpus_idx": passages[i].corpus_idx, "score": s}
                for i, s in zip(result.ranked, result.scores)
            ],
        }
        row.update(result.details)
        return row

    def line(self, query, result: RetrievalResult) -> str:
        return _dumps(self.row(query, result))

    def lines(self, queries: Iterable, results: Iterable[RetrievalResult]) -> Iterator[str]:
        for q, r in zip(queries, results):
            yield self.line(q, r)
