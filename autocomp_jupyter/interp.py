"""The numpy reference interpreter: what a Program computes, and equivalence checks.

`run(program, inputs)` executes every statement in order over its whole box domain,
vectorised: each access is gathered over just the loops it uses (out-of-range reads give
the access's pad value), products of accesses under '+=' go through `np.einsum` (BLAS for
GEMM-like shapes), anything else is evaluated by broadcasting; boxes too large for memory
are split and recombined. Values are computed in float64 and rounded to each tensor's
dtype after every statement, so f16/bf16/i8 programs see their own rounding.

`equivalent(a, b)` runs two programs on the same random inputs and compares outputs
with a tolerance per dtype: the check behind every rewrite (docs/guide/verification.md).
"""
from __future__ import annotations

import math
import string
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from dataclasses import replace

from .ir.program import Access, BinOp, Call, Const, Expr, IndexValue, Program, Statement, Tensor

# Largest number of points one vectorised evaluation may touch (float64: 8 bytes each).
MAX_BOX_POINTS = 1 << 22

# Relative/absolute tolerances per dtype for equivalence (reassociated sums differ slightly).
TOLERANCE = {"f32": (2e-4, 1e-4), "f16": (2e-2, 2e-2), "bf16": (6e-2, 6e-2), "i8": (0, 0.51), "i32": (0, 0.51)}


