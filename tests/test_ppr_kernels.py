"""The compiled PPR passes' row sums (`ppr/kernels._panel_row_into`).

Block widths in REGISTER_WIDTHS keep a row of sums in vector registers; every other
width sums in memory. Both must add in the same order, so a column's result may not
depend on the block's width: the first m columns of a pass over m + 1 columns (the
in-memory loop) must be bitwise those of the same pass over m columns (registers), for
every pass built on the row sums, on panels of several shapes (rows without entries
in a panel, one panel, many). Against numpy's own
product they must agree to round-off, and the solver built on them must still match
prpack for blocks of every register width with a narrower last block. Graphs below
NUMBA_MIN_NNZ skip these loops (`batched._ScipyLoops`): both paths must give the same answers.
"""
from __future__ import annotations

import random

import igraph as ig
import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("numba")

from benchmarks.rankings import rankings_agree  # noqa: E402
from hipporag2.retrieve.csr import Csr  # noqa: E402
from hipporag2.retrieve.ppr import kernels as K  # noqa: E402
from hipporag2.retrieve.ppr.batched import BatchedSolver  # noqa: E402
from hipporag2.retrieve.ppr.prepare import Panels  # noqa: E402


def symmetric(n: int, density: float, seed: int, empty_rows: int = 0) -> sp.csr_matrix:
    """A symmetric sparse matrix whose last `empty_rows` rows and columns are empty."""
    A = sp.random(n, n, density=density, random_state=seed, format="csr")
    A = (A + A.T).tocsr()
    if empty_rows:
        keep = np.ones(n)
        keep[n - empty_rows:] = 0.0
        D = sp.diags(keep)
        A = (D @ A @ D).tocsr()
        A.eliminate_zeros()
    return A


def star(n: int) -> sp.csr_matrix:
    """One hub joined to every other node: one very long row, many of length one."""
    rows = np.concatenate([np.zeros(n - 1, dtype=np.int64), np.arange(1, n)])
    cols = np.concatenate([np.arange(1, n), np.zeros(n - 1, dtype=np.int64)])
    return sp.csr_matrix((np.full(2 * (n - 1), 0.3), (rows, cols)), shape=(n, n))


def panel_cases():
    a = symmetric(900, 0.01, 1)
    b = symmetric(700, 0.004, 2, empty_rows=60)  # rows without entries in any panel
    c = star(500)
    a, b, c = Csr.of(a), Csr.of(b), Csr.of(c)
    return {"one panel": Panels.build(a, 10_000), "many panels": Panels.build(a, 64),
            "empty rows": Panels.build(b, 100),
            "star": Panels.build(c, 32)}


PANELS = panel_cases()


def passes(P: Panels, dtype, x, x_prev, b, weight):
    """Every pass built on the row sums, over the block x: their outputs."""
    f = dtype.type if hasattr(dtype, "type") else dtype
    data = P.data.astype(dtype)
    n, m = x.shape
    out = {}
    prod = np.empty((n, m), dtype)
    K.shifted_product(P.indptr, P.indices, data, f(0.5), x, prod)
    out["shifted_product"] = prod
    r, xp, l1 = np.empty((n, m), dtype), x_prev.copy(), np.empty(m)
    K.chebyshev_step(P.indptr, P.indices, data, f(0.5), x, xp, b, weight, f(0.9), f(1.2), r, l1)
    out["chebyshev_step r"], out["chebyshev_step x_prev"], out["chebyshev_step l1"] = r, xp, l1
    return out


@pytest.mark.parametrize("case", sorted(PANELS))
@pytest.mark.parametrize("dtype", [np.float64])
@pytest.mark.parametrize("m", K.REGISTER_WIDTHS)
def test_register_widths_sum_bitwise_like_the_loop_in_memory(case, dtype, m):
    P = PANELS[case]
    n = P.indptr.shape[1] - 1
    rng = np.random.default_rng(m)
    wide = [rng.standard_normal((n, m + 1)).astype(dtype) for _ in range(3)]
    weight = rng.random(n)
    in_memory = passes(P, dtype, *wide, weight)  # width m + 1: not a register width
    in_registers = passes(P, dtype, *(np.ascontiguousarray(a[:, :m]) for a in wide), weight)
    assert (m + 1) not in K.REGISTER_WIDTHS
    for name, got in in_registers.items():
        want = in_memory[name][..., :m]
        if name.endswith("l1"):  # a column's L1 sum: bitwise too, per column
            want = in_memory[name][:m]
        assert np.array_equal(got, want), f"{case}, {name}: width {m} differs from the in-memory loop"


