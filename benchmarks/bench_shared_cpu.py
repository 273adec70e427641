"""The shared MuSiQue set's CLI run with in-process CPU timers, this tree against another copy of the package.

    python -m benchmarks.bench_shared_cpu --cache-dir DIR --baseline-tree DIR [--repeats 4] [--solver batched]
                                          [--data-dir ../shared/data] [--out FILE]

On a loaded shared machine the wall times of `bench_shared` move by more than a change
of tens of milliseconds; CPU seconds move less. Each run here is a fresh process
running `hipporag2.cli` as `bench_shared` does (cache reused, 100 questions, MiniLM,
the shared OpenIE, no filter), with timers wrapped around the parts of the retrieval
stage and the stages (`pipeline.Timings.stage`): CPU ms of each stage and part, and
the CPU ms the garbage collector spent inside each part (gc.callbacks, thread CPU
time). Children of the two trees alternate, `--repeats` each; medians are reported
with the load average, and the two trees' retrieval.jsonl bytes are compared.

The timers import `hipporag2.retrieve.graph_retriever` (and with it scipy.sparse)
before the run starts, so `retrieval_setup` here leaves out that import on both sides;
`bench_shared` measures it. The baseline tree is a folder holding `hipporag2/` and
`configs/` (`git archive <commit> hipporag2 configs | tar -x -C DIR`, kernels warmed
there with `python -m hipporag2.runtime.warm_kernels` run from DIR).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (module, attribute, class or None): the parts timed inside a run
PARTS = (
    ("hipporag2.stages", "get_openie", None),  # trees before the stages module: hipporag2.pipeline
    ("hipporag2.stages", "load_index", None),
    ("hipporag2.pipeline", "get_openie", None),
    ("hipporag2.pipeline", "load_index", None),
    ("hipporag2.retrieve.graph_retriever", "__init__", "GraphRetriever"),
    ("hipporag2.retrieve.graph_retriever", "dense_scores", None),
    ("hipporag2.retrieve.graph_retriever", "_link_facts", "GraphRetriever"),  # older trees
    ("hipporag2.retrieve.graph_retriever", "link_facts", "GraphRetriever"),
    ("hipporag2.retrieve.graph_retriever", "min_max_top_k_product", None),
    ("hipporag2.retrieve.graph_retriever", "_graph_results", "GraphRetriever"),
    ("hipporag2.retrieve.graph_retriever", "query_result", None),
    ("hipporag2.retrieve.graph_retriever", "reset_rows", None),
    ("hipporag2.files.run_files", "append", "RetrievalFile"),  # retrieval.jsonl, block by block
    ("hipporag2.pipeline", "checkpoint_block", None),  # older trees: checkpoint, then the final file
    ("hipporag2.pipeline", "write_retrieval_jsonl", None),
)
STAGES = ("openie", "index_load", "retrieval_setup", "retrieval")


def child(argv) -> None:
    """Run the CLI with timers; print one JSON line of what they measured."""
    import gc

    sys.path.insert(0, os.getcwd())
    timers, gc_cpu, current = {}, [0.0], []

    def wrap(modname, attr, owner):
        try:  # a part this tree does not have is not timed
            obj = importlib.import_module(modname)
            obj = getattr(obj, owner) if owner else obj
            f = getattr(obj, attr)
        except (ImportError, AttributeError):
            return
        if modname == "hipporag2.pipeline" and getattr(f, "__module__", modname) != modname:
            return  # re-exported from hipporag2.stages: timed there
        label = f"{owner or modname.rsplit('.', 1)[-1]}.{attr}"

        def timed(*a, **k):
            c, g = time.process_time(), gc_cpu[0]
            current.append(label)
            try:
                return f(*a, **k)
            finally:
                current.pop()
                t = timers.setdefault(label, [0, 0.0, 0.0])
                t[0] += 1
                t[1] += time.process_time() - c
                t[2] += gc_cpu[0] - g

        setattr(obj, attr, timed)

    for part in PARTS:
        wrap(*part)
    began = [0.0]

    def on_gc(phase, info):
        if phase == "start":
            began[0] = time.thread_time()
        else:
            gc_cpu[0] += time.thread_time() - began[0]

    gc.callbacks.append(on_gc)
    from hipporag2 import pipeline

    stage_cpu = {}
    plain_stage = pipeline.Timings.stage

    @contextlib.contextmanager
    def stage(self, name):
        c = time.process_time()
        with plain_stage(self, name):
            yield
        stage_cpu[name] = stage_cpu.get(name, 0.0) + time.process_time() - c

    pipeline.Timings.stage = stage
    from hipporag2.cli import main

    sys.argv = ["hipporag2.cli", *argv]
    try:
        main()
    except SystemExit as e:
        if e.code:
            raise
    run_dir = Path(next(a.split("=", 1)[1] for a in argv if a.startswith("run_dir=")))
    wall = json.loads((run_dir / "metrics.json").read_text())["timings"]
    digest = hashlib.sha256((run_dir / "retrieval.jsonl").read_bytes()).hexdigest()
    print("BENCH " + json.dumps({"stage_cpu": {k: v * 1e3 for k, v in stage_cpu.items()}, "wall": wall,
                                 "parts": {k: [n, c * 1e3, g * 1e3] for k, (n, c, g) in timers.items()},
                                 "jsonl_sha256": digest}))


def run(tree: Path, args, run_dir: Path) -> dict:
    data = Path(args.data_dir).resolve()
    openie = data / "openie" / "musique_train_openie_gpt-3.5-turbo-1106.json"
    cli = ["dataset=musique_train", f"data_dir={data}", f"openie.import_path={openie}", "embedding=minilm",
           f"cache_dir={Path(args.cache_dir).resolve()}", f"run_dir={run_dir}", "progress=false",
           "retrieval=hipporag2", "retrieval.filter=none", f"retrieval.ppr_solver={args.solver}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"),
               PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", *cli], cwd=tree, env=env,
                          capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    if done.returncode or not lines:
        raise SystemExit(f"run failed in {tree}: {done.stderr[-2000:]}")
    return json.loads(lines[-1][6:])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--baseline-tree", required=True)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--solver", default="batched")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not (Path(args.data_dir) / "musique_train.json").is_file():
        print(f"skipped: no shared data in {args.data_dir}")
        return 0
    trees = {"this tree": Path(__file__).resolve().parents[1], "baseline": Path(args.baseline_tree).resolve()}
    for tree in trees.values():  # as a user's second run: modules byte-compiled (see bench_shared)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "hipporag2")], check=True,
                       capture_output=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""))
    started, loads, runs = time.strftime("%Y-%m-%d %H:%M:%S"), [], {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for label, tree in trees.items():
                loads.append(os.getloadavg()[0])
                print(f"[{time.strftime('%H:%M:%S')}] {label} run {rep + 1} (load {loads[-1]:.1f})", file=sys.stderr, flush=True)
                runs[label].append(run(tree, args, Path(tmp) / f"run-{rep}-{len(loads)}"))

    def med(label, f):
        return statistics.median(f(r) for r in runs[label])

    ours, ref = "this tree", "baseline"
    out = [f"Command: `python -m benchmarks.bench_shared_cpu {' '.join(shlex.quote(a) for a in argv)}`", "",
           f"Started {started}; load average before each run {min(loads):.1f}-{max(loads):.1f} (median "
           f"{statistics.median(loads):.1f}); solver {args.solver}; {args.repeats} runs per tree, alternating; medians.", "",
           "| CPU ms (median) | this tree | baseline | baseline - this |", "| --- | ---: | ---: | ---: |"]
    for s in STAGES:
        a, b = med(ours, lambda r: r["stage_cpu"].get(s, 0.0)), med(ref, lambda r: r["stage_cpu"].get(s, 0.0))
        out.append(f"| stage {s} | {a:.1f} | {b:.1f} | {b - a:+.1f} |")
    timed = lambda r: sum(r["stage_cpu"].get(s, 0.0) for s in STAGES[1:])  # noqa: E731
    a, b = med(ours, timed), med(ref, timed)
    out.append(f"| **index_load + retrieval_setup + retrieval** | **{a:.1f}** | **{b:.1f}** | **{b - a:+.1f}** |")
    walls = lambda r: 1e3 * sum(r["wall"].get(s, 0.0) for s in STAGES[1:])  # noqa: E731
    out.append(f"| (the same three stages, wall ms) | {med(ours, walls):.1f} | {med(ref, walls):.1f} | |")
    for module, attr, owner in PARTS:
        label = f"{owner or module.rsplit('.', 1)[-1]}.{attr}"
        a = med(ours, lambda r: r["parts"].get(label, [0, 0.0, 0.0])[1])
        b = med(ref, lambda r: r["parts"].get(label, [0, 0.0, 0.0])[1])
        ga = med(ours, lambda r: r["parts"].get(label, [0, 0.0, 0.0])[2])
        gb = med(ref, lambda r: r["parts"].get(label, [0, 0.0, 0.0])[2])
        out.append(f"| part {label} (of it in collections: {ga:.1f} / {gb:.1f}) | {a:.1f} | {b:.1f} | {b - a:+.1f} |")
    digests = {r["jsonl_sha256"] for rs in runs.values() for r in rs}
    out += ["", "retrieval.jsonl bytes: " + ("identical in every run of both trees." if len(digests) == 1
                                          else f"DIFFER ({len(digests)} distinct files).")]
    from benchmarks.report import emit

    emit(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
