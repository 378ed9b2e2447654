"""isl legality: dependences of hand-built kernels, and transformations refused or accepted.

Each refusal has a legal twin next to it, so a check that refuses everything fails too.
"""
import time

import islpy as isl
import pytest

from autocomp_jupyter import poly
from autocomp_jupyter.ir.program import Access, Affine, BinOp, Call, Const, Loop, Statement

V = Affine.var
N = 16


def gemm(n: int = N) -> Statement:
    """C[i, j] += A[i, k] * B[k, j]"""
    return Statement("C", (V("i"), V("j")), "+", (Loop("i", n), Loop("j", n), Loop("k", n)),
                     BinOp("*", Access("A", (V("i"), V("k"))), Access("B", (V("k"), V("j")))))


def relu_of_c(n: int = N) -> Statement:
    """D[i, j] = relu(C[i, j])"""
    return Statement("D", (V("i"), V("j")), None, (Loop("i", n), Loop("j", n)),
                     Call("relu", (Access("C", (V("i"), V("j"))),)))


def wavefront(n: int = 8) -> Statement:
    """T[i + j] += X[i, j]: S0[i, j] and S0[i + 1, j - 1] update the same element, a
    dependence of distance (1, -1), as in a stencil sweep."""
    return Statement("T", (V("i") + V("j"),), "+", (Loop("i", n), Loop("j", n)),
                     Access("X", (V("i"), V("j"))))


def conv_pair(n: int = 8):
    """S0: Y[h] = X[h] * 2;  S1: P[h] += Y[h + r - 1] * K[r] (r < 3, out of range reads 0)."""
    produce = Statement("Y", (V("h"),), None, (Loop("h", n),),
                        BinOp("*", Access("X", (V("h"),)), Const(2.0)))
    convolve = Statement("P", (V("h"),), "+", (Loop("h", n), Loop("r", 3)),
                         BinOp("*", Access("Y", (V("h") + V("r") - 1,)), Access("K", (V("r"),))))
    return [produce, convolve]


# --------------------------------------------------------------------------- dependences


def test_gemm_accumulation_is_a_flow_dependence_carried_by_k():
    distances = {(d.kind, d.tensor): d for d in poly.dependence_distances([gemm()])}
    flow = distances[("flow", "C")]
    assert flow.uniform == (0, 0, 1)
    assert flow.loops == ("i", "j", "k")
    assert flow.carried_by == "k"
    assert flow.reduction
    assert str(flow) == "flow S0->S0 on C: (0, 0, 1) over (i, j, k) carried by k"
    assert {d.kind for d in distances.values()} == {"flow", "anti", "output"}


def test_dependence_message_names_kind_statements_tensor_and_reduction():
    kernel = [gemm()]
    flow = next(d for d in poly.dependences(kernel) if d.kind == "flow")
    assert flow.describe(poly.kernel_polyhedra(kernel)) == \
        "flow dependence S0[i, j, k] -> S0[i, j, k + 1] on C (reduction over k)"


def test_conv_reads_with_offset_indices_depend_only_in_bounds():
    kernel = conv_pair()
    flows = [d for d in poly.dependences(kernel) if d.kind == "flow" and d.tensor == "Y"]
    assert len(flows) == 1 and (flows[0].source, flows[0].sink) == ("S0", "S1")
    expected = isl.Map("{ S0[y] -> S1[h, r] : y = h + r - 1 and 0 <= h < 8 and 0 <= r < 3 "
                       "and 0 <= y < 8 }")
    assert flows[0].relation.is_equal(expected)
    # The padded reads (Y[-1] at h = 0, Y[8] at h = 7) have no producer.
    sinks = flows[0].relation.range()
    assert sinks.intersect(isl.Set("{ S1[0, 0]; S1[7, 2] }")).is_empty()


def test_conv_accumulates_over_r_and_leaves_h_parallel():
    kernel = conv_pair()
    p_deps = [d for d in poly.dependence_distances(kernel) if d.tensor == "P"]
    assert {d.uniform for d in p_deps} == {(0, 1)} and all(d.carried_by == "r" for d in p_deps)
    assert poly.parallel_loops(kernel) == ("h",)


