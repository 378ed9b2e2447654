"""Reads through integer tensors (`W[ids[s], c]`, `Kc[h, pos[0], d]`), the library's gather
and scatter (ONNX semantics), and a KV-cache update written functionally: parsing and errors,
the interpreter against numpy, range errors at run time, isl's view, cost, and the host C."""
import islpy as isl
import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import interp
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.host import measure_plan
from autocomp_jupyter.poly import kernel_polyhedra

EMBEDDING = """
input ids: i32[8]
param W: f32[50, 16]
E[s, c] = W[ids[s], c]
Y[s, c] = E[s, c] * 2
"""

LIBRARY = """
input X: f32[6, 5]
input ids: i32[3, 2]
input cols: i32[3]
input U: f32[2, 5]
input at: i32[2, 5]
G = gather(X, ids, axis=0)
H = gather(X, cols, axis=1)
Y = scatter(X, at, U, axis=0)
output G, H, Y
"""

KV_CACHE = """
input Kc: f32[2, 16, 8]
input kn: f32[2, 8]
input q: f32[2, 8]
input pos: i32[1]
K2[h, t, d] = select(equal(t, pos[0]), kn[h, d], Kc[h, t, d])
S[h, t] += q[h, d] * K2[h, t, d]
R[h, d] = Kc[h, pos[0], d]
output S, R
"""


def test_an_integer_element_is_an_index():
    p = parse(EMBEDDING)
    read = p.statements[0].reads()[0]
    assert str(read) == "W[ids[s], c]" and read.indirect_dims[0].tensor == "ids"
    assert p.tensor("E").dtype == "f32" and p.op("E").op_class == "injective"
    env = interp.run(p)
    assert set(env["ids"]) <= set(range(50))               # random ids stay within the table
    np.testing.assert_array_equal(env["E"], env["W"][env["ids"].astype(int)])


def test_library_gather_and_scatter_follow_onnx():
    p = parse(LIBRARY)
    inputs = interp.random_inputs(p)
    inputs.update(ids=np.array([[0, -1], [3, 2], [5, -6]], float), cols=np.array([4, -1, 0], float),
                  at=np.array([[1, 0, 5, 2, 2], [4, 4, -1, 2, 0]], float))
    env = interp.run(p, inputs)
    x = inputs["X"]
    np.testing.assert_array_equal(env["G"], np.take(x, inputs["ids"].astype(int), axis=0))
    np.testing.assert_array_equal(env["H"], np.take(x, inputs["cols"].astype(int), axis=1))
    y = x.copy()
    for i, j in np.ndindex(2, 5):
        y[int(inputs["at"][i, j]), j] = inputs["U"][i, j]
    np.testing.assert_allclose(env["Y"], y)


def test_an_id_out_of_range_is_an_error_never_clamped():
    p = parse(EMBEDDING)
    inputs = interp.random_inputs(p)
    inputs["ids"][3] = 50
    with pytest.raises(interp.IndexOutOfRange, match=r"index 50 read from ids\[3\] is outside dimension 0 of 'W'"):
        interp.run(p, inputs)


