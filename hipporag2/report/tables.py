"""Paper-layout tables from run directories.

Every table has a Markdown and a CSV form, and states the models, the data and the
command behind it. Cells put our number, the paper's number and the difference side by
side; † marks a significant gain over the dense baseline on the same data (paired
bootstrap over questions, one-sided p < 0.05) and ↓ a significant loss.
"""
from __future__ import annotations

import csv
import io
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from hipporag2.registry import REPORT_TABLES
from hipporag2.report.perquery import GoldUnavailable, Significance, compare, segment_recall
from hipporag2.report.reference import Entry, Reference, weighted_mean
from hipporag2.report.runs import Run

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"  # package data (hipporag2.compose.CONFIG_DIR)

# Column order and display names of the paper's datasets.
DATASET_ORDER = ["nq", "popqa", "musique", "2wikimultihopqa", "hotpotqa", "lveval", "narrativeqa", "musique_train"]
DATASET_NAMES = {
    "nq": "NQ", "popqa": "PopQA", "musique": "MuSiQue", "2wikimultihopqa": "2Wiki", "hotpotqa": "HotpotQA",
    "lveval": "LV-Eval", "narrativeqa": "NarrativeQA", "musique_train": "MuSiQue (shared 100)", "demo": "demo",
}
RECALL_KS = (1, 2, 5, 10, 20)
DATA_KEYS = ("dataset.corpus_segments", "dataset.segments_indexed", "dataset.segment_queries", "dataset.max_queries")


def fmt(x: Optional[float], nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{nd}f}"


def fmt_delta(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:+.1f}".replace("-", "−")


# ---------------------------------------------------------------------------------
# Labels: what distinguishes the runs of a table


def value_str(v: Any) -> str:
    """A setting as a label shows it: empty or blank strings quoted, so none is invisible."""
    if v is None:
        return "null"
    if isinstance(v, str) and (not v.strip() or v != v.strip()):
        return repr(v)
    return str(v)


def varying_keys(runs: Sequence[Run], exclude: Sequence[str] = ()) -> List[str]:
    """Settings whose value differs between the runs, among those that change results
    (operational keys such as batch sizes or paths are never part of a label)."""
    from hipporag2.helptext import NOT_RESULT_CHANGING

    keys = sorted({k for r in runs for k in r.settings})
    out = []
    for k in keys:
        if k in NOT_RESULT_CHANGING or any(k == e or k.startswith(e + ".") for e in exclude):
            continue
        values = {value_str(r.settings.get(k)) for r in runs}
        if len(values) > 1:
            out.append(k)
    return out


NAME_ORDER = ("retrieval.name", "embedding.name", "llm.name", "qa.name", "dataset.name", "openie.name")


def make_labeller(runs: Sequence[Run], exclude: Sequence[str] = ()) -> Callable[[Run], str]:
    """Label = the varying config-group names, then other varying settings where a run
    departs from the most common value (settings implied by a group name are hidden)."""
    vary = varying_keys(runs, exclude)
    # Rows chosen through a nested experiment group (e.g. experiment/quirk@_global_=single_edges)
    # are named by that choice.
    rows_by = sorted({o.split("=", 1)[0] for r in runs for o in r.overrides if o.startswith("experiment/")})
    row_choice = {id(r): dict(o.split("=", 1) for o in r.overrides if o.startswith("experiment/")) for r in runs}
    rows_by = [k for k in rows_by if len({row_choice[id(r)].get(k) for r in runs}) > 1]
    names = [k for k in NAME_ORDER if k in vary] + [k for k in vary if k.endswith(".name") and k not in NAME_ORDER]

    def ident(r: Run, k: str) -> str:
        return str(row_choice[id(r)].get(k)) if k in rows_by else value_str(r.settings.get(k))

    if rows_by:  # a name the row's choice already fixes (e.g. retrieval.name of retriever=hipporag2) is not repeated
        by_choice: Dict[Tuple, List[Run]] = {}
        for r in runs:
            by_choice.setdefault(tuple(ident(r, k) for k in rows_by), []).append(r)
        names = [k for k in names if any(len({value_str(r.settings.get(k)) for r in g}) > 1 for g in by_choice.values())]

    groups: Dict[Tuple, List[Run]] = {}
    for r in runs:
        groups.setdefault(tuple(ident(r, k) for k in rows_by + names), []).append(r)
    others = []
    for k in vary:
        if k in names:
            continue
        implied = (names or rows_by) and all(len({value_str(r.settings.get(k)) for r in g}) == 1 for g in groups.values())
        if not implied:
            others.append(k)
    modal = {k: Counter(value_str(r.settings.get(k)) for r in runs).most_common(1)[0][0] for k in others}

    def label(run: Run) -> str:
        parts = [ident(run, k) for k in rows_by]
        for k in names:
            if k == "embedding.name" and not run.uses_embedding:
                continue
            parts.append(value_str(run.settings.get(k)))
        for k in others:
            if k.startswith("embedding.") and not run.uses_embedding:
                continue
            v = value_str(run.settings.get(k))
            if v != modal[k]:
                parts.append(f"{k.split('.')[-1]}={v}")
        text = " / ".join(parts) if parts else run.method
        if _without_filter(run) and "filter" not in text:
            text += " / no filter"
        return text

    return label


