"""The loop-nest IR: a scheduled kernel lowered once to a tree of loops and statements.

`lower(schedule)` is the only place a tiled nest is worked out. Every reader walks the tree
it returns: isl schedule maps (`poly.from_tiled_schedule`), tiled execution in the
interpreter (`interp.run_kernel_tiled`), C (`codegen/c/`), the accelerator pseudo-kernel
(`codegen/pseudo.py`), the TVM bridge and the Schedule tab (`LoopNest.pretty`).

The tree (all nodes frozen):

- `TileLoop`: steps through the tiles of one kernel (anchor) loop at one memory level,
  `for var in range(start, end, size)`: `start`/`end` are the enclosing tile over the same
  anchor loop in this branch (or 0/extent), and the last tile of a non-dividing size is a
  remainder tile (`exact` says none can occur). Tile loops come level by level (outer →
  inner), each level in the schedule's order there; a loop whose tile covers its enclosing
  tile adds no tile loop.
- `Compute`: one statement's own point nest inside the tiles around it. A point loop that
  follows an anchor loop runs over that loop's current tile (or its whole extent when no
  enclosing tile loop tiles it); a local loop (the reduction of a softmax row that maps to
  no anchor loop) runs in full. `last_of` names the enclosing tile loops whose anchor loop
  the statement does not follow (a ReLU epilogue has no `k`): it runs only in their last
  tile, after every update of its input.

Statement placement (fission inside a tile). Statements run in program order. A statement
joins the tile loops the previous statement is in, outermost first, while that is legal by
construction: a consumer may share a tile loop over anchor loop `a` with a producer (an
earlier statement in the same loop whose tensor it reads) iff
  - the consumer does not follow `a` (it runs in the last `a` tile, after the producer's), or
  - both follow `a`, the producer's loop on `a` is an output loop writing one dimension of
    its tensor as exactly that loop, and the consumer reads that dimension at exactly its
    own loop on `a` (and no other dimension through `a`): each tile reads what the same tile
    wrote, complete.
A producer that reduces over `a` (the row max of a softmax) is complete only after its last
`a` tile, so a consumer following `a` cannot share that loop: it gets its own instance of
the tile loop, after the producer's has finished (for i: {for j: max; for j: exp, sum;
for j: divide}) — unless the consumer is computed against the running max (`Rescale`, the
online softmax): it then shares the max's tiles, reading the max so far. Where a statement cannot join, it opens its own tile loops for the anchor
loops it follows and stops at the first one it does not. poly.py still proves every tree
legal; this rule only makes the trees it builds legal to begin with.

Compute at (`Kernel.compute_at`: tensor, loop, level). The statements writing a computed-at
tensor run inside the anchor's tile loops down to the one over `loop` at `level` (the
compute point; where that loop is not tiled at that level, the point is where its tile loop
would be), in every tile there, over the region of their tensor the tile reads
(`regions`): each of their loops writing a dimension runs over the interval hull of that
dimension's reads by its consumers in the tile — the halo of a stencil or a convolution
(rows h-1 .. h+T of a 3x3 conv's input), the tile of a contraction's hidden dimension —
clipped to the tensor; their other loops run in full. A region overlapping the next tile's
is recomputed there (never carried). A reduction's region restarts from its initial value
each time (`Compute.recompute`). The consumers (the anchor, other computed-at statements, or
statements that run in the anchor's tile iteration: `in_tile_iteration`, such as the online
softmax's max and exp and a mask table's add before them) join the producers' tile loops.
A computed-at statement reads only the kernel's
inputs, other computed-at tensors and tensors computed whole before it (it then starts a
new instance of the tile loops, after theirs), so every recomputation gives the same values.

`whole_loops(kernel)` names the anchor loops whose tiling would split a kernel this way;
the tiling search and the tuner keep them whole (one tile), as real softmax and layernorm
kernels keep the row, and the cost model then scores the nest that runs.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator, Mapping, Sequence, Union

from .program import Statement
from .schedule import Kernel, Schedule


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class TileLoop:
    """`for var in range(start, end, size)` over the tiles of anchor loop `anchor` at `level`.

    `parent` is the var of the enclosing tile loop over the same anchor in this branch
    (None: the loop covers the whole extent); `enclosing` is that tile's full size (the
    extent when there is none); `lengths` the sizes this loop's tiles can have (remainder
    tiles included); `exact`: every tile of the enclosing ones is full (no `min` needed).
    """

    anchor: str
    level: str
    size: int
    var: str
    parent: str | None
    enclosing: int
    extent: int
    lengths: frozenset
    exact: bool
    parallel: bool
    body: tuple["Node", ...]


@dataclass(frozen=True)
class Region:
    """Where a computed-at statement's loop runs in each tile at its compute point:
    [sum(scale*start) + lo, sum(scale*end) + hi) clipped to [0, extent), summed over
    `terms` ((anchor loop, scale), ...), with [start, end) the current tile of each anchor
    loop there (its whole extent when untiled above the point); no terms: [lo, hi)."""

    terms: tuple[tuple[str, int], ...]
    lo: int
    hi: int

    @property
    def exact(self) -> bool:
        """The region is one anchor loop's tile itself."""
        return len(self.terms) == 1 and self.terms[0][1] == 1 and (self.lo, self.hi) == (0, 0)

    def at(self, box: Mapping[str, tuple[int, int]], extent: int) -> tuple[int, int]:
        """The range in the tile box {anchor loop: (first, end)} (numbers)."""
        first = sum(k * box[a][0] for a, k in self.terms) + self.lo
        end = sum(k * box[a][1] for a, k in self.terms) + self.hi
        return max(0, first), min(extent, end)