def round_to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to what a `dtype` tensor can hold (kept as float64)."""
    if dtype == "f32":
        return values.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        return values.astype(np.float16).astype(np.float64)
    if dtype == "bf16":  # keep the top 16 bits of the float32 pattern, rounding to nearest even
        bits = values.astype(np.float32).view(np.uint32)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return bits.view(np.float32).astype(np.float64)
    if dtype == "i8":
        return np.clip(np.rint(values), -128, 127)
    if dtype == "i32":
        return np.clip(np.rint(values), -(2 ** 31), 2 ** 31 - 1)
    raise ValueError(f"unknown dtype {dtype}")


def _rounded_in_place(values: np.ndarray, dtype: str) -> np.ndarray:
    """`round_to_dtype` of a float64 array this module just made, written over it: the same
    values, without a second array of the tensor's size (a network's statements write
    hundreds of thousands of elements each, and a fresh array costs its page faults)."""
    if dtype in ("f32", "f16"):
        np.copyto(values, values.astype(np.float32 if dtype == "f32" else np.float16))
    elif dtype in ("i8", "i32"):
        np.rint(values, out=values)
        np.clip(values, -128 if dtype == "i8" else -(2 ** 31), 127 if dtype == "i8" else 2 ** 31 - 1, out=values)
    else:
        np.copyto(values, round_to_dtype(values, dtype))
    return values


def _fresh(values, shape: tuple) -> bool:
    """Whether `values` is an array of `shape` this evaluation made (float64, C order, its own
    memory): one it may return, or write over, without a copy. A tensor's values are never
    one: an access reads them as a view (`_eval_expr` reshapes what `_gather` gives)."""
    return (isinstance(values, np.ndarray) and values.shape == shape and values.dtype == np.float64
            and values.base is None and values.flags.c_contiguous and values.flags.writeable)


def index_ranges(program: Program) -> dict[str, int]:
    """Integer tensors read as indices, each with the number of rows it may address (the
    smallest dimension it indexes)."""
    ranges: dict[str, int] = {}
    for st in program.statements:
        for acc in st.reads():
            for dim, read in acc.indirect:
                size = program.tensor(acc.tensor).shape[dim]
                ranges[read.tensor] = min(ranges.get(read.tensor, size), size)
    # an integer tensor an index is computed from (a gather's ids, wrapped from the end into
    # range) addresses the same rows
    for st in reversed(program.statements):
        if st.target in ranges:
            for acc in st.reads():
                if program.tensor(acc.tensor).dtype in ("i8", "i32"):
                    ranges[acc.tensor] = min(ranges.get(acc.tensor, ranges[st.target]), ranges[st.target])
    return ranges


def random_inputs(program: Program, seed: int = 0) -> dict[str, np.ndarray]:
    """Reproducible random values for every input and param (small ints for integer dtypes;
    an index tensor's within the dimension it indexes)."""
    rng = np.random.default_rng(seed)
    values = {}
    as_index = index_ranges(program)
    for t in program.inputs:
        if t.name in as_index:
            values[t.name] = rng.integers(0, as_index[t.name], size=t.shape).astype(np.float64)
        elif t.dtype in ("i8", "i32"):
            values[t.name] = rng.integers(-3, 4, size=t.shape).astype(np.float64)
        else:
            values[t.name] = round_to_dtype(rng.standard_normal(t.shape), t.dtype)
    return values


def run(program: Program, inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Execute `program`; returns every tensor's value (inputs, intermediates, temps)."""
    env: dict[str, np.ndarray] = {}
    given = dict(inputs) if inputs is not None else random_inputs(program, seed)
    for t in program.inputs:
        if t.name not in given:
            raise ValueError(f"missing value for {t.role} '{t.name}' {list(t.shape)}")
        value = np.asarray(given[t.name], dtype=np.float64)
        if value.shape != t.shape:
            raise ValueError(f"'{t.name}' must have shape {list(t.shape)}, got {list(value.shape)}")
        env[t.name] = value
    # Overflow to inf and inf - inf are what the program computes (IEEE, as the C does), not
    # an error: numpy's warnings about them would only be noise under a notebook cell.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for st in program.statements:
            env[st.target] = run_statement(st, env, program.tensor(st.target))
    return env


def run_statement(st: Statement, env: Mapping[str, np.ndarray], target: Tensor) -> np.ndarray:
    """One comprehension over its whole domain, into a fresh array for `target`."""
    ranges = tuple((0, l.extent) for l in st.loops)
    result = _evaluate_box(st, env, ranges)
    n_out = len(st.output_loops)
    direct = all(idx.single_loop == st.loops[k].name for k, idx in enumerate(st.target_indices)) \
        and len(st.target_indices) == n_out
    if direct and _fresh(result, tuple(target.shape)):
        return _rounded_in_place(result, target.dtype)      # it is the whole fresh array
    init = {None: 0.0, "+": 0.0, "max": -math.inf}[st.reduce]
    out = np.full(target.shape, init if st.reduce == "max" else 0.0)
    if direct:
        out[...] = result
    else:
        grids = np.ix_(*[np.arange(l.extent) for l in st.loops[:n_out]])
        env_idx = {l.name: g for l, g in zip(st.loops[:n_out], grids)}
        index = tuple(np.broadcast_to(idx.evaluate(env_idx), result.shape) for idx in st.target_indices)
        out[index] = result
    return _rounded_in_place(out, target.dtype)


def _box_points(ranges) -> int:
    return math.prod(b - a for a, b in ranges)


def _gather(acc: Access, st: Statement, env: Mapping[str, np.ndarray], ranges) -> tuple[np.ndarray, tuple[int, ...]]:
    """Values of `acc` over the loops it uses (axes in domain order), with pad out of range."""
    data = env[acc.tensor]
    names = st.loop_names
    used = sorted({k for idx in acc.indices for k in idx.loops}, key=names.index)
    axes = tuple(names.index(n) for n in used)
    window = None if acc.indirect else _window(acc, data, names, ranges, used)
    if window is not None:
        return window, axes
    grids = np.ix_(*[np.arange(*ranges[a]) for a in axes]) if axes else ()
    loop_env = dict(zip(used, grids))
    bounds = {n: ranges[a] for n, a in zip(used, axes)}
    index, valid = [], None
    through = acc.indirect_dims
    for dim, idx in enumerate(acc.indices):
        if dim in through:                       # the index is an integer tensor's element
            index.append(_indirect_index(acc, dim, through[dim], env, loop_env, data.shape[dim]))
            continue
        raw = idx.evaluate(loop_env)
        # Only a dimension the index can leave needs the mask and the clamp (the tiled runs
        # gather thousands of small boxes).
        lo, hi = idx.bounds(bounds)
        size = data.shape[dim]
        if 0 <= lo and hi < size:
            index.append(raw)
            continue
        ok = (raw >= 0) & (raw < size)
        valid = ok if valid is None else valid & ok
        index.append(np.minimum(np.maximum(raw, 0), size - 1))
    # The index arrays broadcast to the box of the used loops (each used loop is in one of them).
    values = data[tuple(index)] if index else data
    if valid is not None:
        values = np.where(valid, values, acc.pad)
    return np.asarray(values, dtype=np.float64), axes


class IndexOutOfRange(ValueError):
    """An index tensor's element outside the dimension it indexes (never clamped)."""


def _indirect_index(acc: Access, dim: int, read: Access, env, loop_env, size: int) -> np.ndarray:
    """The values of `read` (an integer tensor's elements) as indices into dimension `dim` of
    `acc.tensor`, over the loops in `loop_env`; an error naming the tensor, the position and
    the range if one is outside [0, size)."""
    ids = env[read.tensor]
    position = tuple(np.asarray(i.evaluate(loop_env)) for i in read.indices)
    values = np.rint(ids[position] if position else ids).astype(np.int64)
    bad = (values < 0) | (values >= size)
    if bad.any():
        where = tuple(int(np.broadcast_to(p, values.shape)[bad][0]) for p in position)
        raise IndexOutOfRange(f"index {int(values[bad][0])} read from {read.tensor}[{', '.join(map(str, where))}] is "
                              f"outside dimension {dim} of '{acc.tensor}' (0 to {size - 1})")
    return values


def _window(acc: Access, data: np.ndarray, names, ranges, used) -> np.ndarray | None:
    """`_gather`'s values without fancy indexing where every index is one distinct loop plus a
    constant, in range over the box: a slice of the tensor, its axes put in domain order (the
    common case of the tiled runs' thousands of small boxes); None otherwise."""
    shape = data.shape
    loops = []
    slices = []
    for dim, idx in enumerate(acc.indices):
        if not idx.terms:
            if not 0 <= idx.const < shape[dim]:
                return None
            slices.append(slice(idx.const, idx.const + 1))
            continue
        if len(idx.terms) != 1 or idx.terms[0][1] != 1:
            return None
        loop = idx.terms[0][0]
        lo, hi = ranges[names.index(loop)]
        if loop in loops or lo + idx.const < 0 or hi + idx.const > shape[dim]:
            return None
        loops.append(loop)
        slices.append(slice(lo + idx.const, hi + idx.const))
    data_axes = [d for d, idx in enumerate(acc.indices) if idx.terms]
    values = np.asarray(data, dtype=np.float64)[tuple(slices)]
    # constant dimensions dropped, the loop dimensions ordered as `used` (domain order)
    values = values.reshape(tuple(values.shape[d] for d in data_axes))
    return values.transpose([loops.index(n) for n in used])


def _product_terms(expr: Expr):
    """(accesses, constant) if `expr` is a product of accesses and constants, else None."""
    if isinstance(expr, Access):
        return [expr], 1.0
    if isinstance(expr, Const):
        return [], expr.value
    if isinstance(expr, BinOp) and expr.op == "*":
        left, right = _product_terms(expr.lhs), _product_terms(expr.rhs)
        if left is None or right is None:
            return None
        return left[0] + right[0], left[1] * right[1]
    if isinstance(expr, Call) and expr.fn == "neg":
        inner = _product_terms(expr.args[0])
        return None if inner is None else (inner[0], -inner[1])
    return None


def _domain_mask(st: Statement, ranges) -> np.ndarray:
    """Where the statement's domain holds over a sub-box: a boolean array broadcastable to
    the box (a size-1 axis for each loop no relation names)."""
    names, rank = st.loop_names, len(ranges)
    mask = np.ones((1,) * rank, dtype=bool)
    for a in st.domain:
        mask = mask & (_affine_values(a, names, ranges, rank) >= 0)
    return mask


def _affine_values(index, names, ranges, rank: int):
    """An affine combination of loops over a sub-box, broadcastable to it."""
    value = np.full((1,) * rank, index.const, dtype=np.int64)
    for k, c in index.terms:
        axis = names.index(k)
        shape = [1] * rank
        shape[axis] = ranges[axis][1] - ranges[axis][0]
        value = value + c * np.arange(*ranges[axis]).reshape(shape)
    return value


def _evaluate_in_domain(st: Statement, env, ranges) -> np.ndarray:
    """`_evaluate_box` for a statement whose domain is cut by relations: a sub-box wholly
    outside gives the identity without evaluating anything, one wholly inside is a plain box;
    relations on output loops only mask the plain result, relations that reach a reduction
    loop fold into the expression (`select(inside, expr, identity)`, never multiplying a
    value by 0, which an inf would turn into NaN)."""
    mask = _domain_mask(st, ranges)
    n_out = len(st.output_loops)
    out_shape = tuple(b - a for a, b in ranges[:n_out])
    memo = st.__dict__          # the statement's domain-free forms, made once (it is immutable)
    if not mask.any():
        return np.full(out_shape, st.identity)
    boxed = memo.get("_interp_box") or memo.setdefault("_interp_box", replace(st, domain=()))
    if mask.all():
        return _evaluate_box(boxed, env, ranges)
    if all(mask.shape[a] == 1 for a in range(n_out, len(ranges))):
        result = _evaluate_box(boxed, env, ranges)
        inside = mask.reshape(mask.shape[:n_out])
        return np.where(np.broadcast_to(inside, out_shape), result, st.identity)
    product = _product_terms(st.expr) if st.reduce == "+" else None
    if product is not None and product[0]:
        names = st.loop_names
        sizes = [math.prod(ranges[names.index(k)][1] - ranges[names.index(k)][0]
                           for k in {k for idx in a.indices for k in idx.loops}) for a in product[0]]
        if max(sizes + [mask.size, _box_points(ranges[:n_out])]) > MAX_BOX_POINTS:
            return _split(st, env, ranges)        # halves, each wholly in, out, or masked again
        masked = _masked_contraction(st, env, ranges, mask, product)
        if masked is not None:
            return masked
    elif _box_points(ranges) > MAX_BOX_POINTS:
        return _split(st, env, ranges)
    guarded = memo.get("_interp_guarded") or memo.setdefault(
        "_interp_guarded", replace(st, domain=(), expr=st.guarded_expr))
    return _evaluate_box(guarded, env, ranges)


def _masked_contraction(st: Statement, env, ranges, mask: np.ndarray, product) -> np.ndarray | None:
    """A sum of products over a domain that reaches its reduction loops, as one einsum with the
    domain as a 0/1 operand, where every operand is finite (0 x inf would be NaN, not 0);
    None otherwise."""
    letters = string.ascii_letters
    operands, subscripts = [], []
    for acc in product[0]:
        values, axes = _gather(acc, st, env, ranges)
        if not np.isfinite(values).all():
            return None
        operands.append(values)
        subscripts.append("".join(letters[a] for a in axes))
    axes = [a for a in range(len(ranges)) if mask.shape[a] > 1]
    operands.append(mask.reshape([mask.shape[a] for a in axes]).astype(np.float64))
    subscripts.append("".join(letters[a] for a in axes))
    used = set("".join(subscripts))
    if any(letters[a] not in used for a in range(len(ranges))):
        return None        # a loop no operand reads: the general path counts its points
    n_out = len(st.output_loops)
    spec = ",".join(subscripts) + "->" + "".join(letters[a] for a in range(n_out))
    return np.einsum(spec, *operands, optimize=True) * product[1]


def _evaluate_box(st: Statement, env, ranges) -> np.ndarray:
    """The statement's reduced values over the output loops of a sub-box of its domain."""
    if st.domain:
        return _evaluate_in_domain(st, env, ranges)
    n_out = len(st.output_loops)
    product = _product_terms(st.expr) if st.reduce == "+" else None
    if product is not None and product[0]:
        names = st.loop_names
        biggest = max(math.prod(ranges[i][1] - ranges[i][0] for i in range(len(ranges)) if names[i] in used)
                      for used in ({k for idx in a.indices for k in idx.loops} for a in product[0]))
        out_points = _box_points(ranges[:n_out])
        too_big = max(biggest, out_points) > MAX_BOX_POINTS
    else:
        too_big = _box_points(ranges) > MAX_BOX_POINTS
    if too_big:
        return _split(st, env, ranges)
    if product is not None and product[0]:
        letters = string.ascii_letters
        operands, subscripts = [], []
        for acc in product[0]:
            values, axes = _gather(acc, st, env, ranges)
            operands.append(values)
            subscripts.append("".join(letters[a] for a in axes))
        used = "".join(subscripts)
        # Output loops no operand reads broadcast (T[i, u] += A[i, k] * 2 is the same for every u).
        kept = [a for a in range(n_out) if letters[a] in used]
        spec = ",".join(subscripts) + "->" + "".join(letters[a] for a in kept)
        # Loops no operand uses still multiply the sum (e.g. a constant summed over k).
        unused = [a for a in range(n_out, len(ranges)) if letters[a] not in used]
        scale = product[1] * math.prod(ranges[a][1] - ranges[a][0] for a in unused)
        # Two operands have one contraction order (BLAS where it applies): given, not searched
        # for on every box; one operand has none to search.
        order = True if len(operands) > 2 else ["einsum_path", (0, 1)] if len(operands) == 2 else False
        result = np.einsum(spec, *operands, optimize=order)
        shape = tuple(ranges[a][1] - ranges[a][0] for a in range(n_out))
        result = result.reshape(tuple(shape[a] if a in kept else 1 for a in range(n_out)))
        scaled = result * scale
        return scaled if _fresh(scaled, shape) else np.broadcast_to(scaled, shape).copy()
    rank = len(ranges)
    values = _eval_expr(st.expr, st, env, ranges, rank)
    full = tuple(b - a for a, b in ranges)
    red_axes = tuple(range(n_out, rank))
    if not red_axes and _fresh(values, full):
        return values               # an expression's own result: no copy of it
    values = np.broadcast_to(values, full)
    if st.reduce == "+":
        return values.sum(axis=red_axes) if red_axes else values.copy()
    if st.reduce == "max":
        return values.max(axis=red_axes) if red_axes else values.copy()
    return values.copy()


def _split(st: Statement, env, ranges) -> np.ndarray:
    """Evaluate a box too large for memory as two halves and recombine them."""
    n_out = len(st.output_loops)
    sizes = [b - a for a, b in ranges]
    out_axes = [a for a in range(n_out) if sizes[a] > 1]
    axis = max(out_axes, key=lambda a: sizes[a]) if out_axes else \
        max(range(n_out, len(ranges)), key=lambda a: sizes[a])
    lo, hi = ranges[axis]
    mid = (lo + hi) // 2
    first = _evaluate_box(st, env, ranges[:axis] + ((lo, mid),) + ranges[axis + 1:])
    second = _evaluate_box(st, env, ranges[:axis] + ((mid, hi),) + ranges[axis + 1:])
    if axis < n_out:
        return np.concatenate([first, second], axis=axis)
    return first + second if st.reduce == "+" else np.maximum(first, second)


_UNARY = {
    "exp": np.exp, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs, "neg": np.negative,
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "log": np.log, "floor": np.floor,
}
_NARY = {
    "max": np.maximum, "min": np.minimum, "pow": np.power,
    "less": lambda a, b: np.less(a, b).astype(np.float64),
    "less_equal": lambda a, b: np.less_equal(a, b).astype(np.float64),
    "equal": lambda a, b: np.equal(a, b).astype(np.float64),
    "select": lambda c, a, b: np.where(np.not_equal(c, 0.0), a, b),
}


def _eval_expr(e: Expr, st: Statement, env, ranges, rank: int):
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Access):
        values, axes = _gather(e, st, env, ranges)
        shape = [1] * rank
        for a in axes:
            shape[a] = ranges[a][1] - ranges[a][0]
        return values.reshape(shape)
    if isinstance(e, IndexValue):
        return _affine_values(e.index, st.loop_names, ranges, rank).astype(np.float64)
    if isinstance(e, BinOp):
        lhs = _eval_expr(e.lhs, st, env, ranges, rank)
        rhs = _eval_expr(e.rhs, st, env, ranges, rank)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[e.op](lhs, rhs)
    if isinstance(e, Call):
        args = [_eval_expr(a, st, env, ranges, rank) for a in e.args]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if e.fn in _NARY:
                return _NARY[e.fn](*args)
            return _UNARY[e.fn](args[0])
    raise TypeError(f"cannot evaluate {e!r}")


# --------------------------------------------------------------------------- equivalence


@dataclass(frozen=True)
class Equivalence:
    """The outcome of comparing two programs on the same random inputs."""

    ok: bool
    max_abs_error: float
    worst_tensor: str
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def compare_outputs(program: Program, expected: Mapping[str, np.ndarray],
                    actual: Mapping[str, np.ndarray]) -> Equivalence:
    """Compare the outputs of `program` (tolerance by dtype); NaN where expected is NaN is fine."""
    worst, worst_name = 0.0, ""
    for name in program.outputs:
        if name not in actual:
            return Equivalence(False, math.inf, name, f"output '{name}' was not computed")
        exp, got = np.asarray(expected[name]), np.asarray(actual[name])
        if exp.shape != got.shape:
            return Equivalence(False, math.inf, name, f"output '{name}' has shape {list(got.shape)}, "
                                                      f"expected {list(exp.shape)}")
        rtol, atol = TOLERANCE[program.tensor(name).dtype]
        same = (np.isnan(exp) & np.isnan(got)) | (np.isinf(exp) & (exp == got))   # NaN/inf where both give it
        with np.errstate(invalid="ignore"):
            err = np.where(same, 0.0, np.abs(exp - got))
        err = np.where(np.isnan(err), np.inf, err)
        scale = atol + rtol * np.abs(np.where(np.isfinite(exp), exp, 0.0)).max(initial=0.0)
        bad = err > scale
        max_err = float(err.max(initial=0.0))
        if max_err > worst:
            worst, worst_name = max_err, name
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return Equivalence(False, max_err, name,
                               f"output '{name}' differs at {list(where)}: expected {exp[where]:.6g}, "
                               f"got {got[where]:.6g} (tolerance {scale:.3g})")
    return Equivalence(True, worst, worst_name)


def equivalent(original: Program, rewritten: Program, seed: int = 0,
               inputs: Mapping[str, np.ndarray] | None = None) -> Equivalence:
    """Run both programs on the same random inputs and compare their outputs."""
    inputs = inputs if inputs is not None else random_inputs(original, seed)
    return compare_outputs(original, run(original, inputs), run(rewritten, inputs))


# --------------------------------------------------------------------------- tiled execution


class TooManyTiles(ValueError):
    """The schedule's tile loop runs more tiles than a check is willing to execute."""


def run_kernel_tiled(schedule, env: Mapping[str, np.ndarray], max_boxes: int | None = None) -> dict[str, np.ndarray]:
    """Execute a scheduled kernel tile by tile on `env` (values of its inputs).

    Walks the kernel's loop nest (`ir.loopnest.lower`): each tile loop steps its anchor
    loop's range through its tiles (remainder tiles clipped), and each statement nest runs
    over its part of the domain there: loops that follow an anchor loop take its current
    tile (the whole extent when no tile loop around tiles it), local loops their full range,
    and a statement in the last-tile-only position (`Compute.last_of`) runs only there. A
    reduction accumulates its partial results tile after tile (init 0 / -inf); one computed
    against a running max (`Rescale`) first rescales them by how much the max grew. Reads of
    tensors this kernel writes see whatever has been computed *so far*, rounded to their
    dtype (integer tensors saturate, as in `run`), so a nest that runs a consumer before its
    producer is complete gives wrong values, which the caller detects. Raises `TooManyTiles`
    when the nest would run more than `max_boxes` (tile, statement) pieces.
    Returns every tensor of `env` plus each tensor the kernel writes (rounded to its dtype).
    """
    from .ir.loopnest import TileLoop, lower, point_range

    kernel = schedule.kernel
    nest = lower(schedule)
    if max_boxes is not None:
        count = nest.executions()
        if count > max_boxes:
            raise TooManyTiles(f"{count} tile runs > {max_boxes}")
    values: dict[str, np.ndarray] = {k: np.asarray(v, dtype=np.float64) for k, v in env.items()}
    written = list(dict.fromkeys(s.target for s in kernel.statements))
    for st in kernel.statements:
        init = -math.inf if st.reduce == "max" else 0.0
        values[st.target] = np.full(kernel.tensor(st.target).shape, init)
    # Integer tensors are read saturated (floats' rounding is within every tolerance).
    reads = _RoundedReads(values, {t: kernel.tensor(t).dtype for t in written
                                   if kernel.tensor(t).dtype in ("i8", "i32")})
    maps = [kernel.loop_map(i) for i in range(len(kernel.statements))]
    extents = kernel.extents
    seen: dict[int, np.ndarray] = {}     # per rescaled sum: the running max its terms are relative to

    def visit(nodes, box: dict[str, tuple[int, int]]) -> None:
        for node in nodes:
            if isinstance(node, TileLoop):
                lo, hi = box[node.anchor]
                for first in range(lo, hi, node.size):
                    visit(node.body, {**box, node.anchor: (first, min(first + node.size, hi))})
                continue
            st, m = node.statement, maps[node.index]
            if any(box[a][1] != extents[a] for a in nest.guarded(node)):
                continue  # runs only in the last tile of the loops it does not follow
            if any(p.region is not None for p in node.loops):
                # Computed at this tile: over the region it reads, from scratch. Everything
                # else of its tensor is poisoned first, so a consumer reading outside the
                # region (a halo too small) gives NaN, which the check catches.
                where = {p.name: point_range(p, box, extents) for p in node.loops}
                ranges = tuple(where[l.name] for l in st.loops)
                values[st.target][...] = math.nan
                init = -math.inf if st.reduce == "max" else 0.0
                values[st.target][tuple(slice(*where[idx.single_loop]) for idx in st.target_indices)] = init
            else:
                ranges = tuple(box[m[l.name]] if l.name in m else (0, l.extent) for l in st.loops)
            if any(lo >= hi for lo, hi in ranges):
                reads.changed(st.target)
                continue
            part = _evaluate_box(st, reads, ranges)
            if st.rescale is not None and st.reduce == "+":
                _rescale(st, values[st.target], values[st.rescale.tensor], seen, node.index)
            _store(st, values[st.target], part, ranges)
            reads.changed(st.target)

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):     # IEEE, as in `run`
        visit(nest.body, {a: (0, e) for a, e in extents.items()})
        for name in written:
            values[name] = round_to_dtype(values[name], kernel.tensor(name).dtype)
    return values


