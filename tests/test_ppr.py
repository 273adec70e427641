"""PPR solvers: `batched` must reproduce `prpack` (the reference's igraph call).

Agreement is pinned at L1 < 1e-8 per reset vector and identical passage rankings
under the retriever's stable-descending tie rule. Rankings are compared with
`rankings_agree`: ties are read off the prpack scores (neighbours within 1e-12
relative), because two exact solvers may split an exact tie by one ulp either way,
and on these small random graphs also within BatchedSolver's own error bound (1e-11
in L1): their full rankings reach scores of 1e-14 beside exact zeros, which no
solver stopped at 1e-11 can order.
"""
from __future__ import annotations

import igraph as ig
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.rankings import rank_desc_stable, rankings_agree
from hipporag2.registry import PPR_SOLVERS
from hipporag2.retrieve.csr import Csr
from hipporag2.retrieve.ppr import OutputBuffer, PPRSolver, make_solver
from hipporag2.retrieve.ppr.batched import NUMBA_MIN_NNZ, BatchedSolver
from hipporag2.retrieve.ppr.kernels import chebyshev_step, gather_resets, scatter_answers, shifted_product
from hipporag2.retrieve.ppr.prepare import Panels, block_size_for, component_vectors, spectral_interval
from hipporag2.retrieve.ppr.prpack import PrpackSolver

DAMPINGS = [0.0, 0.5, 0.85, 0.99]
TIE_ATOL = 1e-11  # BatchedSolver's default tol: the L1 error it guarantees
PATHS = (0, NUMBA_MIN_NNZ)  # numba_min_nnz: these small graphs on the compiled loops, or on scipy's


def raw_prpack(g: ig.Graph, reset, d: float) -> np.ndarray:
    return np.array(
        g.personalized_pagerank(
            vertices=range(g.vcount()), damping=d, directed=False, weights="weight",
            reset=list(reset), implementation="prpack",
        )
    )


@st.composite
def graph_case(draw):
    """A HippoRAG-like graph: phrases then passages, parallel edges, isolated nodes."""
    big = draw(st.booleans())  # prpack switches from Gaussian elimination to Gauss-Seidel at 128 nodes
    n_phrase = draw(st.integers(1, 140 if big else 30))
    n_passage = draw(st.integers(1, 60 if big else 12))
    n = n_phrase + n_passage
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    m = draw(st.integers(0, 4 * n))
    pairs = rng.integers(0, n, size=(m, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    dup = pairs[rng.random(len(pairs)) < 0.5]  # each such pair twice, like relation edges
    edges = np.concatenate([pairs, dup[:, ::-1]]) if len(dup) else pairs
    weights = rng.choice([1.0, 2.0, 3.0, 0.8, 0.93, 1.0], size=len(edges))
    isolated = rng.choice(n, size=min(n, draw(st.integers(0, 3))), replace=False)
    keep = ~(np.isin(edges[:, 0], isolated) | np.isin(edges[:, 1], isolated))
    g = ig.Graph(n=n, edges=edges[keep].tolist(), directed=False)
    g.es["weight"] = weights[keep].tolist()
    kind = draw(st.sampled_from(["sparse", "single", "dense", "isolated"]))
    q = 3
    R = np.zeros((q, n))
    if kind == "sparse":
        mask = rng.random((q, n)) < 0.2
        R[mask] = rng.uniform(0.01, 1.0, size=mask.sum())
        R[:, rng.integers(n)] += 0.5
    elif kind == "single":
        R[np.arange(q), rng.integers(0, n, size=q)] = rng.uniform(0.1, 5.0, size=q)
    elif kind == "dense":  # seed phrases plus weighted dense scores on every passage
        R[:, :n_phrase] = (rng.random((q, n_phrase)) < 0.1) * rng.uniform(0.2, 1.0, (q, n_phrase))
        R[:, n_phrase:] = 0.05 * rng.random((q, n_passage))
        R[:, 0] += 0.1
    else:  # all mass on isolated nodes, or on one node when there are none
        R[:, isolated[0] if len(isolated) else 0] = 1.0
    return g, n_phrase, R


def assert_matches(g: ig.Graph, n_phrase: int, R: np.ndarray, d: float, ours: np.ndarray) -> None:
    for i, r in enumerate(R):
        ref = raw_prpack(g, r, d)
        assert np.abs(ours[i] - ref).sum() < 1e-8, (d, i)
        assert rankings_agree(ref[n_phrase:], ours[i][n_phrase:], atol=TIE_ATOL), (d, i)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_case(), st.sampled_from(DAMPINGS), st.sampled_from(PATHS))
def test_batched_matches_prpack(case, d, numba_min_nnz):
    g, n_phrase, R = case
    ours = BatchedSolver(g, block_size=2, n_threads=1, numba_min_nnz=numba_min_nnz).solve(R, d)
    assert ours.shape == R.shape and ours.dtype == np.float64
    assert np.allclose(ours.sum(axis=1), 1.0)
    assert (ours >= 0).all()
    assert_matches(g, n_phrase, R, d, ours)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_case(), st.sampled_from(PATHS))
