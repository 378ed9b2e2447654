"""A readable kernel for an accelerator target: what a user ports to their accelerator's SDK.

For each kernel its loop nest (`ir.loopnest.lower`, the tree C, poly.py and the Schedule tab
read), written for the target's memory hierarchy:

- each tile loop names the memory level its tile lives in (`# tile in VMEM`);
- transfers between levels: `dma_load VMEM <- DRAM: A[i0:i0+128, k0:k0+256]` placed just
  inside the innermost tile loop that moves the tensor's footprint (a tile stays resident
  across the loops that do not index it: stationarity), and `dma_store DRAM <- VMEM: ...`
  where the output tile is complete for that level (partial sums are reloaded when a
  reduction loop runs outside it). Levels that do not hold a tensor kind (Gemmini's
  accumulator holds outputs only) are skipped;
- compute calls: MAC contractions on the PE array (`mxu_matmul` for a TPU-like target,
  `pe_array.mac` for other systolic arrays, `simd.fma` for vector / SIMT targets), other
  statements as vector ops (`vector.relu`, `vector.max_reduce`, ...);
- fused epilogues inside `if last(k0):` — they run once, after the last reduction tile.
"""
from __future__ import annotations

from pathlib import Path

from ..ir.program import Access, BinOp, Call, Const, Expr, Statement, relation_text
from ..ir.schedule import Kernel, Schedule, is_mac_statement


def generate_pseudo(plan, target=None) -> str:
    head = [f"# {Path(plan.program.filename).name}: {len(plan.kernels)} kernel(s)"]
    if target is not None:
        levels = " > ".join(m.name for m in reversed(target.memory))
        head.append(f"# target {target.name}: {target.compute.describe()}; memory {levels}")
    parts = ["\n".join(head)]
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        parts.append(_KernelPseudo(plan, kernel, schedule, target).text())
    return "\n\n".join(parts) + "\n"


def bounds_size(nest, var: str) -> int:
    """The full size of tile loop `var`'s tiles."""
    return next(t.size for t in nest.tile_loops() if t.var == var)


def _engine(target, stmt: Statement) -> tuple[str, str]:
    """(call, unit) for a statement: the PE array for MACs, the vector unit otherwise."""
    kind = target.compute.kind if target is not None else "vector"
    if is_mac_statement(stmt):
        if kind == "systolic":
            name = "mxu_matmul" if target.name == "tpu" else "pe_array.mac"
            return name, f"{target.compute.pe_rows}x{target.compute.pe_cols} PE array"
        return "simd.fma", f"{target.compute.lanes}-lane SIMD" if target is not None else "SIMD"
    if stmt.reduce == "max":
        return "vector.max_reduce", "vector unit"
    if stmt.reduce == "+":
        return "vector.sum_reduce", "vector unit"
    fns = [e.fn for e in stmt.expr.walk() if isinstance(e, Call)]
    return f"vector.{fns[0] if fns else 'map'}", "vector unit"


