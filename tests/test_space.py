"""The one candidate space (space.py): its views, and the four consumers drawing from it — the
tiling pass, the tuner, the library baseline and the Tune tab's sliders."""
from __future__ import annotations

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import baselines, ui
from autocomp_jupyter.accel.cost import library_schedule
from autocomp_jupyter.accel.target import load_target, parse_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import kernels_unfused
from autocomp_jupyter.passes import PassContext
from autocomp_jupyter.rules.engine import load_rules
from autocomp_jupyter.rules.tiling import level_mapping, search_tiles
from autocomp_jupyter.space import TileSpace, balanced, divisors, powers_of_two
from autocomp_jupyter.accel.search_space import SearchSpace

GEMM = "input A: f32[96, 200]\ninput B: f32[200, 100]\nC = matmul(A, B)\nD = relu(C)\noutput D\n"
CONV = ("input x: f32[1, 8, 14, 14]\ninput w: f32[16, 8, 3, 3]\n"
        "y = conv2d(x, w, stride=1, padding=1)\nz = relu(y)\noutput z\n")
SOFTMAX = "input x: f32[48, 80]\ny = softmax(x)\noutput y\n"
PROGRAMS = {"gemm": GEMM, "conv": CONV, "softmax": SOFTMAX}
SMALL_TARGET = """
name: small
clock_ghz: 1.0
compute: {kind: vector, cores: 2, lanes: 4}
energy_pj_per_mac: 1.0
memory:
  - {name: buf, size_bytes: 256, bandwidth_gbps: 16, latency_cycles: 2, energy_pj_per_byte: 0.5}
  - {name: DRAM, bandwidth_gbps: 4, latency_cycles: 20, energy_pj_per_byte: 10}
"""


def kernel_of(src: str, i: int = 0):
    return kernels_unfused(parse(src))[i]


def factor_of(target: str) -> tuple[int, int]:
    return tuple(load_rules([], target).tiling.get("register_tile_factor", [4, 16]))


def in_space(sizes, space: TileSpace, d: int, factor, extra=()) -> list[int]:
    """The sizes outside the space's candidates for loop d (and outside `extra`)."""
    allowed = set(space.candidates(d, factor).tolist()) | set(extra)
    return [int(s) for s in np.ravel(sizes) if int(s) not in allowed]


# --------------------------------------------------------------------------- views


