"""The batched PPR solver's block operations in numpy and scipy's compiled loops, for small graphs.

`BatchedSolver` does all its arithmetic through an operator object: x -> x - d S x
over a block of columns, the fused Chebyshev step, and the passes in and out of the
solver's node-major, degree-ordered block. `ppr._Operator` does them in compiled numba
loops (`ppr_kernels`), which are the fastest per step on large graphs but cost every
process numba's start-up: importing it and loading its kernels from the disk cache
took ~0.4 CPU s (results/perf/ppr_operator.md), more than the compiled PPR of the
shared MuSiQue set's 100 questions. `NumpyOperator` does the same operations with
scipy's CSR times dense block (compiled C; `csr_matvecs` adds into its output, which
saves numpy's temporaries and passes) and numpy's array passes, and never imports
numba, nor scipy itself: the product is scipy's `csr_matvecs` loaded from its extension
file (`csr.sparsetools`; importing scipy.sparse would cost 170-250 ms). The passes in
and out of the block and the residual are element-wise in the compiled loops' order (the same bits); the next iterate and the L1 norms round
differently (another summation order, far inside the solver's bound). It uses the
plain CSR matrix S, not the panels, which only help the compiled gathers stay in cache.

Like the compiled operator it has the mixed-precision methods (`mixed_precision`:
`BatchedSolver._refine` runs the Chebyshev steps in float32 and accepts only by the
float64 residual, the same 1e-11 bound): scipy's product on float32 blocks with S's
values in float32 cost ~0.3 of the float64 one per column on the shared set's graph
(the block's gathered rows are half the bytes and stay in cache), and each float32
pass moves half the bytes. Its step is the product plus separate passes, so it also
has the step without its residual (`chebyshev_advance32`), which the solver runs
wherever a float32 round cannot stop yet (`BatchedSolver._chebyshev32`). scipy's
product costs per stored entry (~0.7 ms for S's 86k entries x 16 float32 columns,
a diagonal's 18k entries ~0.1-0.17 ms), more than numpy's pass over a block, so the
vector work stays in numpy passes rather than in diagonals added to the product.

Which one a solver uses is decided by `ppr.choose_operator` from the size of S.
"""
from __future__ import annotations

import threading

import numpy as np

from hipporag2.retrieve.csr import CsrMatrix, csr_of, sparsetools

# y += A x for a CSR A and a dense block, in place: what `A @ x` runs on a zeroed y
# (scipy's compiled loop, without importing scipy: `csr.sparsetools`)
_csr_matvecs = sparsetools().csr_matvecs

# queries per block with this operator: each of its passes reads and writes whole
# blocks, which must stay in cache between passes (on the shared set, 18k nodes, CPU
# ms per query: 3.1-3.2 at 8-12, 3.4 at 16, 3.8 at 32 columns; compiled: 2.1 at 32).
# Re-measured after round 5 made its float32 steps cheaper (100 queries, 2 threads,
# benchmarks/bench_ppr_numpy_steps.py --block-sizes): 16 to 32 within the noise of
# each other, 8 and 50 slower; kept at 16
BLOCK_SIZE = 16
# rows of R one pass of `clean_sums` reads at a time (a cleaned copy of these is made)
_CLEAN_BYTES = 8 << 20


