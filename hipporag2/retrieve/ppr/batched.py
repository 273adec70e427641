"""The batched solver: prpack's scores for many reset vectors at once (see `BatchedSolver._solve_block`)."""
from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from hipporag2.retrieve.csr import Csr
from hipporag2.retrieve.ppr.base import as_csr, check_damping, clean_row_sums, column_range, output_array
from hipporag2.retrieve.ppr.prepare import (PreparedGraph, default_block_size, default_threads, edge_arrays,
                                            prepare_graph, spectral_interval)

TOL = 1e-11  # L1 error per answer: a thousand times tighter than the 1e-8 promised against prpack
# S's stored entries from which a solver runs the compiled loops of `kernels.py`; below, `_ScipyLoops`
# in blocks of SCIPY_BLOCK_SIZE queries (each numpy pass then stays in cache). numba's start-up (import,
# first kernel load) costs a process more CPU than the compiled loops save on a graph of the shared
# set's size (85k entries; results/perf/README.md, round 6). Chosen once per solver, never mid-run.
NUMBA_MIN_NNZ, SCIPY_BLOCK_SIZE = 200_000, 16
# a float32 round of `_refine` aims at most this far below its right-hand side (its steps stall near
# float32's 6e-8: results/perf/README.md, round 9), in at most F32_ROUNDS rounds
F32_REACH, F32_ROUNDS = 1e6, 4


class _ScipyLoops:
    """The loops of `kernels.py` (same signatures, panel arguments unused) as scipy's CSR
    product on the plain S and numpy passes: the same answers up to summation order."""

    def __init__(self, S: Csr):
        self.S = S

    def shifted_product(self, indptr, indices, data, d, x, out):
        np.subtract(x, d * (self.S @ x), out=out)

    def chebyshev_step(self, indptr, indices, data, d, x, x_prev, b, weight, gamma, omega, r, l1):
        t = self.S @ x  # the one temporary: each pass below runs in place over the block
        np.subtract(b, x, out=r)
        r += np.multiply(t, d, out=t)
        np.dot(weight, np.abs(r, out=t), out=l1)
        np.add(x, np.multiply(r, gamma, out=t), out=t)
        t -= x_prev
        x_prev += np.multiply(t, omega, out=t)

    @staticmethod
    def _entries(indptr, indices, data, pos):  # (query, node, its row, cleaned value) of the rows' entries
        k = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        j, v = indices[indptr[0] : indptr[-1]], data[indptr[0] : indptr[-1]]
        return k, j, pos[j], np.where(v > 0.0, v, 0.0)  # NaN and negatives -> 0, as the reference

    def gather_resets(self, indptr, indices, data, pos, scale, sqrt_deg, b):
        k, _, p, v = self._entries(indptr, indices, data, pos)
        on = p < b.shape[0]
        b.fill(0.0)
        b[p[on], k[on]] = v[on] / scale[k[on]] / sqrt_deg[p[on]]

    def scatter_answers(self, z, indptr, indices, data, pos, scale, sqrt_deg, divisor, factor, out, j0):
        p = pos[j0 : j0 + out.shape[1]]
        on, y = p < z.shape[0], np.zeros(out.shape)
        y[:, on] = (z[p[on]] * sqrt_deg[p[on], None]).T
        np.multiply(np.where(y > 0.0, y, 0.0) / divisor[:, None], factor[:, None], out=out)
        k, j, p, v = self._entries(indptr, indices, data, pos)
        at = (j >= j0) & (j < j0 + out.shape[1]) & (p >= z.shape[0])
        out[k[at], j[at] - j0] = v[at] / scale[k[at]] / divisor[k[at]] * factor[k[at]]


def ppr_mass(d: float, u_dangling):
    """sum(y) for y = u + d A y, u summing to 1 with `u_dangling` of it on nodes without
    edges: A's other columns sum to 1 and y = u on those nodes, so the mass is exact."""
    return (1.0 - d * u_dangling) / (1.0 - d)


