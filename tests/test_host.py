"""The host target: generated C compiles, runs in a child process and matches the interpreter.

Every example runs scaled down (max_extent=16) with the plan optimize() picks for `host`,
plus the whole program fused in one hand-scheduled kernel (epilogues, local loops, remainder
tiles); the full-size gemm_relu runs once. Crashes, hangs and compiler errors are reported as
HostError without taking the test process down.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import host
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.codegen import generate
from autocomp_jupyter.codegen.c import generate_c
from autocomp_jupyter.dsl import load, parse
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.interp import compare_outputs, random_inputs, run
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.result import Plan

pytestmark = pytest.mark.skipif(
    not any(Path(d, c).exists() for d in os.environ.get("PATH", "").split(os.pathsep) for c in ("cc", "gcc", "clang")),
    reason="no C compiler on PATH")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.acir"))


def check(plan, threads=2):
    report = host.measure_plan(plan, repeats=1, threads=threads)
    assert report["matches_interpreter"], report["reason"]
    assert report["measured_time_s"] > 0
    assert set(report["per_kernel"]) == {k.name for k in plan.kernels}
    return report


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_optimised_for_host_matches_interpreter(path):
    program = load(path, max_extent=16)
    try:
        plan = autocomp.optimize(program, target="host", tune=0).after
    except Exception as err:  # not code generation's failure: say so, don't hide it
        pytest.xfail(f"optimize() fails on {path.name}: {type(err).__name__}: {err}")
    check(plan)


def fused_with_remainders(program):
    """Every op in one kernel; tiles that leave remainders, reductions tiled outside."""
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    tiles = {}
    for loop in kernel.loops:
        if loop.extent >= 3:
            tiles[loop.name] = {"L1": max(2, loop.extent * 2 // 3), "registers": max(1, loop.extent // 3)}
    schedule = Schedule(kernel, tiles=tiles, levels=("L1", "registers"))
    from autocomp_jupyter import poly

    verdict = poly.check_schedule(schedule)
    if not verdict.ok:  # fuse per op instead (each op's own nest, still tiled)
        kernels = tuple(Kernel.from_ops(program, [op.name]) for op in program.ops)
        schedules = tuple(Schedule(k, tiles={l.name: {"L1": max(1, l.extent * 2 // 3)} for l in k.loops},
                                   levels=("L1",)) for k in kernels)
        return Plan(program, kernels, schedules)
    return Plan(program, (kernel,), (schedule,))


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.stem in ("attention", "conv_direct", "mlp")],
                         ids=lambda p: p.stem)
def test_example_hand_fused_with_remainder_tiles_matches_interpreter(path):
    check(fused_with_remainders(load(path, max_extent=10)))


def test_full_size_gemm_relu():
    result = autocomp.optimize(ROOT / "examples" / "gemm_relu.acir", target="host", tune=0)
    report = check(result.after, threads=None)
    assert report["max_abs_error"] < 1e-2


@pytest.mark.parametrize("threads", [1, 2])
def test_packed_gemm_with_edges_transposed_operand_and_epilogue(threads):
    """The packed GEMM path: sizes that leave partial blocks and micro-tiles everywhere, an
    operand read transposed, a producer before and an epilogue after, serial and OpenMP."""
    program = parse("input X: f32[100, 130]\ninput B: f32[100, 70]\nparam s: f32[70]\n"
                    "tensor At: f32[100, 130]\nAt[k, i] = X[k, i] * 0.5\n"
                    "C[i, j] += At[k, i] * B[k, j]\nD[i, j] = relu(C[i, j] + s[j])\noutput D\n")
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    loops = kernel.loop_names
    schedule = Schedule(kernel, tiles={l: {"L2": 37, "registers": 5} for l in loops},
                        annotations={"parallel": (loops[0],)} if threads > 1 else {}, levels=("L2", "registers"))
    plan = Plan(program, (kernel,), (schedule,))
    from autocomp_jupyter.codegen import generate
    assert "Bpack" in generate(plan, None, "c")
    check(plan, threads=threads)


PACKED_VARIANTS = {
    # name: (program, statements the store must apply)
    "conv_pad_batchnorm_relu": ("input X: f32[1, 16, 14, 14]\nparam W: f32[24, 16, 3, 3]\nparam g: f32[24]\n"
                                "param b: f32[24]\nY = conv2d(X, W, stride=1, padding=1)\nZ = batchnorm(Y, g, b)\n"
                                "R = relu(Z)\n", 2),
    "conv_stride2_dilation2_bias": ("input X: f32[2, 16, 33, 31]\nparam W: f32[20, 16, 3, 3]\nparam bb: f32[20]\n"
                                    "Y = conv2d(X, W, stride=2, padding=2, dilation=2)\nZ = bias_add(Y, bb)\n", 1),
    "conv_groups_bias_relu": ("input X: f32[1, 32, 21, 21]\nparam W: f32[40, 8, 3, 3]\nparam bb: f32[40]\n"
                              "Y = conv2d(X, W, stride=1, padding=1, groups=4)\nZ = bias_add(Y, bb)\nR = relu(Z)\n", 2),
    "conv_groups_stride2_dilation2_batchnorm": ("input X: f32[2, 12, 33, 29]\nparam W: f32[18, 4, 3, 3]\n"
                                                "param g: f32[18]\nparam b: f32[18]\n"
                                                "Y = conv2d(X, W, stride=2, padding=2, dilation=2, groups=3)\n"
                                                "Z = batchnorm(Y, g, b)\n", 1),
    "depthwise_as_groups_dilation2_residual_relu": ("input X: f32[1, 32, 37, 41]\ninput S: f32[1, 32, 37, 41]\n"
                                                    "param W: f32[32, 1, 3, 3]\n"
                                                    "Y = conv2d(X, W, stride=1, padding=2, dilation=2, groups=32)\n"
                                                    "Z = add(Y, S)\nR = relu(Z)\n", 2),
    "depthwise_stride2_relu": ("input X: f32[2, 64, 31, 31]\nparam W: f32[64, 1, 3, 3]\n"
                               "Y = depthwise_conv2d(X, W, stride=2, padding=1)\nR = relu(Y)\n", 1),
    # channel blocks (narrow outputs): a tail of positions, dilation and a residual read flat
    "depthwise_blocks_bias_relu6": ("input X: f32[1, 48, 9, 11]\nparam W: f32[48, 1, 3, 3]\nparam bb: f32[48]\n"
                                    "Y = depthwise_conv2d(X, W, stride=1, padding=1)\nZ = bias_add(Y, bb)\n"
                                    "R = relu6(Z)\n", 2),
    "depthwise_blocks_dilation2_residual": ("input X: f32[1, 32, 13, 12]\ninput S: f32[1, 32, 13, 12]\n"
                                            "param W: f32[32, 1, 3, 3]\n"
                                            "Y = conv2d(X, W, stride=1, padding=2, dilation=2, groups=32)\n"
                                            "Z = add(Y, S)\n", 1),
    "conv_residual_add_relu": ("input X: f32[1, 16, 22, 22]\ninput S: f32[1, 24, 22, 22]\nparam W: f32[24, 16, 3, 3]\n"
                               "Y = conv2d(X, W, stride=1, padding=1)\nZ = add(Y, S)\nR = relu(Z)\n", 2),
    "conv_no_pad_remainders": ("input X: f32[3, 12, 19, 23]\nparam W: f32[13, 12, 5, 3]\n"
                               "Y = conv2d(X, W, stride=1, padding=0)\n", 0),
    "batch_matmul": ("input A: f32[3, 67, 59]\ninput B: f32[3, 59, 71]\nC = batch_matmul(A, B)\n", 0),
    # a 5x5 map of 500 channels: the microkernel runs transposed (25 positions as rows of 7, the
    # channels as 16-wide columns), K = 576 in three kc blocks (partial sums kept as tiles)
    "conv_small_map_transposed_residual_relu": ("input X: f32[1, 64, 5, 5]\ninput S: f32[1, 500, 5, 5]\n"
                                                "param W: f32[500, 64, 3, 3]\nparam bb: f32[500]\n"
                                                "Y = conv2d(X, W, stride=1, padding=1)\nZ = bias_add(Y, bb)\n"
                                                "Q = add(Z, S)\nR = relu(Q)\n", 3),
    "linear_gelu": ("input X: f32[70, 64]\nparam W: f32[64, 90]\nparam b: f32[90]\nY = linear(X, W, b)\n"
                    "R = gelu(Y)\n", 2),
    "int8_gemm_relu_saturates": ("input A: i8[70, 64]\ninput B: i8[64, 70]\ntensor C: i8[70, 70]\n"
                                 "C[i, j] += A[i, k] * B[k, j]\nD[i, j] = relu(C[i, j])\noutput D\n", 1),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(PACKED_VARIANTS))
def test_packed_contractions_with_fused_epilogues_match_interpreter(name, threads):
    """Every conv variant (stride, dilation, padding, groups, depthwise, remainders), batched
    and int8 GEMMs run packed, their epilogues applied in the microkernel's store (no second
    pass over the output), on 1 and 2 threads, and match the interpreter."""
    from autocomp_jupyter.codegen.c import generate_c
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.depthwise import channel_blocks
    from autocomp_jupyter.host_strategy.operands import prepacked
    from autocomp_jupyter.host_strategy.rows import direct_rows

    src, fused = PACKED_VARIANTS[name]
    program = parse(src)
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    tiles = {l: {"L2": max(1, e * 2 // 3), "registers": max(1, e // 3)} for l, e in kernel.extents.items()}
    parallel = {"parallel": kernel.loop_names[:2]} if threads > 1 else {}
    schedule = Schedule(kernel, tiles=tiles, annotations=parallel, levels=("L2", "registers"))
    plan = Plan(program, (kernel,), (schedule,))
    pk = packed_contraction(kernel, schedule)
    assert pk is not None and len(pk.epilogue) == fused
    assert pk.swapped == ("transposed" in name)
    text = generate_c(plan)
    dr = direct_rows(kernel, pk)
    if dr is not None:     # a depthwise conv: direct rows or channel blocks, no packing
        blocked = channel_blocks(kernel, pk, dr) is not None
        assert blocked == ("blocks" in name or "stride2" in name)
        assert "Bpack" not in text and name.startswith("depthwise")
        assert text.count("/* channel blocks" if blocked else "/* direct rows") == 1
        assert ("ac_transpose16(" in text) == blocked
        assert ("#pragma omp for schedule(dynamic" in text) == (threads > 1)
    else:
        # the weights (a param read in range) are packed once, ahead; the other operand per block
        pre = [w for w, a in (("a", pk.a), ("b", pk.b)) if prepacked(kernel, pk, w)]
        assert pre == [w for w, a in (("a", pk.a), ("b", pk.b)) if kernel.tensor(a.tensor).role == "param"]
        assert ("Bpack" in text) == ("b" not in pre) and ("Apack" in text) == ("a" not in pre)
        assert text.count("_prepacked = NULL;") == len(pre)
        assert ("#pragma omp parallel num_threads(" in text) == (threads > 1)
        assert text.count("/* packed GEMM") == 1
    check(plan, threads=threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_few_rows_read_b_in_place_and_match_interpreter(threads):
    """A 1x1 conv with few output channels (M = 24) over whole 16-column panels reads its input
    in place (`b_in_place`: no B packing, k steps a row of positions apart), its bias and a
    residual applied in the store; with N not a multiple of 16 it packs B as before."""
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.operands import b_in_place

    for hw, in_place in ((16, True), (15, False)):
        src = (f"input X: f32[1, 64, {hw}, {hw}]\ninput S: f32[1, 24, {hw}, {hw}]\nparam W: f32[24, 64, 1, 1]\n"
               "param bb: f32[24]\nY = conv2d(X, W, stride=1, padding=0)\nZ = bias_add(Y, bb)\nR = add(Z, S)\n")
        plan = autocomp.optimize(parse(src), target="host", tune=0).after
        kernel, schedule = plan.kernels[0], plan.schedules[0]
        pk = packed_contraction(kernel, schedule)
        assert pk is not None and not pk.swapped
        assert b_in_place(kernel, pk) == (hw * hw if in_place else 0)
        text = generate(plan, None, "c")
        assert ("B read in place" in text) == in_place and ("Bpack" in text) == (not in_place)
        check(plan, threads=threads)


def test_depthwise_channel_blocks_ring_matches_interpreter():
    """A depthwise conv in channel blocks keeps a ring of the padded input rows one output row
    reads (3 for a 3x3 window, 5 for one dilated by 2), each transposed in once: at stride 2, a
    row 20 wide (its last transpose writes 12 positions past the row: its slot's slack, not the
    next row's) and dilated, it matches the interpreter."""
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.depthwise import channel_blocks
    from autocomp_jupyter.host_strategy.rows import direct_rows

    for src, ring, rows in (
            ("input X: f32[1, 32, 29, 20]\nparam W: f32[32, 1, 3, 3]\n"
             "Y = depthwise_conv2d(X, W, stride=2, padding=1)\nR = relu(Y)\n", 3, 2 * (15 - 1) + 3),
            ("input X: f32[1, 16, 20, 20]\nparam W: f32[16, 1, 3, 3]\n"
             "tensor Y: f32[1, 16, 20, 20]\nY[n, c, h, w] += X[n, c, h + 2 * r - 2, w + 2 * s - 2] * W[c, 0, r, s]\n"
             "output Y\n", 5, 20 - 1 + 5)):
        plan = autocomp.optimize(parse(src), target="host", tune=0).after
        kernel, schedule = plan.kernels[0], plan.schedules[0]
        pk = packed_contraction(kernel, schedule)
        cb = channel_blocks(kernel, pk, direct_rows(kernel, pk))
        assert cb is not None and (cb.ring, cb.rows) == (ring, rows)
        text = generate(plan, None, "c")
        assert f"a ring of the {ring} padded input rows" in text
        check(plan, threads=1)
        check(plan, threads=2)


VECTOR_ROWS_VARIANTS = {
    # name: (program, rows of a pass, vectors of a row)
    # stride 2, two images, its epilogue (bias, relu6) along the rows; rows 2 a pass (3 vectors)
    # with an odd number of output rows: a last pass of one
    "stride2_two_images_bias_relu6": ("input X: f32[2, 16, 27, 66]\nparam W: f32[16, 1, 3, 3]\nparam bb: f32[16]\n"
                                      "Y = depthwise_conv2d(X, W, stride=2, padding=1)\nZ = bias_add(Y, bb)\n"
                                      "R = relu6(Z)\n", 2, 3),
    # 5x5 at stride 2, padding 2: two padded columns at each edge, masked lanes at both ends
    "stride2_5x5_pad2": ("input X: f32[1, 8, 18, 70]\nparam W: f32[8, 1, 5, 5]\n"
                         "Y = depthwise_conv2d(X, W, stride=2, padding=2)\n", 2, 3),
    # stride 1 with a residual read along the rows; 130 wide: 9 vectors, passes of 8 and 1
    "stride1_wide_residual": ("input X: f32[1, 4, 6, 130]\ninput S: f32[1, 4, 6, 130]\nparam W: f32[4, 1, 3, 3]\n"
                              "Y = depthwise_conv2d(X, W, stride=1, padding=1)\nZ = add(Y, S)\n", 1, 9),
}


@pytest.mark.parametrize("name", sorted(VECTOR_ROWS_VARIANTS))
def test_strided_and_wide_depthwise_rows_run_as_vector_rows_and_match_interpreter(name):
    """A depthwise conv whose rows are 32 to 256 wide runs as vector rows (`vector_rows`):
    per channel, 16-wide output vectors summed straight from the unpadded plane (no padded copy,
    no transposes), several rows a pass where a row has few vectors; it matches the
    interpreter on 1 and 2 threads, and the host model costs it."""
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.depthwise import channel_blocks, vector_rows
    from autocomp_jupyter.host_strategy.rows import direct_rows

    src, rows, vectors = VECTOR_ROWS_VARIANTS[name]
    plan = autocomp.optimize(parse(src), target="host", tune=0).after
    kernel, schedule = plan.kernels[0], plan.schedules[0]
    pk = packed_contraction(kernel, schedule)
    dr = direct_rows(kernel, pk)
    assert vector_rows(kernel, pk, dr) is not None and channel_blocks(kernel, pk, dr) is None
    text = generate(plan, None, "c")
    assert text.count("/* vector rows") == 1 and f"as {vectors} vectors of 16 per row" in text
    assert f"accrow[{rows}][{vectors * 16}]" in text
    assert "ac_transpose16(" not in text and "_padded" not in text
    check(plan, threads=1)
    check(plan, threads=2)
    assert 0 < host.predicted_time(plan, threads=1) < 1e-3


@pytest.mark.parametrize("h, w, narrow", [(14, 14, "_q[2][4][8]"), (10, 20, "_h[8][8]")])
def test_a_last_panel_of_few_columns_runs_narrow_and_matches_interpreter(h, w, narrow):
    """A packed GEMM whose N leaves a last panel of at most 4 columns (a 14x14 map: 196 = 12 x 16
    + 4) runs it with the rows as the vector (even and odd k steps apart), of at most 8 (200 =
    12 x 16 + 8) with half-wide vectors; its store and epilogue (a residual) match."""
    src = (f"input X: f32[1, 96, {h}, {w}]\ninput S: f32[1, 40, {h}, {w}]\nparam W: f32[40, 96, 1, 1]\n"
           "param bb: f32[40]\nY = conv2d(X, W)\nZ = bias_add(Y, bb)\nR = add(Z, S)\n")
    plan = autocomp.optimize(parse(src), target="host", tune=0).after
    text = generate(plan, None, "c")
    assert narrow in text and ("_q[2]" in text) == (narrow.startswith("_q"))
    check(plan, threads=1)
    check(plan, threads=2)


WINOGRAD_VARIANTS = {
    # name: (program, statements the store must apply)
    # odd output sizes (edge tiles and a padded tile row), no padding, two batch items, a bias and
    # a residual applied in the store
    "odd_no_pad_bias_residual": ("input X: f32[2, 40, 19, 23]\ninput S: f32[2, 36, 17, 21]\n"
                                 "param W: f32[36, 40, 3, 3]\nparam b: f32[36]\n"
                                 "Y = conv2d(X, W, stride=1, padding=0)\nZ = bias_add(Y, b)\nQ = add(Z, S)\n", 2),
    # a 7x9 map: tile rows of 5 padded to 8; a 7x7 map of two batch items: panels of 2 tile rows of 4
    "rows_of_5_bias": ("input X: f32[1, 32, 7, 9]\nparam W: f32[33, 32, 3, 3]\nparam b: f32[33]\n"
                       "Y = conv2d(X, W, stride=1, padding=1)\nZ = bias_add(Y, b)\n", 1),
    "map_7x7_two_rows_per_panel": ("input X: f32[2, 64, 7, 7]\nparam W: f32[48, 64, 3, 3]\n"
                                   "Y = conv2d(X, W, stride=1, padding=1)\nR = relu(Y)\n", 1),
    # padding 1, output channels not a multiple of 16, relu6; tile rows of 7 in panels of 8
    "pad_relu6": ("input X: f32[1, 48, 14, 14]\nparam W: f32[40, 48, 3, 3]\n"
                  "Y = conv2d(X, W, stride=1, padding=1)\nR = relu6(Y)\n", 1),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(WINOGRAD_VARIANTS))
def test_winograd_convolutions_match_interpreter(name, threads):
    """3x3 stride-1 convolutions with a param as weights run as Winograd F(2x2, 3x3) (the
    weights transformed once, 16 GEMMs per block of tiles, the epilogue in the output
    transform's store), on 1 and 2 threads, and match the interpreter; the host model and the
    simulator's replay both take its Winograd cost, not the packed GEMM's."""
    from autocomp_jupyter.accel.host_model import replay_packed, winograd_cycles
    from autocomp_jupyter.codegen.c import generate_c
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.winograd import winograd

    src, fused = WINOGRAD_VARIANTS[name]
    program = parse(src)
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    tiles = {l: {"L2": max(1, e * 2 // 3), "registers": max(1, e // 3)} for l, e in kernel.extents.items()}
    parallel = {"parallel": kernel.loop_names[:2]} if threads > 1 else {}
    schedule = Schedule(kernel, tiles=tiles, annotations=parallel, levels=("L2", "registers"))
    plan = Plan(program, (kernel,), (schedule,))
    pk = packed_contraction(kernel, schedule)
    wg = winograd(kernel, pk)
    assert wg is not None and len(pk.epilogue) == fused
    text = generate_c(plan)
    assert text.count("/* Winograd F(2x2, 3x3)") == 1 and "Bpack" not in text
    assert ("#pragma omp parallel num_threads(" in text) == (threads > 1)
    target = load_target("host")
    assert replay_packed(kernel, schedule, target) == pytest.approx(
        winograd_cycles(kernel, pk, wg, target, target.compute.units if threads > 1 else 1) / (target.clock_ghz * 1e9))
    check(plan, threads=threads)


def test_winograd_only_for_3x3_stride_1_convs_of_wide_maps():
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.winograd import winograd

    def wg(src):
        program = parse(src)
        kernel = Kernel.from_ops(program, [op.name for op in program.ops])
        return winograd(kernel, packed_contraction(kernel))
    assert wg("input X: f32[1, 64, 28, 28]\nparam W: f32[64, 64, 3, 3]\nY = conv2d(X, W, stride=1, padding=1)\n")
    assert not wg("input X: f32[1, 64, 28, 28]\nparam W: f32[64, 64, 3, 3]\nY = conv2d(X, W, stride=2, padding=1)\n")
    assert not wg("input X: f32[1, 64, 28, 28]\nparam W: f32[64, 64, 3, 3]\n"
                  "Y = conv2d(X, W, stride=1, padding=2, dilation=2)\n")
    assert not wg("input X: f32[1, 64, 28, 28]\nparam W: f32[64, 64, 5, 5]\nY = conv2d(X, W, stride=1, padding=2)\n")
    # a 7x7 map: panels of 2 tile rows of 4; narrower ones stay packed
    assert wg("input X: f32[1, 512, 7, 7]\nparam W: f32[512, 512, 3, 3]\nY = conv2d(X, W, stride=1, padding=1)\n")
    assert not wg("input X: f32[1, 64, 5, 5]\nparam W: f32[64, 64, 3, 3]\nY = conv2d(X, W, stride=1, padding=1)\n")
    # weights computed, not a param: no transform done once
    assert not wg("input X: f32[1, 64, 28, 28]\ninput W: f32[64, 64, 3, 3]\nY = conv2d(X, W, stride=1, padding=1)\n")


def test_a_whole_tensor_copy_is_one_straight_pass_whatever_its_tiles():
    """A reshape of a transpose's result copies element for element in the same order: one
    flat loop (the schedule's tiles ignored); the transpose itself (a permuted copy) keeps its nest.
    T is an output of its own: otherwise the pipeline folds the transpose into the reshape (one
    permuted copy from X)."""
    program = parse("input X: f32[1, 12, 16, 8]\nT = transpose(X, perm=[0, 2, 1, 3])\n"
                    "Y = reshape(T, shape=[1, 16, 96])\noutput T\noutput Y\n")
    plan = autocomp.optimize(program, target="host", tune=0).after
    text = generate_c(plan)
    assert text.count("] = T[x];") == 1 and "] = X[x];" not in text
    check(plan)


def test_names_that_are_c_keywords_compile():
    program = parse("input int: f32[4, 8]\ninput for: f32[8, 5]\nacc = matmul(int, for)\nexp = relu(acc)\n")
    plan = autocomp.optimize(program, target="host", tune=0).after
    check(plan)


def test_f16_matmul_matches_the_interpreter():
    program = parse("input A: f16[8, 8]\ninput B: f16[8, 8]\nC = matmul(A, B)\n")
    check(autocomp.optimize(program, target="host", tune=0).after)


def small_plan():
    program = parse("input A: f32[64, 64]\ninput B: f32[64, 64]\nC = matmul(A, B)\n")
    return autocomp.optimize(program, target="host", tune=0).after


def test_a_crash_in_generated_code_is_reported_not_fatal():
    plan = small_plan()
    compiled = host.compile_plan(plan)
    inputs = random_inputs(plan.program)
    with pytest.raises(host.HostRunError, match="crashed with SIG"):   # A's buffer is a NULL pointer
        host.run_compiled(compiled, inputs, null_buffers=["A"])
    outputs, _ = host.run_compiled(compiled, inputs)                   # and this process carries on
    assert compare_outputs(plan.program, run(plan.program, inputs), outputs).ok


def test_a_hang_is_stopped_by_the_timeout():
    plan = autocomp.optimize(ROOT / "examples" / "gemm_relu.acir", target="host", tune=0).after
    compiled = host.compile_plan(plan)
    with pytest.raises(host.HostRunError, match="did not finish within"):
        host.run_compiled(compiled, random_inputs(plan.program), repeats=1000, timeout=0.5)


def test_compiler_errors_show_the_message_and_the_file():
    with pytest.raises(host.HostCompileError) as info:
        host.compile_source("int main( { return 0; }\n", name="broken")
    assert isinstance(info.value, UserError)
    assert "error" in str(info.value) and "broken.c" in str(info.value)


def test_no_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(host.HostCompileError, match="no C compiler found"):
        host.compile_source("void f(void) {}\n", name="nocc")


def test_measured_score_for_the_tuner():
    seconds = host.measured_scorer(repeats=2, threads=1)(small_plan())
    assert 0 < seconds < 1


# --------------------------------------------------------------------------- integer programs, exactly

def check_exact(plan, inputs, threads):
    """measure_plan on given inputs: the C's integer outputs equal the interpreter's, bit for bit."""
    report = host.measure_plan(plan, repeats=0, threads=threads, inputs=inputs)
    assert report["matches_interpreter"], report["reason"]
    assert report["max_abs_error"] == 0.0, report
    return report


def one_kernel(program, tiles=None, parallel=False, levels=("L2", "registers")):
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    tiles = tiles if tiles is not None else {l: {"L2": max(1, e // 2)} for l, e in kernel.extents.items()}
    annotations = {"parallel": kernel.loop_names[:1]} if parallel else {}
    return Plan(program, (kernel,), (Schedule(kernel, tiles=tiles, annotations=annotations, levels=levels),))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("path", ["packed", "nest"])
def test_int8_gemm_beyond_2_pow_24_is_exact(path, threads):
    """K = 4096, values up to 127: sums of ~6.6e7 (> 2^24, odd), exact in the i32 output,
    through the packed GEMM (64 x 64) and through the tiled nest (6 x 8: register tiles)."""
    from autocomp_jupyter.codegen.c import generate_c

    m, n = (64, 64) if path == "packed" else (6, 8)
    program = parse(f"input A: i8[{m}, 4096]\ninput B: i8[4096, {n}]\ntensor C: i32[{m}, {n}]\n"
                    "C[i, j] += A[i, k] * B[k, j]\noutput C\n")
    rng = np.random.default_rng(3)
    inputs = {"A": np.full((m, 4096), 127.0), "B": rng.choice([126.0, 127.0], size=(4096, n))}
    inputs["A"][::7, ::5] = -128.0
    expected = run(program, inputs)["C"]
    assert np.abs(expected).max() > 2 ** 24 and (expected % 2 == 1).any()
    assert (expected != expected.astype(np.float32)).any()       # f32 cannot hold them
    tiles = None if path == "packed" else {"i": {"L2": 3}, "j": {"L2": 4}, "k": {"L2": 512}}
    plan = one_kernel(program, tiles, parallel=threads > 1)
    assert ("Bpack" in generate_c(plan)) == (path == "packed")
    check_exact(plan, inputs, threads)


def test_int8_gemm_up_to_2_pow_24_packs_in_float_exactly():
    """i8 x i8 with K = 1024: every partial sum is an integer of at most 2^24, so the packed
    path keeps float panels (twice the lanes), exact up to that bound (-128 * -128 * 1024
    = 2^24); K = 1025 sums in double."""
    from autocomp_jupyter.codegen.c import generate_c

    for k, kind in ((1024, "float"), (1025, "double")):
        program = parse(f"input A: i8[64, {k}]\ninput B: i8[{k}, 64]\ntensor C: i32[64, 64]\n"
                        "C[i, j] += A[i, k] * B[k, j]\noutput C\n")
        assert f"{kind} acc[8][16]" in generate_c(one_kernel(program))
    program = parse("input A: i8[64, 1024]\ninput B: i8[1024, 64]\ntensor C: i32[64, 64]\n"
                    "C[i, j] += A[i, k] * B[k, j]\noutput C\n")
    rng = np.random.default_rng(9)
    a = np.full((64, 1024), -128.0)
    a[1::2, 0] = 127.0                                      # odd sums just below 2^24
    inputs = {"A": a, "B": rng.choice([-128.0, -127.0], size=(1024, 64))}
    inputs["B"][:, 0] = -128.0
    expected = run(program, inputs)["C"]
    assert expected.max() == 2 ** 24 and (expected % 2 == 1).any()
    check_exact(one_kernel(program), inputs, 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_int32_chain_near_2_pow_31_saturates_like_the_interpreter(threads):
    program = parse("input A: i32[40]\ninput B: i32[40]\ntensor S: i32[40]\ntensor D: i32[40]\ntensor E: i32[40]\n"
                    "S[i] = A[i] + B[i]\nD[i] = S[i] - B[i] + 1\nE[i] = D[i] * 3 - A[i] * 2\noutput S, D, E\n")
    rng = np.random.default_rng(5)
    top = 2.0 ** 31
    a = np.concatenate([top - rng.integers(1, 300, 20), -top + rng.integers(0, 300, 20)])
    b = rng.integers(-500, 500, 40).astype(np.float64)
    inputs = {"A": a, "B": b}
    out = run(program, inputs)
    assert out["S"].max() == top - 1 and out["S"].min() == -top      # both ends saturate
    for plan in (one_kernel(program, parallel=threads > 1),
                 Plan(program, tuple(Kernel.from_ops(program, [op.name]) for op in program.ops),
                      tuple(Schedule(Kernel.from_ops(program, [op.name])) for op in program.ops))):
        check_exact(plan, inputs, threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_int8_conv_with_padding_into_int32_is_exact(threads):
    """A padded conv of i8 values into i32: 128 channels x 3 x 3, sums past 2^24."""
    program = parse("input X: i8[1, 128, 10, 10]\nparam W: i8[8, 128, 3, 3]\ntensor Y: i32[1, 8, 10, 10]\n"
                    "Y[n, f, h, w] += X[n, c, h + r - 1, w + s - 1] * W[f, c, r, s]\noutput Y\n")
    rng = np.random.default_rng(7)
    inputs = {"X": rng.choice([126.0, 127.0], size=(1, 128, 10, 10)), "W": rng.choice([127.0, 126.0],
                                                                                        size=(8, 128, 3, 3))}
    expected = run(program, inputs)["Y"]
    assert np.abs(expected).max() > 2 ** 24 and (expected != expected.astype(np.float32)).any()
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    plan = one_kernel(program, {l: {"L2": max(1, e * 2 // 3)} for l, e in kernel.extents.items()},
                      parallel=threads > 1)
    check_exact(plan, inputs, threads)


def test_int32_average_pool_rounds_half_to_even():
    """Sums near 1e9 (not f32 values), divided by 4: quarters, halves rounding to even."""
    program = parse("input X: i32[1, 2, 6, 6]\nY = avgpool2d(X, kernel=2)\noutput Y\n")
    rng = np.random.default_rng(11)
    inputs = {"X": 250_000_000.0 + rng.integers(0, 1000, (1, 2, 6, 6))}
    sums = run(program, inputs)["Y_sum"]
    assert {0, 1, 2, 3} <= set((sums % 4).astype(int).ravel())          # every fraction, .5 included
    check_exact(one_kernel(program), inputs, 1)
    check_exact(autocomp.optimize(program, target="host", tune=0).after, inputs, 2)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_dtypes_round_like_the_interpreter(dtype):
    """f16/bf16 results are rounded to the dtype on every store: 1 + x for small x stays on
    the dtype's grid (f32 would keep bits the interpreter drops)."""
    program = parse(f"input A: {dtype}[64]\ntensor B: {dtype}[64]\ntensor C: {dtype}[64]\n"
                    "B[i] = A[i] * 0.3 + 1.0\nC[i] = B[i] * 3.0\noutput B, C\n")
    from autocomp_jupyter.interp import round_to_dtype

    inputs = {"A": round_to_dtype(np.linspace(-1, 1, 64), dtype)}
    expected = run(program, inputs)
    outputs, _ = host.run_compiled(host.compile_plan(one_kernel(program)), inputs)
    for name in ("B", "C"):
        assert np.array_equal(outputs[name], round_to_dtype(outputs[name], dtype))   # on the grid
        assert np.abs(outputs[name] - expected[name]).max() <= np.abs(expected[name]).max() * 2.0 ** -7


def test_vectorised_exp_tanh_sigmoid_gelu_keep_their_documented_error_bounds():
    """The prelude's branch-free ac_expf / ac_tanhf (codegen/c/: what lets the compiler
    vectorise exp, tanh, sigmoid and GELU, fused epilogues included) against float64 over
    [-100, 100]: exp within 2e-7 relative (0 below float's normal range, +inf past it),
    tanh and sigmoid within 3e-7 absolute, GELU within 3e-7 max(1, |x|); NaN stays NaN."""
    n = 1 << 14
    x = np.concatenate([np.linspace(-100, 100, n // 2), np.linspace(-3, 3, n // 2), [np.nan]]).astype(np.float32)
    src = (f"input X: f32[{n + 1}]\nE = exp(X)\nT = tanh(X)\nS = sigmoid(X)\nG = gelu(X)\n"
           "output E\noutput T\noutput S\noutput G\n")
    plan = autocomp.optimize(src, target="host", tune=0).after
    outputs, _ = host.run_compiled(host.compile_plan(plan), {"X": x})
    xd = x.astype(np.float64)[:-1]
    with np.errstate(over="ignore"):
        e = np.exp(xd)
    normal = (e > 1.2e-38) & (e < 3.4e38)
    got = outputs["E"][:-1]
    assert np.all(np.abs(got[normal] - e[normal]) <= 2e-7 * e[normal])
    assert np.all(got[e >= 3.4e38] == np.inf) and np.all(got[e < 1e-39] == 0.0)
    expected = {"T": np.tanh(xd), "S": 1 / (1 + np.exp(-xd)),
                "G": 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))}
    for name, want in expected.items():
        bound = 3e-7 * (np.maximum(1.0, np.abs(xd)) if name == "G" else 1.0)     # GELU: x times tanh's error
        assert np.all(np.abs(outputs[name][:-1] - want) <= bound), name
    assert all(np.isnan(outputs[k][-1]) for k in "ETSG")


DIRECT_VARIANTS = {
    # name: (program, the comment the path writes)
    "gemv_transposed_bias": ("input X: f32[1, 700]\nparam W: f32[90, 700]\nparam b: f32[90]\n"
                             "Y[i, j] += X[i, k] * W[j, k]\nZ[i, j] = Y[i, j] + b[j]\noutput Z\n", "direct dot products"),
    "gemv_rows_relu": ("input X: f32[1, 300]\nparam W: f32[300, 170]\nparam b: f32[170]\nY = linear(X, W, b)\n"
                       "R = relu(Y)\n", "direct rows"),
    # a long row on 2 threads: each thread its own run of it (`gemv_split`), 1000 = 62.5 vectors
    "gemv_row_shared_relu": ("input X: f32[1, 200]\nparam W: f32[200, 1000]\nparam b: f32[1000]\n"
                             "Y = linear(X, W, b)\nR = relu(Y)\n", "direct rows"),
    # 40 channels: not whole blocks of 16 (which run as channel blocks, test_packed_contractions_...)
    "depthwise_14x14_as_planes_bias_relu": ("input X: f32[1, 40, 14, 14]\nparam W: f32[40, 1, 3, 3]\n"
                                            "param b: f32[40]\nY = depthwise_conv2d(X, W, stride=1, padding=1)\n"
                                            "Z = bias_add(Y, b)\nR = relu(Z)\n", "as planes of rows 16 apart"),
    "maxpool_3x3_stride2_pad1": ("input X: f32[2, 8, 29, 31]\nY = maxpool2d(X, kernel=3, stride=2, padding=1)\n",
                                 "direct rows of"),
    # a padded copy large enough to be filled by all the threads (then static rows)
    "maxpool_3x3_stride2_shared_copy": ("input X: f32[1, 16, 66, 70]\nY = maxpool2d(X, kernel=3, stride=2, padding=1)\n",
                                        "direct rows of"),
    "avgpool_2x2_relu": ("input X: f32[1, 16, 40, 40]\nY = avgpool2d(X, kernel=2)\nR = relu(Y)\n", "direct rows of"),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(DIRECT_VARIANTS))
def test_one_row_gemms_and_pooling_run_as_direct_rows_and_match_interpreter(name, threads):
    """A one-row GEMM runs unpacked (a dot product per output against B[n, k], rows of
    outputs against B[k, n]) and pooling as rows over a padded copy (host_strategy/
    `direct_rows`, `window_rows`), on 1 and 2 threads, matching the interpreter."""
    src, marker = DIRECT_VARIANTS[name]
    plan = autocomp.optimize(parse(src), target="host", tune=0).after
    text = generate(plan, None, "c")
    assert marker in text and "Bpack" not in text
    assert ("row shared by the threads" in text) == (name == "gemv_row_shared_relu"), name
    assert ("omp parallel for collapse(3)" in text) == (name == "maxpool_3x3_stride2_shared_copy"), name
    check(plan, threads=threads)
    if name == "gemv_row_shared_relu" and threads == 2:
        check(plan, threads=3)      # runs of 21 and 20 vectors, the last one short


def test_a_loop_both_parallel_and_vectorised_compiles():
    """An epilogue nest whose one loop is parallel and vectorised gets one combined
    `parallel for simd` (two stacked pragmas on one loop do not compile; fuzz seed 1404)."""
    program = parse("input X1: f32[3, 3]\nparam P2: f32[3, 1]\nT3 = linear(X1, P2)\nT4 = erf(T3)\n")
    plan = autocomp.optimize(program, target="host", tune=0).after
    assert "#pragma omp parallel for num_threads(ac_team())\n        #pragma omp simd" not in generate_c(plan)
    check(plan)


def test_up_to_16_rows_one_panel_b_in_place_beyond_l2_matches_interpreter():
    """A 1x1 conv with 12 output channels runs one 12 x 16 panel of all its rows
    (`GEMM_MR_ONE_PANEL`) and reads its 1.2 MB input in place (no size bound: its rows are
    fetched ahead, `B_IN_PLACE_AHEAD`), its ReLU in the store; it matches the interpreter."""
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.operands import b_in_place

    src = ("input X: f32[1, 72, 64, 64]\nparam W: f32[12, 72, 1, 1]\n"
           "Y = conv2d(X, W, stride=1, padding=0)\nR = relu(Y)\n")
    plan = autocomp.optimize(parse(src), target="host", tune=0).after
    kernel, schedule = plan.kernels[0], plan.schedules[0]
    pk = packed_contraction(kernel, schedule)
    assert pk is not None and not pk.swapped and pk.micro == (12, 16)
    assert b_in_place(kernel, pk) == 64 * 64
    text = generate(plan, None, "c")
    assert "B read in place" in text and "Bpack" not in text and "float acc[12][16]" in text
    check(plan, threads=1)


def test_many_rows_read_a_small_b_in_place_and_match_interpreter():
    """A 1x1 expand conv (24 -> 144 channels, K = 24) reads its input in place when that input
    is at most B_IN_PLACE_SWEPT_BYTES_MAX (each of its 18 row panels sweeps it) and matches the
    interpreter; with a larger input (16 x 112 x 112: 784 KB) it packs B as before."""
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.operands import b_in_place

    for c, hw, in_place in ((24, 16, True), (16, 112, False)):
        src = (f"input X: f32[1, {c}, {hw}, {hw}]\nparam W: f32[144, {c}, 1, 1]\n"
               "Y = conv2d(X, W, stride=1, padding=0)\nR = relu(Y)\n")
        plan = autocomp.optimize(parse(src), target="host", tune=0).after
        kernel, schedule = plan.kernels[0], plan.schedules[0]
        pk = packed_contraction(kernel, schedule)
        assert pk is not None and not pk.swapped
        assert b_in_place(kernel, pk) == (hw * hw if in_place else 0)
        if in_place:
            assert "B read in place" in generate(plan, None, "c")
            check(plan, threads=2)


def test_a_row_major_activation_packs_as_rows_side_by_side():
    """A[i, k] with k contiguous (an activation times weights) packs its MR-row panels as MR
    straight runs (HOST_COPY_ROWS), not as a strided copy; A[k, i] is one straight run; a
    prepacked A (a param) costs no copy."""
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.operands import HOST_COPY_ROWS, HOST_COPY_RUN, host_copy_costs
    from autocomp_jupyter.ir.schedule import kernels_unfused

    def a_cost(src):
        kernel = kernels_unfused(parse(src))[0]
        return host_copy_costs(kernel, packed_contraction(kernel))[0]
    assert a_cost("input X: f32[128, 256]\nparam W: f32[256, 512]\nY = matmul(X, W)\n") == HOST_COPY_ROWS
    assert a_cost("input X: f32[256, 128]\nparam W: f32[256, 512]\nY[i, j] += X[k, i] * W[k, j]\n") \
        == HOST_COPY_RUN
    assert a_cost("param X: f32[128, 256]\ninput W: f32[256, 512]\nY = matmul(X, W)\n") == 0.0


def test_a_fused_epilogue_charges_its_calls_and_still_beats_the_separate_pass():
    """The packed GEMM's store charges a fused GELU its calls (HOST_LIBM_CYCLES less the
    loop's own load and store) on top of the GEMM alone, and per statement no more than the
    same statement costs in a nest of its own: the linear + GELU and a linear + the erf GELU
    an ONNX export writes out (an exp inside) both stay fused on host."""
    from autocomp_jupyter.accel import host_model
    from autocomp_jupyter.accel.cost import evaluate
    from autocomp_jupyter.host_strategy.contraction import packed_contraction

    target = load_target("host")
    src = ("input X: f32[128, 256]\nparam W: f32[256, 512]\nparam b: f32[512]\nH = linear(X, W, b)\n"
           "G = gelu(H)\noutput G\n")
    result = autocomp.optimize(src, target="host", tune=0)
    (kernel,), (schedule,) = result.after.kernels, result.after.schedules
    assert kernel.ops == ("H", "G")
    pk = packed_contraction(kernel)
    want = host_model.HOST_LIBM_CYCLES["gelu"] - host_model.HOST_CALL_STREAM
    per_point = host_model._epilogue_cycles(kernel, pk, target.compute)
    # the bias add (one op at vector_ops_per_cycle) and GELU's calls
    assert per_point == pytest.approx(1 / target.compute.vector_ops_per_cycle + want)
    lib = {k.ops: evaluate(s, target).time_s for k, s in zip(result.library.kernels, result.library.schedules)}
    fused = evaluate(schedule, target).time_s
    assert fused < sum(lib.values())
    erf_gelu = ("input X: f32[128, 256]\nparam W: f32[256, 512]\nparam b: f32[512]\nH = linear(X, W, b)\n"
                "T[i, j] = 1 / (1 + 0.3275911 * abs(H[i, j] * 0.70710678))\n"
                "G[i, j] = 0.5 * H[i, j] * (1 + (1 - T[i, j] * (0.254829592 + T[i, j] * (-0.284496736 + T[i, j] "
                "* 1.421413741))) * exp(-(H[i, j] * H[i, j] * 0.5)))\noutput G\n")
    kernels = autocomp.optimize(erf_gelu, target="host", tune=0).after.kernels
    assert len(kernels) == 1 and packed_contraction(kernels[0]).epilogue


def test_an_elementwise_register_tile_narrower_than_a_vector_runs_that_many_lanes():
    """A plain nest's elementwise statement runs the C's innermost register-tile loop as its
    vector: 1 wide along the contiguous loop, its GELU calls are charged per point as if
    scalar (lanes x), so the model ranks it far below a vector-wide tile, and the plan it picks
    for a lone GELU is at least a vector wide there (this machine's f32 lanes: 16 with
    AVX-512, 8 with AVX2)."""
    src = "input H: f32[128, 3072]\nG = gelu(H)\noutput G\n"
    result = autocomp.optimize(src, target="host", tune=0)
    lanes = result.target.compute.lanes
    (kernel,), (schedule,) = result.after.kernels, result.after.schedules
    inner = kernel.loops[-1].name            # the contiguous loop (G's last index)
    assert schedule.tile_sizes()[inner][-1] >= lanes

    def time_with(width):
        tiles = {loop: dict(zip(("L3", "L2", "L1", "registers"), sizes)) for loop, sizes in schedule.tile_sizes().items()}
        tiles[inner] = {"L3": 256, "L2": 64, "L1": 32, "registers": width}
        variant = result.evaluate_variant(kernel.name, tiles=tiles)
        assert variant["legal"], variant["reason"]
        return variant["time_s"]
    assert time_with(1) > 5 * time_with(lanes)
