"""`hipporag2-analyze RUN`: the Appendix E error analysis of a graph run.

    hipporag2-analyze runs/musique_train/hipporag2_nofilter            # table to stdout
    hipporag2-analyze RUN --k 5 --out results/musique_train/errors     # + errors.md, errors.csv, errors.jsonl

Writes, for every question with recall@k < 1, its category and flags (one JSON line
each, `errors.jsonl`), and a table of the categories' shares with counts and
bootstrap intervals beside the paper's (`errors.md`, `errors.csv`). Without --out,
the files go into the run folder. Exit status 2 with one line when the run cannot
be analysed (not a graph run, index no longer cached, data changed).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hipporag2.analysis.errors import Classifier, ErrorCase, ErrorTable, error_table, flags_of, primary
from hipporag2.analysis.run_view import RunUnavailable, RunView, open_run
from hipporag2.evaluate.metrics import recall_at_k
from hipporag2.registry import ANALYSES


def classify_run(view: RunView, k: int = 5) -> Tuple[List[ErrorCase], int]:
    """Error cases of the questions with recall@k < 1, and the number of questions."""
    if not view.is_graph_run:
        raise RunUnavailable(f"{view.path}: a {view.cfg.retrieval.method} run has no graph to analyse (use a hipporag2 run)")
    if view.cfg.retrieval.linking != "query_to_triple":
        raise RunUnavailable(f"{view.path}: the Appendix E analysis needs query-to-triple linking (this run: {view.cfg.retrieval.linking})")
    index = view.index()
    clf = Classifier.of_index(index)
    cases = []
    for row in view.rows:
        gold = view.gold.get(row.query_id, [])
        ranked = [view.passage_strings.get(i, "") for i in row.passage_ids]
        rec = recall_at_k(gold, ranked, k)
        if rec >= 1.0:
            continue
        ev = clf.evidence([f for f, _ in row.candidate_facts or []], [f for f, _ in row.kept_facts or []],
                          [p for p, _ in row.seed_phrases or []], gold, view.filter_applied)
        flags = flags_of(ev)
        top = set(ranked[:k])
        gold_titles = [s.split("\n", 1)[0] for s in gold]
        cases.append(ErrorCase(
            id=row.query_id,
            question=row.question,
            recall=rec,
            category=primary(flags),
            flags=flags,
            share_candidates=_share(ev.candidate, ev.gold),
            share_kept=_share(ev.kept, ev.gold) if ev.kept is not None else None,
            share_seeds=_share(ev.seeds, ev.gold),
            gold_phrases=sorted(clf.phrases[i] for i in ev.gold),
            seed_phrases=[p for p, _ in row.seed_phrases or []],
            gold_titles=gold_titles,
            missed_titles=[t for t, s in zip(gold_titles, gold) if s not in top],
        ))
    return cases, len(view.rows)


def _share(phrases, gold) -> Optional[float]:
    return round(len(phrases & gold) / len(phrases), 4) if phrases else None


def _pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.1f}"


def _ci(ci) -> str:
    return "–" if ci is None else f"[{ci[0]:.1f}, {ci[1]:.1f}]"


def table_markdown(t: ErrorTable, run_label: str, command: str) -> str:
    lines = [
        f"## Appendix E error analysis: {run_label}",
        "",
        f"{t.n_failing} of {t.n_questions} questions have recall@{t.k} < 1. "
        f"Recognition-memory filter: {'yes' if t.filter_applied else 'no (its categories are not applicable)'}.",
        "",
        "| category | what it means | primary n | primary % [95% CI] | flag n | flag % [95% CI] | paper % |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in t.rows:
        flag_n = "n/a" if r.flag_count is None else str(r.flag_count)
        flag = "n/a" if r.flag_share is None else f"{_pct(r.flag_share)} {_ci(r.flag_ci)}"
        lines.append(f"| `{r.name}` | {r.description} | {r.primary_count} | {_pct(r.primary_share)} {_ci(r.primary_ci)} | "
                     f"{flag_n} | {flag} | {_pct(r.paper_share)} |")
    total = sum(r.primary_count for r in t.rows)
    lines += [
        f"| **total** | | **{total}** | 100.0 | | | |",
        "",
        "- *primary*: each failing question counted once, under the first category that holds, in pipeline "
        "order (linking, filter, seeding, graph search); primary counts sum to the failing questions.",
        "- *flag*: every question for which the condition holds (categories overlap; the paper's shares sum to 111 %).",
        "- 95% intervals: percentile bootstrap over the failing questions (10,000 resamples).",
        "- Paper: Appendix E, MuSiQue with Llama-3.3-70B OpenIE and filter, NV-Embed-v2; it reports shares only.",
        f"- Command: `{command}`",
        "",
    ]
    return "\n".join(lines)


def table_csv(t: ErrorTable) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["category", "primary_count", "primary_pct", "primary_ci_lo", "primary_ci_hi",
                "flag_count", "flag_pct", "flag_ci_lo", "flag_ci_hi", "paper_pct", "n_failing", "n_questions", "k"])
    for r in t.rows:
        flag_ci = r.flag_ci or (None, None)
        w.writerow([r.name, r.primary_count, round(r.primary_share, 2), round(r.primary_ci[0], 2), round(r.primary_ci[1], 2),
                    "" if r.flag_count is None else r.flag_count,
                    "" if r.flag_share is None else round(r.flag_share, 2),
                    "" if flag_ci[0] is None else round(flag_ci[0], 2), "" if flag_ci[1] is None else round(flag_ci[1], 2),
                    "" if r.paper_share is None else r.paper_share, t.n_failing, t.n_questions, t.k])
    return buf.getvalue()


def write_analysis(view: RunView, out: Path, k: int = 5, name: str = "errors", command: str = "") -> ErrorTable:
    """Classify, then write NAME.jsonl, NAME.md and NAME.csv under `out`; returns the table."""
    from hipporag2.files import atomicio

    cases, n = classify_run(view, k)
    table = error_table(cases, n, k, view.filter_applied)
    out.mkdir(parents=True, exist_ok=True)
    atomicio.write_jsonl(out / f"{name}.jsonl", [c.as_dict() for c in cases])
    label = f"{view.cfg.dataset.name}, {view.cfg.retrieval.name}, filter={view.cfg.retrieval.filter} ({view.path})"
    md = table_markdown(table, label, command or f"hipporag2-analyze {view.path} --k {k}")
    atomicio.write_text(out / f"{name}.md", "<!-- generated by hipporag2-analyze; do not edit -->\n" + md)
    atomicio.write_text(out / f"{name}.csv", table_csv(table))
    return table


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="hipporag2-analyze", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a run directory of a hipporag2 run (retrieval.jsonl, metrics.json, .hydra/)")
    p.add_argument("--k", type=int, default=5, help="a question fails when its recall@k < 1 (default 5)")
    p.add_argument("--out", type=Path, help="folder for errors.{jsonl,md,csv} (default: the run folder)")
    p.add_argument("--name", default="errors", help="base name of the output files")
    args = p.parse_args(argv)
    from hipporag2.files.atomicio import os_errors_exit

    out = args.out or args.run
    with os_errors_exit():  # a full disk or read-only --out: one line, exit 2
        try:
            view = open_run(args.run)
            cmd = "hipporag2-analyze " + " ".join(sys.argv[1:] if argv is None else list(argv))
            table = ANALYSES.load("errors")(view, out, args.k, args.name, cmd)
        except RunUnavailable as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print((out / f"{args.name}.md").read_text().split("\n", 1)[1])
    print(f"per-question categories: {out / (args.name + '.jsonl')}  ({table.n_failing} questions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
