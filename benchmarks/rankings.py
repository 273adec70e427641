"""Comparing two solvers' rankings (tests/test_ppr.py, benchmarks/bench_ppr.py)."""
from __future__ import annotations

import numpy as np


def rank_desc_stable(scores: np.ndarray) -> np.ndarray:
    """The retriever's order: descending score, equal scores to the HIGHER index first."""
    return np.argsort(np.asarray(scores), kind="stable")[::-1]


def rankings_agree(ref: np.ndarray, ours: np.ndarray, k: int | None = None, rtol: float = 1e-12,
                   atol: float = 0.0) -> bool:
    """Whether `ours` ranks like `ref` (top k), counting near-ties in `ref` as ties.

    Two solvers that agree to ~1e-14 can still order two scores that are equal in exact
    arithmetic differently (round-off decides their last bit). So ties are defined on
    the reference's scores: sorted descending, neighbours less than rtol * max|ref| (or
    `atol`, a solver's L1 error bound) apart are chained into one tie group, and the
    rankings agree when every rank position holds a node from the same tie group in
    both. Without near-ties in ref this is plain equality of the two orders.
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
