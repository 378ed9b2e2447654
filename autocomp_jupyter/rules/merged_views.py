"""Reading through a view whose target merges loops: the reader's loop split to match.

A reshape after a transpose (ShuffleNet's channel shuffle, a window partition's reverse)
folds into a copy whose target index merges several loops into one dimension as a
mixed-radix number: `Y[n, 2*a0 + a1, h, w] = X[n, a0 + 58*a1, h, w]` (a0 < 58, a1 < 2).
No affine map takes a reader's channel back to (a0, a1), so the view cannot be substituted
as it stands. The reader's loop over that dimension can be split instead, a change of
variables of its own iteration space: `c = 2*b0 + b1` (b0 < 29, b1 < 2) turns a read of
`Y[n, c + 58, h, w]` into one of `Y[n, 2*b0 + b1 + 58, h, w]`, whose digits are the view's
loops (a0 = b0 + 29, a1 = b1), and the view folds as any other (`fusion.is_view`).

A split is possible where the reader's index on the merged dimension is one loop (plus an
offset) used nowhere else in that index list, and the loop's extent and the offset are both
whole multiples of the inner digits' span (the product of every extent but the outermost's),
so the split loops form a box. The reader computes the same values at the same points.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..ir.program import Access, Affine, Loop, Statement, rename_loops


def radix(index: Affine, extents: dict[str, int]) -> list[tuple[str, int]] | None:
    """The loops of a target index that is a mixed-radix number, innermost first, with their
    coefficients (1, e1, e1*e2, ...; no offset), or None. A single loop is a one-digit number."""
    if index.const != 0 or not index.terms or (len(index.terms) > 1 and any(extents[l] < 2 for l in index.loops)):
        return None
    digits, stride = [], 1
    for loop, coeff in sorted(index.terms, key=lambda t: t[1]):
        if coeff != stride:
            return None
        digits.append((loop, coeff))
        stride *= extents[loop]
    return digits


def view_digits(view: Statement) -> list[list[tuple[str, int]]] | None:
    """Per target dimension of a copy, its radix digits, when every loop of the copy is a
    digit of exactly one dimension (a bijection of its box onto the target), else None."""
    digits = [radix(i, view.extents) for i in view.target_indices]
    if any(d is None for d in digits):
        return None
    used = [loop for d in digits for loop, _ in d]
    return digits if len(used) == len(set(used)) == len(view.loops) else None


def _split_plan(stmt: Statement, view: Statement, digits) -> dict[str, tuple[int, int]] | None:
    """{reader loop: (dimension, offset)} for the loops `stmt` must split to read `view`'s
    target through its merged dimensions, or None when some read cannot be split."""
    plan: dict[str, tuple[int, int]] = {}
    extents = stmt.extents
    for access in (a for a in stmt.reads() if a.tensor == view.target):
        for dim, (index, dims) in enumerate(zip(access.indices, digits)):
            if len(dims) == 1:
                continue
            loop = next(iter(index.loops), None)
            if len(index.terms) != 1 or index.terms[0][1] != 1:
                return None
            if any(loop in other.loops for k, other in enumerate(access.indices) if k != dim):
                return None
            inner = math.prod(view.extents[name] for name, _ in dims[:-1])
            if index.const % inner or extents[loop] % inner or plan.get(loop, (dim, index.const)) != (dim, index.const):
                return None
            plan[loop] = (dim, index.const)
    if plan and (stmt.rescale is not None or stmt.in_place is not None):
        return None
    return plan


def splittable(stmt: Statement, view: Statement) -> bool:
    """Whether every read of `view`'s target in `stmt` can be made to read its digits."""
    digits = view_digits(view)
    return digits is not None and _split_plan(stmt, view, digits) is not None


def split_for(stmt: Statement, view: Statement) -> Statement:
    """`stmt` with each loop indexing a merged dimension of `view`'s target split into one
    loop per digit (outermost first, in the loop's place); unchanged where none is merged.
    The caller checks `splittable` first."""
    digits = view_digits(view)
    plan = _split_plan(stmt, view, digits) if digits is not None else None
    if not plan:
        return stmt
    taken = set(stmt.loop_names)
    loops: list[Loop] = []
    mapping: dict[str, Affine] = {}
    for l in stmt.loops:
        if l.name not in plan:
            loops.append(l)
            continue
        dims = digits[plan[l.name][0]]
        inner = math.prod(view.extents[name] for name, _ in dims[:-1])
        new = []
        for k, (name, coeff) in enumerate(dims):
            fresh = _fresh(f"{l.name}_{name}", taken)
            extent = l.extent // inner if k == len(dims) - 1 else view.extents[name]
            new.append((Loop(fresh, extent), coeff))
        mapping[l.name] = Affine.of({loop.name: coeff for loop, coeff in new})
        loops.extend(loop for loop, _ in reversed(new))
    return replace(stmt, loops=tuple(loops), expr=rename_loops(stmt.expr, mapping),
                   target_indices=tuple(i.rename(mapping) for i in stmt.target_indices),
                   domain=tuple(a.rename(mapping) for a in stmt.domain))


def view_loops(access: Access, view: Statement, extents: dict[str, int]) -> dict[str, Affine]:
    """{view loop: the reader's index} for a read of `view`'s target, after `split_for`: a
    single-loop dimension maps its loop to the read's index; a merged one maps each digit to
    the reader's loop with that coefficient and extent (the outermost plus offset / span)."""
    mapping: dict[str, Affine] = {}
    digits = view_digits(view) or [[(i.single_loop, 1)] for i in view.target_indices]
    for index, dims in zip(access.indices, digits):
        if len(dims) == 1:
            mapping[dims[0][0]] = index
            continue
        by_coeff = dict((c, loop) for loop, c in index.terms)
        inner = math.prod(view.extents[name] for name, _ in dims[:-1])
        for k, (name, coeff) in enumerate(dims):
            loop = by_coeff.get(coeff)
            if loop is None or (k < len(dims) - 1 and extents[loop] != view.extents[name]):
                raise ValueError(f"the read {access} of {view.target} does not match its digits")
            mapping[name] = Affine.var(loop) + (index.const // inner if k == len(dims) - 1 else 0)
    return mapping


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    taken.add(name)
    return name
