"""Where LightRAG runs: the environment `lightrag.env` (`make setup-lightrag`), the
tiktoken files it reads offline, and the one-line check that both are there before any
work (the CLI's start-up checks, and when the retriever is built)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Dict

from hipporag2.errors import ConfigError
from hipporag2.runtime.envs import env_dir, env_python

DRIVER = Path(__file__).resolve().with_name("lightrag_driver.py")
SETUP_HINT = "make setup-lightrag"




def tiktoken_dir(cfg) -> Path:
    """The folder of tiktoken's encoding files: `lightrag.tiktoken_cache_dir`, or the
    copy shipped inside litellm's wheel (found without importing litellm)."""
    if cfg.tiktoken_cache_dir:
        return Path(cfg.tiktoken_cache_dir).expanduser()
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.origin:
        raise ConfigError("retrieval=lightrag needs tiktoken's encoding files: install litellm (the dspy extra, "
                          "`make setup`) or set lightrag.tiktoken_cache_dir to a folder holding them")
    return Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"


def driver_env(cfg) -> Dict[str, str]:
    """The driver's environment, built anew: LightRAG reads dozens of its settings from
    environment variables, so none of this process's may leak in; tiktoken reads its
    files from `tiktoken_dir` only; no model hub."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT") if k in os.environ}
    env.update({"TIKTOKEN_CACHE_DIR": str(tiktoken_dir(cfg)), "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0",
                "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "NO_PROXY": "127.0.0.1,localhost"})
    return env


def check_environment(cfg) -> Dict[str, object]:
    """Raise ConfigError in one line unless LightRAG can run: the environment exists, has
    `lightrag.version`, and loads its tokenizer offline. Returns the driver's `describe`
    (LightRAG's extraction format, version, tiktoken encoding)."""
    py = env_python(cfg)
    if not py.is_file():
        raise ConfigError(f"retrieval=lightrag runs in its own environment {env_dir(cfg)} (lightrag.env), "
                          f"which does not exist: run `{SETUP_HINT}`")
    tk = tiktoken_dir(cfg)
    try:
        proc = subprocess.run([str(py), str(DRIVER), "describe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=300, env=driver_env(cfg), cwd=str(env_dir(cfg)))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"retrieval=lightrag: {py} did not run ({exc}); rebuild it with `{SETUP_HINT}`") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"retrieval=lightrag: the environment {env_dir(cfg)} cannot run LightRAG offline "
                          f"(tiktoken files: {tk}): {last[-400:]}")
    described = json.loads(proc.stdout.strip().splitlines()[-1])
    if described.get("lightrag") != cfg.version:
        raise ConfigError(f"lightrag.version={cfg.version} but {env_dir(cfg)} has lightrag-hku "
                          f"{described.get('lightrag')}: run `{SETUP_HINT}` (the settings are checked against "
                          f"{cfg.version}; another version may change them)")
    return described
