"""The numpy operator's PPR on the shared MuSiQue index: its float32 rounds' parts one by
one, and its block size, in ONE process (interleaved repeats, medians and minima).

    python -m benchmarks.bench_ppr_numpy_steps --index DIR [--repeats 10] [--block-sizes 8,16,32,50]

The solve is `bench_shared_parts`' `ppr` part: 100 HippoRAG-shaped resets (5 phrase
seeds, a 0.05 weight spread over every passage by a seeded RNG) as CSR rows, solved in
pieces of block_size x threads at d = 0.5 over the passage columns, as the retriever
calls it, on the numpy operator (`operator="numpy"`, 2 threads). Each variant is its own
solver (own workspaces, so none pays another's fresh pages), all over the index's saved
preparation; the first solve of each is untimed.

Variants (cumulative), each switching one of this round's changes off in the current tree:

* `every step` -- every float32 step computes its residual and L1 norms (the solver
  without `chebyshev_advance32`), each float64 residual regathers b from the resets
  (KEEP_RHS_BYTES = 0), `_axpy` as a product with a I through scipy's CSR loop: the
  fourth round's arithmetic;
* `check schedule` -- residuals only where a round may stop (`BatchedSolver._chebyshev32`);
* `+ kept b` -- small blocks keep b (`BatchedSolver._keeps_rhs`);
* `+ numpy axpy` -- the current tree.

`--block-sizes` times the current tree at those block sizes instead (ppr_numpy.BLOCK_SIZE).
Wall and CPU seconds of the whole 100-query solve; the load average is printed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def resets(index):
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    n_phr, n = index.n_phrases, index.n_phrases + index.n_passages
    rows = []
    for _ in range(100):
        r = np.zeros(n)
        r[rng.choice(n_phr, 5, replace=False)] = rng.uniform(0.2, 1.0, 5)
        r[n_phr:] = 0.05 * rng.random(n - n_phr)
        rows.append(r)
    return sp.csr_matrix(np.array(rows)), slice(n_phr, n)


def csr_axpy(op):
    """The fourth round's `NumpyOperator._axpy`: y += a x as a product with a I."""
    from hipporag2.retrieve import ppr_numpy

    diag = np.arange(op.n_active + 1, dtype=op.S.indices.dtype)

    def axpy(a, x, y):
        n, m = x.shape
        ppr_numpy._csr_matvecs(n, n, m, diag, diag, np.full(n, a, dtype=y.dtype), x.ravel(), y.ravel())

    return axpy


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--block-sizes", default=None, help="comma-separated block sizes to time instead of the variants")
    args = ap.parse_args(argv)
    if not (Path(args.index) / "manifest.json").is_file():
        print(f"no index at {args.index}; nothing to measure")
        return 0
    from hipporag2.graph import store
    from hipporag2.retrieve import ppr
    from hipporag2.retrieve.ppr import BatchedSolver

    index = store.load_index(args.index)
    R, cols = resets(index)
    width = cols.stop - cols.start

    def solver(advance=True, axpy=True):
        s = BatchedSolver.from_edges(index.edges, index.path / "ppr", operator="numpy", n_threads=2)
        if not advance:
            s.op.chebyshev_advance32 = None
        if not axpy:
            s.op._axpy = csr_axpy(s.op)
        return s

    keep_default = ppr.KEEP_RHS_BYTES
    if args.block_sizes:
        sizes = [int(b) for b in args.block_sizes.split(",")]
        shared = solver()
        variants = {f"block {b}": (shared, keep_default, b) for b in sizes}
    else:
        variants = {"every step": (solver(False, False), 0, None),
                    "check schedule": (solver(True, False), 0, None),
                    "+ kept b": (solver(True, False), keep_default, None),
                    "+ numpy axpy": (solver(), keep_default, None)}
    outs = {}

    def run(name):
        s, keep, block = variants[name]
        ppr.KEEP_RHS_BYTES = keep
        if block is not None:
            if s.block_size != block:
                s.release_workspaces()  # a workspace of the new width (its pages refilled untimed below)
            s.block_size = block
        piece = s.block_size * s.n_threads
        out = outs.setdefault(name, np.empty((R.shape[0], width)))
        for start in range(0, R.shape[0], piece):
            s.solve(R[start : start + piece], 0.5, out=out[start : start + piece], columns=cols)

    got = {name: [] for name in variants}
    loads = []
    for rep in range(args.repeats):
        for name in variants:
            if rep == 0 or args.block_sizes:
                run(name)  # untimed: first solve, or the block width just changed
            loads.append(os.getloadavg()[0])
            t, c = time.perf_counter(), time.process_time()
            run(name)
            got[name].append((time.perf_counter() - t, time.process_time() - c))
    ppr.KEEP_RHS_BYTES = keep_default
    print(f"Command: `python -m benchmarks.bench_ppr_numpy_steps {' '.join(argv if argv is not None else sys.argv[1:])}` "
          f"({time.strftime('%Y-%m-%d %H:%M')}, load average {min(loads):.1f}-{max(loads):.1f})")
    print()
    print("| variant | wall ms median | CPU ms median | CPU ms min | max L1 vs the first |")
    print("| --- | ---: | ---: | ---: | ---: |")
    first = next(iter(outs.values()))
    for name, v in got.items():
        diff = np.abs(outs[name] - first).sum(axis=1).max()
        print(f"| {name} | {statistics.median(a for a, _ in v) * 1e3:.0f} | {statistics.median(c for _, c in v) * 1e3:.0f} "
              f"| {min(c for _, c in v) * 1e3:.0f} | {diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
