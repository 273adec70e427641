"""SPEC §3 numeric rules: min-max, tie order, phrase and passage seeds."""
import numpy as np
import pytest

from hipporag2.retrieve.scoring import min_max, min_max_rows, rank_desc
from hipporag2.retrieve.seeds import (
    passage_seed_vector,
    phrase_weights_from_facts,
    reset_rows,
    seeds_anything,
    weigh_phrases,
)


def test_min_max_edge_cases():
    np.testing.assert_allclose(min_max(np.array([2.0, 4.0, 3.0])), [0, 1, 0.5])
    np.testing.assert_array_equal(min_max(np.array([3.0, 3.0])), [1.0, 1.0])
    assert min_max(np.array([])).size == 0
    rows = min_max_rows(np.array([[1.0, 1.0], [0.0, 2.0]], dtype=np.float32))
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, [[1, 1], [0, 1]])


def test_rank_desc_ties_go_to_higher_index():
    assert rank_desc(np.array([0.5, 0.9, 0.5, 0.9])).tolist() == [3, 1, 2, 0]
    assert rank_desc(np.array([1.0, 2.0, 3.0]), 2).tolist() == [2, 1]


PHRASES = {"alice": 0, "bob": 1, "carol": 2, "dave": 3}


def test_phrase_seed_is_mean_of_specificity_weighted_fact_scores():
    facts = [("alice", "knows", "bob"), ("alice", "met", "carol")]
    passages_per_phrase = [2, 1, 4, 1]
    seeds = dict(phrase_weights_from_facts(facts, [1.0, 0.5], PHRASES, passages_per_phrase))
    assert seeds[0] == pytest.approx((1.0 / 2 + 0.5 / 2) / 2)
    assert seeds[1] == pytest.approx(1.0)
    assert seeds[2] == pytest.approx(0.5 / 4)
    plain = dict(phrase_weights_from_facts(facts, [1.0, 0.5], PHRASES, passages_per_phrase, node_specificity=False))
    assert plain[0] == pytest.approx(0.75) and plain[2] == pytest.approx(0.5)


def test_phrase_not_a_node_is_skipped_and_zero_passage_count_not_divided():
    seeds = dict(phrase_weights_from_facts([("ghost", "r", "dave")], [0.8], PHRASES, [1, 1, 1, 0]))
    assert seeds == {3: pytest.approx(0.8)}


def test_top_k_cut_keeps_largest_and_breaks_ties_by_first_appearance():
    facts = [("alice", "r", "bob"), ("carol", "r", "dave")]
    seeds = phrase_weights_from_facts(facts, [1.0, 1.0], PHRASES, [1, 1, 1, 1])[:3]
    assert [i for i, _ in seeds] == [0, 1, 2]
    seeds = phrase_weights_from_facts(facts, [0.2, 1.0], PHRASES, [1, 1, 1, 1])[:2]
    assert [i for i, _ in seeds] == [2, 3]


def test_uniform_seeds_of_hipporag1():
    # each linked phrase gets 1 divided by its passage count, once however often it is linked
    assert weigh_phrases([0, 2, 0], [0.9, 0.3, 0.1], [2, 1, 4], uniform=True) == [(0, 0.5), (2, 0.25)]


def test_passage_seeds_weakest_gets_zero_and_top_k_variant():
    dense = min_max(np.array([0.2, 0.8, 0.5]))
    np.testing.assert_allclose(passage_seed_vector(dense, 0.05), [0.0, 0.05, 0.025])
    np.testing.assert_allclose(passage_seed_vector(dense, 0.05, top_k=1), [0.0, 0.05, 0.0])
    reset = reset_rows([[(1, 0.3)]], [passage_seed_vector(dense, 0.05)], 2, 5).toarray()[0]
    np.testing.assert_allclose(reset, [0, 0.3, 0, 0.05, 0.025])


