"""Per-question scores of a run, and paired-bootstrap significance between two runs.

Recall needs the gold passages, which a run does not copy: they are reloaded from the
dataset files recorded in metrics.json provenance (relative paths are taken from the
run's working directory) and used only if their content hash still matches. QA scores
come from the run's own qa.jsonl.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from hipporag2.evaluate.metrics import paired_bootstrap, recall_at_k
from hipporag2.report.runs import Run

log = logging.getLogger(__name__)


class GoldUnavailable(Exception):
    pass


@dataclass
class Gold:
    passages: Dict[str, List[str]]  # query id -> gold passage strings
    strings: Dict[int, str]  # corpus_idx -> passage string
    segments: Optional[Dict[str, int]] = None  # query id -> corpus segment (continual runs)


_GOLD_CACHE: Dict[Tuple, Gold] = {}


def _dataset_files(run: Run) -> Tuple[Path, Path]:
    files = list(run.data_files)
    q = [f for f in files if f.endswith(".json") and not f.endswith("_corpus.json") and "openie" not in Path(f).name]
    c = [f for f in files if f.endswith("_corpus.json")]
    if not q or not c:
        raise GoldUnavailable(f"{run.path}: metrics.json records no query/corpus files")
    return Path(q[0]), Path(c[0])


def load_gold(run: Run) -> Gold:
    from hipporag2.data.loaders import load_corpus, load_queries
    from hipporag2.files.stagekeys import file_digest

    qrec, crec = _dataset_files(run)
    recorded = run.data_files
    qpath, cpath = run.resolve_path(str(qrec)), run.resolve_path(str(crec))
    joiner = str(run.get("dataset.sentence_joiner", " "))
    n_seg = int(run.get("dataset.corpus_segments", 1) or 1)
    key = (str(qpath), str(cpath), recorded[str(qrec)], recorded[str(crec)], joiner, n_seg)
    if key in _GOLD_CACHE:
        return _GOLD_CACHE[key]
    for rec, path in ((qrec, qpath), (crec, cpath)):
        if not path.is_file():
            raise GoldUnavailable(f"{path} (recorded by {run.path}) is not there")
        if file_digest(path) != recorded[str(rec)]:
            raise GoldUnavailable(f"{path} changed since {run.path} was run (hash differs)")
    corpus = load_corpus(cpath, joiner)
    queries = load_queries(qpath, joiner)
    segments = None
    if n_seg > 1:
        from hipporag2.continual import query_segments

        segments = {q.id: s for q, s in zip(queries, query_segments(queries, corpus, n_seg))}
    gold = Gold(
        passages={q.id: list(q.gold_passages) for q in queries},
        strings={p.corpus_idx: p.string for p in corpus.passages},
        segments=segments,
    )
    _GOLD_CACHE[key] = gold
    return gold


def per_query(run: Run, metric: str) -> Dict[str, float]:
    """Question id -> score in [0, 1] for `recall@K`, `qa_f1` or `qa_em`."""
    if metric.startswith("qa_"):
        field = metric[3:]
        return {str(r["id"]): float(r[field]) for r in run.rows("qa.jsonl")}
    if not metric.startswith("recall@"):
        raise ValueError(f"no per-question values for {metric}")
    k = int(metric.split("@")[1])
    gold = load_gold(run)
    out = {}
    for r in run.results():
        ranked = [gold.strings.get(i, "") for i in r.passage_ids]
        out[r.query_id] = recall_at_k(gold.passages.get(r.query_id, []), ranked, k)
    return out


@dataclass
class Significance:
    p_better: float  # one-sided p that A is not better than B
    p_worse: float  # one-sided p that B is not better than A
    n: int
    mean_diff: float

    @property
    def mark(self) -> str:
        if self.p_better < 0.05:
            return "†"
        if self.p_worse < 0.05:
            return "↓"
        return ""


def compare(a: Run, b: Run, metric: str, n_samples: int = 10000) -> Optional[Significance]:
    """Paired bootstrap of A against B over the questions both answered (same ids)."""
    try:
        sa, sb = per_query(a, metric), per_query(b, metric)
    except (GoldUnavailable, KeyError, ValueError) as e:
        log.warning("no significance test %s vs %s: %s", a.path, b.path, e)
        return None
    if not sa or set(sa) != set(sb):
        return None
    ids = sorted(sa)
    xa, xb = [sa[i] for i in ids], [sb[i] for i in ids]
    return Significance(
        p_better=paired_bootstrap(xa, xb, n_samples=n_samples),
        p_worse=paired_bootstrap(xb, xa, n_samples=n_samples),
        n=len(ids),
        mean_diff=100.0 * (sum(xa) - sum(xb)) / len(ids),
    )


def segment_recall(run: Run, metric: str) -> Dict[int, Tuple[float, int]]:
    """Continual runs: mean score ×100 of the questions of each corpus segment (1-based)."""
    gold = load_gold(run)
    if gold.segments is None:
        return {}
    scores = per_query(run, metric)
    groups: Dict[int, List[float]] = {}
    for qid, v in scores.items():
        groups.setdefault(gold.segments.get(qid, -1) + 1, []).append(v)
    return {s: (round(100.0 * sum(v) / len(v), 1), len(v)) for s, v in sorted(groups.items())}
