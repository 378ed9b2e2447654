"""Online softmax: the rewrite that lets attention tile its key loop (FlashAttention).

A softmax over keys keeps each score row whole: its exp reads the row max, complete only
after the last key. Two exact rewrites lift that, found by statement dataflow (op names do
not matter: a library `softmax` and the same steps written as comprehensions match alike):

1. Deferred normalisation. `P = E / Z[r]` read only by a sum `O += P * V` whose output
   loops include Z's: `U += E * V`, then `O = U / Z[r]` (the division over the output, not
   the scores: N x D divides instead of N x N).
2. Running max. `E = exp(c * (X - M))` with `M max= X` over the keys, every reader of E a
   sum linear in E (the row sum Z, the weighted values U) whose output loops include M's:
   E and those sums are marked `Rescale(M, c)` (`ir.program.Rescale`). Tiled along the
   keys, M is then the max so far; E is relative to it, and each sum scales its partial
   result by exp(c * (m_old - m_new)) as the max grows (loop-nest placement lets them share
   the max's key tiles; isl checks every other dependence; the interpreter runs it so).

`online_softmax(program, ops)` applies both to a chain's ops; the ops from the max's on
become one op, its statements in order. The rewritten program computes what the original
does (the caller checks it with the interpreter).
"""
from __future__ import annotations

from dataclasses import replace

from ..accel.cost.domain import zero_outside
from ..ir.program import Access, Affine, BinOp, Call, Const, Expr, Op, Program, Rescale, Statement, substitute


def online_softmax(program: Program, ops: list[str]) -> tuple[Program, str] | str:
    """(rewritten program, the merged op's name) for the chain `ops` (op names in program
    order), or why it does not apply."""
    chain = [program.op(n) for n in ops]
    statements = [s for op in chain for s in op.statements]
    owner = {id(s): op.name for op in chain for s in op.statements}
    readers = lambda t: [s for s in statements if any(a.tensor == t for a in s.reads())]  # noqa: E731
    outside = set(program.outputs) | {t for op in program.ops if op.name not in ops for t in op.inputs}
    for m in statements:
        if m.reduce != "max" or m.target in outside:
            continue
        found = _exp_of_running_max(m, readers(m.target))
        if found is None:
            continue
        e, scale = found
        if e.target in outside:
            return f"{e.target} is read outside the chain"
        if program.tensor(e.target).dtype in ("i8", "i32"):
            # rounded to integers, exp against a smaller max rounds differently: not exact
            return f"{e.target} is an integer tensor: its exp cannot be rescaled exactly"
        rewritten = _rescaled(statements, m, e, scale, readers, outside)
        if isinstance(rewritten, str):
            return rewritten
        first = owner[id(m)]
        if any(_is_mac(s) for s in statements[:statements.index(m)] if owner[id(s)] == first):
            return "the scores and their max are one op"
        return _merged(program, chain, first, *rewritten)
    return "no exp(x - running max) read only by sums in the chain"


def _is_mac(s: Statement) -> bool:
    return s.reduce == "+" and isinstance(s.expr, BinOp) and s.expr.op == "*"


def _exp_of_running_max(m: Statement, readers: list[Statement]) -> tuple[Statement, float] | None:
    """(E, c) where the max statement `m`'s only reader is E = exp(c * (x - M)), c > 0."""
    if len(readers) != 1:
        return None
    (e,) = readers
    if e.reduce is not None or not isinstance(e.expr, Call) or e.expr.fn != "exp" \
            or not all(idx.single_loop for idx in e.target_indices):
        return None
    c = _coefficient(e.expr.args[0], m.target)
    return (e, -c) if c is not None and c < 0 else None


