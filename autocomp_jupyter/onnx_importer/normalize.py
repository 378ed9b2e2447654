"""ONNX's normalisations and reductions: Softmax and LogSoftmax (by op version),
LayerNormalization, RMSNormalization, BatchNormalization (folded to a scale and shift),
InstanceNormalization, GroupNormalization, LRN, the Reduce* family, ArgMax/ArgMin.
"""
from __future__ import annotations

import math

import numpy as np

from .common import _fmt_num


class NormalizeOps:
    """Import handlers for normalisations and reductions (mixed into the importer)."""

    def _softmax(self, node, log: bool):
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        v = self.version(node)
        axis = self.attrs(node).get("axis", -1 if v >= 13 else 1)
        if not -rank <= axis < rank:
            self.fail(node, f"axis {axis} is out of range for rank {rank}")
        axis %= rank
        out = node.output[0]
        if v < 13 and math.prod(shape[axis + 1:]) != 1:
            # before opset 13: over the input flattened to 2-D at `axis`
            flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
            self.view(node, x + "__2d", x, flat)
            self._softmax_core(node, out + "_2d", x + "__2d", 1, log)
            return self.view(node, out, out + "_2d", shape)
        self._softmax_core(node, out, x, axis, log)

    def _softmax_core(self, node, out: str, x: str, axis: int, log: bool):
        shape = self.shape(x)
        if not log:
            return self.lib(node, out, "softmax", [x], axis=axis - len(shape))
        names = [f"i{d}" for d in range(len(shape))]
        keep = [f"u{d}" if d == axis else names[d] for d in range(len(shape))]
        red = [f"k{d}" if d == axis else names[d] for d in range(len(shape))]
        keep_shape = [1 if d == axis else e for d, e in enumerate(shape)]
        xs = self.operand(x)
        dtype = self.dtype(x)
        m = self.comp(out + "_max", keep_shape, dtype, keep, "max=", f"{xs}[{', '.join(red)}]")
        bcast = [("0" if d == axis else names[d]) for d in range(len(shape))]
        s = self.comp(out + "_sum", keep_shape, dtype, keep, "+=",
                      f"exp({xs}[{', '.join(red)}] - {m}[{', '.join(keep)}])")
        self.comp(out, shape, dtype, names, "=",
                  f"{xs}[{', '.join(names)}] - {m}[{', '.join(bcast)}] - log({s}[{', '.join(bcast)}])", "LogSoftmax")

    def op_Softmax(self, index, node):
        self._softmax(node, False)

    def op_LogSoftmax(self, index, node):
        self._softmax(node, True)

    def op_LayerNormalization(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        axis = a.get("axis", -1) % len(shape)
        for extra in node.output[1:]:
            if extra and self.consumers.get(extra):
                self.fail(node, "its mean/inv-std-dev outputs are used; only the first output is supported")
        d = math.prod(shape[axis:])
        gamma = node.input[1]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        out = node.output[0]
        if bias is None:
            self.consts[out + "_beta"] = np.zeros(d, np.float32)
            bias = out + "_beta"
        if axis == len(shape) - 1:
            return self.lib(node, out, "layernorm", [x, gamma, bias], eps=float(a.get("epsilon", 1e-5)))
        # over the trailing axes from `axis`: on the input flattened there
        flat = (math.prod(shape[:axis]), d)
        g, b = self.const(node, 1, "scale"), self.consts[bias] if bias in self.consts else self.const(node, 2, "bias")
        self.consts[out + "_g1"] = np.broadcast_to(g, shape[axis:]).reshape(d).astype(np.float32)
        self.consts[out + "_b1"] = np.broadcast_to(b, shape[axis:]).reshape(d).astype(np.float32)
        self.view(node, x + "__2d", x, flat)
        self.lib(node, out + "_2d", "layernorm", [x + "__2d", out + "_g1", out + "_b1"],
                 eps=float(a.get("epsilon", 1e-5)))
        self.view(node, out, out + "_2d", shape)

    def op_RMSNormalization(self, index, node):   # opset 23: x / sqrt(mean(x^2) + eps) * scale
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        axis = a.get("axis", -1) % len(shape)
        rows, d = math.prod(shape[:axis]), math.prod(shape[axis:])
        out = node.output[0]
        scale = self.const(node, 1, "scale")
        self.consts[out + "_scale"] = np.broadcast_to(scale, shape[axis:]).reshape(d).astype(np.float32)
        self.view(node, x + "__2d", x, (rows, d))
        xs = self.operand(x + "__2d")
        ms = self.comp(out + "_ms", (rows,), "f32", ["i0"], "+=", f"{xs}[i0, i1] * {xs}[i0, i1] / {d}")
        eps = _fmt_num(float(a.get("epsilon", 1e-5)))
        self.comp(out + "_2d", (rows, d), self.dtype(x), ["i0", "i1"], "=",
                  f"{xs}[i0, i1] / sqrt({ms}[i0] + {eps}) * {self.operand(out + '_scale')}[i1]", "RMSNormalization")
        self.view(node, out, out + "_2d", shape)

    def op_BatchNormalization(self, index, node):
        a = self.attrs(node)
        v = self.version(node)
        scale, bias = self.const(node, 1, "scale"), self.const(node, 2, "bias")
        mean, var = self.const(node, 3, "mean"), self.const(node, 4, "variance")
        extra = [o for o in node.output[1:] if o]
        if a.get("training_mode", 0) or (v < 14 and extra) or (v < 7 and a.get("is_test", 0) == 0 and extra):
            self.fail(node, "training-mode BatchNormalization (batch statistics) is not supported",
                      "export the model in eval mode")
        inv = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(a.get("epsilon", 1e-5)))
        shift = bias - mean * inv
        out = node.output[0]
        x_shape = self.shape(node.input[0])
        if inv.shape != (x_shape[1],):
            # spatial=0 (opset 7-8): a scale and shift per activation, [C, H, W]
            self.consts[out + "_scale"] = inv.astype(np.float32)
            self.consts[out + "_shift"] = shift.astype(np.float32)
            self.lib(node, out + "_scaled", "mul", [node.input[0], out + "_scale"])
            return self.lib(node, out, "add", [out + "_scaled", out + "_shift"])
        self.consts[out + "_scale"] = inv.astype(np.float32)
        self.consts[out + "_shift"] = shift.astype(np.float32)
        self.lib(node, out, "batchnorm", [node.input[0], out + "_scale", out + "_shift"])

    def _stats(self, node, out: str, xv: str, keep: int):
        """mean and variance of `xv` over its axes after the first `keep`: two tensors of
        its first `keep` dimensions."""
        shape = self.shape(xv)
        names = [f"i{d}" for d in range(len(shape))]
        count = math.prod(shape[keep:])
        x = f"{self.operand(xv)}[{', '.join(names)}]"
        mean = self.comp(out + "_mean", shape[:keep], "f32", names[:keep], "+=", f"{x} / {count}")
        m = f"{mean}[{', '.join(names[:keep])}]"
        var = self.comp(out + "_var", shape[:keep], "f32", names[:keep], "+=", f"({x} - {m}) * ({x} - {m}) / {count}")
        return mean, var

    def op_InstanceNormalization(self, index, node):
        x = node.input[0]
        shape = self.shape(x)
        eps = float(self.attrs(node).get("epsilon", 1e-5))
        out = node.output[0]
        mean, var = self._stats(node, out, x, 2)
        names = [f"i{d}" for d in range(len(shape))]
        xs = f"{self.operand(x)}[{', '.join(names)}]"
        scale, bias = self.operand(node.input[1]), self.operand(node.input[2])
        self.comp(out, shape, self.dtype(x), names, "=",
                  f"({xs} - {mean}[i0, i1]) / sqrt({var}[i0, i1] + {_fmt_num(eps)}) * {scale}[i1] + {bias}[i1]",
                  "InstanceNormalization")

    def op_GroupNormalization(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        groups = int(a["num_groups"])
        n, c = shape[:2]
        if c % groups:
            self.fail(node, f"num_groups={groups} does not divide {c} channels")
        cg, rest = c // groups, math.prod(shape[2:])
        scale, bias = self.const(node, 1, "scale"), self.const(node, 2, "bias")
        if scale.size == groups and groups != c:   # opset 18: one scale per group
            scale, bias = np.repeat(scale, cg), np.repeat(bias, cg)
        if scale.size != c:
            self.fail(node, f"scale {list(scale.shape)} is neither per channel ({c}) nor per group ({groups})")
        out = node.output[0]
        self.consts[out + "_g"] = scale.reshape(groups, cg).astype(np.float32)
        self.consts[out + "_b"] = bias.reshape(groups, cg).astype(np.float32)
        self.view(node, x + "__groups", x, (n, groups, cg, rest))
        mean, var = self._stats(node, out, x + "__groups", 2)
        xs = f"{self.operand(x + '__groups')}[i0, i1, i2, i3]"
        eps = _fmt_num(float(a.get("epsilon", 1e-5)))
        g, b = self.operand(out + "_g"), self.operand(out + "_b")
        self.comp(out + "_4d", (n, groups, cg, rest), self.dtype(x), ["i0", "i1", "i2", "i3"], "=",
                  f"({xs} - {mean}[i0, i1]) / sqrt({var}[i0, i1] + {eps}) * {g}[i1, i2] + {b}[i1, i2]",
                  "GroupNormalization")
        self.view(node, out, out + "_4d", shape)

    def op_LRN(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        size = int(a["size"])
        alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0))
        lo = (size - 1) // 2
        names = [f"i{d}" for d in range(len(shape))]
        xs = self.operand(x)
        shifted = f"{xs}[{', '.join(['i0', f'i1 + k0 - {lo}' if lo else 'i1 + k0'] + names[2:])}]"
        out = node.output[0]
        sq = self.comp(out + "_sq", shape, "f32", names, "+=", f"{shifted} * {shifted} where k0 < {size}")
        own = f"{xs}[{', '.join(names)}]"
        self.comp(out, shape, self.dtype(x), names, "=",
                  f"{own} / pow({_fmt_num(bias)} + {_fmt_num(alpha / size)} * {sq}[{', '.join(names)}], "
                  f"{_fmt_num(beta)})", f"LRN size {size}")

    def _reduce(self, index, node, kind: str):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        axes = self._axes(node, 1)
        if axes is None or not axes:
            if a.get("noop_with_empty_axes", 0):
                return self.alias(node, node.output[0], x)
            axes = list(range(rank))
        if any(not -rank <= ax < rank for ax in axes):
            self.fail(node, f"axes {axes} are out of range for rank {rank}")
        axes = sorted({ax % rank for ax in axes})
        keep = a.get("keepdims", 1)
        names = [f"i{d}" if d not in axes else f"k{d}" for d in range(rank)]
        lhs, out_shape, u = [], [], 0
        for d in range(rank):
            if d not in axes:
                lhs.append(names[d])
                out_shape.append(shape[d])
            elif keep:
                lhs.append(f"u{u}")
                u += 1
                out_shape.append(1)
        xs = f"{self.operand(x)}[{', '.join(names)}]"
        count = math.prod(shape[d] for d in axes)
        dtype = self.dtype(x)
        out = node.output[0]
        on = [f"i{d}" for d in range(len(out_shape))]
        at = f"[{', '.join(on)}]"
        simple = {"sum": ("+=", xs), "mean": ("+=", f"{xs} / {count}"),   # not "* (1/n)": exact
                  "max": ("max=", xs), "l1": ("+=", f"abs({xs})"), "sumsquare": ("+=", f"{xs} * {xs}")}
        if kind in simple:
            op, expr = simple[kind]
            self.comp(out, out_shape, dtype, lhs, op, expr)
        elif kind == "min":
            t = self.comp(out + "_neg", out_shape, dtype, lhs, "max=", f"-{xs}")
            self.comp(out, out_shape, dtype, on, "=", f"-{t}{at}", "ReduceMin")
        elif kind in ("l2", "logsum"):
            t = self.comp(out + "_sum", out_shape, "f32", lhs, "+=", f"{xs} * {xs}" if kind == "l2" else xs)
            self.comp(out, out_shape, dtype, on, "=", f"{'sqrt' if kind == 'l2' else 'log'}({t}{at})", node.op_type)
        elif kind == "logsumexp":
            m = self.comp(out + "_max", out_shape, "f32", lhs, "max=", xs)
            s = self.comp(out + "_sum", out_shape, "f32", lhs, "+=", f"exp({xs} - {m}[{', '.join(lhs)}])")
            self.comp(out, out_shape, dtype, on, "=", f"log({s}{at}) + {m}{at}", "ReduceLogSumExp")
        elif kind == "prod":
            if count > 64:
                self.fail(node, f"a product over {count} elements (at most 64 are written out)")
            import itertools
            factors = []
            for combo in itertools.product(*[range(shape[d]) for d in axes]):
                pick = dict(zip(axes, combo))
                factors.append(f"{self.operand(x)}[{', '.join(str(pick[d]) if d in pick else names[d] for d in range(rank))}]")
            self.comp(out, out_shape, dtype, lhs, "=", " * ".join(factors), "ReduceProd")

    def op_ReduceMean(self, index, node):
        self._reduce(index, node, "mean")

    def op_ReduceSum(self, index, node):
        self._reduce(index, node, "sum")

    def op_ReduceMax(self, index, node):
        self._reduce(index, node, "max")

    def op_ReduceMin(self, index, node):
        self._reduce(index, node, "min")

    def op_ReduceProd(self, index, node):
        self._reduce(index, node, "prod")

    def op_ReduceL1(self, index, node):
        self._reduce(index, node, "l1")

    def op_ReduceL2(self, index, node):
        self._reduce(index, node, "l2")

    def op_ReduceSumSquare(self, index, node):
        self._reduce(index, node, "sumsquare")

    def op_ReduceLogSum(self, index, node):
        self._reduce(index, node, "logsum")

    def op_ReduceLogSumExp(self, index, node):
        self._reduce(index, node, "logsumexp")

    def _arg(self, node, sign: str):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        axis = a.get("axis", 0) % rank
        keep, last = a.get("keepdims", 1), a.get("select_last_index", 0)
        names = [f"k{d}" if d == axis else f"i{d}" for d in range(rank)]
        lhs = [("u0" if d == axis else names[d]) for d in range(rank) if d != axis or keep]
        out_shape = [(1 if d == axis else e) for d, e in enumerate(shape) if d != axis or keep]
        xs = f"{sign}{self.operand(x)}[{', '.join(names)}]"
        out = node.output[0]
        k = shape[axis]
        m = self.comp(out + "_max", out_shape, "f32", lhs, "max=", xs)
        # the last index of the maximum: max of k where x == max; the first: K-1 - max of K-1-k
        self.consts[out + "_at"] = (np.arange(k) if last else k - 1 - np.arange(k)).astype(np.int32)
        at = self.operand(out + "_at")
        mark = f"{at}[k{axis}] * equal({xs}, {m}[{', '.join(lhs)}])"
        if last:
            self.comp(out, out_shape, "i32", lhs, "max=", mark, node.op_type)
            return
        t = self.comp(out + "_rev", out_shape, "i32", lhs, "max=", mark)
        on = [f"i{d}" for d in range(len(out_shape))]
        self.comp(out, out_shape, "i32", on, "=", f"{k - 1} - {t}[{', '.join(on)}]", node.op_type)

    def op_ArgMax(self, index, node):
        self._arg(node, "")

    def op_ArgMin(self, index, node):
        self._arg(node, "-")
