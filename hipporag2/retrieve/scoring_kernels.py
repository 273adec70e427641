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


@njit(nogil=True, cache=True, boundscheck=False)
def stream_top_k_rows(S, col0, k, lo, hi, top, filled, buf_idx, buf_val, count, dropped, state, r0, r1):
    """One chunk of raw scores (S[r, :] = columns col0.. of row r) folded into each row's
    running state, for rows r0..r1 (`scoring.min_max_top_k_stream`).

    Per row: its min and max so far (lo, hi), its k largest raw values (top, descending,
    `filled` of them), a buffer of every entry whose raw value reached the current k-th
    largest when it was seen (buf_idx/buf_val, column order, `count` of them), and the
    largest raw value left out of the buffer (dropped; -inf while none). state[r]: 0 ok,
    1 NaN seen, 2 buffer overflow (more entries tied at the top than it holds): the
    caller computes such rows the plain way."""
    m = S.shape[1]
    cap = buf_idx.shape[1]
    for r in range(r0, r1):
        if state[r] != 0:
            continue
        x = S[r]
        a = lo[r]
        b = hi[r]
        f = filled[r]
        c = count[r]
        d = dropped[r]
        t_row = top[r]
        thr = t_row[k - 1] if f >= k else -np.inf
        for j in range(m):
            v = x[j]
            if v != v:
                state[r] = 1
                break
            if v < a:
                a = v
            if v > b:
                b = v
            if v < thr:
                if v > d:
                    d = v
                continue
            f = _insert_top(t_row, f, k, v)  # the k largest raw values, as min_max_top_k_rows keeps them
            if f >= k:
                thr = t_row[k - 1]
            if c == cap:  # keep only what still reaches the k-th largest
                w = 0
                for i in range(c):
                    if buf_val[r, i] >= thr:
                        buf_idx[r, w] = buf_idx[r, i]
                        buf_val[r, w] = buf_val[r, i]
                        w += 1
                    elif buf_val[r, i] > d:
                        d = buf_val[r, i]
                c = w
                if c == cap:
                    state[r] = 2
                    break
            buf_idx[r, c] = col0 + j
            buf_val[r, c] = v
            c += 1
        lo[r] = a
        hi[r] = b
        filled[r] = f
        count[r] = c
        dropped[r] = d


@njit(nogil=True, cache=True, boundscheck=False)
def stream_top_k_finish(n, k, lo, hi, top, buf_idx, buf_val, count, dropped, state, idx, val):
    """Each row's `min_max_top_k` from its streamed state (`stream_top_k_rows`), as
    `min_max_top_k_rows` ranks a whole row: min-max is monotone, so every entry that can
    reach the top k normalises to at least what the k-th largest raw value does; those
    reached the k-th largest raw value when seen, or were left out below it. A left-out
    value that normalises like the k-th (float32 rounding can make distinct values
    equal) would be a candidate the buffer lacks: state 3, the caller's plain way."""
    for r in range(lo.shape[0]):
        if state[r] != 0:
            continue
        a = lo[r]
        b = hi[r]
        if b == a:
            _all_ones(idx, val, r, n, k)
            continue
        span = b - a
        kth = (top[r, k - 1] - a) / span
        d = dropped[r]
        if d > -np.inf and (d - a) / span >= kth:
            state[r] = 3
            continue
        c = count[r]
        cand = np.empty(c, dtype=np.int64)
        cval = np.empty(c, dtype=buf_val.dtype)
        w = 0
        for i in range(c):
            v = (buf_val[r, i] - a) / span  # in the input's dtype, as min_max_rows computes it
            if v >= kth:
                cand[w] = buf_idx[r, i]
                cval[w] = v
                w += 1
        _write_ranked(cand, cval, w, k, idx, val, r)
