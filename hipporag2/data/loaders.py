"""Readers for the benchmark files of SPEC §1: query files and corpora.

The passage string `title + "\\n" + text` is the identity of a passage everywhere
(node ids, gold matching, OpenIE matching), so it is built in exactly one place:
`passage_string`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, List, Optional

from hipporag2.data.errors import DataError


def passage_string(title: str, text: str) -> str:
    return f"{title}\n{text}"


@dataclass(frozen=True)
class Passage:
    title: str
    text: str
    corpus_idx: int

    @property
    def string(self) -> str:
        return passage_string(self.title, self.text)


@dataclass
class Corpus:
    """Unique passages in corpus order; a repeated passage string keeps its first index."""

    passages: List[Passage]
    path: str = ""
    duplicates: int = 0

    def __post_init__(self) -> None:
        self.index_of = {p.string: i for i, p in enumerate(self.passages)}

    def __len__(self) -> int:
        return len(self.passages)

    @property
    def strings(self) -> List[str]:
        return [p.string for p in self.passages]


@dataclass
class Query:
    id: str
    question: str
    gold_answers: List[str] = field(default_factory=list)
    gold_passages: List[str] = field(default_factory=list)


def read_json(path: Path | str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(path, f"not valid UTF-8 (byte offset {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def _require_str(path, rec, fieldname, value) -> str:
    if not isinstance(value, str):
        raise DataError(path, f"expected a string, got {type(value).__name__}", rec, fieldname)
    return value


def load_corpus(path: Path | str, sentence_joiner: str = " ") -> Corpus:
    """A list of {title, text}, or a raw mapping title -> list of sentences."""
    data = read_json(path)
    records: List[tuple] = []
    if isinstance(data, dict):
        for i, (title, sentences) in enumerate(data.items()):
            if isinstance(sentences, str):
                text = sentences
            elif isinstance(sentences, list) and all(isinstance(s, str) for s in sentences):
                text = sentence_joiner.join(sentences)
            else:
                raise DataError(path, "expected a list of sentence strings", title, "text")
            records.append((title, text))
    elif isinstance(data, list):
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise DataError(path, f"expected an object with 'title' and 'text', got {type(rec).__name__}", i)
            for key in ("title", "text"):
                if key not in rec:
                    raise DataError(path, "missing field", i, key)
            records.append((_require_str(path, i, "title", rec["title"]), _require_str(path, i, "text", rec["text"])))
    else:
        raise DataError(path, f"expected a JSON list of passages, got {type(data).__name__}")
    if not records:
        raise DataError(path, "the corpus is empty")
    passages: List[Passage] = []
    seen = set()
    duplicates = 0
    for i, (title, text) in enumerate(records):
        s = passage_string(title, text)
        if s in seen:
            duplicates += 1
            continue
        seen.add(s)
        passages.append(Passage(title=title, text=text, corpus_idx=i))
    return Corpus(passages=passages, path=str(path), duplicates=duplicates)


def _as_answer_list(value: Any) -> List[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        out = []
        for v in value:
            out.extend(_as_answer_list(v))
        return out
    if isinstance(value, str):
        # PopQA stores possible_answers as a JSON-encoded list.
        stripped = value.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            try:
                parsed = json.loads(stripped)
            except json.JSONDecodeError:
                return [value]
            return _as_answer_list(parsed)
        return [value]
    return [str(value)]


def _gold_answers(path, i, rec) -> List[str]:
    answers: List[str] = []
    if "answer" in rec:
        answers = _as_answer_list(rec["answer"])
    elif "gold_ans" in rec:
        answers = _as_answer_list(rec["gold_ans"])
    elif "reference" in rec:
        answers = _as_answer_list(rec["reference"])
    elif "obj" in rec:
        answers = _as_answer_list(rec.get("obj"))
        for key in ("possible_answers", "o_wiki_title", "o_aliases"):
            answers += _as_answer_list(rec.get(key))
    answers += _as_answer_list(rec.get("answer_aliases"))
    # A set, in first-seen order so that files and logs are reproducible.
    return list(dict.fromkeys(a for a in answers if a is not None))


def _gold_passages(path, i, rec, sentence_joiner: str) -> List[str]:
    gold: List[str] = []
    if "supporting_facts" in rec:
        titles = set()
        for j, sf in enumerate(rec["supporting_facts"]):
            if not isinstance(sf, (list, tuple)) or not sf:
                raise DataError(path, f"expected [title, sentence_id], got {sf!r}", i, f"supporting_facts[{j}]")
            titles.add(sf[0])
        for j, ctx in enumerate(rec.get("context", [])):
            if not isinstance(ctx, (list, tuple)) or len(ctx) != 2:
                raise DataError(path, "expected [title, [sentences]]", i, f"context[{j}]")
            title, sentences = ctx
            if title in titles:
                gold.append(passage_string(title, sentence_joiner.join(sentences)))
    elif "contexts" in rec:
        for j, ctx in enumerate(rec["contexts"]):
            if ctx.get("is_supporting", True):
                gold.append(passage_string(ctx["title"], ctx["text"]))
    elif "paragraphs" in rec:
        for j, para in enumerate(rec["paragraphs"]):
            if not isinstance(para, dict):
                raise DataError(path, "expected an object", i, f"paragraphs[{j}]")
            if para.get("is_supporting", True) is False:
                continue
            text = para.get("text", para.get("paragraph_text"))
            if text is None:
                raise DataError(path, "needs 'text' or 'paragraph_text'", i, f"paragraphs[{j}]")
            gold.append(passage_string(para.get("title", ""), text))
    return list(dict.fromkeys(gold))


def load_queries(path: Path | str, sentence_joiner: str = " ", max_queries: Optional[int] = None) -> List[Query]:
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, f"expected a JSON list of questions, got {type(data).__name__}")
    queries: List[Query] = []
    seen_ids = set()
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise DataError(path, f"expected an object, got {type(rec).__name__}", i)
        qid = rec.get("id", rec.get("_id", str(i)))
        if "question" not in rec:
            raise DataError(path, "missing field", qid, "question")
        question = _require_str(path, qid, "question", rec["question"])
        qid = str(qid)
        if qid in seen_ids:
            raise DataError(path, "duplicate question id", qid, "id")
        seen_ids.add(qid)
        queries.append(
            Query(
                id=qid,
                question=question,
                gold_answers=_gold_answers(path, qid, rec),
                gold_passages=_gold_passages(path, qid, rec, sentence_joiner),
            )
        )
        if max_queries is not None and len(queries) >= max_queries:
            break
    if not queries:
        raise DataError(path, "the query file holds no questions")
    return queries


@dataclass
class GoldCoverage:
    """Gold passages that are not in the corpus would be scored as silent misses."""

    n_gold: int
    n_missing: int
    queries_with_missing: List[str]
    queries_without_gold: List[str]


def check_gold_in_corpus(queries: Iterable[Query], corpus: Corpus) -> GoldCoverage:
    n_gold = n_missing = 0
    with_missing, without_gold = [], []
    for q in queries:
        if not q.gold_passages:
            without_gold.append(q.id)
        missing = [g for g in q.gold_passages if g not in corpus.index_of]
        n_gold += len(q.gold_passages)
        n_missing += len(missing)
        if missing:
            with_missing.append(q.id)
    return GoldCoverage(n_gold, n_missing, with_missing, without_gold)
