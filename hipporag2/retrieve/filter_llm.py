"""Recognition memory (SPEC §3.3): an LLM keeps the candidate facts relevant to a question.

The prompt comes from a saved DSPy program (JSON). Supported layouts:

    {"prog": {"system": str, "signature": {"instructions": str, "fields": [...]},
              "demos": [{"question": str, "fact_before_filter": str,
                         "fact_after_filter": str, ...}, ...], ...}, "metadata": {...}}

which is the layout of the authors' published program (a DSPy state save of a module
whose predictor is called `prog`, plus the rendered system message), and the same
object without the `prog` wrapper. Facts inside demos are JSON strings
`{"fact": [[s, p, o], ...]}`. Without `system`, one is rendered from the instructions.

Messages: system, then each demo as a user/assistant pair, then the question with its
candidates, in the field-marker layout DSPy's chat adapter uses (`[[ ## name ## ]]`), so
a program tuned by DSPy sees at run time the layout it was tuned with.

Each fact of the answer is mapped to the most similar candidate (difflib ratio over the
fact's text; ties go to the better-ranked candidate), duplicates dropped, at most
`linking_top_k` kept, in the model's order. An empty, unreadable or failed answer keeps
nothing; the retriever then falls back to the dense ranking (SPEC §3.4). Such cases
are counted in `stats`.
"""
from __future__ import annotations

import difflib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hipporag2.llm.base import ChatRequest
from hipporag2.openie.parse import parse_triples

log = logging.getLogger("hipporag2.filter")

DEFAULT_PROGRAM = Path(__file__).resolve().parent.parent / "resources" / "filter_program.json"

INPUT_FIELDS = ("question", "fact_before_filter")
OUTPUT_FIELD = "fact_after_filter"
DEFAULT_FIELD_DESCRIPTIONS = {
    "question": "the question to be answered",
    "fact_before_filter": "candidate facts retrieved for the question",
    "fact_after_filter": "the candidate facts that help answer the question, as JSON",
}
def fact_schema(candidates: Sequence[Sequence[str]]) -> str:
    """JSON schema of a filter answer for these candidates (constrained decoding only).

    The filter may only keep candidate facts, so each item is one of them verbatim
    (`enum`) and there are at most as many items as candidates: a small model can
    neither invent a fact nor run on to `max_new_tokens`. The paper's runs decode
    unconstrained and map the model's facts back by string similarity, which stays
    the path for every answer (`map_to_candidates`).
    """
    unique = [list(c) for c in dict.fromkeys(tuple(c) for c in candidates)]
    return json.dumps(
        {
            "type": "object",
            "properties": {"fact": {"type": "array", "items": {"enum": unique}, "maxItems": len(unique)}},
            "required": ["fact"],
            "additionalProperties": False,
        },
        sort_keys=True,
        ensure_ascii=False,
    )


def marker(name: str) -> str:
    return f"[[ ## {name} ## ]]"


def facts_json(facts: Sequence[Sequence[str]]) -> str:
    """Facts as the program's demos write them: `{"fact": [[s, p, o], ...]}`."""
    return json.dumps({"fact": [list(f) for f in facts]}, ensure_ascii=False)


@dataclass
class FilterProgram:
    instructions: str
    system: str
    demos: List[Dict[str, str]] = field(default_factory=list)
    field_descriptions: Dict[str, str] = field(default_factory=lambda: dict(DEFAULT_FIELD_DESCRIPTIONS))
    path: str = ""


def render_system(instructions: str, descriptions: Dict[str, str]) -> str:
    """A system message for a program saved without one (own wording, DSPy-style layout)."""
    d = {**DEFAULT_FIELD_DESCRIPTIONS, **descriptions}
    lines = ["You receive these inputs:"]
    lines += [f"{i}. `{name}`: {d[name]}" for i, name in enumerate(INPUT_FIELDS, 1)]
    lines += ["", "You produce this output:", f"1. `{OUTPUT_FIELD}`: {d[OUTPUT_FIELD]}", ""]
    lines += ["Each field appears under its own marker, in this order:", ""]
    for name in (*INPUT_FIELDS, OUTPUT_FIELD):
        lines += [marker(name), "{" + name + "}", ""]
    lines += [marker("completed"), "", "Your task:", instructions.strip()]
    return "\n".join(lines)


def _find_predictor(data: Any) -> Optional[Dict]:
    if not isinstance(data, dict):
        return None
    if "prog" in data and isinstance(data["prog"], dict):
        return data["prog"]
    if "demos" in data or "signature" in data or "system" in data:
        return data
    # A DSPy state save names predictors by attribute path (e.g. "prog.predict").
    for key, value in data.items():
        if key != "metadata" and isinstance(value, dict) and ("demos" in value or "signature" in value):
            return value
    return None


