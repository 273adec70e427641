"""Text encoders. Each returns L2-normalised float32 rows.

Adding an encoder = one config file in configs/embedding/ and, if it needs its own
loading code, a branch in `model_worker` (the one place that loads and calls model
code, in this process or in a worker of another environment) and one small class
here registered in `hipporag2.registry.ENCODERS`. Where an encoder runs (here, a
worker, a server) and what it is given: docs/encoders.md, `prompts`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from hipporag2.config import EmbeddingConfig
from hipporag2.embed import model_worker, prompts
from hipporag2.embed.envcheck import check_in_process

log = logging.getLogger(__name__)


def resolve_model_path(model: str) -> str:
    """`pkg:NAME` points at model weights shipped inside an installed Python package."""
    if not model.startswith("pkg:"):
        return model
    name = model[4:]
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"embedding.model={model!r}: the Python package {name!r} is not installed "
            f"(pip install {name.replace('_', '-')})"
        )
    root = Path(list(spec.submodule_search_locations)[0])
    for candidate in (root / "model", root):
        if (candidate / "config.json").is_file() or (candidate / "modules.json").is_file():
            return str(candidate)
    raise FileNotFoundError(f"no model folder (config.json) inside package {name!r} at {root}")


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


class Encoder:
    """Base: subclasses implement `_encode(texts, instruction)`, putting the prefix that
    `hipporag2.embed.prompts.prefix` gives where their model expects it."""

    def __init__(self, cfg: EmbeddingConfig):
        self.cfg = cfg

    @property
    def fingerprint(self) -> str:
        """Identity of the vectors this encoder produces (the embedding cache key)."""
        c = self.cfg
        ident = {"backend": c.backend, "model": c.model, "max_length": c.max_length, "dtype": c.dtype}
        # Only settings that change vectors and differ from the old defaults join the
        # key, so caches written before these settings existed stay valid.
        if c.passage_format:
            ident["passage_format"] = c.passage_format
        if c.runner != "in_process" and c.backend != "openai_compatible":
            ident["runner"] = c.runner  # another environment: other library versions
        return c.name + "-" + hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]

    def encode(self, texts: Sequence[str], instruction: Optional[str] = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return l2_normalise(self._encode(list(texts), instruction))

    def _encode(self, texts: List[str], instruction: Optional[str]) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the encoder holds (a worker process, connections)."""


def model_spec(cfg: EmbeddingConfig) -> dict:
    """What `model_worker.load_model` needs, in this process or in a worker."""
    return {"backend": cfg.backend, "model": resolve_model_path(cfg.model), "device": cfg.device, "dtype": cfg.dtype,
            "max_length": cfg.max_length, "batch_size": cfg.batch_size, "trust_remote_code": cfg.trust_remote_code,
            "vetted_transformers": [str(v) for v in cfg.vetted_transformers]}


class InProcessEncoder(Encoder):
    """The model of `cfg` loaded in this process by `model_worker` (the same code a
    worker process runs), after the remote-code check of `worker.check_in_process`."""

    def __init__(self, cfg: EmbeddingConfig):
        super().__init__(cfg)
        check_in_process(cfg)
        self.spec = model_spec(cfg)
        if os.path.isdir(self.spec["model"]):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.model = model_worker.load_model(self.spec)

    def _encode(self, texts, instruction):
        return model_worker.encode(self.model, self.spec, prompts.prefix(self.cfg, instruction), texts)


class SentenceTransformerEncoder(InProcessEncoder):
    """Any sentence-transformers model (MiniLM, Contriever, GTR; GTE-Qwen2 in a worker)."""


class NVEmbedV2Encoder(InProcessEncoder):
    """nvidia/NV-Embed-v2 through its own remote code; the instruction is passed to
    `model.encode(..., instruction=...)` in the `Instruct: ...\\nQuery: ` format (SPEC §3).
    Its preset runs it in a worker (transformers 4.45.2, docs/encoders.md)."""


class GritLMEncoder(InProcessEncoder):
    """GritLM-7B through the `gritlm` package (embedding mode, its own prompt markers)."""


def build_encoder(cfg: EmbeddingConfig) -> Encoder:
    from hipporag2.registry import ENCODER_RUNNERS, ENCODERS

    if cfg.runner == "worker" and cfg.backend != "openai_compatible":
        return ENCODER_RUNNERS.load("worker")(cfg)
    return ENCODERS.load(cfg.backend)(cfg)