class _KernelPseudo:
    def __init__(self, plan, kernel: Kernel, schedule: Schedule, target):
        self.plan, self.kernel, self.schedule, self.target = plan, kernel, schedule, target
        self.staged = set(schedule.stage)
        self.extents = kernel.extents
        self.lines: list[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def holds(self, level: str, kind: str, tensor: str = "") -> bool:
        if self.target is None or (tensor, level) in self.staged:   # `stage`: held there by the schedule
            return True
        try:
            return kind in self.target.level(level).holds
        except (KeyError, AttributeError, StopIteration):
            return True

    def text(self) -> str:
        from ..ir.loopnest import TileLoop, lower

        k, s = self.kernel, self.schedule
        nest = lower(s)
        self.tile_bounds = {var: b for _, _, bounds in nest.walk() for var, b in bounds.items()}
        self.regions = {c.index: c for _, c in nest.computes() if any(p.region is not None for p in c.loops)}
        self.carried = set()
        if self.regions and self.target is not None:
            from ..accel.cost import carried_halos
            self.carried = carried_halos(s, self.target)
        self.emit(0, f"kernel {k.name}:    # ops {', '.join(k.ops)}")
        for t in k.tensors:
            where = "on chip only" if t.name in k.internals else "in DRAM"
            role = "in" if t.name in k.inputs else ("out" if t.name in k.outputs else "internal")
            self.emit(1, f"# {role:<8} {t.name}: {t.dtype}[{', '.join(map(str, t.shape))}] {where}")
        opening, closing = self.transfers(nest)
        for line in opening.get(None, []):
            self.emit(1, line)
        pending: list[tuple[int, TileLoop]] = []     # open tile loops: their stores come after
        for depth, node, bounds in nest.walk():
            while pending and pending[-1][0] >= depth:
                d, loop = pending.pop()
                for line in closing.get(id(loop), []):
                    self.emit(d + 2, line)
            if isinstance(node, TileLoop):
                start, stop, _ = bounds[node.var]
                rem = "" if node.exact else f"    # last tile: min(..., {stop})"
                par = ", parallel" if node.parallel else ""
                self.emit(depth + 1, f"for {node.var} in range({start}, {stop}, {node.size}):    "
                                     f"# tile in {node.level}{par}{rem}")
                for line in opening.get(id(node), []):
                    self.emit(depth + 2, line)
                pending.append((depth, node))
            else:
                state = {p.anchor: (p.tile, bounds_size(nest, p.tile)) for p in node.loops if p.tile}
                self.compute(node, depth + 1, state)
        while pending:
            d, loop = pending.pop()
            for line in closing.get(id(loop), []):
                self.emit(d + 2, line)
        for line in closing.get(None, []):
            self.emit(1, line)
        return "\n".join(self.lines)

    def transfers(self, nest):
        """DMA lines per tile loop (id, None for the kernel's top): (opening, closing).

        A tensor's footprint at a level moves just inside the innermost tile loop (of that
        level or outer, on the statement's path) whose loop indexes it: it stays resident
        across the loops that do not (stationarity). Writes are stored where that tile is
        complete; partial sums are reloaded when a reduction tile loop runs outside it."""
        k, levels = self.kernel, self.schedule.levels
        opening: dict = {}
        closing: dict = {}
        seen = set()
        parents: dict = {}
        for path, compute in nest.computes():
            si, stmt = compute.index, compute.statement
            follows = k.loop_map(si)
            accesses = [(stmt.target, stmt.target_indices, True)] + [(a.tensor, a.indices, False) for a in stmt.reads()]
            for li, level in enumerate(levels):
                visible = [t for t in path if levels.index(t.level) <= li]
                if si in self.regions and path:
                    visible = [t for t in path if levels.index(t.level) <= li]
                    # computed at the tile: its inputs' regions move in at the compute point
                    where = path[-1] if path[-1] in visible else (visible[-1] if visible else None)
                    for tensor, indices, write in accesses:
                        if write or tensor not in k.inputs or not self.holds(level, "inputs", tensor):
                            continue
                        key = (tensor, li, False, id(where), si)
                        if key in seen:
                            continue
                        seen.add(key)
                        parent = parents.get((tensor, False, li - 1), "DRAM") if li else "DRAM"
                        parents[(tensor, False, li)] = level
                        opening.setdefault(id(where) if where is not None else None, []).append(
                            f"dma_load {level} <- {parent}: {self.footprint(tensor, indices, si, {})}"
                            "    # the region this tile's producer reads")
                    continue
                state = {}
                for t in visible:
                    state[t.anchor] = (t.var, t.size)
                for tensor, indices, write in accesses:
                    kind = "outputs" if write else "inputs"
                    if not self.holds(level, kind, tensor):
                        continue
                    if not write and tensor not in k.inputs:
                        continue      # internal reads: the producer's tile is already on chip
                    anchors = {follows[l] for idx in indices for l in idx.loops if l in follows}
                    where = next((t for t in reversed(visible) if t.anchor in anchors), None)
                    key = (tensor, li, write, id(where))
                    if key in seen:
                        continue
                    seen.add(key)
                    region = self.footprint(tensor, indices, si, state)
                    parent = parents.get((tensor, write, li - 1), "DRAM") if li else "DRAM"
                    parents[(tensor, write, li)] = level
                    at = id(where) if where is not None else None
                    if write:
                        outside = visible[:visible.index(where) + 1] if where is not None else []
                        reduced = [t.var for t in outside if t.anchor in follows.values()
                                   and any(follows.get(own) == t.anchor for own in
                                           (l.name for l in stmt.reduction_loops))]
                        if tensor in k.internals:
                            opening.setdefault(at, []).append(f"alloc {level}: {region}    # internal, never leaves the chip")
                            continue
                        if reduced:
                            opening.setdefault(at, []).append(
                                f"dma_load {level} <- {parent}: {region}    # partial sums (reduction over {', '.join(reduced)} runs outside)")
                        else:
                            opening.setdefault(at, []).append(f"alloc {level}: {region}")
                        done = [t.var for t in outside if t.anchor not in follows.values() or t.var in reduced]
                        when = f"if last({', '.join(done)}): " if done else ""
                        closing.setdefault(at, []).append(f"{when}dma_store {parent} <- {level}: {region}")
                    else:
                        opening.setdefault(at, []).append(f"dma_load {level} <- {parent}: {region}")
        return opening, closing

    def region_footprint(self, tensor: str, indices, si: int) -> str:
        """A computed-at statement's access over its region (`ir.loopnest.point_bounds`)."""
        from ..ir.loopnest import point_bounds

        node = self.regions[si]
        span = {p.name: point_bounds(p, self.tile_bounds, extents=self.extents) for p in node.loops}
        dims = []
        for idx in indices:
            if idx.single_loop is not None:
                lo, hi = span[idx.single_loop]
                dims.append(":" if (lo, hi) == ("0", str(node.statement.extents[idx.single_loop])) else f"{lo}:{hi}")
                continue
            lo_num, hi_num, lo, hi = idx.const, idx.const, [], []
            for loop, c in idx.terms:          # c*x over [a, b): c*a .. c*(b - 1)
                a, b = span[loop]
                if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
                    x, y = c * int(a), c * (int(b) - 1)
                    lo_num, hi_num = lo_num + min(x, y), hi_num + max(x, y)
                    continue
                lo.append(a if c == 1 else f"{c}*({a})")
                hi.append(b if c == 1 else f"{c}*({b})")
                hi_num -= c                     # c*(b - 1) = c*b - c
            first = " + ".join(lo) + (f" {'+' if lo_num > 0 else '-'} {abs(lo_num)}" if lo and lo_num else "")
            last = " + ".join(hi) + (f" {'+' if hi_num + 1 > 0 else '-'} {abs(hi_num + 1)}" if hi and hi_num + 1 else "")
            dims.append(f"{first or lo_num}:{last or hi_num + 1}")
        return f"{tensor}[{', '.join(dims)}]"

    def footprint(self, tensor: str, indices, si: int, state) -> str:
        if si in getattr(self, "regions", {}):
            return self.region_footprint(tensor, indices, si)
        follows = self.kernel.loop_map(si)
        ext = self.kernel.statements[si].extents
        dims = []
        shape = self.kernel.tensor(tensor).shape
        for d, idx in enumerate(indices):
            lo_terms, lo_const, span = [], idx.const, 1
            for loop, c in idx.terms:
                anchor = follows.get(loop)
                var, size = state.get(anchor, (None, ext[loop])) if anchor else (None, ext[loop])
                if var is not None:
                    lo_terms.append(var if c == 1 else f"{c}*{var}")
                    span += abs(c) * (size - 1)
                else:
                    span += abs(c) * (ext[loop] - 1)
                    if c < 0:
                        lo_const += c * (ext[loop] - 1)
            if not lo_terms and lo_const <= 0 and lo_const + span >= shape[d]:
                dims.append(":" if lo_const == 0 and span == shape[d] else f"{lo_const}:{lo_const + span}")
                continue
            lo = " + ".join(lo_terms) if lo_terms else ""
            if lo_const:
                lo = f"{lo} {'+' if lo_const > 0 else '-'} {abs(lo_const)}" if lo else str(lo_const)
            lo = lo or "0"
            if span == 1:
                dims.append(lo)
            else:
                hi = f"{lo} + {span}" if lo_terms else str(int(lo) + span)
                dims.append(f"{lo}:{hi}")
        return f"{tensor}[{', '.join(dims)}]"

    def compute(self, node, depth: int, state) -> None:
        si, stmt = node.index, node.statement
        if node.last_of:
            self.emit(depth, f"if last({', '.join(node.last_of)}):    # after the last reduction tile")
            depth += 1
        if si in self.regions:
            halo = ("; the rows it shares with the previous tile stay (a line buffer): only new rows"
                    if si in self.carried else " (a halo is recomputed)")
            self.emit(depth, f"# computed at this tile over the region of {stmt.target} it reads"
                             + (", from 0 each time" if node.recompute else "") + halo)
        call, unit = _engine(self.target, stmt)
        lhs = self.footprint(stmt.target, stmt.target_indices, si, state)
        rs = stmt.rescale
        if rs is not None:     # online softmax (ir.program.Rescale)
            m = self.footprint(rs.tensor, rs.indices, si, state)
            if stmt.reduce == "+":
                self.emit(depth, f"vector({lhs} *= exp({rs.scale:g} * (seen_{rs.tensor} - {m})))    "
                                 f"# online softmax: rescale the sums held to the running max, as it grew "
                                 f"since they last saw it (seen_{rs.tensor})")
            else:
                self.emit(depth, f"# online softmax: against the running max {m} (the keys so far)")
        op = {None: "=", "+": "+=", "max": "max="}[stmt.reduce]
        rhs = self._expr(stmt.expr, si, state)
        reduction = [l.name for l in stmt.reduction_loops]
        note = f"on the {unit}" + (f"; reduces over {', '.join(reduction)}" if reduction else "")
        if stmt.domain:
            note += f"; only where {', '.join(relation_text(a) for a in stmt.domain)}"
        if stmt.in_place is not None:
            note += f"; {stmt.in_place}"
        self.emit(depth, f"{call}({lhs} {op} {rhs})    # {note}")
        if any(p.affine for p in node.loops):        # the user's point order inside the tile
            from ..ir.loopnest import affine_point_bounds

            bounds = affine_point_bounds(node, {p.name: (f"lo_{p.name}", f"hi_{p.name}") for p in node.loops})
            order = []
            for p, b in zip(node.loops, bounds):
                down = " downwards" if p.reverse else ""
                order.append(f"{b.var} in [{b.start}, {b.stop}){down}" + (f" with {p.name} = {b.value}" if p.shifted else ""))
            self.emit(depth, f"#   points, outer → inner: {'; '.join(order)}"
                               "  (lo_x, hi_x: the tile's bounds on x)")

    def _expr(self, e: Expr, si: int, state) -> str:
        if isinstance(e, Access):
            return self.footprint(e.tensor, e.indices, si, state)
        if isinstance(e, Const):
            return str(e)
        if isinstance(e, BinOp):
            return f"({self._expr(e.lhs, si, state)} {e.op} {self._expr(e.rhs, si, state)})"
        if isinstance(e, Call):
            if e.fn == "neg":
                return f"-{self._expr(e.args[0], si, state)}"
            return f"{e.fn}({', '.join(self._expr(a, si, state) for a in e.args)})"
        return str(e)
