"""Typed results: one query's retrieval from the retriever to the report
(`QueryResult`), the library's QA report, and a run's metrics (`RunReport`).

Fields are read by name, not by string keys of a dict.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Triple = Tuple[str, str, str]


@dataclass
class ContextNode:
    """A RAPTOR tree node the reader was given: its index in the tree, its level (0: a
    leaf chunk of a passage) and its similarity to the query."""

    node: int
    level: int
    score: float


@dataclass
class Fusion:
    """How a fused ranking was made: the method and the channels that voted."""

    method: str
    channels: List[str]


def _pairs(value) -> List[Tuple[Any, float]]:
    return [(tuple(a) if isinstance(a, list) else a, float(b)) for a, b in value]


# Per-method fields, in the order a retrieval.jsonl line has them after "id", "question"
# and "ranked" (absent when None), with how a JSON value becomes the field's type.
_LINE_FIELDS: Dict[str, Callable[[Any], Any]] = {
    "query_entities": list,
    "linked_phrases": list,
    "candidate_facts": _pairs,
    "kept_facts": _pairs,
    "phrase_weights": _pairs,
    "seed_phrases": _pairs,
    "fallback": bool,
    "fallback_ranking": str,
    "fusion": lambda v: v if isinstance(v, Fusion) else Fusion(**v),
    "raptor_context_nodes": lambda v: [n if isinstance(n, ContextNode) else ContextNode(**n) for n in v],
    "reader_context": lambda v: [tuple(c) for c in v],
    "raptor_ranked": dict,
}
LINE_KEYS = ("id", "question", "ranked")


@dataclass
class QueryResult:
    """One query's retrieval, best passage first: what every retriever returns, what a
    line of retrieval.jsonl holds (`to_json` / `from_json`, the only reader of those
    lines), and what the library hands back (with `docs`, and the answer after rag_qa).

    `extra` holds what a method reports besides the fields declared here (written after
    them); a key of `extra` that names a declared field is read into that field."""

    query_id: str
    # Positions in the index (= the corpus's unique passages in order), best first; None
    # for a line read back without its corpus (then `passage_ids` names the passages).
    ranked: Optional[List[int]]
    scores: List[float]
    extra: Dict[str, Any] = field(default_factory=dict)
    question: str = ""
    # The dataset's corpus_idx and titles of the ranked passages (read from a run file)
    passage_ids: Optional[List[int]] = None
    titles: Optional[List[str]] = None
    # Graph retrievers (None for the others): the linking, facts as ((s, p, o), score)
    query_entities: Optional[List[str]] = None
    linked_phrases: Optional[List[str]] = None
    candidate_facts: Optional[List[Tuple[Triple, float]]] = None
    kept_facts: Optional[List[Tuple[Triple, float]]] = None
    phrase_weights: Optional[List[Tuple[str, float]]] = None  # before the linking_top_k cut
    seed_phrases: Optional[List[Tuple[str, float]]] = None
    fallback: Optional[bool] = None  # True: no seed, the dense (or uniform) ranking was returned
    fallback_ranking: Optional[str] = None
    fusion: Optional[Fusion] = None  # retrieval.fusion=rrf
    # RAPTOR: the tree nodes the reader reads, as nodes and as (title, text), and the
    # passage ranking under each summary rule (positions, like `ranked`)
    raptor_context_nodes: Optional[List[ContextNode]] = None
    reader_context: Optional[List[Tuple[str, str]]] = None
    raptor_ranked: Optional[Dict[str, List[int]]] = None
    # The library: passage strings of `ranked`; set by rag_qa: the answer and the gold
    docs: Optional[List[str]] = None
    answer: Optional[str] = None
    gold_answers: Optional[List[str]] = None
    gold_docs: Optional[List[str]] = None

    def __post_init__(self) -> None:
        if self.extra:
            clash = [k for k in LINE_KEYS if k in self.extra]
            if clash:
                raise ValueError(f"query {self.query_id}: a retriever's extra field may not be named {clash[0]!r}")
            declared = [k for k in self.extra if k in _LINE_FIELDS]
            if declared:
                self.extra = dict(self.extra)
                for k in declared:
                    setattr(self, k, _LINE_FIELDS[k](self.extra.pop(k)))

    @property
    def doc_scores(self) -> List[float]:
        return self.scores

    @property
    def passage_indices(self) -> List[int]:
        return self.ranked

    def reader_input(self, top_k: int, passages: Optional[Sequence[str]] = None) -> List[Any]:
        """What the reader reads: the retriever's own context when it gives one (RAPTOR's
        tree nodes, as (title, text)), else the top_k passages (`passages[i]` of the
        ranked positions, or `docs`)."""
        if self.reader_context is not None:
            return [tuple(c) for c in self.reader_context]
        docs = self.docs if passages is None else [passages[i] for i in self.ranked[:top_k]]
        return list(docs[:top_k])

    def to_json(self, question: str, passages: Sequence[Any]) -> Dict[str, Any]:
        """The retrieval.jsonl row (`passages`: the corpus's Passage objects, by position)."""
        row: Dict[str, Any] = {
            "id": self.query_id,
            "question": question,
            "ranked": [{"title": passages[i].title, "corpus_idx": passages[i].corpus_idx, "score": s}
                       for i, s in zip(self.ranked, self.scores)],
        }
        for k in _LINE_FIELDS:
            v = getattr(self, k)
            if v is not None:
                row[k] = asdict(v) if is_dataclass(v) else [asdict(n) for n in v] if k == "raptor_context_nodes" else v
        row.update(self.extra)
        return row

    @classmethod
    def from_json(cls, row: Dict[str, Any], position: Optional[Dict[int, int]] = None) -> "QueryResult":
        """A retrieval.jsonl row read back; `position` (corpus_idx -> index position) gives
        `ranked` (a corpus_idx it lacks raises KeyError)."""
        hits = row["ranked"]
        ids = [int(h["corpus_idx"]) for h in hits]
        return cls(
            str(row["id"]),
            [position[i] for i in ids] if position is not None else None,
            [float(h["score"]) for h in hits],
            {k: v for k, v in row.items() if k not in LINE_KEYS},
            question=str(row.get("question", "")),
            passage_ids=ids,
            titles=[str(h.get("title", "")) for h in hits],
        )

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


# metrics.json's own keys of a RunReport, in field order (recall@k and extra are spread)
RunReport._FIELDS = tuple(f.name for f in fields(RunReport) if f.name not in ("recall", "extra"))
