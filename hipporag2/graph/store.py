"""A built index on disk: everything retrieval needs, nothing from indexing inputs.

Layout of an index folder (written to a temp folder, then renamed into place):
  index.json        passages, titles, corpus indices, phrases, facts, node specificity,
                    each passage's facts
  edges.npz         source, target, weight, kind (0 relation, 1 context, 2 synonym)
  *_emb.npy         passage / phrase / fact embeddings (float32, L2-normalised); an index
                    written by an update may hold more rows in segments `*_emb.sN.npy` and an
                    order `*_emb.order.npy` (`RowLayout`): segments are written once and
                    hard-linked into the next version, so an insert writes only its new rows
  graph_stats.json  counts of nodes and edges by type
  manifest.json     sha256 and size of every file above; written last
  ppr/              derived, optional: the batched PPR solver's saved preparation, one
                    folder per graph variant with its own manifest (retrieve/ppr/store.py);
                    made on first use, not part of the manifest above

An index folder without a manifest is incomplete and is never used. `load_index`
verifies every checksum and raises `IndexCorrupt` (naming the file) on a mismatch;
the pipeline then logs a warning, deletes the folder and rebuilds it. A caller that
knows it will not read an embedding matrix may defer its checksum (`load_index(...,
defer=("phrase",))`: a HippoRAG 2 run links queries to facts and never reads the
phrase embeddings, a third of the bytes to hash); that matrix is then checked on its
first read (`Index.phrase_emb`), which raises IndexCorrupt instead of returning a
changed file's content.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from hipporag2.files.atomicio import crash_point, fsync_dir, remove_stale_temps, sha256_file, storage_error
from hipporag2.graph.build import GraphEdges
from hipporag2.graph.triples import Triple


@dataclass
class Segment:
    """One file of embedding rows, as its manifest entry records it."""

    name: str
    sha256: str
    bytes: int
    rows: int


@dataclass
class RowLayout:
    """Where the rows of one embedding matrix are on disk: `segments` (files in
    `folder`) hold stored rows end to end; index row i is stored row `order[i]`, or not
    stored yet where `order[i] < 0` (rows an update added in memory). `order=None` means
    stored row i is index row i."""

    segments: List[Segment]
    order: Optional[np.ndarray]
    folder: Optional[Path]

    @property
    def stored_rows(self) -> int:
        return sum(s.rows for s in self.segments)

    def carried(self, new_pos: np.ndarray, old_rows: np.ndarray, n_rows: int) -> "RowLayout":
        """The layout of a new matrix of `n_rows` whose row new_pos[j] is this matrix's
        row old_rows[j]; its other rows are new (not stored)."""
        order = np.full(n_rows, -1, dtype=np.int64)
        old_rows = np.asarray(old_rows, dtype=np.int64)
        order[np.asarray(new_pos, dtype=np.int64)] = old_rows if self.order is None else self.order[old_rows]
        return RowLayout(list(self.segments), order, self.folder)


EMB_NAMES = ("passage", "phrase", "fact")
# An update rewrites a matrix in one file (instead of adding a segment) once the files
# hold twice the rows the index uses (after deletes) or this many segments.
MAX_SEGMENTS = 32


@dataclass
class Index:
    passages: List[str]
    titles: List[str]
    corpus_idx: List[int]
    phrases: List[str]
    facts: List[Triple]
    phrase_passages: List[List[int]]
    edges: GraphEdges
    stats: Dict[str, int]
    passage_emb: np.ndarray
    phrase_emb: np.ndarray
    fact_emb: np.ndarray
    # each passage's distinct facts (indices into `facts`), for HippoRAG 1's legacy
    # passage score; None for an index made without it (then that scoring refuses to run)
    passage_facts: Optional[List[List[int]]] = None
    _graph: Optional[object] = field(default=None, repr=False)
    # the folder it was saved to or loaded from: derived caches (the PPR solver's
    # preparation, `retrieve/ppr/store.py`) live there; None for an index only in memory
    path: Optional[Path] = field(default=None, repr=False, compare=False)
    # where the embedding rows are on disk, by EMB_NAMES (set by save/load, carried by an update)
    layout: Optional[Dict[str, RowLayout]] = field(default=None, repr=False, compare=False)

    @property
    def n_phrases(self) -> int:
        return len(self.phrases)

    @property
    def n_passages(self) -> int:
        return len(self.passages)

    @property
    def phrase_index(self) -> Dict[str, int]:
        if not hasattr(self, "_phrase_index"):
            self._phrase_index = dict(zip(self.phrases, range(len(self.phrases))))  # the last of a repeated phrase, as a loop
        return self._phrase_index

    def _defer_checks(self, path: Path, entries: Dict[str, dict]) -> None:
        """Embedding matrices (by EMB_NAMES) whose files are checked against these
        manifest entries on first read instead of at load (`load_index(defer=...)`)."""
        self.__dict__["_unchecked"] = {name: (path, entry) for name, entry in entries.items()}

    def graph(self):
        """The igraph graph (vertices: phrases sorted by text, then passages)."""
        if self._graph is None:
            from hipporag2.graph.build import to_igraph
            from hipporag2.text import passage_id, phrase_id

            names = [phrase_id(p) for p in self.phrases] + [passage_id(p) for p in self.passages]
            self._graph = to_igraph(self.edges, names=names, contents=self.phrases + self.passages)
        return self._graph


def _checked_matrix(name: str) -> property:
    """`Index.<name>_emb`: the matrix, its file's checksum verified first if the load
    deferred it (the check is kept until it passes: a failed one fails every read)."""
    key = f"_{name}_emb"

    def get(self):
        unchecked = self.__dict__.get("_unchecked")
        if unchecked and name in unchecked:
            path, entry = unchecked[name]
            check_file(path, f"{name}_emb.npy", entry)
            unchecked.pop(name, None)
        return self.__dict__[key]

    def put(self, value):
        self.__dict__[key] = value
        unchecked = self.__dict__.get("_unchecked")
        if unchecked:
            unchecked.pop(name, None)  # a matrix set in memory is not the file's content

    return property(get, put, doc=f"The {name} embeddings (float32, L2-normalised rows).")


for _name in EMB_NAMES:
    setattr(Index, f"{_name}_emb", _checked_matrix(_name))


MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


class IndexCorrupt(Exception):
    """An index folder whose files do not match its manifest (or cannot be read)."""

    def __init__(self, path: Path | str, file: str, reason: str):
        super().__init__(f"index {path}: {file}: {reason}")
        self.path, self.file, self.reason = str(path), file, reason


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(arr, dtype=np.float32))
        f.flush()
        os.fsync(f.fileno())


def _write_rows(tmp: Path, name: str, matrix: np.ndarray, layout: Optional[RowLayout]) -> Tuple[RowLayout, Dict[str, dict]]:
    """Write one embedding matrix into `tmp`: the rows not stored yet as one new segment
    beside the layout's old segments (hard-linked from its folder), or the whole matrix
    as one file. Returns the layout written and the manifest entries of its files."""
    matrix = np.asarray(matrix)
    first = f"{name}_emb.npy"
    usable = (layout is not None and layout.order is not None and layout.folder is not None
              and len(layout.segments) < MAX_SEGMENTS and layout.stored_rows + int((layout.order < 0).sum()) <= 2 * len(matrix)
              and all((layout.folder / seg.name).is_file() for seg in layout.segments))
    if not usable:
        _save_npy(tmp / first, matrix)
        seg = Segment(first, sha256_file(tmp / first), (tmp / first).stat().st_size, len(matrix))
        return RowLayout([seg], None, None), {first: {"sha256": seg.sha256, "bytes": seg.bytes}}
    segments = list(layout.segments)
    for seg in segments:
        try:
            os.link(layout.folder / seg.name, tmp / seg.name)
        except OSError:  # another file system, or no hard links: a copy
            shutil.copyfile(layout.folder / seg.name, tmp / seg.name)
    order = layout.order.copy()
    fresh = np.nonzero(order < 0)[0]
    if fresh.size:
        numbers = [int(m.group(1)) for seg in segments for m in [re.search(r"\.s(\d+)\.npy$", seg.name)] if m]
        seg_name = f"{name}_emb.s{max(numbers, default=0) + 1}.npy"
        _save_npy(tmp / seg_name, matrix[fresh])
        order[fresh] = layout.stored_rows + np.arange(fresh.size)
        segments.append(Segment(seg_name, sha256_file(tmp / seg_name), (tmp / seg_name).stat().st_size, int(fresh.size)))
    order_name = f"{name}_emb.order.npy"
    with open(tmp / order_name, "wb") as f:
        np.save(f, order)
        f.flush()
        os.fsync(f.fileno())
    files = {seg.name: {"sha256": seg.sha256, "bytes": seg.bytes} for seg in segments}
    files[order_name] = {"sha256": sha256_file(tmp / order_name), "bytes": (tmp / order_name).stat().st_size}
    return RowLayout(segments, order, None), files


def _read_rows(path: Path, name: str, entry: Optional[dict]) -> Tuple[np.ndarray, RowLayout]:
    """One embedding matrix and its layout: the single file memory-mapped, or the
    segments gathered in index order."""
    if not entry or entry.get("order") is None:
        first = f"{name}_emb.npy"
        arr = np.load(path / first, mmap_mode="r")
        return arr, RowLayout([Segment(first, "", 0, len(arr))], None, path)
    segs = [np.load(path / seg, mmap_mode="r") for seg in entry["segments"]]
    order = np.load(path / entry["order"])
    out = np.empty((len(order), segs[0].shape[1]), dtype=np.float32)
    start = 0
    for arr in segs:
        here = (order >= start) & (order < start + len(arr))
        out[here] = arr[order[here] - start]
        start += len(arr)
    return out, RowLayout([Segment(n, "", 0, len(a)) for n, a in zip(entry["segments"], segs)], order, path)


def _save_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def save_index(index: Index, path: Path | str) -> None:
    """Write to `PATH.tmp-PID/`, fsync every file, write the manifest last, then swap
    the folder into place. A kill at any point leaves no folder with a manifest that
    does not describe it; a write the system refuses (a full disk) removes the temp
    folder and raises `atomicio.StorageError`."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    try:
        _save_index(index, path, tmp)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise storage_error(e, path, "index") from None


