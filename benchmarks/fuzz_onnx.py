"""Mutated ONNX models: `autocomp check` on each ends in a clear error or in an import that
onnxruntime agrees with; never a Python traceback, never a hang.

The seed is a MobileNetV2 as torch exports it (`bench_onnx.mobilenetv2`, random weights; the
CI test uses `small_mobilenet`, the same blocks, fewer of them), or `small_decoder`, a decoder
step with the ops LLM exports use (Gather, CumSum, RotaryEmbedding, Attention, ScatterND ...). Each mutant changes one thing
(`MUTATIONS`): an initializer's or a graph input's dims, an element type, an attribute's value,
type or presence, a node input dropped or renamed, a node removed, an op type, the opset, the
serialized bytes cut short, or bytes of its structure (nodes, inputs, outputs, opsets) flipped. Each is written to a file and checked as a user would
(`autocomp check FILE`, in this process) and classified:

- `refused`: exit 2 with a message (the message's first line is kept for the table);
- `accepted`: exit 0; then onnxruntime loads and runs the same file: when it refuses the model,
  the mutant was `accepted-invalid` (a silent acceptance); when both run, the outputs are compared
  (`wrong` beyond 1e-4 x max |y|);
- `refused-valid`: refused, though onnxruntime runs it (not a failure: the importer may lack a
  form, or a limit; listed with `--show refused-valid` to review);
- `index-out-of-range`: accepted, and onnxruntime stops at run time on an index its inputs
  put out of range (a valid model, data it refuses; the importer's one-hot reads give 0 there
  until indices are checked at run time: not counted as a failure, listed);
- `traceback`: any other exception; `hang`: longer than `--timeout` seconds.

    python benchmarks/fuzz_onnx.py                      # 1,000 mutants of MobileNetV2 at 32x32
    python benchmarks/fuzz_onnx.py --count 200 --seed 3 --image 64 --show refused
    python benchmarks/fuzz_onnx.py --model small_decoder --count 500      # the LLM ops' handlers
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import bench_onnx  # noqa: E402


def small_mobilenet(image: int = 16, classes: int = 4) -> onnx.ModelProto:
    """MobileNetV2's layout in three blocks: stem conv + ReLU6 (Clip), an inverted residual
    with its skip Add, a strided one, a 1x1 head, global pooling, Flatten, Gemm."""
    g = bench_onnx._Graph(seed=1)
    zero, six = g.const("zero", np.array(0.0, np.float32)), g.const("six", np.array(6.0, np.float32))

    def relu6(t):
        return g.op("Clip", [t, zero, six], "clip")
    x = relu6(g.conv("input", 3, 8, 3, 2))
    for cin, cout, stride in ((8, 8, 1), (8, 16, 2)):
        y = relu6(g.conv(x, cin, cin * 2, 1))
        y = relu6(g.conv(y, cin * 2, cin * 2, 3, stride, groups=cin * 2))
        y = g.conv(y, cin * 2, cout, 1)
        x = g.op("Add", [x, y]) if stride == 1 and cin == cout else y
    x = g.op("Flatten", [g.op("GlobalAveragePool", [relu6(g.conv(x, 16, 32, 1))])], axis=1)
    out = g.op("Gemm", [x, g.weight("fc_w", (classes, 32)), g.weight("fc_b", (classes,), 0.01)], "logits", transB=1)
    return g.model("input", (1, 3, image, image), out, (1, classes))


def small_decoder(seq: int = 8, heads: int = 4, kv_heads: int = 2, dim: int = 8) -> onnx.ModelProto:
    """A decoder step as an opset-23 export writes it: an embedding (Gather), position ids from
    the attention mask (CumSum), RotaryEmbedding, causal grouped-query Attention, the SDPA NaN
    guard (IsNaN, Where), a KV-cache write (ScatterND), GatherElements and a top-2 (TopK)."""
    g = bench_onnx._Graph(seed=2)
    hidden = heads * dim
    angles = np.arange(32)[:, None] * (0.3 ** np.arange(dim // 2))[None, :]
    cos, sin = g.const("cos", np.cos(angles).astype(np.float32)), g.const("sin", np.sin(angles).astype(np.float32))
    x = g.op("Gather", [g.weight("embed", (50, hidden), 0.1), "ids"], axis=0)
    pos = g.op("Sub", [g.op("CumSum", ["mask", g.const("axis", np.array(-1, np.int64))]),
                       g.const("one", np.array(1, np.int64))])
    q = g.op("RotaryEmbedding", [g.op("MatMul", [x, g.weight("wq", (hidden, hidden), 0.1)]), cos, sin, pos],
             num_heads=heads)
    k = g.op("RotaryEmbedding", [g.op("MatMul", [x, g.weight("wk", (hidden, kv_heads * dim), 0.1)]), cos, sin, pos],
             num_heads=kv_heads)
    v = g.op("MatMul", [x, g.weight("wv", (hidden, kv_heads * dim), 0.1)])
    a = g.op("Attention", [q, k, v], is_causal=1, q_num_heads=heads, kv_num_heads=kv_heads)
    a = g.op("Where", [g.op("IsNaN", [a]), g.const("zero", np.array(0.0, np.float32)), a])
    cache = g.op("ScatterND", [a, g.const("row", np.array([[0, 3]], np.int64)), g.weight("upd", (1, hidden), 0.1)])
    picked = g.op("GatherElements", [cache, g.const("perm", np.tile(np.arange(hidden)[::-1], (1, seq, 1)))], axis=2)
    values, ids = g.name("top"), g.name("top_ids")
    g.nodes.append(helper.make_node("TopK", [picked, g.const("k2", np.array([2], np.int64))], [values, ids],
                                    name=values, axis=-1))
    graph = helper.make_graph(g.nodes, "decoder", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq]),
                                                   helper.make_tensor_value_info("mask", TensorProto.INT64, [1, seq])],
                              [helper.make_tensor_value_info(values, TensorProto.FLOAT, [1, seq, 2])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model


SEEDS = {"mobilenetv2": None, "small_mobilenet": small_mobilenet, "small_decoder": small_decoder}


# --------------------------------------------------------------------------- mutations

_ELEM_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
               TensorProto.FLOAT16, TensorProto.UINT8, TensorProto.STRING, TensorProto.COMPLEX64, 0, 99]


def _copy(model):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _odd_int(rng) -> int:
    return int(rng.choice([0, 1, 2, 3, -1, -2, 5, 7, 64, 965, 10 ** 9, -(10 ** 6)]))


def mutate_initializer_dims(rng, m):
    init = m.graph.initializer[rng.integers(len(m.graph.initializer))]
    if not init.dims or rng.random() < 0.2:
        init.dims.append(_odd_int(rng))
    elif rng.random() < 0.2:
        del init.dims[rng.integers(len(init.dims))]
    else:
        init.dims[rng.integers(len(init.dims))] = _odd_int(rng)
    return f"dims of initializer '{init.name}' -> {list(init.dims)}"


def mutate_input_dims(rng, m):
    dims = m.graph.input[0].type.tensor_type.shape.dim
    k = rng.integers(len(dims))
    choice = rng.random()
    if choice < 0.15:
        dims[k].dim_param = "batch"
    elif choice < 0.25:
        del dims[k]
    else:
        dims[k].dim_value = _odd_int(rng)
    return f"dims of graph input -> {[d.dim_value or d.dim_param for d in dims]}"


def mutate_output_type(rng, m):
    out = m.graph.output[0].type.tensor_type
    out.elem_type = int(rng.choice(_ELEM_TYPES))
    return f"element type of graph output -> {out.elem_type}"


def mutate_input_type(rng, m):
    m.graph.input[0].type.tensor_type.elem_type = int(rng.choice(_ELEM_TYPES))
    return f"element type of graph input -> {m.graph.input[0].type.tensor_type.elem_type}"


def mutate_initializer_type(rng, m):
    init = m.graph.initializer[rng.integers(len(m.graph.initializer))]
    init.data_type = int(rng.choice(_ELEM_TYPES))
    return f"element type of initializer '{init.name}' -> {init.data_type}"


def _node_with_attributes(rng, m):
    nodes = [n for n in m.graph.node if n.attribute]
    return nodes[rng.integers(len(nodes))] if nodes else None


def mutate_attribute_value(rng, m):
    node = _node_with_attributes(rng, m)
    attr = node.attribute[rng.integers(len(node.attribute))]
    if attr.type == onnx.AttributeProto.INT:
        attr.i = _odd_int(rng)
    elif attr.type == onnx.AttributeProto.INTS and len(attr.ints):
        attr.ints[rng.integers(len(attr.ints))] = _odd_int(rng)
        if rng.random() < 0.3:
            attr.ints.append(_odd_int(rng))
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = float(rng.choice([0.0, -1.0, 1e30, float("nan"), float("inf")]))
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = rng.choice([b"", b"SAME_UPPER", b"VALID", b"bogus"])
    return f"attribute {node.name}.{attr.name}"


def mutate_attribute_drop(rng, m):
    node = _node_with_attributes(rng, m)
    k = int(rng.integers(len(node.attribute)))
    name = node.attribute[k].name
    del node.attribute[k]
    return f"attribute {node.name}.{name} dropped"


def mutate_attribute_add(rng, m):
    node = m.graph.node[rng.integers(len(m.graph.node))]
    name = str(rng.choice(["group", "axis", "bogus", "strides", "pads", "kernel_shape", "transA", "dilations"]))
    value = [3, [2, 2], 0.5, "x", [1, 1, 1]][rng.integers(5)]
    node.attribute.append(helper.make_attribute(name, value))
    return f"attribute {node.name}.{name} = {value!r} added"


def mutate_attribute_type(rng, m):
    node = _node_with_attributes(rng, m)
    attr = node.attribute[rng.integers(len(node.attribute))]
    attr.CopyFrom(helper.make_attribute(attr.name, ["text", 1.5, 2, [1.5, 2.5]][rng.integers(4)]))
    return f"attribute {node.name}.{attr.name} retyped"


def mutate_input_drop(rng, m):
    if rng.random() < 0.15:
        name = m.graph.input[0].name
        del m.graph.input[0]
        return f"graph input '{name}' dropped"
    node = m.graph.node[rng.integers(len(m.graph.node))]
    k = int(rng.integers(len(node.input)))
    name = node.input[k]
    del node.input[k]
    return f"input '{name}' of {node.name} dropped"


def mutate_input_rename(rng, m):
    node = m.graph.node[rng.integers(len(m.graph.node))]
    k = int(rng.integers(len(node.input)))
    names = [i.name for i in m.graph.initializer] + [o for n in m.graph.node for o in n.output] + ["", "nowhere"]
    old, node.input[k] = node.input[k], str(names[rng.integers(len(names))])
    return f"input '{old}' of {node.name} -> '{node.input[k]}'"


def mutate_node_remove(rng, m):
    k = int(rng.integers(len(m.graph.node)))
    name = m.graph.node[k].name
    del m.graph.node[k]
    return f"node {name} removed"


def mutate_op_type(rng, m):
    node = m.graph.node[rng.integers(len(m.graph.node))]
    old = node.op_type
    node.op_type = str(rng.choice(["Relu", "Conv", "Add", "Gemm", "MaxPool", "Sigmoid", "Frobnicate", "Clip",
                                   "MatMul", "Flatten", "Gelu", "Softmax", "Reshape"]))
    if rng.random() < 0.1:
        node.domain = "com.example"
    return f"{node.name}: {old} -> {node.op_type}"


def mutate_opset(rng, m):
    m.opset_import[0].version = int(rng.choice([0, 1, 6, 9, 11, 21, 99, 10 ** 4]))
    if rng.random() < 0.2:
        m.ir_version = int(rng.choice([0, 1, 3, 99]))
    return f"opset {m.opset_import[0].version}, IR {m.ir_version}"


def mutate_truncate(rng, m):
    data = m.SerializeToString()
    return data[: int(rng.integers(0, len(data)))]


def mutate_flip_bytes(rng, m):
    """Random bytes of the structure overwritten: the nodes (serialized first in the graph) or
    the tail (graph inputs, outputs, opsets); the weights between them hold only numbers."""
    data = bytearray(m.SerializeToString())
    head = min(len(data), 64 + sum(n.ByteSize() + 4 for n in m.graph.node))
    for _ in range(int(rng.integers(1, 8))):
        at = int(rng.integers(head)) if rng.random() < 0.6 else len(data) - 1 - int(rng.integers(min(256, len(data))))
        data[at] = int(rng.integers(256))
    return bytes(data)


MUTATIONS = [mutate_initializer_dims, mutate_input_dims, mutate_input_type, mutate_initializer_type,
             mutate_output_type, mutate_attribute_value, mutate_attribute_drop, mutate_attribute_add,
             mutate_attribute_type, mutate_input_drop, mutate_input_rename, mutate_node_remove, mutate_op_type,
             mutate_opset, mutate_truncate, mutate_flip_bytes]


def mutant(seed_model, seed: int):
    """(mutation name, file bytes) of mutant number `seed`."""
    rng = np.random.default_rng(seed)
    mutate = MUTATIONS[seed % len(MUTATIONS)]
    m = _copy(seed_model)
    result = mutate(rng, m)
    return mutate.__name__[len("mutate_"):], result if isinstance(result, bytes) else m.SerializeToString()


# --------------------------------------------------------------------------- checking one

# Accepted mutants with larger inputs are not run (numbers compared) by either side.
_RUN_ELEMENTS = 10 ** 7


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def check_file(path: str, timeout: float = 30.0) -> tuple[str, str]:
    """(outcome, first line of the message): `autocomp check` on `path`, in this process."""
    from autocomp_jupyter.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["check", path])
    except _Timeout:
        return "hang", f"more than {timeout:g} s"
    except BaseException as exc:   # anything but a UserError (main turns those into exit 2)
        return "traceback", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if time.perf_counter() - start > timeout:
        return "hang", f"{time.perf_counter() - start:.1f} s"
    text = err.getvalue().strip()
    if code == 0:
        return "accepted", ""
    return ("refused", text.splitlines()[0] if text else f"exit {code}, no message") if code == 2 \
        else ("traceback", f"exit {code}: {text[:300]}")


def against_onnxruntime(path: str) -> tuple[str, str]:
    """An accepted mutant run by onnxruntime and by the reference interpreter: ('accepted', ''),
    ('accepted-invalid', onnxruntime's refusal) or ('wrong', the error)."""
    import onnxruntime as ort

    from autocomp_jupyter.onnx_import import from_onnx, run_with_values

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        shapes = {i.name: [d if isinstance(d, int) else 1 for d in i.shape] for i in session.get_inputs()}
        if sum(math.prod(s) for s in shapes.values()) > _RUN_ELEMENTS:
            return "accepted", "not run: its inputs are too large"
        feeds = _feeds(session)
        want = session.run(None, feeds)
    except Exception as exc:
        text = " ".join(str(exc).split())
        if any(w in text for w in ("bfc_arena", "Failed to allocate", "Unable to allocate")):
            return "accepted", "not run: onnxruntime runs out of memory (a huge, valid shape)"
        if "out of range" in text and "Non-zero status code returned while running" in text:
            return "index-out-of-range", f"onnxruntime: {text[:200]}"
        return "accepted-invalid", f"onnxruntime: {type(exc).__name__}: {text[:200]}"
    program = from_onnx(path)
    names = [t.name for t in program.inputs if t.role == "input"]
    got = run_with_values(program, dict(zip(names, feeds.values())))
    for out, expected in zip(program.outputs, want):
        have = got[out].reshape(expected.shape) if got[out].size == expected.size else got[out]
        if have.shape != expected.shape:
            return "wrong", f"shape {list(have.shape)} vs onnxruntime's {list(expected.shape)}"
        err = float(np.abs(have - expected.astype(np.float64)).max(initial=0.0))
        if not err <= 1e-4 * max(1.0, float(np.abs(expected).max(initial=0.0))):
            return "wrong", f"max error {err:.3g}"
    return "accepted", ""


def _feeds(session) -> dict:
    """Inputs for each of the session's graph inputs, of its element type: floats from a normal
    distribution, integers 1 .. 3 (valid ids, positions and mask values), bools at random."""
    rng = np.random.default_rng(0)
    out = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:
            out[i.name] = rng.integers(1, 4, size=shape).astype(np.dtype(i.type[len("tensor("):-1]))
        elif i.type == "tensor(bool)":
            out[i.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif i.type == "tensor(float16)":
            out[i.name] = rng.standard_normal(shape).astype(np.float16)
        elif i.type == "tensor(double)":
            out[i.name] = rng.standard_normal(shape)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _onnxruntime_runs(path: str) -> bool:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        if sum(math.prod(d if isinstance(d, int) else 1 for d in i.shape) for i in session.get_inputs()) \
                > _RUN_ELEMENTS:
            return True   # it loads; too large to run here
        session.run(None, _feeds(session))
    except Exception:
        return False
    return True


def run(seed_model, count: int, first_seed: int = 0, timeout: float = 30.0, ort: bool = True,
        directory: str | None = None) -> list[tuple[int, str, str, str]]:
    """(seed, mutation, outcome, message) for `count` mutants."""
    rows = []
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = os.path.join(tmp, "mutant.onnx")
        for seed in range(first_seed, first_seed + count):
            kind, data = mutant(seed_model, seed)
            Path(path).write_bytes(data)
            outcome, message = check_file(path, timeout)
            if outcome == "accepted" and ort:
                outcome, message = against_onnxruntime(path)
            elif outcome == "refused" and ort and _onnxruntime_runs(path):
                outcome = "refused-valid"
            rows.append((seed, kind, outcome, message))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="the first mutant's number")
    parser.add_argument("--image", type=int, default=32, help="MobileNetV2's input size")
    parser.add_argument("--model", default="mobilenetv2", choices=sorted(SEEDS),
                        help="the seed: MobileNetV2 (at --image), the CI test's three-block one, or a decoder step")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a check counts as a hang")
    parser.add_argument("--no-ort", action="store_true", help="skip onnxruntime's cross-check of accepted mutants")
    parser.add_argument("--show", default="traceback,hang,accepted-invalid,wrong,index-out-of-range",
                        help="outcomes whose mutants are listed one per line")
    args = parser.parse_args(argv)
    seed_model = SEEDS[args.model]() if SEEDS[args.model] else bench_onnx.mobilenetv2(args.image, 10)
    start = time.perf_counter()
    rows = run(seed_model, args.count, args.seed, args.timeout, not args.no_ort)
    seconds = time.perf_counter() - start
    show = set(args.show.split(","))
    for seed, kind, outcome, message in rows:
        if outcome in show:
            print(f"  #{seed} {kind}: {outcome}: {message}")
    print(f"{'mutation':<22}" + "".join(f"{o:>19}" for o in _OUTCOMES))
    by_kind = Counter((kind, outcome) for _, kind, outcome, _ in rows)
    for mutate in MUTATIONS:
        kind = mutate.__name__[len("mutate_"):]
        print(f"{kind:<22}" + "".join(f"{by_kind[kind, o]:>19}" for o in _OUTCOMES))
    total = Counter(outcome for _, _, outcome, _ in rows)
    print(f"{'total':<22}" + "".join(f"{total[o]:>19}" for o in _OUTCOMES))
    print(f"{len(rows)} mutants of {args.model if SEEDS[args.model] else f'MobileNetV2 at {args.image}x{args.image}'}"
          f" in {seconds:.1f} s ({seconds / max(len(rows), 1) * 1000:.0f} ms each)")
    bad = total["traceback"] + total["hang"] + total["accepted-invalid"] + total["wrong"]
    return 1 if bad else 0


_OUTCOMES = ("refused", "refused-valid", "accepted", "index-out-of-range", "traceback", "hang", "accepted-invalid",
             "wrong")

if __name__ == "__main__":
    sys.exit(main())
