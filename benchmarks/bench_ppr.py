"""PPR cost: the reference's one-prpack-call-per-query vs BatchedSolver, on one graph.

    python -m benchmarks.bench_ppr                   # MuSiQue-sized, as in results/perf
    python -m benchmarks.bench_ppr --scale 0.05 --queries 100 --sweep-ref-queries 10
    python -m benchmarks.bench_ppr --skip-sweep      # (a) and its check only

(a) 1,000 queries at the paper's setting (damping 0.5, passage_node_weight 0.05):
    prpack per query (igraph converts the graph and the reset array for prpack on
    every call, as in the reference), and BatchedSolver.solve on all of them
    (Chebyshev, one fused pass per product); its one-off preparation (operator,
    spectral interval, loading or compiling the numba loops) is reported separately
    and amortised. Both sides write their answers into an output array reused from
    one call to the next (`OutputBuffer`), as `GraphRetriever` and the sweep do; the
    row "fresh output array per call" times ours on --fresh-queries queries with a
    new array each call instead, which on this VM can cost the fault-in of every page
    (up to ~2 ms per query at 100k nodes; prpack's side hardly notices at ~300 ms).
(b) the 20-point damping x passage_node_weight sweep over the same 1,000 queries.
    Ours, measured in full: per block of queries one multi-shift CG per reset part
    (seed phrases; passage scores) serves all four dampings, and by linearity the
    five weights are mixes of the two parts (`BatchedSolver.solve_many`).
    prpack, and ours with one `solve` per point, are timed on the first
    --sweep-ref-queries queries at every point and extrapolated to 1,000 (labelled).
(c) against prpack, on every query prpack ran: worst L1 difference, and whether the
    top-200 passage rankings (stable descending, ties to the higher index) are
    identical, exactly and up to near-ties (`rankings_agree`, 1e-12 relative).

The machine is shared, so wall time depends on what else runs: the table also gives
CPU seconds of this process and the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass, field

import igraph
import numba
import numpy as np
import scipy

from benchmarks.report import emit
from benchmarks.synthetic_graph import make_graph, make_queries
from benchmarks.rankings import rank_desc_stable, rankings_agree
from hipporag2.retrieve.ppr import OutputBuffer
from hipporag2.retrieve.ppr.batched import BatchedSolver
from hipporag2.retrieve.ppr.prpack import PrpackSolver

DAMPINGS = [0.3, 0.5, 0.7, 0.85]
PNWS = [0.01, 0.05, 0.1, 0.3, 0.5]
TOP = 200


@dataclass
class Agreement:
    compared: int = 0
    worst_l1: float = 0.0
    exact: int = 0  # top-200 orders literally equal
    tied: int = 0  # equal up to near-ties in the prpack scores
    worst_where: str = ""
    extra: list = field(default_factory=list)

    def add(self, ref: np.ndarray, ours: np.ndarray, n_phrase: int, where: str) -> None:
        for i in range(len(ref)):
            l1 = float(np.abs(ref[i] - ours[i]).sum())
            if l1 > self.worst_l1:
                self.worst_l1, self.worst_where = l1, where
            a, b = ref[i, n_phrase:], ours[i, n_phrase:]
            self.exact += bool(np.array_equal(rank_desc_stable(a)[:TOP], rank_desc_stable(b)[:TOP]))
            self.tied += rankings_agree(a, b, k=TOP)
            self.compared += 1


class Clock:
    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine_line(load0, load1, solver: BatchedSolver) -> str:
    """What the timings depend on: CPU, load, library versions, solver settings."""
    lo, hi = solver.interval()
    return (
        f"Machine: {cpu_model()}, os.cpu_count()={os.cpu_count()}, load average {load0[0]:.1f} before / {load1[0]:.1f} after; "
        f"Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, igraph {igraph.__version__}, "
        f"numba {numba.__version__}; BatchedSolver threads={solver.n_threads}, block_size={solver.block_size}, "
        f"tol={solver.tol:g}, spectral interval of S (for Chebyshev) [{lo:.4f}, {hi:.4f}]."
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--ref-queries", type=int, default=None, help="prpack queries in (a); default all")
    ap.add_argument("--sweep-ref-queries", type=int, default=50, help="queries timed per sweep point for the extrapolated rows")
    ap.add_argument("--skip-sweep", action="store_true", help="only (a) and its agreement check")
    ap.add_argument("--fresh-queries", type=int, default=256, help="queries of the fresh-output-array row of (a)")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--chunk", type=int, default=128, help="queries per solver call (bounds memory)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the Markdown report here")
    args = ap.parse_args(argv)
    cmd = "python -m benchmarks.bench_ppr " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    load0 = os.getloadavg()

    t = time.perf_counter()
    sg = make_graph(args.scale, args.seed)
    qs = make_queries(sg, args.queries, seed=args.seed + 1)
    g, n_phrase, Q = sg.graph, sg.n_phrase, args.queries
    log(f"graph {g.vcount()} nodes / {g.ecount()} edges, {Q} queries, built in {time.perf_counter() - t:.1f}s")

    # ---- (a) per query at the paper's setting ------------------------------------
    d0, w0 = 0.5, 0.05
    prep = Clock()
    with prep:
        solver = BatchedSolver(g, block_size=args.block_size, n_threads=args.threads)
        solver.interval()  # the spectral bounds a single-damping solve needs, computed once per graph
        solver.solve(qs.resets(w0, slice(0, 1)), d0)  # compiles the kernels (numba caches them on disk)
    log(f"BatchedSolver prepared in {prep.wall:.2f}s (threads={solver.n_threads}, block={solver.block_size})")
    ours_a, ref_a, agree_a = Clock(), Clock(), Agreement()
    n_ref = Q if args.ref_queries is None else min(Q, args.ref_queries)
    ours_out, ref_out = OutputBuffer(), OutputBuffer()
    for s in range(0, Q, args.chunk):
        rows = slice(s, min(s + args.chunk, Q))
        R = qs.resets(w0, rows)
        with ours_a:
            X = solver.solve(R, d0, out=ours_out.view(R.shape))
        m = max(0, min(rows.stop, n_ref) - s)
        if m:
            with ref_a:
                ref = PrpackSolver(g).solve(R[:m], d0, out=ref_out.view((m, R.shape[1])))
            agree_a.add(ref, X[:m], n_phrase, f"(a) query {s}+")
        log(f"(a) {rows.stop}/{Q}: ours {ours_a.wall:.1f}s, prpack {ref_a.wall:.1f}s on {min(rows.stop, n_ref)}")

    fresh_a, n_fresh = Clock(), min(Q, args.fresh_queries)
    for s in range(0, n_fresh, args.chunk):
        R = qs.resets(w0, slice(s, min(s + args.chunk, n_fresh)))
        time.sleep(5)  # as long as a chunk's prpack calls take at least: the host takes freed pages back
        with fresh_a:
            solver.solve(R, d0)
    log(f"(a) fresh output arrays: {fresh_a.wall:.1f}s on {n_fresh}")

    # ---- (b) damping x passage_node_weight sweep -----------------------------------
    ours_b, ref_b, per_point_b, agree_b, agree_pp = Clock(), Clock(), Clock(), Agreement(), Agreement()
    n_sub = min(Q, args.sweep_ref_queries)
    if not args.skip_sweep:
        sub_ours = {}  # (d, w) -> our swept scores on the timed subset, for (c)
        for s in range(0, Q, args.chunk):
            rows = slice(s, min(s + args.chunk, Q))
            with ours_b:
                phrase = qs.resets(0.0, rows)
                passage = qs.resets(1.0, rows) - phrase
                R = np.concatenate([phrase, passage])
                Y = solver.solve_many(R, DAMPINGS, out=ours_out.view((len(DAMPINGS), *R.shape)))
                m = len(phrase)
                for k, d in enumerate(DAMPINGS):
                    for w in PNWS:
                        y = Y[k, :m] + w * Y[k, m:]
                        x = y / y.sum(axis=1, keepdims=True)
                        top = np.argsort(x[:, n_phrase:], axis=1, kind="stable")[:, ::-1][:, :TOP]  # what a run keeps
                        if s < n_sub:
                            sub_ours[(d, w)] = x[: n_sub - s].copy()
            log(f"(b) ours {rows.stop}/{Q}: {ours_b.wall:.1f}s")
        del top
        for d in DAMPINGS:
            for w in PNWS:
                R = qs.resets(w, slice(0, n_sub))
                with ref_b:
                    ref = PrpackSolver(g).solve(R, d, out=ref_out.view(R.shape))
                with per_point_b:
                    pp = solver.solve(R, d, out=ours_out.view(R.shape))
                agree_b.add(ref, sub_ours[(d, w)], n_phrase, f"(b) d={d} w={w}")
                agree_pp.add(ref, pp, n_phrase, f"(b, per point) d={d} w={w}")
            log(f"(b) prpack subset d={d}: {ref_b.wall:.1f}s")
    load1 = os.getloadavg()

    # ---- report ----------------------------------------------------------------------
    pts = len(DAMPINGS) * len(PNWS)
    ref_q = ref_a.wall / max(n_ref, 1)
    ours_q = ours_a.wall / Q
    amort_q = (ours_a.wall + prep.wall) / Q
    ref_sweep = ref_b.wall / max(n_sub, 1) * Q
    pp_sweep = per_point_b.wall / max(n_sub, 1) * Q
    ours_sweep = ours_b.wall
    lines = [
        f"Command: `{cmd}`",
        "",
        f"Graph: {sg.n_phrase} phrase + {sg.n_passage} passage nodes, {g.ecount()} edges "
        f"(scale {args.scale}, seed {args.seed}); {Q} queries.",
        machine_line(load0, load1, solver),
        "",
        "| what | prpack (reference) | BatchedSolver | ratio |",
        "| --- | --- | --- | --- |",
        f"| (a) per query, d=0.5, w=0.05, wall | {ref_q * 1e3:.1f} ms ({n_ref} queries) | {ours_q * 1e3:.1f} ms ({Q} queries) | {ref_q / ours_q:.1f}x |",
        f"| (a) per query incl. preparation amortised over {Q} | {ref_q * 1e3:.1f} ms | {amort_q * 1e3:.1f} ms | {ref_q / amort_q:.1f}x |",
        f"| (a) per query, ours with a fresh output array per call | {ref_q * 1e3:.1f} ms | {fresh_a.wall / max(n_fresh, 1) * 1e3:.1f} ms ({n_fresh} queries) | {ref_q / (fresh_a.wall / max(n_fresh, 1)):.1f}x |",
        f"| (a) per query, CPU seconds of this process | {ref_a.cpu / max(n_ref, 1) * 1e3:.1f} ms | {ours_a.cpu / Q * 1e3:.1f} ms | {ref_a.cpu / max(n_ref, 1) / (ours_a.cpu / Q):.1f}x |",
        f"| (a) one-off preparation (graph -> operator) | - | {prep.wall:.2f} s | |",
    ]
    if not args.skip_sweep:
        lines += [
            f"| (b) {pts}-point sweep, {Q} queries, wall | {ref_sweep:.0f} s (extrapolated from {n_sub} queries per point) | {ours_sweep:.0f} s (measured, all {Q}; multi-shift + linearity) | {ref_sweep / ours_sweep:.1f}x |",
            f"| (b) same, ours with one solve() per point | {ref_sweep:.0f} s (extrapolated) | {pp_sweep:.0f} s (extrapolated from {n_sub} queries per point) | {ref_sweep / pp_sweep:.1f}x |",
            f"| (b) sweep, CPU seconds | {ref_b.cpu / n_sub * Q:.0f} s (extrapolated) | {ours_b.cpu:.0f} s (measured) | {ref_b.cpu / n_sub * Q / ours_b.cpu:.1f}x |",
        ]
    checked = [("(a)", agree_a)] + ([] if args.skip_sweep else [("(b) sweep", agree_b), ("(b) per point", agree_pp)])
    for name, a in checked:
        lines.append(
            f"| (c) {name}: {a.compared} query-settings vs prpack | worst L1 {a.worst_l1:.1e} | "
            f"top-{TOP} identical: {a.exact}/{a.compared} exactly, {a.tied}/{a.compared} up to near-ties | |"
        )
    emit(lines, args.out)


if __name__ == "__main__":
    main()
