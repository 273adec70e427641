"""Small numeric rules that every retriever shares (SPEC §3).

`rank_desc` with a cut and `min_max_top_k` give exactly what sorting everything would
(the same indices, ties and scores), by partial selection.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# rows x columns below which `min_max_top_k` uses numpy (same answer), sparing a small
# run numba's start-up; from there on, the compiled pass in two threads
PARALLEL_MIN = 1 << 21
# bytes of raw scores one piece of `min_max_top_k_product` may fill
SCORE_BYTES = 32 << 20
# bytes of embedding rows one of its products reads
CHUNK_BYTES = 32 << 20


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
    return _min_max_rows_into(x, np.empty_like(x))


def _min_max_rows_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`min_max_rows(x)` written into `out` (which may be x itself): the same float
    operations per entry, (x - lo) / span in x's dtype and ones where span is not > 0
    (a constant row, or NaN), without temporaries of x's size."""
    lo = x.min(axis=1, keepdims=True)
    span = x.max(axis=1, keepdims=True) - lo
    ok = span[:, 0] > 0
    with np.errstate(divide="ignore", invalid="ignore"):  # rows not ok are overwritten below; inf - inf is NaN
        np.subtract(x, lo, out=out)
        np.divide(out, span, out=out)
    if not ok.all():
        out[~ok] = 1
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


def min_max_top_k(x: np.ndarray, k: int, overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """For each row of x (q, n): `rank_desc(min_max(row), k)` and min_max(row) there.

    The same indices, ties and float32 scores as normalising every row and sorting it,
    without either: one pass finds the row's min, max and its k largest raw values;
    min-max is monotone, so every entry that can reach the top k normalises to at
    least what the k-th largest raw value does, and only those are ranked. Rows with
    NaN take the straightforward path. Returns (q, k') int64 indices and float32 (or
    the input's float dtype) scores, k' = min(k, n). `overwrite`: x is the caller's
    scratch (a product made for this call), which a small block is normalised in.
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
    if q * n < PARALLEL_MIN:
        norm = _min_max_rows_into(x, x if overwrite else np.empty_like(x))
        for r in range(q):
            idx[r] = rank_desc(norm[r], k)
            val[r] = norm[r][idx[r]]
        return idx, val
    from hipporag2.retrieve.scoring_kernels import min_max_top_k_rows as _min_max_top_k

    bad = np.zeros(q, dtype=np.bool_)
    # rows are independent: threads over row ranges (the kernel releases the GIL) give
    # the same answer as one pass, and need no numba threading layer, whose start-up
    # (OpenMP) was seconds per process on the loaded shared machine
    threads = min(q, os.cpu_count() or 1, 2)
    if threads > 1:
        cuts = np.linspace(0, q, threads + 1).astype(int)
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda a: _min_max_top_k(x, k, idx, val, bad, int(cuts[a]), int(cuts[a + 1])), range(threads)))
    else:
        _min_max_top_k(x, k, idx, val, bad, 0, q)
    for r in np.flatnonzero(bad):  # NaN somewhere in the row: as min_max_rows does it (all ones)
        norm = min_max_rows(x[r : r + 1])[0]
        idx[r] = rank_desc(norm, k)
        val[r] = norm[idx[r]]
    return idx, val


def score_piece_rows(n_columns: int, itemsize: int = 4, budget: int = SCORE_BYTES) -> int:
    """Query rows per product so that its scores fill at most `budget` bytes (16 at least)."""
    return max(16, budget // max(1, n_columns * itemsize))


def min_max_top_k_product(q: np.ndarray, emb: np.ndarray, k: int, rows: int | None = None,
                          chunk_bytes: int = CHUNK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """`min_max_top_k` of q @ emb.T, in bounded memory when the block is large.

    When a block's scores fit `score_piece_rows`' budget this is one product, q @ emb.T.
    Otherwise the queries go `rows` at a time and each piece's scores are made chunk by
    chunk of `chunk_bytes` of embedding rows into one piece's score rows, so at most
    `rows` rows of scores are held at a time. A float32 product rounds an entry
    differently with the shape of the call, so the piecewise scores are those of these
    pieces and chunks: deterministic for a given order of queries, within float32
    rounding of one product's.
    """
    q = np.atleast_2d(np.asarray(q))
    E = emb
    n, n_q = E.shape[0], q.shape[0]
    itemsize = np.result_type(q.dtype, E.dtype).itemsize
    rows = score_piece_rows(n, itemsize) if rows is None else max(1, int(rows))
    if n_q <= rows:
        return min_max_top_k(q @ np.asarray(E).T, k, overwrite=True)
    return min_max_top_k_pieces(q, E, k, rows, chunk_bytes)


def _chunk_rows(E, chunk_bytes: int) -> int:
    return max(1, chunk_bytes // max(1, E.shape[1] * E.dtype.itemsize))


def _piece_scores(piece: np.ndarray, E, step: int, out: np.ndarray) -> np.ndarray:
    """piece @ E.T, chunk by chunk of `step` embedding rows, into `out` (the products
    whose rounding the piecewise scores are defined by)."""
    n = E.shape[0]
    for a in range(0, n, step):
        b = min(n, a + step)
        np.matmul(piece, np.asarray(E[a:b]).T, out=out[:, a:b])
    return out


def min_max_top_k_pieces(q: np.ndarray, E: np.ndarray, k: int, rows: int, chunk_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Each piece's whole score rows, then `min_max_top_k` of them (the plain way)."""
    n, n_q = E.shape[0], q.shape[0]
    step = _chunk_rows(E, chunk_bytes)
    scores = np.empty((rows, n), dtype=np.result_type(q.dtype, E.dtype))
    parts = []
    for s in range(0, n_q, rows):
        piece = q[s : s + rows]
        parts.append(min_max_top_k(_piece_scores(piece, E, step, scores[: len(piece)]), k))
    return np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts])
