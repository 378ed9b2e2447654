"""The report numbers a refactor must not change: the cases, what is kept of a report, and the comparison.

A case is a program text (an example, a fuzz reproducer or a generated program, stored in the
golden file itself so that a change to the generator cannot move it), a preset and a tuning
budget. What is kept of its report is every number a user reads and every schedule it shows:
the four versions' time, energy and bytes, the gain chain, the speedups and fractions, and each
kernel's ops, loops, tiles, orders, annotations, trace, metrics, bound and limits. Wall-clock
fields (`seconds`, `seconds_by_pass`, tuning times) are left out.

Regenerate with `UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py` (or run this file)
and review the diff: a report number moves only when a change means it to.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "reports.json"

PRESETS = ("npu", "tpu", "gpu", "gemmini", "host")
# Large examples cost seconds each: they are checked on two presets, the rest on all five.
_SLOW_EXAMPLES = {"llama_decoder_layer", "moe_decode", "resnet_basic_block"}
_GENERATED_SEEDS = range(1000, 1024)


def cases() -> list[dict]:
    """Every case: {id, source, preset, tune}. Sources are read now, stored in the golden file."""
    from benchmarks.fuzzing.programs import generate

    out = []
    for path in sorted((ROOT / "examples").glob("*.acir")):
        presets = ("npu", "host") if path.stem in _SLOW_EXAMPLES else PRESETS
        for preset in presets:
            out.append({"id": f"example-{path.stem}-{preset}-t0", "source": path.read_text(), "preset": preset, "tune": 0})
        if path.stem not in _SLOW_EXAMPLES:
            out.append({"id": f"example-{path.stem}-tpu-t24", "source": path.read_text(), "preset": "tpu", "tune": 24})
    for path in sorted((Path(__file__).parent / "fuzz_repros").glob("*.acir")):
        for preset in ("npu", "host"):
            out.append({"id": f"repro-{path.stem}-{preset}-t0", "source": path.read_text(), "preset": preset, "tune": 0})
    for seed in _GENERATED_SEEDS:
        text = generate(seed).text
        preset = PRESETS[seed % len(PRESETS)]
        out.append({"id": f"generated-{seed}-{preset}-t0", "source": text, "preset": preset, "tune": 0})
        if seed % 4 == 0:
            out.append({"id": f"generated-{seed}-npu-t16", "source": text, "preset": "npu", "tune": 16})
    return out


_VERSION_KEYS = ("time_s", "cycles", "energy_j", "bytes")
_TOP_KEYS = ("verified", "gain_breakdown", "gain_chain_time_s", "speedup_vs_naive", "speedup_vs_textbook",
             "speedup_vs_library", "roofline_fraction", "limit_fraction", "area_mm2", "fell_back")
_KERNEL_KEYS = ("name", "ops", "loops", "extents", "order", "order_by_level", "annotations", "tiles", "metrics",
                "bound", "limits_s", "trace")


def kept(report: dict) -> dict:
    """The part of a report the golden file holds (every number and schedule; no wall-clock time)."""
    out = {key: report.get(key) for key in _TOP_KEYS}
    for version in ("naive", "textbook", "library", "optimized"):
        out[version] = {key: report[version].get(key) for key in _VERSION_KEYS} if report.get(version) else None
    out["kernels"] = [{key: kernel.get(key) for key in _KERNEL_KEYS} for kernel in report["kernels"]]
    out["rollbacks"] = len(report.get("rollbacks") or [])
    return json.loads(json.dumps(out))


# The host preset describes the machine it loads on (`accel.target.detect_host`: clock, SIMD
# lanes, caches, cores) and floors its compute at the FMA rate a core sustains there
# (`accel.host_peak`): its numbers are recorded and checked on this one description instead,
# so that they hold on every machine (an AVX2 core at 2.45 GHz with 32 MiB of L3).
PINNED_HOST = {"cores": 2, "lanes": 8, "fma_units": 2,
               "caches": {"L1": 32 * 1024, "L2": 512 * 1024, "L3": 32 * 2**20},
               "clock_ghz": 2.445, "dram_gbps": 20.0}


def optimized(case: dict):
    """The case's `Result` (on the pinned host description)."""
    from unittest import mock

    from autocomp_jupyter.pipeline import optimize

    with mock.patch("autocomp_jupyter.accel.target.detect_host",
                    lambda: {**PINNED_HOST, "caches": dict(PINNED_HOST["caches"])}), \
            mock.patch("autocomp_jupyter.accel.limit.compute_ceiling", lambda target: 1.0):
        return optimize(case["source"], target=case["preset"], tune=case["tune"], seed=0)


