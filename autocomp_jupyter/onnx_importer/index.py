"""ONNX ops that read, rank, scan or write by index values: Gather, GatherElements, TopK,
CumSum, ScatterElements (and opset 9's Scatter), ScatterND.

Each is one handler of the importer (`_Importer` inherits `IndexOps`), self-contained, so a
handler can move to the DSL's indirect reads (`E[s, c] = W[ids[s], c]`) on its own. Until the
IR has them, an index held in a tensor is compared with a constant iota (0, 1, ... n-1, a
param) and selects by `select`: a one-hot sum over the indexed axis. `select`, not a product
with the mask, so an inf or NaN elsewhere in the axis stays out of the result. Negative indices
count from the end (`i + n * less(i, 0)`), as ONNX says. An index out of range reads nothing
(0); constant indices are checked at import.

- Gather: a constant scalar or an arithmetic run of indices is an affine read; anything else
  a one-hot contraction (a product with the mask: the form the fusion rules see as a matmul).
- GatherElements: out[I] = X[I with the axis at idx[I]].
- TopK: each element's rank along the axis (how many elements beat it: larger, or equal at a
  lower index, as ONNX orders ties), then the values and indices of ranks 0 .. K-1.
- CumSum: a sum over a triangle of the axis, written as the box with a constant 0/1 table
  (inclusive or exclusive, forward or reversed).
- ScatterElements / ScatterND: each output point counts the updates aimed at it and sums
  them; the result is the update (reduction none), the data plus the sum (add), the max or
  min of the data and the updates (max, min), or the data times the product of the updates
  (mul: one factor per update position, at most 64). ScatterElements' indices shorter than
  the data off the scatter axis reach only their own extent (a 0/1 table per such axis).
"""
from __future__ import annotations

import numpy as np


