"""The rule engine: rule files (YAML), Python rules (`@adrs_rule`), and chain matching.

A *rule set* is data: `rules/default.yaml`, overridden by `rules/<target>.yaml`, then by
files or registered Python rules the user names. Loading goes schema → meaning → build
(as ZigZag validates accelerators): errors name the file, the key path and what was
expected. Files are read with `limits.load_yaml` (PyYAML's safe loader after bounding size,
nesting and alias expansion), so a rule file can never run code nor expand into a huge
structure; a YAML rule without `match` must name a Python rule already registered with
`@adrs_rule`. A target or rule-set *name* selects `rules/<name>.yaml` only when it is a plain
name, never a path.

A fusion rule's `match` is a chain pattern over producer→consumer ops: each item is an op
name (`conv2d`) or op class (`contraction`), `a|b` for either, a trailing `+` for one or
more. `Pattern.match_chain` finds the longest chain starting at an op, in time
O(pattern items x chain length) whatever the `+` items.
"""
from __future__ import annotations

import copy
import difflib
import inspect
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import yaml

from ..dsl.library import LIBRARY
from ..errors import Diagnostic, UserError
from ..limits import FUSION_DEPTH, YAML_BYTES, YAMLLimitError, is_plain_name, load_yaml, read_text_file
from ..ir.program import OP_CLASSES, Op, Program

RULES_DIR_CANDIDATES = (
    Path(__file__).resolve().parent.parent.parent / "rules",  # a source checkout / editable install
    Path(__file__).resolve().parent.parent / "_rules",       # the wheel (force-included)
)


def rules_dir() -> Path:
    for path in RULES_DIR_CANDIDATES:
        if (path / "default.yaml").is_file():
            return path
    raise FileNotFoundError("the rule files (default.yaml) are missing from the installation")


class RuleError(UserError):
    """A malformed rule file or rule reference: names the file, the key path, the expectation."""

    def __init__(self, filename: str, key_path: str, message: str, hint: str = ""):
        where = f"{key_path}: " if key_path else ""
        super().__init__(Diagnostic(f"{where}{message}", hint=hint), filename=filename)
        self.key_path = key_path


# --------------------------------------------------------------------------- Python rules


@dataclass(frozen=True)
class Fuse:
    """A Python rule's rewrite: run producer and consumer in one kernel (no change to ops)."""

    why: str = ""


@dataclass(frozen=True)
class Replace:
    """A Python rule's rewrite: replace producer and consumer by `ops` (checked by the
    interpreter; a rewrite that changes the result is rolled back and named)."""

    ops: tuple[Op, ...]
    why: str = ""
    fuse: bool = True  # run the replacement ops in one kernel


_REGISTRY: dict[str, Callable] = {}


