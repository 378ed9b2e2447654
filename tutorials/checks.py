"""Answer checks for the autocomp-jupyter course notebooks (tutorials/01..10).

The exercises ship blank (`groups = ...`); a check given a `...` answers
`✗ not yet: fill in `groups` ...` in one line. The solutions are in tutorials/solutions/.
Each `check_*` helper takes the student's answer (plus whatever it needs to recompute the
truth) and prints ONE line: `✓ correct: ...`, or `✗ not yet: <what is wrong>. Hint: ...`.
A check never raises — a wrong answer must not stop Run All, and a traceback would show
this file's source, which recomputes the answers — so every helper is wrapped by `@check`,
which turns a refusal (or any error the answer provokes) into that line. The verdict of
the last check is also kept in `checks.LAST` (`.ok`, `.message`) for tests.

The helpers validate their inputs (a name that is not a kernel, a tile outside its loop)
and recompute the truth from the library itself (the report, the cost model, isl), so they
stay right if the model is retuned.
"""
from __future__ import annotations

import functools
import inspect
import math
import re
from dataclasses import dataclass
from pathlib import Path

import autocomp_jupyter as autocomp


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str


LAST: Verdict | None = None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def check(fn=None, *, names: dict[str, str] | None = None):
    """Run a check and print its verdict as one line; never raise (see the module doc).

    An answer still `...` (the exercise as it ships) gets `✗ not yet: fill in `NAME` ...`,
    NAME being the notebook's variable: `names` maps a parameter to it where they differ."""
    if fn is None:
        return lambda f: check(f, names=names)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        global LAST
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
        except TypeError:
            bound = {}
        blank = [(names or {}).get(p, p) for p, v in bound.items() if v is Ellipsis]
        try:
            if blank:
                verdict = Verdict(False, "✗ not yet: fill in " + " and ".join(f"`{n}`" for n in blank) +
                                  " in the exercise cell above (replace the `...` with your answer), then run this cell again")
            else:
                verdict = Verdict(True, "✓ correct: " + _one_line(fn(*args, **kwargs)))
        except AssertionError as err:
            verdict = Verdict(False, "✗ not yet: " + _one_line(err))
        except autocomp.UserError as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            verdict = Verdict(False, "✗ not yet: your answer does not load: " + _one_line(first))
        except Exception as err:  # an answer of the wrong shape: say so, without the traceback
            verdict = Verdict(False, f"✗ not yet: this answer cannot be checked ({type(err).__name__}: "
                                     f"{_one_line(err)}). Hint: compare its type and shape with the example above.")
        LAST = verdict
        print(verdict.message)
        return None

    return run


def _number(value, what: str) -> float:
    assert isinstance(value, (int, float)) and not isinstance(value, bool), \
        f"{what} should be a number, got {type(value).__name__} {value!r}"
    return float(value)


def _name(value, what: str, names, display=None) -> str:
    """`value` if it is one of `names`; else a refusal listing a few (their `display` forms)."""
    names = list(names)
    listed = list(display or names)
    shown = ", ".join(map(repr, listed[:5])) + (" ..." if len(listed) > 5 else "")
    assert isinstance(value, str), f"{what} is a name (a string), one of {shown}; got {value!r}"
    assert value in names, f"{value!r} is not {what}. Hint: it is one of {shown}"
    return value


def _kernel_ops(res) -> list[list[str]]:
    return [list(k["ops"]) for k in res.report["kernels"]]


# --------------------------------------------------------------------------- 01 quick start


@check
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
    return (f"{s:.2f}x over naive, {r:.0%} of the roofline, verified={verified}")


# --------------------------------------------------------------------------- 02 fusion


@check
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
    return (f"kernels {truth}")


@check(names={'rule_yaml': 'my_yaml'})
def check_disable_rule(rule_yaml: str, src: str, rule: str, target: str = "tpu", path: str = "my_rules.yaml") -> None:
    """Tutorial 02: a rule file (YAML text) that switches `rule` off, so it no longer fires."""
    assert isinstance(rule_yaml, str) and rule_yaml.strip(), "write the rule file as a YAML string"
    Path(path).write_text(rule_yaml)
    try:
        res = autocomp.optimize(src, target=target, tune=0, rules=[path])
    except autocomp.UserError as err:
        raise AssertionError(f"the rule file does not load: {str(err).splitlines()[0]}") from None
    entries = [e for e in res.report["rules"] if e["rule"] == rule]
    assert entries, f"rule {rule!r} is not in the report at all: did you name it correctly?"
    assert not any(e["applied"] for e in entries), \
        f"rule {rule!r} still fired; set `enabled: false` on it under fusion.rules (rules merge by name)"
    assert any(e["why"] == "disabled" for e in entries), f"rule {rule!r} did not fire, but not because it is disabled"
    return (f"{rule} is reported as 'disabled'; kernels now {_kernel_ops(res)}")


