"""Accelerator targets: the YAML description, its validation, and the presets.

A target file describes one simulated accelerator: a clock, a compute fabric (a systolic
array, SIMT cores or vector cores), a memory hierarchy listed from the innermost level
(registers, accumulator, vector memory) out to DRAM, and energy costs.

Loading follows ZigZag's accelerator validator in three steps, each of which may raise
`TargetError` naming the file, the key path and what was expected:

1. schema  — keys, types and value ranges of every field (`memory[1].bandwidth_gbps:
   expected a positive number, got -4`), unknown keys with a did-you-mean hint;
2. meaning — facts across fields: sizes grow outward, DRAM last and unbounded, names
   unique, the fields a compute kind needs are present;
3. build   — frozen `Target`, `ComputeSpec` and `MemoryLevel` objects.

The `host` preset writes `auto` for what this machine decides (cores, SIMD width from
/proc/cpuinfo, cache sizes from /sys); those are resolved before validation.

Area fields (accel/area.py owns the model and cites its sources): `technology_nm` (default 45,
the node of the published tables), `compute.pe_dtype` (the datapath a PE is built for; default
the widest dtype at the full MAC rate), a memory level's `ports` (default 1), and
`energy_pj_per_byte: auto` on an on-chip level, which follows its capacity (CACTI-like).

`objective` (default `latency`; or `energy`, `edp`) is what every search minimises on this
target (objective.py); a run's `--objective` / `optimize(objective=...)` overrides it.

Fields that follow the array (ZigZag and Timeloop describe register files this way), converted
at load time into what the cost model reads — whole-array sizes and bandwidths, one energy per
byte — so a sweep of `compute.pe_rows` / `compute.pe_cols` rescales them with no other edit:

- `per_pe: true` on a memory level (systolic targets): `size_bytes` and `bandwidth_gbps` are
  those of the register file in each PE. The level the model sees holds `size_bytes x pe_rows x
  pe_cols` and moves `bandwidth_gbps x pe_rows x pe_cols`, in every array (it is `per_unit`);
  area counts one register file per PE, and `energy_pj_per_byte: auto` follows the per-PE
  capacity. The per-PE size must be a whole number of bytes (`memory[0].size_bytes: a per_pe
  level ... got 1.5 B per PE`). DRAM is never per PE, and `per_pe` replaces `per_unit`.
- `read_pj`, `write_pj` (default `read_pj`) and `width_bits` on a memory level, instead of
  `energy_pj_per_byte`: the energy of one access of the port's width, as ZigZag's `r_cost` /
  `w_cost` per word of the port's bandwidth. Per byte that is `read_pj / (width_bits / 8)`
  (`MemoryLevel.read_pj_per_byte` / `write_pj_per_byte`; the cost model charges a transfer's
  read where it leaves and its write where it lands), and the level is timed by its ports: whole
  accesses of `width_bits`, reads and writes on one port or, with `ports: 2`, apart
  (`accel/cost/ports.py`). `width_bits` must be a multiple of the PE dtype's element (`compute.pe_dtype`, by
  default the widest dtype at the full MAC rate): an 8-bit port on an f32 array is refused.
- Derived compute fields: peak MACs per cycle per dtype default to `pe_rows x pe_cols` (lanes x
  FMA pipes on SIMT and vector targets), `vector_lanes` to `pe_cols`, `fill_cycles` to `pe_rows +
  pe_cols`; leave them out and they follow the array. A `peak_macs_per_cycle` written out is
  scaled with the array by a sweep (dse.edited) unless the sweep sets it.
"""
from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..caches import hash_once, state_without_hash
from ..errors import Diagnostic, UserError
from ..limits import YAML_BYTES, YAMLLimitError, is_plain_name, load_yaml, read_text_file
from ..ir.program import DTYPE_BYTES, DTYPES
from .area import REFERENCE_NM, sram_energy_pj_per_byte
from ..objective import OBJECTIVES

PRESET_DIR = Path(__file__).parent / "presets"
COMPUTE_KINDS = ("systolic", "simt", "vector")
DATAFLOWS = ("weight_stationary", "output_stationary")
# What a memory level may buffer. `holds` names roles: `weights` (the second operand of a
# contraction, the one with fewer output loops: B of A·B, W of a conv — what a weight-
# stationary array keeps in its PEs), `activations` (every other operand read), `outputs`
# (what a statement writes), and `inputs` (weights and activations). A role a level does not
# hold bypasses it: a weights-only register file is fed straight from the level outside it
# that holds weights.
ROLES = ("weights", "activations", "outputs")
HOLDS = ("inputs",) + ROLES
_ROLE_EXPANSION = {"inputs": ("weights", "activations"), "weights": ("weights",),
                   "activations": ("activations",), "outputs": ("outputs",)}


