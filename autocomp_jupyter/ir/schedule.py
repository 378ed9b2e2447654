"""Kernels (groups of ops fused into one loop nest) and their schedules.

A `Kernel` is what the fusion pass produces: some ops of a Program whose statements run in
one loop nest. Its *anchor* is the statement with the most points (the contraction of a
conv+relu group); the anchor's loops are the kernel's loops, the ones a schedule tiles and
orders. Every other statement is mapped onto anchor loops where it can be (a relu epilogue
follows the anchor's output tile); loops that map nowhere (the reduction of a softmax row)
stay local and run in full inside each tile.

A `Schedule` gives one kernel multi-level tiles `{loop: {level: size}}` (levels are a
target's memory-level names, outer → inner), a loop order per level and annotations
(parallel loops, the vectorised loop, an unroll factor). Tiles need not divide extents:
the last tile of a loop is a remainder tile. Both classes are frozen; passes build new ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from ..caches import LRU, hash_once, state_without_hash
from .program import Access, BinOp, Loop, Program, Statement, Tensor, substitute


def is_mac_statement(stmt: Statement) -> bool:
    """A multiply-accumulate contraction (`+=` of a product): runs on the PE array."""
    return stmt.reduce == "+" and isinstance(stmt.expr, BinOp) and stmt.expr.op == "*"


@dataclass(frozen=True)
class Kernel:
    """A group of ops fused into one loop nest.

    inputs: tensors read from outside (program inputs/params, other kernels' results);
    outputs: tensors written here that something outside reads or that the program outputs;
    internals: tensors produced and consumed only here (they stay on chip: no DRAM traffic).
    `loop_maps[s]` maps statement s's loops to anchor loops (local loops are absent).
    """

    name: str
    ops: tuple[str, ...]
    statements: tuple[Statement, ...]
    loops: tuple[Loop, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    internals: tuple[str, ...]
    tensors: tuple[Tensor, ...]
    anchor: int = 0
    loop_maps: tuple[tuple[tuple[str, str], ...], ...] = ()
    # (tensor, loop, level): the statements writing `tensor` run inside the anchor's tile
    # loop over `loop` at `level`, over the region that tile reads (`ir.loopnest.regions`).
    compute_at: tuple[tuple[str, str, str], ...] = ()

    # The caches key on kernels thousands of times per network, and the fields hash a whole
    # expression tree: hashed once (the kernel is immutable).
    __hash__ = hash_once
    __getstate__ = state_without_hash

    # ------------------------------------------------------------------ construction

    @staticmethod
    def from_ops(program: Program, op_names: Iterable[str], name: str | None = None,
                 anchor: str | None = None) -> "Kernel":
        """The kernel running `op_names` (ops of `program`) in one nest, in program order.
        Its anchor is the statement with the most points, or, given `anchor` (an op name),
        that op's (a chain fused with `compute_at` is anchored at its last contraction)."""
        wanted = set(op_names)
        positions = program.op_positions
        missing = wanted - positions.keys()
        if missing:
            raise KeyError(f"no op named {', '.join(sorted(missing))} in the program")
        ops = [program.ops[i] for i in sorted(positions[name] for name in wanted)]
        statements = tuple(s for op in ops for s in op.statements)
        written = [s.target for s in statements]
        written_set = set(written)
        inputs: list[str] = []
        for s in statements:
            for a in s.reads():
                if a.tensor not in written_set and a.tensor not in inputs:
                    inputs.append(a.tensor)
        outputs, internals = [], []
        for t in dict.fromkeys(written):
            read_outside = any(op.name not in wanted for op in program.readers(t))
            if t in program.outputs or read_outside:
                outputs.append(t)
            else:
                internals.append(t)
        tensors = tuple(_tensor_of(program, t, statements) for t in dict.fromkeys(inputs + written))
        candidates = range(len(statements))
        if anchor is not None:
            if anchor not in wanted:
                raise KeyError(f"anchor {anchor} is not one of the kernel's ops")
            first = sum(len(op.statements) for op in ops[:[op.name for op in ops].index(anchor)])
            candidates = range(first, first + len(program.op(anchor).statements))
        anchor = max(candidates, key=lambda i: (statements[i].points, is_mac_statement(statements[i]), -i))
        maps = _map_loops(statements, anchor)
        return Kernel(
            name=name or "_".join(op.name for op in ops), ops=tuple(op.name for op in ops),
            statements=statements, loops=statements[anchor].loops, inputs=tuple(inputs),
            outputs=tuple(outputs), internals=tuple(internals), tensors=tensors, anchor=anchor,
            loop_maps=tuple(tuple(sorted(m.items())) for m in maps),
        )

    # ------------------------------------------------------------------ queries

    @property
    def anchor_statement(self) -> Statement:
        return self.statements[self.anchor]

    @property
    def loop_names(self) -> tuple[str, ...]:
        return tuple(l.name for l in self.loops)

    @property
    def extents(self) -> dict[str, int]:
        return {l.name: l.extent for l in self.loops}

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def computed_at(self) -> dict[int, tuple[str, str]]:
        """Statement index → (loop, level) of each statement computed at the anchor's tiles
        (`compute_at`)."""
        at = {t: (loop, level) for t, loop, level in self.compute_at}
        return {i: at[s.target] for i, s in enumerate(self.statements) if s.target in at}

    def with_compute_at(self, tensor: str, loop: str, level: str) -> "Kernel":
        """This kernel with `tensor`'s statements computed at `loop`'s tiles at `level`."""
        kept = tuple(c for c in self.compute_at if c[0] != tensor)
        return replace(self, compute_at=kept + ((tensor, loop, level),))

    def without_compute_at(self) -> "Kernel":
        return replace(self, compute_at=()) if self.compute_at else self

    def loop_map(self, index: int) -> dict[str, str]:
        """Statement `index`'s loops → anchor loops (local loops absent)."""
        return dict(self.loop_maps[index])

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self.statements)

    def __str__(self) -> str:
        return f"kernel {self.name} [{', '.join(self.ops)}]"


