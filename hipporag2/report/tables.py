"""Paper-layout tables from run directories, built as pandas DataFrames.

A table is two frames made from the typed run results (`report.runs.Run`) and the
paper's numbers (`report.reference`): `data`, one row per cell (our number, the
paper's, the difference, the significance test, the run folder), written as the CSV;
and `frame`, the layout the Markdown shows, which pandas places (pivot), orders,
averages and extends by the paper's rows no run stands for (merge, concat). Every table
states the models, the data and the command behind it. Cells read `ours† (paper,
ours − paper)`; † marks a significant gain over the dense baseline on the same data
(paired bootstrap over questions, one-sided p < 0.05) and ↓ a significant loss.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pandas as pd

from hipporag2.registry import REPORT_TABLES
from hipporag2.report.labels import DATASET_NAMES, DATASET_ORDER, make_labeller, provenance_lines, value_str, varying_keys
from hipporag2.report.perquery import GoldUnavailable, Significance, compare, segment_recall
from hipporag2.report.reference import Entry, Reference, weighted_mean
from hipporag2.report.runs import Run

RECALL_KS = (1, 2, 5, 10, 20)
DATA_KEYS = ("dataset.corpus_segments", "dataset.segments_indexed", "dataset.segment_queries", "dataset.max_queries")


def fmt(x: Optional[float], nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{nd}f}"


def fmt_delta(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:+.1f}".replace("-", "−")


def fallback_text(run: Optional[Run]) -> str:
    """`n (rate%)` of the queries that fell back to dense retrieval; – for runs without
    a graph or from before the count existed."""
    if run is None or run.get("retrieval.method", run.method) in ("dense", "bm25"):
        return "–"
    n = run.metrics.get("dense_fallbacks")
    if n is None:
        return "–"
    rate = run.metrics.get("dense_fallback_rate")
    if rate is None:
        rate = n / max(1, int(run.metrics.get("n_queries") or 1))
    return f"{n} ({100 * rate:.0f}%)"


# ---------------------------------------------------------------------------------
# Table model: a cell, and a table as two frames


@dataclass
class Cell:
    """Our number for one run and metric beside the paper's for the same condition, the
    number our references expect and the significance test against the dense run."""

    ours: Optional[float] = None
    paper: Optional[float] = None
    paper_loose: bool = False
    sig: Optional[Significance] = None
    run: Optional[Run] = None
    expected: Optional[float] = None
    paper_entry: Optional[Entry] = None
    metric: str = ""

    @property
    def paper_text(self) -> str:
        dagger = "†" if self.paper_entry is not None and self.metric in self.paper_entry.dagger else ""
        return f"{'~' if self.paper_loose else ''}{fmt(self.paper)}{dagger}"

    @property
    def delta(self) -> Optional[float]:
        return None if self.ours is None or self.paper is None else round(self.ours - self.paper, 1)

    @property
    def mark(self) -> str:
        return self.sig.mark if self.sig else ""

    def markdown(self, with_paper: bool = True) -> str:
        s = fmt(self.ours) + self.mark
        if self.run is not None and self.run.metrics.get("dense_fallbacks"):
            s += f" [fallback {fallback_text(self.run)}]"
        if with_paper and self.paper is not None:
            s += f" ({self.paper_text}, {fmt_delta(self.delta)})"
        return s

    def record(self) -> Dict[str, Any]:
        """The cell's fields in the CSV."""
        r, sig = self.run, self.sig
        of_run = dict.fromkeys(RUN_FIELDS) if r is None else {
            "n_queries": r.metrics.get("n_queries"), "dense_fallbacks": r.metrics.get("dense_fallbacks"),
            "dense_fallback_rate": r.metrics.get("dense_fallback_rate"), "dataset": r.dataset, "method": r.method,
            "embedding": r.embedding, "run_dir": str(r.path), "overrides": " ".join(r.overrides)}
        return {
            "ours": self.ours, "paper": self.paper, "paper_condition_differs": self.paper_loose if self.paper is not None else None,
            "delta_vs_paper": self.delta, "expected": self.expected,
            "p_better_than_dense": None if sig is None else round(sig.p_better, 4),
            "p_worse_than_dense": None if sig is None else round(sig.p_worse, 4), **of_run,
        }


RUN_FIELDS = ("n_queries", "dense_fallbacks", "dense_fallback_rate", "dataset", "method", "embedding", "run_dir", "overrides")
NOT_RUN = "not run"