def _save_index(index: Index, path: Path, tmp: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Callers hold the index's file lock: any temp of this index is a killed build's.
    remove_stale_temps(path.parent, prefix=path.name + ".", any_pid=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    meta = {
        "passages": index.passages,
        "titles": index.titles,
        "corpus_idx": index.corpus_idx,
        "phrases": index.phrases,
        "facts": [list(f) for f in index.facts],
        "phrase_passages": index.phrase_passages,
        "passage_facts": index.passage_facts,
        "n_vertices": index.edges.n_vertices,
    }
    _save_text(tmp / "index.json", json.dumps(meta, ensure_ascii=False))
    with open(tmp / "edges.npz", "wb") as f:
        np.savez(
            f,
            source=index.edges.source,
            target=index.edges.target,
            weight=index.edges.weight,
            kind=index.edges.kind,
        )
        f.flush()
        os.fsync(f.fileno())
    files: Dict[str, dict] = {}
    layouts: Dict[str, RowLayout] = {}
    for name in EMB_NAMES:
        old = (index.layout or {}).get(name)
        layouts[name], written = _write_rows(tmp, name, getattr(index, f"{name}_emb"), old)
        files.update(written)
    _save_text(tmp / "graph_stats.json", json.dumps(index.stats, indent=2))
    crash_point("index_files_written")
    for f in ("index.json", "edges.npz", "graph_stats.json"):
        files[f] = {"sha256": sha256_file(tmp / f), "bytes": (tmp / f).stat().st_size}
    manifest = {"format": MANIFEST_FORMAT, "files": files}
    rows = {name: {"segments": [seg.name for seg in lay.segments], "order": f"{name}_emb.order.npy"}
            for name, lay in layouts.items() if lay.order is not None}
    if rows:
        manifest["rows"] = rows
    _save_text(tmp / MANIFEST, json.dumps(manifest, indent=2))
    fsync_dir(tmp)
    if path.exists():
        # Move the old folder aside first (one rename), so `path` is never half-deleted.
        old = path.with_name(path.name + f".old.tmp-{os.getpid()}")
        os.replace(path, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    index.path = path
    for lay in layouts.values():
        lay.folder = path
    index.layout = layouts


FILES = ("index.json", "edges.npz", "passage_emb.npy", "phrase_emb.npy", "fact_emb.npy", "graph_stats.json")


def verify_index(path: Path | str, defer: Tuple[str, ...] = ()) -> Dict[str, dict]:
    """Raise IndexCorrupt unless every file matches the manifest (size, then sha256),
    except the files of the embedding matrices named in `defer` (EMB_NAMES) that are
    one file each: their manifest entries are returned, for `check_file` later."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        assert isinstance(files, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        raise IndexCorrupt(path, MANIFEST, f"unreadable ({e})") from None
    for name in FILES:
        if not isinstance(files.get(name), dict):
            raise IndexCorrupt(path, MANIFEST, f"no entry for {name}")
    rows = manifest.get("rows") or {}
    later = {}
    for emb in defer:
        if emb not in EMB_NAMES:
            raise ValueError(f"defer names embedding matrices {EMB_NAMES}, got {emb!r}")
        if not (rows.get(emb) or {}).get("order"):  # a segmented matrix is read whole at load: checked now
            later[emb] = f"{emb}_emb.npy"
    for name, entry in files.items():
        if not isinstance(entry, dict):
            raise IndexCorrupt(path, MANIFEST, f"no entry for {name}")
        if name not in later.values():
            check_file(path, name, entry)
    return {emb: files[name] for emb, name in later.items()}


def check_file(path: Path, name: str, entry: dict) -> None:
    """Raise IndexCorrupt unless file `name` of the index at `path` matches its manifest entry."""
    f = Path(path) / name
    try:
        size = f.stat().st_size
        if size != entry.get("bytes"):
            raise IndexCorrupt(path, name, f"{size} bytes, the manifest says {entry.get('bytes')}")
        actual = sha256_file(f)
    except OSError as e:
        raise IndexCorrupt(path, name, f"unreadable ({e.strerror or e})") from None
    if actual != entry.get("sha256"):
        raise IndexCorrupt(path, name, f"sha256 {actual[:12]}... does not match the manifest's {str(entry.get('sha256'))[:12]}...")


def load_index(path: Path | str, verify: bool = True, defer: Tuple[str, ...] = ()) -> Index:
    """Load a complete index; IndexCorrupt when a file fails its checksum or cannot be parsed.

    The checksums are computed in a second thread while this one parses index.json
    (hashlib releases the GIL for a whole file, `sha256_file`; json does not). Nothing
    is returned before every file has passed, and a file that fails its checksum is
    what is reported, even when the parse failed too. The embedding matrices named in
    `defer` (EMB_NAMES, e.g. ("phrase",) for a caller that will not read them) are
    the exception: each is checked on its first read from the returned Index instead
    (see the module docstring), so their hashing is not paid unless they are read.
    """
    path = Path(path)
    if not verify:
        return _read_index(path)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        checked = pool.submit(verify_index, path, tuple(defer))
        try:
            index = _read_index(path)
        except IndexCorrupt as e:
            checked.result()  # a checksum failure names the file: report that first
            raise e
        later = checked.result()
    if later:
        index._defer_checks(path, later)
    return index


def _read_index(path: Path) -> Index:
    """The index's files read (embeddings memory-mapped), without the checksums."""
    return _read_index_files(path)


def _read_index_files(path: Path) -> Index:
    try:
        meta = parse_index_json((path / "index.json").read_bytes())
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        rows = manifest.get("rows", {})
        e = np.load(path / "edges.npz")
        edges = GraphEdges(meta["n_vertices"], e["source"], e["target"], e["weight"], e["kind"])
        emb, layout = {}, {}
        for name in EMB_NAMES:
            emb[name], layout[name] = _read_rows(path, name, rows.get(name))
        manifest_files = manifest["files"]
        for lay in layout.values():
            for seg in lay.segments:
                seg.sha256, seg.bytes = manifest_files[seg.name]["sha256"], manifest_files[seg.name]["bytes"]
        return Index(
            passages=meta["passages"],
            titles=meta["titles"],
            corpus_idx=meta["corpus_idx"],
            phrases=meta["phrases"],
            facts=list(map(tuple, meta["facts"])),
            phrase_passages=meta["phrase_passages"],
            passage_facts=meta.get("passage_facts"),
            edges=edges,
            stats=json.loads((path / "graph_stats.json").read_text(encoding="utf-8")),
            passage_emb=emb["passage"],
            phrase_emb=emb["phrase"],
            fact_emb=emb["fact"],
            path=path,
            layout=layout,
        )
    except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
        raise IndexCorrupt(path, "index", f"cannot be loaded ({type(exc).__name__}: {exc})") from None


# index.json's keys (save_index) and which of them hold ints: one list of them, or lists of them
INDEX_JSON_KEYS = ("passages", "titles", "corpus_idx", "phrases", "facts", "phrase_passages", "passage_facts", "n_vertices")
_INT_LIST, _INT_LISTS = ("corpus_idx",), ("phrase_passages", "passage_facts")


def parse_index_json(data: bytes):
    """`json.loads` of index.json's bytes, by orjson where it gives the same values:
    2-3x faster on the 2.6 MB of strings and ints at MuSiQue scale, with no str copy
    of the file to decode first (and no scan for newlines to translate, as text reading
    did). orjson refuses what json accepts beyond JSON (NaN, 1e400, lone surrogate
    escapes) and reads an int beyond 64 bits as a float; so its answer is taken only
    for a file of save_index's keys whose int fields hold ints only (checked: ~40k
    values), else json parses the file (or refuses it, as before)."""
    try:
        import orjson
    except ImportError:
        return json.loads(data)
    try:
        meta = orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
    if _ints_where_saved(meta):
        return meta
    return json.loads(data)


def _ints_where_saved(meta) -> bool:
    if type(meta) is not dict or not set(meta) <= set(INDEX_JSON_KEYS) or type(meta.get("n_vertices")) is not int:
        return False
    for key in _INT_LIST:
        if type(meta.get(key)) is not list or not set(map(type, meta[key])) <= {int}:
            return False
    for key in _INT_LISTS:
        rows = meta.get(key)
        if rows is None and key == "passage_facts":  # an index made before it existed
            continue
        if type(rows) is not list or not set(map(type, rows)) <= {list} or \
                not set(map(type, chain.from_iterable(rows))) <= {int}:
            return False
    return True


def index_exists(path: Path | str) -> bool:
    """A complete folder: every file present and the manifest (written last) too."""
    path = Path(path)
    return all((path / f).is_file() for f in (*FILES, MANIFEST))


def remove_index(path: Path | str) -> None:
    """Delete an index folder (rename aside first, so no reader sees half of it)."""
    path = Path(path)
    if not path.exists():
        return
    old = path.with_name(path.name + f".bad.tmp-{os.getpid()}")
    os.replace(path, old)
    shutil.rmtree(old, ignore_errors=True)
