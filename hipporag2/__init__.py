"""hipporag2: a faithful, fast reproduction harness for HippoRAG 2.

The public surface is the library class and its typed results:

    from hipporag2 import HippoRAG
    rag = HippoRAG("my_index", overrides=["embedding=minilm", "retrieval=dense"])

Names are imported on first use, so `import hipporag2.registry` (config validation)
stays free of numpy, torch and igraph.
"""
from __future__ import annotations

__all__ = ["HippoRAG", "QueryResult", "QAReport", "Config", "ConfigError"]

_WHERE = {
    "HippoRAG": "hipporag2.api",
    "QueryResult": "hipporag2.results",
    "QAReport": "hipporag2.results",
    "Config": "hipporag2.config",
    "ConfigError": "hipporag2.errors",
}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'hipporag2' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
