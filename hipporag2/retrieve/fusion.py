"""Reciprocal rank fusion (Cormack et al., 2009): pure functions, no retriever in sight.

A passage's fused score is the sum over channels c of w_c / (k + rank_c), rank 1-based,
counting only channels whose ranking lists the passage. Ranks, not scores, are fused
because PPR mass, min-max cosines and BM25 scores live on unrelated scales. A channel
given as None abstains (a query that seeded no graph node): the other channels decide
alone, instead of the graph's dense fallback counting as a second dense vote.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from hipporag2.retrieve.scoring import rank_desc


def rrf_scores(rankings: Sequence[Optional[Sequence[int]]], weights: Sequence[float], k: float, n: int) -> np.ndarray:
    """Fused score of each of `n` items; `rankings[c]`: channel c's items, best first
    (None: the channel abstains)."""
    if len(rankings) != len(weights):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    scores = np.zeros(n, dtype=np.float64)
    for ranking, w in zip(rankings, weights):
        if ranking is None or w == 0:
            continue
        items = np.asarray(ranking, dtype=np.int64)
        if len(np.unique(items)) != items.size:
            raise ValueError("a ranking lists an item twice")
        scores[items] += w / (k + np.arange(1, items.size + 1, dtype=np.float64))
    return scores


def reciprocal_rank_fusion(rankings: Sequence[Optional[Sequence[int]]], weights: Sequence[float], k: float, n: int,
                           top_k: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """The fused order (items no channel lists are left out) and its scores. Equal
    scores go to the higher index first (`scoring.rank_desc`, the retrievers' tie rule)."""
    scores = rrf_scores(rankings, weights, k, n)
    listed = int((scores > 0).sum())
    order = rank_desc(scores, min(listed, top_k) if top_k is not None else listed)
    return order, scores[order]
