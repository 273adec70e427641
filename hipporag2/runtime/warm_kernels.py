"""Compile every numba kernel once, into numba's on-disk cache, so no run pays for it.

    python -m hipporag2.runtime.warm_kernels

The kernels (`retrieve/ppr/kernels.py`, `retrieve/scoring.py`, `graph/knn_kernels.py`)
are `cache=True`: numba keeps the machine code beside the module (`__pycache__`, or
its user cache folder when the package folder is read-only) and a later process only
loads it. Without this step the first run after a fresh clone compiles them, which
took tens of seconds on the 2-core machine (more under load), and counted as that
run's retrieval set-up. `make setup` runs this module; it is safe to run again (a
cached kernel is loaded, not rebuilt).

numba compiles once per argument-type signature, so the calls below go through the
same public functions, with the same array kinds, as real runs: a solver prepared in
memory (writable arrays) and one loaded from a saved preparation (read-only
memory-mapped arrays), both solve paths (`solve` with `out=`/`columns=`, and
`solve_many` for sweeps), fact candidates on float32 and float64 scores, and
the synonym KNN.
"""
from __future__ import annotations

import sys
import tempfile
import time


def warm() -> float:
    """Run every kernel on a small input; returns the seconds it took."""
    import numpy as np

    from hipporag2.graph.build import GraphEdges
    from hipporag2.graph.synonyms import synonym_arrays
    from hipporag2.retrieve.ppr.batched import BatchedSolver
    from hipporag2.retrieve.scoring import min_max_top_k
    from hipporag2.retrieve.seeds import reset_rows

    t = time.perf_counter()
    rng = np.random.default_rng(0)
    n, m = 64, 256
    src, dst = rng.integers(0, n - 2, m), rng.integers(0, n - 2, m)  # the last two nodes stay isolated
    edges = GraphEdges(n, src, dst, rng.random(m) + 0.1, np.zeros(m, dtype=np.int8))
    # the retriever's resets: int32 indices, float64 values
    R = reset_rows([[(0, 1.0)], [(3, 0.5)], []], [rng.random(n - 8)] * 3, 8, n)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(2):  # made and saved, then loaded back (read-only arrays)
            solver = BatchedSolver.from_edges(edges, tmp, n_threads=1, numba_min_nnz=0)  # small: force numba
            solver.solve(R, 0.5, out=np.empty((3, 8)), columns=slice(n - 8, n))
            solver.solve_many(R, [0.5, 0.3])
    from hipporag2.retrieve import scoring

    for dtype in (np.float32, np.float64):
        min_max_top_k(rng.random((3, 50)).astype(dtype), 5)  # small blocks: numpy
        big = rng.random((2, scoring.PARALLEL_MIN // 2 + 1)).astype(dtype)  # large ones: the compiled pass
        min_max_top_k(big, 5)
    emb = rng.normal(size=(40, 8)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    phrases = [f"phrase {i}" for i in range(len(emb))]
    synonym_arrays(phrases, emb, 0.5, 10)
    synonym_arrays(phrases, emb, 0.5, 10, query_rows=np.arange(5))  # an insert's search
    return time.perf_counter() - t


def main() -> int:
    print(f"numba kernels compiled or loaded from the cache in {warm():.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
