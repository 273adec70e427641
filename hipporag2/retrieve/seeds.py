"""Seeding the Personalized PageRank (SPEC §3.5-3.7): pure functions, the one place
that turns a query's linking into reset vectors.

The three linkings (`link_facts`, `link_nodes`, `link_ner`) give each query its phrase
seeds and what to report about them; `passage_seed_vector` its passage seeds;
`reset_rows` makes both the reset rows every solver reads; `seeds_anything` says
whether a reset would seed the graph at all (else the query falls back to dense).
The retriever, the sweep and `analysis/explain` all seed through here.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.retrieve.csr import Csr
from hipporag2.retrieve.scoring import rank_desc

Seeds = List[Tuple[int, float]]  # (phrase node, reset weight)
Link = Tuple[Seeds, Dict]  # a query's phrase seeds and the details its result reports
# kept candidate positions per question, from the fact filter: (questions, candidate facts) -> positions
SelectFacts = Callable[[List[str], List[List[Tuple[str, str, str]]]], Sequence[Sequence[int]]]


def phrase_weights_from_facts(
    facts: Sequence[Tuple[str, str, str]],
    fact_scores: Sequence[float],
    phrase_index: Dict[str, int],
    passages_per_phrase: Sequence[int],
    node_specificity: bool = True,
) -> Seeds:
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


def weigh_phrases(phrases: Sequence[int], scores: Sequence[float], passages_per_phrase: Sequence[int],
                  uniform: bool = False, node_specificity: bool = True) -> Seeds:
    """Linked phrases' seeds: their link scores (HippoRAG 1, `uniform`: 1 each), divided by
    the number of passages mentioning them under `node_specificity`; a phrase linked twice
    keeps one entry (uniform) or its last weight (the reset takes the last)."""
    out: Dict[int, float] | List[Tuple[int, float]] = {} if uniform else []
    for i, s in zip(phrases, scores):
        n = passages_per_phrase[i]
        w = 1.0 if uniform else s
        w = w / n if node_specificity and n > 0 else w
        if uniform:
            out[i] = w
        else:
            out.append((i, w))
    return list(out.items()) if uniform else out


# ---- the three linkings -------------------------------------------------------------
def link_facts(questions: Sequence[str], top: np.ndarray, top_scores: np.ndarray, facts, phrases, phrase_index,
               passages_per_phrase, select: SelectFacts, top_k: int, node_specificity: bool = True) -> List[Link]:
    """query_to_triple: each question's candidate facts (`top`, their min-max scores
    `top_scores`, from `scoring.min_max_top_k_product`), those the filter keeps, and the
    phrases of the kept facts weighted by `phrase_weights_from_facts`, top_k of them."""
    cand_idx = top.tolist()
    candidates = [[facts[i] for i in c] for c in cand_idx]
    kept_positions = select(list(questions), candidates)
    as_floats = top_scores.tolist()  # each float32 score as a Python float, for the details
    out = []
    for cand_facts, cand_scores, floats, kept in zip(candidates, top_scores, as_floats, kept_positions):
        kept = list(kept)[:top_k]  # positions in the candidates
        kept_scores = [cand_scores[k] for k in kept]  # float32 scores, as the seeds divide them
        weights = phrase_weights_from_facts([cand_facts[k] for k in kept], kept_scores, phrase_index,
                                            passages_per_phrase, node_specificity)
        details = {  # `results.QueryResult` fields
            "candidate_facts": list(zip(cand_facts, floats)),
            "kept_facts": [(cand_facts[k], floats[k]) for k in kept],
            # before the top-k cut, so ties at the cut can be seen in the output
            "phrase_weights": [(phrases[i], float(w)) for i, w in weights],
        }
        out.append((weights[:top_k], details))
    return out


def link_nodes(scores: np.ndarray, phrases, passages_per_phrase, top_k: int, uniform: bool = False,
               node_specificity: bool = True) -> List[Link]:
    """query_to_node: the top_k phrase nodes by each query's min-max normalised scores."""
    out = []
    for row in scores:
        top = rank_desc(row, top_k).tolist()
        seeds = weigh_phrases(top, [float(row[i]) for i in top], passages_per_phrase, uniform, node_specificity)
        out.append((seeds, {"linked_phrases": [phrases[i] for i in top]}))
    return out


