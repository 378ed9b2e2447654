"""A dependence's levels loop by loop, where its relation and the schedule separate by loop.

`legality._delta_levels` decides a dependence from the set of its time differences under a
schedule: broken iff one is lexicographically non-positive, carried at a position iff one is
zero on every outer position and non-zero there. On a tiled nest that set is large: each loop
of an 8-loop convolution becomes three or four time positions of nested floors and mods, and
isl's emptiness tests on the 40-dimensional set of differences, with two existential
variables per floor, took most of the host preset's legality time (8 ms a dependence, 80 ms
at worst).

Most pairs of a kernel's dependences and schedules separate by loop:
- each basic map of the relation is a product of one relation per loop name (every
  constraint names one loop only, on either side: `g' = g`, `c < c'`, `0 <= r <= 2`);
- each time position is a constant, or the same expression of one loop in both statements
  (`floor(((c) mod 6)/2)`: a tiled loop's digits).
Then the set of time differences of one basic map is the product, position by position, of
each loop's own set of differences of its digits (a set of three or four dimensions), and
the lexicographic questions split: a difference zero on positions 0..p-1 and positive at p
exists iff every loop has a difference zero on its positions among 0..p-1, and the loop at p
one positive there as well. Each loop's sequence of answers (still non-empty after its first
m positions are fixed to zero, negative or positive at its m-th) is computed once with isl,
on that small set, and kept: a tile search that changes one loop's tiles asks isl about that
loop only. A union of basic maps is decided as the union of their answers.

`dependence_levels` gives the same answer as the whole set's (tests/test_poly.py compares
them on tiled kernels); where the relation or the schedule does not separate (a skew, a
strided window, an isl constraint naming two loops), it returns None and the whole set decides.
"""
from __future__ import annotations

import re
from typing import Sequence

import islpy as isl

from autocomp_jupyter.caches import LRU

Levels = tuple[bool, frozenset]

_NOT_LOOPS = frozenset({"floor", "mod", "ceil", "min", "max"})
_NAME = re.compile(r"[A-Za-z_]\w*")
_INT = re.compile(r"-?\d+$")


def dependence_levels(relation: isl.Map, relation_text: str, source_loops: Sequence[str], source_exprs: Sequence[str],
                      sink_loops: Sequence[str], sink_exprs: Sequence[str]) -> Levels | None:
    """(broken, positions carrying it) of the dependence `relation` (source instances ->
    sink instances) under time vectors `source_exprs` and `sink_exprs` (isl expressions over
    each statement's loops, padded to one width), or None where they do not separate."""
    positions = _positions(tuple(source_loops), tuple(source_exprs), tuple(sink_loops), tuple(sink_exprs))
    if positions is None:
        return None
    pieces = _pieces(relation, relation_text, tuple(source_loops), tuple(sink_loops))
    if pieces is None:
        return None
    by_loop: dict[str, list[str]] = {}          # loop -> its expressions, outermost first
    for kind, value in positions:
        if kind == "loop":
            by_loop.setdefault(value[0], []).append(value[1])
    broken, carried = False, set()
    for piece in pieces:
        try:
            answers = {loop: _answers(text, tuple(by_loop.get(loop, ()))) for loop, text in piece}
        except isl.Error:           # an expression isl reads only as a relation
            return None
        if any(not seq[0][0] for seq in answers.values()):
            continue                                   # the basic map holds no integer pair
        seen = dict.fromkeys(answers, 0)               # each loop's positions passed so far
        for p, (kind, value) in enumerate(positions):
            # the differences zero on every position before p: non-empty iff each loop's are
            if not all(answers[loop][m][0] for loop, m in seen.items()):
                break
            if kind == "const":
                if value:                               # one difference for every pair
                    broken = broken or value < 0
                    carried.add(p)
                    break                               # none is zero here
                continue
            loop = value[0]
            _, negative, positive = answers[loop][seen[loop]]
            broken = broken or negative
            if negative or positive:
                carried.add(p)
            seen[loop] += 1
        else:
            if all(answers[loop][m][0] for loop, m in seen.items()):
                broken = True                           # a pair at the same time
    return broken, frozenset(carried)


def _positions(source_loops, source_exprs, sink_loops, sink_exprs):
    """Each time position as ("const", sink - source) or ("loop", (loop, expression)); None
    where a position is neither (an expression of two loops, or different in the two)."""
    out = []
    for a, b in zip(source_exprs, sink_exprs):
        names_a = set(_NAME.findall(a)) - _NOT_LOOPS
        if not names_a and _INT.match(a.strip()) and _INT.match(b.strip()):
            out.append(("const", int(b) - int(a)))
            continue
        if a != b or len(names_a) != 1:
            return None
        (loop,) = names_a
        if loop not in source_loops or loop not in sink_loops:
            return None
        out.append(("loop", (loop, a)))
    return out


