"""vLLM offline engine: the backend for paper-scale runs (Llama-3.3-70B on GPUs).

HippoRAG 2 runs tens of thousands of OpenIE calls per corpus; vLLM's
continuous batching only pays off when it sees them all at once, so every
cache miss of a `generate` call goes to the engine in a single call.  Prompts
are rendered with the model's chat template and tokenized here (exactly what
`LLM.chat` does) so that a prompt longer than the context window fails alone,
instead of vLLM rejecting the whole batch.

The engine starts on the first cache miss, not when the backend is built: a
rerun whose answers are all in the response cache never pays the engine's
start-up (tens of seconds to minutes: weights, KV cache, compilation).  What
can be checked without the engine (vLLM importable, the model folder there)
is checked when the backend is built, so a bad setting stops a run at once
with one line instead of after OpenIE.  The engine's own output (its start-up
log, and everything its worker processes print later) goes to a log file that
is kept; a failed start is reported as one line naming the cause and that file.

vLLM is imported lazily: the rest of the package must work without it.
"""
from __future__ import annotations

import atexit
import gc
import json
import logging
import os
import re
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from hipporag2.errors import ConfigError
from hipporag2.llm.base import LLM, ChatResponse, Emit, Job
from hipporag2.llm.cache import ResponseCache
from hipporag2.llm.config import LLMConfig
from hipporag2.llm.resolve import resolve_model

log = logging.getLogger(__name__)

ENGINE_LOG = "vllm_engine.log"


class VLLMSetupError(ConfigError):
    """The engine cannot be used as configured: vLLM missing, no model, failed start.

    The message is one line a user can act on; being a ConfigError, the CLI prints it
    without a traceback and exits with status 2.
    """


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise VLLMSetupError(
            f"llm.backend=vllm: vLLM is not installed in {sys.prefix} ({exc}); on a GPU machine "
            "`pip install 'hipporag2[vllm]'`, on a CPU `make setup-vllm` and run .venv-vllm/bin/hipporag2 "
            "(or use llm=openai_compatible against a `vllm serve` endpoint)"
        ) from None
    return vllm


def _looks_like_path(model: str) -> bool:
    """Whether `model` names a local path rather than a hub id (`org/name`)."""
    return model.startswith(("/", ".", "~"))


def engine_model(cfg: LLMConfig) -> str:
    """What `vllm.LLM(model=...)` gets: a checked local folder/GGUF file, or a hub id.

    A missing local folder, or one without `config.json`, is reported here, before
    any engine starts, naming the path and the setting.
    """
    if not cfg.model:
        raise VLLMSetupError("llm.model is empty: name a Hugging Face id or a local model folder")
    if _looks_like_path(cfg.model) and not Path(cfg.model).expanduser().exists():
        raise VLLMSetupError(
            f"llm.model={cfg.model}: no such file or folder (vLLM loads a Hugging Face checkpoint "
            "folder, a .gguf file or a hub id)"
        )
    ref = resolve_model(cfg.model, cfg.gguf_file)
    if ref.local and ref.gguf_path is not None:
        if cfg.gguf_convert:
            # vLLM's GGUF kernels are GPU-only; the dequantized folder the transformers
            # backend writes (once, under model_cache_dir) runs anywhere.
            from hipporag2.llm.transformers_backend import materialize_gguf, model_cache_root

            return str(materialize_gguf(ref, model_cache_root(cfg)))
        return str(ref.gguf_path)  # vLLM loads a GGUF checkpoint from the file itself
    if ref.local and not (Path(ref.location) / "config.json").is_file():
        raise VLLMSetupError(
            f"llm.model={cfg.model}: {Path(ref.location) / 'config.json'} does not exist; "
            "the folder is not a Hugging Face checkpoint"
        )
    return ref.location


