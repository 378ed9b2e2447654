"""Split-K decode (FlashDecoding): a softmax-weighted sum over a long axis split in chunks.

One decode step attends one query (per head) over the whole KV cache: the softmax rows are
few, so a kernel that parallelises over them leaves most of the machine idle while one unit
walks the cache. Splitting the cache axis t = U*c + u into C chunks makes the chunks parallel
work too; each chunk keeps its own softmax statistics and a second, small kernel combines
them (what FlashDecoding does).

When it applies (statement dataflow, op names do not matter):
1. `M max= X[.., t, ..]` reduces over one loop t (extent T), its only reader
   `E = exp(k * (.. - M))` (k > 0, `online_softmax._exp_of_running_max`);
2. E's readers are a plain sum `Z += E` and one weighted sum `O += E * V..` over t with one
   value loop v (O's output loop E does not have, extent D) — or `P = E / Z` read by that
   weighted sum of P, whose division is then deferred: `O = (the split sum of E * V) / Z`;
3. M, E, Z and O are each an op of one statement; M and E are not program outputs;
4. the softmax has fewer rows (M's points) than the array takes at once: the PE rows of
   every systolic array, or every SIMT/vector lane of every unit. Prefill fills it: the
   rule is not tried there.

What it produces (exact for any T: the chunks' domain `U*c + u < T` drops the tail), with
the packing that lets the chunk kernel have one output (the combine needs each chunk's max,
sum and weighted sum; a kernel's computed-at tensors cannot leave it):

    Mc[c, ..]      max= X[.., U*c + u, ..]                        where U*c + u < T
    Ec[c, .., u]    = exp(k * (.. - Mc[c, ..]))                  (X read at U*c + u)
    Oc[c, .., v]   += Ec[c, .., u] * select(v < D, V[.., U*c + u, v], v == D)    v < D + 2
    Pc[c, .., v]    = select(v == D + 1, Mc[c, ..], Oc[c, .., v])      # [o_c, l_c, m_c]
    M[..]          max= Pc[c, .., D + 1]
    W[c, ..]        = exp(k * (Pc[c, .., D + 1] - M[..]))
    Z[..]          += W[c, ..] * Pc[c, .., D]
    O[.., v]       += W[c, ..] * Pc[c, .., v]                     v < D

Column D of Oc sums Ec alone (the chunk's l_c) and column D + 1, 0 there, takes the chunk's
max (a read of V past column D, out of range or into the next head, is discarded by the
select). Readers of Z and O (`Y = O / Z`) are unchanged. The scores X and their producers
along t (`S += q * K[.., t, ..]`, a mask) are chunked the same way, so that the chunk kernel
computes them at its tiles.

`split_k(program, chunks)` is the rewrite (this module); `rules/split_k_step.py` is the
pipeline step that chooses the chunk count with the cost model and keeps the rewrite only
where it pays and verifies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.program import (Access, Affine, BinOp, Call, Const, IndexValue, Loop, Op, Program, Statement, Tensor,
                          rename_loops, substitute)
from .online_softmax import _exp_of_running_max, _factors, _linear_in

RULE = "split_k"
NO_SOFTMAX = "no max over a loop read only by exp(x - max)"


@dataclass(frozen=True)
class Match:
    """The softmax-weighted reduction `split_k` rewrites: its statements and loops."""

    m: Statement          # M max= X over t
    e: Statement          # E = exp(k * (.. - M))
    z: Statement          # Z += E
    o: Statement          # O += E * V
    scale: float          # k
    t_m: str              # t in M's, E's, Z's and O's loops
    t_e: str
    t_z: str
    t_o: str
    v: str                # O's value loop
    extent: int           # T
    p: Statement | None = None   # P = E / Z where O sums P * V (the division deferred past the split)

    @property
    def weighted_read(self) -> Access:
        """O's read of the probabilities (E, or P where they are normalised first)."""
        return _linear_in(self.o, (self.p or self.e).target)

    @property
    def rows(self) -> int:
        """The softmax's rows: the points of M."""
        return math.prod(l.extent for l in self.m.output_loops)


