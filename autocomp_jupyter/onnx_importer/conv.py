"""ONNX's convolutions and pooling of any rank: Conv (grouped, dilated, strided, asymmetric
pads; the library's conv2d/depthwise_conv2d where they fit), ConvTranspose (the input spread by
the strides, then a convolution with the flipped kernel), MaxPool, AveragePool (ceil_mode,
count_include_pad), GlobalAveragePool, GlobalMaxPool.
"""
from __future__ import annotations

import math

import numpy as np

from .common import _View


class ConvOps:
    """Import handlers for convolutions and pooling (mixed into the importer)."""

    def _conv_generic(self, node, out: str, x: str, w: str, strides, dil, begin, end, groups: int,
                      note: str = "Conv") -> str:
        """An N-D (grouped, dilated, strided, asymmetrically padded) convolution as one
        comprehension: out[n, f, o..] += X[n, c, s*o + d*k - p ..] * W[f, c, k..]; groups
        compute [N, G, F/G, o..], viewed as [N, F, o..]."""
        xs, ws = self.shape(x), self.shape(w)
        nd = len(xs) - 2
        n, c = xs[:2]
        f, cg = ws[:2]
        ks = ws[2:]
        if len(ws) != len(xs) or c != cg * groups or f % groups:
            self.fail(node, f"weight {list(ws)} does not fit input {list(xs)} with group={groups}")
        outs = [(xs[2 + d] + begin[d] + end[d] - dil[d] * (ks[d] - 1) - 1) // strides[d] + 1 for d in range(nd)]
        if min(outs, default=1) <= 0:
            self.fail(node, f"the output would be empty ({outs})")
        o = [f"i{d}" for d in range(nd)]
        k = [f"k{d}" for d in range(nd)]

        def at(d):
            terms = [f"{strides[d]}*{o[d]}" if strides[d] != 1 else o[d], f"{dil[d]}*{k[d]}" if dil[d] != 1 else k[d]]
            p = begin[d]
            return " + ".join(terms) + (f" - {p}" if p > 0 else (f" + {-p}" if p < 0 else ""))
        xn, wn = self.operand(x), self.operand(w)
        dtype = self.dtype(x)
        if groups == 1:
            return self.comp(out, [n, f] + outs, dtype, ["b0", "j0"] + o, "+=",
                             f"{xn}[b0, a0, {', '.join(at(d) for d in range(nd))}] * {wn}[j0, a0, {', '.join(k)}]",
                             note)
        fg = f // groups
        self.comp(out + "_groups", [n, groups, fg] + outs, dtype, ["b0", "g", "j0"] + o, "+=",
                  f"{xn}[b0, {cg}*g + a0, {', '.join(at(d) for d in range(nd))}] * "
                  f"{wn}[{fg}*g + j0, a0, {', '.join(k)}]", note + ", grouped")
        self.view(node, out, out + "_groups", [n, f] + outs)
        return out

    def _conv_pads(self, node, a, xs, ks, strides, dil):
        nd = len(xs) - 2
        pads = list(a.get("pads", [0] * 2 * nd))
        auto = a.get("auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0] * 2 * nd
            for d in range(nd):
                out = -(-xs[2 + d] // strides[d])
                total = max(0, (out - 1) * strides[d] + dil[d] * (ks[d] - 1) + 1 - xs[2 + d])
                small, big = total // 2, total - total // 2
                pads[d], pads[d + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
        elif auto == "VALID":
            pads = [0] * 2 * nd
        elif auto != "NOTSET":
            self.fail(node, f"auto_pad={auto!r} is not supported")
        if len(pads) != 2 * nd:
            self.fail(node, f"{len(pads)} pads for {nd} spatial dimensions")
        return pads[:nd], pads[nd:]

    def _channel_bias(self, node, out: str, y: str, b: str) -> None:
        shape = self.shape(y)
        if len(shape) == 4:
            self.lib(node, out, "bias_add", [y, b])
            return
        aligned = b + f"__rank{len(shape)}"
        if aligned not in self.consts and aligned not in self.values:
            self.view(node, aligned, b, (shape[1],) + (1,) * (len(shape) - 2))
        self.ew(node, out, [y, aligned], "{0} + {1}", note="bias")

    def op_Conv(self, index, node):
        a = self.attrs(node)
        x_shape = self.shape(node.input[0])
        w_shape = self.shape(node.input[1])
        nd = len(x_shape) - 2
        if nd < 1 or len(w_shape) != len(x_shape):
            self.fail(node, f"input {list(x_shape)} and weight {list(w_shape)} are not an N-D convolution")
        groups = a.get("group", 1)
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        begin, end = self._conv_pads(node, a, x_shape, w_shape[2:], strides, dil)
        out = node.output[0]
        has_bias = len(node.input) > 2 and node.input[2]
        conv_out = out + "_conv" if has_bias else out
        c, f = x_shape[1], w_shape[0]
        square = nd == 2 and strides[0] == strides[1] and dil[0] == dil[1] and len(set(begin + end)) == 1
        if square and groups == c == f and w_shape[1] == 1 and dil[0] == 1:
            self.lib(node, conv_out, "depthwise_conv2d", [node.input[0], node.input[1]],
                     stride=strides[0], padding=begin[0])
        elif square:
            kw = {"stride": strides[0], "padding": begin[0]}
            if dil[0] != 1:
                kw["dilation"] = dil[0]
            if groups != 1:
                kw["groups"] = groups
            self.lib(node, conv_out, "conv2d", [node.input[0], node.input[1]], **kw)
        else:
            self._conv_generic(node, conv_out, node.input[0], node.input[1], strides, dil, begin, end, groups,
                               f"Conv {nd}-D")
        if has_bias:
            self._channel_bias(node, out, conv_out, node.input[2])

    def op_ConvTranspose(self, index, node):
        """The transposed convolution as a convolution: the input spread by the strides
        (zeros between its points: T[.., i, t, ..] = X[.., i + S*t, ..], t > 0 reading outside),
        then an ordinary convolution with the flipped, transposed kernel."""
        a = self.attrs(node)
        x, xs = node.input[0], self.shape(node.input[0])
        w = self.const(node, 1, "weight")
        nd = len(xs) - 2
        groups = a.get("group", 1)
        c, fg = w.shape[:2]
        ks = list(w.shape[2:])
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        out_pad = list(a.get("output_padding", [0] * nd))
        if c != xs[1] or c % groups:
            self.fail(node, f"weight {list(w.shape)} does not fit input {list(xs)} with group={groups}")
        if "output_shape" in a:
            want = list(a["output_shape"])[-nd:]
            begin, end = [], []
            for d in range(nd):
                total = strides[d] * (xs[2 + d] - 1) + out_pad[d] + (ks[d] - 1) * dil[d] + 1 - want[d]
                upper = a.get("auto_pad", "NOTSET") == "SAME_UPPER"
                begin.append(total // 2 if upper else total - total // 2)
                end.append(total - begin[-1])
        elif a.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
            begin, end = [], []
            for d in range(nd):
                total = strides[d] * (xs[2 + d] - 1) + out_pad[d] + (ks[d] - 1) * dil[d] + 1 - xs[2 + d] * strides[d]
                total = max(total, 0)
                first = total // 2 if a["auto_pad"] == "SAME_UPPER" else total - total // 2
                begin.append(first)
                end.append(total - first)
        else:
            pads = list(a.get("pads", [0] * 2 * nd))
            begin, end = pads[:nd], pads[nd:]
        outs = [strides[d] * (xs[2 + d] - 1) + out_pad[d] + (ks[d] - 1) * dil[d] + 1 - begin[d] - end[d]
                for d in range(nd)]
        if min(outs) <= 0:
            self.fail(node, f"the output would be empty ({outs})")
        # spread the input by the strides
        src = x
        if any(s > 1 for s in strides):
            lhs, big, idx = ["b0", "a0"], list(xs[:2]), ["b0", "a0"]
            for d in range(nd):
                lhs.append(f"i{d}")
                big.append(xs[2 + d])
                if strides[d] > 1:
                    lhs.append(f"j{d}")
                    big.append(strides[d])
                    idx.append(f"i{d} + {xs[2 + d]}*j{d}")
                else:
                    idx.append(f"i{d}")
            self.comp(node.output[0] + "_spread", big, self.dtype(x), lhs, "=",
                      f"{self.operand(x)}[{', '.join(idx)}]", "ConvTranspose: the input spread by the strides")
            src = node.output[0] + "_spread"
            self.view(node, src + "_v", src, list(xs[:2]) + [xs[2 + d] * strides[d] for d in range(nd)])
            src = src + "_v"
        # W[c, f/g, k..] -> V[g*fg + f, c', K-1-k..] (flipped; per group, channels swapped)
        cg = c // groups
        flipped = np.flip(w, axis=tuple(range(2, 2 + nd)))
        v = np.concatenate([np.swapaxes(flipped[g * cg:(g + 1) * cg], 0, 1) for g in range(groups)], axis=0)
        self.consts[node.output[0] + "_kernel"] = np.ascontiguousarray(v)
        spread = [xs[2 + d] * strides[d] for d in range(nd)]
        cbegin = [dil[d] * (ks[d] - 1) - begin[d] for d in range(nd)]
        cend = [outs[d] - spread[d] - cbegin[d] + dil[d] * (ks[d] - 1) for d in range(nd)]
        out = node.output[0]
        has_bias = len(node.input) > 2 and node.input[2]
        conv_out = out + "_conv" if has_bias else out
        self._conv_generic(node, conv_out, src, out + "_kernel", [1] * nd, dil, cbegin, cend, groups,
                           "ConvTranspose")
        if has_bias:
            self._channel_bias(node, out, conv_out, node.input[2])

    def _pool(self, node, kind: str):
        a = self.attrs(node)
        x = node.input[0]
        xs = self.shape(x)
        nd = len(xs) - 2
        if nd < 1:
            self.fail(node, f"pooling needs an [N, C, ...] input, got {list(xs)}")
        kernel = list(a["kernel_shape"])
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        if len(kernel) != nd:
            self.fail(node, f"kernel_shape {kernel} does not fit {nd} spatial dimensions")
        begin, end = self._conv_pads(node, a, xs, kernel, strides, dil)
        ceil = a.get("ceil_mode", 0)
        outs = []
        for d in range(nd):
            span = xs[2 + d] + begin[d] + end[d] - dil[d] * (kernel[d] - 1) - 1
            o = (-(-span // strides[d]) if ceil else span // strides[d]) + 1
            if ceil and (o - 1) * strides[d] >= xs[2 + d] + begin[d]:
                o -= 1   # a window must start inside the input or its leading padding
            outs.append(o)
        if min(outs) <= 0:
            self.fail(node, f"the pooled output would be empty ({outs})")
        out = node.output[0]
        include = a.get("count_include_pad", 0)
        square = nd == 2 and len(set(kernel)) == 1 and len(set(strides)) == 1 and len(set(begin + end)) == 1 \
            and set(dil) == {1} and not ceil
        if square and (kind == "max" or not begin[0] or include):
            op = "maxpool2d" if kind == "max" else "avgpool2d"
            return self.lib(node, out, op, [x], kernel=kernel[0], stride=strides[0], padding=begin[0])
        o = [f"i{d}" for d in range(nd)]
        k = [f"k{d}" for d in range(nd)]
        idx = []
        for d in range(nd):
            t = [f"{strides[d]}*{o[d]}" if strides[d] != 1 else o[d], f"{dil[d]}*{k[d]}" if dil[d] != 1 else k[d]]
            idx.append(" + ".join(t) + (f" - {begin[d]}" if begin[d] else ""))
        where = " where " + ", ".join(f"{k[d]} < {kernel[d]}" for d in range(nd))
        read = f"{self.operand(x)}[b0, a0, {', '.join(idx)}]"
        dtype = self.dtype(x)
        reach = [(outs[d] - 1) * strides[d] + dil[d] * (kernel[d] - 1) + 1 for d in range(nd)]
        outside = any(begin[d] > 0 or reach[d] > xs[2 + d] + begin[d] for d in range(nd))
        if kind == "max":
            extra = ""
            if outside:   # a read outside the input is -inf, not 0: add a penalty per padded position
                for d in range(nd):
                    pen = np.zeros(reach[d], np.float32)
                    pos = np.arange(reach[d]) - begin[d]
                    pen[(pos < 0) | (pos >= xs[2 + d])] = -np.inf
                    if (pen != 0).any():
                        self.consts[f"{out}_pad{d}"] = pen
                        t = [f"{strides[d]}*{o[d]}" if strides[d] != 1 else o[d],
                             f"{dil[d]}*{k[d]}" if dil[d] != 1 else k[d]]
                        extra += f" + {self.operand(f'{out}_pad{d}')}[{' + '.join(t)}]"
            self.comp(out, list(xs[:2]) + outs, dtype, ["b0", "a0"] + o, "max=", read + extra + where,
                      f"MaxPool {nd}-D")
            return
        # average: the window sum over the number of cells counted (inside the input, or
        # inside input and padding with count_include_pad), per output position
        counts = []
        for d in range(nd):
            start = np.arange(outs[d])[:, None] * strides[d] + np.arange(kernel[d])[None, :] * dil[d] - begin[d]
            lo, hi = (-begin[d], xs[2 + d] + end[d]) if include else (0, xs[2 + d])
            counts.append(((start >= lo) & (start < hi)).sum(axis=1))
        total = counts[0]
        for cnt in counts[1:]:
            total = np.multiply.outer(total, cnt)
        s = self.comp(out + "_sum", list(xs[:2]) + outs, "f32", ["b0", "a0"] + o, "+=", read + where)
        if len(set(total.reshape(-1))) == 1:
            self.comp(out, list(xs[:2]) + outs, dtype, ["b0", "a0"] + o, "=",
                      f"{s}[b0, a0, {', '.join(o)}] / {int(total.reshape(-1)[0])}", f"AveragePool {nd}-D")
            return
        self.consts[out + "_count"] = total.astype(np.float32)
        cnt = self.operand(out + "_count")
        self.comp(out, list(xs[:2]) + outs, dtype, ["b0", "a0"] + o, "=",
                  f"{s}[b0, a0, {', '.join(o)}] / {cnt}[{', '.join(o)}]", f"AveragePool {nd}-D")

    def op_MaxPool(self, index, node):
        if len(node.output) > 1 and node.output[1] and self.consumers.get(node.output[1]):
            self.fail(node, "its Indices output is used; not supported")
        self._pool(node, "max")

    def op_AveragePool(self, index, node):
        self._pool(node, "avg")

    def op_GlobalAveragePool(self, index, node):
        shape = self.shape(node.input[0])
        if len(shape) == 4:
            self.lib(node, node.output[0] + "_pool", "global_avgpool", [node.input[0]])
            dsl, flat_shape, dtype = self.values[node.output[0] + "_pool"]
            # [N, C] computed; the ONNX result is [N, C, 1, 1]: a view, written only if read as 4-D
            self.base_shapes[dsl] = flat_shape
            self.values[node.output[0]] = _View(dsl, tuple(shape[:2]) + (1, 1))
            self.dtype_of_view[node.output[0]] = dtype
            return
        self._global(node, "mean")

    def op_GlobalMaxPool(self, index, node):
        self._global(node, "max")

    def _global(self, node, kind):
        shape = self.shape(node.input[0])
        if len(shape) < 3:
            self.fail(node, f"global pooling needs an [N, C, ...] input, got {list(shape)}")
        names = ["i0", "i1"] + [f"k{d}" for d in range(2, len(shape))]
        x = f"{self.operand(node.input[0])}[{', '.join(names)}]"
        count = math.prod(shape[2:])
        lhs = ["i0", "i1"] + [f"u{d}" for d in range(len(shape) - 2)]
        self.comp(node.output[0], tuple(shape[:2]) + (1,) * (len(shape) - 2), self.dtype(node.input[0]), lhs,
                  "max=" if kind == "max" else "+=", x if kind == "max" else f"{x} / {count}")
