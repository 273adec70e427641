"""The end of every benchmark script: its Markdown report printed, and written to `--out`."""
from __future__ import annotations

import os


def emit(lines: list[str], out: str | None) -> None:
    """Print the Markdown report, and write it to `out` when given (its folder made)."""
    report = "\n".join(lines)
    print(report)
    if out:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w") as f:
            f.write(report + "\n")
