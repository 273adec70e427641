"""A loopback OpenAI-compatible chat-completions endpoint that fails on purpose.

THIS IS A FAULT INJECTOR IN FRONT OF AN ANSWER SOURCE, NOT AN LLM. What the tests
exercise through it is our side of the wire: the openai backend's retries, the
response cache, OpenIE's checkpoint and failure gate, the QA checkpoint and gate, and
what the CLI prints. It fails the way real servers do: it dies after N answers (the
socket is closed, later connections are refused, requests in flight are dropped),
answers 500 or 429 with Retry-After, drops connections without a reply, or answers
after the client's timeout.

What it answers when it answers comes from one of two sources:
- `ModelProxy`: a real model in the test process (SmolLM2 through the transformers
  backend), asked with the request's messages, `max_tokens` and JSON schema;
- `harness_answer`, where a test needs no model and must stay fast: made
  deterministically from the request, by rule, so that a run is repeatable and a
  rerun can be compared byte for byte with an uninterrupted run. NER lists the
  capitalised names of the last user message, the triple step chains the named
  entities it was given, the fact filter keeps every candidate, the reader answers
  with the question's first name. No test reads these answers as model quality. They
  are routed by the request's shape (filter fields, a `named_entities` object, an
  `Answer:` instruction), which our prompts and the reference's share.
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional

# What the server does with the n-th request (1-based) whose last user message is
# `text`: "ok", "500", "429", "drop" (close without a reply), "slow" (answer after
# `slow_s`, past the client's timeout).
Plan = Callable[[int, str], str]

_NAME = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*")
_NOT_NAMES = {"Paragraph", "Question", "Named", "Passage", "Reasoning", "Answer", "Respond", "In", "The", "Who", "Which"}


def _names(text: str) -> List[str]:
    out: List[str] = []
    for m in _NAME.finditer(text):
        words = [w for w in m.group(0).split() if w not in _NOT_NAMES]
        name = " ".join(words)
        if name and name not in out:
            out.append(name)
    return out


def request_kind(messages: List[dict]) -> str:
    """filter | triples | qa | ner, by the request's shape."""
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    last = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if "fact_before_filter" in last:
        return "filter"
    if re.search(r'\{"named_entities":\s*\[', last):
        return "triples"
    return "qa" if "Answer:" in system else "ner"


def harness_answer(body: dict) -> str:
    """The reply text for a chat request, made by rule from the request (module docstring)."""
    messages = body["messages"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    last = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if "fact_before_filter" in last:
        facts = last.split("fact_before_filter ## ]]", 1)[1].strip().split("\n", 1)[0]
        return f"[[ ## fact_after_filter ## ]]\n{facts}\n\n[[ ## completed ## ]]"
    given = re.search(r'\{"named_entities":\s*(\[.*?\])\}', last)
    if given:
        ents = json.loads(given.group(1))
        return json.dumps({"triples": [[a, "appears with", b] for a, b in zip(ents, ents[1:])]})
    if "Answer:" in system:
        question = last.rsplit("Question:", 1)[-1]
        names = _names(question)
        return f"The passages name it.\nAnswer: {names[0] if names else 'unknown'}"
    return json.dumps({"named_entities": _names(last)})


class ModelProxy:
    """Answers each request with a real model in this process (an `hipporag2.llm` LLM,
    e.g. SmolLM2 on the transformers backend), one request at a time, with the request's
    `max_tokens` and `response_format` schema (decoded under it when the model's config
    has constrained decoding on). Its own response cache makes a repeated request cost
    nothing, so a clean run and a faulty one see the same answers."""

    def __init__(self, llm):
        self.llm = llm
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> str:
        from hipporag2.llm.base import ChatRequest

        fmt = body.get("response_format") or {}
        schema = fmt.get("json_schema", {}).get("schema") if fmt.get("type") == "json_schema" else None
        request = ChatRequest(messages=tuple((m["role"], m["content"]) for m in body["messages"]),
                              max_new_tokens=body.get("max_tokens"),
                              json_schema=json.dumps(schema) if schema is not None else None)
        with self._lock:
            [reply] = self.llm.generate([request], stage="proxy", progress=False)
        if reply.error is not None:
            raise RuntimeError(f"the model behind the proxy failed: {reply.error}")
        return reply.text


class FaultyServer:
    """The server on a free loopback port; `url` is its OpenAI base URL.

    `plan` decides each request's fate; `die_after`: after that many answers the
    server dies for good. `received` counts every POST that reached it (retries
    included), `answered` the ones it answered."""

    def __init__(self, plan: Optional[Plan] = None, die_after: Optional[int] = None, slow_s: float = 0.0,
                 answer: Callable[[dict], str] = harness_answer):
        self.plan = plan or (lambda n, text: "ok")
        self.die_after, self.slow_s, self.answer = die_after, slow_s, answer
        self.received = 0
        self.answered = 0
        self.actions: Dict[str, int] = {}
        self.kinds: Dict[str, int] = {}  # requests received by `request_kind`
        self.dead = False
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                owner._handle(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _handle(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        messages = body["messages"]
        last = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        with self._lock:
            self.received += 1
            n = self.received
            kind = request_kind(messages)
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            action = "dead" if self.dead else self.plan(n, last)
            self.actions[action] = self.actions.get(action, 0) + 1
        if action in ("dead", "drop"):
            h.close_connection = True  # no status line at all: the client sees a dropped connection
            return
        if action in ("500", "429"):
            payload = json.dumps({"error": {"message": f"fault injected: {action}"}}).encode()
            h.send_response(int(action))
            if action == "429":
                h.send_header("Retry-After", "0")
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
            return
        if action == "slow":
            time.sleep(self.slow_s)
        text = self.answer(body)
        payload = json.dumps({
            "id": f"fault-{n}", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": sum(len(m["content"].split()) for m in messages),
                      "completion_tokens": len(text.split())},
        }).encode()
        with self._lock:
            if self.dead:  # died while this one was being made: it never leaves
                h.close_connection = True
                return
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
            self.answered += 1
            if self.die_after is not None and self.answered >= self.die_after:
                self.dead = True
                threading.Thread(target=self._die, daemon=True).start()

    def _die(self) -> None:
        """Stop listening: later connections are refused, as from a crashed server."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def close(self) -> None:
        if not self.dead:
            self.dead = True
            self._die()
