"""Text encoders. Each returns L2-normalised float32 rows.

Adding an encoder = one config file in configs/embedding/ and, if it needs its own
loading code, one small class here registered in `hipporag2.registry.ENCODERS`.
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
    """Base: subclasses implement `_encode` on a batch of already-formatted texts."""

    def __init__(self, cfg: EmbeddingConfig):
        self.cfg = cfg

    @property
    def fingerprint(self) -> str:
        """Identity of the vectors this encoder produces (the embedding cache key)."""
        c = self.cfg
        ident = {"backend": c.backend, "model": c.model, "max_length": c.max_length, "dtype": c.dtype}
        return c.name + "-" + hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]

    def format_query(self, text: str, instruction: Optional[str]) -> str:
        if instruction and self.cfg.query_format:
            return self.cfg.query_format.format(instruction=instruction) + text
        return text

    def encode(self, texts: Sequence[str], instruction: Optional[str] = None) -> np.ndarray:
        texts = [self.format_query(t, instruction) for t in texts]
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return l2_normalise(self._encode(list(texts), instruction))

    def _encode(self, texts: List[str], instruction: Optional[str]) -> np.ndarray:
        raise NotImplementedError


class SentenceTransformerEncoder(Encoder):
    def __init__(self, cfg: EmbeddingConfig):
        super().__init__(cfg)
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(cfg.model)
        if os.path.isdir(path):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.model = SentenceTransformer(path, device=cfg.device, trust_remote_code=cfg.trust_remote_code)
        self.model.max_seq_length = cfg.max_length

    def _encode(self, texts, instruction):
        return self.model.encode(
            texts, batch_size=self.cfg.batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )


class NVEmbedV2Encoder(Encoder):
    """nvidia/NV-Embed-v2 through its own remote code; the instruction is passed to
    `model.encode(..., instruction=...)` in the `Instruct: ...\\nQuery: ` format (SPEC §3)."""

    def __init__(self, cfg: EmbeddingConfig):
        super().__init__(cfg)
        import torch
        from transformers import AutoModel

        # "auto": the dtype the checkpoint's config declares, which is how the reference
        # loads NV-Embed-v2 (torch_dtype="auto").
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}[cfg.dtype]
        self.model = AutoModel.from_pretrained(
            resolve_model_path(cfg.model), trust_remote_code=True, torch_dtype=dtype
        ).to(cfg.device)
        self.model.eval()

    def format_query(self, text, instruction):
        return text  # the instruction travels separately, see _encode

    def _encode(self, texts, instruction):
        import torch

        prefix = self.cfg.query_format.format(instruction=instruction) if instruction else ""
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.cfg.batch_size):
                batch = texts[i : i + self.cfg.batch_size]
                emb = self.model.encode(batch, instruction=prefix, max_length=self.cfg.max_length)
                out.append(emb.float().cpu().numpy())
        return np.concatenate(out)


class GritLMEncoder(Encoder):
    """GritLM-7B through the `gritlm` package (embedding mode, its own prompt markers)."""

    def __init__(self, cfg: EmbeddingConfig):
        super().__init__(cfg)
        try:
            from gritlm import GritLM
        except ImportError as e:
            raise ImportError("embedding.backend=gritlm needs the `gritlm` package (pip install gritlm)") from e
        self.model = GritLM(resolve_model_path(cfg.model), torch_dtype="auto", mode="embedding")

    def format_query(self, text, instruction):
        return text

    def _encode(self, texts, instruction):
        marker = self.cfg.query_format.format(instruction=instruction) if instruction else "<|embed|>\n"
        return np.asarray(
            self.model.encode(texts, instruction=marker, batch_size=self.cfg.batch_size, max_length=self.cfg.max_length)
        )


def build_encoder(cfg: EmbeddingConfig) -> Encoder:
    from hipporag2.registry import ENCODERS

    return ENCODERS.load(cfg.backend)(cfg)
