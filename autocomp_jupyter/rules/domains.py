"""Implied domains: a sum of a factor that is 0 outside its domain reduces over that domain.

`E[s, t] = exp(...) where t <= s` is 0 above the diagonal, so `Z[s] += E[s, t]` adds only
zeros there: Z's domain may be cut by the same relation, exactly, and its empty tiles are
then skipped by the model, the simulator and the C like any `where` domain's (a causal
softmax's row sum over the triangle, not the square). `implied_domains` rewrites a program
so (the relations from `accel.cost.domain.zero_outside`); the fusion pass applies it before
grouping, checked by the interpreter, and a scaled twin replays it (`verify`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ..accel.cost.domain import zero_outside
from ..ir.program import Program


def implied_domains(program: Program, ops: list[str] | None = None) -> tuple[Program, list[str]] | str:
    """(the program with each sum's implied relations added to its domain, the ops changed),
    only in `ops` where given; or why nothing changes. A factor counts only where one
    statement writes its tensor (a tensor written in parts is not 0 outside any one)."""
    counts = Counter(st.target for op in program.ops for st in op.statements)
    writers = {st.target: st for op in program.ops for st in op.statements if counts[st.target] == 1}
    changed, rewritten = [], []
    for op in program.ops:
        if ops is None or op.name in ops:
            statements = tuple(replace(st, domain=st.domain + extra) if (extra := zero_outside(st, writers)) else st
                               for st in op.statements)
            if any(a is not b for a, b in zip(statements, op.statements)):
                changed.append(op.name)
                op = replace(op, statements=statements)
        rewritten.append(op)
    if not changed:
        return "no sum of a factor that is 0 outside its domain"
    rewrites = program.rewrites + (("implied_domains", tuple(changed)),)
    return replace(program, ops=tuple(rewritten), rewrites=rewrites), changed