def test_all_dampings_in_one_krylov_space(case, numba_min_nnz):
    g, n_phrase, R = case
    Y = BatchedSolver(g, block_size=2, n_threads=1, numba_min_nnz=numba_min_nnz).solve_many(R, [0.85, 0.0, 0.5, 0.99, 0.3])
    for k, d in enumerate([0.85, 0.0, 0.5, 0.99, 0.3]):
        assert_matches(g, n_phrase, R, d, Y[k] / Y[k].sum(axis=1, keepdims=True))


def test_prpack_solver_is_the_raw_igraph_call():
    rng = np.random.default_rng(3)
    g = ig.Graph.Erdos_Renyi(n=200, m=600)
    g.add_edges(g.get_edgelist()[:100])  # parallel edges
    g.add_vertices(3)  # isolated
    g.es["weight"] = rng.uniform(0.5, 2.0, g.ecount()).tolist()
    R = rng.random((4, g.vcount()))
    R[1, 5] = np.nan  # the reference zeroes NaN and negative entries before the call
    R[2, 7] = -1.0
    got = PrpackSolver(g).solve(R, 0.5)
    for i, r in enumerate(R):
        want = raw_prpack(g, np.where(np.isnan(r) | (r < 0), 0.0, r), 0.5)
        np.testing.assert_array_equal(got[i], want)


def test_semantics_found_in_prpack():
    """Each rule BatchedSolver relies on, observed on igraph itself."""
    g = ig.Graph(n=6, edges=[(0, 1), (1, 0), (1, 2), (3, 4), (4, 4), (2, 3)], directed=False)
    g.es["weight"] = [1.0, 2.0, 0.5, 0.0, 1.5, -1.0]  # zero and negative weights: edges ignored
    reset = np.array([1.0, 0.0, 0.0, 0.0, 3.0, 2.0])  # node 5 is isolated: dangling
    for d in DAMPINGS:
        ref = raw_prpack(g, reset, d)
        # x = normalise((I - d W D^-1)^-1 u): parallel edges add, self-loop twice, u = reset / sum
        W = np.zeros((6, 6))
        W[0, 1] = W[1, 0] = 3.0
        W[1, 2] = W[2, 1] = 0.5
        W[4, 4] = 3.0
        deg = W.sum(axis=0)
        A = np.divide(W, deg, out=np.zeros_like(W), where=deg > 0)
        y = np.linalg.solve(np.eye(6) - d * A, reset / reset.sum())
        np.testing.assert_allclose(ref, y / y.sum(), atol=1e-13)
        np.testing.assert_allclose(BatchedSolver(g).solve(reset, d)[0], ref, atol=1e-12)


def test_errors_where_igraph_errors():
    g = ig.Graph(n=4, edges=[(0, 1), (1, 2)])
    g.es["weight"] = [1.0, 1.0]
    s = BatchedSolver(g)
    zero = np.array([0.0, -1.0, np.nan, 0.0])  # all zero once cleaned
    with pytest.raises(Exception):
        PrpackSolver(g).solve(zero, 0.5)
    with pytest.raises(ValueError, match="sum to zero"):
        s.solve(np.stack([np.ones(4), zero]), 0.5)
    with pytest.raises(ValueError, match="damping"):
        s.solve(np.ones(4), 1.0)
    with pytest.raises(ValueError, match="damping"):
        s.solve(np.ones(4), -0.1)
    with pytest.raises(ValueError, match="finite"):
        s.solve(np.array([1.0, np.inf, 0, 0]), 0.5)
    with pytest.raises(ValueError, match="shape"):
        s.solve(np.ones(5), 0.5)
    g.es["weight"] = [1.0, np.nan]
    with pytest.raises(ValueError, match="NaN"):
        BatchedSolver(g)
    # a zero row is fine where PPR is not taken: y = 0
    assert not BatchedSolver(ig.Graph(n=4, edges=[(0, 1)])).solve_many(np.zeros(4), [0.5]).any()


