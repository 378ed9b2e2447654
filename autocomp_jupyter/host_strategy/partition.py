"""How threads share a packed GEMM: its work units (`packed_partition`: the batch items, or
chunks of N or M panels, chosen per thread count), when the last thread finishes them claimed
as the C claims them (`claimed_makespan`), and the output each unit covers
(`partition_ranges`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .gemm import Packed


# Threads share a packed contraction as work units: each thread runs its own contiguous
# share first, then takes what is left of the others' (codegen/c/packed.py), so that a thread whose
# core another process holds ends up with fewer units instead of holding the others at the
# region's end. (Static halves of a 2.4 ms conv ran 0.9x on 2 threads whenever another
# process was running: the woken worker thread preempted the master on its core and the
# halves ran one after the other.) The unit grid is chosen per thread count by
# `packed_partition` and emitted as a table (PARTITION_THREADS entries).
PARTITION_THREADS = 32
# Of a unit's work, what a thread may lose to another process (a time slice): the makespan
# penalty that favours more, smaller units (`packed_partition`), against the packing more
# units repeat. Measured, GEMM 1024^3 on 2 bound threads with another process on one core:
# 2 units (N halves) 27-29 ms, 4 units 18-20 ms (one thread: 20-21 ms); on 2 idle cores
# 10.4 against 11.0 ms.
PARTITION_SLACK = 0.25
# Cycles per element at least, to pack an operand again for another unit: a whole operand
# that outgrows L2 streams from L3 (measured, GEMM 1024^3: packing B took 0.6 ns an
# element, ~2 cycles, against 0.25 for a panel copied from cache).
PARTITION_REPACK_CYCLES = 1.6
# Cycles per element to read a prepacked operand (`prepacked`) again for another unit: no copy,
# but another pass over it from L3 (each thread streaming all of a BERT FFN's 9.4 MB of weights,
# cut along M, against half of them each, cut along N).
PARTITION_REREAD_CYCLES = 0.25
# Microkernel multiply-adds per cycle assumed when weighing packing copies against compute
# (a 6x16 f32 tile at ~70% of two 8- or 16-lane FMA pipes; the choice is insensitive to it).
PARTITION_MACS_PER_CYCLE = 16.0
# Cycles a unit costs beyond its share of the work (claiming it, setting up its panels and
# cache blocks): among near-equal makespans, fewer units win.
PARTITION_UNIT_CYCLES = 2000.0


@dataclass(frozen=True)
class Partition:
    """How threads share a packed contraction: `units` work units, each one batch item x
    (`mode` "batch": all of M and N; "n": `chunk` NR-wide column panels, all of M; "m":
    `chunk` MR-high row panels, all of N). `extra_cycles`: the packing the split adds over
    one thread (an "n" unit packs A again for its columns, an "m" unit packs all of B);
    `share`: the busiest thread's part of the (work + extra) on an idle machine."""

    mode: str
    chunk: int
    units: int
    extra_cycles: float
    share: float
    reread_cycles: float = 0.0      # the part of extra_cycles that re-reads a prepacked operand

    @property
    def code(self) -> int:
        return {"batch": 0, "n": 1, "m": 2}[self.mode]


# Units beyond which `claimed_makespan` estimates instead of replaying the claims (many small
# units: the greedy bound's middle is within a small unit of the replay).
CLAIM_REPLAY_MAX = 512


