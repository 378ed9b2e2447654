"""`check_schedule`: the one legality policy for a tiled, ordered, annotated `ir.schedule.Schedule`.

Every pass, the tuner, variant evaluation and the final verification ask it. A schedule's loop
nest (`ir.loopnest.lower`) becomes a `KernelSchedule` in 2d+1 form (`from_tiled_schedule`)
whose parallel loops are `parallel_dims`; `check_legal` then proves it. Statements computed at
a consumer's tile (`_compute_at_violations`) and statements computed against a running max
(`rescale_violations`) are judged by their place in the loop nest instead. Verdicts are
remembered by the schedule's canonical form, and renamed for a kernel met under other names.
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from autocomp_jupyter.caches import LRU
from autocomp_jupyter.canon import schedule_key
from autocomp_jupyter.poly.legality import check_legal
from autocomp_jupyter.poly.schedules import KernelSchedule, ScheduleDim, StatementSchedule
from autocomp_jupyter.poly.text import _isl_names_ok, statement_name
from autocomp_jupyter.poly.violations import Legality, Violation


def from_tiled_schedule(schedule, nest=None) -> KernelSchedule:
    """The `KernelSchedule` of an `ir.schedule.Schedule`: the tree `ir.loopnest.lower` builds,
    in 2d+1 form. Along each statement's path from the root, every tree level adds a
    sequence dimension (its position among its siblings) and, for a tile loop, the tile
    index `floor(offset / size)`, the offset taken inside the enclosing tile over the same
    loop, so remainder tiles are exact; the statement's point loops follow, named after the
    anchor loops they follow (local loops keep their names). `nest`: `lower(schedule)`, when
    the caller has it already.

    A statement in a tile loop over a loop it does not follow runs only in that loop's last
    tile (`Compute.last_of`): its dimension there is that tile's index, a constant (named
    `seq_...`, a sequence dimension). Then `check_legal` proves the epilogue sees every
    update of its input.
    """
    from autocomp_jupyter.ir.loopnest import lower

    nest = lower(schedule) if nest is None else nest
    extents = schedule.kernel.extents
    computed = schedule.kernel.computed_at()
    statements: list[StatementSchedule] = [None] * len(schedule.kernel.statements)  # type: ignore[list-item]
    for path, compute in nest.paths():
        if compute.index in computed:
            continue    # recomputed per tile: `_compute_at_violations` proves it instead
        follows = schedule.kernel.loop_map(compute.index)
        own_of = {anchor: own for own, anchor in follows.items()}
        enclosing: dict[str, list[int]] = {}
        dims = []
        for depth, (position, node) in enumerate(path):
            dims.append(ScheduleDim(f"seq{depth}", str(position)))
            if node is compute:
                break
            sizes = enclosing.setdefault(node.anchor, [])
            if node.anchor in own_of:
                offset = own_of[node.anchor]
                for outer in sizes:
                    offset = f"(({offset}) mod {outer})"
                dims.append(ScheduleDim(node.var, f"floor({offset}/{node.size})"))
            else:
                last = extents[node.anchor] - 1
                for outer in sizes:
                    last %= outer
                dims.append(ScheduleDim(f"seq_{node.var}", str(last // node.size)))
            sizes.append(node.size)
        dims += [ScheduleDim(p.anchor or p.name, p.time()) for p in compute.loops]
        statements[compute.index] = StatementSchedule(statement_name(compute.index), compute.statement.loop_names,
                                                      tuple(dims))
    if computed:   # the other statements, named by their place among themselves
        kept = [st for i, st in enumerate(statements) if i not in computed]
        statements = [replace(st, name=statement_name(k)) for k, st in enumerate(kept)]
    return KernelSchedule(tuple(statements))


def parallel_dims(schedule, nest=None) -> tuple[str, ...]:
    """The time dimensions of `from_tiled_schedule(schedule)` that run the loops its
    "parallel" annotation marks: every tile loop over such a loop and its point loops.
    Checking them all is what makes a parallel annotation legal wherever C puts the pragma."""
    from autocomp_jupyter.ir.loopnest import loop_dims, lower

    nest = lower(schedule) if nest is None else nest
    return tuple(dim for loop in schedule.parallel or () for dim in loop_dims(nest, loop))


def check_schedule(schedule) -> "Legality":
    """The one legality policy for a tiled, ordered, annotated `ir.schedule.Schedule`, asked by
    every pass, the tuner, variant evaluation and the final verification: its loop nest must
    keep every dependence (reductions may be reassociated: '+' and 'max' are treated as
    associative and commutative), and every loop marked parallel must carry no dependence in
    any statement, reductions included (a parallel reduction is a race). Statements computed
    against a running max (`Rescale`) are ordered by their placement in the loop nest
    (`rescale_violations`), every other dependence by isl. A schedule isl
    cannot even represent (ValueError) is illegal, with that reason.

    Verdicts are remembered by the schedule's canonical form (`canon.schedule_key`: tensor
    names by position), so the repeated layers of a network are proved once: a verdict
    depends on structure alone (dependences are between statement instances; names only
    label them) as long as every name can be written in isl, which is part of the key. An
    illegal verdict reached through another kernel's names is given back in this kernel's
    names (the violated dependence's tensor; its example pair, distances and message are
    the same but for that name). The key leaves out the annotations the loop nest carries
    only as flags (`vectorize`, `unroll`: `ir.loopnest.lower` orders nothing by them), so a
    schedule and its vectorised or unrolled variants are proved once.

    A schedule of a kernel whose only dependences are its reduction's (`_plainly_legal`: one
    statement writing each element from one point of its output loops) and whose parallel
    loops are all output loops is legal without asking isl: most of what the library's
    per-op searches and the tuner ask. Every other schedule, and every illegal verdict with
    its reasons, is isl's."""
    if _plainly_legal(schedule):
        return _LEGAL
    key = (_order_key(schedule), _isl_names_ok(schedule.kernel))
    hit = _VERDICTS.get(key)
    if hit is not None:
        verdict, names = hit
        return verdict if verdict.ok else _renamed(verdict, names, tuple(t.name for t in schedule.kernel.tensors))
    try:
        computed = schedule.kernel.computed_at()
        violations = (_compute_at_violations(schedule) if computed else ()) + rescale_violations(schedule)
        if violations:
            verdict = Legality(False, violations)
        else:
            from autocomp_jupyter.ir.loopnest import lower

            rest = tuple(st for i, st in enumerate(schedule.kernel.statements) if i not in computed)
            nest = lower(schedule)          # lowered once for both views
            verdict = check_legal(rest, from_tiled_schedule(schedule, nest),
                                  parallel=parallel_dims(schedule, nest), reduction_reorderable=True)
    except ValueError as err:
        return Legality(False, (Violation("schedule", "", "", "", message=f"not a valid schedule: {err}"),))
    _VERDICTS.put(key, (Legality(True) if verdict.ok else verdict, tuple(t.name for t in schedule.kernel.tensors)))
    return verdict


