"""What the baseline systems share: Table 12's counters of a run, the LLM bill of one
indexing (from the run's `llm.usage()` before and after it), and the run's embedding
store as the loopback endpoint's encoder."""
from __future__ import annotations

import resource
from typing import Any, Dict, Mapping


def table12(in_tokens, out_tokens, index_s, s_per_query) -> Dict[str, Any]:
    """Table 12's counters: LLM tokens and time of indexing (a fresh build's, also when
    the index came from the cache), seconds per query (retrieval + reading), and the
    peak resident memory of this process (which also indexed, when it did)."""
    return {
        "indexing_llm_input_tokens": in_tokens,
        "indexing_llm_output_tokens": out_tokens,
        "indexing_s": index_s,
        "seconds_per_query": round(s_per_query, 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }


def indexing_bill(before: Mapping[str, int], after: Mapping[str, int]) -> Dict[str, int]:
    """One stage's usage between two `llm.usage()[stage]` snapshots: what a build from
    nothing costs (tokens of the calls answered by the model or by the response cache)
    and how many requests it made."""
    def delta(k: str) -> int:
        return int(after.get(k, 0)) - int(before.get(k, 0))

    return {
        "llm_input_tokens": delta("input_tokens") + delta("cached_input_tokens"),
        "llm_output_tokens": delta("output_tokens") + delta("cached_output_tokens"),
        "llm_calls": delta("requests"),
    }


class StoreEncoder:
    """The run's embedding store as the endpoint's encoder: a system's texts are embedded
    once and cached by content like ours (a resumed build re-embeds nothing)."""

    def __init__(self, store, desc: str):
        self.store, self.desc = store, desc

    def encode(self, texts, instruction=None):
        return self.store.embed(list(texts), instruction=instruction, desc=self.desc, progress=False)
