"""The shared MuSiQue set end to end: the retrieval stage with prpack vs batched, set-up included.

    python -m benchmarks.bench_shared --cache-dir DIR [--repeats 3] [--data-dir ../shared/data]
                                      [--baseline-tree DIR]

Each run is a fresh `python -m hipporag2.cli` process, as a user runs it (100 questions,
MiniLM, the shared GPT-3.5 OpenIE, no filter), reusing one cache: the first (untimed)
run builds what is missing (embeddings, index, the batched solver's saved preparation,
the query embeddings); then prpack and batched runs alternate `--repeats` times.
The retrieval stage is what a re-run pays for retrieval: `index_load` +
`retrieval_setup` + `retrieval` from each run's metrics.json (retrieval includes
linking, seeding, PPR, ranking and the checkpoint writes; query embeddings come from
the cache). Medians are compared; the load average is recorded beside each run. The
rankings of the last prpack and batched runs are compared query by query (top 200,
exactly and up to near-ties in prpack's scores, 1e-12 x the top score).

`--baseline-tree DIR` adds a third run per repeat, interleaved with the other two:
the batched solver of another copy of the package (a folder holding `hipporag2/` and
`configs/`, e.g. `git archive <commit> hipporag2 configs | tar -x -C DIR`, kernels warmed there with
`python -m hipporag2.runtime.warm_kernels` run from DIR), started from DIR with this
interpreter, so a change is measured against its parent under the same load. Its
index must have the same key (the same index format) to reuse the cache.

Each tree's package is byte-compiled first (`compileall`): Python writes that cache
on a package's first import, except where PYTHONDONTWRITEBYTECODE is set, as it is in
this workplace's shells; without it every run would compile hipporag2's modules from
source again (~20-35 ms of the retriever's set-up alone under load), which no user's
second run pays.

Needs the shared data (skips with a message without it) and a MiniLM embedding
cache, or ~10 minutes of CPU to build one. Runs with OMP_WAIT_POLICY=passive unless
it is set (see benchmarks/bench_query.py).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STAGES = ("index_load", "retrieval_setup", "retrieval")


def run_once(data_dir: Path, cache: Path, run_dir: Path, solver: str, cwd: Path | None = None) -> dict:
    openie = data_dir / "openie" / "musique_train_openie_gpt-3.5-turbo-1106.json"
    cmd = [sys.executable, "-m", "hipporag2.cli", "dataset=musique_train", f"data_dir={data_dir}",
           f"openie.import_path={openie}", "embedding=minilm", f"cache_dir={cache}", f"run_dir={run_dir}",
           "progress=false", "retrieval=hipporag2", "retrieval.filter=none", f"retrieval.ppr_solver={solver}"]
    # OpenMP threads (igraph's prpack, numba) wait passively unless told otherwise: spinning
    # for a descheduled partner thread on a shared machine flatters nobody but us
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    # `python -m` puts the working folder first on sys.path: cwd picks the package's copy
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"run failed ({solver}): {done.stderr[-2000:]}")
    m = json.loads((run_dir / "metrics.json").read_text())
    # the whole process (interpreter, Hydra, imports, every stage): wall and CPU seconds
    m["_process"] = {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}
    return m


def rankings(run_dir: Path) -> dict:
    out = {}
    for line in (run_dir / "retrieval.jsonl").read_text().splitlines():
        row = json.loads(line)
        out[row["id"]] = [(p["corpus_idx"], p["score"]) for p in row["ranked"]]
    return out


def agree(ref, ours) -> tuple[bool, bool]:
    a, b = [i for i, _ in ref], [i for i, _ in ours]
    if a == b:
        return True, True
    scores = [s for _, s in ref]
    tol = 1e-12 * abs(scores[0])
    group, g = {}, 0
    for i, (node, s) in enumerate(ref):
        if i and scores[i - 1] - s > tol:
            g += 1
        group[node] = g
    return False, all(group.get(x, g) == group[y] for x, y in zip(b, a))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-tree", default=None, help="a folder holding another copy of hipporag2/ (batched runs)")
    ap.add_argument("--keep", default=None, help="copy each run's retrieval.jsonl and metrics.json here (LABEL-REP/)")
    args = ap.parse_args(argv)
    base = Path(args.baseline_tree).resolve() if args.baseline_tree else None
    if base is not None and not (base / "hipporag2" / "__init__.py").is_file():
        raise SystemExit(f"--baseline-tree {base}: no hipporag2/ package there")
    # label -> (solver, working folder of the child)
    runs = {"prpack": ("prpack", None), "batched": ("batched", None)}
    if base is not None:
        runs["batched (baseline)"] = ("batched", base)
    data_dir, cache = Path(args.data_dir).resolve(), Path(args.cache_dir).resolve()  # children may start elsewhere
    if not (data_dir / "musique_train.json").is_file():
        print(f"shared MuSiQue data not found in {data_dir}; nothing to measure")
        return 0
    for tree in {Path(__file__).resolve().parents[1], *([base] if base is not None else [])}:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "hipporag2")], check=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    times = {label: [] for label in runs}
    rows, last = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (solver, cwd) in enumerate(runs.values()):  # warm-up: builds whatever the cache lacks
            run_once(data_dir, cache, Path(tmp) / f"warm-{i}", solver, cwd)
        for rep in range(args.repeats):
            for i, (label, (solver, cwd)) in enumerate(runs.items()):
                load = os.getloadavg()[0]
                run_dir = Path(tmp) / f"{i}-{rep}"
                m = run_once(data_dir, cache, run_dir, solver, cwd)
                t = {k: m["timings"].get(k, 0.0) for k in STAGES}
                total = sum(t.values())
                times[label].append(total)
                last[label] = run_dir
                if args.keep:
                    dst = Path(args.keep) / f"{label.replace(' (', '_').rstrip(')')}-{rep + 1}"
                    dst.mkdir(parents=True, exist_ok=True)
                    for name in ("retrieval.jsonl", "metrics.json"):
                        shutil.copyfile(run_dir / name, dst / name)
                proc = m["_process"]
                rows.append(f"| {rep + 1} | {label} | " + " | ".join(f"{t[k]:.3f}" for k in STAGES)
                            + f" | {total:.3f} | {proc['wall']:.1f} | {proc['cpu']:.1f} | {m.get('recall@5', '')} | {load:.1f} |")
                print(f"[{time.strftime('%H:%M:%S')}] {rows[-1]}", file=sys.stderr, flush=True)
        ref, ours = rankings(last["prpack"]), rankings(last["batched"])
        res = [agree(ref[q], ours[q]) for q in ref]
    p, b = statistics.median(times["prpack"]), statistics.median(times["batched"])
    extra = f" --baseline-tree {args.baseline_tree}" if base is not None else ""
    print(f"Command: `python -m benchmarks.bench_shared --cache-dir {args.cache_dir} --repeats {args.repeats}{extra}` "
          f"(started {started}, children with OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'passive')})")
    print()
    print("| run | solver | index_load s | retrieval_setup s | retrieval s | retrieval stage s | whole process wall s | whole process CPU s | recall@5 | load average before |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    print()
    print(f"Median retrieval stage (100 queries, set-up included): prpack {p:.3f} s, batched {b:.3f} s: **{p / b:.1f}x**. "
          f"Rankings (top 200): {sum(e for e, _ in res)}/{len(res)} identical, {sum(o for _, o in res)}/{len(res)} up to near-ties.")
    if base is not None:
        o = statistics.median(times["batched (baseline)"])
        print(f"Baseline tree's batched: {o:.3f} s, {p / o:.1f}x prpack; this tree's batched is {o / b:.2f}x faster than it.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
