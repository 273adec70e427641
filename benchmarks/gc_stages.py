"""Full garbage collections by stage in one CLI run on the shared MuSiQue set.

    python -m benchmarks.gc_stages --cache-dir DIR [--runs 2] [--data-dir ../shared/data] [--tree DIR]

A full (generation 2) collection walks every tracked object, 0.06-0.16 s here once the
OpenIE records and the index are loaded; where one lands depends on how many objects
each stage makes. This runs the same CLI command as `benchmarks/bench_shared` (batched,
reusing the cache) in a child process per run whose stages are instrumented: each full
collection is printed with its duration and the pipeline stage it ran in ("-" outside
the timed stages, e.g. Hydra's config handling). `--tree` runs another copy of the
package (as bench_shared's --baseline-tree), to compare where its collections land.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""
    import gc, runpy, sys, time
    from contextlib import contextmanager
    from hipporag2 import pipeline
    now = ["-"]
    real = pipeline.Timings.stage
    @contextmanager
    def stage(self, name):
        outer, now[0] = now[0], name
        try:
            with real(self, name):
                yield
        finally:
            now[0] = outer
    pipeline.Timings.stage = stage
    started = {}
    def on_gc(phase, info):
        if info["generation"] != 2:
            return
        if phase == "start":
            started["t"] = time.perf_counter()
        else:
            ms = 1000 * (time.perf_counter() - started["t"])
            print(f"GC2 {now[0]} {ms:.0f}", file=sys.stderr, flush=True)
    gc.callbacks.append(on_gc)
    sys.argv = ["hipporag2.cli"] + sys.argv[1:]
    runpy.run_module("hipporag2.cli", run_name="__main__")
""")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--tree", default=None, help="a folder holding another copy of hipporag2/")
    args = ap.parse_args(argv)
    data = Path(args.data_dir).resolve()
    if not (data / "musique_train.json").is_file():
        print(f"shared MuSiQue data not found in {data}; nothing to measure")
        return 0
    tree = Path(args.tree).resolve() if args.tree else Path(__file__).resolve().parents[1]
    openie = data / "openie" / "musique_train_openie_gpt-3.5-turbo-1106.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"),
               PYTHONPATH=str(tree))
    print(f"Command: `python -m benchmarks.gc_stages --cache-dir {args.cache_dir} --runs {args.runs}"
          + (f" --tree {args.tree}" if args.tree else "") + "`")
    print()
    print("| run | stage | full collection ms | load average before |")
    print("| --- | --- | ---: | ---: |")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            load = os.getloadavg()[0]
            cmd = [sys.executable, "-c", CHILD, "dataset=musique_train", f"data_dir={data}",
                   f"openie.import_path={openie}", "embedding=minilm", f"cache_dir={Path(args.cache_dir).resolve()}",
                   f"run_dir={Path(tmp) / str(run)}", "progress=false", "retrieval=hipporag2", "retrieval.filter=none",
                   "retrieval.ppr_solver=batched"]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tree))
            if done.returncode:
                raise SystemExit(f"run failed: {done.stderr[-2000:]}")
            for line in done.stderr.splitlines():
                if line.startswith("GC2 "):
                    _, where, ms = line.split()
                    print(f"| {run + 1} | {where} | {ms} | {load:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
