"""Ctrl-C and `kill` (SIGINT / SIGTERM): one line, exit status 130 / 143, no traceback.

Why not the default: Python turns SIGINT into a KeyboardInterrupt whose traceback runs
through torch or Hydra (a hundred lines), and SIGTERM (Slurm's pre-emption, `kill`)
ends the process without unwinding, so `finally` blocks never run. Here both raise
`Interrupted` in the main thread; it unwinds like any exception (files being written
atomically are abandoned, locks released), each stage it passes through names
itself on it (`Interrupted.stage`, innermost first), and the command's entry point
prints the one line. Every long stage checkpoints often (docs/reliability.md), so
rerunning the same command resumes where the interrupt struck.
"""
from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from typing import Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A BaseException, like KeyboardInterrupt: `except Exception` handlers that turn
    errors into recorded failures (LLM calls, parsing) must not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.stage: Optional[str] = None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def message(self) -> str:
        where = f" in stage {self.stage}" if self.stage else ""
        return f"interrupted ({signal.Signals(self.signum).name}){where}; rerun the same command to resume"


@contextmanager
def in_stage(name: str) -> Iterator[None]:
    """Names the stage on an interrupt passing through (the innermost name wins)."""
    try:
        yield
    except Interrupted as e:
        if e.stage is None:
            e.stage = name
        raise


def _raise(signum, _frame) -> None:
    # Further signals while unwinding would interrupt `finally` blocks: ignore them.
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signum)


def _to_log_files(text: str) -> None:
    """The run's log file records the interrupt; the terminal gets only the one line."""
    import logging

    record = logging.LogRecord("hipporag2", logging.WARNING, __file__, 0, text, None, None)
    for h in logging.getLogger().handlers + logging.getLogger("hipporag2").handlers:
        if isinstance(h, logging.FileHandler):
            h.handle(record)


@contextmanager
def exit_on_signal() -> Iterator[None]:
    """For a command's entry point: SIGINT / SIGTERM end the command with one line on
    stderr and exit status 128 + signal number."""
    old = {s: signal.signal(s, _raise) for s in SIGNALS}
    try:
        yield
    except Interrupted as e:
        import logging

        _to_log_files(e.message())
        print(f"error: {e.message()}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        logging.shutdown()
        # Worker threads (HTTP requests of the OpenAI backend) must not keep the
        # process alive; everything of ours has unwound already.
        os._exit(e.exit_code)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
