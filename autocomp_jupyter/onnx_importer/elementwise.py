"""ONNX's elementwise ops: arithmetic (numpy and opset < 7 broadcasting), activations,
comparisons and logic (bool as i8 0/1), Where, Clip, casts, IsNaN/IsInf, and the GELU patterns
torch writes out (erf and tanh forms) recognised as one `gelu`.
"""
from __future__ import annotations

import math

import numpy as np

from .common import _DTYPES, _F32_MAX, _NP_DTYPE, _fmt_num


class ElementwiseOps:
    """Import handlers for the elementwise ops (mixed into the importer)."""

    def _binary(self, node, op_name: str, symbol: str):
        a, b = node.input[0], self.legacy_broadcast(node)
        for first, second, reverse in ((a, b, False), (b, a, True)):
            if self._finite_scalar(second) and self.consts[second].ndim <= len(self.shape(first)):
                return self._scalar(node, node.output[0], first, symbol, float(self.consts[second].reshape(())),
                                    reverse)
        return self.lib(node, node.output[0], op_name, [a, b])

    def op_Add(self, index, node):
        self._binary(node, "add", "+")

    def op_Sub(self, index, node):
        self._binary(node, "sub", "-")

    def op_Mul(self, index, node):
        self._binary(node, "mul", "*")

    def op_Div(self, index, node):
        a, b = node.input[0], self.legacy_broadcast(node)
        if self._finite_scalar(b) and self.consts[b].ndim <= len(self.shape(a)):
            return self._scalar(node, node.output[0], a, "/", float(self.consts[b].reshape(())))
        self._binary(node, "div", "/")

    def op_Relu(self, index, node):
        self.lib(node, node.output[0], "relu", [node.input[0]])

    def op_Sigmoid(self, index, node):
        self.lib(node, node.output[0], "sigmoid", [node.input[0]])

    def op_Tanh(self, index, node):
        gelu = self._gelu_tanh_pattern(index, node)
        if gelu is not None:
            x, out, skip = gelu
            self.skip_nodes.update(skip)
            return self.lib(node, out, "gelu", [x])
        self.lib(node, node.output[0], "tanh", [node.input[0]])

    def _gelu_tanh_pattern(self, index, node):
        """GPT-2's GELU written out (`0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`,
        as torch exports it: Pow(x, 3) → Mul 0.044715 → Add x → Mul √(2/π) → Tanh, then the
        tail `_gelu_tail` shares with the erf form; each product's operands in either order),
        the DSL's `gelu` exactly. Returns (x, out, nodes to skip) or None."""
        outer = self._scaled(node.input[0], math.sqrt(2 / math.pi))
        if outer is None or self._only_consumer(outer[1].output[0]) is not node:
            return None
        add_x = self._producer(outer[0])
        if add_x is None or add_x.op_type != "Add" or self._only_consumer(add_x.output[0]) is not outer[1]:
            return None
        for i, j in ((0, 1), (1, 0)):
            cubic = self._scaled(add_x.input[j], 0.044715)
            if cubic is None or self._only_consumer(cubic[1].output[0]) is not add_x:
                continue
            pw = self._scaled(cubic[0], 3.0, "Pow")
            if pw is not None and pw[0] == add_x.input[i] and self._only_consumer(pw[1].output[0]) is cubic[1]:
                x = add_x.input[i]
                break
        else:
            return None
        return self._gelu_tail(index, node, x, [outer[1], add_x, cubic[1], pw[1]])

    def op_Exp(self, index, node):
        self.lib(node, node.output[0], "exp", [node.input[0]])

    def op_Sqrt(self, index, node):
        self._unary_fn(node, "sqrt(X)")

    def op_Abs(self, index, node):
        self._unary_fn(node, "abs(X)")

    def op_Neg(self, index, node):
        self._unary_fn(node, "-X")

    def op_Reciprocal(self, index, node):
        self._unary_fn(node, "1 / X")

    def op_Pow(self, index, node):
        b = self.legacy_broadcast(node)
        forms = {1.0: "X", 2.0: "X * X", 3.0: "X * X * X", 0.5: "sqrt(X)", -1.0: "1 / X", -0.5: "1 / sqrt(X)"}
        if b in self.consts and self.consts[b].size == 1 and self.consts[b].ndim <= len(self.shape(node.input[0])) \
                and float(self.consts[b].reshape(())) in forms:
            return self._unary_fn(node, forms[float(self.consts[b].reshape(()))])
        self.ew(node, node.output[0], [node.input[0], b], "pow({0}, {1})")

    def _variadic(self, node, fold: str):
        inputs = [i for i in node.input if i]
        if len(inputs) == 1:
            return self.alias(node, node.output[0], inputs[0])
        if fold == "mean":
            expr = "(" + " + ".join("{%d}" % k for k in range(len(inputs))) + f") / {len(inputs)}"
        elif fold == "sum":
            expr = " + ".join("{%d}" % k for k in range(len(inputs)))
        else:
            expr = "{0}"
            for k in range(1, len(inputs)):
                expr = f"{fold}({expr}, {{{k}}})"
        if fold == "sum" and len(inputs) == 2 and self.version(node) >= 8:
            return self.lib(node, node.output[0], "add", inputs)   # ResNet's residual Sum: an add
        if self.version(node) < 8 and len({tuple(self.shape(i)) for i in inputs}) > 1:
            self.fail(node, f"opset-{self.version(node)} {node.op_type} needs inputs of one shape, got "
                            + ", ".join(str(list(self.shape(i))) for i in inputs))
        self.ew(node, node.output[0], inputs, expr, note=node.op_type)

    def op_Sum(self, index, node):
        self._variadic(node, "sum")

    def op_Mean(self, index, node):
        self._variadic(node, "mean")

    def op_Max(self, index, node):
        self._variadic(node, "max")

    def op_Min(self, index, node):
        self._variadic(node, "min")

    def _activation(self, node, template: str, **defaults):
        a = self.attrs(node)
        values = {k: _fmt_num(a.get(k, v)) for k, v in defaults.items()}
        self.ew(node, node.output[0], [node.input[0]], template.format("{0}", **values), note=node.op_type)

    def op_LeakyRelu(self, index, node):
        self._activation(node, "max({0}, 0) + {alpha} * min({0}, 0)", alpha=0.01)

    def op_Elu(self, index, node):
        self._activation(node, "max({0}, 0) + {alpha} * (exp(min({0}, 0)) - 1)", alpha=1.0)

    def op_Celu(self, index, node):
        self._activation(node, "max({0}, 0) + min(0, {alpha} * (exp({0} / {alpha}) - 1))", alpha=1.0)

    def op_Selu(self, index, node):
        self._activation(node, "{gamma} * (max({0}, 0) + {alpha} * (exp(min({0}, 0)) - 1))",
                         alpha=1.67326319217681884765625, gamma=1.05070102214813232421875)

    def op_Softplus(self, index, node):   # log(1 + e^x), without overflow for large x
        self._activation(node, "max({0}, 0) + log(1 + exp(-abs({0})))")

    def op_Softsign(self, index, node):
        self._activation(node, "{0} / (1 + abs({0}))")

    def op_HardSigmoid(self, index, node):
        self._activation(node, "max(0, min(1, {alpha} * {0} + {beta}))", alpha=0.2, beta=0.5)

    def op_HardSwish(self, index, node):
        self._activation(node, "{0} * max(0, min(1, {0} / 6 + 0.5))")

    def op_Mish(self, index, node):
        self._activation(node, "{0} * tanh(max({0}, 0) + log(1 + exp(-abs({0}))))")

    def op_ThresholdedRelu(self, index, node):
        self._activation(node, "select(less({alpha}, {0}), {0}, 0)", alpha=1.0)

    def op_Shrink(self, index, node):
        self._activation(node, "select(less({0}, -{lambd}), {0} + {bias}, select(less({lambd}, {0}), {0} - {bias}, 0))",
                         lambd=0.5, bias=0.0)

    def op_Log(self, index, node):
        self._unary_fn(node, "log(X)")

    def op_Floor(self, index, node):
        self._unary_fn(node, "floor(X)")

    def op_Ceil(self, index, node):
        self._unary_fn(node, "-floor(-X)")

    def op_Sign(self, index, node):
        self._unary_fn(node, "less(0, X) - less(X, 0)")

    def op_IsNaN(self, index, node):   # NaN is the one value not equal to itself
        self._unary_fn(node, "1 - equal(X, X)", "i8")

    def op_IsInf(self, index, node):   # beyond the largest finite f32 (the f16 and bf16 ones are smaller)
        tests = ([f"less({_F32_MAX!r}, X)"] if self.flag(node, "detect_positive", 1) else []) \
            + ([f"less(X, -{_F32_MAX!r})"] if self.flag(node, "detect_negative", 1) else [])
        self._unary_fn(node, " + ".join(tests) or "0 * equal(X, X)", "i8")

    def op_Not(self, index, node):
        self._unary_fn(node, "1 - X")

    def op_PRelu(self, index, node):
        slope = node.input[1]
        x_shape = self.shape(node.input[0])
        s_shape = tuple(self.shape(slope))
        if self.version(node) < 7 and len(x_shape) > 2 and s_shape == (x_shape[1],):
            # opset 6: a slope per channel (axis 1), not numpy broadcasting
            aligned = slope + "__channel"
            if aligned not in self.consts and aligned not in self.values:
                self.view(node, aligned, slope, s_shape + (1,) * (len(x_shape) - 2))
            slope = aligned
        self.ew(node, node.output[0], [node.input[0], slope], "max({0}, 0) + {1} * min({0}, 0)", note="PRelu")

    def _compare(self, node, template: str):
        b = self.legacy_broadcast(node)
        self.ew(node, node.output[0], [node.input[0], b], template, dtype="i8", note=node.op_type)

    def op_Equal(self, index, node):
        self._compare(node, "equal({0}, {1})")

    def op_Less(self, index, node):
        self._compare(node, "less({0}, {1})")

    def op_LessOrEqual(self, index, node):
        self._compare(node, "less_equal({0}, {1})")

    def op_Greater(self, index, node):
        self._compare(node, "less({1}, {0})")

    def op_GreaterOrEqual(self, index, node):
        self._compare(node, "less_equal({1}, {0})")

    def op_And(self, index, node):
        self._compare(node, "{0} * {1}")

    def op_Or(self, index, node):
        self._compare(node, "max({0}, {1})")

    def op_Xor(self, index, node):
        self._compare(node, "abs({0} - {1})")

    def op_Where(self, index, node):
        c, a, b = node.input[:3]
        dtype = next((self.dtype(i) for i in (a, b) if i not in self.consts), self.dtype(a))
        self.ew(node, node.output[0], [c, a, b], "select({0}, {1}, {2})", dtype=dtype, note="Where")

    def op_Clip(self, index, node):
        a = self.attrs(node)
        lo, hi = a.get("min"), a.get("max")
        if len(node.input) > 1 and node.input[1]:
            lo = float(self.const(node, 1, "min").reshape(()))
        if len(node.input) > 2 and node.input[2]:
            hi = float(self.const(node, 2, "max").reshape(()))
        lo = None if lo is not None and float(lo) == -math.inf else lo   # an infinite bound is no bound
        hi = None if hi is not None and float(hi) == math.inf else hi
        if lo == 0.0 and hi == 6.0:
            return self.lib(node, node.output[0], "relu6", [node.input[0]])
        if lo == 0.0 and hi is None:
            return self.lib(node, node.output[0], "relu", [node.input[0]])
        fn = "X"
        if lo is not None:
            fn = f"max({fn}, {_fmt_num(lo)})"
        if hi is not None:
            fn = f"min({fn}, {_fmt_num(hi)})"
        self._unary_fn(node, fn)

    def op_Erf(self, index, node):
        gelu = self._gelu_pattern(index, node)
        if gelu is not None:
            x, out, skip = gelu
            self.skip_nodes.update(skip)
            return self.lib(node, out, "gelu", [x], approximate="none")
        self.lib(node, node.output[0], "erf", [node.input[0]])

    def op_Gelu(self, index, node):
        approx = self.attrs(node).get("approximate", b"none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        self.lib(node, node.output[0], "gelu", [node.input[0]], approximate=approx)

    def _gelu_pattern(self, index, node):
        """x·0.5·(1 + erf(x/√2)) as torch writes it: Div(x, √2) | Mul(x, 1/√2) → Erf, then
        `_gelu_tail`. Returns (x, out, nodes to skip)."""
        pre = self._producer(node.input[0])
        if pre is None:
            return None
        x = None
        if pre.op_type == "Div" and self._const_value(pre.input[1]) is not None \
                and abs(self._const_value(pre.input[1]) - math.sqrt(2)) < 1e-4:
            x = pre.input[0]
        scaled = self._scaled(pre.output[0], 1 / math.sqrt(2))
        if scaled is not None:
            x = scaled[0]
        if x is None or self._only_consumer(pre.output[0]) is not node:
            return None
        return self._gelu_tail(index, node, x, [pre])

    def _gelu_tail(self, index, node, x, before):
        """The end both GELU forms share: `node` (Erf, Tanh) → Add 1 → Mul x → Mul 0.5, or Mul
        with x·0.5 (the Muls' operands in either order). `before`: the pattern's nodes that
        lead to `node`, written already and dead once it is one op. Returns (x, out, nodes
        to skip) or None."""
        if x in self.consts:
            return None
        add = self._only_consumer(node.output[0])
        if add is None or add.op_type != "Add" or 1.0 not in (self._const_value(add.input[0]), self._const_value(add.input[1])):
            return None
        m1 = self._only_consumer(add.output[0])
        if m1 is None or m1.op_type != "Mul":
            return None
        other = m1.input[1] if m1.input[0] == add.output[0] else m1.input[0]
        half = None
        if other == x:      # (x * (1 + f)) * 0.5
            m2 = self._only_consumer(m1.output[0])
            if m2 is None or m2.op_type != "Mul" or 0.5 not in (self._const_value(m2.input[0]), self._const_value(m2.input[1])):
                return None
            last = m2
        else:               # (x * 0.5) * (1 + f)
            scaled = self._scaled(other, 0.5)
            if scaled is None or scaled[0] != x or self._only_consumer(other) is not m1:
                return None
            last, half = m1, scaled[1]
        ids = {id(n): k for k, n in enumerate(self.nodes)}
        skip = {ids[id(add)], ids[id(m1)]} | ({ids[id(last)]} if last is not m1 else set())
        if any(k < index for k in skip):
            return None
        for n in before:
            self._drop(n.output[0])
        if half is not None:
            if ids[id(half)] < index:
                self._drop(half.output[0])
            else:
                skip.add(ids[id(half)])
        return x, last.output[0], skip

    def op_Dropout(self, index, node):  # inference: the identity (the mask output must be unused)
        if len(node.output) > 1 and node.output[1] and self.consumers.get(node.output[1]):
            self.fail(node, "its mask output is used; only inference Dropout is supported")
        if self.version(node) >= 12 and len(node.input) > 2 and node.input[2]:
            training = self.const(node, 2, "training_mode")
            if bool(training.reshape(-1)[0]):
                self.fail(node, "training-mode Dropout (random) is not supported")
        self.alias(node, node.output[0], node.input[0])

    def op_Cast(self, index, node):
        code = self.attrs(node)["to"]
        to = "f32" if code == 11 else _DTYPES.get(code)   # a cast to double computes in f32
        if to is None:
            self.fail(node, f"casts to {self.onnx.TensorProto.DataType.Name(code)}, which has no DSL type")
        src = self.dtype(node.input[0])
        if to == src and code != 9:
            return self.alias(node, node.output[0], node.input[0])
        if code == 9:                         # bool: 1 where non-zero
            return self._unary_fn(node, "1 - equal(X, 0)", "i8")
        if to in ("i8", "i32") and src in ("f32", "f16", "bf16"):   # ONNX truncates toward zero
            return self._unary_fn(node, "select(less(X, 0), -floor(-X), floor(X))", to)
        self._unary_fn(node, "X", to)

    def op_CastLike(self, index, node):
        node = self.onnx.helper.make_node("Cast", [node.input[0]], [node.output[0]], name=node.name,
                                          to=self.onnx.helper.np_dtype_to_tensor_dtype(
                                              np.dtype(_NP_DTYPE[self.dtype(node.input[1])])))
        self.op_Cast(0, node)
