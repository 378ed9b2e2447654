"""Optional bridge to Apache TVM (>= 0.27): the program in TE, the chosen schedule in TIR.

    mod, run = to_tvm(result_or_plan)        # tvm IRModule and a callable on numpy inputs
    outputs = run({"A": a, "B": b})          # {output name: numpy array}

Each statement becomes one `te.compute` (reductions `te.sum` / `te.max` over
`te.reduce_axis`; out-of-range reads `te.if_then_else(in range, T[...], pad)`), the whole
program one PrimFunc (`te.create_prim_func`). The schedule of each kernel is then applied
to its anchor statement's block with `tvm.s_tir.Schedule` primitives, read from the
kernel's loop nest (`ir.loopnest.lower`): `split` per tile loop on the anchor's path,
`reorder` into the nest's order, `parallel`, `vectorize` and `unroll` where the nest marks
them. Compiled with `tvm.compile(mod, target="llvm")`.

TVM's block schedule has no primitive for a point loop with affine bounds or a reversed one (and
`transform_block_layout` takes neither), so a plan with one is written as plain TIR instead
(`affine_module`): every kernel's tree as `For` loops, tile loops over their tile counts,
point loops with the affine bounds of `ir.loopnest.affine_point_bounds`, statements as
`BufferStore`s, intermediates as extra buffers.

TVM is optional: `pip install apache-tvm` (the `tvm` extra). Without it `to_tvm` raises a
UserError saying how to install it.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import UserError
from .ir.program import Access, BinOp, Call, Const, Expr, IndexValue


def available() -> bool:
    try:
        import tvm  # noqa: F401
        from tvm import te  # noqa: F401
        import tvm.s_tir  # noqa: F401
    except Exception:
        return False
    return True


def _require():
    if not available():
        raise UserError("the TVM bridge needs Apache TVM 0.27 or later: pip install 'autocomp-jupyter[tvm]' "
                        "(or pip install apache-tvm)", filename="tvm_bridge")
    import tvm
    from tvm import te

    return tvm, te


def build_te(program):
    """{tensor name: te.Tensor} for the program (placeholders for inputs and params)."""
    tvm, te = _require()
    T = tvm.tirx
    env = {}
    for t in program.inputs:
        env[t.name] = te.placeholder(t.shape, "float32", name=t.name)
    for st in program.statements:
        target = program.tensor(st.target) if program.has_tensor(st.target) else None
        n_out = len(st.output_loops)
        if any(idx.single_loop != st.loops[d].name for d, idx in enumerate(st.target_indices)) \
                or len(st.target_indices) != n_out:
            raise UserError(f"the TVM bridge needs statement targets indexed by their own loops in order; "
                            f"'{st}' is not", filename="tvm_bridge")
        shape = target.shape if target is not None else tuple(l.extent for l in st.loops[:n_out])
        red = st.loops[n_out:]

        env[st.target] = te.compute(shape, _body(st, red, n_out, env, T, te), name=st.target)
    return env


def _body(st, red, n_out, env, T, te):
    """The fcompute of one statement (positional loop variables only, as TE requires)."""
    def body(*out_vars):
            raxes = [te.reduce_axis((0, l.extent), name=l.name) for l in red]
            var = {l.name: v for l, v in zip(st.loops[:n_out], out_vars)}
            var.update({l.name: a for l, a in zip(red, raxes)})
            ext = st.extents
            value = _expr(st.guarded_expr, var, env, ext, T, te)
            if not raxes:
                return value
            if st.reduce == "max":
                return te.max(value, axis=raxes)
            return te.sum(value, axis=raxes)
    return body


def _index(idx, var):
    value = idx.const
    for loop, coeff in idx.terms:
        value = value + coeff * var[loop]
    return value


def _expr(e: Expr, var, env, ext, T, te):
    if isinstance(e, Const):
        v = e.value
        if v == math.inf:
            return te.max_value("float32")
        if v == -math.inf:
            return te.min_value("float32")
        return T.const(float(v), "float32")
    if isinstance(e, Access):
        tensor = env[e.tensor]
        shape = [int(s) for s in tensor.shape]
        through = e.indirect_dims            # W[ids[s], c]: the index is ids' element
        idx = [T.Cast("int32", _expr(through[d], var, env, ext, T, te)) if d in through else _index(i, var)
               for d, i in enumerate(e.indices)]
        conds = []
        for d, i in enumerate(e.indices):
            if d in through:
                continue
            lo = i.const + sum(min(0, c * (ext[l] - 1)) for l, c in i.terms)
            hi = i.const + sum(max(0, c * (ext[l] - 1)) for l, c in i.terms)
            if lo < 0 or hi >= shape[d]:
                conds.append(T.all(idx[d] >= 0, idx[d] < shape[d]))
        if not conds:
            return tensor[tuple(idx)]
        pad = _expr(Const(e.pad), var, env, ext, T, te)
        return te.if_then_else(T.all(*conds) if len(conds) > 1 else conds[0], tensor[tuple(idx)], pad)
    if isinstance(e, IndexValue):
        return T.Cast("float32", _index(e.index, var))
    if isinstance(e, BinOp):
        a, b = _expr(e.lhs, var, env, ext, T, te), _expr(e.rhs, var, env, ext, T, te)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b}[e.op]()
    if isinstance(e, Call):
        args = [_expr(a, var, env, ext, T, te) for a in e.args]
        x = args[0]
        f32 = lambda v: T.const(v, "float32")  # noqa: E731
        if e.fn == "relu":
            return T.max(x, f32(0.0))
        if e.fn == "gelu":
            return f32(0.5) * x * (f32(1.0) + te.tanh(f32(0.7978845608028654) * (x + f32(0.044715) * x * x * x)))
        if e.fn == "neg":
            return f32(0.0) - x
        if e.fn in ("max", "min"):
            return getattr(T, e.fn)(args[0], args[1])
        if e.fn in ("less", "less_equal", "equal"):
            test = {"less": lambda: args[0] < args[1], "less_equal": lambda: args[0] <= args[1],
                    "equal": lambda: args[0] == args[1]}[e.fn]()
            return te.if_then_else(test, f32(1.0), f32(0.0))
        if e.fn == "select":
            return te.if_then_else(args[0] != f32(0.0), args[1], args[2])
        if e.fn == "pow":
            return te.power(args[0], args[1])
        return getattr(te, e.fn)(x)
    raise TypeError(f"cannot translate {e!r} to TVM")


def to_tvm(result_or_plan, target: str = "llvm", apply_schedule: bool = True):
    """(IRModule, run) for a Result (its optimised plan) or a Plan.

    `run(inputs: {name: array}) -> {output: float64 array}` executes the LLVM-compiled module.
    """
    tvm, te = _require()
    plan = getattr(result_or_plan, "after", result_or_plan)
    program = plan.program
    scratch: list = []                       # intermediates the plain-TIR form takes as buffers
    if apply_schedule and _has_affine_loops(plan):
        mod, scratch = affine_module(plan)
    else:
        env = build_te(program)
        args = [env[t.name] for t in program.inputs] + [env[o] for o in program.outputs]
        func = te.create_prim_func(args)
        mod = tvm.IRModule({"main": func})
        if apply_schedule:
            mod = schedule_module(mod, plan)
    lib = tvm.compile(mod, target=target)

    def run(inputs):
        dev = tvm.cpu(0)
        arrays = [tvm.runtime.tensor(np.asarray(inputs[t.name], dtype=np.float32), dev) for t in program.inputs]
        outs = [tvm.runtime.tensor(np.zeros(program.tensor(o).shape, dtype=np.float32), dev) for o in program.outputs]
        temps = [tvm.runtime.tensor(np.zeros(t.shape, dtype=np.float32), dev) for t in scratch]
        lib["main"](*arrays, *outs, *temps)
        return {o: a.numpy().astype(np.float64) for o, a in zip(program.outputs, outs)}

    run.lib = lib
    return mod, run


def _has_affine_loops(plan) -> bool:
    from .ir.loopnest import lower

    return any(p.affine or p.region is not None for s in plan.schedules for _, c in lower(s).computes()
               for p in c.loops)


def affine_module(plan):
    """(IRModule, intermediates) for `plan` as plain TIR read from each kernel's loop nest:
    `main(inputs..., outputs..., intermediates...)`. Tile loops run over their tile count
    (`for t in range(ceil((stop - start) / size))`, the tile `[start + t*size, min(...))`),
    a statement that runs only in last tiles is guarded, point loops take the affine bounds
    of `affine_point_bounds` (a reversed one counts down), reductions start from 0 / -inf."""
    tvm, te = _require()
    from .ir.loopnest import lower

    program = plan.program
    tir = _AffineTIR(tvm.tirx, te, program)
    body = []
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        # every element of a reduction's target starts at its identity
        body += [tir.identity_fill(s) for s in kernel.statements if s.reduce is not None]
        nest = lower(schedule)
        body.append(tir.nodes(nest.body, {}, kernel.extents, nest.anchor_of))
    buffers = tir.buffers
    params = [buffers[t.name] for t in program.inputs] + [buffers[o] for o in program.outputs] + \
             [buffers[t.name] for t in tir.scratch]
    func = tir.T.PrimFunc(params, tir.seq(body))
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), tir.scratch


_LOWEST_F32 = -3.4028234663852886e38     # a max reduction's identity


class _AffineTIR:
    """The plain TIR of `affine_module`, one loop nest at a time: tile loops, point loops with
    affine bounds, the statements' stores (`T` is `tvm.tirx`)."""

    def __init__(self, T, te, program):
        self.T, self.te = T, te
        self.buffers = {t.name: T.decl_buffer(tuple(t.shape), "float32", name=t.name) for t in program.tensors}
        outputs = set(program.outputs)
        inputs = {i.name for i in program.inputs}
        self.scratch = [t for t in program.tensors if t.name not in inputs and t.name not in outputs]

    def const(self, v):
        return self.T.const(v, "int64")

    def seq(self, stmts):
        stmts = [x for x in stmts if x is not None]
        return stmts[0] if len(stmts) == 1 else self.T.SeqStmt(stmts)

    def identity_fill(self, statement):
        """Every element of a reduction's target set to the reduction's identity."""
        T = self.T
        buf = self.buffers[statement.target]
        init = T.const(0.0 if statement.reduce == "+" else _LOWEST_F32, "float32")
        idx = [T.Var(f"z{d}", "int64") for d in range(len(buf.shape))]
        loop = T.BufferStore(buf, init, idx)
        for d in reversed(range(len(idx))):
            loop = T.For(idx[d], self.const(0), self.const(int(buf.shape[d])), T.ForKind.SERIAL, loop)
        return loop

    def nodes(self, items, tiles, extents, anchor_of):
        """The TIR of a level of the nest: `tiles` maps each enclosing tile loop to its (first, end)."""
        from .ir.loopnest import TileLoop

        T, const = self.T, self.const
        out = []
        for node in items:
            if isinstance(node, TileLoop):
                start, stop = tiles[node.parent] if node.parent else (const(0), const(node.extent))
                t = T.Var(node.var + "_t", "int64")
                first = start + t * const(node.size)
                inner = {**tiles, node.var: (first, T.min(first + const(node.size), stop))}
                count = T.floordiv(stop - start + const(node.size - 1), const(node.size))
                out.append(T.For(t, const(0), count, T.ForKind.SERIAL, self.nodes(node.body, inner, extents, anchor_of)))
            else:
                out.append(self.compute(node, tiles, extents, anchor_of))
        return self.seq(out)

    def compute(self, node, tiles, extents, anchor_of):
        """A statement's point loops and store in its tile, zeroed first when it is recomputed
        per tile, and guarded when it runs only in last tiles."""
        from .ir.loopnest import affine_point_bounds

        T = self.T
        symbols = {}

        def symbol(name):
            if name not in symbols:
                symbols[name] = T.Var(name, "int64")
            return symbols[name]

        bounds = affine_point_bounds(node, self._spans(node, tiles, extents), T.floordiv, T.max, T.min, symbol)
        body = self._store(node.statement, {b.name: b.value for b in bounds})
        for p, b in reversed(list(zip(node.loops, bounds))):
            loop_var = symbol(b.var)
            # Every loop runs r from 0 (a loop starting at an expression of outer loops did
            # not run its full range once compiled); the loop's value is bound from r.
            r = T.Var(b.var + "_r", "int64")
            at = b.stop - 1 - r if p.reverse else b.start + r          # a reversed loop counts down
            body = T.For(r, self.const(0), T.max(b.stop - b.start, self.const(0)), T.ForKind.SERIAL,
                         T.SeqStmt([T.Bind(loop_var, at), body]))
        if node.recompute:         # its region restarts from the reduction's identity
            body = T.SeqStmt([self._zero_region(node.statement, bounds), body])
        guards = [tiles[v][1] == self.const(extents[anchor_of[v]]) for v in node.last_of]
        if guards:
            cond = guards[0]
            for g in guards[1:]:
                cond = T.And(cond, g)
            body = T.IfThenElse(cond, body, None)
        return body

    def _spans(self, node, tiles, extents):
        """{point loop: (first, end)} in this tile: a computed-at loop's region (what it reads,
        clipped), a tiled loop's tile, else the whole loop."""
        T, const = self.T, self.const
        spans = {}
        for p in node.loops:
            if p.region is not None:       # computed at this tile: the region it reads, clipped
                r = p.region
                first, end = const(r.lo), const(r.hi)
                for (anchor, k), v in zip(r.terms, p.region_tiles):
                    a, b = tiles[v] if v is not None else (const(0), const(extents[anchor]))
                    first, end = first + const(k) * a, end + const(k) * b
                spans[p.name] = (T.max(first, const(0)), T.min(end, const(p.extent)))
            else:
                spans[p.name] = (tiles[p.tile][0], tiles[p.tile][1]) if p.tile else (const(0), const(p.extent))
        return spans

    def _store(self, stmt, var):
        """The statement's update of one element, its loops bound to `var`."""
        T = self.T
        value = _expr(stmt.guarded_expr, var, self.buffers, stmt.extents, T, self.te)
        target = self.buffers[stmt.target]
        index = [_index(i, var) for i in stmt.target_indices]
        if stmt.reduce == "+":
            value = T.BufferLoad(target, index) + value
        elif stmt.reduce == "max":
            value = T.max(T.BufferLoad(target, index), value)
        return T.BufferStore(target, value, index)

    def _zero_region(self, stmt, bounds):
        """The identity written over a recomputed statement's region in this tile."""
        T = self.T
        init = T.const(0.0 if stmt.reduce == "+" else _LOWEST_F32, "float32")
        own = {b.name: b for b in bounds}
        loops = [idx.single_loop for idx in stmt.target_indices]
        at = {l: T.Var(l + "_z", "int64") for l in loops}
        zero = T.BufferStore(self.buffers[stmt.target], init, [at[l] for l in loops])
        for l in reversed(loops):
            r = T.Var(l + "_zr", "int64")
            zero = T.For(r, self.const(0), T.max(own[l].stop - own[l].start, self.const(0)), T.ForKind.SERIAL,
                         T.SeqStmt([T.Bind(at[l], own[l].start + r), zero]))
        return zero