def _without_filter(run: Run) -> bool:
    """HippoRAG 2's query-to-triple linking with the recognition-memory filter off: a
    different method from the paper's default, which a label must say."""
    return (run.get("retrieval.method", run.method) == "hipporag2"
            and run.get("retrieval.linking", "query_to_triple") == "query_to_triple"
            and run.get("retrieval.filter", "llm") == "none")


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
# Provenance block: models, data, command


def _experiment_params(name: str) -> Dict[str, str]:
    path = CONFIG_DIR / "experiment" / f"{name}.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {str(k): str(v) for k, v in (((data.get("hydra") or {}).get("sweeper") or {}).get("params") or {}).items()}


_SKIP_OVERRIDES = ("run_dir", "cache_dir", "progress", "hydra.", "hydra/")


def command_for(runs: Sequence[Run]) -> str:
    """The command that makes these runs, rebuilt from their .hydra/overrides.yaml."""
    per_key: "OrderedDict[str, List[str]]" = OrderedDict()
    present: Counter = Counter()
    for r in runs:
        seen = set()
        for o in r.overrides:
            key, _, value = o.partition("=")
            if key.startswith(_SKIP_OVERRIDES) or key in seen:
                continue
            seen.add(key)
            present[key] += 1
            vals = per_key.setdefault(key, [])
            if value not in vals:
                vals.append(value)
    if not per_key:
        return "hipporag2" + (" (defaults)" if runs else "")
    experiments = per_key.get("+experiment", [])
    swept = {}
    if len(experiments) == 1 and present["+experiment"] == len(runs):
        swept = _experiment_params(experiments[0])
    parts = []
    approximate = False
    product = 1
    for key, vals in per_key.items():
        if key in swept and set(vals) == set(swept[key].split(",")):
            product *= len(swept[key].split(","))
            continue  # the experiment's own sweep makes these
        if present[key] != len(runs):
            approximate = True
        product *= len(vals)
        parts.append(f"{key}={','.join(vals)}")
    if product != len(runs):
        approximate = True
    multi = len(runs) > 1
    cmd = "hipporag2 " + ("-m " if multi else "") + " ".join(parts)
    return cmd + ("   # (runs were made by several commands; this is their union)" if approximate else "")


def provenance_lines(runs: Sequence[Run]) -> List[str]:
    emb = sorted({r.embedding_model for r in runs if r.uses_embedding})
    llms = sorted({r.llm_model for r in runs if r.llm_model})
    openie = sorted({Path(str(r.metrics.get("openie_source"))).name for r in runs if r.metrics.get("openie_source")})
    if any(not r.metrics.get("openie_source") and r.graph_stats for r in runs):
        openie.append("extracted by the run's LLM")
    data: Dict[str, set] = {}
    nq: Dict[str, set] = {}
    for r in runs:
        data.setdefault(r.dataset, set()).update(f"{n} `{h}`" for n, h in sorted(r.data_hashes.items()))
        nq.setdefault(r.dataset, set()).add(int(r.metrics.get("n_queries", 0)))
    lines = [
        f"- **Models**: embedding {', '.join(emb) or 'none'}; LLM {', '.join(llms) or 'none'}; OpenIE {', '.join(openie) or 'n/a'}",
        "- **Data**: " + "; ".join(
            f"{DATASET_NAMES.get(d, d)} ({', '.join(sorted(data[d]))}; {'/'.join(str(n) for n in sorted(nq[d]))} questions)" for d in data
        ),
        f"- **Command**: `{command_for(runs)}`",
        f"- **Runs**: {len(runs)} ({', '.join(sorted({str(r.path.parent) for r in runs}))})",
    ]
    return lines