class ComputeAtError(ValueError):
    """A `compute_at` the loop nest cannot express (the message says why)."""


@dataclass(frozen=True)
class PointLoop:
    """One loop of a statement's own nest: `name` (the statement's loop) over the current
    tile of anchor loop `anchor` (`tile` is that tile loop's var, None: the whole extent),
    or over its full `extent` when local (`anchor` None)."""

    name: str
    anchor: str | None
    tile: str | None
    extent: int
    lengths: frozenset          # trip counts it can have
    reduction: bool
    parallel: bool = False
    vectorize: bool = False
    unroll: int = 0
    reverse: bool = False                     # runs from its last value down to its first
    shift: tuple[tuple[str, int], ...] = ()   # ((by, factor), ...): runs over name + factor*by
    region: Region | None = None              # computed at: the region its tile reads
    region_tiles: tuple[str | None, ...] = ()   # per region term: the tile loop var there (None: untiled)

    @property
    def shifted(self) -> bool:
        """It runs over its name plus other loops' values (its variable is a new one)."""
        return bool(self.shift)

    @property
    def affine(self) -> bool:
        """Its bounds depend on another loop or it runs backwards: C, the pseudo-kernel and
        the TVM bridge write affine bounds for it (`affine_point_bounds`)."""
        return self.reverse or bool(self.shift)

    def time(self) -> str:
        """The loop's time coordinate in the statement's own loop names (what isl orders):
        `j + 1*i` for j shifted by i, `-(k)` reversed."""
        text = " + ".join([self.name] + [f"{f}*{by}" for by, f in self.shift])
        return f"-({text})" if self.reverse else text


@dataclass(frozen=True)
class Compute:
    """Statement `index` of the kernel, run over `loops` (outer → inner) inside the
    enclosing tiles; only in the last tile of each tile loop named in `last_of`."""

    index: int
    statement: Statement
    loops: tuple[PointLoop, ...]
    last_of: tuple[str, ...] = ()
    recompute: bool = False     # computed at: its target's region restarts each time it runs


Node = Union[TileLoop, Compute]


