"""The batched retrieval stage's own parts on the shared MuSiQue index, this tree vs another.

    python -m benchmarks.bench_shared_parts --index DIR --baseline-tree DIR [--repeats 5]

`bench_shared` times whole CLI runs, whose stage timings are wall seconds that the
load of a shared 2-core machine stretches by 2-4x. This one times, in fresh child
processes, only the parts of the stage that the index, the solver's set-up and the
PPR own, wall and CPU seconds each, alternating the two trees `--repeats` times:

* `index_load`: `graph.store.load_index` as the pipeline calls it (with the `defer`
  of a HippoRAG 2 run where the tree has it: `retrieve.factory.unread_embeddings`);
* `setup`: importing the retriever's module (`retrieve.graph_retriever`, which brings
  in the solver, and scipy.sparse until round 5: `retrieve/csr.py`) and
  `BatchedSolver.from_edges` from the index's saved preparation (`<index>/ppr/`, made by
  an earlier run);
* `ppr`: `solve` of 100 HippoRAG-shaped resets as CSR rows in pieces of the solver's
  block_size x threads, as the retriever calls it (5 phrase seeds per query, a 0.05
  weight spread over every passage by a seeded RNG: the shared set's graph, not its
  questions; the linking and ranking around it are not timed here).

`--index` is a built index of the shared set (e.g. `<cache>/index/<key>` after one
`bench_shared` or CLI run; use a copy: the solver may save its preparation there).
Each tree's package is byte-compiled first (see `bench_shared`). Medians are printed
with the load average before each child.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

PARTS = ("index_load", "setup", "ppr")

CHILD = textwrap.dedent("""
    import inspect, json, sys, time
    import numpy as np
    path = sys.argv[1]
    out = {}
    def part(name, fn):
        t, c = time.perf_counter(), time.process_time()
        value = fn()
        out[name] = (time.perf_counter() - t, time.process_time() - c)
        return value
    from hipporag2.graph import store
    from hipporag2.config import Config
    defer = ()
    if "defer" in inspect.signature(store.load_index).parameters:
        from hipporag2.retrieve.factory import unread_embeddings
        defer = unread_embeddings(Config())
    index = part("index_load", lambda: store.load_index(path, defer=defer) if defer else store.load_index(path))
    def setup():
        import hipporag2.retrieve.graph_retriever  # noqa: F401  the retriever's imports
        from hipporag2.retrieve.ppr.batched import BatchedSolver
        return BatchedSolver.from_edges(index.edges, index.path / "ppr")
    solver = part("setup", setup)
    import scipy.sparse as sp
    rng = np.random.default_rng(0)
    n_phr, n = index.n_phrases, index.n_phrases + index.n_passages
    rows = []
    for q in range(100):
        r = np.zeros(n)
        r[rng.choice(n_phr, 5, replace=False)] = rng.uniform(0.2, 1.0, 5)
        r[n_phr:] = 0.05 * rng.random(n - n_phr)
        rows.append(r)
    R = sp.csr_matrix(np.array(rows))
    piece = solver.block_size * solver.n_threads
    cols = slice(n_phr, n)
    buf = np.empty((piece, n - n_phr))
    def ppr():
        for s in range(0, 100, piece):
            part_ = R[s : s + piece]
            solver.solve(part_, 0.5, out=buf[: part_.shape[0]], columns=cols)
    part("ppr", ppr)
    print(json.dumps(out))
""")


def run_child(tree: Path, index: Path) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    env["PYTHONPATH"] = str(tree)
    done = subprocess.run([sys.executable, "-c", CHILD, str(index)], capture_output=True, text=True, env=env, cwd=str(tree))
    if done.returncode:
        raise SystemExit(f"child failed in {tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--baseline-tree", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    index = Path(args.index).resolve()
    if not (index / "manifest.json").is_file():
        print(f"no index at {index}; nothing to measure")
        return 0
    trees = {"this tree": Path(__file__).resolve().parents[1], "baseline": Path(args.baseline_tree).resolve()}
    for tree in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "hipporag2")], check=True)
    for tree in trees.values():  # untimed: the solver's preparation saved, page cache warm
        run_child(tree, index)
    got = {label: [] for label in trees}
    loads = []
    for rep in range(args.repeats):
        for label, tree in trees.items():
            loads.append(os.getloadavg()[0])
            got[label].append(run_child(tree, index))
    print(f"Command: `python -m benchmarks.bench_shared_parts --index {args.index} --baseline-tree "
          f"{args.baseline_tree} --repeats {args.repeats}` (load average {min(loads):.1f}-{max(loads):.1f})")
    print()
    print("| tree | " + " | ".join(f"{p} wall s | {p} CPU s" for p in PARTS) + " | sum wall s | sum CPU s |")
    print("| --- |" + " ---: |" * (2 * len(PARTS) + 2))
    med = {}
    for label, runs in got.items():
        cells = []
        for p in PARTS:
            for k in (0, 1):
                cells.append(statistics.median(r[p][k] for r in runs))
        wall = statistics.median(sum(r[p][0] for p in PARTS) for r in runs)
        cpu = statistics.median(sum(r[p][1] for p in PARTS) for r in runs)
        med[label] = (wall, cpu)
        print(f"| {label} | " + " | ".join(f"{c:.3f}" for c in cells) + f" | {wall:.3f} | {cpu:.3f} |")
    print()
    (bw, bc), (tw, tc) = med["baseline"], med["this tree"]
    print(f"Medians of {args.repeats} interleaved repeats: this tree {bw / tw:.2f}x less wall, {bc / tc:.2f}x less CPU "
          f"than the baseline over the three parts.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
