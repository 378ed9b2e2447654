"""What the cost model's vector unit keeps in its registers between statements of one tile
iteration (`accel.cost.traffic.vector_held`), per statement, for the attention tests."""
from __future__ import annotations

from autocomp_jupyter.accel.cost import kernel_model
from autocomp_jupyter.accel.cost.capacity import occupy
from autocomp_jupyter.accel.cost.compute import datapath_tile
from autocomp_jupyter.accel.cost.tiles import tile_grid
from autocomp_jupyter.accel.cost.traffic import vector_held


def held_reads(schedule, target) -> dict:
    """{statement target: {read tensor: kept [bool]}} for the schedule's one candidate."""
    model = kernel_model(schedule.kernel, target)
    tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
    grid = tile_grid(model.extents, tiles, orders)
    cap = occupy(model, grid)
    out = {}
    for si, st in enumerate(model.statements):
        if si in model.computed:
            continue
        tile = datapath_tile(target.compute, grid, st, vectorize)
        held = vector_held(model, grid, cap, si, st, tile)
        out[schedule.kernel.statements[si].target] = {st.accesses[ai].tensor: bool(v[0]) for ai, v in held.items()}
    return out
