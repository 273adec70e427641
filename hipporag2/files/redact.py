"""Keep secrets out of logs and saved files.

API keys are read only from the environment (`llm.api_key_env` names the variable;
the config never holds the key). What could still carry a secret into a saved file
or a log line, and is masked here:
- the value of any environment variable that holds a credential: the configured
  `api_key_env`, a fixed list of well-known names, and any variable whose name ends in
  `_API_KEY`, `_TOKEN`, `_SECRET`, `_PASSWORD` or `_ACCESS_KEY`;
- token-shaped strings: `sk-...` (OpenAI-style), `hf_...` (Hugging Face), `Bearer ...`;
- credentials inside URLs: `https://user:pass@host` -> `https://***@host`, and the
  value of query parameters such as `?api_key=...`, `&token=...`, `&key=...`.

`install_log_redaction()` puts a `RedactingFilter` on every handler of the root and
`hipporag2` loggers (filters must sit on handlers: a logger's own filters do not see
records propagated from child loggers). `redact_obj` masks every string in a JSON-like
object (used for metrics.json); `redact_hydra_dir` rewrites Hydra's saved
`.hydra/*.yaml` files, and `redact_file` the sweep folder's `multirun.yaml` (written
by Hydra before any job starts, so each job masks it again; the rewrite is atomic
and idempotent).
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, List, Optional

MASK = "***"

KNOWN_KEY_VARS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "TOGETHER_API_KEY",
    "GROQ_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACEHUB_API_TOKEN",
    "WANDB_API_KEY",
    "VLLM_API_KEY",
)
_KEYLIKE_NAME = re.compile(r"(_API_KEY|_TOKEN|_SECRET|_PASSWORD|_ACCESS_KEY|^API_KEY)$", re.IGNORECASE)
_MIN_SECRET_LEN = 6  # shorter values ("1", "true") would mask ordinary text

_TOKEN_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"(?i)(\bBearer\s+)[A-Za-z0-9._~+/=\-]{6,}"),
]
# scheme://user:password@host or scheme://token@host
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"]+@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:api[_-]?key|apikey|key|token|access[_-]?token|auth|secret|password|passwd|sig|signature)=)[^&#\s'\"]+"
)

_extra_vars: List[str] = []


def register_key_env(name: Optional[str]) -> None:
    """Also mask the value of this environment variable (e.g. `llm.api_key_env`)."""
    if name and name not in _extra_vars:
        _extra_vars.append(name)


def _secret_values() -> List[str]:
    names = set(KNOWN_KEY_VARS) | set(_extra_vars)
    names |= {k for k in os.environ if _KEYLIKE_NAME.search(k)}
    values = {os.environ.get(n, "") for n in names}
    # Longest first, so a key that contains another is masked whole.
    return sorted((v for v in values if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def redact(text: str) -> str:
    if not text:
        return text
    for value in _secret_values():
        if value in text:
            text = text.replace(value, MASK)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)
    for pat in _TOKEN_PATTERNS:
        if pat.groups:
            text = pat.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pat.sub(MASK, text)
    return text


def redact_obj(obj: Any) -> Any:
    """A copy of a JSON-like object with every string (keys included) redacted."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact(k) if isinstance(k, str) else k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


def url_has_credentials(url: Optional[str]) -> bool:
    return bool(url) and redact(url) != url


class RedactingFilter(logging.Filter):
    """Masks secrets in the formatted message and in a formatted traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def _handlers(loggers: Iterable[logging.Logger]) -> List[logging.Handler]:
    out: List[logging.Handler] = []
    for lg in loggers:
        for h in lg.handlers:
            if h not in out:
                out.append(h)
    return out


def install_log_redaction(extra_env: Optional[str] = None) -> int:
    """Add the filter to every handler of the root and `hipporag2` loggers (idempotent).
    Returns how many handlers got it."""
    register_key_env(extra_env)
    n = 0
    for h in _handlers([logging.getLogger(), logging.getLogger("hipporag2")]):
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
            n += 1
    return n


def redact_file(path: Path | str) -> bool:
    """Rewrite one text file with secrets masked (atomically); True if it changed."""
    from hipporag2.files import atomicio

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    clean = redact(text)
    if clean == text:
        return False
    atomicio.write_text(path, clean)
    return True


def redact_hydra_dir(run_dir: Path | str) -> List[str]:
    """Rewrite `.hydra/*.yaml` in a run directory with secrets masked; returns the files changed."""
    hydra_dir = Path(run_dir) / ".hydra"
    if not hydra_dir.is_dir():
        return []
    return [str(f) for f in sorted(hydra_dir.glob("*.yaml")) if redact_file(f)]
