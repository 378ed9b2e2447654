"""Broken ONNX models end in a clear error (a `UserError` naming what is wrong), never a traceback.

Each mutation starts from a small valid network: wrong shapes, dangling inputs, cycles, huge
dimensions, unknown domains, truncated or empty files, a missing graph output; then what onnx's
checker and onnxruntime refuse (initializer data against dims, input element types against an
op's type constraints, opsets and IR versions, schemas, a value defined twice); then a lean run
of `benchmarks/fuzz_onnx.py`'s random mutations (its 1,000-mutant run is the benchmark).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autocomp_jupyter.errors import UserError  # noqa: E402
from autocomp_jupyter.onnx_import import from_onnx  # noqa: E402

F = TensorProto.FLOAT


def net(x_shape=(1, 3, 8, 8), w_shape=(4, 3, 3, 3), order=None, extra_nodes=(), out="Y", domain=""):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["Y"], axes=[2, 3], keepdims=0, name="pool", domain=domain)]
    nodes += list(extra_nodes)
    if order is not None:
        nodes = [nodes[k] for k in order]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", F, x_shape)],
                              [helper.make_tensor_value_info(out, F, None)],
                              [numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "W")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def refused(model, *needles):
    with pytest.raises(UserError) as err:
        from_onnx(model)
    text = err.value.format()
    assert "Traceback" not in text and "internal error" not in text, text
    for needle in needles:
        assert needle in text, text
    return text


def test_the_unmutated_network_imports():
    assert from_onnx(net()).outputs


def test_wrong_shapes():
    refused(net(w_shape=(4, 5, 3, 3)), "ONNX node 'conv'", "does not fit")
    refused(net(x_shape=(1, 3)), "ONNX node 'conv'")


def test_dangling_input_and_cycle_and_out_of_order():
    dangling = helper.make_node("Add", ["r", "nowhere"], ["z"], name="dangling")
    refused(net(extra_nodes=[dangling], out="z"), "ONNX node 'dangling'", "'nowhere' is not a graph input")
    cyc = net()
    cyc.graph.node[0].input[0] = "Y"                 # conv reads the pool's output: a cycle
    refused(cyc, "ONNX node 'conv'", "cycle")
    refused(net(order=[1, 0, 2]), "ONNX node 'relu'", "out of order")


def test_huge_dimensions():
    refused(net(x_shape=(1, 3, 10 ** 12, 8)), "graph input 'X'", "dimension extent limit")
    big = helper.make_node("ConstantOfShape", ["huge"], ["k"], name="huge_fill")
    m = net(extra_nodes=[big, helper.make_node("Add", ["Y", "k"], ["Z"], name="add")], out="Z")
    m.graph.initializer.append(numpy_helper.from_array(np.array([10 ** 6, 10 ** 6], np.int64), "huge"))
    refused(m, "ONNX node 'huge_fill'", "would build")


def test_unknown_domain_and_op():
    refused(net(domain="com.example"), "ReduceMean (custom domain 'com.example'): node 'pool'",
            "the default ONNX domain's ReduceMean is supported")
    m = net()
    m.graph.node[1].op_type = "Frobnicate"
    refused(m, "Frobnicate (not an ONNX op): node 'relu'", "op type not supported")


def test_missing_graph_output():
    refused(net(out="nothing"), "graph output 'nothing' is not computed")


def test_truncated_and_empty_files(tmp_path):
    data = net().SerializeToString()
    for k, cut in enumerate((len(data) // 2, 7, 0)):
        path = tmp_path / f"cut{k}.onnx"
        path.write_bytes(data[:cut])
        with pytest.raises(UserError) as err:
            from_onnx(path)
        assert "Traceback" not in err.value.format()


def test_one_error_does_not_cascade():
    """A refused node poisons what reads it: one error, not one per reader."""
    m = net()
    m.graph.node[0].op_type = "Frobnicate"
    text = refused(m, "Frobnicate (not an ONNX op): node 'conv'")
    assert "'relu'" not in text and "'pool'" not in text


# --------------------------------------------------------------------------- validation as onnx's checker does

def test_initializer_dims_that_disagree_with_its_data_are_named():
    m = net()
    m.graph.initializer[0].dims[0] = 965           # 4*3*3*3 = 108 values stored, dims say 965*27
    refused(m, "initializer 'W': dims [965, 3, 3, 3] (FLOAT) need 26,055 elements, but it stores 432 bytes")


@pytest.mark.parametrize("elem", [TensorProto.BOOL, TensorProto.INT64])
def test_an_integer_or_bool_input_feeding_conv_is_refused_at_the_conv(elem):
    m = net()
    m.graph.input[0].type.tensor_type.elem_type = elem
    refused(m, "ONNX node 'conv' (Conv", "type constraints", "X typestr: T")


def test_an_opset_or_ir_version_that_does_not_exist():
    m = net()
    m.opset_import[0].version = 99
    refused(m, "ONNX opset 99, which does not exist")
    m = net()
    m.ir_version = 0
    refused(m, "has no IR version")


def test_an_op_from_a_later_opset_and_a_broken_schema():
    gelu = helper.make_node("Gelu", ["Y"], ["Z"], name="gelu")
    refused(net(extra_nodes=[gelu], out="Z"), "ONNX node 'gelu'", "Gelu does not exist at opset 13 (it was added in "
                                                                    "opset 20)")
    m = net()
    m.graph.node[0].attribute.append(helper.make_attribute("bogus", 3))
    refused(m, "ONNX node 'conv'", "Unrecognized attribute: bogus")
    m = net()
    del m.graph.node[0].input[1]                    # Conv without its weight
    refused(m, "ONNX node 'conv'", "input size 1 not in range [min=2, max=3]")


def test_an_attribute_that_disagrees_with_the_shapes():
    m = net()
    m.graph.node[0].attribute.append(helper.make_attribute("kernel_shape", [3, 5]))
    refused(m, "ONNX node 'conv'", "by the ONNX definition of the op")


def test_a_value_defined_twice_and_an_output_without_a_type():
    m = net()
    m.graph.node[1].output[0] = "c"                 # relu writes the conv's output name
    refused(m, "its output 'c' is already defined (by node 'conv')")
    m = net()
    m.graph.output[0].type.tensor_type.elem_type = 0
    refused(m, "graph output 'Y' has no element type")


# --------------------------------------------------------------------------- the mutation fuzz (lean)

def _fuzz_onnx():
    """benchmarks/fuzz_onnx.py, which owns the mutations (its 1,000-mutant run is the benchmark)."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location(
        "fuzz_onnx", os.path.join(os.path.dirname(__file__), "..", "benchmarks", "fuzz_onnx.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mutated_mobilenets_end_in_a_clear_error_or_agree_with_onnxruntime():
    """4 mutants of each kind (dims, element types, attributes, dropped and renamed inputs,
    removed nodes, op types, opsets, truncated and flipped bytes): no traceback, no hang, and
    every accepted mutant runs in onnxruntime with the same result."""
    fuzz = _fuzz_onnx()
    has_ort = True
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        has_ort = False
    rows = fuzz.run(fuzz.small_mobilenet(), 4 * len(fuzz.MUTATIONS), timeout=20.0, ort=has_ort)
    outcomes = {outcome for _, _, outcome, _ in rows}
    bad = [row for row in rows if row[2] in ("traceback", "hang", "accepted-invalid", "wrong")]
    assert not bad, bad
    assert "refused" in outcomes and "accepted" in outcomes
    kinds = {kind for kind, outcome in ((r[1], r[2]) for r in rows) if outcome.startswith("refused")}
    assert {"initializer_dims", "input_type", "truncate", "node_remove", "attribute_type"} <= kinds


def test_mutated_decoder_steps_end_in_a_clear_error_or_agree_with_onnxruntime():
    """The same, 2 of each kind, of a decoder step with the ops LLM exports use (Gather, CumSum,
    RotaryEmbedding, Attention, IsNaN, ScatterND, GatherElements, TopK)."""
    pytest.importorskip("onnxruntime")
    fuzz = _fuzz_onnx()
    rows = fuzz.run(fuzz.small_decoder(), 2 * len(fuzz.MUTATIONS), first_seed=100, timeout=20.0)
    bad = [row for row in rows if row[2] in ("traceback", "hang", "accepted-invalid", "wrong")]
    assert not bad, bad
