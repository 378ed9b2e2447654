"""A ShuffleNet unit: its channel shuffle (reshape → transpose → reshape) is read through by
the readers' split loops (rules/merged_views.py), its concat is the conv's epilogue, and a
stem's max pool is computed at the conv's tiles."""
from __future__ import annotations

import autocomp_jupyter as autocomp
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.program import Affine
from autocomp_jupyter.rules.fusion import inline, is_view
from autocomp_jupyter.rules.merged_views import radix, splittable

UNIT = """input X: f32[1, 8, 6, 6]
param W1: f32[4, 4, 1, 1]
param W2: f32[4, 4, 1, 1]
tensor A: f32[1, 4, 6, 6]
A[n, c, h, w] = X[n, c, h, w]
tensor B: f32[1, 4, 6, 6]
B[n, c, h, w] = X[n, c + 4, h, w]
Bc = conv2d(B, W1)
Br = relu(Bc)
C = concat(A, Br, axis=1)
V = reshape(C, shape=[1, 2, 4, 6, 6])
T = transpose(V, perm=[0, 2, 1, 3, 4])
S = reshape(T, shape=[1, 8, 6, 6])
tensor S1: f32[1, 4, 6, 6]
S1[n, c, h, w] = S[n, c + OFFSET, h, w]
Y = conv2d(S1, W2)
output Y
"""


def _shuffle(offset: int):
    """The unit with V and T folded (plain views), S left: a copy whose target merges loops."""
    program = parse(UNIT.replace("OFFSET", str(offset)))
    for name in ("V", "T"):
        assert is_view(program, program.op(name))
        program = inline(program, program.op(name))
    return program


def test_a_mixed_radix_target_index_is_read_digit_by_digit():
    extents = {"a0": 4, "a1": 2}
    assert radix(Affine.of({"a0": 2, "a1": 1}), extents) == [("a1", 1), ("a0", 2)]
    assert radix(Affine.of({"a0": 3, "a1": 1}), extents) is None         # not a number in base (2, 4)
    assert radix(Affine.of({"a0": 2, "a1": 1}, 1), extents) is None      # an offset: not onto the box


def test_the_shuffle_folds_into_readers_whose_loop_splits():
    program = _shuffle(4)
    s = program.op("S")
    assert str(s.statements[0].target_indices[1]) in ("2*a0 + a1", "a1 + 2*a0")
    assert is_view(program, s)
    folded = inline(program, s)
    assert not folded.has_tensor("S")
    st = folded.op("S1").statements[0]
    assert [l.extent for l in st.loops if l.name.startswith("c_")] == [2, 2]   # c = 2*c_a0 + c_a1, c_a0 from 2
    assert [a.tensor for a in st.reads()] == ["C"]


def test_an_offset_off_the_digits_keeps_the_copy():
    program = _shuffle(3)          # S[c + 3]: c + 3 = 2*a0 + a1 has no box of split loops
    s = program.op("S")
    assert not splittable(program.op("S1").statements[0], s.statements[0])
    assert not is_view(program, s)


def test_the_unit_runs_with_no_shuffle_copy_and_the_concat_as_the_convs_epilogue():
    r = autocomp.optimize(UNIT.replace("OFFSET", "4"), target="npu", tune=0).report
    assert r["verified"]
    names = [op for k in r["kernels"] for op in k["ops"]]
    assert not {"V", "T", "S", "S1"} & set(names)
    assert any({"Bc", "Br", "C"} <= set(k["ops"]) for k in r["kernels"])
    folds = [e for e in r["rules"] if e["rule"] == "fold_views" and e["applied"]]
    assert any(e["ops"][0] == "S" for e in folds)


STEM = """input X: f32[1, 3, 16, 16]
param W: f32[8, 3, 3, 3]
param W2: f32[8, 8, 1, 1]
C = conv2d(X, W, padding=1)
R = relu(C)
P = maxpool2d(R, kernel=3, stride=2, padding=1)
Y = conv2d(P, W2)
Z = relu(Y)
output Z
"""


def test_a_stems_max_pool_is_computed_at_the_tiles_of_the_chain(tmp_path):
    r = autocomp.optimize(STEM, target="npu", tune=0).report
    assert r["verified"]
    entry = [e for e in r["rules"] if e["rule"] == "depth_first_convs" and "P" in e["ops"]]
    assert entry and any(e["applied"] for e in entry)
    assert any({"C", "P"} <= set(k["ops"]) for k in r["kernels"])


HEADS = """input Q: f32[1, 4, 5, 8]
param V: f32[1, 4, 8, 8]
param W: f32[32, 16]
tensor O: f32[1, 4, 5, 8]
O[b, h, i, j] += Q[b, h, i, k] * V[b, h, k, j]
T = transpose(O, perm=[0, 2, 1, 3])
R = reshape(T, shape=[1, 5, 32])
tensor Y: f32[1, 5, 16]
Y[b, i, j] += R[b, i, k] * W[k, j]
output Y
"""


def test_a_head_merge_of_a_contractions_result_is_left_to_its_epilogue():
    program = parse(HEADS)
    program = inline(program, program.op("T"))
    r = program.op("R")
    assert len(r.statements[0].target_indices[2].terms) == 2          # k = 8*h + j: merged
    assert not is_view(program, r)       # the contraction's epilogue writes this layout; no reader loop split
