"""The backend-independent half of every LLM: caching, accounting, failures.

Pipeline stages (OpenIE, the recognition-memory filter, QA) only ever see
`LLM.generate`, so that swapping a local model for a server or for vLLM
changes neither their code nor their cache behaviour.  Backends implement
one hook, `_complete`, which receives only the requests the cache could not
answer and reports each result as soon as it has it; results are written to
the cache in small transactions while the call is still running, so an
interrupted run keeps most of what it paid for.
"""
from __future__ import annotations

import abc
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from tqdm.auto import tqdm

from hipporag2.llm.cache import CachedResponse, ResponseCache, cache_key
from hipporag2.llm.config import LLMConfig

log = logging.getLogger(__name__)

CACHE_FILENAME = "llm_responses.sqlite"
# Small enough that a crash loses little, large enough that commits stay cheap.
_FLUSH_EVERY = 32


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[tuple[str, str], ...]  # ((role, content), ...)
    max_new_tokens: int | None = None  # None -> cfg.max_new_tokens
    json_schema: str | None = None  # JSON schema text; used only when cfg.constrained_decoding
    # EBNF grammar (xgrammar's / vLLM's dialect); used only when cfg.constrained_decoding.
    # For formats that are not JSON (a baseline system's delimited extraction records).
    grammar: str | None = None


@dataclass
class ChatResponse:
    text: str
    input_tokens: int
    output_tokens: int
    cached: bool
    error: str | None = None  # set when the request failed permanently (text "")


@dataclass(frozen=True)
class Job:
    """One cache miss, with the settings already resolved against the config."""

    key: str
    messages: tuple[tuple[str, str], ...]
    max_new_tokens: int
    json_schema: str | None  # None unless constrained decoding is on
    grammar: str | None = None  # None unless constrained decoding is on


Emit = Callable[[Job, ChatResponse], None]


class LLMRequestError(RuntimeError):
    """A request failed permanently while `on_failure` is "stop"."""

    def __init__(self, stage: str, error: str) -> None:
        super().__init__(f"LLM request failed permanently in stage {stage!r}: {error}")
        self.stage = stage
        self.error = error


