"""Named entities of questions, for NER-to-node linking (HippoRAG v1 and the ablation).

One batched LLM call per batch of questions (stage "query_ner"), one-shot prompt of
`llm.prompts` (`prompts.OpenIEPrompts.query_ner`: the reference's `ner_query` template or
our own), answers read as `openie.parse` says (the reference's reading by default,
which keeps elements that are not strings: the retriever decides). An unreadable answer gives no
entities for that question (the retriever then has no phrase seeds for it) and is
counted in `stats`.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Sequence

from hipporag2.llm.base import ChatRequest
from hipporag2.openie import prompts
from hipporag2.openie.extract import openie_reader, reply_is_cut
from hipporag2.openie.parse import LENIENT_READER, OpenIEReader

log = logging.getLogger("hipporag2.query_ner")


class QueryNER:
    def __init__(self, llm, constrained: bool = False, progress: bool = True, max_new_tokens: int | None = None,
                 reader: OpenIEReader = LENIENT_READER, prompt_set: prompts.OpenIEPrompts = prompts.OpenIEPrompts()):
        self.llm = llm
        self.prompt_set = prompt_set
        # Which prompt ran (source, template sha256), for metrics.json.
        self.prompt_info = prompt_set.describe(prompts.QUERY_NER_TEMPLATE)
        self.reader = reader
        self.constrained = constrained
        self.progress = progress
        self.max_new_tokens = max_new_tokens
        self.stats: Dict[str, int] = {"questions": 0, "parse_failures": 0, "llm_failures": 0, "without_entities": 0}

    def __call__(self, questions: Sequence[str]) -> List[List[str]]:
        schema = prompts.NER_SCHEMA if self.constrained else None
        requests = [
            ChatRequest(messages=self.prompt_set.query_ner(q), max_new_tokens=self.max_new_tokens, json_schema=schema)
            for q in questions
        ]
        responses = self.llm.generate(requests, stage="query_ner", progress=self.progress)
        out: List[List[str]] = []
        for resp in responses:
            self.stats["questions"] += 1
            if resp.error is not None:
                self.stats["llm_failures"] += 1
                out.append([])
                continue
            limit = self.max_new_tokens or getattr(getattr(self.llm, "cfg", None), "max_new_tokens", None)
            value, ok, _ = self.reader.entities(resp.text, reply_is_cut(resp, limit))
            if not ok:
                self.stats["parse_failures"] += 1
                value = []
            if not value:
                self.stats["without_entities"] += 1
            out.append(value)
        if self.stats["parse_failures"] or self.stats["llm_failures"]:
            log.warning("query NER: %s", self.stats)
        return out


def build_query_ner(cfg, llm) -> QueryNER:
    """Query NER replies are read like OpenIE's NER replies (`openie.parse`)."""

    return QueryNER(llm, constrained=bool(cfg.llm.constrained_decoding), progress=bool(cfg.progress),
                    reader=openie_reader(cfg.openie), prompt_set=prompts.openie_prompts(cfg.llm.prompts))
