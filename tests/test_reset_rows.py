"""The CSR resets (`seeds.reset_rows`) equal each query's dense reset, with the passages'
zeros left out and everything else (NaN, negatives, tiny values) kept."""
import numpy as np

from hipporag2.retrieve.seeds import reset_rows


def reset_vector(n_phrases, phrase_seeds, passage_seeds):
    """The dense reset: phrase seeds in order (the last weight of a phrase wins), then passages."""
    reset = np.zeros(n_phrases + (0 if passage_seeds is None else len(passage_seeds)))
    for i, w in phrase_seeds:
        reset[i] = w
    if passage_seeds is not None:
        reset[n_phrases:] = passage_seeds
    return reset


def test_rows_equal_the_dense_resets():
    rng = np.random.default_rng(5)
    n_phr, n_pas = 300, 200
    phrase_seeds, passage_seeds = [], []
    for r in range(40):
        seeds = [(int(rng.integers(n_phr)), float(rng.choice([0.0, -0.5, rng.random(), np.nan]))) for _ in range(rng.integers(0, 8))]
        if seeds and r % 3 == 0:
            seeds.append((seeds[0][0], 0.25))  # seeded twice: the last weight wins
        ps = None if r % 7 == 6 else (rng.random(n_pas) * 0.05).astype(rng.choice([np.float32, np.float64]))
        if ps is not None:
            ps[rng.integers(0, n_pas, 20)] = 0.0
            ps[rng.integers(0, n_pas, 3)] = -0.0
            ps[rng.integers(0, n_pas, 2)] = np.nan
            ps[rng.integers(0, n_pas, 2)] = -1e-30
        phrase_seeds.append(seeds)
        passage_seeds.append(ps)
    R = reset_rows(phrase_seeds, passage_seeds, n_phr, n_phr + n_pas)
    assert R.shape == (40, n_phr + n_pas)
    for r, (seeds, ps) in enumerate(zip(phrase_seeds, passage_seeds)):
        want = reset_vector(n_phr, seeds, ps)
        if ps is None:
            want = np.concatenate([want, np.zeros(n_pas)])
        row = slice(R.indptr[r], R.indptr[r + 1])
        cols, vals = R.indices[row], R.data[row]
        assert np.all(np.diff(cols) > 0)  # canonical: sorted, no duplicates
        got = np.zeros(n_phr + n_pas)
        got[cols] = vals
        np.testing.assert_array_equal(got, want)  # NaN where NaN
        # stored: every seeded phrase (zero weights too), and exactly the passages that are not zero
        passages = cols[cols >= n_phr] - n_phr
        assert passages.tolist() == ([] if ps is None else np.flatnonzero(ps).tolist())
        assert sorted(set(cols[cols < n_phr].tolist())) == sorted({j for j, _ in seeds})
