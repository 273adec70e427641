"""A batched query's work outside PPR, stage by stage, this tree against another copy of the package.

    python -m benchmarks.bench_query_parts --index DIR --baseline-tree DIR [--queries 512] [--repeats 3] [--out FILE]

`--index` is a saved index with the batched solver's preparation (e.g. the kept
`benchmarks/bench_query.py --keep` index of scale 1, /tmp/issue15_bench/scale-1/index;
nothing is written into it when both trees share its preparation's format). Each run
is a fresh child process that loads the index as a run does, sets up the batched
retriever and answers `--queries` synthetic queries in blocks of 256 (encoding
excluded: `QueryVectors`), timing each block by stage, the way `GraphRetriever.retrieve`
and a run (`run_files.retrieve_into`; older trees `pipeline.retrieve_checkpointed`) run them:

- dense scores; fact linking (scores, candidates, seeds); PPR (the solver's calls);
  resets and ranking (the rest of `_graph_results`: resets, passage ranking, results);
- checkpoint line: `RetrievalFile.append` of the block's lines to a temporary
  retrieval.jsonl (encode, write, fsync); older trees: `RetrievalCheckpoint.append`
  into a retrieval.partial.jsonl (encode, write, fsync, the values read back);
- retrieval.jsonl lines: nothing more where retrieval.jsonl is the checkpoint; older
  trees write the run's final file from the checkpoint's results
  (`pipeline.write_retrieval_jsonl` where the tree has it, else `write_jsonl` of
  `retrieval_rows`, as `pipeline._run` does in that tree);
- whole block, inside `gc_pause.long_lived_frozen` where the tree has it (as its
  `retrieve` runs); full garbage collections during the blocks and the final write are
  counted and timed (gc.callbacks) on both sides.

Children of the two trees alternate (this tree, baseline, this tree, ...) `--repeats`
times, so both see the same load; per-query times are medians over all blocks of a
side, CPU seconds per query beside them (the load distorts them less). Each child
prints a digest of its retrieval.jsonl bytes: the two trees must write the same file.
The baseline tree is a folder holding `hipporag2/`, `configs/` and `benchmarks/` (e.g.
`git archive <commit> hipporag2 configs benchmarks | tar -x -C DIR`, kernels warmed
there with `python -m hipporag2.warm_kernels` run from DIR). Children run with
OMP_WAIT_POLICY=passive unless it is set (see benchmarks/bench_query.py).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 256
STAGES = ("dense scores", "fact linking (scores, candidates, seeds)", "PPR", "resets and ranking",
          "checkpoint line (encode, write, read back)", "retrieval.jsonl lines", "whole query after encoding")


def child(index_dir: str, n_queries: int) -> dict:
    import numpy as np

    from benchmarks.bench_query import TimedSolver  # the tree's own (both have one)
    from benchmarks.synthetic_index import QueryVectors, synthetic_queries
    from hipporag2 import pipeline
    from hipporag2.config import RetrievalConfig
    from hipporag2.data.loaders import Corpus, Passage
    from hipporag2.graph.store import load_index
    from hipporag2.mapped_pages import release_rows
    from hipporag2.retrieve import scoring
    from hipporag2.retrieve.graph_retriever import GraphRetriever, dense_scores, query_result

    try:
        from hipporag2.gc_pause import long_lived_frozen
    except ImportError:  # a tree without it
        long_lived_frozen = contextlib.nullcontext
    index = load_index(Path(index_dir))
    queries, vectors = synthetic_queries(index, n_queries)
    release_rows(index.fact_emb, 0, len(index.fact_emb))  # making the queries read fact rows; an encoder does not
    store = QueryVectors(queries, vectors)
    corpus = Corpus([Passage(title=p.split("\n")[0], text=p.split("\n", 1)[1], corpus_idx=i) for i, p in enumerate(index.passages)])
    ret = GraphRetriever(index, store, RetrievalConfig(ppr_solver="batched"), progress=False)
    ret.solver = TimedSolver(ret.solver)
    ret.retrieve(queries[:2])  # loads the compiled loops (numba's disk cache) outside the timings
    scoring.min_max_top_k(np.zeros((2, scoring.PARALLEL_MIN), dtype=np.float32), 5)
    cfg = ret.cfg
    blocks = []
    import gc

    collections = {"n": 0, "s": 0.0}
    began = [0.0]

    def count(phase, info):  # full collections (generation 2) and their seconds, during the blocks
        if info["generation"] != 2:
            return
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            collections["n"] += 1
            collections["s"] += time.perf_counter() - began[0]

    gc.callbacks.append(count)
    with tempfile.TemporaryDirectory() as tmp:
        if hasattr(pipeline, "RetrievalCheckpoint"):
            ckpt = pipeline.RetrievalCheckpoint(Path(tmp) / "retrieval.partial.jsonl", "bench", [q.id for q in queries], BLOCK)
        else:  # retrieval.jsonl is the checkpoint
            from hipporag2.run_files import RetrievalFile

            ckpt = RetrievalFile(Path(tmp), "bench", queries, corpus, BLOCK)
            ckpt.resume()
        for s in range(0, n_queries, BLOCK):
            block = queries[s : s + BLOCK]
            qs = [q.question for q in block]
            w, c = [], []
            with long_lived_frozen():
                for step in range(5):
                    w.append(time.perf_counter())
                    c.append(time.process_time())
                    if step == 0:
                        dense = dense_scores(ret.store, index.passage_emb, qs, False)
                    elif step == 1:
                        links = ret._link(qs)
                    elif step == 2:
                        ret.solver.seconds = 0.0
                        ranked = ret._graph_results(block, dense, links)
                        results = [ranked.get(r) or query_result(q.id, links[r], index, None, dense[r], cfg.retrieval_top_k)
                                   for r, q in enumerate(block)]
                    elif step == 3:
                        ckpt.append(s, results)
                w.append(time.perf_counter())
                c.append(time.process_time())
            t = {STAGES[0]: w[1] - w[0], STAGES[1]: w[2] - w[1], STAGES[2]: ret.solver.seconds,
                 STAGES[3]: w[3] - w[2] - ret.solver.seconds, STAGES[4]: w[4] - w[3]}
            cpu = {STAGES[0]: c[1] - c[0], STAGES[1]: c[2] - c[1], STAGES[4]: c[4] - c[3]}
            blocks.append({"n": len(block), "load": os.getloadavg()[0], "wall": t, "cpu": cpu})
        ckpt.close()
        out = Path(tmp) / "retrieval.jsonl"
        # the final file, as pipeline._run writes it; timed as a whole, shared out per block
        with long_lived_frozen():
            t0, c0 = time.perf_counter(), time.process_time()
            if not hasattr(pipeline, "RetrievalCheckpoint"):
                pass  # written block by block above
            elif hasattr(pipeline, "write_retrieval_jsonl"):
                pipeline.write_retrieval_jsonl(out, queries, ckpt.results, corpus, getattr(ckpt, "score_texts", None))
            else:
                pipeline.write_jsonl(out, pipeline.retrieval_rows(queries, ckpt.results, corpus))
            t1, c1 = time.perf_counter() - t0, time.process_time() - c0
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
    gc.callbacks.remove(count)
    for b in blocks:
        b["wall"][STAGES[5]] = t1 * b["n"] / n_queries
        b["cpu"][STAGES[5]] = c1 * b["n"] / n_queries
        b["wall"][STAGES[6]] = sum(b["wall"][k] for k in STAGES[:6])
    return {"blocks": blocks, "jsonl_sha256": digest, "full_collections": collections, "queries": n_queries, "facts": len(index.facts), "passages": index.n_passages,
            "phrases": index.n_phrases}


def run_child(tree: Path | None, index_dir: str, n_queries: int) -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    cwd = tree or Path(__file__).resolve().parents[1]
    # this file runs as a script; the package (and benchmarks.synthetic_index) come from the tree
    env["PYTHONPATH"] = str(cwd)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", index_dir, str(n_queries)],
                         check=True, capture_output=True, text=True, env=env, cwd=cwd)
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_query(runs, stage, kind="wall"):
    vals = [b[kind][stage] / b["n"] * 1e3 for r in runs for b in r["blocks"] if stage in b[kind]]
    return statistics.median(vals) if vals else None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        print(json.dumps(child(argv[1], int(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--baseline-tree", required=True)
    ap.add_argument("--queries", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    base = Path(args.baseline_tree).resolve()
    if not (base / "hipporag2" / "__init__.py").is_file():
        raise SystemExit(f"--baseline-tree {base}: no hipporag2/ package there")
    index_dir = str(Path(args.index).resolve())
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    runs = {"this tree": [], "baseline": []}
    loads = []
    for rep in range(args.repeats):
        for label, tree in (("this tree", None), ("baseline", base)):
            loads.append(os.getloadavg()[0])
            print(f"[{time.strftime('%H:%M:%S')}] {label} run {rep + 1} (load {loads[-1]:.1f})", file=sys.stderr, flush=True)
            runs[label].append(run_child(tree, index_dir, args.queries))
    ours, ref = runs["this tree"], runs["baseline"]
    same = {r["jsonl_sha256"] for r in ours + ref}
    first = ours[0]
    lines = [f"Command: `python -m benchmarks.bench_query_parts {' '.join(shlex.quote(a) for a in argv)}`", "",
             f"Started {started}; load average before each child {min(loads):.1f}-{max(loads):.1f} "
             f"(median {statistics.median(loads):.1f}); children with OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'passive')}; "
             f"index: {first['passages']:,} passages, {first['phrases']:,} phrases, {first['facts']:,} facts; "
             f"{args.queries} queries per child in blocks of {BLOCK}, {args.repeats} children per side, alternating.", "",
             "| stage | this tree ms/query | baseline ms/query | baseline / this | CPU ms/query (this / baseline) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for stage in STAGES:
        a, b = per_query(ours, stage), per_query(ref, stage)
        ca, cb = per_query(ours, stage, "cpu"), per_query(ref, stage, "cpu")
        cpu = f"{ca:.2f} / {cb:.2f}" if ca is not None else ""
        name = f"**{stage}**" if stage == STAGES[-1] else stage
        lines.append(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.2f}x | {cpu} |")
    outside = [s for s in STAGES[:6] if s != "PPR"]
    a, b = sum(per_query(ours, s) for s in outside), sum(per_query(ref, s) for s in outside)
    def gc_text(side):
        got = [r.get("full_collections") for r in side]
        if None in got:
            return "not counted"
        n, secs, nq = sum(g["n"] for g in got), sum(g["s"] for g in got), sum(r["queries"] for r in side)
        return f"{n} in {nq} queries, {secs * 1e3:.0f} ms ({secs / nq * 1e3:.2f} ms/query)"

    lines += ["", f"Full garbage collections (generation 2) during the queries and the writes: this tree {gc_text(ours)}; "
              f"baseline {gc_text(ref)}.",
              "", f"Outside PPR (sum of the stage medians): this tree {a:.2f} ms/query, baseline {b:.2f} ms/query ({b / a:.2f}x). "
              f"retrieval.jsonl bytes: {'identical in every run of both trees' if len(same) == 1 else 'DIFFER: ' + ', '.join(sorted(same))}."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0 if len(same) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
