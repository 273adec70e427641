"""The batched solver's two block operators side by side, and numba's start-up: the
numbers behind `ppr.choose_operator`'s threshold and `ppr_numpy.TieredOperator`'s budget.

    python -m benchmarks.bench_ppr_operator [--shared-index DIR] [--scales 0.01,0.05] [--queries 64] [--repeats 5]

For each graph (the shared MuSiQue set's index when `--shared-index` names its folder,
and synthetic MuSiQue-shaped graphs at `--scales`, `benchmarks/synthetic_graph.py`):
one solver per operator over the same preparation (one thread, each operator's own
block width), `--queries` resets (seed phrases plus weighted passages, as the
retriever makes them), solved `--repeats` times interleaved; CPU seconds per query
(the minimum over repeats: the load of a shared machine only adds), and the extra
CPU seconds per query and nonzero of S that numpy costs. numba's start-up: a fresh
process that imports the kernels and runs one compiled solve on a tiny graph, minus
the same process on numpy (median of 3). Their ratio is the queries x nonzeros at
which the start-up is paid back.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

STARTUP = """
import time
t = time.process_time()
import numpy as np
from hipporag2.retrieve.ppr import BatchedSolver
from hipporag2.graph.build import GraphEdges
rng = np.random.default_rng(0)
n, m = 64, 256
e = GraphEdges(n, rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m) + 0.1, np.zeros(m, dtype=np.int8))
BatchedSolver.from_edges(e, None, operator={op!r}).solve(rng.random((3, n)), 0.5)
print(time.process_time() - t)
"""


def startup_cpu(op: str) -> float:
    out = subprocess.run([sys.executable, "-c", STARTUP.format(op=op)], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[1]))
    return float(out.stdout.split()[-1])


def resets(n: int, n_passage: int, q: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    R = np.zeros((q, n))
    R[:, n - n_passage:] = 0.05 * rng.random((q, n_passage))
    for i in range(q):
        R[i, rng.integers(0, n - n_passage, 5)] = 1.0
    return R


def per_query(prep, R, repeats: int) -> dict:
    from hipporag2.retrieve.ppr import BatchedSolver

    solvers = {op: BatchedSolver.from_prepared(prep, n_threads=1, operator=op) for op in ("numpy", "compiled")}
    for s in solvers.values():
        s.solve(R[:2], 0.5)
    times = {op: [] for op in solvers}
    for _ in range(repeats):
        for op, s in solvers.items():
            t = time.process_time()
            s.solve(R, 0.5)
            times[op].append(time.process_time() - t)
    return {op: min(v) / len(R) for op, v in times.items()}


def main(argv=None) -> int:
    from hipporag2.retrieve.ppr import prepare_graph

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared-index", default=None, help="an index folder of the shared MuSiQue set (edges.npz, index.json)")
    ap.add_argument("--scales", default="0.01,0.05")
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    graphs = []
    if args.shared_index:
        folder = Path(args.shared_index)
        e = np.load(folder / "edges.npz")
        meta = json.loads((folder / "index.json").read_text())
        graphs.append(("shared MuSiQue set", meta["n_vertices"], e["source"], e["target"], e["weight"], len(meta["passages"])))
    from benchmarks.synthetic_graph import make_graph

    for scale in [float(s) for s in args.scales.split(",") if s]:
        sg = make_graph(scale=scale, seed=0)
        src, dst = np.array(sg.graph.get_edgelist()).T
        graphs.append((f"synthetic {scale}x", sg.n, src, dst, np.array(sg.graph.es["weight"]), sg.n_passage))
    print(f"Command: `python -m benchmarks.bench_ppr_operator {' '.join(argv if argv is not None else sys.argv[1:])}` "
          f"({time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f} at the start)")
    print()
    print("| graph | nodes | nonzeros of S | numpy CPU ms/query | compiled CPU ms/query | numpy extra, s per query x nonzero |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    extras = []
    for name, n, src, dst, w, n_passage in graphs:
        prep = prepare_graph(n, src, dst, w, 32, with_interval=True)
        t = per_query(prep, resets(n, n_passage, args.queries), args.repeats)
        extra = (t["numpy"] - t["compiled"]) / prep.S.nnz
        extras.append(extra)
        print(f"| {name} | {n} | {prep.S.nnz} | {t['numpy'] * 1e3:.2f} | {t['compiled'] * 1e3:.2f} | {extra:.2e} |", flush=True)
    start = {op: statistics.median(startup_cpu(op) for _ in range(3)) for op in ("numpy", "compiled")}
    cost = start["compiled"] - start["numpy"]
    print()
    print(f"numba's start-up (a process's CPU seconds: import, first compiled solve, minus the same on numpy): "
          f"{cost:.2f} s ({start['compiled']:.2f} vs {start['numpy']:.2f}); paid back after "
          f"{cost / statistics.median(extras):.2e} queries x nonzeros at the median extra cost "
          f"(`ppr.TIERED_BUDGET`).")
    load = os.getloadavg()[0]
    print(f"Load average at the end: {load:.1f}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