def messages_of(request: ChatRequest | Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    msgs = request.messages if isinstance(request, ChatRequest) else request
    return tuple((str(role), str(content)) for role, content in msgs)


def _empty_usage() -> dict[str, int]:
    return {
        "requests": 0,
        "cache_hits": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "failures": 0,
        # Calls that reached the backend (each with all of a generate call's misses):
        # for vLLM, one engine.generate per call.
        "backend_calls": 0,
        # Tokens a cache hit would have cost: lets reports show the full bill.
        "cached_input_tokens": 0,
        "cached_output_tokens": 0,
    }


class LLM(abc.ABC):
    model_id: str

    def __init__(self, cfg: LLMConfig, cache: ResponseCache | None) -> None:
        from hipporag2.registry import LLM_ON_FAILURE

        LLM_ON_FAILURE.check(cfg.on_failure)
        self.cfg = cfg
        self.cache = cache
        # Requests actually handed to the backend: lets callers and tests tell a
        # cache hit from a model call without instrumenting the model.
        self.requests_sent = 0
        # Where a backend with an engine of its own writes that engine's log (vLLM);
        # set by build_llm, None: the working directory.
        self.log_dir: Path | None = None
        self._usage: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    # -- backend hook -------------------------------------------------------
    @abc.abstractmethod
    def _complete(self, jobs: list[Job], emit: Emit, progress: bool) -> None:
        """Answer every job by calling `emit(job, response)` exactly once.

        Must be called from the thread that runs `generate`; an exception
        raised by `emit` (on_failure="stop") must be let through.
        """

    # -- public API ---------------------------------------------------------
    def key_of(self, request: ChatRequest) -> str:
        return cache_key(
            self.model_id,
            messages_of(request),
            self.cfg.temperature,
            self._max_new_tokens(request),
            self.cfg.seed,
            request.json_schema if self.cfg.constrained_decoding else None,
            request.grammar if self.cfg.constrained_decoding else None,
        )

    def generate(
        self, requests: Sequence[ChatRequest], *, stage: str, progress: bool = True
    ) -> list[ChatResponse]:
        requests = list(requests)
        keys = [self.key_of(r) for r in requests]
        hits = self.cache.get_many(keys) if self.cache is not None else {}
        results: list[ChatResponse | None] = [None] * len(requests)
        pending: dict[str, list[int]] = {}
        jobs: list[Job] = []
        n_in_cached = n_out_cached = 0
        for i, (req, key) in enumerate(zip(requests, keys)):
            hit = hits.get(key)
            if hit is not None:
                results[i] = ChatResponse(hit.text, hit.input_tokens, hit.output_tokens, cached=True)
                n_in_cached += hit.input_tokens
                n_out_cached += hit.output_tokens
                continue
            if key not in pending:
                # Identical requests within one call are sent once.
                pending[key] = []
                jobs.append(
                    Job(
                        key=key,
                        messages=messages_of(req),
                        max_new_tokens=self._max_new_tokens(req),
                        json_schema=req.json_schema if self.cfg.constrained_decoding else None,
                        grammar=req.grammar if self.cfg.constrained_decoding else None,
                    )
                )
            pending[key].append(i)

        with self._lock:
            u = self._usage.setdefault(stage, _empty_usage())
            u["requests"] += len(requests)
            u["cache_hits"] += len(requests) - sum(len(v) for v in pending.values())
            u["cached_input_tokens"] += n_in_cached
            u["cached_output_tokens"] += n_out_cached
            self.requests_sent += len(jobs)
        if not jobs:
            out = [r for r in results if r is not None]
            self._write_transcript(stage, requests, out)
            return out
        with self._lock:
            self._usage[stage]["backend_calls"] += 1

        buffer: dict[str, CachedResponse] = {}
        answered: set[str] = set()
        bar = tqdm(total=len(jobs), desc=f"LLM {stage}", unit="req", disable=not progress, leave=False)
        if progress and hits:
            bar.set_postfix(cached=len(requests) - sum(len(v) for v in pending.values()))

        def flush() -> None:
            if buffer and self.cache is not None:
                self.cache.put_many(self.model_id, buffer)
            buffer.clear()

        def emit(job: Job, response: ChatResponse) -> None:
            if job.key in answered:
                return
            answered.add(job.key)
            response.cached = False
            for i in pending[job.key]:
                results[i] = ChatResponse(
                    response.text, response.input_tokens, response.output_tokens, False, response.error
                )
            bar.update(1)
            with self._lock:
                u = self._usage[stage]
                u["input_tokens"] += response.input_tokens
                u["output_tokens"] += response.output_tokens
                if response.error is not None:
                    u["failures"] += len(pending[job.key])
            if response.error is not None:
                log.warning("LLM request failed in stage %s: %s", stage, response.error)
                if self.cfg.on_failure == "stop":
                    raise LLMRequestError(stage, response.error)
                return
            buffer[job.key] = CachedResponse(response.text, response.input_tokens, response.output_tokens)
            if len(buffer) >= _FLUSH_EVERY:
                flush()

        try:
            self._complete(jobs, emit, progress)
        finally:
            flush()
            bar.close()

        missing = [job for job in jobs if job.key not in answered]
        for job in missing:  # a backend bug must not surface as None downstream
            emit(job, ChatResponse("", 0, 0, False, error="backend returned no response"))
        out = [r for r in results if r is not None]
        self._write_transcript(stage, requests, out)
        return out

    def _write_transcript(self, stage: str, requests: Sequence[ChatRequest],
                          responses: Sequence[ChatResponse]) -> None:
        """Append one JSON line per request to `cfg.transcript_path` (when set)."""
        if not self.cfg.transcript_path:
            return
        path = Path(self.cfg.transcript_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(path, "a", encoding="utf-8") as f:
            for req, resp in zip(requests, responses):
                f.write(json.dumps({
                    "stage": stage,
                    "model": self.model_id,
                    "messages": [list(m) for m in messages_of(req)],
                    "max_new_tokens": self._max_new_tokens(req),
                    "json_schema": req.json_schema if self.cfg.constrained_decoding else None,
                    "grammar": req.grammar if self.cfg.constrained_decoding else None,
                    "text": resp.text,
                    "input_tokens": resp.input_tokens,
                    "output_tokens": resp.output_tokens,
                    "cached": resp.cached,
                    "error": resp.error,
                }, ensure_ascii=False) + "\n")

    def usage(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {stage: dict(u) for stage, u in self._usage.items()}

    def engine_report(self) -> dict:
        """Facts about the backend's engine for metrics.json ({} when it has none to tell)."""
        return {}

    def close(self) -> None:
        """Release backend resources; the cache belongs to whoever opened it."""

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ------------------------------------------------------------
    def _max_new_tokens(self, request: ChatRequest) -> int:
        n = request.max_new_tokens if request.max_new_tokens is not None else self.cfg.max_new_tokens
        if n < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {n}")
        return int(n)


def open_cache(cache_dir: str | Path | None) -> ResponseCache | None:
    if cache_dir is None:
        return None
    return ResponseCache(Path(cache_dir) / CACHE_FILENAME)


def build_llm(cfg: LLMConfig, cache_dir: str | Path | None, log_dir: str | Path | None = None) -> LLM:
    """Build the backend named by `cfg.backend`, sharing the cache under `cache_dir`.

    Backends are imported here, not at module import, so that an OpenAI-only
    run never imports torch and a CPU machine never needs vLLM. `log_dir` receives
    an engine's own log (vLLM: `vllm_engine.log`; default: the working directory).
    """
    if cfg.name == "none" or not cfg.model:
        raise ValueError(
            f"llm config {cfg.name!r} names no model; this run needs an LLM "
            "(choose e.g. llm=smollm2_cpu, llm=gpt4o_mini or llm=llama33_70b_vllm)"
        )
    from hipporag2.registry import LLM_BACKENDS

    backend = LLM_BACKENDS.load(cfg.backend)  # UnknownChoice before the cache is opened
    llm = backend(cfg, open_cache(cache_dir))
    llm.log_dir = Path(log_dir) if log_dir is not None else None
    return llm
