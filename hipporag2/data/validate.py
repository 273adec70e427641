"""Checks shared by every reader of an input file.

Everything a run reads from disk goes through these helpers, so a malformed file stops
the run with a `DataError` naming the file, the record (index or id), the field and what
was expected -- never with a traceback from deep inside a later stage.

Limits (documented in docs/reliability.md):
- a single string field (passage title/text, question, answer, triple element, ...)
  may hold at most `max_field_bytes()` bytes of UTF-8 (default 1 MB, environment
  variable `HIPPORAG2_MAX_FIELD_BYTES` to change it); a longer one is an error, never
  silently truncated, because the passage string is the identity of a passage;
- strings must be valid Unicode (a JSON escape of a lone surrogate such as "\\ud800"
  parses in Python but cannot be hashed or embedded);
- JSON nesting deeper than Python's recursion limit is an error.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

from hipporag2.data.errors import DataError

DEFAULT_MAX_FIELD_BYTES = 1_000_000


def max_field_bytes() -> int:
    raw = os.environ.get("HIPPORAG2_MAX_FIELD_BYTES")
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise DataError("$HIPPORAG2_MAX_FIELD_BYTES", f"expected an integer, got {raw!r}") from None
        if value < 1:
            raise DataError("$HIPPORAG2_MAX_FIELD_BYTES", f"must be >= 1, got {value}")
        return value
    return DEFAULT_MAX_FIELD_BYTES


def read_json(path: Path | str) -> Any:
    """Parse a JSON input file; every failure is a DataError naming the file."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found")
    if not path.is_file():
        raise DataError(path, "not a regular file (a folder?)")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(path, f"not valid UTF-8 (byte offset {e.start})") from None
    if text.startswith("\ufeff"):  # a UTF-8 byte-order mark, as some editors write
        text = text[1:]
    if not text.strip():
        raise DataError(path, "the file is empty (expected JSON)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise DataError(path, "not usable JSON: nested too deeply") from None


def type_name(value: Any) -> str:
    """JSON's name for a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_text(path, record, field: Optional[str], value: str, limit: Optional[int] = None) -> str:
    """A parsed string: valid Unicode and within the size limit."""
    limit = max_field_bytes() if limit is None else limit
    # Cheap pre-check: a str of n code points has at least n UTF-8 bytes.
    if len(value) > limit:
        raise DataError(path, f"string of {len(value):,} characters exceeds the limit of {limit:,} bytes (HIPPORAG2_MAX_FIELD_BYTES)", record, field)
    if value.isascii():  # (a flag of the str, not a scan) one byte a character, no surrogates: checked
        return value
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise DataError(path, f"invalid Unicode: lone surrogate {value[e.start]!r} at character {e.start}", record, field) from None
    if n > limit:
        raise DataError(path, f"string of {n:,} bytes exceeds the limit of {limit:,} bytes (HIPPORAG2_MAX_FIELD_BYTES)", record, field)
    return value


def require_str(path, record, field: Optional[str], value: Any, what: str = "a string") -> str:
    if not isinstance(value, str):
        raise DataError(path, f"expected {what}, got {type_name(value)}", record, field)
    return check_text(path, record, field, value)


def require_list(path, record, field: Optional[str], value: Any, what: str = "a list") -> list:
    if not isinstance(value, list):
        raise DataError(path, f"expected {what}, got {type_name(value)}", record, field)
    return value


def require_dict(path, record, field: Optional[str], value: Any, what: str = "an object") -> dict:
    if not isinstance(value, dict):
        raise DataError(path, f"expected {what}, got {type_name(value)}", record, field)
    return value


def require_bool(path, record, field: Optional[str], value: Any) -> bool:
    """true/false (0/1 accepted, as some converted files write them)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise DataError(path, f"expected true or false, got {type_name(value)} {value!r}"[:200], record, field)


# ---- DSPy filter program ------------------------------------------------------------

_DEMO_FIELDS = ("question", "fact_before_filter", "fact_after_filter")


def find_predictor(data: Any) -> tuple[Optional[Dict], str]:
    """The predictor object of a saved DSPy program and its location (as field path),
    or (None, ""); the filter reads its program through this too (filter_program.py)."""
    if not isinstance(data, dict):
        return None, ""
    if isinstance(data.get("prog"), dict):
        return data["prog"], "prog"
    if any(k in data for k in ("demos", "signature", "system")):
        return data, ""
    # A DSPy state save names predictors by attribute path (e.g. "prog.predict").
    for key, value in data.items():
        if key != "metadata" and isinstance(value, dict) and ("demos" in value or "signature" in value):
            return value, key
    return None, ""


def validate_filter_program(path: Path | str) -> Dict[str, Any]:
    """Read and check a saved DSPy filter program (SPEC §6); return the parsed JSON.

    Accepted layouts: `{"prog": {...predictor...}, "metadata": {...}}`, the predictor
    object itself, or a DSPy state save that names the predictor by attribute path.
    A predictor holds `demos` (a list of objects; those with all of `question` (string),
    `fact_before_filter` and `fact_after_filter` (a JSON string `{"fact": [[s, p, o], ...]}`
    or that value already parsed) are used, others skipped), and `system` (string) and/or `signature`
    (`{"instructions": string, "fields": [...]}`); at least one of a non-empty system
    message or instructions must be present.
    """
    data = read_json(path)
    require_dict(path, None, None, data, "an object holding a saved DSPy program")
    if "prog" in data:
        require_dict(path, None, "prog", data["prog"])
    pred, where = find_predictor(data)
    if pred is None:
        raise DataError(path, "expected an object with 'prog' (or a predictor with 'demos'/'signature'/'system')")
    prefix = f"{where}." if where else ""
    demos = pred.get("demos")
    if demos is not None:
        require_list(path, None, prefix + "demos", demos)
        for i, demo in enumerate(demos):
            loc = f"{prefix}demos[{i}]"
            require_dict(path, None, loc, demo)
            if not all(name in demo for name in _DEMO_FIELDS):
                # DSPy saves plain training examples beside augmented demos; a demo
                # without all three fields is skipped by the filter, not an error.
                continue
            require_str(path, None, f"{loc}.question", demo["question"])
            for name in _DEMO_FIELDS[1:]:
                value = demo[name]
                if isinstance(value, str):
                    check_text(path, None, f"{loc}.{name}", value)
                elif not isinstance(value, (dict, list)):
                    raise DataError(path, f"expected a JSON string of facts or a facts object, got {type_name(value)}", None, f"{loc}.{name}")
    system = pred.get("system")
    if system is not None:
        require_str(path, None, prefix + "system", system)
    instructions = ""
    sig = pred.get("signature")
    if sig is not None:
        require_dict(path, None, prefix + "signature", sig)
        if sig.get("instructions") is not None:
            instructions = require_str(path, None, prefix + "signature.instructions", sig["instructions"])
        if sig.get("fields") is not None:
            for i, f in enumerate(require_list(path, None, prefix + "signature.fields", sig["fields"])):
                require_dict(path, None, f"{prefix}signature.fields[{i}]", f)
    elif pred.get("instructions") is not None:
        instructions = require_str(path, None, prefix + "instructions", pred["instructions"])
    if not (isinstance(system, str) and system.strip()) and not instructions.strip():
        raise DataError(path, "the program has neither a system message nor signature.instructions", None, prefix + "system")
    return data
