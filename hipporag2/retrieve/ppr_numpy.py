"""The batched PPR solver's block operations in numpy and scipy, for small graphs.

`BatchedSolver` does all its arithmetic through an operator object: x -> x - d S x
over a block of columns, the fused Chebyshev step, and the passes in and out of the
solver's node-major, degree-ordered block. `ppr._Operator` does them in compiled numba
loops (`ppr_kernels`), which are the fastest per step on large graphs but cost every
process numba's start-up: importing it and loading its kernels from the disk cache
took ~0.4 CPU s (results/perf/ppr_operator.md), more than the compiled PPR of the
shared MuSiQue set's 100 questions. `NumpyOperator` does the same operations with
scipy's CSR times dense block (compiled C; `csr_matvecs` adds into its output, which
saves numpy's temporaries and passes) and numpy's array passes, and never imports
numba. The passes in and out of the block and the residual are element-wise in the
compiled loops' order (the same bits); the next iterate and the L1 norms round
differently (another summation order, far inside the solver's bound). It is float64
only (no `mixed_precision`: the solver's float64 Chebyshev path), and uses the plain
CSR matrix S, not the panels, which only help the compiled gathers stay in cache.

Which one a solver uses is decided by `ppr.choose_operator` from the size of S.
"""
from __future__ import annotations

import threading

import numpy as np
import scipy.sparse as sp

try:  # y += A x for a CSR A and a dense block, in place: what `A @ x` runs on a zeroed y
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # a scipy that moved it: the public product (one temporary per call)
    _csr_matvecs = None

# queries per block with this operator: each of its passes reads and writes whole
# blocks, which must stay in cache between passes (on the shared set, 18k nodes, CPU
# ms per query: 3.1-3.2 at 8-12, 3.4 at 16, 3.8 at 32 columns; compiled: 2.1 at 32)
BLOCK_SIZE = 16
# rows of R one pass of `clean_sums` reads at a time (a cleaned copy of these is made)
_CLEAN_BYTES = 8 << 20


