"""LLM backend failure modes not covered by test_llm_backends.py: garbage bodies,
connection refused, connections dropped mid-reply. None may raise out of `generate`
(on_failure=record), cache a failure, or leak into the response cache."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from hipporag2.llm.base import ChatRequest, build_llm
from hipporag2.llm.config import LLMConfig


def cfg(url: str, **kw) -> LLMConfig:
    base = dict(name="t", backend="openai", model="m", base_url=url, api_key_env="HIPPORAG2_TEST_NO_KEY",
                max_new_tokens=4, max_concurrency=2, timeout_s=5.0, max_retries=2, backoff_s=0.01)
    base.update(kw)
    return LLMConfig(**base)


def ask(text: str) -> ChatRequest:
    return ChatRequest(messages=(("user", text),))


class RawServer:
    """A loopback HTTP server that answers each request with scripted raw bytes
    (None = close the connection without a reply)."""

    def __init__(self, replies):
        self.replies = replies
        self.hits = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(body) < length:
                    body += conn.recv(65536)
                self.hits += 1
                reply = self.replies(self.hits)
                if reply is not None:
                    conn.sendall(reply)

    def close(self):
        self._stop = True
        self.sock.close()


def http(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


GOOD = b'{"choices": [{"message": {"role": "assistant", "content": "fine"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}'


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"choices": [{"message": {"content": "tru',  # truncated JSON
        b"[1, 2, 3]",
        b'{"choices": []}',
        b'{"choices": [{"message": {"content": null}}]}',
        b'{"choices": "nope"}',
        b"\xff\xfe\x00garbage",
    ],
)
def test_garbage_body_is_a_recorded_failure_not_cached(tmp_path: Path, body: bytes):
    srv = RawServer(lambda n: http(200, body))
    try:
        llm = build_llm(cfg(srv.url), tmp_path)
        [r] = llm.generate([ask("x")], stage="qa", progress=False)
        assert r.text == "" and r.error and llm.usage()["qa"]["failures"] == 1
        [r2] = llm.generate([ask("x")], stage="qa", progress=False)
        assert not r2.cached and r2.error  # never cached: a later run asks again
    finally:
        srv.close()


def test_connection_refused_is_retried_then_recorded(tmp_path: Path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on this port now
    llm = build_llm(cfg(f"http://127.0.0.1:{port}/v1", max_retries=2), tmp_path)
    t0 = time.monotonic()
    [r] = llm.generate([ask("x")], stage="openie_ner", progress=False)
    assert time.monotonic() - t0 < 5
    assert r.text == "" and "connection error" in r.error and "3 attempts" in r.error


def test_dropped_connection_then_recovery(tmp_path: Path):
    srv = RawServer(lambda n: None if n == 1 else http(200, GOOD))
    try:
        llm = build_llm(cfg(srv.url), tmp_path)
        [r] = llm.generate([ask("x")], stage="qa", progress=False)
        assert r.error is None and r.text == "fine" and srv.hits == 2
    finally:
        srv.close()