# ---------------------------------------------------------------------------------
# Table model


@dataclass
class Cell:
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

    def markdown(self, with_paper: bool = True) -> str:
        s = fmt(self.ours) + (self.sig.mark if self.sig else "")
        if self.run is not None and self.run.metrics.get("dense_fallbacks"):
            s += f" [fallback {fallback_text(self.run)}]"
        if with_paper and self.paper is not None:
            s += f" ({self.paper_text}, {fmt_delta(self.delta)})"
        return s


@dataclass
class Table:
    name: str
    title: str
    header: List[str]
    rows: List[List[str]]
    csv_rows: List[Dict[str, Any]]
    notes: List[str] = field(default_factory=list)
    provenance: List[str] = field(default_factory=list)
    images: List[str] = field(default_factory=list)
    extra_markdown: str = ""

    def markdown(self) -> str:
        out = [f"### {self.title}", ""]
        out.append("| " + " | ".join(self.header) + " |")
        out.append("|" + "|".join(["---"] + ["---:"] * (len(self.header) - 1)) + "|")
        for row in self.rows:
            out.append("| " + " | ".join(row) + " |")
        out.append("")
        if self.extra_markdown:
            out += [self.extra_markdown, ""]
        for img in self.images:
            out += [f"![{Path(img).stem}]({Path(img).name})", ""]
        out += self.notes + ([""] if self.notes else [])
        out += self.provenance
        return "\n".join(out) + "\n"

    def csv(self) -> str:
        if not self.csv_rows:
            return ""
        keys: List[str] = []
        for r in self.csv_rows:
            for k in r:
                if k not in keys:
                    keys.append(k)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in self.csv_rows:
            w.writerow(r)
        return buf.getvalue()


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


def value_of(run: Run, metric: str) -> Optional[float]:
    return run.metric(metric)


def make_cell(run: Optional[Run], metric: str, ctx: Context, pool: Sequence[Run], significance: bool = True,
              table: Optional[str] = None) -> Cell:
    """Our value and the paper's: the entry of the paper's `table` when given (a number
    printed twice, e.g. GritLM's MuSiQue recall in Tables 3 and 7, may differ), else of
    any table."""
    if run is None:
        return Cell()
    cell = Cell(ours=value_of(run, metric), run=run, metric=metric)
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


def _our_cell(run: Optional[Run], metric: str, ctx: Context, pool: Sequence[Run], cells: List[Cell],
              csv_rows: List[Dict[str, Any]], where: Tuple[str, str, str]) -> Cell:
    """A cell of our own numbers only (grids, curves): recorded in `cells` for the
    notes and, when there is a run, as a CSV row at `where` = (table, row, column)."""
    c = make_cell(run, metric, ctx, pool) if run else Cell()
    cells.append(c)
    if run:
        csv_rows.append(_csv_row(*where, metric, c))
    return c


def _csv_row(table: str, row: str, col: str, metric: str, cell: Cell, cmd: Optional[str] = None) -> Dict[str, Any]:
    r = cell.run
    return {
        "table": table, "row": row, "column": col, "metric": metric,
        "ours": cell.ours, "paper": cell.paper, "paper_condition_differs": cell.paper_loose if cell.paper is not None else None,
        "delta_vs_paper": cell.delta, "expected": cell.expected,
        "p_better_than_dense": None if cell.sig is None else round(cell.sig.p_better, 4),
        "p_worse_than_dense": None if cell.sig is None else round(cell.sig.p_worse, 4),
        "n_queries": None if r is None else r.metrics.get("n_queries"),
        "dense_fallbacks": None if r is None else r.metrics.get("dense_fallbacks"),
        "dense_fallback_rate": None if r is None else r.metrics.get("dense_fallback_rate"),
        "dataset": None if r is None else r.dataset,
        "method": None if r is None else r.method,
        "embedding": None if r is None else r.embedding,
        "run_dir": None if r is None else str(r.path),
        "overrides": None if r is None else " ".join(r.overrides),
    }


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
    if len(runs) == 1:
        return runs[0]
    return max(runs, key=lambda r: (r.path / "metrics.json").stat().st_mtime)


