"""pytest plugin: wall and CPU seconds of every test, summed per file (docs/testing.md).

On a shared machine the wall clock of a test says more about the neighbours than about
the test; the CPU seconds it costs (this process plus every child process it waited
for: CLI subprocesses, vLLM engines, servers) do not depend on the load, and on a quiet
2-core machine the wall time of a file lies between CPU/2 (both cores busy) and CPU
(one core busy) plus whatever it sleeps.

    .venv/bin/python -m pytest -p benchmarks.pytest_cputime ...        # table at the end
    HIPPORAG2_TEST_TIMES=times.json ... -p benchmarks.pytest_cputime   # and every test as JSON

Each test is charged for its setup (fixtures it is the first to need, e.g. a module's
engine), call and teardown.
"""
from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from typing import Dict, List

import pytest

_ROWS: List[Dict[str, object]] = []


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, c0 = time.perf_counter(), _cpu()
    yield
    _ROWS.append({"nodeid": item.nodeid, "file": item.nodeid.split("::")[0],
                  "wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(_cpu() - c0, 2)})


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


def pytest_terminal_summary(terminalreporter):
    if not _ROWS:
        return
    files = per_file(_ROWS)
    tr = terminalreporter
    tr.write_sep("=", "wall and CPU seconds per file (CPU: this process + waited-for children)")
    for r in files:
        tr.write_line(f"{r['cpu_s']:8.1f} cpu  {r['wall_s']:8.1f} wall  {r['tests']:4d} tests  {r['file']}")
    tr.write_line(f"{sum(float(r['cpu_s']) for r in files):8.1f} cpu  {sum(float(r['wall_s']) for r in files):8.1f} wall  "
                  f"{sum(int(r['tests']) for r in files):4d} tests  total; load average {os.getloadavg()[0]:.1f} now")
    target = os.environ.get("HIPPORAG2_TEST_TIMES")
    if target:
        with open(target, "w", encoding="utf-8") as f:
            json.dump({"load_at_end": os.getloadavg(), "files": files, "tests": _ROWS}, f, indent=1)
