"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM serve, llama.cpp).

Remote calls fail in ordinary ways (rate limits, restarts, slow replies), and a
multi-hour indexing run must ride through them: each request is retried with
exponential backoff on 429, 5xx, connection errors and timeouts, and only
then recorded as a failure.  Requests run on a bounded thread pool so a
server is never flooded, and results reach the cache as they complete.

The API key is read from the environment variable named by `api_key_env` at
construction and kept only in the HTTP client's headers: it is never logged,
never part of an error message and never part of a cache key.
"""
from __future__ import annotations

import json
import logging
import os
import random
import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import httpx

from hipporag2.llm.base import LLM, ChatResponse, Emit, Job
from hipporag2.llm.cache import ResponseCache
from hipporag2.llm.config import LLMConfig

log = logging.getLogger(__name__)

_MAX_BACKOFF_S = 60.0


class _Permanent(Exception):
    """A failure that retrying cannot fix (bad request, auth, malformed reply)."""


class _Transient(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def response_format(json_schema: str) -> dict[str, Any]:
    """The `response_format` for a schema.

    Strict mode (OpenAI's guaranteed schema adherence) requires every object
    to forbid extra properties, so it is asked for only when the schema
    already says `additionalProperties: false`; otherwise the server treats
    the schema as best effort instead of rejecting the request.
    """
    schema = json.loads(json_schema)
    title = str(schema.get("title", "response")) if isinstance(schema, dict) else "response"
    name = re.sub(r"[^A-Za-z0-9_-]", "_", title)[:64] or "response"
    strict = isinstance(schema, dict) and schema.get("additionalProperties") is False
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


class OpenAILLM(LLM):
    def __init__(self, cfg: LLMConfig, cache: ResponseCache | None) -> None:
        super().__init__(cfg, cache)
        if not cfg.base_url:
            raise ValueError("llm.base_url is required for the openai backend")
        self.model_id = cfg.model
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        else:
            log.info("no API key in $%s; sending unauthenticated requests (fine for local servers)",
                     cfg.api_key_env)
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout_s),
            limits=httpx.Limits(max_connections=max(1, cfg.max_concurrency),
                                max_keepalive_connections=max(1, cfg.max_concurrency)),
        )

    # -- one request --------------------------------------------------------
    def payload(self, job: Job) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": [{"role": role, "content": content} for role, content in job.messages],
            "temperature": self.cfg.temperature,
            "max_tokens": job.max_new_tokens,
            "seed": self.cfg.seed,
        }
        if job.json_schema is not None:
            body["response_format"] = response_format(job.json_schema)
        if job.grammar is not None:
            # A vLLM server's extension (OpenAI's own API has no grammars).
            body["structured_outputs"] = {"grammar": job.grammar}
        return body

    def _attempt(self, body: dict[str, Any]) -> ChatResponse:
        try:
            r = self._client.post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise _Transient(f"timeout after {self.cfg.timeout_s}s ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise _Transient(f"connection error ({type(exc).__name__}: {exc})") from None
        if r.status_code == 429 or r.status_code >= 500:
            raise _Transient(f"HTTP {r.status_code}: {r.text[:200]}", _retry_after(r))
        if r.status_code != 200:
            raise _Permanent(f"HTTP {r.status_code}: {r.text[:500]}")
        try:
            data = r.json()
            message = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Permanent(f"malformed response: {r.text[:200]}") from None
        content = message.get("content")
        if content is None:
            refusal = message.get("refusal")
            raise _Permanent(f"no content in response{f' (refusal: {refusal})' if refusal else ''}")
        usage = data.get("usage") or {}
        return ChatResponse(
            text=str(content),
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
            cached=False,
        )

    def request(self, job: Job) -> ChatResponse:
        """Send one job, retrying transient failures; never raises."""
        body = self.payload(job)
        attempts = 1 + max(0, self.cfg.max_retries)
        last = "no attempt made"
        for attempt in range(attempts):
            try:
                return self._attempt(body)
            except _Permanent as exc:
                return ChatResponse("", 0, 0, False, error=str(exc))
            except _Transient as exc:
                last = str(exc)
                if attempt + 1 == attempts:
                    break
                delay = self.cfg.backoff_s * (2**attempt) * (1 + 0.25 * random.random())
                if exc.retry_after is not None:
                    delay = max(delay, exc.retry_after)
                delay = min(delay, _MAX_BACKOFF_S)
                log.debug("transient failure (%s); retry %d/%d in %.2fs", last, attempt + 1,
                          attempts - 1, delay)
                time.sleep(delay)
        return ChatResponse("", 0, 0, False, error=f"{last} (after {attempts} attempts)")

    # -- the batch ----------------------------------------------------------
    def _complete(self, jobs: list[Job], emit: Emit, progress: bool) -> None:
        workers = max(1, min(self.cfg.max_concurrency, len(jobs)))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http")
        # Submit lazily (at most 2x the pool ahead) so a huge call does not
        # queue millions of futures, and a "stop" failure cancels little.
        todo = iter(jobs)
        running: dict[Future[ChatResponse], Job] = {}
        try:
            def top_up() -> None:
                while len(running) < 2 * workers:
                    job = next(todo, None)
                    if job is None:
                        return
                    running[pool.submit(self.request, job)] = job

            top_up()
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    emit(running.pop(fut), fut.result())
                top_up()
        except BaseException:
            # Stopping (on_failure="stop" or Ctrl-C): do not wait for the
            # requests still in flight, their answers would be discarded.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def close(self) -> None:
        self._client.close()