@check
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
    return (f"max_fusion_depth {depth} gives {want_kernels} kernels")


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


@check(names={'answer': 'footprint'})
def check_footprint(res, kernel: str, level: str, answer) -> None:
    """Tutorial 03: the footprint (bytes) of the tiles one kernel keeps at `level`."""
    _name(kernel, "a kernel of this result", [k.name for k in res.after.kernels])
    _name(level, "an on-chip memory level of this target", [m.name for m in res.target.on_chip])
    a = _number(answer, "the footprint")
    truth = tile_footprint(res, kernel, level)
    held = [m for m in res.target.on_chip if m.name == level][0]
    assert a != truth / 4, "that is the number of elements; the footprint is in bytes (f32: 4 bytes each)"
    assert math.isclose(a, truth, rel_tol=1e-6), \
        f"{a:g} bytes is not the footprint at {level}. Hint: add up, for every tensor this level holds " \
        f"(holds: {held.holds or 'all'}), the product of its tile sizes at {level}, times 4 bytes; the tiles are " \
        f"in res.report['kernels'][...]['tiles']"
    return (f"{truth} bytes = {truth / held.size_bytes:.0%} of {level}'s {held.size_bytes:.0f} bytes")


@check
def check_smaller_memory(res_big, res_small) -> None:
    """Tutorial 03: a target with less on-chip memory makes the optimised program slower."""
    big, small = res_big.report, res_small.report
    assert small["target"] != big["target"] or res_small.target != res_big.target, \
        "res_small must use your modified target, not the original one"
    assert small["verified"], "the result on the small target must still be verified"
    assert small["optimized"]["time_s"] > big["optimized"]["time_s"] * 1.05, \
        f"the program is not slower on your target ({small['optimized']['time_s'] * 1e6:.1f} µs vs " \
        f"{big['optimized']['time_s'] * 1e6:.1f} µs). Hint: make the on-chip memory small enough that the tiles must shrink"
    return (f"{big['optimized']['time_s'] * 1e6:.1f} µs → {small['optimized']['time_s'] * 1e6:.1f} µs, roofline "
        f"{big['roofline_fraction']:.0%} → {small['roofline_fraction']:.0%}")


# --------------------------------------------------------------------------- 04 legality


@check(names={'answer': 'carrying_loop'})
def check_carrying_loop(answer, statements) -> None:
    """Tutorial 04: the loop that carries GEMM's flow dependence on C."""
    from autocomp_jupyter import poly

    assert isinstance(answer, str), f"answer with a loop name as a string, e.g. 'i'; got {answer!r}"
    carried = {d.carried_by for d in poly.dependence_distances(statements) if d.kind == "flow"}
    assert answer in carried, \
        f"loop {answer!r} carries no flow dependence: a dependence is carried by the outermost loop along which " \
        "its distance is non-zero (look at the distance vectors printed above)"
    return (f"{answer} carries the accumulation C[i, j] += ..., so it cannot be reversed strictly nor run in parallel")


@check(names={'schedule': 'my_schedule'})
def check_legal_schedule(schedule, statements) -> None:
    """Tutorial 04: a legal schedule of the kernel that is not the original order."""
    from autocomp_jupyter import poly

    assert isinstance(schedule, poly.KernelSchedule), \
        f"build a KernelSchedule from poly.original_schedule(...) and its transformations; got {type(schedule).__name__}"
    original = poly.original_schedule(statements)
    assert str(schedule) != str(original), "that is the original schedule; transform it (interchange, tile, ...)"
    verdict = poly.check_legal(statements, schedule)
    assert verdict.ok, f"isl refuses this schedule: {verdict.reason}"
    return ("isl accepts " + " ".join(str(schedule).split()))


@check(names={'answer': 'parallel'})
def check_parallel_loops(answer, statements) -> None:
    """Tutorial 04: the set of GEMM loops that may run in parallel."""
    from autocomp_jupyter import poly

    assert isinstance(answer, (set, list, tuple)), f"answer with a set of loop names, got {answer!r}"
    truth = set(poly.parallel_loops(statements))
    mine = set(answer)
    assert not (mine - truth), f"{sorted(mine - truth)} carr(ies) a dependence: running it in parallel is a race"
    assert not (truth - mine), f"you missed {sorted(truth - mine)}: it carries no dependence"
    return (f"parallel loops {sorted(truth)}")