def test_edge_cases():
    # no edges at all, unweighted graph, single node, mass on one node
    g = ig.Graph(n=3)
    np.testing.assert_allclose(BatchedSolver(g).solve([[1.0, 1.0, 2.0]], 0.5), [[0.25, 0.25, 0.5]])
    g = ig.Graph(n=1)
    assert BatchedSolver(g).solve([[2.0]], 0.85).tolist() == [[1.0]]
    g = ig.Graph.Ring(50)  # no "weight" attribute: prpack runs unweighted, so do we
    r = np.zeros(50)
    r[3] = 1.0
    np.testing.assert_allclose(
        BatchedSolver(g).solve(r, 0.85)[0], PrpackSolver(g).solve(r, 0.85)[0], atol=1e-12
    )
    # empty query block
    assert BatchedSolver(g).solve(np.zeros((0, 50)), 0.5).shape == (0, 50)


def test_linearity_gives_the_passage_weight_sweep():
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=0.01, seed=5)
    qs = make_queries(sg, 6, seed=2)
    solver = BatchedSolver(sg.graph, block_size=4, n_threads=2)
    phrase, passage = qs.resets(0.0), qs.resets(1.0) - qs.resets(0.0)
    Y = solver.solve_many(np.concatenate([phrase, passage]), [0.5, 0.3])
    # prpack's PPR scaled back by the closed-form mass: the same y (the interface both offer)
    Y_ref = PrpackSolver(sg.graph).solve_many(np.concatenate([phrase, passage]), [0.5, 0.3])
    assert np.abs(Y - Y_ref).sum(axis=2).max() < 1e-8 * np.concatenate([phrase, passage]).sum(axis=1).max()
    for k, d in enumerate([0.5, 0.3]):
        for pnw in [0.01, 0.3]:
            y = Y[k, :6] + pnw * Y[k, 6:]
            x = y / y.sum(axis=1, keepdims=True)
            ref = PrpackSolver(sg.graph).solve(qs.resets(pnw), d)
            assert np.abs(x - ref).sum(axis=1).max() < 1e-8
            for i in range(6):
                assert rankings_agree(ref[i, sg.n_phrase :], x[i, sg.n_phrase :], k=200)


def test_threads_kernel_fallback_and_registry():
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=0.01, seed=1)
    R = make_queries(sg, 9, seed=4).resets(0.05)
    one = BatchedSolver(sg.graph, block_size=4, n_threads=1).solve(R, 0.5)
    two = BatchedSolver(sg.graph, block_size=4, n_threads=2).solve(R, 0.5)
    np.testing.assert_array_equal(one, two)
    # many narrow panels instead of one: another summation order, the same answer
    narrow = BatchedSolver(sg.graph, block_size=4, n_threads=1)
    narrow.panels = Panels.build(narrow.prepared.S, 7)
    assert narrow.panels.indptr.shape[0] > 10
    assert np.abs(narrow.solve(R, 0.5) - one).sum(axis=1).max() < 1e-11
    # the solver keeps its block arrays between calls; nothing of one call leaks into the next
    again = BatchedSolver(sg.graph, block_size=4, n_threads=2)
    first = again.solve(R, 0.5)
    again.solve(R[::-1] * 3.0, 0.85)
    np.testing.assert_array_equal(again.solve(R, 0.5), first)
    assert isinstance(make_solver("batched", sg.graph), BatchedSolver)
    assert all(isinstance(make_solver(name, sg.graph), PPRSolver) for name in ("batched", "prpack"))
    assert set(PPR_SOLVERS.names()) >= {"prpack", "batched"}
    with pytest.raises(ValueError, match=r"retrieval\.ppr_solver='nope' is not one of"):
        make_solver("nope", sg.graph)