def run_case(case: dict) -> dict:
    return kept(optimized(case).report)


def assert_within_the_limit(label, r: dict) -> None:
    """No version of a report beats its physical limit, and the report carries the limit:
    its fraction of the optimised time and what bounds it (DRAM, a datapath or a port)."""
    import pytest

    limit = r["limit"]["time_s"]
    for version in ("naive", "textbook", "library", "optimized"):
        assert limit <= r[version]["time_s"] * (1 + 1e-9), (label, version)
    assert r["limit_fraction"] == pytest.approx(limit / r["optimized"]["time_s"]), label
    assert 0 < r["limit_fraction"] <= 1 + 1e-9, label
    assert r["limit"]["bound"] in {"DRAM", *r["limit"]["datapaths_s"], *r["limit"]["ports_s"]}, label


def assert_every_kernel_replays(label, res) -> None:
    """Every kernel of the optimised, library and naive plans is its trace: replaying the
    trace on the kernel gives the same loop nest and the same cost, with the primitives of
    `schedule.PRIMITIVES` only, and the report's kernels carry those traces."""
    from autocomp_jupyter import canon
    from autocomp_jupyter.ir.loopnest import lower
    from autocomp_jupyter.schedule import PRIMITIVES, replay

    assert [k["trace"] for k in res.report["kernels"]] == [s.trace for s in res.after.schedules], label
    for plan in (res.after, res.library, res.before):
        for kernel, schedule in zip(plan.kernels, plan.schedules):
            assert schedule.levels == res.target.tiling_levels, (label, kernel.name)
            again = replay(kernel, schedule.trace, schedule.levels)
            assert lower(again).pretty() == lower(schedule).pretty(), (label, kernel.name)
            assert canon.evaluate(again, res.target).time_s == canon.evaluate(schedule, res.target).time_s, \
                (label, kernel.name)
            assert {s["primitive"] for s in schedule.trace} <= set(PRIMITIVES), (label, kernel.name)


def assert_report_invariants(label, r: dict, ops: int) -> None:
    """What every report holds whatever its numbers (`ops`: the program's op count): verified,
    every version's time finite, never slower than the library, the gain chain multiplying to
    the speedup, fusion gaining exactly nothing where nothing fused, and a fusion that cut DRAM
    traffic without a rollback faster. `r`: a report or its kept part."""
    import pytest

    assert r["verified"], (label, r["rollbacks"])
    for block in ("naive", "textbook", "library", "optimized"):
        assert math.isfinite(r[block]["time_s"]) and r[block]["time_s"] > 0, (label, block)
    assert r["speedup_vs_library"] >= 1.0 - 1e-9, (label, r["rollbacks"])
    assert math.prod(r["gain_breakdown"].values()) == pytest.approx(r["speedup_vs_library"]), label
    if len(r["kernels"]) == ops:        # nothing fused: fusion gains exactly nothing
        assert r["gain_breakdown"]["fusion"] == pytest.approx(1.0), label
    fused = len(r["kernels"]) < ops
    if fused and r["optimized"]["bytes"]["DRAM"] < r["library"]["bytes"]["DRAM"] and not r["rollbacks"]:
        assert r["speedup_vs_library"] > 1.0, label


def differences(expected, actual, path: str = "", rel: float = 1e-9) -> list[str]:
    """Where `actual` departs from `expected` (numbers within `rel` relative error agree)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{path}.{k}: missing" for k in expected if k not in actual]
        out += [f"{path}.{k}: unexpected" for k in actual if k not in expected]
        for key in expected:
            if key in actual:
                out += differences(expected[key], actual[key], f"{path}.{key}", rel)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items, now {len(actual)}: {expected!r} -> {actual!r}"[:400]]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{path}[{i}]", rel)]
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool):
        if expected == actual or math.isclose(expected, actual, rel_tol=rel, abs_tol=1e-300):
            return []
        return [f"{path}: {expected!r} -> {actual!r}"]
    return [] if expected == actual else [f"{path}: {expected!r} -> {actual!r}"[:400]]


def write_golden() -> None:
    records = {}
    for case in cases():
        records[case["id"]] = {**case, "report": run_case(case)}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_golden()
