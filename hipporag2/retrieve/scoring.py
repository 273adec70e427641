"""Small numeric rules that every retriever shares (SPEC §3).

`rank_desc` with a cut and `min_max_top_k` give exactly what sorting everything would
(the same indices, ties and scores), by partial selection: a query needs the top 5 of
~147k fact scores and the top 200 of ~12k passage scores, not a full sort of either
(17 ms per query for the facts at MuSiQue size).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


def min_max(x: np.ndarray) -> np.ndarray:
    """(x - min) / (max - min); all ones when max == min, as the reference does.

    The input's float dtype is kept (the reference computes in float32), because a
    float64 detour can reorder near-ties.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if x.size == 0:
        return x
    lo, hi = x.min(), x.max()
    if hi == lo:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


def min_max_rows(x: np.ndarray) -> np.ndarray:
    """`min_max` of every row, dtype kept."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    lo = x.min(axis=1, keepdims=True)
    span = x.max(axis=1, keepdims=True) - lo
    out = np.ones_like(x)
    ok = span[:, 0] > 0
    out[ok] = (x[ok] - lo[ok]) / span[ok]
    return out


def rank_desc(scores: np.ndarray, k: int | None = None) -> np.ndarray:
    """Indices by descending score; equal scores go to the HIGHER index first.

    This is what the reference's `np.argsort(x)[::-1]` does for ties, made
    deterministic with a stable sort.
    """
    x = np.asarray(scores)
    if k is not None and x.ndim == 1 and 0 <= k < x.size and not (x.dtype.kind == "f" and np.isnan(x).any()):
        return _top_k_desc(x, k)
    order = np.argsort(x, kind="stable")[::-1]
    return order if k is None else order[:k]


def _top_k_desc(x: np.ndarray, k: int) -> np.ndarray:
    """rank_desc(x)[:k] by partial selection (x without NaN): everything at or above the
    k-th largest value, in the full sort's order (stable, reversed), cut at k."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(x, x.size - k)[x.size - k]
    cand = np.flatnonzero(x >= kth)
    return cand[np.argsort(x[cand], kind="stable")[::-1][:k]]


def min_max_top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row of x (q, n): `rank_desc(min_max(row), k)` and min_max(row) there.

    The same indices, ties and float32 scores as normalising every row and sorting it,
    without either: one pass finds the row's min, max and its k largest raw values;
    min-max is monotone, so every entry that can reach the top k normalises to at
    least what the k-th largest raw value does, and only those are ranked. Rows with
    NaN take the straightforward path. Returns (q, k') int64 indices and float32 (or
    the input's float dtype) scores, k' = min(k, n).
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    x = np.ascontiguousarray(np.atleast_2d(x))
    q, n = x.shape
    k = max(0, min(int(k), n))
    idx = np.empty((q, k), dtype=np.int64)
    val = np.empty((q, k), dtype=x.dtype)
    if q == 0 or k == 0:
        return idx, val
    bad = np.zeros(q, dtype=np.bool_)
    _min_max_top_k(x, k, idx, val, bad)
    for r in np.flatnonzero(bad):  # NaN somewhere in the row: as min_max_rows does it (all ones)
        norm = min_max_rows(x[r : r + 1])[0]
        idx[r] = rank_desc(norm, k)
        val[r] = norm[idx[r]]
    return idx, val


@njit(parallel=True, cache=True, boundscheck=False)
def _min_max_top_k(X, k, idx, val, bad):
    q, n = X.shape
    for r in prange(q):
        x = X[r]
        lo = x[0]
        hi = x[0]
        top = np.empty(k, dtype=X.dtype)  # the k largest raw values, descending
        filled = 0
        nan = False
        for j in range(n):
            v = x[j]
            if v != v:
                nan = True
                break
            if v < lo:
                lo = v
            if v > hi:
                hi = v
            if filled < k or v > top[k - 1]:
                t = filled if filled < k else k - 1
                while t > 0 and top[t - 1] < v:
                    top[t] = top[t - 1]
                    t -= 1
                top[t] = v
                if filled < k:
                    filled += 1
        if nan:
            bad[r] = True
            continue
        if hi == lo:  # min_max gives all ones; ties go to the higher index
            for t in range(k):
                idx[r, t] = n - 1 - t
                val[r, t] = 1.0
            continue
        span = hi - lo
        kth = (top[k - 1] - lo) / span
        c = 0  # how many normalise to at least the k-th: k, or more with ties
        for j in range(n):
            if (x[j] - lo) / span >= kth:  # in the input's dtype, as min_max_rows computes it
                c += 1
        cand = np.empty(c, dtype=np.int64)
        cval = np.empty(c, dtype=X.dtype)
        c = 0
        for j in range(n):
            v = (x[j] - lo) / span
            if v >= kth:
                cand[c] = j
                cval[c] = v
                c += 1
        order = np.argsort(cval[:c], kind="mergesort")  # stable, ascending; read backwards
        for t in range(k):
            o = order[c - 1 - t]
            idx[r, t] = cand[o]
            val[r, t] = cval[o]