def test_rankings_agree_rule():
    ref = np.array([0.3, 0.1, 0.3, 0.2])
    assert rank_desc_stable(ref).tolist() == [2, 0, 3, 1]  # tie: higher index first
    assert rankings_agree(ref, ref.copy())
    # an exact tie split by one ulp either way still agrees
    assert rankings_agree(ref, np.array([0.3, 0.1, np.nextafter(0.3, 1), 0.2]))
    assert rankings_agree(ref, np.array([np.nextafter(0.3, 1), 0.1, 0.3, 0.2]))
    assert not rankings_agree(ref, np.array([0.3, 0.2, 0.3, 0.1]))
    # scores closer than atol may swap; farther ones may not
    tiny = np.array([1e-14, 0.0, 1e-3])
    assert not rankings_agree(tiny, np.array([0.0, 1e-15, 1e-3]))
    assert rankings_agree(tiny, np.array([0.0, 1e-15, 1e-3]), atol=1e-11)
    assert not rankings_agree(np.array([2e-11, 0.0]), np.array([0.0, 1e-12]), atol=1e-11)
    assert rankings_agree(ref, np.array([0.3, 0.2, 0.3, 0.1]), k=2)


def test_shifted_systems_converge_without_restart():
    """Every damping's multi-shift solution meets the stopping bound by itself.

    `_polish` would silently repair a wrong shifted solution with restarts (and
    make the sweep as slow as separate solves), so check `_mscg` directly.
    """
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=0.02, seed=7)
    R = make_queries(sg, 5, seed=1).resets(0.05)
    s = BatchedSolver(sg.graph, n_threads=1)
    U = R / R.sum(axis=1, keepdims=True)
    b = np.ascontiguousarray(U[:, s.active].T) / s.sqrt_deg[:, None]
    ds = [0.99, 0.85, 0.7, 0.5, 0.3]
    for z, d in zip(s._mscg(b, ds), ds):
        resid = s._l1(b - s._product(z, d))
        assert resid.max() * d <= 1.01 * s.tol * (1 - d) / 2, d


def test_compiled_loops_against_numpy():
    rng = np.random.default_rng(0)
    S = sp.random(300, 300, density=0.05, random_state=1, format="csr")
    S = sp.csr_matrix(S + S.T)
    x, x_prev, b = (rng.standard_normal((300, 5)) for _ in range(3))
    w = rng.random(300)
    for rows in (300, 64, 1):  # one panel, several, one column per panel
        P = Panels.build(Csr.of(S), rows)
        out = np.empty_like(x)
        shifted_product(P.indptr, P.indices, P.data, 0.7, x, out)
        np.testing.assert_allclose(out, x - 0.7 * (S @ x), rtol=1e-13, atol=1e-13)
        nxt, r, l1 = x_prev.copy(), np.empty_like(x), np.empty(5)
        chebyshev_step(P.indptr, P.indices, P.data, 0.7, x, nxt, b, w, 0.9, 1.3, r, l1)
        want_r = b - (x - 0.7 * (S @ x))
        np.testing.assert_allclose(r, want_r, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(l1, w @ np.abs(want_r), rtol=1e-12)
        np.testing.assert_allclose(nxt, 1.3 * (x + 0.9 * want_r - x_prev) + x_prev, rtol=1e-12, atol=1e-12)


def test_block_in_and_out_against_numpy():
    """The loops in and out of the block (renumber, transpose, clean) against the numpy they replace."""
    rng = np.random.default_rng(3)
    n, n_active, m = 50, 41, 4  # 9 nodes without edges
    order = rng.permutation(n)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    R = rng.standard_normal((m, n)) * (rng.random((m, n)) < 0.6)  # negatives and zeros
    R[1, 7], R[2, 9] = np.nan, -np.inf  # cleaned to 0
    C = sp.csr_matrix(R)
    scale = rng.uniform(1.0, 3.0, m)
    sqrt_deg = rng.uniform(0.5, 2.0, n_active)
    u = np.fmax(R, 0.0) / scale[:, None]  # the cleaned, scaled resets, query-major
    b = np.full((n_active, m), np.nan)
    gather_resets(C.indptr, C.indices, C.data, pos, scale, sqrt_deg, b)
    np.testing.assert_array_equal(b, u[:, order[:n_active]].T / sqrt_deg[:, None])

    z = rng.standard_normal((n_active, m))  # a few negative answers: round-off, cut to 0
    y = u.copy()
    y[:, order[:n_active]] = np.maximum(z * sqrt_deg[:, None], 0.0).T
    out = np.full((m, n), np.nan)
    mass = rng.uniform(1.0, 2.0, m)
    scatter_answers(z, C.indptr, C.indices, C.data, pos, scale, sqrt_deg, mass, np.ones(m), out, 0)
    np.testing.assert_array_equal(out, y / mass[:, None])
    scatter_answers(z, C.indptr, C.indices, C.data, pos, scale, sqrt_deg, np.ones(m), scale, out, 0)
    np.testing.assert_array_equal(out, y * scale[:, None])
    part = np.full((m, 13), np.nan)  # only nodes 30..42
    scatter_answers(z, C.indptr, C.indices, C.data, pos, scale, sqrt_deg, mass, np.ones(m), part, 30)
    np.testing.assert_array_equal(part, (y / mass[:, None])[:, 30:43])


def test_solve_returns_only_the_asked_columns():
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=0.01, seed=4)
    R = make_queries(sg, 5, seed=2).resets(0.05)
    for solver in (BatchedSolver(sg.graph, block_size=2), PrpackSolver(sg.graph)):
        full = solver.solve(R, 0.5)
        tail = solver.solve(R, 0.5, columns=slice(sg.n_phrase, None))
        assert tail.shape == (5, sg.n_passage)
        if isinstance(solver, BatchedSolver):
            np.testing.assert_array_equal(tail, full[:, sg.n_phrase:])
        else:  # prpack is not bit-reproducible from call to call
            np.testing.assert_allclose(tail, full[:, sg.n_phrase:], rtol=1e-9)
    np.testing.assert_array_equal(BatchedSolver(sg.graph).solve(R, 0.0, columns=slice(3, 9)), R[:, 3:9] / R.sum(axis=1, keepdims=True))
    with pytest.raises(ValueError, match="step 1"):
        BatchedSolver(sg.graph).solve(R, 0.5, columns=slice(0, 10, 2))


