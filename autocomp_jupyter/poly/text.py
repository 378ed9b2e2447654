"""isl's text and objects, as every part of `poly` writes and reads them.

Statement `k` of a kernel is named `S{k}` (`statement_name`); its instance tuple is
`S0[i, j, k]` and its iteration domain the box of its loops cut by its `where` relations
(`_bounds_str`). A loop or tensor name isl reserves, or that is no identifier, cannot be
written into an isl string (`_check_name`, `_isl_names_ok`). `_maps` and
`_point_coordinates` read isl objects back into Python.
"""
from __future__ import annotations

from typing import Sequence

import islpy as isl

from autocomp_jupyter.ir.program import Affine, Statement

# Words isl's parser reserves; a loop or tensor with one of these names cannot be
# written into an isl string.
_ISL_RESERVED = frozenset(
    "and or not exists floor ceil mod min max true false infty NaN domain range".split()
)

Statements = Sequence[Statement]


def statement_name(index: int) -> str:
    """The isl tuple name of the kernel's `index`-th statement."""
    return f"S{index}"


def _maps(relation: isl.UnionMap) -> list[isl.Map]:
    """The maps of a union map, one per (domain tuple, range tuple) pair."""
    out: list[isl.Map] = []
    relation.foreach_map(out.append)
    return out


def _check_name(name: str, what: str) -> None:
    if name in _ISL_RESERVED or not name.isidentifier():
        raise ValueError(f"{what} name {name!r} cannot be used in isl (reserved or not an identifier)")


def _affine_str(index: Affine) -> str:
    return str(index)


def _tuple_str(name: str, loops: Sequence[str]) -> str:
    return f"{name}[{', '.join(loops)}]"


def _bounds_str(statement: Statement) -> str:
    """The statement's iteration domain in isl syntax: its box, cut by its `where` relations."""
    box = [f"0 <= {l.name} < {l.extent}" for l in statement.loops]
    return " and ".join(box + [f"{_affine_str(a)} >= 0" for a in statement.domain]) or "true"


def _isl_names_ok(kernel) -> bool:
    """Can every tensor and loop name of `kernel` be written in an isl string?"""
    names = {t.name for t in kernel.tensors} | {l.name for s in kernel.statements for l in s.loops}
    return all(name not in _ISL_RESERVED and name.isidentifier() for name in names)


def _point_coordinates(point: isl.Point, n: int, offset: int = 0) -> tuple[int, ...]:
    return tuple(point.get_coordinate_val(isl.dim_type.set, offset + d).to_python() for d in range(n))
