"""The batched solver's preparation (`prepare.py`, seconds a run would pay again), saved
in `<index>/ppr/<key>/`, keyed by a digest of what it depends on (the edges the solver
sees, the block size), and memory-mapped on later opens. Files are written into a
temporary folder with a manifest of sha256 sums, renamed into place; a folder whose
files do not match its manifest is removed and prepared again (with a warning)."""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Optional

import numpy as np

from hipporag2.files.atomicio import fsync_dir, sha256_file, write_bytes, write_json
from hipporag2.retrieve.csr import Csr
from hipporag2.retrieve.ppr.prepare import PANEL_BYTES, Panels, PreparedGraph, prepare_graph, spectral_interval

log = logging.getLogger(__name__)

# 2: nodes in reverse Cuthill-McKee order (`prepare.node_order`), was decreasing degree
FORMAT = 2
ARRAYS = ("pos", "sqrt_deg", "S_indptr", "S_indices", "S_data", "panel_indptr", "panel_indices", "panel_data",
          "comp_of", "comp_val")


def graph_key(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, block_size: int) -> str:
    """Digest of what the preparation depends on: the edges, the block size and panel bytes, this format."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps({"format": FORMAT, "n": int(n), "block_size": int(block_size), "panel": PANEL_BYTES}).encode())
    for a in (src, dst):
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(weight, dtype=np.float64).tobytes())
    return h.hexdigest()


def save_prepared(prep: PreparedGraph, folder: Path | str) -> None:
    """Write `prep` (its interval found first) to `folder`, atomically; an existing folder is kept."""
    folder = Path(folder)
    if prep.interval is None and prep.n_active:
        prep.interval = spectral_interval(prep.S, prep.components())
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    arrays = {name: getattr(prep, name) for name in ("pos", "sqrt_deg", "comp_of", "comp_val")}
    arrays.update({f"{part}_{a}": getattr(m, a) for part, m in (("S", prep.S), ("panel", prep.panels))
                   for a in ("indptr", "indices", "data")})
    files = {}
    for name in ARRAYS:
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(arrays[name]))
        write_bytes(tmp / f"{name}.npy", buf.getvalue(), "prepared PPR graph")
        files[name] = hashlib.sha256(buf.getvalue()).hexdigest()
    meta = {"format": FORMAT, "n": prep.n, "block_size": prep.block_size, "n_active": prep.n_active,
            "n_comp": prep.n_comp, "interval": list(prep.interval) if prep.interval else None, "sha256": files}
    write_json(tmp / "manifest.json", meta, indent=1)
    try:
        os.replace(tmp, folder)  # fails if another process got there first: theirs is the same
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        fsync_dir(folder.parent)


def load_prepared(folder: Path | str) -> Optional[PreparedGraph]:
    """The saved preparation, memory-mapped; None if absent. A folder that fails its
    checksums is removed (a warning names the file) and None is returned."""
    folder = Path(folder)
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        meta = json.loads(manifest.read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT}")
        arrays = {}
        for name in ARRAYS:
            path = folder / f"{name}.npy"
            if sha256_file(path) != meta["sha256"][name]:
                raise ValueError(f"{path.name}: sha256 does not match the manifest")
            arrays[name] = np.asarray(np.load(path, mmap_mode="r"))
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("prepared PPR graph %s is unusable (%s); preparing it again", folder, e)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    na = int(meta["n_active"])
    S = Csr(arrays["S_indptr"], arrays["S_indices"], arrays["S_data"], (na, na))
    panels = Panels(arrays["panel_indptr"], arrays["panel_indices"], arrays["panel_data"])
    interval = tuple(meta["interval"]) if meta["interval"] else None
    return PreparedGraph(int(meta["n"]), int(meta["block_size"]), arrays["pos"], na, arrays["sqrt_deg"], S, panels,
                         arrays["comp_of"], arrays["comp_val"], int(meta["n_comp"]), interval)


def prepared_graph(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, block_size: int,
                   cache_dir: Path | str | None) -> PreparedGraph:
    """The preparation of this graph: loaded from `cache_dir` when saved there before,
    otherwise made (interval included) and saved there (when `cache_dir` is given)."""
    if cache_dir is None:
        return prepare_graph(n, src, dst, weight, block_size, with_interval=True)
    folder = Path(cache_dir) / graph_key(n, src, dst, weight, block_size)
    prep = load_prepared(folder)
    if prep is None:
        prep = prepare_graph(n, src, dst, weight, block_size, with_interval=True)
        try:
            save_prepared(prep, folder)
        except OSError as e:  # a read-only index still works, it just prepares every time
            log.warning("could not save the prepared PPR graph to %s (%s)", folder, e)
    return prep
