"""The batched solver's two block operators (numpy/scipy and compiled numba) and the
automatic choice between them (`ppr.choose_operator`, `ppr_numpy.TieredOperator`).

Both must give prpack's answers within the solver's bound and its rankings up to
near-ties, on the same graph shapes as tests/test_ppr.py, and agree with each other;
a run on a small graph must not import numba at all (its start-up is what the numpy
operator exists to avoid).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipporag2.retrieve import ppr_numpy
from hipporag2.retrieve.ppr import (
    NUMPY_OPERATOR_MAX_NNZ,
    BatchedSolver,
    PrpackSolver,
    choose_operator,
    prepare_graph,
    rankings_agree,
)
from tests.test_ppr import DAMPINGS, TIE_ATOL, assert_matches, graph_case

OPERATORS = ("numpy", "compiled")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_case(), st.sampled_from(DAMPINGS), st.sampled_from(OPERATORS))
def test_each_operator_matches_prpack(case, d, operator):
    g, n_phrase, R = case
    solver = BatchedSolver(g, block_size=2, n_threads=1, operator=operator)
    assert solver.operator == operator
    ours = solver.solve(R, d)
    assert np.allclose(ours.sum(axis=1), 1.0) and (ours >= 0).all()
    assert_matches(g, n_phrase, R, d, ours)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_case(), st.sampled_from(OPERATORS))
def test_each_operator_in_the_multi_damping_sweep(case, operator):
    g, n_phrase, R = case
    ds = [0.85, 0.0, 0.5, 0.3]
    Y = BatchedSolver(g, block_size=2, n_threads=1, operator=operator).solve_unnormalised(R, ds)
    for k, d in enumerate(ds):
        assert_matches(g, n_phrase, R, d, Y[k] / Y[k].sum(axis=1, keepdims=True))


@pytest.mark.parametrize("scale,seed", [(0.005, 1), (0.02, 3)])
def test_operators_agree_on_hipporag_shaped_graphs(scale, seed):
    """Synthetic MuSiQue-shaped graphs (hubs, synonym clusters, passages; 500 and 2000
    nodes): both operators within the bound of prpack and of each other, the same
    passage rankings."""
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=scale, seed=seed)
    R = make_queries(sg, 12, seed=seed).resets(0.05)
    n = sg.graph.vcount()
    passages = slice(sg.n_phrase, n)
    ref = PrpackSolver(sg.graph).solve(R, 0.5)
    one = BatchedSolver(sg.graph, block_size=8, n_threads=2, operator="numpy")
    got = {"numpy": one.solve(R, 0.5),
           "compiled": BatchedSolver.from_prepared(one.prepared, n_threads=2, operator="compiled").solve(R, 0.5)}
    for op, ours in got.items():
        assert np.abs(ours - ref).sum(axis=1).max() < 1e-8, op
        for i in range(len(R)):
            assert rankings_agree(ref[i, passages], ours[i, passages], atol=TIE_ATOL), (op, i)
    # the same iteration in another summation order: far inside the 1e-11 bound
    assert np.abs(got["numpy"] - got["compiled"]).sum(axis=1).max() < 1e-11


def test_numpy_operations_against_the_compiled_ones():
    """Each method of NumpyOperator against the compiled operator's, on one degree-ordered block."""
    rng = np.random.default_rng(5)
    n = 200
    A = sp.random(n, n, density=0.04, random_state=2, format="csr")
    src, dst = A.nonzero()
    prep = prepare_graph(n + 3, src, dst, rng.uniform(0.5, 2.0, len(src)), block_size=4)  # 3 nodes without edges
    na = prep.n_active
    ours = ppr_numpy.NumpyOperator(prep.S, prep.pos)
    theirs = BatchedSolver.from_prepared(prep, operator="compiled").op  # ppr's compiled operator
    m = 6
    x, x_prev, b = (rng.standard_normal((na, m)) for _ in range(3))
    w = prep.sqrt_deg
    np.testing.assert_allclose(ours(x, 0.7), theirs(x, 0.7), rtol=1e-13, atol=1e-13)
    outs = []
    for op in (ours, theirs):
        nxt, r, l1 = x_prev.copy(), np.empty_like(x), np.empty(m)
        op.chebyshev_step(0.7, x, nxt, b, w, 0.9, 1.3, r, l1)
        outs.append((nxt, r, l1))
    for a, c in zip(*outs):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
    R = rng.standard_normal((m, n + 3))
    R[1, 7], R[2, 9] = np.nan, -np.inf
    sums = [np.empty(m), np.empty(m)]
    ours.clean_sums(R, sums[0])
    theirs.clean_sums(R, sums[1])
    np.testing.assert_allclose(sums[0], sums[1], rtol=1e-14)
    scale = rng.uniform(1.0, 3.0, m)
    bs = [np.full((na, m), np.nan), np.full((na, m), np.nan)]
    ours.gather_resets(R, prep.pos, scale, w, bs[0])
    theirs.gather_resets(R, prep.pos, scale, w, bs[1])
    np.testing.assert_array_equal(bs[0], bs[1])
    z = rng.standard_normal((na, m))  # negative answers are round-off: cut to 0
    mass, ones = rng.uniform(1.0, 2.0, m), np.ones(m)
    for j0, width in ((0, n + 3), (n - 10, 13), (5, 20)):  # all nodes, the last ones (no edges), a middle run
        got = [np.full((m, width), np.nan), np.full((m, width), np.nan)]
        ours.scatter_answers(z, R, prep.pos, scale, w, mass, ones, got[0], j0)
        theirs.scatter_answers(z, R, prep.pos, scale, w, mass, ones, got[1], j0)
        np.testing.assert_array_equal(got[0], got[1])
    coef = rng.standard_normal((prep.n_comp, m))
    zs = [z.copy(), z.copy()]
    ours.add_components(zs[0], prep.comp_of, prep.comp_val, coef)
    theirs.add_components(zs[1], prep.comp_of, prep.comp_val, coef)
    np.testing.assert_array_equal(zs[0], zs[1])
    l1 = [np.empty(m), np.empty(m)]
    ours.weighted_l1(z, w, l1[0])
    theirs.weighted_l1(z, w, l1[1])
    np.testing.assert_allclose(l1[0], l1[1], rtol=1e-13)
    # the mixed-precision methods: float32 steps with S's float32 values, float64 residuals
    theirs.prepare_mixed()
    ours.prepare_mixed()
    f = np.float32
    outs = []
    for op in (ours, theirs):
        nxt, r, l1 = x_prev.astype(f), np.empty((na, m), f), np.empty(m)
        op.chebyshev_step32(0.7, x.astype(f), nxt, b.astype(f), w, 0.9, 1.3, r, l1)
        outs.append((nxt, r, l1))
    for a, c in zip(*outs):  # float32 rounding, in two summation orders
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)
    # numpy's step without its residual: the same next iterate, r left alone
    nxt, r = x_prev.astype(f), np.full((na, m), np.nan, f)
    ours.chebyshev_advance32(0.7, x.astype(f), nxt, b.astype(f), 0.9, 1.3, r)
    np.testing.assert_allclose(nxt, outs[0][0], rtol=1e-5, atol=1e-5)
    assert np.isnan(r).all()
    assert getattr(theirs, "chebyshev_advance32", None) is None  # its fused step's residual is free
    res = []
    for op in (ours, theirs):
        r, l1 = b.copy(), np.empty(m)
        op.residual_in_place(0.7, x, w, r, l1)
        res.append((r, l1))
    for a, c in zip(*res):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res[0][0], b - ours(x, 0.7), rtol=1e-12, atol=1e-12)  # what it means
    factor = rng.uniform(0.5, 4.0, m)
    got = [np.empty((na, m), f), np.empty((na, m), f)]
    ours.scale_columns(x, factor, got[0])
    theirs.scale_columns(x, factor, got[1])
    np.testing.assert_array_equal(got[0], got[1])
    zs = [z.copy(), z.copy()]
    ours.add_scaled_columns(zs[0], got[0], factor)
    theirs.add_scaled_columns(zs[1], got[0], factor)
    np.testing.assert_allclose(zs[0], zs[1], rtol=1e-15, atol=1e-15)
    # resets as CSR rows (what the retriever hands over), rows 2..5 of a larger matrix
    # (absolute offsets, as `ppr.CsrRows`): the same bits as the dense passes
    C = sp.random(m + 3, n + 3, density=0.1, random_state=4, format="csr")
    C.data -= 0.3  # negatives, cleaned to 0
    C.data[3] = np.nan
    C.sort_indices()
    dense = C.toarray()[2 : 2 + m]
    ptr = C.indptr[2 : 2 + m + 1]
    bs = [np.full((na, m), np.nan) for _ in range(3)]
    ours.gather_resets_csr(ptr, C.indices, C.data, prep.pos, scale, w, bs[0])
    theirs.gather_resets_csr(ptr, C.indices, C.data, prep.pos, scale, w, bs[1])
    ours.gather_resets(dense, prep.pos, scale, w, bs[2])
    np.testing.assert_array_equal(bs[0], bs[1])
    np.testing.assert_array_equal(bs[0], bs[2])
    for j0, width in ((0, n + 3), (n - 10, 13), (5, 20)):
        got = [np.full((m, width), np.nan) for _ in range(3)]
        ours.scatter_answers_csr(z, ptr, C.indices, C.data, prep.pos, scale, w, mass, ones, got[0], j0)
        theirs.scatter_answers_csr(z, ptr, C.indices, C.data, prep.pos, scale, w, mass, ones, got[1], j0)
        ours.scatter_answers(z, dense, prep.pos, scale, w, mass, ones, got[2], j0)
        np.testing.assert_array_equal(got[0], got[1])
        np.testing.assert_array_equal(got[0], got[2])
    # a Fortran-ordered block (the multi-shift CG compacts its blocks that way): same product
    xf = np.asfortranarray(x)
    np.testing.assert_allclose(ours(xf, 0.7), theirs(x, 0.7), rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match="another node order"):
        ours.gather_resets(R, prep.pos[::-1].copy(), scale, w, bs[0])


