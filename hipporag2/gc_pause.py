"""Keeping the cyclic garbage collector off the long-lived heap while queries run.

A run holds its corpus, index and OpenIE records as Python objects (~250k containers
at MuSiQue scale) for as long as it retrieves, and retrieving allocates containers
per query (candidate facts, details, results). Every so often that triggers a full
collection, which walks every tracked object: 80-270 ms each on this machine, that
is 0.5-0.9 ms per query when spread over a block (issue 15), to find nothing: the
index is not garbage. `gc.freeze()` moves the objects alive at the start to a
generation the collector skips, so collections during retrieval walk only what
retrieval made; `gc.unfreeze()` hands them back at the end, and the collector sees
everything again. Nothing is kept from being freed: reference counting still frees
the frozen objects, only cycles among them wait until the unfreeze.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator


class _Freezes:
    """How many `long_lived_frozen` blocks are open (in any thread): the collector's
    own state is process-wide, and asking it (`gc.get_freeze_count()`) walks every
    frozen object (~8 ms per 100k objects here, 300k in a run), so a nested block or
    `collections_paused` inside one asks this count instead."""

    def __init__(self) -> None:
        self.depth = 0
        self.lock = threading.Lock()


_FREEZES = _Freezes()


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Freeze what is alive now for the duration of the block. Does nothing when the
    collector is off or something else froze objects already (an enclosing block, or
    the host application: its unfreeze is its own)."""
    with _FREEZES.lock:
        # an enclosing block first: then the collector need not be asked (a walk of the frozen objects)
        nested = _FREEZES.depth > 0
        mine = not nested and gc.isenabled() and not gc.get_freeze_count()
        if mine:
            gc.freeze()
        counted = nested or mine  # blocks inside a freeze of ours; only the outermost unfreezes
        if counted:
            _FREEZES.depth += 1
    try:
        yield
    finally:
        with _FREEZES.lock:
            if counted:
                _FREEZES.depth -= 1
            if mine:
                gc.unfreeze()


@contextmanager
def collections_paused() -> Iterator[None]:
    """No collections at all for the duration of the block: for building a large
    structure that holds no reference cycles (a parsed JSON file, the tuples made from
    it), where every ~700 new containers would set off a collection that walks them
    and finds nothing (a fifth of parsing index.json at MuSiQue scale). Inside a
    `long_lived_frozen` block what this block made joins the frozen objects, so it is
    handed back with them to the oldest generation instead of being walked by the
    young collections that the next allocations set off (one walk of index.json's
    ~50k lists: 5-25 ms). Cycles made meanwhile are collected after the block (after
    the enclosing freeze); does nothing when the collector is off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        with _FREEZES.lock:
            if _FREEZES.depth:
                gc.freeze()
        gc.enable()
