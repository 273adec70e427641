"""Gates that stop a run which would otherwise quietly become something else.

A HippoRAG 2 run whose OpenIE file belongs to another corpus, or whose LLM kept no
facts, builds a graph without facts and answers every question by the dense
fallback (SPEC §3.4): it exits 0 with ordinary-looking recall under the name
`hipporag2`. These checks turn that into one clear error, each with the setting that
relaxes it (docs/reliability.md):

- `openie.min_coverage` (0.99): the share of corpus passages an imported OpenIE file
  must cover, checked before anything is embedded;
- no facts at all: graph retrieval refuses to start, unless
  `retrieval.max_fallback_rate=1` says that dense answers are acceptable;
- `retrieval.max_fallback_rate` (0.5): the share of queries that may fall back to the
  dense ranking, checked when retrieval has finished (the results stay checkpointed,
  so a rerun with the gate relaxed does not retrieve again).
"""
from __future__ import annotations

from typing import Optional, Sequence


class GateError(ValueError):
    """A run stopped by a gate; the CLI prints it as one line with exit status 2.

    The library's `HippoRAG.retrieve` attaches what it computed (`results`), so a
    caller can still inspect the queries that tripped the gate."""

    results: Optional[list] = None


def check_openie_coverage(source: str, n_passages: int, missing: Sequence[str], min_coverage: float) -> float:
    """Coverage of the corpus by an OpenIE file; GateError when below `min_coverage`."""
    n_missing = len(missing)
    coverage = 1.0 if n_passages == 0 else (n_passages - n_missing) / n_passages
    if coverage < min_coverage:
        first = missing[0][:80] if missing else ""
        raise GateError(
            f"{source}: the OpenIE file covers {coverage:.1%} of the corpus ({n_passages - n_missing} of "
            f"{n_passages} passages; first unmatched passage: {first!r}), below openie.min_coverage={min_coverage:g}; "
            "is it the extraction of another corpus? (set openie.min_coverage=0 to index anyway)"
        )
    return coverage


def check_has_facts(n_facts: int, source: str, n_passages: int, max_fallback_rate: float) -> None:
    """A graph without facts makes every query a dense fallback."""
    if n_facts == 0 and max_fallback_rate < 1.0:
        raise GateError(
            f"{source}: no usable triples for any of the {n_passages} passages, so the graph has no facts and "
            "every query would fall back to dense retrieval; check the OpenIE (LLM, prompts, file) "
            "or set retrieval.max_fallback_rate=1 to run anyway"
        )


def fallback_rate(n_fallbacks: int, n_queries: int) -> float:
    return 0.0 if n_queries == 0 else n_fallbacks / n_queries


RELAX_FALLBACK_RUN = "set retrieval.max_fallback_rate=1 to accept it; results are checkpointed"


def check_fallback_rate(method: str, n_fallbacks: int, n_queries: int, max_fallback_rate: float,
                        facts: Optional[int] = None, where: str = "", relax: str = RELAX_FALLBACK_RUN) -> None:
    """More than `max_fallback_rate` of the queries answered by the dense fallback.
    `where` prefixes the message (a sweep names its point), `relax` says how to accept it."""
    rate = fallback_rate(n_fallbacks, n_queries)
    if rate > max_fallback_rate:
        raise GateError(
            f"{where}retrieval.method={method}: {n_fallbacks} of {n_queries} queries ({rate:.1%}) fell back to dense "
            f"retrieval (no fact or phrase to seed the graph{'' if facts is None else f'; the index has {facts} facts'}), "
            f"above retrieval.max_fallback_rate={max_fallback_rate:g}; this would be a dense run under another name "
            f"({relax})"
        )
