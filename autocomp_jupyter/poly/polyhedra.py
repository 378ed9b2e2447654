"""The isl view of one kernel: iteration domains, access relations and the original schedule.

A kernel is a sequence of fused `Statement`s in program order. Its reads hold only in-bounds
reads (an out-of-range read yields the access's pad value, not memory) and the accumulation
read of a reduction; an indirect dimension (`W[ids[s], c]`) may touch any element of its
dimension. Everything is cached on the (frozen, hashable) statements.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import islpy as isl

from autocomp_jupyter.caches import cached
from autocomp_jupyter.ir.program import Affine, Statement
from autocomp_jupyter.poly.schedules import KernelSchedule, original_schedule
from autocomp_jupyter.poly.text import (Statements, _affine_str, _bounds_str, _check_name,
                                        _tuple_str, statement_name)


@dataclass(frozen=True, eq=False)
class KernelPolyhedra:
    """The isl objects of one kernel: domains, accesses, original schedule.

    `reads` and `writes` map statement instances to tensor elements (`C[i, j]`);
    `reads` holds only in-bounds reads, and the accumulation read of a reduction
    statement (`C[i, j] += ...` reads C[i, j] before writing it).
    """

    statements: tuple[Statement, ...]
    names: tuple[str, ...]
    domain: isl.UnionSet
    reads: isl.UnionMap
    writes: isl.UnionMap
    original: "KernelSchedule"
    original_map: isl.UnionMap
    tensor_shapes: Mapping[str, tuple[int, ...]]

    def statement(self, name: str) -> Statement:
        return self.statements[self.names.index(name)]


def _written_shapes(statements: Sequence[Statement]) -> dict[str, tuple[int, ...]]:
    """Shape of each tensor the kernel writes, as the bounding box of its write footprint.

    Single assignment: each tensor is written by one statement, in full, so the footprint
    box is the tensor's shape (as far as dependences can see).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for s in statements:
        extents = s.extents
        box = []
        for index in s.target_indices:
            top = index.const + sum(c * (extents[l] - 1) for l, c in index.terms if c > 0)
            box.append(top + 1)
        previous = shapes.get(s.target, ())
        shapes[s.target] = tuple(max(a, b) for a, b in zip(previous, box)) if previous else tuple(box)
    return shapes


def _access_map(stmt_tuple: str, bounds: str, tensor: str, indices: Sequence[Affine],
                shape: tuple[int, ...] | None, indirect: Sequence[int] = ()) -> isl.Map:
    """The access relation; an indirect dimension (`W[ids[s], c]`) may be any element of the
    dimension, so it is an unconstrained variable within the tensor's bounds."""
    coords = [f"ind{d}_" if d in indirect else _affine_str(i) for d, i in enumerate(indices)]
    element = f"{tensor}[{', '.join(coords)}]"
    constraints = [bounds]
    if shape is not None:
        # Out-of-range reads yield the pad value: they touch no memory, so no dependence.
        constraints += [f"0 <= {c} < {n}" for c, n in zip(coords, shape)]
    return isl.Map(f"{{ {stmt_tuple} -> {element} : {' and '.join(constraints)} }}")


# ~6 ms each with isl; MaxViT-T asks ~450 kernel structures (at 256, 190 were built twice).
@cached("poly.polyhedra", 1024)
def _polyhedra(statements: tuple[Statement, ...],
               shapes: tuple[tuple[str, tuple[int, ...]], ...]) -> KernelPolyhedra:
    names = tuple(statement_name(k) for k in range(len(statements)))
    tensor_shapes = _written_shapes(statements)
    tensor_shapes.update(dict(shapes))
    domain = isl.UnionSet("{ }")
    reads = isl.UnionMap("{ }")
    writes = isl.UnionMap("{ }")
    for name, s in zip(names, statements):
        for loop in s.loop_names:
            _check_name(loop, "loop")
        _check_name(s.target, "tensor")
        stmt_tuple = _tuple_str(name, s.loop_names)
        bounds = _bounds_str(s)
        domain = domain.union(isl.UnionSet(isl.Set(f"{{ {stmt_tuple} : {bounds} }}")))
        write = _access_map(stmt_tuple, bounds, s.target, s.target_indices, None)
        writes = writes.union(isl.UnionMap(write))
        if s.reduce is not None:
            reads = reads.union(isl.UnionMap(write))
        for access in s.reads():
            _check_name(access.tensor, "tensor")
            shape = tensor_shapes.get(access.tensor)
            reads = reads.union(isl.UnionMap(
                _access_map(stmt_tuple, bounds, access.tensor, access.indices, shape, access.indirect_dims)))
    original = original_schedule(statements)
    return KernelPolyhedra(statements, names, domain, reads, writes, original,
                           original.to_isl(), tensor_shapes)


def kernel_polyhedra(statements: Statements,
                     tensor_shapes: Mapping[str, Sequence[int]] | None = None) -> KernelPolyhedra:
    """Domains, accesses and original schedule of a kernel (cached on the statements).

    `tensor_shapes` bounds reads of tensors the kernel does not write (inputs); tensors it
    writes are bounded by their write footprint. Dependences only involve written tensors.
    """
    shapes = tuple(sorted((k, tuple(v)) for k, v in (tensor_shapes or {}).items()))
    return _polyhedra(tuple(statements), shapes)