def test_families_and_views():
    assert divisors(12) == {1, 2, 3, 4, 6, 12}
    # the ends of the divisors (≤ 64 or quotient ≤ 64), scanned up to 4096 (the extent joins apart)
    assert divisors(10000, ends=True) == {d for d in divisors(10000) if (d <= 64 or 10000 // d <= 64) and d <= 4096}
    assert powers_of_two(100, (1, 3)) == {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96}
    assert balanced(100, 4) == {100, 50, 34, 25}
    space = TileSpace.of(kernel_of(GEMM), load_target("tpu"))     # loops i 96, j 100, k 200
    j = space.index("j")
    assert space.extents[j] == 100 and space.units[j] == 128 and space.granules == (128, 128)
    # the sliders: a short ordered list with the current size
    assert space.slider("j", 48) == [1, 2, 4, 8, 16, 32, 48, 64, 100]
    assert space.slider("j", 500) == [1, 2, 4, 8, 16, 32, 64, 100]
    # the tiling pass: E, powers of two, divisors, ceil(E/q); unit multiples fit only below E
    assert {1, 2, 5, 25, 34, 64, 100}.issubset(space.tiling(j)) and 128 not in space.tiling(j)
    assert space.tiling(j).tolist() == sorted(set(space.tiling(j).tolist()))
    # the tuner: every divisor, 3·2^k, granule multiples ≤ E; divisors_only
    assert {1, 4, 5, 20, 25, 50, 96, 100}.issubset(space.tuner(j))
    assert all(100 % s == 0 for s in space.tuner(j, divisors_only=True))
    assert list(space.every(j)) == list(range(1, 101))
    for view in (space.tiling(j), space.register(j), space.tuner(j)):
        assert view.min() >= 1 and view.max() <= 100
        assert set(view.tolist()) <= set(space.candidates(j).tolist())


def test_whole_loops_are_not_tiled():
    space = TileSpace.of(kernel_of(SOFTMAX), load_target("gpu"))
    whole = [d for d, w in enumerate(space.whole) if w]
    assert whole, "a softmax row is read whole"
    for d in whole:
        assert space.tuner(d).tolist() == [space.extents[d]]
        assert list(space.every(d)) == [space.extents[d]]


def test_vector_target_units():
    space = TileSpace.of(kernel_of(GEMM), load_target("gpu"))
    assert space.granules == (32,)
    assert max(space.units) > 1                # the vector unit's loop
    d = int(np.argmax(space.units))
    assert set(space.register(d, (4, 16)).tolist()) == {min(space.extents[d], space.units[d] * f) for f in range(1, 17)}


# --------------------------------------------------------------------------- consumers


@pytest.mark.parametrize("target", ["tpu", "gemmini", "host"])
def test_tiling_pass_draws_from_the_space(target):
    tgt = load_target(target)
    rules = load_rules([], target)
    params = rules.tiling
    levels = level_mapping(params.get("levels", ["L2", "L1", "vector"]), tgt.tiling_levels)
    for src in (GEMM, CONV):
        kernel = kernel_of(src)
        space = TileSpace.of(kernel, tgt)
        current = library_schedule(kernel, tgt)          # the textbook tiles: a seed of the search
        ranked = search_tiles(kernel, tgt, current, levels, params, seed=0, ranked=4)
        assert ranked
        seeds = current.tile_sizes(tgt.tiling_levels)
        for schedule, _ in ranked:
            sizes = schedule.tile_sizes(tgt.tiling_levels)
            for d, loop in enumerate(kernel.loops):
                assert not in_space(sizes[loop.name], space, d, factor_of(target), seeds[loop.name]), (src, loop.name)


@pytest.mark.parametrize("target", ["tpu", "npu", "host"])
def test_tuner_genes_are_the_spaces_tuner_view(target):
    tgt = load_target(target)
    for src in PROGRAMS.values():
        kernel = kernel_of(src)
        schedule = library_schedule(kernel, tgt)
        ks = SearchSpace.tuner(schedule, tgt)
        space = TileSpace.of(kernel, tgt)
        incumbent = schedule.tile_sizes(tgt.tiling_levels)
        for d, loop in enumerate(kernel.loops):
            expected = np.union1d(space.tuner(d), [min(v, loop.extent) for v in incumbent[loop.name]])
            assert ks.choices[d].tolist() == expected.tolist()
        divisors_only = SearchSpace.tuner(schedule, tgt, divisors_only=True)
        for d in range(len(kernel.loops)):
            assert set(space.tuner(d, divisors_only=True).tolist()) <= set(divisors_only.choices[d].tolist())


@pytest.mark.parametrize("target", ["tpu", "gemmini", "gpu", "host"])
def test_every_schedule_the_pipeline_makes_is_in_the_space(target):
    """The optimised plan, the library baseline and the tuner's versions: every tile of every
    kernel is one of the space's candidates (the passes, the tuner and the library draw from it)."""
    for name, src in PROGRAMS.items():
        res = autocomp.optimize(src, target=target, tune=40, top=2, seed=0)
        plans = [res.after, res.library, *res.versions.values()]
        for plan in plans:
            for schedule in plan.schedules:
                space = TileSpace.of(schedule.kernel, res.target)
                sizes = schedule.tile_sizes(schedule.levels or tuple(res.target.tiling_levels))
                for d, loop in enumerate(schedule.kernel.loops):
                    assert not in_space(sizes[loop.name], space, d, factor_of(target)), (name, loop.name)


def test_sliders_offer_the_spaces_slider_view():
    res = autocomp.optimize(GEMM, target="tpu", tune=0)
    tune = ui.widget(res).tune
    schedule = res.after.schedule_of(tune.kernel)
    space = TileSpace.of(schedule.kernel, res.target)
    levels = tuple(schedule.levels)
    sizes = schedule.tile_sizes(levels)
    assert tune.sliders
    for (loop, level), slider in tune.sliders.items():
        current = sizes[loop][levels.index(level)]
        offered = [value for _, value in slider.options]          # (label, size) pairs
        assert offered == space.slider(loop, current)
        assert slider.value == current
        assert not in_space(offered, space, space.index(loop), factor_of("tpu"))


def test_library_exhaustive_search_enumerates_every_size():
    # Small enough to enumerate: the library baseline scores the space's `every` view whole.
    target = parse_target(SMALL_TARGET, "small.yaml")
    program = parse("input A: f32[8, 4]\ninput B: f32[4, 8]\nC = matmul(A, B)\n")
    kernel = kernels_unfused(program)[0]
    ctx = PassContext(program, target, load_rules([], target.name), 0)
    best = baselines._exhaustive(kernel, ctx)
    assert best is not None
    space = TileSpace.of(kernel, ctx.target)
    sizes = best.tile_sizes(ctx.target.tiling_levels)
    for d, loop in enumerate(kernel.loops):
        assert set(sizes[loop.name]) <= set(space.every(d))
        assert set(space.candidates(d).tolist()) <= set(space.every(d))


def test_a_warp_runs_along_the_output_loop_that_fills_it():
    """SIMT lanes are threads, not a contiguous vector: on gpu a 1x1 conv on a 7x7 map runs its
    warps along the 64 output channels (the stride-1 w has 7 points), a vector unit (npu) keeps
    w, and a map at least a warp wide keeps w on gpu too. The plan says so and gains by it."""
    from autocomp_jupyter.space import lane_loop

    def conv(hw):
        return parse(f"input X: f32[1, 32, {hw}, {hw}]\nparam W: f32[64, 32, 1, 1]\nY = conv2d(X, W)\n")

    small, wide = kernels_unfused(conv(7))[0], kernels_unfused(conv(32))[0]
    assert lane_loop(small, load_target("gpu")) == "f"
    assert lane_loop(small, load_target("npu")) == "w"
    assert lane_loop(wide, load_target("gpu")) == "w"
    res = autocomp.optimize(conv(7), target="gpu", tune=0)
    assert res.report["verified"]
    assert res.after.schedules[0].annotations.get("vectorize") == "f"
    why = [e["why"] for e in res.report["rules"] if e["rule"].startswith("vectorize_inner")]
    assert why and "a warp along it: Y's stride-1 loop w has 7 points" in why[0]
    assert res.report["kernels"][0]["metrics"]["pe_util"] > 0.9
