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


def kernel_twin(program: Program, op_names, max_extent: int, folds: bool = False) -> Program | None:
    """The ops `op_names` of `program` alone, every loop extent cut to `max_extent`: a
    program whose inputs are what the ops read and do not write and whose outputs are what
    they write. Each dimension keeps its overhang (the highest index an access reaches past
    or short of the dimension's end), so padding, strides and slices read as before. None
    when nothing would shrink. `folds`: every dimension written as several digits stays
    whole, where written and where read (`_pin_merged_writes`), so that the view folds made
    on the program replay on the twin."""
    ops = [program.producer(name) for name in op_names]
    if any(op is None for op in ops):
        return None
    everything = [s for op in ops for s in op.statements]
    cuts = iter(_twin_extents(everything, max_extent, _written_shapes(program, everything), folds))
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
    writes: dict[str, list[int]] = {}                 # tensor -> per dim, the twin's highest write
    indirect: dict[str, set[int]] = {}                # tensor -> its dimensions read through index tensors
    for full, _ in pairs:
        for access in full.reads():
            if access.indirect:
                indirect.setdefault(access.tensor, set()).update(access.indirect_dims)
    for full, small in pairs:
        full_box = {l.name: (0, l.extent) for l in full.loops}
        small_box = {l.name: (0, l.extent) for l in small.loops}
        for tensor, indices in _accesses(small):
            highs = reach.setdefault(tensor, [(-1, -1)] * len(indices))
            reach[tensor] = [(max(h_full, i.bounds(full_box)[1]), max(h_small, i.bounds(small_box)[1]))
                             for (h_full, h_small), i in zip(highs, indices)]
        writes[small.target] = [max(h, i.bounds(small_box)[1]) for h, i in
                                zip(writes.get(small.target, [-1] * len(small.target_indices)), small.target_indices)]
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
        through = indirect.get(name, set())   # a dimension read through an index tensor stays whole:
        shape = tuple(dim if d in through else size     # its ids may name any of its rows
                      for d, (dim, size) in enumerate(zip(original.shape, shape)))
        if name in written:      # at least what the twin writes (a padded read's overhang would cut it)
            shape = tuple(min(dim, max(size, high + 1)) for dim, size, high in zip(original.shape, shape, writes[name]))
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


def _written_shapes(program: Program, statements: list[Statement]) -> dict[str, tuple[int, ...]]:
    """The full-size shape of each tensor `statements` write: declared, or (an undeclared
    temp) what its statements write."""
    dims: dict[str, tuple[int, ...]] = {}
    for s in statements:
        if program.has_tensor(s.target):
            dims[s.target] = program.tensor(s.target).shape
            continue
        box = {l.name: (0, l.extent) for l in s.loops}
        highs = [i.bounds(box)[1] + 1 for i in s.target_indices]
        dims[s.target] = tuple(max(a, b) for a, b in zip(dims.get(s.target, highs), highs))
    return dims


def _twin_extents(statements: list[Statement], max_extent: int, dims: dict[str, tuple[int, ...]],
                  folds: bool = False) -> list[dict[str, int]]:
    """Per statement, its loops' extents in the twin: each cut to `max_extent`, then grown
    where the kernel's own reads need more (`_pin_digits`, `_cover_reads`). `dims`: the
    full-size shape of each tensor the statements write."""
    cut = [{l.name: min(l.extent, max_extent) for l in s.loops} for s in statements]
    _pin_digits(statements, cut)
    if folds:
        _pin_merged_writes(statements, cut)
    _cover_reads(statements, cut, dims)
    return cut