def _coefficient(expr: Expr, tensor: str) -> float | None:
    """c where `expr` is c * tensor[...] + terms not reading `tensor` (one read of it), else None."""
    reads = [a for a in expr.accesses() if a.tensor == tensor]
    if len(reads) != 1:
        return None

    def walk(x: Expr) -> float | None:     # coefficient of the read in x; 0.0: x does not read it
        if isinstance(x, Access):
            return 1.0 if x.tensor == tensor else 0.0
        if isinstance(x, Const):
            return 0.0
        if isinstance(x, Call):
            if x.fn == "neg":
                inner = walk(x.args[0])
                return None if inner is None else -inner
            return 0.0 if all(walk(a) == 0.0 for a in x.args) else None
        if isinstance(x, BinOp):
            a, b = walk(x.lhs), walk(x.rhs)
            if a is None or b is None:
                return None
            if x.op in "+-":
                return a + b if x.op == "+" else a - b
            if x.op == "*":
                if a and isinstance(x.rhs, Const):
                    return a * x.rhs.value
                if b and isinstance(x.lhs, Const):
                    return b * x.lhs.value
                return 0.0 if a == 0.0 and b == 0.0 else None
            if x.op == "/":
                if a == 0.0 and b == 0.0:
                    return 0.0
                return a / x.rhs.value if b == 0.0 and isinstance(x.rhs, Const) and x.rhs.value else None
        return None
    return walk(expr)


def _factors(expr: Expr) -> list[Expr]:
    if isinstance(expr, BinOp) and expr.op == "*":
        return _factors(expr.lhs) + _factors(expr.rhs)
    return [expr]


def _linear_in(s: Statement, tensor: str) -> Access | None:
    """The one read of `tensor` when `s` is a sum of products with that read as a factor."""
    if s.reduce != "+":
        return None
    factors = _factors(s.expr)
    hits = [f for f in factors if isinstance(f, Access) and f.tensor == tensor]
    if len(hits) != 1 or sum(a.tensor == tensor for a in s.expr.accesses()) != 1:
        return None
    return hits[0]


def _through(e: Statement, read: Access, indices: tuple[Affine, ...]) -> tuple[Affine, ...]:
    """`indices` (over e's loops) over the loops of a statement reading e's target as `read`."""
    mapping = {idx.single_loop: r for idx, r in zip(e.target_indices, read.indices)}
    return tuple(i.rename(mapping) for i in indices)


def _per_output(s: Statement, indices: tuple[Affine, ...]) -> bool:
    """Each element `s` writes sees one value at `indices`: they use only its output loops."""
    out = {l.name for l in s.output_loops}
    return all(set(i.loops) <= out for i in indices) and all(idx.single_loop for idx in s.target_indices)