def find(program: Program) -> Match | str:
    """The first softmax-weighted reduction `split_k` can rewrite, or why there is none."""
    why = NO_SOFTMAX
    single = {op.name: op.statements[0] for op in program.ops if len(op.statements) == 1}
    for m in single.values():
        if m.reduce != "max" or len(m.reduction_loops) != 1:
            continue
        readers = [st for op in program.ops for st in op.statements if any(a.tensor == m.target for a in st.reads())]
        found = _exp_of_running_max(m, readers)
        if found is None:
            continue
        e, scale = found
        matched = _match(program, single, m, e, scale)
        if isinstance(matched, Match):
            return matched
        why = matched
    return why


def _match(program: Program, single: dict, m: Statement, e: Statement, scale: float) -> Match | str:
    if e.target not in single or m.target in program.outputs or e.target in program.outputs:
        return f"{m.target} or {e.target} is a program output or shares its op"
    t_m = m.reduction_loops[0].name
    x_m = next(a for a in m.reads() if t_m in {l for i in a.indices for l in i.loops})
    x_e = next((a for a in e.reads() if a.tensor == x_m.tensor), None)
    if x_e is None:
        return f"{e.target} does not read {x_m.tensor}"
    t_e = next((i.single_loop for j, i in zip(x_m.indices, x_e.indices) if j.single_loop == t_m), None)
    if t_e is None or t_e not in {idx.single_loop for idx in e.target_indices}:
        return f"{e.target} does not keep {m.target}'s loop {t_m}"
    t_dim = [idx.single_loop for idx in e.target_indices].index(t_e)
    readers = [st for op in program.ops for st in op.statements if any(a.tensor == e.target for a in st.reads())]
    plain, weighted, normalised = [], [], None
    for st in readers:
        read = _linear_in(st, e.target)
        if read is None and normalised is None and _divides(st, e, single, program):
            normalised = st            # P = E / Z: its one reader is the weighted sum
            read, st = _linear_in(_only_reader(program, st.target), st.target), _only_reader(program, st.target)
        if read is None or st.target not in single or len(st.reduction_loops) != 1:
            return f"{st.target} reads {e.target} other than as one sum over {t_e}"
        t_s = read.indices[t_dim].single_loop
        if t_s != st.reduction_loops[0].name:
            return f"{st.target} does not sum {e.target} over {t_e}"
        (plain if st.expr == read and st is not normalised else weighted).append((st, t_s))
    if len(plain) != 1 or len(weighted) != 1:
        return f"{e.target} is not read by one plain sum and one weighted sum"
    (z, t_z), (o, t_o) = plain[0], weighted[0]
    if normalised is not None and normalised.expr.rhs.tensor != z.target:
        return f"{normalised.target} divides by {normalised.expr.rhs.tensor}, not by the sum {z.target}"
    o_read = _linear_in(o, (normalised or e).target)
    rows = {i.single_loop for i in o_read.indices}
    values = [l for l in o.output_loops if l.name not in rows]
    if len(values) != 1:
        return f"{o.target} has {len(values)} value loops (one expected)"
    v = values[0]
    return Match(m, e, z, o, scale, t_m, t_e, t_z, t_o, v.name, m.reduction_loops[0].extent, normalised)


def replaced_ops(match: Match) -> tuple[str, ...]:
    """The ops the split replaces, in program order."""
    middle = (match.p.target,) if match.p is not None else ()
    return (match.m.target, match.e.target, match.z.target) + middle + (match.o.target,)


