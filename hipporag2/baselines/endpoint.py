"""The run's LLM and encoder as an OpenAI-compatible server on 127.0.0.1, for the
baseline systems that run from their own packages (GraphRAG, LightRAG).

Those systems call an LLM and an embedding model over HTTP. Pointing them at this
endpoint, rather than at a model server of their own, means every system of a
comparison is driven by the same backend and decoding settings as HippoRAG 2, and that
their calls go through `LLM.generate`: the response cache (an interrupted indexing pays
only for the calls it had not finished), the token accounting of Table 12 and the
failure counts all come for free.

Concurrent requests are gathered for a moment and answered by one `generate` call from
one worker thread, so a local model sees batches as it does in our own stages.
`temperature` and `seed` are always the run's (`llm.*`); what a system asks for is
ignored, so no system decodes differently from the others.

`GrammarRule`s exist for small CPU models: with `llm.constrained_decoding` on, a
request whose text contains the rule's marker is decoded under the rule's EBNF grammar
(a system's delimited extraction records). Markers are read from the system's own
prompts at run time by its driver; without constrained decoding, rules are ignored.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Sequence

from hipporag2.llm.base import LLM, ChatRequest, ChatResponse

log = logging.getLogger("hipporag2.endpoint")

LLM_MODEL = "hipporag2-llm"
EMBED_MODEL = "hipporag2-embed"

# Any JSON object: what `response_format: {"type": "json_object"}` asks for.
JSON_OBJECT_GRAMMAR = r"""
root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ":" value ( "," string ":" value )* )? "}"
array ::= "[" ( value ( "," value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
"""


@dataclass(frozen=True)
class GrammarRule:
    """Decode a request whose text contains `marker` under `grammar` (EBNF, root `root`)."""

    marker: str
    grammar: str


class EndpointError(ValueError):
    """A request this endpoint cannot serve (answered with HTTP 400)."""


def _text_of(content: Any) -> str:
    """A message's content: a string, or OpenAI's list of parts (text parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise EndpointError(f"message content of type {type(content).__name__} is not supported")


def chat_request(body: dict, rules: Sequence[GrammarRule], max_new_tokens: Optional[int]) -> ChatRequest:
    """The ChatRequest an OpenAI chat-completions body asks for (pure; tested on its own)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise EndpointError("'messages' must be a non-empty list")
    if int(body.get("n") or 1) != 1:
        raise EndpointError("only n=1 is supported")
    msgs = tuple((str(m.get("role", "user")), _text_of(m.get("content"))) for m in messages)
    asked = body.get("max_completion_tokens") or body.get("max_tokens")
    limit = int(asked) if asked else None
    if max_new_tokens is not None:
        limit = min(limit, max_new_tokens) if limit is not None else max_new_tokens
    schema = grammar = None
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema = json.dumps(spec.get("schema", spec))
    elif fmt.get("type") == "json_object":
        grammar = JSON_OBJECT_GRAMMAR
    text = "\n".join(c for _, c in msgs)
    for rule in rules:
        if rule.marker in text:
            grammar, schema = rule.grammar, None
            break
    return ChatRequest(messages=msgs, max_new_tokens=limit, json_schema=schema, grammar=grammar)


def stream_events(body: dict) -> bytes:
    """A finished completion as the server-sent events a `stream=true` client reads:
    the whole text in one delta, then the finish reason (and usage), then [DONE].
    Decoding is not streamed: the events are sent once the answer is complete
    (GraphRAG's local search always asks for a stream)."""
    base = {k: body[k] for k in ("id", "created", "model")}
    choice = body["choices"][0]
    events = [
        dict(base, object="chat.completion.chunk",
             choices=[{"index": 0, "delta": {"role": "assistant", "content": choice["message"]["content"]},
                       "finish_reason": None}]),
        dict(base, object="chat.completion.chunk", choices=[{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
             usage=body["usage"]),
    ]
    return b"".join(b"data: " + json.dumps(e).encode("utf-8") + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def completion_body(response: ChatResponse, model: str, created: int) -> dict:
    return {
        "id": f"chatcmpl-{created}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": response.text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": response.input_tokens, "completion_tokens": response.output_tokens,
                  "total_tokens": response.input_tokens + response.output_tokens},
    }


class _Batcher:
    """One worker thread answering queued chat requests in batches through `llm.generate`."""

    def __init__(self, llm: LLM, endpoint: "LoopbackEndpoint", gather_s: float) -> None:
        self.llm = llm
        self.endpoint = endpoint
        self.gather_s = gather_s
        self.batch = max(1, int(getattr(llm.cfg, "batch_size", 1) or 1), int(getattr(llm.cfg, "max_concurrency", 1) or 1))
        self.queue: "queue.Queue[tuple[ChatRequest, Future] | None]" = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="endpoint-llm", daemon=True)
        self.thread.start()

    def submit(self, request: ChatRequest) -> Future:
        fut: Future = Future()
        self.queue.put((request, fut))
        return fut

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            items = [item]
            deadline = time.monotonic() + self.gather_s
            while len(items) < self.batch:
                try:
                    nxt = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self.queue.put(None)
                    break
                items.append(nxt)
            try:
                out = self.llm.generate([r for r, _ in items], stage=self.endpoint.stage, progress=False)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting HTTP threads
                for _, fut in items:
                    fut.set_exception(exc)
                continue
            for (_, fut), resp in zip(items, out):
                fut.set_result(resp)

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join(timeout=30)


class LoopbackEndpoint:
    """`with LoopbackEndpoint(llm, encoder, stage=...) as ep:` serves on `ep.url` until exit."""

    def __init__(self, llm: LLM | None, encoder: Any = None, *, stage: str,
                 rules: Sequence[GrammarRule] = (), max_new_tokens: Optional[int] = None,
                 embed_instruction: Optional[str] = None, gather_s: float = 0.05) -> None:
        self.llm = llm
        self.encoder = encoder
        self.stage = stage
        self.rules = tuple(rules)
        self.max_new_tokens = max_new_tokens
        self.embed_instruction = embed_instruction
        self.gather_s = gather_s
        self.llm_model = LLM_MODEL
        self.embed_model = EMBED_MODEL
        self.requests = {"chat": 0, "embeddings": 0, "embedded_texts": 0, "errors": 0}
        self._embed_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._batcher: _Batcher | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the endpoint is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def set_stage(self, stage: str) -> None:
        """Account later requests under `stage` in `llm.usage()` (indexing vs queries)."""
        self.stage = stage

    # -- the two services --------------------------------------------------
    def chat(self, body: dict) -> dict:
        if self.llm is None or self._batcher is None:
            raise EndpointError("this endpoint serves no LLM")
        request = chat_request(body, self.rules, self.max_new_tokens)
        response: ChatResponse = self._batcher.submit(request).result()
        self.requests["chat"] += 1
        if response.error is not None:
            raise RuntimeError(f"LLM request failed: {response.error}")
        return completion_body(response, self.llm_model, int(time.time()))

    def embeddings(self, body: dict) -> dict:
        if self.encoder is None:
            raise EndpointError("this endpoint serves no encoder")
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise EndpointError("'input' must be a string or a list of strings (token ids are not supported)")
        with self._embed_lock:  # encoders are not made for concurrent calls
            vectors = self.encoder.encode(texts, self.embed_instruction) if texts else []
        self.requests["embeddings"] += 1
        self.requests["embedded_texts"] += len(texts)
        return {
            "object": "list",
            "model": self.embed_model,
            "data": [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    # -- life cycle ----------------------------------------------------------
    def start(self) -> "LoopbackEndpoint":
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # quiet: systems send thousands
                log.debug("endpoint: " + fmt, *args)

            def _reply(self, status: int, payload: dict, stream: bool = False) -> None:
                data = stream_events(payload) if stream else json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/") in ("/health", "/v1/health"):
                    self._reply(200, {"status": "ok"})
                elif self.path.rstrip("/") == "/v1/models":
                    names = [m for m, on in ((endpoint.llm_model, endpoint.llm), (endpoint.embed_model, endpoint.encoder))
                             if on is not None]
                    self._reply(200, {"object": "list", "data": [{"id": n, "object": "model"} for n in names]})
                else:
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                route = self.path.rstrip("/")
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    if route.endswith("/chat/completions"):
                        self._reply(200, endpoint.chat(body), stream=bool(body.get("stream")))
                    elif route.endswith("/embeddings"):
                        self._reply(200, endpoint.embeddings(body))
                    else:
                        self._reply(404, {"error": {"message": f"no route {self.path}"}})
                except (EndpointError, json.JSONDecodeError) as exc:
                    endpoint.requests["errors"] += 1
                    self._reply(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                except Exception as exc:  # noqa: BLE001 - the client sees a server error and may retry
                    endpoint.requests["errors"] += 1
                    log.warning("endpoint: %s failed: %s", route, exc)
                    self._reply(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.llm is not None:
            self._batcher = _Batcher(self.llm, self, self.gather_s)
        self._thread = threading.Thread(target=self._server.serve_forever, name="endpoint-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._batcher is not None:
            self._batcher.stop()
            self._batcher = None

    def __enter__(self) -> "LoopbackEndpoint":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
