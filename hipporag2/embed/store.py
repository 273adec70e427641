"""On-disk embedding cache: one folder per encoder fingerprint, content-addressed rows.

Rows live in append-only shards (`shard-NNNNN.npy` float32 + `shard-NNNNN.keys.json`),
memory-mapped on load. A shard becomes visible only when its keys file is renamed
into place, so a run killed mid-encoding loses at most the shard in progress, and a
second run with the same encoder embeds only what is missing. A shard is written
once `shard_size` rows (4,096) are encoded or `checkpoint_s` seconds (30) of encoding
have passed, whichever comes first: on a GPU shards stay large, on a slow CPU an
interrupt loses at most ~30 s of work.

Integrity: the keys file (written last, atomically) records the sha256, row count and
width of its `.npy` file. Every load verifies them; a shard that fails (bit rot, a
truncated copy, an edited file) is logged with its file name, removed, and its rows
are re-encoded when next needed. Keys files of the first format (a bare list, no
checksum) are still read, with the shape check only.

Concurrency: shard numbers are assigned and files written under a file lock in the
store folder, so any number of processes can share one cache directory.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from filelock import FileLock

from hipporag2.files import atomicio
from hipporag2.files.atomicio import crash_point, sha256_file
from hipporag2.embed import prompts
from hipporag2.embed.encoders import Encoder, build_encoder
from hipporag2.embed.worker import encoder_environment
from hipporag2.runtime.interrupts import in_stage

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
        checkpoint_s: float = 30.0,
        passage_format: str = "",
    ):
        self.query_format = query_format
        self.passage_format = passage_format
        self.dir = atomicio.make_dirs(Path(root) / fingerprint, "embedding cache folder")
        self._factory = encoder_factory
        self._encoder: Optional[Encoder] = None
        self.shard_size = shard_size
        self.checkpoint_s = checkpoint_s
        self._index: Dict[str, Tuple[int, int]] = {}
        self._shards: List[np.ndarray] = []
        self._opened: set = set()
        self.encoded = 0  # texts this process had to encode (0 = all served from cache)
        self.corrupt_shards = 0  # shards found corrupt and removed by this process
        self._load()

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = self._factory()
        return self._encoder

    @staticmethod
    def _open_shard(keys_file: Path) -> Tuple[List[str], np.ndarray]:
        """Keys and memory-mapped rows of one shard; ValueError says what is wrong."""
        vec_file = keys_file.with_name(keys_file.name.replace(".keys.json", ".npy"))
        try:
            meta = json.loads(keys_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{keys_file.name} is unreadable ({e})") from None
        if isinstance(meta, list):  # first format: keys only
            keys, expected = meta, None
        elif isinstance(meta, dict) and isinstance(meta.get("keys"), list):
            keys, expected = meta["keys"], meta
        else:
            raise ValueError(f"{keys_file.name} is not a shard keys file")
        if expected is not None:
            try:
                actual = sha256_file(vec_file)
            except OSError as e:
                raise ValueError(f"{vec_file.name} is unreadable ({e})") from None
            if actual != expected.get("sha256"):
                raise ValueError(f"{vec_file.name}: sha256 {actual[:12]}... does not match the recorded {str(expected.get('sha256'))[:12]}...")
        try:
            vecs = np.load(vec_file, mmap_mode="r")
        except (OSError, ValueError, EOFError) as e:
            raise ValueError(f"{vec_file.name} is unreadable ({e})") from None
        if vecs.ndim != 2 or vecs.shape[0] != len(keys) or vecs.dtype != np.float32:
            raise ValueError(f"{vec_file.name}: {len(keys)} keys for rows of shape {vecs.shape} {vecs.dtype}")
        if expected is not None and (expected.get("rows"), expected.get("dim")) != vecs.shape:
            raise ValueError(f"{vec_file.name}: shape {vecs.shape} differs from the recorded {expected.get('rows')} x {expected.get('dim')}")
        return keys, vecs

    def _load(self) -> None:
        """Open (and verify) the shards not opened yet, including other processes' new ones."""
        bad: List[Tuple[Path, str]] = []
        for keys_file in sorted(self.dir.glob("shard-*.keys.json")):
            if keys_file.name in self._opened:
                continue
            try:
                keys, vecs = self._open_shard(keys_file)
                if self._shards and vecs.shape[1] != self._shards[0].shape[1]:
                    raise ValueError(f"width {vecs.shape[1]} differs from the other shards' {self._shards[0].shape[1]}")
            except ValueError as e:
                bad.append((keys_file, str(e)))
                continue
            s = len(self._shards)
            self._shards.append(vecs)
            self._opened.add(keys_file.name)
            for r, k in enumerate(keys):
                self._index.setdefault(k, (s, r))
        if bad:
            self._drop_corrupt(bad)

    def _drop_corrupt(self, bad: List[Tuple[Path, str]]) -> None:
        """Remove shards that failed verification (re-checked under the lock, so a shard
        another process has just rewritten is never removed)."""
        with FileLock(str(self.dir / ".lock")):
            for keys_file, reason in bad:
                if not keys_file.exists():
                    continue
                try:
                    self._open_shard(keys_file)
                    continue  # fixed meanwhile by another process
                except ValueError:
                    pass
                log.warning(
                    "embedding cache shard %s failed verification (%s); removed, its rows will be re-encoded",
                    keys_file, reason,
                )
                self.corrupt_shards += 1
                keys_file.unlink(missing_ok=True)
                keys_file.with_name(keys_file.name.replace(".keys.json", ".npy")).unlink(missing_ok=True)

    def _prefix(self, instruction: Optional[str]) -> str:
        """A text is keyed with the prefix its encoder is given (`hipporag2.embed.prompts`):
        queries with their instruction, documents with the passage format (mostly none)."""
        return prompts.prefix(self, instruction)

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
        step = min(256, self.shard_size)  # rows per encoder call: progress and checkpoint granularity
        pending: List[str] = []
        parts: List[np.ndarray] = []
        since = time.monotonic()
        with in_stage(desc):
            for s in range(0, len(items), step):
                batch = items[s : s + step]
                parts.append(self.encoder.encode([t for _, t in batch], instruction=instruction))
                pending += [k for k, _ in batch]
                if bar is not None:
                    bar.update(len(batch))
                last = s + step >= len(items)
                if last or len(pending) >= self.shard_size or time.monotonic() - since >= self.checkpoint_s:
                    with lock:
                        self._write_shard(pending, np.concatenate(parts))
                    crash_point("embed_shard")
                    self.encoded += len(pending)
                    pending, parts, since = [], [], time.monotonic()
        if bar is not None:
            bar.close()
        self._load()

    def _write_shard(self, keys: List[str], vecs: np.ndarray) -> None:
        """Call with the store lock held: the vectors first, the keys file (with the
        vectors' checksum) last, each atomically; the keys file makes the shard visible."""
        # A `.npy` without a keys file is the leftover of a killed writer: overwritten.
        numbers = [int(p.name.split("-")[1].split(".")[0]) for p in self.dir.glob("shard-*.keys.json")]
        n = max(numbers) + 1 if numbers else 0
        base = self.dir / f"shard-{n:05d}"
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        buf = io.BytesIO()
        np.save(buf, vecs)
        data = buf.getvalue()
        atomicio.write_bytes(base.with_name(base.name + ".npy"), data, what="embedding shard")
        meta = {"format": 2, "rows": int(vecs.shape[0]), "dim": int(vecs.shape[1]), "sha256": hashlib.sha256(data).hexdigest(), "keys": keys}
        atomicio.write_text(base.with_name(base.name + ".keys.json"), json.dumps(meta), what="embedding shard keys")


def open_store(cache_dir: Path | str, cfg, checkpoint_s: float = 30.0) -> EmbeddingStore:
    """The store for an embedding config; a local encoder is only loaded if something is
    missing. Checked first, before any work: the encoder's environment (a worker's
    versions, remote code under a vetted transformers), or, for an embeddings server,
    the served model and the server's fingerprint, which names the cache folder."""
    root = Path(cache_dir) / "embeddings"
    if cfg.backend == "openai_compatible":
        encoder = build_encoder(cfg)
        folder, factory = encoder.store_folder(root), (lambda: encoder)
    else:
        encoder_environment(cfg)
        folder, factory = Encoder(cfg).fingerprint, (lambda: build_encoder(cfg))
    return EmbeddingStore(root, folder, factory, query_format=cfg.query_format, checkpoint_s=checkpoint_s,
                          passage_format=cfg.passage_format)