def test_automatic_choice_by_graph_size_and_override():
    assert choose_operator(10) == "tiered"
    assert choose_operator(NUMPY_OPERATOR_MAX_NNZ - 1) == "tiered"
    assert choose_operator(NUMPY_OPERATOR_MAX_NNZ) == "compiled"
    assert choose_operator(10, "compiled") == "compiled"
    assert choose_operator(10**9, "numpy") == "numpy"
    with pytest.raises(ValueError, match="operator must be one of"):
        choose_operator(10, "fast")


def test_tiered_operator_moves_to_compiled_once_it_pays():
    """Below its budget of queries x nonzeros it stays on numpy; the blocks past the
    budget run compiled, with the same answers as a solver that never switched."""
    from benchmarks.synthetic_graph import make_graph, make_queries

    sg = make_graph(scale=0.005, seed=7)
    R = make_queries(sg, 10, seed=1).resets(0.05)
    tiered = BatchedSolver(sg.graph, block_size=4, n_threads=1)
    assert tiered.operator == "tiered" and tiered.op.name == "numpy"
    nnz = tiered.prepared.S.nnz
    tiered.op.budget = 15 * nnz  # the second call of 10 queries passes it
    plain = BatchedSolver(sg.graph, block_size=4, n_threads=1, operator="numpy")
    first = tiered.solve(sp.csr_matrix(R), 0.5)  # the retriever hands over CSR resets
    assert tiered.op.name == "numpy" and tiered.op.work == 10 * nnz
    np.testing.assert_array_equal(first, plain.solve(sp.csr_matrix(R), 0.5))
    second = tiered.solve(R, 0.5)  # blocks of 4: 10 + 4 <= 15, the second block passes it
    assert tiered.op.name == "compiled" and tiered.op.work == 18 * nnz
    assert np.abs(second - first).sum(axis=1).max() < 1e-11
    Y = tiered.solve_unnormalised(R, [0.5, 0.85])  # and the sweep path on the compiled loops
    assert np.abs(Y[0] / Y[0].sum(axis=1, keepdims=True) - first).sum(axis=1).max() < 1e-10


