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
from hipporag2.data.validate import (  # noqa: F401 - read_json is part of this module's surface
    check_text,
    read_json,
    require_bool,
    require_dict,
    require_list,
    require_str,
    type_name,
)


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


@dataclass(frozen=True)
class DocPassage(Passage):
    """A passage handed over as one string (the library's `index(docs)`, as the
    reference takes them): `title\ntext` splits at the first newline, and the string
    itself stays the passage's identity even when it has no newline."""

    doc: str = ""

    @property
    def string(self) -> str:
        return self.doc


def passage_of_string(doc: str, corpus_idx: int) -> Passage:
    title, sep, text = doc.partition("\n")
    if not sep:
        title, text = "", doc
    return DocPassage(title, text, corpus_idx, doc)


@dataclass
class Corpus:
    """Unique passages in corpus order; a repeated passage string keeps its first index."""

    passages: List[Passage]
    path: str = ""
    duplicates: int = 0
    # Records skipped because their text is empty or only whitespace (see load_corpus).
    empty: int = 0
    first_empty: Optional[int] = None

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


def load_corpus(path: Path | str, sentence_joiner: str = " ", strict: bool = False) -> Corpus:
    """A list of {title, text}, or a raw mapping title -> list of sentences.

    Outcomes: an empty corpus is an error; a passage whose string repeats an earlier
    one is skipped and counted in `Corpus.duplicates` (the first keeps its index); a
    passage whose text is empty or whitespace (a broken conversion, nothing to
    retrieve) is skipped and counted in `Corpus.empty`, or is an error naming the
    record when `strict` (dataset.strict).
    """
    data = read_json(path)
    records: List[tuple] = []
    if isinstance(data, dict):
        for i, (title, sentences) in enumerate(data.items()):
            rec = f"{i} (title {title[:60]!r})"
            check_text(path, rec, "title", title)
            if isinstance(sentences, str):
                text = sentences
            elif isinstance(sentences, list):
                for j, sent in enumerate(sentences):
                    require_str(path, rec, f"text[{j}]", sent, "a sentence string")
                text = sentence_joiner.join(sentences)
            else:
                raise DataError(path, f"expected a list of sentence strings, got {type_name(sentences)}", rec, "text")
            records.append((title, check_text(path, rec, "text", text)))
    elif isinstance(data, list):
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise DataError(path, f"expected an object with 'title' and 'text', got {type_name(rec)}", i)
            for key in ("title", "text"):
                if key not in rec:
                    raise DataError(path, "missing field", i, key)
            records.append((require_str(path, i, "title", rec["title"]), require_str(path, i, "text", rec["text"])))
    else:
        raise DataError(path, f"expected a JSON list of passages, got {type_name(data)}")
    if not records:
        raise DataError(path, "the corpus is empty")
    if all(not text.strip() for _, text in records):
        raise DataError(path, f"all {len(records)} passages have an empty text")
    passages: List[Passage] = []
    seen = set()
    duplicates = empty = 0
    first_empty: Optional[int] = None
    for i, (title, text) in enumerate(records):
        if not text.strip():
            if strict:
                raise DataError(path, "empty passage text (dataset.strict=true; false skips such passages)", i, "text")
            empty += 1
            first_empty = i if first_empty is None else first_empty
            continue
        s = passage_string(title, text)
        if s in seen:
            duplicates += 1
            continue
        seen.add(s)
        passages.append(Passage(title=title, text=text, corpus_idx=i))
    return Corpus(passages=passages, path=str(path), duplicates=duplicates, empty=empty, first_empty=first_empty)


