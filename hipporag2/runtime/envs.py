"""The separate Python environments some components run in (`.venv-encoders`,
`.venv-lightrag`, `.venv-graphrag`): one rule for where a setting like `embedding.env`
points, so every component finds its environment the same way."""
from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def env_dir(cfg) -> Path:
    """`cfg.env`: absolute, or relative to the working directory if it exists there, else
    to the project root (so a run started from another folder still finds `make`'s build)."""
    p = Path(cfg.env).expanduser()
    if p.is_absolute():
        return p
    here = Path.cwd() / p
    return here if here.exists() else PROJECT_ROOT / p


def env_python(cfg) -> Path:
    return env_dir(cfg) / "bin" / "python"
