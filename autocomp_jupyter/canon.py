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
from .ir.program import Access, Statement, substitute
from .ir.schedule import Kernel, Schedule

_CANON = LRU("canonical_kernel", 4096)


def canonical_kernel(kernel: Kernel) -> Kernel:
    """`kernel` with tensors renamed T0, T1, ... (by position in `kernel.tensors`), ops
    op0, op1, ... and the kernel itself K. Equal for kernels equal up to those names."""
    cached = kernel.__dict__.get("_canonical")     # memo on the (immutable) kernel itself
    if cached is not None:
        return cached
    names = canonical_names(kernel)

    def rename(e):
        if isinstance(e, Access):
            return replace(e, tensor=names.get(e.tensor, e.tensor), span=None)
        return None

    statements = tuple(Statement(names.get(s.target, s.target), s.target_indices, s.reduce, s.loops,
                                 substitute(s.expr, rename),
                                 rescale=s.rescale and replace(s.rescale, tensor=names[s.rescale.tensor]))
                       for s in kernel.statements)
    canon = Kernel(name="K", ops=tuple(f"op{i}" for i in range(len(kernel.ops))), statements=statements,
                   loops=kernel.loops, inputs=tuple(names[n] for n in kernel.inputs),
                   outputs=tuple(names[n] for n in kernel.outputs),
                   internals=tuple(names[n] for n in kernel.internals),
                   tensors=tuple(replace(t, name=names[t.name], span=None) for t in kernel.tensors),
                   anchor=kernel.anchor, loop_maps=kernel.loop_maps,
                   compute_at=tuple((names[t], loop, level) for t, loop, level in kernel.compute_at))
    # One object per canonical form: later equality tests are identity tests.
    shared = _CANON.get(canon)
    if shared is None:
        _CANON.put(canon, canon)
        shared = canon
    object.__setattr__(kernel, "_canonical", shared)
    return shared


def canonical_names(kernel: Kernel) -> dict[str, str]:
    """The renaming `canonical_kernel` applies: each tensor's name → T<its position>."""
    return {t.name: f"T{i}" for i, t in enumerate(kernel.tensors)}


def schedule_key(schedule: Schedule) -> tuple:
    """The schedule's canonical kernel and everything it sets, as a hashable value."""
    return (canonical_kernel(schedule.kernel), _freeze(schedule.tiles), _freeze(schedule.order),
            _freeze(schedule.annotations), tuple(schedule.levels))


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
    from .accel.cost import ProgramCost, combine
    from .accel.target import load_target

    target = load_target(target)
    kernels = [evaluate(s, target) for s in schedules]
    return ProgramCost(target=target.name, kernels=kernels, total=combine(kernels, target))