def _pieces(relation: isl.Map, relation_text: str, source_loops, sink_loops):
    """The relation's basic maps, each as ((loop, its own relation's isl text), ...); None
    where one does not separate by loop. Remembered by the relation's text."""
    key = (relation_text, source_loops, sink_loops)
    if key in _PIECES:
        return _PIECES.get(key)
    pieces = _separated(relation, source_loops, sink_loops)
    _PIECES.put(key, pieces)
    return pieces


def _separated(relation: isl.Map, source_loops, sink_loops):
    n_in, n_out = relation.dim(isl.dim_type.in_), relation.dim(isl.dim_type.out)
    if n_in != len(source_loops) or n_out != len(sink_loops) or relation.dim(isl.dim_type.param):
        return None
    loops = list(dict.fromkeys([*source_loops, *sink_loops]))
    pieces = []
    for bmap in relation.get_basic_maps():
        if bmap.dim(isl.dim_type.div):
            return None
        terms: dict[str, list[str]] = {loop: [] for loop in loops}
        for c in bmap.get_constraints():
            named = [(source_loops[i], f"{v}*x") for i in range(n_in)
                     if (v := c.get_coefficient_val(isl.dim_type.in_, i).to_python())]
            named += [(sink_loops[j], f"{v}*y") for j in range(n_out)
                      if (v := c.get_coefficient_val(isl.dim_type.out, j).to_python())]
            constant = c.get_constant_val().to_python()
            if not named:
                if (constant != 0) if c.is_equality() else (constant < 0):
                    break                               # a false constraint: no pair
                continue
            if len({loop for loop, _ in named}) > 1:
                return None                             # two loops in one constraint
            text = " + ".join(t for _, t in named) + f" + {constant}"
            terms[named[0][0]].append(text + (" = 0" if c.is_equality() else " >= 0"))
        else:
            pieces.append(tuple((loop, _group_text(loop in source_loops, loop in sink_loops, cons))
                                for loop, cons in terms.items()))
    return tuple(pieces)


def _group_text(in_source: bool, in_sink: bool, constraints: list[str]) -> str:
    """One loop's own relation (x: its source value, y: its sink value) as isl text."""
    where = (" : " + " and ".join(constraints)) if constraints else ""
    if in_source and in_sink:
        return f"{{ [x] -> [y]{where} }}"
    return f"{{ [{'x' if in_source else 'y'}]{where} }}"


def _answers(text: str, exprs: tuple[str, ...]) -> tuple[tuple[bool, bool, bool], ...]:
    """For one loop's relation `text` and its time expressions `exprs` (outermost first):
    [(non-empty, negative, positive)] at each of its positions m with its differences zero
    on positions 0..m-1, and last (non-empty,) with all of them zero. Remembered."""
    key = (text, exprs)
    found = _ANSWERS.get(key)
    if found is not None:
        return found
    if not exprs:
        found = ((not (isl.Map(text) if "->" in text else isl.Set(text)).is_empty(), False, False),)
        _ANSWERS.put(key, found)
        return found
    loop = "x"
    digits = isl.Map.from_multi_aff(isl.MultiAff(
        f"{{ [{loop}] -> [{', '.join(_renamed(e, loop) for e in exprs)}] }}"))
    rest = isl.Map(text).apply_domain(digits).apply_range(digits).deltas()
    out = []
    for m in range(len(exprs)):
        if rest.is_empty():
            out.extend([(False, False, False)] * (len(exprs) + 1 - m))
            break
        negative = not rest.upper_bound_val(isl.dim_type.set, m, -1).is_empty()
        positive = not rest.lower_bound_val(isl.dim_type.set, m, 1).is_empty()
        out.append((True, negative, positive))
        rest = rest.fix_val(isl.dim_type.set, m, 0)
    else:
        out.append((not rest.is_empty(), False, False))
    found = tuple(out)
    _ANSWERS.put(key, found)
    return found


def _renamed(expr: str, to: str) -> str:
    """`expr` (of one loop) written over the variable `to`."""
    return _NAME.sub(lambda m: m.group(0) if m.group(0) in _NOT_LOOPS else to, expr)


_PIECES = LRU("poly.separable_pieces", 4096)
_ANSWERS = LRU("poly.separable_answers", 65536)
