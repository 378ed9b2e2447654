"""Attention with an additive mask table: the add between the scores (computed at the key
tiles) and the softmax's max runs in the max's tile iteration (`loopnest.in_tile_iteration`),
where the vector unit keeps its result for the max and the exp; legal (isl), computing what
the program does (the interpreter), and costed alike by the model and the simulator."""
from __future__ import annotations

import pytest

from autocomp_jupyter import poly
from autocomp_jupyter.accel.cost import evaluate, kernel_model
from autocomp_jupyter.accel.sim import compare
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import check_tiled
from autocomp_jupyter.ir.loopnest import ComputeAtError, TileLoop, in_tile_iteration, lower, regions, single_pass
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.rules.chains import _elementwise_in_nest
from autocomp_jupyter.rules.online_softmax import online_softmax
from vector_registers import held_reads

MASKED = """input Q: f32[2, {n}, 16]
input K: f32[2, {n}, 16]
input V: f32[2, {n}, 16]
param B: f32[{n}, {n}]
S[h, s, t] += Q[h, s, d] * K[h, t, d] * 0.25
Sb[h, s, t] = S[h, s, t] + B[s, t]
M[h, s] max= Sb[h, s, t]
E[h, s, t] = exp(Sb[h, s, t] - M[h, s])
Z[h, s] += E[h, s, t]
P[h, s, t] = E[h, s, t] / Z[h, s]
O[h, s, d] += P[h, s, t] * V[h, t, d]
output O
"""


def _kernel(n: int):
    """(rewritten program, the online-softmax kernel with the scores and the add computed at
    the key tiles, as the chain first writes it)."""
    program = parse(MASKED.format(n=n))
    rewritten, anchor = online_softmax(program, [op.name for op in program.ops])
    kernel = Kernel.from_ops(rewritten, [op.name for op in rewritten.ops], anchor=anchor)
    return rewritten, kernel.with_compute_at("Sb", "t", "scratchpad").with_compute_at("S", "t", "scratchpad")


def _schedule(kernel: Kernel, tiles: dict) -> Schedule:
    levels = load_target("gemmini").tiling_levels
    return Schedule(kernel, tiles={l: dict(zip(levels, sizes)) for l, sizes in tiles.items()},
                    order={"scratchpad": tuple("hsdt"), "accumulator": tuple("hstd")}, levels=levels)


TILES = {"h": (2, 1), "s": (16, 16), "d": (16, 16), "t": (8, 8)}


def test_the_chain_runs_the_add_in_the_softmax_tiles_and_keeps_the_scores_computed_at():
    _, kernel = _kernel(32)
    names = [st.target for st in kernel.statements]
    add = names.index("Sb")
    assert in_tile_iteration(kernel.without_compute_at().with_compute_at("S", "t", "scratchpad"), add)
    loose = _elementwise_in_nest(kernel, names.index("M"))
    assert [t for t, _, _ in loose.compute_at] == ["S"]
    regions(loose)          # the scores' region, read by the add, is what the key tile reads


def test_the_add_shares_the_max_tile_loop_and_the_nest_is_legal_and_exact():
    rewritten, kernel = _kernel(32)
    loose = _elementwise_in_nest(kernel, [st.target for st in kernel.statements].index("M"))
    schedule = _schedule(loose, TILES)
    nest = lower(schedule)
    # the add and the max are siblings in one instance of the accumulator's head tile loop
    inner = [node for node in nest.tile_loops() if node.anchor == "h" and node.level == "accumulator"]
    assert len(inner) == 1
    body = [node.statement.target for node in inner[0].body if not isinstance(node, TileLoop)]
    assert body[:3] == ["Sb", "M", "E"]
    assert single_pass(schedule)
    assert poly.check_schedule(schedule).ok
    assert check_tiled(schedule, rewritten).ok



