"""Every size limit of the tool, in one place: what bad or huge input meets instead of a crash.

A limit has a name, a default, and an environment variable that raises it; hitting one is a
`UserError` that names the limit, the value found and how to raise it. Some limits also have
a ceiling the variable cannot pass (deeper expressions would overflow Python's stack).

    DSL text     source bytes, statements, expression nesting depth, tensor rank, loops per
                 statement, dimension extent, elements per tensor, iteration points per
                 statement, library-op attribute magnitude, diagnostics shown
    YAML files   file bytes, nesting depth, nodes after alias expansion, number magnitude
    running      memory budget of `check --run`, `--measure` and the fuzzer's interpreter runs

Readers of user files go through `read_text_file` (regular files only, read up to a size);
YAML goes through `load_yaml`, which bounds nesting and alias expansion before PyYAML builds
anything and range-checks every number after.
"""
from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Callable

from .errors import Diagnostic, UserError


@dataclass(frozen=True)
class Limit:
    """One limit: `value()` reads `env` (when set) or falls back to `default`."""

    name: str
    env: str
    default: int
    ceiling: int | None = None  # the variable cannot raise it past this
    unit: str = ""

    def value(self) -> int:
        raw = os.environ.get(self.env)
        if raw is None or raw.strip() == "":
            return self.default
        number = parse_byte_size(raw) if self.unit == "bytes" else _parse_int(raw)
        if number is None or number < 1:
            raise UserError(f"environment variable {self.env}={raw!r}: expected a positive integer"
                            + (" or a size like '8 GiB'" if self.unit == "bytes" else ""), filename=self.env)
        if self.ceiling is not None and number > self.ceiling:
            raise UserError(f"environment variable {self.env}={raw!r}: the {self.name} cannot exceed "
                            f"{self.ceiling:,} (deeper input would overflow Python's stack)", filename=self.env)
        return int(number)

    def show(self, n: int | float) -> str:
        return format_bytes(n) if self.unit == "bytes" else f"{int(n):,}"

    def hint(self) -> str:
        how = f"raise the limit with the environment variable {self.env}=N"
        if self.ceiling is not None:
            how += f" (at most {self.show(self.ceiling)})"
        return how

    def exceeded(self, found: int | float, what: str = "") -> str:
        """'… is over the <name> limit of N' — the message body callers wrap in a diagnostic."""
        thing = what or self.name
        return f"{thing} is {self.show(found)}, over the {self.name} limit of {self.show(self.value())}"


def _parse_int(text: str) -> int | None:
    text = text.strip().replace("_", "").replace(",", "")
    return int(text) if re.fullmatch(r"\d{1,19}", text) else None


