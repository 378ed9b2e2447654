"""Pointwise ops as exporters write them fuse with the contraction next to them: a GELU written
node by node (x/√2 → erf → +1 → ·0.5, then · x: a region that meets again) is one epilogue of
the GEMM before it, whatever max_fusion_depth, or, where one GEMM alone reads it, a prologue of
that GEMM; a batchnorm + relu read only by a conv is a
prologue of that conv (`pointwise_prologue`, computed at its tiles). Both verified."""
from __future__ import annotations

import autocomp_jupyter as autocomp
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.rules.engine import chain_from

GELU_WRITTEN_OUT = """input X: f32[64, 32]
param W: f32[32, 128]
param b: f32[128]
H = linear(X, W, b)
D[i, j] = H[i, j] / 1.4142135
E = erf(D)
P[i, j] = E[i, j] + 1
Q[i, j] = 0.5 * P[i, j]
G = mul(H, Q)
output G
"""


def test_a_region_that_meets_again_counts_as_one_op_of_the_chain():
    program = parse(GELU_WRITTEN_OUT)
    # H → {D, G}: D, E, P, Q are taken while G still waits for H; G closes the region.
    chain = chain_from(program, program.op("H"), 2, set())
    assert [o.name for o in chain] == ["H", "D", "E", "P", "Q", "G"]
    # a region never closed within the limit of ops is cut there (closed_prefix keeps H alone)
    assert [o.name for o in chain_from(program, program.op("H"), 1, set())] == ["H"]


def test_a_region_waits_only_for_pointwise_readers():
    # H is also read by a GEMM: the walk does not wander into D's region while it waits.
    src = GELU_WRITTEN_OUT.replace("output G\n", "param V: f32[128, 8]\nK = matmul(H, V)\noutput G, K\n")
    program = parse(src)
    assert [o.name for o in chain_from(program, program.op("H"), 4, set())] == ["H"]


def test_a_region_one_contraction_alone_reads_is_left_to_its_prologue():
    # G's one reader is a GEMM: the region stays out of H's chain (pointwise_prologue takes it).
    program = parse(GELU_WRITTEN_OUT.replace("output G\n", "param V: f32[128, 8]\nK = matmul(G, V)\noutput K\n"))
    assert [o.name for o in chain_from(program, program.op("H"), 4, set())] == ["H"]
    assert [o.name for o in chain_from(program, program.op("D"), 5, set())] == ["D", "E", "P", "Q", "G"]


def test_gelu_written_out_is_one_epilogue_on_every_depth():
    for target in ("npu", "tpu"):                     # max_fusion_depth 5 and 4: six ops either way
        r = autocomp.optimize(GELU_WRITTEN_OUT, target=target, tune=0).report
        assert r["verified"] and [k["name"] for k in r["kernels"]] == ["H_to_G"], target
        entry = next(e for e in r["rules"] if e["rule"] == "epilogue")
        assert entry["applied"] and entry["ops"] == ["H", "D", "E", "P", "Q", "G"]
        assert min(r["gain_breakdown"].values()) >= 0.99 and r["speedup_vs_library"] > 1.5, target


BN_RELU_CONV = """input X: f32[1, 32, 14, 14]
param g: f32[32]
param s: f32[32]
param W: f32[48, 32, 1, 1]
B = batchnorm(X, g, s)
R = relu(B)
C = conv2d(R, W)
output C
"""


def test_batchnorm_relu_is_a_prologue_of_the_conv_that_alone_reads_it(tmp_path):
    r = autocomp.optimize(BN_RELU_CONV, target="npu", tune=0).report
    assert r["verified"] and [k["name"] for k in r["kernels"]] == ["B_R_C"]
    entry = next(e for e in r["rules"] if e["rule"] == "pointwise_prologue")
    assert entry["applied"] and entry["ops"] == ["B", "R", "C"] and "no intermediate leaves the chip" in entry["why"]
    off = tmp_path / "off.yaml"
    off.write_text("fusion:\n  rules:\n    - name: pointwise_prologue\n      enabled: false\n")
    apart = autocomp.optimize(BN_RELU_CONV, target="npu", tune=0, rules=[str(off)]).report
    assert [k["name"] for k in apart["kernels"]] == ["B_R", "C"]
    assert apart["optimized"]["time_s"] > r["optimized"]["time_s"] * 1.2


DENSE_LAYERS = """input X: f32[1, 8, 10, 10]
param W1: f32[4, 8, 3, 3]
param W2: f32[4, 12, 3, 3]
param g: f32[16]
param s: f32[16]
param W3: f32[8, 16, 1, 1]
A = conv2d(X, W1, padding=1)
C1 = concat(X, A, axis=1)
B = conv2d(C1, W2, padding=1)
C2 = concat(X, A, B, axis=1)
N = batchnorm(C2, g, s)
R = relu(N)
Y = conv2d(R, W3)
output Y
"""


def test_a_concat_read_once_by_a_pointwise_op_is_read_through(tmp_path):
    from autocomp_jupyter.rules.fusion import inline, is_join

    program = parse(DENSE_LAYERS)
    assert is_join(program, program.op("C2"))          # read once by the batchnorm, at its own indices
    assert not is_join(program, program.op("C1"))      # read by a conv: each element many times
    folded = inline(program, program.op("C2"))
    assert not folded.has_tensor("C2") and set(folded.op("N").inputs) >= {"X", "A", "B"}
    r = autocomp.optimize(DENSE_LAYERS, target="npu", tune=0).report
    assert r["verified"] and not any("C2" in k["ops"] for k in r["kernels"])
    entry = next(e for e in r["rules"] if e["rule"] == "fold_joins")
    assert entry["applied"] and entry["ops"] == ["C2", "N"]
    off = tmp_path / "off.yaml"                      # the rule file's switch keeps the copy
    off.write_text("fusion:\n  params: {fold_joins: false}\n")
    kept = autocomp.optimize(DENSE_LAYERS, target="npu", tune=0, rules=[str(off)]).report
    assert kept["verified"] and not any(e["rule"] == "fold_joins" for e in kept["rules"])
    assert any("C2" in k["ops"] for k in kept["kernels"])


SQUEEZE_EXCITE = """input X: f32[1, 16, 12, 12]
param W1: f32[4, 16, 1, 1]
param W2: f32[16, 4, 1, 1]
param W3: f32[8, 16, 1, 1]
M = global_avgpool(X)
M4[n, c, h, w] = M[n, c] where h < 1, w < 1
F = conv2d(M4, W1)
G = relu(F)
H = conv2d(G, W2)
S = sigmoid(H)
Y[n, c, h, w] = S[n, c, 0, 0] * X[n, c, h, w]
P = conv2d(Y, W3)
output P
"""


def test_a_channel_scale_larger_than_its_conv_is_the_projections_prologue():
    # Y (the whole activation) is no epilogue of H (one value per channel): it is computed
    # at the projection's tiles instead, and Y never goes to DRAM.
    r = autocomp.optimize(SQUEEZE_EXCITE, target="npu", tune=0).report
    assert r["verified"] and [k["name"] for k in r["kernels"]][-1] == "Y_P"
    cut = next(e for e in r["rules"] if e["rule"] == "epilogue" and e["ops"] == ["H", "Y"])
    assert not cut["applied"] and "more elements" in cut["why"]
    assert next(e for e in r["rules"] if e["rule"] == "pointwise_prologue")["applied"]