def _rescaled(statements: list[Statement], m: Statement, e: Statement, scale: float, readers, outside
              ) -> tuple[list[Statement], dict[str, str]] | str:
    """(the chain's statements with P = E / Z deferred past its sums and E's sums rescaled,
    {each deferred sum's tensor: the tensor it is the sum for})."""
    m_read = next(a for a in e.reads() if a.tensor == m.target)
    out: list[Statement] = []
    deferred: dict[int, tuple] = {}    # id(a sum over P) -> (P's statement, its read of P, Z's indices there)
    dropped: set[int] = set()
    sums: dict[str, str] = {}
    for s in readers(e.target):
        read = _linear_in(s, e.target)
        if read is not None:
            continue
        if s.reduce is None and isinstance(s.expr, BinOp) and s.expr.op == "/" and s.target not in outside \
                and isinstance(s.expr.lhs, Access) and s.expr.lhs.tensor == e.target \
                and isinstance(s.expr.rhs, Access) and s.expr.rhs.tensor != e.target:
            p, z = s, s.expr.rhs
            if p.expr.lhs.indices != p.target_indices or any(idx.single_loop is None for idx in p.target_indices):
                return f"{p.target} reads {e.target} at other indices"
            for r in readers(p.target):
                read = _linear_in(r, p.target)
                if read is None:
                    return f"{r.target} reads {p.target} other than as a factor of a sum"
                z_idx = _through(p, read, z.indices)
                if not _per_output(r, z_idx):
                    return f"{r.target} sums over the loops of {z.tensor}: its division cannot be deferred"
                deferred[id(r)] = (p, read, z_idx)
            dropped.add(id(p))
            continue
        return f"{s.target} reads {e.target} other than as a factor of a sum"
    for s in statements:
        if id(s) in dropped:
            continue
        if s is e:
            out.append(replace(e, rescale=Rescale(m.target, m_read.indices, scale)))
        elif id(s) in deferred:
            p, read, z_idx = deferred[id(s)]
            e_read = Access(e.target, read.indices)
            expr = _swap(s.expr, read, e_read)
            total = _fresh(f"{s.target}_sum", {x.target for x in statements})
            sums[total] = s.target
            r_idx = _through(e, e_read, m_read.indices)
            if not _per_output(s, r_idx):
                return f"{s.target} sums over the loops of {m.target}"
            # P's domain, seen from the sum's points: P is 0 outside it, so the deferred sum
            # adds only the terms inside it
            seen = dict(zip((i.single_loop for i in p.target_indices), read.indices))
            domain = s.domain + tuple(c.rename(seen) for c in p.domain if c.rename(seen) not in s.domain)
            summed = replace(s, target=total, expr=expr, rescale=Rescale(m.target, r_idx, scale), span=None,
                             domain=domain)
            out.append(replace(summed, domain=domain + zero_outside(summed, {e.target: e})))   # ... and E's
            z = p.expr.rhs
            outs = s.output_loops
            out.append(Statement(s.target, s.target_indices, None, outs,
                                 BinOp("/", Access(total, s.target_indices), Access(z.tensor, z_idx)), s.span))
        elif _linear_in(s, e.target) is not None:
            read = _linear_in(s, e.target)
            r_idx = _through(e, read, m_read.indices)
            if not _per_output(s, r_idx):
                return f"{s.target} sums over the loops of {m.target}: it cannot be rescaled row by row"
            # E is 0 outside its domain (a causal mask's): the sum adds only the terms inside it
            domain = s.domain + zero_outside(s, {e.target: e})
            out.append(replace(s, rescale=Rescale(m.target, r_idx, scale), domain=domain))
        else:
            out.append(s)
    if not any(s.rescale and _is_mac(s) for s in out):
        return "no weighted sum of the probabilities follows the softmax"
    return out, sums


def _swap(expr: Expr, old: Access, new: Access) -> Expr:
    return substitute(expr, lambda x: new if x == old else None)


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name


def _merged(program: Program, chain: list[Op], first: str, statements: list[Statement], sums: dict[str, str]
            ) -> tuple[Program, str]:
    """`program` with the chain's ops from `first` on made one op running their part of the
    rewritten `statements` (the chain's, in order); tensors no statement uses any more (the
    probabilities P) are dropped, the deferred sums added as the op's temps."""
    start = [op.name for op in chain].index(first)
    merged_ops, names = chain[start:], {op.name for op in chain[start:]}
    own = tuple(statements[sum(len(op.statements) for op in chain[:start]):])
    last = merged_ops[-1]
    written = {s.target for s in own}
    inputs = tuple(dict.fromkeys(a.tensor for s in own for a in s.reads() if a.tensor not in written))
    temps = tuple(t for t in dict.fromkeys(s.target for s in own) if t != last.output)
    op = Op("comprehension", "contraction", inputs, last.output, (("online_softmax", True),), own, temps, last.span)
    ops = tuple(op if o is last else o for o in program.ops if o.name not in names or o is last)
    used = {t.name for t in program.inputs} | set(program.outputs)
    used |= {t for o in ops for s in o.statements for t in (s.target, *(a.tensor for a in s.reads()))}
    tensors = [t if t.name not in temps else replace(t, role="temp") for t in program.tensors if t.name in used]
    for total, of in sums.items():         # a deferred sum: the shape and dtype of what it sums for
        tensors.append(replace(program.tensor(of), name=total, role="temp", span=None))
    # (recorded, so that a scaled twin of the source can replay it: `verify.equivalent_at_scale`)
    rewrites = program.rewrites + (("online_softmax", tuple(op.name for op in chain)),)
    return replace(program, tensors=tuple(tensors), ops=ops, rewrites=rewrites), last.output
