"""Gates that stop a run which would otherwise quietly become something else.

A HippoRAG 2 run whose OpenIE file belongs to another corpus, or whose LLM kept no
facts, builds a graph without facts and answers every question by the dense
fallback (SPEC §3.4): it exits 0 with ordinary-looking recall under the name
`hipporag2`. These checks turn that into one clear error, each with the setting that
relaxes it (docs/reliability.md):

- `openie.min_coverage` (0.99): the share of corpus passages an imported OpenIE file
  must cover, and equally the share our own extraction must have extracted (a passage
  whose LLM calls failed after the retries counts as missing), checked before
  anything is embedded;
- no facts at all: graph retrieval refuses to start, unless
  `retrieval.max_fallback_rate=1` says that dense answers are acceptable;
- `retrieval.max_fallback_rate` (0.5): the share of queries that may fall back to the
  dense ranking, checked when retrieval has finished (the results stay checkpointed,
  so a rerun with the gate relaxed does not retrieve again);
- `qa.max_failure_rate` (0): the share of reader calls that may fail (after the
  retries), checked once what was answered is saved: a failed call is no answer, and
  scoring it as a wrong one would lower EM/F1 without saying why.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence


class GateError(ValueError):
    """A run stopped by a gate; the CLI prints it as one line with exit status 2.

    The library's `HippoRAG.retrieve` attaches what it computed (`results`), so a
    caller can still inspect the queries that tripped the gate."""

    results: Optional[list] = None


def coverage(n_passages: int, n_missing: int) -> float:
    """The share of the corpus with an extraction: the one measure `openie.min_coverage`
    applies to an imported file and to our own extraction alike."""
    return 1.0 if n_passages == 0 else (n_passages - n_missing) / n_passages


class LLMFailureGate(GateError):
    """LLM calls failed after their retries in a stage whose output a run cannot do
    without (OpenIE while indexing, the reader). What was answered is saved (the OpenIE
    file, the LLM response cache, the QA checkpoint), so a rerun asks only `failed`."""

    def __init__(self, message: str, stage: str, failed: int, total: int, first_error: str):
        super().__init__(message)
        self.stage, self.failed, self.total, self.first_error = stage, failed, total, first_error


def check_openie_failures(source: str, n_passages: int, failed_by_stage: Dict[str, int], first_error: str,
                          min_coverage: float, not_asked: int = 0) -> float:
    """Coverage of the corpus by our own extraction, where a passage whose NER or triple
    call failed (after the LLM layer's retries) is missing; LLMFailureGate when below
    `min_coverage`. The extracted passages are already in `source`. `not_asked`:
    passages left for the rerun because the failures had already decided the gate."""
    failed = sum(failed_by_stage.values())
    cov = coverage(n_passages, failed + not_asked)
    if cov < min_coverage:
        stages = ", ".join(f"{n} in {stage}" for stage, n in failed_by_stage.items() if n)
        rest = f"; {not_asked} more not asked" if not_asked else ""
        raise LLMFailureGate(
            f"OpenIE: {failed} of {n_passages} passages failed in the LLM after retries ({stages}; first error: "
            f"{_one_line(first_error)}{rest}), coverage {cov:.1%} below openie.min_coverage={min_coverage:g}; "
            f"the {n_passages - failed - not_asked} extracted are kept in {source}: rerun to retry them "
            "(or set openie.min_coverage=0 to index without them)",
            stage="openie", failed=failed, total=n_passages, first_error=first_error,
        )
    return cov


def check_qa_failures(failed: int, n_questions: int, first_error: str, max_failure_rate: float, saved: str) -> None:
    """More than `qa.max_failure_rate` of the reader calls failed (after retries)."""
    rate = 0.0 if n_questions == 0 else failed / n_questions
    if rate > max_failure_rate:
        raise LLMFailureGate(
            f"QA: {failed} of {n_questions} reader calls ({rate:.1%}) failed in the LLM after retries (first error: "
            f"{_one_line(first_error)}), above qa.max_failure_rate={max_failure_rate:g}; the answers so far are saved "
            f"in {saved}: rerun to retry them (a failed call is not scored as a wrong answer)",
            stage="qa", failed=failed, total=n_questions, first_error=first_error,
        )


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_openie_coverage(source: str, n_passages: int, missing: Sequence[str], min_coverage: float) -> float:
    """Coverage of the corpus by an OpenIE file; GateError when below `min_coverage`."""
    n_missing = len(missing)
    coverage_ = coverage(n_passages, n_missing)
    if coverage_ < min_coverage:
        first = missing[0][:80] if missing else ""
        raise GateError(
            f"{source}: the OpenIE file covers {coverage_:.1%} of the corpus ({n_passages - n_missing} of "
            f"{n_passages} passages; first unmatched passage: {first!r}), below openie.min_coverage={min_coverage:g}; "
            "is it the extraction of another corpus? (set openie.min_coverage=0 to index anyway)"
        )
    return coverage_


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
