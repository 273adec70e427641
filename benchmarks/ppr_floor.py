"""How fast per-query PPR can get on this machine: a floor, beside prpack and ours.

    python -m benchmarks.ppr_floor                # MuSiQue-sized, as in results/perf
    python -m benchmarks.ppr_floor --scale 0.05   # a few seconds

Issue 5 asks for per-query retrieval 20x faster than one prpack call. Any exact
solver that works by sparse products (power iteration, CG, Chebyshev, GMRES...) pays
at least k products per query, k set by the spectrum of S = D^-1/2 W D^-1/2 and the
accuracy asked for, and each product costs at least what the sparse-times-block
kernel costs on this machine. Their product is a floor under every such solver. This
script measures its parts in one run on one graph, beside the two real solvers:

1. prpack per query, called as the reference calls it (``PrpackSolver``);
2. ``BatchedSolver`` per query, and how many column-products it used per query (both
   solvers write into an output array already in use, as in a run's later blocks);
3. one product ``x - d S x`` of ``BatchedSolver``'s operator, per column, for several
   block sizes, with as many blocks at once as the solver runs threads;
4. S's spectrum without the eigenvalue 1 (``eigsh`` with each connected component's
   top eigenvector sqrt(deg) projected out, as a solver can do for free): [s_min, s_max];
5. k_min: the fewest products for which the best polynomial on that interval reduces
   a residual by eps = `ppr_residual_limit` (tol / d), which is what ``BatchedSolver.solve``'s stopping rule
   asks of a reset with no mass on nodes without edges (more mass there asks a little
   more). k products give the k-th iterate and its residual (the first iterate,
   gamma b, is free; the residual that checks the last one comes with it). When
   the spectrum fills the interval up to its ends, as the extreme eigenvalues printed
   show, no Krylov method does much better than this Chebyshev bound for a generic
   reset vector; it is an estimate of the floor, not a proof.

floor per query = k_min x (cheapest product per column). The report puts the ratio
prpack / floor beside the 20x asked for.
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.sparse.linalg import eigsh

from benchmarks.bench_ppr import Clock, log, machine_line
from benchmarks.report import emit
from benchmarks.synthetic_graph import make_graph, make_queries
from hipporag2.retrieve.ppr import (
    BatchedSolver,
    OutputBuffer,
    PrpackSolver,
    chebyshev_steps,
    deflated_operator,
    ppr_residual_limit,
)

DAMPING, PASSAGE_WEIGHT = 0.5, 0.05


class CountingOperator:
    """Wraps BatchedSolver's operator to count the columns its products touch."""

    def __init__(self, op):
        self.op, self.S, self.columns = op, op.S, 0

    def __call__(self, x, d, out=None):
        self.columns += x.shape[1]
        return self.op(x, d, out)

    def chebyshev_step(self, d, x, *args):
        self.columns += x.shape[1]
        return self.op.chebyshev_step(d, x, *args)


