"""Wall and CPU seconds by stage, for the library's insert/delete (`HippoRAG.last_timings`)
and the insert benchmark: where an update spends its time, stage by stage.

CPU time is the process's (all threads), so a BLAS or numba stage on several cores
shows more CPU than wall seconds, and a stage that waits (disk, a loaded machine)
shows less.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterator


@dataclass
class StageTime:
    wall_s: float = 0.0
    cpu_s: float = 0.0


@dataclass
class StageClock:
    stages: Dict[str, StageTime] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        w, c = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            t = self.stages.setdefault(name, StageTime())
            t.wall_s += time.perf_counter() - w
            t.cpu_s += time.process_time() - c

    def merge(self, other: "StageClock", prefix: str = "") -> None:
        for name, t in other.stages.items():
            mine = self.stages.setdefault(prefix + name, StageTime())
            mine.wall_s += t.wall_s
            mine.cpu_s += t.cpu_s
