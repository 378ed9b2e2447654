"""The collector kept out of interactive answers: paused in a block and restored as found
(nested too), and the heap frozen once so that full collections walk only what is new."""
from __future__ import annotations

import gc

from autocomp_jupyter.heap import collector_paused, settle_heap


def test_the_collector_is_paused_in_a_block_and_restored_as_found():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()          # the inner block found it paused: it stays paused
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()          # a caller who paused it keeps it paused
    finally:
        gc.enable()


def test_settle_heap_collects_then_freezes_what_lives():
    class Node:
        pass

    garbage = Node()
    garbage.self = garbage                 # a cycle only the collector frees
    del garbage
    settle_heap()
    try:
        assert gc.get_freeze_count() > 0 and gc.isenabled()
        assert not any(type(o) is Node for o in gc.get_objects())
        live = gc.get_freeze_count()
        settle_heap()                      # unfreezes first: the count does not pile up
        assert abs(gc.get_freeze_count() - live) < live // 2
    finally:
        gc.unfreeze()
