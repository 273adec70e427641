"""Errors about input files that say where the problem is: file, record and field."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional


class DataError(ValueError):
    def __init__(self, path: Path | str, message: str, record: Optional[Any] = None, field: Optional[str] = None):
        where = str(path)
        if record is not None:
            where += f", record {record}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.record = record
        self.field = field