def adrs_rule(name: str, doc: str = ""):
    """Register `def rule(producer: Op, consumer: Op) -> Fuse | Replace | None` as `name`.

    It applies to every producer→consumer edge where the consumer is the only reader
    (the same precondition as YAML chain rules). Return None to leave the edge alone,
    `Fuse()` to fuse, or `Replace(ops)` to rewrite both ops. Example::

        @adrs_rule("fuse_any_relu")
        def fuse_any_relu(producer, consumer):
            return Fuse("relu epilogue") if consumer.kind == "relu" else None

    Then name it: `optimize(src, rules=["fuse_any_relu"])` or `%%autocomp --rules fuse_any_relu`.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise UserError(f"@adrs_rule needs a rule name that is an identifier, got {name!r}")

    def register(fn: Callable) -> Callable:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        if len(params) != 2:
            raise UserError(f"@adrs_rule('{name}'): the rule must take (producer, consumer), "
                            f"got {len(params)} parameter(s)")
        fn.adrs_rule_name = name
        fn.adrs_rule_doc = doc or (inspect.getdoc(fn) or "").split("\n")[0]
        _REGISTRY[name] = fn
        return fn

    return register


def registered_rules() -> dict[str, Callable]:
    return dict(_REGISTRY)


# --------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class PatternItem:
    alternatives: tuple[str, ...]  # op names or op classes
    repeat: bool = False           # '+': one or more

    def accepts(self, op: Op) -> bool:
        return op.kind in self.alternatives or op.op_class in self.alternatives

    def __str__(self) -> str:
        return "|".join(self.alternatives) + ("+" if self.repeat else "")


@dataclass(frozen=True)
class Pattern:
    items: tuple[PatternItem, ...]

    @staticmethod
    def parse(items: Sequence[str]) -> "Pattern":
        out = []
        for text in items:
            repeat = text.endswith("+")
            alts = tuple(a.strip() for a in text.rstrip("+").split("|"))
            out.append(PatternItem(alts, repeat))
        return Pattern(tuple(out))

    def match_chain(self, chain: Sequence[Op]) -> int:
        """Length of the longest prefix of `chain` this pattern matches (0: no match).

        Dynamic programming over (pattern item, chain position): `ends` holds every chain
        position the items so far can end at. Trying each split of the chain among several
        `+` items instead would take time exponential in the chain length."""
        ends = {0}
        for it in self.items:
            nxt: set[int] = set()
            for pos in sorted(ends):
                while pos < len(chain) and it.accepts(chain[pos]):
                    pos += 1
                    if pos in nxt:
                        break  # positions beyond were reached from an earlier start already
                    nxt.add(pos)
                    if not it.repeat:
                        break
            ends = nxt
            if not ends:
                return 0
        return max(ends)

    def __str__(self) -> str:
        return " → ".join(map(str, self.items))


# --------------------------------------------------------------------------- rule set


@dataclass(frozen=True)
class FusionRule:
    name: str
    match: Pattern | None        # None: a Python rule
    targets: tuple[str, ...] | None
    enabled: bool
    doc: str
    source: str                  # the file (or 'python') that defined it
    python: Callable | None = field(default=None, compare=False)
    # "epilogue": the chain's ops in one nest over the anchor's tiles (rules/fusion.py);
    # "compute_at": a chain of kernels whose anchors the match names, each computed at the
    # next one's tiles over the region it reads (rules/chains.py); "online_softmax": the
    # same chain as one kernel whose softmax runs against a running max, its key loop tiled
    # (rules/online_softmax.py).
    lower: str = "epilogue"

    def applies_to(self, target: str) -> bool:
        return self.enabled and (self.targets is None or target in self.targets)

    def where(self) -> str:
        return "all targets" if self.targets is None else ", ".join(self.targets)


@dataclass(frozen=True)
class RuleSet:
    """A validated rule set: fusion rules in the order they are tried, and pass parameters."""

    fusion_params: dict
    fusion_rules: tuple[FusionRule, ...]
    tiling: dict
    scheduling: dict
    rollback: dict
    monitor: dict
    tune: dict
    sources: tuple[str, ...]

    def rule(self, name: str) -> FusionRule:
        for r in self.fusion_rules:
            if r.name == name:
                return r
        raise KeyError(name)


# Schema: key → (type check, description) for scalars; nested dicts for sections.
_NUMBER = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "a positive number")
_INT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1")
_INT0 = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_FRACTION = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1, "a number in (0, 1]")
_STR_LIST = (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names")
_LEVELS = (lambda v: isinstance(v, list) and v and all(isinstance(x, str) for x in v), "a non-empty list of level names")
_PAIR = (lambda v: isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and x >= 1 for x in v)
         and v[0] <= v[1], "a pair [min, max] of integers, min <= max")

def _loop_transforms() -> tuple[str, ...]:
    from ..schedule import loop_transforms

    return loop_transforms()


class _LoopTransformsText:
    """'a list drawn from ...' naming the loop transformations registered when it is shown."""

    def __str__(self) -> str:
        return "a list drawn from " + ", ".join(_loop_transforms())

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


SCHEMA: dict[str, Any] = {
    "fusion": {
        "params": {"fusion_threshold_gb": _NUMBER, "max_fusion_depth": _INT, "inline_threshold": _INT0,
                   "shared_mem_kb": _NUMBER, "fold_views": _BOOL, "fold_joins": _BOOL},
        "order": _STR_LIST,
        "rules": "rules",
    },
    "tiling": {"tile_heuristic": (lambda v: v in ("model-driven", "fixed"), "'model-driven' or 'fixed'"),
               "levels": _LEVELS, "register_tile_factor": _PAIR,
               "max_spill_ratio": (lambda v: isinstance(v, (int, float)) and 0 <= v < 1, "a number in [0, 1)")},
    "scheduling": {"priority": (lambda v: isinstance(v, list) and set(v) <= set(_loop_transforms())
                                and len(set(v)) == len(v), _LoopTransformsText()),
                   "parallel_outer": _BOOL, "vectorize_inner": _BOOL, "unroll_factor": _INT},
    "rollback": {"min_speedup": (lambda v: isinstance(v, (int, float)) and v >= 1, "a number >= 1"),
                 "max_occupancy_after_fusion": _FRACTION,
                 "min_speedup_by_pass": (lambda v: isinstance(v, dict) and all(
                     isinstance(k, str) and isinstance(x, (int, float)) and x > 0 for k, x in v.items()),
                     "a mapping of pass name to a positive number")},
    "monitor": {"bw_util": _FRACTION, "occupancy": _FRACTION},
    "tune": {"configs": _INT0, "top": _INT, "seed": _INT0},
}
RULE_KEYS = {"name", "match", "targets", "enabled", "doc", "lower"}
LOWERINGS = ("epilogue", "compute_at", "online_softmax")


def _short(value: Any) -> str:
    """A bounded repr for messages (a value may be a large nested structure)."""
    return reprlib.repr(value)


def _suggest(key: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else "expected one of: " + ", ".join(sorted(choices))


def _check_schema(raw: Any, filename: str) -> None:
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise RuleError(filename, "", f"a rule file is a mapping of sections, got {type(raw).__name__}",
                        "sections: " + ", ".join(SCHEMA))

    def walk(node: dict, schema: dict, path: str) -> None:
        for key, value in node.items():
            key_path = f"{path}.{key}" if path else str(key)
            if key not in schema:
                raise RuleError(filename, key_path, f"unknown key '{key}'", _suggest(str(key), schema))
            spec = schema[key]
            if spec == "rules":
                _check_rules(value, key_path, filename)
            elif isinstance(spec, dict):
                if not isinstance(value, dict):
                    raise RuleError(filename, key_path, f"expected a mapping, got {_short(value)}")
                walk(value, spec, key_path)
            else:
                check, expected = spec
                if not check(value):
                    raise RuleError(filename, key_path, f"expected {expected}, got {_short(value)}")
                if key_path == "fusion.params.max_fusion_depth" and value > FUSION_DEPTH.value():
                    raise RuleError(filename, key_path, f"{value:,} is over the {FUSION_DEPTH.name} limit of "
                                    f"{FUSION_DEPTH.value()} ops per fused kernel", FUSION_DEPTH.hint())

    walk(raw, SCHEMA, "")


def _check_rules(value: Any, path: str, filename: str) -> None:
    if not isinstance(value, list):
        raise RuleError(filename, path, f"expected a list of rules, got {_short(value)}")
    for i, rule in enumerate(value):
        rp = f"{path}[{i}]"
        if not isinstance(rule, dict):
            raise RuleError(filename, rp, f"expected a rule mapping like {{name: ..., match: [...]}}, got {_short(rule)}")
        for key in rule:
            if key not in RULE_KEYS:
                raise RuleError(filename, f"{rp}.{key}", f"unknown rule key '{key}'", _suggest(str(key), RULE_KEYS))
        if not isinstance(rule.get("name"), str) or not rule["name"].isidentifier():
            raise RuleError(filename, f"{rp}.name", f"expected a rule name (an identifier), got {_short(rule.get('name'))}")
        if "match" in rule:
            m = rule["match"]
            if not isinstance(m, list) or len(m) < 2 or not all(isinstance(x, str) for x in m):
                raise RuleError(filename, f"{rp}.match", f"expected a chain of at least two op names or classes, got {_short(m)}",
                                "e.g. match: [conv2d, relu] or [contraction, elementwise+]")
        if "targets" in rule and not (isinstance(rule["targets"], list) and all(isinstance(t, str) for t in rule["targets"])):
            raise RuleError(filename, f"{rp}.targets", f"expected a list of target names, got {_short(rule['targets'])}")
        if "enabled" in rule and not isinstance(rule["enabled"], bool):
            raise RuleError(filename, f"{rp}.enabled", f"expected true or false, got {_short(rule['enabled'])}")
        if "lower" in rule and rule["lower"] not in LOWERINGS:
            raise RuleError(filename, f"{rp}.lower", f"expected one of {', '.join(LOWERINGS)}, got {_short(rule['lower'])}",
                            "compute_at: a chain of contractions, each computed at the next one's tiles; "
                            "online_softmax: attention with its key loop tiled (FlashAttention)")
        if "doc" in rule and not isinstance(rule["doc"], str):
            raise RuleError(filename, f"{rp}.doc", f"expected a string, got {_short(rule['doc'])}")


def _check_meaning(raw: dict, filename: str, known_rules: set[str]) -> None:
    """Checks beyond types: op names and classes exist, Python rules are registered."""
    vocabulary = set(LIBRARY) | set(OP_CLASSES) | {"comprehension"}
    rules = (raw.get("fusion") or {}).get("rules") or []
    for i, rule in enumerate(rules):
        rp = f"fusion.rules[{i}]"
        for j, item in enumerate(rule.get("match", [])):
            for alt in item.rstrip("+").split("|"):
                if alt.strip() not in vocabulary:
                    raise RuleError(filename, f"{rp}.match[{j}]", f"unknown op or op class '{alt.strip()}'",
                                    _suggest(alt.strip(), vocabulary))
        if "match" not in rule and rule["name"] not in _REGISTRY and rule["name"] not in known_rules:
            raise RuleError(filename, f"{rp}", f"rule '{rule['name']}' has no 'match' and no Python rule of that "
                            "name is registered", "register it with @adrs_rule('" + rule["name"] + "') first, "
                            "or give a match: [producer, consumer] chain")
        for t in rule.get("targets", []) or []:
            from ..accel.target import list_presets

            if t not in list_presets():
                raise RuleError(filename, f"{rp}.targets", f"unknown target '{t}'", _suggest(t, list_presets()))
    order = (raw.get("fusion") or {}).get("order") or []
    names = {r["name"] for r in rules} | known_rules | set(_REGISTRY)
    for k, name in enumerate(order):
        if name not in names:
            raise RuleError(filename, f"fusion.order[{k}]", f"'{name}' is not a rule", _suggest(name, names))


def _read_yaml(path: Path) -> Any:
    text = read_text_file(path, YAML_BYTES, "rule file", lambda f, m: RuleError(f, "", m))
    try:
        return load_yaml(text)  # bounded: size, nesting, alias expansion; numbers finite
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise RuleError(str(path), "", f"not valid YAML: {where}{getattr(err, 'problem', err)}")
    except YAMLLimitError as err:
        raise RuleError(str(path), f"line {err.line}" if err.line else "", err.message)


def _merge(base: dict, override: dict) -> dict:
    """Deep-merge `override` into `base`; fusion rules merge by name (override keys win)."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if key == "rules" and isinstance(value, list):
            existing = {r["name"]: r for r in out.get("rules", [])}
            for rule in value:
                if rule["name"] in existing:
                    existing[rule["name"]].update(rule)
                else:
                    out.setdefault("rules", []).append(copy.deepcopy(rule))
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_rules(extra: Sequence[str | Path | Callable] | None = None, target: str | None = None) -> RuleSet:
    """default.yaml, then rules/<target>.yaml if present, then each of `extra` in order.

    `extra` items: a path to a YAML rule file; the name of a shipped rule file in `rules/`;
    the name of a Python rule registered with `@adrs_rule`; or the rule function itself.
    """
    base_dir = rules_dir()
    layers: list[tuple[str, dict]] = [(str(base_dir / "default.yaml"), _read_yaml(base_dir / "default.yaml"))]
    if target and is_plain_name(target) and (base_dir / f"{target}.yaml").is_file():
        layers.append((str(base_dir / f"{target}.yaml"), _read_yaml(base_dir / f"{target}.yaml")))
    python_rules: list[Callable] = []
    for item in extra or []:
        if callable(item):
            if not hasattr(item, "adrs_rule_name"):
                raise UserError(f"{getattr(item, '__name__', item)!r} is not a rule; decorate it with @adrs_rule('name')")
            python_rules.append(item)
            continue
        text = str(item)
        path = Path(text)
        if text in _REGISTRY:
            python_rules.append(_REGISTRY[text])
        elif path.suffix in (".yaml", ".yml") and path.exists():
            layers.append((str(path), _read_yaml(path)))
        elif is_plain_name(text) and (base_dir / f"{text}.yaml").is_file() and text != "default":
            layers.append((str(base_dir / f"{text}.yaml"), _read_yaml(base_dir / f"{text}.yaml")))
        elif path.suffix in (".yaml", ".yml"):
            raise RuleError(text, "", "no such rule file")
        else:
            choices = list(_REGISTRY) + [p.stem for p in base_dir.glob("*.yaml") if p.stem != "default"]
            raise UserError(f"unknown rules '{text}': not a registered @adrs_rule, a shipped rule file or a .yaml path",
                            filename="--rules") if not choices else UserError(
                Diagnostic(f"unknown rules '{text}': not a registered @adrs_rule, a shipped rule file or a .yaml path",
                           hint=_suggest(text, choices)), filename="--rules")
    merged: dict = {}
    for filename, raw in layers:
        _check_schema(raw, filename)
        _check_meaning(raw or {}, filename, {r["name"] for r in (merged.get("fusion") or {}).get("rules", [])})
        for rule in ((raw or {}).get("fusion") or {}).get("rules", []) or []:
            rule.setdefault("_source", Path(filename).name)
        merged = _merge(merged, raw or {})
    return _build(merged, [f for f, _ in layers], python_rules)