def _divides(st: Statement, e: Statement, single: dict, program: Program) -> bool:
    """`st` is P = E / Z[..] at E's own indices, in an op of its own, not an output, read by
    exactly one statement."""
    expr = st.expr
    return (st.reduce is None and st.target in single and st.target not in program.outputs and not st.domain
            and isinstance(expr, BinOp) and expr.op == "/" and isinstance(expr.lhs, Access)
            and expr.lhs.tensor == e.target and expr.lhs.indices == st.target_indices
            and isinstance(expr.rhs, Access) and expr.rhs.tensor != e.target
            and len(program.readers(st.target)) == 1 and _only_reader(program, st.target) is not None)


def _only_reader(program: Program, tensor: str) -> Statement | None:
    readers = [s for op in program.readers(tensor) for s in op.statements if any(a.tensor == tensor for a in s.reads())]
    return readers[0] if len(readers) == 1 else None


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def split_k(program: Program, chunks: int, match: Match | None = None) -> Program | str:
    """`program` with its softmax-weighted reduction split in `chunks` chunks of the reduced
    loop, then combined (module docstring); or why it does not apply."""
    match = match or find(program)
    if isinstance(match, str):
        return match
    done = split_with_names(program, chunks, match)
    return done if isinstance(done, str) else done[0]


