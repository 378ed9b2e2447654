"""A hand-made Result for the UI tests: real Program, Kernels, Schedules and cost-model
numbers, shaped exactly like DESIGN §8, without running the pipeline."""
from __future__ import annotations

from autocomp_jupyter.accel.cost import evaluate, evaluate_program, naive_schedule
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, Schedule, kernels_unfused
from autocomp_jupyter.result import Plan, Result

SOURCE = """\
input A: f32[256, 128]
input B: f32[128, 256]
C = matmul(A, B)
D = relu(C)
output D
"""


def make_result(target_name: str = "tpu") -> Result:
    target = load_target(target_name)
    program = parse(SOURCE, filename="<cell>")
    levels = target.tiling_levels
    unfused = kernels_unfused(program)
    before = Plan(program, unfused, tuple(naive_schedule(k, target) for k in unfused), "naive")
    fused = Kernel.from_ops(program, ["C", "D"])
    tiles = {"i": {levels[0]: 128, levels[-1]: 32}, "j": {levels[0]: 128, levels[-1]: 32},
             "k": {levels[0]: 64, levels[-1]: 16}}
    schedule = Schedule(fused, tiles=tiles, order={levels[0]: ("i", "j", "k")},
                        annotations={"parallel": ("i",), "vectorize": "j"}, levels=levels)
    after = Plan(program, (fused,), (schedule,), "optimized")
    naive = evaluate_program(before.schedules, target).total
    optimized = evaluate_program(after.schedules, target).total
    kcost = evaluate(schedule, target)
    flops = float(program.flops)
    dram = target.dram_bandwidth
    report = {
        "version": 1, "target": target.name, "verified": True,
        "naive": naive.summary(), "library": naive.summary(), "optimized": optimized.summary(),
        "speedup_vs_naive": naive.time_s / optimized.time_s, "speedup_vs_library": naive.time_s / optimized.time_s,
        "roofline_fraction": 0.42,
        "kernels": [{"name": fused.name, "ops": list(fused.ops), "loops": list(fused.loop_names),
                     "order": list(schedule.order_at(levels[0])), "annotations": dict(schedule.annotations),
                     "tiles": schedule.tiles, "metrics": kcost.metrics()}],
        "rules": [{"rule": "epilogue", "pass": "fusion", "ops": ["C", "D"], "applied": True, "why": "relu reads only C"},
                  {"rule": "conv_relu", "pass": "fusion", "ops": [], "applied": False, "why": "no conv2d in the program"}],
        "rollbacks": [{"pass": "scheduling", "kernel": fused.name, "reason": "skew broke dependence C[i,j] -> C[i,j]"}],
        "tuning": {"configs_evaluated": 40, "seconds": 0.5, "top": [{"name": "top1", "time_s": optimized.time_s}]},
        "monitor": {"bw_util": 0.7, "occupancy": 0.5},
        "roofline": {"peak_flops": target.peak_flops("f32"), "dram_bw": dram, "points": [
            {"label": "naive", "ai": flops / naive.dram_bytes, "flops_per_s": flops / naive.time_s},
            {"label": "optimized", "ai": flops / optimized.dram_bytes, "flops_per_s": flops / optimized.time_s}]},
    }

    def evaluate_variant(kernel_name, tiles=None, order=None):
        base = after.schedule_of(kernel_name)
        for loop, per in (tiles or {}).items():
            sizes = [per[lv] for lv in levels if lv in per]
            if sizes != sorted(sizes, reverse=True):
                return {"legal": False, "reason": f"tile of {loop} at {levels[-1]} exceeds its {levels[0]} tile",
                        "metrics": {}, "time_s": None, "roofline_point": None}
        variant = Schedule(base.kernel, tiles=tiles or base.tiles, order=order or base.order,
                           annotations=base.annotations, levels=levels)
        cost = evaluate(variant, target)
        return {"legal": True, "reason": "all dependences stay lexicographically positive",
                "metrics": cost.metrics(), "time_s": cost.time_s,
                "roofline_point": {"ai": flops / cost.dram_bytes, "flops_per_s": flops / cost.time_s}}

    return Result(program=program, target=target, before=before, library=before, after=after, report=report,
                  versions={"top1": after}, evaluate_variant=evaluate_variant)
