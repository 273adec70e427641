"""The interface of the recognition-memory filter, and the empty retriever; every
retriever returns `results.QueryResult`s."""
from __future__ import annotations

from typing import List, Protocol, Sequence, Tuple

from hipporag2.results import QueryResult


class FactFilter(Protocol):
    """Recognition memory (SPEC §3.3): which candidate facts are relevant to a question."""

    name: str

    def select(self, questions: Sequence[str], candidates: Sequence[Sequence[Tuple[str, str, str]]]) -> List[List[int]]:
        """For each question, indices into its candidates that are kept, in kept order."""


class NoFilter:
    """Ablation 'without filter': every candidate is kept unchanged."""

    name = "none"

    def select(self, questions, candidates):
        return [list(range(len(c))) for c in candidates]


def no_filter(cfg, llm) -> NoFilter:
    """retrieval.filter=none (registry FILTERS): no LLM is built."""
    return NoFilter()


class NoRetrieval:
    """`retrieval=none`: every question gets an empty ranking, so the reader answers
    from the question alone (the "None" row of the paper's Tables 2 and 8). Recall of
    such a run is 0 by construction; its numbers are the reader's."""

    def retrieve(self, queries) -> List[QueryResult]:
        return [QueryResult(q.id, [], []) for q in queries]

