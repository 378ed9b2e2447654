"""Broken ONNX models end in a clear error (a `UserError` naming what is wrong), never a traceback.

Each mutation starts from a small valid network: wrong shapes, dangling inputs, cycles, huge
dimensions, unknown domains, truncated or empty files, a missing graph output.
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
    refused(m, "Frobnicate: node 'relu'", "op type not supported")


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
    text = refused(m, "Frobnicate: node 'conv'")
    assert "'relu'" not in text and "'pool'" not in text