class NumpyOperator:
    """The methods of `ppr._Operator`, in numpy and scipy (see the module docstring).

    `pos` (node -> its row in the block, rows >= len(S) for nodes without edges) is
    the solver's renumbering; the methods that take `pos` must be given this one.
    """

    def __init__(self, S: CsrMatrix, pos: np.ndarray):
        self.S = csr_of(S)  # as the solver holds it; scipy's CSR matrices are read as they are
        self.pos = np.asarray(pos)
        self.n_active = self.S.shape[0]
        # the nodes with edges in block order, and the nodes without edges
        order = np.argsort(self.pos, kind="stable")
        self._active = order[: self.n_active]
        self._weight = None  # (weight array, the same as a one-row CSR matrix), see `_weighted_sum`
        self._scaled = {}  # d -> S's values times d, see `_scaled_data`
        self._local = threading.local()  # one scratch block per thread (the solver runs one block per thread)
        self._lock = threading.Lock()  # the solver's threads share the caches of scaled values
        self._rows = {}  # (n, index dtype) -> 0..n, see `_rows_of`

    # the solver runs its Chebyshev bulk in float32 on this operator too (`BatchedSolver._refine`)
    mixed_precision = True

    def prepare_mixed(self) -> None:
        """Nothing to prepare: S's float32 values are made per damping on first use."""

    def _check_pos(self, pos) -> None:
        if pos is not self.pos and not np.array_equal(pos, self.pos):
            raise ValueError("NumpyOperator was built for another node order")

    def _scaled_data(self, d: float, dtype=np.float64) -> np.ndarray:
        """S's values times d, in `dtype` (one array of nnz per d and dtype: a solve uses
        d, and -d to check; the float32 ones are the float64 products rounded)."""
        key = (d, np.dtype(dtype).char)
        data = self._scaled.get(key)
        if data is None:
            with self._lock:
                if len(self._scaled) >= 8:
                    self._scaled.clear()
                data = (np.asarray(self.S.data, dtype=np.float64) * d).astype(dtype, copy=False)
                self._scaled[key] = data
        return data

    def _axpy(self, a: float, x: np.ndarray, y: np.ndarray) -> None:
        """y += a x: a x into this thread's scratch block, then added (BLAS's daxpy would
        start OpenBLAS's threads beside the solver's own). Two numpy passes measured
        faster than one product with a I through scipy's CSR loop, which pays per
        stored entry (18k x 16 float32: 0.10 vs 0.17 ms; float64 0.17 vs 0.24)."""
        if x.dtype != y.dtype or x.shape != y.shape:
            y += a * x
            return
        t = self._scratch(x.shape, y.dtype)
        np.multiply(x, y.dtype.type(a), out=t)
        y += t

    def add_product(self, x: np.ndarray, d: float, out: np.ndarray) -> None:
        """out += d S x, in place (float64 blocks, out not x).

        Adding into out saves the temporary and the two passes that `out += d * (S @ x)`
        would make over the block; d is folded into a copy of S's values."""
        # (the solver's multi-shift CG compacts its blocks by fancy indexing, which may
        # leave them Fortran-ordered: those take the public product, ravel() would copy)
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            out += float(d) * np.asarray(self.S @ x)
            return
        S = self.S
        n, m = x.shape
        _csr_matvecs(n, n, m, S.indptr, S.indices, self._scaled_data(float(d), out.dtype), x.ravel(), out.ravel())

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
        t = self._scratch(x.shape, r.dtype)
        np.abs(r, out=t)
        self._weighted_sum(t, weight, l1)
        # omega (x + gamma r - x_prev) + x_prev as three in-place passes over the block
        x_prev *= x_prev.dtype.type(1.0 - float(omega))
        self._axpy(float(omega), x, x_prev)
        self._axpy(float(omega) * float(gamma), r, x_prev)

    def chebyshev_step32(self, d, x, x_prev, b, weight, gamma, omega, r, l1) -> None:
        """`chebyshev_step` on float32 blocks with S's values in float32, in float32
        arithmetic (l1 too: it only says when a float32 round may stop; the float64
        residual of `residual_in_place` is what accepts an answer)."""
        self.chebyshev_step(d, x, x_prev, b, weight, gamma, omega, r, l1)

    def chebyshev_advance32(self, d, x, x_prev, b, gamma, omega, r) -> None:
        """The next iterate of `chebyshev_step32` alone, into x_prev, for a step at which
        the round cannot stop yet (r is not touched; it is there for operators whose
        step needs the room):

            x_prev = (1 - omega) x_prev + omega (1 - gamma) x + omega gamma (b + d S x)

        The product and three passes where the full step makes the product and six:
        no residual b - x + d S x, no |r|, no weighted sum. Folding the three
        diagonal terms into the product instead (one matrix of S's pattern plus three
        diagonals, values refilled per step) measured slower on the shared set's graph:
        scipy's product pays per stored entry, ~5 ns per diagonal entry of a 16-column
        float32 block, more than numpy's pass over it (results/perf/ppr_steps_round5_steps.md)."""
        w, g = float(omega), float(gamma)
        x_prev *= x_prev.dtype.type(1.0 - w)
        self._axpy(w * (1.0 - g), x, x_prev)
        self._add_product_times(x, float(d), w * g, x_prev)
        self._axpy(w * g, b, x_prev)

    def _add_product_times(self, x, d: float, coef: float, out) -> None:
        """out += coef d S x: d S's cached values times coef into this thread's copy (one
        multiply of nnz values), as coef changes every step and the cache of
        `_scaled_data` keeps a few values of d only."""
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            self.add_product(x, coef * d, out)
            return
        scaled = self._scaled_data(d, out.dtype)
        data = getattr(self._local, "data", None)
        if data is None or data.shape != scaled.shape or data.dtype != scaled.dtype:
            data = self._local.data = np.empty_like(scaled)
        np.multiply(scaled, out.dtype.type(coef), out=data)
        n, m = x.shape
        _csr_matvecs(n, n, m, self.S.indptr, self.S.indices, data, x.ravel(), out.ravel())

    def residual_in_place(self, d, x, weight, r, l1) -> None:
        """r = b - (x - d S x) for the b that r holds, in float64 with S's float64 values,
        and its weighted L1 norms (`_Operator.residual_in_place`)."""
        r -= x
        self.add_product(x, d, r)
        t = self._scratch(x.shape, np.float64)
        np.abs(r, out=t)
        self._weighted_sum(t, weight, l1)

    def scale_columns(self, src, factor, dst) -> None:
        """dst[i, k] = src[i, k] * factor[k], cast to dst's dtype (float64 <-> float32)."""
        np.multiply(src, np.asarray(factor, dtype=np.float64), out=dst, casting="same_kind")

    def add_scaled_columns(self, z, c, factor) -> None:
        """z[i, k] += c[i, k] * factor[k] in z's dtype (a float32 correction into the float64 answer)."""
        t = self._scratch(z.shape, z.dtype)
        np.multiply(c, np.asarray(factor, dtype=np.float64), out=t, casting="same_kind")
        z += t

    def _scratch(self, shape, dtype=np.float64) -> np.ndarray:
        """This thread's scratch block of `shape` and `dtype` (reused: fresh pages are
        slow on VMs; a float32 block uses the front of the same memory)."""
        buf = getattr(self._local, "buf", None)
        size = int(np.prod(shape))
        nbytes = size * np.dtype(dtype).itemsize
        if buf is None or buf.nbytes < nbytes:
            buf = self._local.buf = np.empty((nbytes + 7) // 8)
        return buf.view(np.uint8)[:nbytes].view(dtype).reshape(shape)

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
        act = self._answers_with_edges(z, sqrt_deg, divisor, factor, out, j0)
        if act is None:
            return
        div, fac = np.asarray(divisor)[:, None], np.asarray(factor)[:, None]
        rest = np.fmax(R[:, cols[~act]], 0.0)
        rest /= np.asarray(scale)[:, None]
        out[:, ~act] = rest / div * fac

    def _answers_with_edges(self, z, sqrt_deg, divisor, factor, out, j0):
        """out[k, j] = max(D^1/2 z, 0)(j0 + j, k) / divisor[k] * factor[k] at the nodes with
        edges among out's columns: the part both scatters share. Returns None when every
        column was such a node (out is complete), else the mask of those columns."""
        p = self.pos[j0 : j0 + out.shape[1]]
        act = p < self.n_active
        div, fac = np.asarray(divisor)[:, None], np.asarray(factor)[:, None]
        if act.all():
            y = z[p] * np.asarray(sqrt_deg)[p, None]  # (w, m)
            np.fmax(y, 0.0, out=y)  # round-off below 0 (and NaN) -> 0
            np.divide(y.T, div, out=out)
            out *= fac
            return None
        pa = p[act]
        y = z[pa] * np.asarray(sqrt_deg)[pa, None]
        np.fmax(y, 0.0, out=y)
        out[:, act] = y.T / div * fac
        return act

    def add_components(self, z, component, value, coef) -> None:
        """z += V coef, V with the single nonzero value[i] in row i, column component[i]:
        one product with V as CSR (one pass over z, in the compiled loop's order: the
        same bits), where numpy's `value[:, None] * coef[component]` would make two
        block-sized temporaries (measured 6 ms per call at 18k x 16, most of a step)."""
        coef = np.ascontiguousarray(coef, dtype=z.dtype)
        value = np.asarray(value)
        component = np.asarray(component)
        n, m = z.shape
        if (not z.flags.c_contiguous or value.dtype != z.dtype
                or component.dtype not in (np.int32, np.int64)):
            z += value[:, None] * coef[component]
            return
        rows = self._rows_of(n, component.dtype)
        _csr_matvecs(n, coef.shape[0], m, rows, component, value, coef.ravel(), z.ravel())

    def _rows_of(self, n: int, dtype) -> np.ndarray:
        """0, 1, ..., n: the indptr of a matrix with one nonzero per row (cached)."""
        key = (n, np.dtype(dtype).char)
        got = self._rows.get(key)
        if got is None:
            got = self._rows[key] = np.arange(n + 1, dtype=dtype)
        return got

    def gather_resets_csr(self, indptr, indices, data, pos, scale, sqrt_deg, b) -> None:
        """`gather_resets` for CSR rows (canonical: sorted, no duplicates; `indptr` holds
        absolute offsets into indices and data, as `ppr.CsrRows`); b is zeroed first.
        The solver then never densifies a block of resets (m x all nodes) to read it."""
        self._check_pos(pos)
        indptr = np.asarray(indptr)
        lo, hi = int(indptr[0]), int(indptr[-1])
        m = len(indptr) - 1
        node = np.asarray(indices[lo:hi])
        col = np.repeat(np.arange(m), np.diff(indptr))
        row = self.pos[node]
        keep = row < self.n_active
        row, col = row[keep], col[keep]
        v = np.fmax(np.asarray(data[lo:hi])[keep], 0.0)  # NaN and negatives -> 0
        v /= np.asarray(scale)[col]
        v /= np.asarray(sqrt_deg)[row]
        b.fill(0.0)
        b[row, col] = v

    def scatter_answers_csr(self, z, indptr, indices, data, pos, scale, sqrt_deg, divisor, factor, out, j0) -> None:
        """`scatter_answers` for CSR resets: nodes with edges from z, then the reset's own
        entries at nodes without edges (where y = u; 0 where the reset has no entry)."""
        self._check_pos(pos)
        w = out.shape[1]
        act = self._answers_with_edges(z, sqrt_deg, divisor, factor, out, j0)
        if act is None:
            return
        out[:, ~act] = 0.0
        indptr = np.asarray(indptr)
        lo, hi = int(indptr[0]), int(indptr[-1])
        node = np.asarray(indices[lo:hi])
        k = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        inside = (node >= j0) & (node < j0 + w)
        node, k = node[inside], k[inside]
        rest = self.pos[node] >= self.n_active
        node, k = node[rest], k[rest]
        v = np.fmax(np.asarray(data[lo:hi])[inside][rest], 0.0)
        v /= np.asarray(scale)[k]
        v /= np.asarray(divisor)[k]
        v *= np.asarray(factor)[k]
        out[k, node - j0] = v

    def weighted_l1(self, x, weight, out) -> None:
        """out[k] = sum_i weight_i |x_ik|."""
        self._weighted_sum(np.abs(x), weight, out)

    def _weighted_sum(self, a, weight, out) -> None:
        """out = weight . a (columns of a), as a one-row CSR product: a BLAS gemv would
        start OpenBLAS's threads, measured 2-12 ms instead of 0.2 for one 18k x 32 block
        on the loaded 2-core machine (the solver runs its own threads, one per block).
        A float32 block is summed in float32 (with the weights rounded to float32)."""
        cached = self._weight
        if cached is None or cached[0] is not weight:
            w = np.asarray(weight, dtype=np.float64)
            cached = self._weight = (weight, w, w.astype(np.float32), np.arange(len(w) + 1, dtype=np.int64)[[0, -1]],
                                     np.arange(len(w), dtype=np.int64))
        _, w64, w32, indptr, indices = cached
        n, m = a.shape
        if not a.flags.c_contiguous:
            out[...] = (CsrMatrix(indptr, indices, w64, (1, n)) @ a)[0]
            return
        acc = np.zeros(m, dtype=a.dtype)
        _csr_matvecs(1, n, m, indptr, indices, w32 if a.dtype == np.float32 else w64, a.ravel(), acc)
        out[...] = acc


class TieredOperator:
    """`NumpyOperator` first; the compiled `ppr._Operator` once the queries solved make
    numba's start-up worth paying (a ski-rental rule).

    The numpy operations cost ~2 ms more CPU per query than the compiled ones on the
    shared MuSiQue set's graph, growing with S's nonzeros, while numba costs a process
    ~0.4 CPU s once (`ppr.choose_operator` has the measurements). Counting queries x nonzeros solved (the
    solver announces each block, `start_block`), it switches when that
    work reaches `budget`, about the work whose extra cost equals the start-up: a run
    never pays more than about twice what the better choice in hindsight would have.
    The two operators compute the same operations on the solver's arrays and keep no
    state of their own about a solve, so the switch is safe between any two calls.
    """

    def __init__(self, S: CsrMatrix, pos: np.ndarray, panels, budget: float):
        self.S = S
        self._panels = panels
        self._numpy = NumpyOperator(S, pos)
        self._op = self._numpy
        self.budget = float(budget)
        self.work = 0.0  # queries x nonzeros solved so far
        self._lock = threading.Lock()
        self._mixed_prepared = False

    # both operators have the mixed-precision methods (`BatchedSolver._refine`)
    mixed_precision = True

    def prepare_mixed(self) -> None:
        self._mixed_prepared = True
        self._op.prepare_mixed()

    @property
    def name(self) -> str:
        """Which operator does the work now: "numpy" or "compiled"."""
        return "numpy" if self._op is self._numpy else "compiled"

    def clean_sums(self, R, sums) -> None:
        self._op.clean_sums(R, sums)

    def start_block(self, queries: int) -> None:
        """The solver calls this once per block of `queries` resets, before the block's
        first operation: the work is counted here, and past the budget the compiled
        loops take over (the mixed-precision path gathers a block's resets more than
        once, so the gathers cannot count)."""
        with self._lock:
            if self._op is self._numpy:
                self.work += float(queries) * float(self.S.nnz)
                if self.work > self.budget:
                    from hipporag2.retrieve.ppr import _Operator  # numba from here on

                    compiled = _Operator(self.S, self._panels)
                    if self._mixed_prepared:  # this solve's float32 steps go on there
                        compiled.prepare_mixed()
                    self._op = compiled

    def gather_resets(self, *args) -> None:
        self._op.gather_resets(*args)

    def gather_resets_csr(self, *args) -> None:
        self._op.gather_resets_csr(*args)

    def scatter_answers_csr(self, *args) -> None:
        self._op.scatter_answers_csr(*args)

    def __call__(self, x, d, out=None):
        return self._op(x, d, out)

    def chebyshev_step(self, *args) -> None:
        self._op.chebyshev_step(*args)

    def chebyshev_step32(self, *args) -> None:
        self._op.chebyshev_step32(*args)

    @property
    def chebyshev_advance32(self):
        """The numpy operator's step without its residual; None once the compiled loops took
        over (their fused step computes the residual at no extra cost: every step checks)."""
        return getattr(self._op, "chebyshev_advance32", None)

    def residual_in_place(self, *args) -> None:
        self._op.residual_in_place(*args)

    def scale_columns(self, *args) -> None:
        self._op.scale_columns(*args)

    def add_scaled_columns(self, *args) -> None:
        self._op.add_scaled_columns(*args)

    def scatter_answers(self, *args) -> None:
        self._op.scatter_answers(*args)

    def add_components(self, *args) -> None:
        self._op.add_components(*args)

    def weighted_l1(self, *args) -> None:
        self._op.weighted_l1(*args)