@pytest.mark.parametrize("case", sorted(PANELS))
@pytest.mark.parametrize("m", [1, 3, 7, 8, 16, 17, 32, 33])
def test_passes_against_numpy(case, m):
    P = PANELS[case]
    n = P.indptr.shape[1] - 1
    # the matrix the panels hold, rebuilt from them
    rows = np.concatenate([np.repeat(np.arange(n), np.diff(P.indptr[p])) for p in range(len(P.indptr))])
    cols = np.concatenate([P.indices[P.indptr[p, 0]:P.indptr[p, -1]] for p in range(len(P.indptr))])
    vals = np.concatenate([P.data[P.indptr[p, 0]:P.indptr[p, -1]] for p in range(len(P.indptr))])
    S = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    rng = np.random.default_rng(m)
    x, xp, b = (rng.standard_normal((n, m)) for _ in range(3))
    weight = rng.random(n)
    got = passes(P, np.float64, x, xp, b, weight)
    scale = np.abs(S) @ np.abs(x) + np.abs(x) + np.abs(b)
    prod = x - 0.5 * (S @ x)
    assert np.all(np.abs(got["shifted_product"] - prod) <= 1e-13 * scale)
    res = b - prod
    assert np.all(np.abs(got["chebyshev_step r"] - res) <= 1e-13 * scale)
    np.testing.assert_allclose(got["chebyshev_step l1"], weight @ np.abs(res), rtol=1e-12)
    np.testing.assert_allclose(got["chebyshev_step x_prev"], 1.2 * (x + 0.9 * res - xp) + xp, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block", K.REGISTER_WIDTHS)
def test_solver_on_register_widths_matches_prpack(block):
    random.seed(3)
    g = ig.Graph.Barabasi(800, 4)
    g.es["weight"] = np.random.default_rng(3).choice([0.5, 1.0, 2.0], g.ecount()).tolist()
    q = 2 * block + 3  # full blocks and a narrower last one (the in-memory loop)
    rng = np.random.default_rng(block)
    R = np.zeros((q, g.vcount()))
    for i in range(q):
        R[i, rng.choice(g.vcount(), 5, replace=False)] = rng.random(5) + 0.1
    ref = np.array([g.personalized_pagerank(damping=0.5, directed=False, weights="weight", reset=list(r),
                                            implementation="prpack") for r in R])
    got = BatchedSolver(g, block_size=block, numba_min_nnz=0).solve(R, 0.5)
    assert np.abs(got - ref).sum(axis=1).max() < 1e-10
    assert all(rankings_agree(ref[i], got[i], k=200, atol=1e-10) for i in range(q))


@pytest.mark.parametrize("m", [3, 32])
def test_other_layouts_take_the_loop_in_memory(m):
    """Blocks that are not C-contiguous (the multi-damping CG hands over column subsets,
    which numpy may lay out in Fortran order) give the same sums, read by their strides."""
    P = PANELS["many panels"]
    n = P.indptr.shape[1] - 1
    x = np.random.default_rng(m).standard_normal((n, m))
    want = np.empty((n, m))
    K.shifted_product(P.indptr, P.indices, P.data, 0.5, x, want)
    for xs, out in ((x, np.asfortranarray(np.empty((n, m)))), (np.asfortranarray(x), np.empty((n, m))),
                    (np.asfortranarray(x), np.asfortranarray(np.empty((n, m))))):
        K.shifted_product(P.indptr, P.indices, P.data, 0.5, xs, out)
        assert np.array_equal(out, want)


def path_cases():
    """Graph shapes for the two paths: several panels, a hub, parallel edges and isolated
    nodes, several components."""
    random.seed(5)
    rng = np.random.default_rng(5)
    big = ig.Graph.Barabasi(5000, 2)  # at block size 512, panels of 2048 rows: three
    hub = ig.Graph.Star(400)
    hub.add_vertices(4)
    multi = ig.Graph.Erdos_Renyi(n=300, m=900)
    multi.add_edges(multi.get_edgelist()[:150])
    multi.add_vertices(3)
    parts = ig.Graph.Ring(50).disjoint_union([ig.Graph.Full(12), ig.Graph.Tree(200, 3)])
    for g in (big, hub, multi, parts):
        g.es["weight"] = rng.choice([0.5, 1.0, 2.0], g.ecount()).tolist()
    return {"panels": big, "star": hub, "multi": multi, "components": parts}


PATH_CASES = path_cases()


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_scipy_path_agrees_with_the_compiled_loops(case):
    """The path is chosen by numba_min_nnz alone; both solve to within their error bound
    (tol each, so 2 tol apart: one damping runs in mixed precision on the compiled loops,
    in float64 on scipy's) and rank every node alike, for one damping (Chebyshev) and
    several (CG)."""
    g = PATH_CASES[case]
    rng = np.random.default_rng(len(case))
    R = sp.random(37, g.vcount(), density=0.02, random_state=rng, format="csr")
    R.data[::9] = -1.0  # cleaned to 0, as the reference does
    R = R[np.asarray(R.maximum(0).sum(axis=1)).ravel() > 0]
    block = 512 if case == "panels" else 16
    compiled = BatchedSolver(g, block_size=block, numba_min_nnz=0)
    plain = BatchedSolver(g, block_size=block, numba_min_nnz=10**12)
    assert compiled._K is K and type(plain._K).__name__ == "_ScipyLoops"
    assert len(compiled.panels.indptr) == (3 if case == "panels" else 1)
    n0 = g.vcount() // 3
    for a, b in ((compiled.solve(R, 0.5), plain.solve(R, 0.5)),
                 (compiled.solve(R, 0.85, columns=slice(n0, None)), plain.solve(R, 0.85, columns=slice(n0, None))),
                 (compiled.solve_many(R, [0.85, 0.5, 0.3])[1], plain.solve_many(R, [0.85, 0.5, 0.3])[1])):
        assert np.abs(a - b).sum(axis=1).max() <= 2 * compiled.tol * np.abs(a).sum(axis=1).max()
        assert all(rankings_agree(a[i], b[i]) for i in range(len(a)))