def _tab_variant(res, kernel: str, steps) -> dict:
    """What the Tune tab scores for `kernel`'s optimised trace plus `steps` (no check run)."""
    return res.evaluate_variant(kernel, schedule=[*res.traces()[kernel], *steps], verify=False)


@check(names={'loop': 'refused_loop', 'kind': 'refused_kind'})
def check_tab_refusal(res, kernel: str, loop, kind) -> None:
    """Tutorial 04 (Tune tab): parallel k refused — the loop the refusal names and the kind of
    dependence it says that loop carries."""
    _name(kernel, "a kernel of this result", [k.name for k in res.after.kernels])
    ev = _tab_variant(res, kernel, [{"primitive": "parallel", "loop": "k"}])
    assert not ev["legal"], "this kernel accepts parallel k: nothing to read"
    kinds = re.findall(r"\b(flow|anti|output) dependence", ev["reason"])
    assert isinstance(loop, str) and isinstance(kind, str), \
        f"answer with two strings, the loop and the kind (e.g. 'i' and 'anti'); got {loop!r} and {kind!r}"
    assert loop == ev["loop"], f"the refusal is about loop {ev['loop']!r}, not {loop!r}: read the red line again"
    assert kind.strip().lower() in kinds, \
        f"the refusal names a {kinds[0]} dependence, not {kind!r}: read what follows 'it carries the'"
    return (f"{ev['primitive']} on loop {loop} is refused: k carries the {kinds[0]} dependence of the accumulation "
            "(a parallel reduction is a race)")


def strict_verdict(schedule):
    """isl's verdict on a tiled `Schedule` in strict mode: reductions kept in their order."""
    from autocomp_jupyter import poly

    return poly.check_legal(schedule.kernel.statements, poly.from_tiled_schedule(schedule),
                            parallel=poly.parallel_dims(schedule), reduction_reorderable=False)


@check(names={'trace': 'my_trace'})
def check_strict_reordering(res, kernel: str, trace) -> None:
    """Tutorial 04 (Tune tab): a variant whose loop order differs from the optimised one and
    that isl accepts in strict mode."""
    _name(kernel, "a kernel of this result", [k.name for k in res.after.kernels])
    assert isinstance(trace, list), \
        f"answer with a trace, the list of steps tune.last_legal['trace'] holds; got {type(trace).__name__}"
    ev = res.evaluate_variant(kernel, schedule=trace, verify=False)
    assert ev["legal"], f"the tab refuses this trace: {ev['reason']}"
    mine, base = ev["schedule"], res.after.schedule_of(kernel)
    moved = [lv for lv in base.levels if mine.order_at(lv) != base.order_at(lv)]
    moved += ["reverse"] * bool(mine.reverse) + ["skew"] * bool(mine.skew)
    assert moved, "its loop orders are the optimised ones: change a reorder control (or reverse, skew) first"
    strict = strict_verdict(mine)
    assert strict.ok, f"strict isl refuses it: {strict.reason}. Hint: keep k's direction (no reverse or skew of k)"
    return f"strict isl accepts it (it changes {', '.join(moved)} and keeps the accumulation over k in order)"


def reduction_innermost(res, kernel: str) -> list:
    """`kernel`'s optimised trace, unroll left out, with its reduction loop innermost at the
    innermost level (the order the exercise asks for in the tab)."""
    base = res.after.schedule_of(kernel)
    inner = base.levels[-1]
    outputs = {o.name for o in base.kernel.anchor_statement.output_loops}
    reduction = [l.name for l in base.kernel.loops if l.name not in outputs]
    order = [l for l in base.order_at(inner) if l not in reduction] + reduction
    trace = [s for s in res.traces()[kernel] if s["primitive"] != "unroll"]
    trace = [s for s in trace if not (s["primitive"] == "reorder" and s["level"] == inner)]
    return trace + [{"primitive": "reorder", "level": inner, "order": order}]


