"""A schedule is the trace of primitives that builds it from the kernel's untiled nest.

This module owns the schedule primitives and the encodings of a schedule as a trace:

    trace (JSON: [{"primitive": NAME, ...named args}])  ──replay──▶  Schedule  ──lower──▶  loop-nest tree
    Schedule ──trace_of──▶ trace ──python_of──▶ Python calls a user can paste back
    Schedule ──schedule_json──▶ the report's / the tuner's per-kernel JSON (tiles, orders, annotations, trace)
    (the cache key of a schedule is `canon.schedule_key`; the tuner's genome is its arrays, `cost.schedule_arrays`)

Each primitive is, in this order (the pattern of Exo's `Do*` rewrites with their `Check_*`
and TVM's numbered schedule-primitive checks):
  1. an argument check (`check`): names the primitive, the loop and what was expected;
  2. the rewrite (`rewrite`): a new, frozen `Schedule`, which `ir.loopnest.lower` turns
     into the tree every reader walks;
  3. the one legality entry point, `poly.check_schedule`: a broken dependence is an
     `IllegalStepError` naming the primitive, its loop and the dependence.
Failures are `ScheduleError`s (a `UserError`: exit 2 in the CLI, one message in a notebook).

The primitives (arguments by name; loops are the kernel's loops, levels a target's tiling
levels outer → inner):

| primitive | arguments | what it does |
|---|---|---|
| `tile` | loop, level, size | tiles `loop` at `level` (a tile loop steps through it; the last tile may be a remainder) |
| `reorder` | level, order | the loop order at `level`, outer → inner (loops left out follow, in source order) |
| `interchange` | level, loop, other | swaps two loops in the order at `level` (the other levels keep theirs) |
| `parallel` | loop | runs every tile and point loop over `loop` in parallel (refused if it carries a dependence) |
| `vectorize` | loop | the loop the vector unit runs (C: `omp simd` when it is the innermost point loop) |
| `unroll` | loop, factor | unrolls the innermost point loop, which `loop` must be, by `factor` |
| `skew` | loop, by, factor | the point loop of `loop` runs over loop + factor*by (affine bounds; a wavefront when `loop` is outside `by`) |
| `reverse` | loop | the point loop of `loop` runs from its last value down |
| `stage` | tensor, level | holds `tensor`'s tiles at `level` (copied in before that level's loops run), even where the level's roles would let it stream past |
| `compute_at` | tensor, loop, level | the statements writing `tensor` run inside the anchor's tile loop over `loop` at `level`, over the region that tile reads (a halo is recomputed) |

A new primitive is one `@primitive` function here (its checks and its rewrite); where it
changes how point loops run, `ir.loopnest.lower` marks them (README, design notes).
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import Diagnostic, UserError, did_you_mean
from .ir.schedule import Kernel, Schedule

Step = dict   # {"primitive": NAME, <arg>: value, ...}


# --------------------------------------------------------------------------- errors


class ScheduleError(UserError):
    """A schedule primitive refused a step: which kernel, which step, which loop, why."""

    def __init__(self, message: str, *, kernel: str = "", primitive: str = "", loop: str = "",
                 step: int | None = None, hint: str = "", filename: str = "schedule"):
        self.kernel, self.primitive, self.loop, self.step = kernel, primitive, loop, step
        where = [f"kernel {kernel}"] if kernel else []
        if step is not None:
            where.append(f"step {step + 1}")
        if primitive:
            where.append(primitive)
        prefix = ", ".join(where)
        super().__init__(Diagnostic(f"{prefix}: {message}" if prefix else message, hint=hint), filename=filename)


class UnknownLoopError(ScheduleError):
    """A step names a loop (or level) the kernel does not have."""


class BadArgumentError(ScheduleError):
    """A step's arguments are missing, of the wrong type or out of range."""


class IllegalStepError(ScheduleError):
    """A step breaks a dependence (isl: `poly.check_schedule`)."""


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Primitive:
    """One schedule primitive: its name, argument names and the function that checks its
    arguments and rewrites the schedule (raising `ScheduleError`s)."""

    name: str
    params: tuple[str, ...]
    apply: Callable[..., Schedule]
    doc: str