def _as_fact_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def program_from_dict(data: Any, path: str = "") -> FilterProgram:
    pred = _find_predictor(data)
    if pred is None:
        raise ValueError(f"{path or 'filter program'}: expected an object with 'prog' (or 'demos'/'signature'/'system')")
    sig = pred.get("signature") or {}
    instructions = str(sig.get("instructions") or pred.get("instructions") or "").strip()
    descriptions: Dict[str, str] = {}
    fields = sig.get("fields") or []
    for name, f in zip((*INPUT_FIELDS, OUTPUT_FIELD), fields):
        if isinstance(f, dict) and f.get("description"):
            descriptions[name] = str(f["description"])
    demos = []
    for i, demo in enumerate(pred.get("demos") or []):
        if not isinstance(demo, dict) or any(k not in demo for k in (*INPUT_FIELDS, OUTPUT_FIELD)):
            log.warning("%s: demo %d lacks question/fact_before_filter/fact_after_filter; skipped", path, i)
            continue
        demos.append({k: _as_fact_string(demo[k]) if k != "question" else str(demo[k]) for k in (*INPUT_FIELDS, OUTPUT_FIELD)})
    system = pred.get("system")
    if not isinstance(system, str) or not system.strip():
        if not instructions:
            raise ValueError(f"{path or 'filter program'}: neither a system message nor signature.instructions")
        system = render_system(instructions, descriptions)
    return FilterProgram(
        instructions=instructions,
        system=system,
        demos=demos,
        field_descriptions={**DEFAULT_FIELD_DESCRIPTIONS, **descriptions},
        path=path,
    )


def load_program(path: Optional[str | Path] = None) -> FilterProgram:
    """Read and validate a saved program; problems raise DataError naming the file and field."""
    from hipporag2.data.validate import validate_filter_program

    p = Path(path) if path else DEFAULT_PROGRAM
    return program_from_dict(validate_filter_program(p), str(p))


def user_message(question: str, facts_before: str) -> str:
    return f"{marker('question')}\n{question}\n\n{marker('fact_before_filter')}\n{facts_before}"


def query_message(question: str, facts_before: str) -> str:
    return (
        user_message(question, facts_before)
        + f"\n\nReply with {marker(OUTPUT_FIELD)} followed by a JSON object "
        + '{"fact": [...]} holding only facts copied from the candidates, then '
        + f"{marker('completed')}."
    )


def assistant_message(facts_after: str) -> str:
    return f"{marker(OUTPUT_FIELD)}\n{facts_after}\n\n{marker('completed')}"


def build_messages(program: FilterProgram, question: str, candidates: Sequence[Sequence[str]]) -> Tuple[Tuple[str, str], ...]:
    msgs: List[Tuple[str, str]] = [("system", program.system)]
    for demo in program.demos:
        msgs.append(("user", user_message(demo["question"], demo["fact_before_filter"])))
        msgs.append(("assistant", assistant_message(demo["fact_after_filter"])))
    msgs.append(("user", query_message(question, facts_json(candidates))))
    return tuple(msgs)


def answer_section(text: str) -> str:
    """The output field's text: after its marker, before the next marker."""
    start = text.find(marker(OUTPUT_FIELD))
    if start >= 0:
        text = text[start + len(marker(OUTPUT_FIELD)) :]
    end = text.find("[[ ##")
    return text[:end] if end >= 0 else text


def parse_filter_answer(text: str) -> Tuple[Optional[List[List[str]]], bool, str]:
    return parse_triples(answer_section(text or ""), keys=("fact", "facts"))


def _fact_text(fact: Sequence[Any]) -> str:
    return " ".join(str(x).strip().lower() for x in fact)


def map_to_candidates(facts: Sequence[Sequence[Any]], candidates: Sequence[Sequence[str]], top_k: int) -> List[int]:
    """Indices of the candidates closest to each returned fact (model order, no repeats)."""
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


class LLMFactFilter:
    name = "llm"

    def __init__(self, llm, program: FilterProgram, top_k: int = 5, constrained: bool = False,
                 progress: bool = True, max_new_tokens: Optional[int] = None):
        self.llm = llm
        self.program = program
        self.top_k = top_k
        self.constrained = constrained
        self.progress = progress
        self.max_new_tokens = max_new_tokens
        self.stats: Dict[str, int] = {"questions": 0, "kept_none": 0, "parse_failures": 0, "llm_failures": 0}

    def select(self, questions: Sequence[str], candidates: Sequence[Sequence[Tuple[str, str, str]]]) -> List[List[int]]:
        out: List[List[int]] = [[] for _ in questions]
        todo = [i for i, c in enumerate(candidates) if len(c) > 0]
        requests = [
            ChatRequest(messages=build_messages(self.program, questions[i], candidates[i]),
                        max_new_tokens=self.max_new_tokens,
                        json_schema=fact_schema(candidates[i]) if self.constrained else None)
            for i in todo
        ]
        responses = self.llm.generate(requests, stage="filter", progress=self.progress) if requests else []
        for i, resp in zip(todo, responses):
            if resp.error is not None:
                self.stats["llm_failures"] += 1
                continue
            facts, ok, _ = parse_filter_answer(resp.text)
            if not ok:
                self.stats["parse_failures"] += 1
                continue
            out[i] = map_to_candidates(facts, candidates[i], self.top_k)
        self.stats["questions"] += len(questions)
        self.stats["kept_none"] += sum(1 for kept in out if not kept)
        if self.stats["parse_failures"] or self.stats["llm_failures"]:
            log.info("fact filter: %s", self.stats)
        return out


def build_filter(cfg, llm) -> LLMFactFilter:
    program = load_program(cfg.retrieval.filter_program)
    log.info("fact filter: program %s (%d demos)", program.path, len(program.demos))
    return LLMFactFilter(
        llm,
        program,
        top_k=cfg.retrieval.linking_top_k,
        constrained=bool(cfg.llm.constrained_decoding),
        progress=bool(cfg.progress),
    )
