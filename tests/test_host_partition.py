"""How threads share a packed contraction (codegen/c/ `packed_partition`): the work units
chosen for each thread count cover every output exactly once, one thread runs the serial
code, the emitted table is the chosen one, the host model follows it, and the generated C
gives the interpreter's results on 1, 2 and 3 threads for shapes with few M or N panels.
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import pytest

from autocomp_jupyter import host
from autocomp_jupyter.accel.cost import evaluate
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.codegen.c import generate_c
from autocomp_jupyter.host_strategy.contraction import packed_contraction
from autocomp_jupyter.host_strategy.gemm import packed_blocks
from autocomp_jupyter.host_strategy.operands import host_copy_costs
from autocomp_jupyter.host_strategy.partition import PARTITION_THREADS, claimed_makespan, packed_partition, partition_ranges
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.result import Plan

SHAPES = {
    # name: (program, cache-block tile of every loop)
    # 5x5: packed through its im2col (a 3x3 stride-1 conv would run as Winograd)
    "conv_batch1_64ch": ("input X: f32[1, 64, 56, 56]\nparam W: f32[64, 64, 5, 5]\n"
                         "Y = conv2d(X, W, stride=1, padding=2)\n", 32),
    "gemm_square": ("input A: f32[1024, 1024]\ninput B: f32[1024, 1024]\nC = matmul(A, B)\n", 256),
    "gemm_tall": ("input A: f32[4096, 1024]\ninput B: f32[1024, 256]\nC = matmul(A, B)\n", 256),
    "gemm_few_m_panels": ("input A: f32[7, 512]\ninput B: f32[512, 3000]\nC = matmul(A, B)\n", 128),
    "gemm_few_n_panels": ("input A: f32[3000, 512]\ninput B: f32[512, 20]\nC = matmul(A, B)\n", 128),
    "batch_matmul_3": ("input A: f32[3, 67, 59]\ninput B: f32[3, 59, 171]\nC = batch_matmul(A, B)\n", 32),
    "depthwise": ("input X: f32[1, 64, 56, 56]\nparam W: f32[64, 1, 3, 3]\n"
                  "Y = depthwise_conv2d(X, W, stride=1, padding=1)\n", 16),
    "bert_ffn": ("input X: f32[128, 768]\nparam W: f32[768, 3072]\nparam b: f32[3072]\nY = linear(X, W, b)\n", 256),
}


def plan_of(src: str, tile: int, threads: int) -> Plan:
    program = parse(src)
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    tiles = {l: {"L2": min(e, tile), "registers": max(1, min(e, tile) // 4)} for l, e in kernel.extents.items()}
    parallel = {"parallel": tuple(l.name for l in kernel.anchor_statement.output_loops)} if threads > 1 else {}
    return Plan(program, (kernel,), (Schedule(kernel, tiles=tiles, annotations=parallel, levels=("L2", "registers")),))


def packed_of(plan: Plan):
    kernel, schedule = plan.kernels[0], plan.schedules[0]
    pk = packed_contraction(kernel, schedule)
    assert pk is not None
    return kernel, pk


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_units_cover_every_output_exactly_once_for_every_thread_count(name):
    src, tile = SHAPES[name]
    kernel, pk = packed_of(plan_of(src, tile, threads=2))
    a_cost, b_cost = host_copy_costs(kernel, pk)
    NB, M, N = (pk.size(g) for g in ("batch", "m", "n"))
    mr, nr = pk.micro
    for nc in (nr, 4 * nr, 512):
        for threads in range(1, PARTITION_THREADS + 1):
            part = packed_partition(pk, nc, threads, a_cost, b_cost)
            ranges = partition_ranges(pk, part)
            assert len(ranges) == part.units and part.units % NB == 0
            covered = np.zeros((NB, M, N), dtype=np.int32)
            for bt, m_lo, m_hi, n_lo, n_hi in ranges:
                assert 0 <= m_lo < m_hi <= M and 0 <= n_lo < n_hi <= N, (name, threads, part)
                # chunks start on whole micro-panels: the microkernel's edge masks stay at the ends
                assert m_lo % mr == 0 and n_lo % nr == 0
                covered[bt, m_lo:m_hi, n_lo:n_hi] += 1
            assert (covered == 1).all(), (name, threads, part)
            if threads == 1:                   # one thread: the serial code, no extra packing
                assert (part.mode, part.units, part.extra_cycles) == ("batch", NB, 0.0)
            else:
                assert 0 < part.share <= 1
                if NB * M * N * pk.size("k") >= threads << 22:    # work enough: every thread a fair part
                    assert part.share <= 2.0 / threads, (name, threads, part)


def test_few_m_panels_are_cut_along_n_and_few_n_panels_along_m():
    """The cut follows the panels there are (and the packing it repeats), not a fixed dimension."""
    for name, mode in (("conv_batch1_64ch", "n"), ("gemm_few_m_panels", "n"), ("gemm_few_n_panels", "m"),
                       ("gemm_tall", "m"), ("bert_ffn", "n"), ("depthwise", "batch")):
        src, tile = SHAPES[name]
        kernel, pk = packed_of(plan_of(src, tile, threads=2))
        part = packed_partition(pk, 256, 2, *host_copy_costs(kernel, pk))
        if pk.swapped:      # the microkernel runs transposed (N = 20 as its rows): the long side is n
            mode = {"m": "n", "n": "m"}.get(mode, mode)
        assert part.mode == mode, (name, part)
        # more units than threads, so that a thread whose core is shared takes fewer
        assert part.units >= 4 or part.units == pk.size("batch") * max(-(-pk.size("m") // pk.micro[0]),
                                                                        -(-pk.size("n") // pk.micro[1]))


@pytest.mark.parametrize("name", ["conv_batch1_64ch", "batch_matmul_3"])
def test_emitted_unit_table_is_the_chosen_partition(name):
    src, tile = SHAPES[name]
    plan = plan_of(src, tile, threads=2)
    kernel, pk = packed_of(plan)
    text = generate_c(plan)
    table = re.search(r"static const long ac_units_\w+\[%d\]\[3\] = \{(.*)\};" % PARTITION_THREADS, text).group(1)
    rows = [tuple(map(int, row.split(","))) for row in re.findall(r"\{([^{}]*)\}", table)]
    kernel_writer_nc = packed_blocks(pk, lambda l: min(tile, dict(pk.extents)[l]))[1]
    expected = [packed_partition(pk, kernel_writer_nc, t, *host_copy_costs(kernel, pk))
                for t in range(1, PARTITION_THREADS + 1)]
    assert rows == [(p.code, p.chunk, p.units) for p in expected]
    assert "__atomic_fetch_add(&next[victim * 8]" in text and text.count("#pragma omp parallel num_threads(") == 1


def test_host_model_follows_the_partition():
    """The model's 2-thread prediction is the busiest thread's units (plus the packing the cut
    adds): about half the one-thread time for a batch-1 conv cut along N."""
    src, tile = SHAPES["conv_batch1_64ch"]
    target = load_target("host")
    if target.compute.units < 2:
        pytest.skip("one core")
    plan = plan_of(src, tile, threads=2)
    schedule = plan.schedules[0]
    one = evaluate(dataclasses.replace(schedule, annotations={**schedule.annotations, "parallel": ()}), target).time_s
    many = evaluate(schedule, target).time_s
    kernel, pk = packed_of(plan)
    part = packed_partition(pk, packed_blocks(pk, lambda l: min(tile, dict(pk.extents)[l]))[1],
                            target.compute.units, *host_copy_costs(kernel, pk))
    ideal = math_ceil(part.units, target.compute.units) / part.units
    assert many < one * (ideal + 0.05) and many > one * ideal * 0.9


def test_predicted_time_follows_the_thread_count():
    """host.predicted_time (the `predicted_time_s` measure_plan reports beside its
    `threads`): the model on that many threads, no parallel loops on one."""
    src, tile = SHAPES["conv_batch1_64ch"]
    plan = plan_of(src, tile, threads=2)
    one, two, four = (host.predicted_time(plan, None, t) for t in (1, 2, 4))
    assert 0.45 * one < two < 0.6 * one and 0.2 * one < four < two


def math_ceil(a: int, b: int) -> int:
    return -(-a // b)


needs_cc = pytest.mark.skipif(
    not any(Path(d, c).exists() for d in os.environ.get("PATH", "").split(os.pathsep) for c in ("cc", "gcc", "clang")),
    reason="no C compiler on PATH")

SMALL = {
    # few M panels (batch 1, 10 output channels: 2 panels), cut along N
    "conv_few_m_panels_pad_relu": ("input X: f32[1, 8, 30, 26]\nparam W: f32[10, 8, 3, 3]\n"
                                   "Y = conv2d(X, W, stride=1, padding=1)\nR = relu(Y)\n", 16),
    # few N panels, many M panels: cut along M (each unit packs B)
    "gemm_few_n_panels_bias": ("input X: f32[301, 64]\nparam W: f32[64, 20]\nparam b: f32[20]\nY = linear(X, W, b)\n", 32),
    # batch items fewer than threads x units: a batch item cut in chunks
    "batch_matmul_2": ("input A: f32[2, 37, 41]\ninput B: f32[2, 41, 150]\nC = batch_matmul(A, B)\n", 16),
}


@needs_cc
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_generated_code_matches_interpreter_on_1_2_3_threads(name, threads):
    src, tile = SMALL[name]
    plan = plan_of(src, tile, threads=2)      # annotated parallel; the run's thread count varies
    report = host.measure_plan(plan, repeats=1, threads=threads)
    assert report["matches_interpreter"], report["reason"]
    assert report["threads"] == threads
    assert report["predicted_time_s"] == pytest.approx(host.predicted_time(plan_of(src, tile, threads=2), None, threads))


@needs_cc
def test_a_team_smaller_than_the_thread_count_still_runs_every_unit(monkeypatch):
    """The units are cut for omp_get_max_threads(); a team that gets fewer threads (here
    OMP_THREAD_LIMIT=1 under 3 requested) takes the missing threads' shares."""
    monkeypatch.setenv("OMP_THREAD_LIMIT", "1")
    src, tile = SMALL["conv_few_m_panels_pad_relu"]
    report = host.measure_plan(plan_of(src, tile, threads=2), repeats=1, threads=3)
    assert report["matches_interpreter"], report["reason"]


