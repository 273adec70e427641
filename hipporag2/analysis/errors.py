"""The error analysis of the paper's Appendix E, computed from a run and its index.

For each question whose recall@k is below 1, the analysis compares the phrases the
query was linked to with the phrases of its gold (supporting) passages, at each
step where retrieval can go wrong:

- linking: the phrases of the candidate facts (before the filter),
- recognition memory: the phrases of the kept facts (after it),
- seeding: the seed phrases (kept phrases after the `linking_top_k` cut), and
  what the graph reaches from them in one hop,
- graph search: whether the seeds were mostly right and PPR still missed.

"Gold phrases" are the phrase nodes whose triples come from a gold passage (the node
specificity table of SPEC §2.7); a phrase "matches" when it is one of them. Phrases
of a fact are its subject and object, lowercased, where they are nodes (the rule the
seeding uses).

Each question gets every flag that holds (`flags`; the paper's shares overlap: they
sum to 111 %) and one primary category (`category`): the first flag in pipeline order
(`CATEGORY_ORDER`), so primary counts sum to the failing questions. Runs without
the LLM filter have no recognition-memory step: its three flags are "not
applicable" (None), not False.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

NO_MATCH_BEFORE = "no_match_before_filter"
NO_FACT_LEFT = "no_fact_left"
NO_MATCH_AFTER = "no_match_after_filter"
LOWER_RATIO = "lower_ratio_after_filter"
NO_SEEDS = "no_seed_phrases"
NO_ONE_HOP = "no_gold_within_one_hop"
GRAPH_SEARCH = "graph_search_failed"
MINORITY = "seeds_mostly_outside_gold"

# Primary category = the first flag that holds, in the order retrieval runs.
CATEGORY_ORDER = (NO_MATCH_BEFORE, NO_FACT_LEFT, NO_MATCH_AFTER, LOWER_RATIO, NO_SEEDS, NO_ONE_HOP, GRAPH_SEARCH, MINORITY)
FILTER_FLAGS = (NO_FACT_LEFT, NO_MATCH_AFTER, LOWER_RATIO)

DESCRIPTIONS = {
    NO_MATCH_BEFORE: "no phrase of the candidate facts (before the filter) is in a gold passage",
    NO_FACT_LEFT: "the filter kept no fact (dense fallback)",
    NO_MATCH_AFTER: "facts were kept, but none of their phrases is in a gold passage",
    LOWER_RATIO: "the kept facts' share of gold phrases is lower than the candidates'",
    NO_SEEDS: "no seed phrase (no kept fact's phrase is a node)",
    NO_ONE_HOP: "no gold phrase among the seed phrases or their one-hop phrase neighbours",
    GRAPH_SEARCH: "at least half of the seed phrases are in gold passages, and PPR still missed",
    MINORITY: "some seed phrase is within one hop of gold, fewer than half are gold",
}

# Appendix E of the paper (MuSiQue, Llama-3.3-70B + NV-Embed-v2, questions with
# recall@5 < 1), in percent. The paper does not define overlap between the classes.
PAPER_SHARES = {
    NO_MATCH_BEFORE: 7.0,
    NO_MATCH_AFTER: 26.0,
    LOWER_RATIO: 8.0,
    NO_FACT_LEFT: 18.0,
    NO_ONE_HOP: 2.0,
    GRAPH_SEARCH: 50.0,
}


def fact_phrases(facts: Iterable[Sequence[str]], phrase_index: Dict[str, int]) -> FrozenSet[int]:
    """Phrase nodes of facts: subject and object, lowercased, where they are nodes."""
    out: Set[int] = set()
    for f in facts:
        for phrase in (f[0].lower(), f[2].lower()):
            i = phrase_index.get(phrase)
            if i is not None:
                out.add(i)
    return frozenset(out)


def gold_share(phrases: FrozenSet[int], gold: FrozenSet[int]) -> Optional[float]:
    """Fraction of `phrases` that are gold phrases; None for an empty set."""
    return len(phrases & gold) / len(phrases) if phrases else None


@dataclass(frozen=True)
class Evidence:
    """What the classification of one question looks at (phrase node indices)."""

    candidate: FrozenSet[int]
    kept: Optional[FrozenSet[int]]  # None: no filter in this run
    seeds: FrozenSet[int]
    one_hop: FrozenSet[int]  # seeds and their phrase neighbours
    gold: FrozenSet[int]


@dataclass
class ErrorCase:
    id: str
    question: str
    recall: float
    category: str
    flags: Dict[str, Optional[bool]]
    share_candidates: Optional[float]
    share_kept: Optional[float]
    share_seeds: Optional[float]
    gold_phrases: List[str] = field(default_factory=list)
    seed_phrases: List[str] = field(default_factory=list)
    gold_titles: List[str] = field(default_factory=list)
    missed_titles: List[str] = field(default_factory=list)

    def as_dict(self) -> Dict:
        return asdict(self)


def flags_of(ev: Evidence) -> Dict[str, Optional[bool]]:
    """Every Appendix E condition for one question (None = not applicable)."""
    before = gold_share(ev.candidate, ev.gold)
    flags: Dict[str, Optional[bool]] = {NO_MATCH_BEFORE: not (ev.candidate & ev.gold)}
    if ev.kept is None:
        flags.update({k: None for k in FILTER_FLAGS})
    else:
        after = gold_share(ev.kept, ev.gold)
        flags[NO_FACT_LEFT] = not ev.kept
        flags[NO_MATCH_AFTER] = bool(ev.kept) and not (ev.kept & ev.gold)
        flags[LOWER_RATIO] = after is not None and before is not None and after < before
    flags[NO_SEEDS] = not ev.seeds
    seeds_share = gold_share(ev.seeds, ev.gold)
    flags[NO_ONE_HOP] = bool(ev.seeds) and not (ev.one_hop & ev.gold)
    flags[GRAPH_SEARCH] = seeds_share is not None and seeds_share >= 0.5
    flags[MINORITY] = bool(ev.seeds) and bool(ev.one_hop & ev.gold) and seeds_share is not None and seeds_share < 0.5
    return flags


def primary(flags: Dict[str, Optional[bool]]) -> str:
    for name in CATEGORY_ORDER:
        if flags.get(name):
            return name
    raise AssertionError(f"no category holds: {flags}")  # the last two cover every seeded case


def phrase_neighbours(edges, n_phrases: int) -> Callable[[Iterable[int]], FrozenSet[int]]:
    """seeds -> seeds and every phrase one edge away (relation or synonym edges; a
    context edge leads to a passage, which is gold exactly when the seed is)."""
    import scipy.sparse as sp

    src, dst = np.asarray(edges.source), np.asarray(edges.target)
    keep = (src < n_phrases) & (dst < n_phrases)
    s, d = src[keep], dst[keep]
    adj = sp.csr_matrix((np.ones(2 * len(s), dtype=np.int8), (np.concatenate([s, d]), np.concatenate([d, s]))),
                        shape=(n_phrases, n_phrases))

    def reach(seeds: Iterable[int]) -> FrozenSet[int]:
        seeds = list(seeds)
        out = set(seeds)
        for i in seeds:
            out.update(adj.indices[adj.indptr[i]: adj.indptr[i + 1]].tolist())
        return frozenset(out)

    return reach


def passage_phrase_sets(phrase_passages: Sequence[Sequence[int]], n_passages: int) -> List[FrozenSet[int]]:
    """Passage index -> the phrase nodes its triples mention (inverse of specificity)."""
    out: List[Set[int]] = [set() for _ in range(n_passages)]
    for ph, passages in enumerate(phrase_passages):
        for p in passages:
            out[p].add(ph)
    return [frozenset(s) for s in out]


@dataclass
class Classifier:
    """Everything per-run that classifying a question needs, built once from an index."""

    phrase_index: Dict[str, int]
    phrases: List[str]
    passage_of_string: Dict[str, int]
    phrases_of_passage: List[FrozenSet[int]]
    reach: Callable[[Iterable[int]], FrozenSet[int]]

    @classmethod
    def of_index(cls, index) -> "Classifier":
        return cls(
            phrase_index=index.phrase_index,
            phrases=list(index.phrases),
            passage_of_string={s: i for i, s in enumerate(index.passages)},
            phrases_of_passage=passage_phrase_sets(index.phrase_passages, index.n_passages),
            reach=phrase_neighbours(index.edges, index.n_phrases),
        )

    def gold_phrases(self, gold_strings: Sequence[str]) -> FrozenSet[int]:
        out: Set[int] = set()
        for s in gold_strings:
            p = self.passage_of_string.get(s)
            if p is not None:
                out |= self.phrases_of_passage[p]
        return frozenset(out)

    def evidence(self, candidate_facts, kept_facts, seed_phrases: Sequence[str], gold_strings, filter_applied: bool) -> Evidence:
        seeds = frozenset(self.phrase_index[p] for p in seed_phrases if p in self.phrase_index)
        return Evidence(
            candidate=fact_phrases(candidate_facts, self.phrase_index),
            kept=fact_phrases(kept_facts, self.phrase_index) if filter_applied else None,
            seeds=seeds,
            one_hop=self.reach(seeds),
            gold=self.gold_phrases(gold_strings),
        )


def bootstrap_interval(indicator: Sequence[float], n_samples: int = 10000, seed: int = 0, level: float = 0.95) -> Tuple[float, float]:
    """Percentile bootstrap interval (×100) of the mean of a 0/1 vector, resampling questions."""
    x = np.asarray(indicator, dtype=np.float64)
    if x.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_samples, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (100.0 * float(lo), 100.0 * float(hi))


@dataclass
class CategoryRow:
    name: str
    description: str
    primary_count: int
    primary_share: float
    primary_ci: Tuple[float, float]
    flag_count: Optional[int]  # None: not applicable in this run
    flag_share: Optional[float]
    flag_ci: Optional[Tuple[float, float]]
    paper_share: Optional[float]


@dataclass
class ErrorTable:
    rows: List[CategoryRow]
    n_questions: int
    n_failing: int
    k: int
    filter_applied: bool


def error_table(cases: Sequence[ErrorCase], n_questions: int, k: int, filter_applied: bool,
                n_samples: int = 10000) -> ErrorTable:
    n = len(cases)
    rows = []
    for name in CATEGORY_ORDER:
        prim = [1.0 if c.category == name else 0.0 for c in cases]
        applicable = filter_applied or name not in FILTER_FLAGS
        flag = [1.0 if c.flags.get(name) else 0.0 for c in cases] if applicable else None
        rows.append(CategoryRow(
            name=name,
            description=DESCRIPTIONS[name],
            primary_count=int(sum(prim)),
            primary_share=100.0 * sum(prim) / n if n else float("nan"),
            primary_ci=bootstrap_interval(prim, n_samples),
            flag_count=int(sum(flag)) if flag is not None else None,
            flag_share=(100.0 * sum(flag) / n if n else float("nan")) if flag is not None else None,
            flag_ci=bootstrap_interval(flag, n_samples) if flag is not None else None,
            paper_share=PAPER_SHARES.get(name),
        ))
    return ErrorTable(rows=rows, n_questions=n_questions, n_failing=n, k=k, filter_applied=filter_applied)
