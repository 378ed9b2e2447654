"""Schedules as traces of primitives: one file per primitive, the trace, the search space.

    schedule/
      errors.py       ScheduleError and its kinds (unknown loop, bad argument, illegal step)
      primitive.py    what a primitive is (arguments, check, rewrite, decisions, forms) and the registry
      one module per primitive (tile, split, reorder, interchange, compute_at, stage,
      parallel, vectorize, unroll and the point-loop transformations)
                      its argument checks, its rewrite, its decisions
      trace.py        replay (checked step by step, then proved by isl), the builder, trace files
      space.py        every primitive's decisions in trace order; a point of the space as a trace

A new primitive is one file here (a `Primitive` subclass under `@register`; every module of
the package but the four above is imported, so nothing else lists it):
replay, `res.schedule(kernel)`, `--schedule` files and the search space take it at once.
"""
import importlib as _importlib
import pkgutil as _pkgutil

from .errors import BadArgumentError, IllegalStepError, ScheduleError, UnknownLoopError
from .primitive import PRIMITIVES, Decision, Primitive, Step, from_step, innermost_loop, loop_transforms, register
# Every other module here is one primitive, registered by importing it; the registry then
# lists them in trace order (their `rank`: tiles first, unroll last).
_FRAMEWORK = {"errors", "primitive", "trace", "space"}
for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__) if m.name not in _FRAMEWORK):
    _importlib.import_module(f"{__name__}.{_module}")
for _name, _cls in sorted(PRIMITIVES.items(), key=lambda item: item[1].rank):
    PRIMITIVES[_name] = PRIMITIVES.pop(_name)
from .trace import (ScheduleBuilder, apply_step, by_position, from_positions, load_traces, python_of, replay, replay_plan,
                    schedule_json)

__all__ = ["BadArgumentError", "IllegalStepError", "ScheduleError", "UnknownLoopError", "PRIMITIVES", "Decision",
           "Primitive", "Step", "from_step", "innermost_loop", "loop_transforms", "register", "ScheduleBuilder",
           "apply_step", "by_position", "from_positions", "load_traces", "python_of", "replay", "replay_plan", "schedule_json"]