def markdown_rows(frame: pd.DataFrame) -> List[str]:
    """A frame as a Markdown table: the label column left-aligned, the others
    right-aligned, cells unpadded (so a row reads the same wherever it is)."""
    def line(cells) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"

    return [line(frame.columns), "|" + "|".join(["---"] + ["---:"] * (frame.shape[1] - 1)) + "|",
            *(line(row) for row in frame.itertuples(index=False))]


@dataclass
class Table:
    name: str
    title: str
    frame: pd.DataFrame  # the layout the Markdown shows: header = columns, cells as text
    data: pd.DataFrame  # one row per cell, written as the CSV (object columns: counts stay integers)
    notes: List[str] = field(default_factory=list)
    provenance: List[str] = field(default_factory=list)
    images: List[str] = field(default_factory=list)

    def markdown(self) -> str:
        out = [f"### {self.title}", "", *markdown_rows(self.frame), ""]
        for img in self.images:
            out += [f"![{Path(img).stem}]({Path(img).name})", ""]
        out += self.notes + ([""] if self.notes else [])
        out += self.provenance
        return "\n".join(out) + "\n"

    def csv(self) -> str:
        return self.data.to_csv(index=False, lineterminator="\n") if len(self.data) else ""


def records(name: str, cells: pd.DataFrame) -> pd.DataFrame:
    """The CSV rows of long cells (row, column, metric, cell)."""
    return pd.DataFrame([{"table": name, "row": row, "column": col, "metric": m, **cell.record()}
                         for row, col, m, cell in cells[["row", "column", "metric", "cell"]].itertuples(index=False)], dtype=object)


def spread(cells: pd.DataFrame, rows: Sequence[Any], headers: Sequence[Any], first: str, empty: str = "–") -> pd.DataFrame:
    """Long cells (row, header, text) laid out as the table shows them: rows and columns
    in the given order, `first` naming the label column, a cell nothing fills `empty`."""
    wide = cells.pivot(index="row", columns="header", values="text").reindex(index=list(rows), columns=list(headers))
    return wide.fillna(empty).rename_axis(index=first, columns=None).reset_index()


@dataclass
class Context:
    paper: Optional[Reference]
    ours: List[Reference]
    baselines: List[Run]
    loose: bool = True
    bootstrap_samples: int = 10000


# ---------------------------------------------------------------------------------
# Cells: our value, the paper's, the significance test


def _dense_baseline(run: Run, pool: Sequence[Run]) -> Optional[Run]:
    if run.get("retrieval.method", run.method) == "dense":
        return None
    same_data = [
        b for b in pool
        if b.get("retrieval.method", b.method) == "dense" and b.dataset == run.dataset and b.data_hashes == run.data_hashes
        and all(value_str(b.get(k)) == value_str(run.get(k)) for k in DATA_KEYS)
    ]
    same_emb = [b for b in same_data if b.embedding == run.embedding]
    pick = same_emb or same_data
    return sorted(pick, key=lambda b: str(b.path))[0] if pick else None


def make_cell(run: Optional[Run], metric: str, ctx: Context, pool: Sequence[Run], significance: bool = True,
              table: Optional[str] = None) -> Cell:
    """Our value and the paper's: the entry of the paper's `table` when given (a number
    printed twice, e.g. GritLM's MuSiQue recall in Tables 3 and 7, may differ), else of
    any table."""
    if run is None:
        return Cell()
    cell = Cell(ours=run.metric(metric), run=run, metric=metric)
    if ctx.paper is not None:
        hit = (ctx.paper.lookup(run, metric, loose=ctx.loose, table=table) if table else None) or \
            ctx.paper.lookup(run, metric, loose=ctx.loose)
        if hit:
            cell.paper_entry, cell.paper, cell.paper_loose = hit[0], hit[1], hit[2]
    for ref in ctx.ours:
        hit = ref.lookup(run, metric)
        if hit:
            cell.expected = hit[1]
            break
    if significance and (metric.startswith("recall@") or metric.startswith("qa_")):
        base = _dense_baseline(run, list(pool) + list(ctx.baselines))
        if base is not None:
            cell.sig = compare(run, base, metric, ctx.bootstrap_samples)
    return cell


def _notes(cells: Sequence[Cell], ctx: Context, paper_shown: bool = True) -> List[str]:
    notes = []
    if any(c.run is not None and c.run.metrics.get("dense_fallbacks") for c in cells):
        notes.append("[fallback n (r%)]: queries of that run answered by the dense ranking because no fact "
                     "seeded the graph (SPEC §3.4); the number mixes graph and dense retrieval.")
    if any(c.sig is not None for c in cells):
        notes.append(
            "† significantly better than the dense baseline on the same data, ↓ significantly worse "
            f"(paired bootstrap over questions, one-sided p < 0.05, {ctx.bootstrap_samples:,} resamples)."
        )
    if not paper_shown:
        return notes
    if any(c.paper is not None for c in cells):
        notes.append("Cells: ours (paper, ours − paper).")
    if any(c.paper is not None and c.paper_loose for c in cells):
        cond = ctx.paper.condition if ctx.paper else ""
        notes.append(f"~ the paper's number under the paper's own condition ({cond}), shown for orientation: the encoder, LLM, data or filter differ from this run.")
    return notes


