"""Canonical forms of kernels and schedules: the keys of the per-structure caches.

A network repeats its layers: ResNet-50's 174 per-op kernels are 54 distinct ones once
tensor and op names are set aside. Everything the passes compute about a kernel — isl's
legality verdicts, the tiling search, the library's tuned schedule, the tiled execution
check — depends on its structure (statements, loop names and extents, shapes, dtypes,
roles), not on what its tensors are called. `canonical_kernel` renames the tensors by
position (`T0`, `T1`, ... in `Kernel.tensors` order) and the kernel and its ops to fixed
names; two kernels with equal canonical forms are the same computation on differently
named data. Loop names are kept (schedules are written in them).

`LRU` is the bounded, value-keyed cache the modules keep their verdicts in; `clear_all`
empties every one (benchmarks timing a cold start, tests counting work). `evaluate` is the
cost model's `evaluate` remembered by canonical schedule.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from .ir.program import Access, Statement, substitute
from .ir.schedule import Kernel, Schedule

_REGISTRY: list["LRU"] = []


class LRU:
    """A bounded least-recently-used map keyed by value, with hit/miss counts."""

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size
        self.data: OrderedDict = OrderedDict()
        self.hits = self.misses = 0
        _REGISTRY.append(self)

    def get(self, key, default=None):
        if key in self.data:
            self.data.move_to_end(key)
            self.hits += 1
            return self.data[key]
        self.misses += 1
        return default

    def put(self, key, value) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)

    def __contains__(self, key) -> bool:
        return key in self.data

    def __len__(self) -> int:
        return len(self.data)

    def clear(self) -> None:
        self.data.clear()
        self.hits = self.misses = 0


def clear_all() -> None:
    """Empty every canonical-form cache (library schedules, isl verdicts, searches, checks)."""
    for cache in _REGISTRY:
        cache.clear()


def stats() -> dict[str, dict[str, int]]:
    """{cache name: {entries, hits, misses}}: how much work the caches saved."""
    return {c.name: {"entries": len(c), "hits": c.hits, "misses": c.misses} for c in _REGISTRY}


_CANON = LRU("canonical_kernel", 4096)


def canonical_kernel(kernel: Kernel) -> Kernel:
    """`kernel` with tensors renamed T0, T1, ... (by position in `kernel.tensors`), ops
    op0, op1, ... and the kernel itself K. Equal for kernels equal up to those names."""
    cached = kernel.__dict__.get("_canonical")     # memo on the (immutable) kernel itself
    if cached is not None:
        return cached
    names = {t.name: f"T{i}" for i, t in enumerate(kernel.tensors)}

    def rename(e):
        if isinstance(e, Access):
            return replace(e, tensor=names.get(e.tensor, e.tensor), span=None)
        return None

    statements = tuple(Statement(names.get(s.target, s.target), s.target_indices, s.reduce, s.loops,
                                 substitute(s.expr, rename)) for s in kernel.statements)
    canon = Kernel(name="K", ops=tuple(f"op{i}" for i in range(len(kernel.ops))), statements=statements,
                   loops=kernel.loops, inputs=tuple(names[n] for n in kernel.inputs),
                   outputs=tuple(names[n] for n in kernel.outputs),
                   internals=tuple(names[n] for n in kernel.internals),
                   tensors=tuple(replace(t, name=names[t.name], span=None) for t in kernel.tensors),
                   anchor=kernel.anchor, loop_maps=kernel.loop_maps)
    # One object per canonical form: later equality tests are identity tests.
    shared = _CANON.get(canon)
    if shared is None:
        _CANON.put(canon, canon)
        shared = canon
    object.__setattr__(kernel, "_canonical", shared)
    return shared


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