PRIMITIVES: dict[str, Primitive] = {}


def primitive(fn: Callable[..., Schedule]) -> Callable[..., Schedule]:
    """Register `fn(schedule, **args) -> Schedule` as the primitive named after it."""
    params = tuple(inspect.signature(fn).parameters)[1:]
    PRIMITIVES[fn.__name__] = Primitive(fn.__name__, params, fn, inspect.getdoc(fn) or "")
    return fn


class _Refuse:
    """Argument checks of one step, raising its primitive's errors."""

    def __init__(self, schedule: Schedule, name: str):
        self.schedule, self.name = schedule, name

    def loop(self, loop, what: str = "loop") -> str:
        names = self.schedule.kernel.loop_names
        if not isinstance(loop, str) or loop not in names:
            raise UnknownLoopError(f"no loop {loop!r} ({what}); the kernel's loops are {', '.join(names)}",
                                   primitive=self.name, loop=str(loop), hint=_hint(loop, names))
        return loop

    def level(self, level) -> str:
        levels = self.schedule.levels
        if not isinstance(level, str) or level not in levels:
            raise UnknownLoopError(f"no level {level!r}; the target's tiling levels are {', '.join(levels)}",
                                   primitive=self.name, hint=_hint(level, levels))
        return level

    def positive(self, value, what: str, loop: str = "") -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadArgumentError(f"{what} must be a positive integer, got {value!r}", primitive=self.name, loop=loop)
        return value


def _hint(name, known: Sequence[str]) -> str:
    if not isinstance(name, str):
        return ""
    return did_you_mean(name, known)


# --------------------------------------------------------------------------- the primitives


@primitive
def tile(schedule: Schedule, loop: str, level: str, size: int) -> Schedule:
    """Tile `loop` at `level` with tiles of `size` (at most the loop's extent; a size that
    does not divide leaves a remainder tile)."""
    check = _Refuse(schedule, "tile")
    loop, level = check.loop(loop), check.level(level)
    size = check.positive(size, "size", loop)
    extent = schedule.kernel.extents[loop]
    if size > extent:
        raise BadArgumentError(f"tile size {size} is larger than loop {loop} (extent {extent})",
                               primitive="tile", loop=loop, hint=f"use a size from 1 to {extent}")
    tiles = {l: dict(per) for l, per in schedule.tiles.items()}
    tiles.setdefault(loop, {})[level] = size
    return replace(schedule, tiles=tiles)


@primitive
def reorder(schedule: Schedule, level: str, order: Sequence[str]) -> Schedule:
    """The loop order at `level`, outer → inner; loops not listed follow in source order."""
    check = _Refuse(schedule, "reorder")
    level = check.level(level)
    if isinstance(order, str) or not isinstance(order, Sequence):
        raise BadArgumentError(f"order must be a list of loops, got {order!r}", primitive="reorder")
    order = tuple(check.loop(l) for l in order)
    if len(set(order)) != len(order):
        raise BadArgumentError(f"order lists a loop twice: {list(order)}", primitive="reorder")
    orders = dict(schedule.order)
    orders[level] = order
    return replace(schedule, order=orders)


@primitive
def interchange(schedule: Schedule, level: str, loop: str, other: str) -> Schedule:
    """Swap `loop` and `other` in the loop order at `level`; every other level keeps the
    order it runs now (the scheduling pass's move)."""
    check = _Refuse(schedule, "interchange")
    level, loop, other = check.level(level), check.loop(loop), check.loop(other, "other")
    if loop == other:
        raise BadArgumentError(f"a loop cannot be interchanged with itself ({loop})", primitive="interchange", loop=loop)
    orders = {lv: list(schedule.order_at(lv)) for lv in schedule.levels}   # other levels keep theirs
    order = orders[level]
    a, b = order.index(loop), order.index(other)
    order[a], order[b] = order[b], order[a]
    return replace(schedule, order={lv: tuple(o) for lv, o in orders.items()})