def _pick_latest(runs: Sequence[Run]) -> Run:
    runs = list(runs)
    if len(runs) == 1:
        return runs[0]
    return max(runs, key=lambda r: (r.path / "metrics.json").stat().st_mtime)


def place(runs: Sequence[Run], row_of: Callable[[Run], Tuple[Any, str]], col_of: Callable[[Run], Tuple[Any, str]]):
    """Runs on a grid: its row and column labels (sorted by the (key, label) pairs
    `row_of`/`col_of` give), the run of each filled cell (row-major; of several runs in
    one cell the latest) and how many runs a fuller cell left out."""
    placed = pd.DataFrame([(*row_of(r), *col_of(r), r) for r in runs], columns=["row_key", "row", "col_key", "column", "run"])

    def ordered(label: str, key: str) -> List[Any]:
        first = placed.drop_duplicates(label).set_index(label)[key].to_dict()
        return sorted(first, key=lambda x: (first[x], x))

    rows, cols = ordered("row", "row_key"), ordered("column", "col_key")
    picked = placed.groupby(["row", "column"]).run.agg(_pick_latest)
    return rows, cols, picked.reindex(pd.MultiIndex.from_product([rows, cols])).dropna(), len(placed) - len(picked)


# ---------------------------------------------------------------------------------
# Layouts


def table_recall(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path] = None, name: str = "recall",
                 title: str = "Passage recall@k") -> Table:
    """One row per run: recall@1..20, expected R@5, the paper's R@5, significance."""
    label = make_labeller(runs)
    order = sorted(runs, key=lambda r: (DATASET_ORDER.index(r.dataset) if r.dataset in DATASET_ORDER else 99, r.dataset, label(r)))
    shown, cells = [], []
    for r in order:
        c = {k: make_cell(r, f"recall@{k}", ctx, runs, significance=k == 5) for k in RECALL_KS}
        ds = DATASET_NAMES.get(r.dataset, r.dataset)
        cells += [(label(r), ds, f"recall@{k}", c[k]) for k in RECALL_KS]
        shown.append({
            "dataset": ds, "run": label(r), "n": str(r.metrics.get("n_queries", "")),
            **{f"R@{k}": fmt(c[k].ours) + c[k].mark for k in RECALL_KS}, "fallbacks": fallback_text(r),
            "expected R@2/R@5": "–" if c[5].expected is None and c[2].expected is None else f"{fmt(c[2].expected)}/{fmt(c[5].expected)}",
            "paper R@5": "–" if c[5].paper is None else ("~" if c[5].paper_loose else "") + fmt(c[5].paper),
            "Δ R@5": fmt_delta(c[5].delta), "p (R@5 > dense)": "–" if c[5].sig is None else f"{c[5].sig.p_better:.3f}",
        })
    notes = [n for n in _notes([c for *_, c in cells if c.metric == "recall@5"], ctx) if not n.startswith("Cells:")]
    return Table(name, title, pd.DataFrame(shown), records(name, pd.DataFrame(cells, columns=["row", "column", "metric", "cell"])),
                 notes=notes, provenance=provenance_lines(runs))


def run_weight(run: Optional[Run], metric: str) -> float:
    """How many questions a run's metric is a mean over (qa_n for QA, else n_queries)."""
    if run is None:
        return 0.0
    n = run.metrics.get("qa_n") if metric.startswith("qa_") else None
    n = n if n is not None else run.metrics.get("n_queries")
    return float(n or 0)


def average_cell(cells: Sequence[Cell], metric: str, ctx: Context) -> Cell:
    """The Avg cell as the paper computes it: the mean over all questions, each dataset
    weighted by its number of questions (ours: the run's questions; the paper's: its
    dataset's, `questions` in paper.yaml). With equal counts this is the column mean."""
    avg = Cell(ours=weighted_mean([(c.ours, run_weight(c.run, metric)) for c in cells]), metric=metric)
    if ctx.paper is not None and cells and all(c.paper is not None and c.paper_entry is not None for c in cells):
        avg.paper = weighted_mean([(c.paper, ctx.paper.questions.get(str(c.paper_entry.dataset), 1)) for c in cells])
        avg.paper_loose = any(c.paper_loose for c in cells)
    return avg


