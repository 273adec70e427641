"""On-disk embedding cache: one folder per encoder fingerprint, content-addressed rows.

Rows live in append-only shards (`shard-NNNNN.npy` float32 + `shard-NNNNN.keys.json`),
memory-mapped on load. A shard becomes visible only when its keys file is renamed
into place, so a run killed mid-encoding loses at most the shard in progress, and a
second run with the same encoder embeds only what is missing.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from filelock import FileLock

from hipporag2.embed.encoders import Encoder, build_encoder

log = logging.getLogger(__name__)


def text_key(text: str, instruction_prefix: str = "") -> str:
    return hashlib.sha256((instruction_prefix + "\x1f" + text).encode("utf-8")).hexdigest()[:32]


class EmbeddingStore:
    def __init__(
        self,
        root: Path | str,
        fingerprint: str,
        encoder_factory: Callable[[], Encoder],
        query_format: str = "",
        shard_size: int = 4096,
    ):
        self.query_format = query_format
        self.dir = Path(root) / fingerprint
        self.dir.mkdir(parents=True, exist_ok=True)
        self._factory = encoder_factory
        self._encoder: Optional[Encoder] = None
        self.shard_size = shard_size
        self._index: Dict[str, Tuple[int, int]] = {}
        self._shards: List[np.ndarray] = []
        self.encoded = 0  # texts this process had to encode (0 = all served from cache)
        self._load()

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = self._factory()
        return self._encoder

    def _load(self) -> None:
        self._index.clear()
        self._shards.clear()
        for keys_file in sorted(self.dir.glob("shard-*.keys.json")):
            vec_file = keys_file.with_name(keys_file.name.replace(".keys.json", ".npy"))
            try:
                keys = json.loads(keys_file.read_text())
                vecs = np.load(vec_file, mmap_mode="r")
                if vecs.shape[0] != len(keys):
                    raise ValueError(f"{len(keys)} keys for {vecs.shape[0]} rows")
            except (OSError, ValueError) as e:
                log.warning("embedding cache shard %s is unreadable (%s); it will be rebuilt", keys_file, e)
                keys_file.unlink(missing_ok=True)
                continue
            s = len(self._shards)
            self._shards.append(vecs)
            for r, k in enumerate(keys):
                self._index.setdefault(k, (s, r))

    def _prefix(self, instruction: Optional[str]) -> str:
        """Queries are keyed with their instruction, documents without."""
        return self.query_format.format(instruction=instruction) if instruction and self.query_format else ""

    def embed(self, texts: Sequence[str], instruction: Optional[str] = None, desc: str = "embed", progress: bool = True) -> np.ndarray:
        """Rows for `texts` in order; only texts not yet in the cache are encoded."""
        prefix = self._prefix(instruction)
        keys = [text_key(t, prefix) for t in texts]
        todo = {k: t for k, t in zip(keys, texts) if k not in self._index}
        if todo:
            self._encode_missing(todo, instruction, desc, progress)
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        for i, k in enumerate(keys):
            s, r = self._index[k]
            out[i] = self._shards[s][r]
        return out

    @property
    def dim(self) -> int:
        return int(self._shards[0].shape[1]) if self._shards else 0

    def _encode_missing(self, todo: Dict[str, str], instruction: Optional[str], desc: str, progress: bool) -> None:
        items = list(todo.items())
        lock = FileLock(str(self.dir / ".lock"))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(items), desc=desc, unit="text")
        step = 256  # progress granularity; a shard is the unit of checkpointing
        for start in range(0, len(items), self.shard_size):
            chunk = items[start : start + self.shard_size]
            parts = []
            for s in range(0, len(chunk), step):
                parts.append(self.encoder.encode([t for _, t in chunk[s : s + step]], instruction=instruction))
                if bar is not None:
                    bar.update(len(chunk[s : s + step]))
            with lock:
                self._write_shard([k for k, _ in chunk], np.concatenate(parts))
            self.encoded += len(chunk)
        if bar is not None:
            bar.close()
        self._load()

    def _write_shard(self, keys: List[str], vecs: np.ndarray) -> None:
        existing = sorted(self.dir.glob("shard-*.keys.json"))
        n = int(existing[-1].name.split("-")[1].split(".")[0]) + 1 if existing else 0
        base = self.dir / f"shard-{n:05d}"
        tmp_vec = base.with_name(base.name + f".npy.tmp-{os.getpid()}")
        with open(tmp_vec, "wb") as f:
            np.save(f, np.ascontiguousarray(vecs, dtype=np.float32))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_vec, base.with_name(base.name + ".npy"))
        tmp_keys = base.with_name(base.name + f".keys.json.tmp-{os.getpid()}")
        tmp_keys.write_text(json.dumps(keys))
        os.replace(tmp_keys, base.with_name(base.name + ".keys.json"))


def open_store(cache_dir: Path | str, cfg) -> EmbeddingStore:
    """The store for an embedding config; the encoder is only loaded if something is missing."""

    return EmbeddingStore(
        Path(cache_dir) / "embeddings", Encoder(cfg).fingerprint, lambda: build_encoder(cfg), query_format=cfg.query_format
    )
