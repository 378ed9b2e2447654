"""Whole networks from ONNX: ResNet-50, MobileNetV2, a BERT-base encoder layer, the zoo's classics.

The models are built here with onnx.helper in the layout torch.onnx.export writes for
torchvision's networks in eval mode (BatchNorm folded into each Conv's bias, Clip for
ReLU6, GlobalAveragePool → Flatten → Gemm(transB=1), BERT's MatMul+Add projections,
Reshape/Transpose to heads, Softmax, erf-form GELU, LayerNormalization), with random
weights: no downloads. The real networks, exported by torch itself, are in
`bench_torch.py` (needs torch, torchvision and transformers). `zoo-<name>` are the model zoo's
classic exports shipped in the onnx package (backend/test/data/light: opset 9, IR 3; AlexNet,
DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512), their
ConstantOfShape weights replaced by random values.

Each model is imported (`from_onnx`), checked against onnxruntime on one input, and
optimised on each target (rules only unless `--tune N`); the output is one line per
(model, target) with import/optimise seconds, the speedups, `verified` and the ratio of
the network's optimise time to a 1-layer network's (the per-layer cost), `limit` the report's
`limit_fraction` (the physical limit's time over the optimised time). Every run starts
with cold caches (`caches.clear_all`; `--warm` keeps them); `cpu_s` is this process's CPU
time (other users of the machine do not inflate it; with `--executor` the workers' is not
in it), `twins` how the final check ran the kernels tile by tile: `55t/1n@16` = 55 on a
scaled twin whose largest dimension is 16, 1 with no twin (isl's verdict alone), `p` on
the program itself, `c` coarsened; `chain` the smallest factor of the report's gain chain
(library → fused → tiled → optimised: each step's time over the next's).

    python benchmarks/bench_onnx.py                          # all three, tpu and npu, rules only
    python benchmarks/bench_onnx.py --models resnet50 --targets tpu --profile 25
    python benchmarks/bench_onnx.py --models resnet50 --executor processes:2   # library tuned in parallel
    python benchmarks/bench_onnx.py --replay                 # ... and each report's traces replayed
    python benchmarks/bench_onnx.py --models zoo-squeezenet,zoo-resnet50,zoo-vgg19
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


class _Graph:
    """A tiny builder: nodes, initializers (random, seeded), unique names."""

    def __init__(self, seed: int = 0):
        self.nodes, self.inits, self.rng, self.count = [], [], np.random.default_rng(seed), {}

    def name(self, base: str) -> str:
        self.count[base] = self.count.get(base, 0) + 1
        return f"{base}_{self.count[base]}"

    def weight(self, base: str, shape, scale: float | None = None) -> str:
        name = self.name(base)
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else math.sqrt(2.0 / fan_in)
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(self, base: str, value) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs, base: str | None = None, **attrs) -> str:
        out = self.name(base or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, groups=1) -> str:
        w = self.weight("conv_w", (cout, cin // groups, k, k))
        b = self.weight("conv_b", (cout,), 0.01)
        return self.op("Conv", [x, w, b], "conv", kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=groups)

    def model(self, x_name: str, x_shape, out: str, out_shape, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model


def resnet50(blocks=(3, 4, 6, 3), image: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """torchvision ResNet-50 (v1.5: the stride in the 3x3 conv), BN folded, as exported."""
    g = _Graph()
    x = g.op("Relu", [g.conv("input", 3, 64, 7, 2)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, n in enumerate(blocks):
        width = 64 * 2 ** stage
        for b in range(n):
            stride = 2 if b == 0 and stage > 0 else 1
            y = g.op("Relu", [g.conv(x, cin, width, 1)])
            y = g.op("Relu", [g.conv(y, width, width, 3, stride)])
            y = g.conv(y, width, width * 4, 1)
            skip = g.conv(x, cin, width * 4, 1, stride) if b == 0 else x
            x = g.op("Relu", [g.op("Add", [y, skip])])
            cin = width * 4
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.op("Gemm", [x, g.weight("fc_w", (classes, cin)), g.weight("fc_b", (classes,), 0.01)], "logits", transB=1)
    return g.model("input", (1, 3, image, image), out, (1, classes))


def one_layer_net(image: int = 224) -> onnx.ModelProto:
    """The 1-layer reference for the per-layer ratio: ResNet-50's stem conv + ReLU."""
    g = _Graph()
    out = g.op("Relu", [g.conv("input", 3, 64, 7, 2)])
    return g.model("input", (1, 3, image, image), out, (1, 64, image // 2, image // 2))


def mobilenetv2(image: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """torchvision MobileNetV2, BN folded, ReLU6 as Clip(0, 6), as exported."""
    g = _Graph()
    zero, six = g.const("zero", np.array(0.0, np.float32)), g.const("six", np.array(6.0, np.float32))

    def relu6(t):
        return g.op("Clip", [t, zero, six], "clip")
    x = relu6(g.conv("input", 3, 32, 3, 2))
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = relu6(g.conv(x, cin, hidden, 1)) if t != 1 else x
            y = relu6(g.conv(y, hidden, hidden, 3, stride, groups=hidden))
            y = g.conv(y, hidden, c, 1)
            x = g.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = relu6(g.conv(x, cin, 1280, 1))
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.op("Gemm", [x, g.weight("fc_w", (classes, 1280)), g.weight("fc_b", (classes,), 0.01)], "logits", transB=1)
    return g.model("input", (1, 3, image, image), out, (1, classes))


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ff: int = 3072) -> onnx.ModelProto:
    """One BERT-base encoder layer as torch exports it (erf GELU, LayerNormalization)."""
    g = _Graph()
    dh = hidden // heads

    def linear(x, n_in, n_out):
        return g.op("Add", [g.op("MatMul", [x, g.weight("w", (n_in, n_out), 0.02)]), g.weight("b", (n_out,), 0.02)])
    heads_shape = g.const("heads_shape", np.array([1, seq, heads, dh], np.int64))
    q, k, v = (g.op("Reshape", [linear("hidden", hidden, hidden), heads_shape]) for _ in range(3))
    q = g.op("Transpose", [q], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [k], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [v], perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k]), g.const("sqrt_dh", np.array(math.sqrt(dh), np.float32))])
    scores = g.op("Add", [scores, g.const("mask", np.zeros((1, 1, 1, seq), np.float32))])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                           g.const("hidden_shape", np.array([1, seq, hidden], np.int64))])
    x = g.op("Add", [linear(ctx, hidden, hidden), "hidden"])
    x = g.op("LayerNormalization", [x, g.const("ln_g", np.ones(hidden, np.float32)),
                                    g.const("ln_b", np.zeros(hidden, np.float32))], epsilon=1e-12)
    h = linear(x, hidden, ff)
    e = g.op("Erf", [g.op("Div", [h, g.const("sqrt2", np.array(math.sqrt(2), np.float32))])])
    h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [e, g.const("one", np.array(1.0, np.float32))])]),
                     g.const("half", np.array(0.5, np.float32))])
    y = g.op("Add", [linear(h, ff, hidden), x])
    y = g.op("LayerNormalization", [y, g.const("ln2_g", np.ones(hidden, np.float32)),
                                    g.const("ln2_b", np.zeros(hidden, np.float32))], "output", epsilon=1e-12)
    return g.model("hidden", (1, seq, hidden), y, (1, seq, hidden))