def paper_cells(paper: Reference, table: str) -> pd.DataFrame:
    """The paper's numbers of one table: one row per (paper row, block, dataset, metric)
    with its †; of two entries for one row and dataset, the later."""
    last = {(e.row, e.block or "", e.dataset): e for e in paper.entries if e.table == table and e.row is not None}
    return pd.DataFrame([(*key, m, v, m in e.dagger) for key, e in last.items() for m, v in e.values.items()],
                        columns=["prow", "block", "dataset", "metric", "paper", "dagger"])


def not_run_rows(paper: Reference, table: str, covered: set, columns: Sequence[Tuple[str, str, str]], datasets: Sequence[str],
                 averages: Sequence[Tuple[str, str]], name: str, first: str) -> Optional[Tuple[pd.DataFrame, pd.DataFrame]]:
    """The paper's rows of `table` that no run stands for (`covered`: the (row, block)
    the runs matched), every cell `not run (paper's number)`, so that a row the harness
    cannot make (yet) is never blank and never missing; (shown rows, CSV rows). `columns`
    are the table's (header, dataset, metric), `datasets` its columns' datasets (the
    paper's average is over them), `averages` its avg (header, metric)."""
    rows = [(row, block) for row, block in paper.rows(table) if (row, block) not in covered]
    if not rows:
        return None
    labels = [row + (f" [{block}]" if block else "") for row, block in rows]
    grid = pd.DataFrame([(label, row, block or "", header, ds, m) for label, (row, block) in zip(labels, rows) for header, ds, m in columns],
                        columns=["row", "prow", "block", "header", "dataset", "metric"])
    grid = grid.merge(paper_cells(paper, table), how="left", on=["prow", "block", "dataset", "metric"])
    grid["text"] = [f"{NOT_RUN} ({fmt(v)}{'†' if d else ''})" if pd.notna(v) else NOT_RUN for v, d in zip(grid.paper, grid.dagger)]
    avg = [(label, header, paper.average_of(table, row, m, block, datasets)) for label, (row, block) in zip(labels, rows) for header, m in averages]
    avg = pd.DataFrame([(label, header, NOT_RUN if v is None else f"{NOT_RUN} ({fmt(v)})") for label, header, v in avg], columns=["row", "header", "text"])
    shown = spread(pd.concat([grid, avg]) if len(avg) else grid, labels, [h for h, _, _ in columns] + [h for h, _ in averages], first, NOT_RUN)
    data = grid.assign(table=name, column=grid.dataset, ours=None, status=NOT_RUN)
    return shown, data[["table", "row", "column", "metric", "ours", "paper", "status"]].astype(object)


