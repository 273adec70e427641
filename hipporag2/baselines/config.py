"""Settings of the baseline systems (the `raptor:`, `lightrag:` and `graphrag:` sections of the config).

Kept apart from `hipporag2.config` so the baselines add fields without reshaping it;
each dataclass is one field of `Config`, and the cache key of a baseline's index is the
hash of its own dataclass (plus corpus, encoder and LLM).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


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


@dataclass
class GraphRAGConfig:
    # The environment GraphRAG runs in (`make setup-graphrag`): a path, relative to the
    # working directory or absolute. GraphRAG pins litellm, pandas and pydantic exactly
    # and patches asyncio on import, so it never shares a process with us.
    env: str = ".venv-graphrag"
    # The version the settings below are written for (Makefile pins it); a different
    # one in `env` stops the run before any work.
    version: str = "3.3.0"
    # Table 14 of the paper (indexing).
    chunk_size: int = 1200
    chunk_overlap: int = 100
    community_report_max_length: int = 2000
    community_report_max_input_length: int = 8000
    max_cluster_size: int = 10
    # GraphRAG's other indexing defaults, kept as its settings name them.
    # Tokenizer of chunking and token budgets: cl100k_base as in the GraphRAG of the
    # paper's time (3.x's own default is o200k_base); either is read from a bundled copy.
    encoding_model: str = "cl100k_base"
    max_gleanings: int = 1
    entity_types: List[str] = field(default_factory=lambda: ["organization", "person", "geo", "event"])
    summarize_max_length: int = 500
    # Table 14 (query): local search, a short-phrase response, the top 60 entities.
    query_mode: str = "local"
    response_type: str = "short phrase"
    top_k_entities: int = 60
    top_k_relationships: int = 10
    max_context_tokens: int = 12000
    community_level: int = 2
    # Most completion tokens of any GraphRAG call (null: GraphRAG's own requests; a
    # CPU test sets a small limit).
    max_new_tokens: Optional[int] = None
    # GraphRAG's parallel LLM requests (the loopback endpoint batches them).
    concurrent_requests: int = 25
    # Most seconds a GraphRAG subprocess (indexing, or one batch of queries) may run.
    timeout_s: float = 86400.0


GRAPHRAG_QUERY_MODES: List[str] = ["local"]
GRAPHRAG_ENCODINGS: List[str] = ["cl100k_base", "o200k_base"]


def check_graphrag(cfg: GraphRAGConfig) -> List[str]:
    problems = []
    if cfg.query_mode not in GRAPHRAG_QUERY_MODES:
        problems.append(f"graphrag.query_mode={cfg.query_mode!r} must be one of {GRAPHRAG_QUERY_MODES} (the paper's Table 14)")
    if cfg.encoding_model not in GRAPHRAG_ENCODINGS:
        problems.append(f"graphrag.encoding_model={cfg.encoding_model!r} must be one of {GRAPHRAG_ENCODINGS} (bundled offline)")
    for key in ("chunk_size", "community_report_max_length", "community_report_max_input_length", "max_cluster_size",
                "summarize_max_length", "top_k_entities", "top_k_relationships", "max_context_tokens", "concurrent_requests"):
        if getattr(cfg, key) < 1:
            problems.append(f"graphrag.{key}={getattr(cfg, key)} must be >= 1")
    if not 0 <= cfg.chunk_overlap < cfg.chunk_size:
        problems.append(f"graphrag.chunk_overlap={cfg.chunk_overlap} must be in [0, chunk_size)")
    if cfg.max_gleanings < 0 or cfg.community_level < 0:
        problems.append("graphrag.max_gleanings and graphrag.community_level must be >= 0")
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        problems.append(f"graphrag.max_new_tokens={cfg.max_new_tokens} must be >= 1 or null")
    if not cfg.entity_types:
        problems.append("graphrag.entity_types must not be empty")
    return problems


@dataclass
class LightRAGConfig:
    """LightRAG (`retrieval=lightrag`): the `lightrag-hku` package at `version`, in its
    own environment `env` (`make setup-lightrag`). Defaults are the paper's Table 14
    and, where LightRAG 1.5 added behaviour the paper's early-2025 version did not have,
    that behaviour off or set to the old one (docs/quirks.md, "LightRAG")."""

    # The environment and the version its settings were checked against.
    env: str = ".venv-lightrag"
    version: str = "1.5.7"
    # tiktoken's encoding files (LightRAG counts tokens with tiktoken); null: the copy
    # bundled in litellm's wheel (a dependency of the main environment). Nothing is downloaded.
    tiktoken_cache_dir: Optional[str] = None
    tiktoken_model: str = "gpt-4o-mini"
    # ---- Table 14 ----
    mode: str = "local"
    response_type: str = "Short phrase"
    top_k: int = 60
    chunk_token_size: int = 1200
    chunk_overlap_token_size: int = 100
    # An entity's or relation's merged descriptions are summarised by the LLM past this
    # many tokens.
    summary_max_tokens: int = 500
    # ---- the paper's version, where 1.5 changed it ----
    # Gleaning rounds after the first extraction of a chunk (LightRAG's default, then and now).
    max_gleaning: int = 1
    # 1.5 also summarises once a name has this many descriptions (its default 8); the
    # paper's version did not: a count no merge reaches.
    force_llm_summary_on_merge: int = 1000000
    # How the chunks of the retrieved entities are chosen: WEIGHT (by how many of them
    # share a chunk, as before) or VECTOR (1.5's default, by similarity to the query).
    kg_chunk_pick_method: str = "WEIGHT"
    # Most chunks in the context after merging (1.5's default 20); 0: no count limit,
    # only the token budget, as before.
    chunk_top_k: int = 0
    # Token budgets of the query context: entities, relations, and all (the chunks get
    # what is left); the paper's version had 4,000 each for entities, relations and chunks.
    max_entity_tokens: int = 4000
    max_relation_tokens: int = 4000
    max_total_tokens: int = 12000
    cosine_threshold: float = 0.2
    language: str = "English"
    # ---- how it is run (no effect on what is computed) ----
    # Concurrent LLM calls LightRAG makes (the endpoint batches them) and documents
    # processed at once.
    llm_max_async: int = 16
    max_parallel_insert: int = 16
    embedding_max_async: int = 8
    embedding_batch_num: int = 32
    # Per-call timeout of LightRAG's LLM and embedding calls (its default 240 s is
    # short for a busy batching backend).
    llm_timeout_s: int = 3600
    # Completion-token limits of indexing calls (extraction, summaries) and of query
    # calls (keywords, answer); null: llm.max_new_tokens.
    max_new_tokens: Optional[int] = None
    answer_max_new_tokens: Optional[int] = None
    # ---- small models (only with llm.constrained_decoding=true) ----
    # Extraction replies are decoded under a grammar of LightRAG's record format with at
    # most this many entity rows (and as many relation rows), each text field at most
    # grammar_text_chars characters; query keywords under a JSON schema of at most
    # keyword_max_items per list.
    grammar_max_records: int = 4
    grammar_text_chars: int = 100
    keyword_max_items: int = 6


LIGHTRAG_MODES: List[str] = ["local", "global", "hybrid", "naive", "mix"]
LIGHTRAG_CHUNK_PICK: List[str] = ["WEIGHT", "VECTOR"]


def check_lightrag(cfg: LightRAGConfig) -> List[str]:
    problems = []
    if cfg.mode not in LIGHTRAG_MODES:
        problems.append(f"lightrag.mode={cfg.mode!r} must be one of {LIGHTRAG_MODES}")
    if cfg.kg_chunk_pick_method not in LIGHTRAG_CHUNK_PICK:
        problems.append(f"lightrag.kg_chunk_pick_method={cfg.kg_chunk_pick_method!r} must be one of {LIGHTRAG_CHUNK_PICK}")
    for key in ("top_k", "chunk_token_size", "summary_max_tokens", "force_llm_summary_on_merge", "max_entity_tokens",
                "max_relation_tokens", "max_total_tokens", "llm_max_async", "max_parallel_insert", "embedding_max_async",
                "embedding_batch_num", "llm_timeout_s", "grammar_max_records", "grammar_text_chars", "keyword_max_items"):
        if getattr(cfg, key) < 1:
            problems.append(f"lightrag.{key}={getattr(cfg, key)} must be >= 1")
    for key in ("chunk_overlap_token_size", "max_gleaning", "chunk_top_k"):
        if getattr(cfg, key) < 0:
            problems.append(f"lightrag.{key}={getattr(cfg, key)} must be >= 0")
    if cfg.chunk_overlap_token_size >= cfg.chunk_token_size:
        problems.append(f"lightrag.chunk_overlap_token_size={cfg.chunk_overlap_token_size} must be below "
                        f"lightrag.chunk_token_size={cfg.chunk_token_size}")
    for key in ("max_new_tokens", "answer_max_new_tokens"):
        v = getattr(cfg, key)
        if v is not None and v < 1:
            problems.append(f"lightrag.{key}={v} must be >= 1 (or null: llm.max_new_tokens)")
    return problems
