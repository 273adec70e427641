"""Typed results of the library: what `HippoRAG.retrieve` and `HippoRAG.rag_qa` return.

Fields are read by name, not by string keys of a dict; `details` keeps the rest of a
retriever's per-query output (linking scores, NER entities) for inspection.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

Triple = Tuple[str, str, str]


@dataclass
class QueryResult:
    """One query's retrieval, best passage first."""

    question: str
    docs: List[str]  # passage strings ("title\ntext"), best first
    doc_scores: List[float]
    query_id: str = ""
    # Positions of `docs` in the index (index order = insertion order of the passages).
    passage_indices: List[int] = field(default_factory=list)
    # Graph retrievers only (None for dense / BM25):
    candidate_facts: Optional[List[Tuple[Triple, float]]] = None
    kept_facts: Optional[List[Tuple[Triple, float]]] = None
    seed_phrases: Optional[List[Tuple[str, float]]] = None
    fallback: Optional[bool] = None  # True: no fact survived, the dense ranking was returned
    details: Dict[str, Any] = field(default_factory=dict)
    # Set by rag_qa:
    answer: Optional[str] = None
    gold_answers: Optional[List[str]] = None
    gold_docs: Optional[List[str]] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class QAReport:
    """`rag_qa`'s output: the answered queries and, when gold was given, the scores
    (×100, one decimal, as the paper reports them)."""

    results: List[QueryResult]
    em: Optional[float] = None
    f1: Optional[float] = None
    recall: Optional[Dict[str, float]] = None  # "recall@k" -> value, when gold_docs were given
    no_answer_marker: int = 0
    llm_failures: int = 0

    @property
    def answers(self) -> List[Optional[str]]:
        return [r.answer for r in self.results]


def from_details(question: str, query_id: str, ranked: List[int], scores: List[float], details: Dict[str, Any],
                 passages: List[str]) -> QueryResult:
    """A QueryResult from a retriever's (ranked indices, scores, details)."""
    rest = dict(details)

    def facts(key):
        value = rest.pop(key, None)
        return None if value is None else [(tuple(f), float(s)) for f, s in value]

    cand, kept = facts("candidate_facts"), facts("kept_facts")
    seeds = rest.pop("seed_phrases", None)
    fallback = rest.pop("fallback", None)
    return QueryResult(
        question=question,
        docs=[passages[i] for i in ranked],
        doc_scores=list(scores),
        query_id=query_id,
        passage_indices=list(ranked),
        candidate_facts=cand,
        kept_facts=kept,
        seed_phrases=None if seeds is None else [(p, float(w)) for p, w in seeds],
        fallback=fallback,
        details=rest,
    )


@dataclass
class RunReport:
    """A run's metrics (what `metrics.json` holds), typed.

    The fields every run has are attributes; stage reports that depend on the
    configuration (OpenIE import counts, LLM usage, filter statistics, QA, index key)
    stay in `extra` under their metrics.json names. `to_json()` is the metrics.json
    object (flat, as `hipporag2-report` reads it); `from_json` reads one back.
    `report["recall@5"]` reads the metrics.json view, for scripts written against the
    file."""

    dataset: str
    method: str
    n_queries: int
    recall: Dict[str, float]  # "recall@k" -> mean recall ×100
    gold_passages: int = 0
    gold_passages_missing_from_corpus: int = 0
    queries_without_gold: int = 0
    corpus_passages: int = 0
    corpus_duplicates_skipped: int = 0
    corpus_empty_passages_skipped: int = 0
    dense_fallbacks: int = 0
    dense_fallback_rate: float = 0.0
    embedded_this_run: int = 0
    embedding_shards_corrupt_rebuilt: int = 0
    retrieval_resumed_queries: int = 0
    qa_em: Optional[float] = None
    qa_f1: Optional[float] = None
    timings: Dict[str, float] = field(default_factory=dict)
    provenance: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)

    _FIELDS = ("dataset", "method", "n_queries", "gold_passages", "gold_passages_missing_from_corpus",
               "queries_without_gold", "corpus_passages", "corpus_duplicates_skipped", "corpus_empty_passages_skipped",
               "dense_fallbacks", "dense_fallback_rate",
               "embedded_this_run", "embedding_shards_corrupt_rebuilt", "retrieval_resumed_queries", "qa_em", "qa_f1",
               "timings", "provenance")

    def recall_at(self, k: int) -> Optional[float]:
        return self.recall.get(f"recall@{k}")

    @classmethod
    def from_json(cls, metrics: Dict[str, Any]) -> "RunReport":
        m = dict(metrics)
        recall = {k: m.pop(k) for k in list(m) if k.startswith("recall@")}
        known = {k: m.pop(k) for k in cls._FIELDS if k in m}
        return cls(recall=recall, extra=m, **known)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"dataset": self.dataset, "method": self.method, "n_queries": self.n_queries, **self.recall}
        for k in self._FIELDS[3:-2]:
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        out.update(self.extra)
        out["timings"] = self.timings
        out["provenance"] = self.provenance
        return out

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.to_json()