def table_pivot(
    runs: Sequence[Run],
    ctx: Context,
    name: str,
    title: str,
    metrics: Sequence[str],
    col_of: Callable[[Run], Tuple[Any, str]] = lambda r: (DATASET_ORDER.index(r.dataset) if r.dataset in DATASET_ORDER else 99,
                                                          DATASET_NAMES.get(r.dataset, r.dataset)),
    row_of: Optional[Callable[[Run], Tuple[Any, str]]] = None,
    exclude: Sequence[str] = ("dataset",),
    average: bool = True,
    row_title: str = "",
    paper_table: Optional[str] = None,
    list_not_run: bool = True,
) -> Table:
    """Rows x columns (datasets by default), one cell per metric; an average column
    (question-weighted, as the paper averages); with `paper_table`, the paper's numbers
    come from that table and its rows that no run stands for are listed as "not run"."""
    if row_of is None:
        label = make_labeller(runs, exclude)
        row_of = lambda r: (label(r), label(r))  # noqa: E731
    rows, cols, picked, duplicates = place(runs, row_of, col_of)
    col_dataset = {col_of(r)[1]: r.dataset for r in reversed(runs)}  # a column's first run names its dataset

    def head(col: str, m: str) -> str:
        return f"{col} {m.replace('recall@', 'R@').replace('qa_', '')}" if len(metrics) > 1 else col

    cells = pd.DataFrame([(row, col, m, make_cell(run, m, ctx, runs, table=paper_table)) for (row, col), run in picked.items() for m in metrics],
                         columns=["row", "column", "metric", "cell"])
    averages = [(head("avg", m), m) for m in metrics] if average and len(cols) > 1 else []
    if averages:  # of the rows with our number in every column
        full = cells.cell.map(lambda c: c.ours is not None).groupby([cells.row, cells.metric]).transform("sum") == len(cols)
        avg = [(row, "avg", m, average_cell(list(g.cell), m, ctx)) for (row, m), g in cells[full].groupby(["row", "metric"], sort=False)]
        cells = pd.concat([cells, pd.DataFrame(avg, columns=cells.columns)], ignore_index=True) if avg else cells
    cells["header"] = [head(c, m) for c, m in zip(cells.column, cells.metric)]
    cells["text"] = cells.cell.map(Cell.markdown)
    frame = spread(cells, rows, [head(c, m) for c in cols for m in metrics] + [h for h, _ in averages], row_title or "run")
    data = records(name, cells).sort_values("row", key=lambda s: s.map(rows.index), kind="stable")  # a row's cells, then its avg
    ours = [c for c in cells.cell if c.run is not None]
    covered = {(c.paper_entry.row, c.paper_entry.block) for c in ours if c.paper_entry is not None and c.paper_entry.table == paper_table}
    missing = None
    if ctx.paper is not None and paper_table and list_not_run:
        missing = not_run_rows(ctx.paper, paper_table, covered, [(head(c, m), col_dataset[c], m) for c in cols for m in metrics],
                               [col_dataset[c] for c in cols], averages, name, row_title or "run")
    if missing is not None:
        frame, data = pd.concat([frame, missing[0]], ignore_index=True), pd.concat([data, missing[1]], ignore_index=True)
    notes = _notes(ours, ctx)
    if averages:
        notes.append("avg: the mean over all questions, each dataset weighted by its number of questions, as the paper "
                     "averages (ours: the run's questions; the paper's: 1,000 per dataset, LV-Eval 124, NarrativeQA 293).")
    if missing is not None:
        notes.append("not run (X): a row of the paper's table that no run here stands for, with the paper's number X "
                     "(a system this harness does not run, or a row whose runs are not in the folders given).")
    if duplicates:
        notes.append(f"{duplicates} cells had more than one run; the latest was used.")
    return Table(name, title, frame, data, notes=notes, provenance=provenance_lines(runs))


GRAPH_KEYS = ["phrase_nodes", "passage_nodes", "total_nodes", "extracted_edges", "synonym_edges", "context_edges", "total_edges"]


def _count_text(c: Cell) -> str:
    v = "–" if c.ours is None else f"{int(c.ours):,}"
    return v + (f" ({'~' if c.paper_loose else ''}{int(c.paper):,})" if c.paper is not None else "")


def table_graph(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path] = None, name: str = "table10",
                title: str = "Table 10: graph statistics") -> Table:
    """Table 10's rows, each counted as the reference counts it (report.runs.reference_graph_counts)."""
    with_graph = [r for r in runs if r.graph_stats]
    by_data: Dict[str, Run] = {}
    for r in with_graph:
        by_data.setdefault(f"{DATASET_NAMES.get(r.dataset, r.dataset)} ({r.embedding}, {r.get('llm.name', '?')})", r)
    cells = pd.DataFrame([(lab, k, k, k, make_cell(r, k, ctx, with_graph, significance=False, table="table10"))
                          for lab, r in sorted(by_data.items()) for k in GRAPH_KEYS], columns=["row", "column", "metric", "header", "cell"])
    cells["text"] = cells.cell.map(_count_text)
    notes = ["Cells: ours (paper). Counted on both sides as the reference counts (`get_graph_info`): extracted edges = "
             "unique facts; context edges = passage-phrase pairs; total edges = distinct ordered node pairs; synonym "
             "edges = total - extracted - context (so they include the second direction of each fact's phrase pair)."]
    if any(c.paper_loose for c in cells.cell if c.paper is not None):
        notes.append(f"~ the paper's graph ({ctx.paper.condition if ctx.paper else ''}); ours is built from different OpenIE / data.")
    return Table(name, title, spread(cells, sorted(by_data), GRAPH_KEYS, "dataset (encoder, LLM)"), records(name, cells),
                 notes=notes, provenance=provenance_lines(with_graph))