def _as_answer_list(value: Any, path: Path | str = "", rec: Any = None, fieldname: str = "answer",
                    decode_json: bool = True) -> List[str]:
    """Gold answers: a string, a number, null, or (nested) lists of those.

    PopQA stores `possible_answers` as a JSON-encoded list inside a string; with
    `decode_json` that is decoded, else kept as one string (the reference's reading,
    `dataset.decode_json_answers`). Iterative, so a deeply nested list cannot exhaust
    the stack.
    """
    out: List[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            stack.extend(reversed(v))
        elif isinstance(v, str):
            stripped = v.strip()
            if decode_json and stripped.startswith("[") and stripped.endswith("]"):
                try:
                    parsed = json.loads(stripped)
                except (json.JSONDecodeError, RecursionError):
                    parsed = None
                if isinstance(parsed, list) and all(isinstance(x, (str, int, float, list)) and not isinstance(x, bool) for x in parsed):
                    stack.extend(reversed(parsed))
                    continue
            out.append(check_text(path, rec, fieldname, v))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(str(v))
        else:
            raise DataError(path, f"expected a string, a number or a list of them, got {type_name(v)}", rec, fieldname)
    return out


def _gold_answers(path, i, rec, decode_json: bool = True) -> List[str]:
    answers: List[str] = []
    if "answer" in rec:
        answers = _as_answer_list(rec["answer"], path, i, "answer", decode_json)
    elif "gold_ans" in rec:
        answers = _as_answer_list(rec["gold_ans"], path, i, "gold_ans", decode_json)
    elif "reference" in rec:
        answers = _as_answer_list(rec["reference"], path, i, "reference", decode_json)
    elif "obj" in rec:
        answers = _as_answer_list(rec.get("obj"), path, i, "obj", decode_json)
        for key in ("possible_answers", "o_wiki_title", "o_aliases"):
            answers += _as_answer_list(rec.get(key), path, i, key, decode_json)
    answers += _as_answer_list(rec.get("answer_aliases"), path, i, "answer_aliases", decode_json)
    # A set, in first-seen order so that files and logs are reproducible.
    return list(dict.fromkeys(a for a in answers if a is not None))


def _gold_passages(path, i, rec, sentence_joiner: str) -> List[str]:
    gold: List[str] = []
    if "supporting_facts" in rec:
        titles = set()
        for j, sf in enumerate(require_list(path, i, "supporting_facts", rec["supporting_facts"], "a list of [title, sentence_id]")):
            if not isinstance(sf, list) or not sf or not isinstance(sf[0], str):
                raise DataError(path, f"expected [title, sentence_id], got {type_name(sf)} {json.dumps(sf)[:80]}", i, f"supporting_facts[{j}]")
            titles.add(sf[0])
        context = rec.get("context")
        context = [] if context is None else require_list(path, i, "context", context, "a list of [title, [sentences]]")
        for j, ctx in enumerate(context):
            if not isinstance(ctx, list) or len(ctx) != 2:
                raise DataError(path, f"expected [title, [sentences]], got {type_name(ctx)}", i, f"context[{j}]")
            title, sentences = ctx
            require_str(path, i, f"context[{j}][0]", title, "a title string")
            if isinstance(sentences, str):
                sentences = [sentences]
            require_list(path, i, f"context[{j}][1]", sentences, "a list of sentence strings")
            for k, sent in enumerate(sentences):
                require_str(path, i, f"context[{j}][1][{k}]", sent, "a sentence string")
            if title in titles:
                gold.append(passage_string(title, check_text(path, i, f"context[{j}]", sentence_joiner.join(sentences))))
    elif "contexts" in rec:
        for j, ctx in enumerate(require_list(path, i, "contexts", rec["contexts"], "a list of {title, text, is_supporting}")):
            require_dict(path, i, f"contexts[{j}]", ctx)
            supporting = require_bool(path, i, f"contexts[{j}].is_supporting", ctx.get("is_supporting", True))
            for key in ("title", "text"):
                if key not in ctx:
                    raise DataError(path, "missing field", i, f"contexts[{j}].{key}")
            title = require_str(path, i, f"contexts[{j}].title", ctx["title"])
            text = require_str(path, i, f"contexts[{j}].text", ctx["text"])
            if supporting:
                gold.append(passage_string(title, text))
    elif "paragraphs" in rec:
        for j, para in enumerate(require_list(path, i, "paragraphs", rec["paragraphs"], "a list of {title, paragraph_text, is_supporting}")):
            require_dict(path, i, f"paragraphs[{j}]", para)
            if "is_supporting" in para and not require_bool(path, i, f"paragraphs[{j}].is_supporting", para["is_supporting"]):
                continue
            key = "text" if "text" in para else "paragraph_text"
            if key not in para:
                raise DataError(path, "needs 'text' or 'paragraph_text'", i, f"paragraphs[{j}]")
            text = require_str(path, i, f"paragraphs[{j}].{key}", para[key])
            title = require_str(path, i, f"paragraphs[{j}].title", para.get("title", ""))
            gold.append(passage_string(title, text))
    return list(dict.fromkeys(gold))


def _query_id(path, i, rec) -> str:
    key = "id" if "id" in rec else "_id" if "_id" in rec else None
    if key is None:
        return str(i)
    value = rec[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, f"expected a string or integer id, got {type_name(value)}", i, key)
    return check_text(path, i, key, str(value), limit=10_000)


def load_queries(path: Path | str, sentence_joiner: str = " ", max_queries: Optional[int] = None,
                 decode_json_answers: bool = False) -> List[Query]:
    """Outcomes: a file without questions is an error; a question without gold passages
    is kept (recall 0) and counted by `check_gold_in_corpus`; a repeated id is an error."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, f"expected a JSON list of questions, got {type_name(data)}")
    queries: List[Query] = []
    seen_ids = set()
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise DataError(path, f"expected an object, got {type_name(rec)}", i)
        qid = _query_id(path, i, rec)
        where = f"{i} (id {qid!r})"
        if "question" not in rec:
            raise DataError(path, "missing field", where, "question")
        question = require_str(path, where, "question", rec["question"])
        if qid in seen_ids:
            raise DataError(path, "duplicate question id", where, "id")
        seen_ids.add(qid)
        queries.append(
            Query(
                id=qid,
                question=question,
                gold_answers=_gold_answers(path, where, rec, decode_json_answers),
                gold_passages=_gold_passages(path, where, rec, sentence_joiner),
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
