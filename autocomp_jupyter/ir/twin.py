"""Kernel twins: one kernel's ops alone, every loop cut to a small extent, as a program.

A tiled run (`interp.check_tiled`) proves a schedule on real values; at full size it is too
slow, so it runs on a small twin with the same structure. The first choice is the twin of
the whole program (`dsl.scaled_twin`, built from the source text with every dimension
shrunk: the kernel then reads the values its producers really make). That twin does not
always exist or stay small: an imported model's `reshape(x, shape=[1, 128, 12, 64])` pins
its dimensions, a Python rule's rewrite has no source text. `kernel_twin` needs neither:
it cuts every loop of the kernel's statements to at most `max_extent` and sizes each tensor
so that its accesses overhang it as they did at full size (a padded read stays padded at
the same edges), with the kernel's inputs as the program's inputs.
"""
from __future__ import annotations

from dataclasses import replace

from .program import Loop, Program, Statement, Tensor


def _accesses(statement: Statement):
    """(tensor, indices) of every write and read of `statement`."""
    yield statement.target, statement.target_indices
    for access in statement.reads():
        yield access.tensor, access.indices


def kernel_twin(program: Program, op_names, max_extent: int) -> Program | None:
    """The ops `op_names` of `program` alone, every loop extent cut to `max_extent`: a
    program whose inputs are what the ops read and do not write and whose outputs are what
    they write. Each dimension keeps its overhang (the highest index an access reaches past
    or short of the dimension's end), so padding, strides and slices read as before. None
    when nothing would shrink."""
    ops = [program.producer(name) for name in op_names]
    if any(op is None for op in ops):
        return None
    cuts = iter(_twin_extents([s for op in ops for s in op.statements], max_extent))
    new_ops, pairs = [], []            # pairs: (full-size statement, its cut copy)
    for op in ops:
        statements = tuple(replace(s, loops=tuple(Loop(l.name, cut[l.name]) for l in s.loops))
                           for s, cut in zip(op.statements, cuts))
        pairs.extend(zip(op.statements, statements))
        new_ops.append(replace(op, statements=statements))
    if all(full.loops == small.loops for full, small in pairs):
        return None
    written = {small.target for _, small in pairs}
    reach: dict[str, list[tuple[int, int]]] = {}      # tensor -> per dim (full-size high, twin high)
    for full, small in pairs:
        full_box = {l.name: (0, l.extent) for l in full.loops}
        small_box = {l.name: (0, l.extent) for l in small.loops}
        for tensor, indices in _accesses(small):
            highs = reach.setdefault(tensor, [(-1, -1)] * len(indices))
            reach[tensor] = [(max(h_full, i.bounds(full_box)[1]), max(h_small, i.bounds(small_box)[1]))
                             for (h_full, h_small), i in zip(highs, indices)]
    tensors = []
    for name, highs in reach.items():
        if program.has_tensor(name):
            original = program.tensor(name)
        elif name in written:
            continue    # an undeclared temp: Kernel.from_ops sizes it from its statement
        else:
            return None
        shape = tuple(max(1, min(dim, h_small + 1 - (h_full + 1 - dim))) for dim, (h_full, h_small)
                      in zip(original.shape, highs))
        if name in written:
            role = original.role if original.role == "temp" else "intermediate"
        else:
            role = original.role if original.role in ("input", "param") else "input"
        tensors.append(Tensor(name, original.dtype, shape, role))
    # Inputs first (declaration order), as a parsed program has them.
    tensors.sort(key=lambda t: t.role not in ("input", "param"))
    mine = set(op_names)
    outputs = tuple(dict.fromkeys(s.target for op in new_ops for s in op.statements
                                  if program.has_tensor(s.target) and program.tensor(s.target).role != "temp"
                                  and (s.target in program.outputs
                                       or any(r.name not in mine for r in program.readers(s.target)))))
    if not outputs:
        outputs = (new_ops[-1].output,)
    return Program(tuple(tensors), tuple(new_ops), outputs, filename=f"{program.filename} (kernel twin)")


def _twin_extents(statements: list[Statement], max_extent: int) -> list[dict[str, int]]:
    """Per statement, its loops' extents in the twin: each cut to `max_extent`, but for the
    digits of a mixed-radix index into a tensor the kernel writes. A folded reshape reads
    y[i, 64*h + d] with d < 64: cut, d would read columns the cut matmul never wrote, so d
    keeps its extent, and the loop writing that dimension of y (the matmul's j) grows to what
    the cut reads reach."""
    cut = [{l.name: min(l.extent, max_extent) for l in s.loops} for s in statements]
    written = {s.target for s in statements}
    pinned_reads: dict[tuple[str, int], int] = {}      # (tensor, dim) -> highest twin index read
    for k, s in enumerate(statements):
        full = s.extents
        for access in s.reads():
            if access.tensor not in written:
                continue      # an input is sized to what the twin reads: cut digits read a subset
            for d, index in enumerate(access.indices):
                terms = dict(index.terms)
                digits = [l for l, c in terms.items() if c == 1 and
                          any(m != l and abs(c2) == full[l] for m, c2 in terms.items())]
                for l in digits:
                    cut[k][l] = full[l]
                if digits:
                    high = index.bounds({l: (0, cut[k][l]) for l in index.loops})[1]
                    pinned_reads[(access.tensor, d)] = max(pinned_reads.get((access.tensor, d), -1), high)
    for k, s in enumerate(statements):
        for d, index in enumerate(s.target_indices):
            loop = index.single_loop
            if loop is not None and (s.target, d) in pinned_reads:
                cut[k][loop] = min(s.extents[loop], max(cut[k][loop], pinned_reads[(s.target, d)] + 1))
    return cut


__all__ = ["kernel_twin"]
