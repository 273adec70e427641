"""The batched solver's mixed-precision path (float32 Chebyshev bulk, float64 acceptance).

What it must keep from the float64 path: the documented bound (PPR within tol = 1e-11
in L1 of the exact answer, accepted only by a float64 true residual), prpack's
rankings up to near-ties, and a float64 finish when float32 cannot make progress.
Graphs of several shapes, because what float32 gets wrong depends on the spectrum
(hubs, long chains whose spectrum reaches +-1, several components, nodes without
edges). Each test also checks that the float32 steps actually ran, so a change that
quietly routes every solve through the float64 path fails here.
"""
from __future__ import annotations

import random

import igraph as ig
import numpy as np
import pytest
import scipy.sparse as sp

from hipporag2.retrieve import ppr
from hipporag2.retrieve.ppr import BatchedSolver, rankings_agree

TOL = 1e-11  # the solver's default: the L1 error it guarantees


def weighted(g: ig.Graph, rng) -> ig.Graph:
    g.es["weight"] = rng.choice([0.8, 0.93, 1.0, 2.0, 3.0], size=g.ecount()).tolist()
    return g


def shapes():
    random.seed(11)  # igraph's generators draw from Python's random module
    rng = np.random.default_rng(11)
    er = weighted(ig.Graph.Erdos_Renyi(n=700, m=3500), rng)
    hubs = ig.Graph.Barabasi(600, 3)  # a few nodes of very high degree, like the phrase graph's
    chain = ig.Graph.Lattice([500], circular=False)  # spectrum up to +-cos(pi/501): slow at d = 0.85
    parts = ig.disjoint_union([ig.Graph.Erdos_Renyi(n=n, m=4 * n) for n in (300, 150, 60)])
    parts.add_vertices(5)  # nodes without edges: y = u there
    bipartite = ig.Graph.Random_Bipartite(200, 250, m=2000)  # eigenvalue -1 of S
    return {"random": er, "hubs": weighted(hubs, rng), "chain": weighted(chain, rng),
            "components": weighted(parts, rng), "bipartite": weighted(bipartite, rng)}


SHAPES = shapes()