class NumpyOperator:
    """The methods of `ppr._Operator`, in numpy and scipy (see the module docstring).

    `pos` (node -> its row in the block, rows >= len(S) for nodes without edges) is
    the solver's renumbering; the methods that take `pos` must be given this one.
    """

    def __init__(self, S: sp.csr_matrix, pos: np.ndarray):
        self.S = S if isinstance(S, sp.csr_matrix) else sp.csr_matrix(S)
        self.pos = np.asarray(pos)
        self.n_active = self.S.shape[0]
        # the nodes with edges in block order, and the nodes without edges
        order = np.argsort(self.pos, kind="stable")
        self._active = order[: self.n_active]
        self._weight = None  # (weight array, the same as a one-row CSR matrix), see `_weighted_sum`
        self._scaled = {}  # d -> S's values times d, see `_scaled_data`
        self._diag = np.arange(self.n_active + 1, dtype=self.S.indices.dtype)  # I's indptr and indices
        self._local = threading.local()  # one scratch block per thread (the solver runs one block per thread)

    def _check_pos(self, pos) -> None:
        if pos is not self.pos and not np.array_equal(pos, self.pos):
            raise ValueError("NumpyOperator was built for another node order")

    def _scaled_data(self, d: float) -> np.ndarray:
        """S's values times d (one array of nnz per d: a solve uses d, and -d to check)."""
        data = self._scaled.get(d)
        if data is None:
            if len(self._scaled) >= 4:
                self._scaled.clear()
            data = self._scaled[d] = np.asarray(self.S.data, dtype=np.float64) * d
        return data

    def _axpy(self, a: float, x: np.ndarray, y: np.ndarray) -> None:
        """y += a x in one pass, as a product with a I (numpy needs a temporary and two
        passes; BLAS's daxpy would start OpenBLAS's threads beside the solver's own)."""
        n, m = x.shape
        if _csr_matvecs is None or not (x.flags.c_contiguous and y.flags.c_contiguous):
            y += a * x
            return
        _csr_matvecs(n, n, m, self._diag, self._diag, np.full(n, a), x.ravel(), y.ravel())

    def add_product(self, x: np.ndarray, d: float, out: np.ndarray) -> None:
        """out += d S x, in place (float64 blocks, out not x).

        Adding into out saves the temporary and the two passes that `out += d * (S @ x)`
        would make over the block; d is folded into a copy of S's values."""
        # (the solver's multi-shift CG compacts its blocks by fancy indexing, which may
        # leave them Fortran-ordered: those take the public product, ravel() would copy)
        if _csr_matvecs is None or not (x.flags.c_contiguous and out.flags.c_contiguous):
            out += float(d) * np.asarray(self.S @ x)
            return
        S = self.S
        n, m = x.shape
        _csr_matvecs(n, n, m, S.indptr, S.indices, self._scaled_data(float(d)), x.ravel(), out.ravel())

    def __call__(self, x: np.ndarray, d: float, out: np.ndarray | None = None) -> np.ndarray:
        """x - d S x (into `out` when given: C-contiguous, float64, not x itself)."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        if out is None:
            out = np.empty_like(x)
        np.copyto(out, x)
        self.add_product(x, -float(d), out)
        return out

    def chebyshev_step(self, d, x, x_prev, b, weight, gamma, omega, r, l1) -> None:
        """As `ppr_kernels.chebyshev_step`: r = b - (x - d S x), l1 = weight . |r| per
        column, x_prev = omega (x + gamma r - x_prev) + x_prev (the next iterate)."""
        np.subtract(b, x, out=r)
        self.add_product(x, d, r)  # (b - x) + d S x
        t = self._scratch(x.shape)
        np.abs(r, out=t)
        self._weighted_sum(t, weight, l1)
        # omega (x + gamma r - x_prev) + x_prev as three in-place passes over the block
        x_prev *= 1.0 - float(omega)
        self._axpy(float(omega), x, x_prev)
        self._axpy(float(omega) * float(gamma), r, x_prev)

    def _scratch(self, shape) -> np.ndarray:
        """This thread's scratch block of `shape` (reused: fresh pages are slow on VMs)."""
        buf = getattr(self._local, "buf", None)
        size = int(np.prod(shape))
        if buf is None or buf.size < size:
            buf = self._local.buf = np.empty(size)
        return buf[:size].reshape(shape)

    def clean_sums(self, R, sums) -> None:
        """sums[k] = sum_j clean(R[k, j]) (NaN and negatives count 0), a few rows at a time."""
        m, n = R.shape
        step = max(1, _CLEAN_BYTES // (8 * max(1, n)))
        for s in range(0, m, step):
            np.fmax(R[s : s + step], 0.0).sum(axis=1, out=sums[s : s + step])

    def gather_resets(self, R, pos, scale, sqrt_deg, b) -> None:
        """b[pos[j], k] = clean(R[k, j]) / scale[k] / sqrt_deg[pos[j]] for the nodes with edges."""
        self._check_pos(pos)
        a = R[:, self._active]  # a copy: (m, n_active) in block order
        np.fmax(a, 0.0, out=a)
        a /= np.asarray(scale)[:, None]
        b[...] = a.T
        b /= np.asarray(sqrt_deg)[:, None]

    def scatter_answers(self, z, R, pos, scale, sqrt_deg, divisor, factor, out, j0) -> None:
        """out[k, j] = y(j0 + j, k) / divisor[k] * factor[k]: y = max(D^1/2 z, 0) where the
        node has edges, the cleaned reset over its sum where not (`ppr_kernels._answer`)."""
        self._check_pos(pos)
        cols = np.arange(j0, j0 + out.shape[1])
        p = self.pos[cols]
        act = p < self.n_active
        div, fac = np.asarray(divisor)[:, None], np.asarray(factor)[:, None]
        if act.all():
            y = z[p] * np.asarray(sqrt_deg)[p, None]  # (w, m)
            np.fmax(y, 0.0, out=y)  # round-off below 0 (and NaN) -> 0
            np.divide(y.T, div, out=out)
            out *= fac
            return
        pa = p[act]
        y = z[pa] * np.asarray(sqrt_deg)[pa, None]
        np.fmax(y, 0.0, out=y)
        out[:, act] = y.T / div * fac
        rest = np.fmax(R[:, cols[~act]], 0.0)
        rest /= np.asarray(scale)[:, None]
        out[:, ~act] = rest / div * fac

    def add_components(self, z, component, value, coef) -> None:
        """z += V coef, V with the single nonzero value[i] in row i, column component[i]."""
        z += np.asarray(value)[:, None] * np.asarray(coef)[component]

    def weighted_l1(self, x, weight, out) -> None:
        """out[k] = sum_i weight_i |x_ik|."""
        self._weighted_sum(np.abs(x), weight, out)

    def _weighted_sum(self, a, weight, out) -> None:
        """out = weight . a (columns of a), as a one-row CSR product: a BLAS gemv would
        start OpenBLAS's threads, measured 2-12 ms instead of 0.2 for one 18k x 32 block
        on the loaded 2-core machine (the solver runs its own threads, one per block)."""
        if self._weight is None or self._weight[0] is not weight:
            w = np.asarray(weight, dtype=np.float64)
            self._weight = (weight, sp.csr_matrix((w, np.arange(len(w)), [0, len(w)]), shape=(1, len(w))))
        out[...] = (self._weight[1] @ a)[0]


class TieredOperator:
    """`NumpyOperator` first; the compiled `ppr._Operator` once the queries solved make
    numba's start-up worth paying (a ski-rental rule).

    The numpy operations cost ~2 ms more CPU per query than the compiled ones on the
    shared MuSiQue set's graph, growing with S's nonzeros, while numba costs a process
    ~0.4 CPU s once (`ppr.choose_operator` has the measurements). Counting queries x nonzeros solved (each block of resets
    passes through `gather_resets` once, dense or CSR resets alike), the solver switches when that
    work reaches `budget`, about the work whose extra cost equals the start-up: a run
    never pays more than about twice what the better choice in hindsight would have.
    The two operators compute the same operations on the solver's arrays and keep no
    state of their own about a solve, so the switch is safe between any two calls.
    """

    def __init__(self, S: sp.csr_matrix, pos: np.ndarray, panels, budget: float):
        self.S = S
        self._panels = panels
        self._numpy = NumpyOperator(S, pos)
        self._op = self._numpy
        self.budget = float(budget)
        self.work = 0.0  # queries x nonzeros solved so far
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """Which operator does the work now: "numpy" or "compiled"."""
        return "numpy" if self._op is self._numpy else "compiled"

    def clean_sums(self, R, sums) -> None:
        self._op.clean_sums(R, sums)

    def gather_resets(self, R, pos, scale, sqrt_deg, b) -> None:
        """Each block of resets enters here once, so the work is counted here."""
        with self._lock:
            if self._op is self._numpy:
                self.work += float(b.shape[1]) * float(self.S.nnz)
                if self.work > self.budget:
                    from hipporag2.retrieve.ppr import _Operator  # numba from here on

                    self._op = _Operator(self.S, self._panels)
        self._op.gather_resets(R, pos, scale, sqrt_deg, b)

    def __call__(self, x, d, out=None):
        return self._op(x, d, out)

    def chebyshev_step(self, *args) -> None:
        self._op.chebyshev_step(*args)

    def scatter_answers(self, *args) -> None:
        self._op.scatter_answers(*args)

    def add_components(self, *args) -> None:
        self._op.add_components(*args)

    def weighted_l1(self, *args) -> None:
        self._op.weighted_l1(*args)