ZOO = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
       "vgg19", "zfnet512")


def zoo(name: str, seed: int = 0) -> onnx.ModelProto:
    """A zoo classic from onnx's backend test data, its weights randomised (`randomised`)."""
    return randomised(onnx.load(str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
                                    / f"light_{name}.onnx")), seed)


def randomised(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """`model` with each ConstantOfShape weight replaced by random values of its shape (the
    light models' weights are constants: every class would score the same); 1-D ones, biases
    and BatchNorm's (positive) variances, in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    keep = []
    for node in out.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in inits[node.input[0]]]
            value = rng.standard_normal(shape) * math.sqrt(2.0 / math.prod(shape[1:])) if len(shape) >= 2 \
                else rng.uniform(0.5, 1.5, shape)
            out.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
        else:
            keep.append(node)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out


MODELS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2, "bert": bert_layer,
          **{f"zoo-{name}": (lambda n=name: zoo(n)) for name in ZOO}}


def check_against_onnxruntime(model, program) -> float:
    """Max |interpreter - onnxruntime| / max(1, |onnxruntime|) on one random input."""
    import onnxruntime as ort

    from autocomp_jupyter.onnx_import import run_with_values

    inits = {i.name for i in model.graph.initializer}
    vi = next(i for i in model.graph.input if i.name not in inits)   # IR 3 lists initializers as inputs
    x = np.random.default_rng(1).standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    want = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, {vi.name: x})[0]
    inputs = [t.name for t in program.inputs if t.role == "input"]
    got = run_with_values(program, {inputs[0]: x})[program.outputs[0]].reshape(want.shape)
    return float(np.abs(got - want).max() / max(1.0, np.abs(want).max()))


def clear_caches() -> None:
    """Forget every per-structure cache (library schedules, isl verdicts, tiling searches,
    tiled-run verdicts, twins): the timing is then a cold start."""
    from autocomp_jupyter import caches

    caches.clear_all()


def chain_floor(report: dict) -> float:
    """The smallest factor of the gain chain library → fused → tiled → optimised."""
    g = report["gain_chain_time_s"]
    steps = [g["library"], g["fused"], g["fused_tiled"], g["optimized"]]
    return min(a / b for a, b in zip(steps, steps[1:]))


def twins(report: dict) -> str:
    """How the final verification ran the kernels tile by tile: on the program itself, on a
    scaled twin (its largest dimension), or not at all (isl's verdict alone)."""
    v = report.get("verification") or {}
    runs = v.get("tiled_runs", {})
    parts = [f"{runs[k]}{k[0]}" for k in ("program", "twin", "coarsened", "none") if runs.get(k)]
    extent = f"@{v['twin_max_extent']}" if v.get("twin_max_extent") else ""
    return "/".join(parts) + extent


def main(argv=None) -> int:
    from autocomp_jupyter import from_onnx, optimize

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,mobilenetv2,bert")
    ap.add_argument("--targets", default="tpu,npu")
    ap.add_argument("--tune", type=int, default=0)
    ap.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparison")
    ap.add_argument("--warm", action="store_true", help="keep caches between runs (default: each run starts cold)")
    ap.add_argument("--executor", default=None, help="tuning executor: 'processes[:N]' or 'tcp://host:port'")
    ap.add_argument("--profile-dump", default="", help="write the cProfile stats to this file")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile the first optimise; print N rows")
    ap.add_argument("--replay", action="store_true",
                    help="also replay each report's traces: seconds, and 'same' when verified at the same time")
    args = ap.parse_args(argv)
    models = dict(MODELS)
    print(f"{'model':16} {'target':6} {'nodes':>5} {'ops':>4} {'kernels':>7} {'import_s':>8} {'optimize_s':>10} "
          f"{'1-layer_s':>9} {'ratio':>6} {'vs_naive':>8} {'vs_lib':>6} {'limit':>5} {'chain':>5} {'verified':>8} {'ort_err':>8} "
          f"{'cpu_s':>6} {'twins':>14}" + (f" {'replay_s':>8} {'replay':>6}" if args.replay else ""))
    profiled = False
    for name in args.models.split(","):
        model = models[name]()
        t0 = time.perf_counter()
        program = from_onnx(model)
        import_s = time.perf_counter() - t0
        err = float("nan") if args.no_check else check_against_onnxruntime(model, program)
        for target in args.targets.split(","):
            if not args.warm:
                clear_caches()
            base = optimize(from_onnx(one_layer_net()), target=target, tune=0)
            one_s = base.report["seconds"]
            if args.profile and not profiled:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.enable()
            if not args.warm:
                clear_caches()                       # time a cold start: nothing learnt from earlier runs
            t0, c0 = time.perf_counter(), time.process_time()
            res = optimize(program, target=target, tune=args.tune, executor=args.executor)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            if args.profile and not profiled:
                prof.disable()
                profiled = True
                pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
                if args.profile_dump:
                    prof.dump_stats(args.profile_dump)
            r = res.report
            replay = ""
            if args.replay:
                t1 = time.perf_counter()
                again = optimize(program, target=target, schedule=r)
                same = again.verified and again.report["optimized"]["time_s"] == r["optimized"]["time_s"]
                replay = f" {time.perf_counter() - t1:8.2f} {'same' if same else 'DIFFERS':>6}"
            print(f"{name:16} {target:6} {len(model.graph.node):5d} {len(program.ops):4d} {len(r['kernels']):7d} "
                  f"{import_s:8.2f} {seconds:10.2f} {one_s:9.2f} {seconds / one_s:6.1f} "
                  f"{r['speedup_vs_naive']:8.2f} {r['speedup_vs_library']:6.2f} {r['limit_fraction']:5.2f} "
                  f"{chain_floor(r):5.3f} {str(r['verified']):>8} "
                  f"{err:8.1e} {cpu:6.1f} {twins(r):>14}{replay}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
