"""Small numeric rules that every retriever shares (SPEC §3)."""
from __future__ import annotations

import numpy as np


def min_max(x: np.ndarray) -> np.ndarray:
    """(x - min) / (max - min); all ones when max == min, as the reference does.

    The input's float dtype is kept (the reference computes in float32), because a
    float64 detour can reorder near-ties.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if x.size == 0:
        return x
    lo, hi = x.min(), x.max()
    if hi == lo:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


def min_max_rows(x: np.ndarray) -> np.ndarray:
    """`min_max` of every row, dtype kept."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    lo = x.min(axis=1, keepdims=True)
    span = x.max(axis=1, keepdims=True) - lo
    out = np.ones_like(x)
    ok = span[:, 0] > 0
    out[ok] = (x[ok] - lo[ok]) / span[ok]
    return out


def rank_desc(scores: np.ndarray, k: int | None = None) -> np.ndarray:
    """Indices by descending score; equal scores go to the HIGHER index first.

    This is what the reference's `np.argsort(x)[::-1]` does for ties, made
    deterministic with a stable sort.
    """
    order = np.argsort(np.asarray(scores), kind="stable")[::-1]
    return order if k is None else order[:k]
