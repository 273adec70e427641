"""`hipporag2-sweep`: a damping x passage_node_weight grid of HippoRAG 2 runs in one process.

    hipporag2-sweep --damping 0.3,0.5,0.7,0.85 --passage-node-weight 0.01,0.05,0.1,0.3,0.5 \\
        --out DIR [hydra-style overrides...]

Data, OpenIE, embeddings and the graph are loaded once (from the cache, like a normal
run); query embedding, fact linking and the fact filter run once per query. The PPR
part is solved for all grid points together: the unnormalised solution y of
y = r + d A y is linear in the reset r, and a reset is r = p + w s (p: phrase seeds,
s: min-max dense scores on passage vertices, w: passage_node_weight), so one solve of
p and one of s per damping give every w: PPR = (y_p + w y_s) / sum(y_p + w y_s); all
dampings share one multi-shift CG run (`PPRSolver.solve_many`).

Each grid point gets a run folder DIR/d{damping}_w{weight}/ with the files of a normal
run, written by the run's own writer (`run_files.write_run`: retrieval.jsonl,
graph_stats.json, and metrics.json with the config and overrides the report reads),
and DIR/sweep.json holds the recall grid and timings.

Gates (hipporag2/gates.py) are a run's: the OpenIE coverage and no-facts gates stop the
sweep while the index is prepared, and every grid point must pass
`retrieval.max_fallback_rate` before any point folder is written (GateError: one line,
exit 2). sweep.json is removed when the folder starts to change and written last, and a
point's metrics.json is written after its other files, so an interrupted sweep leaves
nothing that reads as finished.
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from hipporag2.config import Config, ConfigError
from hipporag2.data.loaders import Query
from hipporag2.retrieve import seeds as seeding
from hipporag2.results import QueryResult
from hipporag2.retrieve.graph_retriever import query_result
from hipporag2.retrieve.ppr import OutputBuffer

log = logging.getLogger("hipporag2")

Point = Tuple[float, float]  # (damping, passage_node_weight)


def parse_floats(text: str, name: str) -> List[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{name}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise ConfigError(f"{name}: no values given")
    if len(set(values)) != len(values):
        raise ConfigError(f"{name}: repeated values in {text!r}")
    return values


def check_sweepable(cfg) -> None:
    """The sweep is HippoRAG 2 with passage nodes: the only method whose resets mix in
    passage_node_weight linearly (without passage nodes the weight does nothing)."""
    r = cfg.retrieval if isinstance(cfg, Config) else cfg
    if r.method != "hipporag2" or not r.passage_nodes:
        raise ConfigError(
            f"hipporag2-sweep sweeps HippoRAG 2 with passage nodes (retrieval.method=hipporag2, "
            f"retrieval.passage_nodes=true); got retrieval.method={r.method!r}, retrieval.passage_nodes={r.passage_nodes!r}"
        )
    if r.fusion != "none":
        raise ConfigError(f"hipporag2-sweep sweeps the PPR ranking itself; retrieval.fusion={r.fusion!r} is not swept "
                          "(set retrieval.fusion=none)")


def point_dir_name(d: float, w: float) -> str:
    return f"d{d:g}_w{w:g}"


def solve_grid(
    retriever,
    solver,
    queries: Sequence[Query],
    dampings: Sequence[float],
    weights: Sequence[float],
    block_size: Optional[int] = None,
    timings=None,
) -> Dict[Point, List[QueryResult]]:
    """Results of `GraphRetriever.retrieve` for every (damping, weight) point.

    `retriever` is a GraphRetriever with passage nodes (only its linking and dense
    scores are used); `solver` a `PPRSolver` over its graph (the sweep runs the batched
    one). Queries go in blocks of `block_size` (default retrieval.query_batch_size), as
    in `retrieve`.
    """
    from contextlib import nullcontext

    cfg, idx = retriever.cfg, retriever.index
    check_sweepable(cfg)
    if not retriever.with_passage_nodes:
        raise ConfigError("hipporag2-sweep needs a retriever with passage nodes")
    stage = timings.stage if timings is not None else (lambda name: nullcontext())
    block_size = block_size or cfg.query_batch_size
    n_ph = idx.n_phrases
    out: Dict[Point, List[QueryResult]] = {(d, w): [] for d in dampings for w in weights}
    buffer = OutputBuffer()  # the solver's answers for one block, reused by the next
    for start in range(0, len(queries), block_size):
        block = queries[start : start + block_size]
        with stage("link"):
            dense, links = retriever.link_and_dense(block)
        # Phrase part p and passage part s of each graph query's reset: r(w) = p + w s.
        phrase, passage, graph_rows = [], [], []
        for r, (seeds, _details) in enumerate(links):
            if not seeds:
                continue  # dense fallback at every point
            phrase.append(seeds)
            passage.append(seeding.passage_seed_vector(dense[r], 1.0, cfg.passage_seed_top_k))
            graph_rows.append(r)
        m = len(graph_rows)
        if m:
            with stage("ppr_solve"):
                R = seeding.reset_rows(phrase + [[]] * m, [None] * m + passage, n_ph, idx.n_phrases + idx.n_passages)
                Y = solver.solve_many(R, list(dampings), out=buffer.view((len(dampings), *R.shape)))  # (k, 2m, n)
            sum_p, sum_s = Y[:, :m].sum(axis=2), Y[:, m:].sum(axis=2)  # (k, m)
            pass_p, pass_s = Y[:, :m, n_ph:], Y[:, m:, n_ph:]
            del Y
        with stage("rank"):
            for w in weights:
                # the fallback test of `retrieve`, on the reset p + w s
                row_of = {r: i for i, r in enumerate(graph_rows) if seeding.seeds_anything(phrase[i], passage[i] * w)}
                for k, d in enumerate(dampings):
                    results = out[(d, w)]
                    for r, q in enumerate(block):
                        scores = None
                        if r in row_of:
                            i = row_of[r]
                            scores = (pass_p[k, i] + w * pass_s[k, i]) / (sum_p[k, i] + w * sum_s[k, i])
                        results.append(query_result(q.id, links[r], idx, scores, dense[r], cfg.retrieval_top_k))
    return out


# ---- the command -----------------------------------------------------------------


def check_point_gates(cfg: Config, grid: Dict[Point, List[QueryResult]], facts: int) -> None:
    """The fallback gate of a single run (`retrieval.max_fallback_rate`), at every grid
    point, before any point folder is written: a sweep never leaves folders of points
    that a run with the same settings would have refused."""
    from hipporag2.gates import GateError, check_fallback_rate
    from hipporag2.stages import count_fallbacks

    failures = []
    for (d, w), results in grid.items():
        try:
            check_fallback_rate(cfg.retrieval.method, count_fallbacks(results), len(results), cfg.retrieval.max_fallback_rate,
                                facts, where=f"hipporag2-sweep point {point_dir_name(d, w)}: ",
                                relax="set retrieval.max_fallback_rate=1 to accept it")
        except GateError as e:
            failures.append(str(e))
    if failures:
        more = f"; {len(failures)} of {len(grid)} points exceed it, no point folder was written" if len(failures) > 1 else \
            "; no point folder was written"
        raise GateError(failures[0] + more)


def run_sweep(cfg: Config, dampings: Sequence[float], weights: Sequence[float], out_dir: Path, overrides: Sequence[str]) -> Dict:
    from hipporag2.api import HippoRAG
    from hipporag2.files.redact import install_log_redaction, redact_obj
    from hipporag2.results import RunReport
    from hipporag2.files.run_files import write_results, write_run
    from hipporag2.files.atomicio import write_json
    from hipporag2.stages import run_report

    t_start = time.perf_counter()
    install_log_redaction(cfg.llm.api_key_env)
    check_sweepable(cfg)
    for d in dampings:
        if not 0.0 <= d < 1.0:
            raise ConfigError(f"--damping: {d} is outside [0, 1)")
    for w in weights:
        if w < 0:
            raise ConfigError(f"--passage-node-weight: {w} is negative")
    # The library over the dataset gives linking, dense scores and its batched solver
    # (prepared once per index and loaded from the index folder), which the grid drives
    # directly. Its index passed the gates of a run (OpenIE coverage, facts) on the way.
    link_cfg = replace(cfg, retrieval=replace(cfg.retrieval, ppr_solver="batched"))
    rag = HippoRAG.for_dataset(link_cfg)
    inputs, timings, report, index = rag.inputs, rag.timings, rag.report, rag.index_data
    queries, corpus, store = inputs.queries, inputs.corpus, rag.store()
    retriever = rag.retriever
    with timings.stage("retrieval"):
        grid = solve_grid(retriever, retriever.solver, queries, dampings, weights, cfg.retrieval.query_batch_size, timings)
    check_point_gates(cfg, grid, int(index.stats.get("facts", 0)))
    shared = dict(timings.seconds)
    report.update(rag.llm_report())

    # From here on the folder changes: sweep.json (written last) marks a finished
    # sweep, and in each point folder metrics.json (written last) a finished point.
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").unlink(missing_ok=True)
    reports: Dict[Point, RunReport] = {}
    points = []
    for d in dampings:
        for w in weights:
            t0 = time.perf_counter()
            results = grid[(d, w)]
            run_dir = out_dir / point_dir_name(d, w)
            pcfg = replace(cfg, run_dir=str(run_dir),
                           retrieval=replace(cfg.retrieval, damping=d, passage_node_weight=w, ppr_solver="batched"))
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "metrics.json").unlink(missing_ok=True)  # an older sweep's point is not this one's
            write_results(run_dir, queries, results, corpus)
            point_report = {**report, "retrieval.damping": d, "retrieval.passage_node_weight": w,
                            "sweep": {"dir": str(out_dir), "points": len(dampings) * len(weights),
                                      "shared_timings": "timings are for the whole sweep, shared by its points"}}
            # timings: the shared ones, and this point's writing (its files but metrics.json)
            timings_point = {**shared, "write_point": round(time.perf_counter() - t0, 3)}
            metrics = run_report(pcfg, inputs, results, store, point_report, timings_point)
            point = reports[(d, w)] = write_run(run_dir, metrics, index.stats, pcfg,
                                                list(overrides) + [f"retrieval.damping={d:g}", f"retrieval.passage_node_weight={w:g}"])
            points.append({"damping": d, "passage_node_weight": w, "run_dir": str(run_dir), **point.recall,
                           "dense_fallbacks": point.dense_fallbacks, "dense_fallback_rate": point.dense_fallback_rate})
    rag.close()
    recall_grid: Dict[str, List[List[Optional[float]]]] = {
        f"recall@{k}": [[reports[(d, w)].recall_at(k) for w in weights] for d in dampings] for k in cfg.recall_k
    }
    wall = round(time.perf_counter() - t_start, 3)
    summary = {
        "dataset": cfg.dataset.name,
        "method": cfg.retrieval.name,
        "n_queries": len(queries),
        "dampings": list(dampings),
        "passage_node_weights": list(weights),
        "grid_rows": "damping",
        "grid_columns": "passage_node_weight",
        "recall": recall_grid,
        "points": points,
        "timings": {**shared, "total": wall},
        "overrides": list(overrides),
    }
    write_json(out_dir / "sweep.json", redact_obj(summary))
    return summary


def format_grid(summary: Dict, metric: str = "recall@5") -> str:
    ws, ds = summary["passage_node_weights"], summary["dampings"]
    lines = [f"{metric}: damping \\ passage_node_weight".ljust(34) + "".join(f"{w:>8g}" for w in ws)]
    for d, row in zip(ds, summary["recall"].get(metric, [])):
        lines.append(f"{d:<34g}" + "".join(f"{v:>8.1f}" for v in row))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="hipporag2-sweep",
        description="HippoRAG 2 over a damping x passage_node_weight grid, index loaded once, all points solved together.",
    )
    parser.add_argument("--damping", required=True, help="comma-separated dampings, e.g. 0.3,0.5,0.7,0.85")
    parser.add_argument("--passage-node-weight", required=True, help="comma-separated weights, e.g. 0.01,0.05,0.1")
    parser.add_argument("--out", required=True, help="sweep folder: one run folder per point, and sweep.json")
    parser.add_argument("overrides", nargs="*", help="Hydra-style overrides, as for `hipporag2`")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    from hipporag2.cli import user_errors
    from hipporag2.config_check import check_overrides
    from hipporag2.runtime.interrupts import exit_on_signal

    with exit_on_signal(), user_errors():
        for o in args.overrides:
            key = o.split("=", 1)[0].lstrip("+~")
            if key in ("retrieval.damping", "retrieval.passage_node_weight"):
                raise ConfigError(f"{o!r}: the swept settings are given by --damping / --passage-node-weight")
        dampings = parse_floats(args.damping, "--damping")
        weights = parse_floats(args.passage_node_weight, "--passage-node-weight")
        cfg = check_overrides(args.overrides)  # every config mistake in one line, before any work
        summary = run_sweep(cfg, dampings, weights, Path(args.out), args.overrides)
    print(format_grid(summary))
    print(f"timings (s): {summary['timings']}")
    print(f"sweep folder: {args.out}")


if __name__ == "__main__":
    main()
