"""The cost model's entry points: score a batch of schedules, one schedule, a program.

`evaluate_batch` scores many candidate schedules of one kernel at once (the tuner's and
the tiling search's view); `evaluate` one scheduled kernel; `evaluate_program` kernels run
one after another; `baseline_costs` the untuned baselines. `carried_halos` tells the code
listings which computed-at statements carry their halo from tile to tile.
"""
from __future__ import annotations

from typing import Sequence

from ...ir.program import Program
from ...ir.schedule import Kernel, Schedule, kernels_unfused
from ..target import load_target
from .model import kernel_model, naive_schedule, textbook_schedule
from .results import BatchCost, KernelCost, ProgramCost, combine


def evaluate_batch(kernel: Kernel, target, tiles, orders=None, parallel=None, vectorize=None) -> BatchCost:
    """Score many schedules of one kernel at once.

    tiles: int [n, loops, levels] (kernel.loops order × target.tiling_levels, outer → inner;
    a value <= 0 keeps the enclosing tile); orders: int [n, loops] (one permutation of loop
    indices, outer → inner, for every level) or [n, levels, loops]; parallel: bool [n, loops]
    (default: the anchor's output loops); vectorize: int [n] loop index (-1: innermost loop).
    """
    return kernel_model(kernel, load_target(target)).evaluate_batch(tiles, orders, parallel, vectorize)


def evaluate(schedule: Schedule, target) -> KernelCost:
    """The cost of one scheduled kernel."""
    target = load_target(target)
    model = kernel_model(schedule.kernel, target, schedule.stage)
    return model.evaluate_batch(*model.schedule_arrays(schedule)).row(0, schedule.kernel.name)


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
