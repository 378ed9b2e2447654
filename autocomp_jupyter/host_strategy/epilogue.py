"""The elementwise statements a contraction's store applies (`fused_epilogue`), each computed
at its point over the contraction's loops (`epilogue_point`): a conv's batch norm and ReLU
written where the conv stores its output, never stored and read back.
"""
from __future__ import annotations

import math

from ..ir.program import Access, Affine
from ..ir.schedule import Kernel
from .access import in_range, substitute


def epilogue_point(kernel: Kernel, index: int, s: int) -> dict[str, Affine] | None:
    """Statement `s`'s loops as indices over the contraction `index`'s loops, when `s` is an
    elementwise statement over the contraction's output shape (no reduction, its target
    indexed by its own loops, each once, in order: Z[n, c, h, w] = ...): its point
    Z[x] is then computed where the contraction stores Y[x] (a grouped convolution's
    channel c becomes fo + 10*g). None otherwise."""
    stmt, st = kernel.statements[index], kernel.statements[s]
    if st.reduce is not None or kernel.tensor(st.target).shape != kernel.tensor(stmt.target).shape:
        return None
    point: dict[str, Affine] = {}
    for idx, at in zip(st.target_indices, stmt.target_indices):
        loop = idx.single_loop
        if loop is None or loop in point:
            return None
        point[loop] = at
    return point if set(point) == set(st.loop_names) else None


def fused_epilogue(kernel: Kernel, index: int, out_loops: list[str]) -> tuple[int, ...]:
    """Statements right after the contraction `index` that its store can apply: elementwise
    over its output (`epilogue_point`), where the contraction writes every element of its
    target once, reading its result and earlier fused results only at the point being
    stored, anything else in range."""
    stmt = kernel.statements[index]
    ext = stmt.extents
    target = Access(stmt.target, stmt.target_indices)
    if math.prod(ext[l] for l in out_loops) != kernel.tensor(stmt.target).size or not all(in_range(kernel, target, ext)):
        return ()
    point = {stmt.target: tuple(stmt.target_indices)}
    fused: list[int] = []
    for s in range(index + 1, len(kernel.statements)):
        st = kernel.statements[s]
        at = epilogue_point(kernel, index, s)
        if at is None:
            break
        ok = True
        for access in st.reads():
            moved = substitute(access, at)
            if access.tensor in point:
                ok = moved.indices == point[access.tensor]
            elif any(kernel.statements[w].target == access.tensor for w in range(index, len(kernel.statements))):
                ok = False    # written by a statement not fused (or later): keep program order
            else:
                ok = all(in_range(kernel, moved, ext))
            if not ok:
                break
        if not ok or st.target in point:
            break
        point[st.target] = tuple(substitute(Access(st.target, st.target_indices), at).indices)
        fused.append(s)
    return tuple(fused)