def _rescale(st: Statement, out: np.ndarray, running: np.ndarray, seen: dict, index: int) -> None:
    """Online softmax (`ir.program.Rescale`): before a sum adds terms computed against the
    running max as it is now, scale what it holds — terms against the max it saw last — by
    exp(scale * (m_seen - m_now)) per element (1 where the max did not move)."""
    rs = st.rescale
    before = seen.get(index, np.full(running.shape, -math.inf))
    factor = np.where(before == running, 1.0, np.exp(rs.scale * (before - running)))
    grids = np.ix_(*[np.arange(n) for n in out.shape])
    where = {idx.single_loop: g for idx, g in zip(st.target_indices, grids)}
    out *= factor[tuple(np.broadcast_to(i.evaluate(where), out.shape) for i in rs.indices)]
    seen[index] = running.copy()


class _RoundedReads(dict):
    """The values a statement reads: tensors the kernel writes are seen rounded to their
    dtype (an i8 matmul's result saturates before a fused bias reads it), recomputed only
    after a statement writes them."""

    def __init__(self, values: dict, dtypes: Mapping[str, str]):
        super().__init__()
        self.values, self.dtypes, self.cache = values, dtypes, {}

    def changed(self, name: str) -> None:
        self.cache.pop(name, None)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.dtypes:
            return self.values[name]
        if name not in self.cache:
            self.cache[name] = round_to_dtype(self.values[name], self.dtypes[name])
        return self.cache[name]

    def __contains__(self, name) -> bool:
        return name in self.values

    def get(self, name, default=None):
        return self[name] if name in self.values else default


