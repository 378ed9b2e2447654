"""Answer checks for the autocomp-jupyter course notebooks (tutorials/01..08).

Each `check_*` helper takes the student's answer (plus whatever it needs to recompute the
truth) and either prints a short "correct" line or raises AssertionError with a hint that
says what is wrong — never just "wrong". The helpers recompute the truth from the library
itself (the report, the cost model, isl), so they stay right if the model is retuned.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import autocomp_jupyter as autocomp


def _ok(message: str) -> None:
    print("correct: " + message)


def _number(value, what: str) -> float:
    assert isinstance(value, (int, float)) and not isinstance(value, bool), \
        f"{what} should be a number, got {type(value).__name__} {value!r}"
    return float(value)


def _kernel_ops(res) -> list[list[str]]:
    return [list(k["ops"]) for k in res.report["kernels"]]


# --------------------------------------------------------------------------- 01 quick start


def check_quick_start(res, speedup, roofline_fraction, verified) -> None:
    """Tutorial 01: read three fields of the report of `res`."""
    report = res.report
    s = _number(speedup, "speedup")
    assert not math.isclose(s, report["speedup_vs_library"], rel_tol=1e-9) or \
        math.isclose(report["speedup_vs_library"], report["speedup_vs_naive"], rel_tol=1e-9), \
        "that is the speedup over the *library* baseline; the question asks for the speedup over the naive plan " \
        "(report['speedup_vs_naive'], also res.speedup)"
    assert math.isclose(s, report["speedup_vs_naive"], rel_tol=1e-6), \
        f"speedup {s!r} does not match the report: look at report['speedup_vs_naive'] (or res.speedup)"
    r = _number(roofline_fraction, "roofline_fraction")
    assert 0 < r <= 1.0 + 1e-9 or r == report["roofline_fraction"], \
        f"a roofline fraction is in (0, 1], got {r}: it is attained FLOP/s over the roofline's attainable FLOP/s"
    assert math.isclose(r, report["roofline_fraction"], rel_tol=1e-6), \
        f"roofline_fraction {r!r} does not match report['roofline_fraction']"
    assert isinstance(verified, bool), f"verified is True or False, got {verified!r}"
    assert verified == bool(report["verified"]), "verified does not match report['verified']"
    _ok(f"{s:.2f}x over naive, {r:.0%} of the roofline, verified={verified}")


# --------------------------------------------------------------------------- 02 fusion


def check_fusion_groups(src: str, groups, target: str = "tpu", rules=None) -> None:
    """Tutorial 02: predict the kernels (lists of op names) the fusion pass forms for `src`."""
    assert isinstance(groups, (list, tuple)) and all(isinstance(g, (list, tuple)) for g in groups), \
        f"write the kernels as a list of lists of op names, e.g. [['C', 'D'], ['E']]; got {groups!r}"
    res = autocomp.optimize(src, target=target, tune=0, rules=rules)
    truth = _kernel_ops(res)
    mine = [list(g) for g in groups]
    flat = sorted(op for g in mine for op in g)
    assert flat == sorted(op for g in truth for op in g), \
        f"every op belongs to exactly one kernel: the ops are {sorted(op for g in truth for op in g)}, you listed {flat}"
    assert sorted(map(sorted, mine)) == sorted(map(sorted, truth)), \
        f"not the kernels the pipeline forms ({len(truth)} kernel(s), you gave {len(mine)}). Hint: a producer fuses " \
        "with its consumer only if that consumer is its ONLY reader and the producer is not a program output; " \
        "check the report's rules list for which rule fired"
    _ok(f"kernels {truth}")


def check_disable_rule(rule_yaml: str, src: str, rule: str, target: str = "tpu", path: str = "my_rules.yaml") -> None:
    """Tutorial 02: a rule file (YAML text) that switches `rule` off, so it no longer fires."""
    assert isinstance(rule_yaml, str) and rule_yaml.strip(), "write the rule file as a YAML string"
    Path(path).write_text(rule_yaml)
    try:
        res = autocomp.optimize(src, target=target, tune=0, rules=[path])
    except autocomp.UserError as err:
        raise AssertionError(f"the rule file does not load:\n{err}") from None
    entries = [e for e in res.report["rules"] if e["rule"] == rule]
    assert entries, f"rule {rule!r} is not in the report at all: did you name it correctly?"
    assert not any(e["applied"] for e in entries), \
        f"rule {rule!r} still fired; set `enabled: false` on it under fusion.rules (rules merge by name)"
    assert any(e["why"] == "disabled" for e in entries), f"rule {rule!r} did not fire, but not because it is disabled"
    _ok(f"{rule} is reported as 'disabled'; kernels now {_kernel_ops(res)}")


def check_max_depth(depth, src: str, want_kernels: int, target: str = "tpu") -> None:
    """Tutorial 02: the largest max_fusion_depth for which `src` splits into `want_kernels` kernels."""
    assert isinstance(depth, int) and not isinstance(depth, bool) and depth >= 1, \
        f"max_fusion_depth is an integer >= 1, got {depth!r}"

    def kernels_at(d: int) -> int:
        path = Path(f"_depth_{d}.yaml")
        path.write_text(f"fusion:\n  params: {{max_fusion_depth: {d}}}\n")
        try:
            return len(autocomp.optimize(src, target=target, tune=0, rules=[str(path)]).report["kernels"])
        finally:
            path.unlink()

    got = kernels_at(depth)
    assert got == want_kernels, \
        f"with max_fusion_depth {depth} the program has {got} kernel(s), not {want_kernels}: " \
        "a kernel holds at most max_fusion_depth ops"
    assert depth == 1 or kernels_at(depth + 1) != want_kernels, \
        f"depth {depth} works, but so does {depth + 1}: the question asks for the LARGEST depth"
    _ok(f"max_fusion_depth {depth} gives {want_kernels} kernels")


# --------------------------------------------------------------------------- 03 tiling


def tile_footprint(res, kernel: str, level: str) -> int:
    """The bytes of `kernel`'s tiles at memory `level`, as the cost model counts them."""
    import numpy as np

    from autocomp_jupyter.accel.cost import kernel_model

    k = res.kernel(kernel)
    schedule = res.after.schedule_of(kernel)
    model = kernel_model(k, res.target)
    names = [m.name for m in res.target.on_chip]
    sizes = schedule.tile_sizes(names)
    tiles = np.array([[sizes[loop.name][h] for h in range(len(names))] for loop in k.loops])
    return int(model.capacity_footprints(tiles[None])[0][names.index(level)])


