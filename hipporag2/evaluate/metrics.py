"""Metrics of SPEC §5: passage recall@k, answer EM and token F1, paired bootstrap."""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Dict, Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def recall_at_k(gold: Sequence[str], ranked: Sequence[str], k: int) -> float:
    """|gold ∩ top-k| / |gold| over passage strings (sets). No gold -> 0."""
    g = set(gold)
    if not g:
        return 0.0
    return len(g & set(ranked[:k])) / len(g)


def mean_recall(golds: Sequence[Sequence[str]], rankeds: Sequence[Sequence[str]], ks: Sequence[int]) -> Dict[str, float]:
    """Mean recall@k ×100, rounded to one decimal as the paper reports it."""
    out = {}
    for k in ks:
        vals = [recall_at_k(g, r, k) for g, r in zip(golds, rankeds)]
        out[f"recall@{k}"] = round(100.0 * float(np.mean(vals)), 1) if vals else 0.0
    return out


def normalise_answer(s: str) -> str:
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    p = normalise_answer(prediction)
    return max((float(p == normalise_answer(g)) for g in golds), default=0.0)


def _f1(prediction: str, gold: str) -> float:
    p, g = normalise_answer(prediction).split(), normalise_answer(gold).split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    return max((_f1(prediction, g) for g in golds), default=0.0)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_samples: int = 10000, seed: int = 0) -> float:
    """One-sided p-value that system A is not better than B (paired, over queries)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    diff = a - b
    idx = rng.integers(0, a.size, size=(n_samples, a.size))
    means = diff[idx].mean(axis=1)
    return float((means <= 0).mean())
