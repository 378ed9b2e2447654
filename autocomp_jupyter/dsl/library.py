"""Library ops: their signatures, shape rules, op classes, and lowering to comprehensions.

Each op lowers to one or more `Statement`s (NCHW layout, as in docs/guide/dsl.md) and keeps its
op name, so fusion rules can match `conv2d` or `batchnorm` as well as op classes.
A shape problem raises `OpError` naming the operand and both shapes; the DSL builder
turns it into a diagnostic at the operand's place in the source.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..ir.program import Access, Affine, BinOp, Call, Const, Expr, IndexValue, Loop, Statement

A = Affine.var


class OpError(Exception):
    """A shape or attribute problem in a library call; `arg` is the operand index or kw name."""

    def __init__(self, message: str, hint: str = "", arg: int | str | None = None):
        super().__init__(message)
        self.message, self.hint, self.arg = message, hint, arg


@dataclass(frozen=True)
class Operand:
    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"


@dataclass(frozen=True)
class Lowered:
    op_class: str
    shape: tuple[int, ...]
    statements: tuple[Statement, ...]
    temps: tuple[tuple, ...] = ()        # (name, shape) or (name, shape, dtype): the op's own tensors


@dataclass(frozen=True)
class LibraryOp:
    name: str
    n_inputs: tuple[int, int]  # (min, max) positional tensor operands
    attrs: dict  # keyword → default
    lower: Callable[..., Lowered]
    doc: str


def _fmt(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _rank(x: Operand, rank: int, arg: int, what: str) -> None:
    if len(x.shape) != rank:
        raise OpError(f"{what} '{x.name}' must have rank {rank}, got {_fmt(x.shape)} (rank {len(x.shape)})",
                      arg=arg)


def _statement(target: str, out: list[tuple[str, int]], expr: Expr, reduce=None,
               red: list[tuple[str, int]] = (), target_indices=None) -> Statement:
    loops = tuple(Loop(n, e) for n, e in list(out) + list(red))
    idx = tuple(target_indices) if target_indices is not None else tuple(A(n) for n, _ in out)
    return Statement(target, idx, reduce, loops, expr)


def _acc(name: str, *indices, pad: float = 0.0) -> Access:
    return Access(name, tuple(i if isinstance(i, Affine) else (A(i) if isinstance(i, str) else Affine.constant(i))
                              for i in indices), pad)


def _loops(shape, names) -> list[tuple[str, int]]:
    return list(zip(names, shape))


def _axis_names(rank: int) -> list[str]:
    return ["n", "c", "h", "w"] if rank == 4 else [f"i{d}" for d in range(rank)]


def _int_attr(attrs, key, minimum=0):
    value = attrs[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise OpError(f"'{key}' must be an integer >= {minimum}, got {value!r}", arg=key)
    return value


# --------------------------------------------------------------------------- contractions


def lower_matmul(out, xs, attrs):
    a, b = xs
    _rank(a, 2, 0, "matmul operand")
    _rank(b, 2, 1, "matmul operand")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise OpError(f"matmul inner dimensions differ: '{a.name}' is {_fmt(a.shape)}, '{b.name}' is {_fmt(b.shape)}",
                      f"shape [{m}, K] x [K, {n}] needs the same K; got {k} vs {k2}", arg=1)
    s = _statement(out, [("i", m), ("j", n)], BinOp("*", _acc(a.name, "i", "k"), _acc(b.name, "k", "j")),
                   "+", [("k", k)])
    return Lowered("contraction", (m, n), (s,))


def lower_batch_matmul(out, xs, attrs):
    a, b = xs
    _rank(a, 3, 0, "batch_matmul operand")
    _rank(b, 3, 1, "batch_matmul operand")
    (bb, m, k), (bb2, k2, n) = a.shape, b.shape
    if bb != bb2 or k != k2:
        raise OpError(f"batch_matmul shapes do not match: {_fmt(a.shape)} vs {_fmt(b.shape)}",
                      "expected A[b, M, K] and B[b, K, N]", arg=1)
    s = _statement(out, [("b", bb), ("i", m), ("j", n)],
                   BinOp("*", _acc(a.name, "b", "i", "k"), _acc(b.name, "b", "k", "j")), "+", [("k", k)])
    return Lowered("contraction", (bb, m, n), (s,))


def lower_linear(out, xs, attrs):
    x, w = xs[0], xs[1]
    _rank(x, 2, 0, "linear input")
    _rank(w, 2, 1, "linear weight")
    (m, k), (k2, n) = x.shape, w.shape
    if k != k2:
        raise OpError(f"linear: input {_fmt(x.shape)} and weight {_fmt(w.shape)} disagree on K ({k} vs {k2})",
                      "expected X[M, K], W[K, N]", arg=1)
    prod = BinOp("*", _acc(x.name, "i", "k"), _acc(w.name, "k", "j"))
    if len(xs) == 2:
        return Lowered("contraction", (m, n), (_statement(out, [("i", m), ("j", n)], prod, "+", [("k", k)]),))
    bias = xs[2]
    if bias.shape != (n,):
        raise OpError(f"linear bias '{bias.name}' must be [{n}], got {_fmt(bias.shape)}", arg=2)
    acc = f"{out}_acc"
    s0 = _statement(acc, [("i", m), ("j", n)], prod, "+", [("k", k)])
    s1 = _statement(out, [("i", m), ("j", n)], BinOp("+", _acc(acc, "i", "j"), _acc(bias.name, "j")))
    return Lowered("contraction", (m, n), (s0, s1), ((acc, (m, n)),))


def _conv_out(size, kernel, stride, padding, dilation, what, arg):
    o = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    if o <= 0:
        raise OpError(f"{what}: output size would be {o} (input {size}, kernel {kernel}, stride {stride}, "
                      f"padding {padding})", "use a smaller kernel or more padding", arg=arg)
    return o


def lower_conv2d(out, xs, attrs):
    x, w = xs
    _rank(x, 4, 0, "conv2d input")
    _rank(w, 4, 1, "conv2d weight")
    stride, padding = _int_attr(attrs, "stride", 1), _int_attr(attrs, "padding", 0)
    dilation, groups = _int_attr(attrs, "dilation", 1), _int_attr(attrs, "groups", 1)
    n, c, h, wd = x.shape
    f, cg, r, s = w.shape
    if c % groups or f % groups:
        raise OpError(f"conv2d: groups={groups} must divide input channels {c} and filters {f}", arg="groups")
    if cg != c // groups:
        raise OpError(f"conv2d weight '{w.name}' {_fmt(w.shape)} does not fit input '{x.name}' {_fmt(x.shape)}",
                      f"expected weight [F, {c // groups}, R, S] (C/groups = {c}/{groups})", arg=1)
    ho = _conv_out(h, r, stride, padding, dilation, "conv2d height", 0)
    wo = _conv_out(wd, s, stride, padding, dilation, "conv2d width", 0)
    hi = A("h", stride) + A("r", dilation) - padding
    wi = A("w", stride) + A("s", dilation) - padding
    if groups == 1:
        expr = BinOp("*", _acc(x.name, "n", "c", hi, wi), _acc(w.name, "f", "c", "r", "s"))
        st = _statement(out, [("n", n), ("f", f), ("h", ho), ("w", wo)], expr, "+",
                        [("c", c), ("r", r), ("s", s)])
    else:
        fg = f // groups
        fi = A("g", fg) + A("fo")
        ci = A("g", cg) + A("c")
        expr = BinOp("*", _acc(x.name, "n", ci, hi, wi), _acc(w.name, fi, "c", "r", "s"))
        st = _statement(out, [("n", n), ("g", groups), ("fo", fg), ("h", ho), ("w", wo)], expr, "+",
                        [("c", cg), ("r", r), ("s", s)], target_indices=(A("n"), fi, A("h"), A("w")))
    return Lowered("contraction", (n, f, ho, wo), (st,))


def lower_depthwise_conv2d(out, xs, attrs):
    x, w = xs
    _rank(x, 4, 0, "depthwise_conv2d input")
    _rank(w, 4, 1, "depthwise_conv2d weight")
    stride, padding = _int_attr(attrs, "stride", 1), _int_attr(attrs, "padding", 0)
    n, c, h, wd = x.shape
    if w.shape[0] != c or w.shape[1] != 1:
        raise OpError(f"depthwise_conv2d weight '{w.name}' {_fmt(w.shape)} does not fit input {_fmt(x.shape)}",
                      f"expected weight [{c}, 1, R, S]", arg=1)
    r, s = w.shape[2], w.shape[3]
    ho = _conv_out(h, r, stride, padding, 1, "depthwise_conv2d height", 0)
    wo = _conv_out(wd, s, stride, padding, 1, "depthwise_conv2d width", 0)
    expr = BinOp("*", _acc(x.name, "n", "c", A("h", stride) + A("r") - padding, A("w", stride) + A("s") - padding),
                 _acc(w.name, "c", 0, "r", "s"))
    st = _statement(out, [("n", n), ("c", c), ("h", ho), ("w", wo)], expr, "+", [("r", r), ("s", s)])
    return Lowered("contraction", (n, c, ho, wo), (st,))


# --------------------------------------------------------------------------- elementwise


def _unary(fn_expr: Callable[[Expr], Expr]):
    def lower(out, xs, attrs):
        (x,) = xs
        names = _axis_names(len(x.shape))
        st = _statement(out, _loops(x.shape, names), fn_expr(_acc(x.name, *names)))
        return Lowered("elementwise", x.shape, (st,))
    return lower


def _broadcast_shape(a: Operand, b: Operand) -> tuple[int, ...]:
    rank = max(len(a.shape), len(b.shape))
    pa = (1,) * (rank - len(a.shape)) + a.shape
    pb = (1,) * (rank - len(b.shape)) + b.shape
    shape = []
    for da, db in zip(pa, pb):
        if da != db and 1 not in (da, db):
            raise OpError(f"shapes do not broadcast: '{a.name}' {_fmt(a.shape)} vs '{b.name}' {_fmt(b.shape)}",
                          f"shape {_fmt(a.shape)} vs {_fmt(b.shape)}: numpy broadcasting needs trailing "
                          "dimensions that match or are 1", arg=1)
        shape.append(max(da, db))
    return tuple(shape)


def _broadcast_access(x: Operand, out_shape, names) -> Access:
    offset = len(out_shape) - len(x.shape)
    idx = [0 if (d == 1 and out_shape[offset + k] != 1) else names[offset + k] for k, d in enumerate(x.shape)]
    return _acc(x.name, *idx)


def _binary(op: str):
    def lower(out, xs, attrs):
        a, b = xs
        shape = _broadcast_shape(a, b)
        names = _axis_names(len(shape))
        st = _statement(out, _loops(shape, names),
                        BinOp(op, _broadcast_access(a, shape, names), _broadcast_access(b, shape, names)))
        return Lowered("elementwise" if a.shape == b.shape else "broadcast", shape, (st,))
    return lower


def _channel_axis(x: Operand) -> int:
    return 1 if len(x.shape) >= 2 else 0


def lower_bias_add(out, xs, attrs):
    x, b = xs
    axis = 1 if len(x.shape) == 4 else len(x.shape) - 1
    if b.shape != (x.shape[axis],):
        raise OpError(f"bias '{b.name}' must be [{x.shape[axis]}] (axis {axis} of {_fmt(x.shape)}), got {_fmt(b.shape)}",
                      arg=1)
    names = _axis_names(len(x.shape))
    st = _statement(out, _loops(x.shape, names), BinOp("+", _acc(x.name, *names), _acc(b.name, names[axis])))
    return Lowered("broadcast", x.shape, (st,))


def lower_batchnorm(out, xs, attrs):
    x, scale, shift = xs
    if len(x.shape) < 2:
        raise OpError(f"batchnorm input '{x.name}' needs a channel axis (rank >= 2), got {_fmt(x.shape)}", arg=0)
    c = x.shape[1]
    for k, p in ((1, scale), (2, shift)):
        if p.shape != (c,):
            raise OpError(f"batchnorm {('scale', 'shift')[k - 1]} '{p.name}' must be [{c}] (channels of "
                          f"{_fmt(x.shape)}), got {_fmt(p.shape)}", arg=k)
    names = _axis_names(len(x.shape))
    ch = names[1]
    st = _statement(out, _loops(x.shape, names),
                    BinOp("+", BinOp("*", _acc(x.name, *names), _acc(scale.name, ch)), _acc(shift.name, ch)))
    return Lowered("broadcast", x.shape, (st,))


# --------------------------------------------------------------------------- reductions


def lower_softmax(out, xs, attrs):
    (x,) = xs
    rank = len(x.shape)
    axis = attrs["axis"]
    if not isinstance(axis, int) or not -rank <= axis < rank:
        raise OpError(f"softmax axis {axis!r} is out of range for rank {rank}", arg="axis")
    axis %= rank
    names = _axis_names(rank)
    keep = [nm for d, nm in enumerate(names) if d != axis]
    keep_shape = tuple(e for d, e in enumerate(x.shape) if d != axis)
    full = _loops(x.shape, names)
    mx, ex, sm = f"{out}_max", f"{out}_exp", f"{out}_sum"
    s0 = _statement(mx, _loops(keep_shape, keep), _acc(x.name, *names), "max", [(names[axis], x.shape[axis])])
    s1 = _statement(ex, full, Call("exp", (BinOp("-", _acc(x.name, *names), _acc(mx, *keep)),)))
    s2 = _statement(sm, _loops(keep_shape, keep), _acc(ex, *names), "+", [(names[axis], x.shape[axis])])
    s3 = _statement(out, full, BinOp("/", _acc(ex, *names), _acc(sm, *keep)))
    return Lowered("reduction", x.shape, (s0, s1, s2, s3),
                   ((mx, keep_shape), (ex, x.shape), (sm, keep_shape)))


def lower_layernorm(out, xs, attrs):
    x, gamma, beta = xs
    d = x.shape[-1]
    for k, p in ((1, gamma), (2, beta)):
        if p.shape != (d,):
            raise OpError(f"layernorm {('gamma', 'beta')[k - 1]} '{p.name}' must be [{d}] (last axis of "
                          f"{_fmt(x.shape)}), got {_fmt(p.shape)}", arg=k)
    eps = attrs["eps"]
    if not isinstance(eps, (int, float)) or eps < 0:
        raise OpError(f"layernorm eps must be a non-negative number, got {eps!r}", arg="eps")
    names = _axis_names(len(x.shape))
    keep, last = names[:-1], names[-1]
    keep_shape = x.shape[:-1]
    full = _loops(x.shape, names)
    mean, var = f"{out}_mean", f"{out}_var"
    centred = BinOp("-", _acc(x.name, *names), _acc(mean, *keep))
    norm = BinOp("/", centred, Call("sqrt", (BinOp("+", _acc(var, *keep), Const(float(eps))),)))
    s_out = _statement(out, full, BinOp("+", BinOp("*", norm, _acc(gamma.name, last)), _acc(beta.name, last)))
    if x.dtype in ("i8", "i32"):
        # Integer statistics round when stored: summed first (integers: exact in any order)
        # and divided once, so the mean and variance are the same whatever order a backend
        # sums in (a sum of x * (1/d) can land either side of a rounding tie).
        msum, vsum = f"{out}_msum", f"{out}_vsum"
        keep_loops = _loops(keep_shape, keep)
        statements = (
            _statement(msum, keep_loops, _acc(x.name, *names), "+", [(last, d)]),
            _statement(mean, keep_loops, BinOp("/", _acc(msum, *keep), Const(float(d)))),
            _statement(vsum, keep_loops, BinOp("*", centred, centred), "+", [(last, d)]),
            _statement(var, keep_loops, BinOp("/", _acc(vsum, *keep), Const(float(d)))),
            s_out)
        temps = tuple((t, keep_shape) for t in (msum, mean, vsum, var))
        return Lowered("reduction", x.shape, statements, temps)
    s0 = _statement(mean, _loops(keep_shape, keep), BinOp("*", _acc(x.name, *names), Const(1.0 / d)), "+",
                    [(last, d)])
    s1 = _statement(var, _loops(keep_shape, keep), BinOp("*", BinOp("*", centred, centred), Const(1.0 / d)), "+",
                    [(last, d)])
    return Lowered("reduction", x.shape, (s0, s1, s_out), ((mean, keep_shape), (var, keep_shape)))


def _pool(kind: str):
    def lower(out, xs, attrs):
        (x,) = xs
        _rank(x, 4, 0, f"{kind} input")
        kernel = _int_attr(attrs, "kernel", 1)
        stride = attrs["stride"] if attrs["stride"] is not None else kernel
        attrs = dict(attrs, stride=stride)
        stride, padding = _int_attr(attrs, "stride", 1), _int_attr(attrs, "padding", 0)
        n, c, h, w = x.shape
        ho = _conv_out(h, kernel, stride, padding, 1, f"{kind} height", 0)
        wo = _conv_out(w, kernel, stride, padding, 1, f"{kind} width", 0)
        hi, wi = A("h", stride) + A("r") - padding, A("w", stride) + A("s") - padding
        out_loops = [("n", n), ("c", c), ("h", ho), ("w", wo)]
        red = [("r", kernel), ("s", kernel)]
        if kind == "maxpool2d":
            st = _statement(out, out_loops, _acc(x.name, "n", "c", hi, wi, pad=-math.inf), "max", red)
        else:  # count_include_pad, as PyTorch's default
            # Sum, then divide: the average is one exact division of an exact sum, so an integer
            # pool rounds the same whatever order the sum is reassociated in.
            total = f"{out}_sum"
            s0 = _statement(total, out_loops, _acc(x.name, "n", "c", hi, wi), "+", red)
            s1 = _statement(out, out_loops, BinOp("/", _acc(total, "n", "c", "h", "w"), Const(float(kernel ** 2))))
            return Lowered("reduction", (n, c, ho, wo), (s0, s1), ((total, (n, c, ho, wo)),))
        return Lowered("reduction", (n, c, ho, wo), (st,))
    return lower


def lower_global_avgpool(out, xs, attrs):
    (x,) = xs
    _rank(x, 4, 0, "global_avgpool input")
    n, c, h, w = x.shape
    total = f"{out}_sum"   # sum, then one exact division (as avgpool2d)
    s0 = _statement(total, [("n", n), ("c", c)], _acc(x.name, "n", "c", "h", "w"), "+", [("h", h), ("w", w)])
    s1 = _statement(out, [("n", n), ("c", c)], BinOp("/", _acc(total, "n", "c"), Const(float(h * w))))
    return Lowered("reduction", (n, c), (s0, s1), ((total, (n, c)),))


def lower_transpose(out, xs, attrs):
    (x,) = xs
    rank = len(x.shape)
    perm = attrs["perm"]
    perm = tuple(reversed(range(rank))) if perm is None else perm
    if not isinstance(perm, tuple) or sorted(perm) != list(range(rank)):
        raise OpError(f"transpose perm {list(perm) if isinstance(perm, tuple) else perm!r} is not a permutation "
                      f"of 0..{rank - 1}", arg="perm")
    names = [f"i{d}" for d in range(rank)]
    shape = tuple(x.shape[p] for p in perm)
    # out[i0, i1, ...] = x[...] with x's axis perm[d] indexed by i_d
    src = [None] * rank
    for d, p in enumerate(perm):
        src[p] = names[d]
    st = _statement(out, _loops(shape, names), _acc(x.name, *src))
    return Lowered("injective", shape, (st,))


# --------------------------------------------------------------------------- layout


def reshape_plan(src: tuple[int, ...], dst: tuple[int, ...]):
    """The common refinement of two shapes with the same number of elements, or None.

    Row-major reshape is affine exactly when both shapes are products of one list of
    "atoms" (each dimension of either shape a contiguous run of atoms). Returns (atoms,
    src_index, dst_index): `*_index[d]` lists (atom, stride) pairs whose sum indexes
    dimension d; size-1 dimensions have no atoms (index 0).
    """
    def bounds(shape):
        out, p = [], 1
        for d in shape:
            if d != 1:
                p *= d
                out.append(p)
        return out
    cuts = sorted(set(bounds(src)) | set(bounds(dst)))
    prev, atoms = 1, []
    for b in cuts:
        if b % prev:
            return None
        atoms.append(b // prev)
        prev = b

    def index(shape):
        idx, a = [], 0
        for d in shape:
            if d == 1:
                idx.append([])
                continue
            run, p = [], 1
            while p < d:
                run.append(a)
                p *= atoms[a]
                a += 1
            strides, s = [], 1
            for t in reversed(run):
                strides.append((t, s))
                s *= atoms[t]
            idx.append(list(reversed(strides)))
        return idx
    return atoms, index(src), index(dst)


def _reshape_lowering(out, x: Operand, shape: tuple[int, ...], what: str, arg) -> Lowered:
    if math.prod(shape) != math.prod(x.shape):
        raise OpError(f"{what}: cannot reshape '{x.name}' {_fmt(x.shape)} ({math.prod(x.shape)} elements) to "
                      f"{_fmt(shape)} ({math.prod(shape)} elements)", "the element counts must agree", arg=arg)
    plan = reshape_plan(x.shape, shape)
    if plan is None:
        raise OpError(f"{what}: reshape {_fmt(x.shape)} -> {_fmt(shape)} is not affine (no common refinement "
                      "of the two shapes)", "split it into a merge then a split of contiguous dimensions",
                      arg=arg)
    atoms, src_idx, dst_idx = plan
    names = [f"a{t}" for t in range(len(atoms))]
    # Output loops in output order: an atom loop where a run of atoms starts, an
    # extent-1 loop for each size-1 output dimension (every output index is a loop).
    loops, target, unit = [], [], 0
    for terms in dst_idx:
        if not terms:
            name = f"u{unit}"
            unit += 1
            loops.append((name, 1))
            target.append(A(name))
            continue
        for t, _ in terms:
            loops.append((names[t], atoms[t]))
        target.append(Affine.of({names[t]: stride for t, stride in terms}))
    src = [Affine.of({names[t]: stride for t, stride in terms}) for terms in src_idx]
    st = _statement(out, loops, _acc(x.name, *src), target_indices=target)
    return Lowered("injective", tuple(shape), (st,))


def lower_reshape(out, xs, attrs):
    (x,) = xs
    shape = attrs["shape"]
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple) or not shape or any(not isinstance(d, int) or d == 0 or d < -1 for d in shape) \
            or list(shape).count(-1) > 1:
        raise OpError(f"reshape shape must be a list of positive integers (at most one -1), got {shape!r}",
                      "e.g. shape=[1, 2048] or shape=[1, -1]", arg="shape")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if math.prod(x.shape) % known:
            raise OpError(f"reshape: {math.prod(x.shape)} elements of '{x.name}' do not fill shape {_fmt(shape)}",
                          arg="shape")
        shape = tuple(math.prod(x.shape) // known if d == -1 else d for d in shape)
    return _reshape_lowering(out, x, shape, "reshape", "shape")


def lower_flatten(out, xs, attrs):
    (x,) = xs
    axis = attrs["axis"]
    rank = len(x.shape)
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis <= rank:
        raise OpError(f"flatten axis {axis!r} is out of range for rank {rank}", arg="axis")
    if axis < 0:
        axis += rank
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return _reshape_lowering(out, x, shape, "flatten", 0)


def lower_concat(out, xs, attrs):
    first = xs[0]
    rank = len(first.shape)
    axis = attrs["axis"]
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise OpError(f"concat axis {axis!r} is out of range for rank {rank}", arg="axis")
    axis %= rank
    for k, x in enumerate(xs[1:], 1):
        if len(x.shape) != rank or any(a != b for d, (a, b) in enumerate(zip(x.shape, first.shape)) if d != axis):
            raise OpError(f"concat: '{x.name}' {_fmt(x.shape)} does not fit '{first.name}' {_fmt(first.shape)} "
                          f"(all dimensions but axis {axis} must agree)", arg=k)
    names = _axis_names(rank)
    shape = tuple(sum(x.shape[axis] for x in xs) if d == axis else e for d, e in enumerate(first.shape))
    # Each output point reads every operand at its offset along `axis`; reads outside an
    # operand give 0 and exactly one read is inside, so the sum is that read, exactly.
    expr, offset = None, 0
    for x in xs:
        idx = [A(nm) - offset if d == axis else A(nm) for d, nm in enumerate(names)]
        read = _acc(x.name, *idx)
        expr = read if expr is None else BinOp("+", expr, read)
        offset += x.shape[axis]
    st = _statement(out, _loops(shape, names), expr)
    return Lowered("injective", shape, (st,))


# --------------------------------------------------------------------------- gathers


def _index_operand(idx: Operand, arg: int, op: str) -> None:
    if idx.dtype not in ("i32", "i8"):
        raise OpError(f"{op} indices '{idx.name}' must have an integer type (i32 or i8), not {idx.dtype}",
                      f"declare '{idx.name}' as i32", arg=arg)


def _gather_axis(x: Operand, attrs, op: str) -> int:
    rank = len(x.shape)
    axis = attrs["axis"]
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise OpError(f"{op} axis {axis!r} is out of range for '{x.name}' of rank {rank}", arg="axis")
    return axis % rank


def _wrapped(idx: Access, size: int) -> Expr:
    """An ONNX index: a negative one counts from the end (`i + size` where i < 0)."""
    return BinOp("+", idx, BinOp("*", Const(float(size)), Call("less", (idx, Const(0.0)))))


def _flat(indices, shape) -> Affine:
    """The flat (row-major) position of `indices` in a tensor of `shape`."""
    flat = Affine.constant(0)
    for index, stride in zip(indices, (math.prod(shape[d + 1:]) for d in range(len(shape)))):
        flat = flat + index * stride
    return flat


def lower_gather(out, xs, attrs):
    """ONNX Gather: Y[p.., q.., r..] = X[p.., idx[q..], r..] (idx may count from the end).
    The index is an indirect read (`ir.program.Access.indirect`) of a temp holding idx
    wrapped into range: the gather moves the rows it reads, nothing else."""
    x, idx = xs
    _index_operand(idx, 1, "gather")
    axis = _gather_axis(x, attrs, "gather")
    pre = [(f"p{d}", e) for d, e in enumerate(x.shape[:axis])]
    mid = [(f"q{d}", e) for d, e in enumerate(idx.shape)]
    post = [(f"r{d}", e) for d, e in enumerate(x.shape[axis + 1:])]
    wrapped = f"{idx.name}_wrapped"
    q = [A(n) for n, _ in mid]
    s0 = _statement(wrapped, mid, _wrapped(_acc(idx.name, *q), x.shape[axis]))
    read = _acc(wrapped, *q)
    indices = [A(n) for n, _ in pre] + [_flat(q, idx.shape)] + [A(n) for n, _ in post]
    value = Access(x.name, tuple(indices), indirect=((axis, read),))
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    s1 = _statement(out, pre + mid + post, value)
    return Lowered("injective", shape, (s0, s1), ((wrapped, idx.shape, "i32"),))


def lower_scatter(out, xs, attrs):
    """ONNX ScatterElements (no reduction): Y = X, then Y[.., idx[p], ..] = U[p] along `axis`
    (where two updates hit one element, the last wins). As three statements: the last update
    hitting each element (`hit`, -1 for none), that clamped to a valid row, and the select."""
    x, idx, u = xs
    _index_operand(idx, 1, "scatter")
    axis = _gather_axis(x, attrs, "scatter")
    if idx.shape != u.shape or len(idx.shape) != len(x.shape):
        raise OpError(f"scatter indices '{idx.name}' {_fmt(idx.shape)} and updates '{u.name}' {_fmt(u.shape)} must "
                      f"have one shape, of the rank of '{x.name}' {_fmt(x.shape)}", arg=2)
    if any(a > b for d, (a, b) in enumerate(zip(idx.shape, x.shape)) if d != axis):
        raise OpError(f"scatter indices '{idx.name}' {_fmt(idx.shape)} are larger than '{x.name}' {_fmt(x.shape)}",
                      arg=1)
    names = [f"i{d}" for d in range(len(x.shape))]
    loops = _loops(x.shape, names)
    n, k = x.shape[axis], idx.shape[axis]
    at_k = [A("k") if d == axis else A(nm) for d, nm in enumerate(names)]
    # an index read past idx's shape (an element no update covers) reads -(n + 1): never a row
    where = BinOp("+", _acc(idx.name, *at_k, pad=-(n + 1.0)),
                  BinOp("*", Const(float(n)), Call("less", (_acc(idx.name, *at_k, pad=-(n + 1.0)), Const(0.0)))))
    hit, row = f"{out}_hit", f"{out}_row"
    s0 = _statement(hit, loops, Call("select", (Call("equal", (where, IndexValue(A(names[axis])))),
                                                 IndexValue(A("k")), Const(-1.0))), "max", [("k", k)])
    s1 = _statement(row, loops, Call("max", (_acc(hit, *names), Const(0.0))))
    rows = [A(nm) for nm in names]
    update = Access(u.name, tuple(rows), indirect=((axis, _acc(row, *names)),))
    s2 = _statement(out, loops, Call("select", (Call("less", (_acc(hit, *names), Const(0.0))),
                                                 _acc(x.name, *names), update)))
    return Lowered("injective", x.shape, (s0, s1, s2), ((hit, x.shape, "i32"), (row, x.shape, "i32")))


# A&S 7.1.26 rational approximation of erf (|error| <= 1.5e-7, below f32 tolerance):
# erf(z) = sign(z) (1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-z^2)), t = 1 / (1 + p |z|).
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
# sign(z) as z / (|z| + tiny): exact away from 0, and erf(0) = 0 since 1 - poly(1) ~ 1e-9.
_TINY = 1e-30


def _erf_lowering(kind: str):
    """erf(X), or GELU's erf form 0.5 x (1 + erf(x / sqrt 2)): a temp holds t, then one
    statement evaluates the polynomial (t is read five times, computed once)."""
    def lower(out, xs, attrs):
        (x,) = xs
        if kind == "gelu":
            approx = attrs["approximate"]
            if approx not in ("tanh", "none"):
                raise OpError(f"gelu approximate must be tanh or none, got {approx!r}", arg="approximate")
            if approx == "tanh":
                return _unary(lambda v: Call("gelu", (v,)))(out, xs, attrs)
        names = _axis_names(len(x.shape))
        loops = _loops(x.shape, names)
        z = _acc(x.name, *names)
        if kind == "gelu":
            z = BinOp("*", z, Const(1.0 / math.sqrt(2.0)))
        tname = f"{out}_t"
        s0 = _statement(tname, loops, BinOp("/", Const(1.0),
                                             BinOp("+", Const(1.0), BinOp("*", Const(_ERF_P), Call("abs", (z,))))))
        t = _acc(tname, *names)
        poly = Const(_ERF_A[-1])
        for a in reversed(_ERF_A[:-1]):
            poly = BinOp("+", Const(a), BinOp("*", t, poly))
        poly = BinOp("*", t, poly)
        mag = BinOp("-", Const(1.0), BinOp("*", poly, Call("exp", (Call("neg", (BinOp("*", z, z),)),))))
        erf = BinOp("/", BinOp("*", mag, z), BinOp("+", Call("abs", (z,)), Const(_TINY)))
        if kind == "gelu":
            value = BinOp("*", BinOp("*", Const(0.5), _acc(x.name, *names)), BinOp("+", Const(1.0), erf))
        else:
            value = erf
        s1 = _statement(out, loops, value)
        return Lowered("elementwise", x.shape, (s0, s1), ((tname, x.shape),))
    return lower


def _relu6(x: Expr) -> Expr:
    return Call("min", (Call("max", (x, Const(0.0))), Const(6.0)))


LIBRARY: dict[str, LibraryOp] = {op.name: op for op in [
    LibraryOp("matmul", (2, 2), {}, lower_matmul, "A[M,K], B[K,N] -> [M,N]"),
    LibraryOp("batch_matmul", (2, 2), {}, lower_batch_matmul, "A[b,M,K], B[b,K,N] -> [b,M,N]"),
    LibraryOp("linear", (2, 3), {}, lower_linear, "X[M,K], W[K,N], b[N] -> X.W + b"),
    LibraryOp("conv2d", (2, 2), {"stride": 1, "padding": 0, "dilation": 1, "groups": 1}, lower_conv2d,
              "X[N,C,H,W], W[F,C/groups,R,S] -> [N,F,H',W']"),
    LibraryOp("depthwise_conv2d", (2, 2), {"stride": 1, "padding": 0}, lower_depthwise_conv2d,
              "X[N,C,H,W], W[C,1,R,S] -> [N,C,H',W']"),
    LibraryOp("relu", (1, 1), {}, _unary(lambda x: Call("relu", (x,))), "elementwise max(x, 0)"),
    LibraryOp("relu6", (1, 1), {}, _unary(_relu6), "elementwise min(max(x, 0), 6)"),
    LibraryOp("gelu", (1, 1), {"approximate": "tanh"}, _erf_lowering("gelu"),
              "elementwise GELU: tanh form (default) or approximate=none (erf form)"),
    LibraryOp("erf", (1, 1), {}, _erf_lowering("erf"), "elementwise error function"),
    LibraryOp("sigmoid", (1, 1), {}, _unary(lambda x: Call("sigmoid", (x,))), "elementwise 1/(1+e^-x)"),
    LibraryOp("tanh", (1, 1), {}, _unary(lambda x: Call("tanh", (x,))), "elementwise tanh"),
    LibraryOp("exp", (1, 1), {}, _unary(lambda x: Call("exp", (x,))), "elementwise e^x"),
    LibraryOp("add", (2, 2), {}, _binary("+"), "elementwise, numpy broadcasting"),
    LibraryOp("sub", (2, 2), {}, _binary("-"), "elementwise, numpy broadcasting"),
    LibraryOp("mul", (2, 2), {}, _binary("*"), "elementwise, numpy broadcasting"),
    LibraryOp("div", (2, 2), {}, _binary("/"), "elementwise, numpy broadcasting"),
    LibraryOp("bias_add", (2, 2), {}, lower_bias_add, "b along axis 1 for rank 4, the last axis otherwise"),
    LibraryOp("batchnorm", (3, 3), {}, lower_batchnorm, "X*scale[c] + shift[c], c = axis 1"),
    LibraryOp("layernorm", (3, 3), {"eps": 1e-5}, lower_layernorm, "over the last axis"),
    LibraryOp("softmax", (1, 1), {"axis": -1}, lower_softmax, "exp(x - max) / sum"),
    LibraryOp("maxpool2d", (1, 1), {"kernel": 2, "stride": None, "padding": 0}, _pool("maxpool2d"),
              "window max, padding reads -inf"),
    LibraryOp("avgpool2d", (1, 1), {"kernel": 2, "stride": None, "padding": 0}, _pool("avgpool2d"),
              "window mean, padding counted"),
    LibraryOp("global_avgpool", (1, 1), {}, lower_global_avgpool, "[N,C,H,W] -> [N,C]"),
    LibraryOp("transpose", (1, 1), {"perm": None}, lower_transpose, "permute axes (default: reverse)"),
    LibraryOp("reshape", (1, 1), {"shape": None}, lower_reshape, "row-major reshape (one -1 allowed)"),
    LibraryOp("flatten", (1, 1), {"axis": 1}, lower_flatten, "[d0..dk-1, dk..] -> [prod, prod] at axis"),
    LibraryOp("concat", (2, 256), {"axis": 0}, lower_concat, "join along axis"),
    LibraryOp("gather", (2, 2), {"axis": 0}, lower_gather,
              "X, idx (i32) -> X's rows along axis that idx names (ONNX Gather)"),
    LibraryOp("scatter", (3, 3), {"axis": 0}, lower_scatter,
              "X, idx (i32), U -> X with U written along axis at idx (ONNX ScatterElements)"),
]}
