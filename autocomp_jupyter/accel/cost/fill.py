"""Fill: the cycles a systolic PE array spends loading its stationary operand.

The array fills and drains when its stationary operand (`_stationary_operand`: the read
indexed by both mapped loops) changes. Inside an innermost tile the microkernel streams the
other loops past each stationary block, so a tile costs one fill per distinct block it
holds; across tiles a block that stays put costs none (`array_fills`). Each fill costs the
target's `fill_cycles`, hidden behind the previous block's stream where the weights are
double-buffered (`_fill_cycles`). Operand streaming stops while the array fills (ports.py).
"""
from __future__ import annotations

import numpy as np

from .compute import DatapathTile
from .statements import _AccessModel, _StatementModel
from .tiles import TileGrid
from .traffic import LoopSequence, _fetches_by_prefix


def _stationary_operand(st: _StatementModel) -> _AccessModel | None:
    """The operand held in a systolic array: the read indexed by both mapped loops."""
    if st.row_loop < 0:
        return None
    return next((a for a in st.accesses if a.kind == "read" and a.index_mask[st.row_loop]
                 and a.index_mask[st.col_loop]), None)


def array_fill(compute, grid: TileGrid, st: _StatementModel, tile: DatapathTile, seq: LoopSequence):
    """Cycles [n] the PE array spends filling for a statement over the whole run (0.0 off
    the array: nothing fills)."""
    if not (st.mac and tile.dp.on_array):
        return 0.0
    n, D, L = grid.tiles.shape
    inner_tiles = seq.tiles_at[:, L - 1]
    fills = inner_tiles
    stationary = _stationary_operand(st)
    if stationary is not None:
        weight = stationary.index_mask & st.present
        blocks = np.multiply.reduce(np.where(weight, tile.rel, 1.0), axis=1)
        # Only a tile holding a single block (a piece no longer than the array
        # along every weight loop: remainder tiles may, full ones not) can
        # keep it for the next tile; a tile of several refills each.
        one = sum(m * (x <= tile.unit + 1e-9) for x, m in zip(grid.piece_len, grid.piece_mult)) \
            / sum(grid.piece_mult)
        single = np.multiply.reduce(np.where(weight, one, 1.0), axis=1)
        kept_blocks = np.minimum(inner_tiles, _fetches_by_prefix(
            stationary.index_mask[seq.loops], seq.moving, seq.prefix, [L * D])[:, 0])
        fills = inner_tiles * np.maximum(blocks - single, 0.0) + kept_blocks * single
    if tile.kept is not None:
        fills = fills * tile.kept[:, L - 1]
    return _fill_cycles(compute, fills, tile.passes * tile.dp.pass_cycles)


def _fill_cycles(compute, fills, stream_cycles):
    """Cycles a systolic array spends filling/draining its stationary blocks (the target's
    `fill_cycles` each). With double-buffered weights each fill hides behind the previous
    block's stream, but the first."""
    fill = compute.fill_cycles
    if not compute.double_buffered_weights:
        return fills * fill
    per_block = stream_cycles / np.maximum(fills, 1.0)
    return np.where(fills > 0, fill + np.maximum(fills - 1.0, 0.0) * np.maximum(fill - per_block, 0.0), 0.0)
