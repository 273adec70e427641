"""Synonym edges: thresholded nearest phrases by cosine (SPEC §2.8).

Computed in blocks of query rows, so memory is block x n, never n x n.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from hipporag2.text import alnum_len


def synonym_pairs(
    phrases: Sequence[str],
    embeddings: np.ndarray,
    threshold: float = 0.8,
    top_k: int = 2047,
    max_neighbours: int = 101,
    block_size: int = 1024,
    progress: bool = False,
) -> List[Tuple[int, int, float]]:
    """(query, neighbour, cosine) for every accepted synonym, in query order.

    Rules of the reference: only phrases with more than 2 alphanumeric characters are
    queries (others can still be neighbours); neighbours come best first among the
    `top_k` nearest (itself included); the walk stops at the first score below the
    threshold or once `max_neighbours` were accepted; itself and the empty phrase are
    skipped. Every query is processed, so a mutual pair yields two entries.
    Ties between equal scores are broken by the lower neighbour index.
    """
    emb = np.ascontiguousarray(embeddings, dtype=np.float32)
    n = emb.shape[0]
    if n == 0:
        return []
    queries = np.array([alnum_len(p) > 2 for p in phrases], dtype=bool)
    empty = np.array([p == "" for p in phrases], dtype=bool)
    k = min(top_k, n)
    out: List[Tuple[int, int, float]] = []
    starts = range(0, n, block_size)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="synonym KNN", unit="block")
    for start in starts:
        rows = np.nonzero(queries[start : start + block_size])[0] + start
        if rows.size == 0:
            continue
        sims = emb[rows] @ emb.T
        r_idx, c_idx = np.nonzero(sims >= np.float32(threshold))
        if r_idx.size == 0:
            continue
        scores = sims[r_idx, c_idx]
        # Sort by row, then score descending, then neighbour index ascending.
        order = np.lexsort((c_idx, -scores, r_idx))
        r_idx, c_idx, scores = r_idx[order], c_idx[order], scores[order]
        bounds = np.searchsorted(r_idx, np.arange(rows.size + 1))
        for local in range(rows.size):
            lo, hi = bounds[local], bounds[local + 1]
            if lo == hi:
                continue
            q = int(rows[local])
            accepted = 0
            for c, s in zip(c_idx[lo : min(hi, lo + k)], scores[lo : min(hi, lo + k)]):
                if accepted >= max_neighbours:
                    break
                c = int(c)
                if c == q or empty[c]:
                    continue
                out.append((q, c, float(s)))
                accepted += 1
    return out
