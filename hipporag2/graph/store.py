"""A built index on disk: everything retrieval needs, nothing from indexing inputs.

Layout of an index folder (written to a temp folder, then renamed into place):
  index.json        passages, titles, corpus indices, phrases, facts, node specificity,
                    each passage's facts
  edges.npz         source, target, weight, kind (0 relation, 1 context, 2 synonym)
  *_emb.npy         passage / phrase / fact embeddings (float32, L2-normalised)
  graph_stats.json  counts of nodes and edges by type
  manifest.json     sha256 and size of every file above; written last
  ppr/              derived, optional: the batched PPR solver's saved preparation, one
                    folder per graph variant with its own manifest (retrieve/ppr_store.py);
                    made on first use, not part of the manifest above

An index folder without a manifest is incomplete and is never used. `load_index`
verifies every checksum and raises `IndexCorrupt` (naming the file) on a mismatch;
the pipeline then logs a warning, deletes the folder and rebuilds it.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from hipporag2.atomicio import crash_point, fsync_dir, remove_stale_temps, sha256_file
from hipporag2.graph.build import GraphEdges
from hipporag2.graph.triples import Triple


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
    # preparation, `retrieve/ppr_store.py`) live there; None for an index only in memory
    path: Optional[Path] = field(default=None, repr=False, compare=False)

    @property
    def n_phrases(self) -> int:
        return len(self.phrases)

    @property
    def n_passages(self) -> int:
        return len(self.passages)

    @property
    def phrase_index(self) -> Dict[str, int]:
        if not hasattr(self, "_phrase_index"):
            self._phrase_index = {p: i for i, p in enumerate(self.phrases)}
        return self._phrase_index

    def graph(self):
        """The igraph graph (vertices: phrases sorted by text, then passages)."""
        if self._graph is None:
            from hipporag2.graph.build import to_igraph
            from hipporag2.text import passage_id, phrase_id

            names = [phrase_id(p) for p in self.phrases] + [passage_id(p) for p in self.passages]
            self._graph = to_igraph(self.edges, names=names, contents=self.phrases + self.passages)
        return self._graph


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


def _save_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def save_index(index: Index, path: Path | str) -> None:
    """Write to `PATH.tmp-PID/`, fsync every file, write the manifest last, then swap
    the folder into place. A kill at any point leaves no folder with a manifest that
    does not describe it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Callers hold the index's file lock: any temp of this index is a killed build's.
    remove_stale_temps(path.parent, prefix=path.name + ".", any_pid=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
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
    for name in ("passage", "phrase", "fact"):
        _save_npy(tmp / f"{name}_emb.npy", getattr(index, f"{name}_emb"))
    _save_text(tmp / "graph_stats.json", json.dumps(index.stats, indent=2))
    crash_point("index_files_written")
    files = {}
    for f in FILES:
        files[f] = {"sha256": sha256_file(tmp / f), "bytes": (tmp / f).stat().st_size}
    _save_text(tmp / MANIFEST, json.dumps({"format": MANIFEST_FORMAT, "files": files}, indent=2))
    fsync_dir(tmp)
    if path.exists():
        # Move the old folder aside first (one rename), so `path` is never half-deleted.
        old = path.with_name(path.name + f".old.tmp-{os.getpid()}")
        os.replace(path, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    index.path = path


FILES = ("index.json", "edges.npz", "passage_emb.npy", "phrase_emb.npy", "fact_emb.npy", "graph_stats.json")


def verify_index(path: Path | str) -> None:
    """Raise IndexCorrupt unless every file matches the manifest (size, then sha256)."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        assert isinstance(files, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        raise IndexCorrupt(path, MANIFEST, f"unreadable ({e})") from None
    for name in FILES:
        entry = files.get(name)
        if not isinstance(entry, dict):
            raise IndexCorrupt(path, MANIFEST, f"no entry for {name}")
        f = path / name
        try:
            size = f.stat().st_size
            if size != entry.get("bytes"):
                raise IndexCorrupt(path, name, f"{size} bytes, the manifest says {entry.get('bytes')}")
            actual = sha256_file(f)
        except OSError as e:
            raise IndexCorrupt(path, name, f"unreadable ({e.strerror or e})") from None
        if actual != entry.get("sha256"):
            raise IndexCorrupt(path, name, f"sha256 {actual[:12]}... does not match the manifest's {str(entry.get('sha256'))[:12]}...")


def load_index(path: Path | str, verify: bool = True) -> Index:
    """Load a complete index; IndexCorrupt when a file fails its checksum or cannot be parsed."""
    path = Path(path)
    if verify:
        verify_index(path)
    try:
        meta = json.loads((path / "index.json").read_text(encoding="utf-8"))
        e = np.load(path / "edges.npz")
        edges = GraphEdges(meta["n_vertices"], e["source"], e["target"], e["weight"], e["kind"])
        return Index(
            passages=meta["passages"],
            titles=meta["titles"],
            corpus_idx=meta["corpus_idx"],
            phrases=meta["phrases"],
            facts=[tuple(f) for f in meta["facts"]],
            phrase_passages=meta["phrase_passages"],
            passage_facts=meta.get("passage_facts"),
            edges=edges,
            stats=json.loads((path / "graph_stats.json").read_text(encoding="utf-8")),
            passage_emb=np.load(path / "passage_emb.npy", mmap_mode="r"),
            phrase_emb=np.load(path / "phrase_emb.npy", mmap_mode="r"),
            fact_emb=np.load(path / "fact_emb.npy", mmap_mode="r"),
            path=path,
        )
    except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
        raise IndexCorrupt(path, "index", f"cannot be loaded ({type(exc).__name__}: {exc})") from None


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