@check(names={'answer': 'first_spilling_factor'})
def check_unroll_spill(res, kernel: str, answer) -> None:
    """Tutorial 04 (Tune tab): with the reduction innermost, the first unroll factor (of 2, 4,
    8, 16) whose modelled time is above the time without unroll: the registers spill."""
    _name(kernel, "a kernel of this result", [k.name for k in res.after.kernels])
    trace = reduction_innermost(res, kernel)
    loop = trace[-1]["order"][-1]
    evs = {f: res.evaluate_variant(kernel, schedule=trace + ([{"primitive": "unroll", "loop": loop, "factor": f}]
                                                             if f > 1 else []), verify=False)
           for f in (1, 2, 4, 8, 16)}
    base = evs[1]["time_s"]
    moved = [f for f in (2, 4, 8, 16) if evs[f]["time_s"] > base * (1 + 1e-9)]
    assert moved, "no unroll moves this kernel's time: nothing spills here"
    assert isinstance(answer, int) and not isinstance(answer, bool), \
        f"answer with a factor (2, 4, 8 or 16), got {answer!r}"
    truth = moved[0]
    assert answer >= truth, (f"at unroll {answer} the time has not moved yet: the body still fits the registers. "
                             "Hint: read the change line's 'x the ... registers'")
    assert answer == truth, (f"the time already moved at unroll {truth}: "
                             f"{evs[truth]['unroll'].split(': ')[0]}")
    return (f"unroll {truth}: {evs[truth]['unroll']} "
            f"({base * 1e6:.3g} µs -> {evs[truth]['time_s'] * 1e6:.3g} µs)")


# --------------------------------------------------------------------------- 05 tuning


@check(names={'tiles': 'my_tiles'})
def check_variant(res, kernel: str, tiles, within: float = 1.5) -> None:
    """Tutorial 05: hand-picked tiles that are legal, do not spill, and are within `within`x of the tuner's best."""
    _name(kernel, "a kernel of this result", [k.name for k in res.after.kernels])
    assert isinstance(tiles, dict), f"tiles is a dict {{loop: {{level: size}}}}, got {tiles!r}"
    v = res.evaluate_variant(kernel, tiles=tiles)
    assert not v.get("error"), f"these tiles are not valid: {v['reason']}"
    assert v["legal"], f"the variant is refused: {v['reason']}"
    spill = v["metrics"].get("spill_ratio", 0.0)
    assert spill <= 0.05, f"these tiles overflow the memory (spill_ratio {spill:.2f}): make them smaller"
    best = res.report["optimized"]["time_s"]
    assert v["time_s"] <= within * best, \
        f"{v['time_s'] * 1e6:.2f} µs is more than {within}x the tuned {best * 1e6:.2f} µs. Hint: look at the top " \
        "versions' tiles in res.report['tuning']['top'] for what works"
    return (f"{v['time_s'] * 1e6:.2f} µs (tuned best {best * 1e6:.2f} µs)")


@check(names={'answer': 'fastest'})
def check_fastest_version(res, answer) -> None:
    """Tutorial 05: the name of the fastest version — of those the Tune tab lists: the
    optimised plan ('optimized') and the tuner's top-K (v1, v2, ...). Ties all count."""
    from autocomp_jupyter.ui.compare import version_specs

    specs = [s for s in version_specs(res) if s.get("time_s")]
    assert len(specs) > 1, "this result kept no tuned versions. Hint: run with --tune N (N > 0) and --top K"
    names = [s["name"] for s in specs]
    _name(answer, "a version of this result", names)
    times = {s["name"]: s["time_s"] for s in specs}
    best = min(times.values())
    fastest = [n for n, t in times.items() if math.isclose(t, best, rel_tol=1e-12)]
    assert answer in fastest, \
        f"{answer} is not the fastest. Hint: compare the time_s of every version (res.report['optimized'] and " \
        "each entry of res.report['tuning']['top'])"
    same = " and ".join(fastest)
    return f"{answer} is fastest" + (f" ({same} are the same plan: the pipeline keeps the tuner's best)"
                                     if len(fastest) > 1 else "")


@check
def check_determinism(same_seed_equal, other_seed_equal, src: str, target: str = "tpu", tune: int = 100) -> None:
    """Tutorial 05: does the same seed give the same versions? and another seed?"""
    assert isinstance(same_seed_equal, bool) and isinstance(other_seed_equal, bool), "answer True or False"

    def tops(seed):
        res = autocomp.optimize(src, target=target, tune=tune, top=3, seed=seed)
        return [(t["time_s"], repr(t["kernels"])) for t in res.report["tuning"]["top"]]

    a, b, c = tops(0), tops(0), tops(1)
    assert same_seed_equal == (a == b), \
        "not for the same seed. Hint: the tuner's randomness comes only from the seed — run optimize twice " \
        "with seed=0 and compare res.report['tuning']['top']"
    assert other_seed_equal == (a == c), \
        "not for another seed. Hint: run optimize with seed=0 and with seed=1 and compare res.report['tuning']['top']"
    return (f"same seed equal: {a == b}; seed 0 vs 1 equal: {a == c}")


