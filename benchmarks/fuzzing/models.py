"""Generated programs shaped like today's exported networks (issue 37), for the pipeline fuzzer.

    gen = generate_model(seed, size="small")       # or "torchvision"
    gen.text                                       # the imported DSL program (what the pipeline sees)
    gen.model                                      # the onnx.ModelProto it was imported from
    check_import(gen)                              # '' or why the import disagrees with onnxruntime
    outcome = check_model(gen, "npu", tune=0)      # check.check_program + the onnxruntime check

This module owns the exporter-shaped generator: each program is an ONNX graph built with
onnx.helper from blocks the way torch.onnx (dynamo, opset 18) writes them for torchvision,
timm and transformers networks, then imported with `onnx_import.from_onnx`. The blocks:
Shape/Gather/Unsqueeze/Concat/Reshape chains (a flatten or a view written from the input's
own shape), channel shuffle (Reshape, Transpose, Reshape), ShuffleNetV2 units (Split or
Slice, branches, Concat, shuffle), squeeze-excite (ReduceMean or GlobalAveragePool, 1x1
Conv, ReLU or SiLU, 1x1 Conv, Sigmoid or HardSigmoid, broadcast Mul), MobileNet/EfficientNet
inverted residuals (expand, stride-1 or stride-2 depthwise, squeeze-excite, project,
residual Add), concatenated branches (Inception, DenseNet), hard-swish (the HardSwish op or
torch's older Add/Clip/Div/Mul), ConvNeXt blocks with layer scale, Swin window attention
(window partition, heads, relative bias, window reverse; with a cyclic shift by Slice and
Concat), and a classifier head. Sizes are either small (the fuzzer's usual few-second runs)
or torchvision's (stages from 16 channels at 112x112 to 1280 at 7x7).

Where the DSL has no form for an exporter's op (Shape, Gather of a shape, Split, Slice,
Unsqueeze), the importer folds or lowers it, so the program the pipeline runs is the
importer's; `check_import` checks that import against onnxruntime with the model's own
weights (max |error| <= 1e-4 x max |y|), and the pipeline's checks run on the imported text
as on any generated program (`check.check_program`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autocomp_jupyter.errors import UserError

from .check import Outcome, check_program

SIZES = ("small", "torchvision")
BLOCKS = ("conv_act", "dw_s2", "channel_shuffle", "shuffle_unit", "squeeze_excite", "inverted_residual",
          "concat_branches", "hard_swish", "convnext", "window_attention", "shape_view", "head")
# Torchvision stages (channels, spatial): MobileNetV2/V3, EfficientNet-B0, ShuffleNetV2, ResNet,
# DenseNet, Swin/ConvNeXt stems.
_TV_STAGES = ((16, 112), (24, 56), (32, 56), (40, 28), (48, 28), (64, 56), (80, 14), (96, 56), (112, 14),
              (116, 28), (128, 28), (192, 7), (232, 14), (256, 14), (320, 7), (464, 7))
_SMALL_CHANNELS = (4, 6, 8, 12, 16)
_SMALL_SPATIAL = (4, 5, 6, 7, 8, 9, 12, 13)
_MAX_MACS = {"small": 2_000_000, "torchvision": 100_000_000}      # per program, keeps a run short
_MAX_ELEMENTS = {"small": 20_000, "torchvision": 1_300_000}       # per tensor
ORT_TOLERANCE = 1e-4


@dataclass(frozen=True)
class GeneratedModel:
    """One exporter-shaped program: the ONNX model, its imported DSL text, the blocks used."""

    seed: int
    size: str
    text: str
    kinds: tuple[str, ...]
    model: object = field(repr=False, compare=False)
    dtype: str = "f32"
    refused: str = ""          # the importer's UserError, when it refused the model (text is then "")


class _Graph:
    """ONNX nodes and initialisers under construction, with the static shape of every tensor."""

    def __init__(self, rng: np.random.Generator):
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.rng = rng
        self.nodes, self.inits, self.shape, self.count = [], [], {}, {}
        self.macs = 0

    def name(self, base: str) -> str:
        self.count[base] = self.count.get(base, 0) + 1
        return f"{base}_{self.count[base]}"

    def weight(self, base: str, shape, scale: float | None = None) -> str:
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
        scale = math.sqrt(2.0 / fan_in) if scale is None else scale
        return self.const(base, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def const(self, base: str, value) -> str:
        name = self.name(base)
        value = np.asarray(value)
        self.inits.append(self.numpy_helper.from_array(value, name))
        self.shape[name] = tuple(value.shape)
        return name

    def op(self, op_type: str, inputs, shape, outputs: int = 1, **attrs):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), names, name=names[0], **attrs))
        shapes = [shape] if outputs == 1 else shape
        for n, s in zip(names, shapes):
            self.shape[n] = tuple(int(d) for d in s)
        return names[0] if outputs == 1 else names

    def model(self, x: str, x_shape, y: str):
        from onnx import TensorProto

        helper = self.helper
        graph = helper.make_graph(self.nodes, "fuzz", [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(x_shape))],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, list(self.shape[y]))],
                                  self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


class _ModelGenerator:
    """Blocks on an NCHW activation, each written the way the exporters write it."""

    def __init__(self, seed: int, size: str, max_blocks: int):
        if size not in SIZES:
            raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
        self.rng = np.random.default_rng(seed)
        self.size, self.max_blocks = size, max_blocks
        self.g = _Graph(self.rng)
        self.kinds: list[str] = []

    # ------------------------------------------------------------ helpers
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def fits(self, shape, macs: int = 0) -> bool:
        return (math.prod(shape) <= _MAX_ELEMENTS[self.size]
                and self.g.macs + macs <= _MAX_MACS[self.size] and all(d >= 1 for d in shape))

    def channels(self, c: int, factor: float) -> int:
        """A channel count near c * factor, rounded like the exporters' networks (to 8)."""
        if self.size == "small":
            return max(2, int(round(c * factor)))
        return max(8, int(round(c * factor / 8)) * 8)

    # ------------------------------------------------------------ layers
    def conv(self, x: str, cout: int, k: int, stride: int = 1, groups: int = 1, bias: bool = True,
             pad: int | None = None) -> str | None:
        n, c, h, w = self.g.shape[x]
        pad = k // 2 if pad is None else pad
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        macs = n * cout * ho * wo * (c // groups) * k * k
        if ho < 1 or wo < 1 or not self.fits((n, cout, ho, wo), macs):
            return None
        self.g.macs += macs
        inputs = [x, self.g.weight("w", (cout, c // groups, k, k))]
        if bias:
            inputs.append(self.g.weight("b", (cout,), 0.1))
        return self.g.op("Conv", inputs, (n, cout, ho, wo), kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, group=groups, dilations=[1, 1])

    def batchnorm(self, x: str) -> str:
        c = self.g.shape[x][1]
        g = self.g
        params = [g.const("bn_scale", self.rng.uniform(0.5, 1.5, c).astype(np.float32)),
                  g.const("bn_bias", (self.rng.standard_normal(c) * 0.1).astype(np.float32)),
                  g.const("bn_mean", (self.rng.standard_normal(c) * 0.1).astype(np.float32)),
                  g.const("bn_var", self.rng.uniform(0.5, 1.5, c).astype(np.float32))]
        return g.op("BatchNormalization", [x] + params, g.shape[x], epsilon=1e-5)

    def act(self, x: str, kind: str | None = None) -> str:
        """An activation as the exporters write it."""
        kind = kind or self.pick(("relu", "relu", "relu6", "silu", "hardswish", "hardswish_old", "none"))
        g, shape = self.g, self.g.shape[x]
        if kind == "relu":
            return g.op("Relu", [x], shape)
        if kind == "relu6":
            return g.op("Clip", [x, g.const("zero", np.float32(0)), g.const("six", np.float32(6))], shape)
        if kind == "silu":
            return g.op("Mul", [x, g.op("Sigmoid", [x], shape)], shape)
        if kind in ("hardswish", "hardswish_old"):
            self.kinds.append("hard_swish")
            if kind == "hardswish":
                return g.op("HardSwish", [x], shape)
            clip = g.op("Clip", [g.op("Add", [x, g.const("three", np.float32(3))], shape),
                                 g.const("zero", np.float32(0)), g.const("six", np.float32(6))], shape)
            return g.op("Div", [g.op("Mul", [x, clip], shape), g.const("six", np.float32(6))], shape)
        return x

    def gate(self, x: str) -> str:
        shape = self.g.shape[x]
        if self.chance(0.5):
            return self.g.op("Sigmoid", [x], shape)
        return self.g.op("HardSigmoid", [x], shape, alpha=1.0 / 6, beta=0.5)

    def reshape(self, x: str, shape, from_shape: bool = False) -> str:
        """Reshape to `shape`; with `from_shape`, the batch dimension read by Shape → Gather →
        Unsqueeze → Concat, as torch writes `x.view(x.size(0), ...)`."""
        g = self.g
        if from_shape:
            dims = g.op("Shape", [x], (len(g.shape[x]),))
            batch = g.op("Gather", [dims, g.const("idx", np.int64(0))], (), axis=0)
            batch = g.op("Unsqueeze", [batch, g.const("axes", np.array([0], np.int64))], (1,))
            rest = g.const("dims", np.array(list(shape[1:]), np.int64))
            target = g.op("Concat", [batch, rest], (len(shape),), axis=0)
        else:
            target = g.const("shape", np.array(list(shape), np.int64))
        resolved = list(shape)
        if -1 in resolved:
            k = resolved.index(-1)
            resolved[k] = math.prod(g.shape[x]) // -math.prod(resolved)
        return g.op("Reshape", [x, target], resolved)

    def transpose(self, x: str, perm) -> str:
        return self.g.op("Transpose", [x], [self.g.shape[x][p] for p in perm], perm=list(perm))

    def matmul_add(self, x: str, n_out: int) -> str | None:
        """x @ W + b on the last axis (a torch Linear on a 3-D or 4-D activation)."""
        shape = self.g.shape[x]
        macs = math.prod(shape) * n_out
        if not self.fits(shape[:-1] + (n_out,), macs):
            return None
        self.g.macs += macs
        out = self.g.op("MatMul", [x, self.g.weight("w", (shape[-1], n_out), math.sqrt(1.0 / shape[-1]))],
                        shape[:-1] + (n_out,))
        return self.g.op("Add", [out, self.g.weight("b", (n_out,), 0.1)], shape[:-1] + (n_out,))

    def layernorm(self, x: str) -> str:
        c = self.g.shape[x][-1]
        return self.g.op("LayerNormalization", [x, self.g.const("ln_g", self.rng.uniform(0.5, 1.5, c).astype(np.float32)),
                                                self.g.const("ln_b", (self.rng.standard_normal(c) * 0.1).astype(np.float32))],
                         self.g.shape[x], axis=-1, epsilon=1e-6)

    # ------------------------------------------------------------ the program
    def first_shape(self) -> tuple[int, int, int, int]:
        if self.size == "small":
            return (1, self.pick(_SMALL_CHANNELS), self.pick(_SMALL_SPATIAL), self.pick(_SMALL_SPATIAL))
        c, s = self.pick(_TV_STAGES)
        return (1, c, s, s)

    def build(self, seed: int) -> GeneratedModel:
        from autocomp_jupyter.onnx_import import from_onnx

        shape = self.first_shape()
        x = "x"
        self.g.shape[x] = shape
        cur = x
        for _ in range(int(self.rng.integers(1, self.max_blocks + 1))):
            if len(self.g.shape[cur]) != 4:
                break
            for _attempt in range(6):
                kind = self.pick(BLOCKS[:-1])
                made = getattr(self, "block_" + kind)(cur)
                if made is not None:
                    self.kinds.append(kind)
                    cur = made
                    break
        if len(self.g.shape[cur]) == 4 and self.chance(0.25):
            cur = self.block_head(cur)
            self.kinds.append("head")
        if cur == x:
            cur = self.act(x, "relu")
        model = self.g.model(x, shape, cur)
        try:
            program = from_onnx(model)
        except UserError as err:
            return GeneratedModel(seed, self.size, "", tuple(self.kinds), model, refused=str(err).splitlines()[0][:400])
        return GeneratedModel(seed, self.size, program.source, tuple(self.kinds), model)

    # ------------------------------------------------------------ blocks
    def block_conv_act(self, x):
        c = self.g.shape[x][1]
        k, stride = self.pick((1, 1, 3, 3, 5)), self.pick((1, 1, 1, 2))
        # x4: the 1x1 up to a classifier's width (MobileNet's 320 -> 1280 at 7x7)
        y = self.conv(x, self.channels(c, self.pick((0.5, 1.0, 1.0, 2.0, 4.0))), k, stride, bias=self.chance(0.5))
        if y is None:
            return None
        if self.chance(0.5):
            y = self.batchnorm(y)
        return self.act(y)

    def block_dw_s2(self, x):
        """A stride-2 depthwise convolution (3x3 or 5x5), batchnorm, activation."""
        c = self.g.shape[x][1]
        y = self.conv(x, c, self.pick((3, 3, 5)), stride=2, groups=c, bias=self.chance(0.3))
        return None if y is None else self.act(self.batchnorm(y))

    def block_channel_shuffle(self, x, groups: int | None = None):
        n, c, h, w = self.g.shape[x]
        groups = groups or next((g for g in self.rng.permutation([2, 3, 4]) if c % g == 0), None)
        if groups is None or c < 2 * groups:
            return None
        y = self.reshape(x, (n, int(groups), c // int(groups), h, w), from_shape=self.chance(0.5))
        y = self.transpose(y, (0, 2, 1, 3, 4))
        return self.reshape(y, (n, c, h, w) if self.chance(0.6) else (n, -1, h, w), from_shape=self.chance(0.3))

    def split_halves(self, x):
        n, c, h, w = self.g.shape[x]
        half = (n, c // 2, h, w)
        if self.chance(0.5):
            return self.g.op("Split", [x, self.g.const("split", np.array([c // 2, c // 2], np.int64))],
                             [half, half], outputs=2, axis=1)
        parts = []
        for lo, hi in ((0, c // 2), (c // 2, c)):
            parts.append(self.g.op("Slice", [x, self.g.const("starts", np.array([lo], np.int64)),
                                             self.g.const("ends", np.array([hi], np.int64)),
                                             self.g.const("axes", np.array([1], np.int64))], half))
        return parts

    def block_shuffle_unit(self, x):
        """ShuffleNetV2: stride 1 splits the channels and transforms one half; stride 2 runs
        both branches on the whole input (each with a stride-2 depthwise). Concat, shuffle."""
        n, c, h, w = self.g.shape[x]
        if c % 2:
            return None
        if self.chance(0.5):
            left, right = self.split_halves(x)
            branch = self.shuffle_branch(right, c // 2, 1)
        else:
            left = self.conv(x, c, 3, stride=2, groups=c)            # branch 1: depthwise s2, 1x1
            left = left and self.conv(self.batchnorm(left), c, 1)
            left = left and self.act(left, "relu")
            branch = self.shuffle_branch(x, c, 2)
        if left is None or branch is None:
            return None
        ln, lc, lh, lw = self.g.shape[left]
        cat = self.g.op("Concat", [left, branch], (ln, lc + self.g.shape[branch][1], lh, lw), axis=1)
        return self.block_channel_shuffle(cat, groups=2)

    def shuffle_branch(self, x, cout: int, stride: int):
        y = self.conv(x, cout, 1)
        y = y and self.conv(self.act(y, "relu"), cout, 3, stride=stride, groups=cout)
        y = y and self.conv(self.batchnorm(y), cout, 1)
        return y and self.act(y, "relu")

    def block_squeeze_excite(self, x):
        n, c, h, w = self.g.shape[x]
        squeezed = max(1, c // self.pick((4, 4, 16, 24)) if self.size == "torchvision" else c // 2)
        if self.chance(0.5):
            pooled = self.g.op("ReduceMean", [x, self.g.const("axes", np.array([2, 3], np.int64))], (n, c, 1, 1),
                               keepdims=1)
        else:
            pooled = self.g.op("GlobalAveragePool", [x], (n, c, 1, 1))
        s = self.conv(pooled, squeezed, 1)
        s = s and self.conv(self.act(s, self.pick(("relu", "silu"))), c, 1)
        return s and self.g.op("Mul", [x, self.gate(s)] if self.chance(0.7) else [self.gate(s), x], (n, c, h, w))

    def block_inverted_residual(self, x):
        """MobileNetV2/V3, EfficientNet: expand 1x1, depthwise (stride 1 or 2), squeeze-excite,
        project 1x1, and the residual Add when the shape is kept."""
        n, c, h, w = self.g.shape[x]
        hidden = self.channels(c, self.pick((1.0, 4.0, 6.0)) if self.size == "torchvision" else self.pick((1.0, 2.0)))
        stride = self.pick((1, 2))
        y = self.conv(x, hidden, 1, bias=False) if hidden != c else x
        y = y and self.act(self.batchnorm(y), self.pick(("relu6", "silu", "hardswish")))
        y = y and self.conv(y, hidden, self.pick((3, 5)), stride=stride, groups=hidden, bias=False)
        y = y and self.act(self.batchnorm(y), self.pick(("relu6", "silu", "hardswish")))
        if y is not None and self.chance(0.5):
            y = self.block_squeeze_excite(y)
            self.kinds.append("squeeze_excite")
        cout = c if stride == 1 and self.chance(0.6) else self.channels(c, self.pick((1.0, 1.5)))
        y = y and self.conv(y, cout, 1, bias=False)
        y = y and self.batchnorm(y)
        if y is not None and self.g.shape[y] == self.g.shape[x]:
            y = self.g.op("Add", [y, x] if self.chance(0.5) else [x, y], self.g.shape[x])
        return y

    def block_concat_branches(self, x):
        """Inception (1x1, 3x3, pooled 1x1 branches) or DenseNet (the input and a new branch)."""
        n, c, h, w = self.g.shape[x]
        if self.chance(0.4):
            branches = [x, self.conv(self.act(self.batchnorm(x), "relu"), self.channels(c, 0.5), 3)]
        else:
            branches = [self.conv(x, self.channels(c, 0.5), 1), self.conv(x, self.channels(c, 0.5), 3)]
            if self.chance(0.6):
                pooled = self.g.op("MaxPool", [x], (n, c, h, w), kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4)
                branches.append(self.conv(pooled, self.channels(c, 0.25), 1))
        if any(b is None for b in branches):
            return None
        branches = [b if b == x else self.act(b, "relu") for b in branches]
        total = sum(self.g.shape[b][1] for b in branches)
        if not self.fits((n, total, h, w)):
            return None
        return self.g.op("Concat", branches, (n, total, h, w), axis=1)

    def block_hard_swish(self, x):
        return self.act(x, self.pick(("hardswish", "hardswish_old")))

    def block_convnext(self, x):
        """ConvNeXt: 7x7 depthwise, to NHWC, LayerNorm, Linear 4C, GELU (erf form), Linear C,
        layer scale (Mul by gamma[C]), back to NCHW, residual Add."""
        n, c, h, w = self.g.shape[x]
        k = 7 if self.size == "torchvision" else self.pick((3, 5, 7))
        y = self.conv(x, c, k, groups=c)
        if y is None:
            return None
        g = self.g
        y = self.layernorm(self.transpose(y, (0, 2, 3, 1)))
        y = self.matmul_add(y, 4 * c)
        if y is None:
            return None
        shape = g.shape[y]
        erf = g.op("Erf", [g.op("Div", [y, g.const("sqrt2", np.float32(math.sqrt(2)))], shape)], shape)
        y = g.op("Mul", [g.op("Mul", [y, g.op("Add", [erf, g.const("one", np.float32(1))], shape)], shape),
                         g.const("half", np.float32(0.5))], shape)
        y = self.matmul_add(y, c)
        if y is None:
            return None
        y = g.op("Mul", [y, g.const("gamma", (self.rng.uniform(0.1, 1.0, c)).astype(np.float32))], g.shape[y])
        self.kinds.append("layer_scale")
        return g.op("Add", [x, self.transpose(y, (0, 3, 1, 2))], (n, c, h, w))

    def block_window_attention(self, x):
        """Swin: NHWC, (cyclic shift by Slice + Concat,) window partition, multi-head attention
        with a relative-position bias, window reverse, (shift back,) NCHW, residual Add."""
        n, c, h, w = self.g.shape[x]
        win = 7 if self.size == "torchvision" else self.pick((2, 3, 4))
        heads = next((hd for hd in ((3, 4, 2, 1) if self.size == "torchvision" else (2, 1)) if c % hd == 0), 1)
        if h % win or w % win or n != 1:
            return None
        nw, tokens, d = (h // win) * (w // win), win * win, c // heads
        attention = 2 * nw * heads * tokens * tokens * d
        if not self.fits((nw * heads, tokens, tokens), attention + 4 * h * w * c * c):
            return None
        self.g.macs += attention    # the projections' (4 h w c^2) are counted by matmul_add
        y = self.layernorm(self.transpose(x, (0, 2, 3, 1)))
        shift = win // 2 if win > 1 and self.chance(0.4) else 0
        if shift:
            y = self.roll(self.roll(y, 1, -shift), 2, -shift)
        y = self.transpose(self.reshape(y, (n, h // win, win, w // win, win, c)), (0, 1, 3, 2, 4, 5))
        y = self.reshape(y, (-1, tokens, c))
        qkv = self.matmul_add(y, 3 * c)
        qkv = self.transpose(self.reshape(qkv, (nw, tokens, 3, heads, d)), (2, 0, 3, 1, 4))
        q, k, v = (self.g.op("Gather", [qkv, self.g.const("idx", np.int64(i))], (nw, heads, tokens, d), axis=0)
                   for i in range(3))
        g = self.g
        q = g.op("Mul", [q, g.const("scale", np.float32(d ** -0.5))], g.shape[q])
        scores = g.op("MatMul", [q, self.transpose(k, (0, 1, 3, 2))], (nw, heads, tokens, tokens))
        bias = g.weight("rel_bias", (heads, tokens, tokens), 0.5)
        probs = g.op("Softmax", [g.op("Add", [scores, bias], g.shape[scores])], g.shape[scores], axis=-1)
        y = g.op("MatMul", [probs, v], (nw, heads, tokens, d))
        y = self.reshape(self.transpose(y, (0, 2, 1, 3)), (nw, tokens, c))
        y = self.matmul_add(y, c)
        y = self.transpose(self.reshape(y, (n, h // win, w // win, win, win, c)), (0, 1, 3, 2, 4, 5))
        y = self.reshape(y, (n, h, w, c))
        if shift:
            y = self.roll(self.roll(y, 1, shift), 2, shift)
        return g.op("Add", [x, self.transpose(y, (0, 3, 1, 2))], (n, c, h, w))

    def roll(self, x: str, axis: int, shift: int) -> str:
        """torch.roll as exported: two Slices and a Concat."""
        shape = self.g.shape[x]
        size = shape[axis]
        cut = (-shift) % size
        parts = []
        for lo, hi in ((cut, size), (0, cut)):
            part = list(shape)
            part[axis] = hi - lo
            parts.append(self.g.op("Slice", [x, self.g.const("starts", np.array([lo], np.int64)),
                                             self.g.const("ends", np.array([hi], np.int64)),
                                             self.g.const("axes", np.array([axis], np.int64))], part))
        return self.g.op("Concat", parts, shape, axis=axis)

    def block_shape_view(self, x):
        """A view written from the tensor's own shape: flatten the spatial axes and back
        (Shape → Gather → Unsqueeze → Concat → Reshape, as `x.view(x.size(0), c, -1)` exports)."""
        n, c, h, w = self.g.shape[x]
        y = self.reshape(x, (n, c, -1), from_shape=True)
        if self.chance(0.5):
            y = self.g.op("Softmax", [y], self.g.shape[y], axis=-1)
        return self.reshape(y, (n, c, h, w), from_shape=self.chance(0.5))

    def block_head(self, x):
        """Classifier: global pool, flatten from the shape, Gemm (transB=1)."""
        n, c, h, w = self.g.shape[x]
        pooled = self.g.op("GlobalAveragePool", [x], (n, c, 1, 1))
        flat = self.reshape(pooled, (n, -1), from_shape=True) if self.chance(0.5) else \
            self.g.op("Flatten", [pooled], (n, c), axis=1)
        classes = 1000 if self.size == "torchvision" else self.pick((3, 5, 10))
        return self.g.op("Gemm", [flat, self.g.weight("fc_w", (classes, c)), self.g.weight("fc_b", (classes,), 0.1)],
                         (n, classes), transB=1)


def generate_model(seed: int, size: str = "small", max_blocks: int = 4) -> GeneratedModel:
    """An exporter-shaped program, the same for the same seed and size."""
    return _ModelGenerator(seed, size, max_blocks).build(seed)


# --------------------------------------------------------------------------- the checks


def check_import(gen: GeneratedModel, seed: int = 1) -> str:
    """'' when the imported program, run by the interpreter with the model's weights, matches
    onnxruntime on one random input (max |error| <= ORT_TOLERANCE x max |y|), else why not."""
    import onnxruntime as ort

    from autocomp_jupyter.onnx_import import from_onnx, run_with_values

    program = from_onnx(gen.model)
    x_info = gen.model.graph.input[0]
    shape = [d.dim_value for d in x_info.type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    want = ort.InferenceSession(gen.model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, {x_info.name: x})[0]
    name = next(t.name for t in program.inputs if t.role == "input")
    got = run_with_values(program, {name: x})[program.outputs[0]].reshape(want.shape)
    err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    if not err <= ORT_TOLERANCE * max(scale, 1e-30):
        return f"import differs from onnxruntime: max |error| {err:.3g}, max |y| {scale:.3g}"
    return ""


def check_model(gen: GeneratedModel, preset: str, tune: int = 0, seed: int = 0, **options) -> Outcome:
    """`check_program` on the imported text, plus class `import` when the importer
    disagrees with onnxruntime (checked once per program: pass `check_onnx=False` to skip)."""
    check_onnx = options.pop("check_onnx", True)
    if gen.refused:
        outcome = Outcome(preset, tune)
        outcome.add("refused", gen.refused, "onnx_import")
        return outcome
    outcome = check_program(gen.text, preset, tune=tune, seed=seed, **options)
    if check_onnx:
        try:
            reason = check_import(gen)
        except Exception as err:  # noqa: BLE001 - a traceback of the check is a finding too
            reason = f"{type(err).__name__}: {err}"
        if reason:
            outcome.add("import", reason)
    return outcome
