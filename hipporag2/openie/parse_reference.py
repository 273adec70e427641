"""OpenIE replies read the way the reference implementation reads them (`openie.parse=reference`).

The reference (hipporag 2.0.0a4, its OpenAI-compatible OpenIE path) reads a NER or
triple reply in three steps, and this module reproduces each with its own code:

1. A reply cut at the token limit is closed first (`close_cut_reply`): unless the
   whole reply already is valid JSON, everything from its last comma on is dropped,
   then the brackets and braces still open (outside double-quoted strings) are closed
   in reverse order. A reply that was not cut is read as it is.
2. The first flat object holding the key (`{...  "named_entities": [ ... ] ...}`, no
   brace inside it, the list's first `]` ending the match) is located by a regular
   expression and read as a Python value; no such object gives no entities / triples.
3. NER: the key's value, repeats removed (first occurrence kept, order kept; the
   elements stay as the reply wrote them, strings or not). Triples: the key's value
   filtered as `filter_invalid_triples` does (exactly 3 elements, each turned into
   `str`, repeats of the string triple removed).

Any failure in steps 2-3 (unreadable value, missing key, an unhashable entity, a
triple without a length, ...) gives an empty list, as the reference's `except` does.

Where we differ, on purpose: the reference evaluates the matched text with Python's
`eval`; we use `ast.literal_eval`, which reads exactly the same value for every
literal (strings, numbers, lists, tuples, dicts, sets, True/False/None, bytes,
implicitly joined strings, unary minus) and refuses everything else. The two differ
only on a matched object that is an expression but not a literal - arithmetic
(`"a" * 3`, `1 + 1`), names (`json`, `len`), calls, subscripts (`[["x"]][0]`),
comprehensions, f-strings, attribute access: there `eval` computes (or runs) it and
we read nothing (an empty list, counted as `unreadable`). Model text is never run.
"""
from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any, Callable, Dict, List

from hipporag2.openie.parse import OpenIEReader, ParseResult

NER_KEY = "named_entities"
TRIPLES_KEY = "triples"


def _object_with(key: str) -> "re.Pattern[str]":
    """The first brace-free object in which `"key"` is followed by a list: any
    non-brace text, the quoted key, a colon, `[` up to the first `]`, any non-brace
    text, the closing brace. (`]` cannot occur inside the list part, so a nested list
    ends the list part early and the rest is taken by the trailing non-brace text.)"""
    no_brace = r"[^{}]*"
    list_part = r"\[[^\]]*\]"
    return re.compile(r"\{" + no_brace + '"' + re.escape(key) + '"' + r"\s*:\s*" + list_part + no_brace + r"\}",
                      re.DOTALL)


_PATTERNS: Dict[str, "re.Pattern[str]"] = {k: _object_with(k) for k in (NER_KEY, TRIPLES_KEY)}
_CLOSERS = {"{": "}", "[": "]"}


def close_cut_reply(text: str) -> str:
    """A reply cut at the token limit, closed as the reference closes it (step 1).

    Valid JSON comes back unchanged. Otherwise the text after (and including) the last
    comma goes, and every `{` / `[` left open outside double-quoted strings gets its
    closer, innermost first; a closer that does not match the innermost open bracket
    is ignored when counting. Raises RecursionError where json.loads does (deeply
    nested text), as the reference's check does.
    """
    try:
        json.loads(text)
        return text
    except json.JSONDecodeError:
        pass
    comma = text.rfind(",")
    if comma >= 0:
        text = text[:comma]
    still_open: List[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSERS:
            still_open.append(ch)
        elif ch in "}]" and still_open and _CLOSERS[still_open[-1]] == ch:
            still_open.pop()
    return text + "".join(_CLOSERS[c] for c in reversed(still_open))


def _literal(text: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. SyntaxWarning for odd escapes in model text
        return ast.literal_eval(text)


def _unique_entities(value: Any) -> list:
    return list(dict.fromkeys(value))


def _valid_triples(value: Any) -> List[List[str]]:
    seen = set()
    out: List[List[str]] = []
    for item in value:
        if len(item) != 3:
            continue
        as_text = [str(x) for x in item]
        key = tuple(as_text)
        if key not in seen:
            seen.add(key)
            out.append(as_text)
    return out


def read_reply(text: Any, key: str, cut: bool, finish: Callable[[Any], list]) -> ParseResult:
    """Steps 1-3 for one reply: ParseResult(value, ok, reason). The value is the
    reference's ([] where it reads nothing); ok is False exactly when it is [] for want
    of a readable object (reason no_object: none matched; unreadable: the reference's
    reading raises), so that such replies are counted. Otherwise reason is json (read
    as written) or repaired (closed first)."""
    if not isinstance(text, str):
        return ParseResult([], False, "not_text")
    try:
        real = close_cut_reply(text) if cut else text
        match = _PATTERNS[key].search(real)
        if match is None:
            return ParseResult([], False, "no_object")
        value = finish(_literal(match.group())[key])
    except Exception:  # noqa: BLE001 - the reference's reading turns every failure into []
        return ParseResult([], False, "unreadable")
    return ParseResult(value, True, "repaired" if cut and real != text else "json")


def reference_entities(text: Any, cut: bool = False) -> ParseResult:
    return read_reply(text, NER_KEY, cut, _unique_entities)


def reference_triples(text: Any, cut: bool = False) -> ParseResult:
    return read_reply(text, TRIPLES_KEY, cut, _valid_triples)


READER = OpenIEReader("reference", reference_entities, reference_triples)
