"""Nests on one datapath form one pipeline (accel/cost/overlap.py): a producer computed at its
consumer's tiles and the consumer alternate tile by tile, so the second nest's first tiles
load while the first computes and only the longest start-up is paid; the simulator combines
its replays the same way; host C, which runs one nest after another, is left as it was."""
from __future__ import annotations

import numpy as np
import pytest

from autocomp_jupyter import caches
from autocomp_jupyter.accel.cost import evaluate, overlap
from autocomp_jupyter.accel.cost.overlap import hidden_startups, startup
from autocomp_jupyter.accel.sim import compare
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel
from autocomp_jupyter.schedule import replay

# Two contractions on the same datapath: H computed at O's row tiles.
MLP = """input  X: f32[256, 128]
param  W1: f32[128, 256]
param  W2: f32[256, 128]
H[m, n] += X[m, k] * W1[k, n]
O[m, n] += H[m, k] * W2[k, n]
output O
"""


def _fused(target):
    program = parse(MLP)
    kernel = Kernel.from_ops(program, [op.name for op in program.ops], anchor="O")
    level = target.tiling_levels[0]
    trace = [{"primitive": "tile", "loop": "m", "level": level, "size": 64},
             {"primitive": "compute_at", "tensor": "H", "loop": "m", "level": level}]
    return replay(kernel, trace, target.tiling_levels)


def _time(schedule, target, pipelined: bool, monkeypatch) -> float:
    caches.clear_all()
    with monkeypatch.context() as m:
        if not pipelined:
            m.setattr(overlap, "hidden_startups", lambda parts, n: np.zeros(n))
        return evaluate(schedule, target).time_s


def test_only_the_longest_start_up_is_paid():
    # a nest's start-up: its cold start, but never below its busiest channel's bytes
    assert startup(np.array([10.0]), np.array([3.0]), np.array([5.0]))[0] == 3.0
    assert startup(np.array([10.0]), np.array([3.0]), np.array([8.5]))[0] == 1.5
    assert startup(np.array([10.0]), np.array([3.0]), np.array([12.0]))[0] == 0.0
    assert hidden_startups([np.array([2.0])], 1)[0] == 0.0          # one nest hides nothing
    assert hidden_startups([np.array([2.0, 1.0]), np.array([0.5, 4.0]), np.array([1.0, 1.0])], 2).tolist() \
        == [1.5, 2.0]


def test_a_producer_and_its_consumer_on_one_array_overlap_their_start_ups(monkeypatch):
    tpu = load_target("tpu")
    s = _fused(tpu)
    on, off = _time(s, tpu, True, monkeypatch), _time(s, tpu, False, monkeypatch)
    # tpu: H and O both on the PE array; the hidden start-up is H's or O's cold start (~0.6 us)
    assert off - on == pytest.approx(0.585e-6, rel=0.05)
    cold = evaluate(s, tpu).limits["cold start"]
    assert 0 < off - on <= cold * (1 + 1e-9)          # at most a whole cold start (equal up to rounding)


@pytest.mark.parametrize("target", ["tpu", "npu"])
def test_the_simulator_agrees(target):
    t = load_target(target)
    caches.clear_all()
    c = compare(_fused(t), t, max_steps=20000)
    assert c["time_error"] < 0.05, c


def test_host_c_runs_one_nest_after_another(monkeypatch):
    host = load_target("host")
    s = _fused(host)
    assert _time(s, host, True, monkeypatch) == _time(s, host, False, monkeypatch)


def test_fused_attention_on_tpu_agrees_with_the_simulator_channels_included():
    """examples/attention.acir on tpu: the scores (PE array) and the weighted sum (PE array)
    in one kernel, the softmax on the vector unit. The channels' bound loses the start-up the
    pipeline hides too, else it would bind at 1.25 us where the replay takes 0.90 us."""
    import autocomp_jupyter as autocomp
    from pathlib import Path

    src = (Path(__file__).resolve().parent.parent / "examples" / "attention.acir").read_text()
    res = autocomp.optimize(src, target="tpu", tune=0)
    (s,) = [s for k, s in zip(res.after.kernels, res.after.schedules) if k.compute_at]
    c = compare(s, "tpu", max_steps=20000)
    assert c["time_error"] < 0.02, c
    assert c["model_time_s"] == pytest.approx(0.897e-6, rel=0.02)