def _pin_digits(statements: list[Statement], cut: list[dict[str, int]]) -> None:
    """The digits of a mixed-radix index into a tensor the kernel writes keep their full
    extent. A folded reshape reads y[i, 64*h + d] with d < 64: cut, d would read columns the
    cut matmul never wrote (and index them differently)."""
    written = {s.target for s in statements}
    for k, s in enumerate(statements):
        full = s.extents
        for access in s.reads():
            if access.tensor not in written:
                continue      # an input is sized to what the twin reads: cut digits read a subset
            for index in access.indices:
                terms = dict(index.terms)
                for l, c in terms.items():
                    if c == 1 and any(m != l and abs(c2) == full[l] for m, c2 in terms.items()):
                        cut[k][l] = full[l]


def _pin_merged_writes(statements: list[Statement], cut: list[dict[str, int]]) -> None:
    """A dimension the kernel writes as several digits (a reshape `Y[8*a0 + a1, c] =
    X[a0, a1, c]`) keeps its full extent, in the writer's digits and in every loop that
    reads it: a view folds into its reader only where the reader's loop splits into the
    view's digits, which a cut loop does not, and a twin on which the program's folds do not
    replay checks nothing (Swin's window reshapes sent every fold check to full size)."""
    merged: dict[str, set[int]] = {}        # tensor -> its dimensions written mixed-radix
    for k, s in enumerate(statements):
        full = s.extents
        for d, index in enumerate(s.target_indices):
            if len(index.terms) > 1:
                merged.setdefault(s.target, set()).add(d)
                for loop in index.loops:
                    cut[k][loop] = full[loop]
    for k, s in enumerate(statements):
        full = s.extents
        for access in s.reads():
            for d in merged.get(access.tensor, ()):
                for loop in access.indices[d].loops:
                    cut[k][loop] = full[loop]


def _cover_reads(statements: list[Statement], cut: list[dict[str, int]], dims: dict[str, tuple[int, ...]]) -> None:
    """Grow each statement's output loops until it writes all that the kernel's later
    statements read of its target in the twin, as at full size. Cutting each statement on
    its own breaks that wherever a reader's index grows faster than the writer's: a
    stride-2 convolution with 14 output rows (uncut) reads 28 rows of a producer cut to 16;
    a folded reshape's digits (`_pin_digits`) read a whole row. Consumers come after their
    producers, so one backward sweep settles each writer after all its readers."""
    reach: dict[tuple[str, int], tuple[int, int]] = {}    # (tensor, dim) -> (full-size high, twin high) read
    for k in range(len(statements) - 1, -1, -1):
        s = statements[k]
        shape = dims.get(s.target)
        for d, index in enumerate(s.target_indices):
            if (s.target, d) not in reach or shape is None or not index.terms:
                continue
            full_high, small_high = reach[(s.target, d)]
            overhang = max(full_high + 1 - shape[d], 0)           # padding read past the end at full size
            need = min(shape[d], small_high + 1 - overhang)      # the twin's size of that dimension
            _grow_to_write(index, s.extents, cut[k], need)
        full_box = {l.name: (0, l.extent) for l in s.loops}
        small_box = {name: (0, extent) for name, extent in cut[k].items()}
        for access in s.reads():
            if access.tensor not in dims:
                continue
            for d, index in enumerate(access.indices):
                high_full, high_small = reach.get((access.tensor, d), (-1, -1))
                reach[(access.tensor, d)] = (max(high_full, index.bounds(full_box)[1]),
                                             max(high_small, index.bounds(small_box)[1]))


def _grow_to_write(index, full: dict[str, int], cut: dict[str, int], need: int) -> None:
    """Grow the loop of write index `index` with the largest coefficient (the outer digit of
    a mixed-radix write, the one loop of a plain one) until the index reaches `need` - 1,
    at most to its full extent."""
    loop, coeff = max(index.terms, key=lambda term: term[1])
    if coeff <= 0:
        return
    rest = {l: (0, cut[l]) for l in index.loops if l != loop}
    rest_high = index.bounds({**rest, loop: (0, 1)})[1]       # the index with `loop` at 0
    extent = -(-(need - 1 - rest_high) // coeff) + 1
    cut[loop] = min(full[loop], max(cut[loop], extent))


__all__ = ["kernel_twin"]