def _store(st: Statement, out: np.ndarray, part: np.ndarray, ranges) -> None:
    """Combine a sub-box's reduced values into the statement's target array."""
    n_out = len(st.output_loops)
    out_loops = st.loops[:n_out]
    if len(st.target_indices) == n_out and all(idx.single_loop == out_loops[k].name
                                               for k, idx in enumerate(st.target_indices)):
        index = tuple(slice(lo, hi) for lo, hi in ranges[:n_out])
    else:
        grids = np.ix_(*[np.arange(lo, hi) for lo, hi in ranges[:n_out]])
        env_idx = {l.name: g for l, g in zip(out_loops, grids)}
        index = tuple(np.broadcast_to(idx.evaluate(env_idx), part.shape) for idx in st.target_indices)
    if st.reduce == "+":
        if isinstance(index[0], slice) if index else True:
            out[index] += part
        else:
            np.add.at(out, index, part)
    elif st.reduce == "max":
        if isinstance(index[0], slice) if index else True:
            out[index] = np.maximum(out[index], part)
        else:
            np.maximum.at(out, index, part)
    else:
        out[index] = part


_REFERENCE: dict = {}  # the last program's untiled run: passes check many kernels of one program


def reference_run(program: Program, seed: int = 0) -> dict[str, np.ndarray]:
    """`run(program)` on `random_inputs(program, seed)`, kept for the last program asked
    (the passes check many kernels of one program against it)."""
    key = (id(program), seed)
    if _REFERENCE.get(key, (None,))[0] is not program:
        _REFERENCE.clear()
        _REFERENCE[key] = (program, run(program, random_inputs(program, seed)))
    return _REFERENCE[key][1]


