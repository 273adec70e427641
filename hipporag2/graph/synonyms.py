"""Synonym edges: thresholded nearest phrases by cosine (SPEC §2.8).

The similarity of each pair is computed once: E E^T is symmetric, so only tiles of
its upper triangle are multiplied (BLAS, float32, into one reused tile buffer of
`block_size` rows), and every hit is offered to both of its ends. The scan for
scores at or above the threshold is a parallel compiled pass over the tile
(`knn_kernels`); each phrase keeps only as many best neighbours as the reference's
walk can reach (`list_length`), so memory is bounded by the tile and by
phrases x that length, never by n x n or by how many pairs pass the threshold.

Same pairs and scores as computing each query row against all phrases: a dot
product in BLAS's float32 kernels sums over the dimension in the same order for
every element, and its products commute, so the score of (i, j) is the score of
(j, i) (checked against the row-by-row computation in tests/test_synonym_knn.py
and, at MuSiQue size, by benchmarks/bench_knn.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

from hipporag2.graph.knn_kernels import offer_tile, scan_tile, walk_lists
from hipporag2.text import alnum_len

# columns of one similarity tile: with 1024 rows, 32 MB of float32 (BLAS ran at 48 / 52
# / 53 GFLOPS for 1024 x 4096 / 1024 x 8192 / 2048 x 4096 tiles here)
TILE_COLUMNS = 8192
# hits of one tile row kept in its slots by the parallel scan (more: that row is rescanned)
SLOTS = 32


@dataclass(frozen=True)
class SynonymPairs:
    """Accepted synonym pairs as arrays: query, neighbour, cosine (float32), in query order."""

    query: np.ndarray
    neighbour: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return int(self.query.shape[0])

    def as_tuples(self) -> List[Tuple[int, int, float]]:
        return list(zip(self.query.tolist(), self.neighbour.tolist(), self.score.astype(np.float64).tolist()))


def list_length(top_k: int, n: int, max_neighbours: int, n_skipped: int) -> int:
    """How many best neighbours per phrase can matter: the walk looks at no more than
    the top_k nearest, and within them it reaches at most max_neighbours accepted plus
    itself plus the skipped (empty) phrases."""
    return max(1, min(top_k, n, max_neighbours + 1 + n_skipped))


def synonym_arrays(
    phrases: Sequence[str],
    embeddings: np.ndarray,
    threshold: float = 0.8,
    top_k: int = 2047,
    max_neighbours: int = 101,
    block_size: int = 1024,
    progress: bool = False,
) -> SynonymPairs:
    """`synonym_pairs` as arrays (no Python tuple per pair)."""
    emb = np.ascontiguousarray(embeddings, dtype=np.float32)
    n = emb.shape[0]
    if n == 0:
        empty_i = np.zeros(0, dtype=np.int64)
        return SynonymPairs(empty_i, empty_i, np.zeros(0, dtype=np.float32))
    is_query = np.array([alnum_len(p) > 2 for p in phrases], dtype=np.bool_)
    skip = np.array([p == "" for p in phrases], dtype=np.bool_)
    L = list_length(top_k, n, max_neighbours, int(skip.sum()))
    count = np.zeros(n, dtype=np.int64)
    nbr = np.zeros((n, L), dtype=np.int64)
    score = np.zeros((n, L), dtype=np.float32)
    thr = np.float32(threshold)
    T = max(1, int(block_size))
    C = max(T, TILE_COLUMNS)
    tile = np.empty(T * C, dtype=np.float32)
    counts = np.empty(T, dtype=np.int64)
    slot_j = np.empty((T, SLOTS), dtype=np.int64)
    slot_s = np.empty((T, SLOTS), dtype=np.float32)
    starts = range(0, n, T)
    if progress:
        from tqdm import tqdm

        starts = tqdm(starts, desc="synonym KNN", unit="block")
    for i0 in starts:
        i1 = min(i0 + T, n)
        rows = emb[i0:i1]
        for j0 in range(i0, n, C):
            j1 = min(j0 + C, n)
            S = tile[: (i1 - i0) * (j1 - j0)].reshape(i1 - i0, j1 - j0)
            np.matmul(rows, emb[j0:j1].T, out=S)
            m = i1 - i0
            scan_tile(S, i0, j0, thr, counts[:m], slot_j[:m], slot_s[:m])
            offer_tile(S, i0, j0, thr, counts[:m], slot_j[:m], slot_s[:m], is_query, count, nbr, score)
    cap = int(np.minimum(count, max_neighbours).sum())
    out_q = np.empty(cap, dtype=np.int64)
    out_c = np.empty(cap, dtype=np.int64)
    out_s = np.empty(cap, dtype=np.float32)
    k = walk_lists(count, nbr, score, skip, max_neighbours, out_q, out_c, out_s)
    return SynonymPairs(out_q[:k], out_c[:k], out_s[:k])


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
    return synonym_arrays(phrases, embeddings, threshold, top_k, max_neighbours, block_size, progress).as_tuples()