def test_conv_fused_naively_reads_y_before_it_is_written():
    # S1[h, r = 2] reads Y[h + 1], produced one h iteration later in the fused nest.
    result = poly.check_legal(conv_pair(), poly.fused_schedule(conv_pair()))
    assert not result.ok
    violation = result.violated[0]
    assert (violation.kind, violation.source, violation.sink, violation.tensor) == ("flow", "S0", "S1", "Y")
    assert violation.example_sink[1] == 2


# --------------------------------------------------------------------------- reverse


def test_reversing_the_reduction_loop_is_refused_in_strict_mode():
    kernel = [gemm()]
    result = poly.check_legal(kernel, poly.original_schedule(kernel).reverse("k"))
    assert not result.ok
    kinds = {v.kind for v in result.violated}
    assert kinds == {"flow", "anti", "output"}
    flow = next(v for v in result.violated if v.kind == "flow")
    assert flow.message.startswith(
        "flow dependence S0[i, j, k] -> S0[i, j, k + 1] on C (reduction over k) would be reversed")
    assert (flow.example_source, flow.example_sink) == ((0, 0, 0), (0, 0, 1))
    assert flow.reduction and result.reason.startswith("flow dependence")


def test_reversing_the_reduction_loop_is_allowed_when_reductions_may_reorder():
    kernel = [gemm()]
    schedule = poly.original_schedule(kernel).reverse("k")
    assert poly.check_legal(kernel, schedule, reduction_reorderable=True).ok


def test_reversing_a_parallel_loop_is_legal():
    kernel = [gemm()]
    for loop in ("i", "j"):
        assert poly.check_legal(kernel, poly.original_schedule(kernel).reverse(loop)).ok


# --------------------------------------------------------------------------- parallel


@pytest.mark.parametrize("reorderable", [False, True])
def test_parallelising_the_reduction_loop_is_refused_in_both_modes(reorderable):
    kernel = [gemm()]
    result = poly.check_legal(kernel, poly.original_schedule(kernel), parallel=["k"],
                              reduction_reorderable=reorderable)
    assert not result.ok
    assert result.violated[0].loop == "k"
    assert "loop k cannot run in parallel" in result.reason
    # strict: the accumulation chain; reorderable: any two updates of one element (memory pairs)
    chain = "S0[i, j, k] -> S0[i, j, k + 1]" if not reorderable else "S0[i, j, k'] -> S0[i, j, k]"
    assert f"flow dependence {chain} on C (reduction over k)" in result.reason


def test_parallelising_an_output_loop_is_legal():
    kernel = [gemm()]
    assert poly.check_legal(kernel, poly.original_schedule(kernel), parallel=["i", "j"]).ok
    assert poly.is_parallel(kernel, "i") and not poly.is_parallel(kernel, "k")
    assert poly.parallel_loops(kernel) == ("i", "j")


def test_tiled_gemm_parallel_loops():
    kernel = [gemm()]
    tiled = poly.original_schedule(kernel).tile({"i": 4, "j": 4, "k": 4})
    assert set(poly.parallel_loops(kernel, tiled)) == {"i_outer", "j_outer", "i_inner", "j_inner"}


# --------------------------------------------------------------------------- interchange and tiling


def test_interchanging_gemm_loops_is_legal():
    kernel = [gemm()]
    original = poly.original_schedule(kernel)
    assert poly.check_legal(kernel, original.interchange("j", "i")).ok
    assert poly.check_legal(kernel, original.interchange("k", "i", "j")).ok


def test_tiling_gemm_is_legal():
    kernel = [gemm()]
    tiled = poly.original_schedule(kernel).tile({"i": 4, "j": 8, "k": 2})
    assert tiled.loop_dims() == ("i_outer", "j_outer", "k_outer", "i_inner", "j_inner", "k_inner")
    assert poly.check_legal(kernel, tiled).ok
    assert poly.check_legal(kernel, tiled.interchange("k_outer", "i_outer", "j_outer")).ok


