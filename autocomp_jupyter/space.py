"""The candidate space of a kernel's schedules: per loop and memory level, the tile sizes a
schedule may take, made of the target's units.

space.py owns which tile sizes a schedule is offered — the tiling pass, the auto-tuner, the
library baseline and the Tune tab's sliders all ask `TileSpace` and generate none
themselves. Loop orders and annotations are not sizes: the tiling pass's orders stay in
accel/search_space.py (the one search space: its tiling, tuner and exhaustive views), the Tune tab's in ui/playground.py.

The units (per kernel × target, `TileSpace.of`):
  * `units[d]` — the datapath's tile along loop d: PE rows / columns on the two loops a
    systolic array maps, the vector width (of the anchor's dtype) on the loop a vector
    unit runs along (the output's stride-1 loop), 1 elsewhere (`datapath_units`);
  * `granules` — the target's hardware granules, offered on every loop: the PE array's rows
    and columns (systolic), else the lanes;
  * `whole[d]` — a later statement of the kernel reads loop d whole (a softmax row,
    `ir.loopnest.whole_loops`): it is never tiled.

The families the sizes come from (module functions, each ≤ the extent E): the divisors
(`divisors`; `ends`: only those ≤ 64 or ≥ E/64, the ones a search tells apart), powers of
two and 3·2^k (`powers_of_two`), balanced non-divisors ceil(E/q) (`balanced`: remainder
tiles as even as a divisor's), multiples of a unit (`multiples`), register tiles of a few
datapath units (`register_tiles`), and every size 1..E (`every_size`).

What each consumer asks for (a view; each is a subset of `candidates`, save the slider's
current size and `every`, which are what the user or the exhaustive search put there):
  * `tiling(d)` — the tiling pass's random draw and local moves at an on-chip level: E, the
    powers of two, the divisors near the ends, ceil(E/q) for q ≤ 16, and the datapath unit
    × (1 2 3 4 6 8 12 16 24 32). Whole loops are offered the same list and pinned to E after
    the draw (so the other loops' draws do not depend on which loops are whole).
  * `register(d, factor)` — the tiling pass at the generic `vector` level: 1..max datapath
    units on a loop the datapath maps, else min..max elements (`register_tile_factor`).
  * `tuner(d)` — the auto-tuner's genes for loop d (at every level): every divisor, the
    powers of two and 3·2^k, each granule × 1..16, and E; `divisors_only`: the divisors.
    A whole loop: E alone.
  * `slider(d, current)` — the Tune tab's stops: a short ordered list of the powers of two,
    E and the size the schedule has now.
  * `every(d)` — every size 1..E (E alone on a whole loop): the space the library
    baseline's exhaustive search enumerates on a kernel small enough to score whole.

`candidates(d)` is the union of the tiling, register, tuner and slider views: every size
the passes and the tuner propose for loop d; a schedule they produce has each tile in it,
or took it from the schedule it started from (the textbook's, a user's, the exhaustive
search's: any size of a small space). A chain kernel's tiles come from the space of the
kernel at a compute point (`rules.chains`), whose loops differ from the finished kernel's:
they need not be in the finished kernel's views. Each view is exactly the list its consumer had before this module held them,
so results do not move (benchmarks/compare_examples.py: every example × preset × tune 0
and 100 the same).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .accel.cost import datapath_of, kernel_model
from .accel.target import Target
from .ir.loopnest import whole_loops
from .ir.schedule import Kernel

REGISTER_FACTOR = (4, 16)       # rules' tiling.register_tile_factor when a rule file sets none
UNIT_MULTIPLES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)   # the tiling pass's datapath multiples
GRANULE_MULTIPLES = range(1, 17)                      # the tuner's granule multiples
BALANCED_PARTS = 16             # ceil(E / q) for q = 1..16
ENDS = 64                       # divisors kept by `ends`: ≤ 64 or with a quotient ≤ 64
DIVISOR_SCAN = 4096             # ... and ≤ 4096 (E itself always joins)


# --------------------------------------------------------------------------- families


def divisors(extent: int, ends: bool = False) -> set[int]:
    """The divisors of `extent`; with `ends`, those ≤ ENDS or whose quotient is (≤ DIVISOR_SCAN)."""
    if ends:
        return {d for d in range(1, min(extent, DIVISOR_SCAN) + 1)
                if extent % d == 0 and (d <= ENDS or extent // d <= ENDS)}
    small = {d for d in range(1, math.isqrt(extent) + 1) if extent % d == 0}
    return small | {extent // d for d in small}


def powers_of_two(extent: int, times: Sequence[int] = (1,)) -> set[int]:
    """t·2^k ≤ extent for each t in `times` (1: the powers of two; 3: 3·2^k)."""
    out, p = set(), 1
    while p <= extent:
        out.update(t * p for t in times if t * p <= extent)
        p *= 2
    return out


def balanced(extent: int, parts: int = BALANCED_PARTS) -> set[int]:
    """ceil(extent / q) for q = 1..parts: q tiles as even as sizes allow."""
    return {-(-extent // q) for q in range(1, parts + 1)}


def multiples(extent: int, unit: int, factors: Iterable[int]) -> set[int]:
    """unit·m ≤ extent for m in `factors` (none when the unit is 1: that is every size)."""
    if unit <= 1:
        return set()
    return {unit * m for m in factors if unit * m <= extent}


def register_tiles(extent: int, unit: int, factor: tuple[int, int]) -> set[int]:
    """Register tiles within `factor` = (min, max): on a loop the datapath maps (unit > 1),
    1..max units; elsewhere min..max elements (1 and 2 too below min). Clipped to extent."""
    lo, hi = factor
    if unit > 1:
        return {min(extent, unit * f) for f in range(1, hi + 1)}
    return {min(extent, f) for f in range(lo, hi + 1)} | {v for v in (1, 2) if v < lo}


def every_size(extent: int) -> range:
    return range(1, extent + 1)


def _sorted(values: Iterable[int], extent: int) -> np.ndarray:
    return np.array(sorted(v for v in values if 1 <= v <= extent), dtype=np.int64)


# --------------------------------------------------------------------------- the target's units


def contiguous_loop(kernel: Kernel) -> str | None:
    """The anchor's output loop that indexes the last (stride-1) dimension of its output
    alone, with coefficient 1: the loop a vector unit runs along. None if there is none.
    Trailing dimensions of one element have no stride of their own (ONNX's keepdims: a
    ReduceMean's [1, 64, 1] is stride-1 along its 64 rows), so the last longer one counts."""
    anchor = kernel.anchor_statement
    shape = kernel.tensor(anchor.target).shape
    for index, size in zip(reversed(anchor.target_indices), reversed(shape)):
        if size > 1:
            return index.single_loop
    return None


def lane_loop(kernel: Kernel, target) -> str | None:
    """The loop a vector datapath's lanes run along: the output's stride-1 loop
    (`contiguous_loop`). SIMT lanes are a warp's threads, each computing its own output point
    with no contiguous vector load to keep: where the stride-1 loop is shorter than a warp,
    the warp runs along the output loop that fills it best (a 1x1 conv on a 7x7 map along its
    channels, as an implicit GEMM maps them, not 7 of 32 threads along w). So does the vector
    unit beside a PE array, whose lanes load from the on-chip buffers, for a kernel it runs
    (a depthwise convolution on a 7x7 map along its channels, as the physical limit counts
    it); a PE array's kernel keeps the stride-1 loop for its epilogue."""
    loop = contiguous_loop(kernel)
    compute = target.compute
    if loop is None or compute.kind not in ("simt", "systolic") or kernel.extents[loop] >= compute.lanes:
        return loop
    if compute.kind == "systolic" and datapath_of(compute, kernel_model(kernel, target).statements[kernel.anchor]).on_array:
        return loop             # the PE array's kernel: its epilogue's lanes keep the stride-1 loop
    lanes = compute.lanes
    outputs = [idx.single_loop for idx in kernel.anchor_statement.target_indices if idx.single_loop]

    def waste(name: str) -> float:          # lanes offered per busy lane (1.0: every lane busy)
        extent = kernel.extents[name]
        return -(-extent // lanes) * lanes / extent

    # the least waste; on a tie the stride-1 loop, then the output dimension nearest it
    return min(outputs, key=lambda name: (waste(name), name != loop, -outputs.index(name)))


def datapath_units(kernel: Kernel, target) -> np.ndarray:
    """Per loop, the datapath's tile along it: PE rows/cols, the vector width, or 1."""
    model = kernel_model(kernel, target)
    compute = target.compute
    anchor = model.statements[kernel.anchor]
    units = np.ones(len(kernel.loops), dtype=np.int64)
    dp = datapath_of(compute, anchor)   # the per-kind compute description (accel/cost/)
    if dp.on_array:
        for loop, along in anchor.array_units:
            units[loop] = along
    else:
        loop = lane_loop(kernel, target)
        units[kernel.loop_names.index(loop) if loop else len(kernel.loops) - 1] = dp.width
    return units


def granules(target: Target) -> tuple[int, ...]:
    """The target's hardware granules: PE rows and columns of a systolic array, else the lanes."""
    compute = target.compute
    return (compute.pe_rows, compute.pe_cols) if compute.kind == "systolic" else (compute.lanes,)


# --------------------------------------------------------------------------- the space


@dataclass(frozen=True)
class TileSpace:
    """The tile sizes one kernel's schedules may take on one target, per loop and level.

    Loops are named by index or name. Every view returns sizes sorted ascending, within
    1..extent (numpy int64 arrays; the slider a list of ints, `every` a range)."""

    kernel: Kernel
    levels: tuple[str, ...]
    extents: tuple[int, ...]
    units: tuple[int, ...]
    granules: tuple[int, ...]
    whole: tuple[bool, ...]

    @staticmethod
    def of(kernel: Kernel, target: Target) -> "TileSpace":
        names = whole_loops(kernel)
        return TileSpace(kernel, tuple(target.tiling_levels), tuple(l.extent for l in kernel.loops),
                         tuple(int(u) for u in datapath_units(kernel, target)), granules(target),
                         tuple(l.name in names for l in kernel.loops))

    def index(self, loop: int | str) -> int:
        if isinstance(loop, str):
            return self.kernel.loop_names.index(loop)
        return int(loop)

    # ------------------------------------------------------------------ views

    def tiling(self, loop: int | str) -> np.ndarray:
        """The tiling pass's sizes at an on-chip level (whole loops included: it pins them)."""
        d = self.index(loop)
        e, unit = self.extents[d], self.units[d]
        values = {e} | powers_of_two(e) | divisors(e, ends=True) | balanced(e) | multiples(e, unit, UNIT_MULTIPLES)
        return _sorted(values, e)

    def register(self, loop: int | str, factor: Sequence[int] = REGISTER_FACTOR) -> np.ndarray:
        """The tiling pass's sizes at the generic `vector` level (register tiles)."""
        d = self.index(loop)
        lo, hi = factor
        return np.array(sorted(register_tiles(self.extents[d], self.units[d], (int(lo), int(hi)))), dtype=np.int64)

    def tuner(self, loop: int | str, divisors_only: bool = False) -> np.ndarray:
        """The tuner's sizes for a loop (the same at every level); a whole loop: its extent."""
        d = self.index(loop)
        e = self.extents[d]
        if self.whole[d]:
            return np.array([e], dtype=np.int64)
        values = divisors(e)
        if not divisors_only:
            values |= powers_of_two(e, (1, 3)) | {e}
            for g in self.granules:
                values |= multiples(e, g, GRANULE_MULTIPLES)
        return _sorted(values, e)

    def slider(self, loop: int | str, current: int) -> list[int]:
        """The Tune tab's slider stops: powers of two, the extent, and the current size."""
        d = self.index(loop)
        e = self.extents[d]
        return sorted({e, min(int(current), e)} | {p for p in powers_of_two(e) if p < e})

    def every(self, loop: int | str) -> range:
        """Every size (the extent alone on a whole loop): what an exhaustive search enumerates.
        A range, not an array: it is counted before it is enumerated, and extents can be large."""
        d = self.index(loop)
        e = self.extents[d]
        return range(e, e + 1) if self.whole[d] else every_size(e)

    def candidates(self, loop: int | str, factor: Sequence[int] = REGISTER_FACTOR) -> np.ndarray:
        """Every size the passes, the tuner and the sliders propose for a loop (the union of
        the tiling, register, tuner and slider views; the slider's current size aside)."""
        d = self.index(loop)
        e = self.extents[d]
        views = [self.tiling(d), self.register(d, factor), self.tuner(d), np.array(self.slider(d, e))]
        return np.unique(np.concatenate(views)).astype(np.int64)