# --------------------------------------------------------------------------- 06 targets and rules


@check(names={'text': 'my_target'})
def check_target_yaml(text: str, pe: int = 32, path: str = "student_accel.yaml") -> None:
    """Tutorial 06: a valid target YAML with a `pe`x`pe` systolic array."""
    from autocomp_jupyter.accel.target import TargetError, load_target

    assert isinstance(text, str) and text.strip(), "write the target as a YAML string"
    Path(path).write_text(text)
    try:
        t = load_target(path)
    except TargetError as err:
        raise AssertionError(f"the target does not load: {' '.join(str(err).split())}") from None
    assert t.compute.kind == "systolic", f"compute.kind should be systolic, got {t.compute.kind!r}"
    assert (t.compute.pe_rows, t.compute.pe_cols) == (pe, pe), \
        f"the array is {t.compute.pe_rows}x{t.compute.pe_cols}, the exercise asks for {pe}x{pe}"
    return (f"{t.name}: {t.compute.describe()}, on chip " + ", ".join(m.name for m in t.on_chip))


@check
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
    return (f"{rule_name} fused {list(ops)}")


@check
def check_rollback_named(res, rule_name: str) -> None:
    """Tutorial 06: the wrong rule is rolled back and named in report['rollbacks']."""
    assert any(rule_name in r["reason"] for r in res.report["rollbacks"]), \
        f"{rule_name} is not named in report['rollbacks'] (did the rule fire at all? see report['rules'])"
    assert res.verified, "after the rollback the result must still be verified"
    return (f"{rule_name} was caught by the interpreter and rolled back")


# --------------------------------------------------------------------------- 07 host C


@check(names={'answer': 'kernel_functions'})
def check_kernel_functions(res, answer) -> None:
    """Tutorial 07: the names of the C functions that implement the kernels."""
    assert isinstance(answer, (list, tuple, set)), f"answer with a list of function names, got {answer!r}"
    truth = re.findall(r"^static void (kernel_\w+)\(", res.code("c"), flags=re.M)
    assert sorted(answer) == sorted(truth), \
        f"not the kernel functions of res.code('c') (it defines {len(truth)}). Hint: look for lines " \
        "'static void kernel_...(' — one per fused kernel"
    return (f"{truth}")


@check(names={'answer': 'ratio'})
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
    return (f"measured / predicted = {truth:.2f}")


# --------------------------------------------------------------------------- 08 ONNX models


@check(names={'answer': 'slowest'})
def check_slowest_kernel(res, answer) -> None:
    """Tutorial 08: the name of the kernel that takes the most time in the optimised plan."""
    kernels = res.report["kernels"]
    truth = max(kernels, key=lambda k: k["metrics"]["time_s"])
    from autocomp_jupyter.ui.names import kernel_labels

    full = {short: name for name, short in kernel_labels(res).items()}
    answer = full.get(answer, answer) if isinstance(answer, str) else answer  # the views' short name counts too
    _name(answer, "a kernel name of this result", [k["name"] for k in kernels], list(full))
    fastest = min(kernels, key=lambda k: k["metrics"]["time_s"])
    assert answer != fastest["name"] or fastest is truth, "that is the fastest kernel: sort by time, largest first"
    assert answer == truth["name"], \
        f"'{answer}' is not the slowest kernel. Hint: compare k['metrics']['time_s'] over res.report['kernels']"
    return (f"{truth['name']} takes {truth['metrics']['time_s'] * 1e6:.1f} µs")


@check(names={'kernel': 'slowest', 'answer': 'share'})
def check_share_of_time(res, kernel: str, answer) -> None:
    """Tutorial 08: a kernel's share of the optimised plan's total time (0..1, within 1%)."""
    total = sum(k["metrics"]["time_s"] for k in res.report["kernels"])
    from autocomp_jupyter.ui.names import kernel_labels

    full = {short: name for name, short in kernel_labels(res).items()}
    kernel = full.get(kernel, kernel) if isinstance(kernel, str) else kernel  # the views' short name counts too
    _name(kernel, "a kernel name of this result", [k["name"] for k in res.report["kernels"]], list(full))
    (k,) = [k for k in res.report["kernels"] if k["name"] == kernel]
    truth = k["metrics"]["time_s"] / total
    a = _number(answer, "the share")
    assert not math.isclose(a, 100 * truth, rel_tol=1e-2), "a fraction between 0 and 1, not a percentage"
    assert math.isclose(a, truth, rel_tol=1e-2), \
        f"{a:g} is not {kernel}'s share. Hint: its time over the sum of every kernel's time"
    return (f"{kernel} takes {truth:.1%} of the time")


