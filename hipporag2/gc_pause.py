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
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Freeze what is alive now for the duration of the block. Does nothing when the
    collector is off or something else froze objects already (an enclosing block, or
    the host application: its unfreeze is its own)."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def collections_paused() -> Iterator[None]:
    """No collections at all for the duration of the block: for building a large
    structure that holds no reference cycles (a parsed JSON file, the tuples made from
    it), where every ~700 new containers would set off a collection that walks them
    and finds nothing (a fifth of parsing index.json at MuSiQue scale). Inside a
    freeze (`long_lived_frozen`) what the block made joins the frozen objects, so it is
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
        if gc.get_freeze_count():
            gc.freeze()
        gc.enable()