def claimed_makespan(costs: list[float], threads: int) -> float:
    """When the last of `threads` equally fast threads finishes `costs` (one per work unit, in
    unit order) claimed as the C claims them: thread t owns the contiguous share [U t / T,
    U (t + 1) / T), runs it front to back, then takes the next unit of the others' shares,
    (t + 1) % T first, whoever reaches a unit first running it. Beyond CLAIM_REPLAY_MAX units:
    total / T + half the largest unit (the middle of greedy list scheduling's bounds)."""
    import heapq

    U = len(costs)
    if threads <= 1 or U == 0:
        return float(sum(costs))
    if U > CLAIM_REPLAY_MAX:
        return sum(costs) / threads + 0.5 * max(costs) * (1 - 1 / threads)
    heads = [U * t // threads for t in range(threads)]
    ends = [U * (t + 1) // threads for t in range(threads)]
    victim = list(range(threads))        # where each thread looks next (shares only ever empty)
    ready = [(0.0, t) for t in range(threads)]
    finish = 0.0
    while ready:
        clock, t = heapq.heappop(ready)
        for _ in range(threads):
            v = victim[t]
            if heads[v] < ends[v]:
                break
            victim[t] = (v + 1) % threads
        else:
            finish = max(finish, clock)      # no unit left anywhere: this thread is done
            continue
        clock += costs[heads[v]]
        heads[v] += 1
        heapq.heappush(ready, (clock, t))
    return finish


def packed_partition(pk: "Packed", nc: int, threads: int, a_cost: float = 1.0, b_cost: float = 1.0,
                     macs_per_cycle: float = PARTITION_MACS_PER_CYCLE, cached_bytes: float = 0.0) -> Partition:
    """The work units `threads` threads share a packed contraction in (cache block `nc`
    columns; `a_cost`/`b_cost`: cycles to pack one element of A/B). Candidates: the batch
    items, or each batch item cut into g chunks of N panels or of M panels (g up to
    4 x threads), the last chunk of each item the rest. Each unit costs its panels' work,
    the packing it does (an "n" unit packs A for its columns, an "m" unit all of B) and
    PARTITION_UNIT_CYCLES; the chosen cut minimises the makespan of the units claimed as
    the C claims them (`claimed_makespan`: a short last chunk leaves its owner idle), plus
    PARTITION_SLACK of the largest unit (what a thread whose core is shared holds the
    others up by). One thread: the batch items (the serial code). Every choice covers each
    output exactly once (`partition_ranges`); `share` is the busiest thread's part of all
    the units' cycles on an idle machine. `extra_cycles` (what the host model adds) counts no
    re-read of a prepacked operand of at most `cached_bytes` (per batch item): each core reads
    it from its own cache, within the microkernel's time (GEMM 128^3 with prepacked B, 64 KB,
    on 2 threads: 2.14e-5 s measured, 2.52e-5 without the re-read, 2.76e-5 with it; 4.13e-5 on
    one). The choice of cut still weighs every re-read (as measured when it was tuned)."""
    NB, M, N, K = (pk.size(g) for g in ("batch", "m", "n", "k"))
    mr, nr = pk.micro
    mpan, npan = -(-M // mr), -(-N // nr)
    nc = max(nr, min(nc, npan * nr))
    per_panel_n = mpan * mr * nr * K / macs_per_cycle        # one N panel, all of M, one batch item
    per_panel_m = mr * npan * nr * K / macs_per_cycle        # one M panel, all of N
    nblocks = -(-N // nc)

    def unit_costs(mode: str, chunk: int, cached: float = 0.0) -> tuple[list[float], float]:
        """(cycles of each unit in unit order: its panels, the packing it does, its claim; the
        packing all the units do beyond one thread's), a prepacked operand of at most `cached`
        bytes read again for free."""
        # cycles per element packed: a whole operand that outgrows L2 streams from L3; a
        # prepacked operand (cost 0) is never packed again for another unit, only read again
        a_el = max(a_cost, PARTITION_REPACK_CYCLES) if a_cost else \
            (0.0 if 4 * M * K <= cached else PARTITION_REREAD_CYCLES)
        b_el = max(b_cost, PARTITION_REPACK_CYCLES) if b_cost else \
            (0.0 if 4 * K * N <= cached else PARTITION_REREAD_CYCLES)
        serial = npan * per_panel_n + M * K * nblocks * a_el + N * K * b_el      # one batch item on one thread
        if mode == "batch":
            return [serial + PARTITION_UNIT_CYCLES] * NB, 0.0
        panels = npan if mode == "n" else mpan
        sizes = [min(chunk, panels - lo) for lo in range(0, panels, chunk)]
        item = []
        for i, c in enumerate(sizes):
            if mode == "n":         # A for each nc block of its columns, B for its columns
                cols = min(c * nr, N - i * chunk * nr)
                item.append(c * per_panel_n + -(-cols // nc) * M * K * a_el + cols * K * b_el)
            else:                   # A for its rows (each nc block), all of B
                rows = min(c * mr, M - i * chunk * mr)
                item.append(c * per_panel_m + rows * K * nblocks * a_el + N * K * b_el)
        extra = max(0.0, sum(item) - serial)
        return [x + PARTITION_UNIT_CYCLES for x in item] * NB, NB * extra

    options = [("batch", 1)]
    if threads > 1:
        for g in range(2, 4 * threads + 1):
            if g <= npan:
                options.append(("n", -(-npan // g)))
            if g <= mpan:
                options.append(("m", -(-mpan // g)))
    options = list(dict.fromkeys(options))

    # No claim order beats the busiest unit or an even share: options are replayed in the
    # order of that bound, until the bound alone is worse than the best replayed (the choice,
    # the first of the fastest, is the one replaying them all makes).
    bounded = []
    for index, option in enumerate(options):
        costs, _ = unit_costs(*option)
        slack = PARTITION_SLACK * max(costs) if threads > 1 else 0.0
        bounded.append((max(max(costs), sum(costs) / threads) + slack, index, costs, slack))
    best, best_score, best_costs = None, math.inf, None
    for bound, index, costs, slack in sorted(bounded, key=lambda b: (b[0], b[1])):
        if bound > best_score * (1 + 1e-9):
            break
        score = claimed_makespan(costs, threads) + slack
        if (score, index) < (best_score, best if best is not None else math.inf):
            best, best_score, best_costs = index, score, costs
    mode, chunk = options[best]
    costs = best_costs
    _, extra = unit_costs(mode, chunk, cached_bytes)
    _, copies = unit_costs(mode, chunk, math.inf)        # no re-read anywhere: the copies alone
    return Partition(mode, chunk, len(costs), extra, claimed_makespan(costs, threads) / sum(costs), extra - copies)


def partition_ranges(pk: "Packed", part: Partition) -> list[tuple[int, int, int, int, int]]:
    """[(batch item, m_lo, m_hi, n_lo, n_hi)] of each unit, in unit order: what the C's
    unit loop computes from the unit number (for tests: the units tile the output)."""
    NB, M, N = (pk.size(g) for g in ("batch", "m", "n"))
    mr, nr = pk.micro
    per = part.units // NB
    out = []
    for u in range(part.units):
        bt, c = divmod(u, per)
        if part.mode == "n":
            out.append((bt, 0, M, c * part.chunk * nr, min(N, (c + 1) * part.chunk * nr)))
        elif part.mode == "m":
            out.append((bt, c * part.chunk * mr, min(M, (c + 1) * part.chunk * mr), 0, N))
        else:
            out.append((bt, 0, M, 0, N))
    return out
