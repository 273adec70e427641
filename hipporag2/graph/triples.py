"""From raw OpenIE triples to the normalised phrases and facts of the graph (SPEC §2.2-2.4)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from hipporag2.text import normalise_phrase

Triple = Tuple[str, str, str]


@dataclass
class TripleStats:
    raw: int = 0
    kept: int = 0
    wrong_length: int = 0
    duplicates: int = 0
    # Triples of length 3 with a non-string element: str()'d like the reference, kept.
    non_string: int = 0


def clean_triples(raw: Sequence, dedup_before_normalise: bool = True, stats: TripleStats | None = None) -> List[Triple]:
    """Drop triples that are not of length 3 and duplicates (first kept), then normalise.

    The reference deduplicates BEFORE normalising, so two triples that only become equal
    after normalisation both survive and both count; `dedup_before_normalise=False`
    deduplicates the normalised triples instead.
    """
    stats = stats if stats is not None else TripleStats()
    seen = set()
    out: List[Triple] = []
    for t in raw:
        stats.raw += 1
        if not isinstance(t, (list, tuple)) or len(t) != 3:
            stats.wrong_length += 1
            continue
        if not all(isinstance(x, str) for x in t):
            stats.non_string += 1
        as_str = tuple(str(x) for x in t)
        norm = tuple(normalise_phrase(x) for x in as_str)
        key = as_str if dedup_before_normalise else norm
        if key in seen:
            stats.duplicates += 1
            continue
        seen.add(key)
        out.append(norm)  # type: ignore[arg-type]
    stats.kept += len(out)
    return out


def passage_phrases(triples: Sequence[Triple]) -> List[str]:
    """Unique subjects and objects of one passage's triples, in first-seen order."""
    return list(dict.fromkeys(p for t in triples for p in (t[0], t[2])))


def unique_facts(chunk_triples: Sequence[Sequence[Triple]]) -> List[Triple]:
    """Unique triples over the corpus in first-seen order (the reference's order is a set's)."""
    return list(dict.fromkeys(t for triples in chunk_triples for t in triples))


def passage_facts(chunk_triples: Sequence[Sequence[Triple]], facts: Sequence[Triple]) -> List[List[int]]:
    """For each passage, the indices (into `facts`) of its distinct facts, first-seen order.

    The legacy HippoRAG 1 scores a passage through this table (its `docs_to_facts`
    matrix is 0/1 per passage and fact), which the phrase x passage table cannot give:
    a phrase in two facts of one passage counts twice there.
    """
    index = {f: i for i, f in enumerate(facts)}
    return [list(dict.fromkeys(index[t] for t in triples)) for triples in chunk_triples]


def phrase_nodes(chunk_triples: Sequence[Sequence[Triple]]) -> List[str]:
    """Phrase nodes sorted by text, as the reference orders its vertices."""
    return sorted({p for triples in chunk_triples for t in triples for p in (t[0], t[2])})


def phrase_passages(chunk_triples: Sequence[Sequence[Triple]], phrase_index: Dict[str, int]) -> List[List[int]]:
    """Node specificity table: for each phrase, the passages whose triples mention it."""
    out: List[List[int]] = [[] for _ in phrase_index]
    for p_idx, triples in enumerate(chunk_triples):
        for phrase in passage_phrases(triples):
            out[phrase_index[phrase]].append(p_idx)
    return out