@primitive
def parallel(schedule: Schedule, loop: str) -> Schedule:
    """Run every tile and point loop over `loop` in parallel: it must carry no dependence,
    a reduction's included (a parallel reduction is a race)."""
    loop = _Refuse(schedule, "parallel").loop(loop)
    loops = tuple(schedule.annotations.get("parallel", ()) or ())
    return _annotate(schedule, parallel=loops + ((loop,) if loop not in loops else ()))


@primitive
def vectorize(schedule: Schedule, loop: str) -> Schedule:
    """`loop` is the one the vector unit runs (the cost model's vector tile; C's `omp simd`
    where it is the innermost point loop of an output)."""
    return _annotate(schedule, vectorize=_Refuse(schedule, "vectorize").loop(loop))


@primitive
def unroll(schedule: Schedule, loop: str, factor: int) -> Schedule:
    """Unroll the innermost point loop by `factor`; `loop` names it, and must be the
    innermost loop at the innermost level when the step runs (reorder first)."""
    check = _Refuse(schedule, "unroll")
    loop, factor = check.loop(loop), check.positive(factor, "factor")
    innermost = innermost_loop(schedule)
    if loop != innermost:
        raise BadArgumentError(f"loop {loop} is not the innermost loop ({innermost} is)", primitive="unroll",
                               loop=loop, hint=f"reorder the innermost level to end with {loop}, or unroll {innermost}")
    return _annotate(schedule, unroll=factor)


@primitive
def skew(schedule: Schedule, loop: str, by: str, factor: int) -> Schedule:
    """The point loop of `loop` runs over loop + factor*by in every statement with both
    loops; with `loop` outside `by` at the innermost level this is a wavefront."""
    check = _Refuse(schedule, "skew")
    loop, by = check.loop(loop), check.loop(by, "by")
    factor = check.positive(factor, "factor", loop)
    if loop == by:
        raise BadArgumentError(f"a loop cannot be skewed by itself ({loop})", primitive="skew", loop=loop)
    skews = tuple(schedule.annotations.get("skew", ()) or ())
    for other, other_by, _ in skews:
        if loop in (other, other_by) or by == other:
            raise BadArgumentError(f"loop {loop} by {by}: {other} is already skewed by {other_by} "
                                   "(one skew per pair of loops that no other skew touches)",
                                   primitive="skew", loop=loop)
    return _annotate(schedule, skew=skews + ((loop, by, factor),))


@primitive
def reverse(schedule: Schedule, loop: str) -> Schedule:
    """The point loop of `loop` runs from its last value down to its first."""
    loop = _Refuse(schedule, "reverse").loop(loop)
    loops = tuple(schedule.annotations.get("reverse", ()) or ())
    if loop in loops:
        raise BadArgumentError(f"loop {loop} is already reversed", primitive="reverse", loop=loop)
    return _annotate(schedule, reverse=loops + (loop,))


@primitive
def compute_at(schedule: Schedule, tensor: str, loop: str, level: str) -> Schedule:
    """Compute `tensor` (produced and consumed inside the kernel) in every tile of `loop` at
    `level`, over the region of it that tile reads: a convolution's rows with their halo,
    a contraction's hidden-dimension tile. It is then never held whole; a halo shared by
    neighbouring tiles is recomputed in each. Compute a chain's tensors consumer first (the
    region of each follows what the next reads)."""
    from .ir.loopnest import ComputeAtError, regions

    check = _Refuse(schedule, "compute_at")
    loop, level = check.loop(loop), check.level(level)
    kernel = schedule.kernel
    names = list(dict.fromkeys(st.target for st in kernel.statements))
    if not isinstance(tensor, str) or tensor not in names:
        raise UnknownLoopError(f"no tensor {tensor!r} computed in this kernel; it computes {', '.join(names)}",
                               primitive="compute_at", hint=_hint(tensor, names))
    if tensor == kernel.anchor_statement.target:
        raise BadArgumentError(f"{tensor} is the anchor's own tensor: compute its producers at its tiles",
                               primitive="compute_at", loop=loop)
    computed = kernel.with_compute_at(tensor, loop, level)
    try:
        regions(computed)
    except ComputeAtError as err:
        raise BadArgumentError(str(err), primitive="compute_at", loop=loop,
                               hint="only a tensor the kernel's anchor (or a tensor computed at its tiles) "
                                    "reads can be computed at the anchor's tiles") from None
    return replace(schedule, kernel=computed)


