"""Canonical forms of kernels and schedules: the keys of the per-structure caches.

A network repeats its layers: ResNet-50's 174 per-op kernels are 54 distinct ones once
tensor and op names are set aside. Everything the passes compute about a kernel — isl's
legality verdicts, the tiling search, the library's tuned schedule, the tiled execution
check — depends on its structure (statements, loop names and extents, shapes, dtypes,
roles), not on what its tensors are called. `canonical_kernel` renames the tensors by
position (`T0`, `T1`, ... in `Kernel.tensors` order) and the kernel and its ops to fixed
names; two kernels with equal canonical forms are the same computation on differently
named data. Loop names are kept (schedules are written in them).

The caches keyed by these forms are `caches.LRU`s (registered in `caches`, which clears them
all at once). `evaluate` is the cost model's `evaluate` remembered by canonical schedule;
`evaluate_program` a plan's kernels so (a network's repeated layers, and the kernels plans
share, are costed once).
"""
from __future__ import annotations

from dataclasses import replace

from .caches import LRU
from .ir.schedule import Schedule, canonical_kernel, canonical_names  # noqa: F401 (the forms live with Kernel)


def schedule_key(schedule: Schedule) -> tuple:
    """The schedule's canonical kernel and everything it sets, as a hashable value (kept on
    the schedule, which nothing changes once built: the cost, isl's verdict, the tiled-run
    check and the searches all ask for the key of the same schedule)."""
    key = schedule.__dict__.get("_key")
    if key is None:
        key = (canonical_kernel(schedule.kernel), _freeze(schedule.tiles), _freeze(schedule.order),
               _freeze(schedule.annotations), tuple(schedule.levels))
        object.__setattr__(schedule, "_key", key)
    return key


def _freeze(mapping) -> tuple:
    return tuple(sorted((k, _freeze(v) if isinstance(v, dict) else v) for k, v in mapping.items()))


_COSTS = LRU("cost.evaluate", 8192)


def evaluate(schedule: Schedule, target):
    """`accel.cost.evaluate(schedule, target)`, remembered by canonical schedule and target
    (the model reads shapes, not names); the cost names this schedule's kernel."""
    from .accel.cost import evaluate as model_evaluate
    from .accel.target import load_target

    target = load_target(target)
    key = (schedule_key(schedule), target)
    cost = _COSTS.get(key)
    if cost is None:
        cost = model_evaluate(schedule, target)
        _COSTS.put(key, cost)
    return replace(cost, kernel=schedule.kernel.name, bytes=dict(cost.bytes),
                   level_time_s=dict(cost.level_time_s), limits=dict(cost.limits))


def evaluate_program(schedules, target):
    """`accel.cost.evaluate_program`, each kernel's cost from `evaluate` (remembered)."""
    from .accel.cost import evaluate_program as model_evaluate_program

    return model_evaluate_program(schedules, target, evaluate)
