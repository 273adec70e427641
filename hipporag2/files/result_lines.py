"""The JSON lines of retrieval results: retrieval.jsonl, which is also the retrieval
checkpoint (`run_files.RetrievalFile`), each line `json.dumps(row, ensure_ascii=False)`
of its row (`results.QueryResult.to_json`)."""
from __future__ import annotations

import json
from typing import Iterable, Iterator, Optional

from hipporag2.results import QueryResult


class RetrievalLines:
    """retrieval.jsonl lines of one corpus, both ways."""

    def __init__(self, corpus):
        self.corpus = corpus
        self._position: Optional[dict] = None

    def line(self, query, result: QueryResult) -> str:
        return json.dumps(result.to_json(query.question, self.corpus.passages), ensure_ascii=False)

    def lines(self, queries: Iterable, results: Iterable[QueryResult]) -> Iterator[str]:
        for q, r in zip(queries, results):
            yield self.line(q, r)

    def read(self, line) -> QueryResult:
        """A line back as the result written (ranked by position in this corpus)."""
        if self._position is None:
            self._position = {p.corpus_idx: i for i, p in enumerate(self.corpus.passages)}
        return QueryResult.from_json(json.loads(line), self._position)