# --------------------------------------------------------------------------- 09 attention and LLM inference


@check
def check_attention_fused(res, kernels, rule) -> None:
    """Tutorial 09: how many kernels the attention became, and the rule that fused it."""
    n = _number(kernels, "the number of kernels")
    truth = len(res.report["kernels"])
    assert n == truth, f"the optimised plan has {truth} kernel(s), not {n:g}. Hint: len(res.report['kernels'])"
    fired = [r["rule"] for r in res.report["rules"] if r["pass"] == "fusion" and r["applied"]]
    _name(rule, "a fusion rule that fired", fired)
    return f"{truth} kernel: {', '.join(res.report['kernels'][0]['ops'])} fused by {rule}"


@check(names={'answer': 'share'})
def check_causal_share(tokens, answer) -> None:
    """Tutorial 09: the share of the score matrix a causal domain keeps (t <= s of n x n)."""
    n = int(_number(tokens, "the number of tokens"))
    a = _number(answer, "the share")
    truth = (n + 1) / (2 * n)
    assert not math.isclose(a, 0.5, rel_tol=1e-9) or math.isclose(truth, 0.5), \
        "close, but the diagonal (t == s) is inside the domain too: count the points with t <= s exactly"
    assert math.isclose(a, truth, rel_tol=1e-6), \
        f"{a:g} is not the share. Hint: row s keeps s + 1 keys (t = 0 .. s); add them up over s and divide by n * n"
    return f"{truth:.4f} of the {n} x {n} scores: a bit over half, as the optimised times show"


@check
def check_decode_floor(res, cache_bytes, seconds) -> None:
    """Tutorial 09: the bytes one decode step must read and the time they take at DRAM bandwidth."""
    program = res.program
    truth_bytes = sum(program.tensor(n).nbytes for n in ("Kc", "Vc"))
    b = _number(cache_bytes, "the cache's bytes")
    assert b != truth_bytes / 2, "that is one of the two caches: the step reads the keys and the values"
    assert math.isclose(b, truth_bytes, rel_tol=1e-6), \
        f"{b:g} bytes is not what the caches hold. Hint: heads x positions x width x 4 bytes, for K and for V"
    s = _number(seconds, "the time")
    truth_s = truth_bytes / res.target.dram_bandwidth
    assert math.isclose(s, truth_s, rel_tol=1e-3), \
        f"{s:g} s is not those bytes at DRAM bandwidth. Hint: divide by res.target.dram_bandwidth (bytes per second)"
    limit = res.report["limit"]
    return (f"{truth_s * 1e6:.1f} µs; the limit is {limit['time_s'] * 1e6:.1f} µs, bound by {limit['bound']}: "
            f"decode waits on memory, not on the PE array")


@check
def check_split_chunks(n_chunks, kv_heads: int = 8, units: int = 108, positions: int = 4096) -> None:
    """Tutorial 09: chunks of the cache that give every unit (SM) at least one (KV head, chunk)
    block, without splitting so finely that the combine dominates (at most twice the units)."""
    assert n_chunks is not Ellipsis, "fill in n_chunks. Hint: kv_heads x n_chunks blocks, one SM each at least"
    n = _number(n_chunks, "the number of chunks")
    assert n == int(n) and n >= 2, f"{n:g} is not a chunk count: a whole number of chunks, at least 2"
    low = -(-units // kv_heads)
    assert n >= low, (f"{int(n)} chunks x {kv_heads} heads = {int(n) * kv_heads} blocks leave SMs idle. "
                      f"Hint: you need kv_heads x n_chunks >= {units}")
    assert n * kv_heads < 2 * units and positions // n >= 16, \
        (f"{int(n)} chunks is more than filling the machine needs: each chunk adds a partial result to combine. "
         f"Hint: the smallest count with kv_heads x n_chunks >= {units}, or the next power of two")
    return (f"{int(n)} chunks of {-(-positions // int(n))} positions: {int(n) * kv_heads} blocks for {units} SMs; "
            f"the split_k rule compares such counts with the cost model, the combine included")


# --------------------------------------------------------------------------- 10 design space


def _design_points(ex) -> list:
    points = getattr(ex, "points", None)
    assert isinstance(points, list) and points, \
        "pass the result of autocomp.explore(...) (or a %%autocomp --explore --out NAME cell)"
    return points


def _usable(ex) -> list[int]:
    """Indices of the designs that ran and were verified: the only ones a choice may fall on."""
    return [i for i, p in enumerate(_design_points(ex)) if p.get("valid") and p.get("verified")]


def _index(ex, answer, what: str = "your design") -> int:
    """`answer` as an index of ex.points (an int, or one of the point dicts itself)."""
    points = _design_points(ex)
    if isinstance(answer, dict):
        assert answer in points, f"{what} is a dict that is not one of ex.points. Hint: answer with its index"
        return points.index(answer)
    assert isinstance(answer, int) and not isinstance(answer, bool), \
        f"{what} is an index into ex.points (an integer 0..{len(points) - 1}), got {answer!r}"
    assert 0 <= answer < len(points), f"{answer} is not an index of ex.points (0..{len(points) - 1})"
    return answer


def _design(ex, i: int) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in ex.points[i]["params"].items())


