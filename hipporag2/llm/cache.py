"""Persistent response cache shared by every LLM backend.

LLM calls dominate the cost and the wall time of an indexing run, and at
temperature 0 a response is a pure function of its inputs, so each one is kept
in SQLite and reused by later runs, other configurations and other backends
that serve the same model.  WAL journaling lets one process read while
another writes, and a busy timeout makes concurrent writers (two workers
sharing a cache directory) wait for each other instead of failing.  Each
`put_many` is one transaction, so a crash never leaves half a batch behind.
A damaged file (a disk error, a copy cut short) fails SQLite's `quick_check` when
opened; it is moved aside as `NAME.corrupt-TIMESTAMP` (with its WAL) and a fresh
cache is started, so the run re-asks the model instead of dying or reading garbage.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from hipporag2.files.atomicio import StorageError

log = logging.getLogger("hipporag2.llm.cache")

# Bump when the key recipe changes, so that old entries are never misread.
_KEY_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model_id TEXT NOT NULL,
    text TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    created REAL NOT NULL
)
"""


@dataclass(frozen=True)
class CachedResponse:
    text: str
    input_tokens: int
    output_tokens: int


def _canonical_schema(json_schema: str) -> object:
    """Parse the schema so that whitespace or key order never splits the cache."""
    try:
        return json.loads(json_schema)
    except (TypeError, ValueError):
        return json_schema


def cache_key(
    model_id: str,
    messages: Sequence[tuple[str, str]],
    temperature: float,
    max_new_tokens: int,
    seed: int,
    json_schema: str | None = None,
    grammar: str | None = None,
) -> str:
    """Hash of everything that can change a response.

    `json_schema` and `grammar` must be passed only when constrained decoding is on: an
    unconstrained request with a schema attached produces the same text as one
    without, and should share its entry.
    """
    payload = {
        "v": _KEY_VERSION,
        "model": model_id,
        "messages": [[role, content] for role, content in messages],
        "temperature": float(temperature),
        "max_new_tokens": int(max_new_tokens),
        "seed": int(seed),
        "json_schema": None if json_schema is None else _canonical_schema(json_schema),
    }
    if grammar is not None:  # absent otherwise, so keys of grammar-free requests are unchanged
        payload["grammar"] = grammar
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _storage_error(e: sqlite3.OperationalError, path: Path) -> Exception:
    """SQLite's words for a refused write (it raises no OSError) as the StorageError the
    CLI prints as one line; any other OperationalError is returned as it is."""
    text = str(e).lower()
    if "full" in text:
        code = errno.ENOSPC
    elif "readonly" in text or "read-only" in text:
        code = errno.EROFS if not os.access(path.parent, os.W_OK) or os.statvfs(path.parent).f_flag & os.ST_RDONLY else errno.EACCES
    elif "unable to open" in text and not os.access(path.parent, os.W_OK):
        code = errno.EACCES
    else:
        return e
    return StorageError(path, "LLM response cache", OSError(code, os.strerror(code)))


class ResponseCache:
    """A thread-safe handle on one SQLite cache file."""

    def __init__(self, path: str | Path, busy_timeout_s: float = 120.0) -> None:
        self.path = Path(path)
        from hipporag2.files.atomicio import make_dirs

        make_dirs(self.path.parent)
        # One connection guarded by a lock: simpler than a pool, and SQLite
        # serialises writers anyway.
        self._lock = threading.Lock()
        self._busy_timeout_s = busy_timeout_s
        try:
            self._conn = self._open()
        except sqlite3.OperationalError as e:
            # locked, busy, I/O: not evidence of damage, so the file is left alone
            raise _storage_error(e, self.path) from None
        except sqlite3.DatabaseError as e:  # "file is not a database", "malformed", quick_check
            self._conn = self._open_fresh(str(e))

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            str(self.path), timeout=self._busy_timeout_s, check_same_thread=False, isolation_level=None
        )
        try:
            self._enter_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
            problems = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(map(str, problems[:3])))
            conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL, waiting for other processes doing the same.

        SQLite answers "database is locked" at once, without its busy handler, when two
        connections race to change a fresh file's journal mode (two workers starting
        on one new cache: one of them crashed in 3 of 79 tries here); so wait and
        retry here, within the same busy timeout as everything else.
        """
        deadline = time.monotonic() + self._busy_timeout_s
        delay = 0.005
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, 0.25)

    def _open_fresh(self, why: str) -> sqlite3.Connection:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        moved = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            part = Path(str(self.path) + suffix)
            if part.exists():
                part.replace(Path(str(moved) + suffix))
        log.warning("LLM response cache %s is damaged (%s); moved it to %s and started an empty one", self.path, why, moved)
        return self._open()

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        unique = list(dict.fromkeys(keys))
        found: dict[str, CachedResponse] = {}
        # Stay well below SQLite's bound-parameter limit.
        chunk = 500
        with self._lock:
            for start in range(0, len(unique), chunk):
                part = unique[start : start + chunk]
                marks = ",".join("?" * len(part))
                rows = self._conn.execute(
                    f"SELECT key, text, input_tokens, output_tokens FROM responses WHERE key IN ({marks})",
                    part,
                ).fetchall()
                for key, text, n_in, n_out in rows:
                    found[key] = CachedResponse(text, int(n_in), int(n_out))
        return found

    def get(self, key: str) -> CachedResponse | None:
        return self.get_many([key]).get(key)

    def put_many(self, model_id: str, entries: Mapping[str, CachedResponse]) -> None:
        if not entries:
            return
        now = time.time()
        rows = [(k, model_id, e.text, e.input_tokens, e.output_tokens, now) for k, e in entries.items()]
        with self._lock:
            # BEGIN IMMEDIATE takes the write lock up front, so a concurrent
            # writer waits on busy_timeout rather than failing mid-transaction.
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.executemany(
                        "INSERT OR REPLACE INTO responses "
                        "(key, model_id, text, input_tokens, output_tokens, created) VALUES (?,?,?,?,?,?)",
                        rows,
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # SQLite may have rolled back itself (a full disk)
                        self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as e:
                raise _storage_error(e, self.path) from None

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