@dataclass(frozen=True, eq=False)
class LoopNest:
    """A kernel's schedule as one tree of tile loops and statement nests."""

    schedule: Schedule
    body: tuple[Node, ...]

    @property
    def kernel(self) -> Kernel:
        return self.schedule.kernel

    # ------------------------------------------------------------------ walking

    def computes(self) -> Iterator[tuple[tuple[TileLoop, ...], Compute]]:
        """Every statement nest with the tile loops around it (outer → inner), in program order."""
        def walk(nodes, path):
            for node in nodes:
                if isinstance(node, TileLoop):
                    yield from walk(node.body, path + (node,))
                else:
                    yield path, node
        yield from walk(self.body, ())

    def tile_loops(self) -> list[TileLoop]:
        """Every tile loop, in preorder (a loop split by fission appears once per instance)."""
        out: list[TileLoop] = []

        def walk(nodes):
            for node in nodes:
                if isinstance(node, TileLoop):
                    out.append(node)
                    walk(node.body)
        walk(self.body)
        return out

    def paths(self) -> list[tuple[tuple[tuple[int, Node], ...], Compute]]:
        """For each statement nest: the (position among siblings, node) pairs from the root
        down to it — what poly.py turns into a 2d+1 schedule."""
        out = []

        def walk(nodes, path):
            for position, node in enumerate(nodes):
                if isinstance(node, TileLoop):
                    walk(node.body, path + ((position, node),))
                else:
                    out.append((path + ((position, node),), node))
        walk(self.body, ())
        return out

    @cached_property
    def anchor_of(self) -> dict[str, str]:
        """Tile loop variable → the kernel loop it tiles (instances of one loop share a var)."""
        return {t.var: t.anchor for t in self.tile_loops()}

    def guarded(self, compute: Compute) -> set[str]:
        """Kernel loops whose last tile alone runs `compute` (its `last_of`, as loops)."""
        return {self.anchor_of[v] for v in compute.last_of}

    def executions(self) -> int:
        """How many (tile, statement) runs the nest performs, remainder tiles included."""
        total = 0
        for path, compute in self.computes():
            chains: dict[str, list[int]] = {}
            for loop in path:
                chains.setdefault(loop.anchor, []).append(loop.size)
            guarded = self.guarded(compute)
            runs = 1
            for anchor, sizes in chains.items():
                runs *= 1 if anchor in guarded else tile_count(self.kernel.extents[anchor], sizes)
            total += runs
        return total

    def instances(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        """Every statement instance (statement index, values of its loops in loop order), in
        the order the nest runs them: the nest's meaning, point by point (for tests and
        small kernels; every reader must agree with it)."""
        extents = self.kernel.extents

        def visit(nodes, box):
            for node in nodes:
                if isinstance(node, TileLoop):
                    lo, hi = box[node.anchor]
                    for first in range(lo, hi, node.size):
                        yield from visit(node.body, {**box, node.anchor: (first, min(first + node.size, hi))})
                    continue
                guarded = self.guarded(node)
                if any(box[a][1] != extents[a] for a in guarded):
                    continue
                stmt = node.statement
                ranges = [range(*point_range(p, box, extents)) for p in node.loops]
                position = [stmt.loop_names.index(p.name) for p in node.loops]
                points = []
                for values in itertools.product(*ranges):
                    point = [0] * len(values)
                    for k, v in zip(position, values):
                        point[k] = v
                    points.append(tuple(point))
                if any(p.affine for p in node.loops):   # shifted or reversed: ordered by time
                    names = stmt.loop_names
                    points.sort(key=lambda pt: tuple(
                        (-1 if p.reverse else 1) * (pt[names.index(p.name)]
                                                    + sum(f * pt[names.index(b)] for b, f in p.shift))
                        for p in node.loops))
                for point in points:
                    yield node.index, point

        yield from visit(self.body, {a: (0, e) for a, e in extents.items()})

    # ------------------------------------------------------------------ printing

    def pretty(self) -> str:
        """The nest as readable Python-like pseudo-code (the Schedule tab)."""
        lines: list[str] = []
        for depth, node, bounds in self.walk():
            pad = "    " * depth
            if isinstance(node, TileLoop):
                start, stop, _ = bounds[node.var]
                note = "    # parallel" if node.parallel else ""
                lines.append(f"{pad}for {node.var} in range({start}, {stop}, {node.size}):{note}")
                continue
            if node.last_of:
                lines.append(f"{pad}if last({', '.join(node.last_of)}):")
                depth += 1
            affine = {a.name: a for a in affine_point_bounds(
                node, {p.name: point_bounds(p, bounds, extents=self.kernel.extents) for p in node.loops})}
            if any(p.region is not None for p in node.loops):
                lines.append(f"{pad}# computed at this tile: the region of {node.statement.target} it reads"
                             + (" (restarts from 0)" if node.recompute else ""))
            rs = node.statement.rescale
            if rs is not None:       # online softmax (program.Rescale)
                m = f"{rs.tensor}[{', '.join(map(str, rs.indices))}]"
                lines.append("    " * depth + (
                    f"# online softmax: first {node.statement.target} *= exp({rs.scale:g} * (last seen {m} - {m}))"
                    if node.statement.reduce == "+" else f"# online softmax: against the running max {m}"))
            for p in node.loops:
                notes = [n for n, on in (("parallel", p.parallel), ("vectorize", p.vectorize)) if on]
                if p.unroll > 1:
                    notes.append(f"unroll {p.unroll}")
                note = f"    # {', '.join(notes)}" if notes else ""
                a = affine[p.name]
                if p.affine:
                    step = ", -1" if p.reverse else ""
                    first, last = (f"{a.stop} - 1", f"{a.start} - 1") if p.reverse else (a.start, a.stop)
                    lines.append("    " * depth + f"for {a.var} in range({first}, {last}{step}):{note}")
                else:
                    start, stop = a.start, a.stop
                    span = stop if start == "0" else f"{start}, {stop}"
                    lines.append("    " * depth + f"for {a.var} in range({span}):{note}")
                depth += 1
                for b in affine.values():
                    if b.defined_in == p.name and b.var != b.name:
                        lines.append("    " * depth + f"{b.name} = {b.value}")
            lines.append("    " * depth + str(node.statement).split("    #")[0])
        return "\n".join(lines)

    def walk(self, name=lambda var: var, minimum: str = "min"):
        """Preorder (depth, node, bounds): `bounds[var]` = (start, stop, end) expressions of
        each enclosing tile loop, with tile variables written by `name` and `minimum` for the
        clipping function (C uses `AC_MIN`): a tile runs [var, end), its loop [start, stop)."""
        def visit(nodes, depth, bounds):
            for node in nodes:
                if isinstance(node, TileLoop):
                    if node.parent is None:
                        start, stop = "0", str(node.extent)
                    else:
                        start, stop = name(node.parent), bounds[node.parent][2]
                    var = name(node.var)
                    end = f"{var} + {node.size}" if node.exact else f"{minimum}({var} + {node.size}, {stop})"
                    inner = {**bounds, node.var: (start, stop, end)}
                    yield depth, node, inner
                    yield from visit(node.body, depth + 1, inner)
                else:
                    yield depth, node, bounds
        yield from visit(self.body, 0, {})


def point_bounds(p: PointLoop, bounds, name=lambda var: var, maximum="max", minimum="min",
                 extents=None) -> tuple[str, str]:
    """(start, stop) of a point loop under tile bounds from `LoopNest.walk` (a computed-at
    loop's region clipped with `maximum` / `minimum`; `extents` of the kernel's loops, for
    a region term over an anchor loop untiled there)."""
    r = p.region
    if r is not None:
        if r.exact and p.region_tiles[0] is not None:          # the tile itself
            var = p.region_tiles[0]
            return name(var), bounds[var][2]
        starts, ends, lo, hi = [], [], r.lo, r.hi
        for (anchor, k), var in zip(r.terms, p.region_tiles):
            if var is None:               # the whole loop: [0, extent)
                hi += k * extents[anchor]
                continue
            starts.append(name(var) if k == 1 else f"{k}*{name(var)}")
            ends.append(bounds[var][2] if k == 1 else f"{k}*({bounds[var][2]})")
        if not starts:
            return str(max(0, lo)), str(min(p.extent, hi))
        return (f"{maximum}(0, {_offset(' + '.join(starts), lo)})",
                f"{minimum}({p.extent}, {_offset(' + '.join(ends), hi)})")
    if p.tile is None:
        return "0", str(p.extent)
    return name(p.tile), bounds[p.tile][2]


def _offset(x: str, k: int) -> str:
    return x if k == 0 else (f"{x} + {k}" if k > 0 else f"{x} - {-k}")


def point_range(p: PointLoop, box: dict, extents: dict) -> tuple[int, int]:
    """[first, end) of a point loop in the tile box {anchor loop: (first, end)} (numbers)."""
    if p.region is not None:
        return p.region.at(box, p.extent)
    return box[p.anchor] if p.tile is not None else (0, p.extent)


@dataclass(frozen=True)
class AffineBounds:
    """How one point loop is written with affine bounds: `var` runs over [start, stop)
    (downwards when reversed) and the statement's loop `name` is `value` (an expression in
    `var` and outer loop names; `name` itself when not shifted), defined once the loop
    `defined_in` (this one, or the inner loop of a wavefront) is open."""

    name: str
    var: str
    start: str
    stop: str
    value: str
    defined_in: str


def affine_point_bounds(compute: "Compute", spans: dict, floordiv="floordiv", maximum="max", minimum="min",
                        symbol=None) -> list[AffineBounds]:
    """The point loops of `compute`, outer → inner, as loops with affine bounds, from each
    loop's own [start, stop) (`spans[name]`). A loop `x` shifted by `y` with factor f runs
    over x' = x + f*y:
      - y outside x: x' in [sx + f*y, ex + f*y), x = x' - f*y;
      - x' outside y (a wavefront): x' in [sx + f*sy, ex + f*(ey - 1)), and y in
        [max(sy, floordiv(x' - ex + f, f)), min(ey, floordiv(x' - sx, f) + 1)).
    Reversal changes only the direction. Written as text (spans are expressions as
    strings; `floordiv`, `maximum`, `minimum` name the functions: C's `AC_FLOORDIV`, ...) or
    as the writer's own expressions (the TVM bridge's PrimExprs: spans are expressions,
    the three are callables and `symbol(var)` gives a loop variable)."""
    algebra = _Native(floordiv, maximum, minimum, symbol) if callable(floordiv) else _Text(floordiv, maximum, minimum)
    loops = compute.loops
    position = {p.name: n for n, p in enumerate(loops)}
    start = {p.name: spans[p.name][0] for p in loops}
    stop = {p.name: spans[p.name][1] for p in loops}
    var = {p.name: (f"{p.name}_s" if p.shift else p.name) for p in loops}
    value = {p.name: algebra.var(p.name) for p in loops}
    defined_in = {p.name: p.name for p in loops}
    A = algebra
    for p in loops:
        for by, f in p.shift:
            x, y = p.name, by
            if position[y] < position[x]:
                start[x], stop[x] = A.add(start[x], A.mul(f, A.var(y))), A.add(stop[x], A.mul(f, A.var(y)))
            else:
                sx, ex, sy, ey = spans[x][0], spans[x][1], spans[y][0], spans[y][1]
                start[x], stop[x] = A.add(sx, A.mul(f, sy)), A.add(ex, A.mul(f, A.sub(ey, 1)))
                start[y] = A.max(sy, A.floordiv(A.add(A.sub(A.var(var[x]), ex), f), f))
                stop[y] = A.min(ey, A.add(A.floordiv(A.sub(A.var(var[x]), sx), f), 1))
            value[x] = A.sub(A.var(var[x]), A.mul(f, A.var(y)))
            defined_in[x] = max(x, y, key=position.get)
    return [AffineBounds(p.name, var[p.name], start[p.name], stop[p.name], value[p.name], defined_in[p.name])
            for p in loops]


class _Text:
    """Affine expressions as text (C, the pseudo-kernel, the Schedule tab)."""

    def __init__(self, floordiv: str, maximum: str, minimum: str):
        self.names = floordiv, maximum, minimum

    @staticmethod
    def _atom(x) -> str:
        x = str(x)
        return x if re.fullmatch(r"[\w.]+", x) else f"({x})"

    def var(self, name):
        return name

    def add(self, a, b):
        return f"{a} + {b}"

    def sub(self, a, b):
        return f"{a} - {self._atom(b)}"

    def mul(self, k: int, a):
        return f"{k}*{self._atom(a)}"

    def floordiv(self, a, k: int):
        return f"{self.names[0]}({a}, {k})"

    def max(self, a, b):
        return f"{self.names[1]}({a}, {b})"

    def min(self, a, b):
        return f"{self.names[2]}({a}, {b})"


class _Native:
    """Affine expressions in a writer's own expression type (operators + - *)."""

    def __init__(self, floordiv, maximum, minimum, symbol):
        self.floordiv, self.max, self.min, self.var = floordiv, maximum, minimum, symbol

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def mul(self, k: int, a):
        return k * a


def _tile_pieces(extent: int, sizes: Sequence[int]) -> list[tuple[int, int]]:
    """The innermost pieces [first, end) of [0, extent) split by `sizes` in turn."""
    pieces = [(0, extent)]
    for size in sizes:
        pieces = [(x, min(x + size, b)) for a, b in pieces for x in range(a, b, size)]
    return pieces


def tile_count(extent: int, sizes: Sequence[int]) -> int:
    """Innermost pieces of [0, extent) split by `sizes` in turn (remainders included)."""
    def split(x: int, k: int) -> int:
        if k == len(sizes) or x == 0:
            return 1 if x else 0
        t = sizes[k]
        full, rest = divmod(x, t)
        return full * split(t, k + 1) + (split(rest, k + 1) if rest else 0)
    return split(extent, 0)


# --------------------------------------------------------------------------- lowering


@dataclass(frozen=True)
class _TileStep:
    """One tile loop of the schedule's flat sequence (before statement placement)."""

    anchor: str
    level: str
    size: int


def tile_steps(schedule: Schedule) -> list[_TileStep]:
    """The schedule's tile loops outer → inner: level by level, each in its order there,
    skipping loops whose tile covers the enclosing one."""
    sizes = schedule.tile_sizes()
    span = dict(schedule.kernel.extents)
    steps = []
    for li, level in enumerate(schedule.levels):
        for loop in schedule.order_at(level):
            size = sizes[loop][li]
            if size < span[loop]:
                steps.append(_TileStep(loop, level, size))
                span[loop] = size
    return steps


def may_share(kernel: Kernel, producer: int, consumer: int, anchor: str) -> bool:
    """Whether `consumer` may run in the same tile loop over `anchor` as `producer`
    (see the module docstring), for a consumer that reads the producer's tensor."""
    p_stmt, c_stmt = kernel.statements[producer], kernel.statements[consumer]
    p_map, c_map = kernel.loop_map(producer), kernel.loop_map(consumer)
    c_loops = [l for l, a in c_map.items() if a == anchor]
    if not c_loops:
        return True                       # the consumer runs in the last tile only
    p_loops = [l for l, a in p_map.items() if a == anchor]
    if not p_loops:
        return False                      # the producer runs in the last tile only
    if p_stmt.reduce == "max" and c_stmt.rescale is not None and c_stmt.rescale.tensor == p_stmt.target:
        return True                       # it reads the max so far (online softmax, `Rescale`)
    (p_loop,), (c_loop,) = p_loops, c_loops
    dims = [d for d, idx in enumerate(p_stmt.target_indices) if p_loop in idx.loops]
    if len(dims) != 1 or p_stmt.target_indices[dims[0]].single_loop != p_loop:
        return False                      # a reduction over `anchor`, or a shifted write
    (dim,) = dims
    for access in c_stmt.reads():
        if access.tensor != p_stmt.target:
            continue
        for d, idx in enumerate(access.indices):
            if d == dim and idx.single_loop != c_loop:
                return False
            if d != dim and c_loop in idx.loops:
                return False
    return True


def _against_running_max(kernel: Kernel, index: int) -> bool:
    """Statement `index` is computed against a running max (`Rescale`), or is that max."""
    stmt = kernel.statements[index]
    return stmt.rescale is not None or any(s.rescale is not None and s.rescale.tensor == stmt.target
                                           for s in kernel.statements)


def in_tile_iteration(kernel: Kernel, index: int) -> bool:
    """Whether statement `index`, before the anchor and not computed at its tiles, runs in the
    anchor's tile iteration over the current tile of every anchor loop it follows, so that a
    computed-at tensor it reads is computed over the region that tile reads (`regions`):
      - it is computed against a running max, or is that max (the online softmax's row max,
        exp and sums share the anchor's key tiles: `may_share`); or
      - it is elementwise (no reduction; one loop per dimension of its tensor, each an
        anchor loop), reads only the kernel's inputs and computed-at tensors (it joins the
        tile loops they are computed in: `placement`), its tensor stays in the kernel, and
        every statement reading it runs in the same iteration (after the anchor, or so by
        this rule) and may share each of its tile loops (`may_share`: each tile reads what
        the same tile wrote). A mask table's add `Sb = S + B` between the scores (computed
        at the key tiles) and the softmax's max is one: it then runs in the max's tiles,
        its result kept there for the max and the exp instead of another pass over the region.
    poly.py still proves the nest legal and the interpreter checks what it computes."""
    statements = kernel.statements
    if _against_running_max(kernel, index):
        return True
    stmt = statements[index]
    at = kernel.computed_at()
    if index in at or index >= kernel.anchor or stmt.reduce is not None or stmt.rescale is not None:
        return False
    follows = kernel.loop_map(index)
    written = [idx.single_loop for idx in stmt.target_indices]
    if stmt.target not in kernel.internals or None in written or len(set(written)) != len(written) \
            or set(written) != {l.name for l in stmt.loops} or any(w not in follows for w in written):
        return False
    writer = {st.target: i for i, st in enumerate(statements)}
    if any(a.tensor in writer and writer[a.tensor] not in at for a in stmt.reads()):
        return False
    readers = [c for c in range(index + 1, len(statements))
               if any(a.tensor == stmt.target for a in statements[c].reads())]
    return bool(readers) and all(
        c not in at and (c >= kernel.anchor or in_tile_iteration(kernel, c))
        and all(may_share(kernel, index, c, a) for a in follows.values())
        for c in readers)


def regions(kernel: Kernel) -> dict[int, dict[str, Region]]:
    """For each computed-at statement, the region each of its loops runs over per tile
    (see the module docstring): derived from its consumers' reads, consumers first, so a
    chain (expand → depthwise → project) composes its halos. Raises `ComputeAtError` where
    the nest cannot express it. Remembered on the (immutable) kernel."""
    memo = kernel.__dict__.get("_regions")
    if memo is not None:
        return memo
    at = kernel.computed_at()
    statements = kernel.statements
    out: dict[int, dict[str, Region]] = {}

    def ranges(c: int) -> dict[str, Region]:
        if c in out:
            return out[c]
        m = kernel.loop_map(c)
        return {l.name: Region(((m[l.name], 1),), 0, 0) if l.name in m else Region((), 0, l.extent)
                for l in statements[c].loops}

    def hull(index, R: dict[str, Region], where: str) -> Region:
        # x in [sum(s*start) + lo, sum(s*end) + hi): c*x spans c*(...lo) .. c*(...hi - 1).
        terms: dict[str, int] = {}
        lo = hi = index.const
        for l, c in index.terms:
            r = R[l]
            if r.terms and c < 0:
                raise ComputeAtError(f"{where} is read through {c}*{l}: a region follows its loops "
                                     "with positive coefficients")
            if not r.terms:
                a, b = c * r.lo, c * (r.hi - 1)
                lo, hi = lo + min(a, b), hi + max(a, b)
                continue
            for anchor, k in r.terms:
                if kernel.extents[anchor] == 1:     # a loop of one trip: its tile is [0, 1)
                    hi += c * k
                else:
                    terms[anchor] = terms.get(anchor, 0) + c * k
            lo, hi = lo + c * r.lo, hi + c * (r.hi - 1)
        return Region(tuple(sorted(terms.items())), lo, hi + 1)

    for p in sorted(at, reverse=True):
        stmt = statements[p]
        tensor = stmt.target
        where = f"compute_at({tensor})"
        if tensor not in kernel.internals:
            raise ComputeAtError(f"{where}: {tensor} is read outside the kernel (only a tensor produced "
                                 "and consumed inside it can be computed in its consumer's tiles)")
        writers = [i for i, st in enumerate(statements) if st.target == tensor]
        if len(writers) > 1:
            raise ComputeAtError(f"{where}: {tensor} is written by {len(writers)} statements")
        if any(idx.single_loop is None for idx in stmt.target_indices) or \
                len({idx.single_loop for idx in stmt.target_indices}) != len(stmt.target_indices):
            raise ComputeAtError(f"{where}: {tensor} must be written with one loop per dimension")
        consumers = [c for c in range(p + 1, len(statements))
                     if any(a.tensor == tensor for a in statements[c].reads())]
        if not consumers:
            raise ComputeAtError(f"{where}: nothing in the kernel reads {tensor}")
        for c in consumers:
            # A statement after the anchor runs on the anchor's tile (an epilogue, a layernorm's
            # variance after its mean): it reads the region over that tile, as the anchor does;
            # so does one computed against a running max (the online softmax's row max and exp,
            # in the anchor's key tiles), and an elementwise step its readers run in the same
            # tile iteration (`in_tile_iteration`: a mask table's add before that max).
            if c not in at and c < kernel.anchor and not in_tile_iteration(kernel, c):
                raise ComputeAtError(f"{where}: {tensor} is read by {statements[c].target}, which is neither "
                                     "the kernel's anchor nor computed at its tiles")
        dims: list[Region | None] = [None] * len(stmt.target_indices)
        extent = [stmt.extents[idx.single_loop] for idx in stmt.target_indices]
        for c in consumers:
            R = ranges(c)
            for a in statements[c].reads():
                if a.tensor != tensor:
                    continue
                for d, index in enumerate(a.indices):
                    r = hull(index, R, f"{where}: dimension {d} of {tensor}")
                    old = dims[d]
                    if old is None:
                        dims[d] = r
                    elif old.terms == r.terms:
                        dims[d] = Region(r.terms, min(old.lo, r.lo), max(old.hi, r.hi))
                    elif any(not x.terms and x.lo <= 0 and x.hi >= extent[d] for x in (old, r)):
                        dims[d] = Region((), 0, extent[d])         # one consumer reads it all: all of it
                    else:
                        raise ComputeAtError(f"{where}: dimension {d} of {tensor} is read along different loops")
        own = {idx.single_loop: dims[d] for d, idx in enumerate(stmt.target_indices)}
        out[p] = {l.name: own.get(l.name, Region((), 0, l.extent)) for l in stmt.loops}
    object.__setattr__(kernel, "_regions", out)
    return out


def compute_depth(schedule: Schedule, steps: Sequence[_TileStep], loop: str, level: str) -> int:
    """How many tile loops of `steps` enclose the compute point (loop, level): those of the
    outer levels and, at `level`, those up to `loop`'s place in its order there."""
    levels = tuple(schedule.levels)
    if level not in levels:
        return len(steps)
    li = levels.index(level)
    order = schedule.order_at(level)
    depth = 0
    for step in steps:
        sl = levels.index(step.level)
        if sl < li or (sl == li and order.index(step.anchor) <= order.index(loop)):
            depth += 1
    return depth


def _producers(kernel: Kernel, consumer: int) -> list[int]:
    read = {a.tensor for a in kernel.statements[consumer].reads()}
    return [i for i in range(consumer) if kernel.statements[i].target in read]


def placement(kernel: Kernel, steps: Sequence[_TileStep], at_depth: dict[int, int] | None = None
              ) -> list[tuple[int, int]]:
    """For each statement, (joined, depth): how many leading tile loops it shares with the
    previous statement's instances, and how many tile loops it runs inside. `at_depth`:
    the computed-at statements' depths (their compute points); a consumer shares those
    loops with them."""
    at_depth = at_depth or {}
    out: list[tuple[int, int]] = []
    members: list[list[int]] = []        # per position: statements in the open instance
    for s in range(len(kernel.statements)):
        follows = set(kernel.loop_map(s).values())
        producers = set(_producers(kernel, s))
        joined = 0
        previous_depth = out[-1][1] if out else 0
        limit = min(previous_depth, at_depth.get(s, previous_depth))
        if s in at_depth and any(p not in at_depth for p in producers):
            limit = 0    # it reads a tensor computed whole: after that tensor's nest has run
        while joined < limit:
            anchor = steps[joined].anchor
            if not all((p in at_depth and joined < at_depth[p]) or may_share(kernel, p, s, anchor)
                       for p in members[joined] if p in producers):
                break
            joined += 1
        depth = joined
        if s in at_depth:
            depth = at_depth[s]
        while s not in at_depth and depth < len(steps) and steps[depth].anchor in follows:
            depth += 1
        del members[joined:]
        for position in range(len(members)):
            members[position].append(s)
        members += [[s] for _ in range(depth - joined)]
        out.append((joined, depth))
    return out


def whole_loops(kernel: Kernel) -> frozenset[str]:
    """Anchor loops that, tiled, would split the kernel into several tile loops (a later
    statement reads a reduction over them, or reads across their tiles): kept whole by the
    tiling search and the tuner. Remembered on the (immutable) kernel: the searches ask it
    of every kernel they score."""
    cached = kernel.__dict__.get("_whole_loops")
    if cached is not None:
        return cached
    out = set()
    for anchor in kernel.loop_names:
        steps = [_TileStep(anchor, "", 1)]
        places = placement(kernel, steps, {c: 1 for c in kernel.computed_at()})
        computed = kernel.computed_at()
        users = [(j, d) for (j, d), s in zip(places, range(len(places)))
                 if anchor in kernel.loop_map(s).values() or s in computed]
        instances = sum(1 for j, d in users if d > j)
        if instances > 1:
            out.add(anchor)
    found = frozenset(out)
    object.__setattr__(kernel, "_whole_loops", found)
    return found


def single_pass(schedule: Schedule) -> bool:
    """Whether the nest of `schedule` is one pass, as the cost model scores it: no statement
    opens a new instance of a tile loop the statement before it ran in, and each of the
    kernel's own statements runs inside every tile loop over its own loops (`placement`) —
    not one pass per statement group, nor over a larger tile. A loop `whole_loops` names may still be
    tiled so: at the innermost level, as the innermost loop there (the statements without it
    then run just outside its tile loop)."""
    kernel = schedule.kernel
    steps = tile_steps(schedule)
    computed = kernel.computed_at()
    at_depth = {i: compute_depth(schedule, steps, loop, level) for i, (loop, level) in computed.items()}
    previous = None
    for s, (joined, depth) in enumerate(placement(kernel, steps, at_depth)):
        if previous is not None and joined < min(previous, depth):
            return False        # a new instance of a tile loop the statement before it ran in
        previous = depth
        if s in computed:
            continue
        own = set(kernel.loop_map(s).values())
        if any(step.anchor in own for step in steps[depth:]):
            return False        # it runs over a larger tile than a tile loop over its loops
    return True


def lower(schedule: Schedule) -> LoopNest:
    """The loop nest `schedule` runs (see the module docstring).

    Annotations: `parallel` marks, per annotated loop, the outermost loops over it that
    have no parallel loop around them and are not a reduction of any statement beneath
    (a reduction loop is never parallel); `vectorize` the innermost point loop when it is
    the annotated output loop; `unroll` every statement's innermost point loop; `reverse`
    (loops) runs their point loops backwards; the point shifts ((loop, by, factor), ...) run the
    point loop of `loop` over loop + factor*by in every statement that has both (bounds from
    `affine_point_bounds`). Both change only the order inside a tile: the tiles, and so
    every footprint, stay as they are."""
    lowering = _Lowering(schedule)
    return LoopNest(schedule, lowering.build([(s, j, d) for s, (j, d) in enumerate(lowering.places)], 0, False))


def _tile_shapes(steps, extents: dict[str, int]) -> list[tuple]:
    """Tile loop shapes along the flat sequence of tile steps: (var, parent var, enclosing
    size, lengths, exact)."""
    shapes = []
    chain: dict[str, tuple[str | None, int, frozenset]] = {a: (None, e, frozenset([e])) for a, e in extents.items()}
    for step in steps:
        parent, enclosing, lengths = chain[step.anchor]
        var = re.sub(r"\W", "_", f"{step.anchor}_{step.level}")
        new_lengths = frozenset({step.size for L in lengths if L >= step.size}
                                | {L % step.size for L in lengths if L % step.size})
        exact = all(L % step.size == 0 for L in lengths)
        shapes.append((var, parent, enclosing, new_lengths, exact))
        chain[step.anchor] = (var, step.size, new_lengths)
    return shapes


class _Lowering:
    """One `lower` call: the schedule's tile steps, placements and annotations, read once, and
    the steps that build the tree from them (tile loops by position, statements' point loops)."""

    def __init__(self, schedule: Schedule):
        kernel = self.kernel = schedule.kernel
        steps = self.steps = tile_steps(schedule)
        self.at_depth = {i: compute_depth(schedule, steps, loop, level)
                         for i, (loop, level) in kernel.computed_at().items()}
        self.spans = regions(kernel) if self.at_depth else {}
        self.places = placement(kernel, steps, self.at_depth)
        self.parallel = frozenset(schedule.parallel or ())
        self.vectorize = schedule.vectorize
        self.unroll = schedule.unroll
        self.reverse = frozenset(schedule.reverse)
        self.shifts = schedule.point_shifts
        self.inner_order = schedule.order_at(schedule.levels[-1]) if schedule.levels else kernel.loop_names
        self.extents = kernel.extents
        self.shapes = _tile_shapes(steps, self.extents)

    def computed(self, s: int, depth: int) -> Compute:
        """A computed-at statement over the region its consumers read in the tile at `depth`."""
        steps, extents = self.steps, self.extents
        stmt = self.kernel.statements[s]
        written = {n for idx in stmt.target_indices for n in idx.loops}
        loops = []
        enclosing = {}
        for p in range(depth):
            enclosing.setdefault(steps[p].anchor, []).append(p)
        for l in stmt.loops:
            r = self.spans[s][l.name]
            tiles = tuple(self.shapes[enclosing[a][-1]][0] if a in enclosing else None for a, _ in r.terms)
            # The lengths it can have: over every combination of its anchors' tiles there.
            pieces = [_tile_pieces(extents[a], [steps[p].size for p in enclosing.get(a, [])]) for a, _ in r.terms]
            lengths = set()
            for combo in itertools.islice(itertools.product(*pieces), 4096):
                first, end = r.at(dict(zip((a for a, _ in r.terms), combo)), l.extent)
                if end > first:
                    lengths.add(end - first)
            loops.append(PointLoop(l.name, None, None, l.extent, frozenset(lengths), l.name not in written,
                                   region=r, region_tiles=tiles))
        return Compute(s, stmt, tuple(loops), (), recompute=stmt.reduce is not None)

    def compute(self, s: int, depth: int, parallel_above: bool) -> Compute:
        """Statement `s` inside the tile loops of positions < `depth`: its point loops in the
        innermost level's order, then its local loops."""
        if s in self.at_depth:
            return self.computed(s, depth)
        steps, shapes = self.steps, self.shapes
        stmt = self.kernel.statements[s]
        follows = self.kernel.loop_map(s)
        own_of = {a: o for o, a in follows.items()}
        tile_of = {steps[p].anchor: (shapes[p][0], shapes[p][3]) for p in range(depth)}
        order = [own_of[a] for a in self.inner_order if a in own_of] + [l for l in stmt.loop_names if l not in follows]
        written = {n for idx in stmt.target_indices for n in idx.loops}
        ext = stmt.extents
        loops = []
        for n, own in enumerate(order):
            anchor = follows.get(own)
            tile, lengths = tile_of.get(anchor, (None, frozenset([ext[own]])))
            reduction = own not in written
            innermost = n == len(order) - 1
            is_parallel = (anchor in self.parallel and not parallel_above and not reduction and not innermost)
            parallel_above = parallel_above or is_parallel
            shift = tuple((own_of[by], int(f)) for loop, by, f in self.shifts if loop == anchor and by in own_of)
            loops.append(PointLoop(own, anchor, tile, ext[own], lengths, reduction, is_parallel,
                                   vectorize=(innermost and anchor is not None and anchor == self.vectorize
                                              and not reduction),
                                   unroll=self.unroll if innermost else 0, reverse=anchor in self.reverse, shift=shift))
        last_of = tuple(shapes[p][0] for p in range(depth) if steps[p].anchor not in own_of)
        return Compute(s, stmt, tuple(loops), last_of)

    def reduces(self, item: tuple[int, int, int], anchor: str) -> bool:
        if item[0] in self.at_depth:
            return False     # its loops are its own (a race on its region is poly's to refuse)
        stmt = self.kernel.statements[item[0]]
        written = {n for idx in stmt.target_indices for n in idx.loops}
        return any(a == anchor and own not in written for own, a in self.kernel.loop_map(item[0]).items())

    def build(self, items: list[tuple[int, int, int]], position: int, parallel_above: bool) -> tuple[Node, ...]:
        """Nodes at tile position `position` for statements `items` [(index, joined, depth)]."""
        nodes: list[Node] = []
        group: list[tuple[int, int, int]] = []

        def flush():
            if group:
                var, parent, enclosing, lengths, exact = self.shapes[position]
                step = self.steps[position]
                is_parallel = (step.anchor in self.parallel and not parallel_above
                               and not any(self.reduces(item, step.anchor) for item in group))
                nodes.append(TileLoop(step.anchor, step.level, step.size, var, parent, enclosing,
                                      self.extents[step.anchor], lengths, exact, is_parallel,
                                      self.build(list(group), position + 1, parallel_above or is_parallel)))
                group.clear()

        for item in items:
            s, joined, depth = item
            if depth <= position:
                flush()
                nodes.append(self.compute(s, depth, parallel_above))
            else:
                if group and joined <= position:
                    flush()          # it cannot join the open instance: a new one
                group.append(item)
        flush()
        return tuple(nodes)


def loop_dims(nest: LoopNest, loop: str) -> tuple[str, ...]:
    """The time dimensions (poly.py names) that run kernel loop `loop`: its tile loops'
    variables and its point loops (named after the loop)."""
    tiles = [t.var for t in nest.tile_loops() if t.anchor == loop]
    points = [loop] if any(p.anchor == loop for _, c in nest.computes() for p in c.loops) else []
    return tuple(dict.fromkeys(tiles + points))