# ---------------------------------------------------------------------------------
# Layouts


def table_recall(runs: Sequence[Run], ctx: Context, name: str = "recall", title: str = "Passage recall@k") -> Table:
    """One row per run: recall@1..20, expected R@5, the paper's R@5, significance."""
    label = make_labeller(runs)
    order = sorted(runs, key=lambda r: (DATASET_ORDER.index(r.dataset) if r.dataset in DATASET_ORDER else 99, r.dataset, label(r)))
    header = ["dataset", "run", "n"] + [f"R@{k}" for k in RECALL_KS] + ["fallbacks", "expected R@2/R@5", "paper R@5", "Δ R@5", "p (R@5 > dense)"]
    rows, csv_rows, cells = [], [], []
    for r in order:
        c5 = make_cell(r, "recall@5", ctx, runs)
        c2 = make_cell(r, "recall@2", ctx, runs, significance=False)
        cells.append(c5)
        exp = "–" if c5.expected is None and c2.expected is None else f"{fmt(c2.expected)}/{fmt(c5.expected)}"
        paper = "–" if c5.paper is None else ("~" if c5.paper_loose else "") + fmt(c5.paper)
        rows.append(
            [DATASET_NAMES.get(r.dataset, r.dataset), label(r), str(r.metrics.get("n_queries", ""))]
            + [fmt(r.metric(f"recall@{k}")) + (c5.sig.mark if k == 5 and c5.sig else "") for k in RECALL_KS]
            + [fallback_text(r), exp, paper, fmt_delta(c5.delta), "–" if c5.sig is None else f"{c5.sig.p_better:.3f}"]
        )
        for k in RECALL_KS:
            c = c5 if k == 5 else (c2 if k == 2 else make_cell(r, f"recall@{k}", ctx, runs, significance=False))
            csv_rows.append(_csv_row(name, label(r), DATASET_NAMES.get(r.dataset, r.dataset), f"recall@{k}", c))
    notes = [n for n in _notes(cells, ctx) if not n.startswith("Cells:")]
    return Table(name, title, header, rows, csv_rows, notes=notes, provenance=provenance_lines(runs))


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


NOT_RUN = "not run"


def not_run_rows(ctx: Context, paper_table: Optional[str], covered: set, col_datasets: Sequence[Optional[str]],
                 metrics: Sequence[str], with_avg: bool, name: str) -> Tuple[List[List[str]], List[Dict[str, Any]]]:
    """The paper's rows of `paper_table` that no run of the table stands for: each cell
    `not run (paper X)`, so a row the harness cannot make (yet) is never blank and never
    missing. `covered` holds the (row, block) of the paper entries the runs matched."""
    if ctx.paper is None or not paper_table:
        return [], []
    rows, csv_rows = [], []
    for row, block in ctx.paper.rows(paper_table):
        if (row, block) in covered:
            continue
        entries = ctx.paper.row_entries(paper_table, row, block)
        by_ds = {e.dataset: e for e in entries}
        label = f"{row}" + (f" [{block}]" if block else "")
        out = [label]
        for ds in col_datasets:
            e = by_ds.get(ds)
            for m in metrics:
                v = e.values.get(m) if e is not None else None
                dag = "†" if e is not None and m in e.dagger else ""
                out.append(f"{NOT_RUN} ({fmt(v)}{dag})" if v is not None else NOT_RUN)
                csv_rows.append({"table": name, "row": label, "column": ds, "metric": m, "ours": None, "paper": v,
                                 "status": NOT_RUN})
        if with_avg:
            for m in metrics:
                v = ctx.paper.average_of(paper_table, row, m, block, [d for d in col_datasets if d is not None])
                out.append(f"{NOT_RUN} ({fmt(v)})" if v is not None else NOT_RUN)
        rows.append(out)
    return rows, csv_rows


