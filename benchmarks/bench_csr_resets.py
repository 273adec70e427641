"""The batched solver on a saved index with its resets as scipy CSR vs `csr.CsrMatrix`.

    python -m benchmarks.bench_csr_resets INDEX_DIR [--queries 128] [--repeats 5]

The retriever handed the solver scipy CSR resets until round 5; now it hands over
`hipporag2.retrieve.csr.CsrMatrix` (no scipy import). Both go to the same operator
(compiled at MuSiQue scale, numpy on the shared set) with the same arrays, so the answers
must be bitwise equal and the time the same. One process: the solver is loaded from
INDEX_DIR's saved preparation (`ppr/`; use a copy of a kept index, nothing is written if
it is there), HippoRAG-shaped resets (5 phrase seeds, 0.05 x a random score on every
passage) are solved in pieces of block_size x threads, the passage columns out, the two
kinds interleaved `--repeats` times; medians of wall and CPU ms per query are printed with
the load average.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index")
    ap.add_argument("--queries", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    import scipy.sparse as sp

    from hipporag2.graph import store
    from hipporag2.retrieve.csr import CsrMatrix
    from hipporag2.retrieve.ppr import BatchedSolver

    index = store.load_index(args.index)
    solver = BatchedSolver.from_edges(index.edges, index.path / "ppr")
    q = args.queries
    rng = np.random.default_rng(0)
    n_phr, n = index.n_phrases, index.n_phrases + index.n_passages
    dense = np.zeros((q, n))
    for r in dense:
        r[rng.choice(n_phr, 5, replace=False)] = rng.uniform(0.2, 1.0, 5)
        r[n_phr:] = 0.05 * rng.random(n - n_phr)
    R = sp.csr_matrix(dense)
    del dense
    piece = solver.block_size * solver.n_threads
    kinds = {"scipy CSR": lambda a, b: R[a:b],
             "csr.CsrMatrix": lambda a, b: CsrMatrix(R.indptr[a : b + 1] - R.indptr[a],
                                                     R.indices[R.indptr[a] : R.indptr[b]],
                                                     R.data[R.indptr[a] : R.indptr[b]], (b - a, n))}
    outs = {k: np.empty((q, n - n_phr)) for k in kinds}

    def run(kind):
        for s in range(0, q, piece):
            e = min(s + piece, q)
            solver.solve(kinds[kind](s, e), 0.5, out=outs[kind][s:e], columns=slice(n_phr, n))

    run("scipy CSR")  # untimed: workspaces, page cache
    times = {k: [] for k in kinds}
    for _ in range(args.repeats):
        for kind in kinds:
            load = os.getloadavg()[0]
            w, c = time.perf_counter(), time.process_time()
            run(kind)
            times[kind].append((time.perf_counter() - w, time.process_time() - c, load))
    print(f"Command: `python -m benchmarks.bench_csr_resets {args.index} --queries {q} --repeats {args.repeats}` "
          f"(operator {solver.operator}, {solver.prepared.S.nnz:,} nonzeros, block {solver.block_size}, "
          f"{solver.n_threads} threads)\n")
    print("| resets as | wall ms / query (median) | CPU ms / query (median) | load averages |")
    print("| --- | ---: | ---: | --- |")
    for kind, v in times.items():
        print(f"| {kind} | {1e3 * statistics.median(x[0] for x in v) / q:.2f} | "
              f"{1e3 * statistics.median(x[1] for x in v) / q:.2f} | {', '.join(f'{x[2]:.1f}' for x in v)} |")
    same = np.array_equal(*outs.values())
    print(f"\nAnswers bitwise equal: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