_SIZE_RE = re.compile(r"^\s*(\d{1,15}(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_SIZE_SCALE = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
               "t": 10**12, "tb": 10**12, "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20,
               "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40}


def parse_byte_size(text: str) -> int | None:
    """Bytes from '4294967296', '4 GiB', '512MB'; None when it is not a size."""
    m = _SIZE_RE.match(text)
    if not m:
        return None
    return int(float(m.group(1)) * _SIZE_SCALE[(m.group(2) or "").lower()])


def format_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


# --------------------------------------------------------------------------- the limits

# DSL. Nesting: the parser and every tree walker (interpreter, C generator, isl) recurse once
# or a few times per level, so the ceiling keeps them inside Python's default stack of 1000.
SOURCE_BYTES = Limit("program size", "AUTOCOMP_MAX_SOURCE_BYTES", 4 * 2**20, unit="bytes")
# Statements: an imported network writes one to three per ONNX node (Swin-V2-B: 1,740 nodes,
# over 2,000 statements; ViT-H/14: 1,384); nothing recurses per statement.
STATEMENTS = Limit("statement count", "AUTOCOMP_MAX_STATEMENTS", 20_000)
EXPR_DEPTH = Limit("expression nesting depth", "AUTOCOMP_MAX_EXPR_DEPTH", 64, ceiling=160)
EXPR_NODES = Limit("expression size", "AUTOCOMP_MAX_EXPR_NODES", 20000)
RANK = Limit("tensor rank", "AUTOCOMP_MAX_RANK", 16, ceiling=32)
# einsum in the interpreter names each loop with one letter (52 of them).
LOOPS = Limit("loops per statement", "AUTOCOMP_MAX_LOOPS", 24, ceiling=48)
EXTENT = Limit("dimension extent", "AUTOCOMP_MAX_EXTENT", 2**31 - 1, ceiling=2**40)
ELEMENTS = Limit("elements per tensor", "AUTOCOMP_MAX_ELEMENTS", 2**40, ceiling=2**50)
POINTS = Limit("iteration points per statement", "AUTOCOMP_MAX_POINTS", 2**50, ceiling=2**60)
ATTRIBUTE = Limit("attribute magnitude", "AUTOCOMP_MAX_ATTRIBUTE", 4096, ceiling=2**31 - 1)
DIAGNOSTICS = Limit("diagnostics shown", "AUTOCOMP_MAX_DIAGNOSTICS", 50)

# YAML (targets, rule files): hand-written files of a few KiB.
YAML_BYTES = Limit("YAML file size", "AUTOCOMP_MAX_YAML_BYTES", 2**20, unit="bytes")
YAML_DEPTH = Limit("YAML nesting depth", "AUTOCOMP_MAX_YAML_DEPTH", 32, ceiling=200)
YAML_NODES = Limit("YAML size after alias expansion", "AUTOCOMP_MAX_YAML_NODES", 100_000)
YAML_NUMBER = 10**18  # magnitude of any number in a target or rule file (not adjustable)

# Fusion chains longer than this are refused in rule files (rules/engine.py).
FUSION_DEPTH = Limit("max_fusion_depth", "AUTOCOMP_MAX_FUSION_DEPTH", 64, ceiling=4096)


def _default_memory_budget() -> int:
    """Half of this machine's physical memory, at most 4 GiB (the reference interpreter keeps
    float64 copies of every tensor, so running needs several times the program's bytes)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 8 * 2**30
    return int(min(4 * 2**30, physical // 2))


MEMORY = Limit("memory budget", "AUTOCOMP_MEMORY_BUDGET", _default_memory_budget(), unit="bytes")


# --------------------------------------------------------------------------- files


def read_text_file(path: str | os.PathLike, limit: Limit = SOURCE_BYTES, what: str = "file",
                   error: Callable[[str, str], Exception] | None = None) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes.

    Devices, pipes and directories are refused before reading (`/dev/zero` never ends), and
    at most limit + 1 bytes are read, so a huge file costs nothing. `error(filename, message)`
    builds the exception (default: `UserError`).
    """
    name = str(path)
    make = error or (lambda filename, message: UserError(message, filename=filename))
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise make(name, f"'{name}' is a directory, not a {what}")
            if not stat.S_ISREG(info.st_mode):
                raise make(name, f"'{name}' is not a regular file (a device, pipe or socket); "
                                 f"expected a {what}")
            cap = limit.value()
            data = f.read(cap + 1)
    except IsADirectoryError:
        raise make(name, f"'{name}' is a directory, not a {what}") from None
    except OSError as err:
        raise make(name, f"cannot read '{name}': {err.strerror or err}") from None
    if len(data) > cap:
        raise make(name, f"the {what} is over the {limit.name} limit of {limit.show(cap)}; {limit.hint()}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise make(name, f"'{name}' is not UTF-8 text (byte {err.start} is 0x{data[err.start]:02x})") from None


# --------------------------------------------------------------------------- YAML


class YAMLLimitError(Exception):
    """Raised by `load_yaml`; `key_path` and `message` feed the caller's own error type."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.message, self.line = message, line


def _yaml_loader():
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load(text)` with bounds checked first, then every number range-checked.

    One pass over the parser's events (iterative, no Python objects built) measures nesting
    depth and the node count after alias expansion — each alias counts as the whole subtree
    it repeats, so a "billion laughs" file is refused in microseconds instead of being
    expanded by the validation that follows. An alias inside its own anchor (a recursive
    structure) is refused too. Raises `yaml.YAMLError` for syntax errors and
    `YAMLLimitError` for a limit; numbers must be finite and at most 1e18 in magnitude.
    """
    import yaml

    if len(text.encode("utf-8", "surrogatepass")) > YAML_BYTES.value():
        raise YAMLLimitError(f"the file is over the {YAML_BYTES.name} limit of "
                             f"{YAML_BYTES.show(YAML_BYTES.value())}; {YAML_BYTES.hint()}")
    max_depth, max_nodes = YAML_DEPTH.value(), YAML_NODES.value()
    sizes: dict[str, int] = {}     # anchor → expanded node count of its subtree
    open_anchors: set[str] = set()
    stack: list[list] = [[None, 0]]  # frames: [anchor, expanded nodes so far]
    total = 0
    for event in yaml.parse(text, Loader=_yaml_loader()):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(stack) > max_depth:
                raise YAMLLimitError(f"nesting is deeper than the {YAML_DEPTH.name} limit of {max_depth}; "
                                     f"{YAML_DEPTH.hint()}", line)
            if event.anchor:
                open_anchors.add(event.anchor)
            stack.append([event.anchor, 1])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, count = stack.pop()
            if anchor:
                sizes[anchor] = count
                open_anchors.discard(anchor)
            stack[-1][1] += count
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor:
                sizes[event.anchor] = 1
            stack[-1][1] += 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise YAMLLimitError(f"alias *{event.anchor} refers to its own enclosing anchor "
                                     "(a recursive structure)", line)
            stack[-1][1] += sizes.get(event.anchor, 1)
        total = sum(frame[1] for frame in stack)
        if total > max_nodes:
            raise YAMLLimitError(f"the document expands to over {max_nodes:,} nodes (aliases count as the "
                                 f"subtrees they repeat), over the {YAML_NODES.name} limit; "
                                 f"{YAML_NODES.hint()}", line)
    data = yaml.load(text, Loader=_yaml_loader())
    problem = _bad_number(data, "")
    if problem:
        raise YAMLLimitError(problem)
    return data


def _bad_number(data: Any, path: str) -> str:
    """The first number that is NaN, infinite or beyond 1e18 (as 'key.path: message'), or ''."""
    stack = [(data, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, float):
            if math.isnan(value):
                return f"{where or 'document'}: expected a number, got NaN (.nan)"
            if math.isinf(value):
                return (f"{where or 'document'}: expected a finite number, got {value} "
                        "(write 'unbounded' for an unbounded size)")
            if abs(value) > YAML_NUMBER:
                return f"{where or 'document'}: {value:g} is out of range (numbers are at most 1e18 in magnitude)"
        elif isinstance(value, int) and abs(value) > YAML_NUMBER:
            digits = len(str(abs(value))) if abs(value) < 10**4000 else "thousands of"
            return f"{where or 'document'}: a {digits}-digit integer is out of range (numbers are at most 1e18)"
    return ""


PLAIN_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


def is_plain_name(name: object) -> bool:
    """A name that can never be read as a path: a letter, then letters, digits, '_' or '-'."""
    return isinstance(name, str) and bool(PLAIN_NAME.match(name))


# --------------------------------------------------------------------------- running


def run_memory_bytes(program) -> int:
    """Bytes the reference interpreter holds to run `program`: a float64 array per tensor
    (inputs, intermediates, temps), plus the largest statement's evaluation box."""
    from .interp import MAX_BOX_POINTS

    per_tensor = sum(8 * math.prod(t.shape) for t in program.tensors)
    return per_tensor + 4 * 8 * MAX_BOX_POINTS


def check_memory_budget(program, extra_bytes_per_element: int = 0, what: str = "running this program",
                        raise_hint: str = "", budget: int | None = None) -> None:
    """Refuse, before allocating, a run whose tensors would not fit the memory budget.

    `extra_bytes_per_element` adds e.g. the f32 buffers of a compiled run (--measure);
    `budget` overrides the `MEMORY` limit (the fuzzer runs with a smaller one)."""
    elements = sum(math.prod(t.shape) for t in program.tensors)
    need = run_memory_bytes(program) + extra_bytes_per_element * elements
    budget = MEMORY.value() if budget is None else budget
    if need > budget:
        biggest = max(program.tensors, key=lambda t: math.prod(t.shape))
        raise UserError(Diagnostic(
            f"{what} needs about {format_bytes(need)} ({elements:,} elements in {len(program.tensors)} tensors; "
            f"largest '{biggest.name}' {list(biggest.shape)}), over the {MEMORY.name} of {format_bytes(budget)}",
            hint=raise_hint or (f"shrink the dimensions (e.g. `autocomp check --run --max-extent 256`) or raise "
                                f"the budget with {MEMORY.env}=16GiB")), source=program.source,
            filename=program.filename)


def check_work_budget(program, max_points: int) -> None:
    """Refuse a run whose statements iterate over more than `max_points` points in total."""
    points = sum(math.prod(l.extent for l in st.loops) for st in program.statements)
    if points > max_points:
        raise UserError(f"running this program visits {points:,} iteration points, over the limit of "
                        f"{max_points:,} for this run; shrink the dimensions (--max-extent)",
                        source=program.source, filename=program.filename)