def spectrum_ends(solver: BatchedSolver, k: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """The k lowest and k highest eigenvalues of S once each component's 1 is removed."""
    A = deflated_operator(solver.op.S, solver.components)
    top = np.sort(eigsh(A, k=k, which="LA", tol=1e-8, return_eigenvectors=False))[::-1]
    bottom = np.sort(eigsh(A, k=k, which="SA", tol=1e-8, return_eigenvectors=False))
    return bottom, top


def chebyshev_products(s_min: float, s_max: float, d: float, tol: float) -> int:
    """Fewest products for BatchedSolver.solve's stopping rule: k products check the k-th iterate."""
    a, b = 1.0 - d * s_max, 1.0 - d * s_min  # spectrum of I - d S on the complement
    eps = ppr_residual_limit(tol, d, 0.0)  # a reset with no mass on nodes without edges
    return chebyshev_steps((b - a) / (b + a), 1.0 / eps)


def product_cost(op, n: int, block: int, threads: int, d: float, reps: int) -> float:
    """Seconds per column of one product, `threads` blocks at a time, best of `reps`."""
    rng = np.random.default_rng(0)
    xs = [rng.random((n, block)) for _ in range(threads)]
    outs = [np.empty_like(x) for x in xs]
    best = math.inf
    with ThreadPoolExecutor(threads) as ex:
        for _ in range(reps):
            t = time.perf_counter()
            list(ex.map(lambda i: op(xs[i], d, out=outs[i]), range(threads)))
            best = min(best, time.perf_counter() - t)
    return best / (threads * block)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--queries", type=int, default=256, help="queries solved by BatchedSolver")
    ap.add_argument("--ref-queries", type=int, default=50, help="queries solved by prpack")
    ap.add_argument("--blocks", default="8,16,32,64", help="block sizes for the product timing")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the Markdown report here")
    args = ap.parse_args(argv)
    cmd = "python -m benchmarks.ppr_floor " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    load0 = os.getloadavg()
    d = DAMPING

    sg = make_graph(args.scale, args.seed)
    qs = make_queries(sg, max(args.queries, args.ref_queries), seed=args.seed + 1)
    g = sg.graph
    log(f"graph {g.vcount()} nodes / {g.ecount()} edges")

    buffer = OutputBuffer()
    buffer.view((max(args.queries, args.ref_queries), g.vcount())).fill(0.0)  # in use, like a run's
    ref = Clock()
    R = qs.resets(PASSAGE_WEIGHT, slice(0, args.ref_queries))
    with ref:
        PrpackSolver(g).solve(R, d, out=buffer.view(R.shape))
    ref_q = ref.wall / args.ref_queries
    log(f"prpack: {ref_q * 1e3:.1f} ms per query")

    solver = BatchedSolver(g, n_threads=args.threads)
    solver.interval()  # part of the preparation, not of the per-query time
    solver.solve(qs.resets(PASSAGE_WEIGHT, slice(0, 1)), d)  # so is compiling the numba loops
    solver.op = counter = CountingOperator(solver.op)
    ours = Clock()
    R = qs.resets(PASSAGE_WEIGHT, slice(0, args.queries))
    with ours:
        solver.solve(R, d, out=buffer.view(R.shape))
    ours_q = ours.wall / args.queries
    used = counter.columns / args.queries
    log(f"BatchedSolver: {ours_q * 1e3:.1f} ms and {used:.1f} column-products per query")

    S = counter.op.S
    costs = {}
    for block in (int(b) for b in args.blocks.split(",")):
        costs[block] = product_cost(counter.op, S.shape[0], block, solver.n_threads, d, args.reps)
        log(f"product, block {block}: {costs[block] * 1e3:.2f} ms per column")
    best_block = min(costs, key=costs.get)
    cheapest = costs[best_block]

    t = time.perf_counter()
    bottom, top = spectrum_ends(solver)
    s_min, s_max, n_comp = float(bottom[0]), float(top[0]), solver.components.shape[1]
    log(f"spectrum without eigenvalue 1: [{s_min:.4f}, {s_max:.4f}] ({time.perf_counter() - t:.0f}s, {n_comp} components)")
    load1 = os.getloadavg()

    lines = [
        f"Command: `{cmd}`",
        "",
        f"Graph: {sg.n_phrase} phrase + {sg.n_passage} passage nodes, {g.ecount()} edges, "
        f"{S.nnz} nonzeros in S over {S.shape[0]} non-isolated nodes, {n_comp} connected component(s) "
        f"(scale {args.scale}, seed {args.seed}); damping {d}, passage_node_weight {PASSAGE_WEIGHT}.",
        machine_line(load0, load1, solver),
        "",
        f"Spectrum of S without the eigenvalue 1: six lowest {np.round(bottom, 4).tolist()}, "
        f"six highest {np.round(top, 4).tolist()}.",
        "",
        "| what | per query | prpack / this |",
        "| --- | ---: | ---: |",
        f"| prpack, one reference-style call per query ({args.ref_queries} queries) | {ref_q * 1e3:.1f} ms | 1.0x |",
        f"| BatchedSolver.solve ({args.queries} queries, {used:.1f} column-products each) | {ours_q * 1e3:.1f} ms | {ref_q / ours_q:.1f}x |",
        f"| 20x, as asked | {ref_q / 20 * 1e3:.1f} ms | 20.0x |",
    ]
    for block, c in sorted(costs.items()):
        lines.append(f"| one product x - dSx, block of {block}, per column | {c * 1e3:.2f} ms | |")
    for tol in (solver.tol, 1e-8):
        k = chebyshev_products(s_min, s_max, d, tol)
        floor = k * cheapest
        lines.append(
            f"| floor at tol {tol:g}: {k} products x {cheapest * 1e3:.2f} ms (block {best_block}) | "
            f"{floor * 1e3:.1f} ms | {ref_q / floor:.1f}x |"
        )
    lines.append(
        f"| BatchedSolver's products alone: {used:.1f} x {costs.get(solver.block_size, cheapest) * 1e3:.2f} ms "
        f"(block {solver.block_size if solver.block_size in costs else best_block}) | "
        f"{used * costs.get(solver.block_size, cheapest) * 1e3:.1f} ms | |"
    )
    emit(lines, args.out)


if __name__ == "__main__":
    main()
