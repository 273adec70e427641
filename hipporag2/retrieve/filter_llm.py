"""Recognition memory (SPEC §3.3): an LLM keeps the candidate facts relevant to a question,
from a program (`filter_program`), in the reference's messages (`filter_messages`), its
reply read by a `filter_parse` rule, in at most `retrieval.filter_max_new_tokens` new
tokens. A reply with no readable fact, or a failed call, keeps nothing: the query falls
back to the dense ranking (SPEC §3.4), as the reference's does. Replies are counted by
outcome in `stats` (metrics.json `filter_stats`), the program's name and hash in
`program_info`.
"""
from __future__ import annotations

import json
import logging
from typing import Dict, List, Optional, Sequence, Tuple

from hipporag2.llm.base import ChatRequest
from hipporag2.retrieve.filter_messages import ChatTemplate, build_messages
from hipporag2.retrieve.filter_parse import OUTCOMES, ReplyReader, reply_reader
from hipporag2.retrieve.filter_program import FilterProgram, load_program

log = logging.getLogger("hipporag2.filter")

# The reference's filter call asks for at most this many completion tokens.
REFERENCE_MAX_NEW_TOKENS = 512


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


class LLMFactFilter:
    name = "llm"

    def __init__(self, llm, program: FilterProgram, top_k: int = 5, constrained: bool = False,
                 progress: bool = True, max_new_tokens: Optional[int] = REFERENCE_MAX_NEW_TOKENS,
                 reader: Optional[ReplyReader] = None, template: Optional[ChatTemplate] = None):
        self.llm = llm
        self.program = program
        self.template = template or ChatTemplate.from_dspy()
        self.reader = reader or reply_reader("reference")
        self.top_k = top_k
        self.constrained = constrained
        self.progress = progress
        self.max_new_tokens = max_new_tokens
        self.stats: Dict[str, object] = {
            "parser": self.reader.name, "questions": 0, "requests": 0,
            **{o: 0 for o in OUTCOMES}, "llm_failures": 0, "kept_none": 0,
        }

    @property
    def program_info(self) -> Dict[str, object]:
        return {**self.program.describe(), "chat_format": self.template.source}

    def messages(self, question: str, candidates: Sequence[Sequence[str]]) -> Tuple[Tuple[str, str], ...]:
        return build_messages(self.program, question, candidates, self.template)

    def select(self, questions: Sequence[str], candidates: Sequence[Sequence[Tuple[str, str, str]]]) -> List[List[int]]:
        out: List[List[int]] = [[] for _ in questions]
        todo = [i for i, c in enumerate(candidates) if len(c) > 0]
        requests = [
            ChatRequest(messages=self.messages(questions[i], candidates[i]),
                        max_new_tokens=self.max_new_tokens,
                        json_schema=fact_schema(candidates[i]) if self.constrained else None)
            for i in todo
        ]
        responses = self.llm.generate(requests, stage="filter", progress=self.progress) if requests else []
        for i, resp in zip(todo, responses):
            if resp.error is not None:
                self.stats["llm_failures"] += 1
                continue
            out[i], outcome = self.reader.select(resp.text, candidates[i], self.top_k)
            self.stats[outcome] += 1
        self.stats["questions"] += len(questions)
        self.stats["requests"] += len(requests)
        self.stats["kept_none"] += sum(1 for kept in out if not kept)
        if self.stats["unparsable"] or self.stats["llm_failures"]:
            log.info("fact filter: %s", self.stats)
        return out


def build_filter(cfg, llm) -> LLMFactFilter:
    r = cfg.retrieval
    program = load_program(r.filter_program)
    f = LLMFactFilter(
        llm,
        program,
        top_k=r.linking_top_k,
        constrained=bool(cfg.llm.constrained_decoding),
        progress=bool(cfg.progress),
        max_new_tokens=r.filter_max_new_tokens,
        reader=reply_reader(r.filter_parse),
    )
    log.info("fact filter: program %s (%s, %d demos, sha256 %s), %s, replies read by the %s rule",
             program.name, program.path, len(program.demos), program.sha256[:16], f.template.source, f.reader.name)
    return f


def llm_filter(cfg, llm) -> LLMFactFilter:
    """retrieval.filter=llm (registry FILTERS): `llm` is the run's LazyLLM, built here."""
    return build_filter(cfg, llm.get())
