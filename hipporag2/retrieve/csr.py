"""CSR matrices without `import scipy.sparse`, which runs scipy's array-API layer (it
imports numpy's f2py, testing, ma...): more CPU than the batched PPR of a hundred queries
on a saved index (results/perf/README.md, round 8). `Csr` holds the arrays; its products
are scipy's compiled loops (`sparse/_sparsetools`, loaded from their file), so the same bits.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@functools.lru_cache(maxsize=1)
def sparsetools():
    """scipy's `sparse/_sparsetools`, loaded from its file under a private name kept out of
    sys.modules (`import scipy.sparse` loads its own copy); else by importing scipy.sparse."""
    spec = importlib.util.find_spec("scipy")  # finds the package without running it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = str(Path(folder) / "sparse" / f"_sparsetools{suffix}")
            loader = importlib.machinery.ExtensionFileLoader("hipporag2_private._sparsetools", path)
            try:
                module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
            except ImportError:  # no such file, or it does not load
                continue
            sys.modules.pop(loader.name, None)  # a single-phase extension registers itself on creation
            loader.exec_module(module)
            return module
    from scipy.sparse import _sparsetools

    return _sparsetools


@dataclass(frozen=True, eq=False)
class Csr:
    """A compressed sparse matrix as scipy holds one, arrays kept as given (memory-mapped
    ones stay mapped): row i's entries are ``data[indptr[i]:indptr[i+1]]`` at columns
    ``indices[...]``; ``format="csc"`` (what `T` gives) reads them as columns."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]
    format: str = "csr"

    @classmethod
    def of(cls, A) -> "Csr":
        """A scipy sparse matrix's CSR arrays."""
        A = A.tocsr()
        return cls(A.indptr, A.indices, A.data, A.shape)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def T(self) -> "Csr":
        return Csr(self.indptr, self.indices, self.data, self.shape[::-1], "csc" if self.format == "csr" else "csr")

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        """A @ x for a dense vector or block, as scipy's `_matmul_dispatch` makes it: a zeroed
        result of the upcast dtype, `<format>_matvec` for a vector or one column, else `_matvecs`."""
        x, (m, n) = np.asarray(x), self.shape
        if x.ndim not in (1, 2) or x.shape[0] != n:
            raise ValueError(f"dimension mismatch: {self.shape} @ {x.shape}")
        y = np.zeros((m,) + x.shape[1:], dtype=np.result_type(self.data.dtype, x.dtype))
        vecs = () if x.ndim == 1 or x.shape[1] == 1 else (x.shape[1],)
        kernel = getattr(sparsetools(), f"{self.format}_matvec{'s' if vecs else ''}")
        kernel(m, n, *vecs, self.indptr, self.indices, self.data, x.ravel(), y.ravel())
        return y

    def toarray(self, rows: slice = slice(None), columns: slice = slice(None)) -> np.ndarray:
        """Rows `rows` and columns `columns` (slices with step 1) of a CSR matrix, dense;
        duplicates add up in stored order, as scipy densifies."""
        (r0, r1, _), (c0, c1, _) = rows.indices(self.shape[0]), columns.indices(self.shape[1])
        r1, c1 = max(r0, r1), max(c0, c1)
        out = np.zeros((r1 - r0, c1 - c0), dtype=self.data.dtype)
        a, b = int(self.indptr[r0]), int(self.indptr[r1])
        k, j = np.repeat(np.arange(r1 - r0), np.diff(self.indptr[r0 : r1 + 1])), self.indices[a:b]
        inside = (j >= c0) & (j < c1)
        np.add.at(out, (k[inside], j[inside] - c0), self.data[a:b][inside])
        return out

    def to_scipy(self):
        """The same matrix over the same arrays, as scipy's (imports scipy.sparse)."""
        import scipy.sparse as sp

        kind = sp.csr_matrix if self.format == "csr" else sp.csc_matrix
        return kind((self.data, self.indices, self.indptr), shape=self.shape, copy=False)
