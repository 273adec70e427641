"""The compiled pass behind `scoring.min_max_top_k` for large score blocks.

Kept apart from `scoring` so that importing the scoring rules does not import numba
(seconds per process on the loaded shared machine): small blocks never need it.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True, boundscheck=False)
def _insert_top(top, filled, k, v):
    """Put v among the k largest raw values so far (top, descending, `filled` of them)
    when it belongs there; returns the new count."""
    if filled < k or v > top[k - 1]:
        t = filled if filled < k else k - 1
        while t > 0 and top[t - 1] < v:
            top[t] = top[t - 1]
            t -= 1
        top[t] = v
        if filled < k:
            filled += 1
    return filled


@njit(nogil=True, cache=True, boundscheck=False)
def _all_ones(idx, val, r, n, k):
    """A row whose values are all equal: min_max gives ones; ties go to the higher index."""
    for t in range(k):
        idx[r, t] = n - 1 - t
        val[r, t] = 1.0


@njit(nogil=True, cache=True, boundscheck=False)
def _write_ranked(cand, cval, c, k, idx, val, r):
    """Row r's top k from its c candidates (column order) and their normalised values."""
    order = np.argsort(cval[:c], kind="mergesort")  # stable, ascending; read backwards
    for t in range(k):
        o = order[c - 1 - t]
        idx[r, t] = cand[o]
        val[r, t] = cval[o]


@njit(nogil=True, cache=True, boundscheck=False)
def min_max_top_k_rows(X, k, idx, val, bad, r0, r1):
    """`scoring.min_max_top_k` for rows r0..r1 of X (bad[r] = True for a row with NaN, left to the caller)."""
    n = X.shape[1]
    for r in range(r0, r1):
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
            filled = _insert_top(top, filled, k, v)
        if nan:
            bad[r] = True
            continue
        if hi == lo:
            _all_ones(idx, val, r, n, k)
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
        _write_ranked(cand, cval, c, k, idx, val, r)
