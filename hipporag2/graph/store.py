"""A built index on disk: everything retrieval needs, nothing from indexing inputs.

Layout of an index folder (written to a temp folder, then renamed into place):
  index.json        passages, titles, corpus indices, phrases, facts, node specificity
  edges.npz         source, target, weight, kind (0 relation, 1 context, 2 synonym)
  *_emb.npy         passage / phrase / fact embeddings (float32, L2-normalised)
  graph_stats.json  counts of nodes and edges by type
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

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
    _graph: Optional[object] = field(default=None, repr=False)

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


def save_index(index: Index, path: Path | str) -> None:
    path = Path(path)
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
        "n_vertices": index.edges.n_vertices,
    }
    (tmp / "index.json").write_text(json.dumps(meta, ensure_ascii=False))
    np.savez(
        tmp / "edges.npz",
        source=index.edges.source,
        target=index.edges.target,
        weight=index.edges.weight,
        kind=index.edges.kind,
    )
    for name in ("passage", "phrase", "fact"):
        np.save(tmp / f"{name}_emb.npy", np.ascontiguousarray(getattr(index, f"{name}_emb"), dtype=np.float32))
    (tmp / "graph_stats.json").write_text(json.dumps(index.stats, indent=2))
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def load_index(path: Path | str) -> Index:
    path = Path(path)
    meta = json.loads((path / "index.json").read_text())
    e = np.load(path / "edges.npz")
    edges = GraphEdges(meta["n_vertices"], e["source"], e["target"], e["weight"], e["kind"])
    return Index(
        passages=meta["passages"],
        titles=meta["titles"],
        corpus_idx=meta["corpus_idx"],
        phrases=meta["phrases"],
        facts=[tuple(f) for f in meta["facts"]],
        phrase_passages=meta["phrase_passages"],
        edges=edges,
        stats=json.loads((path / "graph_stats.json").read_text()),
        passage_emb=np.load(path / "passage_emb.npy", mmap_mode="r"),
        phrase_emb=np.load(path / "phrase_emb.npy", mmap_mode="r"),
        fact_emb=np.load(path / "fact_emb.npy", mmap_mode="r"),
    )


def index_exists(path: Path | str) -> bool:
    path = Path(path)
    return all((path / f).is_file() for f in ("index.json", "edges.npz", "graph_stats.json", "fact_emb.npy"))