def test_the_max_reads_the_masked_scores_from_the_registers_in_model_and_simulator():
    _, kernel = _kernel(128)
    target = load_target("gemmini")
    tiles = {"h": (2, 1), "s": (128, 128), "d": (64, 16), "t": (16, 16)}
    loose = _schedule(_elementwise_in_nest(kernel, [st.target for st in kernel.statements].index("M")), tiles)
    computed = _schedule(kernel, tiles)
    assert held_reads(loose, target)["M"] == {"Sb": True}
    assert "M" not in held_reads(computed, target) or held_reads(computed, target)["M"] == {}
    model = kernel_model(loose.kernel, target)
    cost = model.evaluate_batch(*model.normalise(*model.schedule_arrays(loose)))
    names = [st.target for st in loose.kernel.statements]
    scratchpad = list(model.level_names).index("scratchpad")
    accumulator = list(model.level_names).index("accumulator")
    points = 2 * 128 * 128
    # the max reads nothing into the vector unit (it writes its running max, per key tile);
    # computed at the key tiles, the add leaves the masked scores for it to read back
    assert cost.datapath_bytes[0, names.index("M")].sum() == pytest.approx(2 * 128 * 4 * (128 / 16))
    other = kernel_model(computed.kernel, target)
    again = other.evaluate_batch(*other.normalise(*other.schedule_arrays(computed)))
    assert again.datapath_bytes[0, names.index("M")].sum() == pytest.approx(points * 4 + 2 * 128 * 4 * (128 / 16))
    # the add reads the scores (accumulator) and the table (scratchpad) once per head, each f32
    assert cost.datapath_bytes[0, names.index("Sb"), accumulator] == pytest.approx(points * 4)
    assert cost.datapath_bytes[0, names.index("Sb"), scratchpad] >= points * 4
    # one pass fewer over the masked scores than with the add computed at the key tiles
    ours, theirs = evaluate(loose, target), evaluate(computed, target)
    assert ours.time_s < theirs.time_s
    assert ours.energy_by_level["scratchpad"] == pytest.approx(
        theirs.energy_by_level["scratchpad"] - points * 4 * 0.4e-12)
    check = compare(loose, target)
    assert check["sim_bytes"] == pytest.approx(check["model_bytes"])
    assert check["time_error"] < 1e-6


def test_an_elementwise_step_read_by_a_whole_row_reduction_cannot_read_a_computed_at_tensor():
    program = parse("""input A: f32[32, 32]
input W: f32[32, 32]
input C: f32[32, 32]
X[i, j] += A[i, k] * W[k, j]
Y[i, j] = X[i, j] + C[i, j]
R[i] += Y[i, j]
O[i, j] += Y[i, k] * W[k, j] * R[i]
output O
""")
    kernel = Kernel.from_ops(program, [op.name for op in program.ops], anchor=program.ops[-1].name)
    kernel = kernel.with_compute_at("X", "i", "scratchpad")
    assert not in_tile_iteration(kernel, 1)     # its reader R sums the row: not in Y's tiles
    with pytest.raises(ComputeAtError, match="neither"):
        regions(kernel)


def test_the_head_dimension_refinement_breaks_latency_ties_by_energy(monkeypatch):
    from autocomp_jupyter import objective
    from autocomp_jupyter.rules import chains

    _, kernel = _kernel(256)
    loose = _elementwise_in_nest(kernel, [st.target for st in kernel.statements].index("M"))
    target = load_target("gemmini")
    schedule = _schedule(loose, {"h": (1, 1), "s": (64, 16), "d": (16, 16), "t": (32, 16)})
    tied = chains._tiled_innermost(schedule, target, {})
    monkeypatch.setattr(objective, "ties", lambda target: 0.0)
    fastest = chains._tiled_innermost(schedule, target, {})
    assert tied and fastest
    as_schedule = lambda found: Schedule.of_arrays(loose, target.tiling_levels, *found, keep=schedule)  # noqa: E731
    a, b = evaluate(as_schedule(tied), target), evaluate(as_schedule(fastest), target)
    assert a.time_s <= b.time_s * (1 + objective.LATENCY_TIES)
    # never more energy at the same time (with two loads in flight into the scratchpad the
    # strictly fastest refinement here is also the least energy one: equal)
    assert a.energy_j <= b.energy_j
    assert single_pass(as_schedule(tied))
