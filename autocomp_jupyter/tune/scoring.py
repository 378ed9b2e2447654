"""Scoring candidates: the cost model's time (or any `score_fn`) over fixed-size chunks of
genomes, on any `concurrent.futures.Executor` (the results do not depend on it)."""
from __future__ import annotations

import time
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Callable

import numpy as np

from .. import objective
from ..accel.cost import evaluate_batch, kernel_model
from ..accel.target import Target
from ..ir.schedule import Kernel, Schedule
from .constants import CHUNK


ScoreFn = Callable[[Kernel, Target, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


# --------------------------------------------------------------------------- scoring


def model_score(kernel: Kernel, target: Target, tiles: np.ndarray, orders: np.ndarray,
                parallel: np.ndarray, vectorize: np.ndarray) -> np.ndarray:
    """The default score: the analytic cost model's time in seconds, one per candidate —
    or, where the target's objective is `energy` or `edp`, its joules or joule-seconds.

    Any `score_fn` with this signature (module-level, so it pickles) can replace it, e.g.
    a measured run on the host; lower is better.
    """
    cost = evaluate_batch(kernel, target, tiles, orders, parallel, vectorize)
    goal = objective.of(target)
    return cost.time_s if goal == "latency" else objective.score(goal, cost.time_s, cost.energy_j)


def _score_chunk(score_fn: ScoreFn, kernel: Kernel, target: Target, tiles, orders, parallel, vectorize) -> np.ndarray:
    """One scoring task: what an executor runs (picklable arguments, times back)."""
    return np.asarray(score_fn(kernel, target, tiles, orders, parallel, vectorize), dtype=float)


class _Scorer:
    """Scores batches of candidates, in chunks, serially or through an executor."""

    def __init__(self, executor, score_fn: ScoreFn):
        self.score_fn = score_fn
        self.seconds = 0.0
        self.executor, self._owned = open_executor(executor)   # _owned: what this scorer opened and must close
        self._futures = []

    def __call__(self, kernel: Kernel, target: Target, tiles, orders, parallel, vectorize) -> np.ndarray:
        started = time.perf_counter()
        try:
            return self._score(kernel, target, tiles, orders, parallel, vectorize)
        finally:
            self.seconds += time.perf_counter() - started

    def _score(self, kernel, target, tiles, orders, parallel, vectorize) -> np.ndarray:
        n = len(tiles)
        spans = [(lo, min(n, lo + CHUNK)) for lo in range(0, n, CHUNK)]
        if self.executor is None:
            parts = [_score_chunk(self.score_fn, kernel, target, tiles[a:b], orders[a:b], parallel[a:b],
                                  vectorize[a:b]) for a, b in spans]
        else:
            self._futures = [self.executor.submit(_score_chunk, self.score_fn, kernel, target, tiles[a:b],
                                                  orders[a:b], parallel[a:b], vectorize[a:b]) for a, b in spans]
            parts = [f.result() for f in self._futures]
            self._futures = []
        return np.concatenate(parts) if parts else np.zeros(0)

    def close(self) -> None:
        for f in getattr(self, "_futures", []):
            f.cancel()
        close_executor(self._owned)


def open_executor(executor) -> tuple[Executor | None, list]:
    """(executor to submit to, the things opened here that `close_executor` must close) for
    None / "serial", a concurrent.futures.Executor (or anything with `submit`),
    "processes[:N]" or "tcp://host:port" (a dask scheduler)."""
    if executor is None or executor == "serial":
        return None, []
    if isinstance(executor, Executor) or hasattr(executor, "submit"):
        return executor, []
    if isinstance(executor, str) and executor.startswith("processes"):
        _, _, workers = executor.partition(":")
        pool = ProcessPoolExecutor(max_workers=int(workers) if workers else None)
        return pool, [pool]
    if isinstance(executor, str) and "://" in executor:
        from dask.distributed import Client

        client = Client(executor)
        return client.get_executor(), [client]
    raise ValueError(f"executor must be None, a concurrent.futures.Executor, 'processes[:N]' or "
                     f"'tcp://host:port' (a dask scheduler), got {executor!r}")


def close_executor(owned: list) -> None:
    for thing in owned:
        if isinstance(thing, Executor):
            thing.shutdown(wait=True, cancel_futures=True)
        else:
            thing.close()


def _arrays(schedule: Schedule, target: Target):
    model = kernel_model(schedule.kernel, target)
    tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
    return tiles, np.ascontiguousarray(orders), np.ascontiguousarray(parallel), vectorize


