"""Synonym edges: thresholded nearest phrases by cosine (SPEC §2.8).

A search over every phrase (an index build) computes each pair's float32 similarity
once: E E^T is symmetric, so only tiles of its upper triangle are multiplied (BLAS,
into one reused tile of `block_size` rows), a parallel compiled pass picks the
candidates, and each candidate, rescored canonically (below), is offered to the lists
of BOTH its ends; a list keeps only as many neighbours as the reference's walk can
reach (`list_length`), so memory is bounded by the tile and phrases x that length
(`knn_kernels`). A search restricted to some query rows (an incremental insert) runs
those rows against all phrases in blocks (`knn_candidates`). Both give the same
pairs and bit-identical scores (tests/test_synonym_knn.py).

Scores are canonical: a float32 product selects the candidates (with a margin far
above float32 rounding), then each candidate's cosine is recomputed as a float64 dot
product of its two rows and rounded to float32. A float32 matrix product rounds an
entry differently depending on the shape of the block it sits in (measured: ~5% of
entries differ in the last bit between two block shapes), which would make the edges
depend on how the phrases happen to be batched; the canonical score depends only on
the two vectors. That is what lets an incremental insert (`hipporag2.graph.update`)
produce exactly the graph of a from-scratch build.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

from hipporag2.text import alnum_len

# columns of one similarity tile: with 1024 rows, 32 MB of float32 (BLAS ran at 48 / 52
# / 53 GFLOPS for 1024 x 4096 / 1024 x 8192 / 2048 x 4096 tiles here)
TILE_COLUMNS = 8192
# candidates of one tile row kept in its slots by the parallel scan (more: that row is rescanned)
SLOTS = 32


class SynonymPairs(NamedTuple):
    """Accepted synonym pairs, in query order: query, neighbour, float32 cosine."""

    query: np.ndarray
    neighbour: np.ndarray
    score: np.ndarray


def list_length(top_k: int, n: int, max_neighbours: int, n_skipped: int) -> int:
    """How many best neighbours per phrase can matter: the walk looks at no more than
    the top_k nearest, and within them it reaches at most max_neighbours accepted plus
    itself plus the skipped (empty) phrases."""
    return max(1, min(top_k, n, max_neighbours + 1 + n_skipped))

# float32 products of unit vectors are within ~1e-6 of the exact cosine for any
# embedding width in use; candidates this far below the threshold are rescored too.
SELECT_MARGIN = 1e-4
_RESCORE_CHUNK = 8192


def pair_scores(emb: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Canonical cosine of each pair (rows[i], cols[i]): float64 dot, rounded to float32."""
    out = np.empty(len(rows), dtype=np.float32)
    for s in range(0, len(rows), _RESCORE_CHUNK):
        a = np.asarray(emb[rows[s : s + _RESCORE_CHUNK]], dtype=np.float64)
        b = np.asarray(emb[cols[s : s + _RESCORE_CHUNK]], dtype=np.float64)
        out[s : s + _RESCORE_CHUNK] = np.einsum("ij,ij->i", a, b)
    return out


def query_mask(phrases: Sequence[str]) -> np.ndarray:
    """Which phrases are synonym queries: more than 2 alphanumeric characters."""
    return np.array([alnum_len(p) > 2 for p in phrases], dtype=bool)


def knn_candidates(
    embeddings: np.ndarray,
    query_rows: np.ndarray,
    threshold: float,
    columns: Optional[np.ndarray] = None,
    block_size: int = 1024,
    progress: bool = False,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (query, column, canonical score) with score >= threshold, sorted by query,
    then score descending, then column ascending. `columns` (default: all rows)
    restricts the neighbours searched; indices are rows of `embeddings` throughout."""
    emb = np.ascontiguousarray(embeddings, dtype=np.float32)
    query_rows = np.asarray(query_rows, dtype=np.int64)
    cols = np.arange(emb.shape[0], dtype=np.int64) if columns is None else np.asarray(columns, dtype=np.int64)
    target = emb if columns is None else emb[cols]
    rs, cs, ss = [], [], []
    starts = range(0, len(query_rows), block_size)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="synonym KNN", unit="block")
    select = np.float32(threshold - SELECT_MARGIN)
    for start in starts:
        rows = query_rows[start : start + block_size]
        if rows.size == 0 or cols.size == 0:
            continue
        sims = emb[rows] @ target.T
        r_loc, c_loc = np.nonzero(sims >= select)
        if r_loc.size == 0:
            continue
        r, c = rows[r_loc], cols[c_loc]
        s = pair_scores(emb, r, c)
        keep = s >= np.float32(threshold)
        rs.append(r[keep])
        cs.append(c[keep])
        ss.append(s[keep])
    if not rs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), np.zeros(0, dtype=np.float32)
    r, c, s = np.concatenate(rs), np.concatenate(cs), np.concatenate(ss)
    order = np.lexsort((c, -s, r))
    return r[order], c[order], s[order]


def cap_per_query(q: np.ndarray, c: np.ndarray, s: np.ndarray, empty: np.ndarray, top_k: int,
                  max_neighbours: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference's walk over each query's sorted candidates: the first `top_k`
    candidates (itself included) are looked at, itself and the empty phrase skipped,
    at most `max_neighbours` accepted. Input sorted as `knn_candidates` returns it."""
    if q.size == 0:
        return q, c, s
    starts = np.r_[0, np.nonzero(np.diff(q))[0] + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, q.size]))
    position = np.arange(q.size) - group_start
    skip = (c == q) | empty[c]
    in_window = position < top_k
    ok = in_window & ~skip
    # accepted count so far within the query = cumulative count of ok in the group
    cum = np.cumsum(ok)
    before = cum - ok  # accepted strictly before this candidate (global)
    accepted_before = before - (cum[group_start] - ok[group_start])
    keep = ok & (accepted_before < max_neighbours)
    return q[keep], c[keep], s[keep]


