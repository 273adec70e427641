"""Fact candidates of a block larger than one product (scoring.min_max_top_k_product in
pieces of rows, each made chunk by chunk of embedding rows) equal normalising and
sorting every score row: the same indices, float32 scores and ties, on designed score
rows (NaN, many raw ties at the top, distinct raw values that normalise alike) and on
random products."""
import numpy as np
import pytest

from hipporag2.retrieve.scoring import min_max_rows, min_max_top_k, min_max_top_k_pieces, min_max_top_k_product, rank_desc


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
        got = min_max_top_k_product(X, E, k, rows, chunk * n * 4)
        for r in range(len(X)):
            want = rank_desc(full[r])[: min(k, n)]
            np.testing.assert_array_equal(got[0][r], want)
            np.testing.assert_array_equal(got[1][r], full[r][want])
    assert same(min_max_top_k(X, k), min_max_top_k_product(X, E, k, 3, 50 * n * 4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_products_equal_one_product(dtype):
    """Small integers make every product exact whatever its shape, so the pieces' answer
    must be one whole product's, bit for bit (ties everywhere, a NaN row, an all-equal row)."""
    rng = np.random.default_rng(7)
    q = rng.integers(-3, 4, size=(70, 16)).astype(dtype)
    E = rng.integers(-3, 4, size=(3000, 16)).astype(dtype)
    E[100:400] = E[5]  # raw ties
    q[3, 0] = np.nan
    q[4] = 0.0  # a row of equal scores
    for rows, chunk_rows in [(7, 100), (32, 512), (1, 3000), (69, 999)]:
        cb = chunk_rows * 16 * np.dtype(dtype).itemsize
        for k in (1, 5, 40):
            want = min_max_top_k(q @ E.T, k)
            assert same(min_max_top_k_product(q, E, k, rows, cb), want)
            assert same(min_max_top_k_pieces(q, E, k, rows, cb), want)