def test_tiling_with_a_reversed_point_loop_of_k_is_refused():
    kernel = [gemm()]
    tiled = poly.original_schedule(kernel).tile({"k": 4}).reverse("k_inner")
    result = poly.check_legal(kernel, tiled)
    assert not result.ok and result.violated[0].tensor == "C"


def test_schedule_given_as_isl_strings():
    kernel = [gemm()]
    assert poly.check_legal(kernel, {"S0": "{ S0[i, j, k] -> [j, i, k] }"}).ok
    assert not poly.check_legal(kernel, {"S0": "{ S0[i, j, k] -> [i, j, -k] }"}).ok


def test_a_schedule_that_runs_two_instances_at_once_is_rejected():
    kernel = [gemm()]
    with pytest.raises(ValueError, match="same time"):
        poly.check_legal(kernel, {"S0": "{ S0[i, j, k] -> [i, j] }"})


# --------------------------------------------------------------------------- skew


def test_wavefront_has_distance_one_minus_one():
    kernel = [wavefront()]
    distances = {d.uniform for d in poly.dependence_distances(kernel)}
    assert distances == {(1, -1)}


def test_interchange_of_a_wavefront_is_refused():
    kernel = [wavefront()]
    result = poly.check_legal(kernel, poly.original_schedule(kernel).interchange("j", "i"))
    assert not result.ok
    assert "S0[i, j] -> S0[i + 1, j - 1] on T" in result.reason


def test_skewing_j_by_i_makes_the_interchange_legal():
    kernel = [wavefront()]
    skewed = poly.original_schedule(kernel).skew("j", "i", 1)  # j' = j + i: distance (1, 0)
    assert poly.check_legal(kernel, skewed).ok
    assert poly.check_legal(kernel, skewed.interchange("j", "i")).ok  # distance (0, 1)


def test_skewing_in_the_wrong_direction_is_refused():
    kernel = [wavefront()]
    skewed = poly.original_schedule(kernel).skew("j", "i", -1)  # j' = j - i: distance (1, -2)
    assert poly.check_legal(kernel, skewed).ok  # still legal with i outermost
    result = poly.check_legal(kernel, skewed.interchange("j", "i"))  # (-2, 1): reversed
    assert not result.ok
    assert result.violated[0].distance[:4] == (0, -2, 0, 1)


# --------------------------------------------------------------------------- fused producer-consumer


def test_fused_gemm_relu_is_legal_and_keeps_i_j_parallel():
    kernel = [gemm(), relu_of_c()]
    fused = poly.fused_schedule(kernel)
    assert poly.check_legal(kernel, fused).ok
    assert poly.parallel_loops(kernel, fused) == ("i", "j")
    flow = next(d for d in poly.dependence_distances(kernel, fused) if d.sink == "S1")
    assert flow.uniform == (0, 0) and flow.carried_by == "seq2"


def test_consumer_before_its_producer_is_refused():
    kernel = [gemm(), relu_of_c()]
    # D[i, j] computed right before the k loop that produces C[i, j].
    early = poly.fused_schedule(kernel).with_statement(
        "S1", [("seq0", "0"), ("i", "i"), ("seq1", "0"), ("j", "j"), ("seq2", "-1")])
    result = poly.check_legal(kernel, early)
    assert not result.ok
    violation = result.violated[0]
    assert (violation.kind, violation.source, violation.sink, violation.tensor) == ("flow", "S0", "S1", "C")
    assert violation.message.startswith(
        "flow dependence S0[i, j, 15] -> S1[i, j] on C would be reversed")
    # Reordering the sum does not help: D still needs every update of C[i, j].
    assert not poly.check_legal(kernel, early, reduction_reorderable=True).ok


def test_reversed_k_in_a_fused_nest_keeps_the_consumer_after_the_last_update():
    kernel = [gemm(), relu_of_c()]
    reversed_k = poly.fused_schedule(kernel).reverse("k")
    assert not poly.check_legal(kernel, reversed_k).ok
    assert poly.check_legal(kernel, reversed_k, reduction_reorderable=True).ok


