"""The table of results/ablations/README.md (issue 27) from finished run folders.

    python scripts/ablations_table.py RUNS_ROOT dense bm25 hipporag2 norel ... > table.md

Each name is a run folder under RUNS_ROOT. For recall@2 and recall@5 every row gets its
mean, and its paired difference to the `dense` and `hipporag2` rows: the mean over
questions with a 95% bootstrap interval (10,000 resamples) and the one-sided p that it
is not better (`hipporag2.evaluate.metrics.paired_bootstrap`); a base row that is not
among the names (no `hipporag2` where the data set has no OpenIE file) gets no columns. Index cost: the seconds
of the run's OpenIE (or spaCy) and index-build stages as metrics.json records them, the
LLM tokens of the extraction, and the graph's size.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from hipporag2.analysis.compare import diff_interval
from hipporag2.evaluate.metrics import paired_bootstrap
from hipporag2.report.perquery import per_query
from hipporag2.report.runs import load_run

METRICS = ("recall@2", "recall@5")
BASES = ("dense", "hipporag2")


def cell_diff(a, b) -> str:
    ids = sorted(a)
    xa, xb = [a[i] for i in ids], [b[i] for i in ids]
    lo, hi = diff_interval(xa, xb)
    d = 100.0 * (sum(xa) - sum(xb)) / len(ids)
    p_better, p_worse = paired_bootstrap(xa, xb), paired_bootstrap(xb, xa)
    mark = "†" if p_better < 0.05 else ("↓" if p_worse < 0.05 else "")
    return f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]{mark}"


def main(root: str, names) -> None:
    runs = {n: load_run(Path(root) / n) for n in names}
    scores = {n: {m: per_query(r, m) for m in METRICS} for n, r in runs.items()}
    bases = [b for b in BASES if b in runs]  # a data set without OpenIE has no hipporag2 row
    head = ["run"] + [m for m in METRICS] + [f"{m} − {b}" for b in bases for m in METRICS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n in names:
        recorded = json.loads((Path(root) / n / "metrics.json").read_text())
        row = [n] + [f"{recorded[m]:.1f}" for m in METRICS]  # as metrics.json rounds them
        for b in bases:
            for m in METRICS:
                row.append("—" if b == n else cell_diff(scores[n][m], scores[b][m]))
        print("| " + " | ".join(row) + " |")
    print()
    print("| run | OpenIE / spaCy s | index build s | embedded texts | LLM tokens | phrases | facts | relation (co-occurrence) edges | context edges | synonym edges |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        m = json.loads((Path(root) / n / "metrics.json").read_text())
        t = m.get("timings", {})
        g = Path(root) / n / "graph_stats.json"
        s = json.loads(g.read_text()) if g.is_file() else {}
        tokens = m.get("openie_llm_tokens", "import" if m.get("openie_source", "").endswith(".json") else "—")
        print(f"| {n} | {t.get('openie', 0):.1f} | {t.get('index_build', 0) + t.get('embed_passages', 0):.1f} | {m.get('embedded_this_run', 0)} | {tokens} | {s.get('phrase_nodes', '—')} | "
              f"{s.get('facts', '—')} | {s.get('relation_edges', '—')} | {s.get('context_edges', '—')} | {s.get('synonym_edges', '—')} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