def table_pivot(
    runs: Sequence[Run],
    ctx: Context,
    name: str,
    title: str,
    metrics: Sequence[str],
    col_of: Callable[[Run], Tuple[Any, str]] = lambda r: (DATASET_ORDER.index(r.dataset) if r.dataset in DATASET_ORDER else 99, DATASET_NAMES.get(r.dataset, r.dataset)),
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
    grid: Dict[Tuple[str, str], List[Run]] = {}
    rows_seen: Dict[str, Any] = {}
    cols_seen: Dict[str, Any] = {}
    col_dataset: Dict[str, str] = {}
    for r in runs:
        rk, rl = row_of(r)
        ck, cl = col_of(r)
        rows_seen.setdefault(rl, rk)
        cols_seen.setdefault(cl, ck)
        col_dataset.setdefault(cl, r.dataset)
        grid.setdefault((rl, cl), []).append(r)
    row_labels = sorted(rows_seen, key=lambda x: (rows_seen[x], x))
    col_labels = sorted(cols_seen, key=lambda x: (cols_seen[x], x))
    multi = len(metrics) > 1
    header = [row_title or "run"] + [f"{c} {m.replace('recall@', 'R@').replace('qa_', '')}" if multi else c for c in col_labels for m in metrics]
    use_avg = average and len(col_labels) > 1
    if use_avg:
        header += [f"avg {m.replace('recall@', 'R@').replace('qa_', '')}" if multi else "avg" for m in metrics]
    rows, csv_rows, all_cells = [], [], []
    duplicates = 0
    covered: set = set()
    for rl in row_labels:
        row = [rl]
        per_metric: Dict[str, List[Cell]] = {m: [] for m in metrics}
        for cl in col_labels:
            found = grid.get((rl, cl), [])
            duplicates += max(0, len(found) - 1)
            run = _pick_latest(found) if found else None
            for m in metrics:
                cell = make_cell(run, m, ctx, runs, table=paper_table)
                per_metric[m].append(cell)
                all_cells.append(cell)
                if cell.paper_entry is not None and cell.paper_entry.table == paper_table:
                    covered.add((cell.paper_entry.row, cell.paper_entry.block))
                row.append(cell.markdown() if run else "–")
                if run:
                    csv_rows.append(_csv_row(name, rl, cl, m, cell))
        if use_avg:
            for m in metrics:
                cs = per_metric[m]
                if all(c.ours is not None for c in cs):
                    avg = average_cell(cs, m, ctx)
                    row.append(avg.markdown())
                    csv_rows.append(_csv_row(name, rl, "avg", m, avg))
                else:
                    row.append("–")
        rows.append(row)
    extra_rows, extra_csv = not_run_rows(ctx, paper_table if list_not_run else None, covered, [col_dataset.get(c) for c in col_labels], metrics,
                                         use_avg, name)
    rows += extra_rows
    csv_rows += extra_csv
    notes = _notes(all_cells, ctx)
    if use_avg:
        notes.append("avg: the mean over all questions, each dataset weighted by its number of questions, as the paper "
                     "averages (ours: the run's questions; the paper's: 1,000 per dataset, LV-Eval 124, NarrativeQA 293).")
    if extra_rows:
        notes.append("not run (X): a row of the paper's table that no run here stands for, with the paper's number X "
                     "(a system this harness does not run, or a row whose runs are not in the folders given).")
    if duplicates:
        notes.append(f"{duplicates} cells had more than one run; the latest was used.")
    return Table(name, title, header, rows, csv_rows, notes=notes, provenance=provenance_lines(runs))


GRAPH_KEYS = ["phrase_nodes", "passage_nodes", "total_nodes", "extracted_edges", "synonym_edges", "context_edges", "total_edges"]


def table_graph(runs: Sequence[Run], ctx: Context, name: str = "table10", title: str = "Table 10: graph statistics") -> Table:
    """Table 10's rows, each counted as the reference counts it (report.runs.reference_graph_counts)."""
    keys = GRAPH_KEYS
    with_graph = [r for r in runs if r.graph_stats]
    by_data: Dict[str, Run] = {}
    for r in with_graph:
        by_data.setdefault(f"{DATASET_NAMES.get(r.dataset, r.dataset)} ({r.embedding}, {r.get('llm.name', '?')})", r)
    header = ["dataset (encoder, LLM)"] + keys
    rows, csv_rows, cells = [], [], []
    for lab in sorted(by_data):
        r = by_data[lab]
        row = [lab]
        for k in keys:
            c = make_cell(r, k, ctx, with_graph, significance=False, table="table10")
            cells.append(c)
            v = "–" if c.ours is None else f"{int(c.ours):,}"
            if c.paper is not None:
                v += f" ({'~' if c.paper_loose else ''}{int(c.paper):,})"
            row.append(v)
            csv_rows.append(_csv_row(name, lab, k, k, c))
        rows.append(row)
    notes = ["Cells: ours (paper). Counted on both sides as the reference counts (`get_graph_info`): extracted edges = "
             "unique facts; context edges = passage-phrase pairs; total edges = distinct ordered node pairs; synonym "
             "edges = total - extracted - context (so they include the second direction of each fact's phrase pair)."]
    if any(c.paper_loose for c in cells if c.paper is not None):
        notes.append(f"~ the paper's graph ({ctx.paper.condition if ctx.paper else ''}); ours is built from different OpenIE / data.")
    return Table(name, title, header, rows, csv_rows, notes=notes, provenance=provenance_lines(with_graph))


def _cost_values(r: Run) -> Dict[str, Optional[float]]:
    t = r.metrics.get("timings", {})
    own = r.metrics.get("table12")  # a baseline's own counters (hipporag2/baselines): its LLM is not OpenIE's
    if own:
        def millions(v):
            return round(v / 1e6, 2) if v is not None else None

        return {
            "indexing_minutes": round(float(own["indexing_s"]) / 60.0, 2) if own.get("indexing_s") is not None else None,
            "openie_input_tokens_millions": millions(own.get("indexing_llm_input_tokens")),
            "openie_output_tokens_millions": millions(own.get("indexing_llm_output_tokens")),
            "seconds_per_query": own.get("seconds_per_query"),
            "retrieval_s": t.get("retrieval"),
        }
    usage = r.metrics.get("llm_usage", {}) or {}
    ie_in = sum(u.get("input_tokens", 0) for s, u in usage.items() if s.startswith("openie"))
    ie_out = sum(u.get("output_tokens", 0) for s, u in usage.items() if s.startswith("openie"))
    n = max(int(r.metrics.get("n_queries", 0)), 1)
    index_s = sum(v for k, v in t.items() if k in ("openie", "index_build", "embed_passages"))
    return {
        "indexing_minutes": round(index_s / 60.0, 2),
        "openie_input_tokens_millions": round(ie_in / 1e6, 2) if usage else None,
        "openie_output_tokens_millions": round(ie_out / 1e6, 2) if usage else None,
        "seconds_per_query": round(t.get("retrieval", 0.0) / n, 3),
        "retrieval_s": t.get("retrieval"),
    }


def table_cost(runs: Sequence[Run], ctx: Context, name: str = "table12", title: str = "Table 12: cost") -> Table:
    label = make_labeller(runs)
    keys = ["indexing_minutes", "openie_input_tokens_millions", "openie_output_tokens_millions", "seconds_per_query"]
    header = ["run", "n"] + keys
    rows, csv_rows = [], []
    covered: set = set()
    for r in sorted(runs, key=label):
        vals = _cost_values(r)
        row = [label(r), str(r.metrics.get("n_queries", ""))]
        for k in keys:
            hit = ctx.paper.lookup(r, k, loose=ctx.loose, table="table12") if ctx.paper else None
            if hit:
                covered.add((hit[0].row, hit[0].block))
            v = fmt(vals[k], 2 if k != "seconds_per_query" else 3)
            if hit:
                v += f" ({'~' if hit[2] else ''}{hit[1]:g})"
            row.append(v)
            csv_rows.append({"table": name, "row": label(r), "metric": k, "ours": vals[k], "paper": hit[1] if hit else None, "run_dir": str(r.path)})
        rows.append(row)
    if ctx.paper is not None:
        for prow, block in ctx.paper.rows("table12"):
            if (prow, block) in covered:
                continue
            e = ctx.paper.row_entries("table12", prow, block)[0]
            row = [prow, NOT_RUN]
            for k in keys:
                row.append(f"{NOT_RUN} ({e.values[k]:g})" if k in e.values else NOT_RUN)
                csv_rows.append({"table": name, "row": prow, "metric": k, "ours": None, "paper": e.values.get(k), "status": NOT_RUN})
            rows.append(row)
    notes = [
        "Cells: ours (paper). Indexing = OpenIE + index build (+ passage embedding for dense), wall clock; "
        "tokens are the LLM's OpenIE usage in this run (0 when OpenIE came from the cache or an import file); "
        "seconds per query = the retrieval stage / questions. The paper's 9.9 GB of extra GPU memory is not measured here. "
        "Baselines (RAPTOR, LightRAG) report their own counters (metrics.json `table12`): their indexing LLM's tokens "
        "(a fresh build's, also when the index came from the cache), build time, and (retrieval + reading) / questions.",
    ]
    return Table(name, title, header, rows, csv_rows, notes=notes, provenance=provenance_lines(runs))


def table_grid(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str = "grid",
               title: str = "HippoRAG 2 recall@5 over damping × passage_node_weight", metric: str = "recall@5") -> Table:
    from hipporag2.report.plots import heatmap

    ds = sorted({float(r.get("retrieval.damping")) for r in runs})
    ws = sorted({float(r.get("retrieval.passage_node_weight")) for r in runs})
    cell_run: Dict[Tuple[float, float], Run] = {}
    for r in runs:
        key = (float(r.get("retrieval.damping")), float(r.get("retrieval.passage_node_weight")))
        if key not in cell_run or (r.path / "metrics.json").stat().st_mtime > (cell_run[key].path / "metrics.json").stat().st_mtime:
            cell_run[key] = r
    header = ["damping \\ passage_node_weight"] + [f"{w:g}" for w in ws]
    rows, csv_rows, cells = [], [], []
    matrix = []
    for d in ds:
        row, mrow = [f"{d:g}"], []
        for w in ws:
            r = cell_run.get((d, w))
            c = _our_cell(r, metric, ctx, runs, cells, csv_rows, (name, f"damping={d:g}", f"passage_node_weight={w:g}"))
            row.append(c.markdown(with_paper=False) if r else "–")
            mrow.append(c.ours)
        rows.append(row)
        matrix.append(mrow)
    images = []
    if out_dir is not None:
        path = Path(out_dir) / f"{name}_heatmap.png"
        heatmap(matrix, ds, ws, path, title=f"{metric} ({runs[0].dataset}, {runs[0].embedding})")
        images.append(str(path))
    best = max(((v, d, w) for d, mrow in zip(ds, matrix) for w, v in zip(ws, mrow) if v is not None), default=None)
    notes = _notes(cells, ctx, paper_shown=False)
    if best:
        notes.insert(0, f"Best cell: damping {best[1]:g}, passage_node_weight {best[2]:g} → {metric} {best[0]:.1f}.")
    paper_row = []
    if ctx.paper is not None:
        for w in ws:
            r = cell_run.get((0.5, w))
            hit = ctx.paper.lookup(r, metric, loose=True, table="table5", ignore=("retrieval.name", "retrieval.filter")) if r else None
            paper_row.append(f"{w:g}: {hit[1]:.1f}" if hit else None)
    if any(paper_row):
        notes.append("Paper, Table 5 (damping 0.5, " + (ctx.paper.condition if ctx.paper else "") + "): "
                     + ", ".join(p for p in paper_row if p) + ".")
    return Table(name, title, header, rows, csv_rows, notes=notes, provenance=provenance_lines(runs), images=images)


def table_continual(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str = "fig3",
                    title: str = "Figure 3: continual indexing (corpus added in segments)", metric: str = "recall@5") -> Table:
    from hipporag2.report.plots import continual_plot

    seg_runs = [r for r in runs if int(r.get("dataset.corpus_segments", 1) or 1) > 1]
    label = make_labeller(seg_runs, exclude=("dataset.segments_indexed",))
    n_seg = max(int(r.get("dataset.corpus_segments")) for r in seg_runs)
    ks = list(range(1, n_seg + 1))
    by: Dict[Tuple[str, int], Run] = {}
    for r in seg_runs:
        k = int(r.get("dataset.segments_indexed") or n_seg)
        by[(f"{DATASET_NAMES.get(r.dataset, r.dataset)} · {label(r)}", k)] = r
    series_names = sorted({s for s, _ in by})
    header = ["run", "questions of"] + [f"{k} segment{'s' if k > 1 else ''} indexed" for k in ks]
    rows, csv_rows, cells = [], [], []
    curves: Dict[str, Dict[str, List[Optional[float]]]] = {}
    for s in series_names:
        overall: List[Optional[float]] = []
        per_seg: Dict[int, List[Optional[float]]] = {seg: [] for seg in ks}
        row_all = [s, "all indexed segments"]
        for k in ks:
            r = by.get((s, k))
            c = _our_cell(r, metric, ctx, seg_runs, cells, csv_rows, (name, s, f"segments_indexed={k}"))
            row_all.append(c.markdown(with_paper=False) if r else "–")
            overall.append(c.ours)
            try:
                seg_scores = segment_recall(r, metric) if r else {}
            except GoldUnavailable:
                seg_scores = {}
            for seg in ks:
                v = seg_scores.get(seg)
                per_seg[seg].append(v[0] if v else None)
                if v:
                    csv_rows.append({"table": name, "row": s, "column": f"segments_indexed={k}", "metric": f"{metric} (segment {seg} questions)",
                                     "ours": v[0], "n_queries": v[1], "run_dir": str(r.path)})
        rows.append(row_all)
        for seg in ks:
            if any(v is not None for v in per_seg[seg]):
                rows.append([s, f"segment {seg}"] + [fmt(v) for v in per_seg[seg]])
        curves[s] = {"all": overall, **{f"segment {seg}": per_seg[seg] for seg in ks}}
    images = []
    if out_dir is not None:
        path = Path(out_dir) / f"{name}.png"
        continual_plot(curves, ks, path, metric)
        images.append(str(path))
    notes = _notes(cells, ctx, paper_shown=False)
    notes.insert(0, "Each stage indexes segments 1..k (corpus order) and is evaluated on the questions whose gold passages are all indexed; "
                    "'segment s' rows follow the questions of one segment as later segments arrive (forgetting shows as a drop). "
                    "The paper gives this as a figure; SPEC §7 lists no numbers for it.")
    return Table(name, title, header, rows, csv_rows, notes=notes, provenance=provenance_lines(seg_runs), images=images)


# ---------------------------------------------------------------------------------
# Which layout for which experiment

def _dataset_col(r: Run):
    return (DATASET_ORDER.index(r.dataset) if r.dataset in DATASET_ORDER else 99, DATASET_NAMES.get(r.dataset, r.dataset))


# The layouts of `--table`, one function each, found through the REPORT_TABLES registry
# (hipporag2/registry.py), which checks that each takes (runs, ctx, out_dir, name).


def layout_recall(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_recall(runs, ctx, name)


def layout_table2(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_pivot(runs, ctx, name, "Table 2: QA F1 (Llama-3.3-70B reader, top-5 passages)", ["qa_f1"], paper_table="table2")


def layout_table8(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_pivot(runs, ctx, name, "Table 8: QA EM / F1 (top-5 passages)", ["qa_em", "qa_f1"], paper_table="table8")


def layout_table3(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_pivot(runs, ctx, name, "Table 3: passage recall@5", ["recall@5"], paper_table="table3")


def layout_table4(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_pivot(runs, ctx, name, "Table 4: ablations, recall@5", ["recall@5"], paper_table="table4")


def layout_table5(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_pivot(
        runs, ctx, name, "Table 5: passage_node_weight, recall@5", ["recall@5"],
        row_of=lambda r: (float(r.get("retrieval.passage_node_weight")), f"{float(r.get('retrieval.passage_node_weight')):g}"),
        average=False, row_title="passage_node_weight",
    )


def layout_table7(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_pivot(
        runs, ctx, name, "Table 7: retriever swap (MuSiQue), recall@5", ["recall@5"],
        col_of=lambda r: (0 if r.get("retrieval.method") == "dense" else 1, r.method),
        row_of=lambda r: (r.embedding, r.embedding), average=False, row_title="retriever", paper_table="table7",
        list_not_run=False,
    )


def layout_table9(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_pivot(runs, ctx, name, "Table 9: passage recall@2 / recall@5", ["recall@2", "recall@5"], paper_table="table9")


def layout_table10(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_graph(runs, ctx, name)


def layout_table12(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_cost(runs, ctx, name)


def layout_grid(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_grid(runs, ctx, out_dir, name)


def layout_fig3(runs: Sequence[Run], ctx: Context, out_dir: Optional[Path], name: str) -> Table:
    return table_continual(runs, ctx, out_dir, name)


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