def test_unfused_original_schedule_runs_statements_in_program_order():
    kernel = [gemm(), relu_of_c()]
    original = poly.original_schedule(kernel)
    assert poly.check_legal(kernel, original).ok
    flow = next(d for d in poly.dependence_distances(kernel) if d.sink == "S1")
    assert flow.carried_by == "seq0"


# --------------------------------------------------------------------------- speed


def test_gemm_legality_check_is_interactive():
    kernel = [gemm(1024)]
    original = poly.original_schedule(kernel)
    poly.check_legal(kernel, original)  # builds and caches the kernel's isl objects
    schedules = [original.tile({"i": size, "j": size}).interchange("j_outer", "i_outer")
                 for size in (8, 16, 32, 64, 128)]
    start = time.perf_counter()
    for schedule in schedules:
        assert poly.check_legal(kernel, schedule).ok
    assert (time.perf_counter() - start) / len(schedules) < 0.05
    # A schedule seen before is answered from the cache.
    start = time.perf_counter()
    assert poly.check_legal(kernel, schedules[0]).ok
    assert time.perf_counter() - start < 0.005


# --------------------------------------------------------------------------- ir.schedule bridge


def _gemm_relu_kernel():
    from autocomp_jupyter.ir.program import Op, Program, Tensor
    from autocomp_jupyter.ir.schedule import Kernel

    tensors = tuple(Tensor(n, "f32", (N, N), role) for n, role in
                    [("A", "input"), ("B", "input"), ("C", "intermediate"), ("D", "intermediate")])
    ops = (Op("matmul", "contraction", ("A", "B"), "C", (), (gemm(),)),
           Op("relu", "elementwise", ("C",), "D", (), (relu_of_c(),)))
    return Kernel.from_ops(Program(tensors, ops, ("D",)), ["C", "D"])


def test_tiled_ir_schedule_with_epilogue_is_legal_and_parallel_i_is_accepted():
    from autocomp_jupyter.ir.schedule import Schedule

    kernel = _gemm_relu_kernel()
    schedule = Schedule(kernel, tiles={"i": {"L2": 8}, "k": {"L2": 4}}, order={"L2": ("k", "i", "j")},
                        annotations={"parallel": ("i",)})
    kernel_schedule = poly.from_tiled_schedule(schedule)
    assert poly.parallel_dims(schedule) == ("i_L2", "i")   # every loop that runs i: tile and points
    assert poly.check_legal(kernel.statements, kernel_schedule, parallel=poly.parallel_dims(schedule)).ok
    # The untiled point loop i sits at different depths in S0 (k, i, j) and S1 (i, j).
    assert poly.is_parallel(kernel.statements, "i", kernel_schedule)


def test_parallel_k_tiles_of_an_ir_schedule_are_refused():
    from autocomp_jupyter.ir.schedule import Schedule

    kernel = _gemm_relu_kernel()
    schedule = Schedule(kernel, tiles={"k": {"L2": 4}}, annotations={"parallel": ("k",)})
    result = poly.check_legal(kernel.statements, poly.from_tiled_schedule(schedule),
                              parallel=poly.parallel_dims(schedule), reduction_reorderable=True)
    assert not result.ok and "loop k_L2 cannot run in parallel" in result.reason


# --------------------------------------------------------------------------- verdicts from distances


def _reference_verdict(kernel, schedule, parallel=(), reorderable=False):
    """The textbook isl check, on whole dependence relations: a dependence is broken iff
    some pair has its sink run no later than its source; a loop carries it iff some pair's
    times agree outside the loop and differ at it. check_legal decides the same from
    dependence distances; this pins the two together."""
    polyhedra = poly.kernel_polyhedra(kernel)
    schedule_map = poly._schedule_map(polyhedra, schedule)
    not_after = schedule_map.lex_ge_union_map(schedule_map)
    broken = [(d.kind, d.source, d.sink, d.tensor, None)
              for d in poly.dependences(kernel, reduction_reorderable=reorderable)
              if not isl.UnionMap(d.relation).intersect(not_after).is_empty()]
    for loop in parallel:
        positions = poly._loop_positions(schedule, loop)
        for d in poly.dependences(kernel):
            position = poly._position_for(d, positions)
            pairs = poly._maps(isl.UnionMap(d.relation).apply_domain(schedule_map).apply_range(schedule_map))
            if position is not None and pairs and not poly._carried_at(pairs[0], position).is_empty():
                broken.append((d.kind, d.source, d.sink, d.tensor, loop))
    return broken


