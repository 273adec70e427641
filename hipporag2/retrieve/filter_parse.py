"""Reading the filter's reply and mapping its facts back to candidates
(`retrieval.filter_parse`).

`reference` (default) reads a reply the way the reference implementation's DSPyFilter
does, so a run keeps exactly the facts the reference keeps and falls back to dense
retrieval exactly where it falls back:

- A field header `[[ ## name ## ]]` counts only when a line starts with it (leading
  and trailing whitespace of the line ignored). Anything after the header on the same
  line is discarded; the field's value is the following lines up to the next header,
  stripped. Lines are split as Python's `str.splitlines` splits them.
- Each `fact_after_filter` section is read as JSON, else as a Python literal, and
  validated as `{"fact": [[str, ...], ...]}` by pydantic in its default (lax) mode, as
  the reference validates it. The last section that validates wins; when none does,
  no fact is kept. (The reference's type admits inner lists of any length.)
- Each kept fact is mapped to the candidate whose printed tuple `('s', 'p', 'o')` is
  closest to the printed fact `['s', 'p', 'o']` by `difflib.get_close_matches`
  (no cut-off; among equal scores the larger string wins, then the first equal
  candidate), in the model's order, repeats kept, then cut at `linking_top_k`.

`lenient` is our forgiving reading (a documented improvement, not the reference):
code fences, inline headers, bare lists, Python literals and truncated JSON are
repaired by `hipporag2.openie.parse`, facts need three elements, and the mapping is
case-insensitive over the joined words, drops repeats and breaks ties toward the
better-ranked candidate.

Both report an outcome per reply, counted in metrics.json: `parsed` (read as the
protocol asks: a JSON value under the header), `repaired` (read only after a repair:
a Python literal for `reference`, any of the lenient repairs for `lenient`) or
`unparsable` (nothing kept).
"""
from __future__ import annotations

import ast
import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

from pydantic import BaseModel, Field, TypeAdapter

from hipporag2.openie.parse import parse_triples
from hipporag2.retrieve.filter_program import OUTPUT_FIELD

PARSED, REPAIRED, UNPARSABLE = "parsed", "repaired", "unparsable"
OUTCOMES = (PARSED, REPAIRED, UNPARSABLE)


class Fact(BaseModel):
    """The filter's output type, named as the authors' program names it (DSPy prints
    the name in its per-turn reminder) and validated as the reference validates it."""

    fact: List[List[str]] = Field(description="the kept facts, each a [subject, predicate, object] list of strings")


_FACT_ADAPTER = TypeAdapter(Fact)
_HEADER = re.compile(r"\[\[ ## (\w+) ## \]\]")


@dataclass(frozen=True)
class ParsedReply:
    facts: List[List[str]]  # the facts read from the reply, in the model's order
    outcome: str  # parsed | repaired | unparsable


def field_values(text: str, name: str) -> List[str]:
    """The value of every section of `text` headed by field `name`, in order."""
    values: List[str] = []
    current: Optional[List[str]] = None  # lines of the open `name` section, if one is open
    for line in text.splitlines():
        header = _HEADER.match(line.strip())
        if header is not None:
            if current is not None:
                values.append("\n".join(current).strip())
            current = [] if header.group(1) == name else None
        elif current is not None:
            current.append(line)
    if current is not None:
        values.append("\n".join(current).strip())
    return values


def _validate(value: Any) -> Optional[List[List[str]]]:
    try:
        return _FACT_ADAPTER.validate_python(value).fact
    except Exception:  # pydantic's ValidationError, or anything odd a literal holds
        return None


def _read_value(text: str) -> Tuple[Optional[List[List[str]]], str]:
    try:
        return _validate(json.loads(text)), PARSED
    except json.JSONDecodeError:
        pass
    except Exception:  # e.g. RecursionError on absurd nesting: the reference gives up too
        return None, UNPARSABLE
    try:
        return _validate(ast.literal_eval(text)), REPAIRED
    except Exception:
        return None, UNPARSABLE


def parse_reference(text: str) -> ParsedReply:
    """The reference's reading of a reply (module docstring)."""
    facts: Optional[List[List[str]]] = None
    outcome = UNPARSABLE
    for value in field_values(text or "", OUTPUT_FIELD):
        got, how = _read_value(value)
        if got is not None:
            facts, outcome = got, how
    return ParsedReply(facts if facts is not None else [], outcome)


def closest_candidates(facts: Sequence[Sequence[Any]], candidates: Sequence[Sequence[str]], top_k: int) -> List[int]:
    """Candidate positions for `facts` by the reference's rule (module docstring)."""
    printed = [str(tuple(c)) for c in candidates]
    out: List[int] = []
    if not printed:
        return out
    for fact in facts:
        best = difflib.get_close_matches(str(list(fact)), printed, n=1, cutoff=0.0)
        if best:
            out.append(printed.index(best[0]))
    return out[:top_k]


# ---- lenient ---------------------------------------------------------------------------

def parse_filter_answer(text: str):
    """Lenient reading of the output field's text (after its marker, anywhere, before the
    next marker): `ParseResult(facts, ok, reason)` of `hipporag2.openie.parse`."""
    text, marker = text or "", f"[[ ## {OUTPUT_FIELD} ## ]]"
    text = text[text.find(marker) + len(marker):] if marker in text else text
    end = text.find("[[ ##")
    return parse_triples(text[:end] if end >= 0 else text, keys=("fact", "facts"))


def parse_lenient(text: str) -> ParsedReply:
    value, ok, reason = parse_filter_answer(text)
    if not ok:
        return ParsedReply([], UNPARSABLE)
    return ParsedReply(list(value), PARSED if reason == "json" else REPAIRED)


def _fact_text(fact: Sequence[Any]) -> str:
    return " ".join(str(x).strip().lower() for x in fact)


def map_to_candidates(facts: Sequence[Sequence[Any]], candidates: Sequence[Sequence[str]], top_k: int) -> List[int]:
    """Lenient mapping: the most similar candidate of each fact (difflib ratio over the
    lowercased words; ties to the better-ranked candidate), model order, no repeats."""
    if not candidates:
        return []
    cand_texts = [_fact_text(c) for c in candidates]
    kept: List[int] = []
    for fact in facts:
        if not fact:
            continue
        text = _fact_text(fact)
        best, best_score = 0, -1.0
        for j, ct in enumerate(cand_texts):
            score = difflib.SequenceMatcher(None, text, ct, autojunk=False).ratio()
            if score > best_score:
                best, best_score = j, score
        if best not in kept:
            kept.append(best)
        if len(kept) >= top_k:
            break
    return kept


@dataclass(frozen=True)
class ReplyReader:
    """One `retrieval.filter_parse` choice: how a reply is read and how its facts map."""

    name: str
    parse: Callable[[str], ParsedReply]
    map: Callable[[Sequence[Sequence[Any]], Sequence[Sequence[str]], int], List[int]]

    def select(self, text: str, candidates: Sequence[Sequence[str]], top_k: int) -> Tuple[List[int], str]:
        reply = self.parse(text)
        return self.map(reply.facts, candidates, top_k), reply.outcome


REFERENCE_READER = ReplyReader("reference", parse_reference, closest_candidates)
LENIENT_READER = ReplyReader("lenient", parse_lenient, map_to_candidates)


def reply_reader(name: str) -> ReplyReader:
    """The `retrieval.filter_parse` choice `name` (hipporag2.registry.FILTER_PARSERS)."""
    from hipporag2.registry import FILTER_PARSERS

    return FILTER_PARSERS.load(name)
