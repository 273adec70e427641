"""hipporag2-report on small synthetic run directories written in the real formats
(config composed by the real CLI, metrics.json, retrieval.jsonl, .hydra/)."""
import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from hipporag2.cli import compose
from hipporag2.evaluate.metrics import mean_recall
from hipporag2.report.cli import main
from hipporag2.files.stagekeys import file_digest

N_Q = 40  # questions; passage 2i is question i's gold, 2i+1 a distractor


def write_data(root: Path, folder: str = "data", name: str = "musique", tweak: str = "") -> Path:
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    corpus = []
    for i in range(N_Q):
        corpus.append({"title": f"Gold {i}", "text": f"Fact number {i}.{tweak}"})
        corpus.append({"title": f"Other {i}", "text": f"Unrelated text {i}."})
    queries = [
        {"id": f"q{i}", "question": f"What is fact {i}?", "answer": str(i),
         "paragraphs": [{"title": f"Gold {i}", "paragraph_text": f"Fact number {i}.{tweak}", "is_supporting": True}]}
        for i in range(N_Q)
    ]
    (d / f"{name}.json").write_text(json.dumps(queries))
    (d / f"{name}_corpus.json").write_text(json.dumps(corpus))
    return d


def ranking(hit: bool, i: int):
    """Corpus indices best first: the gold first when `hit`, else at rank 8."""
    others = [j for j in range(2 * N_Q) if j != 2 * i]
    return [2 * i] + others[:9] if hit else others[:7] + [2 * i] + others[7:9]


_COMPOSED = {}


def _compose(overrides, run_dir: Path, data_folder: str):
    """compose() is slow on a busy machine: compose each set of group choices once and
    apply plain value overrides (`a.b=v`) to a copy, as Hydra would."""
    groups = tuple(o for o in overrides if o.startswith("+") or "." not in o.split("=")[0])
    if groups not in _COMPOSED:
        _COMPOSED[groups] = compose(list(groups))
    conf = OmegaConf.structured(_COMPOSED[groups])
    for o in overrides:
        if o not in groups:
            key, value = o.split("=", 1)
            OmegaConf.update(conf, key, yaml.safe_load(value))
    conf.run_dir, conf.data_dir = str(run_dir), data_folder
    return conf