def test_a_small_graph_run_never_imports_numba(tmp_path):
    """Open an index, load the solver's saved preparation (made by another process), rank:
    numba stays out of sys.modules, as in a CLI run on the shared MuSiQue set."""
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from benchmarks.synthetic_graph import make_graph, make_queries
        from hipporag2.graph.build import GraphEdges
        from hipporag2.graph.store import load_index  # the index load path and its imports
        import hipporag2.retrieve.graph_retriever  # the retriever and its imports
        from hipporag2.retrieve.ppr import BatchedSolver
        from hipporag2.retrieve.scoring import min_max_top_k
        sg = make_graph(scale=0.005, seed=3)
        src, dst = np.array(sg.graph.get_edgelist()).T
        w = np.array(sg.graph.es["weight"])
        edges = GraphEdges(sg.graph.vcount(), src, dst, w, np.zeros(len(w), dtype=np.int8))
        R = make_queries(sg, 40, seed=3).resets(0.05)
        for _ in range(2):  # prepared and saved, then loaded back
            solver = BatchedSolver.from_edges(edges, {str(tmp_path)!r})
            min_max_top_k(solver.solve(R, 0.5), 5)
            solver.solve_unnormalised(R[:3], [0.5, 0.3])
            print(solver.operator, solver.op.name, end=" ")
        print("numba" in sys.modules, "llvmlite" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(_repo_root()))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["tiered", "numpy", "tiered", "numpy", "False", "False"], done.stdout
    assert len(list(tmp_path.glob("*/manifest.json"))) == 1  # the second solver loaded the first one's


def _repo_root():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]

