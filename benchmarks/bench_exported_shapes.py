"""EfficientNet-B0, ShuffleNetV2 x1.0 and RegNetY-400MF at torchvision's sizes, in the shapes
torch.onnx's exporter writes them, built with onnx.helper (random weights, no torch needed).

These are the networks whose exports once ended in a traceback (a stride-2 depthwise read
twice the rows a kernel twin's producer wrote) or whose gain chain read below 1 (a grouped
conv with its epilogue, scheduled as the library would). Each is imported, checked against
onnxruntime and optimised on each target with `bench_onnx.py`'s table (`chain` is the
lowest step of the gain chain, `cpu_s` this process's CPU seconds); before a run's row, a
line for each rollback of its report that is an internal fault (an exception caught as a
transaction, `passes.transaction`: there should be none).

    python benchmarks/bench_exported_shapes.py                                  # all three, npu
    python benchmarks/bench_exported_shapes.py --models shufflenet_v2 --targets npu,gemmini,tpu,gpu
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_onnx  # noqa: E402  (puts this checkout's package first on the path)
from bench_onnx import _Graph  # noqa: E402

import autocomp_jupyter  # noqa: E402


def _head(g: _Graph, x: str, cin: int, classes: int, image: int):
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.op("Gemm", [x, g.weight("fc_w", (classes, cin)), g.weight("fc_b", (classes,), 0.01)], "logits", transB=1)
    return g.model("input", (1, 3, image, image), out, (1, classes), opset=18)


def efficientnet_b0(image: int = 224, classes: int = 1000):
    """torchvision EfficientNet-B0: MBConv blocks (1x1 expand, SiLU as x * sigmoid(x), kxk
    depthwise, squeeze-excite as mean → 1x1 → SiLU → 1x1 → sigmoid → mul, 1x1 project), BN folded."""
    g = _Graph()

    def silu(t):
        return g.op("Mul", [t, g.op("Sigmoid", [t])], "silu")
    axes = g.const("axes", np.array([2, 3], np.int64))
    x, cin = silu(g.conv("input", 3, 32, 3, 2)), 32
    for expand, k, stride, cout, repeats in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                                             (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
        for i in range(repeats):
            s, hidden, squeeze = stride if i == 0 else 1, cin * expand, max(1, cin // 4)
            y = silu(g.conv(x, cin, hidden, 1)) if expand != 1 else x
            y = silu(g.conv(y, hidden, hidden, k, s, groups=hidden))
            e = g.op("ReduceMean", [y, axes], "mean", keepdims=1)
            e = g.op("Sigmoid", [g.conv(silu(g.conv(e, hidden, squeeze, 1)), squeeze, hidden, 1)])
            y = g.conv(g.op("Mul", [y, e]), hidden, cout, 1)
            x, cin = (g.op("Add", [y, x]) if s == 1 and cin == cout else y), cout
    return _head(g, silu(g.conv(x, cin, 1280, 1)), 1280, classes, image)


def shufflenet_v2(image: int = 224, classes: int = 1000):
    """torchvision ShuffleNetV2 x1.0: stride-2 units (two branches with stride-2 depthwise
    convs), stride-1 units (Split, one branch, Concat), channel shuffles (Reshape, Transpose,
    Reshape), BN folded."""
    g = _Graph()

    def shuffle(t, c, hw):
        t = g.op("Reshape", [t, g.const("shape", np.array([1, 2, c // 2, hw, hw], np.int64))])
        t = g.op("Transpose", [t], perm=[0, 2, 1, 3, 4])
        return g.op("Reshape", [t, g.const("shape", np.array([1, c, hw, hw], np.int64))])

    def branch(t, cin, c, stride):
        t = g.op("Relu", [g.conv(t, cin, c, 1)])
        return g.op("Relu", [g.conv(g.conv(t, c, c, 3, stride, groups=c), c, c, 1)])

    x = g.op("Relu", [g.conv("input", 3, 24, 3, 2)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, hw = 24, image // 4
    for c, repeats in ((116, 4), (232, 8), (464, 4)):
        hw = (hw + 1) // 2
        left = g.op("Relu", [g.conv(g.conv(x, cin, cin, 3, 2, groups=cin), cin, c // 2, 1)])
        x = shuffle(g.op("Concat", [left, branch(x, cin, c // 2, 2)], axis=1), c, hw)
        for _ in range(repeats - 1):
            halves = g.const("split", np.array([c // 2, c // 2], np.int64))
            out = [g.name("split"), g.name("split")]
            g.nodes.append(bench_onnx.helper.make_node("Split", [x, halves], out, name=out[0], axis=1))
            x = shuffle(g.op("Concat", [out[0], branch(out[1], c // 2, c // 2, 1)], axis=1), c, hw)
        cin = c
    return _head(g, g.op("Relu", [g.conv(x, cin, 1024, 1)]), 1024, classes, image)


def regnety_400mf(image: int = 224, classes: int = 1000):
    """torchvision RegNetY-400MF: stages of widths 48, 104, 208, 440 (depths 1, 3, 6, 6),
    grouped 3x3 convs of group width 8, squeeze-excite (a quarter of the block's input width),
    projection shortcuts where the shape changes, BN folded."""
    g = _Graph()
    axes = g.const("axes", np.array([2, 3], np.int64))
    x, cin = g.op("Relu", [g.conv("input", 3, 32, 3, 2)]), 32
    for width, depth in ((48, 1), (104, 3), (208, 6), (440, 6)):
        for i in range(depth):
            stride = 2 if i == 0 else 1
            y = g.op("Relu", [g.conv(x, cin, width, 1)])
            y = g.op("Relu", [g.conv(y, width, width, 3, stride, groups=width // 8)])
            squeeze = max(1, cin // 4)
            e = g.op("ReduceMean", [y, axes], "mean", keepdims=1)
            e = g.op("Sigmoid", [g.conv(g.op("Relu", [g.conv(e, width, squeeze, 1)]), squeeze, width, 1)])
            y = g.conv(g.op("Mul", [y, e]), width, width, 1)
            skip = g.conv(x, cin, width, 1, stride) if stride != 1 or cin != width else x
            x, cin = g.op("Relu", [g.op("Add", [y, skip])]), width
    return _head(g, x, cin, classes, image)


MODELS = {"efficientnet_b0": efficientnet_b0, "shufflenet_v2": shufflenet_v2, "regnety_400mf": regnety_400mf}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--models" not in argv:
        argv = ["--models", ",".join(MODELS)] + argv
    if "--targets" not in argv:
        argv = ["--targets", "npu"] + argv
    bench_onnx.MODELS.update(MODELS)
    optimize = autocomp_jupyter.optimize

    def optimize_and_show_faults(*args, **kwargs):
        res = optimize(*args, **kwargs)
        for entry in res.report["rollbacks"]:
            if "Error: " in entry["reason"] or "Exception: " in entry["reason"]:
                print(f"  fault ({res.target.name}): {entry['pass']} {entry['kernel']}: {entry['reason']}", flush=True)
        return res

    autocomp_jupyter.optimize = optimize_and_show_faults      # bench_onnx.main imports it when it runs
    try:
        return bench_onnx.main(argv)
    finally:
        autocomp_jupyter.optimize = optimize


if __name__ == "__main__":
    sys.exit(main())