def resets(n: int, q: int, seed: int) -> np.ndarray:
    """HippoRAG-like resets: a few heavy seeds, plus small mass spread over a tail."""
    rng = np.random.default_rng(seed)
    R = np.zeros((q, n))
    for i in range(q):
        R[i, rng.choice(n, 5, replace=False)] = rng.uniform(0.1, 1.0, 5)
        tail = rng.choice(n, n // 5, replace=False)
        R[i, tail] += 0.01 * rng.random(len(tail))
    return R


def counted(solver: BatchedSolver, *names: str) -> dict:
    """Count calls of the operator's methods `names` (instrumentation of the real operator)."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        method = getattr(solver.op, name)

        def wrap(*a, _m=method, _n=name):
            calls[_n] += 1
            return _m(*a)

        setattr(solver.op, name, wrap)
    return calls


def prpack(g: ig.Graph, R: np.ndarray, d: float) -> np.ndarray:
    w = "weight" if "weight" in g.es.attributes() else None
    return np.array([g.personalized_pagerank(damping=d, directed=False, weights=w, reset=list(r),
                                             implementation="prpack") for r in R])


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("d", [0.5, 0.85])
@pytest.mark.parametrize("operator", ["compiled", "numpy"])
def test_mixed_precision_within_the_bound(shape, d, operator):
    g = SHAPES[shape]
    R = resets(g.vcount(), 40, seed=len(shape))  # a full block of 32 and a partial one
    # prpack on every 8th reset (first: its OpenMP threads compete with BLAS threads that
    # still spin after the solvers' set-up), the float64 path on all
    sub = slice(0, None, 8)
    ref = prpack(g, R[sub], d)
    mixed = BatchedSolver(g, operator=operator, n_threads=2)
    calls = counted(mixed, "chebyshev_step32", "residual_in_place")
    got = mixed.solve(R, d)
    assert calls["chebyshev_step32"] > 0 and calls["residual_in_place"] > 0, "the float32 path did not run"
    f64 = BatchedSolver(g, operator="compiled", n_threads=2, mixed_precision=False).solve(R, d)
    # both within TOL of the exact answer, so within 2 TOL of each other
    assert np.abs(got - f64).sum(axis=1).max() <= 2 * TOL
    assert np.abs(got[sub] - ref).sum(axis=1).max() < 1e-8  # prpack itself stops at ~1e-10
    assert np.allclose(got.sum(axis=1), 1.0, atol=2 * TOL) and (got >= 0).all()
    for i, j in enumerate(range(len(R))[sub]):
        assert rankings_agree(ref[i], got[j], k=200, atol=TOL), (shape, d, j)


@pytest.mark.parametrize("case", ["diverges", "gains too little"])
@pytest.mark.parametrize("operator", ["compiled", "numpy"])
def test_float32_stall_hands_over_to_float64(monkeypatch, case, operator):
    """The refinement must notice a float32 round that does not cut the float64 residual
    enough and finish in float64 (`_polish`), still within the bound: a spectral interval
    off the whole spectrum makes the float32 steps diverge (z starts over from 0), and a
    round gain set beyond float32's reach (~1e-7) stands for float32 stalling."""
    g = SHAPES["random"]
    R = resets(g.vcount(), 8, seed=3)
    solver = BatchedSolver(g, operator=operator, n_threads=1)
    if case == "diverges":
        solver._interval = (0.5, 0.6)
    else:
        monkeypatch.setattr(ppr, "REFINE_GAIN", 1e-12)
    polished = []
    original = BatchedSolver._polish
    monkeypatch.setattr(BatchedSolver, "_polish", lambda self, *a: polished.append(1) or original(self, *a))
    calls = counted(solver, "chebyshev_step32")
    got = solver.solve(R, 0.85)
    assert calls["chebyshev_step32"] > 0 and polished, "the stalled float32 solve was not handed to float64"
    want = BatchedSolver(g, operator="compiled", n_threads=1, mixed_precision=False).solve(R, 0.85)
    assert np.abs(got - want).sum(axis=1).max() <= 2 * TOL


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("d", [0.5, 0.85])
def test_rounds_check_their_residual_only_where_they_may_stop(shape, d):
    """The numpy operator's float32 rounds compute their residual only from a step before
    the polynomial bound on (`_chebyshev32`): each round stops within a step of where
    checking every step stops (the step alone rounds its float32 sum differently, so a
    round's residual can cross its goal a step apart), with fewer residuals; the
    answers stay within the bound of the float64 path."""
    g = SHAPES[shape]
    R = resets(g.vcount(), 20, seed=len(shape) + 1)
    taken = {}
    for label in ("every step", "schedule"):
        solver = BatchedSolver(g, operator="numpy", n_threads=1, block_size=10)
        if label == "every step":
            solver.op.chebyshev_advance32 = None  # an operator without the step alone
        calls = counted(solver, "chebyshev_step32", *(("chebyshev_advance32",) if label == "schedule" else ()))
        rounds = []
        original = solver._chebyshev32

        def per_round(*a, _calls=calls, _rounds=rounds, _original=original):
            before = sum(_calls.values()), _calls["chebyshev_step32"]
            out = _original(*a)
            _rounds.append((sum(_calls.values()) - before[0], _calls["chebyshev_step32"] - before[1]))
            return out

        solver._chebyshev32 = per_round
        got = solver.solve(R, d)
        taken[label] = rounds
        want = BatchedSolver(g, operator="compiled", n_threads=1, mixed_precision=False).solve(R, d)
        assert np.abs(got - want).sum(axis=1).max() <= 2 * TOL, label
    every, ours = taken["every step"], taken["schedule"]
    assert len(every) == len(ours) > 0
    for (steps_every, _), (steps, checks) in zip(every, ours):
        assert abs(steps - steps_every) <= 1, (every, ours)
    assert sum(c for _, c in ours) < sum(s for s, _ in every), "every step still computed its residual"


def test_next_check_by_the_chebyshev_rate():
    """After a check that does not stop, the next comes after the steps the asymptotic
    rate needs for what is left, rounded down, between 1 and CHECK_EVERY; a residual
    that is NaN, infinite or already small enough is checked at the next step."""
    sigma = 0.5
    rho = sigma / (1 + np.sqrt(1 - sigma**2))  # ~0.268 a step
    for steps in range(1, 6):
        # a reduction just over rho^-steps needs `steps` steps; just under, one fewer
        assert ppr._steps_at_rate(sigma, rho ** -steps * 1.01) == steps
        assert ppr._steps_at_rate(sigma, rho ** -steps * 0.99) == max(1, steps - 1)
    assert ppr._steps_at_rate(sigma, 1e300) == ppr.CHECK_EVERY
    for reduction in (float("nan"), float("inf"), 0.5, 1.0):
        assert ppr._steps_at_rate(sigma, reduction) == 1
    assert ppr._steps_at_rate(0.0, 1e6) == 1  # one point: one step solves it


@pytest.mark.parametrize("operator", ["compiled", "numpy"])
def test_kept_and_regathered_right_hand_sides_give_the_same_bits(monkeypatch, operator):
    """Small blocks keep their b for the float64 residuals (`_keeps_rhs`); large ones
    gather it again from the resets, the same operations on the same inputs: the same
    answers to the bit, through several rounds and the float64 finish."""
    g = SHAPES["hubs"]
    R = resets(g.vcount(), 12, seed=4)
    monkeypatch.setattr(ppr, "F32_REACH", 1e-3)  # several rounds, so b is needed several times
    kept = BatchedSolver(g, operator=operator, n_threads=1, block_size=8)
    assert kept._keeps_rhs()
    want = kept.solve(sp.csr_matrix(R), 0.5)
    monkeypatch.setattr(ppr, "KEEP_RHS_BYTES", 0)
    again = BatchedSolver(g, operator=operator, n_threads=1, block_size=8)
    assert not again._keeps_rhs()
    calls = counted(again, "gather_resets_csr")
    got = again.solve(sp.csr_matrix(R), 0.5)
    assert calls["gather_resets_csr"] > 2  # two blocks, each gathered more than once
    np.testing.assert_array_equal(got, want)


def test_more_rounds_when_float32_reaches_less(monkeypatch):
    """With a float32 round that gains only ~1e-3 (a coarse F32_REACH), reaching 1e-11
    takes several rounds of refinement; the answer is the same within the bound."""
    g = SHAPES["hubs"]
    R = resets(g.vcount(), 8, seed=5)
    monkeypatch.setattr(ppr, "F32_REACH", 1e-3)
    solver = BatchedSolver(g, operator="compiled", n_threads=1)
    calls = counted(solver, "residual_in_place")
    got = solver.solve(R, 0.5)
    assert calls["residual_in_place"] >= 3
    want = BatchedSolver(g, operator="compiled", n_threads=1, mixed_precision=False).solve(R, 0.5)
    assert np.abs(got - want).sum(axis=1).max() <= 2 * TOL


def test_operators_without_float32_stay_float64():
    """An operator that does not declare `mixed_precision` gets the float64 path, and so does a solver asked for it; same answers."""
    g = SHAPES["components"]
    R = resets(g.vcount(), 6, seed=9)
    want = BatchedSolver(g, operator="compiled", n_threads=1).solve(R, 0.5)

    class Float64Only(ppr._Operator):
        mixed_precision = False

    for solver in (BatchedSolver(g, operator="compiled", n_threads=1), BatchedSolver(g, operator="compiled", n_threads=1, mixed_precision=False)):
        if solver.mixed_precision:
            solver.op = Float64Only(solver.op.S, solver.op.panels)
        calls = counted(solver, "chebyshev_step32", "chebyshev_step")
        got = solver.solve(R, 0.5)
        assert calls["chebyshev_step32"] == 0 and calls["chebyshev_step"] > 0
        assert np.abs(got - want).sum(axis=1).max() <= 2 * TOL


@pytest.mark.parametrize("operator", ["compiled", "numpy"])
def test_sparse_resets_give_the_dense_answers(operator):
    """Resets as CSR rows (what the retriever hands over) solve like the same dense
    array: NaN/negative entries cleaned, duplicate entries added (scipy's reading), nodes
    without edges answered from the reset itself, a column slice, d = 0, the sweep path,
    and prpack; an operator without the CSR passes gets each block densified."""
    import scipy.sparse as sp

    g = SHAPES["components"]  # has nodes without edges
    n = g.vcount()
    R = resets(n, 37, seed=4)
    R[3, 7] = np.nan
    R[5, 11] = -1.0
    R[6, n - 1] = 2.0  # mass on a node without edges
    rows, cols = np.nonzero(np.isnan(R) | (R != 0))
    # reversed (unsorted), an explicit zero, and a duplicate entry that adds 0.75 to R[2, 9]
    C = sp.coo_matrix((np.r_[R[rows, cols][::-1], 0.0, 0.25, 0.5], (np.r_[rows[::-1], 1, 2, 2], np.r_[cols[::-1], 0, 9, 9])),
                      shape=R.shape)
    R2 = R.copy()
    R2[2, 9] += 0.75
    solver = BatchedSolver(g, operator=operator, n_threads=2)
    assert hasattr(solver.op, "gather_resets_csr")
    for d in (0.5, 0.0):
        want = solver.solve(R2, d)
        got = solver.solve(C, d)
        # the same within the bound (the sums may round differently, and float32 with them)
        assert np.abs(got - want).sum(axis=1).max() <= 2 * TOL
        cols = slice(400, n)
        assert np.abs(solver.solve(C, d, columns=cols) - want[:, cols]).sum(axis=1).max() <= 2 * TOL
    Y = solver.solve_unnormalised(C, [0.5, 0.3])
    Y2 = solver.solve_unnormalised(R2, [0.5, 0.3])
    assert (np.abs(Y - Y2).sum(axis=2) <= 2 * TOL * np.fmax(R2, 0).sum(axis=1)).all()
    # an empty row (between full ones) is y = 0 there, and is refused where PPR is taken
    E = sp.vstack([C.tocsr()[:2], sp.csr_matrix((1, n)), C.tocsr()[2:4]]).tocsr()
    Y = solver.solve_unnormalised(E, [0.5])[0]
    assert not Y[2].any() and np.abs(Y[[0, 1, 3, 4]] - Y2[0, :4]).sum(axis=1).max() <= 2 * TOL * 5
    with pytest.raises(ValueError, match="sum to zero"):
        solver.solve(E, 0.5)
    from hipporag2.retrieve.ppr import PrpackSolver

    np.testing.assert_array_equal(PrpackSolver(g).solve(C.tocsr()[:3], 0.5), PrpackSolver(g).solve(R2[:3], 0.5))

    class DenseOnly(ppr._Operator):
        gather_resets_csr = property(lambda self: (_ for _ in ()).throw(AttributeError("dense only")))

    dense_only = BatchedSolver(g, operator="compiled", n_threads=1)
    dense_only.op = DenseOnly(dense_only.op.S, dense_only.op.panels)
    assert not hasattr(dense_only.op, "gather_resets_csr")
    assert np.abs(dense_only.solve(C, 0.5) - solver.solve(R2, 0.5)).sum(axis=1).max() <= 2 * TOL


def test_retriever_reset_rows_are_reset_vectors():
    """`reset_rows` holds exactly `seeds.reset_vector` of each query (the last weight of a
    phrase seeded twice, passage seeds with zeros and NaN), as CSR."""
    from hipporag2.retrieve.graph_retriever import reset_rows
    from hipporag2.retrieve.seeds import reset_vector

    rng = np.random.default_rng(2)
    n_phr, n_pass = 30, 12
    phrase = [[(3, 0.5), (7, 0.25), (3, 0.125)], [], [(0, float("nan")), (29, -1.0)]]
    passage = [rng.random(n_pass).astype(np.float32), None, np.r_[np.zeros(6), np.full(6, 0.5)]]
    passage[0][4] = 0.0
    passage[0][5] = np.nan
    R = reset_rows(phrase, passage, n_phr, n_phr + n_pass)
    assert R.has_canonical_format
    for i in range(3):
        want = reset_vector(n_phr, phrase[i], passage[i])
        if passage[i] is None:
            want = np.r_[want, np.zeros(n_pass)]
        np.testing.assert_array_equal(R.toarray()[i], want)


@pytest.mark.parametrize("rows", [300, 700, 1024, 5000])
def test_widened_panels_are_panels_of_more_rows(rows):
    """`widened(panels, 2)` is exactly `Panels.build` with twice the rows (what the
    float32 steps walk), made from the saved panels without S."""
    import scipy.sparse as sp

    from hipporag2.retrieve.ppr_panels import Panels, widened

    A = sp.random(3000, 3000, density=0.004, random_state=rows, format="csr")
    S = sp.csr_matrix(A + A.T)
    S.sort_indices()
    got, want = widened(Panels.build(S, rows), 2), Panels.build(S, 2 * rows)
    for a, b in ((got.indptr, want.indptr), (got.indices, want.indices), (got.data, want.data)):
        np.testing.assert_array_equal(a, b)
