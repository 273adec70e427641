"""Every experiment config composes, and so does every value its sweep takes; a
multirun writes each job into its own run_dir. Nothing here runs a model."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hipporag2.cli import compose

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
PAPER_TABLES = [
    "table2_qa", "table3_recall", "table4_ablations", "table5_reset_weight", "table7_retrievers",
    "table9_recall2_5", "table10_graph_stats", "table12_cost", "fig3_continual",
]
BASELINES = ["baseline_bm25", "baseline_contriever", "baseline_gtr", "baseline_gte_qwen2_7b", "baseline_gritlm_7b", "baseline_nv_embed_v2"]


def sweep_params(name):
    data = yaml.safe_load((CONFIGS / "experiment" / f"{name}.yaml").read_text()) or {}
    params = ((data.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    return {str(k): [v.strip() for v in str(val).split(",")] for k, val in params.items()}


def test_every_paper_table_and_baseline_has_an_experiment():
    assert set(PAPER_TABLES + BASELINES + ["quirk_ablations"]) <= set(EXPERIMENTS)
    for name in EXPERIMENTS:
        text = (CONFIGS / "experiment" / f"{name}.yaml").read_text()
        assert text.startswith("# @package _global_"), name
        assert f"+experiment={name}" in text, f"{name}.yaml should show the command that runs it"


_COMPOSED = {}


def composed(*overrides):
    """compose() costs ~0.3-0.7 s: each distinct command is composed once per session."""
    if overrides not in _COMPOSED:
        _COMPOSED[overrides] = compose(list(overrides))
    return _COMPOSED[overrides]


def sweep_points(name, skip=None):
    """Commands covering every value of every swept key with few compositions: values
    of different keys are combined (zipped); `skip` holds (key, value) pairs already
    composed elsewhere."""
    pending = {}
    for key, values in sweep_params(name).items():
        todo = [v for v in values if skip is None or (key, v) not in skip]
        if "." in key.split("@")[0]:  # a plain setting, typed by the schema: one value is enough
            todo = todo[:1]
        if todo:
            pending[key] = todo
            if skip is not None:
                skip.update((key, v) for v in todo)
    n = max((len(v) for v in pending.values()), default=0)
    return [(f"+experiment={name}",) + tuple(f"{k}={v[i]}" for k, v in pending.items() if i < len(v)) for i in range(n)]


@pytest.mark.slow
def test_every_experiment_and_sweep_value_composes():
    seen = set()
    for name in EXPERIMENTS:
        cfg = composed(f"+experiment={name}")
        assert cfg.run_dir.startswith("runs/"), name
        for point in sweep_points(name, seen):
            composed(*point)
    assert len(seen) > 30


def test_paper_presets_and_rows():
    cfg = compose(["+experiment=table4_ablations"])
    assert (cfg.embedding.model, cfg.llm.name, cfg.dataset.name, cfg.retrieval.filter) == ("nvidia/NV-Embed-v2", "llama33_70b_vllm", "musique", "llm")
    assert sweep_params("table4_ablations")["retrieval"] == [
        "hipporag2", "hipporag2_ner_to_node", "hipporag2_query_to_node", "hipporag2_no_passage_nodes", "hipporag2_no_filter", "dense"
    ]
    row = compose(["+experiment=table4_ablations", "retrieval=hipporag2_no_passage_nodes", "dataset=hotpotqa"])
    assert (row.retrieval.passage_nodes, row.retrieval.filter, row.dataset.name) == (False, "llm", "hotpotqa")
    gtr = compose(["+experiment=table9_recall2_5", "experiment/retriever@_global_=gtr"])
    assert (gtr.retrieval.method, gtr.embedding.model) == ("dense", "sentence-transformers/gtr-t5-base")
    grit = compose(["+experiment=baseline_gritlm_7b"])
    assert grit.embedding.backend == "gritlm" and grit.embedding.query_format == "<|user|>\n{instruction}\n<|embed|>\n"
    gte = compose(["+experiment=table7_retrievers", "embedding=gte_qwen2_7b", "retrieval=hipporag2"])
    assert gte.embedding.query_format == "Instruct: {instruction}\nQuery: " and gte.retrieval.method == "hipporag2"
    assert compose(["+experiment=table2_qa"]).qa.enabled
    # LightRAG rows (Tables 2, 8, 12): Table 14's settings, NV-Embed-v2, the paper's LLM
    # with room for LightRAG's 12,000-token query context
    assert "lightrag" in sweep_params("table2_qa")["experiment/retriever@_global_"]
    assert "lightrag" in sweep_params("table8_qa")["experiment/retriever@_global_"]
    lr = compose(["+experiment=table2_qa", "experiment/retriever@_global_=lightrag", "dataset=musique"])
    assert (lr.retrieval.method, lr.embedding.model, lr.llm.name, lr.llm.max_model_len) == (
        "lightrag", "nvidia/NV-Embed-v2", "llama33_70b_vllm", 16384)
    assert (lr.lightrag.mode, lr.lightrag.top_k, lr.lightrag.chunk_token_size, lr.qa.enabled) == ("local", 60, 1200, True)
    mini = compose(["+experiment=table8_qa", "experiment/retriever@_global_=lightrag"])
    assert (mini.retrieval.method, mini.llm.name) == ("lightrag", "gpt4o_mini")
    fig3 = compose(["+experiment=fig3_continual", "dataset.segments_indexed=2"])
    assert (fig3.dataset.corpus_segments, fig3.dataset.segments_indexed) == (4, 2)
    # Two points of one sweep never share a run folder.
    a = compose(["+experiment=table5_reset_weight", "retrieval.passage_node_weight=0.1"]).run_dir
    b = compose(["+experiment=table5_reset_weight", "retrieval.passage_node_weight=0.3"]).run_dir
    assert a != b


def test_shared_set_experiments_need_no_llm_or_gpu():
    for name in [n for n in EXPERIMENTS if n.startswith("musique_train_")]:
        for point in [(f"+experiment={name}",)] + sweep_points(name):
            cfg = composed(*point)
            assert cfg.llm.name == "none" and cfg.retrieval.filter == "none" and cfg.embedding.device == "cpu", point
            assert cfg.retrieval.linking != "ner_to_node", point
            assert cfg.openie.import_path.endswith("musique_train_openie_gpt-3.5-turbo-1106.json")
    q = composed("+experiment=musique_train_quirks", "experiment/quirk@_global_=single_edges")
    assert q.graph.double_edges is False and q.retrieval.name == "hipporag2_no_filter"
    assert sweep_params("musique_train_grid") == {
        "retrieval.damping": ["0.3", "0.5", "0.7", "0.85"],
        "retrieval.passage_node_weight": ["0.01", "0.05", "0.1", "0.3", "0.5"],
    }


def test_launcher_configs():
    local = yaml.safe_load((CONFIGS / "hydra" / "launcher" / "local_parallel.yaml").read_text())
    slurm = yaml.safe_load((CONFIGS / "hydra" / "launcher" / "slurm.yaml").read_text())
    assert any("submitit_local" in str(d) for d in local["defaults"])
    assert any("submitit_slurm" in str(d) for d in slurm["defaults"])
    for key in ("partition", "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min", "array_parallelism"):
        assert key in slurm, key
    cfg = compose(["+experiment=table3_recall", "hydra/launcher=slurm"])
    assert cfg.dataset.name == "musique"


@pytest.mark.slow
def test_multirun_jobs_lie_under_the_sweep_dir(tmp_path):
    """`hipporag2 -m` (BM25 on the demo corpus: no model) puts each job's files and its
    .hydra/ in a folder under hydra.sweep.dir, the default one content-addressed (the
    same sweep again resumes in place, recomputing nothing) and a given one honoured.
    A password in llm.base_url reaches neither the sweep's multirun.yaml nor any job's files."""
    exe = [sys.executable, "-m", "hipporag2.cli"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    secret = "multirunpassword77"
    common = ["retrieval=bm25", "progress=false", f"cache_dir={tmp_path / 'cache'}",
              f"llm.base_url='https://user:{secret}@llm.example.invalid/v1'"]
    sweep = exe + ["-m", "retrieval.retrieval_top_k=5,10"] + common
    out = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    sweep_files = list((tmp_path / "runs" / "multirun").glob("*/multirun.yaml"))
    assert len(sweep_files) == 1
    sweep_dir = sweep_files[0].parent
    jobs = sorted(p.parent for p in sweep_dir.rglob("metrics.json"))
    assert len(jobs) == 2 and not (tmp_path / "runs" / "demo").exists()
    for job in jobs:
        assert (job / ".hydra" / "overrides.yaml").is_file() and (job / "run.log").is_file()
        assert (job / "retrieval.jsonl").is_file()
    assert "https://***@llm.example.invalid/v1" in sweep_files[0].read_text()
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".yaml", ".json", ".log", ".jsonl")
              and secret in p.read_text(errors="replace")]
    assert not leaked, leaked
    # The same sweep again: the same folders, nothing new.
    again = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert sorted(p.parent for p in (tmp_path / "runs").rglob("metrics.json")) == jobs
    # hydra.sweep.dir given: the jobs go under it.
    mine = tmp_path / "my_sweep"
    out = subprocess.run(sweep + [f"hydra.sweep.dir={mine}"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (mine / "multirun.yaml").is_file()
    assert len(list(mine.rglob("metrics.json"))) == 2


def test_experiment_runs_and_sweep_jobs_share_folders():
    """An experiment's single run lands in the folder its sweep job would use:
    run_dir = hydra.sweep.dir/hydra.sweep.subdir."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from hipporag2.cli import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        d = hydra_compose(config_name="config", overrides=["+experiment=musique_train_grid", "retrieval.damping=0.3"],
                          return_hydra_config=True)
    cfg = compose(["+experiment=musique_train_grid", "retrieval.damping=0.3"])
    assert d.hydra.sweep.dir == "runs/musique_train/grid"
    assert cfg.run_dir.startswith("runs/musique_train/grid/d0.3-w0.05-")


def test_sweep_cfg_job_lists_every_job():
    """`hipporag2 -m +experiment=... --cfg job` (Hydra refuses --cfg with -m): each job's
    overrides and composed config, then the count; nothing runs, and nothing on this
    machine is required (here the encoder environment the jobs name does not exist)."""
    exe = [sys.executable, "-m", "hipporag2.cli", "-m", "+experiment=table12_cost", "embedding.env=/nonexistent/.venv-x",
           "--cfg", "job"]
    out = subprocess.run(exe, cwd=CONFIGS.parent, env=dict(os.environ, HF_HUB_OFFLINE="1"), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    headers = [line for line in out.stdout.splitlines() if line.startswith("# job ")]
    rows = [h.split("experiment/retriever@_global_=")[1].split()[0] for h in headers]
    assert rows == ["nv_embed_v2", "hipporag1", "hipporag2", "raptor", "lightrag", "graphrag"] and out.stdout.rstrip().endswith("# 6 jobs")
    assert out.stdout.count("\nretrieval:\n") == 6 and "method: raptor" in out.stdout and "method: lightrag" in out.stdout and "method: graphrag" in out.stdout and "method: hipporag1" in out.stdout and "\nhydra:\n" not in out.stdout