def test_seeds_anything_is_a_positive_entry_of_the_reset():
    """The one test of whether a query seeds the graph (retriever, sweep and explain ask it):
    NaN, zero and negative weights do not count, and a phrase seeded twice counts by its last weight."""
    none = np.zeros(3)
    assert seeds_anything([(1, 0.3)], None) and seeds_anything([], np.array([0.0, 0.1, 0.0]))
    assert not seeds_anything([], None) and not seeds_anything([(0, 0.0), (1, -1.0), (2, np.nan)], none)
    assert not seeds_anything([], np.array([np.nan, -0.1, 0.0]))
    assert not seeds_anything([(1, 0.3), (1, 0.0)], none) and seeds_anything([(1, 0.0), (1, 0.3)], none)
    for seeds, ps in [([(1, 0.3)], none), ([(0, -1.0)], np.array([0.0, 0.2, np.nan])), ([(2, np.nan)], none)]:
        row = reset_rows([seeds], [ps], 3, 6).toarray()[0]
        assert seeds_anything(seeds, ps) == bool(np.any(row > 0))


def _full_sort_top(row, k):
    return np.argsort(np.asarray(row), kind="stable")[::-1][:k]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_partial_selection_equals_the_full_sort_ties_included(dtype):
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=1000), rng.integers(0, 5, size=1000), np.zeros(50), rng.integers(0, 3, size=7),
            np.array([1.0, np.nan, 3.0, 3.0]), np.array([-0.0, 0.0, 0.0, -0.0])]
    for row in rows:
        row = np.asarray(row, dtype=dtype)
        for k in [0, 1, 5, 200, len(row) - 1, len(row), len(row) + 3]:
            np.testing.assert_array_equal(rank_desc(row, k), _full_sort_top(row, k))


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_min_max_top_k_equals_normalising_and_sorting_everything(compiled, monkeypatch):
    """Both ways min_max_top_k works (numpy below scoring.PARALLEL_MIN entries, the compiled
    pass on two threads above) give what normalising and sorting everything gives."""
    from hipporag2.retrieve import scoring
    from hipporag2.retrieve.scoring import min_max_top_k

    monkeypatch.setattr(scoring, "PARALLEL_MIN", 0 if compiled else 10**9)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3000)).astype(np.float32)
    X[1] = 0.25  # all equal: min-max gives ones, ties to the higher index
    X[2, :100] = X[2].max()  # many tied maxima
    X[3] = rng.integers(0, 4, size=3000)  # ties everywhere
    X[4, 7] = np.nan  # the straightforward path
    # raw values distinct but equal once normalised in float32 (rounding of (x - lo) / span)
    X[5] = np.float32(0.5) + np.arange(3000, dtype=np.float32) * np.float32(1e-9)
    X[5, 0], X[5, 1] = -1000.0, 1000.0
    for k in [1, 5, 17, 3000, 4000]:
        idx, val = min_max_top_k(X, k)
        full = min_max_rows(X)
        for r in range(len(X)):
            want = rank_desc(full[r]) [: min(k, 3000)]
            np.testing.assert_array_equal(idx[r], want)
            np.testing.assert_array_equal(val[r], full[r][want])
        assert val.dtype == np.float32
    idx, val = min_max_top_k(np.zeros((0, 5), np.float32), 5)
    assert idx.shape == (0, 5)


def _min_max_rows_gathered(x):
    """min_max_rows as it was first written: the good rows gathered, normalised, scattered back."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    lo = x.min(axis=1, keepdims=True)
    span = x.max(axis=1, keepdims=True) - lo
    out = np.ones_like(x)
    ok = span[:, 0] > 0
    with np.errstate(invalid="ignore"):
        out[ok] = (x[ok] - lo[ok]) / span[ok]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_min_max_rows_in_place_equals_gathering_the_good_rows(dtype):
    """The in-place normalisation (no temporaries of the block's size) gives the same bits,
    constant, NaN and infinite rows included, and min_max_top_k normalising its scratch
    in place (overwrite=True) gives what it gives on a copy."""
    from hipporag2.retrieve.scoring import min_max_top_k

    rng = np.random.default_rng(5)
    X = (rng.normal(size=(12, 500)) * 1000).astype(dtype)
    X[1] = X[1, 0]  # constant
    if np.issubdtype(dtype, np.floating):
        X[2, 3] = np.nan
        X[3, 4] = np.inf
        X[4, 5] = -np.inf
        X[5, :2] = np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(min_max_rows(X), _min_max_rows_gathered(X))
    assert min_max_rows(X).dtype == _min_max_rows_gathered(X).dtype
    for k in (1, 5, 499, 600):
        want = min_max_top_k(X, k)
        scratch = X.copy()
        got = min_max_top_k(scratch, k, overwrite=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