def check_tiled(schedule, program: Program, seed: int = 0, max_boxes: int | None = 4096) -> Equivalence:
    """Does the kernel, run tile by tile under `schedule`, compute what `program` computes?

    `schedule.kernel` must be a kernel of `program` (the same ops and tensors). The program
    runs untiled on random inputs; the kernel's inputs are taken from that run, its
    tensors (outputs and internals, but those computed at the anchor's tiles, which exist
    per tile only) recomputed tile by tile and compared with a tolerance per dtype. Raises
    `TooManyTiles` when the schedule has more than `max_boxes` tiles.
    """
    kernel = schedule.kernel
    reference = reference_run(program, seed)
    env = {name: reference[name] for name in kernel.inputs}
    got = run_kernel_tiled(schedule, env, max_boxes)
    worst, worst_name = 0.0, ""
    # A tensor computed at the anchor's tiles exists only tile by tile, over each tile's region
    # (the run poisons the rest): what it feeds is compared, not it.
    regional = {t for t, _, _ in kernel.compute_at}
    # ... and one computed against a running max (`Rescale`, an `=` statement: exp(S - M)) is
    # relative to the max as it was in its tile: the sums it feeds, rescaled, are compared.
    regional |= {st.target for st in kernel.statements if st.rescale is not None and st.reduce is None}
    for name in [n for n in list(kernel.outputs) + list(kernel.internals) if n not in regional]:
        exp, act = reference[name], got[name]
        rtol, atol = TOLERANCE[kernel.tensor(name).dtype]
        # NaN or inf where the program itself gives it (0/0 after a relu) is a match, as in compare_outputs.
        same = (np.isnan(exp) & np.isnan(act)) | (np.isinf(exp) & (exp == act))
        with np.errstate(invalid="ignore"):
            err = np.where(same, 0.0, np.abs(exp - act))
        err = np.where(np.isnan(err), np.inf, err)
        scale = atol + rtol * np.abs(np.where(np.isfinite(exp), exp, 0.0)).max(initial=0.0)
        max_err = float(err.max(initial=0.0))
        if max_err > worst:
            worst, worst_name = max_err, name
        if (err > scale).any():
            where = tuple(int(i) for i in np.argwhere(err > scale)[0])
            return Equivalence(False, max_err, name,
                               f"tiled '{name}' differs at {list(where)}: expected {exp[where]:.6g}, "
                               f"got {act[where]:.6g} (tolerance {scale:.3g})")
    return Equivalence(True, worst, worst_name)