def _schedules_under_test():
    g = [gemm(8)]
    original = poly.original_schedule(g)
    tiled = original.tile({"i": 4, "j": 2, "k": 4})
    yield g, original.reverse("k"), ("i", "j", "k")
    yield g, original.interchange("k", "j", "i"), ("i", "j", "k")
    yield g, tiled, tiled.loop_dims()
    yield g, tiled.interchange("k_inner", "i_inner").reverse("j_inner"), tiled.loop_dims()
    yield g, original.tile({"k": 4}).reverse("k_inner"), ("k_outer", "k_inner", "i")
    w = [wavefront()]
    for schedule in (poly.original_schedule(w), poly.original_schedule(w).interchange("j", "i"),
                     poly.original_schedule(w).skew("j", "i", 1).interchange("j", "i"),
                     poly.original_schedule(w).skew("j", "i", -1).interchange("j", "i")):
        yield w, schedule, ("i", "j")
    pair = conv_pair()
    yield pair, poly.fused_schedule(pair), ("h", "r")
    yield pair, poly.original_schedule(pair).tile({"h": 4}), ("h_outer", "h_inner", "r")
    fused = [gemm(8), relu_of_c(8)]
    yield fused, poly.fused_schedule(fused), ("i", "j", "k")
    yield fused, poly.fused_schedule(fused).reverse("k").tile({"i": 2, "j": 4}), ("i_outer", "j_outer", "k")


@pytest.mark.parametrize("reorderable", [False, True])
def test_verdicts_from_distances_match_the_full_relation_check(reorderable):
    for kernel, schedule, loops in _schedules_under_test():
        result = poly.check_legal(kernel, schedule, parallel=loops, reduction_reorderable=reorderable)
        got = [(v.kind, v.source, v.sink, v.tensor, v.loop) for v in result.violated]
        assert got == _reference_verdict(kernel, schedule, loops, reorderable), str(schedule)
        assert result.ok == (not got)
        # Each violation explains itself (lazily) with an example pair the schedule breaks.
        for v in result.violated:
            assert v.message and len(v.example_source) and len(v.example_sink)
        assert set(poly.parallel_loops(kernel, schedule)) == {
            l for l in schedule.loop_dims()
        if not any(b[-1] == l for b in _reference_verdict(kernel, schedule, (l,)))}


def test_violation_equality_and_explicit_construction():
    v = poly.Violation("flow", "S0", "S0", "C", (0,), (1,), (0, 1), "why", True, "k")
    assert (v.example_source, v.example_sink, v.distance, v.message, v.loop) == ((0,), (1,), (0, 1), "why", "k")
    assert v == poly.Violation("flow", "S0", "S0", "C", (0,), (1,), (0, 1), "why", True, "k")
    assert str(v) == "why"


def test_lazily_explained_violations_pickle_with_their_explanation():
    import pickle

    kernel = [gemm()]
    result = poly.check_legal(kernel, poly.original_schedule(kernel).reverse("k"))
    copied = pickle.loads(pickle.dumps(result))
    assert copied == result and copied.reason == result.reason


# --------------------------------------------------------------------------- the plain kernels' shortcut

PLAIN_PROGRAMS = {
    "matmul": "input A: f32[12, 10]\ninput B: f32[10, 6]\nC = matmul(A, B)\n",
    "conv": "input X: f32[1, 4, 6, 6]\nparam W: f32[5, 4, 3, 3]\nY = conv2d(X, W, stride=2, padding=1)\n",
    "max pool": "input X: f32[1, 3, 8, 8]\nY = maxpool2d(X, kernel=2, stride=2)\n",
    "elementwise": "input X: f32[6, 8]\nY = relu(X)\n",
    "transpose": "input X: f32[6, 8]\nY = transpose(X, perm=[1, 0])\n",
}


