"""A schedule is the trace of primitive steps that builds it from the kernel's untiled nest.

    trace (JSON: [{"primitive": NAME, ...named args}])  ──replay──▶  Schedule  ──lower──▶  loop-nest tree

This module replays traces (each step's arguments checked by its primitive, then isl's verdict
on the whole, naming the first step after which it is illegal and the dependence it breaks),
hands out `ScheduleBuilder`s (`res.schedule(kernel)`), reads traces from what a user passes as
`--schedule` / `schedule=`, and writes a trace as Python calls a user can paste back.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..caches import cached
from ..errors import Diagnostic, UserError
from ..ir.schedule import Kernel, Schedule
from .errors import IllegalStepError, ScheduleError
from .primitive import PRIMITIVES, Step, from_step, hint


def apply_step(schedule: Schedule, step: Mapping[str, Any]) -> Schedule:
    """`schedule` with one step applied (arguments checked; legality is `replay`'s)."""
    return from_step(step).apply(schedule)


def replay(kernel: Kernel, trace: Iterable[Mapping[str, Any]], levels: Sequence[str],
           filename: str = "schedule") -> Schedule:
    """The schedule `trace` builds from `kernel`'s untiled nest, every step's arguments
    checked, then isl's verdict on the result: if it is illegal, the first step after
    which it is illegal is named, with the dependence it breaks."""
    from .. import poly

    steps = list(trace)
    kernel = kernel.without_compute_at()     # the trace says where (compute_at steps)
    schedules = [Schedule.default(kernel, levels)]
    for index, step in enumerate(steps):
        try:
            schedules.append(apply_step(schedules[-1], step))
        except ScheduleError as err:
            raise type(err)(err.message, kernel=kernel.name, primitive=err.primitive, loop=err.loop, step=index,
                            hint=err.diagnostics[0].hint, filename=filename) from None
    verdict = poly.check_schedule(schedules[-1])
    if verdict.ok:
        return schedules[-1]
    for index in _prefixes_to_blame(steps, schedules, poly.check_schedule):   # its last step is to blame
        prefix = poly.check_schedule(schedules[index])
        if not prefix.ok:
            step = steps[index - 1]
            raise IllegalStepError(prefix.reason, kernel=kernel.name, primitive=step["primitive"],
                                   loop=str(step.get("loop", "")), step=index - 1, filename=filename,
                                   hint=PRIMITIVES[step["primitive"]].hint_when_illegal)
    raise IllegalStepError(verdict.reason, kernel=kernel.name, filename=filename)


def _prefixes_to_blame(steps: Sequence[Mapping[str, Any]], schedules: Sequence[Schedule], check) -> range:
    """Where to look for the step an illegal trace is refused at: the prefixes of the first
    run of same-primitive steps (a trace's tiles, its reorders, ...) after which the schedule
    is illegal — the run's ends are checked first, each a single isl check, so a refused
    last step costs a few checks, not one per step of the trace."""
    start = 1
    for end in range(1, len(schedules)):
        if end < len(steps) and steps[end]["primitive"] == steps[end - 1]["primitive"]:
            continue                              # inside a run: its end decides
        if not check(schedules[end]).ok:
            return range(start, end + 1)
        start = end + 1
    return range(1, len(schedules))


# --------------------------------------------------------------------------- by position

_LOOP_ARGS = ("loop", "by", "order")      # step arguments that name loops (`order`: a list of them)
_TENSOR_ARGS = ("tensor",)                # ... and tensors


def by_position(schedule: Schedule) -> tuple:
    """The schedule's trace, every loop and tensor named by its position in the kernel, as
    nested tuples (hashable): what a cache keyed by a kernel's canonical form keeps, since
    the kernels of one form may name their loops and tensors differently. `from_positions`
    replays it on any of them."""
    loops = {n: i for i, n in enumerate(schedule.kernel.loop_names)}
    tensors = {t.name: i for i, t in enumerate(schedule.kernel.tensors)}

    def position(arg, value):
        if value is None:
            return None
        if arg in _LOOP_ARGS:
            return tuple(loops[v] for v in value) if isinstance(value, list) else loops[value]
        if arg in _TENSOR_ARGS:
            return tensors[value]
        return tuple(value) if isinstance(value, list) else value

    return (tuple(tuple((arg, position(arg, v)) for arg, v in step.items()) for step in schedule.trace),
            tuple(schedule.levels))


# (by the kernel and the record: a network's searches and checks ask the library's schedule of
# one kernel again and again — ViT-B/16 on npu replays 2,218 records on 732 distinct kernels —
# and each replay makes a schedule per step)
@cached("schedule.from_positions", 4096)
def from_positions(kernel: Kernel, record: tuple) -> Schedule:
    """The schedule a `by_position` record builds on `kernel` (of the recorded kernel's
    canonical form). Its steps were legal where recorded, and legality follows the form."""
    steps, levels = record
    loops, tensors = kernel.loop_names, [t.name for t in kernel.tensors]

    def name(arg, value):
        if value is None:
            return None
        if arg in _LOOP_ARGS:
            return [loops[v] for v in value] if isinstance(value, tuple) else loops[value]
        if arg in _TENSOR_ARGS:
            return tensors[value]
        return list(value) if isinstance(value, tuple) else value

    schedule = Schedule.default(kernel.without_compute_at(), levels)
    for step in steps:
        schedule = apply_step(schedule, {arg: name(arg, v) for arg, v in step})
    return schedule


def schedule_json(schedule: Schedule) -> dict:
    """The schedule as the report and the tuner's versions write it: effective `tiles`
    {loop: {level: size}}, `order` (outermost level), `order_by_level`, `annotations`
    (tuples as lists) and its `trace`."""
    levels = schedule.levels
    return {
        "tiles": {loop: dict(zip(levels, sizes)) for loop, sizes in schedule.tile_sizes(levels).items()},
        "order": list(schedule.order_at(levels[0], levels)) if levels else list(schedule.kernel.loop_names),
        "order_by_level": {lv: list(schedule.order_at(lv, levels)) for lv in levels},
        "annotations": {k: _json_value(v) for k, v in schedule.annotations.items()},
        "trace": schedule.trace,
    }


def _json_value(value):
    return [_json_value(v) for v in value] if isinstance(value, (tuple, list)) else value


def python_of(kernel_name: str, trace: Sequence[Mapping[str, Any]], result_var: str = "res") -> str:
    """The trace as Python calls a user can paste back into a notebook cell:

        s = res.schedule("C_D")
        s.tile(loop="i", level="VMEM", size=128)
        ...
        res2 = autocomp.optimize(src, target=..., schedule={"C_D": s})
    """
    lines = [f"s = {result_var}.schedule({kernel_name!r})    # kernel {kernel_name}, from its untiled nest"]
    for step in trace:
        args = ", ".join(f"{k}={v!r}" for k, v in step.items() if k != "primitive")
        lines.append(f"s.{step['primitive']}({args})")
    return "\n".join(lines)


class ScheduleBuilder:
    """A kernel's schedule built by calling primitives one at a time, each checked at once
    (arguments, then legality), as `res.schedule(kernel)` hands it out:

        s = res.schedule("C_D")
        s.tile(loop="i", level="VMEM", size=128)
        s.parallel(loop="k")      # ScheduleError: ... carries the flow dependence ...

    `s.trace` is the JSON trace; pass the builder (or its trace) to `optimize(schedule=...)`."""

    def __init__(self, kernel: Kernel, levels: Sequence[str]):
        self.kernel, self.levels = kernel, tuple(levels)
        self.trace: list[Step] = []
        self.schedule = Schedule.default(kernel, levels)

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in PRIMITIVES:
            raise AttributeError(f"no primitive {name!r}; the primitives are {', '.join(PRIMITIVES)}")

        def call(**args):
            step = {"primitive": name, **args}
            self.schedule = replay(self.kernel, self.trace + [step], self.levels)
            self.trace.append(step)
            return self
        call.__doc__ = PRIMITIVES[name].doc()
        return call

    def __dir__(self):
        return list(super().__dir__()) + list(PRIMITIVES)

    def __repr__(self) -> str:
        return python_of(self.kernel.name, self.trace)


# --------------------------------------------------------------------------- schedule files


def load_traces(source, filename: str = "--schedule") -> dict[str, list[Step]]:
    """{kernel name: trace} from what a user passes as a schedule: a report (dict or a JSON
    file's path) with "kernels": [{"name", "trace"}], a mapping {kernel: trace or
    ScheduleBuilder}, or a JSON file holding either."""
    if isinstance(source, (str, Path)):
        source, filename = _read_json(Path(source)), str(source)
    if isinstance(source, Mapping) and "kernels" in source:
        source = _report_traces(source["kernels"], filename)
    if not isinstance(source, Mapping):
        raise UserError("a schedule is a report, or a mapping {kernel name: trace}", filename=filename)
    traces = {}
    for name, trace in source.items():
        if isinstance(trace, ScheduleBuilder):
            trace = trace.trace
        if not isinstance(trace, list) or not all(isinstance(s, Mapping) for s in trace):
            raise UserError(f"kernel {name}: a trace is a list of steps {{\"primitive\": NAME, ...}}",
                            filename=filename)
        traces[str(name)] = [dict(s) for s in trace]
    return traces


def _read_json(path: Path):
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"cannot read the schedule file: {err.strerror or err}", filename=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(Diagnostic(f"not JSON: {err.msg}", err.lineno, err.colno,
                                   hint="pass a report written by `autocomp optimize --json`"),
                        source=text, filename=str(path)) from None


def _report_traces(kernels, filename: str) -> dict:
    if not isinstance(kernels, list):
        raise UserError("\"kernels\" must be a list of {\"name\", \"trace\"}", filename=filename)
    out = {}
    for n, entry in enumerate(kernels):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or "trace" not in entry:
            raise UserError(f"kernels[{n}] has no \"name\" and \"trace\" (a report from before traces?)",
                            filename=filename)
        out[entry["name"]] = entry["trace"]
    return out


def replay_plan(plans: Sequence, traces: Mapping[str, list[Step]], levels: Sequence[str],
                filename: str = "--schedule"):
    """(plan, names): the first of `plans` that has every kernel `traces` names, with those
    kernels' schedules replayed from their traces (a report that fell back to the library
    baseline names the library's kernels)."""
    wanted = set(traces)
    for plan in plans:
        names = {k.name for k in plan.kernels}
        if wanted <= names:
            schedules = tuple(replay(k, traces[k.name], levels, filename) if k.name in wanted else s
                              for k, s in zip(plan.kernels, plan.schedules))
            return replace(plan, kernels=tuple(s.kernel for s in schedules), schedules=schedules,
                           label="replayed"), wanted
    names = [k.name for k in plans[0].kernels]
    missing = sorted(wanted - set(names))
    raise UserError([Diagnostic(f"no kernel named {m!r} in this program's plan", hint=hint(m, names) or
                                f"kernels: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
                     for m in missing], filename=filename)
