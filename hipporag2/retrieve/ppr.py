"""Personalized PageRank solvers.

`PrpackSolver` is the reference: one igraph prpack call per reset vector, exactly as
the HippoRAG 2 reference implementation makes it. Other solvers must reproduce its
scores (see tests/test_ppr.py).

`BatchedSolver` gives the same scores (L1 distance to prpack ~1e-11, identical
rankings) for many reset vectors at once, from a graph prepared once. What it has
to match, read from igraph's prpack glue and checked on igraph in tests/test_ppr.py:

* igraph turns each undirected edge into two directed ones; parallel edges add up,
  edges of weight <= 0 are dropped (negative ones too: no error for undirected
  graphs), a self-loop counts twice; each node's out-weights are normalised to 1.
* the reset vector is divided by its sum and used both as the teleport distribution
  and as the jump distribution of dangling (zero-weighted-degree) nodes. With that
  choice the PageRank vector is x = y / sum(y) where y = u + d A y, A = W D^-1 with
  dangling columns left zero: the dangling jumps only rescale y, and the final
  normalisation removes the scale. prpack solves exactly this system (Gauss-Seidel
  per strongly connected component until residual / (1 - d) < 1e-10, or Gaussian
  elimination below 128 nodes) and normalises.
* a reset summing to 0, NaN/inf resets and damping outside [0, 1] are errors in
  igraph (damping 1 gives NaN); we raise ValueError for those, after the same
  NaN/negative -> 0 cleaning the caller applies. NaN edge weights give all-NaN
  scores in prpack; we refuse them.

In an undirected graph a dangling node has no edges at all, so it decouples: y = u
there. On the other nodes, with y = D^1/2 z the system becomes (I - d S) z = D^-1/2 u,
S = D^-1/2 W D^-1/2 symmetric with spectrum in [-1, 1], so I - d S is symmetric
positive definite for d < 1 and Krylov methods apply: they need far fewer sparse
products than the power iteration (14-16 vs 41 at d = 0.5, 25 vs 185 at d = 0.85 on
the MuSiQue-sized synthetic graph). Each connected component's sqrt(deg) is an
eigenvector of S for the eigenvalue 1, known in advance, so that part of the reset is
solved in closed form; the rest of the spectrum fills an interval [lo, hi] up to its
ends on these graphs (about [-0.55, 0.58] on the synthetic graph, [-0.97, 0.996] on
the shared MuSiQue subset), and then CG cannot beat the Chebyshev polynomials of
that interval: on both graphs CG used exactly the number of products the Chebyshev
bound gives.

* One damping (`solve`, the per-query path): Chebyshev iteration on [lo, hi]
  (`spectral_interval`, from Lanczos once per graph). Its step coefficients are known
  in advance, so each step is a single pass that does the product and all vector work
  row by row (`ppr_kernels.chebyshev_step`); CG needs dot products over the whole
  block between its product and its updates, i.e. extra passes over the block.
  On both operators below the steps run in float32 (`BatchedSolver._refine`: a step's
  cost is its gathers of block rows, and float32 rows are half the bytes), in rounds of
  iterative refinement: each round's correction goes into a float64 answer whose true
  residual is computed in float64, and only that residual accepts it, by the stopping
  rule below; a round that stalls hands over to the float64 path. On numpy, whose step
  is the product plus separate passes, a float32 step computes its residual only where
  the round may stop (from a step before the polynomial bound's count on); the others
  only advance the iterate.
* Several dampings (`solve_unnormalised`, the sweep path): multi-shift CG. All
  dampings share one Krylov space, so one set of products serves them all, and y is
  linear in the reset, which is what makes a damping x passage-weight sweep cheap.

Either way one sparse-times-dense-block product serves a block of queries, blocks run
in parallel threads, and nodes are renumbered in reverse Cuthill-McKee order (`node_order`).

The arithmetic on the block goes through an operator object with two implementations
of the same operations: `_Operator`, compiled numba loops (`ppr_kernels`: S in column
panels, prefetching, the fused Chebyshev step), fastest per step, and
`ppr_numpy.NumpyOperator` (scipy's CSR product, numpy passes), which never imports
numba. Neither imports scipy: S and the resets are `csr.CsrMatrix`, whose products are
scipy's compiled loops loaded without the package (its import would cost a run
0.2-0.5 s); only preparing a graph (`prepare_graph`, `spectral_interval`) imports it.
numba's start-up costs a process ~0.4 CPU s, more than the compiled PPR of a
100-question run on the shared MuSiQue set, so `choose_operator` picks by the size of S: below
NUMPY_OPERATOR_MAX_NNZ nonzeros a solver starts on numpy and moves to the compiled loops
once the queries it has solved make the start-up worth paying (`ppr_numpy.TieredOperator`);
larger graphs start compiled. The stopping rule below is the same for both.

Stopping rule, with a bound rather than a heuristic: the y-space residual is
rho = u + d A y - y = D^1/2 r, and since ||A||_1 <= 1 the error of y is at most
||rho||_1 / (1 - d). The answer is an iterate plus one power step (y + rho, which
shrinks that error by d). PPR's total mass is known in closed form: A's columns sum
to 1 except at dangling nodes, where y = u, so sum(y) = (1 - d u_dangling) / (1 - d)
(u_dangling: the reset's share on nodes without edges). `solve` divides y by that
exact mass rather than by the sum of the computed y, which would double the error
bound, so its L1 error is at most d ||rho||_1 / (1 - d u_dangling); iterating stops
once that is below `tol` (default 1e-11, a thousand times tighter than the 1e-8
agreement promised with prpack). Its rows therefore sum to 1 within that error, not
to the last bit. `solve_unnormalised` (the sweep, where mixtures are normalised by
their sums later) keeps the cruder per-row bound: y within tol / 2 of the exact y,
relative to the row's sum. Chebyshev's fused pass measures the true residual of the
iterate it reads; CG's recursive residual is re-checked with the true one at the end,
and CG restarts on the remainder if round-off made it drift (as it does, from its
iterate, if a Chebyshev iteration runs out of steps because the interval was wrong).
"""
from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from hipporag2.retrieve.csr import CsrMatrix, as_csr, is_sparse

if TYPE_CHECKING:  # igraph is imported by the callers that hand over a graph: importing it
    # here would cost every batched run the import (igraph pulls in matplotlib for its
    # drawing code: ~1.5 s idle, 15 s on the loaded 2-core machine)
    import igraph as ig
    # and scipy.sparse where a graph is prepared only, never by a run on a saved preparation
    # (170-250 ms of import: see `csr`)
    import scipy.sparse as sp
    from scipy.sparse.linalg import LinearOperator

from hipporag2.retrieve.ppr_panels import Panels