_LEGAL = Legality(True)


def _plainly_legal(schedule) -> bool:
    """Whether `schedule` is legal by the shape of its kernel alone: the kernel is one
    statement that reads none of what it writes, indexes its target by distinct plain loops
    (each element written from one point of the output loops), and reduces with '+' or
    'max' over every other loop (or has none of length > 1); no point loop is skewed or
    reversed, and every parallel loop is an output loop (or of length 1).

    Why that is enough: the only instances touching one element are the updates of one
    output point, which differ in reduction loops alone. With reductions reorderable (the
    policy) those updates may run in any order, so no loop order can break a dependence;
    and every time dimension of an output loop (its tile loops, its point loop) is a
    function of that loop's value, so two updates of one element never differ there, and
    a parallel output loop carries nothing."""
    outputs = _plain_output_loops(schedule.kernel)
    if outputs is None or schedule.affine_points:
        return False
    return all(loop in outputs for loop in schedule.parallel or ())


def _plain_output_loops(kernel) -> frozenset | None:
    """The loops that may run in parallel in any schedule of `kernel` under
    `_plainly_legal`'s conditions (its output loops and its loops of length 1), or None where
    the kernel does not meet them. Kept on the kernel (the searches ask it of every schedule)."""
    found = kernel.__dict__.get("_plain_output_loops", ...)
    if found is ...:
        found = _plain_output_loops_of(kernel)
        object.__setattr__(kernel, "_plain_output_loops", found)
    return found


