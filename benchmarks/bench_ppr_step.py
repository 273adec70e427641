"""The batched PPR's compiled kernels against another tree's, side by side in one process.

    python -m benchmarks.bench_ppr_step INDEX_DIR --baseline-tree DIR [--baseline-index DIR2]
                                        [--queries 128] [--repeats 5] [--out FILE]

INDEX_DIR is a saved index whose batched-solver preparation is in INDEX_DIR/ppr/<key>/
(e.g. `bench_query --keep`'s scale-1 index); nothing there is written. DIR holds another
copy of the package (e.g. `git archive main hipporag2 | tar -x -C DIR`): its
`hipporag2/retrieve/ppr_kernels.py` is imported under another name (numba caches it
beside that file), and a second solver over the same preparation runs with those
kernels (`_Operator.k`); everything else (block scheduling, refinement) is this tree's.
So the comparison is of the kernels alone, unless `--baseline-index DIR2` gives the
baseline solver another saved preparation of the same graph (e.g. one of an older
format: another node order); pass this tree as DIR to compare the preparations alone.

Measured, interleaved `--repeats` times: (1) each kernel's pass over one block of 32
columns, alone on one thread (`chebyshev_step32` on the widened float32 panels,
`residual_in_place` on the float64 ones), median CPU ms of that thread; (2) the whole PPR solve of
`--queries` MuSiQue-like resets (5 phrase seeds, 0.05 x a random score on every
passage, the passage columns out, 2 threads), median wall and CPU ms per query, and
the two answers' largest L1 distance and top-200 ranking agreement. CPU time is less
distorted by other processes on a shared machine than wall time; the load average is
printed per repeat.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.report import emit


def load_kernels(tree: Path):
    """The other tree's ppr_kernels module, imported as `baseline_ppr_kernels`."""
    path = tree / "hipporag2" / "retrieve" / "ppr_kernels.py"
    if not path.is_file():
        raise SystemExit(f"--baseline-tree {tree}: no {path.relative_to(tree)} there")
    spec = importlib.util.spec_from_file_location("baseline_ppr_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def median_range(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index")
    ap.add_argument("--baseline-tree", required=True)
    ap.add_argument("--baseline-index", default=None, help="the baseline's index (its saved preparation); default INDEX_DIR")
    ap.add_argument("--queries", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--passages", type=int, default=None, help="passage nodes (the last ones); default from index.json")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from hipporag2.retrieve import ppr_kernels
    from hipporag2.retrieve.ppr import BatchedSolver, rankings_agree
    from hipporag2.retrieve.ppr_store import load_prepared

    tree = Path(args.baseline_tree).resolve()
    base_k = ppr_kernels if tree == Path(ppr_kernels.__file__).resolve().parents[2] else load_kernels(tree)

    def prepared(index: str):
        folders = [p for p in (Path(index) / "ppr").iterdir() if (p / "manifest.json").is_file()]
        if len(folders) != 1:
            raise SystemExit(f"expected one saved preparation under {index}/ppr, found {len(folders)}")
        prep = load_prepared(folders[0])
        if prep is None:
            raise SystemExit(f"{folders[0]}: not a preparation this tree can load (format?)")
        return prep

    prep = prepared(args.index)
    base_prep = prepared(args.baseline_index) if args.baseline_index else prep
    if (base_prep.n, base_prep.S.nnz) != (prep.n, prep.S.nnz):
        raise SystemExit("the two preparations are not of the same graph")
    n = prep.n
    n_pass = args.passages
    if n_pass is None:
        n_pass = len(json.loads((Path(args.index) / "index.json").read_text())["passages"])
    solvers = {"baseline": BatchedSolver.from_prepared(base_prep, operator="compiled"),
               "this tree": BatchedSolver.from_prepared(prep, operator="compiled")}
    solvers["baseline"].op.k = base_k
    kernels = {"baseline": base_k, "this tree": ppr_kernels}
    rng = np.random.default_rng(0)
    q = args.queries
    R = np.zeros((q, n))
    for i in range(q):
        R[i, rng.choice(n - n_pass, 5, replace=False)] = rng.random(5)
        R[i, n - n_pass:] = 0.05 * rng.random(n_pass)
    cols = slice(n - n_pass, n)
    for s in solvers.values():
        s.solve(R[:64], 0.5, columns=cols)  # kernels loaded, interval and panels ready
        s.release_workspaces()

    # (1) one pass of each kernel over a block of 32, one thread, each side on its own panels
    na, m = prep.n_active, 32
    x32, xp32, b32, r32 = (rng.random((na, m), dtype=np.float32) for _ in range(4))
    x64, r64 = rng.random((na, m)), np.empty((na, m))
    b64 = rng.random((na, m))
    l1 = np.empty(m)
    f = np.float32

    def step32(name):  # omega = 0 leaves x_prev as it is: the same pass every time
        op, w = solvers[name].op, solvers[name].sqrt_deg
        kernels[name].chebyshev_step(op.wide.indptr, op.wide.indices, op.data32, f(0.5), x32, xp32, b32, w, f(1.0),
                                     f(0.0), r32, l1)

    def residual(name):
        op, w = solvers[name].op, solvers[name].sqrt_deg
        np.copyto(r64, b64)
        kernels[name].residual_in_place(op.wide.indptr, op.wide.indices, op.wide.data, 0.5, x64, w, r64, l1)

    passes = {"chebyshev_step32": step32, "residual_in_place": residual}
    same_prep = base_prep is prep
    if same_prep:  # same arithmetic, same bits: check it once
        outs = {}
        for name in kernels:
            outs[name] = []
            for fn in passes.values():
                fn(name)
                outs[name] += [r32.copy(), xp32.copy()] if fn is step32 else [r64.copy()]
        same_bits = all(np.array_equal(a, b) for a, b in zip(outs["baseline"], outs["this tree"]))
    pass_ms = {(pn, name): [] for pn in passes for name in kernels}
    wall = {name: [] for name in solvers}
    cpu = {name: [] for name in solvers}
    answers = {}
    loads = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for pn, fn in passes.items():
            for name in kernels:
                for _ in range(3):  # CPU time of this thread: the time it ran, not the time it waited
                    t = time.thread_time()
                    fn(name)
                    pass_ms[pn, name].append((time.thread_time() - t) * 1e3)
        for name, s in solvers.items():
            out = np.empty((q, n_pass))
            t, c = time.perf_counter(), time.process_time()
            s.solve(R, 0.5, out=out, columns=cols)
            wall[name].append((time.perf_counter() - t) / q * 1e3)
            cpu[name].append((time.process_time() - c) / q * 1e3)
            s.release_workspaces()  # as the retriever does after each block
            answers[name] = out
    argv_s = " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"Command: `python -m benchmarks.bench_ppr_step {argv_s}`", "",
             f"{prep.n_active:,} nodes with edges, {prep.S.nnz:,} nonzeros in S, "
             f"{len(solvers['this tree'].op.wide.indptr)} widened panels; "
             f"{q} queries x {args.repeats} repeats, d = 0.5, 2 threads; load average per repeat: "
             f"{', '.join(f'{x:.1f}' for x in loads)}", "",
             "(1) one kernel pass over a block of 32 columns, one thread: CPU ms of that thread, median (min-max) of 3 x repeats", "",
             "| pass | baseline | this tree | baseline / this |", "| --- | ---: | ---: | ---: |"]
    for pn in passes:
        a, b = pass_ms[pn, "baseline"], pass_ms[pn, "this tree"]
        lines.append(f"| {pn} | {median_range(a)} | {median_range(b)} | "
                     f"{statistics.median(a) / statistics.median(b):.2f}x |")
    bits = (f"Both kernels' outputs bitwise identical: {same_bits}." if same_prep else
            "The two sides' passes are over different preparations (node orders): bits not compared.")
    lines += ["", bits, "",
              f"(2) whole PPR solve, {q} queries, ms per query, median (min-max)", "",
              "| kernels | wall | CPU |", "| --- | ---: | ---: |"]
    for name in solvers:
        lines.append(f"| {name} | {median_range(wall[name])} | {median_range(cpu[name])} |")
    diff = float(np.abs(answers["baseline"] - answers["this tree"]).sum(axis=1).max())
    agree = sum(rankings_agree(answers["baseline"][i], answers["this tree"][i], k=200) for i in range(q))
    mw = statistics.median(wall["baseline"]) / statistics.median(wall["this tree"])
    mc = statistics.median(cpu["baseline"]) / statistics.median(cpu["this tree"])
    lines += ["", f"baseline / this tree: wall {mw:.2f}x, CPU {mc:.2f}x. Largest L1 distance between the two "
              f"answers {diff:.1e}; top-200 rankings agree on {agree}/{q}."]
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
