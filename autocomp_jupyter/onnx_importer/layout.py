"""ONNX's layout ops: Shape and Size (constants), Reshape, Flatten, Squeeze, Unsqueeze (views,
written only where an op reads them), Transpose, Concat, Expand, Slice, Split, Pad (constant,
reflect, edge, wrap), Tile, Trilu, and Range (folded; a runtime Range refused).
"""
from __future__ import annotations

import math

import numpy as np

from .common import _fmt_num


class LayoutOps:
    """Import handlers for the layout ops (mixed into the importer)."""

    def op_Shape(self, index, node):
        a = self.attrs(node)
        shape = self.shape(node.input[0])
        start, end = a.get("start", 0), a.get("end", None)
        self.consts[node.output[0]] = np.array(shape[start:end], dtype=np.int64)

    def op_Range(self, index, node):   # folded when its inputs are constants (the usual case)
        self.fail(node, "its start, limit and delta must be constants: the length of its output depends on their "
                        "values", "give the model static shapes (the exporter then folds the Range)")

    def op_Size(self, index, node):
        self.consts[node.output[0]] = np.array(math.prod(self.shape(node.input[0])), dtype=np.int64)

    def op_Identity(self, index, node):
        self.alias(node, node.output[0], node.input[0])

    def op_Reshape(self, index, node):
        if self.version(node) < 5:   # opset 1: the shape is an attribute
            target = [int(d) for d in self.attrs(node).get("shape", [])]
        else:
            target = [int(d) for d in self.const(node, 1, "target shape")]
        src = self.shape(node.input[0])
        allowzero = self.attrs(node).get("allowzero", 0)
        shape = [src[k] if d == 0 and not allowzero else d for k, d in enumerate(target)]
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = math.prod(src) // known if known else 0
        self.view(node, node.output[0], node.input[0], shape)

    def op_Flatten(self, index, node):
        axis = self.attrs(node).get("axis", 1)
        src = self.shape(node.input[0])
        axis = axis + len(src) if axis < 0 else axis
        self.view(node, node.output[0], node.input[0], (math.prod(src[:axis]), math.prod(src[axis:])))

    def _axes(self, node, k_input: int):
        a = self.attrs(node)
        if "axes" in a:
            return [int(x) for x in a["axes"]]
        if len(node.input) > k_input and node.input[k_input]:
            return [int(x) for x in self.const(node, k_input, "axes")]
        return None

    def op_Squeeze(self, index, node):
        src = self.shape(node.input[0])
        axes = self._axes(node, 1)
        axes = [a % len(src) for a in axes] if axes is not None else [d for d, e in enumerate(src) if e == 1]
        self.view(node, node.output[0], node.input[0], [e for d, e in enumerate(src) if d not in axes])

    def op_Unsqueeze(self, index, node):
        src = list(self.shape(node.input[0]))
        axes = self._axes(node, 1)
        rank = len(src) + len(axes)
        out = iter(src)
        axes = {a % rank for a in axes}
        self.view(node, node.output[0], node.input[0], [1 if d in axes else next(out) for d in range(rank)])

    def op_Expand(self, index, node):
        target = tuple(int(d) for d in self.const(node, 1, "shape"))
        shape = tuple(self.shape(node.input[0]))
        try:
            out = tuple(np.broadcast_shapes(shape, target))
        except ValueError:
            self.fail(node, f"{list(shape)} does not broadcast to {list(target)}")
        if out == shape:
            return self.alias(node, node.output[0], node.input[0])
        names = [f"i{d}" for d in range(len(out))]
        self.comp(node.output[0], out, self.dtype(node.input[0]), names, "=",
                  self.read(node.input[0], out, names), "Expand")

    def op_Transpose(self, index, node):
        perm = self.attrs(node).get("perm")
        rank = len(self.shape(node.input[0]))
        perm = list(perm) if perm is not None else list(reversed(range(rank)))
        self.lib(node, node.output[0], "transpose", [node.input[0]], perm=perm)

    def op_Concat(self, index, node):
        axis = self.attrs(node).get("axis", 1)   # required from opset 4; 1 before
        inputs = [i for i in node.input if i and math.prod(self.shape(i)) > 0]
        if len(inputs) == 1:
            return self.alias(node, node.output[0], inputs[0])
        self.lib(node, node.output[0], "concat", inputs, axis=axis)

    def _sliced(self, node, out: str, src: str, lo, step, out_shape, note: str) -> str:
        """`out` = `src` read at lo[d] + step[d] * i_d (a slice; negative steps read backwards)."""
        shape = self.shape(src)
        rank = len(shape)
        names = [f"i{d}" for d in range(rank)]
        idx = []
        for d in range(rank):
            if (step[d], lo[d]) == (1, 0):
                idx.append(names[d])
            elif step[d] < 0:
                idx.append(f"{lo[d]} - {-step[d]}*{names[d]}")
            else:
                idx.append(f"{step[d]}*{names[d]} + {lo[d]}")
        # a sliced axis indexed directly ranges over the slice, not the whole input axis
        bounds = [f"{names[d]} < {out_shape[d]}" for d in range(rank) if idx[d] == names[d] and out_shape[d] != shape[d]]
        where = f" where {', '.join(bounds)}" if bounds else ""
        return self.comp(out, out_shape, self.dtype(src), names, "=",
                         f"{self.operand(src)}[{', '.join(idx)}]{where}", note)

    def op_Slice(self, index, node):
        shape = self.shape(node.input[0])
        rank = len(shape)
        if self.version(node) < 10:   # opset 1: starts, ends, axes are attributes
            a = self.attrs(node)
            if "starts" not in a or "ends" not in a:
                self.fail(node, "opset-1 Slice needs its 'starts' and 'ends' attributes")
            starts, ends = [int(v) for v in a["starts"]], [int(v) for v in a["ends"]]
            axes = [int(v) for v in a.get("axes", range(len(starts)))]
            steps = [1] * len(starts)
        else:
            starts = [int(v) for v in self.const(node, 1, "starts").reshape(-1)]
            ends = [int(v) for v in self.const(node, 2, "ends").reshape(-1)]
            axes = [int(v) for v in self.const(node, 3, "axes").reshape(-1)] if len(node.input) > 3 and node.input[3] \
                else list(range(len(starts)))
            steps = [int(v) for v in self.const(node, 4, "steps").reshape(-1)] if len(node.input) > 4 and node.input[4] \
                else [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            self.fail(node, f"starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, {len(axes)}, "
                            f"{len(steps)})")
        lo, step, out_shape = [0] * rank, [1] * rank, list(shape)
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            if not -rank <= ax < rank:
                self.fail(node, f"axis {ax} is out of range for rank {rank}")
            ax %= rank
            if sp == 0:
                self.fail(node, "a slice step of 0")
            size = shape[ax]
            st = st + size if st < 0 else st
            en = en + size if en < 0 else en
            if sp > 0:
                st, en = max(0, min(size, st)), max(0, min(size, en))
                count = max(0, -(-(en - st) // sp))
            else:
                st, en = max(0, min(size - 1, st)), max(-1, min(size - 1, en))
                count = max(0, -(-(st - en) // -sp))
            lo[ax], step[ax], out_shape[ax] = st, sp, count
        if 0 in out_shape:
            self.fail(node, f"the slice is empty (result shape {out_shape})")
        if tuple(out_shape) == tuple(shape) and all(s == 1 for s in step):
            return self.alias(node, node.output[0], node.input[0])
        self._sliced(node, node.output[0], node.input[0], lo, step, out_shape, "Slice")

    def op_Split(self, index, node):
        a = self.attrs(node)
        shape = self.shape(node.input[0])
        axis = a.get("axis", 0) % len(shape)
        outs = list(node.output)
        if self.version(node) < 13 and "split" in a:
            sizes = [int(v) for v in a["split"]]
        elif self.version(node) >= 13 and len(node.input) > 1 and node.input[1]:
            sizes = [int(v) for v in self.const(node, 1, "split").reshape(-1)]
        else:
            parts = a.get("num_outputs", len(outs))
            each = -(-shape[axis] // parts)
            sizes = [min(each, shape[axis] - k * each) for k in range(parts)]
        if sum(sizes) != shape[axis] or len(sizes) != len(outs) or min(sizes) < 0:
            self.fail(node, f"split sizes {sizes} do not cut axis {axis} ({shape[axis]}) into {len(outs)} parts")
        offset = 0
        for name, size in zip(outs, sizes):
            out_shape = [size if d == axis else e for d, e in enumerate(shape)]
            if name and size == 0:   # an empty part (a function body's "nothing left over"): a constant
                self.consts[name] = np.zeros(out_shape, np.float32)
            elif name:
                lo = [offset if d == axis else 0 for d in range(len(shape))]
                self._sliced(node, name, node.input[0], lo, [1] * len(shape), out_shape, "Split")
            offset += size

    def op_Pad(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        mode = a.get("mode", "constant")
        if self.version(node) < 11:
            pads = [int(v) for v in a.get("pads", a.get("paddings", []))]
            value = float(a.get("value", 0.0))
        else:
            pads = [int(v) for v in self.const(node, 1, "pads").reshape(-1)]
            value = float(self.const(node, 2, "constant value").reshape(-1)[0]) \
                if len(node.input) > 2 and node.input[2] else 0.0
            if len(node.input) > 3 and node.input[3]:
                axes = [int(v) % rank for v in self.const(node, 3, "axes").reshape(-1)]
                full = [0] * (2 * rank)
                for k, ax in enumerate(axes):
                    full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
                pads = full
        if len(pads) != 2 * rank:
            self.fail(node, f"{len(pads)} pads for a rank-{rank} input (expected {2 * rank})")
        begin, end = pads[:rank], pads[rank:]
        out_shape = [e + b + f for e, b, f in zip(shape, begin, end)]
        if min(out_shape) <= 0:
            self.fail(node, f"the padded shape {out_shape} is empty")
        if not any(pads):
            return self.alias(node, node.output[0], x)
        out = node.output[0]
        names = [f"i{d}" for d in range(rank)]
        if mode == "constant" and not math.isfinite(value):   # -inf (an attention bias): select by position
            return self._pad_select(node, out, x, begin, out_shape, value)
        if mode == "constant":
            src = x
            if value != 0.0:    # reads outside give 0: pad (x - v), then add v back
                src = self._unary_fn_named(node, out + "_shifted", x, f"X - {_fmt_num(value)}")
            idx = [f"{n} - {b}" if b > 0 else (f"{n} + {-b}" if b < 0 else n) for n, b in zip(names, begin)]
            bounds = [f"{names[d]} < {out_shape[d]}" for d in range(rank) if begin[d] == 0 and out_shape[d] != shape[d]]
            expr = f"{self.operand(src)}[{', '.join(idx)}]" + (f" + {_fmt_num(value)}" if value != 0.0 else "")
            self.comp(out, out_shape, self.dtype(x), names, "=",
                      expr + (f" where {', '.join(bounds)}" if bounds else ""), "Pad")
            return
        if mode not in ("reflect", "edge", "wrap"):
            self.fail(node, f"pad mode '{mode}' is not supported", "supported: constant, reflect, edge, wrap")
        if min(pads) < 0:
            self.fail(node, f"negative pads with mode '{mode}'")
        cur = x
        for d in range(rank):
            b, f = begin[d], end[d]
            if not b and not f:
                continue
            n = self.shape(cur)[d]
            if mode == "reflect" and max(b, f) >= n or mode == "wrap" and max(b, f) > n:
                self.fail(node, f"{mode} padding of {max(b, f)} on an axis of {n}")
            pieces = []
            for side, count in (("left", b), ("right", f)):
                if not count:
                    pieces.append(None)
                    continue
                src_shape = list(self.shape(cur))
                piece_shape = [count if k == d else e for k, e in enumerate(src_shape)]
                if mode == "edge":
                    at = "0" if side == "left" else str(n - 1)
                elif mode == "reflect":
                    at = f"{count} - {names[d]}" if side == "left" else f"{n - 2} - {names[d]}"
                else:   # wrap
                    at = f"{names[d]} + {n - count}" if side == "left" else names[d]
                idx = [at if k == d else names[k] for k in range(rank)]
                bound = f" where {names[d]} < {count}" if at == names[d] and count != n else ""
                name = f"{out}_{side}{d}"
                self.comp(name, piece_shape, self.dtype(x), names, "=",
                          f"{self.operand(cur)}[{', '.join(idx)}]{bound}", f"Pad {mode}")
                pieces.append(name)
            parts = [p for p in (pieces[0], cur, pieces[1]) if p is not None]
            nxt = out if all(not begin[k] and not end[k] for k in range(d + 1, rank)) else f"{out}_pad{d}"
            self.lib(node, nxt, "concat", parts, axis=d)
            cur = nxt

    def _pad_select(self, node, out: str, x: str, begin, out_shape, value: float) -> None:
        """Constant padding with a value no literal holds (inf, NaN): each padded axis has a
        0/1 table of the positions inside the input, and the fill is a param."""
        shape = self.shape(x)
        names = [f"i{d}" for d in range(len(shape))]
        inside = []
        for d, (b, n) in enumerate(zip(begin, out_shape)):
            if (b, n) == (0, shape[d]):
                continue
            pos = np.arange(n) - b
            self.consts[f"{out}_inside{d}"] = ((pos >= 0) & (pos < shape[d])).astype(np.int8)
            inside.append(f"{self.operand(f'{out}_inside{d}')}[{names[d]}]")
        self.consts[out + "_fill"] = np.array([value], np.float32)
        idx = [f"{n} - {b}" if b > 0 else (f"{n} + {-b}" if b < 0 else n) for n, b in zip(names, begin)]
        bounds = [f"{names[d]} < {out_shape[d]}" for d in range(len(shape)) if begin[d] == 0 and out_shape[d] != shape[d]]
        self.comp(out, out_shape, self.dtype(x), names, "=",
                  f"select({' * '.join(inside) or '1'}, {self.operand(x)}[{', '.join(idx)}], "
                  f"{self.operand(out + '_fill')}[0])" + (f" where {', '.join(bounds)}" if bounds else ""),
                  "Pad with a non-finite value")

    def op_Tile(self, index, node):
        repeats = [int(r) for r in self.const(node, 1, "repeats").reshape(-1)]
        shape = self.shape(node.input[0])
        if len(repeats) != len(shape) or min(repeats) < 1:
            self.fail(node, f"repeats {repeats} do not fit a rank-{len(shape)} input")
        if all(r == 1 for r in repeats):
            return self.alias(node, node.output[0], node.input[0])
        # T[j0, i0, j1, i1, ...] = X[i0, i1, ...] (j_d the copy), viewed as [r0*n0, r1*n1, ...]
        lhs, big, src = [], [], []
        for d, (r, e) in enumerate(zip(repeats, shape)):
            if r > 1:
                lhs.append(f"j{d}")
                big.append(r)
            lhs.append(f"i{d}")
            big.append(e)
            src.append(f"i{d}")
        self.comp(node.output[0] + "_tiled", big, self.dtype(node.input[0]), lhs, "=",
                  f"{self.operand(node.input[0])}[{', '.join(src)}]", "Tile")
        self.view(node, node.output[0], node.output[0] + "_tiled", [r * e for r, e in zip(repeats, shape)])

    def op_Trilu(self, index, node):
        """The upper (or lower) triangle from diagonal k: a constant 0/1 mask when k is a
        constant, else the comparison j - i >= k (<= k) of two iotas and the runtime k."""
        x = node.input[0]
        shape = self.shape(x)
        if len(shape) < 2:
            self.fail(node, f"Trilu needs a matrix (rank 2 or more), got {list(shape)}")
        upper = self.flag(node, "upper", 1)
        rows, cols = shape[-2:]
        has_k = len(node.input) > 1 and node.input[1]
        if not has_k or node.input[1] in self.consts:
            k = int(self.const(node, 1, "k").reshape(-1)[0]) if has_k else 0
            i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
            mask = (j - i >= k) if upper else (j - i <= k)
            self.consts[node.output[0] + "_mask"] = mask.astype(np.float32)
            return self.ew(node, node.output[0], [node.output[0] + "_mask", x], "select({0}, {1}, 0)",
                           dtype=self.dtype(x), note="Trilu")
        kname = node.input[1]
        if math.prod(self.shape(kname)) != 1 or self.dtype(kname) not in ("i32", "i8"):
            self.fail(node, f"its k '{kname}' must be one integer")
        self.consts[node.output[0] + "_rows"] = np.arange(rows, dtype=np.int32)
        self.consts[node.output[0] + "_cols"] = np.arange(cols, dtype=np.int32)
        r, c = self.operand(node.output[0] + "_rows"), self.operand(node.output[0] + "_cols")
        names = [f"i{d}" for d in range(len(shape))]
        ki = f"{self.operand(kname)}[{', '.join(['0'] * max(1, len(self.shape(kname))))}]"
        a, b = names[-2], names[-1]
        keep = f"less_equal({ki} + {r}[{a}], {c}[{b}])" if upper else f"less_equal({c}[{b}], {ki} + {r}[{a}])"
        self.comp(node.output[0], shape, self.dtype(x), names, "=",
                  f"select({keep}, {self.operand(x)}[{', '.join(names)}], 0)", "Trilu, runtime k")
