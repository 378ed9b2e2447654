"""The spare cores: worker processes a run uses besides its own, for searches that do not
depend on each other.

A search the pipeline asks for (a kernel's library schedule, `baselines.library_schedules`;
a tile search, `accel.tile_search.search_all`) depends only on what it is given — the
kernel's structure, the target, the rules and the seed — so it returns the same schedule
wherever it runs. Where a stage needs several such searches at once (`run_all`: the library
baseline's ops, a chain at each of its compute points, the tiling pass's kernels), this
process takes them from the back of the list and each spare core from the front, and the
stage gets what a serial run gets, sooner. A search on a spare core sends back the random
draw and scores it added to the tile search's caches (`CARRIED`), which this process would
otherwise compute again. A stage may also give a worker long tasks one at a time (`submit_carrying`:
the chain walk's segments) and hold it meanwhile (`held`), so that its own searches do not
queue behind them.

One worker per core beyond this process's own (`os.sched_getaffinity`), forked on first use
(each starts with the imports and caches this process had then, so nothing is imported
again) and kept for the life of the process: a notebook's later cells reuse them. A
worker that dies (killed, out of memory) is not an error: the pool is dropped and the
search runs here. `AUTOCOMP_WORKERS=0` turns the workers off (`=N`: at most N).
"""
from __future__ import annotations

import multiprocessing
import os
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

_POOL: ProcessPoolExecutor | None = None
_BROKEN = False
_IN_WORKER = False      # this process is a worker: its searches run here (it has no spare cores)
_HELD = 0               # workers a stage holds for its long tasks (`held`): not spare meanwhile


