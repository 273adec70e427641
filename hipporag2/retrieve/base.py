"""What every retriever returns, and the interface of the recognition-memory filter."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Protocol, Sequence, Tuple


@dataclass
class RetrievalResult:
    query_id: str
    # Passage indices (index order = unique corpus order), best first.
    ranked: List[int]
    scores: List[float]
    # Extra per-query information written to retrieval.jsonl (facts, seeds, fallback).
    details: Dict[str, Any] = field(default_factory=dict)


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


class NoRetrieval:
    """`retrieval=none`: every question gets an empty ranking, so the reader answers
    from the question alone (the "None" row of the paper's Tables 2 and 8). Recall of
    such a run is 0 by construction; its numbers are the reader's."""

    def retrieve(self, queries) -> List[RetrievalResult]:
        return [RetrievalResult(q.id, [], [], {}) for q in queries]