@pytest.mark.parametrize("name", PLAIN_PROGRAMS)
def test_a_plain_kernel_is_legal_without_isl_only_where_isl_says_so(name, monkeypatch):
    """`check_schedule`'s shortcut (`policy._plainly_legal`) against isl on random tiles,
    orders and parallel loops: every schedule it calls legal, isl proves legal; and isl
    refuses some the shortcut leaves to it (a reduction loop run in parallel)."""
    import numpy as np
    from dataclasses import replace

    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import Kernel, Schedule
    from autocomp_jupyter.poly import policy

    program = parse(PLAIN_PROGRAMS[name])
    kernel = Kernel.from_ops(program, [program.ops[0].name])
    assert policy._plain_output_loops(kernel) is not None, "the kernel is one the shortcut decides"
    rng, levels = np.random.default_rng(3), ("L2", "L1")
    D, shortcut, refused = len(kernel.loops), 0, 0
    for _ in range(40):
        tiles = np.array([sorted(rng.integers(1, l.extent + 1, size=2), reverse=True) for l in kernel.loops])
        orders = np.array([rng.permutation(D) for _ in levels])
        parallel = tuple(l.name for l in kernel.loops if rng.random() < 0.4)
        schedule = Schedule.of_arrays(kernel, levels, tiles, orders)
        schedule = replace(schedule, annotations={**schedule.annotations, "parallel": parallel})
        fast = policy._plainly_legal(schedule)
        with monkeypatch.context() as m:
            m.setattr(policy, "_plainly_legal", lambda s: False)
            m.setattr(policy, "_VERDICTS", policy.LRU("test.verdicts", 16))
            exact = policy.check_schedule(schedule)
        assert not fast or exact.ok, (name, tiles.tolist(), orders.tolist(), parallel, exact.reason)
        shortcut += fast
        refused += not exact.ok
    assert shortcut >= 10
    if kernel.statements[0].reduction_loops:
        assert refused >= 1


@pytest.mark.parametrize("name", ["matmul", "conv", "max pool"])
def test_the_tuners_verdict_on_a_plain_kernel_is_isls(name, monkeypatch):
    """The tuner's per-nest verdict (orders legal, loops free to run in parallel) on a kernel
    `_plainly_legal` decides is the one isl gives, nest by nest (random tiles and orders)."""
    import numpy as np

    from autocomp_jupyter.accel.cost import textbook_schedule
    from autocomp_jupyter.accel.search_space import SearchSpace
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import Kernel
    from autocomp_jupyter.tune import legality
    from autocomp_jupyter.tune.search import _Search

    program = parse(PLAIN_PROGRAMS[name])
    kernel, target = Kernel.from_ops(program, [program.ops[0].name]), load_target("npu")
    space = SearchSpace.tuner(textbook_schedule(kernel, target), target, False, max_spill=0.05)
    assert legality._plain_verdict(space) is not None
    points = _Search(space, np.random.default_rng(5), 64, legality._Legality(space))._random(12)
    for tiles, orders in zip(points[0], points[1]):
        legality._LEGALITY_CACHE.data.clear()
        fast = legality._Legality(space).verdict(tiles, orders)
        with monkeypatch.context() as m:
            m.setattr(legality, "_plain_verdict", lambda space: None)
            legality._LEGALITY_CACHE.data.clear()
            exact = legality._Legality(space).verdict(tiles, orders)
        assert fast[0] == exact[0] and np.array_equal(fast[1], exact[1]), (tiles.tolist(), orders.tolist())
        assert not exact[1].all()             # a reduction loop is never free to run in parallel


# --------------------------------------------------------------------------- loop by loop


SEPARABLE_PROGRAM = """input X: f32[1, 8, 12, 12]
param W: f32[6, 8, 3, 3]
param D: f32[6, 1, 3, 3]
C = conv2d(X, W, stride=1, padding=1)
R = relu(C)
G = conv2d(R, D, stride=1, padding=1, groups=6)
M[n, c, h] max= G[n, c, h, w]
output M
"""


