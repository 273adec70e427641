"""retrieval.jsonl, encoded from pieces (result_lines) and appended block by block as the
retrieval checkpoint (run_files.RetrievalFile), is byte for byte what json.dumps writes
for the same rows, on random results with the awkward values a line can hold, and
reads back as the values written."""
import json
import math

import numpy as np
import pytest

from hipporag2 import atomicio
from hipporag2.data.loaders import Corpus, Passage, Query
from hipporag2.result_lines import RetrievalLines, float_text
from hipporag2.run_files import RetrievalFile, write_results
from hipporag2.retrieve.base import RetrievalResult

AWKWARD = ['Ünïcødé "quoted"', "back\\slash", "tab\tnew\nline\r", "ctrl\x01\x1f", "emoji \U0001F600", "", "a/b"]


def corpus(rng, n=40):
    return Corpus([Passage(title=f"{AWKWARD[i % len(AWKWARD)]} {i}", text=f"text {i}", corpus_idx=int(rng.integers(0, 10**6)))
                   for i in range(n)])


def random_floats(rng, n):
    kinds = [lambda: float(rng.random()), lambda: float(np.float32(rng.random())), lambda: 1e-300 * rng.random(),
             lambda: float(rng.integers(-5, 5)), lambda: 1e22, lambda: -0.0, lambda: 5e-324, lambda: 1 / 3]
    return [kinds[int(rng.integers(0, len(kinds)))]() for _ in range(n)]


def random_result(rng, qid, n_passages):
    k = int(rng.integers(0, n_passages + 1))
    ranked = rng.permutation(n_passages)[:k].tolist()
    scores = random_floats(rng, k)
    if k and rng.random() < 0.3:
        scores[0] = scores[-1]  # ties
    details = {
        "candidate_facts": [[[AWKWARD[j % 7], "rel", f"o{j}"], s] for j, s in enumerate(random_floats(rng, 5))],
        "phrase_weights": [[AWKWARD[j % 7], s] for j, s in enumerate(random_floats(rng, 3))],
        "seed_phrases": [],
        "fallback": bool(rng.random() < 0.5),
    }
    if rng.random() < 0.2:
        details = {}
    if rng.random() < 0.2:
        details["nested"] = {"x": None, 3: [True, False], "y": {"z": 1.5}}
    return RetrievalResult(qid, ranked, scores, details)


def plain_lines(queries, results, c):
    lines = RetrievalLines(c)
    return [json.dumps(lines.row(q, r), ensure_ascii=False) for q, r in zip(queries, results)]


@pytest.mark.parametrize("seed", range(6))
def test_lines_equal_json_dumps_of_the_rows(seed):
    rng = np.random.default_rng(seed)
    c = corpus(rng)
    queries = [Query(id=f"q{i} {AWKWARD[i % 7]}", question=AWKWARD[(i + 3) % 7] + " ?", gold_passages=[]) for i in range(30)]
    results = [random_result(rng, q.id, len(c)) for q in queries]
    ours = list(RetrievalLines(c).lines(queries, results))
    assert ours == plain_lines(queries, results, c)


def test_values_the_fast_path_hands_to_json_dumps():
    """Non-finite scores, numpy floats, ints, bools, details that would replace a line's own
    keys: each line still equals json.dumps of its row (or fails as json.dumps fails)."""
    rng = np.random.default_rng(9)
    c = corpus(rng, 6)
    q = Query(id="q", question="what?", gold_passages=[])
    cases = [
        [math.nan, math.inf, -math.inf, 0.5],
        [np.float64(0.25), 0.5, np.float64(math.nan)],
        [1, 0.5, True, 2.0],
        [0.1, 0.2, 0.3],
    ]
    for scores in cases:
        for details in ({}, {"fallback": True}, {"ranked": "replaced"}, {"id": 3, "x": 1}, {"question": None},
                        {"facts": [("s", "p", "o")], 2: (1.5, 2)}):
            for qid in ("q", 7, ("a", 1)):
                r = RetrievalResult(qid, list(range(len(scores))), scores, details)
                assert RetrievalLines(c).line(q, r) == plain_lines([q], [r], c)[0]
    for bad in ([np.float32(0.5)], [np.int64(1)]):  # not JSON: both ways refuse
        r = RetrievalResult("q", [0], bad, {})
        with pytest.raises(TypeError):
            plain_lines([q], [r], c)
        with pytest.raises(TypeError):
            RetrievalLines(c).line(q, r)
    r = RetrievalResult("q", [np.int64(0)], [0.5], {})  # a numpy index: retrieval.jsonl does not write it
    assert RetrievalLines(c).line(q, r) == plain_lines([q], [r], c)[0]
    assert [float_text(x) for x in (math.nan, math.inf, -math.inf, 0.1)] == [json.dumps(x) for x in (math.nan, math.inf, -math.inf, 0.1)]