def _build(merged: dict, sources: list[str], python_rules: list[Callable]) -> RuleSet:
    fusion = merged.get("fusion") or {}
    rules: list[FusionRule] = []
    for raw in fusion.get("rules", []):
        name = raw["name"]
        fn = _REGISTRY.get(name) if "match" not in raw else None
        rules.append(FusionRule(name, Pattern.parse(raw["match"]) if "match" in raw else None,
                                tuple(raw["targets"]) if raw.get("targets") is not None else None,
                                raw.get("enabled", True), raw.get("doc", "") or (getattr(fn, "adrs_rule_doc", "") if fn else ""),
                                raw.get("_source", "yaml"), fn, raw.get("lower", "epilogue")))
    for fn in python_rules:
        if any(r.name == fn.adrs_rule_name for r in rules):
            rules = [r if r.name != fn.adrs_rule_name else FusionRule(r.name, None, r.targets, True, fn.adrs_rule_doc,
                                                                      "python", fn) for r in rules]
        else:
            # User-named Python rules run first: the user asked for them explicitly.
            rules.insert(0, FusionRule(fn.adrs_rule_name, None, None, True, fn.adrs_rule_doc, "python", fn))
    order = list(fusion.get("order", []))
    python_first = [r.name for r in rules if r.python is not None and r.name not in order]
    ordered_names = python_first + order + [r.name for r in rules if r.name not in order and r.name not in python_first]
    by_name = {r.name: r for r in rules}
    ordered = tuple(by_name[n] for n in dict.fromkeys(ordered_names) if n in by_name)
    params = dict(fusion.get("params", {}))
    return RuleSet(params, ordered, dict(merged.get("tiling", {})), dict(merged.get("scheduling", {})),
                   dict(merged.get("rollback", {})), dict(merged.get("monitor", {})), dict(merged.get("tune", {})),
                   tuple(sources))