def kernels_unfused(program: Program) -> tuple[Kernel, ...]:
    """One kernel per op, in program order (the library baseline's grouping); made once per
    program (the baselines and the physical limit each ask: MaxViT-T's 1,142 took 1.5 s each)."""
    return _UNFUSED.of(program, None, lambda: tuple(Kernel.from_ops(program, [op.name]) for op in program.ops))


_UNFUSED = LRU("schedule.kernels_unfused", 8)


def _tensor_of(program: Program, name: str, statements: tuple[Statement, ...]) -> Tensor:
    if program.has_tensor(name):
        return program.tensor(name)
    # A temp not declared in the program: its shape is what its statement writes.
    for s in statements:
        if s.target == name:
            ext = s.extents
            shape = tuple(int(a.evaluate({k: ext[k] - 1 if c > 0 else 0 for k, c in a.terms})) + 1
                          for a in s.target_indices)
            dtype = next((program.tensor(a.tensor).dtype for a in s.reads()
                          if program.has_tensor(a.tensor)), "f32")
            return Tensor(name, dtype, shape, "temp")
    raise KeyError(name)


def _map_loops(statements: tuple[Statement, ...], anchor: int) -> list[dict[str, str]]:
    """For each statement, which anchor loop each of its loops follows.

    Tensor dimensions tie loops together: if the anchor writes Y[n, f, h, w] and a relu reads
    Y[a, b, c, d], then a→n, b→f, ... . Dimensions learnt from one statement carry to the
    next (a chain of epilogues); tensors the kernel writes tie first, its inputs after. Loops still free then match an unused anchor loop of the same
    name and extent, then of the same extent; what remains is local to the statement.
    """
    anchor_stmt = statements[anchor]
    anchor_ext = anchor_stmt.extents
    maps: list[dict[str, str]] = [dict() for _ in statements]
    maps[anchor] = {n: n for n in anchor_stmt.loop_names}
    dim_loop: dict[tuple[str, int], str] = {}  # (tensor, dim) -> anchor loop it follows

    def learn(index: int) -> None:
        s, m = statements[index], maps[index]
        for tensor, indices in [(s.target, s.target_indices)] + [(a.tensor, a.indices) for a in s.reads()]:
            for dim, idx in enumerate(indices):
                loop = idx.single_loop
                if loop in m:
                    dim_loop.setdefault((tensor, dim), m[loop])

    learn(anchor)
    pending = [i for i in range(len(statements)) if i != anchor]
    # Tensors the kernel writes tie loops first (each is one producer's output read by its
    # consumers); an input only after: one input read in several roles (a fused QKV
    # projection's output read as queries, keys and values along the same dimension) would
    # tie a query loop to the key loop.
    written = {s.target for s in statements}
    for ties in (written, None):
        changed = True
        while changed:
            changed = False
            for i in pending:
                s, m = statements[i], maps[i]
                ext = s.extents
                for tensor, indices in [(s.target, s.target_indices)] + [(a.tensor, a.indices) for a in s.reads()]:
                    if ties is not None and tensor not in ties:
                        continue
                    for dim, idx in enumerate(indices):
                        loop = idx.single_loop
                        target_loop = dim_loop.get((tensor, dim))
                        if (loop and loop not in m and target_loop and target_loop not in m.values()
                                and ext[loop] == anchor_ext[target_loop]):
                            m[loop] = target_loop
                            changed = True
                learn(i)
    for i in pending:
        s, m = statements[i], maps[i]
        for l in s.loops:  # same name and extent
            if l.name not in m and anchor_ext.get(l.name) == l.extent and l.name not in m.values():
                m[l.name] = l.name
        for l in s.output_loops:  # same extent, in order
            if l.name in m:
                continue
            for a in anchor_stmt.loops:
                if a.extent == l.extent and a.name not in m.values():
                    m[l.name] = a.name
                    break
    return maps