def schedule_module(mod, plan):
    """Apply each kernel's loop nest (`ir.loopnest.lower`) to its anchor block: one `split`
    per tile loop on the anchor statement's path (outer → inner), `reorder` into the path's
    order followed by the statement's point loops, `parallel` where the nest marks its
    outermost loop parallel, `vectorize` / `unroll` as the innermost point loop says."""
    import tvm

    from .ir.loopnest import lower

    sch = tvm.s_tir.Schedule(mod)
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        anchor = kernel.anchor_statement
        try:
            block = sch.get_sblock(anchor.target)
        except Exception:
            continue
        nest = lower(schedule)
        path, compute = next((path, c) for path, c in nest.computes() if c.index == kernel.anchor)
        rest = dict(zip(kernel.loop_names, sch.get_loops(block)))
        order = []
        for tile in path:        # the anchor statement follows every kernel loop
            outer, inner = sch.split(rest[tile.anchor], factors=[None, tile.size])
            order.append(outer)
            rest[tile.anchor] = inner
        order += [rest[p.anchor] for p in compute.loops]
        if len(order) > 1:
            sch.reorder(*order)
        outermost_parallel = path[0].parallel if path else compute.loops[0].parallel
        if outermost_parallel:
            try:
                sch.parallel(order[0])
            except Exception:
                pass
        innermost = compute.loops[-1]
        try:
            if innermost.vectorize:
                sch.vectorize(order[-1])
            elif innermost.unroll:
                sch.unroll(order[-1])
        except Exception:
            pass
    return sch.mod
