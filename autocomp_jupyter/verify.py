"""Verification of a kernel's schedule: isl legality, then a tiled run against the untiled kernel.

`verify_schedule` is what every pass, the tuner's winners and the final plan are checked
with: the one legality policy (`poly.check_schedule`), then the kernel run tile by tile in
the reference interpreter (`interp.check_tiled`) on the program itself when it is small, on
a scaled-down twin of the same structure when it is not (`scaled_twin`: the program's twin,
else a twin of the kernel's ops alone, `ir.twin.kernel_twin`), with the inner levels merged
(`_coarsen`) when the twin has too many tiles to run. Passing runs are remembered by the
canonical schedule and a digest of the inputs (`canon.LRU`); a kernel's twin, and the digest
of what its kernel reads there, are made once per (program, kernel), not once per schedule.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np

from . import poly
from .caches import LRU
from .canon import schedule_key
from .interp import TooManyTiles, check_tiled, reference_run
from .ir.program import Const, Loop, Program, substitute
from .ir.schedule import Kernel, Schedule
from .ir.twin import kernel_twin
from .passes import PassContext
from .rules.fusion import replay_inlines

TWIN_EXTENT = 16              # scaled-down twin for the tiled execution check
# (tile, statement) pieces a tiled run may execute before the inner levels are merged
# (`_coarsen`). 2048 (about 0.2 s of interpreter): on host (4 levels) every kernel of ResNet-50
# is checked at every level (52 of 57 of torch's export), for ~2-3 s more over the network;
# 160 left 27 of 56 (40 of 57) with their inner levels unchecked.
MAX_CHECK_TILES = 2048


def verify_schedule(schedule: Schedule, program: Program, ctx: PassContext | None = None, seed: int = 0,
                    execute: bool = True, record: dict | None = None) -> str:
    """'' if `schedule` is legal (isl) and computes what the untiled kernel computes when run
    tile by tile (on a scaled-down twin when the program is large); else the reason.
    `execute=False` skips the tiled run (annotations alone do not change what runs when), as
    does a context without `tiled_checks` (the library baseline's searches).

    `record`, when given, is filled with how the tiled run was done: `tiled_run` is
    "program" (the program itself, small enough), "twin" (its scaled twin, dimensions at
    most `twin_max_extent`), "coarsened" (the twin with inner levels merged, too many tiles
    otherwise) or "none" (no twin of the same structure exists: isl's verdict stands alone).

    A passing tiled run is remembered by the canonical form of the schedule it ran (the
    twin's) and a digest of the values its kernel reads, so the same run is never repeated
    (the library, the fusion check and the final verification ask about the same kernels);
    a failure is run every time. The values are part of the key because a verdict can
    depend on them (integer tensors saturate)."""
    verdict = poly.check_schedule(schedule)
    if not verdict.ok:
        return f"illegal schedule: {verdict.reason}"
    if not execute or (ctx is not None and not ctx.tiled_checks):
        return ""
    record = record if record is not None else {}
    twin = scaled_twin(schedule, program)
    if twin is None:
        record["tiled_run"] = "none"
        return ""  # structure differs at small size: isl's verdict stands alone
    small_schedule, small_program = twin
    record["tiled_run"] = "program" if small_program is program else "twin"
    if small_program is not program:
        record["twin_max_extent"] = max((d for t in small_program.tensors for d in t.shape), default=1)
    seed = ctx.seed if ctx else seed
    inputs = _inputs_digest(small_program, small_schedule.kernel, seed)
    for _ in range(len(small_schedule.levels)):
        key = (schedule_key(small_schedule), seed, MAX_CHECK_TILES, inputs)
        if _TILED_OK.get(key) is not None:
            return ""
        try:
            reference_run(small_program, seed)      # (check_tiled runs against the last program's run)
            eq = check_tiled(small_schedule, small_program, seed=seed, max_boxes=MAX_CHECK_TILES)
            break
        except TooManyTiles:
            # Too many tiles to run: merge the innermost levels into their enclosing ones
            # until few enough remain (the outer tile loops and their order are still checked).
            small_schedule = _coarsen(small_schedule)
            record["tiled_run"] = "coarsened"
    else:
        record["tiled_run"] = "none"
        return ""
    if not eq.ok:
        return f"tiled execution differs from the untiled kernel: {eq.reason}"
    _TILED_OK.put(key, True)
    return ""


# Canonical forms of (twin) schedules, with their inputs' digest, whose tiled run matched the untiled program.
_TILED_OK = LRU("verify.check_tiled", 4096)
_TWINS = LRU("verify.scaled_twin", 16)


def scaled_twin(schedule: Schedule, program: Program):
    """(schedule, program) to run the tiled check on: the program itself when small, else a
    twin with every dimension cut to about TWIN_EXTENT, and tile sizes scaled down in
    proportion (a tiled loop stays tiled). The twin is the program's own (`dsl.scaled_twin`
    from the source text, a fused program's inlines replayed on it: the kernel reads what
    its producers really make) when that builds small with the kernel's structure, else the
    kernel's ops alone (`ir.twin.kernel_twin`: imported reshapes pin a model's dimensions,
    Python rewrites have no source). None when neither has the kernel's structure (loops,
    statements, accesses)."""
    kernel = schedule.kernel
    if max(kernel.extents.values()) <= TWIN_EXTENT and max(max(t.shape, default=1) for t in program.tensors) <= 4 * TWIN_EXTENT:
        return schedule, program
    twin = _kernel_twin(kernel, program)
    if twin is None:
        return None
    small, small_kernel = twin
    big, little = kernel.extents, small_kernel.extents
    sizes = schedule.tile_sizes()
    tiles = {}
    for loop in kernel.loop_names:
        per = {}
        enclosing_big, enclosing = big[loop], little[loop]
        for h, level in enumerate(schedule.levels):
            t = sizes[loop][h]
            if t >= enclosing_big or enclosing <= 1:
                scaled = enclosing
            else:
                # In proportion, but at most 2 tiles per enclosing tile (few tiles to run),
                # and still fewer points than the enclosing tile (a tiled loop stays tiled);
                # a non-dividing tile stays non-dividing where the small extent allows it.
                scaled = max(-(-t * little[loop] // big[loop]), -(-enclosing // 2))
                scaled = min(scaled, enclosing - 1)
                if enclosing_big % t and enclosing % scaled == 0 and scaled + 1 < enclosing:
                    scaled += 1
            per[level] = scaled
            enclosing_big, enclosing = min(t, enclosing_big), scaled
        tiles[loop] = per
    return Schedule(small_kernel, tiles=tiles, order=schedule.order, annotations=schedule.annotations,
                    levels=schedule.levels), small


# Above this many iteration points (every statement's box) a rewritten program is checked on
# its scaled twin: the interpreter ran attention at 2,048 tokens in 16 heads for 95 s.
EQUIVALENCE_POINTS = 1 << 28


def equivalent_at_scale(original: Program, candidate: Program, seed: int = 0):
    """Whether `candidate` (the original rewritten: inlines, view folds, `rewrites`) computes
    what `original` does (`interp.equivalent`): on the programs themselves where they are small
    enough to run; else on the original's scaled twin (from its source) and that twin with the
    same rewrites replayed — each rewrite reads only the program's structure, which the twin
    keeps — and at full size where no twin builds (an imported model: no source) or a
    rewrite does not replay on it."""
    if sum(st.box_points for st in original.statements) <= EQUIVALENCE_POINTS:
        return _equivalent(original, candidate, seed)
    local = _equivalent_where_changed(original, candidate, seed)
    if local:
        return local
    small = _scaled_source(original)
    if small is None:
        return _equivalent(original, candidate, seed)
    rewritten = replay_inlines(small, candidate, keep={op for _, ops in candidate.rewrites for op in ops})
    for name, ops in candidate.rewrites:
        rewritten = _replayed(rewritten, name, tuple(ops))
        if rewritten is None:
            return _equivalent(original, candidate, seed)
    return _equivalent(small, rewritten, seed)


def _equivalent_where_changed(original: Program, candidate: Program, seed: int):
    """The rewrites that made `candidate` from `original`, checked on a small twin of the ops
    they changed alone (`ir.twin.kernel_twin`: their inputs random, every loop cut to
    TWIN_EXTENT) with the same rewrites replayed on it — each reads only the structure of the
    ops it rewrites, which the twin keeps; None where that twin does not build, a rewrite
    does not replay on it as it made `candidate`, or it finds a difference (the caller then
    checks at scale or at full size, and decides). An imported transformer's literal
    reshapes keep its own scaled twin at full size: ViT-B/16's checks ran the whole network
    in the interpreter, a quarter of its optimisation."""
    mine = {op.name: op for op in candidate.ops}
    rewritten_ops = {op for _, ops in candidate.rewrites for op in ops}
    changed = tuple(op.name for op in original.ops if mine.get(op.name) != op or op.name in rewritten_ops)
    if not changed or len(changed) == len(original.ops):
        return None
    try:
        small = _changed_twin(original, changed)
        if small is None:
            return None
        rewritten = replay_inlines(small, candidate, keep=rewritten_ops)
        for name, ops in candidate.rewrites:
            rewritten = _replayed(rewritten, name, tuple(ops))
            if rewritten is None:
                return None
    except (ValueError, KeyError, IndexError):      # a twin the ops do not make: checked as before
        return None
    # The replay made on the twin what the rewrites made of the program: the ops they removed
    # are gone from it, and every op they changed is there as `candidate` has it, but for
    # its loops' extents (so the twin checks the candidate's own statements).
    replayed = {op.name: op for op in rewritten.ops}
    for name in changed:
        if (name in mine) != (name in replayed) or (name in mine and _unsized(replayed[name]) != _unsized(mine[name])):
            return None
    verdict = _equivalent(small, rewritten, seed)
    return verdict if verdict else None


def _unsized(op) -> tuple:
    """An op's statements with their loops' extents left out: what a twin's copy of it shares
    with it."""
    return tuple(replace(st, loops=tuple(Loop(l.name, 0) for l in st.loops)) for st in op.statements)


def _changed_twin(original: Program, changed: tuple[str, ...]) -> Program | None:
    """`kernel_twin` of the ops `changed` of `original`, made once: a pass checks its
    candidates one after another against the same original (and the replays on the twin
    are remembered by the twin)."""
    return _CHANGED_TWINS.of(original, changed, lambda: kernel_twin(original, changed, TWIN_EXTENT, folds=True))


# Twins of the ops rewrites changed, by (the original, those ops).
_CHANGED_TWINS = LRU("verify.changed_twin", 64)


# A rewrite replayed on a twin, by (the twin it was replayed on, the rewrite): a pass checks
# its candidates one after another, each with the rewrites of the ones kept before it.
_REWRITES_REPLAYED = LRU("verify.rewrites_replayed", 64)


def _replayed(program: Program, name: str, ops: tuple[str, ...]) -> Program | None:
    """`program` with the rewrite `name` of `ops` replayed, or None where it does not replay."""
    def replay():
        replayed = _REPLAYS[name](program, list(ops)) if name in _REPLAYS else "unknown rewrite"
        return None if isinstance(replayed, str) else replayed[0]

    return _REWRITES_REPLAYED.of(program, (name, ops), replay)


# The original's run on its random inputs, per (original, seed), with every value the checks
# against it computed (`_Runs`): every rewrite a pass checks (each inline, the view folds,
# each chain) is compared with the same original run, and changes a few of its statements.
_REFERENCE_RUNS = LRU("verify.reference_runs", 2)


def _equivalent(original: Program, candidate: Program, seed: int):
    """`interp.equivalent(original, candidate, seed)`, the original's run done once and each
    statement the candidate shares with it, on the same values, not run again (`_Runs`)."""
    from .interp import compare_outputs, random_inputs

    def reference():
        runs = _Runs(random_inputs(original, seed))
        values = runs.run(original)
        return runs, {name: values[name] for name in original.outputs}

    runs, expected = _REFERENCE_RUNS.of(original, seed, reference)
    return compare_outputs(original, expected, runs.run(candidate))


class _Runs:
    """`interp.run`s of programs on the same inputs that share their statements' values.

    A statement's value depends on the statement, the tensor it writes and the values it
    reads, nothing else: each computed value is kept by those (the values by identity: every
    one is kept alive here), and a statement met again on the same values takes it (a
    rewrite's unchanged statements, before and after the ones it changed). A value computed
    again that is bit for bit one kept for the same tensor is replaced by that one, so the
    statements after it are met on the same values too (an inlined op recomputed inside its
    reader gives the same bits). The outputs are those `interp.run` gives."""

    def __init__(self, inputs: dict):
        self.inputs = inputs
        self.values: dict = {}        # (statement, tensor, ids of the values read) -> value
        self.by_tensor: dict = {}     # tensor name -> the values computed for it (bit-for-bit matches)
        self.kept: list = []          # every value computed (their ids stay theirs)

    def run(self, program: Program) -> dict:
        from .interp import run_statement

        env: dict = {}
        for t in program.inputs:        # as `interp.run` checks them
            if t.name not in self.inputs:
                raise ValueError(f"missing value for {t.role} '{t.name}' {list(t.shape)}")
            value = self.inputs[t.name]
            if value.dtype != np.float64 or value.shape != t.shape:
                value = np.asarray(value, dtype=np.float64)
                if value.shape != t.shape:
                    raise ValueError(f"'{t.name}' must have shape {list(t.shape)}, got {list(value.shape)}")
                self.kept.append(value)
            env[t.name] = value
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for st in program.statements:
                tensor = program.tensor(st.target)
                key = (st, tensor, tuple((name, id(env[name])) for name in _read_names(st) if name in env))
                value = self.values.get(key)
                if value is None:
                    value = self._same_as_before(st.target, run_statement(st, env, tensor))
                    self.values[key] = value
                env[st.target] = value
        return env

    def _same_as_before(self, name: str, value: np.ndarray) -> np.ndarray:
        """`value`, or a value kept for tensor `name` with the same bits."""
        seen = self.by_tensor.setdefault(name, [])
        for old in seen:
            if old.shape == value.shape and old.dtype == value.dtype and old.tobytes() == value.tobytes():
                return old
        seen.append(value)
        self.kept.append(value)
        return value


def _read_names(st) -> list[str]:
    """The tensors a statement reads, the integer tensors its indirect indices read included."""
    names: list[str] = []
    todo = list(st.reads())
    while todo:
        access = todo.pop()
        if access.tensor not in names:
            names.append(access.tensor)
        todo.extend(r for _, r in access.indirect)
    return sorted(names)


def _replay_online_softmax(program: Program, ops: list[str]):
    from .rules.online_softmax import online_softmax

    return online_softmax(program, ops)


def _replay_split_k(program: Program, ops: list[str]):
    from .rules.split_k import replay

    return replay(program, ops)


def _replay_implied_domains(program: Program, ops: list[str]):
    from .rules.domains import implied_domains

    return implied_domains(program, ops)


_REPLAYS = {"online_softmax": _replay_online_softmax, "split_k": _replay_split_k,
            "implied_domains": _replay_implied_domains}


def scaled_points(program: Program) -> int:
    """The iteration points a check of `program` at scale runs: its scaled twin's (from its
    source), else its own. An imported model's literal reshapes can pin its twin near full
    size (MaxViT's windows: 4.2e9 of 5.8e9 points)."""
    small = _scaled_source(program) if sum(st.box_points for st in program.statements) > EQUIVALENCE_POINTS else None
    return sum(st.box_points for st in (small or program).statements)


def _scaled_source(program: Program, up_to: int | None = None) -> Program | None:
    """The scaled twin of the program's source (cached), or None; with `up_to`, only a twin
    built at an extent up to that (`dsl.scaled_twin`: no parses at larger extents for a twin
    the caller would not take), or the one already made."""
    if not program.source:
        return None
    key = (program.source, program.filename)
    if key in _TWINS:
        return _TWINS.get(key)
    bounded = key + (up_to,)
    if up_to is not None and bounded in _TWINS:
        return _TWINS.get(bounded)
    from .dsl import scaled_twin as program_twin
    from .errors import UserError
    try:
        small = program_twin(program.source, program.filename, max_extent=TWIN_EXTENT, up_to=up_to)
    except UserError:
        small = None
    _TWINS.put(key if up_to is None else bounded, small)
    return small


# A kernel's twin by (program, kernel): every schedule of one kernel is checked on the same
# twin, so it is built once (an imported model's kernel twins were built again for each of
# MaxViT-T's 1,600 checks, a tenth of its optimisation). Entries hold their program: an id is
# reused once its object is gone.
_KERNEL_TWINS = LRU("verify.kernel_twin", 1024)
# What a twin's kernel reads in the twin's untiled run, as a digest (`verify_schedule`'s key),
# by (twin, kernel inputs, seed): the run is made once per twin, not once per check.
_INPUT_DIGESTS = LRU("verify.twin_inputs", 1024)


def _kernel_twin(kernel: Kernel, program: Program) -> tuple[Program, Kernel] | None:
    """(twin program, the kernel on it): the program's own twin where it has the kernel's
    structure, else the kernel's ops alone (`ir.twin.kernel_twin`); None where neither has."""
    def twin():
        small = _program_twin(program)
        small_kernel = _same_structure(kernel, small)
        if small_kernel is None:      # only then build the kernel's own twin
            small = kernel_twin(program, kernel.ops, TWIN_EXTENT)
            small_kernel = _same_structure(kernel, small)
        return None if small_kernel is None else (small, small_kernel)

    return _KERNEL_TWINS.of(program, kernel, twin)


def _inputs_digest(program: Program, kernel: Kernel, seed: int) -> str:
    """A digest of the values `kernel` reads in `program`'s untiled run on its random inputs."""
    def digest():
        reference = reference_run(program, seed)
        return hashlib.sha1(b"".join(np.ascontiguousarray(reference[name]).tobytes()
                                     for name in kernel.inputs)).hexdigest()

    return _INPUT_DIGESTS.of(program, (kernel.inputs, seed), digest)


def _program_twin(program: Program) -> Program | None:
    """The program's own twin (cached by source), if one builds with every dimension at
    most 4 x TWIN_EXTENT; one object per program (its kernels' checks share its run)."""
    def twin():
        small = _scaled_source(program, up_to=4 * TWIN_EXTENT)
        if small is None or max((d for t in small.tensors for d in t.shape), default=1) > 4 * TWIN_EXTENT:
            return None  # a dimension the source pins (a literal reshape) keeps the twin large
        return replay_inlines(small, program)     # a fused program's kernels read what its inlines left

    return _PROGRAM_TWINS.of(program, None, twin)


_PROGRAM_TWINS = LRU("verify.program_twin", 16)


def _same_structure(kernel: Kernel, small: Program | None) -> Kernel | None:
    """The kernel rebuilt on twin `small` if it has the kernel's loops, statements and
    accesses (constants may differ), else None."""
    if small is None:
        return None
    # Rebuilt at the same anchor (a chain is anchored at its last op, not its first) and with
    # the same compute points: else a fused chain never finds its twin and goes isl-only.
    target = kernel.anchor_statement.target
    anchor = next((op.name for op in small.ops if op.name in kernel.ops
                   and any(st.target == target for st in op.statements)), None)
    try:
        small_kernel = Kernel.from_ops(small, kernel.ops, name=kernel.name, anchor=anchor)
        for tensor, loop, level in kernel.compute_at:
            small_kernel = small_kernel.with_compute_at(tensor, loop, level)
    except (KeyError, ValueError):
        return None
    same = (small_kernel.loop_names == kernel.loop_names and len(small_kernel.statements) == len(kernel.statements)
            and small_kernel.loop_maps == kernel.loop_maps
            and all(_form(a.expr) == _form(b.expr) for a, b in zip(small_kernel.statements, kernel.statements)))
    return small_kernel if same else None


def _form(expr) -> str:
    """An expression with its constants blanked: a twin's kernel may differ from the
    program's only in constants derived from shapes (an average's divisor: 49 at full size,
    4 in the twin); the accesses, operators and loops, which decide what a tile reads and
    writes, must be the same."""
    return str(substitute(expr, lambda e: Const(0.0) if isinstance(e, Const) else None))


def _coarsen(schedule: Schedule) -> Schedule:
    """Merge the innermost level that still tiles something into its enclosing level."""
    levels = schedule.levels
    sizes = schedule.tile_sizes()
    for h in range(len(levels) - 1, 0, -1):
        if any(sizes[l][h] < sizes[l][h - 1] for l in sizes):
            break
    tiles = {l: {lv: sizes[l][min(i, h - 1)] if i >= h else sizes[l][i] for i, lv in enumerate(levels)}
             for l in schedule.kernel.loop_names}
    return replace(schedule, tiles=tiles)