def cores() -> int:
    """The cores this process may use (os.sched_getaffinity where the OS has it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # not Linux
        return max(1, os.cpu_count() or 1)


def spare_cores() -> int:
    """How many worker processes a run may use besides its own: the cores it may use, less
    one, capped by `AUTOCOMP_WORKERS`, less those a stage holds (`held`); none in a
    worker."""
    if _IN_WORKER:
        return 0
    spare = cores() - 1 - _HELD
    cap = os.environ.get("AUTOCOMP_WORKERS", "").strip()
    if cap:
        if not cap.isdigit():
            from .errors import UserError

            raise UserError(f"environment variable AUTOCOMP_WORKERS={cap!r}: expected the most worker processes "
                            f"to use besides this one, a whole number (0: none)")
        spare = min(spare, int(cap) - _HELD)
    return max(spare, 0)


def pool() -> ProcessPoolExecutor | None:
    """The spare cores' pool, or None where there is no spare core, the workers are turned
    off, fork is not available, or a worker has died in this process."""
    global _POOL
    if _POOL is not None or _BROKEN or _IN_WORKER:
        return _POOL
    spare = spare_cores() + _HELD
    if spare < 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    if multiprocessing.current_process().daemon:
        return None             # a daemonic process (a Dask worker) may not have children
    _POOL = ProcessPoolExecutor(max_workers=spare, mp_context=multiprocessing.get_context("fork"),
                                initializer=_quiet)
    return _POOL


def _quiet() -> None:
    """A worker's start: nothing it might print reaches the parent's streams (a notebook
    kernel's stdout is a channel served by a thread the fork did not copy), and its own
    searches run in it (the pool it was forked with belongs to the parent)."""
    import sys
    import warnings

    global _POOL, _IN_WORKER
    _POOL, _IN_WORKER = None, True

    warnings.simplefilter("ignore")
    sys.stdout = sys.stderr = open(os.devnull, "w")


# The caches whose new entries a worker sends back with a result: a tile search's random draw
# and its local scores, by kernel structure. The process that asked searches the same structure
# again later (the energy tie-break, the tiling pass from another schedule) and would draw
# again without them: sent back, a search on a spare core costs this process nothing later.
CARRIED = ("tiling.random_draw", "tiling.local_scores")


def _carrying(fn, *args, carried: tuple[str, ...] = CARRIED):
    """(fn(*args), [(cache name, its new entries)]): a call on a worker, with what it added
    to the `carried` caches."""
    from . import caches

    lrus = [caches.named(name) for name in carried]
    before = [set(c.data) for c in lrus]
    value = fn(*args)
    return value, [(c.name, c.new_since(keys)) for c, keys in zip(lrus, before)]


def _absorbed(carried) -> object:
    """The value of a `_carrying` call, its cache entries taken into this process's caches."""
    from . import caches

    value, entries = carried
    for name, items in entries:
        caches.named(name).absorb(items)
    return value


def run_all(calls: list[tuple]) -> list:
    """[fn(*args) for (fn, *args) in calls], side by side: this process takes calls from the
    back of the list, each spare core from the front, the next one as soon as it finishes one
    (from the pool's thread), so that no core waits for another's call to end while calls
    are left. A call that fails on a spare core runs here (`result`). The calls must not
    depend on each other."""
    results: list = [None] * len(calls)
    queue = deque(range(len(calls)))
    given: dict[int, Future] = {}            # call -> its future on a spare core, until taken in
    lock = threading.RLock()                 # this thread and the pool's (a call done) take calls

    def give(_done=None) -> None:
        """One more call from the front to a spare core (at the start, and as one finishes)."""
        with lock:
            if not queue:
                return
            i = queue.popleft()
            future = submit(_carrying, *calls[i])
            if future is None:                 # no worker after all: the rest run here
                queue.appendleft(i)
                return
            given[i] = future
        future.add_done_callback(give)

    def take_in(done_only: bool) -> None:
        """The spare cores' results taken in here, in this thread (their cache entries too)."""
        with lock:
            ready = [(i, f) for i, f in given.items() if f.done() or not done_only]
            for i, _ in ready:
                del given[i]
        for i, future in ready:
            fn, *args = calls[i]
            results[i] = _absorbed(result(future, lambda: (fn(*args), [])))

    for _ in range(spare_cores() if len(calls) > 1 else 0):
        give()
    while True:
        with lock:
            if not queue:
                break
            i = queue.pop()
        fn, *args = calls[i]
        results[i] = fn(*args)
        take_in(done_only=True)
    take_in(done_only=False)
    return results


class held:
    """`with held():` one worker counted busy until the block ends (a stage giving it long
    tasks one after another: the chain walk's segments), so that the searches this process
    runs meanwhile (`run_all`) do not queue behind them."""

    def __enter__(self):
        global _HELD
        _HELD += 1
        return self

    def __exit__(self, *exc) -> None:
        global _HELD
        _HELD -= 1


def submit_carrying(fn, *args, carried: tuple[str, ...] = CARRIED) -> Future | None:
    """`submit(fn, *args)` sending back, with its value, the entries the call added to the
    `carried` caches (`value_carried` takes them in)."""
    return submit(_carried_call, carried, fn, *args)


def _carried_call(carried: tuple[str, ...], fn, *args):
    return _carrying(fn, *args, carried=carried)


def value_carried(future: Future, fallback):
    """A `submit_carrying` call's value, its cache entries taken into this process's caches;
    `fallback()` (run here, nothing carried) where it failed there (`result`)."""
    return _absorbed(result(future, lambda: (fallback(), [])))


def submit(fn, *args) -> Future | None:
    """`fn(*args)` on a spare core, or None where there is none (the caller runs it)."""
    executor = pool()
    if executor is None:
        return None
    try:
        return executor.submit(fn, *args)
    except Exception:  # noqa: BLE001 - no worker can start (a broken pool, a process that may not fork): run here
        _drop()
        return None


def result(future: Future, fallback):
    """The future's result, or `fallback()` here where it failed there: its worker died,
    its arguments could not be sent (a function defined in a notebook cell), or it raised
    (the same call here raises the same, where the caller's transaction catches it)."""
    try:
        return future.result()
    except BrokenProcessPool:
        _drop()
        return fallback()
    except Exception:  # noqa: BLE001 - run here: the caller sees what this process would
        return fallback()


def cpu_seconds() -> float:
    """The CPU seconds the live workers have used so far (benchmarks add it to their own
    process's: a run's whole CPU time); 0 where there are none or the OS does not say."""
    if _POOL is None:
        return 0.0
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in list(getattr(_POOL, "_processes", None) or {}):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks     # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total


def _drop() -> None:
    """Forget a pool whose worker died: the rest of this process's searches run here."""
    global _POOL, _BROKEN
    if _POOL is not None:
        _POOL.shutdown(wait=False, cancel_futures=True)
    _POOL, _BROKEN = None, True


def shutdown() -> None:
    """Stop the workers (tests; a process that forks for other reasons)."""
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=True, cancel_futures=True)
    _POOL = None
