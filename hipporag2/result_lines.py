"""The JSON lines of retrieval results (retrieval.jsonl, which is also the retrieval
checkpoint: `run_files.RetrievalFile`), byte for byte what
`json.dumps(row, ensure_ascii=False)` writes, made cheaper.

A retrieval.jsonl line holds 200 ranked passages, each a small object {title,
corpus_idx, score}; encoding those 200 objects (and building them first) was most of
what writing a line cost (issue 15: ~0.7 ms of a 16 ms query at MuSiQue scale). Here
a passage's constant part, `{"title": ..., "corpus_idx": ..., "score": `, is encoded
once per corpus and each line is joined from those pieces and the scores' reprs,
which is what the json module writes for a float (`float.__repr__`, or NaN /
Infinity / -Infinity). Those reprs (200 a query) are made by orjson where it writes
the same text (`_finite_float_texts`: its shortest digits are repr's; the layouts
that differ are re-laid out as repr's).
Anything that is not the plain shape (a score that is not a
float, details that would overwrite a line's own keys) goes through `json.dumps`
itself, so the bytes never depend on which path ran; tests/test_result_lines.py
compares both on random results.
"""
from __future__ import annotations

import functools
import json
import math
from itertools import repeat
from operator import add
from typing import Iterable, Iterator, List, Sequence, Tuple

from hipporag2.retrieve.base import RetrievalResult

# keys a retrieval.jsonl line sets before the retriever's details (which may not replace them)
LINE_KEYS = ("id", "question", "ranked")


# what json.dumps(obj, ensure_ascii=False) encodes with (made there on every call)
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _dumps(obj) -> str:
    return _ENCODER.encode(obj)


def float_text(x: float) -> str:
    """What json.dumps writes for a Python float."""
    if x != x:
        return "NaN"
    if x == math.inf:
        return "Infinity"
    if x == -math.inf:
        return "-Infinity"
    return float.__repr__(x)


# floats whose shortest digits orjson writes in another layout than repr: 1e-9 <= |x| < 1e-5
# as "4.1e-9" (repr: "4.1e-09"), 1e-5 <= |x| < 1e-4 positionally ("0.000041", repr "4.1e-05");
# `_repr_layout` re-lays them out
_ORJSON_OTHER_LAYOUT = ("e-", "0.0000")
# one value of every layout (and band edge) repr writes: orjson is used only if it writes all of them as repr does
_PROBES = (0.0, -0.0, 1.0, -2.5, 0.1, 1 / 3, 100.0, 123456789012345.6, 9999999999999998.0, 1e16, 1.2345e16,
           1e22, 1.7976931348623157e308, 0.0001, 0.00012345678901234567, 0.0009999999999999998, 1e-4,
           0.00032941598368275087, 0.016699855791216543, 1e-10, 1.234567e-10, 5e-324, 2.2250738585072014e-308,
           float.fromhex("0x1.fffffffffffffp-14"), float.fromhex("0x1.0p-13"), 0.30000000000000004,
           # the layouts that differ (re-made by `_repr_layout`) and their edges
           1e-5, -1e-5, 1.5e-5, 9.999999999999999e-05, 4.121034241327621e-09, 1e-9, 9.99e-10, 3e-7, -2.5e-6)


@functools.lru_cache(maxsize=1)
def _orjson():
    """The orjson module when it writes floats' shortest digits and ints as json does
    (checked once on `_PROBES`), else None (the json module's own `repr` path)."""
    try:
        import orjson
    except ImportError:
        return None
    try:
        texts = [_repr_layout(t) if "e-" in t or t.startswith(("0.0000", "-0.0000")) else t
                 for t in orjson.dumps(list(_PROBES)).decode()[1:-1].split(",")]
        ints = orjson.dumps([0, -1, 2**63 - 1, -(2**63)]).decode()
    except Exception:
        return None
    if texts != [float.__repr__(x) for x in _PROBES] or ints != "[0,-1,9223372036854775807,-9223372036854775808]":
        return None
    return orjson


def _float_texts(xs: Sequence) -> List[str] | None:
    """json's text of each float in xs, or None when one is not exactly a Python float."""
    if not set(map(type, xs)) <= {float}:
        return None
    texts = _finite_float_texts(xs)
    return texts[0] if texts is not None else [float_text(x) for x in xs]


