"""Generated C and pseudo-code: golden files for fixed plans, sanitised names, errors.

Golden files live in tests/golden/; regenerate them with `UPDATE_GOLDEN=1 python -m pytest
tests/test_codegen.py` and review the diff. The plans here are built by hand (fixed kernels
and schedules), so the goldens change only when code generation does, not when the passes do.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.codegen import generate
from autocomp_jupyter.codegen.c import Namer
from autocomp_jupyter.dsl import load, parse
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.result import Plan

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"


def fused_plan(program, tiles, order=None, annotations=None, levels=("L2", "L1", "registers")) -> Plan:
    """All ops of `program` in one kernel with the given schedule."""
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    tiles = {l: v for l, v in tiles.items() if l in kernel.loop_names}
    schedule = Schedule(kernel, tiles=tiles, order=order or {}, annotations=annotations or {}, levels=levels)
    return Plan(program, (kernel,), (schedule,), "test")


def gemm_relu_plan():
    return fused_plan(load(ROOT / "examples" / "gemm_relu.acir"),
                      {"i": {"L2": 256, "L1": 64, "registers": 4}, "j": {"L2": 256, "L1": 64, "registers": 16},
                       "k": {"L2": 256, "L1": 256}},
                      order={"L2": ("i", "k", "j"), "registers": ("i", "j", "k")},
                      annotations={"parallel": ("i",), "vectorize": "j", "unroll": 4})


def conv_bn_relu_plan(levels=("L2", "L1", "registers")):
    inner, mid, outer = levels[-1], levels[-2], levels[0]
    return fused_plan(load(ROOT / "examples" / "conv_bn_relu.acir"),
                      {"f": {outer: 32, mid: 16, inner: 8}, "c": {outer: 32, mid: 16}, "h": {outer: 28, mid: 14},
                       "w": {mid: 28, inner: 8}},
                      order={outer: ("n", "f", "c", "h", "w", "r", "s")},
                      annotations={"parallel": ("f",), "vectorize": "w"}, levels=levels)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") or not path.exists():
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        if not os.environ.get("UPDATE_GOLDEN"):
            pytest.skip(f"wrote missing golden file {path}")
    assert text == path.read_text(), f"{name} differs from its golden file; UPDATE_GOLDEN=1 to accept"


def test_golden_c_gemm_relu():
    check_golden("gemm_relu.c", generate(gemm_relu_plan(), load_target("host"), "c"))


def test_golden_c_conv_bn_relu():
    check_golden("conv_bn_relu.c", generate(conv_bn_relu_plan(), load_target("host"), "c"))


def test_golden_pseudo_gemm_relu_tpu():
    tpu = load_target("tpu")
    plan = fused_plan(load(ROOT / "examples" / "gemm_relu.acir"),
                      {"i": {"VMEM": 512, "vregs": 128}, "j": {"VMEM": 512, "vregs": 128}, "k": {"VMEM": 256}},
                      order={"VMEM": ("i", "j", "k")}, levels=tpu.tiling_levels)
    check_golden("gemm_relu.tpu.txt", generate(plan, tpu, "pseudo"))


def test_golden_pseudo_conv_bn_relu_gemmini():
    gemmini = load_target("gemmini")
    plan = conv_bn_relu_plan(levels=("scratchpad", "scratchpad_inner", "accumulator"))
    plan = fused_plan(plan.program, {"f": {"scratchpad": 32, "accumulator": 16}, "c": {"scratchpad": 16},
                                     "h": {"scratchpad": 14}, "w": {"accumulator": 14}},
                      levels=gemmini.tiling_levels)
    check_golden("conv_bn_relu.gemmini.txt", generate(plan, gemmini, "pseudo"))


def test_c_is_deterministic_and_follows_the_schedule():
    plan = gemm_relu_plan()
    text = generate(plan, None, "c")
    assert text == generate(gemm_relu_plan(), None, "c")
    assert text.count("#pragma omp parallel num_threads(") == 1 and "#pragma omp simd" in text   # one parallel region
    assert "float acc[8][16]" in text                     # the packed GEMM's 8x16 microkernel
    assert "Bpack[" in text and "Apack[" in text          # B panels and A blocks packed
    micro = text.index("float acc[8][16]")
    assert micro < text.index("ac_relu(", micro) < text.index("program_kernel_names[")   # the ReLU in the GEMM's store
    assert "__atomic_fetch_add(&next[victim * 8]" in text   # threads claim work units
    assert "ac_relu(C[" not in text                       # not a second pass over C
    assert "void program_run(void* const* buffers)" in text


def test_max_reduction_starts_at_minus_infinity_and_pads_are_checked():
    program = parse("input X: f32[4, 9]\ntensor P: f32[4, 9]\nM[i] max= X[i, j]\nP[i, j] = X[i, j - 1]\noutput M, P\n")
    text = generate(Plan(program, tuple(Kernel.from_ops(program, [op.name]) for op in program.ops),
                         tuple(Schedule(Kernel.from_ops(program, [op.name])) for op in program.ops)), None, "c")
    assert "= (-INFINITY);" in text
    assert "(unsigned long)(j - 1) < 9UL ? X[9 * i + j - 1] : 0.0f" in text


def test_names_are_sanitised():
    namer = Namer()
    assert namer("int") == "int_"
    assert namer("for") == "for_"
    assert namer("2x") == "v_2x"
    assert namer("a-b") == "a_b"
    assert namer("a_b") == "a_b_2"          # collision after sanitising
    assert namer("buffers") == "buffers_"    # the entry point's parameter
    assert namer("expf") == "expf_"
    assert namer("int") == "int_"            # stable


def test_unknown_language_is_a_user_error():
    with pytest.raises(UserError, match="expected one of c, pseudo"):
        generate(gemm_relu_plan(), None, "cuda")


def test_result_code_calls_generate():
    import autocomp_jupyter as autocomp

    res = autocomp.optimize(load(ROOT / "examples" / "gemm_relu.acir", max_extent=16), target="host", tune=0)
    assert "program_run" in res.code("c")
    assert "kernel" in res.code("pseudo")


def test_packed_path_only_where_it_pays_read_from_the_accesses():
    tiles = {l: {"L2": 32} for l in "ijk"}
    small = parse("input A: f32[8, 8]\ninput B: f32[8, 8]\nC = matmul(A, B)\n")
    assert "Bpack" not in generate(fused_plan(small, {l: {"L2": 4} for l in "ijk"}), None, "c")   # too small
    big = parse("input A: f32[96, 96]\ninput B: f32[96, 96]\nC = matmul(A, B)\n")
    assert "Bpack" not in generate(fused_plan(big, {}), None, "c")          # untiled (naive): the plain nest
    assert "Bpack" in generate(fused_plan(big, tiles), None, "c")
    # an out-of-range read packs from a padded copy made once: no bounds check in the hot loop
    padded = parse("input A: f32[96, 96]\ninput B: f32[96, 96]\nC[i, j] += A[i, k + 1] * B[k, j]\noutput C\n")
    text = generate(fused_plan(padded, tiles), None, "c")
    assert "Bpack" in text and "A_padded" in text and "? A[" not in text.split("one parallel region")[1]
    # a comprehension that is not a product of two reads keeps the nest
    square = parse("input A: f32[96, 96]\ninput B: f32[96, 96]\nC[i, j] += A[i, k] * B[k, j] + 1.0\noutput C\n")
    assert "Bpack" not in generate(fused_plan(square, tiles), None, "c")
    # the convolution (named by nothing but its accesses: 3x3, stride 1, its weights a param)
    # runs as Winograd F(2x2, 3x3), its 16 GEMMs packed, batchnorm and relu in its store
    conv = generate(conv_bn_relu_plan(), load_target("host"), "c")
    assert "Winograd F(2x2, 3x3)" in conv and "applied in its store" in conv
    assert conv.count("#pragma omp parallel num_threads(") == 1


def test_integer_tensors_are_double_buffers_computed_in_double():
    """i8/i32 tensors: double buffers (exact, as the interpreter's float64), integer statements
    in double with double constants, stores rounded and saturated; the header says so; no
    FMA-contraction guard where every product is of integers, one where a rounding product
    is added; f16/bf16 stores rounded; f32 programs use none of it."""
    program = parse("input A: i8[8, 8]\ninput B: i8[8, 8]\ninput X: f32[8, 8]\ntensor C: i32[8, 8]\n"
                    "tensor Q: i8[8, 8]\nC[i, j] += A[i, k] * B[k, j]\nQ[i, j] = C[i, j] * 0.1 + X[i, j]\n"
                    "output Q\n")
    per_op = Plan(program, tuple(Kernel.from_ops(program, [op.name]) for op in program.ops),
                  tuple(Schedule(Kernel.from_ops(program, [op.name])) for op in program.ops))
    text = generate(per_op, None, "c")
    assert "buffers[0] A            input     double[8, 8] (i8)" in text
    assert "buffers[2] X            input     float[8, 8]" in text
    assert "static void kernel_C(const double* restrict A, const double* restrict B, double* restrict C)" in text
    assert "static AC_EXACT void kernel_Q(const double* restrict C, const float* restrict X, " \
           "double* restrict Q)" in text
    assert "ac_saturate(((C[8 * i + j] * 0.1) + X[8 * i + j]), -128.0, 127.0)" in text
    assert "C[n_2] = ac_saturate(C[n_2], -2147483648.0, 2147483647.0);" in text   # rounded once complete
    assert "void program_run(void* const* buffers)" in text
    for dtype in ("f16", "bf16"):
        half = parse(f"input A: {dtype}[8]\nB[i] = A[i] * 0.3\noutput B\n")
        assert f"B[i] = ac_round_{dtype}((A[i] * 0.3f));" in generate(fused_plan(half, {}), None, "c")
    f32 = generate(gemm_relu_plan(), None, "c")
    assert "ac_saturate" not in f32 and "double* restrict" not in f32 and "AC_EXACT" not in f32


def test_workspace_buffers_are_shared_only_between_tensors_that_are_never_live_together():
    """`program_run` hands an intermediate the buffer of one that died before it starts (of its
    type, large enough); tensors live in one kernel never share; inputs, params and outputs
    keep their own buffers; and the C passes those buffers."""
    from autocomp_jupyter.codegen.c import buffer_layout, generate_c, tensor_of, workspace_regions

    program = parse("input X: f32[64, 64]\nA = relu(X)\nB = sigmoid(A)\nC = tanh(B)\nD = relu(C)\n"
                    "E = add(D, A)\nF = exp(E)\n")
    kernels = tuple(Kernel.from_ops(program, [op.name]) for op in program.ops)
    plan = Plan(program, kernels, tuple(Schedule.default(k) for k in kernels))
    layout = buffer_layout(plan)
    regions = workspace_regions(plan, layout)
    role = dict(layout)
    live = {}
    for k, kernel in enumerate(plan.kernels):
        for t in kernel.tensors:
            live.setdefault(t.name, [k, k])[1] = k
    for name, (lo, hi) in live.items():
        if role[name] != "workspace":
            assert regions[name] == layout.index((name, role[name]))
            continue
        assert tensor_of(plan, layout[regions[name]][0]).size >= tensor_of(plan, name).size
        for other, (lo2, hi2) in live.items():
            if other != name and regions[other] == regions[name]:
                assert hi2 < lo or hi < lo2, (name, other)     # never live at once
    assert len({regions[n] for n in live if role[n] == "workspace"}) < sum(role[n] == "workspace" for n in live)
    text = generate_c(plan)
    b = regions["B"]
    assert f"kernel_C(buffers[{b}]" in text                  # C reads B from the buffer B was given
