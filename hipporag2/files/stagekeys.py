"""Cache keys of the stages: a hash of exactly the inputs and settings that change a
stage's output, so that e.g. a different `damping` never invalidates the index."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from hipporag2.files.atomicio import sha256_file

INDEX_FORMAT = 2  # 2: index.json has passage_facts; bump when the index layout or graph construction changes


def digest(obj: Any) -> str:
    if is_dataclass(obj):
        obj = asdict(obj)
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def file_digest(path: Path | str) -> str:
    return sha256_file(path)[:16]


def corpus_digest(passages) -> str:
    h = hashlib.sha256()
    for p in passages:
        h.update(p.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


# Graph settings added after indexes were cached: left out of the key at their
# defaults, so the keys of indexes built before them stay valid.
_LATER_GRAPH_DEFAULTS = {"relation_edges": True, "cooccurrence_edges": False}


def _graph_settings(graph_cfg) -> dict:
    settings = asdict(graph_cfg)
    for k, default in _LATER_GRAPH_DEFAULTS.items():
        if k in settings and settings[k] == default:
            del settings[k]
    return settings


def index_key(corpus_key: str, openie_key: str, encoder_fingerprint: str, graph_cfg) -> str:
    return digest(
        {
            "format": INDEX_FORMAT,
            "corpus": corpus_key,
            "openie": openie_key,
            "encoder": encoder_fingerprint,
            "graph": _graph_settings(graph_cfg),
        }
    )