def check_footprint(res, kernel: str, level: str, answer) -> None:
    """Tutorial 03: the footprint (bytes) of the tiles one kernel keeps at `level`."""
    a = _number(answer, "the footprint")
    truth = tile_footprint(res, kernel, level)
    held = [m for m in res.target.on_chip if m.name == level][0]
    assert a != truth / 4, "that is the number of elements; the footprint is in bytes (f32: 4 bytes each)"
    assert math.isclose(a, truth, rel_tol=1e-6), \
        f"{a:g} bytes is not the footprint at {level}. Hint: add up, for every tensor this level holds " \
        f"(holds: {held.holds or 'all'}), the product of its tile sizes at {level}, times 4 bytes; the tiles are " \
        f"in res.report['kernels'][...]['tiles']"
    _ok(f"{truth} bytes = {truth / held.size_bytes:.0%} of {level}'s {held.size_bytes:.0f} bytes")


def check_smaller_memory(res_big, res_small) -> None:
    """Tutorial 03: a target with less on-chip memory makes the optimised program slower."""
    big, small = res_big.report, res_small.report
    assert small["target"] != big["target"] or res_small.target != res_big.target, \
        "res_small must use your modified target, not the original one"
    assert small["verified"], "the result on the small target must still be verified"
    assert small["optimized"]["time_s"] > big["optimized"]["time_s"] * 1.05, \
        f"the program is not slower on your target ({small['optimized']['time_s'] * 1e6:.1f} us vs " \
        f"{big['optimized']['time_s'] * 1e6:.1f} us): make the on-chip memory small enough that the tiles must shrink"
    _ok(f"{big['optimized']['time_s'] * 1e6:.1f} us -> {small['optimized']['time_s'] * 1e6:.1f} us, roofline "
        f"{big['roofline_fraction']:.0%} -> {small['roofline_fraction']:.0%}")


# --------------------------------------------------------------------------- 04 legality


def check_carrying_loop(answer, statements) -> None:
    """Tutorial 04: the loop that carries GEMM's flow dependence on C."""
    from autocomp_jupyter import poly

    assert isinstance(answer, str), f"answer with a loop name as a string, e.g. 'i'; got {answer!r}"
    carried = {d.carried_by for d in poly.dependence_distances(statements) if d.kind == "flow"}
    assert answer in carried, \
        f"loop {answer!r} carries no flow dependence: a dependence is carried by the outermost loop along which " \
        "its distance is non-zero (look at the distance vectors printed above)"
    _ok(f"{answer} carries the accumulation C[i, j] += ..., so it cannot be reversed strictly nor run in parallel")