# --------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class Schedule:
    """Tiles, loop order and annotations for one kernel.

    tiles: {loop: {level: size}}; a level absent for a loop keeps the enclosing tile.
    order: {level: (loop, ...)} outer → inner, the order of the loops that step through
    that level's tiles; a level absent inherits the next outer level's order, the first
    the kernel's source order. annotations: {"parallel": (loops), "vectorize": loop,
    "unroll": factor}. levels: tiling level names outer → inner (a target's
    `tiling_levels`); derived from `tiles` when not given.
    """

    kernel: Kernel
    tiles: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    order: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    annotations: Mapping[str, object] = field(default_factory=dict)
    levels: tuple[str, ...] = ()

    __hash__ = None  # holds dicts: compare, don't hash

    def __post_init__(self) -> None:
        names = set(self.kernel.loop_names)
        tiles: dict[str, dict[str, int]] = {}
        for loop, per_level in self.tiles.items():
            if loop not in names:
                raise ValueError(f"schedule for {self.kernel.name}: no loop {loop!r} (loops: {', '.join(self.kernel.loop_names)})")
            for level, size in per_level.items():
                if int(size) != size or size < 1:
                    raise ValueError(f"schedule for {self.kernel.name}: tile {loop}@{level} must be a positive integer, got {size!r}")
            tiles[loop] = {lv: int(sz) for lv, sz in per_level.items()}
        levels = tuple(self.levels)
        if not levels:
            seen: dict[str, list[int]] = {}
            for per_level in tiles.values():
                for lv, sz in per_level.items():
                    seen.setdefault(lv, []).append(sz)
            levels = tuple(sorted(seen, key=lambda lv: -sum(seen[lv]) / len(seen[lv])))
        order = {}
        for level, loops in self.order.items():
            loops = tuple(loops)
            unknown = [l for l in loops if l not in names]
            if unknown or len(set(loops)) != len(loops):
                raise ValueError(f"schedule for {self.kernel.name}: order at {level} must list distinct loops of {', '.join(self.kernel.loop_names)}, got {loops}")
            order[level] = loops + tuple(l for l in self.kernel.loop_names if l not in loops)
            if level not in levels:
                levels = levels + (level,)
        annotations = dict(self.annotations)
        if "parallel" in annotations:
            annotations["parallel"] = tuple(annotations["parallel"])
        object.__setattr__(self, "tiles", tiles)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "annotations", annotations)
        object.__setattr__(self, "levels", levels)

    # ------------------------------------------------------------------ how point loops run
    # One typed view per primitive that sets them; readers use these, never the keys of
    # `annotations` (the JSON form the report writes, and what the primitives' rewrites set).

    @property
    def parallel(self) -> tuple[str, ...] | None:
        """Loops every tile and point loop of which runs in parallel (`parallel`); None: not
        decided yet, the target's default (the output loops where it runs them in parallel
        by itself, as a PE array does), which the tiling search scores tiles with."""
        loops = self.annotations.get("parallel")
        return None if loops is None else tuple(loops)

    @property
    def vectorize(self) -> str | None:
        """The loop the vector unit runs, if any (`vectorize`)."""
        return self.annotations.get("vectorize") or None

    @property
    def unroll(self) -> int:
        """The innermost point loop's unroll factor; 0 or 1: not unrolled (`unroll`)."""
        return int(self.annotations.get("unroll") or 0)

    @property
    def skew(self) -> tuple[tuple[str, str, int], ...]:
        """(loop, by, factor), ...: loop's point loop runs over loop + factor*by (`skew`)."""
        return tuple((a, b, int(f)) for a, b, f in self.annotations.get("skew") or ())

    @property
    def point_shifts(self) -> tuple[tuple[str, str, int], ...]:
        """What the lowering reads of `skew`: the point loops whose bounds follow other loops."""
        return self.skew

    @property
    def reverse(self) -> tuple[str, ...]:
        """Loops whose point loop runs from its last value down (`reverse`)."""
        return tuple(self.annotations.get("reverse") or ())

    @property
    def affine_points(self) -> bool:
        """Some point loop runs other than in plain increasing order (its bounds follow
        another loop, or it runs backwards): the nest must run exactly as written."""
        return bool(self.skew or self.reverse)

    @property
    def stage(self) -> tuple[tuple[str, str], ...]:
        """(tensor, level), ...: tensors held at a level they would stream past (`stage`)."""
        return tuple((t, lv) for t, lv in self.annotations.get("stage") or ())

    # ------------------------------------------------------------------ the trace

    @property
    def trace(self) -> list[dict]:
        """The schedule as its trace in normal form: the steps that build it from the
        kernel's untiled nest — tiles level by level (outer → inner, loops in source order),
        reorders, compute points (consumers first), then stage, skew, reverse, parallel,
        vectorize, unroll. The record is this trace's normal form (one field per primitive);
        `schedule.replay(kernel, s.trace, s.levels)` gives it back, lowering to the same nest."""
        kernel, steps = self.kernel, []
        extents = kernel.extents
        for level in self.levels:
            for loop in kernel.loop_names:
                size = self.tiles.get(loop, {}).get(level)
                if size is not None:
                    steps.append({"primitive": "tile", "loop": loop, "level": level, "size": min(size, extents[loop])})
        for level in self.levels:
            if level in self.order:
                steps.append({"primitive": "reorder", "level": level, "order": list(self.order[level])})
        # consumers first, as `compute_at` asks (each region follows what the later ones read),
        # whatever order the search or the tuner moved the compute points in
        written = {st.target: i for i, st in enumerate(kernel.statements)}
        for tensor, loop, level in sorted(kernel.compute_at, key=lambda c: -written[c[0]]):
            steps.append({"primitive": "compute_at", "tensor": tensor, "loop": loop, "level": level})
        steps += [{"primitive": "stage", "tensor": tensor, "level": level} for tensor, level in self.stage]
        steps += [{"primitive": "skew", "loop": loop, "by": by, "factor": factor} for loop, by, factor in self.skew]
        steps += [{"primitive": "reverse", "loop": loop} for loop in self.reverse]
        if self.parallel == ():        # decided: no loop in parallel (not the target's default)
            steps.append({"primitive": "parallel", "loop": None})
        steps += [{"primitive": "parallel", "loop": loop} for loop in self.parallel or ()]
        if self.vectorize:
            steps.append({"primitive": "vectorize", "loop": self.vectorize})
        if self.unroll > 1:
            steps.append({"primitive": "unroll", "loop": self.innermost_loop, "factor": self.unroll})
        return steps

    @property
    def innermost_loop(self) -> str:
        """The loop innermost at the innermost level (the one `unroll` unrolls)."""
        return self.order_at(self.levels[-1])[-1] if self.levels else self.kernel.loop_names[-1]

    @staticmethod
    def of_arrays(kernel: Kernel, levels: Iterable[str], tiles, orders=None, parallel=None, vectorize=None,
                  keep: "Schedule | None" = None) -> "Schedule":
        """The schedule one row of the searches' decision arrays describes — the arrays the cost
        model scores (`KernelModel.schedule_arrays` is the inverse): `tiles` [loop, level]
        sizes, `orders` [level, position] loop indices (None: source order), `parallel` one
        flag per loop, `vectorize` a loop index (-1: none). What the arrays do not hold
        (unroll, skew, reverse, stage) is `keep`'s, as are its parallel loops and vectorised
        loop where `parallel` / `vectorize` is None (no `keep`: the target's default
        parallelism, nothing vectorised). Every search (tiling, tuner, library, chains)
        builds its schedules here."""
        levels = tuple(levels)
        names = kernel.loop_names
        annotations = dict(keep.annotations) if keep is not None else {}
        if parallel is not None:
            annotations["parallel"] = tuple(n for n, p in zip(names, parallel) if p)
        if vectorize is not None:
            annotations.pop("vectorize", None)
            if int(vectorize) >= 0:
                annotations["vectorize"] = names[int(vectorize)]
        order = ({} if orders is None else
                 {lv: tuple(names[int(i)] for i in orders[h]) for h, lv in enumerate(levels)})
        return Schedule(kernel, tiles={n: {lv: int(tiles[d][h]) for h, lv in enumerate(levels)}
                                       for d, n in enumerate(names)},
                        order=order, annotations=annotations, levels=levels)

    @staticmethod
    def default(kernel: Kernel, levels: Iterable[str] = ()) -> "Schedule":
        """No tiling, source order: the naive schedule."""
        return Schedule(kernel, levels=tuple(levels))

    def with_tiles(self, tiles: Mapping[str, Mapping[str, int]]) -> "Schedule":
        return replace(self, tiles=tiles)

    def with_order(self, order: Mapping[str, tuple[str, ...]]) -> "Schedule":
        return replace(self, order=order)

    def with_levels(self, levels: Iterable[str]) -> "Schedule":
        return replace(self, levels=tuple(levels))

    # ------------------------------------------------------------------ effective values

    def tile_sizes(self, levels: Iterable[str] | None = None) -> dict[str, list[int]]:
        """{loop: [size at each level, outer → inner]}, inherited and clipped so each
        tile fits inside the enclosing one (the tile a level really holds)."""
        levels = tuple(self.levels if levels is None else levels)
        out = {}
        for loop in self.kernel.loops:
            size, sizes = loop.extent, []
            for lv in levels:
                size = min(size, self.tiles.get(loop.name, {}).get(lv, size))
                sizes.append(size)
            out[loop.name] = sizes
        return out

    def order_at(self, level: str, levels: Iterable[str] | None = None) -> tuple[str, ...]:
        """The loop order at `level` (inherited from outer levels when not given)."""
        levels = tuple(self.levels if levels is None else levels)
        current = self.kernel.loop_names
        for lv in levels:
            current = self.order.get(lv, current)
            if lv == level:
                return current
        return self.order.get(level, current)

    # ------------------------------------------------------------------ printing

    def loop_nest(self) -> str:
        """The tiled loop nest as readable Python-like pseudo-code (`ir.loopnest.lower`)."""
        from .loopnest import lower

        return lower(self).pretty()

    def __str__(self) -> str:
        head = f"# kernel {self.kernel.name}: ops {', '.join(self.kernel.ops)}"
        return head + "\n" + self.loop_nest()