def _plain_output_loops_of(kernel) -> frozenset | None:
    if len(kernel.statements) != 1 or kernel.compute_at:
        return None
    st = kernel.statements[0]
    if st.rescale is not None or st.domain or st.in_place is not None or st.reduce not in (None, "+", "max"):
        return None
    if any(a.tensor == st.target for a in st.reads()):
        return None
    plain = [a.terms[0][0] for a in st.target_indices if len(a.terms) == 1 and a.terms[0][1] == 1 and not a.const]
    if len(plain) != len(st.target_indices) or len(set(plain)) != len(plain):
        return None
    long = {l.name for l in st.loops if l.extent > 1}
    if st.reduce is None and not long <= set(plain):
        return None            # an '=' written from several points: the last write must stay last
    return frozenset(plain) | {l.name for l in st.loops if l.extent <= 1}


# Annotations that mark loops of the nest without moving any instance in time.
_FLAGS = ("vectorize", "unroll")


def _order_key(schedule) -> tuple:
    """`canon.schedule_key` without the annotations in `_FLAGS` (what legality reads)."""
    kernel, tiles, order, annotations, levels = schedule_key(schedule)
    return kernel, tiles, order, tuple(a for a in annotations if a[0] not in _FLAGS), levels


def _compute_at_violations(schedule) -> tuple["Violation", ...]:
    """Why the kernel's `compute_at`s are illegal in `schedule` (empty: legal).

    A computed-at statement reads only the kernel's inputs, other computed-at tensors and
    tensors whose nest ran whole before its instance (`ir.loopnest.placement`), so each
    recomputation in a tile gives the values a single run would, and its region is the interval hull of what the tile's
    consumers read: the consumers see complete values (the interpreter's tiled check
    poisons everything outside the region, so a region too small fails verification).
    What is left is parallelism: parallel tiles writing overlapping regions (a halo, or a
    region that does not follow the loop) would race on the buffer, so a parallel loop
    may enclose a compute point only where the region follows that loop's tile exactly."""
    from autocomp_jupyter.ir.loopnest import ComputeAtError, compute_depth, regions, tile_steps

    kernel = schedule.kernel
    try:
        spans = regions(kernel)
    except ComputeAtError as err:
        return (Violation("compute_at", "", "", "", message=str(err)),)
    steps = tile_steps(schedule)
    parallel = set(schedule.parallel or ())
    out = []
    for index, (loop, level) in kernel.computed_at().items():
        stmt = kernel.statements[index]
        depth = compute_depth(schedule, steps, loop, level)
        for a in sorted({steps[p].anchor for p in range(depth)} & parallel):
            own = [spans[index][idx.single_loop] for idx in stmt.target_indices]
            if not any(r.terms == ((a, 1),) and (r.lo, r.hi) == (0, 0) for r in own):
                out.append(Violation("compute_at", statement_name(index), statement_name(index), stmt.target, loop=a,
                                     message=f"parallel tiles over {a} would race on {stmt.target}: it is computed "
                                             f"at each tile over a region that does not follow {a}'s tile alone "
                                             "(a halo, or recomputed in every tile)"))
    return tuple(out)


def _renamed(verdict: "Legality", old: tuple[str, ...], new: tuple[str, ...]) -> "Legality":
    """`verdict`, found on a kernel whose tensors are `old`, for the same kernel with tensors
    `new` (by position)."""
    if old == new:
        return verdict
    rename = dict(zip(old, new))
    return Legality(False, tuple(
        Violation(v.kind, v.source, v.sink, rename.get(v.tensor, v.tensor), reduction=v.reduction, loop=v.loop,
                  explain=partial(_renamed_details, v, v.tensor, rename.get(v.tensor, v.tensor)))
        for v in verdict.violated))


