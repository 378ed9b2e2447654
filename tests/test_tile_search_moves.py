"""The tile search's local moves (accel/tile_search.py): one tile size, a trade between two
loops, one order — each move once, in a fixed order (the climb's ties are broken by it)."""
from __future__ import annotations

import itertools

import numpy as np

from autocomp_jupyter.accel import tile_search
from autocomp_jupyter.accel.search_space import SearchSpace
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel

GEMM = """input A: f32[48, 40]
input B: f32[40, 36]
C = matmul(A, B)
"""


def test_trades_grow_one_loop_by_one_or_two_sizes_and_shrink_another():
    padded = np.array([[1, 2, 4, 8], [1, 3, 9, 9], [5, 5, 5, 5]])
    counts = np.array([4, 3, 1])
    now = np.array([2, 3, 5])          # loop 0 at its 2nd size, loop 1 at its 2nd, loop 2 at its only one
    trades = [tuple(map(int, t)) for t in tile_search._trades(padded, counts, now)]
    # loop 0 grows to 4 or 8 while loop 1 shrinks to 1; loop 1 grows to 9 while loop 0 shrinks to 1;
    # loop 2 has no other size: it neither grows nor shrinks
    assert trades == [(0, 1, 4, 1), (0, 1, 8, 1), (1, 0, 9, 1)]


def _reference_moves(s: SearchSpace, t: np.ndarray, o: np.ndarray):
    """The moves of one point, written out one by one."""
    D, L = t.shape
    out = []
    for h in s.searched:
        for d in range(D):
            for v in s.sizes[h][d]:
                if v == t[d, h]:
                    continue
                c = t.copy()
                c[d, :h] = np.maximum(c[d, :h], v)
                c[d, h] = v
                c[d, h + 1:] = np.minimum(c[d, h + 1:], v)
                out.append((c, o))
        steps = [int(np.searchsorted(s.sizes[h][d], t[d, h])) for d in range(D)]
        for d1, d2 in itertools.permutations(range(D), 2):
            for v1 in s.sizes[h][d1][steps[d1] + 1: steps[d1] + 3]:
                for v2 in s.sizes[h][d2][max(0, steps[d2] - 2): steps[d2]]:
                    c = t.copy()
                    c[d1, :h] = np.maximum(c[d1, :h], v1)
                    c[d1, h] = v1
                    c[d2, h] = v2
                    c[d2, h + 1:] = np.minimum(c[d2, h + 1:], v2)
                    out.append((c, o))
        for perm in s.orders:
            if not np.array_equal(perm, o[h]):
                c = o.copy()
                c[h] = perm
                out.append((t, c))
    tiles = s.monotone(np.array([m[0] for m in out]))
    return tiles, np.array([m[1] for m in out])


def test_the_moves_are_every_single_change_in_a_fixed_order():
    target = load_target("npu")
    program = parse(GEMM)
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    levels = tile_search.level_mapping(list(target.tiling_levels), target.tiling_levels)
    s = SearchSpace.tiling(kernel, target, levels, {})
    rng = np.random.default_rng(1)
    for _ in range(3):
        t = np.stack([rng.choice(s.sizes[0][d], size=s.L) for d in range(s.D)])
        t = s.monotone(-np.sort(-t, axis=1)[None])[0]
        o = s.orders[rng.integers(len(s.orders), size=s.L)]
        got_t, got_o = tile_search._neighbours(s, t[None], o[None])
        want_t, want_o = _reference_moves(s, t, o)
        assert got_t.shape == want_t.shape and len(got_t) > 0
        assert np.array_equal(got_t, want_t) and np.array_equal(got_o, want_o)
