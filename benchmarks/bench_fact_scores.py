"""Fact candidates of a large query block: streamed vs each piece's whole score rows, in one process.

    python -m benchmarks.bench_fact_scores --index DIR [--queries 256] [--repeats 8] [--out FILE]

`scoring.min_max_top_k_streamed` (what a block larger than one product uses) and
`scoring.min_max_top_k_pieces` (the plain way it replaced: each piece's whole score
rows, then `min_max_top_k`) on the same synthetic query vectors against a saved
index's fact embeddings (memory-mapped, as a run loads them), alternating, `--repeats`
times each; wall and CPU seconds per query (medians), the load average beside them.
Both must give the same candidates and float32 scores (checked bit for bit first).
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from benchmarks.synthetic_index import synthetic_queries
    from hipporag2.graph.store import load_index
    from hipporag2.retrieve import scoring

    started = time.strftime("%Y-%m-%d %H:%M:%S")
    index = load_index(Path(args.index))
    E = index.fact_emb
    _, vectors = synthetic_queries(index, args.queries)
    q = np.asarray(vectors)
    rows = scoring.score_piece_rows(E.shape[0], np.result_type(q.dtype, E.dtype).itemsize)
    sides = {"streamed": scoring.min_max_top_k_streamed, "pieces": scoring.min_max_top_k_pieces}
    got = {name: f(q, E, args.k, rows, scoring.CHUNK_BYTES) for name, f in sides.items()}  # also loads the kernels
    a, b = got["streamed"], got["pieces"]
    same = np.array_equal(a[0], b[0]) and np.array_equal(a[1].view(np.uint8), b[1].view(np.uint8))
    times = {name: [] for name in sides}
    loads = []
    for _ in range(args.repeats):
        for name, f in sides.items():
            loads.append(os.getloadavg()[0])
            w, c = time.perf_counter(), time.process_time()
            f(q, E, args.k, rows, scoring.CHUNK_BYTES)
            times[name].append((time.perf_counter() - w, time.process_time() - c))
    med = {name: (statistics.median(x for x, _ in t) / len(q) * 1e3, statistics.median(y for _, y in t) / len(q) * 1e3)
           for name, t in times.items()}
    s, p = med["streamed"], med["pieces"]
    lines = [f"Command: `python -m benchmarks.bench_fact_scores {' '.join(shlex.quote(x) for x in argv)}`", "",
             f"Started {started}; {E.shape[0]:,} facts x {E.shape[1]}-d, {len(q)} queries "
             f"(pieces of {rows}, chunks of {scoring.CHUNK_BYTES >> 20} MB of embeddings), k={args.k}, {args.repeats} repeats "
             f"each, alternating; load average {min(loads):.1f}-{max(loads):.1f}. Same candidates and scores, bit for bit: {same}.", "",
             "| | wall ms/query | CPU ms/query |", "| --- | ---: | ---: |",
             f"| streamed (`min_max_top_k_streamed`) | {s[0]:.2f} | {s[1]:.2f} |",
             f"| pieces (`min_max_top_k_pieces`, before) | {p[0]:.2f} | {p[1]:.2f} |",
             f"| **pieces / streamed** | **{p[0] / s[0]:.2f}x** | **{p[1] / s[1]:.2f}x** |"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
