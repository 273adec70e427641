"""Loading and calling an encoder model: the one place that touches the models' own code.

Two callers share these functions, so that a model is loaded and called the same way
wherever it runs:

- the in-process encoders of `hipporag2.embed.encoders` (MiniLM, GTR, Contriever:
  models whose code runs under the main environment's transformers);
- this file run as a script by ANOTHER Python (`.venv-encoders/bin/python
  .../model_worker.py`, see `hipporag2.embed.worker`): NV-Embed-v2, GTE-Qwen2 and
  GritLM ship remote code written for transformers 4.4x, which the main environment
  (transformers 5) cannot import. The harness talks to it over pipes and never
  imports that code itself.

So this module imports nothing but the standard library at import time, and nothing
from `hipporag2`: the worker environment holds torch, transformers and
sentence-transformers (and gritlm), not our package or its dependencies.

Protocol (one JSON object per line each way, on the worker's stdin and stdout):
  -> {"op": "load", "spec": {backend, model, device, dtype, max_length, batch_size,
      trust_remote_code, vetted_transformers}}
  <- {"ok": true, "versions": {...}}   or   {"ok": false, "error": "one line"}
  -> {"op": "encode", "prefix": "...", "texts": [...]}
  <- {"ok": true, "rows": n, "dim": d, "f32": base64 of n*d little-endian float32}
Everything the libraries print goes to stderr (the worker's log), never to the pipe.
"""
from __future__ import annotations

import base64
import json
import sys
from importlib import metadata
from typing import Any, Dict, List

# Distributions whose versions the harness checks and records.
DISTRIBUTIONS = ("torch", "transformers", "sentence-transformers", "gritlm")


def installed_versions() -> Dict[str, str]:
    out = {}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def remote_code_problem(spec: Dict[str, Any], transformers_version: str) -> str:
    """Why the model's remote code must not be loaded under this transformers, or ""."""
    if not spec.get("trust_remote_code"):
        return ""
    vetted = [str(v) for v in spec.get("vetted_transformers") or []]
    if transformers_version in vetted:
        return ""
    told = f"vetted: {', '.join(vetted)}" if vetted else "no version is vetted (embedding.vetted_transformers is empty)"
    return (f"{spec['model']} runs remote code, which is loaded only under a transformers version known to work "
            f"with it; this environment has transformers {transformers_version} ({told})")


def load_model(spec: Dict[str, Any]) -> Any:
    """The model object for a spec (see the protocol above); raises on a refusal."""
    import transformers

    problem = remote_code_problem(spec, transformers.__version__)
    if problem:
        raise RuntimeError(problem)
    backend, path = spec["backend"], spec["model"]
    if backend == "sentence_transformers":
        from sentence_transformers import SentenceTransformer

        kwargs: Dict[str, Any] = {}
        if spec.get("dtype") not in (None, "float32", "auto"):
            import torch

            kwargs["model_kwargs"] = {"torch_dtype": getattr(torch, spec["dtype"])}
        model = SentenceTransformer(path, device=spec["device"], trust_remote_code=bool(spec.get("trust_remote_code")),
                                    **kwargs)
        model.max_seq_length = int(spec["max_length"])
        return model
    if backend == "nv_embed_v2":
        import torch
        from transformers import AutoModel

        # "auto": the checkpoint's own dtype, as the reference loads NV-Embed-v2.
        dtype = "auto" if spec.get("dtype") in (None, "auto") else getattr(torch, spec["dtype"])
        model = AutoModel.from_pretrained(path, trust_remote_code=True, torch_dtype=dtype).to(spec["device"])
        model.eval()
        return model
    if backend == "gritlm":
        from gritlm import GritLM

        return GritLM(path, torch_dtype="auto", mode="embedding", device=spec["device"])
    raise ValueError(f"embedding.backend={backend!r} cannot be loaded by the model worker")


def encode(model: Any, spec: Dict[str, Any], prefix: str, texts: List[str]) -> Any:
    """Unnormalised float32 rows (numpy) for `texts`; `prefix` is the instruction text
    that `hipporag2.embed.prompts` chose. Sentence-transformers models receive it glued
    to each text; NV-Embed-v2 and GritLM take it as their `instruction` argument, which
    their own code prepends and leaves out of the pooling."""
    import numpy as np

    backend, batch, max_length = spec["backend"], int(spec["batch_size"]), int(spec["max_length"])
    if backend == "sentence_transformers":
        return np.asarray(model.encode([prefix + t for t in texts], batch_size=batch, convert_to_numpy=True,
                                       normalize_embeddings=True, show_progress_bar=False), dtype=np.float32)
    if backend == "nv_embed_v2":
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), batch):
                emb = model.encode(texts[i : i + batch], instruction=prefix, max_length=max_length)
                out.append(emb.float().cpu().numpy())
        return np.concatenate(out).astype(np.float32)
    if backend == "gritlm":
        return np.asarray(model.encode(texts, instruction=prefix, batch_size=batch, max_length=max_length),
                          dtype=np.float32)
    raise ValueError(f"embedding.backend={backend!r} cannot be called by the model worker")


def _reply(out, obj: Dict[str, Any]) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def serve(inp, out) -> None:
    """The request loop of a worker process (one model, loaded by the first request)."""
    model, spec = None, None
    for line in inp:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req["op"] == "load":
                spec = req["spec"]
                model = load_model(spec)
                _reply(out, {"ok": True, "versions": installed_versions()})
            elif req["op"] == "encode":
                if model is None:
                    raise RuntimeError("encode before load")
                import numpy as np

                rows = np.ascontiguousarray(encode(model, spec, req.get("prefix", ""), list(req["texts"])), dtype="<f4")
                _reply(out, {"ok": True, "rows": int(rows.shape[0]), "dim": int(rows.shape[1]),
                             "f32": base64.b64encode(rows.tobytes()).decode("ascii")})
            elif req["op"] == "versions":
                _reply(out, {"ok": True, "versions": installed_versions()})
            else:
                raise ValueError(f"unknown op {req['op']!r}")
        except Exception as exc:  # noqa: BLE001 - every failure goes back as one line
            import traceback

            traceback.print_exc(file=sys.stderr)
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())
            _reply(out, {"ok": False, "error": msg[:800]})


def main() -> None:
    # The pipe carries the protocol only: whatever the libraries print goes to stderr.
    protocol = sys.stdout
    sys.stdout = sys.stderr
    if len(sys.argv) > 1 and sys.argv[1] == "--versions":
        _reply(protocol, installed_versions())
        return
    serve(sys.stdin, protocol)


if __name__ == "__main__":
    main()
