"""The analytic cost model: time, traffic, energy and utilisation of scheduled kernels.

Everything is evaluated for a *batch* of candidate schedules of one kernel at once, with
numpy arrays whose first axis is the candidate (the tuner scores thousands per second);
`evaluate(schedule, target)` is the one-candidate view of the same code.

The model (Timeloop / ZigZag style) is a sequence of named steps, each a module of this
package (`KernelModel._evaluate` in model.py runs them in this order):

* Tiles (tiles.py). Level h of `target.tiling_levels` (outer → inner) holds a tile of
  T[d, h] points of each kernel loop d. Tiles need not divide: along d the number of
  level-h tiles over the whole run, n[d, h], counts remainder tiles (`_chunks`), and the
  mean tile is E[d]/n[d, h]. A `where` domain's empty tiles are skipped (domain.py).
* Capacity (capacity.py). An access X[f(i)] over a tile covers, per tensor dimension,
  sum |coeff|*(T-1)+1 elements (a conv input row: h + r - 1), clipped to the dimension.
  If a level's tiles overflow it by a fraction s of their footprint, that fraction of its
  traffic instead streams through from the parent (spill); a level whose tiles fit twice
  double-buffers. The innermost level is the register file: an unrolled body's operands that
  it does not hold (`unroll_pressure`) spill past it to the next level and back, per body.
* Compute (compute.py). Passes of the PE array / vectors over the whole run, with edge
  waste of non-dividing tiles (ceil), divided over the compute units the parallel tile
  loops keep busy (occupancy, wave quantisation). Operands stream from the innermost level
  into the PE array (tile: pe_rows x pe_cols on the mapped loops; with im2col several
  reduction loops share the rows) or the vector lanes (one vector on the vectorised loop).
* Fill (fill.py). The systolic array's fill/drain each time its stationary block changes.
* Traffic (traffic.py). The level-h tile of X is fetched again each time a loop outside
  level h iterates, except for the innermost run of outer loops that do not index X (the
  tile stays put: stationarity). Loops that iterate once are transparent. Traffic into h =
  footprint × fetches; an accumulated output also reads back its partial sums on every
  fetch but the first. Internal tensors of a fused kernel never cross the DRAM boundary.
  Levels may hold only some roles (`holds`: weights, activations, outputs; e.g. Gemmini's
  accumulator outputs, a per-PE register file weights); a tensor bypasses levels that do
  not hold its role. On a systolic target's vector unit, along a reduction loop sharing
  the vector loop's input index (a depthwise conv's s in X[.., w + s]), its registers keep
  the row: no reload per tap; and from one statement of a tile iteration to the next (a
  softmax's max, exp and row sum over one score tile), where the register level has room,
  they keep the tile: it is read once.
* Ports (ports.py). Levels whose tiles fit twice overlap their transfers with compute;
  others serialise with it. The first input tiles (cold start) and the last output tiles
  (drain) overlap nothing: time = max(max(compute, operand streaming) + serial transfers +
  cold start + drain, each level L's bound). A level's bound is max(its port time, its
  reads / bw_L + loads x latency — one load in flight per fed level, the fed levels side by
  side, posted write-backs in the latency's shadow; into a double-buffered level two loads
  in flight, each latency overlapping the other buffer's transfer and its tile's work,
  `two_buffer_latency`), after the levels outside it delivered
  their first tiles (every unit's first load a whole latency), plus the last tile's compute
  after its last load. Port time: a level given per byte is a channel to the levels inside
  it (its traffic / bw_L); a level given per access (`width_bits`) is timed as ZigZag times
  ports — every transfer at both its ends, whole accesses of the port's width, reads and
  writes on one port or apart — so a saturated port stalls. Operand streaming stops while
  the array fills.
* Overlap (overlap.py). How a kernel's statements (the anchor, in-place epilogues, nests
  of their own) and its producer nests combine into its time.
* Compute at (producer.py). A statement computed at the anchor's tiles (`Kernel.compute_at`)
  is costed as its own nest over its region, scaled by its recompute; its tensor is held on
  chip at the compute point (capacity.py's `_held_regions`). Producer and consumer run one
  after the other in each tile: their times add, or overlap on different datapaths.
* Energy (energy.py). Every transfer at both its ends: bytes read out of a level at its read
  energy, bytes written into it at its write energy; plus MACs and vector ops, and where
  partial sums live in a register in every PE, a read and a write of it per MAC.

The rest: statements.py compiles a kernel's statements (accesses, roles, datapath mapping)
once per kernel and target; results.py holds `BatchCost` / `KernelCost` / `ProgramCost`;
api.py the entry points. A producer nest is scheduled alone as the tile search
(`accel.tile_search`) schedules it; the accel package connects the two when imported.
"""
from .api import (baseline_costs, carried_halos, evaluate, evaluate_batch, evaluate_program, fitting_unroll,
                  unroll_note)
from .compute import Datapath, datapath_of
from .domain import RowTiles, TileDomain
from .fill import _fill_cycles, _stationary_operand
from .model import (LIBRARY_TILE, KernelModel, kernel_model, library_schedule, naive_schedule,
                    register_producer_search, textbook_schedule)
from .results import METRIC_NAMES, BatchCost, KernelCost, ProgramCost, combine
from .tiles import _chunks, _tile_counts

__all__ = ["BatchCost", "Datapath", "KernelCost", "KernelModel", "LIBRARY_TILE", "METRIC_NAMES", "ProgramCost",
           "RowTiles", "TileDomain", "baseline_costs", "carried_halos", "combine", "datapath_of", "evaluate",
           "evaluate_batch", "evaluate_program", "fitting_unroll", "kernel_model", "library_schedule", "naive_schedule",
           "register_producer_search", "textbook_schedule", "unroll_note",
           # the simulator's, the limit's and the tests' view of the model's parts
           "_chunks", "_fill_cycles", "_stationary_operand", "_tile_counts"]
