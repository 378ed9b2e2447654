"""In-place updates: a tensor written functionally as another with one row replaced.

A KV cache is updated by writing the new token's key at its position; a program written in
single assignment says so functionally,

    K2[h, t, d] = select(equal(t, pos[0]), kn[h, d], Kc[h, t, d])

— K2 is Kc with row `pos[0]` of loop t replaced. Where nothing else reads Kc, K2 can live in
Kc's storage and the update writes that one row: `mark_in_place_updates` finds such
statements (the old tensor read at the target's own indices, the row chosen by comparing the
loop with a value that does not depend on it, the old tensor an input no other statement
reads) and marks them `ir.program.InPlace`. The mark changes no value: the interpreter, isl
and the C run the statement as written; the cost model, the simulator and the limit charge
one row of it (every tile but the one holding the row is skipped), and the rule log says so.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.program import Access, Call, Expr, IndexValue, InPlace, Program, Statement

RULE = "in_place_update"


def _row_choice(expr: Expr, target_indices) -> tuple[str, Expr, Expr, Access] | None:
    """(loop, the row's value, the new value, the old read) where `expr` is
    select(equal(loop, value), new, old[target's indices]) (either side of equal)."""
    if not (isinstance(expr, Call) and expr.fn == "select" and isinstance(expr.args[0], Call)
            and expr.args[0].fn == "equal"):
        return None
    test, new, old = expr.args
    a, b = test.args
    if isinstance(b, IndexValue):
        a, b = b, a
    if not isinstance(a, IndexValue) or a.index.single_loop is None:
        return None
    loop = a.index.single_loop
    moves_with_loop = any(isinstance(e, IndexValue) and loop in e.index.loops
                          or isinstance(e, Access) and any(loop in i.loops for i in e.indices) for e in b.walk())
    if moves_with_loop or not isinstance(old, Access) or old.indirect or old.indices != tuple(target_indices):
        return None
    return loop, b, new, old


def mark_in_place_updates(program: Program) -> tuple[Program, list[dict]]:
    """`program` with each functional row update of a tensor nothing else reads marked
    `InPlace`, and the rule log entries that say so."""
    from ..passes import rule_entry

    readers: dict[str, int] = {}
    for st in program.statements:
        for tensor in {a.tensor for a in st.reads()}:
            readers[tensor] = readers.get(tensor, 0) + 1
    log, ops = [], []
    changed = False
    for op in program.ops:
        statements = []
        for st in op.statements:
            found = _row_choice(st.expr, st.target_indices) if st.reduce is None and not st.domain else None
            if found is not None:
                loop, _, _, old = found
                source = program.tensor(old.tensor)
                if source.role in ("input", "param") and readers.get(old.tensor) == 1 \
                        and source.shape == program.tensor(st.target).shape and source.dtype == program.tensor(st.target).dtype:
                    st = replace(st, in_place=InPlace(old.tensor, loop))
                    changed = True
                    extent = st.extents[loop]
                    log.append(rule_entry(RULE, "fusion", [op.name], True,
                                          f"{st.target} is {old.tensor} with one row of {loop} replaced and nothing "
                                          f"else reads {old.tensor}: {st.target} takes {old.tensor}'s storage and the "
                                          f"update writes 1 row of {extent} ({_row_bytes(program, st, loop)} bytes), "
                                          "not a copy"))
            statements.append(st)
        ops.append(replace(op, statements=tuple(statements)) if statements != list(op.statements) else op)
    return (program.with_ops(ops) if changed else program), log


def _row_bytes(program: Program, st: Statement, loop: str) -> int:
    tensor = program.tensor(st.target)
    return tensor.nbytes // max(1, st.extents[loop])