@primitive
def stage(schedule: Schedule, tensor: str, level: str) -> Schedule:
    """Hold `tensor`'s tiles at `level`: they are copied in before the loops of that level
    run, and reused from there, even where the level's roles (weights, activations,
    outputs) would let the tensor stream past it (a Gemmini accumulator holding inputs, a
    register file holding activations). The cost model charges the copies and the
    footprint; the pseudo-kernel shows the DMA."""
    check = _Refuse(schedule, "stage")
    level = check.level(level)
    names = [t.name for t in schedule.kernel.tensors]
    if not isinstance(tensor, str) or tensor not in names:
        raise UnknownLoopError(f"no tensor {tensor!r} in this kernel; it uses {', '.join(names)}",
                               primitive="stage", hint=_hint(tensor, names))
    staged = tuple(tuple(x) for x in schedule.annotations.get("stage", ()) or ())
    if (tensor, level) in staged:
        raise BadArgumentError(f"{tensor} is already staged at {level}", primitive="stage")
    return _annotate(schedule, stage=staged + ((tensor, level),))


def _annotate(schedule: Schedule, **values) -> Schedule:
    return replace(schedule, annotations={**schedule.annotations, **values})


def innermost_loop(schedule: Schedule) -> str:
    """The loop innermost at the innermost level (the one `unroll` unrolls)."""
    return schedule.order_at(schedule.levels[-1])[-1] if schedule.levels else schedule.kernel.loop_names[-1]


# --------------------------------------------------------------------------- applying steps


def apply_step(schedule: Schedule, step: Mapping[str, Any]) -> Schedule:
    """`schedule` with one step applied (arguments checked; legality is `replay`'s)."""
    if not isinstance(step, Mapping) or "primitive" not in step:
        raise BadArgumentError(f"a step is {{\"primitive\": NAME, ...arguments}}, got {step!r}")
    name = step["primitive"]
    prim = PRIMITIVES.get(name)
    if prim is None:
        raise BadArgumentError(f"unknown primitive {name!r}; the primitives are {', '.join(PRIMITIVES)}",
                               hint=_hint(name, list(PRIMITIVES)))
    args = {k: v for k, v in step.items() if k != "primitive"}
    missing = [p for p in prim.params if p not in args]
    extra = [a for a in args if a not in prim.params]
    if missing or extra:
        said = (f"missing {', '.join(missing)}" if missing else "") + \
               ("; " if missing and extra else "") + (f"unknown {', '.join(extra)}" if extra else "")
        raise BadArgumentError(f"{said} (takes {', '.join(prim.params)})", primitive=name,
                               hint=_hint(extra[0], prim.params) if extra else "")
    return prim.apply(schedule, **args)


def replay(kernel: Kernel, trace: Iterable[Mapping[str, Any]], levels: Sequence[str],
           filename: str = "schedule") -> Schedule:
    """The schedule `trace` builds from `kernel`'s untiled nest, every step's arguments
    checked, then isl's verdict on the result: if it is illegal, the first step after
    which it is illegal is named, with the dependence it breaks."""
    from . import poly

    steps = list(trace)
    kernel = kernel.without_compute_at()     # the trace says where (compute_at steps)
    schedules = [Schedule.default(kernel, levels)]
    for index, step in enumerate(steps):
        try:
            schedules.append(apply_step(schedules[-1], step))
        except ScheduleError as err:
            raise type(err)(_message(err), kernel=kernel.name, primitive=err.primitive, loop=err.loop, step=index,
                            hint=err.diagnostics[0].hint, filename=filename) from None
    verdict = poly.check_schedule(schedules[-1])
    if verdict.ok:
        return schedules[-1]
    for index in range(1, len(schedules)):       # the first illegal prefix: its last step is to blame
        prefix = poly.check_schedule(schedules[index])
        if not prefix.ok:
            step = steps[index - 1]
            raise IllegalStepError(prefix.reason, kernel=kernel.name, primitive=step["primitive"],
                                   loop=str(step.get("loop", "")), step=index - 1, filename=filename,
                                   hint=_illegal_hint(step))
    raise IllegalStepError(verdict.reason, kernel=kernel.name, filename=filename)