def roles_of(holds) -> tuple[str, ...]:
    """The roles (ROLES order) a `holds` list names; `inputs` stands for weights and activations."""
    named = {r for h in holds for r in _ROLE_EXPANSION[h]}
    return tuple(r for r in ROLES if r in named)


class TargetError(UserError, ValueError):
    """A target description is wrong; the message names file, key path and expectation."""

    def __init__(self, filename: str, key_path: str, message: str):
        self.key_path = key_path
        self.detail = message
        where = f"{key_path}: " if key_path else ""
        super().__init__(Diagnostic(where + message), filename=filename)


# --------------------------------------------------------------------------- built objects


@dataclass(frozen=True)
class MemoryLevel:
    """One level of the hierarchy.

    `bandwidth_gbps` is the rate (GB/s, 1e9 bytes) at which this level feeds the level inside
    it; with `per_unit` the level is replicated in every compute unit (SM, core, array) and
    size and bandwidth are per unit. `roles` says which tensors the level buffers (ROLES):
    Gemmini's accumulator holds outputs only, its scratchpad inputs (weights and
    activations) only, a TPU-like per-PE register file weights only; the others hold all.
    """

    name: str
    size_bytes: float  # math.inf for DRAM
    bandwidth_gbps: float
    latency_cycles: float
    energy_pj_per_byte: float
    per_unit: bool = False
    roles: tuple[str, ...] = ROLES
    ports: int = 1                       # read/write ports: area and (auto) energy grow with them
    # One register file in each PE (`per_pe`): size and bandwidth above are the array's total
    # (the per-PE figures x PEs), the level is per_unit, and area builds one per PE.
    per_pe: bool = False
    # Energy per byte read out of / written into the level (given per access at a port width,
    # they may differ); None: `energy_pj_per_byte` (their mean) both ways. The cost model
    # charges reads and writes apart (accel/cost/energy.py).
    read_pj_per_byte: float | None = None
    write_pj_per_byte: float | None = None
    # The port's width (`width_bits`, given with energies per access): a port moves whole
    # accesses of this width, one a cycle at `bandwidth_gbps` (the cost model's ports step
    # rounds each transfer up to them); None: any number of bytes.
    width_bits: int | None = None

    @property
    def is_unbounded(self) -> bool:
        return math.isinf(self.size_bytes)

    @property
    def holds(self) -> tuple[str, ...]:
        """The coarse view, for readers that tell only reads from writes: ('inputs',
        'outputs') or one of them — 'inputs' when the level buffers any operand read."""
        out = ("inputs",) if {"weights", "activations"} & set(self.roles) else ()
        return out + (("outputs",) if "outputs" in self.roles else ())