def engine_kwargs(cfg: LLMConfig) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for this config.

    The reference implementation's offline engine sets seed, dtype, prefix caching
    (on), CUDA graphs (on: `enforce_eager=False`), the GPU memory fraction and
    `max_model_len`; the `llama33_70b_vllm` preset holds its values.
    """
    kwargs: dict[str, Any] = {
        "model": engine_model(cfg),
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "dtype": cfg.dtype,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "seed": cfg.seed,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "enforce_eager": cfg.enforce_eager,
    }
    if cfg.tokenizer:
        kwargs["tokenizer"] = cfg.tokenizer
    if cfg.max_model_len:
        kwargs["max_model_len"] = cfg.max_model_len
    return kwargs


def structured_output_kwargs(json_schema: str | None, grammar: str | None = None) -> dict[str, Any]:
    """SamplingParams keyword for JSON-schema decoding, across vLLM versions.

    vLLM >= 0.10.2 takes `structured_outputs=StructuredOutputsParams(json=...)`
    (the old `guided_decoding` field was removed in 0.12); older releases
    take `guided_decoding=GuidedDecodingParams(json=...)`.
    Whitespace between JSON tokens is not allowed (`disable_any_whitespace`, where
    the release has it), as in the transformers backend's grammar: the model cannot
    spend its budget on newlines, and both backends decode under the same grammar.
    """
    import dataclasses

    try:
        from vllm.sampling_params import StructuredOutputsParams as Params
        field = "structured_outputs"
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams as Params
        field = "guided_decoding"
    if grammar is not None:
        return {field: Params(grammar=grammar)}
    kwargs: dict[str, Any] = {"json": json.loads(json_schema)}
    names = {f.name for f in dataclasses.fields(Params)} if dataclasses.is_dataclass(Params) else set()
    if "disable_any_whitespace" in names:
        kwargs["disable_any_whitespace"] = True
    return {field: Params(**kwargs)}


_ERROR_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Exit)):\s*(\S.*)$")
_PYDANTIC_TAIL = re.compile(r"\s*\[type=.*$")
_MAX_CAUSE = 400
# vLLM's own wrappers around a worker's failure: they point elsewhere for the cause.
_WRAPPER = re.compile(r"root cause|stack trace|initialization failed|Engine core .*failed", re.IGNORECASE)


def startup_failure_cause(log_text: str, exc: BaseException) -> str:
    """The most specific cause of a failed engine start, as one line.

    vLLM's engine runs in worker processes: the exception the caller sees is often
    a generic "Engine core initialization failed. See root cause above", while the
    real cause (out of memory, unreadable weights, an unsupported model, a bad
    argument) is an `SomethingError: ...` line a worker wrote to the log. The first
    such line that is not one of vLLM's wrappers is taken; else the exception itself.
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    own = lines[0] if lines else ""
    for line in log_text.splitlines():
        m = _ERROR_LINE.search(line.strip())
        if m and not _WRAPPER.search(m.group(2)) and not (own and own in m.group(2)):
            return f"{m.group(1)}: {m.group(2).strip()}"
    # Raised here, not in a worker: the exception's own lines (a pydantic error of
    # vLLM's config puts the reason on the second), without pydantic's reference
    # links and input dumps.
    kept = [_PYDANTIC_TAIL.sub("", ln) for ln in lines if not ln.startswith("For further information")]
    text = " ".join(ln for ln in kept if ln)
    if len(text) > _MAX_CAUSE:
        text = text[: _MAX_CAUSE - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout/stderr file descriptors (and so those of every process
    it starts meanwhile, such as vLLM's engine core) to `path`, appending."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


class VLLMBackend(LLM):
    def __init__(self, cfg: LLMConfig, cache: ResponseCache | None) -> None:
        super().__init__(cfg, cache)
        self._vllm = _import_vllm()
        self.model_id = cfg.model + (f"#{cfg.gguf_file}" if cfg.gguf_file else "")
        self.kwargs = engine_kwargs(cfg)
        self.engine: Any = None
        self.tokenizer: Any = None
        self.context_length = cfg.max_model_len or 0
        # What a run reports: engine starts (0 when the cache answered everything),
        # their time, and the size of every engine.generate call.
        self.engine_starts = 0
        self.engine_start_s: float | None = None
        self.generate_calls: list[int] = []

    # -- engine -------------------------------------------------------------
    @property
    def log_path(self) -> Path:
        return ((self.log_dir or Path.cwd()) / ENGINE_LOG).resolve()

    def start(self) -> Any:
        """Start the engine if it is not running (called on the first cache miss)."""
        if self.engine is not None:
            return self.engine
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting the vLLM engine for %s (its log: %s)", self.kwargs["model"], self.log_path)
        t0 = time.perf_counter()
        start_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        try:
            with output_to(self.log_path):
                engine = self._vllm.LLM(**self.kwargs)
        except Exception as exc:  # noqa: BLE001 - turned into one actionable line
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                f.seek(start_offset)
                text = f.read()
            cause = startup_failure_cause(text, exc)
            with open(self.log_path, "a", encoding="utf-8") as f:  # the whole story stays in the log
                f.write("\nhipporag2: the engine failed to start:\n" + traceback.format_exc())
            raise VLLMSetupError(
                f"the vLLM engine failed to start for llm.model={self.cfg.model}: {cause} "
                f"(full log: {self.log_path})"
            ) from exc
        self.engine = engine
        atexit.register(self.close)
        self.tokenizer = engine.get_tokenizer()
        self.context_length = self._engine_context() or self.cfg.max_model_len or 0
        self.engine_starts += 1
        self.engine_start_s = round(time.perf_counter() - t0, 1)
        log.info("vLLM engine up in %.1f s (max_model_len %s)", self.engine_start_s, self.context_length)
        return engine

    def _engine_context(self) -> int | None:
        for path in (("llm_engine", "model_config", "max_model_len"),
                     ("llm_engine", "vllm_config", "model_config", "max_model_len"),
                     ("model_config", "max_model_len")):
            obj: Any = self.engine
            try:
                for name in path:
                    obj = getattr(obj, name)
                return int(obj)
            except (AttributeError, TypeError, ValueError):
                continue
        return None

    # -- requests -----------------------------------------------------------
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
        if job.json_schema is not None or job.grammar is not None:
            kwargs.update(structured_output_kwargs(job.json_schema, job.grammar))
        return self._vllm.SamplingParams(**kwargs)

    def _complete(self, jobs: list[Job], emit: Emit, progress: bool) -> None:
        self.start()
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
        t0 = time.perf_counter()
        try:
            outputs = self.engine.generate(prompts, sampling_params=params, use_tqdm=progress)
        except Exception as exc:  # noqa: BLE001 - recorded per request, see on_failure
            message = f"{type(exc).__name__}: {exc}"
            for job in ready:
                emit(job, ChatResponse("", 0, 0, False, error=message))
            return
        self.generate_calls.append(len(ready))
        log.info("vLLM: %d prompts in one generate call, %.1f s", len(ready), time.perf_counter() - t0)
        for job, prompt, out in zip(ready, prompts, outputs):
            completion = out.outputs[0]
            emit(job, ChatResponse(
                text=completion.text,
                input_tokens=len(prompt["prompt_token_ids"]),
                output_tokens=len(completion.token_ids),
                cached=False,
            ))

    def engine_report(self) -> dict[str, Any]:
        """Engine facts for metrics.json: starts, start-up time, prompts per generate call."""
        return {"engine_starts": self.engine_starts, "engine_start_s": self.engine_start_s,
                "generate_calls": list(self.generate_calls), "engine_log": str(self.log_path)}

    def close(self) -> None:
        """Stop the engine's processes now.

        Needed, not tidy-up: at interpreter exit `multiprocessing` joins the engine's
        process before vLLM's own finalizer would stop it, and the run then never
        exits. `start` registers this method with `atexit` (run before that join) for
        callers that forget it.
        """
        engine, self.engine = self.engine, None
        atexit.unregister(self.close)
        if engine is None:
            return
        core = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            try:
                with output_to(self.log_path):
                    shutdown()
            except Exception as exc:  # noqa: BLE001 - stopping must not mask the run's result
                log.warning("vLLM engine shutdown: %s: %s", type(exc).__name__, exc)
        del engine
        gc.collect()
