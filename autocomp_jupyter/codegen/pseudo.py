"""A readable kernel for an accelerator target: what a user ports to their accelerator's SDK.

For each kernel the nest of `codegen/c.py` (the one `Schedule.loop_nest()` prints and poly.py
proves legal), written for the target's memory hierarchy:

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

import math
from pathlib import Path

from ..ir.program import Access, BinOp, Call, Const, Expr, Statement
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
        self.extents = kernel.extents
        self.lines: list[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def holds(self, level: str, kind: str) -> bool:
        if self.target is None:
            return True
        try:
            return kind in self.target.level(level).holds
        except (KeyError, AttributeError, StopIteration):
            return True

    def text(self) -> str:
        k, s = self.kernel, self.schedule
        self.emit(0, f"kernel {k.name}:    # ops {', '.join(k.ops)}")
        for t in k.tensors:
            where = "on chip only" if t.name in k.internals else "in DRAM"
            role = "in" if t.name in k.inputs else ("out" if t.name in k.outputs else "internal")
            self.emit(1, f"# {role:<8} {t.name}: {t.dtype}[{', '.join(map(str, t.shape))}] {where}")
        sizes = s.tile_sizes()
        cur = {l: (None, e) for l, e in self.extents.items()}  # loop -> (tile var, tile size)
        loops = []  # (level index, anchor loop, var, size)
        for li, level in enumerate(s.levels):
            for loop in s.order_at(level):
                t = sizes[loop][li]
                if t >= cur[loop][1]:
                    continue
                var = f"{loop}{li}"
                loops.append((li, loop, var, t, cur[loop]))
                cur[loop] = (var, t)
        self.tile = cur
        # accesses per statement: (tensor, indices, statement index, is write)
        accesses = []
        for si, stmt in enumerate(k.statements):
            accesses.append((stmt.target, stmt.target_indices, si, True))
            for a in stmt.reads():
                accesses.append((a.tensor, a.indices, si, False))
        # transfers per level: the tensor's footprint at that level, placed after the
        # innermost loop (of this level or outer) that changes it
        placements: dict[int, list[str]] = {}
        closings: dict[int, list[str]] = {}
        seen = set()
        parents = {}
        for li, level in enumerate(s.levels):
            state = {l: (None, e) for l, e in self.extents.items()}
            depth_of = {}
            for pos, (lj, loop, var, t, _) in enumerate(loops):
                if lj <= li:
                    state[loop] = (var, t)
                    depth_of[loop] = pos + 1
            for tensor, indices, si, write in accesses:
                if tensor in k.internals and write is False:
                    continue
                kind = "outputs" if write else "inputs"
                if not self.holds(level, kind) or (tensor, li, write) in seen:
                    continue
                if tensor not in k.inputs and tensor not in k.outputs and not write:
                    continue
                if write and tensor not in k.outputs and tensor not in k.internals:
                    continue
                seen.add((tensor, li, write))
                follows = k.loop_map(si)
                anchors = {follows[l] for idx in indices for l in idx.loops if l in follows}
                depth = max([depth_of.get(a, 0) for a in anchors], default=0)
                region = self.footprint(tensor, indices, si, state)
                parent = parents.get((tensor, write), "DRAM")
                parents[(tensor, write)] = level
                if write:
                    inner_red = [lp for lp in k.loop_names if lp not in anchors and lp in depth_of
                                 and depth_of[lp] <= depth and k.statements[si].reduce]
                    if tensor in k.internals and (parent == "DRAM" or not inner_red):
                        placements.setdefault(depth, []).append(f"alloc {level}: {region}    # internal, never leaves the chip")
                        continue
                    if inner_red:
                        placements.setdefault(depth, []).append(
                            f"dma_load {level} <- {parent}: {region}    # partial sums (reduction over {', '.join(inner_red)} runs outside)")
                    else:
                        placements.setdefault(depth, []).append(f"alloc {level}: {region}")
                    done = [loops[pos][2] for pos in range(depth) if loops[pos][1] not in set(follows.values())]
                    when = f"if last({', '.join(done)}): " if done else ""
                    closings.setdefault(depth, []).append(f"{when}dma_store {parent} <- {level}: {region}")
                else:
                    placements.setdefault(depth, []).append(f"dma_load {level} <- {parent}: {region}")
        depth = 1
        for line in placements.get(0, []):
            self.emit(depth, line)
        for pos, (li, loop, var, t, (outer_var, outer_size)) in enumerate(loops):
            start = outer_var or "0"
            end = f"{outer_var} + {outer_size}" if outer_var else str(self.extents[loop])
            rem = "" if self.extents[loop] % t == 0 and (outer_var is None or outer_size % t == 0) \
                else f"    # last tile: min(..., {self.extents[loop]})"
            self.emit(depth, f"for {var} in range({start}, {end}, {t}):    # tile in {s.levels[li]}{rem}")
            depth += 1
            for line in placements.get(pos + 1, []):
                self.emit(depth, line)
        for si, stmt in enumerate(k.statements):
            self.compute(si, stmt, depth)
        for pos in range(len(loops), -1, -1):
            for line in closings.get(pos, []):
                self.emit(pos + 1, line)
        return "\n".join(self.lines)

    def footprint(self, tensor: str, indices, si: int, state) -> str:
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

    def compute(self, si: int, stmt: Statement, depth: int) -> None:
        k = self.kernel
        follows = k.loop_map(si)
        own_anchors = set(follows.values())
        last = [f"{self.tile[a][0]}" for a in k.loop_names if a not in own_anchors and self.tile[a][0]]
        if last:
            self.emit(depth, f"if last({', '.join(last)}):    # after the last reduction tile")
            depth += 1
        call, unit = _engine(self.target, stmt)
        state = self.tile
        lhs = self.footprint(stmt.target, stmt.target_indices, si, state)
        op = {None: "=", "+": "+=", "max": "max="}[stmt.reduce]
        rhs = self._expr(stmt.expr, si, state)
        reduction = [l.name for l in stmt.reduction_loops]
        note = f"on the {unit}" + (f"; reduces over {', '.join(reduction)}" if reduction else "")
        self.emit(depth, f"{call}({lhs} {op} {rhs})    # {note}")

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
