"""Hardware design-space exploration: sweep a target's fields, optimise the program on every
design, and find the designs no other beats on time, energy and area at once (docs/guide/explore.md).

    explore(src, target, sweeps, tune=0, ...) -> Exploration     # .to_json(): points, pareto, seconds
    parse_sweep("compute.pe_rows,compute.pe_cols=16x16,32x32") -> Sweep
    pareto_front(points) -> [indices]

A sweep names dotted paths into the target's YAML (`compute.pe_rows`, `memory.SRAM.size_bytes`,
`clock_ghz`, `compute.peak_macs_per_cycle.i8`), each with its values; several sweeps form their
cartesian product and paths joined by a comma move together (`16x16,32x32`). Input is checked
before any work: an unknown path or a value of the wrong type or unit is a `UserError` naming
it. A design the target validator refuses (a zero-byte SRAM, sizes shrinking outward) or the
pipeline cannot map is kept as an invalid point with its reason, and the sweep goes on.

Every point runs the whole pipeline (`pipeline.optimize`: rules, tiling, scheduling, tuning when
asked) on a target built by the validator from the edited YAML, and is verified like any run.
Points run serially, on a Dask LocalCluster (`workers=N`) or on an existing scheduler
(`scheduler=ADDRESS`) with the serial results; with `cache=DIR` each finished point is written
as JSON keyed by the program, the design and the options, so an interrupted sweep resumes (the
cache resumes one sweep with one build: after an upgrade, start from an empty directory).

What one design reuses from the designs before it is exact: every point's report is the one a
fresh `optimize` on its target gives. The program is imported once and scattered once to each
Dask worker, and a process (the caller's, or a worker's) keeps the package's caches warm from
one point to the next: what does not read the target is found again, not recomputed (the
fusion pass's rewrites and their equivalence verdicts, scaled twins and reference runs, isl
legality verdicts by schedule, tiled-run checks by canonical schedule), and within a design
each kernel structure is searched once (`baselines`, `accel.tile_search`: keyed by the
canonical kernel). A search's result is keyed by the whole target: every field a sweep can set
on a design's performance view is read by the cost model the searches compare with (sizes
decide what fits, bandwidths and latencies the roofline, energies latency's 1% ties), so no
search result is carried to a design whose view differs.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import gc
import hashlib
import itertools
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from .accel.area import REFERENCE_NM
from .accel.target import (_SIZE_RE, COMPUTE_SCHEMA, KIND_FIELDS, MEMORY_SCHEMA, TOP_SCHEMA, Target, TargetError,
                           _resolve_auto, parse_size, parse_target)
from .errors import UserError
from .ir.program import DTYPES

MAX_POINTS = 1000
CACHE_VERSION = 1
# Top-level and memory-level fields that are names or text, never swept.
_FIXED = {"name", "description", "compute", "memory", "holds"}


@dataclass(frozen=True)
class Sweep:
    """One `--sweep`: paths that move together and, per step, one value for each path."""

    paths: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    text: str = ""

    def __len__(self) -> int:
        return len(self.values)


def _sweep_error(text: str, message: str) -> UserError:
    return UserError(f"--sweep {text!r}: {message}", filename="--sweep")


def parse_sweep(text: str) -> Sweep:
    """`PATH=V1,V2,...` or `P1,P2=A1xB1,A2xB2`: the paths and raw value strings (typed later,
    against the target, by `typed_sweep`)."""
    lhs, eq, rhs = text.partition("=")
    paths = tuple(p.strip() for p in lhs.split(","))
    if not eq or not all(paths) or not rhs.strip():
        raise _sweep_error(text, "expected PATH=V1,V2,... (or P1,P2=A1xB1,A2xB2 for tied paths)")
    if len(set(paths)) != len(paths):
        raise _sweep_error(text, "a path is named twice")
    values = []
    for item in rhs.split(","):
        parts = tuple(v.strip() for v in (item.split("x") if len(paths) > 1 else [item]))
        if len(parts) != len(paths) or not all(parts):
            raise _sweep_error(text, f"value {item.strip()!r} needs {len(paths)} parts joined by 'x', one per path")
        values.append(parts)
    return Sweep(paths, tuple(values), text)


# --------------------------------------------------------------------------- paths into a target


def target_mapping(target: "str | Path | Target") -> tuple[dict, str]:
    """(the YAML mapping of a preset name or target file, its file name); `auto` resolved."""
    from .accel.target import load_target
    from .limits import YAML_BYTES, load_yaml, read_text_file

    path = Path(load_target(target).source)  # a bad name or file raises its TargetError here
    if not path.is_file():
        raise UserError(f"explore needs a target's YAML; {target!r} was not loaded from a file", filename="--target")
    text = read_text_file(path, YAML_BYTES, "target file", lambda f, m: TargetError(f, "", m))
    return _resolve_auto(load_yaml(text)), str(path)


def path_kinds(raw: Mapping) -> dict[str, Any]:
    """{dotted path: schema kind} of every field a sweep may set on this target."""
    kinds: dict[str, Any] = {k: spec for k, spec in TOP_SCHEMA.items() if k not in _FIXED}
    compute_kind = raw["compute"]["kind"]
    for key in KIND_FIELDS[compute_kind]["allowed"]:
        spec = COMPUTE_SCHEMA[key]
        if key == "kind":
            continue
        if isinstance(spec, tuple) and spec[0] == "dtype_map":
            kinds.update({f"compute.{key}.{d}": spec[1] for d in DTYPES})
        else:
            kinds[f"compute.{key}"] = spec
    for level in raw["memory"]:
        for key, spec in MEMORY_SCHEMA.items():
            if key not in _FIXED:
                kinds[f"memory.{level['name']}.{key}"] = spec
    return kinds


def _typed(sweep: Sweep, path: str, text: str, spec: Any) -> Any:
    """The value `text` as the schema kind `spec` wants it; wrong type or unit → UserError.
    Range (a size of 0, a negative bandwidth) is the validator's, per point."""
    def fail(expected: str) -> UserError:
        return _sweep_error(sweep.text, f"{path}: expected {expected}, got {text!r}")

    if spec == "posint":
        try:
            return int(text)
        except ValueError:
            raise fail("an integer") from None
    if spec in ("pos", "nonneg", "nonneg_or_auto"):
        if spec == "nonneg_or_auto" and text == "auto":
            return text
        try:
            number = float(text)
        except ValueError:
            raise fail("a number" + (" or 'auto'" if spec == "nonneg_or_auto" else "")) from None
        if not math.isfinite(number):
            raise fail("a finite number")
        return int(number) if number.is_integer() and "." not in text else number
    if spec == "size":
        match = _SIZE_RE.match(text)
        if match and float(match.group(1)) == 0:
            return 0  # a well-formed size the validator refuses per point (kept as an invalid point)
        size = parse_size(text)
        if size is None or math.isinf(size):
            raise fail("a size in bytes (262144) or with a unit (256KiB, 1MiB, 4MB)")
        return int(size) if size.is_integer() else size
    if spec == "bool":
        if text.lower() not in ("true", "false"):
            raise fail("true or false")
        return text.lower() == "true"
    if isinstance(spec, tuple) and spec[0] == "enum":
        if text not in spec[1]:
            close = difflib.get_close_matches(text, list(spec[1]), n=1)
            raise fail(f"one of {', '.join(spec[1])}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return text
    raise fail("a field a sweep can set")


def typed_sweep(sweep: Sweep, kinds: Mapping[str, Any]) -> Sweep:
    """`sweep` with its paths checked against the target and its values typed."""
    for path in sweep.paths:
        if path not in kinds:
            close = difflib.get_close_matches(path, list(kinds), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _sweep_error(sweep.text, f"unknown path {path!r}{hint}; valid paths: {', '.join(kinds)}")
    values = tuple(tuple(_typed(sweep, p, v, kinds[p]) for p, v in zip(sweep.paths, step)) for step in sweep.values)
    return Sweep(sweep.paths, values, sweep.text)


def design_points(sweeps: Sequence[Sweep]) -> list[dict[str, Any]]:
    """The cartesian product of the sweeps: one {path: value} per design."""
    points = []
    for steps in itertools.product(*(s.values for s in sweeps)):
        params: dict[str, Any] = {}
        for sweep, step in zip(sweeps, steps):
            params.update(zip(sweep.paths, step))
        points.append(params)
    return points


# What sizes a compute fabric's MAC datapaths, per kind: an explicit `peak_macs_per_cycle`
# written for the preset's array follows these when a sweep changes them.
_ARRAY_FIELDS = {"systolic": ("pe_rows", "pe_cols"), "simt": ("lanes", "fma_units"), "vector": ("lanes", "fma_units")}


def _datapaths(compute: Mapping) -> int:
    return math.prod(int(compute.get(f, 1)) if isinstance(compute.get(f, 1), int) else 1
                     for f in _ARRAY_FIELDS.get(compute.get("kind"), ()))


# A memory level's energy is given one way: per byte, or per access at a port width. A sweep
# that sets one form replaces the file's other form on that level.
_ENERGY_FORMS = {"energy_pj_per_byte": ("read_pj", "write_pj", "width_bits"),
                 "read_pj": ("energy_pj_per_byte",), "write_pj": ("energy_pj_per_byte",),
                 "width_bits": ("energy_pj_per_byte",)}


def edited(raw: Mapping, params: Mapping[str, Any]) -> dict:
    """A copy of the target mapping with every `params` path set. Derived fields follow: a
    swept array (pe_rows x pe_cols, lanes x fma_units) scales the peak MACs per cycle the file
    writes out per dtype, unless a sweep sets those too; `per_pe` levels follow the array when
    the target is loaded (their sizes and bandwidths are per PE); a swept energy per byte
    replaces a level's energy per access, and the reverse."""
    out = copy.deepcopy(dict(raw))
    for path, value in params.items():
        keys = path.split(".")
        node = out
        if keys[0] == "memory":
            node = next(m for m in out["memory"] if m["name"] == keys[1])
            keys = keys[2:]
            for other in _ENERGY_FORMS.get(keys[-1], ()):
                node.pop(other, None)
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    peaks = out["compute"].get("peak_macs_per_cycle")
    before, after = _datapaths(raw["compute"]), _datapaths(out["compute"])
    if isinstance(peaks, dict) and after != before and before > 0:
        swept = {p.rsplit(".", 1)[-1] for p in params if p.startswith("compute.peak_macs_per_cycle.")}
        out["compute"]["peak_macs_per_cycle"] = {
            d: v if d in swept or not isinstance(v, (int, float)) else v * after / before for d, v in peaks.items()}
    return out


# --------------------------------------------------------------------------- one design


def _dominant_bound(report: Mapping) -> str:
    """The bound of the kernel that takes the most optimised time: what limits this design."""
    kernels = report.get("kernels") or []
    if not kernels:
        return ""
    return max(kernels, key=lambda k: (k.get("metrics") or {}).get("time_s") or 0.0).get("bound", "")


def performance_view(target: Target) -> Target:
    """`target` with its area-only fields at their defaults: two designs with equal views get
    the same schedules, times and energies (accel/cost/ reads none of those fields), so a
    sweep runs the pipeline once for them. A level's `ports` is area-only unless the level is
    timed by its ports (a `width_bits`: accel/cost/ports.py)."""
    memory = tuple(m if m.width_bits is not None else dataclasses.replace(m, ports=1) for m in target.memory)
    return dataclasses.replace(target, technology_nm=REFERENCE_NM, memory=memory,
                               compute=dataclasses.replace(target.compute, pe_dtype=""))


def _design_target(raw: Mapping, filename: str, params: Mapping[str, Any]) -> Target:
    return parse_target(yaml.safe_dump(edited(raw, params)), filename=Path(filename).name)


def _same_performance(point: dict, raw: Mapping, filename: str, params: Mapping[str, Any]) -> dict:
    """The point of a design whose performance view equals `point`'s: its numbers, its own area."""
    area = _design_target(raw, filename, params).area_mm2
    return {**point, "params": dict(params), "area_mm2": area, "report": {**point["report"], "area_mm2": area}}


def run_point(program, raw: Mapping, filename: str, params: Mapping[str, Any], tune: int, seed: int | None) -> dict:
    """Build the design and optimise `program` on it: the point's JSON (and its report under
    `report`), or an invalid point with `reason`. Module-level so that Dask can ship it."""
    from .pipeline import optimize

    point: dict[str, Any] = {"params": dict(params)}
    try:
        target = _design_target(raw, filename, params)
        with _few_collections():
            report = optimize(program, target=target, tune=tune, seed=seed).report
    except UserError as err:
        return {**point, "valid": False, "verified": False, "reason": err.format()}
    except Exception as err:  # a design the pipeline cannot map: say so, and the sweep goes on
        return {**point, "valid": False, "verified": False,
                "reason": f"the pipeline failed on this design: {type(err).__name__}: {err}"}
    opt = report["optimized"]
    point.update(valid=True, verified=bool(report["verified"]), time_s=opt["time_s"], energy_j=opt["energy_j"],
                 area_mm2=target.area_mm2, edp=opt["time_s"] * opt["energy_j"],
                 limit_fraction=report.get("limit_fraction"), bound=_dominant_bound(report), report=report)
    return point


# Allocations between two young-generation collections while a point runs (Python's default
# is 700). A warm process holds its caches' hundreds of thousands of objects across points, and
# the cost model allocates small arrays by the million: at the default, ResNet-50 spent ~0.8 CPU
# s of each point collecting; at 50,000 ~0.4 s (a 64x64-array point), at this ~2% of a point
# less again. What is collected, and when it can be, does not change any result.
_YOUNG_THRESHOLD = 200_000


@contextlib.contextmanager
def _few_collections():
    """The garbage collector run less often during one point, its thresholds restored after."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], _YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def pareto_front(points: Sequence[Mapping]) -> list[int]:
    """Indices of the valid, verified points that no other such point beats on time, energy and
    area at once (at least as good on all three, better on one)."""
    keys = [(i, (p["time_s"], p["energy_j"], p["area_mm2"])) for i, p in enumerate(points)
            if p.get("valid") and p.get("verified")]
    front = []
    for i, a in keys:
        dominated = any(all(y <= x for x, y in zip(a, b)) and any(y < x for x, y in zip(a, b)) for _, b in keys)
        if not dominated:
            front.append(i)
    return front


# --------------------------------------------------------------------------- the sweep


@dataclass
class Exploration:
    """A finished sweep: the points (in sweep order), the Pareto front, the wall seconds.
    `reports[i]` is point i's full report (None for an invalid point)."""

    target: str
    sweeps: tuple[Sweep, ...]
    points: list[dict]
    pareto: list[int]
    seconds: float
    reports: list[dict | None] = field(default_factory=list, repr=False)
    cached: int = 0
    # what a design's full result is rebuilt from (program, target mapping, its file, tune, seed)
    context: tuple = field(default=(), repr=False)
    _results: dict = field(default_factory=dict, repr=False)

    @property
    def paths(self) -> list[str]:
        return [p for s in self.sweeps for p in s.paths]

    def design_target(self, i: int) -> Target:
        """Design i's target (a TargetError for an invalid design)."""
        _, raw, filename, _, _ = self.context
        return _design_target(raw, filename, self.points[i]["params"])

    def result(self, i: int):
        """Design i's full `Result` (graphs, tiles, profile, roofline): optimised again on
        its target, which gives the point's numbers (the pipeline is deterministic)."""
        if i not in self._results:
            from .pipeline import optimize

            program, _, _, tune, seed = self.context
            self._results[i] = optimize(program, target=self.design_target(i), tune=tune, seed=seed)
        return self._results[i]

    def _repr_html_(self) -> str:
        from .ui.explore import explore_static_html

        return explore_static_html(self)

    def _repr_mimebundle_(self, **kwargs):
        """In a notebook: the live Explore tab (static HTML inside for a reopened notebook)."""
        try:
            from .ui.explore import ExploreView

            return ExploreView(self)._repr_mimebundle_(**kwargs)
        except ImportError:  # no ipywidgets: the static tab
            return {"text/html": self._repr_html_()}

    def to_json(self) -> dict:
        return {"target": self.target, "sweeps": [s.text for s in self.sweeps], "points": self.points,
                "pareto": self.pareto, "seconds": self.seconds}

    CSV_FIELDS = ("valid", "verified", "time_s", "energy_j", "area_mm2", "edp", "limit_fraction", "bound")

    def to_csv(self) -> str:
        import csv
        import io

        paths = self.paths
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["index", *paths, *self.CSV_FIELDS, "pareto", "reason"])
        front = set(self.pareto)
        for i, p in enumerate(self.points):
            writer.writerow([i, *(p["params"][k] for k in paths), *(p.get(k, "") for k in self.CSV_FIELDS),
                             i in front, p.get("reason", "")])
        return out.getvalue()


def _cache_key(program, raw: Mapping, params: Mapping, tune: int, seed) -> str:
    design = json.dumps({"v": CACHE_VERSION, "program": program.source, "target": edited(raw, params),
                         "tune": tune, "seed": seed}, sort_keys=True, default=str)
    return hashlib.sha256(design.encode()).hexdigest()[:32]


class _Cache:
    """Finished points as JSON files in a directory (written whole, then renamed into place)."""

    def __init__(self, directory: str | Path | None):
        self.dir = Path(directory) if directory else None
        if self.dir:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise UserError(f"cannot use '{directory}' as a cache: {err.strerror or err}",
                                filename="--cache") from None

    def get(self, key: str) -> dict | None:
        if not self.dir or not (self.dir / f"{key}.json").is_file():
            return None
        try:
            return json.loads((self.dir / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None  # a torn or foreign file: run the point again

    def put(self, key: str, point: dict) -> None:
        if self.dir:
            tmp = self.dir / f".{key}.tmp"
            tmp.write_text(json.dumps(point, default=_json_default))
            tmp.replace(self.dir / f"{key}.json")


def _json_default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _worker_environ() -> dict:
    """The environment Dask sets in a worker before it starts, less `MALLOC_TRIM_THRESHOLD_`.
    Dask sets that to 64 KiB so that a worker hands freed memory back at once; setting it at
    all also fixes glibc's mmap threshold, so every numpy temporary over 128 KiB is mapped and
    unmapped afresh. The cost model makes millions of them: a point ran ~30% slower in a worker
    than in the caller's process (ResNet-50, 7 million page faults against 0.7 million). A
    sweep's worker keeps its caches for the next point anyway. `AUTOCOMP_WORKERS` is 0 there:
    the workers are the sweep's cores."""
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    # the sweep spreads its points over the workers: none forks spare-core workers of its own
    environ["AUTOCOMP_WORKERS"] = "0"
    return environ


# A local sweep's workers each run one CPU-bound point at a time, in a thread beside their event
# loop. Dask's defaults wake that loop every 20 ms (its health tick), sample the process every
# 500 ms (system monitor) and its memory every 100 ms, and walk the running stack every 10 ms
# (the statistical profiler): each wake takes the GIL from the point. With these off or slowed,
# a ResNet-50 point on one worker runs as fast as in the caller (it was ~5% slower, the profiler
# off). The memory limit is still enforced, every 2 s.
_QUIET_WORKERS = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "2s",
    "distributed.admin.system-monitor.interval": "10s",
    "distributed.worker.memory.monitor-interval": "2s",
}


def _open_dask(workers: int | None, scheduler: str | None):
    """(client, things to close) for `workers` (a LocalCluster of processes) or `scheduler`."""
    try:
        import dask
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise UserError("--workers / --scheduler need dask[distributed] (pip install 'dask[distributed]')",
                        filename="--workers") from None
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as err:
            raise UserError(f"cannot reach the Dask scheduler {scheduler!r}: {err}", filename="--scheduler") from None
        return client, [client]
    # silence_logs: a worker slow to exit at close (large caches) is killed with a warning, not news
    with dask.config.set({"distributed.nanny.pre-spawn-environ": _worker_environ(), **_QUIET_WORKERS}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
    client = Client(cluster)
    return client, [client, cluster]


def explore(src, target="tpu", sweeps: Sequence[str | Sweep] = (), tune: int = 0, *, seed: int | None = None,
            workers: int | None = None, scheduler: str | None = None, max_points: int | None = None,
            cache: str | Path | None = None, progress: Callable[[int, int, dict], None] | None = None,
            objective: str | None = None) -> Exploration:
    """Optimise `src` (DSL text, a .acir/.onnx path, a Program) on every design of `sweeps`.

    target: a preset name or a target YAML; sweeps: `PATH=V1,V2` strings (or `Sweep`s), or one
    string of them joined by ';' as the magic's --explore takes them;
    tune: configurations the tuner evaluates per point; workers / scheduler: run points on a
    Dask LocalCluster of that many processes / on the scheduler at that address; max_points:
    allow more than 1,000 points; cache: a directory of finished points (resume);
    progress(done, total, point) after each point; objective: what every design's searches
    minimise (latency, energy, edp; default the target's). Bad input raises `UserError`.
    """
    from .pipeline import _as_program

    started = time.perf_counter()
    if workers is not None and scheduler is not None:
        raise UserError("give --workers or --scheduler, not both", filename="--workers")
    raw, filename = target_mapping(target)
    if objective is not None:        # every design carries it (a target field)
        from .objective import check

        raw = {**raw, "objective": check(objective, "objective")}
    kinds = path_kinds(raw)
    if isinstance(sweeps, (str, Sweep)):
        sweeps = [s.strip() for s in sweeps.split(";") if s.strip()] if isinstance(sweeps, str) else [sweeps]
    parsed = tuple(typed_sweep(s if isinstance(s, Sweep) else parse_sweep(s), kinds) for s in sweeps)
    if not parsed:
        raise UserError("explore needs at least one --sweep PATH=V1,V2,...", filename="--sweep")
    seen = [p for s in parsed for p in s.paths]
    if len(set(seen)) != len(seen):
        raise UserError(f"a path is swept twice: {next(p for p in seen if seen.count(p) > 1)}", filename="--sweep")
    total = math.prod(len(s) for s in parsed)
    limit = MAX_POINTS if max_points is None else max_points
    if total > limit:
        raise UserError(f"the sweep has {total:,} points, over the limit of {limit:,}; pass --max-points {total} "
                        f"to run them all", filename="--max-points")
    program = _as_program(src)
    designs = design_points(parsed)
    store = _Cache(cache)
    keys = [_cache_key(program, raw, params, tune, seed) for params in designs]
    points: list[dict | None] = [store.get(k) for k in keys]
    cached = sum(p is not None for p in points)
    done = cached
    pending = run_order(designs, [i for i, p in enumerate(points) if p is None])
    groups = _performance_groups(raw, filename, designs, pending)

    def finish(i: int, point: dict) -> None:
        nonlocal done
        for j in groups[i]:  # the design run, then those that share its performance
            shared = point if j == i else _same_performance(point, raw, filename, designs[j])
            store.put(keys[j], shared)
            points[j] = shared
            done += 1
            if progress:
                progress(done, total, shared)

    if workers is None and scheduler is None:
        for i in groups:
            finish(i, run_point(program, raw, filename, designs[i], tune, seed))
    else:
        _run_on_dask(program, raw, filename, designs, list(groups), tune, seed, workers, scheduler, finish)
    reports = [p.pop("report", None) for p in points]
    return Exploration(str(raw.get("name")), parsed, points, pareto_front(points), time.perf_counter() - started,
                       reports, cached, (program, raw, filename, tune, seed))


def _steering(path: str) -> int:
    """How much of a design's schedules a path decides, most first: the compute fabric (the
    tiles follow its array), then the levels' sizes (what fits), then the rest (bandwidths,
    latencies, energies, the clock: the same tiles often win)."""
    if path.startswith("compute."):
        return 0
    return 1 if path.startswith("memory.") and path.endswith(".size_bytes") else 2


def run_order(designs: list[dict], pending: list[int]) -> list[int]:
    """`pending` in the order to run them: designs sharing the fields that decide the most of
    their schedules next to each other, so that a process's next design finds more of what it
    asks for (isl verdicts and tiled-run checks are keyed by schedule). Whatever the order,
    each point is what a fresh run gives; points are still reported in sweep order."""
    if not pending:
        return pending
    paths = sorted(designs[pending[0]], key=_steering)    # stable: sweep order within a rank
    rank: dict[str, dict[str, int]] = {p: {} for p in paths}  # each value's place in its sweep
    for design in designs:
        for p in paths:
            rank[p].setdefault(repr(design[p]), len(rank[p]))
    return sorted(pending, key=lambda i: tuple(rank[p][repr(designs[i][p])] for p in paths))


def _performance_groups(raw: Mapping, filename: str, designs: list[dict], pending: list[int]) -> dict[int, list[int]]:
    """{the design to run: every pending design sharing its performance view (itself first)};
    an invalid design is its own group (run_point reports why)."""
    first: dict[Any, int] = {}
    groups: dict[int, list[int]] = {}
    for i in pending:
        try:
            key = performance_view(_design_target(raw, filename, designs[i]))
        except UserError:
            key = ("invalid", i)
        groups.setdefault(first.setdefault(key, i), []).append(i)
    return groups


def lanes(pending: list[int], n: int) -> list[list[int]]:
    """`pending` (in run order) cut into `n` contiguous lanes of near-equal length, one per
    worker: a worker runs designs that are neighbours in the run order, so its caches serve
    its next design as they serve a serial run's (dealing the designs out one by one gave
    each worker every array and every buffer size of a sweep)."""
    n = max(1, min(n, len(pending)))
    cuts = [round(k * len(pending) / n) for k in range(n + 1)]
    return [pending[cuts[k]:cuts[k + 1]] for k in range(n)]


def _next_design(lane: list[int], others: list[list[int]]) -> int | None:
    """The next design of a worker's `lane`; once it is empty, the worker takes the later half
    of the longest lane left (its far end from where that lane's worker is) as its own."""
    if not lane:
        longest = max(others, key=len, default=[])
        if not longest:
            return None
        half = len(longest) // 2 or len(longest)
        lane[:] = longest[len(longest) - half:]
        del longest[len(longest) - half:]
    return lane.pop(0)


def _run_on_dask(program, raw, filename, designs, pending, tune, seed, workers, scheduler, finish) -> None:
    """Each worker runs one design at a time (a worker's caches are not shared between threads),
    from its own lane of the run order (`lanes`), each point as a serial run gives it."""
    if not pending:
        return
    from dask.distributed import wait

    client, owned = _open_dask(workers, scheduler)
    try:
        shared = client.scatter([program, raw], broadcast=True)
        # (a scheduler with no worker yet: one lane, run wherever a worker joins)
        addresses = sorted(client.scheduler_info()["workers"]) or [None]
        queues = lanes(pending, len(addresses))
        running = {}

        def start(k: int) -> None:
            i = _next_design(queues[k], queues)
            if i is not None:
                where = {} if addresses[k] is None else {"workers": [addresses[k]], "allow_other_workers": True}
                future = client.submit(run_point, shared[0], shared[1], filename, designs[i], tune, seed, pure=False,
                                       **where)
                running[future] = (k, i)

        for k in range(len(queues)):
            start(k)
        while running:
            done, _ = wait(list(running), return_when="FIRST_COMPLETED")
            for future in done:
                k, i = running.pop(future)
                finish(i, future.result())
                start(k)
    finally:
        for thing in owned:
            thing.close()
