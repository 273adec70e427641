"""Crash safety: a run killed with SIGKILL anywhere resumes and ends identical.

Real runs of the CLI (`hipporag2.cli.main()` with a full command line: Hydra, the
pipeline, MiniLM, igraph) on a 30-passage corpus with an imported OpenIE file. Every
run is killed with SIGKILL, at each named write boundary of the pipeline
(`HIPPORAG2_CRASH_AT`) and at random moments inside each stage (several seeds), and
then restarted; the run that finally completes must leave `retrieval.jsonl` and
`graph_stats.json` byte-identical to an uninterrupted run in a separate cache.

Starting Python, torch and sentence-transformers costs ~10 CPU s per process, so the
runs are forked from the session's zygote (tests/cli_zygote.py), which has imported
them once; each child then executes exactly what `python -m hipporag2.cli ARGS`
executes. The uninterrupted reference run is a genuine `python -m hipporag2.cli`
subprocess.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import cli_zygote

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


# ---- a small invented corpus with its OpenIE file -------------------------------------


def write_tiny_dataset(out: Path, n_people: int = 10) -> None:
    people = ["Arlen Voss", "Bryn Calder", "Cora Linden", "Dace Morrow", "Elin Farrow",
              "Fenn Ashby", "Gale Thorne", "Hale Brisk", "Ione Mercer", "Jory Wade"][:n_people]
    cities = ["Marrowick", "Port Linnet", "Halden", "Sallowmere", "Kessvale",
              "Dornholt", "Brisk", "Vessany Falls", "Quill", "Orrin"][:n_people]
    countries = ["Vessany", "Taloria", "Northmark", "Eskerland", "Valdour"]
    jobs = ["painter", "engineer", "poet", "astronomer", "chemist", "architect", "composer", "sculptor", "botanist", "cartographer"]
    n = len(people)
    corpus, docs, queries = [], [], []

    def add(title, text, triples):
        corpus.append({"title": title, "text": text})
        ents = sorted({t[0] for t in triples} | {t[2] for t in triples})
        # older interchange format (title/text, no idx), as the shared GPT-3.5 file
        docs.append({"title": title, "text": text, "extracted_entities": ents, "extracted_triples": triples})

    for i, p in enumerate(people):
        teacher = people[(i + 3) % n]
        add(p, f"{p} was a {jobs[i]} born in {cities[i]}. {p} studied under {teacher}.",
            [[p, "born in", cities[i]], [p, "occupation", jobs[i]], [p, "studied under", teacher]])
    for i, c in enumerate(cities):
        add(c, f"{c} is a town in {countries[i % 5]} on the river {c[:3]}wash.",
            [[c, "located in", countries[i % 5]], [c, "lies on", f"river {c[:3]}wash"]])
    for i, k in enumerate(countries):
        add(k, f"{k} is a country whose capital is {cities[(i * 2 + 1) % n]}.", [[k, "capital", cities[(i * 2 + 1) % n]]])
    for i in range(5):
        add(f"Festival {i}", f"The festival of {cities[i]} honours {people[i]}.",
            [[f"festival {i}", "held in", cities[i]], [f"festival {i}", "honours", people[i]]])
    for i, p in enumerate(people):
        queries.append({"id": f"q{i}", "question": f"In which country was {p} born?", "answer": countries[i % 5],
                        "paragraphs": [{"title": p, "paragraph_text": corpus[i]["text"], "is_supporting": True},
                                       {"title": cities[i], "paragraph_text": corpus[n + i]["text"], "is_supporting": True}]})
    for i in range(4):
        queries.append({"id": f"r{i}", "question": f"Who taught the person born in {cities[i]}?", "answer": people[(i + 3) % n],
                        "paragraphs": [{"title": people[i], "paragraph_text": corpus[i]["text"]}]})
    out.mkdir(parents=True, exist_ok=True)
    (out / "tiny.json").write_text(json.dumps(queries))
    (out / "tiny_corpus.json").write_text(json.dumps(corpus))
    (out / "tiny_openie.json").write_text(json.dumps({"docs": docs, "avg_ent_chars": 9.0, "avg_ent_words": 1.5}))


def cli_args(data: Path, cache: Path, run_dir: Path) -> list[str]:
    return [
        "dataset=demo", "dataset.name=tiny", "dataset.file_stem=tiny", f"data_dir={data}",
        f"openie.import_path={data / 'tiny_openie.json'}", "embedding=minilm",
        "retrieval=hipporag2", "retrieval.filter=none", "retrieval.query_batch_size=4",
        f"cache_dir={cache}", f"run_dir={run_dir}", "progress=false",
    ]


def child_env(**extra: str) -> dict:
    # One torch thread: on a small shared machine spinning OpenMP threads cost far more
    # than they gain for 30 passages (and every run uses the same setting).
    env = cli_zygote.child_env(**extra)
    if "HIPPORAG2_CRASH_AT" not in extra:
        env.pop("HIPPORAG2_CRASH_AT", None)
    return env


# ---- the test -----------------------------------------------------------------------

# Write boundaries in pipeline order; a killed run restarts and is killed at the next.
# ("embed_shard" twice: passages, then (in the restarted process) phrases.)
CRASH_CHAIN = [
    "data_loaded",
    "embed_shard",
    "embed_shard",
    "index_files_written",  # all index files written, manifest not yet
    "index_saved",
    "retriever_ready",
    "retrieval_block",  # first block appended to the checkpoint
    "retrieval_torn_write:2",  # half a line of the next block on disk
    "retrieval_written",
    "before_metrics",
    "metrics_written",  # before the checkpoint is removed
]


def _outputs(run_dir: Path) -> tuple[bytes, bytes]:
    return (run_dir / "retrieval.jsonl").read_bytes(), (run_dir / "graph_stats.json").read_bytes()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(pred, pid: int, timeout: float, poll: float = 0.02) -> bool:
    """Until `pred()` holds (True) or the process has gone or time is up (False)."""
    end = time.time() + timeout
    while time.time() < end and _alive(pid):
        if pred():
            return True
        time.sleep(poll)
    return False


def test_sigkill_anywhere_resumes_to_identical_outputs(tmp_path):
    data = tmp_path / "data"
    write_tiny_dataset(data)
    cli_zygote.shared_zygote(child_env())  # if not started yet, it imports while the reference runs

    def fork(argv, **extra):
        """A forked `python -m hipporag2.cli ARGV` (a `subprocess.Popen`-like handle)."""
        return cli_zygote.popen(argv, cwd=REPO, env=child_env(**extra))

    def run(argv, **extra):
        child = fork(argv, **extra)
        child.wait()
        return child.returncode, child.communicate()[1][-3000:]

    # 1. Uninterrupted reference: a genuine `python -m hipporag2.cli` process.
    #    It also carries credentials in llm.base_url and a key in the environment,
    #    which must not reach Hydra's saved config, the log or metrics.json.
    ref_dir = tmp_path / "ref"
    secrets = ("sk-reliabilitytest0123456789", "urlpassword42", "env-key-value-9876")
    url = f"https://user:{secrets[1]}@llm.example.invalid/v1?api_key={secrets[0]}"
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "hipporag2.cli", *cli_args(data, tmp_path / "cache_ref", ref_dir), f"llm.base_url='{url}'"],
        cwd=str(REPO), env=dict(child_env(), OPENAI_API_KEY=secrets[2]), capture_output=True, text=True, timeout=600,
    )
    ref_wall = time.time() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = [ref_dir / "run.log", ref_dir / "metrics.json", *sorted((ref_dir / ".hydra").glob("*.yaml"))]
    assert len(saved) == 5
    for f in saved:
        assert not any(s in f.read_text() for s in secrets), f"a secret leaked into {f}"
    assert "https://***@llm.example.invalid/v1?api_key=***" in (ref_dir / ".hydra" / "config.yaml").read_text()
    ref = _outputs(ref_dir)
    assert not (ref_dir / "retrieval.partial.jsonl").exists()
    ref_metrics = json.loads((ref_dir / "metrics.json").read_text())

    # 2. Killed at every write boundary in turn, each restart resuming the last.
    chain_dir, chain_cache = tmp_path / "chain", tmp_path / "cache_chain"
    argv = cli_args(data, chain_cache, chain_dir)
    for point in CRASH_CHAIN:
        status, err = run(argv, HIPPORAG2_CRASH_AT=point)
        assert status == -signal.SIGKILL, f"crash point {point!r} was not reached (exit {status}):\n{err}"
    status, err = run(argv)
    assert status == 0, err
    assert _outputs(chain_dir) == ref
    assert not (chain_dir / "retrieval.partial.jsonl").exists()
    log = (chain_dir / "run.log").read_text()
    assert "queries already done, resuming" in log
    assert "index cache hit" in log
    assert not list(chain_dir.glob("*.tmp-*"))
    metrics = json.loads((chain_dir / "metrics.json").read_text())
    assert metrics["recall@5"] == ref_metrics["recall@5"]

    # 3. Killed from outside at random moments of each stage (several seeds). The
    #    stage windows are timed first on an uninterrupted run forked the same way
    #    (the reference ran in a cold process, whose stage times say little about a
    #    fork), then each run waits for its stage's marker (written by the pipeline)
    #    and is killed after a random fraction of that window.
    def new_log(d: Path, offset: int) -> str:
        p = d / "run.log"
        return p.read_text()[offset:] if p.exists() else ""

    def fresh(p: Path, t: float) -> bool:
        return p.exists() and p.stat().st_mtime >= t

    markers = {
        "index": lambda d, t, off: "building index" in new_log(d, off),
        "retrieval": lambda d, t, off: fresh(d / "graph_stats.json", t),
    }
    cal_dir = tmp_path / "calibration"
    t_start = time.time() - 0.01
    child = fork(cli_args(data, tmp_path / "cache_calibration", cal_dir))
    pid = child.pid
    seen = {}
    while len(seen) < len(markers) and _alive(pid):
        for stage, marker in markers.items():
            if stage not in seen and marker(cal_dir, t_start, 0):
                seen[stage] = time.time()
        time.sleep(0.005)
    assert child.wait() == 0, child.communicate()[1][-3000:]
    t_end = time.time()
    assert set(seen) == set(markers), f"stage markers not seen in an uninterrupted run: {sorted(seen)}"
    windows = {"index": seen["retrieval"] - seen["index"], "retrieval": t_end - seen["retrieval"]}

    total_kills = 0
    for seed in range(3):
        rng = random.Random(seed)
        run_dir, cache = tmp_path / f"rand{seed}", tmp_path / f"cache_rand{seed}"
        argv = cli_args(data, cache, run_dir)
        kills = 0
        for stage, marker in markers.items():
            log_offset = len((run_dir / "run.log").read_text()) if (run_dir / "run.log").exists() else 0
            t_start = time.time() - 0.01
            child = fork(argv)
            pid = child.pid
            if _wait_for(lambda: marker(run_dir, t_start, log_offset), pid, timeout=ref_wall + 60, poll=0.005):
                time.sleep(rng.uniform(0, 0.6 * windows[stage]))
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            status = child.wait()
            kills += status == -signal.SIGKILL
            assert status in (0, -signal.SIGKILL), f"seed {seed} stage {stage}: exit {status}\n{child.communicate()[1][-3000:]}"
        status, err = run(argv)
        assert status == 0, err
        assert _outputs(run_dir) == ref, f"seed {seed}: outputs differ after {kills} kills"
        total_kills += kills
    windows_s = {k: round(v, 3) for k, v in windows.items()}
    assert total_kills >= 3, f"only {total_kills} of 6 random kills landed before the run ended (stage windows {windows_s} s)"
