"""The cyclic garbage collector around interactive answers (the Tune tab's moves).

A full collection walks every object the session holds — a result, the pipeline's caches,
isl's objects — and took 40-100 ms under load: falling inside a move, it doubled the tab's
slowest answers. `collector_paused` keeps it out of an answer (what it would collect waits
until after); `settle_heap` collects once and freezes what lives, so later full collections
walk only what the moves create.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


def settle_heap() -> None:
    """Collect the garbage, then freeze what lives (`gc.freeze`): the session's heap as it is
    (a result, the pipeline's caches) is never scanned again by a full collection, which
    then walks only what later moves create — what the Tune tab does once it is built, so
    that no move waits for a scan of the whole heap. Each call first unfreezes, so what a
    previous tab froze and has since become garbage is collected now."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused for a block (what it would collect waits until
    after): a full collection of a session's heap (the pipeline's caches, isl's objects) takes
    tens of milliseconds, and falling inside an interactive answer doubled the Tune tab's
    slowest moves. Nested or concurrent blocks leave it as the outermost found it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