def split_with_names(program: Program, chunks: int, match: Match):
    """(the split program, {"m", "e", "o", "packed", "weight": the new tensors' names}), or why not."""
    T = match.extent
    if not 2 <= chunks <= T:
        return f"{chunks} chunks of {T} positions"
    U = -(-T // chunks)
    chunks = -(-T // U)                 # no empty chunk: every chunk's max is finite
    taken = {t.name for t in program.tensors}
    names = {k: _fresh(f"{getattr(match, k).target}_{suffix}", taken)
             for k, suffix in (("m", "chunk_max"), ("e", "chunk_exp"), ("o", "chunk_sum"))}
    packed = _fresh(f"{match.o.target}_chunks", taken | set(names.values()))
    weight = _fresh(f"{match.o.target}_weight", taken | set(names.values()) | {packed})
    every = {l for st in (match.m, match.e, match.z, match.o) for l in st.loop_names}
    D = dict((l.name, l.extent) for l in match.o.loops)[match.v]
    upstream = _upstream(program, match)
    every |= {l for st, _, _ in upstream.values() for l in st.loop_names}
    c, u = _fresh("c", every), _fresh("u", every | {"c"})
    chunk = Loop(c, chunks)
    moved = {name: (name, dim) for name, (_, _, dim) in upstream.items()}
    rewritten = {}
    for name, (st, t, dim) in upstream.items():
        at, loops, domain = _chunked(st, t, c, u, chunks, U, T)
        target = (Affine.var(c),) + tuple(Affine.var(u) if j == dim else i for j, i in enumerate(st.target_indices))
        rewritten[name] = replace(st, target_indices=target, loops=_ordered(loops, st, c, u),
                                  expr=_reindex(st.expr, t, moved, c, u, U), domain=domain)
    statements = _chunk_statements(match, names, moved, c, u, chunks, U, D)
    mc, ec, oc = statements
    pc = _packed(match, names, packed, c, chunks, D)
    if match.p is not None:
        names["o_sum"] = _fresh(f"{match.o.target}_sum", taken | set(names.values()) | {packed, weight})
    combine = _combine(match, names, packed, weight, chunk, D)
    tensor = lambda name, st: Tensor(name, program.tensor(match.o.target).dtype,  # noqa: E731
                                     tuple(_extent(st, i) for i in st.target_indices), "intermediate")
    new_tensors = [tensor(names["m"], mc), tensor(names["e"], ec), tensor(names["o"], oc), tensor(packed, pc),
                   tensor(weight, combine[1])]
    new_ops = {match.m.target: [mc, ec, oc, pc, combine[0], combine[1]],
               match.e.target: [], match.z.target: [combine[2]], match.o.target: combine[3:]}
    if match.p is not None:
        new_ops[match.p.target] = []
        new_tensors.append(replace(program.tensor(match.o.target), name=names["o_sum"], role="intermediate", span=None))
    ops = []
    for op in program.ops:
        if op.name in rewritten:
            ops.append(replace(op, statements=(rewritten[op.name],)))
            continue
        if op.name not in new_ops:
            ops.append(op)
            continue
        for st in new_ops[op.name]:
            reads = tuple(dict.fromkeys(a.tensor for a in st.reads()))
            kind = "contraction" if st.reduce == "+" and st.reduction_loops else (
                "reduction" if st.reduce else "elementwise")
            ops.append(Op("comprehension", kind, reads, st.target, (), (st,), (), op.span))
    keep = {t.name for t in program.tensors} - {match.e.target} - ({match.p.target} if match.p else set())
    tensors = [t if t.name not in rewritten else
               replace(t, shape=tuple(_extent(rewritten[t.name], i) for i in rewritten[t.name].target_indices))
               for t in program.tensors if t.name in keep] + new_tensors
    rewrites = program.rewrites + ((RULE, replaced_ops(match)),)
    return (replace(program, tensors=tuple(tensors), ops=tuple(ops), rewrites=rewrites),
            dict(names, packed=packed, weight=weight))


def replay(program: Program, ops: list[str]):
    """The split replayed on a scaled twin (`verify.equivalent_at_scale`): (split program,) or
    why not. The twin's cache is short; 3 chunks (2 below 3 positions) check the same
    structure, a tail chunk cut by the domain included where 3 does not divide it."""
    match = find(program)
    if isinstance(match, str):
        return match
    if list(replaced_ops(match)) != list(ops):
        return "the twin's softmax is not the one split"
    done = split_k(program, min(3, max(2, match.extent)), match)
    return done if isinstance(done, str) else (done,)


def _extent(st: Statement, index: Affine) -> int:
    loop = index.single_loop
    return st.extents[loop] if loop else index.const + 1


def _chunked(st: Statement, t: str, c: str, u: str, chunks: int, U: int, T: int):
    """(loop mapping t -> U*c + u, the statement's loops with t replaced by c first and u
    last, its domain renamed with the tail cut)."""
    at = {t: Affine.of({c: U, u: 1})}
    loops = [Loop(c, chunks)] + [l for l in st.loops if l.name != t] + [Loop(u, U)]
    domain = tuple(a.rename(at) for a in st.domain) + (Affine.of({c: -U, u: -1}, T - 1),)
    return at, loops, domain


def _chunk_statements(match: Match, names: dict, moved: dict, c: str, u: str, chunks: int, U: int, D: int):
    m, e, o, T = match.m, match.e, match.o, match.extent
    at, loops, domain = _chunked(m, match.t_m, c, u, chunks, U, T)
    mc = Statement(names["m"], (Affine.var(c),) + m.target_indices, "max", _ordered(loops, m, c),
                   _reindex(m.expr, match.t_m, moved, c, u, U), domain=domain)
    at, loops, domain = _chunked(e, match.t_e, c, u, chunks, U, T)
    m_read = next(a for a in e.reads() if a.tensor == m.target)
    mc_read = Access(names["m"], (Affine.var(c),) + m_read.indices)
    expr = substitute(_reindex(e.expr, match.t_e, moved, c, u, U),
                      lambda x: mc_read if isinstance(x, Access) and x.tensor == m.target else None)
    e_target = (Affine.var(c),) + tuple(Affine.var(u) if i.single_loop == match.t_e else i for i in e.target_indices)
    ec = Statement(names["e"], e_target, None, _ordered(loops, e, c, u), expr, domain=domain)
    at, loops, domain = _chunked(o, match.t_o, c, u, chunks, U, T)
    loops = [Loop(l.name, D + 2) if l.name == match.v else l for l in loops]
    e_read = match.weighted_read
    t_dim = [i.single_loop for i in e_read.indices].index(match.t_o)
    with_e = dict(moved, **{e_read.tensor: (names["e"], t_dim)})
    ec_read = _reindex(e_read, match.t_o, with_e, c, u, U)
    rest = [f for f in _factors(o.expr) if f != e_read]
    value = _reindex(_product(rest), match.t_o, moved, c, u, U)
    column = IndexValue(Affine.var(match.v))
    # the value below column D; 1 at D (the chunk's sum l_c); 0 at D + 1 (the max goes there)
    packed = Call("select", (Call("less", (column, Const(float(D)))), value, Call("equal", (column, Const(float(D))))))
    oc = Statement(names["o"], (Affine.var(c),) + o.target_indices, "+", _ordered(loops, o, c),
                   BinOp("*", ec_read, packed), domain=domain)
    return mc, ec, oc


def _reindex(expr, t: str, moved: dict, c: str, u: str, U: int):
    """`expr` with t = U*c + u: a read of a chunked tensor ({name: (new name, its t
    dimension)}) at t becomes a read at [c, .., u, ..]; any other use of t becomes U*c + u."""
    def chunked(x):
        if isinstance(x, Access) and x.tensor in moved:
            name, dim = moved[x.tensor]
            if x.indices[dim].single_loop == t:
                return Access(name, (Affine.var(c),) + tuple(Affine.var(u) if j == dim else i
                                                             for j, i in enumerate(x.indices)))
        return None
    return rename_loops(substitute(expr, chunked), {t: Affine.of({c: U, u: 1})})


def _upstream(program: Program, match: Match) -> dict:
    """{tensor: (its statement, the statement's loop along t, the tensor's dimension along
    t)} for the scores the softmax reads and their producers along t, each read only by the
    softmax or by other such producers, not an output, its op of one statement and not an
    in-place update: what the chunk kernel computes at its tiles, chunked like the softmax."""
    x = next(a for a in match.m.reads() if match.t_m in {l for i in a.indices for l in i.loops})
    dims = [i.single_loop for i in x.indices]
    if dims.count(match.t_m) != 1:
        return {}
    found: dict = {}
    frontier = [(x.tensor, dims.index(match.t_m))]
    softmax = {match.m.target, match.e.target}
    while frontier:
        name, dim = frontier.pop()
        op = program.producer(name)
        if op is None or name in found or name in program.outputs or len(op.statements) != 1:
            continue
        st = op.statements[0]
        t = st.target_indices[dim].single_loop
        if t is None or st.in_place or st.rescale:
            continue
        found[name] = (st, t, dim)
        for a in st.reads():
            hits = [j for j, i in enumerate(a.indices) if i.single_loop == t]
            if len(hits) == 1 and not a.indirect and sum(t in i.loops for i in a.indices) == 1:
                frontier.append((a.tensor, hits[0]))
    # keep only producers every reader of which is the softmax or another kept producer
    changed = True
    while changed:
        changed = False
        for name in list(found):
            readers = {r.name for r in program.readers(name)}
            if not readers <= softmax | set(found):
                del found[name]
                changed = True
    return found


def _ordered(loops: list[Loop], st: Statement, c: str, u: str | None = None) -> tuple[Loop, ...]:
    """Output loops first in target order (c, then the statement's), then reductions."""
    outs = [c] + [i.single_loop for i in st.target_indices if i.single_loop]
    if u is not None:
        outs = [c] + [u if i.single_loop not in {l.name for l in loops} else i.single_loop
                      for i in st.target_indices]
    by = {l.name: l for l in loops}
    first = [by[n] for n in outs if n in by]
    return tuple(first + [l for l in loops if l.name not in outs])


def _product(factors: list):
    out = factors[0]
    for f in factors[1:]:
        out = BinOp("*", out, f)
    return out


def _packed(match: Match, names: dict, packed: str, c: str, chunks: int, D: int) -> Statement:
    """Pc[c, .., v] = select(v == D + 1, Mc[c, ..], Oc[c, .., v]) over O's output loops."""
    o, m = match.o, match.m
    rows = _rows_in_o(match)
    loops = (Loop(c, chunks),) + tuple(Loop(l.name, D + 2) if l.name == match.v else l for l in o.output_loops)
    target = (Affine.var(c),) + o.target_indices
    mc = Access(names["m"], (Affine.var(c),) + tuple(i.rename(rows) for i in m.target_indices))
    is_max = Call("equal", (IndexValue(Affine.var(match.v)), Const(float(D + 1))))
    return Statement(packed, target, None, loops, Call("select", (is_max, mc, Access(names["o"], target))))


def _rows_in_o(match: Match) -> dict:
    """{M's output loop: the O loop over the same softmax row}, through E's dimensions."""
    e, m, o = match.e, match.m, match.o
    x_m = next(a for a in m.reads() if match.t_m in {l for i in a.indices for l in i.loops})
    x_e = next(a for a in e.reads() if a.tensor == x_m.tensor)
    m_to_e = {a.single_loop: b.single_loop for a, b in zip(x_m.indices, x_e.indices) if a.single_loop}
    o_read = match.weighted_read
    e_to_o = {a.single_loop: b.single_loop for a, b in zip(e.target_indices, o_read.indices)}
    return {k: Affine.var(e_to_o[v]) for k, v in m_to_e.items() if v in e_to_o}


def _rows_in_o_for_z(match: Match) -> dict:
    e, z, o = match.e, match.z, match.o
    z_read, o_read = _linear_in(z, e.target), match.weighted_read
    return {a.single_loop: Affine.var(b.single_loop) for a, b in zip(z_read.indices, o_read.indices)}


def _combine(match: Match, names: dict, packed: str, weight: str, chunk: Loop, D: int) -> list[Statement]:
    """M, W, Z and O from the chunks' packed [o_c, l_c, m_c] (module docstring)."""
    m, z, o = match.m, match.z, match.o
    c = Affine.var(chunk.name)
    rows = [l for l in o.output_loops if l.name != match.v]
    m_rows = _rows_in_o(match)
    m_target = tuple(i.rename(m_rows) for i in m.target_indices)
    z_target = tuple(i.rename(_rows_in_o_for_z(match)) for i in z.target_indices)
    at = lambda col: Access(packed, (c,) + tuple(Affine.constant(col) if i.single_loop == match.v else i  # noqa: E731
                                                 for i in o.target_indices))
    row_loops = tuple(rows)
    w_target = (c,) + tuple(i for i in o.target_indices if i.single_loop != match.v)
    m_loops = tuple(l for l in rows if any(l.name in i.loops for i in m_target))
    new_m = Statement(m.target, m_target, "max", m_loops + (chunk,), at(D + 1))
    w = Statement(weight, w_target, None, (chunk,) + row_loops,
                  Call("exp", (BinOp("*", Const(match.scale), BinOp("-", at(D + 1), Access(m.target, m_target))),)))
    z_loops = tuple(l for l in rows if any(l.name in i.loops for i in z_target))
    new_z = Statement(z.target, z_target, "+", z_loops + (chunk,), BinOp("*", Access(weight, w_target), at(D)),
                      span=z.span)
    o_loops = tuple(l for l in o.output_loops) + (chunk,)
    total = names.get("o_sum", o.target)
    new_o = Statement(total, o.target_indices, "+", o_loops,
                      BinOp("*", Access(weight, w_target), Access(packed, (c,) + o.target_indices)), span=o.span)
    if match.p is None:
        return [new_m, w, new_z, new_o]
    # P = E / Z deferred: the weighted sum of E, then divided by Z (its index seen from O)
    seen = {i.single_loop: r for i, r in zip(match.p.target_indices, match.weighted_read.indices)}
    z_read = match.p.expr.rhs
    divide = Statement(o.target, o.target_indices, None, tuple(o.output_loops),
                       BinOp("/", Access(total, o.target_indices), Access(z_read.tensor, tuple(
                           i.rename(seen) for i in z_read.indices))), span=o.span)
    return [new_m, w, new_z, new_o, divide]
