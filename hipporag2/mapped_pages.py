"""Handing a memory-mapped array's pages back once they are read, so they stop counting as ours.

An index's embeddings are memory-mapped (`graph/store.py`). Reading a mapped page
makes it part of the process's resident set (RSS) until the mapping goes away, so
one pass over the fact embeddings (225 MB at MuSiQue scale) keeps all of them
resident for the rest of a run. `release_rows` tells the kernel that the process is
done with some rows (madvise MADV_DONTNEED): the pages leave our resident set but
stay in the operating system's page cache (shared, reclaimable), so reading them
again costs a minor page fault per 4 KB page (~0.2-0.5 us here), not a disk read
while memory is plentiful. Arrays that are not file mappings are left alone.
"""
from __future__ import annotations

import mmap

import numpy as np


def release_rows(arr: np.ndarray, start: int, stop: int) -> bool:
    """Drop rows start..stop of a memory-mapped array from the resident set; False if `arr`
    is not an np.memmap (or the platform lacks madvise), True once released."""
    mm = getattr(arr, "_mmap", None)
    if not isinstance(arr, np.memmap) or mm is None or not hasattr(mmap, "MADV_DONTNEED") or not arr.flags.c_contiguous:
        return False
    row = arr.strides[0] if arr.ndim else arr.itemsize
    # np.memmap maps from `offset` rounded down to the allocation granularity
    base = arr.offset % mmap.ALLOCATIONGRANULARITY
    page = mmap.PAGESIZE
    lo = (base + start * row) // page * page
    hi = min(len(mm), -(-(base + stop * row) // page) * page)
    if hi > lo:
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    return True