def _beats(a: dict, b: dict) -> bool:
    """a is at least as good as b on time, energy and area, and better on one."""
    pairs = [(a[k], b[k]) for k in ("time_s", "energy_j", "area_mm2")]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


@check(names={'answer': 'front'})
def check_pareto_front(ex, answer) -> None:
    """Tutorial 10: the indices of the designs no other design beats on time, energy and area."""
    assert isinstance(answer, (list, tuple, set)), f"answer with a list of indices into ex.points, got {answer!r}"
    mine = {_index(ex, a, "each entry") for a in answer}
    usable = _usable(ex)
    points = ex.points
    for i in sorted(mine):
        assert i in usable, f"design {i} ({_design(ex, i)}) did not run or is not verified: it cannot be on the front"
        winner = next((j for j in usable if _beats(points[j], points[i])), None)
        assert winner is None, \
            f"design {i} ({_design(ex, i)}) is beaten by design {winner} ({_design(ex, winner)}), which is at least " \
            "as fast, as frugal and as small, and better on one"
    missed = [i for i in usable if i not in mine and not any(_beats(points[j], points[i]) for j in usable)]
    assert not missed, \
        f"you missed design {missed[0]} ({_design(ex, missed[0])}): no other design beats it on all three at once. " \
        "Hint: a design is on the front unless ONE other design is no worse on time, energy and area together"
    return f"front {sorted(mine)}, as ex.pareto says: every other design is beaten on all three by one of these"


@check(names={'answer': 'speedup'})
def check_array_speedup(ex, small, big, answer) -> None:
    """Tutorial 10: how many times faster design `big` is than design `small` (within 1%)."""
    i, j = _index(ex, small, "small"), _index(ex, big, "big")
    usable = _usable(ex)
    assert i in usable and j in usable, "both designs must have run and been verified"
    a = _number(answer, "the speedup")
    truth = ex.points[i]["time_s"] / ex.points[j]["time_s"]
    assert not math.isclose(a, 1 / truth, rel_tol=1e-2) or math.isclose(truth, 1.0, rel_tol=1e-2), \
        "upside down: a speedup is the small design's time over the big design's time"
    assert math.isclose(a, truth, rel_tol=1e-2), \
        f"{a:g} is not the speedup. Hint: ex.points[small]['time_s'] / ex.points[big]['time_s']"
    macs = [ex.design_target(k).compute.macs("f32") for k in (i, j)] if hasattr(ex, "design_target") else None
    more = f" for {macs[1] / macs[0]:g}x the MACs per cycle" if macs and macs[0] else ""
    return f"{truth:.2f}x faster{more}, bound by {ex.points[j]['bound']!r} on the big design"


@check
def check_dataflows(ex, rows, faster, frugal) -> None:
    """Tutorial 10: on the `rows`-row array, which swept dataflow is faster, which uses less energy."""
    points = _design_points(ex)
    assert all("compute.dataflow" in p["params"] for p in points), \
        "this sweep does not vary compute.dataflow: sweep compute.dataflow=weight_stationary,output_stationary"
    mine = {p["params"]["compute.dataflow"]: p for p in points
            if p["params"].get("compute.pe_rows") == rows and p.get("valid") and p.get("verified")}
    assert len(mine) >= 2, f"the sweep has no two verified dataflows on a {rows}-row array (compute.pe_rows={rows})"
    names = sorted(mine)
    _name(faster, "a dataflow of this sweep", names)
    _name(frugal, "a dataflow of this sweep", names)
    fastest = min(mine, key=lambda d: mine[d]["time_s"])
    least = min(mine, key=lambda d: mine[d]["energy_j"])
    assert math.isclose(mine[faster]["time_s"], mine[fastest]["time_s"], rel_tol=1e-9), \
        f"{faster} is not the faster dataflow on the {rows}-row array. Hint: compare time_s of the points whose " \
        f"params have compute.pe_rows == {rows}"
    assert math.isclose(mine[frugal]["energy_j"], mine[least]["energy_j"], rel_tol=1e-9), \
        f"{frugal} does not use the least energy on the {rows}-row array. Hint: compare energy_j, not time_s"
    same = faster == frugal
    return (f"{faster} is faster ({mine[faster]['time_s'] * 1e6:.1f} µs), {frugal} uses less energy "
            f"({mine[frugal]['energy_j'] * 1e6:.1f} µJ)" + ("" if same else ": neither dataflow wins on both"))