@dataclass(frozen=True)
class ComputeSpec:
    """The compute fabric.

    systolic: `units` arrays of pe_rows x pe_cols MACs; simt: `units` SMs whose warps are
    `lanes` wide; vector: `units` cores with `lanes`-wide SIMD (f32 lanes) and `fma_units`
    pipes. `macs_per_cycle` is per unit and per dtype; `vector_ops_per_cycle` (per unit) is
    the rate of non-MAC work (epilogues, exp, max-reductions).
    """

    kind: str
    units: int
    pe_rows: int = 1
    pe_cols: int = 1
    lanes: int = 1
    fma_units: int = 1
    dataflow: str = "weight_stationary"
    macs_per_cycle: tuple[tuple[str, float], ...] = ()
    vector_ops_per_cycle: float = 1.0
    max_blocks_per_unit: int = 1
    # Whether a schedule without a `parallel` annotation still spreads its output loops over
    # the units (accelerators: the runtime does) or runs on one unit (host: only annotated
    # loops get `#pragma omp parallel for`).
    implicit_parallel: bool = True
    # A systolic array that loads the next stationary block while the current one streams
    # (TPU MXUs do): only the part of a fill longer than the stream it hides behind costs.
    double_buffered_weights: bool = False
    # Cycles to put a new stationary block into the array: shifted in from the edge and the
    # last partial sums drained (pe_rows + pe_cols, the default), or 0 where every PE reads
    # its next weight from its own register file.
    fill_cycles: float = 0.0
    # Whether the PE rows may take several reduction loops at once (im2col: a convolution's
    # input channels and window taps, (c, r, s), on the rows, the feeder reading each row's
    # input through the window, as Gemmini's im2col unit and TPU convolution emitters do).
    # Without it a 3-channel stem conv fills 3 of 32 rows; with it 27.
    im2col: bool = True
    # The dtype each PE's datapath is built for (its area); "" = the widest at the full rate.
    pe_dtype: str = ""

    def macs(self, dtype: str) -> float:
        """MACs per cycle per unit for `dtype`."""
        return dict(self.macs_per_cycle)[dtype]

    def vector_width(self, dtype: str) -> int:
        """Elements one SIMD instruction / warp covers (the granularity of edge waste)."""
        if self.kind == "vector":
            return max(1, self.lanes * 4 // DTYPE_BYTES[dtype])
        return self.lanes

    @property
    def spatial_width(self) -> int:
        """MAC positions of one pass: the array, or one vector / warp (f32)."""
        return self.pe_rows * self.pe_cols if self.kind == "systolic" else self.lanes

    def describe(self) -> str:
        if self.kind == "systolic":
            n = f"{self.units}x " if self.units > 1 else ""
            return f"systolic {n}{self.pe_rows}x{self.pe_cols}"
        if self.kind == "simt":
            return f"simt {self.units} SMs x {self.lanes} lanes"
        return f"vector {self.units} cores x {self.lanes} lanes"


@dataclass(frozen=True)
class Target:
    """A validated accelerator description. `memory` runs innermost → DRAM."""

    name: str
    clock_ghz: float
    compute: ComputeSpec
    memory: tuple[MemoryLevel, ...]
    energy_pj_per_mac: float
    description: str = ""
    source: str = field(default="<target>", compare=False)
    technology_nm: float = REFERENCE_NM   # scales area (and `auto` energies): accel/area.py
    objective: str = "latency"            # what every search minimises: objective.py

    # a key of every cache, hashed per lookup: hashed once (the target is immutable)
    __hash__ = hash_once
    __getstate__ = state_without_hash

    @property
    def dram(self) -> MemoryLevel:
        return self.memory[-1]

    @property
    def runs_generated_c(self) -> bool:
        """Whether this is the host running generated C (a vector target whose loops run
        serially unless annotated parallel), the compute kind accel/host_model.py models."""
        return self.compute.kind == "vector" and not self.compute.implicit_parallel

    @property
    def on_chip(self) -> tuple[MemoryLevel, ...]:
        """On-chip levels, outer → inner (the order tiles are listed in)."""
        return tuple(reversed(self.memory[:-1]))

    @property
    def tiling_levels(self) -> tuple[str, ...]:
        """Names of the levels a schedule tiles for, outer → inner (e.g. VMEM, vregs)."""
        return tuple(m.name for m in self.on_chip)

    def level(self, name: str) -> MemoryLevel:
        for m in self.memory:
            if m.name == name:
                return m
        raise KeyError(f"target {self.name!r} has no memory level {name!r}; "
                       f"levels: {', '.join(m.name for m in self.memory)}")

    def peak_flops(self, dtype: str = "f32") -> float:
        """Peak floating-point operations per second (a MAC is 2 flops)."""
        return 2.0 * self.compute.macs(dtype) * self.compute.units * self.clock_ghz * 1e9

    @property
    def dram_bandwidth(self) -> float:
        """DRAM bandwidth in bytes/s."""
        return self.dram.bandwidth_gbps * 1e9

    @property
    def shared_mem_kb(self) -> float | None:
        """Shared memory per block (simt targets): the outermost per-unit level, in KiB."""
        for m in self.on_chip:
            if m.per_unit:
                return m.size_bytes / 1024
        return None

    @property
    def sm_count(self) -> int:
        return self.compute.units

    @property
    def pe_dtype(self) -> str:
        """The dtype a PE is sized for: `compute.pe_dtype`, else the widest dtype at the top MAC rate."""
        if self.compute.pe_dtype:
            return self.compute.pe_dtype
        return widest_at_top_rate(dict(self.compute.macs_per_cycle))

    @property
    def area_mm2(self) -> float:
        """On-chip area in mm² (accel/area.py: MAC datapaths and memory levels)."""
        from .area import target_area

        return target_area(self).total_mm2

    def summary_row(self) -> dict:
        """One row of `list_targets()`."""
        on_chip = ", ".join(f"{m.name} {_format_bytes(m.size_bytes)}" for m in self.on_chip)
        return {
            "name": self.name,
            "compute": self.compute.describe(),
            "peak_tflops_f32": round(self.peak_flops("f32") / 1e12, 3),
            "on_chip": on_chip,
            "dram_gbps": self.dram.bandwidth_gbps,
        }


def widest_at_top_rate(rates: Mapping[str, float]) -> str:
    """The widest dtype among those at the top MAC rate: what a PE is built for by default."""
    top = max(rates.values())
    return max((d for d, r in rates.items() if r == top), key=lambda d: (DTYPE_BYTES[d], d))


def _format_bytes(n: float) -> str:
    if math.isinf(n):
        return "unbounded"
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % (scale // 16 or 1) == 0:
            value = n / scale
            return f"{value:g} {unit}"
    return f"{int(n)} B"


# --------------------------------------------------------------------------- loading


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_target(name_or_path: "str | os.PathLike | Target") -> Target:
    """A preset by name (`tpu`), or a YAML file path; a Target passes through."""
    if isinstance(name_or_path, Target):
        return name_or_path
    text_name = str(name_or_path)
    path = Path(text_name)
    if text_name.endswith((".yaml", ".yml")) or path.exists():
        if not path.exists():
            raise TargetError(text_name, "", "no such target file")
        text = read_text_file(path, YAML_BYTES, "target file", lambda f, m: TargetError(f, "", m))
        return parse_target(text, filename=text_name)
    preset = PRESET_DIR / f"{text_name}.yaml"
    if not is_plain_name(text_name) or not preset.is_file():
        presets = list_presets()
        hint = difflib.get_close_matches(text_name, presets, n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise TargetError(text_name, "", f"unknown target; presets are {', '.join(presets)}{extra}")
    return parse_target(preset.read_text(), filename=str(preset))


def list_targets() -> list[dict]:
    """Rows (name, compute, peak_tflops_f32, on_chip, dram_gbps) for every preset."""
    return [load_target(name).summary_row() for name in list_presets()]


def parse_target(text: str, filename: str = "<target>") -> Target:
    """Validate and build a target from YAML text: schema → meaning → build."""
    try:
        raw = load_yaml(text)  # bounded: size, nesting, alias expansion; numbers finite
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise TargetError(filename, where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except YAMLLimitError as exc:
        raise TargetError(filename, f"line {exc.line}" if exc.line else "", exc.message) from None
    if not isinstance(raw, dict):
        raise TargetError(filename, "", f"expected a mapping of target fields, got {_kind(raw)}")
    raw = _resolve_auto(raw)
    _check_schema(raw, filename)
    _check_meaning(raw, filename)
    return _build(raw, filename)


# --------------------------------------------------------------------------- step 1: schema

# Field kinds: 'str', 'pos' (positive number), 'nonneg', 'posint', 'bool', 'size' (bytes:
# positive int or "256 KiB"), 'frac' (0 < x <= 1), ('enum', values), ('list', kinds).
COMPUTE_SCHEMA: dict[str, Any] = {
    "kind": ("enum", COMPUTE_KINDS),
    "pe_rows": "posint", "pe_cols": "posint",
    "arrays": "posint", "cores": "posint", "lanes": "posint", "fma_units": "posint",
    "dataflow": ("enum", DATAFLOWS),
    "double_buffered_weights": "bool",
    "im2col": "bool",
    "fill_cycles": "nonneg",
    "vector_lanes": "posint",
    "peak_macs_per_cycle": ("dtype_map", "pos"),
    "vector_ops_per_cycle": "pos",
    "max_blocks_per_core": "posint",
    "implicit_parallel": "bool",
    "pe_dtype": ("enum", DTYPES),
}
MEMORY_SCHEMA: dict[str, Any] = {
    "name": "str", "size_bytes": "size", "bandwidth_gbps": "pos", "latency_cycles": "nonneg",
    "energy_pj_per_byte": "nonneg_or_auto", "per_unit": "bool", "holds": ("enum_list", HOLDS),
    "description": "str", "ports": "posint",
    "per_pe": "bool", "read_pj": "nonneg", "write_pj": "nonneg", "width_bits": "posint",
}
TOP_SCHEMA: dict[str, Any] = {
    "name": "name", "description": "str", "clock_ghz": "pos", "compute": COMPUTE_SCHEMA,
    "memory": [MEMORY_SCHEMA], "energy_pj_per_mac": "nonneg", "technology_nm": "pos",
    "objective": ("enum", OBJECTIVES),
}
REQUIRED_TOP = ("name", "clock_ghz", "compute", "memory", "energy_pj_per_mac")
REQUIRED_MEMORY = ("name", "bandwidth_gbps", "latency_cycles")  # and an energy: _check_energy_fields

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 10**6, "gb": 10**9,
               "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmg]i?b|b)?\s*$", re.I)


def parse_size(value: Any) -> float | None:
    """Bytes from an int or a string like '256 KiB'; 'unbounded'/None → inf; else None."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("unbounded", "inf")):
        return math.inf
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m:
            n = float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]
            return n if n > 0 else None
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"{value!r} (a boolean)"
    if isinstance(value, (int, float, str)):
        return repr(value)
    return f"a {type(value).__name__}"


def _check_schema(raw: dict, filename: str) -> None:
    _check_mapping(raw, TOP_SCHEMA, "", filename)
    for key in REQUIRED_TOP:
        if key not in raw:
            raise TargetError(filename, key, "missing required field")
    if not isinstance(raw["memory"], list) or not raw["memory"]:
        raise TargetError(filename, "memory", f"expected a list of memory levels (innermost first), got {_kind(raw['memory'])}")
    for i, level in enumerate(raw["memory"]):
        if not isinstance(level, dict):
            raise TargetError(filename, f"memory[{i}]", f"expected a mapping, got {_kind(level)}")
        _check_mapping(level, MEMORY_SCHEMA, f"memory[{i}]", filename)
        for key in REQUIRED_MEMORY:
            if key not in level:
                raise TargetError(filename, f"memory[{i}].{key}", "missing required field")


def _check_mapping(raw: dict, schema: dict, path: str, filename: str) -> None:
    if not isinstance(raw, dict):
        raise TargetError(filename, path, f"expected a mapping, got {_kind(raw)}")
    for key, value in raw.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in schema:
            hint = difflib.get_close_matches(str(key), list(schema), n=1, cutoff=0.5)
            extra = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(schema)}"
            raise TargetError(filename, key_path, f"unknown key{extra}")
        spec = schema[key]
        if isinstance(spec, dict):
            _check_mapping(value, spec, key_path, filename)
        elif isinstance(spec, list):
            continue  # lists of mappings are checked element by element by the caller
        else:
            _check_value(value, spec, key_path, filename)


def _check_value(value: Any, spec: Any, key_path: str, filename: str) -> None:
    def fail(expected: str) -> None:
        raise TargetError(filename, key_path, f"expected {expected}, got {_kind(value)}")

    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec == "str":
        if not isinstance(value, str) or not value:
            fail("a non-empty string")
    elif spec == "name":  # names select rule files (rules/<name>.yaml): never a path
        if not is_plain_name(value):
            fail("a plain name: a letter, then letters, digits, '_' or '-' (at most 64), never a path")
    elif spec == "pos":
        if not is_number or not math.isfinite(value) or not value > 0:
            fail("a positive number")
    elif spec == "nonneg_or_auto":
        if value != "auto" and (not is_number or not math.isfinite(value) or value < 0):
            fail("a number >= 0, or 'auto' (an on-chip level's energy following its capacity)")
    elif spec == "nonneg":
        if not is_number or not math.isfinite(value) or value < 0:
            fail("a number >= 0")
    elif spec == "posint":
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            fail("a positive integer")
    elif spec == "bool":
        if not isinstance(value, bool):
            fail("true or false")
    elif spec == "size":
        if parse_size(value) is None:
            fail("a positive size in bytes (e.g. 262144 or '256 KiB'), or 'unbounded'")
    elif spec[0] == "enum":
        if value not in spec[1]:
            hint = difflib.get_close_matches(str(value), spec[1], n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            fail(f"one of {', '.join(spec[1])}{extra}")
    elif spec[0] == "enum_list":
        if not isinstance(value, list) or not value:
            fail(f"a non-empty list drawn from {', '.join(spec[1])}")
        for i, v in enumerate(value):
            if v not in spec[1]:
                hint = difflib.get_close_matches(str(v), spec[1], n=1)
                extra = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise TargetError(filename, f"{key_path}[{i}]",
                                  f"expected one of {', '.join(spec[1])}{extra}, got {_kind(v)}")
    elif spec[0] == "dtype_map":
        if not isinstance(value, dict):
            fail(f"a mapping from dtype ({', '.join(DTYPES)}) to a number")
        for dtype, number in value.items():
            if dtype not in DTYPES:
                hint = difflib.get_close_matches(str(dtype), DTYPES, n=1)
                extra = f"; did you mean {hint[0]!r}?" if hint else f"; dtypes are {', '.join(DTYPES)}"
                raise TargetError(filename, f"{key_path}.{dtype}", f"unknown dtype{extra}")
            _check_value(number, spec[1], f"{key_path}.{dtype}", filename)


# --------------------------------------------------------------------------- step 2: meaning

TECHNOLOGY_NM = (3.0, 180.0)   # nodes the area curve extends to (accel/area.py interpolates 5-65 nm)

KIND_FIELDS = {
    "systolic": {"required": ("pe_rows", "pe_cols"),
                 "allowed": ("kind", "pe_rows", "pe_cols", "arrays", "dataflow", "double_buffered_weights", "im2col",
                             "fill_cycles", "peak_macs_per_cycle", "vector_ops_per_cycle", "vector_lanes", "pe_dtype")},
    "simt": {"required": ("cores", "lanes"),
             "allowed": ("kind", "cores", "lanes", "fma_units", "peak_macs_per_cycle",
                         "vector_ops_per_cycle", "max_blocks_per_core", "pe_dtype")},
    "vector": {"required": ("lanes",),
               "allowed": ("kind", "cores", "lanes", "fma_units", "peak_macs_per_cycle",
                           "vector_ops_per_cycle", "implicit_parallel", "pe_dtype")},
}


def _check_meaning(raw: dict, filename: str) -> None:
    compute = raw["compute"]
    if "kind" not in compute:
        raise TargetError(filename, "compute.kind", f"missing required field (one of {', '.join(COMPUTE_KINDS)})")
    fields = KIND_FIELDS[compute["kind"]]
    for key in fields["required"]:
        if key not in compute:
            raise TargetError(filename, f"compute.{key}", f"missing; a {compute['kind']} target needs {', '.join(fields['required'])}")
    for key in compute:
        if key not in fields["allowed"]:
            raise TargetError(filename, f"compute.{key}",
                              f"does not apply to a {compute['kind']} target (allowed: {', '.join(fields['allowed'])})")

    memory = raw["memory"]
    if len(memory) < 2:
        raise TargetError(filename, "memory", "expected at least two levels: one on-chip level and DRAM (last)")
    names = [m["name"] for m in memory]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise TargetError(filename, f"memory[{i}].name", f"level name {name!r} is used twice")
    element = compute.get("pe_dtype") or widest_at_top_rate(_mac_rates(compute))
    for i, level in enumerate(memory):
        _check_energy_fields(level, f"memory[{i}]", element, filename)
        _check_per_pe(level, f"memory[{i}]", compute, i == len(memory) - 1, filename)
    pes = _pes(compute)
    sizes = [parse_size(m.get("size_bytes")) * (pes if m.get("per_pe") else 1) for m in memory]
    for i, (level, size) in enumerate(zip(memory, sizes)):
        last = i == len(memory) - 1
        if not last and ("size_bytes" not in level or math.isinf(size)):
            raise TargetError(filename, f"memory[{i}].size_bytes",
                              f"on-chip level {level['name']!r} needs a finite size; only the last level (DRAM) is unbounded")
        if last and "holds" in level and roles_of(level["holds"]) != ROLES:
            raise TargetError(filename, f"memory[{i}].holds", "the last level (DRAM) holds every tensor")
        if last and level.get("per_unit"):
            raise TargetError(filename, f"memory[{i}].per_unit", "the last level (DRAM) is shared, not per unit")
        if last and level.get("energy_pj_per_byte") == "auto":
            raise TargetError(filename, f"memory[{i}].energy_pj_per_byte",
                              "'auto' follows an on-chip SRAM's capacity; give DRAM's energy per byte as a number")
    if not TECHNOLOGY_NM[0] <= raw.get("technology_nm", REFERENCE_NM) <= TECHNOLOGY_NM[1]:
        raise TargetError(filename, "technology_nm", f"expected a process node between {TECHNOLOGY_NM[0]:g} and "
                          f"{TECHNOLOGY_NM[1]:g} nm (the published scaling curve's range), got {raw['technology_nm']!r}")
    # Levels that hold the same tensors must grow outward; a level holding only outputs
    # (an accumulator) may sit inside a larger input scratchpad, not the reverse, and a
    # weights-only register file beside an output one of any size.
    roles = [set(roles_of(m.get("holds", HOLDS))) for m in memory]
    for i in range(1, len(memory)):
        for j in range(i):
            if roles[i] & roles[j] and sizes[i] < sizes[j]:
                raise TargetError(filename, f"memory[{i}].size_bytes",
                                  f"level {names[i]!r} ({_format_bytes(sizes[i])}) is smaller than inner level "
                                  f"{names[j]!r} ({_format_bytes(sizes[j])}); list levels from innermost to DRAM with sizes growing outward")
    for role in ROLES:
        if not any(role in r for r in roles[:-1]):
            raise TargetError(filename, "memory", f"no on-chip level holds {role}; add {role!r} "
                              f"{'(or inputs) ' if role != 'outputs' else ''}to some level's holds")


def _check_energy_fields(level: Mapping, path: str, element: str, filename: str) -> None:
    """A level's energy is given per byte or per access at a port width, exactly one way; the
    port carries whole elements of the dtype the PEs are built for."""
    per_access = [k for k in ("read_pj", "write_pj", "width_bits") if k in level]
    if "energy_pj_per_byte" in level:
        if per_access:
            raise TargetError(filename, f"{path}.{per_access[0]}", "give the energy per byte (energy_pj_per_byte) "
                              "or per access (read_pj, write_pj at width_bits), not both")
        return
    if not per_access:
        raise TargetError(filename, f"{path}.energy_pj_per_byte", "missing required field (or give read_pj and "
                          "write_pj, the energy of one access of width_bits)")
    for key in ("read_pj", "width_bits"):
        if key not in level:
            raise TargetError(filename, f"{path}.{key}", "missing: an energy per access needs read_pj (write_pj "
                              "defaults to it) and the port's width_bits")
    if level["width_bits"] % (8 * DTYPE_BYTES[element]):
        raise TargetError(filename, f"{path}.width_bits", f"expected a multiple of the {8 * DTYPE_BYTES[element]}-bit "
                          f"{element} element the PEs are built for (compute.pe_dtype), got {level['width_bits']}")


def _check_per_pe(level: Mapping, path: str, compute: Mapping, last: bool, filename: str) -> None:
    """A per-PE level: on a systolic array, on chip, a whole number of bytes in each PE."""
    if not level.get("per_pe"):
        return
    if compute["kind"] != "systolic":
        raise TargetError(filename, f"{path}.per_pe", f"only a systolic array has PEs; on a {compute['kind']} "
                          "target give the level per_unit (per SM or core)")
    if last:
        raise TargetError(filename, f"{path}.per_pe", "the last level (DRAM) is shared, not per PE")
    if "per_unit" in level:
        raise TargetError(filename, f"{path}.per_unit", "a per_pe level is already in every array; drop per_unit")
    size = parse_size(level.get("size_bytes"))
    if size is not None and math.isfinite(size) and not size.is_integer():
        pes = _pes(compute)
        raise TargetError(filename, f"{path}.size_bytes", f"a per_pe level's size is per PE and must divide into "
                          f"whole bytes among the {pes:,} PEs ({compute['pe_rows']}x{compute['pe_cols']}), "
                          f"got {size:g} B per PE")


def _pes(compute: Mapping) -> int:
    """PEs in one array (what a per_pe level is replicated over); 1 where there is no array."""
    return compute["pe_rows"] * compute["pe_cols"] if compute["kind"] == "systolic" else 1


# --------------------------------------------------------------------------- step 3: build


def _mac_rates(c: Mapping) -> dict[str, float]:
    """MACs per cycle per unit for every dtype: derived from the fabric, then the file's peaks."""
    if c["kind"] == "systolic":
        rates = {d: float(c["pe_rows"] * c["pe_cols"]) for d in DTYPES}
    elif c["kind"] == "simt":
        rates = {d: float(c["lanes"] * c.get("fma_units", 1)) for d in DTYPES}
    else:
        # Narrower dtypes pack more elements into one SIMD register.
        rates = {d: float(c["lanes"] * c.get("fma_units", 1) * 4 // DTYPE_BYTES[d]) for d in DTYPES}
    rates.update({d: float(v) for d, v in c.get("peak_macs_per_cycle", {}).items()})
    return rates


def _build(raw: dict, filename: str) -> Target:
    c = raw["compute"]
    kind = c["kind"]
    if kind == "systolic":
        units = c.get("arrays", 1)
        vector_ops = c.get("vector_ops_per_cycle", c["pe_cols"])
    else:
        units = c["cores"] if kind == "simt" else c.get("cores", 1)
        vector_ops = c.get("vector_ops_per_cycle", c["lanes"] * c.get("fma_units", 1))
    derived = _mac_rates(c)
    # A systolic target's vector unit (depthwise convs, pools, elementwise, normalisation):
    # `vector_lanes` wide (default: one lane per PE column), `vector_ops_per_cycle` per array.
    lanes = c.get("vector_lanes", c["pe_cols"]) if kind == "systolic" else c.get("lanes", 1)
    compute = ComputeSpec(
        kind=kind, units=units, pe_rows=c.get("pe_rows", 1), pe_cols=c.get("pe_cols", 1),
        lanes=lanes, fma_units=c.get("fma_units", 1),
        dataflow=c.get("dataflow", "weight_stationary"),
        macs_per_cycle=tuple(sorted(derived.items())), vector_ops_per_cycle=float(vector_ops),
        max_blocks_per_unit=c.get("max_blocks_per_core", 1),
        implicit_parallel=bool(c.get("implicit_parallel", True)),
        double_buffered_weights=bool(c.get("double_buffered_weights", False)),
        im2col=bool(c.get("im2col", True)), pe_dtype=c.get("pe_dtype", ""),
        fill_cycles=float(c.get("fill_cycles", c.get("pe_rows", 1) + c.get("pe_cols", 1))),
    )
    nm = float(raw.get("technology_nm", REFERENCE_NM))
    memory = tuple(_build_level(m, _pes(c), nm) for m in raw["memory"])
    return Target(name=raw["name"], clock_ghz=float(raw["clock_ghz"]), compute=compute, memory=memory,
                  energy_pj_per_mac=float(raw["energy_pj_per_mac"]),
                  description=raw.get("description", ""), source=filename, technology_nm=nm,
                  objective=raw.get("objective", "latency"))


def _build_level(m: Mapping, pes: int, technology_nm: float) -> MemoryLevel:
    """A level as the model reads it: a per_pe level's size and bandwidth times the PEs of an
    array, its energy per byte."""
    copies = pes if m.get("per_pe") else 1
    read_pj, write_pj = _level_energy(m, technology_nm)
    return MemoryLevel(
        name=m["name"], size_bytes=parse_size(m.get("size_bytes")) * copies,
        bandwidth_gbps=float(m["bandwidth_gbps"]) * copies, latency_cycles=float(m["latency_cycles"]),
        energy_pj_per_byte=(read_pj + write_pj) / 2, per_unit=bool(m.get("per_unit", m.get("per_pe", False))),
        roles=roles_of(m.get("holds", HOLDS)), ports=int(m.get("ports", 1)), per_pe=bool(m.get("per_pe", False)),
        read_pj_per_byte=read_pj, write_pj_per_byte=write_pj,
        width_bits=int(m["width_bits"]) if "width_bits" in m else None,
    )


def _level_energy(level: Mapping, technology_nm: float) -> tuple[float, float]:
    """(read, write) pJ per byte: the number given, an access's energy over the port's bytes,
    or for `auto` the CACTI-like curve of the size written (one PE's, per_pe)."""
    if "energy_pj_per_byte" not in level:
        port_bytes = level["width_bits"] / 8
        return level["read_pj"] / port_bytes, level.get("write_pj", level["read_pj"]) / port_bytes
    if level["energy_pj_per_byte"] == "auto":
        size = parse_size(level["size_bytes"])
        energy = sram_energy_pj_per_byte(size, int(level.get("ports", 1)), technology_nm)
        return energy, energy
    return float(level["energy_pj_per_byte"]), float(level["energy_pj_per_byte"])


# --------------------------------------------------------------------------- host detection


def detect_host() -> dict:
    """What this machine offers: cores, f32 SIMD lanes, cache sizes per level, clock."""
    flags: set[str] = set()
    mhz = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("cpu MHz") and mhz is None:
                    mhz = float(line.split(":", 1)[1])
    except OSError:
        pass
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags or "avx" in flags else 4
    fma_units = 2 if "fma" in flags or "avx512f" in flags else 1
    caches: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text().strip().replace("K", " KiB").replace("M", " MiB"))
        except OSError:
            continue
        if kind in ("Data", "Unified") and size and not math.isinf(size):
            caches[f"L{level}"] = int(size)
    caches.setdefault("L1", 32 * 1024)
    caches.setdefault("L2", 512 * 1024)
    caches.setdefault("L3", max(caches["L2"] * 4, 8 * 2**20))
    cores = os.cpu_count() or 1
    return {"cores": cores, "lanes": lanes, "fma_units": fma_units, "caches": caches,
            "clock_ghz": round(mhz / 1000, 3) if mhz else 2.5,
            # ~10 GB/s per core of streaming bandwidth, as a shared DDR4/5 channel gives.
            "dram_gbps": float(min(10 * cores, 80))}


def _resolve_auto(raw: dict) -> dict:
    """Replace `auto` values (host preset) by what this machine reports."""
    if not any(v == "auto" for v in _walk_values(raw)):
        return raw
    host = detect_host()
    out = dict(raw)
    if out.get("clock_ghz") == "auto":
        out["clock_ghz"] = host["clock_ghz"]
    compute = dict(out.get("compute") or {})
    for key in ("cores", "lanes", "fma_units"):
        if compute.get(key) == "auto":
            compute[key] = host[key]
    out["compute"] = compute
    memory = []
    for level in out.get("memory") or []:
        level = dict(level) if isinstance(level, dict) else level
        if isinstance(level, dict):
            if level.get("size_bytes") == "auto":
                level["size_bytes"] = host["caches"].get(level.get("name"), 32 * 1024)
            if level.get("bandwidth_gbps") == "auto":
                level["bandwidth_gbps"] = host["dram_gbps"]
        memory.append(level)
    out["memory"] = memory
    return out


def _walk_values(value: Any):
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk_values(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk_values(v)
    else:
        yield value
