"""Schedules as traces of primitives: one file per primitive, the trace, the search space.

    schedule/
      errors.py       ScheduleError and its kinds (unknown loop, bad argument, illegal step)
      primitive.py    what a primitive is (arguments, check, rewrite, decisions, forms) and the registry
      tile.py split.py reorder.py interchange.py parallel.py vectorize.py unroll.py
      skew.py reverse.py stage.py compute_at.py
                      one primitive each: its argument checks, its rewrite, its decisions
      trace.py        replay (checked step by step, then proved by isl), the builder, trace files
      space.py        every primitive's decisions in trace order; a point of the space as a trace

A new primitive is one file here (a `Primitive` subclass under `@register`, imported below):
replay, `res.schedule(kernel)`, `--schedule` files and the search space take it at once.
"""
from .errors import BadArgumentError, IllegalStepError, ScheduleError, UnknownLoopError
from .primitive import PRIMITIVES, Decision, Primitive, Step, from_step, innermost_loop, loop_transforms, register
from . import tile, split, reorder, interchange, compute_at, stage, skew, reverse, parallel, vectorize, unroll  # noqa: F401  (register)
from .trace import ScheduleBuilder, apply_step, load_traces, python_of, replay, replay_plan, schedule_json

__all__ = ["BadArgumentError", "IllegalStepError", "ScheduleError", "UnknownLoopError", "PRIMITIVES", "Decision",
           "Primitive", "Step", "from_step", "innermost_loop", "loop_transforms", "register", "ScheduleBuilder", "apply_step",
           "load_traces", "python_of", "replay", "replay_plan", "schedule_json"]