def check_legal_schedule(schedule, statements) -> None:
    """Tutorial 04: a legal schedule of the kernel that is not the original order."""
    from autocomp_jupyter import poly

    assert isinstance(schedule, poly.KernelSchedule), \
        f"build a KernelSchedule from poly.original_schedule(...) and its transformations; got {type(schedule).__name__}"
    original = poly.original_schedule(statements)
    assert str(schedule) != str(original), "that is the original schedule; transform it (interchange, tile, ...)"
    verdict = poly.check_legal(statements, schedule)
    assert verdict.ok, f"isl refuses this schedule: {verdict.reason}"
    _ok("isl accepts:\n" + str(schedule))


def check_parallel_loops(answer, statements) -> None:
    """Tutorial 04: the set of GEMM loops that may run in parallel."""
    from autocomp_jupyter import poly

    assert isinstance(answer, (set, list, tuple)), f"answer with a set of loop names, got {answer!r}"
    truth = set(poly.parallel_loops(statements))
    mine = set(answer)
    assert not (mine - truth), f"{sorted(mine - truth)} carr(ies) a dependence: running it in parallel is a race"
    assert not (truth - mine), f"you missed {sorted(truth - mine)}: it carries no dependence"
    _ok(f"parallel loops {sorted(truth)}")


# --------------------------------------------------------------------------- 05 tuning


def check_variant(res, kernel: str, tiles, within: float = 1.5) -> None:
    """Tutorial 05: hand-picked tiles that are legal, do not spill, and are within `within`x of the tuner's best."""
    assert isinstance(tiles, dict), f"tiles is a dict {{loop: {{level: size}}}}, got {tiles!r}"
    v = res.evaluate_variant(kernel, tiles=tiles)
    assert v["legal"], f"the variant is refused: {v['reason']}"
    spill = v["metrics"].get("spill_ratio", 0.0)
    assert spill <= 0.05, f"these tiles overflow the memory (spill_ratio {spill:.2f}): make them smaller"
    best = res.report["optimized"]["time_s"]
    assert v["time_s"] <= within * best, \
        f"{v['time_s'] * 1e6:.2f} us is more than {within}x the tuned {best * 1e6:.2f} us: look at the top " \
        "versions' tiles in res.report['tuning']['top'] for what works"
    _ok(f"{v['time_s'] * 1e6:.2f} us (tuned best {best * 1e6:.2f} us)")


def check_fastest_version(res, answer) -> None:
    """Tutorial 05: the name of the fastest kept version."""
    top = res.report["tuning"]["top"]
    assert top, "this result kept no versions: run with --tune N (N > 0)"
    names = [t["name"] for t in top]
    assert answer in names, f"{answer!r} is not a version; the versions are {names}"
    best = min(top, key=lambda t: t["time_s"])["name"]
    assert answer == best, f"{answer} is not the fastest: compare the time_s of each entry of report['tuning']['top']"
    _ok(f"{best} is fastest")


def check_determinism(same_seed_equal, other_seed_equal, src: str, target: str = "tpu", tune: int = 100) -> None:
    """Tutorial 05: does the same seed give the same versions? and another seed?"""
    assert isinstance(same_seed_equal, bool) and isinstance(other_seed_equal, bool), "answer True or False"

    def tops(seed):
        res = autocomp.optimize(src, target=target, tune=tune, top=3, seed=seed)
        return [(t["time_s"], repr(t["kernels"])) for t in res.report["tuning"]["top"]]

    a, b, c = tops(0), tops(0), tops(1)
    assert same_seed_equal == (a == b), \
        "the tuner's randomness comes only from the seed: run it twice with seed 0 and compare"
    assert other_seed_equal == (a == c), \
        "compare seed 0 with seed 1 for this program: " + ("they agree here" if a == c else "they differ here")
    _ok(f"same seed equal: {a == b}; seed 0 vs 1 equal: {a == c}")


# --------------------------------------------------------------------------- 06 targets and rules


def check_target_yaml(text: str, pe: int = 32, path: str = "student_accel.yaml") -> None:
    """Tutorial 06: a valid target YAML with a `pe`x`pe` systolic array."""
    from autocomp_jupyter.accel.target import TargetError, load_target

    assert isinstance(text, str) and text.strip(), "write the target as a YAML string"
    Path(path).write_text(text)
    try:
        t = load_target(path)
    except TargetError as err:
        raise AssertionError(f"the target does not load:\n{err}") from None
    assert t.compute.kind == "systolic", f"compute.kind should be systolic, got {t.compute.kind!r}"
    assert (t.compute.pe_rows, t.compute.pe_cols) == (pe, pe), \
        f"the array is {t.compute.pe_rows}x{t.compute.pe_cols}, the exercise asks for {pe}x{pe}"
    _ok(f"{t.name}: {t.compute.describe()}, on chip " + ", ".join(m.name for m in t.on_chip))