def _message(err: ScheduleError) -> str:
    text = err.diagnostics[0].message
    return text.split(": ", 1)[1] if err.primitive and text.startswith(err.primitive + ":") else text


def _illegal_hint(step: Mapping) -> str:
    return {"parallel": "leave this loop sequential (a reduction loop never runs in parallel, nor one whose "
                        "tiles recompute a shared region)",
            "skew": "try the other order of the two loops, or a different factor",
            "reverse": "a loop that carries a dependence must keep its direction",
            "reorder": "keep the loop that carries the dependence outside",
            "compute_at": "leave the loops around the compute point sequential, or compute it at a loop "
                          "its region follows"}.get(step["primitive"], "")


# --------------------------------------------------------------------------- Schedule → trace


def trace_of(schedule: Schedule) -> list[Step]:
    """The trace that builds `schedule` from its kernel's untiled nest: tiles level by
    level (outer → inner, loops in source order), reorders, then the annotations.
    `replay(kernel, trace_of(s), s.levels)` lowers to the same nest and costs the same."""
    kernel, steps = schedule.kernel, []
    extents = kernel.extents
    for level in schedule.levels:
        for loop in kernel.loop_names:
            size = schedule.tiles.get(loop, {}).get(level)
            if size is not None:
                steps.append({"primitive": "tile", "loop": loop, "level": level, "size": min(size, extents[loop])})
    for level in schedule.levels:
        if level in schedule.order:
            steps.append({"primitive": "reorder", "level": level, "order": list(schedule.order[level])})
    # consumers first, as `compute_at` asks (each region follows what the later ones read),
    # whatever order the search or the tuner moved the compute points in
    written = {st.target: i for i, st in enumerate(kernel.statements)}
    for tensor, loop, level in sorted(kernel.compute_at, key=lambda c: -written[c[0]]):
        steps.append({"primitive": "compute_at", "tensor": tensor, "loop": loop, "level": level})
    ann = schedule.annotations
    for tensor, level in ann.get("stage", ()) or ():
        steps.append({"primitive": "stage", "tensor": tensor, "level": level})
    for loop, by, factor in ann.get("skew", ()) or ():
        steps.append({"primitive": "skew", "loop": loop, "by": by, "factor": int(factor)})
    for loop in ann.get("reverse", ()) or ():
        steps.append({"primitive": "reverse", "loop": loop})
    for loop in ann.get("parallel", ()) or ():
        steps.append({"primitive": "parallel", "loop": loop})
    if ann.get("vectorize"):
        steps.append({"primitive": "vectorize", "loop": ann["vectorize"]})
    if int(ann.get("unroll") or 0) > 1:
        steps.append({"primitive": "unroll", "loop": innermost_loop(schedule), "factor": int(ann["unroll"])})
    return steps


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
        "trace": trace_of(schedule),
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
        call.__doc__ = PRIMITIVES[name].doc
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
        path = Path(source)
        filename = str(source)
        try:
            text = path.read_text()
        except OSError as err:
            raise UserError(f"cannot read the schedule file: {err.strerror or err}", filename=filename) from None
        try:
            source = json.loads(text)
        except json.JSONDecodeError as err:
            raise UserError(Diagnostic(f"not JSON: {err.msg}", err.lineno, err.colno,
                                       hint="pass a report written by `autocomp optimize --json`"),
                            source=text, filename=filename) from None
    if isinstance(source, Mapping) and "kernels" in source:
        kernels = source["kernels"]
        if not isinstance(kernels, list):
            raise UserError("\"kernels\" must be a list of {\"name\", \"trace\"}", filename=filename)
        out = {}
        for n, entry in enumerate(kernels):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or "trace" not in entry:
                raise UserError(f"kernels[{n}] has no \"name\" and \"trace\" (a report from before traces?)",
                                filename=filename)
            out[entry["name"]] = entry["trace"]
        source = out
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
    raise UserError([Diagnostic(f"no kernel named {m!r} in this program's plan", hint=_hint(m, names) or
                                f"kernels: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
                     for m in missing], filename=filename)