def test_the_simulator_replays_the_packed_code_and_agrees_with_the_model():
    """The simulator times a host packed GEMM by walking the C's own blocks, units and
    micro-tiles (`host_model.replay_packed`), not the schedule's tile loops that the C never
    runs: on one thread the walk is what the closed form counts; on two, the busiest
    thread's own units, within 10% of the model on bench_cost_model's host case (128^3)
    and on shapes whose blocks and panels leave edges."""
    import sys
    from autocomp_jupyter.accel.cost import library_schedule
    from autocomp_jupyter.accel.host_model import replay_packed
    from autocomp_jupyter.accel.sim import compare
    from autocomp_jupyter.ir.schedule import kernels_unfused
    sys.path.insert(0, str(Path(__file__).parent))
    from test_cost import gemm_program

    target = load_target("host")
    for m, n, k in ((128, 128, 128), (512, 500, 256), (1000, 20, 300)):
        kernel = kernels_unfused(gemm_program(m, n, k))[0]
        schedule = library_schedule(kernel, target)
        serial = dataclasses.replace(schedule, annotations={**schedule.annotations, "parallel": ()})
        assert replay_packed(kernel, serial, target) == pytest.approx(evaluate(serial, target).time_s, rel=1e-9)
        c = compare(schedule, target)
        assert c["time_error"] < 0.10, (m, n, k, c)
    # a loop nest the C runs as written has no packed replay
    kernel = kernels_unfused(gemm_program(8, 8, 8))[0]
    assert replay_packed(kernel, Schedule.default(kernel), target) is None


def test_a_short_last_chunk_is_counted_short():
    """Units are costed one by one as the C's threads claim them: 13 panels in chunks of 4 leave
    the thread owning the 1-panel chunk idle (8 of 13 on the other), so the cut chosen for two
    threads is one whose busiest thread runs little more than half."""
    assert claimed_makespan([4, 4, 4, 1], 2) == 8 and claimed_makespan([7, 6], 2) == 7
    assert claimed_makespan([1, 1, 1, 1, 1, 5], 2) == 7       # no one takes a unit already started
    assert claimed_makespan([2.0] * 9, 3) == 6 and claimed_makespan([3.0], 4) == 3
    kernel, pk = packed_of(plan_of("input A: f32[1024, 256]\ninput B: f32[256, 196]\nC = matmul(A, B)\n", 64, 2))
    part = packed_partition(pk, 64, 2, *host_copy_costs(kernel, pk))
    assert part.share <= 0.55, part
    units = [r for r in partition_ranges(pk, part)]
    assert len(units) == part.units