def _cost_values(r: Run) -> Dict[str, Optional[float]]:
    """Table 12's numbers of a run: a baseline's own counters where metrics.json has
    `table12` (hipporag2/baselines: its LLM is not OpenIE's), else the run's OpenIE
    token usage and stage timings."""
    t, own = r.metrics.get("timings", {}), r.metrics.get("table12")

    def millions(v: Optional[float]) -> Optional[float]:
        return None if v is None else round(v / 1e6, 2)

    if own:
        rss = own.get("peak_rss_mb")
        return {"indexing_minutes": None if own.get("indexing_s") is None else round(float(own["indexing_s"]) / 60.0, 2),
                "openie_input_tokens_millions": millions(own.get("indexing_llm_input_tokens")),
                "openie_output_tokens_millions": millions(own.get("indexing_llm_output_tokens")),
                "seconds_per_query": own.get("seconds_per_query"), "qa_gpu_memory_gb": None,
                "query_peak_rss_gb": None if rss is None else round(float(rss) / 1024.0, 2)}
    usage = r.metrics.get("llm_usage", {}) or {}
    tokens = {io: sum(u.get(f"{io}_tokens", 0) for s, u in usage.items() if s.startswith("openie")) if usage else None for io in ("input", "output")}
    return {"indexing_minutes": round(sum(v for k, v in t.items() if k in ("openie", "index_build", "embed_passages")) / 60.0, 2),
            "openie_input_tokens_millions": millions(tokens["input"]), "openie_output_tokens_millions": millions(tokens["output"]),
            "seconds_per_query": round(t.get("retrieval", 0.0) / max(int(r.metrics.get("n_queries", 0)), 1), 3),
            "qa_gpu_memory_gb": None, "query_peak_rss_gb": None}


# qa_gpu_memory_gb: the paper's column (GPU memory beyond the weights), not measured here;
# query_peak_rss_gb: the peak resident memory of a baseline's query process (CPU, weights
# included where the process holds them), a different quantity with no paper number.
COST_KEYS = ["indexing_minutes", "openie_input_tokens_millions", "openie_output_tokens_millions", "seconds_per_query",
             "qa_gpu_memory_gb", "query_peak_rss_gb"]


def table_cost(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path] = None, name: str = "table12",
               title: str = "Table 12: cost") -> Table:
    """One row per run (a baseline's own counters where metrics.json has `table12`), then
    the paper's systems no run stands for."""
    label = make_labeller(runs)
    shown, data, covered = [], [], set()
    for r in sorted(runs, key=label):
        vals, line = _cost_values(r), {"run": label(r), "n": str(r.metrics.get("n_queries", ""))}
        for k in COST_KEYS:
            hit = ctx.paper.lookup(r, k, loose=ctx.loose, table="table12") if ctx.paper else None
            line[k] = fmt(vals[k], 3 if k == "seconds_per_query" else 2) + (f" ({'~' if hit[2] else ''}{hit[1]:g})" if hit else "")
            data.append({"table": name, "row": label(r), "metric": k, "ours": vals[k], "paper": hit[1] if hit else None, "run_dir": str(r.path)})
            if hit:
                covered.add((hit[0].row, hit[0].block or ""))
        shown.append(line)
    frame, data = pd.DataFrame(shown), pd.DataFrame(data, dtype=object)
    if ctx.paper is not None:
        paper = paper_cells(ctx.paper, "table12")
        paper = paper[pd.Series([key not in covered for key in zip(paper.prow, paper.block)], index=paper.index, dtype=bool)]
        wide = paper.pivot_table(index="prow", columns="metric", values="paper", aggfunc="first", sort=False).reindex(columns=COST_KEYS)
        shown = wide.map(lambda v: NOT_RUN if pd.isna(v) else f"{NOT_RUN} ({v:g})").rename_axis(index="run", columns=None).reset_index()
        frame = pd.concat([frame, shown.assign(n=NOT_RUN)[frame.columns]], ignore_index=True)
        missing = [{"table": name, "row": row, "metric": k, "ours": None, "paper": v, "status": NOT_RUN}
                   for row, values in wide.iterrows() for k, v in values.items()]
        data = pd.concat([data, pd.DataFrame(missing, dtype=object)], ignore_index=True) if missing else data
    notes = [
        "Cells: ours (paper). Indexing = OpenIE + index build (+ passage embedding for dense), wall clock; "
        "tokens are the LLM's OpenIE usage in this run (0 when OpenIE came from the cache or an import file); "
        "seconds per query = the retrieval stage / questions. The paper's GPU memory beyond the weights (qa_gpu_memory_gb) "
        "is not measured here; query_peak_rss_gb is a baseline's query process's peak resident memory (metrics.json "
        "`table12.peak_rss_mb`), which has no paper number. Baselines (RAPTOR, LightRAG, GraphRAG) report their own counters (metrics.json `table12`): their indexing LLM's tokens "
        "(a fresh build's, also when the index came from the cache), build time, and (retrieval + reading) / questions.",
    ]
    return Table(name, title, frame, data, notes=notes, provenance=provenance_lines(runs))


