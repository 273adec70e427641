"""pytest plugin: wall and CPU seconds of every test, summed per file (docs/testing.md).

On a shared machine the wall clock of a test says more about the neighbours than about
the test; the CPU seconds it costs (this process plus every child process it waited
for: CLI subprocesses, vLLM engines, servers) do not depend on the load, and on a quiet
2-core machine the wall time of a file lies between CPU/2 (both cores busy) and CPU
(one core busy) plus whatever it sleeps.

    .venv/bin/python -m pytest -p benchmarks.pytest_cputime ...        # table at the end
    HIPPORAG2_TEST_TIMES=times.json ... -p benchmarks.pytest_cputime   # and every test as JSON

Each test is charged for its setup (fixtures it is the first to need, e.g. a module's
engine), call and teardown. Under pytest-xdist (`make test` runs two workers) each
worker measures its own tests and sends the numbers with the test's last report, so
the controller prints one table for the whole session; a file's wall seconds are then
the sum over its tests, which may have run beside another worker's, and the session's
own wall time is printed below the table.
"""
from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from typing import Callable, Dict, List

import pytest

_ROWS: List[Dict[str, object]] = []
# CPU seconds of this process's children that RUSAGE_CHILDREN does not hold yet: a child
# that forks the test's runs and lives on (tests/cli_zygote.py's zygote, reaped at the
# session's end) reports each run's CPU when it ends; its callable is added here, and
# drops what it reported once the zygote is reaped (then RUSAGE_CHILDREN has it).
EXTRA_CPU: List[Callable[[], float]] = []
_KEY = "hipporag2_test_seconds"  # the user property that carries a test's numbers
_START: Dict[str, float] = {}


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + sum(f() for f in EXTRA_CPU)


def pytest_sessionstart(session):
    _START["wall"] = time.perf_counter()
    _START["epoch"] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item._hipporag2_t0 = (time.perf_counter(), _cpu(), time.time())  # read when the teardown report is made
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    start = getattr(item, "_hipporag2_t0", None)
    if call.when != "teardown" or start is None:
        return
    t0, c0, epoch0 = start
    report = outcome.get_result()
    report.user_properties.append((_KEY, {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(_cpu() - c0, 2),
                                          "start": round(epoch0, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}))


def pytest_runtest_logreport(report):
    """Called in the process that prints the summary (the xdist controller, or pytest itself)."""
    if report.when != "teardown":
        return
    for key, value in report.user_properties:
        if key == _KEY:
            _ROWS.append({"nodeid": report.nodeid, "file": report.nodeid.split("::")[0],
                          "wall_s": value["wall_s"], "cpu_s": value["cpu_s"], "worker": value.get("worker", ""),
                          "start_s": round(float(value.get("start", 0.0)) - _START.get("epoch", 0.0), 1)})


def per_file(rows: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """Per-file totals (tests, wall, CPU), most CPU first."""
    acc: Dict[str, Dict[str, float]] = defaultdict(lambda: {"tests": 0, "wall_s": 0.0, "cpu_s": 0.0})
    for r in rows:
        a = acc[str(r["file"])]
        a["tests"] += 1
        a["wall_s"] += float(r["wall_s"])
        a["cpu_s"] += float(r["cpu_s"])
    out = [{"file": f, "tests": int(a["tests"]), "wall_s": round(a["wall_s"], 1), "cpu_s": round(a["cpu_s"], 1)}
           for f, a in acc.items()]
    return sorted(out, key=lambda r: -float(r["cpu_s"]))


def worker_lines(rows: List[Dict[str, object]]) -> List[str]:
    """Per xdist worker: its tests' wall and CPU seconds and when its last test ended
    (seconds after the session started), which shows how long a core was left idle."""
    acc: Dict[str, Dict[str, float]] = defaultdict(lambda: {"tests": 0, "wall_s": 0.0, "cpu_s": 0.0, "end_s": 0.0})
    for r in rows:
        if not r.get("worker"):
            continue
        a = acc[str(r["worker"])]
        a["tests"] += 1
        a["wall_s"] += float(r["wall_s"])
        a["cpu_s"] += float(r["cpu_s"])
        a["end_s"] = max(a["end_s"], float(r["start_s"]) + float(r["wall_s"]))
    return [f"  worker {w}: {int(a['tests'])} tests, {a['wall_s']:.1f} s wall, {a['cpu_s']:.1f} cpu, last test ended at {a['end_s']:.1f} s"
            for w, a in sorted(acc.items())]


def pytest_terminal_summary(terminalreporter, config):
    if not _ROWS or hasattr(config, "workerinput"):
        return
    files = per_file(_ROWS)
    tr = terminalreporter
    tr.write_sep("=", "wall and CPU seconds per file (CPU: this process + waited-for children)")
    for r in files:
        tr.write_line(f"{r['cpu_s']:8.1f} cpu  {r['wall_s']:8.1f} wall  {r['tests']:4d} tests  {r['file']}")
    tr.write_line(f"{sum(float(r['cpu_s']) for r in files):8.1f} cpu  {sum(float(r['wall_s']) for r in files):8.1f} wall  "
                  f"{sum(int(r['tests']) for r in files):4d} tests  total; load average {os.getloadavg()[0]:.1f} now")
    workers = getattr(config.option, "numprocesses", None) or 0
    session_wall = time.perf_counter() - _START.get("wall", time.perf_counter())
    tr.write_line(f"session wall {session_wall:.1f} s on {workers or 'no'} xdist workers")
    for line in worker_lines(_ROWS):
        tr.write_line(line)
    target = os.environ.get("HIPPORAG2_TEST_TIMES")
    if target:
        with open(target, "w", encoding="utf-8") as f:
            json.dump({"load_at_end": os.getloadavg(), "session_wall_s": round(session_wall, 1), "xdist_workers": workers,
                       "files": files, "tests": _ROWS}, f, indent=1)
