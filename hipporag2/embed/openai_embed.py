"""Embeddings from any OpenAI-compatible `/v1/embeddings` server (vLLM, TEI, a hosted API).

Trust before use. On construction the client asks the server which models it serves
(`GET /models`; a wrong `embedding.model` stops in one line naming what is served)
and embeds a fixed probe text. The probe's dimension and vector are the server's
fingerprint: the embedding cache folder is keyed on the model name, the settings
that change vectors, and that fingerprint (`store_folder`), so another model served
under the same name gets a cache of its own instead of being mixed into this one.
A vector whose dimension differs from the probe's, later in the run, stops the run.

What is sent. The texts are the in-process encoder's: `prompts.sent_texts` puts the
preset's query or passage prefix in front. Inputs longer than `embedding.max_length`
tokens are cut by the server, as asked per request (`embedding.truncation`): vLLM
reads `truncate_prompt_tokens` (the first max_length tokens are kept for a BERT
tokenizer, whose truncation side is the right, as sentence-transformers cuts), Text
Embeddings Inference reads `truncate: true` (its own --max-input-length), `none`
asks nothing and an oversized input is the server's one-line error.

How. Requests hold at most `batch_size` texts and about `batch_tokens` tokens
(estimated from the text's length, capped at max_length), run `max_concurrency` at a
time, and each is retried with exponential backoff on 429, 5xx, timeouts and dropped
connections for up to `retry_window_s` seconds: a server restarted mid-run is waited
for, and only the requests that had not been answered are sent again (answered ones
are kept; the store above writes finished rows to disk in shards).

The API key is read from the environment variable NAMED by `embedding.api_key_env`
and kept only in the HTTP client's headers: never logged, in an error or a cache key.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import httpx
import numpy as np

from hipporag2.embed import prompts
from hipporag2.embed.encoders import Encoder, l2_normalise
from hipporag2.embed.errors import EncoderError

log = logging.getLogger(__name__)

# Embedded once per client: the server's fingerprint. Never change it (cache folders
# are found by comparing against the vector stored beside them).
PROBE_TEXT = "HippoRAG 2 embedding server probe: the quick brown fox jumps over the lazy dog."
# Cosine above which a probe vector is the same model's (float noise across batches,
# kernels or restarts stays far below; another model lands far above).
SAME_MODEL_COSINE = 0.999
_MAX_BACKOFF_S = 30.0


class _Transient(Exception):
    def __init__(self, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def estimate_tokens(text: str, max_length: int, truncated: bool) -> int:
    """A generous token estimate (about 3 bytes a token for English subwords, plus the
    special tokens); only used to size requests."""
    n = math.ceil(len(text.encode("utf-8")) / 3) + 2
    return min(n, max_length) if truncated else n


def plan_requests(texts: List[str], batch_size: int, batch_tokens: int, max_length: int,
                  truncated: bool) -> List[Tuple[int, int]]:
    """[start, end) slices of `texts`, each at most batch_size texts and batch_tokens
    estimated tokens (a single longer text goes alone)."""
    out, start, tokens = [], 0, 0
    for i, t in enumerate(texts):
        n = estimate_tokens(t, max_length, truncated)
        if i > start and (i - start >= batch_size or tokens + n > batch_tokens):
            out.append((start, i))
            start, tokens = i, 0
        tokens += n
    if start < len(texts):
        out.append((start, len(texts)))
    return out


class OpenAICompatibleEncoder(Encoder):
    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        if not cfg.base_url:
            raise EncoderError("embedding.backend=openai_compatible needs embedding.base_url (the server's /v1 URL)")
        if not cfg.model:
            raise EncoderError("embedding.backend=openai_compatible needs embedding.model (the served model name)")
        self.base = cfg.base_url.rstrip("/")
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        if cfg.api_key_env and not key:
            log.info("no API key in $%s; sending unauthenticated requests (fine for local servers)", cfg.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        n = max(1, cfg.max_concurrency)
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(cfg.timeout_s),
                                    limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
        self._lock = threading.Lock()
        self.texts_answered = 0  # texts whose vectors came back (each counted once)
        self.texts_sent = 0  # texts put in a request, every attempt counted
        self.retried_requests = 0
        self.check_model()
        self.probe = self._post([PROBE_TEXT])[0]
        self.dim = int(self.probe.shape[0])

    # -- trust -----------------------------------------------------------------
    def served_models(self) -> List[str]:
        r = self._send("GET", "/models", None)
        try:
            return [str(m["id"]) for m in r.json()["data"]]
        except (ValueError, KeyError, TypeError):
            return []  # a server without a model list: the probe request still names a wrong model

    def check_model(self) -> None:
        served = self.served_models()
        if served and self.cfg.model not in served:
            raise EncoderError(f"embedding.model={self.cfg.model!r} is not served at {self.base} "
                               f"(it serves {', '.join(repr(s) for s in served)})")

    @property
    def fingerprint(self) -> str:
        c = self.cfg
        ident = {"backend": c.backend, "model": c.model, "max_length": c.max_length, "truncation": c.truncation}
        if c.passage_format:
            ident["passage_format"] = c.passage_format
        base = c.name + "-" + hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
        return f"{base}-{self.dim}d"

    def store_folder(self, root: Path) -> str:
        """The cache folder (under `root`) for this server's answers: the one whose
        stored probe vector this server reproduces, else a new one named by the probe."""
        root = Path(root)
        base = self.fingerprint
        probe = l2_normalise(self.probe[None, :])[0]
        for folder in sorted(root.glob(base + "-*")):
            try:
                stored = np.asarray(json.loads((folder / "probe.json").read_text(encoding="utf-8"))["vector"],
                                    dtype=np.float32)
            except (OSError, ValueError, KeyError):
                continue
            if stored.shape == probe.shape and float(stored @ probe) >= SAME_MODEL_COSINE:
                return folder.name
        digest = hashlib.sha256(np.round(probe, 3).tobytes()).hexdigest()[:8]
        name, n = f"{base}-{digest}", 1
        while (root / name).exists():  # taken by answers this server does not reproduce
            n += 1
            name = f"{base}-{digest}-{n}"
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "probe.json").exists():
            from hipporag2.files import atomicio

            atomicio.write_text(folder / "probe.json", json.dumps(
                {"model": self.cfg.model, "text": PROBE_TEXT, "dim": self.dim, "vector": probe.tolist()}))
        return name

    # -- requests ---------------------------------------------------------------
    def _send(self, method: str, path: str, body: Optional[Dict[str, Any]], n_texts: int = 0) -> httpx.Response:
        """One HTTP exchange, retried on transient failures within retry_window_s;
        a permanent failure raises EncoderError in one line."""
        deadline = time.monotonic() + self.cfg.retry_window_s
        attempt = 0
        while True:
            with self._lock:
                self.texts_sent += n_texts
            try:
                r = self._client.request(method, self.base + path, json=body)
                if r.status_code == 429 or r.status_code >= 500:
                    raise _Transient(f"HTTP {r.status_code}: {' '.join(r.text.split())[:200]}", _retry_after(r))
            except httpx.TimeoutException as exc:
                last = _Transient(f"timeout after {self.cfg.timeout_s} s ({type(exc).__name__})")
            except httpx.TransportError as exc:
                last = _Transient(f"connection error ({type(exc).__name__})")
            except _Transient as exc:
                last = exc
            else:
                if r.status_code != 200:
                    raise EncoderError(self._explain(r))
                return r
            delay = min(_MAX_BACKOFF_S, 0.5 * 2 ** attempt) * (1 + 0.25 * random.random())
            if last.retry_after is not None:
                delay = max(delay, last.retry_after)
            if time.monotonic() + delay > deadline:
                raise EncoderError(f"the embeddings server {self.base} failed for {self.cfg.retry_window_s:.0f} s "
                                   f"(embedding.retry_window_s): {last}")
            attempt += 1
            with self._lock:
                self.retried_requests += 1
            log.warning("embeddings server: %s; retry %d in %.1f s", last, attempt, delay)
            time.sleep(delay)

    def _explain(self, r: httpx.Response) -> str:
        try:
            err = r.json().get("error") or r.json()
            message = err.get("message") if isinstance(err, dict) else str(err)
        except (ValueError, AttributeError):
            message = r.text
        message = " ".join(str(message).split())[:300]
        if r.status_code == 404 and "model" in message.lower():
            served = []
            try:
                served = self.served_models()
            except EncoderError:
                pass
            return (f"embedding.model={self.cfg.model!r} is not served at {self.base}"
                    + (f" (it serves {', '.join(repr(s) for s in served)})" if served else f": {message}"))
        if r.status_code in (401, 403):
            return (f"the embeddings server {self.base} refused the request (HTTP {r.status_code}); "
                    f"check the key in ${self.cfg.api_key_env}" if self.cfg.api_key_env else
                    f"the embeddings server {self.base} wants a key (HTTP {r.status_code}): set embedding.api_key_env")
        if r.status_code == 400 and any(w in message.lower() for w in ("context length", "too long", "maximum", "exceed")):
            return (f"the embeddings server {self.base} refused an input as too long ({message}); "
                    f"embedding.truncation={self.cfg.truncation}, embedding.max_length={self.cfg.max_length}")
        return f"the embeddings server {self.base} answered HTTP {r.status_code}: {message}"

    def payload(self, texts: List[str]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"model": self.cfg.model, "input": texts, "encoding_format": "float"}
        if self.cfg.truncation == "vllm":
            body["truncate_prompt_tokens"] = self.cfg.max_length
        elif self.cfg.truncation == "tei":
            body["truncate"] = True
        return body

    def _post(self, texts: List[str]) -> np.ndarray:
        r = self._send("POST", "/embeddings", self.payload(texts), len(texts))
        try:
            data = sorted(r.json()["data"], key=lambda d: d["index"])
            rows = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError):
            raise EncoderError(f"the embeddings server {self.base} sent a malformed answer: {r.text[:200]}") from None
        if rows.ndim != 2 or rows.shape[0] != len(texts):
            raise EncoderError(f"the embeddings server {self.base} answered {rows.shape[0] if rows.ndim == 2 else 0} "
                               f"vectors for {len(texts)} texts")
        dim = getattr(self, "dim", None)
        if dim is not None and rows.shape[1] != dim:
            raise EncoderError(f"the embeddings server {self.base} changed dimension mid-run: {rows.shape[1]} now, "
                               f"{dim} when the run started (another model behind embedding.model={self.cfg.model!r}?)")
        with self._lock:
            self.texts_answered += len(texts)
        return rows

    def _encode(self, texts: List[str], instruction: Optional[str]) -> np.ndarray:
        sent = prompts.sent_texts(self.cfg, texts, instruction)
        slices = plan_requests(sent, max(1, self.cfg.batch_size), self.cfg.batch_tokens, self.cfg.max_length,
                               self.cfg.truncation != "none")
        out = np.empty((len(sent), self.dim), dtype=np.float32)
        workers = max(1, min(self.cfg.max_concurrency, len(slices)))
        if workers == 1:
            for a, b in slices:
                out[a:b] = self._post(sent[a:b])
            return out
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="embed-http") as pool:
            futures = [(a, b, pool.submit(self._post, sent[a:b])) for a, b in slices]
            try:
                for a, b, fut in futures:
                    out[a:b] = fut.result()
            except BaseException:
                for _, _, fut in futures:
                    fut.cancel()
                raise
        return out

    def close(self) -> None:
        self._client.close()


def _retry_after(r: httpx.Response) -> Optional[float]:
    value = r.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
