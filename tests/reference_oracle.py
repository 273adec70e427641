"""The reference implementation (PyPI `hipporag==2.0.0a4`, installed with --no-deps) as a
test oracle: its own functions, imported from the installed wheel, run on our inputs.

Its modules import heavy or absent packages at module level (torch, transformers,
vLLM, openai, litellm, gritlm, boto3, pandas) that the functions we call never use.
While the reference is imported, those names resolve to stand-ins made here: empty
modules whose every attribute is a placeholder class that refuses to be used. The
stand-ins are removed from `sys.modules` again afterwards (the reference keeps its own
references to them), so other tests still import the real packages. The installed
package is never edited. `torch` can be left real for the parts that compute with it
(the reference's KNN), where the real CPU build is installed anyway.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata as md
import io
import sys
import types
from typing import Dict, Iterable, Iterator

import pytest

REFERENCE_VERSION = "2.0.0a4"
HEAVY = ("torch", "transformers", "vllm", "openai", "litellm", "gritlm", "boto3", "botocore", "pandas")


class _Unavailable:
    """Placeholder for any name taken from a stand-in module; using it is a test bug."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("a stand-in of a heavy import was used by the reference code under test")

    def __class_getitem__(cls, item):
        return cls


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = type(name, (_Unavailable,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: Iterable[str]):
        self.roots = tuple(roots)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []  # a package, so `import x.y.z` works too
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module):
        pass


def installed() -> bool:
    try:
        return md.version("hipporag") == REFERENCE_VERSION
    except md.PackageNotFoundError:
        return False


def require_reference() -> None:
    if not installed():
        pytest.skip(f"reference implementation not installed (pip install --no-deps hipporag=={REFERENCE_VERSION}; make setup does)")


@contextlib.contextmanager
def stand_ins(roots: Iterable[str]) -> Iterator[None]:
    """Heavy imports resolve to stand-ins inside the block; sys.modules is restored after."""
    roots = tuple(roots)
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in roots}
    for k in saved:
        del sys.modules[k]
    before = set(sys.modules)
    finder = _StandInFinder(roots)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for k in set(sys.modules) - before:
            # Keep the reference's modules; drop stand-ins and anything else imported in
            # the block (it may hold a stand-in where a real package belongs).
            if not k.split(".")[0] == "hipporag":
                del sys.modules[k]
        sys.modules.update(saved)


# Real, light dependencies of the reference, imported before the stand-ins go in, so
# that they are never imported against a stand-in.
_LIGHT = ("numpy", "igraph", "tqdm", "pydantic", "filelock", "tenacity", "packaging", "httpx", "json", "difflib",
          "sqlite3", "multiprocessing", "concurrent.futures", "asyncio", "argparse", "string")


def load(*modules: str, real: Iterable[str] = ()) -> Dict[str, types.ModuleType]:
    """Import `hipporag.<module>` for each name, heavy imports replaced (except `real`)."""
    require_reference()
    for name in _LIGHT + tuple(real):
        importlib.import_module(name)
    for k in [k for k in sys.modules if k.split(".")[0] == "hipporag"]:
        del sys.modules[k]  # a fresh import for this set of stand-ins
    out = {}
    with stand_ins(r for r in HEAVY if r not in set(real)), contextlib.redirect_stdout(io.StringIO()):
        for m in modules:
            out[m] = importlib.import_module(f"hipporag.{m}")
    _stop_embedding_cache_server()
    return out


def _stop_embedding_cache_server() -> None:
    """The reference's `embedding_model/base.py` starts a `multiprocessing.Manager()` server
    (its EmbeddingCache) when imported, forked from this process. No function the oracle
    calls uses that cache, and a server forked from a process with threads can hang: at
    the end of a one-process pytest run, multiprocessing then waits for it forever. So it
    is shut down as soon as the import is done (each `load` imports afresh)."""
    base = sys.modules.get("hipporag.embedding_model.base")
    cache = getattr(base, "EmbeddingCache", None)
    manager = getattr(cache, "_manager", None)
    if manager is not None and getattr(manager, "_process", None) is not None and manager._process.is_alive():
        manager.shutdown()


def quiet():
    """The reference prints its parse errors; keep test output readable."""
    return contextlib.redirect_stdout(io.StringIO())
