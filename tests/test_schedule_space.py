"""The schedule package: one file per primitive, the search space drawn from the primitives'
own decisions, and a new primitive (`split`) that replays, is refused with a named error, and
is searched by the scheduling pass with no change to any search."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import canon, poly
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.loopnest import lower
from autocomp_jupyter.ir.schedule import Kernel
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.schedule import PRIMITIVES, BadArgumentError, IllegalStepError, ScheduleBuilder, replay, space
from autocomp_jupyter.schedule.split import perfect_splits

GEMM = """input A: f32[48, 40]
input B: f32[40, 36]
C = matmul(A, B)
D = relu(C)
"""
LEVELS = ("SRAM", "accumulator")


def _kernel() -> Kernel:
    program = parse(GEMM)
    return Kernel.from_ops(program, [op.name for op in program.ops])


def test_every_primitive_is_a_module_of_its_own_with_its_checks_rewrite_and_forms():
    for name, cls in PRIMITIVES.items():
        module = importlib.import_module(cls.__module__)
        assert module.__name__ == f"autocomp_jupyter.schedule.{name}", name
        assert module.__doc__ and cls.__doc__, name
        step = {"primitive": name, **{p: None for p in cls.params()}}
        assert set(step) - {"primitive"} == set(cls.params())


def test_split_is_the_perfect_tiling_it_names():
    kernel = _kernel()
    split = replay(kernel, [{"primitive": "split", "loop": "i", "factors": [2, 3, 8]}], LEVELS)
    tiled = replay(kernel, [{"primitive": "tile", "loop": "i", "level": "SRAM", "size": 24},
                            {"primitive": "tile", "loop": "i", "level": "accumulator", "size": 8}], LEVELS)
    assert split.tiles == tiled.tiles == {"i": {"SRAM": 24, "accumulator": 8}}
    assert lower(split).pretty() == lower(tiled).pretty()
    assert canon.evaluate(split, "npu").time_s == canon.evaluate(tiled, "npu").time_s


@pytest.mark.parametrize("factors, words", [([2, 3, 4], "do not multiply to loop i's extent 48"),
                                            ([48], "a list of 3 positive integers"),
                                            ([2, 0, 24], "a list of 3 positive integers")])
def test_a_bad_split_is_refused_naming_the_loop_and_what_was_expected(factors, words):
    with pytest.raises(BadArgumentError) as err:
        replay(_kernel(), [{"primitive": "split", "loop": "i", "factors": factors}], LEVELS)
    assert words in str(err.value) and "step 1" in str(err.value) and "split" in str(err.value)


def test_perfect_splits_multiply_to_the_extent_and_are_all_there():
    splits = perfect_splits(48, 3)
    assert all(math.prod(s) == 48 for s in splits) and len(set(splits)) == len(splits)
    divisors = [d for d in range(1, 49) if 48 % d == 0]
    assert len(splits) == sum(1 for a in divisors for b in divisors if (48 // a) % b == 0)


def test_the_space_holds_every_primitive_with_decisions_in_trace_order():
    kernel = _kernel()
    decisions = space.decisions(kernel, LEVELS)
    names = [d.primitive for d in decisions]
    assert {"tile", "split", "reorder", "parallel", "vectorize", "unroll", "skew", "reverse", "stage"} <= set(names)
    ranks = [PRIMITIVES[n].rank for n in names]
    assert ranks == sorted(ranks)
    assert all(d.choices and len(set(map(repr, d.choices))) == len(d.choices) for d in decisions)


def test_random_points_of_the_space_replay_and_isl_judges_them():
    kernel, rng = _kernel(), np.random.default_rng(7)
    decisions = space.decisions(kernel, LEVELS)
    legal = 0
    for _ in range(12):
        trace = space.trace_from(kernel, LEVELS, decisions, space.sample(decisions, rng))
        try:
            schedule = replay(kernel, trace, LEVELS)
        except IllegalStepError as err:
            assert err.primitive in PRIMITIVES and "depend" in str(err)
            continue
        legal += 1
        assert poly.check_schedule(schedule).ok
    assert legal >= 3


def test_the_builder_and_the_python_form_know_a_new_primitive_at_once():
    builder = ScheduleBuilder(_kernel(), LEVELS)
    builder.split(loop="j", factors=[3, 3, 4])
    assert builder.schedule.tiles["j"] == {"SRAM": 12, "accumulator": 4}
    assert "s.split(loop='j', factors=[3, 3, 4])" in repr(builder)


def test_the_scheduling_pass_searches_a_primitive_a_rule_file_names(tmp_path):
    rules = tmp_path / "split.yaml"
    rules.write_text("scheduling:\n  priority: [interchange, split]\n")
    base = autocomp.optimize(GEMM, target="npu", tune=0)
    res = autocomp.optimize(GEMM, target="npu", tune=0, rules=[str(rules)])
    tried = [r for r in res.report["rules"] if r["rule"].startswith("split_")]
    assert tried and all("split" in r["why"] for r in tried)
    assert res.report["verified"]
    assert res.report["optimized"]["time_s"] <= base.report["optimized"]["time_s"] * (1 + 1e-9)


def test_a_rule_file_naming_an_unknown_transformation_lists_the_registered_ones(tmp_path):
    rules = tmp_path / "bad.yaml"
    rules.write_text("scheduling:\n  priority: [twist]\n")
    with pytest.raises(UserError) as err:
        autocomp.optimize(GEMM, target="npu", tune=0, rules=[str(rules)])
    assert "interchange, split, skew, reverse" in str(err.value)


def test_a_variant_given_as_a_trace_is_replayed_priced_and_verified():
    res = autocomp.optimize(GEMM, target="npu", tune=0)
    name = res.after.kernels[0].name
    s = res.schedule(name)
    s.split(loop="i", factors=[2, 3, 8]).parallel(loop="j")
    ok = res.evaluate_variant(name, schedule=s)
    assert ok["legal"] and ok["verified"] is True and ok["reason"] == ""
    assert ok["time_s"] > 0 and ok["metrics"]["flops"] > 0
    assert ok["schedule"].tiles["i"] == {"SRAM": 24, "accumulator": 8}
    racing = res.evaluate_variant(name, schedule=s.trace + [{"primitive": "parallel", "loop": "k"}])
    assert racing["legal"] is False and racing["error"] and racing["primitive"] == "parallel"
    assert racing["loop"] == "k" and "dependence" in racing["reason"]
    bad = res.evaluate_variant(name, schedule=[{"primitive": "split", "loop": "i", "factors": [5, 5, 5]}])
    assert bad["legal"] is False and "extent 48" in bad["reason"] and bad["step"] == 0
    assert res.evaluate_variant(name, schedule="tile i")["error"]
    sliders = res.evaluate_variant(name, tiles={"i": {"SRAM": 16}})
    assert sliders["legal"] and sliders["verified"] is None        # the tab's fast path: priced, not run


def test_the_tuner_tries_a_tuned_primitive_on_a_kernel_with_no_change_to_its_search(monkeypatch):
    from autocomp_jupyter import tune
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.schedule.split import Split

    target = load_target("npu")
    kernel = _kernel()
    poor = replay(kernel, [{"primitive": "tile", "loop": "i", "level": "SRAM", "size": 1},
                           {"primitive": "tile", "loop": "j", "level": "SRAM", "size": 1}], target.tiling_levels)
    poor_time = float(tune.model_score(kernel, target, *tune._arrays(poor, target))[0])
    monkeypatch.setattr(Split, "tuned", False)
    assert tune._primitive_moves((poor_time, poor), target, tune.model_score, 0.05) is None
    monkeypatch.setattr(Split, "tuned", True)
    t, moved = tune._primitive_moves((poor_time, poor), target, tune.model_score, 0.05)
    assert t < poor_time and poly.check_schedule(moved).ok
    assert moved.tiles != poor.tiles and any(s["primitive"] == "tile" for s in moved.trace)
