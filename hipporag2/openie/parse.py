"""Lenient reading of structured LLM answers (OpenIE, query NER, the fact filter).

Models, small ones above all, wrap JSON in code fences, add a sentence before or
after it, answer in Python-literal style (single quotes, tuples, True/None), drop
the wrapping object, or stop mid-answer at the token limit. Everything here turns
such text into a Python value without ever raising on model output:

    parse_structured(text) -> ParseResult(value, ok, reason)

`ok` is False only when no usable value could be read; `reason` then says why
("empty", "no_json", ...). A successful read names how it was obtained
("json", "embedded", "literal", "truncated"), so callers can count repairs.

Safety: only `json` and `ast.literal_eval` ever interpret model text; nothing is
evaluated as code.
"""
from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple

# Longer answers are cut before parsing: no legitimate answer of these stages is
# anywhere near this long (1,024 tokens are ~5,000 characters), and it bounds the work
# done on runaway generations.
MAX_CHARS = 60_000
# Answers nest 3 deep; a value nested deeper than this is runaway output, not data.
MAX_DEPTH = 32
# How many opening brackets are tried as the start of the value.
MAX_STARTS = 24
# How many cut points truncation recovery tries, from the end backwards.
MAX_CUTS = 64

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
_OPEN = {"[": "]", "{": "}", "(": ")"}
_CLOSE = {"]": "[", "}": "{", ")": "("}
_JSON_WORDS = {"true": "True", "false": "False", "null": "None"}


class ParseResult(NamedTuple):
    value: Any
    ok: bool
    reason: str


class _Scan(NamedTuple):
    end: Optional[int]  # index one past the closing bracket of the value, None if never closed
    cuts: List[Tuple[int, str]]  # (cut position, closing suffix) where a prefix can be closed
    pythonic: str  # the scanned span with bare true/false/null turned into Python words


def _scan(text: str, start: int) -> _Scan:
    """Walk a bracketed value from `start`, tracking strings and nesting.

    Records the places where the value could be cut and closed again so that only
    complete items remain: right after an opening bracket, right before a comma,
    right after a string, and right after a nested value closes. The Python-style copy has the same
    length as the original (true/false/null map to True/False/None), so positions
    are offsets from `start` in both.
    """
    stack: List[str] = []
    cuts: List[Tuple[int, str]] = []
    out: List[str] = []
    quote: Optional[str] = None
    escape = False
    i, n = start, len(text)

    def closing() -> str:
        return "".join(_OPEN[c] for c in reversed(stack))

    while i < n:
        ch = text[i]
        if quote is not None:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = None
                # A string just closed is a complete item (or a key, which the
                # literal check then rejects).
                cuts.append((i + 1 - start, closing()))
            out.append(ch)
            i += 1
            continue
        if ch in ("'", '"'):
            quote = ch
        elif ch in _OPEN:
            if len(stack) >= MAX_DEPTH:
                return _Scan(None, [], "")
            stack.append(ch)
            out.append(ch)
            cuts.append((i + 1 - start, closing()))
            i += 1
            continue
        elif ch in _CLOSE:
            if not stack or stack[-1] != _CLOSE[ch]:
                return _Scan(None, [], "")  # mismatched brackets: not a value
            stack.pop()
            out.append(ch)
            if not stack:
                return _Scan(i + 1, cuts, "".join(out))
            cuts.append((i + 1 - start, closing()))
            i += 1
            continue
        elif ch == ",":
            cuts.append((i - start, closing()))
        elif ch.isalpha():
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            out.append(_JSON_WORDS.get(word, word))
            i = j
            continue
        out.append(ch)
        i += 1
    return _Scan(None, cuts, "".join(out))


