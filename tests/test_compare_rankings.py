"""scripts/compare_rankings.py on small synthetic files."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "compare_rankings.py"


@pytest.fixture(scope="module")
def cr():
    spec = importlib.util.spec_from_file_location("compare_rankings", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CORPUS = [{"title": f"T{i}", "text": f"text {i}"} for i in range(8)]


def passage(i):
    return f"T{i}\ntext {i}"


def ours_rec(qid, order, seeds=None, kept=None, scores=None):
    scores = scores or [1.0 / (r + 1) for r in range(len(order))]
    rec = {"id": qid, "question": "q", "ranked": [
        {"title": f"T{i}", "corpus_idx": i, "score": s} for i, s in zip(order, scores)]}
    if seeds is not None:
        rec["seed_phrases"] = seeds
    if kept is not None:
        rec["kept_facts"] = [[f, 0.9] for f in kept]
    return rec


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "corpus.json").write_text(json.dumps(CORPUS))
    seeds = [["a", 0.9], ["b", 0.8], ["c", 0.7], ["d", 0.6], ["e", 0.5]]
    fact = ["a", "r", "b"]
    ours = [
        ours_rec("q1", [0, 1, 2, 3, 4, 5, 6, 7], seeds, [fact]),   # identical everywhere
        ours_rec("q2", [0, 1, 2, 3, 4, 5, 6, 7], seeds, [fact]),   # top-2 order swapped
        ours_rec("q3", [0, 1, 2, 3, 4, 5, 6, 7], seeds, [fact]),   # 5th/6th swapped, seed tie
        ours_rec("q4", [0, 1, 2, 3, 4, 5, 6, 7], seeds, [fact]),   # top-1 differs, untied
        ours_rec("q_only_ours", [0, 1, 2, 3, 4, 5, 6, 7]),
    ]
    ref = [
        # corpus indices
        {"id": "q1", "ranked_passages": [0, 1, 2, 3, 4, 5, 6, 7], "seed_phrases": seeds, "kept_facts": [fact]},
        # passage strings
        {"id": "q2", "ranked_passages": [passage(i) for i in [1, 0, 2, 3, 4, 5, 6, 7]], "seed_phrases": seeds,
         "kept_facts": [fact]},
        {"id": "q3", "ranked_passages": [0, 1, 2, 3, 5, 4, 6, 7],
         "seed_phrases": [["a", 0.9], ["b", 0.8], ["c", 0.7], ["d", 0.6], ["f", 0.5]],
         "linking_score_map_before_cut": {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6, "e": 0.5, "f": 0.5},
         "kept_facts": [fact]},
        {"id": "q4", "ranked_passages": [7, 1, 2, 3, 4, 5, 6, 0], "seed_phrases": seeds,
         "kept_facts": [["x", "y", "z"]]},
        {"id": "q_only_ref", "ranked_passages": [0, 1, 2, 3, 4, 5, 6, 7]},
    ]
    return (write_jsonl(tmp_path / "ours.jsonl", ours), write_jsonl(tmp_path / "ref.jsonl", ref),
            str(tmp_path / "corpus.json"), tmp_path)


def test_counts(cr, files, capsys):
    ours, ref, corpus, tmp = files
    out_json = tmp / "summary.json"
    rc = cr.main([ours, ref, "--corpus", corpus, "--k", "1,2,5,8", "--json", str(out_json)])
    assert rc == 0
    s = json.loads(out_json.read_text())
    assert s["n_common"] == 4
    assert s["only_ours"] == ["q_only_ours"] and s["only_reference"] == ["q_only_ref"]
    k = s["k"]
    assert (k["1"]["identical_set"], k["1"]["identical_order"]) == (2, 2)   # q2, q4 differ at 1
    assert sorted(k["1"]["set_differs"]) == ["q2", "q4"]
    assert (k["2"]["identical_set"], k["2"]["identical_order"]) == (3, 2)   # q2 same set, other order
    assert (k["5"]["identical_set"], k["5"]["identical_order"]) == (2, 1)   # q2 same set, swapped
    assert sorted(k["5"]["set_differs"]) == ["q3", "q4"]
    assert k["5"]["set_differs_not_seed_tied"] == ["q4"]
    assert (k["8"]["identical_set"], k["8"]["identical_order"]) == (4, 1)
    assert s["seed_tied"] == ["q3"]
    assert s["seed_sets_differ"] == ["q3"]
    assert s["kept_facts_differ"] == ["q4"]
    assert s["seed_weight_max_abs_diff"] == 0.0
    text = capsys.readouterr().out
    assert "top-5 sets differ on queries NOT seed-tied: 1: q4" in text
    assert "seed phrases tied at the cut: 1: q3" in text


def test_indices_without_corpus(cr, files):
    ours, ref, corpus, tmp = files
    # the reference has passage strings for q2: without a corpus that is malformed
    assert cr.main([ours, ref, "--k", "5"]) == 2
    rows = [json.loads(line) for line in open(ref)]
    rows[1]["ranked_passages"] = [1, 0, 2, 3, 4, 5, 6, 7]
    ref2 = write_jsonl(tmp / "ref2.jsonl", rows)
    out_json = tmp / "s2.json"
    assert cr.main([ours, ref2, "--k", "5", "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["k"]["5"]["identical_set"] == 2


def test_passage_score_tie_flag(cr, tmp_path):
    ours = write_jsonl(tmp_path / "o.jsonl", [ours_rec("q", [0, 1, 2], scores=[0.5, 0.2, 0.2])])
    ref = write_jsonl(tmp_path / "r.jsonl", [{"id": "q", "ranked_passages": [0, 2, 1], "scores": [0.5, 0.2, 0.2]}])
    out_json = tmp_path / "s.json"
    assert cr.main([ours, ref, "--k", "1,2", "--json", str(out_json)]) == 0
    s = json.loads(out_json.read_text())
    assert s["k"]["2"]["identical_set"] == 0 and s["k"]["1"]["identical_order"] == 1
    assert s["passage_score_tied"]["2"] == {"ours": ["q"], "reference": ["q"]}
    assert s["passage_score_tied"]["1"] == {"ours": [], "reference": []}


def test_seed_tie_rule(cr):
    assert cr.seed_tie_at_cut({"a": 1.0, "b": 0.5, "c": 0.5}, 2, 1e-6)
    assert not cr.seed_tie_at_cut({"a": 1.0, "b": 0.5, "c": 0.4}, 2, 1e-6)
    assert not cr.seed_tie_at_cut({"a": 1.0, "b": 0.5}, 2, 1e-6)   # nothing beyond the cut
    assert cr.seed_tie_at_cut({"a": 1.0, "b": 0.5, "c": 0.5 * (1 + 1e-9)}, 2, 1e-6)


@pytest.mark.parametrize("bad", [
    "not json\n",
    json.dumps({"question": "no id"}) + "\n",
    "",
])
def test_malformed_inputs_exit_2(cr, tmp_path, bad):
    ok = write_jsonl(tmp_path / "ok.jsonl", [ours_rec("q", [0, 1])])
    bad_path = tmp_path / "bad.jsonl"
    bad_path.write_text(bad)
    assert cr.main([ok, str(bad_path), "--k", "1"]) == 2
    assert cr.main([str(bad_path), ok, "--k", "1"]) == 2
    assert cr.main([ok, ok, "--k", "zero"]) == 2
    assert cr.main([ok, str(tmp_path / "missing.jsonl")]) == 2