@pytest.mark.parametrize("source, message", [
    ("input ids: f32[8]\nparam W: f32[50, 16]\nE[s, c] = W[ids[s], c]\n", "index tensor 'ids' must have an integer"),
    ("input ids: i32[8, 2]\nparam W: f32[50, 16]\nE[s, c] = W[ids[s], c]\n", "'ids' has rank 2"),
    ("input X: f32[4, 4]\ninput i: f32[4]\nG = gather(X, i)\n", "gather indices 'i' must have an integer type"),
])
def test_bad_index_tensors_are_errors(source, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        parse(source)


def test_isl_reads_the_whole_indexed_dimension():
    st = parse(EMBEDDING).statements[0]
    reads = kernel_polyhedra([st], {"W": (50, 16), "ids": (8,)}).reads
    w = [m for m in _maps(reads) if m.get_tuple_name(isl.dim_type.out) == "W"][0]
    points = []
    w.range().foreach_point(points.append)
    assert len(points) == 50 * 16                     # any row: isl does not know the ids


def _maps(union):
    out = []
    union.foreach_map(out.append)
    return out


def test_the_kv_cache_update_and_a_read_at_a_position():
    p = parse(KV_CACHE)
    inputs = interp.random_inputs(p)
    inputs["pos"] = np.array([5.0])
    env = interp.run(p, inputs)
    k2 = inputs["Kc"].copy()
    k2[:, 5] = inputs["kn"]
    np.testing.assert_allclose(env["S"], np.einsum("hd,htd->ht", inputs["q"], k2), rtol=1e-6)
    np.testing.assert_array_equal(env["R"], inputs["Kc"][:, 5])


def test_a_gather_costs_the_rows_it_moves():
    src = "input ids: i32[64]\nparam W: f32[32000, 2048]\nE[s, c] = W[ids[s], c]\noutput E\n"
    res = autocomp.optimize(src, target="npu", tune=0)
    rows = 64 * 2048 * 4
    assert res.report["verified"]
    assert res.report["optimized"]["bytes"]["DRAM"] <= 2 * rows + 64 * 4 + 1   # rows in, rows out, the ids
    assert res.report["kernels"][0]["metrics"]["flops"] <= 2 * 64 * 2048


@pytest.mark.parametrize("source", [EMBEDDING, LIBRARY, KV_CACHE])
def test_host_c_reads_through_index_tensors_as_the_interpreter(source):
    res = autocomp.optimize(source, target="host", tune=0)
    assert res.report["verified"]
    measured = measure_plan(res.after, load_target("host"), repeats=0, threads=1)
    assert measured["matches_interpreter"], measured["reason"]


def test_a_cache_update_nothing_else_reads_is_priced_as_one_row_in_place():
    src = KV_CACHE.replace("R[h, d] = Kc[h, pos[0], d]\noutput S, R", "output S, K2")
    res = autocomp.optimize(src, target="npu", tune=0)
    assert res.report["verified"]
    (entry,) = [r for r in res.report["rules"] if r["rule"] == "in_place_update"]
    assert entry["applied"] and "K2 is Kc with one row of t replaced" in entry["why"]
    cache = 2 * 16 * 8 * 4                         # Kc: f32[2, 16, 8]
    # the cache is read once (by the scores), the new row written: no copy of the cache
    assert res.report["optimized"]["bytes"]["DRAM"] < 1.5 * cache
    assert "in place of Kc" in res.code("pseudo")
    # where the old cache is read by another statement too, there is no in-place update
    assert not [r for r in autocomp.optimize(KV_CACHE, target="npu", tune=0).report["rules"]
                if r["rule"] == "in_place_update"]


def test_an_onnx_embedding_imports_as_a_gather():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    table = np.random.default_rng(0).standard_normal((1000, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gather", ["W", "ids"], ["y"], axis=0)], "embedding",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 64])],
                              [numpy_helper.from_array(table, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    program = autocomp.from_onnx(model)
    assert any(a.indirect for st in program.statements for a in st.reads())      # not a one-hot contraction
    ids = np.random.default_rng(1).integers(-1000, 1000, size=(2, 8))
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"ids": ids})[0]
    inputs = {**interp.random_inputs(program), **program.param_values, program.inputs[0].name: ids.astype(float)}
    np.testing.assert_allclose(interp.run(program, inputs)[program.outputs[0]], expected, rtol=1e-6)
    report = autocomp.optimize(model, target="npu", tune=0).report
    assert report["verified"] and report["optimized"]["bytes"]["DRAM"] < 3 * 16 * 64 * 4


# A view or a small elementwise op read at indices from an integer tensor (Swin's
# `as_strided[j] = mean_flat[index[j]]`) cannot be substituted: its loops have no affine index.
READ_THROUGH_IDS = """
input X: f32[2, 64]
input ids: i32[4]
V[a] = X[1, a]
B[a] = X[0, a] + 1
Y[s] = V[ids[s]] * 2 + B[ids[s]]
output Y
"""


def test_an_op_read_through_an_index_tensor_is_neither_folded_nor_inlined():
    from autocomp_jupyter.rules.fusion import is_view, read_through_indices

    p = parse(READ_THROUGH_IDS)
    assert read_through_indices(p, "V") and read_through_indices(p, "B")
    assert not is_view(p, p.op("V"))
    result = autocomp.optimize(p, target="npu", tune=0)
    report = result.report
    assert report["verified"]
    assert not [rb for rb in report["rollbacks"] if "changed the result" in rb["reason"]]
    folded = {op for r in report["rules"] if r["applied"] and r["rule"] in ("fold_views", "inline") for op in r["ops"]}
    assert not folded & {"V", "B"}
