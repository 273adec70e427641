"""Compiled loops behind the synonym KNN (`graph/synonyms.py`).

The similarity of a pair is computed once, in a tile of the upper triangle of
E E^T (BLAS, float32, into one reused buffer); these loops then (1) find the tile's
entries at or above the threshold, in parallel over the tile's rows, without a
boolean temporary the size of the tile, and (2) offer each hit to BOTH ends' lists
of best neighbours. A list keeps only as many neighbours as the reference's walk
can ever reach (see `synonyms.list_length`), so memory is bounded by
phrases x that length, however many pairs pass the threshold.

Order inside a list: score descending, then neighbour index ascending, the order
the reference's walk sees (and the one the former lexsort gave).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True, boundscheck=False)
def scan_tile(S, i0, j0, thr, counts, slot_j):
    """One parallel pass over a tile of the upper triangle (global column >= global row,
    the diagonal included): counts[a] = the entries >= thr in row a, the first
    slot_j.shape[1] of their columns stored in row a's slots (ascending). A row with
    more is read again by `fill_tile` (rare: that many near-duplicates in one tile)."""
    T, C = S.shape
    K = slot_j.shape[1]
    for a in prange(T):
        start = max(0, i0 + a - j0)
        c = 0
        for b in range(start, C):
            if S[a, b] >= thr:
                if c < K:
                    slot_j[a, c] = j0 + b
                c += 1
        counts[a] = c


@njit(cache=True, boundscheck=False)
def fill_tile(S, i0, j0, thr, counts, slot_j, hit_i, hit_j):
    """The candidates `scan_tile` counted, as (row, column) pairs row by row, columns ascending."""
    T, C = S.shape
    K = slot_j.shape[1]
    p = 0
    for a in range(T):
        i = i0 + a
        if counts[a] <= K:
            for t in range(counts[a]):
                hit_i[p] = i
                hit_j[p] = slot_j[a, t]
                p += 1
        else:
            for b in range(max(0, i - j0), C):
                if S[a, b] >= thr:
                    hit_i[p] = i
                    hit_j[p] = j0 + b
                    p += 1


@njit(cache=True, boundscheck=False, inline="always")
def _offer(q, c, s, count, nbr, score):
    """Put neighbour c (score s) into q's list if it is among the list's best."""
    L = nbr.shape[1]
    n = count[q]
    pos = n
    # walk back past every entry that (c, s) goes before: higher score, or equal score and lower index
    while pos > 0:
        ps = score[q, pos - 1]
        if s > ps or (s == ps and c < nbr[q, pos - 1]):
            pos -= 1
        else:
            break
    if pos >= L:
        return
    last = n if n < L else L - 1
    for t in range(last, pos, -1):
        nbr[q, t] = nbr[q, t - 1]
        score[q, t] = score[q, t - 1]
    nbr[q, pos] = c
    score[q, pos] = s
    if n < L:
        count[q] = n + 1


@njit(cache=True, boundscheck=False, inline="always")
def _offer_pair(i, j, s, is_query, count, nbr, score):
    if is_query[i]:
        _offer(i, j, s, count, nbr, score)
    if j != i and is_query[j]:
        _offer(j, i, s, count, nbr, score)


@njit(cache=True, boundscheck=False)
def offer_hits(hit_i, hit_j, hit_s, is_query, count, nbr, score):
    """Each hit (i, j, s) of the upper triangle goes to i's list and to j's (i != j), for query rows."""
    for h in range(hit_i.shape[0]):
        _offer_pair(hit_i[h], hit_j[h], hit_s[h], is_query, count, nbr, score)


@njit(cache=True, boundscheck=False)
def walk_lists(count, nbr, score, skip, max_neighbours, out_q, out_c, out_s):
    """The reference's walk over each list: skip itself and `skip`ped phrases, stop after
    `max_neighbours`. Writes (query, neighbour, score) rows in query order; returns how many."""
    n = count.shape[0]
    k = 0
    for q in range(n):
        accepted = 0
        for t in range(count[q]):
            if accepted >= max_neighbours:
                break
            c = nbr[q, t]
            if c == q or skip[c]:
                continue
            out_q[k] = q
            out_c[k] = c
            out_s[k] = score[q, t]
            k += 1
            accepted += 1
    return k
