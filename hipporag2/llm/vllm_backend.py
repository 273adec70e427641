"""vLLM offline engine: the backend for paper-scale runs (Llama-3.3-70B on GPUs).

HippoRAG 2 runs tens of thousands of OpenIE calls per corpus; vLLM's
continuous batching only pays off when it sees them all at once, so every
cache miss of a `generate` call goes to the engine in a single call.  Prompts
are rendered with the model's chat template and tokenized here (exactly what
`LLM.chat` does) so that a prompt longer than the context window fails alone,
instead of vLLM rejecting the whole batch.

vLLM is imported lazily: the rest of the package must work without it.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from hipporag2.llm.base import LLM, ChatResponse, Emit, Job
from hipporag2.llm.cache import ResponseCache
from hipporag2.llm.config import LLMConfig
from hipporag2.llm.resolve import resolve_model

log = logging.getLogger(__name__)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "llm.backend=vllm needs vLLM and a CUDA GPU: `pip install 'hipporag2[vllm]'` "
            "(or use llm.backend=openai against a `vllm serve` endpoint)"
        ) from exc
    return vllm


def structured_output_kwargs(json_schema: str) -> dict[str, Any]:
    """SamplingParams keyword for JSON-schema decoding, across vLLM versions.

    vLLM >= 0.10.2 takes `structured_outputs=StructuredOutputsParams(json=...)`
    (the old `guided_decoding` field was removed in 0.12); older releases
    take `guided_decoding=GuidedDecodingParams(json=...)`.
    """
    schema = json.loads(json_schema)
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}
    return {"structured_outputs": StructuredOutputsParams(json=schema)}


class VLLMBackend(LLM):
    def __init__(self, cfg: LLMConfig, cache: ResponseCache | None) -> None:
        super().__init__(cfg, cache)
        vllm = _import_vllm()
        self.model_id = cfg.model + (f"#{cfg.gguf_file}" if cfg.gguf_file else "")
        ref = resolve_model(cfg.model, cfg.gguf_file)
        # vLLM loads a GGUF checkpoint from the file path itself.
        model = str(ref.gguf_path) if ref.gguf_path is not None and ref.local else ref.location
        kwargs: dict[str, Any] = {
            "model": model,
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "dtype": cfg.dtype,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "seed": cfg.seed,
        }
        if cfg.tokenizer:
            kwargs["tokenizer"] = cfg.tokenizer
        if cfg.max_model_len:
            kwargs["max_model_len"] = cfg.max_model_len
        self._vllm = vllm
        self.engine = vllm.LLM(**kwargs)
        self.tokenizer = self.engine.get_tokenizer()
        self.context_length = self._engine_context() or cfg.max_model_len or 0

    def _engine_context(self) -> int | None:
        for path in (("llm_engine", "model_config", "max_model_len"),
                     ("llm_engine", "vllm_config", "model_config", "max_model_len")):
            obj: Any = self.engine
            try:
                for name in path:
                    obj = getattr(obj, name)
                return int(obj)
            except (AttributeError, TypeError, ValueError):
                continue
        return None

    def _prompt_ids(self, job: Job) -> list[int]:
        chat = [{"role": role, "content": content} for role, content in job.messages]
        text = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        # The template already holds the special tokens (BOS included).
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def sampling_params(self, job: Job) -> Any:
        kwargs: dict[str, Any] = {
            "temperature": self.cfg.temperature,
            "top_p": 1.0,
            "max_tokens": job.max_new_tokens,
        }
        if self.cfg.temperature > 0:
            kwargs["seed"] = self.cfg.seed
        if job.json_schema is not None:
            kwargs.update(structured_output_kwargs(job.json_schema))
        return self._vllm.SamplingParams(**kwargs)

    def _complete(self, jobs: list[Job], emit: Emit, progress: bool) -> None:
        prompts: list[dict[str, list[int]]] = []
        params: list[Any] = []
        ready: list[Job] = []
        for job in jobs:
            try:
                ids = self._prompt_ids(job)
            except Exception as exc:  # noqa: BLE001 - e.g. a template rejecting a role order
                emit(job, ChatResponse("", 0, 0, False, error=f"chat template: {exc}"))
                continue
            if self.context_length and len(ids) >= self.context_length:
                emit(job, ChatResponse("", len(ids), 0, False,
                                       error=f"prompt of {len(ids)} tokens does not fit "
                                             f"max_model_len={self.context_length}"))
                continue
            prompts.append({"prompt_token_ids": ids})
            params.append(self.sampling_params(job))
            ready.append(job)
        if not ready:
            return
        try:
            outputs = self.engine.generate(prompts, sampling_params=params, use_tqdm=progress)
        except Exception as exc:  # noqa: BLE001 - recorded per request, see on_failure
            message = f"{type(exc).__name__}: {exc}"
            for job in ready:
                emit(job, ChatResponse("", 0, 0, False, error=message))
            return
        for job, prompt, out in zip(ready, prompts, outputs):
            completion = out.outputs[0]
            emit(job, ChatResponse(
                text=completion.text,
                input_tokens=len(prompt["prompt_token_ids"]),
                output_tokens=len(completion.token_ids),
                cached=False,
            ))

    def close(self) -> None:
        self.engine = None
