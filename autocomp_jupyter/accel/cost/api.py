"""The cost model's entry points: score a batch of schedules, one schedule, a program.

`evaluate_batch` scores many candidate schedules of one kernel at once (the tuner's and
the tiling search's view); `evaluate` one scheduled kernel; `evaluate_program` kernels run
one after another; `baseline_costs` the untuned baselines. `carried_halos` tells the code
listings which computed-at statements carry their halo from tile to tile. `unroll_note` says
what a schedule's unroll costs in registers (capacity.py's `unroll_pressure`), and
`fitting_unroll` is the largest unroll up to a factor that the registers hold.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...ir.program import Program
from ...ir.schedule import Kernel, Schedule, kernels_unfused
from ..target import load_target
from .model import kernel_model, naive_schedule, textbook_schedule
from .results import BatchCost, KernelCost, ProgramCost, combine


def evaluate_batch(kernel: Kernel, target, tiles, orders=None, parallel=None, vectorize=None,
                   unroll=None) -> BatchCost:
    """Score many schedules of one kernel at once.

    tiles: int [n, loops, levels] (kernel.loops order × target.tiling_levels, outer → inner;
    a value <= 0 keeps the enclosing tile); orders: int [n, loops] (one permutation of loop
    indices, outer → inner, for every level) or [n, levels, loops]; parallel: bool [n, loops]
    (default: the anchor's output loops); vectorize: int [n] loop index (-1: innermost loop);
    unroll: [n] factors of the innermost point loop (default: not unrolled).
    """
    return kernel_model(kernel, load_target(target)).evaluate_batch(tiles, orders, parallel, vectorize, unroll)


def evaluate(schedule: Schedule, target) -> KernelCost:
    """The cost of one scheduled kernel."""
    target = load_target(target)
    model = kernel_model(schedule.kernel, target, schedule.stage)
    return model.evaluate_batch(*model.schedule_arrays(schedule), unroll=schedule.unroll).row(0, schedule.kernel.name)


def evaluate_program(schedules: Sequence[Schedule], target, evaluate_kernel=None) -> ProgramCost:
    """Costs of kernels run in sequence, and their total (each kernel's from
    `evaluate_kernel(schedule, target)`, default `evaluate`)."""
    target = load_target(target)
    kernels = [(evaluate_kernel or evaluate)(s, target) for s in schedules]
    return ProgramCost(target=target.name, kernels=kernels, total=combine(kernels, target))


def baseline_costs(program: Program, target) -> dict[str, ProgramCost]:
    """The untuned baselines (unfused kernels): naive and textbook. The tuned `library`
    baseline needs the passes and the tuner: `baselines.library_plan`."""
    target = load_target(target)
    kernels = kernels_unfused(program)
    return {
        "naive": evaluate_program([naive_schedule(k, target) for k in kernels], target),
        "textbook": evaluate_program([textbook_schedule(k, target) for k in kernels], target),
    }


def carried_halos(schedule: Schedule, target) -> set[int]:
    """Statements of `schedule`'s kernel computed at its tiles whose halo along the compute
    loop is carried from tile to tile (`_ProducerModel.carries`), for the code listings."""
    target = load_target(target)
    model = kernel_model(schedule.kernel, target)
    if not model.producers:
        return set()
    _, _, parallel, _ = model.normalise(*model.schedule_arrays(schedule))
    return {i for p in model.producers if bool(p.carries(parallel)[0]) for i in p.group}


def fitting_unroll(schedule: Schedule, target, factor: int | None = None) -> int:
    """The largest of `factor` (default: the schedule's) and its halvings whose unrolled body
    the registers hold (no spill charged; 1 when even the smallest spills): what the
    scheduling pass and the tuner give a schedule, so that neither keeps an unroll the cost
    model charges for."""
    target = load_target(target)
    factor = int(schedule.unroll if factor is None else factor)
    if factor <= 1:
        return max(factor, 1)
    model = kernel_model(schedule.kernel, target, schedule.stage)
    arrays = model.schedule_arrays(schedule)
    if not any((p.excess > 0).any() for p in model.unroll_pressures(*arrays, unroll=factor)):
        return factor                 # the usual case: one schedule, costed once (cached)
    candidates = factor >> np.arange(1, factor.bit_length())      # halved: 8 -> 4, 2, 1 (the unroll control's stops)
    n = len(candidates)
    pressures = model.unroll_pressures(np.repeat(arrays[0], n, axis=0), np.repeat(arrays[1], n, axis=0),
                                       None if arrays[2] is None else np.repeat(arrays[2][None], n, axis=0),
                                       np.repeat(arrays[3], n), candidates)
    spills = sum((p.excess > 0 for p in pressures), np.zeros(n, dtype=bool))
    return int(candidates[np.argmax(~spills)]) if (~spills).any() else 1


def unroll_note(schedule: Schedule, target) -> str:
    """What `schedule`'s unroll costs, in one sentence ('' when it does not unroll): the
    values its unrolled body keeps live against the register level, and the spill charged
    (bytes per body, over the run, and the time it adds), or why nothing is charged."""
    target = load_target(target)
    factor = schedule.unroll
    if factor <= 1:
        return ""
    model = kernel_model(schedule.kernel, target, schedule.stage)
    arrays = model.schedule_arrays(schedule)
    reg = target.on_chip[-1]
    pressures = model.unroll_pressures(*arrays, unroll=factor)
    if not pressures:
        return (f"unroll {factor} is not charged: every statement runs on the PE array or keeps its values in "
                f"the {reg.name} tile it already holds, so no operand stays live beside it")
    worst = max(pressures, key=lambda p: (float(p.excess[0]), float(p.live[0])))
    loop = model.loop_names[int(worst.loop[0])]
    eff = int(worst.factor[0])
    capped = f" (capped at the {eff} steps of {loop} in a tile)" if eff < factor else ""
    held, live, cap = float(worst.held[0]), float(worst.live[0]), worst.capacity
    kept = (f"unroll {factor} of {loop}{capped} keeps {eff} steps of operands live: {_bytes(live)} beside the "
            f"{_bytes(held)} tile, {(held + live) / cap:.2f}x the {_bytes(cap)} {reg.name}")
    if worst.excess[0] <= 0:
        return kept + " - they fit: no spill, no charge (no target field prices unroll's saved loop overhead)"
    spilled = sum(float(p.traffic[0]) for p in pressures)
    with_unroll = model.evaluate_batch(*arrays, unroll=factor).time_s[0]
    without = model.evaluate_batch(*arrays).time_s[0]
    nxt = target.memory[1].name
    return (kept + f": {_bytes(float(worst.excess[0]))} per body spill to {nxt} and back, {_bytes(spilled)} "
            f"over the run, +{(with_unroll - without) * 1e6:.3g} µs")


def _bytes(x: float) -> str:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B"
