"""ONNX's matrix products: Gemm (a constant transposed or scaled weight folded into `linear`),
MatMul (numpy's vector and batch-broadcast rules), Einsum (without an ellipsis).
"""
from __future__ import annotations

import math

import numpy as np


class LinearOps:
    """Import handlers for Gemm, MatMul and Einsum (mixed into the importer)."""

    def op_Gemm(self, index, node):
        a = self.attrs(node)
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        trans_a, trans_b = a.get("transA", 0), a.get("transB", 0)
        x = node.input[0]
        if trans_a:
            if self.is_const(x):
                self.consts[x + "__T"] = self.consts[x].T
                x = x + "__T"
            else:
                self.lib(node, node.output[0] + "_At", "transpose", [x], perm=[1, 0])
                x = node.output[0] + "_At"
        b = node.input[1]
        scale_after = 1.0
        if self.is_const(b):
            value = self.consts[b].T if trans_b else self.consts[b]
            if alpha != 1.0:
                value = value * alpha
            if trans_b or alpha != 1.0:
                name = b + ("_T" if trans_b else "") + ("_scaled" if alpha != 1.0 else "")
                self.consts[name] = value.astype(self.consts[b].dtype)
                b = name
        else:
            if trans_b:
                self.lib(node, node.output[0] + "_Bt", "transpose", [b], perm=[1, 0])
                b = node.output[0] + "_Bt"
            scale_after = alpha
        m, k = self.shape(x)
        n = self.shape(b)[1]
        c = node.input[2] if len(node.input) > 2 and node.input[2] else None
        out = node.output[0]
        bias = None
        if c is not None and self.is_const(c) and math.prod(self.consts[c].shape) in (n, 1) \
                and (self.consts[c].ndim < 2 or self.consts[c].shape[0] == 1) and scale_after == 1.0:
            value = np.broadcast_to(self.consts[c].reshape(-1), (n,)) * beta
            self.consts[c + "_bias"] = value.astype(np.float32)
            bias = c + "_bias"
        if bias is not None:
            self.lib(node, out, "linear", [x, b, bias])
            return
        mm = out if c is None and scale_after == 1.0 else out + "_mm"
        self.lib(node, mm, "matmul", [x, b])
        cur = mm
        if scale_after != 1.0:
            nxt = out if c is None else out + "_scaled"
            self._scalar(node, nxt, cur, "*", scale_after)
            cur = nxt
        if c is not None:
            if beta != 1.0:
                if self.is_const(c):
                    self.consts[c + "_beta"] = (self.consts[c] * beta).astype(np.float32)
                    c = c + "_beta"
                else:
                    self._scalar(node, out + "_C", c, "*", beta)
                    c = out + "_C"
            self.lib(node, out, "add", [cur, c])

    def op_MatMul(self, index, node):
        a_name, b_name = node.input[0], node.input[1]
        sa, sb = self.shape(a_name), self.shape(b_name)
        if len(sa) == 1 or len(sb) == 1:
            # numpy's vector rules: A[K] is [1, K], B[K] is [K, 1], and that axis is dropped after
            out = node.output[0]
            if len(sa) == 1:
                self.view(node, a_name + "__row", a_name, (1,) + tuple(sa))
                a_name = a_name + "__row"
            if len(sb) == 1:
                self.view(node, b_name + "__col", b_name, tuple(sb) + (1,))
                b_name = b_name + "__col"
            inner = self.onnx.helper.make_node("MatMul", [a_name, b_name], [out + "__2d"], name=node.name)
            self.op_MatMul(index, inner)
            full = list(self.shape(out + "__2d"))
            drop = ([len(full) - 1] if len(sb) == 1 else []) + ([len(full) - 2] if len(sa) == 1 else [])
            return self.view(node, out, out + "__2d", [e for d, e in enumerate(full) if d not in drop])
        if len(sa) == 2 and len(sb) == 2:
            return self.lib(node, node.output[0], "matmul", [a_name, b_name])
        if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0]:
            return self.lib(node, node.output[0], "batch_matmul", [a_name, b_name])
        m, k = sa[-2:]
        k2, n = sb[-2:]
        if k != k2:
            self.fail(node, f"inner dimensions differ: {list(sa)} x {list(sb)}")
        batch = np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])) if True else ()
        rank = len(batch)
        names = [f"b{d}" for d in range(rank)]

        def idx(shape_batch):
            off = rank - len(shape_batch)
            return [("0" if (e == 1 and batch[off + d] != 1) else names[off + d]) for d, e in enumerate(shape_batch)]
        an, bn = self.operand(a_name), self.operand(b_name)
        ia = ", ".join(idx(sa[:-2]) + ["i", "k"])
        ib = ", ".join(idx(sb[:-2]) + ["k", "j"])
        self.comp(node.output[0], tuple(batch) + (m, n), self.dtype(a_name), names + ["i", "j"], "+=",
                  f"{an}[{ia}] * {bn}[{ib}]", "MatMul, batched with broadcasting")

    def op_Einsum(self, index, node):
        eq = self.attrs(node)["equation"].replace(" ", "")
        if "..." in eq:
            self.fail(node, f"einsum '{eq}' with an ellipsis is not supported")
        lhs_text, _, rhs_text = eq.partition("->")
        terms = lhs_text.split(",")
        inputs = [i for i in node.input]
        if len(terms) != len(inputs):
            self.fail(node, f"einsum '{eq}' names {len(terms)} operands, the node has {len(inputs)}")
        extents = {}
        for t, name in zip(terms, inputs):
            shape = self.shape(name)
            if len(t) != len(shape):
                self.fail(node, f"einsum term '{t}' does not fit '{name}' {list(shape)}")
            for ch, e in zip(t, shape):
                if extents.setdefault(ch, e) != e:
                    self.fail(node, f"einsum index '{ch}' is {extents[ch]} and {e}")
        if "->" not in eq:
            rhs_text = "".join(sorted(ch for ch in extents if lhs_text.count(ch) == 1))
        letters = {ch: f"a{k}" for k, ch in enumerate(extents)}
        reads = [f"{self.operand(name)}[{', '.join(letters[ch] for ch in t)}]" for t, name in zip(terms, inputs)]
        reduce = "+=" if set(extents) - set(rhs_text) else "="
        self.comp(node.output[0], [extents[ch] for ch in rhs_text], self.dtype(inputs[0]),
                  [letters[ch] for ch in rhs_text], reduce, " * ".join(reads), f"Einsum {eq}")
