"""`hipporag2-report`: paper-layout tables, plots and score checks from run directories.

    hipporag2-report runs/table4_ablations                     # table(s) to stdout
    hipporag2-report runs/musique_train/grid --out results/musique_train --name grid
    hipporag2-report --check runs/musique_train/**             # OK / OKish / FAIL, exit 1 on FAIL
    hipporag2-report --compare RUN_A RUN_B --out DIR          # per-question A vs B (hipporag2.analysis.compare)

Runs are folders with a metrics.json (searched recursively under each argument;
globs allowed). Exit codes: 0 fine, 1 a check failed, 2 usage or data problem.
"""
from __future__ import annotations

import argparse
import sys
from collections import OrderedDict
from pathlib import Path
from typing import List, Optional, Sequence

from hipporag2.registry import REPORT_TABLES
from hipporag2.report.reference import FAIL, OK, OKISH, Reference, check_run, default_references, load_reference, worst
from hipporag2.report.runs import Run, load_runs, mixed_data, mixed_semantics
from hipporag2.report.tables import Context, auto_kind, build


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hipporag2-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run folders, parent folders or globs")
    p.add_argument("--table", default="auto", choices=("auto",) + REPORT_TABLES.names(), help="layout (auto: from each run's +experiment)")
    p.add_argument("--name", help="base name of the output files (default: the experiment or layout)")
    p.add_argument("--out", type=Path, help="write NAME.md, NAME.csv and plots here")
    p.add_argument("--baseline", action="append", default=[], help="extra runs used only as dense baselines for significance")
    p.add_argument("--allow-mixed-data", action="store_true", help="put runs side by side even if their data files differ")
    p.add_argument("--check", action="store_true", help="compare each run with the expected scores; exit 1 on FAIL")
    p.add_argument("--paper", type=Path, help="paper numbers (default results/reference/paper.yaml)")
    p.add_argument("--reference", type=Path, action="append", help="our expected numbers (default results/reference/*.yaml but paper)")
    p.add_argument("--strict-paper", action="store_true", help="show paper numbers only where the run's condition is the paper's")
    p.add_argument("--bootstrap", type=int, default=10000, help="bootstrap resamples (default 10000)")
    p.add_argument("--compare", action="store_true", help="two run folders: per-question wins/losses/ties at recall@K")
    p.add_argument("--k", type=int, default=5, help="with --compare: the recall cut-off (default 5)")
    return p


def _references(args) -> tuple[Optional[Reference], List[Reference]]:
    paper, ours = default_references()
    if args.paper:
        paper = load_reference(args.paper)
    if args.reference:
        ours = [load_reference(p) for p in args.reference]
    return paper, ours


def run_check(runs: Sequence[Run], refs: Sequence[Reference], out=None) -> int:
    out = out or sys.stdout
    failed = 0
    counts = {OK: 0, OKISH: 0, FAIL: 0, "no reference": 0}
    for r in runs:
        lines = check_run(r, list(refs))
        status = worst([line.status for line in lines]) or "no reference"
        counts[status] += 1
        failed += status == FAIL
        print(f"{status:<12} {r.path}", file=out)
        for line in lines:
            ours = "missing" if line.ours is None else f"{line.ours:g}"
            why = f"  ({line.why})" if line.why else ""
            print(f"    {line.status:<6} {line.metric:<22} ours {ours:<10} expected {line.expected:g}  [{line.source}]{why}", file=out)
    print(f"{len(runs)} runs: " + ", ".join(f"{v} {k}" for k, v in counts.items()), file=out)
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from hipporag2.files.atomicio import os_errors_exit

    try:
        with os_errors_exit():  # a full disk or read-only --out: one line, exit 2
            return _main(argv)
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0


def _main(argv: Optional[Sequence[str]]) -> int:
    args = _parser().parse_args(argv)
    if args.compare:
        from hipporag2.analysis.compare import compare_main

        return compare_main(args.runs, args.k, args.out, args.name, args.bootstrap, args.allow_mixed_data)
    runs = load_runs(args.runs)
    if not runs:
        print(f"error: no run directories (folders with metrics.json) under {' '.join(args.runs)}", file=sys.stderr)
        return 2
    paper, ours = _references(args)
    if args.check:
        refs = ([paper] if paper else []) + list(ours)
        return run_check(runs, refs)
    warning = mixed_semantics(runs)
    if warning:
        print(warning, file=sys.stderr)
    problems = mixed_data(runs)
    if problems and not args.allow_mixed_data:
        print("error: refusing to put runs on different data side by side (use --allow-mixed-data to override):", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 2
    baselines = load_runs(args.baseline) if args.baseline else []
    ctx = Context(paper=paper, ours=ours, baselines=baselines, loose=not args.strict_paper, bootstrap_samples=args.bootstrap)
    groups: "OrderedDict[str, List[Run]]" = OrderedDict()
    if args.table != "auto":
        groups[args.name or args.table] = runs
    else:
        for r in runs:
            groups.setdefault(r.experiment or "runs", []).append(r)
        if len(groups) == 1 and args.name:
            groups = OrderedDict([(args.name, runs)])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    for name, group in groups.items():
        kind = args.table if args.table != "auto" else auto_kind(group)
        table = build(kind, group, ctx, args.out, name=name)
        md = table.markdown()
        if problems:
            md += "\n**Warning**: runs on different data are side by side (--allow-mixed-data):\n" + "\n".join(f"- {p}" for p in problems) + "\n"
        print(md)
        if args.out:
            (args.out / f"{name}.md").write_text(f"<!-- generated by hipporag2-report; do not edit -->\n{md}")
            (args.out / f"{name}.csv").write_text(table.csv())
    return 0


if __name__ == "__main__":
    sys.exit(main())
