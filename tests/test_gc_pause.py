"""long_lived_frozen: the objects alive at the start are skipped by collections inside
the block and handed back after it, and an enclosing freeze is left as it was."""
import gc

from hipporag2.gc_pause import long_lived_frozen


class Node:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it


def test_frozen_inside_the_block_and_handed_back_after_it():
    assert gc.get_freeze_count() == 0
    old = Node()
    with long_lived_frozen():
        assert gc.get_freeze_count() > 0
        new = Node()
        del old, new
        gc.collect()
        # the cycle made inside was collected; the one alive at the start waits
        assert sum(type(o) is Node for o in gc.get_objects()) == 0  # frozen objects are not listed
        with long_lived_frozen():  # nested: the outer freeze is kept
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    assert sum(type(o) is Node for o in gc.get_objects()) == 1
    gc.collect()
    assert sum(type(o) is Node for o in gc.get_objects()) == 0


def test_left_alone_when_something_else_froze_or_disabled():
    gc.freeze()
    try:
        with long_lived_frozen():
            pass
        assert gc.get_freeze_count() > 0  # not unfrozen by us (the count itself falls as frozen objects are freed)
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with long_lived_frozen():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_collections_paused_inside_the_block_and_back_after_it():
    from hipporag2.gc_pause import collections_paused

    collected = []

    def count(phase, info):
        if phase == "stop":
            collected.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with collections_paused():
            assert not gc.isenabled()
            cycles = [Node() for _ in range(5000)]  # enough new containers to set off collections
            del cycles
            assert collected == []
        assert gc.isenabled()
        gc.collect()
        assert sum(type(o) is Node for o in gc.get_objects()) == 0  # the cycles made inside are freed after
        gc.disable()
        try:
            with collections_paused():  # the collector was off: left off
                pass
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(count)


def test_nested_blocks_do_not_ask_the_collector_and_paused_objects_join_the_freeze(monkeypatch):
    """gc.get_freeze_count() walks every frozen object: only the outermost block asks it.
    What collections_paused makes inside a freeze is frozen with it and handed back after."""
    from hipporag2.gc_pause import collections_paused

    asked = []
    real = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: asked.append(1) or real())
    with long_lived_frozen():
        assert len(asked) == 1
        before = real()
        with long_lived_frozen():
            with collections_paused():
                made = [Node() for _ in range(100)]
            assert real() >= before + 100  # the new objects joined the freeze
        assert len(asked) == 1
        del made
    assert real() == 0
    gc.collect()
    assert sum(type(o) is Node for o in gc.get_objects()) == 0
    gc.disable()  # collector off: nothing frozen, and a paused block inside does not freeze either
    try:
        with long_lived_frozen():
            with collections_paused():
                pass
            assert real() == 0
    finally:
        gc.enable()
