"""Compressed sparse rows without importing scipy: the matrices the retrieval path reads.

Why not `scipy.sparse`: importing it costs a process 170-250 ms on this machine
(`python -X importtime`), more than the whole batched PPR of the shared MuSiQue set's
100 questions. Most of that is not sparse code: scipy >= 1.16 vendors array_api_compat,
whose `clone_module` calls hasattr on every name in dir(numpy), and numpy's lazy
submodules then load numpy.f2py (~125 ms, with charset_normalizer), numpy.testing
(~50 ms) and numpy.ma (~20 ms). A run on a saved index whose PPR preparation is saved
(`ppr_store`) needs only a few products of a CSR matrix with a dense block or vector,
so it gets them here: `CsrMatrix` holds what the solver, the numba kernels and the numpy
operator read (indptr, indices, data, shape), and its products call scipy's own compiled
loops (`csr_matvecs`, `csr_matvec`, `csc_matvecs`, `csc_matvec` of
`scipy/sparse/_sparsetools`), loaded from their extension file without importing the
scipy package (`sparsetools`): the same code and the same summation order as scipy's
`A @ x`, so the same bits. Graph preparation (reverse Cuthill-McKee, components,
Lanczos) still imports scipy, lazily, where it runs.

Public solver APIs keep taking scipy sparse matrices: `is_sparse` recognises them when
scipy.sparse has been imported (a caller holding one has imported it), and `as_csr`
reads them into a `CsrMatrix`.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

# the private name the compiled loops are loaded under; its last part must be the
# extension's own name (`PyInit__sparsetools`). Kept out of sys.modules, so a later
# `import scipy.sparse` loads scipy's copy as usual (both copies then work).
_PRIVATE_NAME = "hipporag2_private._sparsetools"


def _extension_file() -> Path | None:
    """scipy's `sparse/_sparsetools` extension file, found without importing scipy
    (`find_spec` of a top-level package only locates it), or None."""
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / "sparse" / f"_sparsetools{suffix}"
            if path.is_file():
                return path
    return None


def load_private(path: Path | str) -> ModuleType:
    """The extension module at `path` loaded under `_PRIVATE_NAME`, not registered in
    sys.modules (~1 ms: it needs only numpy's C API, which is loaded already)."""
    path = str(path)
    loader = importlib.machinery.ExtensionFileLoader(_PRIVATE_NAME, path)
    spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    # an extension of single-phase initialisation enters itself into sys.modules as it is
    # created: take it out again, so that nothing looks imported that was not
    if sys.modules.get(_PRIVATE_NAME) is module:
        del sys.modules[_PRIVATE_NAME]
    loader.exec_module(module)
    return module


def _imported() -> ModuleType:
    """The normal import: scipy loads in full (the cost this module avoids)."""
    from scipy.sparse import _sparsetools

    return _sparsetools


@functools.lru_cache(maxsize=1)
def sparsetools() -> ModuleType:
    """scipy's compiled sparse loops: from their extension file when it is found (no
    scipy import), else by importing scipy.sparse (a scipy laid out otherwise; slower
    start, same loops). Cached for the process: it is code, not state."""
    path = _extension_file()
    if path is not None:
        try:
            return load_private(path)
        except (ImportError, OSError):
            pass
    return _imported()


def is_scipy_sparse(x) -> bool:
    """Whether x is a scipy sparse matrix or array. Never imports scipy: a caller that
    made one has imported scipy.sparse already."""
    mod = sys.modules.get("scipy.sparse")
    return mod is not None and mod.issparse(x)


def is_sparse(x) -> bool:
    """A `CsrMatrix` or a scipy sparse matrix (what the solvers read as sparse resets)."""
    return isinstance(x, CsrMatrix) or is_scipy_sparse(x)


def _result_dtype(a: np.dtype, b: np.dtype) -> np.dtype:
    # what scipy's product gives (`upcast_char` of the two)
    return np.result_type(a, b)


@dataclass(frozen=True, eq=False)
class CsrMatrix:
    """A CSR matrix: row i's entries are ``data[indptr[i]:indptr[i+1]]`` at the columns
    ``indices[...]``. The arrays are held as given (memory-mapped ones stay mapped).

    Only what the retrieval path needs: products with dense blocks and vectors (scipy's
    compiled loops: `matvecs_into` adds into its output), the transpose's product
    (`T`), rows as a dense array, canonical form. `to_scipy` for everything else
    (it imports scipy).
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    def __post_init__(self):
        object.__setattr__(self, "shape", (int(self.shape[0]), int(self.shape[1])))
        if len(self.indptr) != self.shape[0] + 1:
            raise ValueError(f"indptr has {len(self.indptr)} entries for {self.shape[0]} rows")

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1]) if len(self.indptr) else 0

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def T(self) -> "CscMatrix":
        """The transpose, sharing the arrays (CSR of A is CSC of A^T, as in scipy)."""
        return CscMatrix(self.indptr, self.indices, self.data, (self.shape[1], self.shape[0]))

    @classmethod
    def from_coo(cls, rows, cols, vals, shape, index_dtype=None) -> "CsrMatrix":
        """Entries (rows[k], cols[k], vals[k]) as canonical CSR: sorted columns in each
        row, duplicates added up, as scipy's `csr_matrix((vals, (rows, cols)))` stores
        them (duplicates add up; 0/1 matrices, as the retriever builds, exactly)."""
        m, n = int(shape[0]), int(shape[1])
        rows = np.asarray(rows, dtype=np.int64).ravel()
        cols = np.asarray(cols, dtype=np.int64).ravel()
        vals = np.asarray(vals).ravel()
        if index_dtype is None:
            index_dtype = np.int32 if max(m, n, len(vals)) < 2**31 else np.int64
        order = np.lexsort((cols, rows))  # stable: duplicates keep their input order
        r, c, v = rows[order], cols[order], vals[order]
        if len(r):
            first = np.ones(len(r), dtype=bool)
            first[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
            starts = np.flatnonzero(first)
            if len(starts) < len(r):
                v = np.add.reduceat(v, starts)  # left to right, as scipy's sum_duplicates
                r, c = r[starts], c[starts]
        indptr = np.zeros(m + 1, dtype=index_dtype)
        np.cumsum(np.bincount(r, minlength=m), out=indptr[1:])
        return cls(indptr, c.astype(index_dtype), v, (m, n))

    @property
    def has_canonical_format(self) -> bool:
        """Columns strictly increasing within every row (sorted, no duplicates); scipy's
        name, computed on each read (one vectorised pass over the indices)."""
        a, b = int(self.indptr[0]), int(self.indptr[-1])
        idx = np.asarray(self.indices[a:b])
        if len(idx) < 2:
            return True
        up = idx[1:] > idx[:-1]
        # a row's first entry may be below the previous row's last
        starts = np.asarray(self.indptr[1:-1], dtype=np.int64) - a
        starts = starts[(starts > 0) & (starts < len(idx))]
        up[starts - 1] = True
        return bool(up.all())

    def canonical(self, dtype=np.float64) -> "CsrMatrix":
        """This matrix with `dtype` values in canonical form: itself when it already is
        (no copy), else sorted with duplicates added (`from_coo`)."""
        data = np.asarray(self.data, dtype=dtype)
        if self.has_canonical_format:
            return self if data is self.data else CsrMatrix(self.indptr, self.indices, data, self.shape)
        a, b = int(self.indptr[0]), int(self.indptr[-1])
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        return CsrMatrix.from_coo(rows, self.indices[a:b], data[a:b], self.shape, self.indices.dtype)

    def toarray(self) -> np.ndarray:
        return self.rows_dense(slice(0, self.shape[0]))

    def rows_dense(self, rows: slice, columns: slice | None = None) -> np.ndarray:
        """Rows `rows` (step 1), only the columns `columns` (step 1) if given, as a dense
        array; duplicate entries add up (as scipy densifies)."""
        r0, r1, _ = rows.indices(self.shape[0])
        c0, c1 = (0, self.shape[1]) if columns is None else columns.indices(self.shape[1])[:2]
        out = np.zeros((max(0, r1 - r0), max(0, c1 - c0)), dtype=self.data.dtype)
        a, b = int(self.indptr[r0]), int(self.indptr[max(r0, r1)])
        k = np.repeat(np.arange(out.shape[0]), np.diff(self.indptr[r0 : max(r0, r1) + 1]))
        j = np.asarray(self.indices[a:b], dtype=np.int64)
        inside = (j >= c0) & (j < c1)
        np.add.at(out, (k[inside], j[inside] - c0), self.data[a:b][inside])
        return out

    def matvecs_into(self, x: np.ndarray, y: np.ndarray) -> None:
        """y += A x for C-contiguous blocks x (n, m), y (rows, m) of A's value dtype:
        scipy's `csr_matvecs` in place (what `A @ x` runs on a zeroed y)."""
        m, n = self.shape
        sparsetools().csr_matvecs(m, n, x.shape[1], self.indptr, self.indices, self.data, x.ravel(), y.ravel())

    def __matmul__(self, other):
        return _product(sparsetools(), "csr", self.indptr, self.indices, self.data, self.shape, other)

    def to_scipy(self):
        """The same matrix as `scipy.sparse.csr_matrix` (imports scipy; shares the arrays)."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape, copy=False)


@dataclass(frozen=True, eq=False)
class CscMatrix:
    """Compressed sparse columns (`CsrMatrix.T`): column j's entries are
    ``data[indptr[j]:indptr[j+1]]`` at the rows ``indices[...]``; only its products."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    def __matmul__(self, other):
        return _product(sparsetools(), "csc", self.indptr, self.indices, self.data, self.shape, other)


def _product(tools: ModuleType, fmt: str, indptr, indices, data, shape, other) -> np.ndarray:
    """A @ other for a dense vector or block, as scipy's compressed matrices make it
    (`_matmul_vector` / `_matmul_multivector`): a zeroed result of the upcast dtype and
    the compiled loop over it, so the same bits as scipy's `@`."""
    x = np.asarray(other)
    m, n = shape
    if x.ndim == 0 or x.shape[0] != n or x.ndim > 2:
        raise ValueError(f"dimension mismatch: {shape} @ {x.shape}")
    dtype = _result_dtype(data.dtype, x.dtype)
    if x.ndim == 1 or x.shape[1] == 1:  # scipy takes (n, 1) as a vector too
        y = np.zeros(m, dtype=dtype)
        getattr(tools, f"{fmt}_matvec")(m, n, indptr, indices, data, x.ravel(), y)
        return y if x.ndim == 1 else y.reshape(m, 1)
    y = np.zeros((m, x.shape[1]), dtype=dtype)
    getattr(tools, f"{fmt}_matvecs")(m, n, x.shape[1], indptr, indices, data, x.ravel(), y.ravel())
    return y


def csr_of(A) -> CsrMatrix:
    """A as a `CsrMatrix` holding the same arrays, as they are (no canonical form): a
    `CsrMatrix` itself, a scipy sparse matrix in CSR (other formats converted), or a
    dense array (imports scipy to compress it)."""
    if isinstance(A, CsrMatrix):
        return A
    if not is_scipy_sparse(A):
        import scipy.sparse as sp

        A = sp.csr_matrix(A)
    A = A.tocsr()
    return CsrMatrix(A.indptr, A.indices, A.data, A.shape)


def as_csr(x, dtype=np.float64) -> CsrMatrix:
    """x (a `CsrMatrix` or a scipy sparse matrix) as canonical CSR with `dtype` values
    (sorted columns, duplicates added up, as scipy reads and densifies them)."""
    if isinstance(x, CsrMatrix):
        return x.canonical(dtype)
    if is_scipy_sparse(x):
        import scipy.sparse as sp  # imported already: x is one of its matrices

        R = sp.csr_matrix(x, dtype=dtype)
        R.sum_duplicates()  # also sorts
        return CsrMatrix(R.indptr, R.indices, R.data, R.shape)
    raise TypeError(f"expected a CsrMatrix or a scipy sparse matrix, got {type(x).__name__}")