def test_answers_into_a_given_array():
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=0.01, seed=4)
    R = make_queries(sg, 7, seed=2).resets(0.05)
    s = BatchedSolver(sg.graph, block_size=4, n_threads=2)
    want = s.solve(R, 0.5)
    buf = np.full(R.shape, np.nan)
    assert s.solve(R, 0.5, out=buf) is buf
    np.testing.assert_array_equal(buf, want)
    Y = np.full((2, *R.shape), np.nan)
    assert s.solve_many(R, [0.5, 0.0], out=Y) is Y
    np.testing.assert_allclose(Y[0] / Y[0].sum(axis=1, keepdims=True), want, rtol=0, atol=1e-11)
    np.testing.assert_allclose(Y[1], np.fmax(R, 0.0), rtol=1e-15)
    ref = np.full(R.shape, np.nan)
    assert PrpackSolver(sg.graph).solve(R, 0.5, out=ref) is ref
    assert np.abs(ref - want).sum(axis=1).max() < 1e-8
    # one allocation, handed out again: the retriever's and the sweep's blocks reuse it
    pool = OutputBuffer()
    first = pool.view(R.shape)
    again = pool.view((3, R.shape[1]))
    assert again.flags.c_contiguous and np.shares_memory(first, again)
    s.solve(R[:3], 0.5, out=again)
    np.testing.assert_allclose(first[:3], want[:3], rtol=0, atol=1e-11)  # the front of the same memory
    bigger = pool.view((9, R.shape[1]))
    assert bigger.flags.c_contiguous and not np.shares_memory(bigger, first)
    for bad, why in [
        (np.empty((7, R.shape[1] - 1)), "shape"),
        (np.empty(R.shape, dtype=np.float32), "float64"),
        (np.empty(R.shape[::-1]).T, "C-contiguous"),
    ]:
        with pytest.raises(ValueError, match=why):
            s.solve(R, 0.5, out=bad)
    C = sp.csr_matrix(R)
    shared = np.zeros(R.shape)
    shared.ravel()[: C.nnz] = C.data
    C.data = shared.ravel()[: C.nnz]  # the resets' values live in the answers' memory
    with pytest.raises(ValueError, match="overlap"):
        s.solve(C, 0.5, out=shared)


@pytest.mark.parametrize("d", [0.5, 0.85, 0.99])
def test_error_bound_against_a_dense_solve(d):
    """solve() divides by PPR's closed-form total mass and stops on the bound that gives:
    its L1 error against an exact dense solve stays below tol, rows sum to 1 within tol,
    also with reset mass on nodes without edges (which changes that mass)."""
    rng = np.random.default_rng(11)
    n = 400
    pairs = rng.integers(0, n - 6, size=(1600, 2))  # the last 6 nodes have no edges
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    g = ig.Graph(n=n, edges=pairs.tolist(), directed=False)
    g.es["weight"] = rng.uniform(0.5, 2.0, len(pairs)).tolist()
    W = np.zeros((n, n))
    np.add.at(W, (pairs[:, 0], pairs[:, 1]), g.es["weight"])
    W = W + W.T
    deg = W.sum(axis=0)
    A = W / np.where(deg > 0, deg, 1.0)
    R = rng.random((3, n)) * (rng.random((3, n)) < 0.1)
    R[:, -6:] = [[0.0] * 6, [0.5] * 6, [5.0] * 6]  # no, some and most mass without edges
    R[:, 0] += 0.1
    s = BatchedSolver(g, n_threads=1)
    X = s.solve(R, d)
    for i, r in enumerate(R):
        y = np.linalg.solve(np.eye(n) - d * A, r / r.sum())
        exact = y / y.sum()
        assert np.abs(X[i] - exact).sum() < s.tol, i
        assert abs(X[i].sum() - 1.0) < s.tol, i


