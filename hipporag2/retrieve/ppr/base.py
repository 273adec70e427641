"""What every PPR solver offers (`PPRSolver`), and the input checks they share."""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from hipporag2.retrieve.csr import Csr


@runtime_checkable
class PPRSolver(Protocol):
    """A Personalized PageRank solver over one graph (`batched.py` holds the math). Resets: rows
    of reset vectors, not necessarily normalised, as CSR rows (`csr.Csr` or scipy sparse: a
    query's few seeds fill them cheaply) or an array; NaN and negatives count as 0, as in the reference."""

    # queries worth handing over per call: the retriever cuts its blocks into pieces of this
    batch_size: int

    @classmethod
    def for_index(cls, edges, igraph_graph, cache_dir=None, n_threads: int | None = None,
                  tol: float | None = None) -> "PPRSolver":
        """The solver over an index's graph: `edges` (`graph.build.GraphEdges`), or the igraph
        graph `igraph_graph()` builds; `cache_dir` may hold a saved preparation."""

    def solve(self, resets, damping: float, out: np.ndarray | None = None,
              columns: slice | None = None) -> np.ndarray:
        """PPR of each reset row: (q, n), or only the nodes `columns` (a slice with step 1:
        e.g. the passages, all a ranking needs), written into `out` when given."""

    def solve_many(self, resets, dampings: Sequence[float], out: np.ndarray | None = None) -> np.ndarray:
        """y = u + d A y for each reset row u (u unnormalised) and each damping d:
        (len(dampings), q, n). What a damping x passage-weight sweep needs: y is linear in
        the reset, so PPR(p + w s) = normalise(y_p + w y_s) for every w from two solves."""

    def release(self) -> None:
        """Hand back memory kept between calls (a no-op where nothing is kept)."""


def as_csr(resets) -> Csr:
    """Resets as canonical float64 CSR rows (sorted columns, duplicates added up, as
    scipy densifies them): a `Csr` as it is (`seeds.reset_rows` makes them so, and no
    scipy.sparse import), anything else through scipy (1-d: one row)."""
    if isinstance(resets, Csr):
        return resets
    import scipy.sparse as sp

    if not sp.issparse(resets):
        resets = sp.csr_matrix(np.atleast_2d(np.asarray(resets, dtype=np.float64)))
    R = resets if resets.format == "csr" and resets.dtype == np.float64 else sp.csr_matrix(resets, dtype=np.float64)
    if not R.has_canonical_format:
        R = R.copy()  # the caller's matrix stays as it was
        R.sum_duplicates()  # also sorts
    return Csr.of(R)


def clean_row_sums(R: Csr, mask: np.ndarray | None = None, rows: slice = slice(None)) -> np.ndarray:
    """The sums of R's rows `rows` (step 1) once cleaned (NaN/negative -> 0), over the
    columns in `mask` if given; read in place (no copy of the rows)."""
    ptr = np.asarray(R.indptr[rows.start : None if rows.stop is None else rows.stop + 1], dtype=np.int64)
    a, b = int(ptr[0]), int(ptr[-1])
    v = np.fmax(R.data[a:b], 0.0)
    if mask is not None:
        v = np.where(mask[R.indices[a:b]], v, 0.0)
    ptr -= a
    sums = np.zeros(len(ptr) - 1)
    full = ptr[1:] > ptr[:-1]  # reduceat would give an empty row its next entry
    if full.any():
        sums[full] = np.add.reduceat(v, ptr[:-1][full])
    return sums


def check_damping(damping: float) -> float:
    d = float(damping)
    if not (0.0 <= d < 1.0):  # prpack returns NaN at d = 1 and igraph rejects d outside [0, 1]
        raise ValueError(f"damping must be in [0, 1), got {damping!r}")
    return d


def column_range(columns: slice | None, n: int) -> tuple[int, int]:
    """(start, stop) of the nodes a solve returns; a slice with step 1 within [0, n]."""
    if columns is None:
        return 0, n
    start, stop, step = columns.indices(n)
    if step != 1:
        raise ValueError("columns must be a slice with step 1")
    return start, max(start, stop)


def output_array(out: np.ndarray | None, shape: tuple[int, ...], resets: Csr) -> np.ndarray:
    """`out` checked as a place for a solver's answers, or a new array of `shape`."""
    if out is None:
        return np.empty(shape)
    if not isinstance(out, np.ndarray) or out.dtype != np.float64 or out.shape != tuple(shape):
        got = f"{out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(f"out must be a float64 array of shape {tuple(shape)}, got {got}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be C-contiguous and writeable")
    if np.may_share_memory(out, resets.data):
        raise ValueError("out must not overlap the reset vectors")
    return out


class OutputBuffer:
    """One float64 allocation handed out again and again as the `out` of solver calls: `view(shape)`
    is the front of it (grown when a call needs more), overwritten by the next call's view."""

    def __init__(self) -> None:
        self._flat = np.empty(0)

    def view(self, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        if size > self._flat.size:
            self._flat = np.empty(size)
        return self._flat[:size].reshape(shape)