def link_ner(entities: Sequence[Sequence[str]], sims: np.ndarray, phrases, passages_per_phrase, legacy: bool = False,
             uniform: bool = False, node_specificity: bool = True) -> List[Link]:
    """ner_to_node: each query entity linked to its nearest phrase node (`sims`: one row
    per entity, in order); legacy: np.argmax (equal cosines: the lower index)."""
    out, pos = [], 0
    for ents in entities:
        linked, linked_scores = [], []
        for _ in ents:
            j = int(np.argmax(sims[pos])) if legacy else int(rank_desc(sims[pos], 1)[0])
            if j not in linked:
                linked.append(j)
                linked_scores.append(float(sims[pos][j]))
            pos += 1
        seeds = weigh_phrases(linked, linked_scores, passages_per_phrase, uniform, node_specificity)
        out.append((seeds, {"query_entities": ents, "linked_phrases": [phrases[i] for i in linked]}))
    return out


# ---- resets -------------------------------------------------------------------------
def passage_seed_vector(dense_normalised: np.ndarray, passage_node_weight: float,
                        top_k: Optional[int] = None) -> np.ndarray:
    """Every passage gets weight x its min-max normalised dense score (or only the top-k)."""
    seeds = dense_normalised * passage_node_weight
    if top_k is not None:
        keep = np.zeros(seeds.shape, dtype=bool)
        keep[rank_desc(dense_normalised, top_k)] = True
        seeds = np.where(keep, seeds, 0)
    return seeds


def seeds_anything(phrase_seeds: Seeds, passage_seeds: Optional[np.ndarray]) -> bool:
    """Whether the reset (`reset_rows`) has a positive entry (NaN and negative weights do
    not count, as the solvers clean them to 0): otherwise PPR is undefined and the query
    falls back to its dense ranking."""
    return any(w > 0 for w in dict(phrase_seeds).values()) or (passage_seeds is not None and bool(np.any(passage_seeds > 0)))


def reset_rows(phrase_seeds: Sequence[Seeds], passage_seeds: Sequence[Optional[np.ndarray]],
               n_phrases: int, n: int) -> Csr:
    """The reset vectors of some queries as CSR rows over the n nodes (phrases, then
    passages): each query's phrase seeds (a phrase seeded twice keeps its last weight)
    and its passage seeds (None: no passage entries). Zeros among the passages are left
    out; everything else (NaN, negatives) is kept for the solver to clean. A query's
    reset has a few phrase entries and up to one per passage, so rows are far smaller
    than dense resets. Canonical by construction (each row sorted, no duplicates)."""
    index = np.int32 if n < 2**31 else np.int64  # what scipy would pick
    cols, vals, sizes = [], [], []
    for seeds, ps in zip(phrase_seeds, passage_seeds):
        last = dict(seeds)  # R[j] = w in order: the last weight of a phrase wins
        keys = sorted(last)  # phrases come before passages: each row is sorted
        cols.append(np.array(keys, dtype=index))
        vals.append(np.array([last[j] for j in keys], dtype=np.float64))
        if ps is not None:
            keep = np.asarray(ps) != 0  # zeros add nothing; NaN stays (NaN != 0)
            cols.append(np.flatnonzero(keep).astype(index) + index(n_phrases))
            vals.append(np.asarray(ps)[keep])
        sizes.append(len(keys) + (0 if ps is None else len(cols[-1])))
    indptr = np.zeros(len(sizes) + 1, dtype=index)
    np.cumsum(sizes, out=indptr[1:])
    # float64 values: every row's phrase part is (a float32 passage part is cast exactly)
    cols, vals = (np.concatenate(cols), np.concatenate(vals)) if sizes else (np.zeros(0, index), np.zeros(0))
    return Csr(indptr, cols, vals, (len(sizes), n))