def clean_reset(reset: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """NaN or negative reset entries become 0, as the reference does before PPR."""
    # fmax(x, 0) is x for x >= 0 and 0 for negatives and NaN: the reference's
    # np.where(isnan | < 0, 0, x) in one pass, which matters at 1000 x 100k entries
    return np.fmax(np.asarray(reset, dtype=np.float64), 0.0, out=out)


def output_array(out: np.ndarray | None, shape: tuple[int, ...], resets: np.ndarray) -> np.ndarray:
    """`out` checked as a place for a solver's answers, or a new array of `shape`.

    Passing the same `out` to every call of a run saves more than memory on some
    machines: a virtual machine may fault each freshly touched page in from its host
    (this one: up to ~3 ms per MB, i.e. up to ~2 ms per query of 100k nodes).
    """
    if out is None:
        return np.empty(shape)
    if not isinstance(out, np.ndarray) or out.dtype != np.float64 or out.shape != tuple(shape):
        got = f"{out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(f"out must be a float64 array of shape {tuple(shape)}, got {got}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be C-contiguous and writeable")
    if np.may_share_memory(out, resets.data if is_sparse(resets) else resets):
        raise ValueError("out must not overlap the reset vectors")
    return out


def sparse_resets(resets) -> CsrMatrix:
    """Resets given as a `csr.CsrMatrix` or a scipy sparse matrix, as canonical float64 CSR
    (sorted indices; duplicate entries add up, as they do when scipy densifies the matrix)."""
    return as_csr(resets)


def sparse_clean_sums(R, mask: np.ndarray | None = None) -> np.ndarray:
    """Each row's sum once cleaned (NaN/negative -> 0), over the columns in `mask` if given.
    R: CSR, or `CsrRows` (whose indptr may start past 0)."""
    a, b = int(R.indptr[0]), int(R.indptr[-1])
    v = clean_reset(R.data[a:b])
    if mask is not None:
        v = np.where(mask[R.indices[a:b]], v, 0.0)
    ptr = np.asarray(R.indptr, dtype=np.int64) - a
    sums = np.zeros(len(ptr) - 1)
    full = ptr[1:] > ptr[:-1]  # reduceat would give an empty row its next entry
    if full.any():
        sums[full] = np.add.reduceat(v, ptr[:-1][full])
    return sums


@dataclass(frozen=True)
class CsrRows:
    """Rows start..stop of a CSR matrix without copying them: `indptr` is the slice of the
    matrix's (absolute offsets into the shared `indices` and `data`), as the CSR kernels
    read it. A block's rows are read by its thread only."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    @classmethod
    def of(cls, R: CsrMatrix, rows: slice) -> "CsrRows":
        return cls(R.indptr[rows.start : rows.stop + 1], R.indices, R.data)


def column_range(columns: slice | None, n: int) -> tuple[int, int]:
    """(start, stop) of the nodes a solve returns; a slice with step 1 within [0, n]."""
    if columns is None:
        return 0, n
    start, stop, step = columns.indices(n)
    if step != 1:
        raise ValueError("columns must be a slice with step 1")
    return start, max(start, stop)


class OutputBuffer:
    """One float64 allocation handed out again and again as the `out` of solver calls.

    `view(shape)` is a C-contiguous array over the front of the allocation, which grows
    only when a call needs more. A view is overwritten by the next call's: take what
    you need from it first.
    """

    def __init__(self) -> None:
        self._flat = np.empty(0)

    def view(self, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        if size > self._flat.size:
            self._flat = np.empty(size)
        return self._flat[:size].reshape(shape)


class PPRSolver(Protocol):
    def solve(self, resets: np.ndarray, damping: float, out: np.ndarray | None = None,
              columns: slice | None = None) -> np.ndarray:
        """resets: (q, n) reset vectors (not necessarily normalised; a numpy array, or a
        sparse matrix, `csr.CsrMatrix` or scipy's, whose rows a query's few seeds fill far
        more cheaply); returns (q, n), or only the nodes `columns` (a slice with step 1:
        e.g. the passages, all a ranking needs), written into `out` when it is given (see
        `output_array`)."""


class PrpackSolver:
    """igraph prpack, one call per query: the reference implementation's solver."""

    def __init__(self, graph: ig.Graph):
        self.graph = graph
        self._weights = "weight" if "weight" in graph.es.attributes() else None

    def solve(self, resets: np.ndarray, damping: float, out: np.ndarray | None = None,
              columns: slice | None = None) -> np.ndarray:
        sparse = is_sparse(resets)
        resets = sparse_resets(resets) if sparse else np.atleast_2d(resets)
        n = self.graph.vcount()
        j0, j1 = column_range(columns, n)
        out = output_array(out, (resets.shape[0], j1 - j0), resets)
        for i in range(resets.shape[0]):
            reset = resets.rows_dense(slice(i, i + 1))[0] if sparse else resets[i]
            out[i] = self.graph.personalized_pagerank(
                vertices=range(n),
                damping=damping,
                directed=False,
                weights=self._weights,
                # the reference hands igraph the numpy array itself (not a list);
                # igraph's conversion of it is part of what one call costs
                reset=clean_reset(reset),
                implementation="prpack",
            )[j0:j1]
        return out


def _edge_arrays(graph: ig.Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = graph.ecount()
    edges = np.array(graph.get_edgelist(), dtype=np.int64).reshape(m, 2)
    w = np.array(graph.es["weight"], dtype=np.float64) if "weight" in graph.es.attributes() else np.ones(m)
    return edges[:, 0], edges[:, 1], w


# rows of one column panel of S: its gathered rows of a block fill about this many bytes
PANEL_BYTES = 4 << 20
# the block arrays of all threads together stay within this (`block_size_for`)
WORKSPACE_BYTES = 256 << 20


def block_size_for(n_active: int, n_threads: int, budget: int = WORKSPACE_BYTES) -> int:
    """Queries per block: 32, where a product costs least per column on the MuSiQue-sized
    graph (0.68 ms vs 0.86 at 16 and 0.77 at 64, results/perf), unless the four block
    arrays per thread (4 x 8 bytes x nodes x block) would pass `budget`; then 16, then 8."""
    for block in (32, 16):
        if 32 * n_active * block * max(1, n_threads) <= budget:
            return block
    return 8


def default_block_size(edges, n_threads: int | None = None) -> int:
    """The block size `BatchedSolver.from_edges` picks for an index's edges (`block_size_for`
    its nodes with edges): what a saved preparation must have been made with to be reused."""
    n_threads = n_threads or min(2, os.cpu_count() or 1)
    pos_w = edges.weight > 0
    n = edges.n_vertices
    ends = np.bincount(edges.source[pos_w], minlength=n) + np.bincount(edges.target[pos_w], minlength=n)
    return block_size_for(int(np.count_nonzero(ends)), n_threads)


@dataclass
class PreparedGraph:
    """What `BatchedSolver` derives from a graph once: the symmetric operator S in the
    solver's node order (`node_order`) and in column panels, each component's top eigenvector, and
    (once found) the interval holding the rest of S's spectrum. Saved with an index
    (`graph/prepared.py`) so that reopening it costs a load of these arrays."""

    n: int
    block_size: int
    pos: np.ndarray  # (n,) node -> its row in the block (`node_order`); nodes without edges last
    n_active: int
    sqrt_deg: np.ndarray  # (n_active,)
    S: CsrMatrix  # (n_active, n_active), D^-1/2 W D^-1/2 in the block's order
    panels: Panels
    comp_of: np.ndarray  # (n_active,) component of each row
    comp_val: np.ndarray  # (n_active,) that component's unit eigenvector there
    n_comp: int
    interval: tuple[float, float] | None = None

    @property
    def dangling(self) -> np.ndarray:
        """Nodes without edges (y = u there), in the graph's numbering."""
        return np.flatnonzero(self.pos >= self.n_active)

    @property
    def active(self) -> np.ndarray:
        """The nodes with edges, in the block's order."""
        order = np.empty(self.n, dtype=np.int64)
        order[self.pos] = np.arange(self.n)
        return order[: self.n_active]

    def components(self) -> CsrMatrix:
        """One unit column per connected component (see `component_vectors`); the solver's
        `components().T @ b` is scipy's CSC product on these arrays."""
        return CsrMatrix(np.arange(self.n_active + 1, dtype=self.comp_of.dtype), self.comp_of, self.comp_val,
                         (self.n_active, self.n_comp))


def node_order(W: sp.csr_matrix, deg: np.ndarray) -> np.ndarray:
    """The block's rows: the nodes with edges in reverse Cuthill-McKee order, then the
    nodes without (dangling: the block leaves them out).

    A product's cost is its gathers of block rows (`ppr_kernels`); numbering neighbours
    close together (RCM keeps each node's neighbours within a narrow band of rows) should
    make a panel's gathered rows fewer distinct cache lines and pages, and the output rows'
    neighbours mostly the rows just gathered. Measured at 1x against the decreasing-degree
    order used before (hubs first, which only kept the most gathered rows together), under
    load 5-6: a float32 step over a block of 32 on one thread ~1.3x, a float64 residual pass
    ~1.2-1.3x, a whole 2-thread PPR solve only 1.07-1.18x less CPU
    (results/perf/ppr_step_round4.md). Costs ~0.5-1 s of preparation at 1x (97k nodes).
    """
    from scipy.sparse.csgraph import reverse_cuthill_mckee  # only when preparing a graph

    active = np.flatnonzero(deg > 0)
    sub = W if len(active) == W.shape[0] else W[active][:, active]
    band = reverse_cuthill_mckee(sub, symmetric_mode=True) if len(active) else np.zeros(0, dtype=np.int64)
    return np.concatenate([active[band], np.flatnonzero(deg <= 0)]).astype(np.int64)


def prepare_graph(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, block_size: int = 32,
                  with_interval: bool = False) -> PreparedGraph:
    """The solver's view of an undirected weighted multigraph given as edge arrays
    (no igraph graph needed): the edges prpack keeps, S, its panels, the components.
    `with_interval` also finds the spectral interval (Lanczos; otherwise on first need)."""
    import scipy.sparse as sp  # preparing a graph: reverse Cuthill-McKee, components, Lanczos

    w = np.asarray(weight, dtype=np.float64)
    if np.isnan(w).any():
        # prpack would return all-NaN scores; nothing to reproduce there
        raise ValueError("edge weights contain NaN; personalized PageRank is undefined")
    keep = w > 0  # prpack drops edges of weight <= 0 in undirected graphs
    src, dst, w = np.asarray(src)[keep], np.asarray(dst)[keep], w[keep]
    W = sp.coo_matrix(
        (np.concatenate([w, w]), (np.concatenate([src, dst]), np.concatenate([dst, src]))), shape=(n, n)
    ).tocsr()  # sums parallel edges; a self-loop lands twice on the diagonal, as in prpack
    deg = np.asarray(W.sum(axis=1)).ravel()
    order = node_order(W, deg)
    n_active = int(np.count_nonzero(deg > 0))
    active = order[:n_active]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    sqrt_deg = np.sqrt(deg[active])
    inv = sp.diags(1.0 / sqrt_deg)
    S = sp.csr_matrix(inv @ W[active][:, active] @ inv)
    del W
    S.sum_duplicates()
    S.sort_indices()
    block = max(1, int(block_size))
    panels = Panels.build(S, max(1024, PANEL_BYTES // (8 * block)))
    V = component_vectors(S, sqrt_deg)
    prep = PreparedGraph(n, block, pos, n_active, sqrt_deg, CsrMatrix(S.indptr, S.indices, S.data, S.shape), panels,
                         V.indices.astype(np.int64), V.data, V.shape[1])
    if with_interval and n_active:
        prep.interval = spectral_interval(S, V)
    return prep


class _Operator:
    """The block operations of `BatchedSolver`, compiled: x -> x - d S x over blocks of
    columns, the fused Chebyshev step, and the passes in and out of the block.

    S is kept in column panels of about PANEL_BYTES of gathered rows per block
    (see `ppr_kernels`); the loops themselves are compiled and release the GIL.
    """

    def __init__(self, S: CsrMatrix, panels: Panels):
        from hipporag2.retrieve import ppr_kernels  # numba: imported by solvers that use it only

        self.S = S
        self.panels = panels
        self.k = ppr_kernels
        self.wide = self.data32 = None  # the mixed-precision solve's panels (`prepare_mixed`)

    def prepare_mixed(self) -> None:
        """The panels of the mixed-precision solve (`BatchedSolver._refine`), made once:
        twice the rows of the float64 ones (`ppr_panels.widened`), as its float32 block
        rows are half as wide, and S's values there in float32 too; its float64 residual
        passes walk the same panels with the float64 values. ~25 MB at MuSiQue scale,
        while the saved (memory-mapped) panels are then never touched by a query."""
        if self.wide is None:
            from hipporag2.retrieve.ppr_panels import widened

            wide = widened(self.panels, 2)
            self.data32 = wide.data.astype(np.float32)
            self.wide = wide
            for arr in (self.panels.indptr, self.panels.indices, self.panels.data):
                release_mapped(arr)  # read once to widen them: out of our resident set again

    # the solver runs its Chebyshev bulk in float32 on operators that say so (and have
    # `prepare_mixed`, `chebyshev_step32`, `residual_in_place`, `scale_columns`, `add_scaled_columns`)
    mixed_precision = True

    def __call__(self, x: np.ndarray, d: float, out: np.ndarray | None = None) -> np.ndarray:
        """x - d S x (into `out` when given: float64, not x itself).

        The kernel gets C-contiguous blocks only: numba compiles one version per array
        layout (a Fortran-ordered one, as the multi-damping CG's column subsets can be,
        would compile in the middle of a run, `warm_kernels` has not seen it), and only
        C rows are summed in registers (`ppr_kernels._panel_row_into`)."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        dst = out if out is not None and out.flags.c_contiguous else np.empty(x.shape)
        p = self.panels
        self.k.shifted_product(p.indptr, p.indices, p.data, float(d), x, dst)
        if out is None:
            return dst
        if dst is not out:
            out[...] = dst
        return out

    def chebyshev_step(self, d, x, x_prev, b, weight, gamma, omega, r, l1) -> None:
        p = self.panels
        self.k.chebyshev_step(p.indptr, p.indices, p.data, float(d), x, x_prev, b, weight, float(gamma), float(omega), r, l1)

    def chebyshev_step32(self, d, x, x_prev, b, weight, gamma, omega, r, l1) -> None:
        """`chebyshev_step` on float32 blocks with S's float32 values, in float32 arithmetic
        (l1 is accumulated in float64)."""
        p = self.wide
        f = np.float32
        self.k.chebyshev_step(p.indptr, p.indices, self.data32, f(d), x, x_prev, b, weight, f(gamma), f(omega), r, l1)

    def residual_in_place(self, d, x, weight, r, l1) -> None:
        """r = b - (x - d S x) for the b that r holds, in float64 with S's float64 values,
        and its weighted L1 norms."""
        p = self.wide
        self.k.residual_in_place(p.indptr, p.indices, p.data, float(d), x, weight, r, l1)

    def scale_columns(self, src, factor, dst) -> None:
        self.k.scale_columns(src, factor, dst)

    def add_scaled_columns(self, z, c, factor) -> None:
        self.k.add_scaled_columns(z, c, factor)

    def clean_sums(self, R, sums) -> None:
        self.k.clean_sums(R, sums)

    def gather_resets(self, R, pos, scale, sqrt_deg, b) -> None:
        self.k.gather_resets(R, pos, scale, sqrt_deg, b)

    def scatter_answers(self, z, R, pos, scale, sqrt_deg, divisor, factor, out, j0) -> None:
        self.k.scatter_answers(z, R, pos, scale, sqrt_deg, divisor, factor, out, j0)

    def add_components(self, z, component, value, coef) -> None:
        self.k.add_components(z, component, value, coef)

    def gather_resets_csr(self, indptr, indices, data, pos, scale, sqrt_deg, b) -> None:
        self.k.gather_resets_csr(indptr, indices, data, pos, scale, sqrt_deg, b)

    def scatter_answers_csr(self, z, indptr, indices, data, pos, scale, sqrt_deg, divisor, factor, out, j0) -> None:
        self.k.scatter_answers_csr(z, indptr, indices, data, pos, scale, sqrt_deg, divisor, factor, out, j0)

    def weighted_l1(self, x, weight, out) -> None:
        self.k.weighted_l1(x, weight, out)


# S's nonzeros below which `BatchedSolver` starts on numpy (`ppr_numpy.TieredOperator`),
# and the queries x nonzeros after which it moves to the compiled loops: see `choose_operator`
NUMPY_OPERATOR_MAX_NNZ = 200_000
TIERED_BUDGET = 1.5e7
OPERATORS = ("numpy", "compiled")


def choose_operator(nnz: int, operator: str | None = None) -> str:
    """Which block operator a solver over S with `nnz` nonzeros uses: `operator` when
    given ("numpy": `ppr_numpy.NumpyOperator` only, "compiled": `_Operator` only), else
    "tiered" (numpy first, compiled once it pays, `ppr_numpy.TieredOperator`) below
    NUMPY_OPERATOR_MAX_NNZ nonzeros and "compiled" from there on.

    The compiled loops are faster per step (panels, prefetching, the fused step): numpy
    cost 1.8-2.7 ms more CPU per query on the shared MuSiQue set's graph (86k
    nonzeros; 4.0-5.6 vs 2.2-2.9 ms), ~2e-8 s per query and nonzero, but a process
    pays numba's start-up once, ~0.38 CPU s (import, loading kernels from the disk
    cache), measured by benchmarks/bench_ppr_operator.py (results/perf/ppr_operator.md,
    on the loaded 2-core machine). That start-up equals ~1.5e7 queries x nonzeros of
    numpy's extra work (TIERED_BUDGET: ~170 queries on the shared set's graph), and a
    100-query run's extra work on a graph of ~200k nonzeros, from where a run starts
    compiled.
    """
    if operator is None:
        return "tiered" if nnz < NUMPY_OPERATOR_MAX_NNZ else "compiled"
    if operator not in OPERATORS:
        raise ValueError(f"operator must be one of {OPERATORS} or None (automatic), got {operator!r}")
    return operator


def _scipy_csr(A):
    """A as a scipy sparse matrix, for the preparation's scipy routines (imports scipy)."""
    return A.to_scipy() if isinstance(A, CsrMatrix) else A


def component_vectors(S, sqrt_deg: np.ndarray) -> sp.csr_matrix:
    """One unit column per connected component: sqrt(deg) there, 0 elsewhere.

    Each is an eigenvector of S with eigenvalue exactly 1, the slowest direction for
    any iteration; the solver takes that part of the reset out and solves it in closed
    form, (I - d S) v = (1 - d) v.
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components  # only when preparing a graph

    S = _scipy_csr(S)
    n = S.shape[0]
    n_comp, label = connected_components(S, directed=False)
    V = sp.csr_matrix((sqrt_deg, (np.arange(n), label)), shape=(n, n_comp))
    norms = np.sqrt(np.bincount(label, weights=sqrt_deg**2, minlength=n_comp))
    return sp.csr_matrix(V @ sp.diags(1.0 / norms)) if n_comp else V


def deflated_operator(S, V) -> LinearOperator:
    """S restricted to the complement of V's columns: x -> P S P x, P = I - V V^T.
    S, V: `csr.CsrMatrix` or scipy sparse."""
    from scipy.sparse.linalg import LinearOperator  # only when preparing a graph

    S, V = _scipy_csr(S), _scipy_csr(V)
    n = S.shape[0]

    def apply(x):
        x = np.asarray(x, dtype=np.float64).reshape(n, -1)
        x = x - V @ (V.T @ x)
        y = S @ x
        return y - V @ (V.T @ y)

    return LinearOperator((n, n), matvec=apply, matmat=apply, dtype=np.float64)


def spectral_interval(S, V, margin: float = 1e-3) -> tuple[float, float]:
    """[lo, hi] holding every eigenvalue of S on the complement of V's columns.

    Lanczos (ARPACK) finds the extremes from inside, so they are widened by `margin`;
    if it does not converge, [-1, 1] (always true for S) is used. A too narrow
    interval only slows the Chebyshev iteration down (each eigenvalue of I - d S lies
    in (0, 2) and keeps converging); the solver's stopping rule checks true residuals.
    """
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh  # only when preparing a graph

    n = S.shape[0]
    if n - V.shape[1] <= 0:
        return 0.0, 0.0
    A = deflated_operator(S, V)
    if n <= 512:
        w = np.linalg.eigvalsh(A @ np.eye(n))
        lo, hi = float(w[0]), float(w[-1])
    else:
        v0 = A @ np.random.default_rng(0).standard_normal(n)
        k = min(6, n - 2)
        try:
            hi = float(eigsh(A, k=k, which="LA", tol=1e-8, v0=v0, return_eigenvectors=False).max())
            lo = float(eigsh(A, k=k, which="SA", tol=1e-8, v0=v0, return_eigenvectors=False).min())
        except ArpackNoConvergence:
            return -1.0, 1.0
    return max(-1.0, lo - margin), min(1.0, hi + margin)


def ppr_mass(d: float, u_dangling):
    """sum(y) for y = u + d A y, u summing to 1 with `u_dangling` of it on nodes without
    edges: A's other columns sum to 1 and y = u on those nodes, so the mass is exact."""
    return (1.0 - d * u_dangling) / (1.0 - d)


def ppr_residual_limit(tol: float, d: float, u_dangling):
    """Largest ||rho||_1 (y's residual before the power step) for PPR within `tol` in L1
    when y is divided by `ppr_mass`: the power step leaves y at most d ||rho||_1 / (1 - d)
    off, i.e. PPR at most d ||rho||_1 / ((1 - d) mass) off. Without mass on dangling
    nodes that is 2 / (1 - d) times the sum-normalised bound (4x at d = 0.5: one
    Chebyshev step fewer)."""
    return tol * (1.0 - d) * ppr_mass(d, u_dangling) / d


# mixed-precision refinement (`BatchedSolver._refine`): a float32 round aims no lower than
# F32_REACH of its right-hand side (float32 carries ~6e-8); a round must cut the float64
# residual by REFINE_GAIN or the float64 path finishes; at most REFINE_ROUNDS rounds
F32_REACH = 1e-6
REFINE_GAIN = 0.25
REFINE_ROUNDS = 6
# a float32 round whose residual grows this much over its right-hand side has diverged
DIVERGED = 1e3
# a mixed-precision block keeps its b (a fourth block array) when that array is at most this
# big (`BatchedSolver._keeps_rhs`), instead of gathering it again
KEEP_RHS_BYTES = 8 << 20
# a float32 round first checks its residual CHECK_AHEAD steps before the polynomial bound's
# count, or after CHECK_EVERY steps if that is sooner, and at least every CHECK_EVERY steps
# from there on (`BatchedSolver._chebyshev32`)
CHECK_AHEAD = 1
CHECK_EVERY = 16


def chebyshev_steps(sigma: float, reduction: float) -> int:
    """Fewest Chebyshev steps whose bound 1 / T_k(1 / sigma) reduces a residual `reduction`-fold.

    sigma = (c - a) / (c + a) for a spectrum in [a, c], c > a > 0; sigma <= 0 (one
    point) needs one step.
    """
    if reduction <= 1.0:
        return 0
    if sigma <= 0.0:
        return 1
    return int(np.ceil(np.arccosh(reduction) / np.arccosh(1.0 / sigma)))


def _steps_at_rate(sigma: float, reduction: float) -> int:
    """Steps, between 1 and CHECK_EVERY, that the Chebyshev iteration's asymptotic rate
    rho = sigma / (1 + sqrt(1 - sigma^2)) per step needs for `reduction`, rounded down:
    when a float32 round checks its residual next (`BatchedSolver._chebyshev32`)."""
    rho = sigma / (1.0 + np.sqrt(max(0.0, 1.0 - sigma * sigma))) if sigma > 0.0 else 0.0
    if not (0.0 < rho < 1.0) or not (reduction > 1.0) or not np.isfinite(reduction):
        return 1
    return int(min(CHECK_EVERY, max(1.0, np.floor(np.log(reduction) / -np.log(rho)))))


def release_mapped(arr: np.ndarray) -> bool:
    """`mapped_pages.release_rows` for all of an array that views a memory mapping (as a
    loaded preparation's arrays do: `np.asarray` of an `np.memmap`); False if it does not."""
    from hipporag2.mapped_pages import release_rows

    base = arr
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    if base is None or base.size != arr.size:
        return False
    return release_rows(base, 0, len(base))


def _anonymous_float64(size: int) -> np.ndarray:
    """A float64 array in a mapping of its own, handed back to the system when dropped.

    np.empty would take these ~25 MB blocks from the C allocator's heap (its mmap
    threshold rises after the first large free), which keeps freed memory for reuse, so
    `BatchedSolver.release_workspaces` would not lower the process's memory at all.
    """
    import mmap

    if size == 0:
        return np.empty(0)
    return np.frombuffer(mmap.mmap(-1, size * 8), dtype=np.float64)


class _Workspace:
    """The arrays one block of up to `width` queries needs.

    A solver keeps them between the blocks of a call and between calls: touching fresh
    memory is slow on virtual machines that fault every new page in from the host (here
    about 3 ms per MB, as much as a product per column). A caller that needs the memory
    in between hands them back (`BatchedSolver.release_workspaces`: the retriever does
    after each block of queries, which costs a refill of ~0.15 ms per MB). A narrower
    block (the last one of a call) uses the front of the same memory.
    """

    def __init__(self, n_active: int, width: int, n_arrays: int = 4, keeps: bool = False):
        self.n_active = n_active
        self.n_arrays = n_arrays
        self.keeps = keeps  # one more array: the mixed-precision solve's b, kept (`BatchedSolver._keeps_rhs`)
        self._active = [_anonymous_float64(n_active * width) for _ in range(n_arrays + keeps)]

    def fit(self, m: int) -> "_Workspace":
        """Point b, x, x_prev and r (n_active, m) at the first n_active * m floats; with
        three arrays (the mixed-precision layout, `BatchedSolver._refine`) x and b only."""
        self.m = m
        views = [a[: self.n_active * m].reshape(self.n_active, m) for a in self._active]
        self.kept = views[self.n_arrays] if self.keeps else None
        if self.n_arrays == 3:
            self.x, self.b = views[:2]
            self.x_prev = self.r = None
        else:
            self.b, self.x, self.x_prev, self.r = views
        return self

    def halves(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Two float32 (n_active, m) arrays in the memory of float64 array j."""
        f = self._active[j].view(np.float32)
        size, half = self.n_active * self.m, f.size // 2
        return f[:size].reshape(self.n_active, self.m), f[half : half + size].reshape(self.n_active, self.m)


class BatchedSolver:
    """Krylov PPR for many reset vectors over one prepared graph.

    The graph is turned into a sparse operator once (in `__init__`; the spectral
    interval that `solve` needs is added on its first call, `interval`); `solve` then
    costs about 14 sparse-times-dense-block products per block of `block_size`
    queries at d = 0.5. Nodes are renumbered (`node_order`) so that the rows gathered
    together in those products sit together and stay in cache. The
    solver keeps one set of block arrays per thread between calls (3 x nodes x
    block_size float64s each in the mixed-precision layout, ~75 MB on the MuSiQue-sized
    graph, 4 where a block is small enough to keep its b, `_keeps_rhs`; 4 in the
    float64 one) until `release_workspaces`.
    """

    def __init__(
        self,
        graph: ig.Graph,
        block_size: int = 32,
        tol: float = 1e-11,
        n_threads: int | None = None,
        max_iter: int = 10_000,
        mixed_precision: bool = True,
        operator: str | None = None,
    ):
        # like PrpackSolver (directed=False), a directed graph is read as undirected
        src, dst, w = _edge_arrays(graph)
        self._setup(prepare_graph(graph.vcount(), src, dst, w, block_size), block_size, tol, n_threads, max_iter,
                    mixed_precision, operator)

    @classmethod
    def from_prepared(cls, prepared: "PreparedGraph", tol: float = 1e-11, n_threads: int | None = None,
                      max_iter: int = 10_000, mixed_precision: bool = True,
                      operator: str | None = None) -> "BatchedSolver":
        """A solver over a graph prepared before (`prepare_graph`, perhaps loaded from disk:
        `graph.prepared`), so opening an index costs a load, not the preparation."""
        self = cls.__new__(cls)
        self._setup(prepared, prepared.block_size, tol, n_threads, max_iter, mixed_precision, operator)
        return self

    @classmethod
    def from_edges(cls, edges, cache_dir=None, block_size: int | None = None, **kw) -> "BatchedSolver":
        """A solver over an index's edges (`graph.build.GraphEdges`), no igraph graph built;
        the preparation is loaded from `cache_dir` when saved there before, and saved
        there otherwise (`ppr_store`). block_size None: `block_size_for` the graph."""
        from hipporag2.retrieve.ppr_store import prepared_graph

        if block_size is None:
            block_size = default_block_size(edges, kw.get("n_threads"))

        prep = prepared_graph(edges.n_vertices, edges.source, edges.target, edges.weight, block_size, cache_dir)
        return cls.from_prepared(prep, **kw)

    def _setup(self, prep: "PreparedGraph", block_size, tol, n_threads, max_iter, mixed_precision=True,
               operator=None) -> None:
        self.prepared = prep
        self.n = prep.n
        self.block_size = max(1, int(block_size))
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.n_threads = max(1, n_threads if n_threads is not None else min(2, os.cpu_count() or 1))
        self.n_active = prep.n_active
        self.pos = prep.pos  # node -> its row in the block
        self.dangling = prep.dangling
        self.active = prep.active
        self.sqrt_deg = prep.sqrt_deg
        self.operator = choose_operator(prep.S.nnz, operator)
        if self.operator == "compiled":
            self.op = _Operator(prep.S, prep.panels)
        else:  # small graphs: no numba start-up, or not before it pays (`ppr_numpy`)
            from hipporag2.retrieve import ppr_numpy

            self.op = (ppr_numpy.NumpyOperator(prep.S, prep.pos) if self.operator == "numpy"
                       else ppr_numpy.TieredOperator(prep.S, prep.pos, prep.panels, TIERED_BUDGET))
            self.block_size = min(self.block_size, ppr_numpy.BLOCK_SIZE)  # its passes want a block in cache
        self.components = prep.components()
        # V @ beta as a gather (V has one nonzero per row): far cheaper than sparse @ dense
        self._comp_of = prep.comp_of
        self._comp_val = prep.comp_val
        self._interval = prep.interval  # S's spectrum without its 1s; None: found on first need
        self._spare: list[_Workspace] = []  # full-size block workspaces, one per thread at most
        self._spare_lock = threading.Lock()
        # float32 Chebyshev bulk + float64 acceptance (`_refine`), where the operator has it
        # (its `mixed_precision` attribute); an operator without it gets the float64 path
        self.mixed_precision = bool(mixed_precision)

    def release_workspaces(self) -> None:
        """Hand the block arrays kept between calls back to the allocator. A caller that
        does other memory-hungry work between solves (the retriever's fact scores of
        the next block) calls this so both are not resident at once; refilling fresh
        pages costs ~0.15 ms per MB here once the process has touched that much memory."""
        with self._spare_lock:
            self._spare.clear()

    # ---- input checks, shared with the reference's behaviour ---------------------------
    def _checked(self, resets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The resets as a float array and their sums once cleaned (NaN/negative -> 0).

        The cleaning itself is redone block by block inside the solve: a cleaned copy
        of all resets would be another q x n array (0.8 GB at 1000 x 100k), and even a
        block-sized one is fresh memory on every call.
        """
        if is_sparse(resets):
            R = sparse_resets(resets)
            if R.shape[1] != self.n:
                raise ValueError(f"resets must have shape (q, {self.n}), got {R.shape}")
            sums = sparse_clean_sums(R)
        else:
            R = np.atleast_2d(np.asarray(resets, dtype=np.float64))
            if R.ndim != 2 or R.shape[1] != self.n:
                raise ValueError(f"resets must have shape (q, {self.n}), got {R.shape}")
            sums = np.empty(R.shape[0])
            self.op.clean_sums(R, sums)
        if not np.isfinite(sums).all():  # NaN is cleaned away, so only +inf gets here
            raise ValueError("reset vectors must be finite (igraph rejects infinite entries)")
        return R, sums

    @staticmethod
    def _check_damping(damping: float) -> float:
        d = float(damping)
        if not (0.0 <= d < 1.0):
            # prpack returns NaN at d = 1 and igraph rejects d outside [0, 1]
            raise ValueError(f"damping must be in [0, 1), got {damping!r}")
        return d

    # ---- solve ---------------------------------------------------------------------
    def solve(self, resets: np.ndarray, damping: float, out: np.ndarray | None = None,
              columns: slice | None = None) -> np.ndarray:
        d = self._check_damping(damping)
        R, sums = self._checked(resets)
        j0, j1 = column_range(columns, self.n)
        out = output_array(out, (R.shape[0], j1 - j0), R)
        bad = np.flatnonzero(sums <= 0)
        if len(bad):
            raise ValueError(
                f"reset vector(s) {bad[:10].tolist()} sum to zero after NaN/negative entries became 0; "
                "personalized PageRank is undefined there (igraph raises too)"
            )
        self._run(R, sums, [d], True, out[None], j0)
        return out

    def solve_unnormalised(self, resets: np.ndarray, dampings, out: np.ndarray | None = None) -> np.ndarray:
        """y = r + d A y for each reset row r and each damping d: (len(dampings), q, n).

        Unlike PPR itself, y is linear in r, so a sweep over a mixing weight w of
        r = r1 + w r2 needs two solves, not one per w: PPR(r) = normalise(y1 + w y2).
        And all dampings share one set of sparse products (multi-shift CG).
        Rows are cleaned like the reference's resets (NaN/negative -> 0); a zero
        row gives y = 0. The error bound holds relative to each row's sum.
        """
        ds = [self._check_damping(d) for d in np.atleast_1d(dampings)]
        R, sums = self._checked(resets)
        out = output_array(out, (len(ds), *R.shape), R)
        return self._run(R, sums, ds, False, out)

    def _run(self, R: np.ndarray, sums: np.ndarray, ds: list[float], normalise: bool, out: np.ndarray,
             j0: int = 0) -> np.ndarray:
        """Solutions for the raw rows of R into out (len(ds), q, columns from j0 on),
        normalised to sum 1 or scaled by `sums`."""
        q = R.shape[0]
        scale = np.where(sums > 0, sums, 1.0)  # a zero row stays zero
        if q and len({d for d in ds if d > 0.0}) == 1 and self.n_active:
            self.interval()  # once, before the threads that need it start
            if self._mixed():
                self.op.prepare_mixed()
        starts = range(0, q, self.block_size)
        if self.n_threads > 1 and q > self.block_size:
            # the compiled loops, scipy's sparse kernels and numpy's large array ops release the GIL
            with ThreadPoolExecutor(self.n_threads) as ex:
                list(ex.map(lambda s: self._solve_block(R, out, s, ds, scale, normalise, j0), starts))
        else:
            for s in starts:
                self._solve_block(R, out, s, ds, scale, normalise, j0)
        return out

    def _solve_block(self, R, out, start, ds, scale, normalise, j0) -> None:
        rows = slice(start, min(start + self.block_size, R.shape[0]))
        # the mixed-precision solve needs three block arrays (`_refine`), the float64 one four
        n_arrays = 3 if self._mixed() else 4
        keeps = n_arrays == 3 and self._keeps_rhs()
        with self._spare_lock:
            ws = self._spare.pop() if self._spare else None
        if ws is None or ws.n_arrays != n_arrays or ws.keeps != keeps:
            ws = _Workspace(self.n_active, self.block_size, n_arrays, keeps)
        try:
            self._solve_into(ws.fit(rows.stop - rows.start), R, out, rows, ds, scale, normalise, j0)
        finally:
            with self._spare_lock:
                self._spare.append(ws)

    def _solve_into(self, ws, R, out, rows, ds, scale, normalise, j0) -> None:
        start_block = getattr(self.op, "start_block", None)  # `ppr_numpy.TieredOperator` counts its work
        if start_block is not None:
            start_block(rows.stop - rows.start)
        csr = isinstance(R, CsrMatrix) and hasattr(self.op, "gather_resets_csr")
        full = R
        if csr:
            R = CsrRows.of(R, rows)
        elif isinstance(R, CsrMatrix):  # an operator without the CSR passes: this block dense
            R = R.rows_dense(rows)
        else:
            R = np.ascontiguousarray(R[rows])  # a view unless the caller's array is not C-ordered
        scale = scale[rows]
        ones = np.ones(len(scale))
        # each reset's share on nodes without edges: there y = u, and it sets PPR's total mass
        if csr:
            u_dangling = sparse_clean_sums(R, self.pos >= self.n_active) / scale
        else:
            u_dangling = np.fmax(R[:, self.dangling], 0.0).sum(axis=1) / scale
        walk = sorted({d for d in ds if d > 0.0}, reverse=True)
        if walk and self.n_active:
            b = ws.b

            def gather(out):  # the block's b = D^-1/2 u; again when the mixed path needs it
                if csr:
                    self.op.gather_resets_csr(R.indptr, R.indices, R.data, self.pos, scale, self.sqrt_deg, out)
                else:
                    self.op.gather_resets(R, self.pos, scale, self.sqrt_deg, out)

            gather(b)
            if len(walk) == 1:
                d = walk[0]
                limit = ppr_residual_limit(self.tol, d, u_dangling) if normalise else self._limit(d) * ones
                zs = {d: self._chebyshev(b, d, ws, limit, gather)}
            else:
                zs = {d: self._polish(z, b, d, self._limit(d) * ones) for d, z in zip(walk, self._mscg(b, walk))}
        for k, d in enumerate(ds):
            if d == 0.0 or not self.n_active:  # y = u: the cleaned reset over its sum
                cut = slice(j0, j0 + out.shape[2])
                part = full.rows_dense(rows, cut) if csr else R[:, cut]
                np.divide(clean_reset(part), scale[:, None], out=out[k, rows])
                if not normalise:
                    out[k, rows] *= scale[:, None]
                continue
            # PPR divided by the exact total mass, not by the sum of the answer; or y scaled back
            divisor, factor = (ppr_mass(d, u_dangling), ones) if normalise else (ones, scale)
            if csr:
                self.op.scatter_answers_csr(zs[d], R.indptr, R.indices, R.data, self.pos, scale, self.sqrt_deg,
                                            divisor, factor, out[k, rows], j0)
            else:
                self.op.scatter_answers(zs[d], R, self.pos, scale, self.sqrt_deg, divisor, factor, out[k, rows], j0)

    def _mixed(self) -> bool:
        """Whether single-damping solves run mixed precision: asked for, and the operator has it."""
        return self.mixed_precision and getattr(self.op, "mixed_precision", False)

    def _keeps_rhs(self) -> bool:
        """Whether the mixed-precision solve keeps each block's b in a fourth array instead
        of gathering it from the resets again before each float64 residual (`_refine`):
        on small graphs, where the array is small and the numpy operator's gather of
        CSR resets (~1.3 ms a block on the shared set, twice a block) is not."""
        return self.n_active * self.block_size * 8 <= KEEP_RHS_BYTES

    def _limit(self, d: float) -> float:
        """Largest ||rho||_1 (residual of y before the power step) for the bound of
        `solve_unnormalised`: y within tol / 2 of the exact y, relative to the reset's
        sum, so that y / sum(y), the sweep's mixtures included, is within tol."""
        return self.tol * (1.0 - d) / (2.0 * d)

    def interval(self) -> tuple[float, float]:
        """Where S's eigenvalues lie once each component's eigenvalue 1 is taken out."""
        if self._interval is None:
            self._interval = spectral_interval(self.op.S, self.components)
            self.prepared.interval = self._interval
        return self._interval

    def _chebyshev(self, b: np.ndarray, d: float, ws: _Workspace, limit: np.ndarray, gather=None) -> np.ndarray:
        """z with (I - d S) z = b for one damping, by Chebyshev iteration.

        The part of b along each component's top eigenvector is solved exactly; on
        the rest the spectrum of I - d S lies in [1 - d hi, 1 - d lo] (`interval`),
        and the Chebyshev polynomials of that interval need as many products as CG
        does on these graphs (their spectra fill the interval up to its ends), but
        their coefficients are known in advance, so each step is one fused pass
        (`ppr_kernels.chebyshev_step`). That pass also returns the true residual r of
        the iterate it read, so the stopping rule of the module docstring is checked
        exactly, and the answer is that iterate plus r (the free power step). If the
        interval was wrong and the steps run out, CG takes over from the iterate.
        Column k is done once its ||D^1/2 r||_1 <= limit[k].
        b is overwritten; the answer lives in one of ws's arrays. `gather(out)` writes
        b again (the mixed-precision path keeps no copy of it).
        """
        beta = self.components.T @ b
        self.op.add_components(b, self._comp_of, self._comp_val, -beta)
        lo, hi = self.interval()
        a, c = 1.0 - d * hi, 1.0 - d * lo
        gamma, sigma = 2.0 / (a + c), (c - a) / (c + a)
        l1 = self._l1(b)
        x, x_prev, r = ws.x, ws.x_prev, ws.r
        if np.all(l1 <= limit):
            np.copyto(x, b)  # x0 = 0, so x0 + r0 = b
        elif ws.n_arrays == 3:  # `_mixed`: the workspace was laid out for it
            if ws.kept is not None:  # a small block: b kept, a copy instead of a regather
                np.copyto(ws.kept, b)

                def make_b(out):
                    np.copyto(out, ws.kept)
            else:

                def make_b(out):  # this b again, without its component part
                    gather(out)
                    self.op.add_components(out, self._comp_of, self._comp_val, -beta)

            x = self._refine(b, d, ws, limit, l1, gamma, sigma, make_b)
        else:
            # x0 = 0 makes the first step free: x1 = x0 + gamma r0 = gamma b
            np.multiply(b, gamma, out=x)
            x_prev.fill(0.0)
            omega = 1.0 / (1.0 - sigma * sigma / 2.0)
            # the polynomial bound, 2-norm vs L1 aside; plenty of room before CG takes over
            steps = chebyshev_steps(sigma, float((l1 / limit).max()))
            for _ in range(min(self.max_iter, 2 * steps + 25)):
                self.op.chebyshev_step(d, x, x_prev, b, self.sqrt_deg, gamma, omega, r, l1)
                if np.all(l1 <= limit):
                    x += r
                    break
                x, x_prev = x_prev, x
                omega = 1.0 / (1.0 - omega * sigma * sigma / 4.0)
            else:
                x = self._polish(x, b, d, limit)
        self.op.add_components(x, self._comp_of, self._comp_val, beta / (1.0 - d))
        return x

    def _refine(self, b: np.ndarray, d: float, ws: _Workspace, limit: np.ndarray, l1: np.ndarray,
                gamma: float, sigma: float, make_b) -> np.ndarray:
        """z with (I - d S) z = b (b without its component part) by mixed-precision
        iterative refinement: the Chebyshev steps in float32, the answer and its
        acceptance in float64.

        A step's cost is its gathers of block rows; float32 rows move half the bytes
        (a float32 step costs ~0.6 of a float64 one on the MuSiQue-sized graph). But a
        float32 iteration stalls near float32's precision (~1e-7 of its right-hand
        side), far above the 1e-11 we need, so it is run in rounds: solve M c = rho in
        float32 for the current float64 residual rho (scaled per column by a power of
        two, which is exact, so float32's range never matters), add c to the float64
        answer z, and compute z's true residual rho = b - M z in float64 with S's
        float64 values (`residual_in_place`: the same product the float64 path makes).
        Each round gains ~1e-6, so two rounds usually reach the bound. z is accepted
        exactly as in the float64 path, by that float64 residual: once
        ||D^1/2 rho||_1 <= limit per column, the answer is z + rho (the power step).
        The float32 part only proposes corrections; what it gets wrong shows up in rho
        and is corrected by the next round. A round that does not cut the residual by
        `REFINE_GAIN` (float32 stalled, or diverged on a wrong interval) hands z to
        the float64 `_polish` (true residual, power step or CG on the remainder).

        Memory: three block arrays instead of the float64 path's four: z in ws.x; b,
        then rho, in ws.b, whose memory also holds a round's two float32 iterates once
        rho is turned into the round's float32 right-hand side; that and the float32
        product live in the third. b is not kept on large graphs: `make_b(out)` writes
        it again from the resets (a cheap pass there) before each residual; small blocks
        keep it in a fourth array (`_keeps_rhs`), and `make_b` copies it back.
        """
        z, rho = ws.x, b
        x32, xp32 = ws.halves(1)  # same memory as b / rho: used only between residuals
        rhs32, r32 = ws.halves(2)
        w = self.sqrt_deg
        res_l1 = l1  # rho = b while z = 0
        l1_new = np.empty_like(l1)
        for round_ in range(REFINE_ROUNDS):
            # a power of two near 1 / ||rho||_1 per column: exact scaling, float32 entries <= ~1
            exp = np.frexp(np.where(res_l1 > 0, res_l1, 1.0))[1]
            scale = np.ldexp(1.0, -exp)
            self.op.scale_columns(rho, scale, rhs32)
            # aim at the bound, but no lower than float32 can go
            goal = np.maximum(limit, F32_REACH * res_l1) * scale
            c = self._chebyshev32(rhs32, d, x32, xp32, r32, res_l1 * scale, goal, gamma, sigma)
            if round_ == 0:
                self.op.scale_columns(c, 1.0 / scale, z)
            else:
                self.op.add_scaled_columns(z, c, 1.0 / scale)
            make_b(rho)  # c is in z now: its memory takes b, then the residual
            self.op.residual_in_place(d, z, w, rho, l1_new)
            if np.all(l1_new <= limit):
                z += rho  # the power step
                return z
            stalled = ~(l1_new <= np.maximum(limit, REFINE_GAIN * res_l1))  # NaN counts as stalled
            if stalled.any():
                if not np.all(l1_new <= res_l1):  # the round made z worse (diverged): start over
                    z.fill(0.0)
                break  # finish in float64
            # float32 rounding leaves bits along the components' eigenvectors, which the
            # Chebyshev steps damp slowly (eigenvalue 1 - d lies outside their interval):
            # solve that part in closed form again
            beta = self.components.T @ rho
            self.op.add_components(rho, self._comp_of, self._comp_val, -beta)
            self.op.add_components(z, self._comp_of, self._comp_val, beta / (1.0 - d))
            res_l1 = self._l1(rho)
        full_b = np.empty_like(z)  # the float64 finish needs b itself (rare: a one-off array)
        make_b(full_b)
        return self._polish(z, full_b, d, limit)

    def _chebyshev32(self, rhs, d, x, x_prev, r, rhs_l1, goal, gamma, sigma) -> np.ndarray:
        """Chebyshev iteration from 0 for (I - d S) c = rhs in float32 until every
        column's float32 residual is within `goal`; returns c in x or x_prev.

        Only a step that may be the last computes its residual and L1 norms
        (`chebyshev_step32`); on operators that have it (numpy's) the others just
        advance the iterate (`chebyshev_advance32`: the product and three passes
        instead of six). The polynomial bound says how many steps the largest
        reduction asked for needs (`chebyshev_steps`; measured on the shared set, the
        rounds stop within one step of it, L1 vs 2-norm aside), so the first check
        comes CHECK_AHEAD steps before it (at the latest after CHECK_EVERY steps,
        which also stops a round that diverges on a wrong interval long before
        float32 overflows); after a check that does not stop, the next comes after
        the steps the Chebyshev rate needs for what is left, rounded down (a check
        too early costs a few passes, one too late a whole step). The stopping rule
        is the one of checking every step, applied a step later at worst; what
        accepts an answer is the float64 residual of `_refine` anyway.
        """
        np.multiply(rhs, np.float32(gamma), out=x)  # x1 = gamma rhs: the free first step
        x_prev.fill(0.0)
        omega = 1.0 / (1.0 - sigma * sigma / 2.0)
        l1 = np.empty(rhs.shape[1])
        steps = chebyshev_steps(sigma, float((rhs_l1 / goal).max()))
        advance = getattr(self.op, "chebyshev_advance32", None)
        check = 1 if advance is None else max(1, min(steps - CHECK_AHEAD, CHECK_EVERY))
        for k in range(1, min(self.max_iter, 2 * steps + 10) + 1):
            if k < check:
                advance(d, x, x_prev, rhs, gamma, omega, r)
            else:
                self.op.chebyshev_step32(d, x, x_prev, rhs, self.sqrt_deg, gamma, omega, r, l1)
                if np.all(l1 <= goal):
                    x += r  # the free power step, in float32
                    return x
                if not np.all(l1 <= DIVERGED * rhs_l1):  # a wrong interval: stop before float32 overflows
                    return x
                if advance is not None:
                    check = k + _steps_at_rate(sigma, float((l1 / goal).max()))
            x, x_prev = x_prev, x
            omega = 1.0 / (1.0 - omega * sigma * sigma / 4.0)
        return x  # out of steps: the float64 residual will tell

    def _polish(self, z: np.ndarray, b: np.ndarray, d: float, limit: np.ndarray) -> np.ndarray:
        """Check the bound with the true residual; one free power step, or restart CG.

        In z-space the y-residual is rho = D^1/2 (b - M z), and the power step
        y + rho is z + (b - M z). Column k is done once ||rho||_1 <= limit[k].
        """
        todo = np.arange(z.shape[1])
        for _attempt in range(4):
            r = b[:, todo] - self.op(z[:, todo], d)
            ok = self._l1(r) <= limit[todo]
            z[:, todo[ok]] += r[:, ok]
            todo, r = todo[~ok], r[:, ~ok]
            if len(todo) == 0:
                return z
            # CG's recursive residual drifted: solve for the correction from scratch
            z[:, todo] += self._mscg(np.ascontiguousarray(r), [d])[0]
        worst = self.tol * float((self._l1(r) / limit[todo]).max())
        warnings.warn(f"BatchedSolver: PPR did not reach tol={self.tol:g} (error bound {worst:.2e})", RuntimeWarning)
        return z

    def _l1(self, r: np.ndarray) -> np.ndarray:
        """||D^1/2 r||_1 per column: the y-space residual's L1 norm."""
        out = np.empty(r.shape[1])
        self.op.weighted_l1(r, self.sqrt_deg, out)
        return out

    def _mscg(self, b: np.ndarray, ds: list[float]) -> list[np.ndarray]:
        """z with (I - d S) z = b for every d in ds (descending), in one Krylov space.

        CG runs on the seed system M = I - d0 S, d0 = max(ds); the other dampings
        are shifted systems (M + delta I) w = b, delta = d0/d - 1 >= 0, z = w d0/d,
        whose residuals stay collinear with the seed's (r_k = zeta_k r), so they ride
        along with a few vector updates each and no extra sparse product
        (multi-shift CG, Jegerlehner 1996). The stopping rule of the module
        docstring applies per damping through ||D^1/2 r_k||_1 = |zeta_k| ||D^1/2 r||_1.
        A damping whose columns are all done stops being updated (smaller dampings
        converge first); columns done for every damping leave the block.
        """
        d0 = ds[0]
        K = len(ds)
        shifts = [d0 / d - 1.0 for d in ds]
        # _polish's power step shrinks the error by d, so CG may stop that much earlier
        stops = np.array([self.tol * (1.0 - d) / (2.0 * d) for d in ds])
        c = b.shape[1]
        r = b.copy()
        p = b.copy()
        w = [np.zeros_like(b) for _ in range(K)]  # None once that damping is frozen
        ps = [None] + [b.copy() for _ in range(1, K)]  # the seed's direction is p
        zeta = np.ones((K, c))
        zeta_prev = np.ones((K, c))
        rr = np.einsum("ij,ij->j", r, r)
        alpha_prev = np.ones(c)
        beta_prev = np.zeros(c)
        outs = [np.empty_like(b) for _ in range(K)]  # every column is written before the end
        live = np.arange(c)  # columns still iterating, compacted as they finish
        qv = np.empty_like(b)
        ratio_l1 = None  # ||D^1/2 r||_1 / ||r||_2 at the last exact check
        it = since_check = 0
        while True:
            # exact L1 checks cost two passes over the block: predict them from rr
            check = ratio_l1 is None or it >= self.max_iter or since_check >= 8
            if not check:
                open_k = [k for k in range(K) if w[k] is not None]
                guess = np.abs(zeta[open_k]) * (ratio_l1 * np.sqrt(rr))
                check = bool(np.any(guess <= 2 * stops[open_k, None]))
            if check:
                since_check = 0
                l1 = self._l1(r)
                ratio_l1 = np.divide(l1, np.sqrt(rr), out=np.zeros_like(l1), where=rr > 0)
                done_k = np.abs(zeta) * l1 <= stops[:, None]  # (K, live)
                if it >= self.max_iter:
                    done_k[:] = True  # _polish reports what is left
                for k in range(1, K):
                    if w[k] is not None and done_k[k].all():
                        outs[k][:, live] = w[k]
                        w[k] = ps[k] = None
                frozen = np.array([x is None for x in w])
                done = np.all(done_k | frozen[:, None], axis=0)
                if done.any():
                    for k in range(K):
                        if w[k] is not None:
                            outs[k][:, live[done]] = w[k][:, done]
                    keep = ~done
                    live = live[keep]
                    if len(live) == 0:
                        break
                    r, p, rr, ratio_l1 = r[:, keep], p[:, keep], rr[keep], ratio_l1[keep]
                    w = [None if x is None else x[:, keep] for x in w]
                    ps = [None if x is None else x[:, keep] for x in ps]
                    zeta, zeta_prev = zeta[:, keep], zeta_prev[:, keep]
                    alpha_prev, beta_prev = alpha_prev[keep], beta_prev[keep]
                    qv = np.empty_like(r)
            it += 1
            since_check += 1
            self.op(p, d0, out=qv)
            pq = np.einsum("ij,ij->j", p, qv)
            # an exactly solved column has r = p = 0: keep it at rest instead of 0/0
            alpha = np.divide(rr, pq, out=np.zeros_like(rr), where=pq > 0)
            qv *= alpha
            r -= qv
            tmp = np.multiply(p, alpha, out=qv)  # qv is free again
            w[0] += tmp
            rr_new = np.einsum("ij,ij->j", r, r)
            beta = np.divide(rr_new, rr, out=np.zeros_like(rr), where=rr > 0)
            for k in range(1, K):
                zk, zp = zeta[k], zeta_prev[k]
                den = alpha * beta_prev * (zp - zk) + zp * alpha_prev * (1.0 + shifts[k] * alpha)
                zn = np.divide(zk * zp * alpha_prev, den, out=np.zeros_like(zk), where=den != 0)
                ratio = np.divide(zn, zk, out=np.zeros_like(zk), where=zk != 0)
                zeta_prev[k], zeta[k] = zk, zn  # zk is a view of zeta[k]: use it no more
                if w[k] is None:
                    continue  # zeta still tracked: it is cheap and keeps the check uniform
                w[k] += np.multiply(ps[k], alpha * ratio, out=tmp)
                ps[k] *= beta * ratio * ratio
                ps[k] += np.multiply(r, zn, out=tmp)
            p *= beta
            p += r
            rr = rr_new
            alpha_prev, beta_prev = alpha, beta
        return [x * (d0 / d) for x, d in zip(outs, ds)]


def rank_desc_stable(scores: np.ndarray) -> np.ndarray:
    """The retriever's order: descending score, equal scores to the HIGHER index first."""
    return np.argsort(np.asarray(scores), kind="stable")[::-1]


def rankings_agree(
    ref: np.ndarray, ours: np.ndarray, k: int | None = None, rtol: float = 1e-12, atol: float = 0.0
) -> bool:
    """Whether `ours` ranks like `ref` (top k), counting near-ties in `ref` as ties.

    Two solvers that agree to ~1e-14 can still order two scores that are equal in
    exact arithmetic differently (round-off decides their last bit), and the
    stable tie rule then sees no tie. So ties are defined on the reference's
    scores: sorted descending, neighbours less than rtol * max|ref| apart are
    chained into one tie group, and the rankings agree when every rank position
    holds a node from the same tie group in both. Without near-ties in ref this is
    plain equality of the two stable-descending orders.

    `atol` widens the tie window to an absolute floor: a solver whose L1 error is at
    most atol may order two scores closer than that either way (on tiny graphs the
    "top k" reaches scores of 1e-14 next to exact zeros, far below any iterative
    solver's tolerance, prpack's own 1e-10 included).
    """
    ref, ours = np.asarray(ref, dtype=np.float64), np.asarray(ours, dtype=np.float64)
    if ref.shape != ours.shape:
        return False
    if ref.size == 0:
        return True
    a, b = rank_desc_stable(ref), rank_desc_stable(ours)
    vals = ref[a]
    tol = max(rtol * max(float(np.abs(ref).max(initial=0.0)), np.finfo(float).tiny), atol)
    group = np.empty(len(ref), dtype=np.int64)
    group[a] = np.concatenate([[0], np.cumsum(vals[:-1] - vals[1:] > tol)])
    if k is not None:
        a, b = a[:k], b[:k]
    return bool(np.array_equal(group[a], group[b]))


def make_solver(name: str, graph: ig.Graph) -> PPRSolver:
    """The solver registered as `name` in `hipporag2.registry.PPR_SOLVERS`."""
    from hipporag2.registry import PPR_SOLVERS

    return PPR_SOLVERS.load(name)(graph)


def make_index_solver(name: str, edges, igraph_graph, cache_dir=None) -> PPRSolver:
    """The solver `name` for an index's graph: from its edge arrays when the solver can
    start from them (`from_edges`: no igraph graph, preparation cached in `cache_dir`),
    else from the igraph graph `igraph_graph()` returns (built only then)."""
    from hipporag2.registry import PPR_SOLVERS

    cls = PPR_SOLVERS.load(name)
    if hasattr(cls, "from_edges"):
        return cls.from_edges(edges, cache_dir)
    return cls(igraph_graph())
