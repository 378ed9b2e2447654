"""The physical limit of a program on a target: the time no schedule can beat.

    limit = max(compulsory DRAM bytes / DRAM bandwidth,
                for each datapath: the sum of its statements' work at the best fill,
                for each port into the PE array: the operand bytes it must carry / its bandwidth)

A statement over a `where` domain counts its points, not its box (a causal mask's triangle).
The compulsory bytes are every program output and the input elements it reads, moved once
(`roofline.compulsory_bytes`); on the host, whose runs are timed warm, a tensor that fits
half the last cache level moves at that cache's bandwidth (`host_model.warm_memory_floor`).
A statement's work runs on the datapath the cost model puts it on (`cost.datapath_of`: the PE
array, the vector unit, SIMT lanes, cores), in passes of that datapath's width, on every
compute unit at once: on the array, its mapped loops in
blocks of the PE units each takes (pe_rows x pe_cols, or with im2col several reduction loops
sharing the rows: ceil(E / units) blocks each, the best fill those extents allow), and each
distinct block of its stationary operand filled into the array once (`fill_cycles`; with
double-buffered weights only what its stream cannot hide); on a vector datapath, its points
in runs of the vector width along the loop that fills them best (or all its points as one
flat run for an elementwise statement, as the model streams them). Datapaths run concurrently, so the limit is the largest of these
floors, not their sum. A PE array is also fed through ports (the innermost level holding
each operand): its moving operand crosses once per block of the loop it lacks, its partial
sums once per row block (added on write), its stationary operand once — on Gemmini, whose
scratchpad port is as fast as the array consumes, that floor, not the MACs, binds. The
vector unit beside the array reads and writes through the same ports (the model's one
channel per level): each tensor crossing between it and the array or memory once (the
softmax reads the array's scores once and writes the probabilities it feeds back once). On the
host the cores' work is at the multiply-add rate a core sustains, measured (`host_peak`): the
preset's lanes x pipes x reported clock can overstate it (1.47x on this machine).
`limit_fraction` = limit / optimised time: 1.0 is the physical limit.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.program import Program, domain_points
from ..ir.schedule import kernels_unfused
from .cost.domain import zero_outside
from .cost import _fill_cycles, _stationary_operand, datapath_of, kernel_model
from .host_model import runs_generated_c, warm_memory_floor
from .host_peak import compute_ceiling
from .roofline import compulsory_bytes
from .target import load_target


def physical_limit(program: Program, target) -> dict:
    """{"time_s", "bound": "DRAM" or a datapath's name, "dram_s", "datapaths_s": {name: s}}."""
    target = load_target(target)
    compute = target.compute
    clock = target.clock_ghz * 1e9
    datapaths: dict[str, float] = {}
    ports: dict[int, float] = {}          # memory level -> bytes through its port into the PE array
    writers = {st.target: st for op in program.ops for st in op.statements}
    vector = []                           # statements on the vector unit beside a PE array
    on_array: dict[str, set] = {}         # tensor -> how the PE array accesses it
    for kernel in kernels_unfused(program):
        model = kernel_model(kernel, target)
        extents = np.asarray(model.extents, dtype=float)
        # Host C runs a 3x3 convolution as Winograd F(2x2, 3x3) where it can (codegen/c/):
        # 16 multiplies per 2x2 output tile for the direct form's 36. Its floor is that work.
        winograd = model.host is not None and getattr(model.host, "winograd", None) is not None
        for si, st in enumerate(model.statements):
            dp = datapath_of(compute, st)
            present = extents[st.present]
            fill = 0.0
            if dp.on_array:
                mapped = dict(st.array_units)
                others = math.prod(e for i, e in enumerate(extents) if st.present[i] and i not in mapped)
                blocks = math.prod(math.ceil(extents[i] / along) for i, along in mapped.items())
                passes = blocks * others
                stationary = _stationary_operand(st)
                if stationary is not None:
                    # Each distinct block of the stationary operand fills the array at least once.
                    blocks *= math.prod(e for i, e in enumerate(extents) if stationary.index_mask[i] and st.present[i]
                                        and i not in mapped)
                    fill = float(_fill_cycles(compute, np.float64(blocks), passes * st.local_points * dp.pass_cycles))
            else:
                width = dp.width
                along = min((math.ceil(e / width) * math.prod(present) / e for e in present), default=1.0)
                flat = math.ceil(math.prod(present) / width) if not st.reduce and not st.mac else math.inf
                passes = min(along, flat)
                if winograd and si == kernel.anchor:
                    passes *= 16 / 36
            # a `where` domain: its points, not its box (the best tiles skip the rest); a sum of
            # a factor that is 0 outside its domain needs only that domain's terms (`zero_outside`)
            box = math.prod(present) * st.local_points
            share = st.points / box if st.domain is not None and box else 1.0
            stmt = kernel.statements[si]
            implied = zero_outside(stmt, writers)
            if implied:
                share = domain_points(stmt.extents, stmt.domain + implied) / stmt.box_points
            seconds = (passes * share * st.local_points * dp.pass_cycles + fill * share) / compute.units / clock
            datapaths[dp.unit] = datapaths.get(dp.unit, 0.0) + float(seconds)
            if dp.on_array and st.mac:
                for level, nbytes in _array_operands(model, st, extents, compute).items():
                    ports[level] = ports.get(level, 0.0) + nbytes * share
                for a in st.accesses:
                    on_array.setdefault(a.tensor, set()).add(a.kind)
            elif compute.kind == "systolic":
                vector.append((model, st, extents, share))
    for level, nbytes in _vector_crossings(program, vector, on_array).items():
        ports[level] = ports.get(level, 0.0) + nbytes
    if runs_generated_c(target):
        # The host's cores at what they sustain, measured (`host_peak`), not its description.
        ceiling = compute_ceiling(target)
        datapaths = {unit: seconds * ceiling for unit, seconds in datapaths.items()}
    # Host runs are timed warm: tensors that fit the last cache level come from there.
    dram_s = warm_memory_floor(program, target) if runs_generated_c(target) \
        else compulsory_bytes(program) / target.dram_bandwidth
    ports_s = {}
    for level, nbytes in ports.items():
        mem = target.memory[level]
        ports_s[f"{mem.name} port"] = float(nbytes / (mem.bandwidth_gbps * 1e9 * (compute.units if mem.per_unit else 1)))
    bound, time_s = max([("DRAM", dram_s)] + list(datapaths.items()) + list(ports_s.items()), key=lambda kv: kv[1])
    return {"time_s": time_s, "bound": bound, "dram_s": dram_s, "datapaths_s": datapaths, "ports_s": ports_s}


def _array_operands(model, st, extents, compute) -> dict[int, float]:
    """{memory level: bytes} that must cross each level's port into (or out of) the PE array
    for one MAC statement at the best its extents allow: each operand element once per block
    of the mapped loop its index lacks (the moving operand per column block, the partial sums
    per row block, accumulated on write; the stationary operand once), each through the
    innermost level that holds it."""
    out: dict[int, float] = {}
    blocks = {loop: math.ceil(extents[loop] / along) for loop, along in st.array_units}
    for a in st.accesses:
        used = a.index_mask & st.present
        elements = min(math.prod(e for i, e in enumerate(extents) if used[i]), float(np.prod(a.dims)))
        repeats = math.prod(n for loop, n in blocks.items() if not a.index_mask[loop])
        level = model.mem_index[a.chain[-1]] if a.chain else len(model.level_names) - 1
        out[level] = out.get(level, 0.0) + elements * repeats * a.elem_bytes
    return out


def _vector_crossings(program: Program, vector: list, on_array: dict[str, set]) -> dict[int, float]:
    """{memory level: bytes} the vector unit beside a PE array must move through the levels'
    ports (the ones the array's operands cross: one channel per level, as the model): each
    tensor that crosses between it and the outside once — a program input or a PE array's
    result it reads, a program output or a PE array's operand it writes — through the
    innermost level holding it. What passes between its own statements is not counted: a
    rewrite may fuse or remove those (the online softmax drops the probabilities' pass).
    `vector`: (model, statement, extents, share of its box) per statement; `on_array`: {tensor:
    how the PE array's statements access it ('read', 'write', 'accumulate')}."""
    inputs = {t.name for t in program.inputs}
    crossing: dict[tuple[str, bool], tuple[int, float]] = {}
    for model, st, extents, share in vector:
        for a in st.accesses:
            read = a.kind == "read"
            kinds = on_array.get(a.tensor, set())
            outside = (a.tensor in inputs or bool(kinds - {"read"})) if read \
                else (a.tensor in program.outputs or "read" in kinds)
            if not outside:
                continue
            used = a.index_mask & st.present
            elements = min(math.prod(e for i, e in enumerate(extents) if used[i]), float(np.prod(a.dims)))
            level = model.mem_index[a.chain[-1]] if a.chain else len(model.level_names) - 1
            nbytes = elements * a.elem_bytes * share
            key = (a.tensor, read)
            if key not in crossing or crossing[key][1] < nbytes:
                crossing[key] = (int(level), nbytes)
    out: dict[int, float] = {}
    for level, nbytes in crossing.values():
        out[level] = out.get(level, 0.0) + nbytes
    return out


def limit_fraction(program: Program, target, time_s: float) -> float:
    """The physical limit's time over `time_s` (1.0: at the limit)."""
    return physical_limit(program, target)["time_s"] / time_s if time_s > 0 else 0.0