class IndexOps:
    """Import handlers for the ops that index by values (mixed into the importer)."""

    # ------------------------------------------------------------ helpers

    def _iota(self, name: str, n: int) -> str:
        """A param holding 0, 1, ... n-1 (int32): an index as a value."""
        if name not in self.consts:
            self.consts[name] = np.arange(n, dtype=np.int32)
        return self.operand(name)

    @staticmethod
    def _wrapped(ref: str, n: int) -> str:
        """An index read `ref` with negative values counted from the end of an axis of `n`."""
        return f"({ref} + {n} * less({ref}, 0))"

    def _const_axis(self, node, rank: int, k: int | None = None) -> int:
        """The node's axis (attribute, or constant input k), in [0, rank)."""
        axis = int(self.const(node, k, "axis").reshape(-1)[0]) if k is not None else int(self.attrs(node).get("axis", 0))
        if not -rank <= axis < rank:
            self.fail(node, f"axis {axis} is out of range for rank {rank}")
        return axis % rank

    def _check_const_indices(self, node, name: str, size: int, axis: int) -> None:
        if name in self.consts:
            idx = self.consts[name]
            if ((idx < -size) | (idx >= size)).any():
                self.fail(node, f"an index is out of range for axis {axis} of size {size}")

    def _index_input(self, node, k: int) -> str:
        name = node.input[k]
        if self.dtype(name) not in ("i32", "i8") or (name in self.consts and self.consts[name].dtype.kind == "f"):
            self.fail(node, f"its indices '{name}' must be an integer tensor")
        return name

    # ------------------------------------------------------------ gathering

    def op_Gather(self, index, node):
        shape = self.shape(node.input[0])
        axis = self._const_axis(node, len(shape))
        idx_name = self._index_input(node, 1)
        size = shape[axis]
        data = self.operand(node.input[0])
        self._check_const_indices(node, idx_name, size, axis)
        if idx_name in self.consts:
            indices = self.consts[idx_name].astype(np.int64) % size
            flat = indices.reshape(-1)
            step = int(flat[1] - flat[0]) if flat.size > 1 else 1
            if indices.ndim <= 1 and (flat.size == 1 or (step > 0 and (np.diff(flat) == step).all())):
                # a scalar, or an arithmetic run: an affine read
                start = int(flat[0])
                names = [f"i{d}" for d in range(len(shape))]
                at = str(start) if indices.ndim == 0 else (f"{step}*j0 + {start}" if (step, start) != (1, 0) else "j0")
                src = [at if d == axis else names[d] for d in range(len(shape))]
                lhs = [names[d] if d != axis else "j0" for d in range(len(shape)) if d != axis or indices.ndim == 1]
                out_shape = [e if d != axis else flat.size for d, e in enumerate(shape) if d != axis or indices.ndim == 1]
                bound = f" where j0 < {flat.size}" if at == "j0" and flat.size != size else ""
                self.comp(node.output[0], out_shape, self.dtype(node.input[0]), lhs, "=",
                          f"{data}[{', '.join(src)}]{bound}", "Gather")
                return
        # Runtime (or irregular) indices: a read through the index tensor (an embedding moves
        # the rows it looks up), its values wrapped from the end first (ONNX counts negative
        # ones from the end); an index still out of range stops the run with an error.
        ishape = tuple(self.shape(idx_name))
        pre = [f"i{d}" for d in range(axis)]
        post = [f"i{d}" for d in range(axis + 1, len(shape))]
        jn = [f"j{d}" for d in range(len(ishape))]
        ref = f"{self.operand(idx_name)}[{', '.join(jn) or '0'}]"
        wrapped = self.comp(node.output[0] + "_index", list(ishape) or [1], "i32", jn or ["j0"],
                            "=", self._wrapped(ref.replace("[0]", "[j0]") if not jn else ref, size),
                            "Gather's indices, counted from the end where negative")
        src = pre + [f"{wrapped}[{', '.join(jn) or '0'}]"] + post
        out_shape = list(shape[:axis]) + list(ishape) + list(shape[axis + 1:])
        self.comp(node.output[0], out_shape, self.dtype(node.input[0]), pre + jn + post, "=",
                  f"{data}[{', '.join(src)}]", "Gather, runtime indices (read through them)")

    def op_GatherElements(self, index, node):
        shape = self.shape(node.input[0])
        rank = len(shape)
        axis = self._const_axis(node, rank)
        idx_name = self._index_input(node, 1)
        ishape = tuple(self.shape(idx_name))
        if len(ishape) != rank or any(ishape[d] > shape[d] for d in range(rank) if d != axis):
            self.fail(node, f"indices {list(ishape)} do not fit data {list(shape)} on axis {axis} (same rank, no "
                            "larger dimension off the axis)")
        size = shape[axis]
        self._check_const_indices(node, idx_name, size, axis)
        names = [f"i{d}" for d in range(rank)]
        ref = f"{self.operand(idx_name)}[{', '.join(names)}]"
        src = ["k0" if d == axis else names[d] for d in range(rank)]
        iota = self._iota(node.output[0] + "_iota", size)
        # an axis shorter than the data's, read directly, ranges over the indices' extent
        bounds = [f"{names[d]} < {ishape[d]}" for d in range(rank) if d != axis and ishape[d] != shape[d]]
        self.comp(node.output[0], ishape, self.dtype(node.input[0]), names, "+=",
                  f"select(equal({self._wrapped(ref, size)}, {iota}[k0]), {self.operand(node.input[0])}"
                  f"[{', '.join(src)}], 0)" + (f" where {', '.join(bounds)}" if bounds else ""),
                  "GatherElements (one-hot)")

    # ------------------------------------------------------------ ranking and scanning

    def op_TopK(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        axis = self._const_axis(node, rank) if "axis" in a else rank - 1
        if self.version(node) < 10:
            k = int(a.get("k", 0))
        else:
            k = int(self.const(node, 1, "K").reshape(-1)[0])
        n = shape[axis]
        if not 1 <= k <= n:
            self.fail(node, f"K = {k} is outside 1 .. {n} (the axis' extent)")
        largest = self.flag(node, "largest", 1)
        self.flag(node, "sorted", 1)
        out = node.output[0] or node.output[1] + "_values"
        names = [f"i{d}" for d in range(rank)]
        at_j = [names[d] if d != axis else "j0" for d in range(rank)]
        at_k = [names[d] if d != axis else "k0" for d in range(rank)]
        xs = self.operand(x)
        xj, xk = f"{xs}[{', '.join(at_j)}]", f"{xs}[{', '.join(at_k)}]"
        iota = self._iota(out + "_iota", n)
        beats = f"less({xj}, {xk})" if largest else f"less({xk}, {xj})"
        # element j's rank: the elements beating it (ties: the lower index first)
        rank_of = self.comp(out + "_rank", shape, "i32", at_j, "+=",
                            f"{beats} + equal({xk}, {xj}) * less({iota}[k0], {iota}[j0])", "TopK: ranks")
        out_shape = [k if d == axis else e for d, e in enumerate(shape)]
        at_p = [names[d] if d != axis else "u0" for d in range(rank)]
        hit = f"equal({rank_of}[{', '.join(at_j)}], {self._iota(out + '_places', k)}[u0])"
        if node.output[0]:
            self.comp(node.output[0], out_shape, self.dtype(x), at_p, "+=", f"select({hit}, {xj}, 0)", "TopK values")
        if len(node.output) > 1 and node.output[1]:
            self.comp(node.output[1], out_shape, "i32", at_p, "+=", f"select({hit}, {iota}[j0], 0)", "TopK indices")

    def op_CumSum(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        axis = self._const_axis(node, rank, 1)
        n = shape[axis]
        i, k = np.arange(n)[:, None], np.arange(n)[None, :]
        reverse, exclusive = self.flag(node, "reverse", 0), self.flag(node, "exclusive", 0)
        keep = (k >= i if reverse else k <= i) & ~((k == i) if exclusive else np.zeros((n, n), bool))
        table = node.output[0] + "_triangle"
        self.consts[table] = keep.astype(np.int8)
        names = [f"i{d}" for d in range(rank)]
        src = ["k0" if d == axis else names[d] for d in range(rank)]
        self.comp(node.output[0], shape, self.dtype(x), names, "+=",
                  f"select({self.operand(table)}[{names[axis]}, k0], {self.operand(x)}[{', '.join(src)}], 0)",
                  f"CumSum{' reverse' if reverse else ''}{' exclusive' if exclusive else ''}")

    # ------------------------------------------------------------ scattering

    def _reduction(self, node) -> str:
        reduction = self.attrs(node).get("reduction", "none")
        if reduction not in ("none", "add", "mul", "max", "min"):
            self.fail(node, f"reduction '{reduction}' is not one of ONNX's", "none, add, mul, max, min")
        return reduction

    def _scatter(self, node, match, read, sources: list[str], extents: list[int], reduction: str,
                 where: str = "") -> None:
        """Write the scatter's result. `match(u)` is 1 where the update at position `u` (a list
        of index expressions over the updates' own axes) lands on the output point i0, i1 ..,
        `read(u)` that update; `sources` are the updates' own index names (reduced over, of
        `extents`); `where` gives the output's extents where the updates' are shorter."""
        out = node.output[0]
        data = node.input[0]
        shape = self.shape(data)
        dtype = self.dtype(data)
        names = [f"i{d}" for d in range(len(shape))]
        at = ", ".join(names)
        d = f"{self.operand(data)}[{at}]"
        if reduction == "mul":   # the product of the updates landing here: one factor per update position
            count = int(np.prod(extents)) if extents else 1
            if count > 64:
                self.fail(node, f"reduction 'mul' over {count} update positions (at most 64 are written out)")
            factors = []
            for position in np.ndindex(*extents) if extents else [()]:
                u = [str(v) for v in position]
                factors.append(f"select({match(u)}, {read(u)}, 1)")
            product = self.comp(out + "_product", shape, dtype, names, "=", " * ".join(factors) + where,
                                f"{node.op_type}: the product of the updates")
            self.comp(out, shape, dtype, names, "=", f"{d} * {product}[{at}]", f"{node.op_type} (reduction mul)")
            return
        hits = self.comp(out + "_hits", shape, "i32", names, "+=", match(sources) + where,
                         f"{node.op_type}: updates per point")
        value = ""
        if reduction in ("none", "add"):
            sums = self.comp(out + "_sum", shape, dtype, names, "+=",
                             f"select({match(sources)}, {read(sources)}, 0){where}", "summed")
            value = f"{sums}[{at}]" if reduction == "none" else f"{d} + {sums}[{at}]"
        else:   # max, min: the largest (negated smallest) update, -inf where none lands
            self.consts[out + "_neg_inf"] = np.array([-np.inf], np.float32)
            lowest = f"{self.operand(out + '_neg_inf')}[0]"
            sign = "" if reduction == "max" else "-"
            extreme = self.comp(out + "_extreme", shape, dtype, names, "max=",
                                f"select({match(sources)}, {sign}{read(sources)}, {lowest}){where}",
                                f"the {reduction} update")
            value = f"max({d}, {extreme}[{at}])" if reduction == "max" else f"min({d}, -{extreme}[{at}])"
        self.comp(out, shape, dtype, names, "=", f"select(less(0, {hits}[{at}]), {value}, {d})",
                  f"{node.op_type} (reduction {reduction})")

    def op_ScatterElements(self, index, node):
        shape = self.shape(node.input[0])
        rank = len(shape)
        axis = self._const_axis(node, rank)
        reduction = self._reduction(node)
        idx_name = self._index_input(node, 1)
        ishape = tuple(self.shape(idx_name))
        if tuple(self.shape(node.input[2])) != ishape or len(ishape) != rank \
                or any(ishape[d] > shape[d] for d in range(rank) if d != axis):
            self.fail(node, f"indices {list(ishape)} and updates {list(self.shape(node.input[2]))} must have one "
                            f"shape, of the data's rank and no longer than the data {list(shape)} off axis {axis}")
        size = shape[axis]
        self._check_const_indices(node, idx_name, size, axis)
        names = [f"i{d}" for d in range(rank)]
        iv, uv = self.operand(idx_name), self.operand(node.input[2])
        iota = self._iota(node.output[0] + "_iota", size)

        def at(u):   # the updates' point: its own position along the axis, the output's elsewhere
            return ", ".join(u[0] if d == axis else names[d] for d in range(rank))

        # off the axis, indices shorter than the data reach only their own extent (reads past
        # it are 0, a valid index): a 0/1 table per such axis keeps them out
        short = [d for d in range(rank) if d != axis and ishape[d] < shape[d]]
        for d in short:
            self.consts[f"{node.output[0]}_reach{d}"] = (np.arange(shape[d]) < ishape[d]).astype(np.int8)
        reach = "".join(f" * {self.operand(f'{node.output[0]}_reach{d}')}[{names[d]}]" for d in short)

        def match(u):
            return f"equal({self._wrapped(f'{iv}[{at(u)}]', size)}, {iota}[{names[axis]}]){reach}"
        where = f" where {', '.join(f'{names[d]} < {shape[d]}' for d in short)}" if short else ""
        self._scatter(node, match, lambda u: f"{uv}[{at(u)}]", ["k0"], [ishape[axis]], reduction, where)

    def op_Scatter(self, index, node):   # opset 9-10: ScatterElements without reduction
        self.op_ScatterElements(index, node)

    def op_ScatterND(self, index, node):
        shape = self.shape(node.input[0])
        rank = len(shape)
        reduction = self._reduction(node)
        idx_name = self._index_input(node, 1)
        ishape = tuple(self.shape(idx_name))
        q = ishape[-1]
        want = ishape[:-1] + tuple(shape[q:])
        if not 1 <= q <= rank or tuple(self.shape(node.input[2])) != want:
            self.fail(node, f"indices {list(ishape)} and updates {list(self.shape(node.input[2]))} do not fit data "
                            f"{list(shape)} (updates must be indices[:-1] + data[q:], q = indices[-1] <= rank)")
        if idx_name in self.consts:
            idx = self.consts[idx_name]
            if any(((idx[..., d] < -shape[d]) | (idx[..., d] >= shape[d])).any() for d in range(q)):
                self.fail(node, "an index is out of range of the data")
        names = [f"i{d}" for d in range(rank)]
        iv, uv = self.operand(idx_name), self.operand(node.input[2])
        iotas = [self._iota(f"{node.output[0]}_iota{d}", shape[d]) for d in range(q)]

        def match(u):   # every coordinate of update u's index tuple names this point
            terms = []
            for d in range(q):
                ref = f"{iv}[{', '.join(u + [str(d)])}]"
                terms.append(f"equal({self._wrapped(ref, shape[d])}, {iotas[d]}[{names[d]}])")
            return " * ".join(terms)

        def read(u):
            return f"{uv}[{', '.join(u + names[q:])}]"
        self._scatter(node, match, read, [f"k{d}" for d in range(len(ishape) - 1)], list(ishape[:-1]), reduction)