def test_written_files_equal_the_plain_writers(tmp_path):
    rng = np.random.default_rng(3)
    c = corpus(rng)
    queries = [Query(id=f"q{i}", question=f"question {AWKWARD[i % 7]}", gold_passages=[]) for i in range(12)]
    results = [random_result(rng, q.id, len(c)) for q in queries]
    write_results(tmp_path, queries, results, c)
    atomicio.write_lines(tmp_path / "plain.jsonl", plain_lines(queries, results, c))
    plain = (tmp_path / "plain.jsonl").read_bytes()
    assert (tmp_path / "retrieval.jsonl").read_bytes() == plain
    # appended block by block: the same bytes, read back as the values written
    run = tmp_path / "run"
    out = RetrievalFile(run, "key", queries, c, 5)
    assert out.resume() == []
    for s in range(0, 12, 5):
        out.append(s, results[s : s + 5])
    out.close()
    assert (run / "retrieval.jsonl").read_bytes() == plain
    again = RetrievalFile(run, "key", queries, c, 5).resume()
    assert [(r.query_id, r.ranked, r.scores, r.details) for r in again] == \
        [(r.query_id, r.ranked, r.scores, json.loads(json.dumps(r.details))) for r in results]
    assert (run / "retrieval.jsonl").read_bytes() == plain


def test_resume_keeps_whole_blocks_and_starts_over_on_another_key(tmp_path):
    rng = np.random.default_rng(4)
    c = corpus(rng)
    queries = [Query(id=f"q{i}", question="?", gold_passages=[]) for i in range(8)]
    results = [random_result(rng, q.id, len(c)) for q in queries]
    out = RetrievalFile(tmp_path, "K", queries, c, 3)
    out.resume()
    for s in range(0, 8, 3):
        out.append(s, results[s : s + 3])
    out.close()
    full = (tmp_path / "retrieval.jsonl").read_bytes()
    lines = full.split(b"\n")
    # killed halfway through the third block's write (two of its lines, or a torn one): blocks 1-2 stay
    for tail in (lines[6][:20], lines[6] + b"\n"):
        (tmp_path / "retrieval.jsonl").write_bytes(b"\n".join(lines[:6]) + b"\n" + tail)
        back = RetrievalFile(tmp_path, "K", queries, c, 3).resume()
        assert [r.query_id for r in back] == [q.id for q in queries[:6]]
        assert (tmp_path / "retrieval.jsonl").read_bytes() == b"\n".join(lines[:6]) + b"\n"
    # half of block 2 only: block 1 stays
    (tmp_path / "retrieval.jsonl").write_bytes(b"\n".join(lines[:4]) + b"\n")
    assert len(RetrievalFile(tmp_path, "K", queries, c, 3).resume()) == 3
    # other settings, other questions, or no key: started over
    (tmp_path / "retrieval.jsonl").write_bytes(full)
    assert RetrievalFile(tmp_path, "OTHER", queries, c, 3).resume() == []
    assert not (tmp_path / "retrieval.jsonl").exists()
    (tmp_path / "retrieval.jsonl").write_bytes(full)
    assert RetrievalFile(tmp_path, "OTHER", queries[:5], c, 3).resume() == []
    out = RetrievalFile(tmp_path, "K", queries, c, 3)
    out.resume()
    (tmp_path / "retrieval.jsonl").write_bytes(full)
    out.complete()  # a finished run: the key is gone, a rerun starts over
    assert RetrievalFile(tmp_path, "K", queries, c, 3).resume() == []


def magnitudes(rng, n):
    """Floats of every decimal magnitude (each band where orjson and repr lay digits out
    differently, and their edges), signed, with float32 values and exact powers of ten."""
    exp = rng.integers(-330, 308, size=n)
    x = rng.random(n) * 10.0 ** exp.astype(np.float64)
    x[::7] = rng.random(len(x[::7])) * 10.0 ** rng.integers(-11, -2, size=len(x[::7]))  # the bands near 1e-9..1e-4
    x[1::7] = np.float32(rng.random(len(x[1::7]))).astype(np.float64) * 10.0 ** rng.integers(-6, 1, size=len(x[1::7]))
    x[2::7] = 10.0 ** rng.integers(-12, 20, size=len(x[2::7]))
    x[3::7] = np.nextafter(x[2::7][: len(x[3::7])], rng.choice([0.0, np.inf], size=len(x[3::7])))
    x[4::7] = rng.integers(-10**6, 10**6, size=len(x[4::7]))
    x[5::7] = -x[5::7]
    xs = [v for v in x.tolist() if math.isfinite(v)] + [0.0, -0.0, 5e-324, 1e-4, 1e-5, 1e-9, 1e16, 9999999999999998.0]
    return xs


@pytest.mark.parametrize("seed", range(3))
def test_score_texts_are_json_texts_at_every_magnitude(seed, monkeypatch):
    """The fast float texts (orjson's digits, re-laid out where repr differs) equal
    json's, with and without orjson."""
    from hipporag2 import result_lines as rl

    rng = np.random.default_rng(100 + seed)
    xs = magnitudes(rng, 200_000)
    want = [json.dumps(x) for x in xs]
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(rl, "_orjson", lambda: None)
        elif rl._orjson() is None:
            pytest.skip("orjson is not installed or lays floats out otherwise: only the repr path runs")
        for a in range(0, len(xs), 997):  # lists of several lengths, as a result's scores
            part = xs[a : a + 997]
            texts, joined = rl._finite_float_texts(part)
            assert texts == want[a : a + 997]
            assert joined == json.dumps(part)
            assert rl._float_texts(part) == texts
        assert rl._finite_float_texts([0.5, math.nan]) is None and rl._finite_float_texts([math.inf]) is None
        assert rl._float_texts([0.5, math.nan, -math.inf]) == ["0.5", "NaN", "-Infinity"]
        assert rl._finite_float_texts([]) == ([], "[]")