def list_rules(target: str | None = None) -> list[dict]:
    """Rows for `autocomp rules` / `%autocomp_rules`: every rule with where it applies."""
    rows = []
    for r in load_rules(target=target).fusion_rules:
        rows.append({"rule": r.name, "pass": "fusion", "match": str(r.match) if r.match else "(python)",
                     "targets": r.where(), "enabled": r.enabled, "doc": r.doc})
    for name, fn in _REGISTRY.items():
        if not any(row["rule"] == name for row in rows):
            rows.append({"rule": name, "pass": "fusion", "match": "(python)", "targets": "all targets",
                         "enabled": False, "doc": getattr(fn, "adrs_rule_doc", "") + " (registered; name it with --rules)"})
    return rows


# --------------------------------------------------------------------------- chains


def sole_reader(program: Program, op: Op) -> Op | None:
    """The consumer of `op`'s output if it is the only reader and the output is not a
    program output (its value must then stay internal to a fused kernel)."""
    readers = program.readers(op.output)
    if len(readers) != 1 or op.output in program.outputs:
        return None
    return readers[0]


def chain_from(program: Program, op: Op, limit: int, taken: set[str]) -> list[Op]:
    """The producer→consumer chain starting at `op`: each op the sole reader of the previous
    one, or, where the chain's tensors have several readers, the first of them (program
    order) such that the others then read only the chain and that op (SiLU's x·sigmoid(x):
    the sigmoid, then the multiply that reads x and the sigmoid), or, where several readers
    stay, an elementwise/broadcast op while every pending reader is one too: a pointwise
    region that meets again further on (GELU as an exporter writes it, x/√2 → erf → +1 → ·0.5
    and then · x). Only prefixes that `closed_prefix` keeps may be fused: a later op may
    still read an earlier tensor.

    Such a region whose result one contraction alone reads stays out of the chain: it is
    that contraction's prologue (`pointwise_prologue`, computed at its tiles), where its
    vector work overlaps the next contraction instead of adding to the producers chained
    before its own (ConvNeXt's GELU: 22.7 ms on npu as the prologue, 25.5 as the epilogue).

    `limit` (max_fusion_depth) counts the chain's ops, the pointwise ops of a region that
    meets again as one with the op that closes it (what an exporter writes node by node is
    one op of the model); the chain never has more than FUSION_DEPTH ops."""
    chain = [op]
    counted = 1
    region = None               # where the region being walked (several readers pending) began
    while counted < limit and len(chain) < FUSION_DEPTH.value():
        nxt, wide = sole_reader(program, chain[-1]), False
        if nxt is None and chain[-1].output not in program.outputs:
            nxt, wide = _next_in_dag(program, chain)
        if nxt is None or nxt.name in taken:
            break
        chain.append(nxt)
        if wide and region is None:
            region = len(chain) - 1
        open_ = _region_open(program, chain)
        if region is not None and not open_:
            reader = sole_reader(program, nxt)
            if reader is not None and reader.op_class == "contraction":
                return chain[:region]
            region = None
        counted += 0 if nxt.op_class in POINTWISE and open_ else 1
    return chain


