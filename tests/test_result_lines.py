"""retrieval.jsonl and the retrieval checkpoint as the pipeline writes them: json.dumps of
their rows, read back as the values written, on random results with the awkward values
a line can hold."""
import json

import numpy as np

from hipporag2 import atomicio
from hipporag2.data.loaders import Corpus, Passage, Query
from hipporag2.pipeline import RetrievalCheckpoint, retrieval_rows, write_retrieval_jsonl
from hipporag2.result_lines import checkpoint_row
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


def test_written_files_equal_the_plain_writers(tmp_path):
    rng = np.random.default_rng(3)
    c = corpus(rng)
    queries = [Query(id=f"q{i}", question=f"question {AWKWARD[i % 7]}", gold_passages=[]) for i in range(12)]
    results = [random_result(rng, q.id, len(c)) for q in queries]
    write_retrieval_jsonl(tmp_path / "fast.jsonl", queries, results, c)
    atomicio.write_jsonl(tmp_path / "plain.jsonl", retrieval_rows(queries, results, c))
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
    # the checkpoint: header + one line per block, read back as the values written
    ids = [q.id for q in queries]
    ckpt = RetrievalCheckpoint(tmp_path / "partial.jsonl", "key", ids, 5)
    back = [r for s in range(0, 12, 5) for r in ckpt.append(s, results[s : s + 5])]
    ckpt.close()
    log = atomicio.CheckpointLog(tmp_path / "plain_partial.jsonl", ckpt._header())
    for s in range(0, 12, 5):
        log.write({"start": s, "rows": [checkpoint_row(r) for r in results[s : s + 5]]})
    log.close()
    assert (tmp_path / "partial.jsonl").read_bytes() == (tmp_path / "plain_partial.jsonl").read_bytes()
    assert [(r.query_id, r.ranked, r.scores, r.details) for r in back] == \
        [(r.query_id, r.ranked, r.scores, json.loads(json.dumps(r.details))) for r in results]
    again = RetrievalCheckpoint(tmp_path / "partial.jsonl", "key", ids, 5)
    assert again.resume() == 12
    assert [(r.ranked, r.scores, r.details) for r in again.results] == [(r.ranked, r.scores, r.details) for r in back]
