"""Synonym pairs of a changed phrase set, from the pairs of the previous one.

Inserting or deleting passages changes the phrase nodes; the synonym KNN over all
phrases (the dominant CPU cost of building a graph) need not be redone:

* a new phrase's neighbour list is searched in full (its row against all phrases);
* an old phrase's list can only gain new phrases: its old accepted neighbours plus
  the new phrases scoring >= threshold, merged best first and cut at
  `max_neighbours` (an old list holds every old neighbour >= threshold unless it
  was cut at `max_neighbours`, and a cut list stays correct since its members were
  the best). Those (old, new) pairs are the new rows' (new, old) candidates turned
  around: a canonical score is symmetric (a float64 dot of the same two rows), so
  the new rows are searched once, against every phrase, and nothing else is;
* an old phrase that lost a neighbour (deleted phrase) keeps the rest; if its list
  had been cut at `max_neighbours`, the next candidates are unknown, so that row is
  searched again in full.

Ties are broken by the lower phrase index, i.e. by phrase text (phrase nodes are
sorted by text), which does not change when other phrases come or go; scores are the
canonical scores of `synonyms.knn_candidates`. So the result equals
`synonym_arrays` over the new phrase set, pair for pair and bit for bit. The shortcut
needs `top_k >= max_neighbours + 2` (the window the reference walks never cuts a list
before the neighbour cap does); otherwise every row is searched again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from hipporag2.config import GraphConfig
from hipporag2.graph.synonyms import cap_per_query, knn_candidates, query_mask, synonym_arrays

Pairs = Tuple[np.ndarray, np.ndarray, np.ndarray]  # (query, neighbour, float32 score)


@dataclass
class UpdateStats:
    """How much of the KNN an update searched (rows x columns)."""

    full_rows: int = 0  # query rows whose list is searched in full (new or refilled)
    merged_rows: int = 0  # old query rows whose list gains the new phrases (from the searched rows' pairs)
    new_columns: int = 0  # new phrases
    searched_rows: int = 0  # rows multiplied against every phrase (the whole KNN work of an update)
    recomputed_all: bool = False


def empty_pairs() -> Pairs:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)


def _sort(q: np.ndarray, c: np.ndarray, s: np.ndarray) -> Pairs:
    """Sorted by query, score descending, neighbour: one argsort of a packed int64
    key (score replaced by its descending rank) when the three fit in 63 bits."""
    if q.size == 0:
        return q, c, s
    uniq, rank = np.unique(s, return_inverse=True)
    desc = (uniq.size - 1 - rank.ravel()).astype(np.int64)
    bc, bd = int(c.max()).bit_length(), int(desc.max()).bit_length()
    if int(q.max()).bit_length() + bd + bc <= 63:
        order = np.argsort((q.astype(np.int64) << (bd + bc)) | (desc << bc) | c.astype(np.int64), kind="stable")
    else:
        order = np.lexsort((c, -s, q))
    return q[order], c[order], s[order]


def update_synonyms(
    old_phrases: Sequence[str],
    old_pairs: Optional[Pairs],
    new_phrases: Sequence[str],
    new_embeddings: np.ndarray,
    cfg: GraphConfig,
    progress: bool = False,
    is_query: Optional[np.ndarray] = None,
) -> Tuple[Pairs, UpdateStats]:
    """Synonym pairs over `new_phrases` (sorted by text, rows of `new_embeddings`),
    given the pairs `old_pairs` over `old_phrases`. Equal to
    `synonym_arrays(new_phrases, new_embeddings, ...)` with `cfg`'s settings.
    `is_query`: `query_mask(new_phrases)` when the caller has it."""
    stats = UpdateStats()
    n = len(new_phrases)
    args = dict(
        threshold=cfg.synonymy_edge_sim_threshold,
        top_k=cfg.synonymy_edge_topk,
        max_neighbours=cfg.synonymy_edge_max_neighbours,
        block_size=cfg.knn_block_size,
        progress=progress,
    )
    if n == 0:
        return empty_pairs(), stats
    if old_pairs is None or cfg.synonymy_edge_topk < cfg.synonymy_edge_max_neighbours + 2:
        stats.recomputed_all, stats.full_rows, stats.searched_rows = True, n, n
        return synonym_arrays(new_phrases, new_embeddings, **args), stats

    new_pos = {p: i for i, p in enumerate(new_phrases)}
    old_to_new = np.array([new_pos.get(p, -1) for p in old_phrases], dtype=np.int64)
    kept_old = np.zeros(n, dtype=bool)
    kept_old[old_to_new[old_to_new >= 0]] = True
    added = np.nonzero(~kept_old)[0]
    is_query = query_mask(new_phrases) if is_query is None else np.asarray(is_query, dtype=bool)
    empty = np.array([p == "" for p in new_phrases], dtype=bool)

    oq, oc, os_ = (np.asarray(a) for a in old_pairs)
    oq, oc = old_to_new[oq], old_to_new[oc]
    lost = oc < 0  # neighbour deleted
    cap = cfg.synonymy_edge_max_neighbours
    full_before = np.bincount(oq[oq >= 0], minlength=n) >= cap if oq.size else np.zeros(n, bool)
    refill = np.zeros(n, dtype=bool)
    refill[oq[lost & (oq >= 0)]] = True
    refill &= full_before  # a cut list that lost members: its next candidates are unknown
    keep = (oq >= 0) & ~lost & ~refill[np.maximum(oq, 0)]
    oq, oc, os_ = oq[keep], oc[keep], os_[keep]

    # One search against every phrase, of every new phrase and every refilled old one.
    searched = np.nonzero(~kept_old | refill)[0]
    stats.searched_rows = int(searched.size)
    thr = cfg.synonymy_edge_sim_threshold
    if searched.size:
        sq, sc, ss = knn_candidates(new_embeddings, searched, thr, block_size=cfg.knn_block_size, progress=progress)
    else:
        sq, sc, ss = empty_pairs()
    top_k = min(cfg.synonymy_edge_topk, n)
    # Their own lists (query rows only): the candidates as `synonym_arrays(query_rows=)` walks them.
    own = is_query[sq]
    full_rows = np.nonzero(is_query & (~kept_old | refill))[0]
    stats.full_rows = int(full_rows.size)
    fq, fc, fs = cap_per_query(sq[own], sc[own], ss[own], empty, top_k, cap)

    # Old rows (kept, not refilled) gain the new phrases: the new rows' pairs turned around.
    merge_rows = np.nonzero(is_query & kept_old & ~refill)[0]
    stats.merged_rows, stats.new_columns = int(merge_rows.size), int(added.size)
    merging = np.zeros(n, dtype=bool)
    merging[merge_rows] = True
    turn = ~kept_old[sq] & merging[sc]
    # Lists that gain nothing keep their order (old and new indices are both text order).
    gaining = np.zeros(n, dtype=bool)
    gaining[sc[turn]] = True
    moved = gaining[oq]
    mq, mc, ms = _sort(np.r_[oq[moved], sc[turn]], np.r_[oc[moved], sq[turn]], np.r_[os_[moved], ss[turn]].astype(np.float32))
    mq, mc, ms = cap_per_query(mq, mc, ms, empty, top_k, cap)
    stay = ~moved
    # The parts hold disjoint queries, each sorted: a stable sort by query merges them.
    q = np.r_[fq, oq[stay], mq]
    c, s = np.r_[fc, oc[stay], mc], np.r_[fs, os_[stay], ms].astype(np.float32)
    order = np.argsort(q, kind="stable")
    return (q[order], c[order], s[order]), stats