def _renamed_details(violation: "Violation", old: str, new: str) -> tuple:
    # The tensor is named once, in the dependence's description ("... on C (reduction over
    # k)", "... on C would be reversed: ..."); nothing after it says " on ".
    message = violation.message
    at = message.rfind(f" on {old}")
    end = at + len(old) + 4
    if at >= 0 and (end == len(message) or message[end] == " "):
        message = message[:at] + f" on {new}" + message[end:]
    return violation.example_source, violation.example_sink, violation.distance, message


# Verdicts by canonical schedule key, with the tensor names they were found under (see check_schedule).
# MaxViT-T on one preset asks ~7,400; a sweep's designs (`dse.explore`) ask many of the same
# again (a verdict does not depend on the target), so the cache holds several runs' worth.
_VERDICTS = LRU("poly.check_schedule", 32768)


def rescale_violations(schedule) -> tuple["Violation", ...]:
    """Why statements computed against a running max (`Rescale`) are misplaced in `schedule`'s
    loop nest (empty: placed right). Over the max's reduction (key) loops, either every one
    of them runs in the max's own tile loops — after the max's update of each tile (program
    order) and before the next, so each sum rescales by the growth it saw — or none does:
    they run after the max is complete. Anything in between would add terms computed
    against different maxima into one sum."""
    from autocomp_jupyter.ir.loopnest import Compute, TileLoop, lower

    kernel = schedule.kernel
    groups: dict[int, list[int]] = {}
    for c, st in enumerate(kernel.statements):
        if st.rescale is not None:
            writer = next((i for i, w in enumerate(kernel.statements)
                           if w.target == st.rescale.tensor and w.reduce == "max"), None)
            if writer is None:
                return (Violation("schedule", statement_name(c), "", st.rescale.tensor,
                                  message=f"{st.target} is rescaled by {st.rescale.tensor}, which no max= "
                                          "statement of the kernel writes"),)
            groups.setdefault(writer, []).append(c)
    if not groups:
        return ()
    for e, st in enumerate(kernel.statements):      # values relative to the running max ...
        if st.rescale is None or st.reduce is not None:
            continue
        for c, reader in enumerate(kernel.statements):
            if any(a.tensor == st.target for a in reader.reads()) and (
                    reader.rescale is None or reader.rescale.tensor != st.rescale.tensor or reader.reduce != "+"):
                return (Violation("schedule", statement_name(e), statement_name(c), st.target,
                                  message=f"{reader.target} reads {st.target}, which is relative to the running "
                                          f"{st.rescale.tensor}, without rescaling its sums as it grows"),)
    paths: dict[int, list] = {}

    def walk(nodes, around):
        for node in nodes:
            if isinstance(node, TileLoop):
                walk(node.body, around + [node])
            elif isinstance(node, Compute):
                paths[node.index] = around
    walk(lower(schedule).body, [])
    out = []
    for m, members in groups.items():
        keys = {kernel.loop_map(m)[l.name] for l in kernel.statements[m].reduction_loops
                if l.name in kernel.loop_map(m)}
        over = lambda i: tuple(id(t) for t in paths[i] if t.anchor in keys)    # noqa: E731
        shared = [c for c in members if over(c) == over(m)]
        mixed = [c for c in members if c not in shared and set(over(c)) & set(over(m))]
        if (shared and len(shared) != len(members)) or mixed:
            apart = [c for c in members if c not in shared]
            out.append(Violation(
                "schedule", statement_name(m), statement_name(apart[0]), kernel.statements[m].target,
                message=f"{kernel.statements[apart[0]].target} is computed against the running "
                        f"{kernel.statements[m].target} but runs outside its key tiles while "
                        f"{', '.join(kernel.statements[c].target for c in shared)} run inside them"))
    return tuple(out)