def _literal(text: str) -> Tuple[bool, Any]:
    """json first, then a Python literal; (False, None) when neither reads it."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError, TypeError):
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. SyntaxWarning on odd escapes in model text
            return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, AttributeError, KeyError, IndexError):
        return False, None
    except Exception:  # noqa: BLE001 - literal_eval on arbitrary text must never escape
        return False, None


def _starts(text: str) -> Iterable[int]:
    count = 0
    for i, ch in enumerate(text):
        if ch in "[{":
            yield i
            count += 1
            if count >= MAX_STARTS:
                return


def _recover(scan: _Scan) -> Optional[Tuple[int, Any]]:
    """The longest prefix of an unclosed value that closes into a readable value."""
    for pos, suffix in reversed(scan.cuts[-MAX_CUTS:]):
        ok, value = _literal(scan.pythonic[:pos] + suffix)
        if ok and isinstance(value, (dict, list, tuple)):
            return pos, value
    return None


def _from_candidate(text: str) -> Optional[ParseResult]:
    stripped = text.strip()
    if not stripped:
        return None
    ok, value = _literal(stripped)
    if ok and isinstance(value, (dict, list, tuple)):
        return ParseResult(value, True, "json")
    # A value cut off at the token limit never closes; its complete inner items do,
    # so a repaired prefix of the outer value is preferred to a shorter inner one.
    recovered: Optional[Tuple[int, Any]] = None
    tried_recovery = False
    decoder = json.JSONDecoder()
    for start in _starts(stripped):
        complete: Optional[Tuple[int, Any, str]] = None
        try:
            value, end = decoder.raw_decode(stripped, start)
            complete = (end - start, value, "embedded")
        except (ValueError, RecursionError):
            pass
        scan = _scan(stripped, start) if complete is None else None
        if scan is not None and scan.end is not None:
            ok, value = _literal(scan.pythonic)
            if ok and isinstance(value, (dict, list, tuple)):
                complete = (scan.end - start, value, "literal")
        if complete is not None:
            if recovered is not None and recovered[0] > complete[0]:
                break
            return ParseResult(complete[1], True, complete[2])
        if scan is not None and scan.end is None and scan.cuts and not tried_recovery:
            tried_recovery = True
            recovered = _recover(scan)
    if recovered is not None:
        return ParseResult(recovered[1], True, "truncated")
    return None


def _candidates(text: str) -> List[str]:
    """Code-fence bodies first (a model often explains around them), then the whole text."""
    out = [m.group(2) for m in _FENCE.finditer(text) if m.group(2).strip()]
    out.append(text)
    return out


def parse_structured(text: Any) -> ParseResult:
    """Read the first JSON-like object or list in `text`. Never raises."""
    try:
        if not isinstance(text, str):
            return ParseResult(None, False, "not_text")
        if not text.strip():
            return ParseResult(None, False, "empty")
        text = text[:MAX_CHARS]
        for cand in _candidates(text):
            got = _from_candidate(cand)
            if got is not None:
                return got
        return ParseResult(None, False, "no_json")
    except Exception as exc:  # noqa: BLE001 - a parser bug must not end a long run
        return ParseResult(None, False, f"parser_error:{type(exc).__name__}")


def _norm_key(key: Any) -> str:
    return re.sub(r"[^a-z]", "", str(key).lower())


def pick_list(value: Any, keys: Sequence[str]) -> Tuple[Optional[list], str]:
    """The list an answer is about: `value[key]` for one of `keys`, or a bare list.

    Key matching ignores case and punctuation ("Named Entities" == "named_entities").
    An object with one list-valued entry under some other key is accepted too.
    """
    if isinstance(value, (list, tuple)):
        return list(value), ""
    if not isinstance(value, dict):
        return None, "wrong_type"
    wanted = {_norm_key(k) for k in keys}
    for k, v in value.items():
        if _norm_key(k) in wanted:
            if isinstance(v, (list, tuple)):
                return list(v), ""
            return None, "wrong_type"
    lists = [v for v in value.values() if isinstance(v, (list, tuple))]
    if len(lists) == 1:
        return list(lists[0]), ""
    return None, "missing_key"


def clean_text(s: str) -> str:
    """Valid Unicode only: a JSON escape such as \\ud800 yields a lone surrogate, which
    no UTF-8 file can hold; surrogate pairs are joined, lone ones become U+FFFD."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _as_text(x: Any) -> str:
    if isinstance(x, str):
        return clean_text(x)
    if isinstance(x, (list, tuple, dict)):
        try:
            return clean_text(json.dumps(x, ensure_ascii=False))
        except (TypeError, ValueError):
            return clean_text(str(x))
    return clean_text(str(x))


def parse_list(text: Any, keys: Sequence[str]) -> Tuple[Optional[list], ParseResult]:
    """(the answer's list, the parse) — or (None, the failed parse) when the text is
    unreadable or holds no list under `keys` (`pick_list`)."""
    parsed = parse_structured(text)
    if not parsed.ok:
        return None, parsed
    items, why = pick_list(parsed.value, keys)
    if items is None:
        return None, ParseResult(None, False, why)
    return items, parsed


def parse_entities(text: Any, keys: Sequence[str] = ("named_entities", "entities")) -> ParseResult:
    """A list of entity strings (deduplicated, order kept). ok=False when unreadable."""
    items, parsed = parse_list(text, keys)
    if items is None:
        return parsed
    out: List[str] = []
    for item in items:
        if isinstance(item, bool) or item is None or isinstance(item, (dict, list, tuple)):
            continue  # not an entity name
        s = _as_text(item).strip()
        if s and s not in out:
            out.append(s)
    return ParseResult(out, True, parsed.reason)


def parse_triples(text: Any, keys: Sequence[str] = ("triples", "triple")) -> ParseResult:
    """A list of triples, each a list of strings, as the model wrote them.

    Items of the wrong length are kept (the indexer drops them, SPEC §2.2, and
    counts them); items that are not lists at all are dropped. After a truncation
    repair, a trailing incomplete triple (fewer than 3 elements) is dropped.
    """
    items, parsed = parse_list(text, keys)
    if items is None:
        return parsed
    out = [[_as_text(x) for x in item] for item in items if isinstance(item, (list, tuple))]
    if parsed.reason == "truncated" and out and len(out[-1]) < 3:
        out.pop()
    return ParseResult(out, True, parsed.reason)


def _lenient_entities(text: Any, cut: bool = False) -> ParseResult:
    return parse_entities(text)


def _lenient_triples(text: Any, cut: bool = False) -> ParseResult:
    return parse_triples(text)


class OpenIEReader(NamedTuple):
    """How one `openie.parse` choice (registry OPENIE_PARSERS) reads NER and triple
    replies: `entities(text, cut)`, `triples(text, cut)` -> ParseResult, where `cut`
    says the reply stopped at its token limit."""

    name: str
    entities: Callable[[Any, bool], ParseResult]
    triples: Callable[[Any, bool], ParseResult]


# `openie.parse=lenient`: the readers above (a cut reply is repaired wherever it stops).
LENIENT_READER = OpenIEReader("lenient", _lenient_entities, _lenient_triples)
