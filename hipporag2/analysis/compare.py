"""Run against run: per-question wins, losses and ties, a paired bootstrap, and the
questions that changed most (`hipporag2-report --compare RUN_A RUN_B`).

Both runs must cover the same questions on the same data (checked by content hash
of the dataset files); per-question recall comes from each run's retrieval.jsonl and
the gold passages of the recorded dataset files (`report.perquery.per_query`).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.evaluate.metrics import paired_bootstrap


@dataclass
class QuestionDelta:
    id: str
    question: str
    a: float
    b: float
    gained: List[str]  # gold titles in A's top-k but not B's
    lost: List[str]  # gold titles in B's top-k but not A's

    @property
    def diff(self) -> float:
        return self.a - self.b


@dataclass
class Comparison:
    label_a: str
    label_b: str
    metric: str
    n: int
    wins: int  # A > B
    losses: int
    ties: int
    mean_a: float  # ×100
    mean_b: float
    mean_diff: float  # ×100
    diff_ci: Tuple[float, float]  # ×100, percentile bootstrap
    p_a_better: float  # one-sided: A not better than B
    p_b_better: float
    questions: List[QuestionDelta]

    @property
    def verdict(self) -> str:
        if self.p_a_better < 0.05:
            return f"{self.label_a} is significantly better (paired bootstrap, one-sided p = {self.p_a_better:.4f})"
        if self.p_b_better < 0.05:
            return f"{self.label_b} is significantly better (paired bootstrap, one-sided p = {self.p_b_better:.4f})"
        return f"no significant difference (one-sided p = {self.p_a_better:.3f} / {self.p_b_better:.3f})"


def diff_interval(a: Sequence[float], b: Sequence[float], n_samples: int = 10000, seed: int = 0) -> Tuple[float, float]:
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_samples, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return (100.0 * float(lo), 100.0 * float(hi))


def compare_scores(sa: Dict[str, float], sb: Dict[str, float], label_a: str, label_b: str, metric: str,
                   details: Optional[Dict[str, Tuple[str, List[str], List[str]]]] = None,
                   n_samples: int = 10000, tie_eps: float = 1e-9) -> Comparison:
    """Pure core: per-question scores in [0, 1] of two runs on the same ids."""
    if set(sa) != set(sb):
        only_a, only_b = sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa))
        raise ValueError(f"the runs answer different questions ({len(only_a)} only in A, e.g. {only_a[:1]}; "
                         f"{len(only_b)} only in B, e.g. {only_b[:1]})")
    ids = sorted(sa)
    xa, xb = [sa[i] for i in ids], [sb[i] for i in ids]
    d = np.asarray(xa) - np.asarray(xb)
    details = details or {}
    qs = []
    for i in ids:
        question, gained, lost = details.get(i, ("", [], []))
        qs.append(QuestionDelta(i, question, sa[i], sb[i], list(gained), list(lost)))
    qs.sort(key=lambda q: (-abs(q.diff), q.id))
    n = len(ids)
    return Comparison(
        label_a=label_a, label_b=label_b, metric=metric, n=n,
        wins=int((d > tie_eps).sum()), losses=int((d < -tie_eps).sum()), ties=int((np.abs(d) <= tie_eps).sum()),
        mean_a=100.0 * float(np.mean(xa)) if n else float("nan"),
        mean_b=100.0 * float(np.mean(xb)) if n else float("nan"),
        mean_diff=100.0 * float(d.mean()) if n else float("nan"),
        diff_ci=diff_interval(xa, xb, n_samples),
        p_a_better=paired_bootstrap(xa, xb, n_samples=n_samples),
        p_b_better=paired_bootstrap(xb, xa, n_samples=n_samples),
        questions=qs,
    )


def gold_changes(gold: Sequence[str], ranked_a: Sequence[str], ranked_b: Sequence[str], k: int) -> Tuple[List[str], List[str]]:
    """Titles of gold passages in A's top-k only, and in B's top-k only."""
    ta, tb = set(ranked_a[:k]), set(ranked_b[:k])
    title = lambda s: s.split("\n", 1)[0]  # noqa: E731
    return [title(g) for g in gold if g in ta and g not in tb], [title(g) for g in gold if g in tb and g not in ta]


def compare_runs(run_a, run_b, k: int = 5, n_samples: int = 10000, label_a: str = "", label_b: str = "") -> Comparison:
    """Two report.runs.Run objects at recall@k."""
    from hipporag2.report.perquery import load_gold

    ga, gb = load_gold(run_a), load_gold(run_b)
    if ga.passages != gb.passages:
        raise ValueError("the runs' gold passages differ: they are not on the same data")
    rows_a = {r.query_id: r for r in run_a.results()}
    rows_b = {r.query_id: r for r in run_b.results()}

    def ranked(gold, result):
        return [gold.strings.get(i, "") for i in result.passage_ids]

    from hipporag2.evaluate.metrics import recall_at_k

    sa = {i: recall_at_k(ga.passages.get(i, []), ranked(ga, r), k) for i, r in rows_a.items()}
    sb = {i: recall_at_k(gb.passages.get(i, []), ranked(gb, r), k) for i, r in rows_b.items()}
    details = {}
    for i in set(rows_a) & set(rows_b):
        gained, lost = gold_changes(ga.passages.get(i, []), ranked(ga, rows_a[i]), ranked(gb, rows_b[i]), k)
        details[i] = (rows_a[i].question, gained, lost)
    return compare_scores(sa, sb, label_a or str(run_a.path), label_b or str(run_b.path), f"recall@{k}", details, n_samples)


def comparison_markdown(c: Comparison, top: int = 15, command: str = "") -> str:
    lines = [
        f"## {c.label_a} (A) vs {c.label_b} (B), {c.metric}",
        "",
        f"| | questions | A wins | B wins | ties | A {c.metric} | B {c.metric} | A − B [95% CI] |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| per question | {c.n} | {c.wins} | {c.losses} | {c.ties} | {c.mean_a:.1f} | {c.mean_b:.1f} | "
        f"{c.mean_diff:+.1f} [{c.diff_ci[0]:+.1f}, {c.diff_ci[1]:+.1f}] |",
        "",
        f"Paired bootstrap over questions (10,000 resamples): {c.verdict}.",
        "",
        f"### The {min(top, sum(1 for q in c.questions if q.diff))} questions that changed most",
        "",
        "| question id | question | A | B | gold only in A's top-k | gold only in B's top-k |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for q in [q for q in c.questions if q.diff][:top]:
        text = q.question.replace("|", "/")
        lines.append(f"| `{q.id}` | {text} | {100 * q.a:.0f} | {100 * q.b:.0f} | {'; '.join(q.gained) or '–'} | {'; '.join(q.lost) or '–'} |")
    if command:
        lines += ["", f"Command: `{command}`"]
    return "\n".join(lines) + "\n"


def comparison_csv(c: Comparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "question", f"a_{c.metric}", f"b_{c.metric}", "diff", "outcome", "gold_only_in_a", "gold_only_in_b"])
    for q in c.questions:
        outcome = "A" if q.diff > 1e-9 else "B" if q.diff < -1e-9 else "tie"
        w.writerow([q.id, q.question, round(q.a, 4), round(q.b, 4), round(q.diff, 4), outcome, "; ".join(q.gained), "; ".join(q.lost)])
    return buf.getvalue()


def comparison_plot(c: Comparison, path: Path | str) -> Path:
    """Per-question differences, sorted, as bars (A above the line, B below)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    diffs = sorted((100 * q.diff for q in c.questions), reverse=True)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.06 * len(diffs) + 3), 3.8))
    colors = ["#2ca02c" if d > 0 else "#d62728" if d < 0 else "#bdbdbd" for d in diffs]
    ax.bar(range(len(diffs)), diffs, color=colors, width=0.9)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("questions, sorted by difference")
    ax.set_ylabel(f"{c.metric} A − B (points)")
    ax.set_title(f"A = {c.label_a}  vs  B = {c.label_b}\nA wins {c.wins}, B wins {c.losses}, ties {c.ties}; "
                 f"mean {c.mean_diff:+.1f} [{c.diff_ci[0]:+.1f}, {c.diff_ci[1]:+.1f}]", fontsize=10)
    ax.set_xlim(-1, max(len(diffs), 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def compare_main(paths: Sequence[str], k: int, out: Optional[Path], name: Optional[str], n_samples: int,
                 allow_mixed_data: bool = False) -> int:
    """`hipporag2-report --compare A B`: exit 0, or 2 with one line when it cannot compare."""
    import sys

    from hipporag2.files import atomicio
    from hipporag2.registry import ANALYSES
    from hipporag2.report.runs import mixed_data, mixed_semantics
    from hipporag2.report.perquery import GoldUnavailable
    from hipporag2.report.runs import load_run

    if len(paths) != 2:
        print(f"error: --compare takes exactly two run folders, got {len(paths)}", file=sys.stderr)
        return 2
    try:
        runs = [load_run(p) for p in paths]
    except FileNotFoundError as e:
        print(f"error: {e.filename}: not there (a run folder has a metrics.json)", file=sys.stderr)
        return 2
    warning = mixed_semantics(runs)
    if warning:
        print(warning, file=sys.stderr)
    problems = mixed_data(runs)
    if problems and not allow_mixed_data:
        print("error: the runs read different data: " + "; ".join(problems), file=sys.stderr)
        return 2
    labels = [f"{r.method} ({r.path.name})" for r in runs]
    try:
        c = ANALYSES.load("compare")(runs[0], runs[1], k, n_samples, *labels)
    except (GoldUnavailable, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    command = f"hipporag2-report --compare {paths[0]} {paths[1]} --k {k}" + (f" --out {out}" if out else "")
    md = comparison_markdown(c, command=command)
    print(md)
    if out:
        stem = name or "compare"
        out.mkdir(parents=True, exist_ok=True)
        atomicio.write_text(out / f"{stem}.md", "<!-- generated by hipporag2-report --compare; do not edit -->\n" + md)
        atomicio.write_text(out / f"{stem}.csv", comparison_csv(c))
        print(f"wrote {out / (stem + '.md')}, {stem}.csv, {comparison_plot(c, out / (stem + '.png')).name}")
    return 0
