"""Settings of the baseline systems (the `raptor:` and `lightrag:` config groups).

Kept apart from `hipporag2.config` so the baselines add fields without reshaping it;
each dataclass is one field of `Config`, and the cache key of a baseline's index is the
hash of its own dataclass (plus corpus, encoder and LLM).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List


@dataclass
class RaptorConfig:
    # Leaves: each passage cut at sentence ends into chunks of at most this many tokens
    # (words and punctuation marks; RAPTOR's own code counts cl100k tokens).
    leaf_tokens: int = 100
    # UMAP target dimension and GMM search: up to max_clusters components, chosen by BIC.
    umap_dim: int = 10
    max_clusters: int = 50
    # Soft membership: a node joins every cluster whose posterior is above this.
    membership_threshold: float = 0.1
    # A cluster whose texts hold more tokens than this is clustered again on its own.
    max_cluster_tokens: int = 3500
    # Most tree levels above the leaves; a level with too few nodes to cluster ends it.
    max_levels: int = 5
    # Completion-token limit of a summary call.
    summary_max_new_tokens: int = 150
    # Collapsed-tree retrieval: the reader gets the best nodes up to top_k and the token budget.
    context_top_k: int = 10
    context_tokens: int = 3500
    # How a retrieved summary counts in the passage ranking (recall@k): expand = the
    # passages beneath it, in order of their best leaf's score; skip = not at all.
    # Both rankings are scored in every run (metrics.json `raptor_recall`); this one is
    # the run's retrieval.jsonl and its `recall@k`.
    summary_passages: str = "expand"
    # UMAP and GMM seed (the tree must be the same on a rerun so cached summaries are hit).
    seed: int = 224


RAPTOR_SUMMARY_PASSAGES: List[str] = ["expand", "skip"]


def check_raptor(cfg: RaptorConfig) -> List[str]:
    problems = []
    if cfg.summary_passages not in RAPTOR_SUMMARY_PASSAGES:
        problems.append(f"raptor.summary_passages={cfg.summary_passages!r} must be one of {RAPTOR_SUMMARY_PASSAGES}")
    for key in ("leaf_tokens", "umap_dim", "max_clusters", "max_cluster_tokens", "summary_max_new_tokens",
                "context_top_k", "context_tokens"):
        if getattr(cfg, key) < 1:
            problems.append(f"raptor.{key}={getattr(cfg, key)} must be >= 1")
    if cfg.max_levels < 0:
        problems.append(f"raptor.max_levels={cfg.max_levels} must be >= 0")
    if not 0.0 < cfg.membership_threshold < 1.0:
        problems.append(f"raptor.membership_threshold={cfg.membership_threshold} must be in (0, 1)")
    return problems