@check(names={'answer': 'choice'})
def check_budget_design(ex, answer, max_time_s, max_energy_j, max_area_mm2) -> None:
    """Tutorial 10: the design with the lowest energy-delay product of those within all three
    budgets (time, energy, area); None if no design meets them."""
    budgets = {"time_s": (_number(max_time_s, "the latency budget"), "latency", 1e6, "µs"),
               "energy_j": (_number(max_energy_j, "the energy budget"), "energy", 1e6, "µJ"),
               "area_mm2": (_number(max_area_mm2, "the area budget"), "area", 1.0, "mm²")}
    points = _design_points(ex)
    fits = [i for i in _usable(ex) if all(points[i][k] <= limit for k, (limit, *_) in budgets.items())]
    if answer is None:
        assert not fits, f"design {fits[0]} ({_design(ex, fits[0])}) meets all three budgets: None is not right"
        return "no design meets all three budgets"
    i = _index(ex, answer)
    assert i in _usable(ex), f"design {i} ({_design(ex, i)}) did not run or is not verified: " \
                             f"{points[i].get('reason', 'not verified')}"
    for key, (limit, what, scale, unit) in budgets.items():
        assert points[i][key] <= limit, \
            f"design {i} ({_design(ex, i)}) breaks the {what} budget: {points[i][key] * scale:.4g} {unit} > " \
            f"{limit * scale:.4g} {unit}. Hint: keep only the points within all three budgets first"
    best = min(points[j]["edp"] for j in fits)
    if not math.isclose(points[i]["edp"], best, rel_tol=1e-9):
        j = min(fits, key=lambda k: points[k]["edp"])
        by = "time" if i == min(fits, key=lambda k: points[k]["time_s"]) else \
             "energy" if i == min(fits, key=lambda k: points[k]["energy_j"]) else \
             "area" if i == min(fits, key=lambda k: points[k]["area_mm2"]) else ""
        raise AssertionError(
            f"design {i} is within budget but design {j} ({_design(ex, j)}) has a lower energy-delay product "
            f"({points[j]['edp']:.3g} vs {points[i]['edp']:.3g} J·s)" +
            (f"; yours is the best on {by} alone" if by else "") +
            ". Hint: of the designs within all three budgets, take the one with the smallest 'edp'")
    p = points[i]
    return (f"design {i} ({_design(ex, i)}): {p['time_s'] * 1e6:.1f} µs, {p['energy_j'] * 1e6:.1f} µJ, "
            f"{p['area_mm2']:.2f} mm², the lowest EDP of the {len(fits)} design(s) within budget")


@check(names={'frugal': 'frugal_design'})
def check_objective_tradeoff(by_latency, by_energy, frugal, slower_by) -> None:
    """Tutorial 10: the least-energy design under the energy objective, and its time over the
    fastest design under the latency objective (within 1%)."""
    usable = _usable(by_energy)
    fast = [by_latency.points[i]["time_s"] for i in _usable(by_latency)]
    assert fast, "no design of by_latency ran and verified"
    i = _index(by_energy, frugal, "frugal_design")
    assert i in usable, f"design {i} ({_design(by_energy, i)}) did not run or is not verified"
    least = min(usable, key=lambda j: by_energy.points[j]["energy_j"])
    assert math.isclose(by_energy.points[i]["energy_j"], by_energy.points[least]["energy_j"], rel_tol=1e-9), \
        f"design {least} ({_design(by_energy, least)}) uses less energy. Hint: compare energy_j of by_energy.points"
    truth = by_energy.points[i]["time_s"] / min(fast)
    a = _number(slower_by, "slower_by")
    assert math.isclose(a, truth, rel_tol=1e-2), \
        f"{a:g} is not the ratio. Hint: by_energy.points[frugal_design]['time_s'] / the least time_s of by_latency"
    return (f"{_design(by_energy, i)}: {by_energy.points[i]['energy_j'] * 1e6:.0f} µJ under the energy objective, "
            f"{truth:.2f}x the fastest latency design's time — the objective, not the hardware alone, picks it")
