"""The MiniLM thread share of an xdist worker (tests/conftest.py, docs/testing.md)."""
from tests.conftest import idle_core_threads


def test_a_worker_alone_takes_every_core():
    assert idle_core_threads(cores=2, load1=1.0, own_threads=1, base=1) == 2
    assert idle_core_threads(cores=4, load1=0.2, own_threads=1, base=1) == 4
    assert idle_core_threads(cores=2, load1=2.0, own_threads=2, base=1) == 2  # its own two threads


def test_a_busy_neighbour_leaves_the_worker_its_share():
    assert idle_core_threads(cores=2, load1=2.0, own_threads=1, base=1) == 1
    assert idle_core_threads(cores=2, load1=3.0, own_threads=2, base=1) == 1
    assert idle_core_threads(cores=2, load1=9.0, own_threads=1, base=1) == 1  # a loaded machine
    assert idle_core_threads(cores=2, load1=9.0, own_threads=1, base=2) == 2  # never below the share


def test_the_count_changes_only_past_a_dead_band():
    # The neighbour's load fading (load average lags): one thread until 0.3 core is left.
    assert idle_core_threads(cores=2, load1=1.5, own_threads=1, base=1) == 1
    assert idle_core_threads(cores=2, load1=1.25, own_threads=1, base=1) == 2
    # And back: two threads until the neighbour takes 0.7 core.
    assert idle_core_threads(cores=2, load1=2.65, own_threads=2, base=1) == 2
    assert idle_core_threads(cores=2, load1=2.75, own_threads=2, base=1) == 1