def test_dependence_levels_loop_by_loop_equal_the_whole_sets_on_random_tilings():
    """`poly.separable` decides a dependence group of loops by group where the relation and
    the time vectors separate; on 3-level tilings, orders and reversals of a convolution, a
    fused convolution + relu (its epilogue's dependences on the convolution), a grouped
    convolution and a row reduction, each answer equals the one from the whole set of time
    differences, and nearly all pairs take the group-by-group path."""
    import random

    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import Kernel, Schedule, kernels_unfused
    from autocomp_jupyter.poly.legality import _delta_levels, _statement_map
    from autocomp_jupyter.poly.separable import dependence_levels

    program = parse(SEPARABLE_PROGRAM, "<test>")
    kernels = list(kernels_unfused(program)) + [Kernel.from_ops(program, ["C", "R"])]
    rng = random.Random(7)
    separated = total = 0
    for kernel in kernels:
        polyhedra = poly.kernel_polyhedra(kernel.statements)
        deps = poly.dependences(kernel.statements) + poly.dependences(kernel.statements, reduction_reorderable=True)
        for _ in range(10):
            tiles = {}
            for loop, extent in kernel.extents.items():
                outer = rng.randint(1, extent)
                tiles[loop] = {"L2": outer, "L1": rng.randint(1, outer), "vector": rng.randint(1, 3)}
            loops = list(kernel.loop_names)
            order = {level: tuple(rng.sample(loops, len(loops))) for level in ("L2", "L1")}
            schedule = Schedule(kernel, tiles=tiles, order=order, levels=("L2", "L1", "vector"))
            kernel_schedule = poly.from_tiled_schedule(schedule)
            if rng.random() < 0.3:
                kernel_schedule = kernel_schedule.reverse(rng.choice(kernel_schedule.loop_dims()))
            by_name = {s.name: s for s in kernel_schedule.statements}
            width = kernel_schedule.width
            for dep in deps:
                source, sink = by_name[dep.source], by_name[dep.sink]
                pairs = dep.relation.apply_domain(_statement_map(source, width)).apply_range(
                    _statement_map(sink, width))
                whole = _delta_levels(pairs.deltas())
                found = dependence_levels(dep.relation, dep.relation_text, source.loops, source.exprs(width),
                                          sink.loops, sink.exprs(width))
                total += 1
                if found is not None:
                    separated += 1
                    assert found == whole, (kernel.name, dep.describe(polyhedra), str(kernel_schedule))
    assert total > 120 and separated >= total * 0.9, (separated, total)


def test_a_schedule_valid_by_its_form_is_one_isl_finds_valid_and_the_rest_go_to_isl():
    """`schedules._valid_by_form` skips isl's parse for the schedules the transformations
    write (every loop a position of its own, floors and mods by constants); each it accepts
    isl finds valid too, and what it does not accept is still checked, and refused, by isl."""
    from autocomp_jupyter.poly.schedules import ScheduleDim, StatementSchedule, _schedule_error, _valid_by_form

    s = gemm(8)
    loops = ("i", "j", "k")

    def schedule(*exprs):
        return StatementSchedule("S0", loops, tuple(ScheduleDim(f"d{n}", e) for n, e in enumerate(exprs)))

    def isl_error(sched):
        return _schedule_error(s, "S0", isl.UnionMap(sched.to_isl()))

    by_form = [schedule("0", "floor(k/4)", "floor(((i) mod 8)/2)", "-(j)", "i", "j", "k"),
               schedule("(i) + 2*(j)", "(k) mod 3", "k", "j", "i")]
    for sched in by_form:
        assert _valid_by_form(loops, sched) and isl_error(sched) is None
    not_by_form = [schedule("floor(i/2)", "j", "k"),            # two instances at one time
                   schedule("i", "j", "floor(k/2)"),
                   schedule("i", "j", "k", "i j")]              # no expression
    for sched in not_by_form:
        assert not _valid_by_form(loops, sched)
    assert "at the same time" in isl_error(not_by_form[0])
    assert "at the same time" in isl_error(not_by_form[1])
