"""Affine accesses over a statement's loops, and the kernels whose point order is fixed: the
facts every host strategy reads.

- `flat_offsets`: an access's row-major element offset, as {loop: coefficient} and a constant
  (in a padded copy too: `shape`, `shift`);
- `padding`, `in_range`: how far each index leaves its tensor over the whole nest;
- `one_to_one`: whether an offset writes each element once; `unit_stride_reads`: whether
  every read walks a loop along its last dimension only;
- `substitute`: an access moved onto another statement's loops (a fused epilogue's point);
- `keeps_point_order`, `reads_loop_values`: kernels no strategy that moves points between
  loops may take (a user's trace giving point loops affine bounds, a `where` domain, a loop's value read).
"""
from __future__ import annotations

import dataclasses
import math

from ..ir.program import Access, Affine, Statement
from ..ir.schedule import Kernel, Schedule


def flat_offsets(kernel: Kernel, access: Access, shape=None, shift=None) -> tuple[dict[str, int], int]:
    """The flat (row-major) element offset of `access` as {loop: coefficient}, constant (in
    a tensor of `shape` whose indices are shifted by `shift`, per dimension: a padded copy)."""
    shape = shape or kernel.tensor(access.tensor).shape
    shift = shift or [0] * len(shape)
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    coeff: dict[str, int] = {}
    const = 0
    for d, idx in enumerate(access.indices):
        for loop, c in idx.terms:
            coeff[loop] = coeff.get(loop, 0) + c * strides[d]
        const += (idx.const + shift[d]) * strides[d]
    return coeff, const


def padding(kernel: Kernel, access: Access, ext: dict[str, int]) -> list[tuple[int, int]]:
    """Per dimension, how far the index reaches below 0 and past the end (0, 0: in range)."""
    shape = kernel.tensor(access.tensor).shape
    out = []
    for d, idx in enumerate(access.indices):
        lo = idx.const + sum(min(0, c * (ext[l] - 1)) for l, c in idx.terms)
        hi = idx.const + sum(max(0, c * (ext[l] - 1)) for l, c in idx.terms)
        out.append((max(0, -lo), max(0, hi - shape[d] + 1)))
    return out


def one_to_one(coeff: dict[str, int], loops: list[str], ext: dict[str, int]) -> bool:
    """Whether offset sum(coeff[l] * l) is one-to-one over the box of `loops`: the positive
    coefficients, sorted, each at least the span the smaller ones cover (a row-major box)."""
    span = 1
    for l in sorted((l for l in loops if ext[l] > 1), key=lambda l: coeff.get(l, 0)):
        if coeff.get(l, 0) < span:
            return False
        span = coeff[l] * ext[l]
    return True


def in_range(kernel: Kernel, access: Access, ext: dict[str, int]) -> list[bool]:
    """Per dimension: whether the index stays inside the tensor over the whole nest."""
    shape = kernel.tensor(access.tensor).shape
    out = []
    for d, idx in enumerate(access.indices):
        lo = idx.const + sum(min(0, c * (ext[l] - 1)) for l, c in idx.terms)
        hi = idx.const + sum(max(0, c * (ext[l] - 1)) for l, c in idx.terms)
        out.append(lo >= 0 and hi < shape[d])
    return out


def unit_stride_reads(stmt: Statement, loop: str) -> bool:
    """Whether every read indexes `loop` (the register tile's vectorised output loop) only in
    its last dimension with coefficient 1, or not at all. Otherwise the tile's vectors gather
    from rows a stride apart (a row max M[i] max= X[i, j] tiled over i: 5x slower than the
    plain nest, measured on 512 x 512, the rows falling into a handful of cache sets)."""
    for access in stmt.reads():
        for d, idx in enumerate(access.indices):
            c = dict(idx.terms).get(loop, 0)
            if c and (d != len(access.indices) - 1 or c != 1):
                return False
    return True


def substitute(access: Access, by: dict[str, Affine]) -> Access:
    """`access` with each loop replaced by an affine index (over another statement's loops)."""
    indices = []
    for idx in access.indices:
        out = Affine.constant(idx.const)
        for loop, c in idx.terms:
            out = out + by[loop] * c
        indices.append(out)
    return dataclasses.replace(access, indices=tuple(indices))


def keeps_point_order(schedule: Schedule | None) -> bool:
    """A user's trace gave point loops affine bounds or reversed them: the nest must run in that order, so no
    packed, direct-row or window path (each has its own order) may take the kernel."""
    return schedule is not None and schedule.affine_points


def reads_loop_values(kernel: Kernel) -> bool:
    """A statement cut by a `where` domain or reading a loop's value: the host's packed and
    direct forms move points between loops, so such kernels keep the plain nest."""
    return any(st.uses_index_values for st in kernel.statements)