def table_grid(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path] = None, name: str = "grid",
               title: str = "HippoRAG 2 recall@5 over damping × passage_node_weight", metric: str = "recall@5") -> Table:
    from hipporag2.report.plots import heatmap

    def point(key: str) -> Callable[[Run], Tuple[float, str]]:
        return lambda r: (float(r.get(key)), f"{float(r.get(key)):g}")

    ds, ws, picked, _ = place(runs, point("retrieval.damping"), point("retrieval.passage_node_weight"))
    cells = pd.DataFrame([(d, w, f"damping={d}", f"passage_node_weight={w}", metric, make_cell(r, metric, ctx, runs)) for (d, w), r in picked.items()],
                         columns=["d", "header", "row", "column", "metric", "cell"])
    cells["ours"] = [c.ours for c in cells.cell]
    cells["text"] = cells.cell.map(lambda c: c.markdown(with_paper=False))
    images = []
    if out_dir is not None:
        matrix = cells.pivot(index="d", columns="header", values="ours").reindex(index=ds, columns=ws).to_numpy(dtype=float)
        path = Path(out_dir) / f"{name}_heatmap.png"
        heatmap(matrix, [float(d) for d in ds], [float(w) for w in ws], path, title=f"{metric} ({runs[0].dataset}, {runs[0].embedding})")
        images.append(str(path))
    notes = _notes(list(cells.cell), ctx, paper_shown=False)
    best = max(((v, float(d), float(w)) for d, w, v in zip(cells.d, cells.header, cells.ours) if pd.notna(v)), default=None)
    if best:
        notes.insert(0, f"Best cell: damping {best[1]:g}, passage_node_weight {best[2]:g} → {metric} {best[0]:.1f}.")
    paper_row = []
    for w in ws if ctx.paper is not None else []:
        r = picked.get(("0.5", w))  # the run at damping 0.5 (rows are labelled f"{d:g}")
        hit = ctx.paper.lookup(r, metric, loose=True, table="table5", ignore=("retrieval.name", "retrieval.filter")) if r else None
        paper_row += [f"{w}: {hit[1]:.1f}"] if hit else []
    if paper_row:
        notes.append("Paper, Table 5 (damping 0.5, " + (ctx.paper.condition if ctx.paper else "") + "): " + ", ".join(paper_row) + ".")
    frame = spread(cells.assign(row=cells.d), ds, ws, "damping \\ passage_node_weight")
    return Table(name, title, frame, records(name, cells), notes=notes, provenance=provenance_lines(runs), images=images)


def table_continual(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path] = None, name: str = "fig3",
                    title: str = "Figure 3: continual indexing (corpus added in segments)", metric: str = "recall@5") -> Table:
    from hipporag2.report.plots import continual_plot

    seg_runs = [r for r in runs if int(r.get("dataset.corpus_segments", 1) or 1) > 1]
    label = make_labeller(seg_runs, exclude=("dataset.segments_indexed",))
    n_seg = max(int(r.get("dataset.corpus_segments")) for r in seg_runs)
    ks = list(range(1, n_seg + 1))
    by = {(f"{DATASET_NAMES.get(r.dataset, r.dataset)} · {label(r)}", int(r.get("dataset.segments_indexed") or n_seg)): r for r in seg_runs}
    series = sorted({s for s, _ in by})
    # One line per series and questions (all evaluated: segment 0; one segment's) x stage k.
    lines, data, cells = [], [], []
    for s, k in [(s, k) for s in series for k in ks if (s, k) in by]:
        r, where = by[s, k], f"segments_indexed={k}"
        cell = make_cell(r, metric, ctx, seg_runs)
        cells.append(cell)
        lines.append((s, 0, "all indexed segments", k, cell.ours, cell.markdown(with_paper=False)))
        data.append({"table": name, "row": s, "column": where, "metric": metric, **cell.record()})
        try:
            scores = segment_recall(r, metric)
        except GoldUnavailable:
            scores = {}
        for seg, (v, n) in ((seg, v) for seg, v in scores.items() if seg in ks):
            lines.append((s, seg, f"segment {seg}", k, v, fmt(v)))
            data.append({"table": name, "row": s, "column": where, "metric": f"{metric} (segment {seg} questions)",
                         "ours": v, "n_queries": n, "run_dir": str(r.path)})
    lines = pd.DataFrame(lines, columns=["run", "seg", "questions of", "k", "ours", "text"])
    headers = {k: f"{k} segment{'s' if k > 1 else ''} indexed" for k in ks}
    frame = lines.pivot(index=["run", "seg", "questions of"], columns="k", values="text").reindex(columns=ks).fillna("–")
    frame = frame.rename(columns=headers).rename_axis(columns=None).reset_index().drop(columns="seg")
    images = []
    if out_dir is not None:
        curve = lines.pivot(index=["run", "seg"], columns="k", values="ours").reindex(columns=ks)
        curves = {s: {"all" if seg == 0 else f"segment {seg}": [None] * len(ks) for seg in [0] + ks} for s in series}
        for (s, seg), values in curve.iterrows():
            curves[s]["all" if seg == 0 else f"segment {seg}"] = [None if pd.isna(v) else float(v) for v in values]
        path = Path(out_dir) / f"{name}.png"
        continual_plot(curves, ks, path, metric)
        images.append(str(path))
    notes = _notes(cells, ctx, paper_shown=False)
    notes.insert(0, "Each stage indexes segments 1..k (corpus order) and is evaluated on the questions whose gold passages are all indexed; "
                    "'segment s' rows follow the questions of one segment as later segments arrive (forgetting shows as a drop). "
                    "The paper gives this as a figure; SPEC §7 lists no numbers for it.")
    return Table(name, title, frame, pd.DataFrame(data, dtype=object), notes=notes, provenance=provenance_lines(seg_runs), images=images)


