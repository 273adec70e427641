"""retrieval.jsonl, appended block by block as the retrieval checkpoint
(run_files.RetrievalFile) or written whole (run_files.write_results), is json.dumps of
its rows, on random results with the awkward values a line can hold, and reads back as
the values written (`QueryResult.from_json`); lines of every retriever's shape, as runs
of earlier versions wrote them, read back and write again byte for byte; a resume keeps
whole blocks of the same key only."""
import json

import numpy as np

from hipporag2.files import atomicio
from hipporag2.data.loaders import Corpus, Passage, Query
from hipporag2.files.result_lines import RetrievalLines
from hipporag2.results import QueryResult
from hipporag2.files.run_files import RetrievalFile, write_results

AWKWARD = ['Ünïcødé "quoted"', "back\\slash", "tab\tnew\nline\r", "ctrl\x01\x1f", "emoji \U0001F600", "", "a/b"]


def corpus(rng, n=40):
    return Corpus([Passage(title=f"{AWKWARD[i % len(AWKWARD)]} {i}", text=f"text {i}", corpus_idx=int(rng.integers(0, 10**6)))
                   for i in range(n)])


def random_floats(rng, n):
    kinds = [lambda: float(rng.random()), lambda: float(np.float32(rng.random())), lambda: 1e-300 * rng.random(),
             lambda: float(rng.integers(-5, 5)), lambda: 1e22, lambda: -0.0, lambda: 5e-324, lambda: 1 / 3]
    return [kinds[int(rng.integers(0, len(kinds)))]() for _ in range(n)]


def random_result(rng, qid, n_passages):
    """(QueryResult, the per-method keys of its line as the retriever gave them)"""
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
    return QueryResult(qid, ranked, scores, dict(details)), details


def plain_lines(queries, results, details, c):
    """json.dumps of each row, built here: id, question, ranked passages, then the details."""
    out = []
    for q, r, d in zip(queries, results, details):
        row = {"id": q.id, "question": q.question,
               "ranked": [{"title": c.passages[i].title, "corpus_idx": c.passages[i].corpus_idx, "score": s}
                          for i, s in zip(r.ranked, r.scores)]}
        row.update(d)
        out.append(json.dumps(row, ensure_ascii=False))
    return out


def _typed(r):
    return (r.query_id, r.ranked, r.scores, r.candidate_facts, r.phrase_weights, r.seed_phrases, r.fallback, r.extra)


def test_written_files_equal_the_plain_writers(tmp_path):
    rng = np.random.default_rng(3)
    c = corpus(rng)
    queries = [Query(id=f"q{i}", question=f"question {AWKWARD[i % 7]}", gold_passages=[]) for i in range(12)]
    results, details = zip(*[random_result(rng, q.id, len(c)) for q in queries])
    write_results(tmp_path, queries, results, c)
    atomicio.write_lines(tmp_path / "plain.jsonl", plain_lines(queries, results, details, c))
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
    assert [_typed(r) for r in again] == [_typed(QueryResult(r.query_id, r.ranked, r.scores, json.loads(json.dumps(d))))
                                          for r, d in zip(results, details)]
    assert again[0].candidate_facts is None or isinstance(again[0].candidate_facts[0][0], tuple)
    assert [r.passage_ids for r in again] == [[c.passages[i].corpus_idx for i in r.ranked] for r in results]
    assert (run / "retrieval.jsonl").read_bytes() == plain


def test_resume_keeps_whole_blocks_and_starts_over_on_another_key(tmp_path):
    rng = np.random.default_rng(4)
    c = corpus(rng)
    queries = [Query(id=f"q{i}", question="?", gold_passages=[]) for i in range(8)]
    results = [random_result(rng, q.id, len(c))[0] for q in queries]
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


# One line of each retriever, keys in the order the retrievers of earlier versions wrote them.
_RANKED = '"ranked": [{"title": "B", "corpus_idx": 7, "score": 0.5}, {"title": "A", "corpus_idx": 3, "score": 0.25}]'
OLD_LINES = [
    '{"id": "q", "question": "?", ' + _RANKED + '}',  # dense, BM25
    '{"id": "q", "question": "?", ' + _RANKED + ', "candidate_facts": [[["a", "b", "c"], 1.0], [["d", "e", "f"], 0.0]], '
    '"kept_facts": [[["a", "b", "c"], 1.0]], "phrase_weights": [["a", 0.5], ["c", 0.25]], "seed_phrases": [["a", 0.5]], '
    '"fallback": false}',  # HippoRAG 2
    '{"id": "q", "question": "?", ' + _RANKED + ', "candidate_facts": [], "kept_facts": [], "phrase_weights": [], '
    '"seed_phrases": [], "fallback": true, "fallback_ranking": "dense"}',
    '{"id": "q", "question": "?", ' + _RANKED + ', "query_entities": ["X"], "linked_phrases": ["x"], '
    '"seed_phrases": [["x", 1.0]], "fallback": true, "fallback_ranking": "uniform"}',  # HippoRAG 1, NER linking
    '{"id": "q", "question": "?", ' + _RANKED + ', "linked_phrases": ["x"], "seed_phrases": [["x", 1.0]], '
    '"fallback": false, "fusion": {"method": "rrf", "channels": ["ppr", "dense", "bm25"]}}',  # node linking + RRF
    '{"id": "q", "question": "?", ' + _RANKED + ', "raptor_context_nodes": [{"node": 4, "level": 1, "score": 0.9}], '
    '"reader_context": [["Summary (level 1)", "s"]], "raptor_ranked": {"expand": [1, 0], "skip": [0]}}',  # RAPTOR
    '{"id": "q", "question": "?", ' + _RANKED + ', "fallback": false, "other_method": {"k": [1, 2]}}',
]


def test_lines_of_every_retriever_read_back_typed_and_write_the_same_bytes():
    c = Corpus([Passage(title="A", text="a", corpus_idx=3), Passage(title="B", text="b", corpus_idx=7)])
    lines = RetrievalLines(c)
    q = Query(id="q", question="?", gold_passages=[])
    for line in OLD_LINES:
        r = lines.read(line)
        assert (r.ranked, r.passage_ids, r.titles, r.scores) == ([1, 0], [7, 3], ["B", "A"], [0.5, 0.25])
        assert lines.line(q, r) == line
        assert QueryResult.from_json(json.loads(line)).ranked is None  # without the corpus: passage_ids only
    graph, fallback, ner, fused, raptor, other = (lines.read(x) for x in OLD_LINES[1:])
    assert graph.kept_facts == [(("a", "b", "c"), 1.0)] and graph.seed_phrases == [("a", 0.5)] and graph.fallback is False
    assert fallback.fallback and fallback.fallback_ranking == "dense"
    assert ner.query_entities == ["X"] and ner.fallback_ranking == "uniform"
    assert fused.fusion.channels == ["ppr", "dense", "bm25"]
    assert raptor.raptor_context_nodes[0].level == 1 and raptor.raptor_ranked["skip"] == [0]
    assert raptor.reader_input(1) == [("Summary (level 1)", "s")]  # the tree nodes, not the passages
    assert graph.reader_input(1, c.strings) == ["B\nb"]
    assert other.extra == {"other_method": {"k": [1, 2]}}