def _finite_float_texts(xs: Sequence) -> Tuple[List[str], str] | None:
    """(json's text of each float in xs, and of the list xs: `[0.5, 0.25]`) when every
    one is exactly a finite Python float; else None.

    Formatting the shortest digits of a float is most of a checkpoint line's cost
    (float.__repr__, David Gay's dtoa: ~0.5 us each, 200 per query); orjson finds the
    same shortest digits (Ryu) ~40x faster and lays them out as repr does, except for
    1e-9 <= |x| < 1e-4 (`_ORJSON_OTHER_LAYOUT`), re-laid out by `_repr_layout`; non-finite values
    (orjson: null, json: NaN / Infinity) give None. tests/test_result_lines.py compares
    both on random floats of every magnitude."""
    if not set(map(type, xs)) <= {float}:
        return None
    fast = _orjson()
    if fast is None or not xs:
        out = list(map(float.__repr__, xs))
        joined = ", ".join(out)
        # nan, inf: json writes NaN, Infinity, -Infinity (a finite repr has no "n")
        return None if "n" in joined else (out, "[" + joined + "]")
    joined = fast.dumps(xs).decode()
    if "n" in joined:  # null: NaN or inf somewhere
        return None
    out = joined[1:-1].split(",")
    if any(m in joined for m in _ORJSON_OTHER_LAYOUT):
        out = [_repr_layout(t) if "e-" in t or t.startswith(("0.0000", "-0.0000")) else t for t in out]
        return out, "[" + ", ".join(out) + "]"
    return out, joined.replace(",", ", ")  # a float's text has no comma


def _repr_layout(t: str) -> str:
    """repr's layout of orjson's text of a float (the same shortest digits): a one-digit
    exponent gets its zero ("4.1e-9" -> "4.1e-09"), 1e-5 <= |x| < 1e-4 is written
    with an exponent ("0.000041" -> "4.1e-05"); anything else is already repr's."""
    sign, body = ("-", t[1:]) if t.startswith("-") else ("", t)
    e = body.find("e-")
    if e >= 0:
        exp = body[e + 2 :]
        return t if len(exp) > 1 else sign + body[: e + 2] + "0" + exp
    if body.startswith("0.0000") and body[6:7] not in ("", "0"):  # 0.0000d...: d >= 1 is the first digit
        digits = body[6:]
        return sign + digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + "e-05"
    return float.__repr__(float(t))  # not a layout seen here: the same float (shortest digits), repr's text


def _details_tail(details: dict) -> str:
    """`, "key": value, ...` of a non-empty details dict, as json.dumps of a row holding them writes it."""
    return ", " + _dumps(details)[1:-1] if details else ""


class RetrievalLines:
    """retrieval.jsonl lines of one corpus: `line(query, result)` equals
    `json.dumps(self.row(query, result), ensure_ascii=False)`."""

    def __init__(self, corpus):
        self.corpus = corpus
        self._prefix: List[str] | None = None

    def _prefixes(self) -> List[str]:
        if self._prefix is None:  # once per corpus: every passage's constant part
            self._prefix = [
                '{"title": ' + _dumps(p.title) + ', "corpus_idx": ' + _dumps(p.corpus_idx) + ', "score": '
                for p in self.corpus.passages
            ]
        return self._prefix

    def row(self, query, result: RetrievalResult) -> dict:
        """The line as a dict (the slow, plain path)."""
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

    def line(self, query, result: RetrievalResult, score_texts: Sequence[str] | None = None) -> str:
        """`score_texts`: json's text of each of result.scores, when the caller has them
        (formatting 200 floats is most of a line's cost)."""
        details = result.details
        texts = score_texts if score_texts is not None and len(score_texts) == len(result.scores) \
            else _float_texts(result.scores)
        if texts is None or len(texts) != len(result.ranked) or type(details) is not dict \
                or any(k in details for k in LINE_KEYS):
            return _dumps(self.row(query, result))
        pre = self._prefixes()
        # prefix + score text per entry, joined without a Python step per entry (map stops at the shorter, as zip)
        ranked = "}, ".join(map(add, map(pre.__getitem__, result.ranked), texts))
        ranked = ranked + "}" if ranked else ranked
        return ('{"id": ' + _dumps(query.id) + ', "question": ' + _dumps(query.question)
                + ', "ranked": [' + ranked + "]" + _details_tail(details) + "}")

    def lines(self, queries: Iterable, results: Iterable[RetrievalResult],
              score_texts: Iterable[Sequence[str] | None] | None = None) -> Iterator[str]:
        texts = score_texts if score_texts is not None else repeat(None)
        for q, r, t in zip(queries, results, texts):
            yield self.line(q, r, t)
