"""The half-matrix, tiled synonym KNN against the straightforward full-matrix version."""
import numpy as np
import pytest

from hipporag2.graph.knn_kernels import offer_hits
from hipporag2.graph.synonyms import list_length, synonym_arrays
from hipporag2.text import alnum_len


def as_tuples(arr):
    return list(zip(arr.query.tolist(), arr.neighbour.tolist(), arr.score.astype(np.float64).tolist()))


def synonym_pairs(*args, **kwargs):
    return as_tuples(synonym_arrays(*args, **kwargs))


def straightforward(phrases, emb, threshold, top_k, max_neighbours):
    """The rule of SPEC §2.8 read literally: each query row against all phrases, sorted
    by score descending then neighbour ascending, the first top_k looked at."""
    sims = np.asarray(emb, dtype=np.float32) @ np.asarray(emb, dtype=np.float32).T
    out = []
    for q, p in enumerate(phrases):
        if alnum_len(p) <= 2:
            continue
        order = sorted(range(len(phrases)), key=lambda c: (-sims[q, c], c))[: min(top_k, len(phrases))]
        accepted = 0
        for c in order:
            if sims[q, c] < np.float32(threshold) or accepted >= max_neighbours:
                break
            if c == q or phrases[c] == "":
                continue
            out.append((q, c, float(sims[q, c])))
            accepted += 1
    return out


def exact_embeddings(n, dim, seed, levels=3):
    """Entries k/4 with |k| < levels: every dot product is exact in float32 whatever
    the summation order, so scores can be compared bit for bit and ties are many."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-levels + 1, levels, size=(n, dim)) / 4).astype(np.float32)


@pytest.mark.parametrize("block", [1, 3, 8, 64, 1000])
@pytest.mark.parametrize("seed", [0, 1])
def test_same_pairs_scores_and_tie_order_as_the_straightforward_version(block, seed):
    emb = exact_embeddings(90, 4, seed)
    phrases = [f"phrase {i}" for i in range(90)]
    phrases[5], phrases[17], phrases[40] = "ab", "", "x y"  # not queries; "" never a neighbour
    for thr, top_k, cap in [(0.5, 2047, 101), (0.25, 12, 101), (0.5, 2047, 3), (1.0, 7, 2), (0.0, 2047, 0)]:
        want = straightforward(phrases, emb, thr, top_k, cap)
        got = synonym_pairs(phrases, emb, threshold=thr, top_k=top_k, max_neighbours=cap, block_size=block)
        assert got == want, (thr, top_k, cap)


def test_real_valued_embeddings_same_pairs_and_canonical_scores():
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(30, 32))
    emb = centres[rng.integers(0, 30, size=400)] + 0.5 * rng.normal(size=(400, 32))
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    phrases = [f"phrase {i}" for i in range(400)]
    want = straightforward(phrases, emb, 0.8, 2047, 101)
    got = synonym_pairs(phrases, emb, threshold=0.8, block_size=64)
    assert len(want) > 1000
    assert [(a, b) for a, b, _ in got] == [(a, b) for a, b, _ in want]
    np.testing.assert_allclose([s for *_, s in got], [s for *_, s in want], rtol=1e-6)
    # the row-block search (what an incremental insert runs) gives the same, bit for bit
    rows = synonym_pairs(phrases, emb, threshold=0.8, block_size=100, query_rows=np.arange(400))
    assert got == rows


def test_column_tiles_slot_overflow_and_arrays_api(monkeypatch):
    import hipporag2.graph.synonyms as syn

    emb = exact_embeddings(70, 3, 5)
    phrases = [f"p{i:03d}" for i in range(70)]
    want = straightforward(phrases, emb, 0.5, 2047, 101)
    monkeypatch.setattr(syn, "TILE_COLUMNS", 9)  # many column tiles per row strip
    monkeypatch.setattr(syn, "SLOTS", 2)  # most rows overflow their slots and are rescanned
    arr = synonym_arrays(phrases, emb, threshold=0.5, block_size=4)
    assert as_tuples(arr) == want and len(arr.query) == len(want)
    assert arr.score.dtype == np.float32 and arr.query.dtype == np.int64


def test_list_keeps_the_best_in_walk_order():
    # 3 offers to query 0 into a list of 2: score descending, then neighbour ascending
    count = np.zeros(4, dtype=np.int64)
    nbr = np.zeros((4, 2), dtype=np.int64)
    score = np.zeros((4, 2), dtype=np.float32)
    hit_i = np.array([0, 0, 0, 1], dtype=np.int64)
    hit_j = np.array([3, 2, 1, 3], dtype=np.int64)
    hit_s = np.array([0.9, 0.95, 0.9, 0.99], dtype=np.float32)
    is_query = np.array([True, False, True, True])
    offer_hits(hit_i, hit_j, hit_s, is_query, count, nbr, score)
    assert count.tolist() == [2, 0, 1, 2]  # row 1 is no query; 3 is offered (0, 3) and (1, 3)
    assert nbr[0].tolist() == [2, 1] and score[0].tolist() == pytest.approx([0.95, 0.9])
    assert nbr[2, 0] == 0 and nbr[3].tolist() == [1, 0]
    assert list_length(2047, 85_000, 101, 1) == 103 and list_length(10, 85_000, 101, 0) == 10


def test_empty_and_single_phrase():
    assert synonym_pairs([], np.zeros((0, 4), np.float32)) == []
    assert synonym_pairs(["alpha"], np.ones((1, 4), np.float32) / 2) == []
