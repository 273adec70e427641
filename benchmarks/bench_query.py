"""Whole-query time per stage (batched vs prpack) and index build per stage, at several scales.

    python -m benchmarks.bench_query --scales 0.25,0.5,1 [--queries 1024] [--ref-every 8] [--out FILE]

For each scale of the synthetic MuSiQue-shaped index (`benchmarks/synthetic_index.py`:
real `clean_passage` + `content_of`, synonym KNN and `build_edges` on OpenIE-like triples and
clustered phrase embeddings), three fresh child processes:

(b) build: every stage of the index build after OpenIE and encoding, timed, with the
    child's peak RSS; then `save_index` and the batched solver's one-off preparation,
    which is saved in the index folder (`ppr/store.py`).
(a) query: the saved index is loaded as a run loads it (checksums verified,
    embeddings memory-mapped) and both retrievers are set up (batched: the
    preparation loaded; prpack: the igraph graph built). Then the queries run in
    blocks of 256, batched and prpack interleaved block by block (prpack on every
    `--ref-every`-th query of the block), each block timed by stage: dense scores,
    fact linking (scores, candidates, seeds), PPR, resets and ranking, and the
    checkpoint and retrieval.jsonl lines (as `pipeline` makes them). Encoding is excluded: `QueryVectors` hands out
    precomputed query vectors. Per-query times are medians over the blocks; the load
    average is recorded beside each block. Every prpack query's top-200 is compared
    with batched's: exactly, and up to near-ties in prpack's scores.
(m) memory: a third child loads the index and runs all queries batched only; its peak
    RSS is compared with the bytes of the index's raw arrays (embeddings + edges).

The children run with OMP_WAIT_POLICY=passive unless it is set: igraph's prpack and
numba's parallel loops use OpenMP, whose threads by default spin while waiting for
each other; on this shared 2-core machine that turned a 3 ms prpack call (scale
0.02) into 250 ms whenever the other thread was descheduled, an artefact that
would flatter the ratio. Passive waiting is prpack's better case.

prpack's per-call time depends on how the synonym edges are arranged: the row
"prpack on random synonym pairs" times it on `synthetic_graph.make_graph` (same
counts, random synonym endpoints) next to this clustered index.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BLOCK = 256
TOP = 200


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load() -> float:
    return os.getloadavg()[0]


# ---- children ---------------------------------------------------------------------------
def child_build(scale: float, folder: str) -> dict:
    from benchmarks.synthetic_index import Timed, build_synthetic_index
    from hipporag2.graph.store import save_index
    from hipporag2.retrieve.ppr.prepare import default_block_size, default_threads
    from hipporag2.retrieve.ppr.store import prepared_graph

    timed = Timed()
    load0 = load()
    t0 = time.perf_counter()
    index = build_synthetic_index(scale, timed=timed)
    timed.run("save_index", save_index, index, Path(folder) / "index")
    e = index.edges
    # the block size the retriever's solver will pick, so that the query runs load this preparation
    block = default_block_size(e, default_threads())
    timed.run("PPR preparation (operator, components, spectral interval; saved)", prepared_graph,
              e.n_vertices, e.source, e.target, e.weight, block, index.path / "ppr")
    return {"stages": timed.stages, "total": time.perf_counter() - t0, "peak_rss_mb": rss_mb(), "stats": index.stats,
            "load": [load0, load()]}


def _raw_bytes(index) -> int:
    e = index.edges
    arrays = [index.passage_emb, index.phrase_emb, index.fact_emb, e.source, e.target, e.weight, e.kind]
    return int(sum(np.asarray(a).nbytes for a in arrays))


def child_memory(folder: str, n_queries: int) -> dict:
    from benchmarks.synthetic_index import QueryVectors, synthetic_queries
    from hipporag2.config import RetrievalConfig
    from hipporag2.graph.store import load_index
    from hipporag2.retrieve.graph_retriever import GraphRetriever

    index = load_index(Path(folder) / "index")
    queries, vectors = synthetic_queries(index, n_queries)
    store = QueryVectors(queries, vectors)
    del vectors
    before = rss_mb()
    retriever = GraphRetriever(index, store, RetrievalConfig(ppr_solver="batched"), progress=False)
    for s in range(0, len(queries), BLOCK):
        retriever.retrieve(queries[s : s + BLOCK])
    return {"peak_rss_mb": rss_mb(), "rss_before_retriever_mb": before, "raw_index_mb": _raw_bytes(index) / 2**20}


def child_baseline() -> dict:
    """Peak RSS of an interpreter that imports what a batched query run imports and loads
    the compiled kernels (numba's disk cache), with no index: what no retriever can save."""
    import numpy as np

    from hipporag2.graph.store import load_index  # noqa: F401
    from hipporag2.retrieve.graph_retriever import GraphRetriever  # noqa: F401
    from hipporag2.retrieve.ppr.batched import BatchedSolver

    # a tiny solve loads every kernel a query uses
    ring = np.arange(8)
    from hipporag2.graph.build import GraphEdges

    edges = GraphEdges(8, ring, (ring + 1) % 8, np.ones(8), np.zeros(8, dtype=np.int8))
    BatchedSolver.from_edges(edges).solve(np.eye(8)[:2], 0.5)
    from hipporag2.retrieve.scoring import min_max_top_k

    min_max_top_k(np.random.default_rng(0).random((2, 50), dtype=np.float32), 5)
    return {"baseline_rss_mb": rss_mb()}


class TimedSolver:
    """The retriever's solver, with its solve calls timed (the PPR stage)."""

    def __init__(self, solver):
        self.solver, self.seconds = solver, 0.0
        self.batch_size = solver.batch_size
        self.release = solver.release

    def solve(self, *a, **k):
        t = time.perf_counter()
        try:
            return self.solver.solve(*a, **k)
        finally:
            self.seconds += time.perf_counter() - t


def run_block(retriever, block, out_file, lines):
    """`GraphRetriever.retrieve` for one block, stage by stage (the same calls it makes),
    then what a run writes for it: its retrieval.jsonl lines (`lines`: a
    `result_lines.RetrievalLines` of the corpus), which are also the retrieval
    checkpoint (`run_files.RetrievalFile`)."""
    from hipporag2.retrieve.graph_retriever import dense_scores, query_result

    t = {}
    solver = retriever.solver
    c0 = time.perf_counter()
    dense = dense_scores(retriever.store, retriever.index.passage_emb, [q.question for q in block], False)
    c1 = time.perf_counter()
    links = retriever._linking(retriever, [q.question for q in block])
    c2 = time.perf_counter()
    ranked = retriever._graph_results(block, dense, links)
    results = [ranked.get(r) or query_result(q.id, links[r], retriever.index, None, dense[r], retriever.cfg.retrieval_top_k)
               for r, q in enumerate(block)]
    c3 = time.perf_counter()
    for line in lines.lines(block, results):
        out_file.write(line + "\n")
    out_file.flush()
    c4 = time.perf_counter()
    t["dense scores"] = c1 - c0
    t["fact linking (scores, candidates, seeds)"] = c2 - c1
    t["PPR"] = solver.seconds
    t["resets and ranking"] = c3 - c2 - solver.seconds
    t["checkpoint + retrieval.jsonl lines"] = c4 - c3
    t["whole query after encoding"] = c4 - c0
    solver.seconds = 0.0
    return t, results


def near_tie_agree(ref, ours) -> tuple[bool, bool]:
    """(exactly equal, equal up to near-ties in ref's scores: 1e-12 x its top score)."""
    if ref.ranked == ours.ranked:
        return True, True
    tol = 1e-12 * max(abs(ref.scores[0]), 1e-300)
    group, g = {}, 0
    for i, (node, s) in enumerate(zip(ref.ranked, ref.scores)):
        if i and ref.scores[i - 1] - s > tol:
            g += 1
        group[node] = g
    ok = all(group.get(a, g) == group[b] for a, b in zip(ours.ranked, ref.ranked))
    return False, ok


def child_query(folder: str, n_queries: int, ref_every: int, scale: float, ppr_tol: float | None = None) -> dict:
    from benchmarks.synthetic_graph import make_graph, make_queries
    from benchmarks.synthetic_index import QueryVectors, synthetic_queries
    from hipporag2.config import RetrievalConfig
    from hipporag2.data.loaders import Corpus, Passage
    from hipporag2.graph.store import load_index
    from hipporag2.retrieve.graph_retriever import GraphRetriever
    from hipporag2.retrieve.ppr.prpack import PrpackSolver

    t = time.perf_counter()
    index = load_index(Path(folder) / "index")
    t_load = time.perf_counter() - t
    queries, vectors = synthetic_queries(index, n_queries)
    store = QueryVectors(queries, vectors)
    corpus = Corpus([Passage(title=p.split("\n")[0], text=p.split("\n", 1)[1], corpus_idx=i) for i, p in enumerate(index.passages)])
    from hipporag2.files.result_lines import RetrievalLines

    lines = RetrievalLines(corpus)  # once per corpus, as a run's write makes it once
    setup = {}
    t = time.perf_counter()
    tol = {} if ppr_tol is None else {"ppr_tol": ppr_tol}
    ours = GraphRetriever(index, store, RetrievalConfig(ppr_solver="batched", **tol), progress=False)
    setup["batched"] = time.perf_counter() - t
    t = time.perf_counter()
    ref = GraphRetriever(index, store, RetrievalConfig(ppr_solver="prpack"), progress=False)
    setup["prpack"] = time.perf_counter() - t
    ours.solver, ref.solver = TimedSolver(ours.solver), TimedSolver(ref.solver)
    for r in (ours, ref):  # loads the compiled loops (numba's disk cache) outside the timings
        r.retrieve(queries[:2])
        r.solver.seconds = 0.0
    from hipporag2.retrieve import scoring  # and the fact-candidate pass of large blocks (2 queries use numpy)

    scoring.min_max_top_k(np.zeros((2, scoring.PARALLEL_MIN), dtype=np.float32), 5)

    blocks, agree, exact, compared = [], 0, 0, 0
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "ours.jsonl", "w") as fo, open(Path(tmp) / "ref.jsonl", "w") as fr:
        for s in range(0, n_queries, BLOCK):
            block = queries[s : s + BLOCK]
            sub = block[::ref_every]
            l0 = load()
            to, res_o = run_block(ours, block, fo, lines)
            tr, res_r = run_block(ref, sub, fr, lines)
            blocks.append({"load": l0, "n": len(block), "n_ref": len(sub), "ours": to, "ref": tr})
            for a, b in zip(res_r, res_o[::ref_every]):
                e, ok = near_tie_agree(a, b)
                exact += e
                agree += ok
                compared += 1
    # prpack on the random-synonym graph of benchmarks/synthetic_graph.py, same scale
    sg = make_graph(scale)
    R = make_queries(sg, 8).resets(0.05)
    solver = PrpackSolver(sg.graph)
    solver.solve(R[:1], 0.5)
    t = time.perf_counter()
    solver.solve(R, 0.5)
    random_prpack = (time.perf_counter() - t) / len(R)
    return {"load_index": t_load, "setup": setup, "blocks": blocks, "compared": compared, "exact": exact, "agree": agree,
            "random_prpack_s": random_prpack, "n_nodes": index.n_phrases + index.n_passages,
            "n_edges": int(index.edges.source.size), "n_facts": len(index.facts)}