# ---------------------------------------------------------------------------------
# The layouts of `--table`, found through the REPORT_TABLES registry (hipporag2/registry.py,
# which checks that each takes (runs, ctx, out_dir, name)), and which one an experiment
# gets. The paper's row x dataset tables are one pivot each.


def _pivot(title: str, metrics: Sequence[str], runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str, **options) -> Table:
    return table_pivot(runs, ctx, name, title, metrics, **options)


layout_table2 = partial(_pivot, "Table 2: QA F1 (Llama-3.3-70B reader, top-5 passages)", ["qa_f1"], paper_table="table2")
layout_table8 = partial(_pivot, "Table 8: QA EM / F1 (top-5 passages)", ["qa_em", "qa_f1"], paper_table="table8")
layout_table3 = partial(_pivot, "Table 3: passage recall@5", ["recall@5"], paper_table="table3")
layout_table4 = partial(_pivot, "Table 4: ablations, recall@5", ["recall@5"], paper_table="table4")
layout_table5 = partial(_pivot, "Table 5: passage_node_weight, recall@5", ["recall@5"], average=False, row_title="passage_node_weight",
                        row_of=lambda r: (float(r.get("retrieval.passage_node_weight")), f"{float(r.get('retrieval.passage_node_weight')):g}"))
layout_table7 = partial(_pivot, "Table 7: retriever swap (MuSiQue), recall@5", ["recall@5"], average=False, row_title="retriever",
                        col_of=lambda r: (0 if r.get("retrieval.method") == "dense" else 1, r.method),
                        row_of=lambda r: (r.embedding, r.embedding), paper_table="table7", list_not_run=False)
layout_table9 = partial(_pivot, "Table 9: passage recall@2 / recall@5", ["recall@2", "recall@5"], paper_table="table9")


# The other layouts take (runs, ctx, out_dir, name) themselves.
layout_recall, layout_table10, layout_table12, layout_grid, layout_fig3 = table_recall, table_graph, table_cost, table_grid, table_continual


def build(kind: str, runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: Optional[str] = None) -> Table:
    if kind not in REPORT_TABLES:
        raise ValueError(f"unknown table {kind!r}; choose one of {sorted(KINDS)}")
    return REPORT_TABLES.load(kind)(runs, ctx, out_dir, name or kind)


KINDS = REPORT_TABLES.names()

EXPERIMENT_KINDS = {
    "table2_qa": "table2", "table8_qa": "table8", "table3_recall": "table3", "table4_ablations": "table4", "table5_reset_weight": "table5",
    "table7_retrievers": "table7", "table9_recall2_5": "table9", "table10_graph_stats": "table10", "table12_cost": "table12",
    "fig3_continual": "fig3", "musique_train_grid": "grid", "musique_train_continual": "fig3", "musique_train_ablations": "table4",
}


def auto_kind(runs: Sequence[Run]) -> str:
    exps = {r.experiment for r in runs}
    if len(exps) == 1 and None not in exps and next(iter(exps)) in EXPERIMENT_KINDS:
        return EXPERIMENT_KINDS[next(iter(exps))]
    if any(int(r.get("dataset.corpus_segments", 1) or 1) > 1 for r in runs):
        return "fig3"
    vary = set(varying_keys(runs))
    if vary and vary <= {"retrieval.damping", "retrieval.passage_node_weight"} and len(vary) == 2:
        return "grid"
    return "recall"