def make_run(root: Path, name: str, overrides, hits, data_folder: str = "data", extra=None, graph_stats=None) -> Path:
    """A run folder as `hipporag2 OVERRIDES` would leave it (cwd = root)."""
    run_dir = root / "runs" / name
    conf = _compose(overrides, run_dir, data_folder)
    cfg = OmegaConf.to_object(conf)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(conf))
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
    (run_dir / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"cwd": str(root)}}}))
    stem = cfg.dataset.file_stem or cfg.dataset.name
    qrel, crel = f"{data_folder}/{stem}.json", f"{data_folder}/{stem}_corpus.json"
    corpus = json.loads((root / crel).read_text())
    strings = [f"{p['title']}\n{p['text']}" for p in corpus]
    ids = [f"q{i}" for i in range(N_Q)]
    ranked = {f"q{i}": ranking(hits(i), i) for i in range(N_Q)}
    segs = cfg.dataset.corpus_segments
    if segs > 1:  # continual run: only questions whose gold is indexed
        k = cfg.dataset.segments_indexed
        ids = [q for q in ids if (2 * int(q[1:]) * segs) // (2 * N_Q) < k]
    with open(run_dir / "retrieval.jsonl", "w") as f:
        for q in ids:
            f.write(json.dumps({"id": q, "question": "?", "ranked": [{"title": corpus[j]["title"], "corpus_idx": j, "score": 1.0 / (r + 1)} for r, j in enumerate(ranked[q])]}) + "\n")
    golds = [[strings[2 * int(q[1:])]] for q in ids]
    recall = mean_recall(golds, [[strings[j] for j in ranked[q]] for q in ids], cfg.recall_k)
    metrics = {
        "dataset": cfg.dataset.name, "method": cfg.retrieval.name, "n_queries": len(ids), **recall,
        "timings": {"retrieval": 2.0, "index_build": 30.0},
        "provenance": {
            "data_files": {qrel: file_digest(root / qrel), crel: file_digest(root / crel)},
            "models": {"embedding": cfg.embedding.model, "llm": cfg.llm.model or None},
        },
        **(extra or {}),
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    if graph_stats:
        (run_dir / "graph_stats.json").write_text(json.dumps(graph_stats))
    return run_dir


@pytest.fixture()
def root(tmp_path, monkeypatch):
    write_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


PAPER = ["+experiment=table3_recall", "dataset=musique"]


def test_table3_layout_with_paper_numbers_significance_and_command(root, capsys):
    make_run(root, "table3/dense", PAPER + ["experiment/retriever@_global_=nv_embed_v2"], hits=lambda i: i % 4 == 0)
    make_run(root, "table3/h2", PAPER + ["experiment/retriever@_global_=hipporag2"], hits=lambda i: i % 10 != 0)
    out = root / "report"
    assert main([str(root / "runs" / "table3"), "--out", str(out), "--bootstrap", "2000"]) == 0
    md = (out / "table3_recall.md").read_text()
    # Paper numbers for MuSiQue (strict match: same encoder, LLM and dataset) and our delta.
    assert "| nv_embed_v2 | 25.0 (69.7, −44.7) |" in md
    assert "| hipporag2 | 90.0† (74.7, +15.3) |" in md
    # The paper's rows no run stands for are listed, never left out.
    assert "| RAPTOR | not run (57.8) |" in md and "| BM25 | not run (43.5) |" in md
    assert "| NV-Embed-v2 (7B) |" not in md
    # the sweep, restricted to what was run
    assert "hipporag2 -m +experiment=table3_recall dataset=musique experiment/retriever@_global_=nv_embed_v2,hipporag2`" in md
    assert "nvidia/NV-Embed-v2" in md and "meta-llama/Llama-3.3-70B-Instruct" in md
    assert "musique_corpus.json" in md
    rows = list(csv.DictReader(io.StringIO((out / "table3_recall.csv").read_text())))
    h2 = next(r for r in rows if r["row"] == "hipporag2" and r["column"] == "MuSiQue")
    assert next(r for r in rows if r["row"] == "RAPTOR")["status"] == "not run"
    assert float(h2["ours"]) == 90.0 and float(h2["paper"]) == 74.7 and float(h2["p_better_than_dense"]) < 0.05
    assert h2["paper_condition_differs"] == "False"


def test_bootstrap_significance_direction(root, capsys):
    base = ["dataset=musique", "embedding=minilm"]
    make_run(root, "sig/dense", base + ["retrieval=dense"], hits=lambda i: i % 10 != 0)
    make_run(root, "sig/weak", base + ["retrieval=bm25"], hits=lambda i: i % 4 == 0)
    make_run(root, "sig/tie", base + ["retrieval=hipporag2_no_filter"], hits=lambda i: i % 10 != 0)
    assert main([str(root / "runs" / "sig"), "--table", "recall", "--bootstrap", "2000"]) == 0
    md = capsys.readouterr().out
    weak = next(line for line in md.splitlines() if "| bm25 |" in line)
    tie = next(line for line in md.splitlines() if "| hipporag2_no_filter |" in line)
    assert "25.0↓" in weak and "| 1.000 |" in weak  # significantly worse than dense
    assert "90.0 " in tie and "†" not in tie and "↓" not in tie  # identical rankings: no verdict


def test_mixed_data_is_refused_unless_allowed(root, capsys):
    write_data(root, "data2", tweak=" Changed.")
    base = ["dataset=musique", "embedding=minilm", "retrieval=dense"]
    make_run(root, "mixed/a", base, hits=lambda i: True)
    make_run(root, "mixed/b", base + ["retrieval.retrieval_top_k=100"], hits=lambda i: True, data_folder="data2")
    assert main([str(root / "runs" / "mixed")]) == 2
    assert "differs between runs" in capsys.readouterr().err
    assert main([str(root / "runs" / "mixed"), "--allow-mixed-data"]) == 0
    assert "Warning" in capsys.readouterr().out


def _reference(root: Path, value: float, data_hash: str) -> Path:
    ref = {
        "tolerance": {"ok": 0.1, "okish": 1.0},
        "data_files": {"musique_corpus.json": data_hash},
        "defaults_match": {"dataset.name": "musique", "embedding.name": "minilm"},
        "entries": [{"match": {"retrieval.name": "dense"}, "values": {"recall@5": value}, "command": "hipporag2 ..."}],
    }
    path = root / f"ref_{value}_{data_hash[:4]}.yaml"
    path.write_text(yaml.safe_dump(ref))
    return path


def test_check_marks_ok_okish_fail_and_exit_codes(root, capsys):
    run = make_run(root, "check/dense", ["dataset=musique", "embedding=minilm", "retrieval=dense"], hits=lambda i: i % 2 == 0)
    h = file_digest(root / "data" / "musique_corpus.json")
    empty = root / "empty.yaml"
    empty.write_text("entries: []\n")
    args = ["--check", str(run), "--paper", str(empty), "--reference"]
    assert main(args + [str(_reference(root, 50.0, h))]) == 0
    assert capsys.readouterr().out.startswith("OK ")
    assert main(args + [str(_reference(root, 50.6, h))]) == 0
    assert capsys.readouterr().out.startswith("OKish")
    assert main(args + [str(_reference(root, 55.0, h))]) == 1
    assert capsys.readouterr().out.startswith("FAIL")
    assert main(args + [str(_reference(root, 50.0, "0" * 16))]) == 1  # right score, other data
    assert "data differ" in capsys.readouterr().out
    # A run no entry applies to is reported, not failed.
    other = make_run(root, "check/bm25", ["dataset=musique", "embedding=minilm", "retrieval=bm25"], hits=lambda i: True)
    assert main(["--check", str(other), "--paper", str(empty), "--reference", str(_reference(root, 50.0, h))]) == 0
    assert "no reference" in capsys.readouterr().out


def test_grid_heatmap_and_continual_plot(root, capsys):
    base = ["dataset=musique", "embedding=minilm", "retrieval=hipporag2_no_filter", "+experiment=musique_train_grid"]
    for d in (0.3, 0.5):
        for w in (0.05, 0.5):
            make_run(root, f"grid/d{d}-w{w}", base + [f"retrieval.damping={d}", f"retrieval.passage_node_weight={w}"],
                     hits=lambda i, d=d, w=w: (d == 0.3 and w == 0.05) or i % (2 if d == 0.3 else 4) != 0)
    out = root / "out"
    assert main([str(root / "runs" / "grid"), "--out", str(out), "--name", "grid", "--bootstrap", "500"]) == 0
    md = (out / "grid.md").read_text()
    assert "| damping \\ passage_node_weight | 0.05 | 0.5 |" in md and "(out/" not in md
    assert (out / "grid_heatmap.png").stat().st_size > 1000
    assert "Best cell: damping 0.3, passage_node_weight 0.05" in md

    cont = ["dataset=musique", "embedding=minilm", "dataset.corpus_segments=4"]
    for method in ("dense", "hipporag2_no_filter"):
        for k in (1, 2, 3, 4):
            make_run(root, f"cont/{method}-{k}", cont + [f"retrieval={method}", f"dataset.segments_indexed={k}"],
                     hits=lambda i, k=k, m=method: (i % k == 0) if m == "dense" else True)
    assert main([str(root / "runs" / "cont"), "--out", str(out), "--name", "fig3", "--bootstrap", "500"]) == 0
    md = (out / "fig3.md").read_text()
    assert (out / "fig3.png").stat().st_size > 1000
    # Segment 1's questions as segments 2..4 arrive (dense forgets in this synthetic set).
    seg1 = next(line for line in md.splitlines() if "dense" in line and "| segment 1 |" in line)
    assert seg1.split("|")[3:7] == [" 100.0 ", " 50.0 ", " 40.0 ", " 30.0 "]
    assert "| MuSiQue · hipporag2_no_filter | all indexed segments | 100.0" in md


def test_runs_of_different_retrieval_semantics_are_flagged(tmp_path):
    """metrics.json's retrieval_semantics: runs of two versions (or one from before the
    versioning) get a warning naming both; runs of one version none."""
    from hipporag2.report.runs import Run, mixed_semantics

    a = Run(path=tmp_path / "a", metrics={"retrieval_semantics": 1})
    b = Run(path=tmp_path / "b", metrics={"retrieval_semantics": 1})
    old = Run(path=tmp_path / "old", metrics={})
    assert mixed_semantics([a, b]) is None
    warning = mixed_semantics([a, b, old])
    assert warning.startswith("warning:") and "1: 2 run(s)" in warning and "before versioning" in warning
    assert str(tmp_path / "old") in warning


def test_pandas_is_the_reports_only():
    """The report's tables need pandas; the run path (`HippoRAG`, `pipeline.run`, the
    sweep) must not pay for importing it."""
    import subprocess
    import sys

    code = "import sys, hipporag2.api, hipporag2.pipeline, hipporag2.sweep; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_table12_shows_a_baselines_own_counters_and_no_paper_rows_without_them(tmp_path):
    """A baseline's metrics.json `table12` (its own LLM's indexing bill) fills its row; a
    paper file without Table 12 rows adds no "not run" rows."""
    from hipporag2.report.reference import Reference
    from hipporag2.report.runs import Run
    from hipporag2.report.tables import Context, table_cost

    own = {"indexing_s": 600.0, "indexing_llm_input_tokens": 2_500_000, "indexing_llm_output_tokens": None, "seconds_per_query": 0.25,
           "peak_rss_mb": 3225.6}
    raptor = Run(path=tmp_path / "raptor", metrics={"n_queries": 10, "timings": {"retrieval": 1.0}, "table12": own},
                 config={"retrieval.name": "raptor"})
    dense = Run(path=tmp_path / "dense", metrics={"n_queries": 10, "timings": {"retrieval": 5.0, "embed_passages": 120.0}},
                config={"retrieval.name": "dense"})
    table = table_cost([raptor, dense], Context(paper=Reference("empty", []), ours=[], baselines=[]))
    md = table.markdown()
    assert "| raptor | 10 | 10.00 | 2.50 | – | 0.250 | – | 3.15 |" in md  # peak RSS 3,225.6 MB
    assert "| dense | 10 | 2.00 | – | – | 0.500 | – | – |" in md
    assert "not run" not in md and "status" not in table.data.columns
    assert table.data[table.data.row == "raptor"].ours.tolist() == [10.0, 2.5, None, 0.25, None, 3.15]
