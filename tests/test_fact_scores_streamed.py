"""Fact candidates of a large block, streamed chunk by chunk (scoring.min_max_top_k_streamed),
equal the plain way's (each piece's whole score rows, then min_max_top_k): the same
indices, float32 scores and ties, on random products and on designed score rows that
reach every fallback (NaN, many raw ties at the top, distinct raw values that
normalise alike)."""
import numpy as np
import pytest

from hipporag2.retrieve.scoring import (min_max_top_k_pieces, min_max_top_k_streamed, min_max_rows, min_max_top_k,
                                        min_max_top_k_product, rank_desc)


def same(a, b):
    return np.array_equal(a[0], b[0]) and a[1].dtype == b[1].dtype and np.array_equal(a[1].view(np.uint8), b[1].view(np.uint8))


def designed_rows(n, rng):
    """Score rows with the awkward cases (the rows of test_seeds_and_scoring's min_max_top_k test, and more)."""
    X = rng.normal(size=(12, n)).astype(np.float32)
    X[1] = 0.25  # all equal: ones, ties to the higher index
    X[2, :100] = X[2].max()  # many tied maxima: more than the buffer holds
    X[3] = rng.integers(0, 4, size=n)  # ties everywhere
    X[4, 7] = np.nan
    X[5] = np.float32(0.5) + np.arange(n, dtype=np.float32) * np.float32(1e-9)
    X[5, 0], X[5, 1] = -1000.0, 1000.0
    # distinct raw values just below the k-th that normalise to the same float32, seen
    # after the k-th (so left out of the buffer)
    X[6] = rng.uniform(-1, 0.4, size=n)
    X[6, 0], X[6, 1] = -1000.0, 1000.0
    X[6, 50:70] = (np.float32(0.5) + np.arange(20, dtype=np.float32) * np.float32(6e-8))[::-1]
    X[7, ::3] = X[7].max()  # raw ties spread over every chunk
    X[8] = -X[8]
    X[9, -1] = 100.0  # the maximum in the last column
    X[10] = np.sort(X[10])  # ascending: every value enters the buffer
    X[11] = np.sort(X[11])[::-1].copy()  # descending
    return X


@pytest.mark.parametrize("k", [1, 5, 17, 600, 800])
def test_designed_rows_equal_normalising_and_sorting_everything(k):
    """With E = identity the products are the rows themselves, exactly."""
    rng = np.random.default_rng(k)
    n = 600
    X = designed_rows(n, rng)
    E = np.eye(n, dtype=np.float32)
    full = min_max_rows(X)
    for rows, chunk in [(1, 64), (5, 600), (4, 37), (12, 1)]:
        got = min_max_top_k_streamed(X, E, k, rows, chunk * n * 4)
        assert same(got, min_max_top_k_pieces(X, E, k, rows, chunk * n * 4))
        for r in range(len(X)):
            want = rank_desc(full[r])[: min(k, n)]
            np.testing.assert_array_equal(got[0][r], want)
            np.testing.assert_array_equal(got[1][r], full[r][want])
    assert same(min_max_top_k(X, k), min_max_top_k_streamed(X, E, k, 3, 50 * n * 4))


def test_every_fallback_is_reached():
    """The designed rows send the streamed state down each of its ways out."""
    from hipporag2.retrieve.scoring_kernels import stream_top_k_finish, stream_top_k_rows

    n, k, cap = 600, 5, 80
    X = designed_rows(n, np.random.default_rng(0))
    m = len(X)
    lo, hi = np.full(m, np.inf, np.float32), np.full(m, -np.inf, np.float32)
    top, filled = np.empty((m, k), np.float32), np.zeros(m, np.int64)
    buf_idx, buf_val, count = np.empty((m, cap), np.int64), np.empty((m, cap), np.float32), np.zeros(m, np.int64)
    dropped, state = np.full(m, -np.inf, np.float32), np.zeros(m, np.int64)
    for a in range(0, n, 64):
        stream_top_k_rows(X[:, a : a + 64], a, k, lo, hi, top, filled, buf_idx, buf_val, count, dropped, state, 0, m)
    idx, val = np.empty((m, k), np.int64), np.empty((m, k), np.float32)
    stream_top_k_finish(n, k, lo, hi, top, buf_idx, buf_val, count, dropped, state, idx, val)
    assert state[4] == 1 and state[2] == 2 and state[6] == 3
    assert state[0] == 0 and state[9] == 0 and state[11] == 0  # (row 1, all equal, overflows the buffer too)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_products_equal_the_plain_way(dtype):
    rng = np.random.default_rng(7)
    q = rng.normal(size=(70, 16)).astype(dtype)
    E = rng.normal(size=(3000, 16)).astype(dtype)
    E[100:400] = E[5]  # raw ties
    E[900] = E[901] * (1 + 1e-7)
    q[3, 0] = np.nan
    q[4] = 0.0  # a row of equal scores
    Et = np.round(E, 1)  # ties after rounding
    for emb in (E, Et):
        for rows, chunk_rows in [(7, 100), (32, 512), (1, 3000), (69, 999)]:
            cb = chunk_rows * 16 * np.dtype(dtype).itemsize
            for k in (1, 5, 40):
                assert same(min_max_top_k_streamed(q, emb, k, rows, cb), min_max_top_k_pieces(q, emb, k, rows, cb))
    # the public entry: large blocks stream, and give the plain way's answer
    assert same(min_max_top_k_product(q, E, 5, rows=10, chunk_bytes=100 * 16 * np.dtype(dtype).itemsize),
                min_max_top_k_pieces(q, E, 5, 10, 100 * 16 * np.dtype(dtype).itemsize))
