"""Seeding the Personalized PageRank (SPEC §3.5-3.7): pure functions."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.retrieve.scoring import rank_desc


def phrase_seeds_from_facts(
    facts: Sequence[Tuple[str, str, str]],
    fact_scores: Sequence[float],
    phrase_index: Dict[str, int],
    passages_per_phrase: Sequence[int],
    top_k: int,
    node_specificity: bool = True,
) -> List[Tuple[int, float]]:
    """Phrase node -> seed weight, the `top_k` largest, best first (see `phrase_weights_from_facts`)."""
    return phrase_weights_from_facts(facts, fact_scores, phrase_index, passages_per_phrase, node_specificity)[:top_k]


def phrase_weights_from_facts(
    facts: Sequence[Tuple[str, str, str]],
    fact_scores: Sequence[float],
    phrase_index: Dict[str, int],
    passages_per_phrase: Sequence[int],
    node_specificity: bool = True,
) -> List[Tuple[int, float]]:
    """Every linked phrase with its weight, best first, before the top-k cut.

    Each kept fact adds f / |passages(phrase)| to its subject and to its object (when
    they are nodes) and counts one occurrence; the weight is the mean. Ties at the
    top-k cut (the reference leaves them to hash order) go to the phrase that appears
    first among the kept facts, subject before object.
    """
    total: Dict[int, float] = {}
    count: Dict[int, int] = {}
    for (s, _, o), f in zip(facts, fact_scores):
        for phrase in (s.lower(), o.lower()):
            idx = phrase_index.get(phrase)
            if idx is None:
                continue
            w = f  # the division happens in the fact score's dtype (float32), as in the reference
            n = passages_per_phrase[idx]
            if node_specificity and n > 0:
                w = w / n
            total[idx] = total.get(idx, 0.0) + float(w)  # accumulated in float64
            count[idx] = count.get(idx, 0) + 1
    means = [(idx, total[idx] / count[idx]) for idx in total]  # dict order = first appearance
    means.sort(key=lambda item: -item[1])  # stable: ties keep first appearance
    return means


def uniform_phrase_seeds(
    phrases: Sequence[int], passages_per_phrase: Sequence[int], node_specificity: bool = True
) -> List[Tuple[int, float]]:
    """HippoRAG 1: each linked phrase gets 1 (divided by its passage count)."""
    out: Dict[int, float] = {}
    for idx in phrases:
        n = passages_per_phrase[idx]
        out[idx] = 1.0 / n if node_specificity and n > 0 else 1.0
    return list(out.items())


def passage_seed_vector(
    dense_normalised: np.ndarray, passage_node_weight: float, top_k: Optional[int] = None
) -> np.ndarray:
    """Every passage gets weight x its min-max normalised dense score (or only the top-k)."""
    seeds = dense_normalised * passage_node_weight
    if top_k is not None:
        keep = np.zeros(seeds.shape, dtype=bool)
        keep[rank_desc(dense_normalised, top_k)] = True
        seeds = np.where(keep, seeds, 0)
    return seeds


def reset_vector(
    n_phrases: int, phrase_seeds: Sequence[Tuple[int, float]], passage_seeds: Optional[np.ndarray]
) -> np.ndarray:
    n_passages = 0 if passage_seeds is None else len(passage_seeds)
    reset = np.zeros(n_phrases + n_passages, dtype=np.float64)
    for idx, w in phrase_seeds:
        reset[idx] = w
    if passage_seeds is not None:
        reset[n_phrases:] = passage_seeds
    return reset