# --------------------------------------------------------------------------- canonical forms
# (the keys of the per-structure caches: canon.py; the cost model shares its compiled models by them)

_CANON = LRU("canonical_kernel", 4096)


def canonical_kernel(kernel: Kernel) -> Kernel:
    """`kernel` with tensors renamed T0, T1, ... (by position in `kernel.tensors`), ops
    op0, op1, ... and the kernel itself K. Equal for kernels equal up to those names."""
    cached = kernel.__dict__.get("_canonical")     # memo on the (immutable) kernel itself
    if cached is not None:
        return cached
    names = canonical_names(kernel)

    def rename(e):
        if isinstance(e, Access):
            return replace(e, tensor=names.get(e.tensor, e.tensor), span=None)
        return None

    statements = tuple(replace(s, target=names.get(s.target, s.target), expr=substitute(s.expr, rename), span=None,
                               rescale=s.rescale and replace(s.rescale, tensor=names[s.rescale.tensor]))
                       for s in kernel.statements)
    canon = Kernel(name="K", ops=tuple(f"op{i}" for i in range(len(kernel.ops))), statements=statements,
                   loops=kernel.loops, inputs=tuple(names[n] for n in kernel.inputs),
                   outputs=tuple(names[n] for n in kernel.outputs),
                   internals=tuple(names[n] for n in kernel.internals),
                   tensors=tuple(replace(t, name=names[t.name], span=None) for t in kernel.tensors),
                   anchor=kernel.anchor, loop_maps=kernel.loop_maps,
                   compute_at=tuple((names[t], loop, level) for t, loop, level in kernel.compute_at))
    # One object per canonical form: later equality tests are identity tests.
    shared = _CANON.get(canon)
    if shared is None:
        _CANON.put(canon, canon)
        shared = canon
    object.__setattr__(kernel, "_canonical", shared)
    return shared


def canonical_names(kernel: Kernel) -> dict[str, str]:
    """The renaming `canonical_kernel` applies: each tensor's name → T<its position>."""
    return {t.name: f"T{i}" for i, t in enumerate(kernel.tensors)}