def tiled_synonym_arrays(
    phrases: Sequence[str],
    embeddings: np.ndarray,
    threshold: float = 0.8,
    top_k: int = 2047,
    max_neighbours: int = 101,
    block_size: int = 1024,
    progress: bool = False,
) -> SynonymPairs:
    """`synonym_arrays` over every phrase as query, each pair computed once (module docstring)."""
    # numba, imported by a synonym search only: opening an index for retrieval must not pay
    # its start-up (importing it alone took 0.3 s on the quiet 2-core machine)
    from hipporag2.graph.knn_kernels import fill_tile, offer_hits, scan_tile, walk_lists

    emb = np.ascontiguousarray(embeddings, dtype=np.float32)
    n = emb.shape[0]
    is_query = query_mask(phrases)
    skip = np.array([p == "" for p in phrases], dtype=np.bool_)
    L = list_length(top_k, n, max_neighbours, int(skip.sum()))
    count = np.zeros(n, dtype=np.int64)
    nbr = np.zeros((n, L), dtype=np.int64)
    score = np.zeros((n, L), dtype=np.float32)
    select = np.float32(threshold - SELECT_MARGIN)
    thr = np.float32(threshold)
    T = max(1, int(block_size))
    C = max(T, TILE_COLUMNS)
    tile = np.empty(T * C, dtype=np.float32)
    counts = np.empty(T, dtype=np.int64)
    slot_j = np.empty((T, SLOTS), dtype=np.int64)
    starts = range(0, n, T)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="synonym KNN", unit="block")
    for i0 in starts:
        i1 = min(i0 + T, n)
        m = i1 - i0
        for j0 in range(i0, n, C):
            j1 = min(j0 + C, n)
            S = tile[: m * (j1 - j0)].reshape(m, j1 - j0)
            np.matmul(emb[i0:i1], emb[j0:j1].T, out=S)
            scan_tile(S, i0, j0, select, counts[:m], slot_j[:m])
            total = int(counts[:m].sum())
            if total == 0:
                continue
            hit_i = np.empty(total, dtype=np.int64)
            hit_j = np.empty(total, dtype=np.int64)
            fill_tile(S, i0, j0, select, counts[:m], slot_j[:m], hit_i, hit_j)
            canon = pair_scores(emb, hit_i, hit_j)
            keep = canon >= thr
            offer_hits(hit_i[keep], hit_j[keep], canon[keep], is_query, count, nbr, score)
    cap = int(np.minimum(count, max_neighbours).sum())
    out_q = np.empty(cap, dtype=np.int64)
    out_c = np.empty(cap, dtype=np.int64)
    out_s = np.empty(cap, dtype=np.float32)
    k = walk_lists(count, nbr, score, skip, max_neighbours, out_q, out_c, out_s)
    return SynonymPairs(out_q[:k], out_c[:k], out_s[:k])


def synonym_arrays(
    phrases: Sequence[str],
    embeddings: np.ndarray,
    threshold: float = 0.8,
    top_k: int = 2047,
    max_neighbours: int = 101,
    block_size: int = 1024,
    progress: bool = False,
    query_rows: Optional[np.ndarray] = None,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query, neighbour, float32 cosine) of every accepted synonym, in query order.

    Rules of the reference: only phrases with more than 2 alphanumeric characters are
    queries (others can still be neighbours); neighbours come best first among the
    `top_k` nearest (itself included); the walk stops at the first score below the
    threshold or once `max_neighbours` were accepted; itself and the empty phrase are
    skipped. Every query is processed, so a mutual pair yields two entries. Ties
    between equal scores go to the lower neighbour index. `query_rows` restricts the
    queries (default: every phrase); each query's list is the same as in a search over
    all queries."""
    n = len(phrases)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SynonymPairs(empty, empty.copy(), np.zeros(0, dtype=np.float32))
    if query_rows is None:
        return tiled_synonym_arrays(phrases, embeddings, threshold, top_k, max_neighbours, block_size, progress)
    chosen = np.zeros(n, dtype=bool)
    chosen[np.asarray(query_rows, dtype=np.int64)] = True
    is_query = query_mask(phrases) & chosen
    empty_phrase = np.array([p == "" for p in phrases], dtype=bool)
    q, c, s = knn_candidates(embeddings, np.nonzero(is_query)[0], threshold, block_size=block_size, progress=progress)
    return SynonymPairs(*cap_per_query(q, c, s, empty_phrase, min(top_k, n), max_neighbours))
