"""Mixed-precision vs float64 Chebyshev PPR on one prepared graph, side by side in one process.

    python -m benchmarks.bench_mixed INDEX_DIR [--queries 128] [--repeats 5] [--out FILE]

INDEX_DIR is a saved index whose batched-solver preparation is in INDEX_DIR/ppr/<key>/
(e.g. `bench_query --keep`'s scale-1 index); nothing there is written. Both solvers share
that preparation; the only difference is `BatchedSolver(mixed_precision=...)`. Resets are
MuSiQue-like (5 phrase seeds, 0.05 x a random dense score on every passage), the answers
are the passage columns, as the retriever asks. The two run interleaved, `--repeats`
times; reported: median wall and CPU milliseconds per query (CPU time is less distorted
by other processes on a shared machine), operator passes per block of 32, and the two
answers' largest L1 distance and top-200 ranking agreement (both are within 1e-11 of the
exact PPR, so within 2e-11 of each other).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.report import emit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index")
    ap.add_argument("--queries", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--passages", type=int, default=None, help="passage nodes (the last ones); default from index.json")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import json

    from hipporag2.retrieve.ppr import BatchedSolver, rankings_agree
    from hipporag2.retrieve.ppr_store import load_prepared

    folders = [p for p in (Path(args.index) / "ppr").iterdir() if (p / "manifest.json").is_file()]
    if len(folders) != 1:
        print(f"expected one saved preparation under {args.index}/ppr, found {len(folders)}", file=sys.stderr)
        return 2
    prep = load_prepared(folders[0])
    n = prep.n
    n_pass = args.passages
    if n_pass is None:
        n_pass = len(json.loads((Path(args.index) / "index.json").read_text())["passages"])
    solvers = {"float64": BatchedSolver.from_prepared(prep, mixed_precision=False, operator="compiled"),
               "mixed": BatchedSolver.from_prepared(prep, mixed_precision=True, operator="compiled")}
    rng = np.random.default_rng(0)
    q = args.queries
    R = np.zeros((q, n))
    for i in range(q):
        R[i, rng.choice(n - n_pass, 5, replace=False)] = rng.random(5)
        R[i, n - n_pass:] = 0.05 * rng.random(n_pass)
    cols = slice(n - n_pass, n)
    passes = {name: {} for name in solvers}
    for name, s in solvers.items():
        s.solve(R[:64], 0.5, columns=cols)  # kernels loaded, interval and panels ready
        for meth in ("chebyshev_step", "chebyshev_step32", "residual_in_place"):
            orig = getattr(s.op, meth)

            def wrap(*a, _o=orig, _c=passes[name], _m=meth):
                _c[_m] = _c.get(_m, 0) + 1
                return _o(*a)

            setattr(s.op, meth, wrap)
    wall = {name: [] for name in solvers}
    cpu = {name: [] for name in solvers}
    outs = {}
    loads = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for name, s in solvers.items():
            out = np.empty((q, n_pass))
            t, c = time.perf_counter(), time.process_time()
            s.solve(R, 0.5, out=out, columns=cols)
            wall[name].append((time.perf_counter() - t) / q * 1e3)
            cpu[name].append((time.process_time() - c) / q * 1e3)
            outs[name] = out
    blocks = args.repeats * -(-q // solvers["mixed"].block_size)
    lines = [f"Command: `python -m benchmarks.bench_mixed {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             f"{prep.n_active:,} nodes with edges, {prep.S.nnz:,} nonzeros, {q} queries x {args.repeats} repeats, "
             f"d = 0.5, 2 threads; load average per repeat: {', '.join(f'{x:.1f}' for x in loads)}", "",
             "| solver | wall ms/query (median, min-max) | CPU ms/query (median, min-max) | passes per block of 32 |",
             "| --- | ---: | ---: | --- |"]
    for name in solvers:
        per = ", ".join(f"{v / blocks:.1f} {k}" for k, v in sorted(passes[name].items()))
        lines.append(f"| {name} | {statistics.median(wall[name]):.2f} ({min(wall[name]):.2f}-{max(wall[name]):.2f}) | "
                     f"{statistics.median(cpu[name]):.2f} ({min(cpu[name]):.2f}-{max(cpu[name]):.2f}) | {per} |")
    diff = float(np.abs(outs["mixed"] - outs["float64"]).sum(axis=1).max())
    agree = sum(rankings_agree(outs["float64"][i], outs["mixed"][i], k=200) for i in range(q))
    lines += ["", f"float64 / mixed: wall {statistics.median(wall['float64']) / statistics.median(wall['mixed']):.2f}x, "
              f"CPU {statistics.median(cpu['float64']) / statistics.median(cpu['mixed']):.2f}x. "
              f"Largest L1 distance between the two answers {diff:.1e}; top-200 rankings agree on {agree}/{q}."]
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