def _outside_readers(program: Program, chain: list[Op]) -> list[Op] | None:
    """Ops outside `chain` that read its tensors, in program order (None: one is a program
    output, which must be stored anyway)."""
    names = {o.name for o in chain}
    if any(o.output in program.outputs for o in chain[:-1]):
        return None
    readers = {r.name: r for o in chain for r in program.readers(o.output) if r.name not in names}
    order = {o.name: i for i, o in enumerate(program.ops)}
    return sorted(readers.values(), key=lambda r: order[r.name])


POINTWISE = ("elementwise", "broadcast")


def _next_in_dag(program: Program, chain: list[Op]) -> tuple[Op | None, bool]:
    """(the next op of `chain` where its tensors have several readers, or None; whether
    readers besides it stay pending: a pointwise region is being walked)."""
    readers = _outside_readers(program, chain)
    if not readers:
        return None, False
    first = readers[0]
    after = _outside_readers(program, chain + [first])
    if after is None:
        return None, False
    if len(after) <= 1:
        return first, False
    # Several readers stay: a pointwise region may still meet again at a pointwise op.
    pointwise = first.op_class in POINTWISE and all(r.op_class in POINTWISE for r in after)
    return (first, True) if pointwise else (None, False)


def _region_open(program: Program, chain: list[Op]) -> bool:
    """Whether a tensor of `chain` other than its last op's output is still read outside it:
    the chain is inside a region that has not met again yet."""
    names = {o.name for o in chain}
    return any(r.name not in names for o in chain[:-1] for r in program.readers(o.output))


def closed_prefix(program: Program, chain: list[Op], n: int) -> int:
    """The longest prefix of `chain[:n]` whose tensors but the last are read only inside it
    (0 or 1 when none of two or more ops is)."""
    while n >= 2:
        inside = {o.name for o in chain[:n]}
        if all(o.output not in program.outputs and {r.name for r in program.readers(o.output)} <= inside
               for o in chain[:n - 1]):
            return n
        n -= 1
    return n
