"""The one search space (accel/search_space.py): a point is one value per decision, the
same point as arrays, as a trace and as a schedule; the tiling search, the tuner and the
library's enumeration search it in their views."""
from __future__ import annotations

import numpy as np

from autocomp_jupyter import baselines, canon, poly
from autocomp_jupyter.accel.search_space import (EXHAUSTIVE_MAX, Points, SearchSpace, enumerate_points, exhaustive,
                                                 refinements, size)
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel
from autocomp_jupyter.schedule import space as trace_space

GEMM = """input A: f32[48, 40]
input B: f32[40, 36]
C = matmul(A, B)
"""


def _kernel(src: str = GEMM) -> Kernel:
    program = parse(src)
    return Kernel.from_ops(program, [op.name for op in program.ops])


def test_a_point_is_the_same_schedule_as_arrays_and_as_a_trace():
    target = load_target("npu")
    kernel = _kernel()
    incumbent = baselines.textbook_schedule(kernel, target)
    s = SearchSpace.tuner(incumbent, target)
    rng = np.random.default_rng(0)
    decisions = s.decisions()
    assert {d.primitive for d in decisions} == {"tile", "reorder", "parallel", "vectorize"}
    names = kernel.loop_names
    for _ in range(5):
        # a random point of the decisions, then the same point as the cost model's arrays
        values = [d.choices[int(rng.integers(1, len(d.choices)))] for d in decisions]
        traced = trace_space.schedule_from(kernel, s.levels, decisions, values)
        point = s.points([traced])
        again = s.schedule(*point.take(0), keep=traced)
        assert again.tile_sizes(s.levels) == traced.tile_sizes(s.levels)
        assert all(again.order_at(lv) == traced.order_at(lv) for lv in s.levels)
        assert set(again.parallel or ()) == set(traced.parallel or ())
        assert again.vectorize == traced.vectorize
        # and it costs the same either way
        batch = s.measure(point)[0][0]
        assert np.isclose(batch, canon.evaluate(traced, target).time_s, rtol=1e-12)
        assert point.vectorize[0] == (names.index(traced.vectorize) if traced.vectorize else -1)


def test_keys_tell_points_apart_and_stack_and_concat_keep_them():
    tiles = np.array([[[4, 2], [8, 8]], [[4, 2], [8, 4]]])
    orders = np.array([[[0, 1], [0, 1]], [[0, 1], [0, 1]]])
    p = Points(tiles, orders, np.array([[True, False], [True, False]]), np.array([-1, -1]))
    keys = p.keys()
    assert len(set(keys)) == 2
    rows = [tuple(a[i] for a in p) for i in range(2)]
    assert Points.stack(rows).keys() == keys
    assert Points.concat(Points.stack(rows[:1]), Points.stack(rows[1:])).keys() == keys


def test_the_library_enumeration_is_the_fastest_legal_point_of_the_every_view():
    target = load_target("npu")
    kernel = _kernel("input A: f32[4, 6]\nC = relu(A)\n")
    space = SearchSpace.every(kernel, target, 0.05)
    assert size(space) <= EXHAUSTIVE_MAX
    points = enumerate_points(space)
    assert len(points) == size(space)
    best = exhaustive(kernel, target, 0.05, lambda sch: poly.check_schedule(sch).ok)
    time_s, _, ok, _ = space.measure(points)
    assert canon.evaluate(best, target).time_s == min(time_s[ok])
    big = SearchSpace.every(_kernel(), target, 0.05)
    assert size(big) > EXHAUSTIVE_MAX and enumerate_points(big) is None


def test_refinements_are_the_tuned_primitives_steps_the_points_do_not_hold(monkeypatch):
    from autocomp_jupyter.schedule import PRIMITIVES
    from autocomp_jupyter.schedule.split import Split

    target = load_target("npu")
    schedule = baselines.textbook_schedule(_kernel(), target)
    for cls in PRIMITIVES.values():
        monkeypatch.setattr(cls, "tuned", False)
    assert refinements(schedule) == []
    monkeypatch.setattr(Split, "tuned", True)      # a primitive turned on is searched at once
    made = refinements(schedule)
    assert made
    splits = {tuple(r.tile_sizes(r.levels)[l]) for r in made for l in r.kernel.loop_names}
    assert len(splits) > 3                          # distinct perfect tilings of the loops
