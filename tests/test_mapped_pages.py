"""Pages of a memory-mapped array handed back after reading (hipporag2/mapped_pages.py)."""
import sys

import numpy as np
import pytest

from hipporag2.mapped_pages import release_rows


def _resident_kb(path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_released_rows_leave_the_resident_set_and_read_back_the_same(tmp_path):
    data = np.random.default_rng(0).random((4096, 1024), dtype=np.float32)  # 16 MB, 4 kB a row
    path = tmp_path / "a.npy"
    np.save(path, data)
    m = np.load(path, mmap_mode="r")
    total = float(np.asarray(m).sum(dtype=np.float64))  # touches every page
    assert _resident_kb(path) > 16_000
    assert release_rows(m, 0, len(m))
    assert _resident_kb(path) < 100
    assert float(np.asarray(m).sum(dtype=np.float64)) == total  # read again from the page cache
    np.testing.assert_array_equal(m[1000:1010], data[1000:1010])
    # part of it: those rows' pages go (8 MB of the 16), and at most the 2 MB huge page
    # mapping each end of the range with them (the kernel unmaps a file's huge page whole)
    full = _resident_kb(path)
    assert release_rows(m, 0, 2048)
    assert 8_000 <= full - _resident_kb(path) <= 8_200 + 4096


def test_arrays_that_are_not_mappings_are_left_alone():
    a = np.ones((10, 10), dtype=np.float32)
    assert release_rows(a, 0, 10) is False
    assert a.sum() == 100