def test_spectral_interval_holds_the_spectrum():
    """Lanczos (large graphs) and the dense path (small ones) against eigvalsh."""
    from benchmarks.synthetic_graph import make_graph

    for scale in (0.004, 0.008):  # ~390 and ~780 nodes: both paths
        s = BatchedSolver(make_graph(scale=scale, seed=3).graph)
        S, V = s.prepared.S.toarray(), s.components.toarray()
        P = np.eye(len(S)) - V @ V.T
        w = np.linalg.eigvalsh(P @ S @ P)
        lo, hi = spectral_interval(s.prepared.S, s.components)
        assert lo <= w[0] and w[-1] <= hi, (scale, lo, hi, w[0], w[-1])
        assert hi - w[-1] < 5e-3 and w[0] - lo < 5e-3  # tight, or Chebyshev would be slow
        assert np.allclose(S @ V, V)  # the columns taken out are eigenvectors for 1


@pytest.mark.parametrize("numba_min_nnz", PATHS)
@pytest.mark.parametrize("interval", [(-0.01, 0.01), (0.2, 0.3), (-1.0, 1.0)])
def test_chebyshev_survives_a_wrong_interval(interval, numba_min_nnz):
    """Too narrow (or shifted) an interval slows Chebyshev down (on the compiled loops its
    float32 rounds stop cutting the residual), CG takes over; answers hold."""
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=0.01, seed=2)
    R = make_queries(sg, 3, seed=3).resets(0.05)
    s = BatchedSolver(sg.graph, n_threads=1, numba_min_nnz=numba_min_nnz)
    s.prepared.interval = interval
    for d in (0.5, 0.85):
        assert_matches(sg.graph, sg.n_phrase, R, d, s.solve(R, d))


def test_components_solved_in_closed_form():
    # two components and an isolated node; mass on both components
    g = ig.Graph(n=7, edges=[(0, 1), (1, 2), (2, 0), (3, 4), (4, 5)])
    g.es["weight"] = [1.0, 2.0, 1.5, 1.0, 0.5]
    s = BatchedSolver(g)
    assert s.components.shape[1] == 2
    V = s.components.toarray()
    np.testing.assert_allclose(V.T @ V, np.eye(2), atol=1e-14)
    np.testing.assert_allclose(component_vectors(s.prepared.S, s.sqrt_deg).toarray(), V)
    R = np.array([[1.0, 0, 0, 0, 0, 2.0, 0.5], [0, 0, 0, 1.0, 0, 0, 0]])
    for d in (0.3, 0.5, 0.99):
        assert_matches(g, 0, R, d, s.solve(R, d))


def test_block_size_follows_the_workspace_budget():
    assert block_size_for(96_939, 2) == 32  # MuSiQue size: 4 x 8 B x 97k x 32 x 2 threads = 199 MB
    assert block_size_for(2 * 96_939, 2) == 16
    assert block_size_for(10 * 96_939, 2) == 8
    assert block_size_for(96_939, 2, budget=100 << 20) == 16


def test_small_graphs_do_not_start_numba():
    """Below NUMBA_MIN_NNZ a solver runs on scipy and never imports numba (its start-up is
    what the path saves); at or above it, the compiled loops are imported."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, igraph as ig\n"
            "from hipporag2.retrieve.ppr.batched import BatchedSolver\n"
            "g = ig.Graph.Ring(30)\n"
            "BatchedSolver(g, numba_min_nnz=int(sys.argv[1])).solve(np.eye(30)[:3], 0.5)\n"
            "print('numba' in sys.modules)")
    for threshold, started in (("1000", "False"), ("0", "True")):
        done = subprocess.run([sys.executable, "-c", code, threshold], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == started, done.stderr
