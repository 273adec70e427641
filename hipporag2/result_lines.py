"""The JSON lines of retrieval results: retrieval.jsonl and the retrieval checkpoint,
each `json.dumps(..., ensure_ascii=False)` of its row."""
from __future__ import annotations

import json
from typing import Iterable, Iterator, List, NamedTuple, Sequence

from hipporag2.retrieve.base import RetrievalResult


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


class RetrievalLines:
    """retrieval.jsonl lines of one corpus (`pipeline.retrieval_rows` gives the same rows)."""

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

    def line(self, query, result: RetrievalResult, score_texts=None) -> str:
        return _dumps(self.row(query, result))

    def lines(self, queries: Iterable, results: Iterable[RetrievalResult], score_texts=None) -> Iterator[str]:
        for q, r in zip(queries, results):
            yield self.line(q, r)


def checkpoint_row(result: RetrievalResult) -> dict:
    """One result as the retrieval checkpoint stores it."""
    return {"id": result.query_id, "ranked": result.ranked, "scores": result.scores, "details": result.details}


class CheckpointBlock(NamedTuple):
    """One block's checkpoint line and its results as read back from that line
    (`score_texts`: None for each, kept for callers that pass them on)."""

    text: str
    results: List[RetrievalResult]
    score_texts: List[None]


def checkpoint_block(start: int, results: Sequence[RetrievalResult]) -> CheckpointBlock:
    """`json.dumps({"start": start, "rows": [checkpoint_row(r), ...]})`, and the results as
    `json.loads` of it gives them back (what a resumed run reads)."""
    text = _dumps({"start": start, "rows": [checkpoint_row(r) for r in results]})
    back = [result_of_checkpoint_row(r) for r in json.loads(text)["rows"]]
    return CheckpointBlock(text, back, [None] * len(back))


def result_of_checkpoint_row(row: dict) -> RetrievalResult:
    """A checkpoint row read back (`checkpoint_row`'s inverse)."""
    return RetrievalResult(row["id"], [int(i) for i in row["ranked"]], [float(x) for x in row["scores"]], row["details"])