def chebyshev_steps(sigma: float, reduction: float) -> int:
    """Fewest Chebyshev steps whose bound 1 / T_k(1 / sigma) reduces a residual `reduction`-fold
    (sigma = (c - a) / (c + a) for a spectrum in [a, c]; sigma <= 0, one point, needs one step)."""
    if reduction <= 1.0:
        return 0
    if sigma <= 0.0:
        return 1
    return int(np.ceil(np.arccosh(reduction) / np.arccosh(1.0 / sigma)))


class _Workspace:
    """The four (nodes with edges x block) arrays one thread's block works in, kept between calls."""

    def __init__(self, n_active: int, width: int):
        self.n_active = n_active
        self._flat = [np.empty(n_active * width) for _ in range(4)]

    def fit(self, m: int) -> "_Workspace":
        self.b, self.x, self.x_prev, self.r = (a[: self.n_active * m].reshape(self.n_active, m) for a in self._flat)
        return self


class BatchedSolver:
    """PPR for many reset vectors over one prepared graph: Chebyshev iteration for one
    damping (`solve`), multi-shift CG for several (`solve_many`), one block of
    `block_size` queries per thread, on the compiled loops of `kernels.py` (`_ScipyLoops` below NUMBA_MIN_NNZ)."""

    def __init__(self, graph: "igraph.Graph", block_size: int = 32, tol: float = TOL, n_threads: int | None = None,
                 max_iter: int = 10_000, numba_min_nnz: int = NUMBA_MIN_NNZ):
        # like PrpackSolver (directed=False), a directed graph is read as undirected
        prep = prepare_graph(graph.vcount(), *edge_arrays(graph), block_size)
        self._setup(prep, tol, n_threads, max_iter, numba_min_nnz)

    @classmethod
    def from_edges(cls, edges, cache_dir=None, block_size: int | None = None, tol: float | None = None,
                   n_threads: int | None = None, max_iter: int = 10_000,
                   numba_min_nnz: int = NUMBA_MIN_NNZ) -> "BatchedSolver":
        """A solver over an index's edges (`graph.build.GraphEdges`), no igraph graph built;
        the preparation is loaded from `cache_dir` when saved there before, and saved there
        otherwise (`store.py`). block_size None: `default_block_size` of the graph."""
        from hipporag2.retrieve.ppr.store import prepared_graph

        n_threads = n_threads or default_threads()
        block_size = block_size or default_block_size(edges, n_threads)
        prep = prepared_graph(edges.n_vertices, edges.source, edges.target, edges.weight, block_size, cache_dir)
        self = cls.__new__(cls)
        self._setup(prep, TOL if tol is None else tol, n_threads, max_iter, numba_min_nnz)
        return self

    @classmethod
    def for_index(cls, edges, igraph_graph, cache_dir=None, n_threads=None, tol=None) -> "BatchedSolver":
        return cls.from_edges(edges, cache_dir, n_threads=n_threads, tol=tol)  # no igraph graph needed

    def _setup(self, prep: PreparedGraph, tol: float, n_threads: int | None, max_iter: int, numba_min_nnz: int) -> None:
        self.prepared = prep
        self.n, self.n_active, self.block_size = prep.n, prep.n_active, prep.block_size
        self.tol, self.max_iter = float(tol), int(max_iter)
        self.n_threads = max(1, n_threads or default_threads())
        self.pos, self.sqrt_deg, self.active = prep.pos, prep.sqrt_deg, prep.active
        self._dangling = prep.pos >= prep.n_active  # nodes without edges
        self.panels, self.components = prep.panels, prep.components()
        self._spare: list[_Workspace] = []  # block workspaces, one per thread at most
        self._lock = threading.Lock()
        self._data32 = None  # S's panel values in float32, for `_refine` on the compiled loops
        if prep.S.nnz >= numba_min_nnz:
            from hipporag2.retrieve.ppr import kernels  # numba's start-up, paid only here
            self._K, self._data32 = kernels, prep.panels.data.astype(np.float32)
        else:
            self._K, self.block_size = _ScipyLoops(prep.S), min(self.block_size, SCIPY_BLOCK_SIZE)

    @property
    def batch_size(self) -> int:
        return self.block_size * self.n_threads

    def release(self) -> None:
        """Drop the block arrays kept between calls (the retriever does between its blocks)."""
        with self._lock:
            self._spare.clear()

    def interval(self) -> tuple[float, float]:
        """Where S's eigenvalues lie once each component's eigenvalue 1 is taken out."""
        if self.prepared.interval is None:
            self.prepared.interval = spectral_interval(self.prepared.S, self.components)
        return self.prepared.interval

    # ---- the interface ----------------------------------------------------------------
    def _checked(self, resets) -> tuple[Csr, np.ndarray]:
        R = as_csr(resets)
        if R.shape[1] != self.n:
            raise ValueError(f"resets must have shape (q, {self.n}), got {R.shape}")
        sums = clean_row_sums(R)
        if not np.isfinite(sums).all():  # NaN is cleaned away, so only +inf gets here
            raise ValueError("reset vectors must be finite (igraph rejects infinite entries)")
        return R, sums

    def solve(self, resets, damping: float, out: np.ndarray | None = None,
              columns: slice | None = None) -> np.ndarray:
        d = check_damping(damping)
        R, sums = self._checked(resets)
        j0, j1 = column_range(columns, self.n)
        out = output_array(out, (R.shape[0], j1 - j0), R)
        bad = np.flatnonzero(sums <= 0)
        if len(bad):
            raise ValueError(f"reset vector(s) {bad[:10].tolist()} sum to zero after NaN/negative entries became 0; "
                             "personalized PageRank is undefined there (igraph raises too)")
        self._run(R, sums, [d], True, out[None], j0)
        return out

    def solve_many(self, resets, dampings: Sequence[float], out: np.ndarray | None = None) -> np.ndarray:
        """`PPRSolver.solve_many`: a zero row gives y = 0; y is within tol / 2 of the exact y
        relative to the row's sum, so any mixture y_p + w y_s normalised is within tol."""
        ds = [check_damping(d) for d in np.atleast_1d(dampings)]
        R, sums = self._checked(resets)
        return self._run(R, sums, ds, False, output_array(out, (len(ds), *R.shape), R))

    def _run(self, R, sums, ds, normalise: bool, out: np.ndarray, j0: int = 0) -> np.ndarray:
        scale = np.where(sums > 0, sums, 1.0)  # a zero row stays zero
        if R.shape[0] and self.n_active and any(d > 0 for d in ds):
            self.interval()  # once, before the threads that need it start
        starts = range(0, R.shape[0], self.block_size)
        if self.n_threads > 1 and R.shape[0] > self.block_size:
            with ThreadPoolExecutor(self.n_threads) as ex:  # the compiled loops release the GIL
                list(ex.map(lambda s: self._in_workspace(R, out, s, ds, scale, normalise, j0), starts))
        else:
            for s in starts:
                self._in_workspace(R, out, s, ds, scale, normalise, j0)
        return out

    def _in_workspace(self, R, out, start, ds, scale, normalise, j0) -> None:
        with self._lock:
            ws = self._spare.pop() if self._spare else _Workspace(self.n_active, self.block_size)
        try:
            rows = slice(start, min(start + self.block_size, R.shape[0]))
            self._solve_block(ws.fit(rows.stop - rows.start), R, out, rows, ds, scale[rows], normalise, j0)
        finally:
            with self._lock:
                self._spare.append(ws)

    # ---- the math ---------------------------------------------------------------------
    def _solve_block(self, ws, R, out, rows, ds, scale, normalise, j0) -> None:
        """Answers for the reset rows `rows` of R into out[:, rows] (normalised PPR, or y).

        What prpack computes (igraph's glue, checked on igraph in tests/test_ppr.py): each
        undirected edge becomes two directed ones; parallel edges add up, edges of weight
        <= 0 are dropped, a self-loop counts twice; out-weights are normalised to 1. The
        reset, divided by its sum (u), is both the teleport and the dangling nodes' jump
        distribution, so PPR is x = y / sum(y) with y = u + d A y, A = W D^-1 (dangling
        columns zero): the dangling jumps only rescale y. NaN/negative reset entries count
        as 0; a zero reset, inf, NaN edge weights and d outside [0, 1) are errors.

        A dangling node has no edges in an undirected graph, so y = u there. On the other
        nodes, with y = D^1/2 z, the system is (I - d S) z = b, b = D^-1/2 u,
        S = D^-1/2 W D^-1/2 symmetric with spectrum in [-1, 1]: I - d S is symmetric
        positive definite, and Krylov methods need far fewer products than the power
        iteration. Each component's sqrt(deg) is an eigenvector of S for 1, solved in
        closed form ((I - d S) v = (1 - d) v); the rest of the spectrum lies in [lo, hi]
        (`interval`, Lanczos once per graph) and fills it on these graphs, where CG
        cannot beat the Chebyshev polynomials of that interval. So one damping runs
        Chebyshev (`_chebyshev`: known coefficients, each step one fused pass; float32 rounds
        on the compiled loops, `_refine`); several share one Krylov space by multi-shift CG (`_mscg`).

        Stopping rule: the y-residual is rho = u + d A y - y = D^1/2 r and ||A||_1 <= 1,
        so y's error is at most ||rho||_1 / (1 - d); the answer is the iterate plus one
        power step (y + rho), which shrinks that by d. The mass is exact,
        sum(y) = (1 - d u_dangling) / (1 - d) (`ppr_mass`, u_dangling: u's share on nodes
        without edges), and `solve` divides by it rather than by sum(y), so its L1 error
        is at most d ||rho||_1 / (1 - d u_dangling): it stops once that is below tol.
        `solve_many` keeps y within tol / 2 relative to the row's sum (`_limit`).
        """
        indptr = R.indptr[rows.start : rows.stop + 1]  # absolute offsets into R's arrays: no copy
        u_dangling = clean_row_sums(R, self._dangling, rows) / scale
        ones = np.ones(len(scale))
        walk = sorted({d for d in ds if d > 0.0}, reverse=True)
        zs = {}
        if walk and self.n_active:
            self._K.gather_resets(indptr, R.indices, R.data, self.pos, scale, self.sqrt_deg, ws.b)
            if len(walk) == 1:
                d = walk[0]
                limit = self.tol * (1.0 - d) * ppr_mass(d, u_dangling) / d if normalise else self._limit(d) * ones
                zs[d] = self._chebyshev(ws, d, limit)
            else:
                b = ws.b
                zs = {d: self._polish(z, b, d, self._limit(d) * ones) for d, z in zip(walk, self._mscg(b, walk))}
        for k, d in enumerate(ds):
            if d == 0.0 or not self.n_active:  # y = u: the cleaned reset over its sum
                part = R.toarray(rows, slice(j0, j0 + out.shape[2]))
                np.divide(np.fmax(part, 0.0), scale[:, None], out=out[k, rows])
                if not normalise:
                    out[k, rows] *= scale[:, None]
                continue
            divisor, factor = (ppr_mass(d, u_dangling), ones) if normalise else (ones, scale)
            self._K.scatter_answers(zs[d], indptr, R.indices, R.data, self.pos, scale, self.sqrt_deg, divisor, factor,
                              out[k, rows], j0)

    def _limit(self, d: float) -> float:  # largest ||rho||_1 for y within tol / 2 relative to the reset's sum
        return self.tol * (1.0 - d) / (2.0 * d)

    def _product(self, x: np.ndarray, d: float, out: np.ndarray | None = None) -> np.ndarray:
        """x - d S x (C-contiguous blocks: numba compiles one version per layout)."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        out = np.empty(x.shape) if out is None else out
        self._K.shifted_product(self.panels.indptr, self.panels.indices, self.panels.data, float(d), x, out)
        return out

    def _l1(self, r: np.ndarray) -> np.ndarray:
        """||D^1/2 r||_1 per column: the y-space residual's L1 norm."""
        return self.sqrt_deg @ np.abs(r)

    def _chebyshev(self, ws: _Workspace, d: float, limit: np.ndarray) -> np.ndarray:
        """z with (I - d S) z = ws.b for one damping: the components' part in closed form,
        the rest by Chebyshev iteration on [1 - d hi, 1 - d lo]. Each fused step also
        returns the true residual r of the iterate it read, so the stopping rule is
        checked exactly and the answer is that iterate plus r. If the interval was wrong
        and the steps run out, `_polish` finishes. Column k is done at ||D^1/2 r||_1 <= limit[k]."""
        b, x, x_prev, r = ws.b, ws.x, ws.x_prev, ws.r  # r: scratch before and after the steps (no temporaries)
        beta = self.components.T @ b
        b -= self.components @ beta  # one entry per row: the same bits as comp_val * beta[comp_of], in one pass
        lo, hi = self.interval()
        a, c = 1.0 - d * hi, 1.0 - d * lo
        gamma, sigma = 2.0 / (a + c), (c - a) / (c + a)
        l1 = self.sqrt_deg @ np.abs(b, out=r)  # _l1(b), r as scratch
        if np.all(l1 <= limit):
            np.copyto(x, b)  # x0 = 0, so x0 + r0 = b
        elif self._data32 is not None:
            x = self._refine(ws, d, gamma, sigma, l1, limit)
        else:
            np.multiply(b, gamma, out=x)  # x0 = 0 makes the first step free: x1 = gamma b
            x_prev.fill(0.0)
            omega = 1.0 / (1.0 - sigma * sigma / 2.0)
            steps = chebyshev_steps(sigma, float((l1 / limit).max()))  # the bound, 2-norm vs L1 aside
            p = self.panels
            for _ in range(min(self.max_iter, 2 * steps + 25)):
                self._K.chebyshev_step(p.indptr, p.indices, p.data, float(d), x, x_prev, b, self.sqrt_deg, float(gamma),
                                 float(omega), r, l1)
                if np.all(l1 <= limit):
                    x += r
                    break
                x, x_prev = x_prev, x
                omega = 1.0 / (1.0 - omega * sigma * sigma / 4.0)
            else:
                x = self._polish(x, b, d, limit)
        x += self.components @ (beta / (1.0 - d))
        return x

    def _refine(self, ws: _Workspace, d: float, gamma: float, sigma: float, l1: np.ndarray,
                limit: np.ndarray) -> np.ndarray:
        """`_chebyshev` in mixed precision (compiled loops): rounds of float32 Chebyshev steps
        (half the gathered bytes) for M e = r, the float64 residual; z += e and r -= M e in
        float64. It stops by `_chebyshev`'s rule on that r, with the answer z + r; a round
        that does not cut r tenfold (float32 stalled, a wrong interval) leaves the rest to
        `_polish`. ws.b is r, ws.x z; the other two hold four float32 arrays, then e, M e."""
        r, z, n, m = ws.b, ws.x, *ws.b.shape
        z.fill(0.0)
        x32, xp32 = ws.x_prev.reshape(-1).view(np.float32).reshape(2, n, m)
        b32, r32 = ws.r.reshape(-1).view(np.float32).reshape(2, n, m)
        p, scratch, f32 = self.panels, np.empty(m), np.float32
        for _round in range(F32_ROUNDS):
            need = float((l1 / limit).max())
            np.copyto(b32, r, casting="same_kind")
            np.multiply(b32, f32(gamma), out=x32)
            xp32.fill(0.0)
            omega = 1.0 / (1.0 - sigma * sigma / 2.0)
            for _ in range(chebyshev_steps(sigma, min(need, F32_REACH))):
                self._K.chebyshev_step(p.indptr, p.indices, self._data32, f32(d), x32, xp32, b32, self.sqrt_deg,
                                       f32(gamma), f32(omega), r32, scratch)
                x32, xp32 = xp32, x32
                omega = 1.0 / (1.0 - omega * sigma * sigma / 4.0)
            e = z if _round == 0 else ws.r  # z = e in the first round; later e where b32 and r32 were
            np.copyto(e, x32)
            if _round:
                z += e
            Me = self._product(e, d, out=ws.x_prev)  # x32 and xp32 are done with
            r -= Me
            l1 = self.sqrt_deg @ np.abs(r, out=Me)
            if np.all(l1 <= limit):
                z += r
                return z
            if not float((l1 / limit).max()) <= 0.1 * need:  # NaN too
                break
        z += self._polish(np.zeros_like(r), r, d, limit)
        return z

    def _polish(self, z: np.ndarray, b: np.ndarray, d: float, limit: np.ndarray) -> np.ndarray:
        """Check the bound with the true residual: the power step z + (b - M z) where it
        holds, CG on the remainder where round-off (or a wrong interval) left it unmet."""
        todo = np.arange(z.shape[1])
        for _attempt in range(4):
            r = b[:, todo] - self._product(z[:, todo], d)
            ok = self._l1(r) <= limit[todo]
            z[:, todo[ok]] += r[:, ok]
            todo, r = todo[~ok], r[:, ~ok]
            if len(todo) == 0:
                return z
            z[:, todo] += self._mscg(np.ascontiguousarray(r), [d])[0]
        worst = self.tol * float((self._l1(r) / limit[todo]).max())
        warnings.warn(f"BatchedSolver: PPR did not reach tol={self.tol:g} (error bound {worst:.2e})", RuntimeWarning)
        return z

    def _mscg(self, b: np.ndarray, ds: list[float]) -> list[np.ndarray]:
        """z with (I - d S) z = b for every d in ds (descending), in one Krylov space: CG on
        M = I - d0 S, d0 = max(ds); each other damping is a shifted system (M + delta I) w = b,
        delta = d0/d - 1, z = w d0/d, whose residual stays collinear with the seed's
        (r_k = zeta_k r), so it rides along without a product (multi-shift CG, Jegerlehner
        1996) and |zeta_k| ||D^1/2 r||_1 is its stopping rule. Done columns leave the block.
        """
        d0 = ds[0]
        K_ = len(ds)
        shifts = [d0 / d - 1.0 for d in ds]
        stops = np.array([self._limit(d) for d in ds])  # before _polish's power step, which shrinks it by d
        c = b.shape[1]
        r, p = b.copy(), b.copy()
        w = [np.zeros_like(b) for _ in range(K_)]  # None once that damping is frozen
        ps = [None] + [b.copy() for _ in range(1, K_)]  # the seed's direction is p
        zeta, zeta_prev = np.ones((K_, c)), np.ones((K_, c))
        rr = np.einsum("ij,ij->j", r, r)
        alpha_prev, beta_prev = np.ones(c), np.zeros(c)
        outs = [np.empty_like(b) for _ in range(K_)]  # every column is written before the end
        live = np.arange(c)  # columns still iterating, compacted as they finish
        qv = np.empty_like(b)
        ratio_l1 = None  # ||D^1/2 r||_1 / ||r||_2 at the last exact check
        it = since_check = 0
        while True:
            # exact L1 checks cost two passes over the block: predict them from rr
            check = ratio_l1 is None or it >= self.max_iter or since_check >= 8
            if not check:
                open_k = [k for k in range(K_) if w[k] is not None]
                guess = np.abs(zeta[open_k]) * (ratio_l1 * np.sqrt(rr))
                check = bool(np.any(guess <= 2 * stops[open_k, None]))
            if check:
                since_check = 0
                l1 = self._l1(r)
                ratio_l1 = np.divide(l1, np.sqrt(rr), out=np.zeros_like(l1), where=rr > 0)
                done_k = np.abs(zeta) * l1 <= stops[:, None]  # (K, live)
                if it >= self.max_iter:
                    done_k[:] = True  # _polish reports what is left
                for k in range(1, K_):
                    if w[k] is not None and done_k[k].all():
                        outs[k][:, live] = w[k]
                        w[k] = ps[k] = None
                frozen = np.array([x is None for x in w])
                done = np.all(done_k | frozen[:, None], axis=0)
                if done.any():
                    for k in range(K_):
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
                    qv = np.empty(r.shape)  # C order, as the product writes it (r is F after the column cut)
            it += 1
            since_check += 1
            self._product(p, d0, out=qv)
            pq = np.einsum("ij,ij->j", p, qv)
            # an exactly solved column has r = p = 0: keep it at rest instead of 0/0
            alpha = np.divide(rr, pq, out=np.zeros_like(rr), where=pq > 0)
            qv *= alpha
            r -= qv
            tmp = np.multiply(p, alpha, out=qv)  # qv is free again
            w[0] += tmp
            rr_new = np.einsum("ij,ij->j", r, r)
            beta = np.divide(rr_new, rr, out=np.zeros_like(rr), where=rr > 0)
            for k in range(1, K_):
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