# ---- parent -----------------------------------------------------------------------------
def in_child(*args) -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_query", "--child", *map(str, args)],
                         check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_query(blocks, side, stage):
    key = "n" if side == "ours" else "n_ref"
    return statistics.median(b[side][stage] / b[key] for b in blocks)


def spread(values, fmt="{:.1f}") -> str:
    """'median (min-max, n runs)' of repeated measurements, or the one value."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))}, {len(values)} runs)"


def report(scale, build, queries, memories) -> list[str]:
    """Markdown for one scale: (a) per query, one table per repeat plus the spread of the
    whole-query ratio; (b) the build; (m) memory per repeat."""
    stats = build["stats"] if build else None
    q0 = queries[0] if queries else None
    lines = []
    if stats and q0:
        lines += [f"### Scale {scale}: {stats['passage_nodes']:,} passages, {stats['phrase_nodes']:,} phrases, "
                  f"{q0['n_facts']:,} facts, {q0['n_edges']:,} edges ({stats['synonym_edges']:,} synonym)", ""]
    else:
        lines += [f"### Scale {scale}", ""]
    ratios, ppr_ratios = [], []
    for rep, query in enumerate(queries):
        lines += [f"(a) run {rep + 1}: per query, median over blocks of 256 (prpack on every "
                  f"{query['blocks'][0]['n'] // max(1, query['blocks'][0]['n_ref'])}th query of each block); "
                  f"started {query.get('started', '?')}; load average per block: "
                  + ", ".join(f"{b['load']:.1f}" for b in query["blocks"]), "",
                  "| stage | batched ms | prpack ms | ratio |", "| --- | ---: | ---: | ---: |"]
        for stage in query["blocks"][0]["ours"]:
            o, r = per_query(query["blocks"], "ours", stage) * 1e3, per_query(query["blocks"], "ref", stage) * 1e3
            bold = "**" if stage.startswith("whole") else ""
            lines.append(f"| {bold}{stage}{bold} | {o:.2f} | {r:.2f} | {bold}{r / o:.1f}x{bold} |")
            if stage.startswith("whole"):
                ratios.append(r / o)
            if stage == "PPR":
                ppr_ratios.append(r / o)
        n_q = sum(b["n"] for b in query["blocks"])
        lines += [
            f"| set-up: index load (checksums, mmap) | {query['load_index'] * 1e3:.0f} (once) | same | |",
            f"| set-up: retriever (batched: preparation loaded; prpack: igraph graph built) | {query['setup']['batched'] * 1e3:.0f} (once) | {query['setup']['prpack'] * 1e3:.0f} (once) | |",
            f"| prpack per call on random synonym pairs (`synthetic_graph`, same scale) | | {query['random_prpack_s'] * 1e3:.1f} | |",
            "",
            f"Rankings (top-{TOP}) of the {query['compared']} prpack queries against batched: "
            f"{query['exact']}/{query['compared']} identical, {query['agree']}/{query['compared']} up to near-ties (1e-12 x top score). "
            f"{n_q} batched queries in all.",
            ""]
    if ratios:
        lines += [f"Whole query after encoding, prpack / batched: **{spread(ratios)}x**; PPR alone {spread(ppr_ratios)}x.", ""]
    if build:
        lo = build["load"] if isinstance(build["load"], list) else [build["load"], float("nan")]
        lines += ["(b) index build after OpenIE and encoding, per stage "
                  f"(started {build.get('started', '?')}, load average {lo[0]:.1f} before / {lo[1]:.1f} after):", "",
                  "| stage | s |", "| --- | ---: |"]
        lines += [f"| {k} | {v:.2f} |" for k, v in build["stages"].items()]
        lines += [f"| **total (all of the above)** | **{build['total']:.1f}** |",
                  f"| peak RSS of the build | {build['peak_rss_mb']:.0f} MB |", ""]
    for rep, memory in enumerate(memories):
        lines += [f"(m) run {rep + 1}: memory, batched only, {memory.get('queries', '?')} queries (started {memory.get('started', '?')}, "
                  f"load {memory.get('load_start', float('nan')):.1f}): peak RSS {memory['peak_rss_mb']:.0f} MB = "
                  f"**{memory['peak_rss_mb'] / memory['raw_index_mb']:.2f}x** the raw index arrays ({memory['raw_index_mb']:.0f} MB: "
                  f"embeddings + edges); {memory['rss_before_retriever_mb']:.0f} MB before the retriever was made "
                  "(interpreter, libraries, index loaded)"
                  + (f"; an interpreter with the same imports and no index: {memory['baseline_rss_mb']:.0f} MB, so the "
                     f"run's own share is {(memory['peak_rss_mb'] - memory['baseline_rss_mb']) / memory['raw_index_mb']:.2f}x"
                     if "baseline_rss_mb" in memory else "") + ".", ""]
    return lines


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        kind, rest = argv[1], argv[2:]
        started, l0 = time.strftime("%H:%M:%S"), load()
        if kind == "build":
            res = child_build(float(rest[0]), rest[1])
        elif kind == "query":
            res = child_query(rest[0], int(rest[1]), int(rest[2]), float(rest[3]), float(rest[4]) if rest[4:] else None)
        elif kind == "baseline":
            res = child_baseline()
        else:
            res = child_memory(rest[0], int(rest[1]))
        res.update(started=started, load_start=l0)
        print(json.dumps(res))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="0.25,0.5,1")
    ap.add_argument("--queries", type=int, default=1024)
    ap.add_argument("--ref-every", default="8", help="prpack runs on every k-th query of a block; one value, or one per scale")
    ap.add_argument("--repeats", default="1", help="query and memory runs per scale (one build each); one value or one per scale")
    ap.add_argument("--parts", default="build,query,memory", help="which children to run (build is reused from --keep)")
    ap.add_argument("--keep", default=None, help="folder keeping each scale's built index (and its build report) between runs")
    ap.add_argument("--ppr-tol", type=float, default=None,
                    help="the batched solver's retrieval.ppr_tol (default: the config's; prpack's own is 1e-10)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cmd = "python -m benchmarks.bench_query " + " ".join(shlex.quote(a) for a in argv)
    import igraph
    import numba
    import scipy

    scales = [float(s) for s in args.scales.split(",")]

    def per_scale(text, cast):
        vals = [cast(v) for v in str(text).split(",")]
        return vals if len(vals) == len(scales) else [vals[0]] * len(scales)

    ref_every, repeats = per_scale(args.ref_every, int), per_scale(args.repeats, int)
    parts = set(args.parts.split(","))
    lines = [f"Command: `{cmd}`", "",
             f"Machine: {platform.machine()}, os.cpu_count()={os.cpu_count()}; Python {platform.python_version()}, numpy {np.__version__}, "
             f"scipy {scipy.__version__}, igraph {igraph.__version__}, numba {numba.__version__}; started {time.strftime('%Y-%m-%d %H:%M:%S')} "
             f"(load average {os.getloadavg()[0]:.1f}); children with OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'passive')}", ""]
    baseline = in_child("baseline") if "memory" in parts else None
    if baseline:
        lines += [f"An interpreter with the imports a batched query run makes (numpy, scipy, numba kernels loaded, "
                  f"the retriever's modules) and no index: peak RSS {baseline['baseline_rss_mb']:.0f} MB.", ""]
    for scale, every, reps in zip(scales, ref_every, repeats):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(args.keep) / f"scale-{scale:g}" if args.keep else Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            saved = folder / "build.json"
            build = None
            if saved.is_file() and (folder / "index").is_dir():
                build = json.loads(saved.read_text())
            elif "build" in parts or "query" in parts or "memory" in parts:
                print(f"[{time.strftime('%H:%M:%S')}] scale {scale}: build", file=sys.stderr, flush=True)
                build = in_child("build", scale, folder)
                saved.write_text(json.dumps(build))
            queries, memories = [], []
            for rep in range(reps):
                if "query" in parts:
                    print(f"[{time.strftime('%H:%M:%S')}] scale {scale}: query {rep + 1}", file=sys.stderr, flush=True)
                    tol = [] if args.ppr_tol is None else [args.ppr_tol]
                    queries.append(in_child("query", folder, args.queries, every, scale, *tol))
                if "memory" in parts:
                    print(f"[{time.strftime('%H:%M:%S')}] scale {scale}: memory {rep + 1}", file=sys.stderr, flush=True)
                    m = in_child("memory", folder, args.queries)
                    m.update(queries=args.queries, baseline_rss_mb=baseline["baseline_rss_mb"])
                    memories.append(m)
        part = report(scale, build, queries, memories)
        print("\n".join(part), flush=True)
        lines += part
        if args.out:  # written after every scale: a long run keeps what it finished
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
