"""The schedule's loop nest in C: what a kernel runs when no other strategy takes it (and the
statements around a contraction another strategy writes). The nest is the one
`Schedule.loop_nest()` prints and `poly.from_tiled_schedule` proves legal:

- tile loops, level by level (outer → inner), each level in `schedule.order_at(level)`; a
  tile loop is skipped where its tile covers the enclosing one. Tile ends are clipped with
  `AC_MIN` only where a remainder tile can occur (tracked exactly, level by level);
- inside the innermost tiles, the kernel's statements in program order, each over its own
  point loops: loops that follow an anchor loop run over that loop's current tile, local
  loops run in full;
- a statement that does not follow a tiled anchor loop (a ReLU epilogue has no `k`) runs
  once, in that loop's last tile (guarded by `tile_end == extent`): after the last update
  of its input, as poly.py models it;
- the register tile: a reduction whose output tile is small (<= `REGISTER_TILE_MAX`
  elements) is accumulated in a local array `acc` with the reduction loops outside and the
  output loops inside (constant trip counts, unrolled, the contiguous one `omp simd`), then
  stored back — the GEMM microkernel shape compilers vectorise well. Reassociating the sum
  is the same freedom the legality check grants (`reduction_reorderable=True`);
- a statement cut by a `where` domain skips the tiles the domain leaves empty; an online
  softmax's sums are rescaled as their running max grows (`rescale_sums`); a point loop with affine bounds or
  reversed trace keeps its loops' order and affine bounds (`plain_affine`).

Annotations: `parallel` → `#pragma omp parallel for` on the outermost annotated loop;
`vectorize` → `#pragma omp simd` on that loop where it is innermost; `unroll` → `#pragma GCC
unroll N` on the innermost point loop. Out-of-range reads give the access's pad value through
a bounds check, emitted only for dimensions whose index can leave the tensor.

The statement another strategy takes is written by `contraction` (a packed contraction) or
`window` (a window reduction), which the kernel writer (`kernel.py`) provides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...host_strategy.access import unit_stride_reads
from ...host_strategy.gemm import Packed
from ...host_strategy.rows import DirectRows
from ...ir.program import Access, Statement
from .ctext import c_double, rename
from .writer import WriterBase

# Largest register tile (output elements kept in a local `acc` array).
REGISTER_TILE_MAX = 256


@dataclass
class _Tile:
    """Where the nest stands for one anchor loop: the current tile's start and end (C
    expressions, None when untiled) and the lengths that tile can have."""

    start: str | None
    end: str | None
    lengths: frozenset[int]


class NestWriter(WriterBase):
    """Writes a kernel's loop nest and each statement's point nest inside it."""

    def emit_nest(self, nest, pk: "Packed | None" = None, window: "tuple[int, DirectRows] | None" = None) -> None:
        """Write the kernel's loop nest (`ir.loopnest.lower`): tile loops as C for loops
        (ends clipped with `AC_MIN` only where a remainder tile can occur), each statement's
        point nest inside them, guarded where it runs only in the last tile; the statement
        `pk.index` (in an untiled nest) through the packed path, which also runs the
        statements `pk.epilogue` (skipped here)."""
        from ...ir.loopnest import TileLoop, point_bounds

        cvar: dict[str, str] = {}

        def name(var: str) -> str:
            if var not in cvar:
                cvar[var] = self.namer.fresh(var)
            return cvar[var]

        closing: list[int] = []
        for depth, node, bounds in nest.walk(name=name, minimum="AC_MIN"):
            while closing and closing[-1] >= depth + 1:
                self.emit(closing.pop(), "}")
            d = depth + 1
            if isinstance(node, TileLoop):
                start, stop, _ = bounds[node.var]
                if node.parallel:
                    self.emit(d, "#pragma omp parallel for num_threads(ac_team())")
                self.emit(d, f"for (long {name(node.var)} = {start}; {name(node.var)} < {stop}; "
                             f"{name(node.var)} += {node.size}) {{")
                closing.append(d)
                continue
            if pk is not None and node.index == pk.index:
                self.contraction(pk)
                continue
            if pk is not None and node.index in pk.epilogue:
                continue
            if window is not None and node.index == window[0]:
                self.window(*window)
                continue
            innermost = {nest.anchor_of[v]: v for v in node.last_of}   # last_of runs outer → inner
            guards = [f"{bounds[v][2]} == {self.extents[a]}" for a, v in innermost.items()]
            if guards:
                self.emit(d, f"if ({' && '.join(dict.fromkeys(guards))}) {{")
                d += 1
            tiles = {p.name: (_Tile(name(p.tile), bounds[p.tile][2], p.lengths) if p.tile else None)
                     for p in node.loops}
            if any(p.region is not None for p in node.loops):    # computed at this tile: its region
                tiles = {p.name: _Tile(*point_bounds(p, bounds, name, "AC_MAX", "AC_MIN", self.extents), p.lengths)
                         for p in node.loops}
                if node.recompute:
                    self.restart_region(node, tiles, d)
            self.statement(node, tiles, d)
            if guards:
                self.emit(d - 1, "}")
        while closing:
            self.emit(closing.pop(), "}")

    # ------------------------------------------------------------------ statements

    # ------------------------------------------------------------------ statements

    def restart_region(self, node, tiles: dict, depth: int) -> None:
        """A computed-at reduction's region back to its initial value before it runs again."""
        stmt = node.statement
        scope = self.namer.child()
        var = {p.name: scope.fresh(p.name) for p in node.loops}
        out = [idx.single_loop for idx in stmt.target_indices]
        d = depth
        for loop in out:
            self._for(d, var[loop], tiles[loop].start, tiles[loop].end, None)
            d += 1
        init = 0.0 if stmt.reduce == "+" else -math.inf
        target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
        self.emit(d, f"{target} = {self.literal(stmt, init)};")
        for dd in range(d - 1, depth - 1, -1):
            self.emit(dd, "}")

    def statement(self, node, tiles: dict, depth: int) -> None:
        """One statement's point nest (`Compute` node), under tiles {own loop: _Tile or None}."""
        index, stmt = node.index, node.statement
        scope = self.namer.child()
        var: dict[str, str] = {}
        bounds: dict[str, tuple[str, str, int | None]] = {}  # own loop -> (start, end, constant trip)
        order = [p.name for p in node.loops]
        ext = stmt.extents
        for p in node.loops:
            var[p.name] = scope.fresh(p.anchor or p.name)
            tile = tiles[p.name]
            if tile is None:
                bounds[p.name] = ("0", str(ext[p.name]), ext[p.name])
            else:
                trip = next(iter(tile.lengths)) if len(tile.lengths) == 1 else None
                bounds[p.name] = (tile.start, tile.end, trip)
        self.emit(depth, f"/* {str(stmt).split('    #')[0]} */")
        if index in self.seen:
            self.rescale_sums(index, stmt, depth, var, bounds)
        rank_out = [idx.single_loop for idx in stmt.target_indices]
        out_loops = [l for l in order if l in rank_out]
        red_loops = [l for l in order if l not in rank_out]
        # a full tile's size per output loop (remainder tiles take the plain nest)
        full = {l: bounds[l][2] or (max(tiles[l].lengths) if tiles[l] is not None else None) for l in out_loops}
        register_tile = math.prod(full[l] or REGISTER_TILE_MAX + 1 for l in out_loops) if out_loops else 1
        skip = self.empty_tile_test(stmt, bounds, tiles)
        if skip:      # a tile the `where` domain leaves empty runs nothing (the per-point guard stays)
            self.emit(depth, f"if ({skip}) {{    /* the tile meets the domain */")
            depth += 1
        if any(p.affine for p in node.loops):      # affine or reversed point loops: the plain nest, affine bounds
            self.plain_affine(node, depth, var, bounds)
        elif (stmt.reduce is not None and red_loops and rank_out and None not in rank_out and not stmt.domain
                and len(set(rank_out)) == len(rank_out) and register_tile <= REGISTER_TILE_MAX
                and unit_stride_reads(stmt, stmt.target_indices[-1].single_loop)):
            partial = [l for l in out_loops if bounds[l][2] is None]
            if partial:
                cond = " && ".join(f"{bounds[l][1]} - {bounds[l][0]} == {full[l]}" for l in partial)
                self.emit(depth, f"if ({cond}) {{    /* a full register tile */")
                full_bounds = {l: (b[0], b[1], full.get(l, b[2]) if l in full else b[2]) for l, b in bounds.items()}
                self.register_tiled(stmt, depth + 1, var, full_bounds, out_loops, red_loops, scope)
                self.emit(depth, "} else {")
                self.plain(node, depth + 1, var, bounds)
                self.emit(depth, "}")
            else:
                self.register_tiled(stmt, depth, var, bounds, out_loops, red_loops, scope)
        else:
            self.plain(node, depth, var, bounds)
        if skip and stmt.reduce is None:
            # an '=' statement's element outside its domain is 0: an empty tile is zeroed
            self.emit(depth - 1, "} else {")
            target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
            d = depth
            for p in node.loops:
                start, end, trip = bounds[p.name]
                self._for(d, var[p.name], start, end, trip)
                d += 1
            self._store_and_close(replace(stmt, domain=()), target, self.literal(stmt, 0.0), d, depth)
        if skip:
            self.emit(depth - 1, "}")

    def empty_tile_test(self, stmt: Statement, bounds: dict, tiles: dict) -> str:
        """C condition that the current tile meets the statement's `where` domain (each
        relation's largest value over the tile >= 0), or "" where no relation names a tiled
        loop (the per-point guard then decides alone)."""
        tiled = {l for l, t in tiles.items() if t is not None}
        tests = []
        for a in stmt.domain:
            if not any(l in tiled for l in a.loops):
                continue
            parts = [str(a.const)]
            for loop, c in a.terms:
                start, end, trip = bounds[loop]
                last = f"({start} + {trip - 1})" if trip is not None and start != "0" else f"({end} - 1)"
                parts.append(f"{c} * {last if c > 0 else f'({start})'}")
            tests.append(f"{' + '.join(parts)} >= 0")
        return " && ".join(tests)

    def rescale_sums(self, index: int, stmt: Statement, depth: int, var: dict, bounds: dict) -> None:
        """Online softmax: before a sum adds this tile's terms (computed against the running
        max as it is now), what it holds for the tile's elements is scaled by
        exp(c * (m_seen - m_now)); then the max it has seen is the max now (two passes: the
        elements sharing one max must all see the old one)."""
        rs, seen = stmt.rescale, self.seen[index]
        out = [idx.single_loop for idx in stmt.target_indices]
        used = [l for l in out if any(l in i.loops for i in rs.indices)]
        m = self.access_c(rs.tensor, rs.indices, var, stmt, check=False)
        was = m.replace(f"{self.cname[rs.tensor]}[", f"{seen}[", 1)
        target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
        self.emit(depth, "/* online softmax: rescale the sums held to the running max as it grew */")
        for loops, body in ((out, f"if ({was} != {m}) {target} *= exp({c_double(rs.scale)} * ({was} - {m}));"),
                            (used, f"{was} = {m};")):
            d = depth
            for l in loops:
                start, end, trip = bounds[l]
                self._for(d, var[l], start, end, trip)
                d += 1
            self.emit(d, body)
            for dd in range(d - 1, depth - 1, -1):
                self.emit(dd, "}")

    def _for(self, depth: int, v: str, start: str, end: str, trip: int | None) -> None:
        if trip is not None and start != "0":
            end = f"{start} + {trip}"
        self.emit(depth, f"for (long {v} = {start}; {v} < {end}; ++{v}) {{")

    def _affine_for(self, depth: int, affine: dict, p, var: dict) -> None:
        """A point loop with affine bounds (`ir.loopnest.affine_point_bounds`), the loop
        variables renamed to their C names (a loop with affine bounds runs over `<name>_s`)."""
        names = {n: var[n] for n in affine}
        names.update({a.var: var[a.name] + "_s" for a in affine.values() if a.var != a.name})
        a = affine[p.name]
        v, lo, hi = names[a.var], rename(a.start, names), rename(a.stop, names)
        if p.reverse:
            self.emit(depth, f"for (long {v} = ({hi}) - 1; {v} >= {lo}; --{v}) {{")
        else:
            self.emit(depth, f"for (long {v} = {lo}; {v} < {hi}; ++{v}) {{")


    def _loop_pragmas(self, d: int, parallel: bool, simd: bool, unroll: int) -> None:
        """A loop's pragmas: one combined construct where it is both parallel and vectorised
        (two stacked pragmas on one loop do not compile), else each alone; a loop takes one
        of simd / unroll: simd wins."""
        if parallel and simd:
            self.emit(d, "#pragma omp parallel for simd num_threads(ac_team())")
            return
        if parallel:
            self.emit(d, "#pragma omp parallel for num_threads(ac_team())")
        if simd:
            self.emit(d, "#pragma omp simd")
        elif unroll > 1:
            self.emit(d, f"#pragma GCC unroll {unroll}")

    def plain_affine(self, node, depth, var, bounds) -> None:
        """A statement whose point loops a user's trace gave affine bounds or reversed: its loops exactly
        in the tree's order (no loop moved: the order is the schedule's), with the affine
        bounds of `ir.loopnest.affine_point_bounds`."""
        from ...ir.loopnest import affine_point_bounds

        stmt = node.statement
        target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
        expr = self.expr_c(stmt.guarded_expr, var, stmt)
        d = depth
        spans = {p.name: (bounds[p.name][0], f"{bounds[p.name][0]} + {bounds[p.name][2]}"
                          if bounds[p.name][2] is not None and bounds[p.name][0] != "0" else bounds[p.name][1])
                 for p in node.loops}
        own = {p.name: var[p.name] for p in node.loops}
        affine = {a.name: a for a in affine_point_bounds(node, spans, floordiv="AC_FLOORDIV",
                                                         maximum="AC_MAX", minimum="AC_MIN")}
        for p in node.loops:
            self._loop_pragmas(d, p.parallel, p.vectorize, p.unroll)
            self._affine_for(d, affine, p, var)
            d += 1
            for a in affine.values():
                if a.defined_in == p.name and a.var != a.name:
                    self.emit(d, f"const long {var[a.name]} = {rename(a.value, {**own, a.var: var[a.name] + '_s'})};")
        self._store_and_close(stmt, target, expr, d, depth)

    def _store_and_close(self, stmt, target: str, expr: str, d: int, depth: int) -> None:
        """The statement's store at depth `d` (`+=`, `max=` or a rounded `=`), then the
        braces of its point loops back to `depth`."""
        if stmt.reduce == "+":
            self.emit(d, f"{target} += {expr};")
        elif stmt.reduce == "max":
            self.emit(d, f"{target} = AC_MAX({target}, {expr});")
        else:
            self.emit(d, f"{target} = {self.rounded(stmt.target, expr)};")
        for dd in range(d - 1, depth - 1, -1):
            self.emit(dd, "}")

    def plain(self, node, depth, var, bounds) -> None:
        """One statement's point nest as written, except that loops of one trip go outermost
        (a single iteration: any place is legal) so that the vectorised loop is a real one:
        where the schedule vectorised a loop of one trip, the innermost loop takes `omp simd`
        instead. A reduction whose innermost loop is a reduction loop reads every other index
        once per row: it accumulates the row in a local (`omp simd reduction`, the sum
        reassociated as the legality check allows; a softmax's row max and sum over a chained
        store per point measured 4.6 ns a point on 12 x 128 rows of 128)."""
        stmt = node.statement
        target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
        expr = self.expr_c(stmt.guarded_expr, var, stmt)
        loops = [p for p in node.loops if bounds[p.name][2] == 1] + [p for p in node.loops if bounds[p.name][2] != 1]
        moved = any(p.vectorize for p in loops if bounds[p.name][2] == 1)
        reordered = False
        # A row loop (contiguous in every access that reads it) goes innermost when the
        # innermost one walks down columns: the order of one statement's points is free (each
        # writes its own element, or adds to a sum whose order the legality check grants) —
        # a softmax whose tiles put its rows innermost ran 1.2 ms against 0.35.
        accesses = [Access(stmt.target, stmt.target_indices)] + list(stmt.reads())
        own = all(a.indices == tuple(stmt.target_indices) for a in stmt.reads() if a.tensor == stmt.target)
        if own and loops and bounds[loops[-1].name][2] != 1 and not loops[-1].parallel:
            def strided(l: str) -> bool:
                return any(dict(idx.terms).get(l) for a in accesses for idx in a.indices[:-1])

            def row(l: str) -> bool:
                return not strided(l) and any(dict(a.indices[-1].terms).get(l) == 1 for a in accesses if a.indices)
            if strided(loops[-1].name):
                rows = [p for p in loops if bounds[p.name][2] != 1 and row(p.name) and not p.parallel]
                if rows:
                    loops = [p for p in loops if p is not rows[-1]] + [rows[-1]]
                    moved = reordered = True
        inner = loops[-1] if loops and bounds[loops[-1].name][2] != 1 else None
        out_loops = {l for idx in stmt.target_indices for l in idx.loops}
        row = (stmt.reduce in ("+", "max") and inner is not None and inner.name not in out_loops and not inner.parallel)
        d = depth
        for p in loops:
            if p is inner and row:
                acc = self.namer.fresh("acc")
                self.emit(d, f"{self.ctype(stmt.target)} {acc} = {target};")
                self.emit(d, f"#pragma omp simd reduction({stmt.reduce}:{acc})")
            else:
                simd = (p.vectorize and bounds[p.name][2] != 1 and not reordered) or (moved and p is inner)
                self._loop_pragmas(d, p.parallel, simd, p.unroll)
            start, end, trip = bounds[p.name]
            self._for(d, var[p.name], start, end, trip)
            d += 1
        if row:
            self.emit(d, f"{acc} += {expr};" if stmt.reduce == "+" else f"{acc} = AC_MAX({acc}, {expr});")
            self.emit(d - 1, "}")
            self.emit(d - 1, f"{target} = {acc};")
            for dd in range(d - 2, depth - 1, -1):
                self.emit(dd, "}")
            return
        self._store_and_close(stmt, target, expr, d, depth)

    def register_tiled(self, stmt, depth, var, bounds, out_loops, red_loops, scope) -> None:
        """Accumulate the output tile in `acc` (registers), reduction loops outside."""
        acc = scope.fresh("acc")
        trips = [bounds[l][2] for l in out_loops]
        # the contiguous output loop innermost (vectorised): the target's last dimension
        last = stmt.target_indices[-1].single_loop
        out_loops = [l for l in out_loops if l != last] + [last]
        trips = [bounds[l][2] for l in out_loops]
        size = math.prod(trips)
        strides = [math.prod(trips[i + 1:]) for i in range(len(trips))]
        local = {l: f"({var[l]} - {bounds[l][0]})" if bounds[l][0] != "0" else var[l] for l in out_loops}
        acc_index = " + ".join(f"{local[l]} * {st}" if st != 1 else local[l] for l, st in zip(out_loops, strides))
        target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
        expr = self.expr_c(stmt.guarded_expr, var, stmt)
        d = depth
        self.emit(d, "{")
        d += 1
        self.emit(d, f"{self.ctype(stmt.target)} {acc}[{size}];")

        def out_nest(body: str, d: int) -> None:
            for n, l in enumerate(out_loops):
                if n == len(out_loops) - 1:
                    self.emit(d, "#pragma omp simd")
                else:
                    self.emit(d, f"#pragma GCC unroll {bounds[l][2]}")
                self._for(d, var[l], bounds[l][0], bounds[l][1], bounds[l][2])
                d += 1
            self.emit(d, body)
            for dd in range(d - 1, d - 1 - len(out_loops), -1):
                self.emit(dd, "}")

        out_nest(f"{acc}[{acc_index}] = {target};", d)
        dd = d
        for n, l in enumerate(red_loops):
            if n == len(red_loops) - 1 and self.unroll > 1:
                self.emit(dd, f"#pragma GCC unroll {self.unroll}")
            self._for(dd, var[l], *bounds[l])
            dd += 1
        if stmt.reduce == "+":
            out_nest(f"{acc}[{acc_index}] += {expr};", dd)
        else:
            out_nest(f"{acc}[{acc_index}] = AC_MAX({acc}[{acc_index}], {expr});", dd)
        for x in range(dd - 1, d - 1, -1):
            self.emit(x, "}")
        out_nest(f"{target} = {acc}[{acc_index}];", d)
        self.emit(d - 1, "}")