def check_custom_rule(rule_name: str, src: str, ops, target: str = "npu") -> None:
    """Tutorial 06: a registered @adrs_rule that fuses the ops `ops` of `src` (and is verified)."""
    from autocomp_jupyter.rules.engine import registered_rules

    assert isinstance(rule_name, str), f"give the rule's registered name (a string), got {rule_name!r}"
    assert rule_name in registered_rules(), \
        f"no rule named {rule_name!r} is registered: decorate your function with @adrs_rule({rule_name!r})"
    res = autocomp.optimize(src, target=target, tune=0, rules=[rule_name])
    fired = [e for e in res.report["rules"] if e["rule"] == rule_name]
    assert any(e["applied"] for e in fired), \
        f"{rule_name} did not fire on this program ({[e['why'] for e in fired] or 'never asked'}): it must return " \
        "Fuse(...) for the producer/consumer pair, checking producer.kind and consumer.kind"
    assert sorted(ops) in [sorted(k) for k in _kernel_ops(res)], \
        f"the kernels are {_kernel_ops(res)}, none is exactly {list(ops)}"
    assert res.verified, "the result is not verified"
    _ok(f"{rule_name} fused {list(ops)}")


def check_rollback_named(res, rule_name: str) -> None:
    """Tutorial 06: the wrong rule is rolled back and named in report['rollbacks']."""
    assert any(rule_name in r["reason"] for r in res.report["rollbacks"]), \
        f"{rule_name} is not named in report['rollbacks'] (did the rule fire at all? see report['rules'])"
    assert res.verified, "after the rollback the result must still be verified"
    _ok(f"{rule_name} was caught by the interpreter and rolled back")


# --------------------------------------------------------------------------- 07 host C


def check_kernel_functions(res, answer) -> None:
    """Tutorial 07: the names of the C functions that implement the kernels."""
    assert isinstance(answer, (list, tuple, set)), f"answer with a list of function names, got {answer!r}"
    truth = re.findall(r"^static void (kernel_\w+)\(", res.code("c"), flags=re.M)
    assert sorted(answer) == sorted(truth), \
        f"not the kernel functions of res.code('c') (it defines {len(truth)}). Hint: look for lines " \
        "'static void kernel_...(' — one per fused kernel"
    _ok(f"{truth}")


def check_model_error(res, answer) -> None:
    """Tutorial 07: measured / predicted time of the host run (within 1%)."""
    measured = res.report.get("measured")
    assert measured, "this result was not measured: optimize(..., target='host', measure=True)"
    truth = measured["measured_time_s"] / res.report["optimized"]["time_s"]
    a = _number(answer, "the ratio")
    assert not math.isclose(a, 1 / truth, rel_tol=1e-2) or math.isclose(truth, 1.0, rel_tol=1e-2), \
        "upside down: the question asks for measured / predicted"
    assert math.isclose(a, truth, rel_tol=1e-2), \
        f"{a:g} is not measured / predicted: report['measured']['measured_time_s'] / report['optimized']['time_s']"
    _ok(f"measured / predicted = {truth:.2f}")


# --------------------------------------------------------------------------- 08 ONNX models


def check_slowest_kernel(res, answer) -> None:
    """Tutorial 08: the name of the kernel that takes the most time in the optimised plan."""
    kernels = res.report["kernels"]
    truth = max(kernels, key=lambda k: k["metrics"]["time_s"])
    names = [k["name"] for k in kernels]
    assert isinstance(answer, str) and answer in names, \
        f"answer with a kernel name (a string), one of {names[:6]}{' ...' if len(names) > 6 else ''}"
    fastest = min(kernels, key=lambda k: k["metrics"]["time_s"])
    assert answer != fastest["name"] or fastest is truth, "that is the fastest kernel: sort by time, largest first"
    assert answer == truth["name"], \
        f"'{answer}' is not the slowest kernel. Hint: max(res.report['kernels'], key=lambda k: k['metrics']['time_s'])"
    _ok(f"{truth['name']} takes {truth['metrics']['time_s'] * 1e6:.1f} us")


def check_share_of_time(res, kernel: str, answer) -> None:
    """Tutorial 08: a kernel's share of the optimised plan's total time (0..1, within 1%)."""
    total = sum(k["metrics"]["time_s"] for k in res.report["kernels"])
    (k,) = [k for k in res.report["kernels"] if k["name"] == kernel]
    truth = k["metrics"]["time_s"] / total
    a = _number(answer, "the share")
    assert not math.isclose(a, 100 * truth, rel_tol=1e-2), "a fraction between 0 and 1, not a percentage"
    assert math.isclose(a, truth, rel_tol=1e-2), \
        f"{a:g} is not {kernel}'s time over the sum of every kernel's time"
    _ok(f"{kernel} takes {truth:.1%} of the time")
