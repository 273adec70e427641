"""Synonym-edge KNN at the paper's MuSiQue scale: time and peak memory.

    python -m benchmarks.bench_knn [--phrases 85288] [--dim 384] [--block 1024]

Phrase embeddings are synthetic: clusters of near-duplicate phrases (the way surface
variants of one entity embed close together) plus unrelated phrases, L2-normalised,
so that the thresholded KNN yields on the order of the paper's ~1.1M synonym edges.
`synonym_pairs` works in blocks of query rows, so its memory is block x n, never
n x n. Peak memory is the process's max RSS (it includes the embeddings themselves).
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

import numpy as np

from hipporag2.graph.synonyms import synonym_pairs


def synthetic_embeddings(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n_clusters = n // 12
    centres = rng.normal(size=(n_clusters, dim)).astype(np.float32)
    assign = rng.integers(0, n_clusters, size=n)
    noise = rng.normal(size=(n, dim)).astype(np.float32)
    emb = centres[assign] + 0.45 * noise
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return emb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--phrases", type=int, default=85288)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--block", type=int, default=1024)
    args = ap.parse_args(argv)
    emb = synthetic_embeddings(args.phrases, args.dim)
    phrases = [f"phrase {i}" for i in range(args.phrases)]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    c0 = time.process_time()
    pairs = synonym_pairs(phrases, emb, threshold=0.8, top_k=2047, max_neighbours=101, block_size=args.block)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"command: python -m benchmarks.bench_knn --phrases {args.phrases} --dim {args.dim} --block {args.block}")
    print(f"machine: {platform.processor() or platform.machine()}, cpu_count={os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}; python {platform.python_version()}, numpy {np.__version__}")
    print()
    print("| phrases | dim | block | synonym edges | wall s | CPU s | peak RSS MB | RSS before KNN MB | embeddings MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {args.phrases:,} | {args.dim} | {args.block} | {len(pairs):,} | {wall:.1f} | {cpu:.1f} | "
          f"{peak:.0f} | {rss0:.0f} | {emb.nbytes / 2**20:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
