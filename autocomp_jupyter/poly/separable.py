"""A dependence's levels group of loops by group, where its relation and the schedule separate.

`legality._delta_levels` decides a dependence from the set of its time differences under a
schedule: broken iff one is lexicographically non-positive, carried at a position iff one is
zero on every outer position and non-zero there. On a tiled nest that set is large: each loop
of an 8-loop convolution becomes three or four time positions of nested floors and mods, and
isl's emptiness tests on the 40-dimensional set of differences, with two existential
variables per floor, took most of the host preset's legality time (8 ms a dependence, 80 ms
at worst).

Most pairs of a kernel's dependences and schedules separate. The source's loops and the
sink's fall into groups that no constraint of a basic map of the relation and no time
position joins: a loop alone (`c < c'`, `g' = g`), or an epilogue's channel and the
convolution's group and filter loops it is made of (`c' = 8g + fo`). Each time position is
a constant, or an expression of one group's loops in each statement (`floor(((c) mod 6)/2)`,
a tiled loop's digit; `floor(g/4)` against the epilogue's `1`, its last tile). Then the set
of a basic map's time differences zero on positions 0..p-1 is the product of each group's
own such set, and the lexicographic questions split: a difference zero there and positive
at p exists iff every group has one zero on its positions among 0..p-1, and the group at p
one positive there as well. Each group's sequence of answers (still non-empty after its
first m positions are equal in both statements, negative or positive at its m-th) is
computed once with isl, on a set of the group's few loops, and kept: a tile search that
changes one loop's tiles asks isl about that loop only. A union of basic maps is decided as
the union of their answers. Where two groups that have had positions meet at a later one
(the trailing loops of a fused nest, in other orders in its statements), the split ends
there: positions past it are reached only when no pair has differed before, and then the
whole set decides.

`dependence_levels` gives the same answer as the whole set's (tests/test_poly.py compares
them on tiled kernels); where the relation or a position does not split (a basic map with
existential variables, a position naming loops of two groups from the start), it returns
None and the whole set decides.
"""
from __future__ import annotations

import re
from typing import Sequence

import islpy as isl

from autocomp_jupyter.caches import LRU
from autocomp_jupyter.poly.text import _ISL_RESERVED

Levels = tuple[bool, frozenset]

_NAME = re.compile(r"[A-Za-z_]\w*")        # a loop, or a word isl reserves (floor, mod)
_INT = re.compile(r"-?\d+$")
_VARIABLE = re.compile(r"\b[xy](\d+)\b")     # x<k> / y<k>: a source / sink loop


def dependence_levels(relation: isl.Map, relation_text: str, source_loops: Sequence[str], source_exprs: Sequence[str],
                      sink_loops: Sequence[str], sink_exprs: Sequence[str]) -> Levels | None:
    """(broken, positions carrying it) of the dependence `relation` (source instances ->
    sink instances) under time vectors `source_exprs` and `sink_exprs` (isl expressions over
    each statement's loops, padded to one width), or None where they do not separate."""
    source_loops, sink_loops = tuple(source_loops), tuple(sink_loops)
    positions = _positions(source_loops, tuple(source_exprs), sink_loops, tuple(sink_exprs))
    if positions is None:
        return None
    pieces = _pieces(relation, relation_text, source_loops, sink_loops)
    if pieces is None:
        return None
    broken, carried = False, set()
    for constraints in pieces:
        found = _piece_levels(constraints, positions, len(source_loops) + len(sink_loops))
        if found is None:
            return None
        broken = broken or found[0]
        carried |= found[1]
    return broken, frozenset(carried)


def _piece_levels(constraints, positions, n_vars: int):
    """(broken, carried) of one basic map (`constraints`: (variables, isl text) each), or None."""
    parent = list(range(n_vars))

    def find(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for variables, _ in constraints:
        for v in variables[1:]:
            parent[find(v)] = find(variables[0])
    # Positions join the groups they name while those are fresh; where one meets two groups
    # that have had positions already, the split stops there.
    touched: set[int] = set()                   # the groups (by root) with positions so far
    stop = len(positions)
    for p, (kind, variables, _, _) in enumerate(positions):
        if kind == "const":
            continue
        roots = {find(v) for v in variables}
        if len(roots & touched) > 1:
            stop = p
            break
        root = min(roots & touched) if roots & touched else min(roots)
        for other in roots - {root}:
            parent[other] = root
        touched -= roots
        touched.add(root)
    groups: dict[int, tuple[list, list]] = {}   # root -> (its constraints, its positions before the stop)
    for v in range(n_vars):
        groups.setdefault(find(v), ([], []))
    for variables, text in constraints:
        groups[find(variables[0])][0].append((variables, text))
    where: list = []          # each position before the stop: ("const", delta) or ("group", root)
    for kind, variables, a, b in positions[:stop]:
        if kind == "const":
            where.append(("const", variables))        # (a constant position's delta)
        else:
            root = find(variables[0])
            groups[root][1].append((variables, a, b))
            where.append(("group", root))
    try:
        answers = {root: _answers(_canonical(cons, pos)) for root, (cons, pos) in groups.items()}
    except isl.Error:           # an expression isl cannot read as a constraint
        return None
    if any(not seq[0][0] for seq in answers.values()):
        return False, set()                      # the basic map holds no integer pair
    broken, carried = False, set()
    seen = dict.fromkeys(answers, 0)             # each group's positions passed so far
    for p in range(len(positions)):
        # the differences zero on every position before p: non-empty iff each group's are
        if not all(answers[root][m][0] for root, m in seen.items()):
            return broken, carried
        if p == stop:
            return None                          # two groups meet here: the whole set decides
        kind, value = where[p]
        if kind == "const":
            if value:                             # one difference for every pair
                broken = broken or value < 0
                carried.add(p)
                return broken, carried            # none is zero here
            continue
        _, negative, positive = answers[value][seen[value]]
        broken = broken or negative
        if negative or positive:
            carried.add(p)
        seen[value] += 1
    if all(answers[root][m][0] for root, m in seen.items()):
        broken = True                             # a pair at the same time
    return broken, carried


def _positions(source_loops, source_exprs, sink_loops, sink_exprs):
    """Each time position as ("const", sink - source, None, None) or ("loops", the variables it
    names, the source's expression, the sink's) over variables x0.. (the source's loops) and
    y0.. (the sink's), numbered 0.. and len(source_loops).. ; None where one is neither."""
    source_at = {name: i for i, name in enumerate(source_loops)}
    sink_at = {name: len(source_loops) + j for j, name in enumerate(sink_loops)}
    out = []
    for a, b in zip(source_exprs, sink_exprs):
        names_a = set(_NAME.findall(a)) - _ISL_RESERVED
        names_b = set(_NAME.findall(b)) - _ISL_RESERVED
        if not names_a and not names_b:
            if not (_INT.match(a.strip()) and _INT.match(b.strip())):
                return None
            out.append(("const", int(b) - int(a), None, None))
            continue
        if not (names_a <= source_at.keys() and names_b <= sink_at.keys()):
            return None
        variables = tuple(sorted({source_at[n] for n in names_a} | {sink_at[n] for n in names_b}))
        out.append(("loops", variables, _over(a, source_at, "x"), _over(b, sink_at, "y")))
    return out


def _over(expr: str, at: dict, prefix: str) -> str:
    """`expr` written over the variables x<k> (or y<k>)."""
    return _NAME.sub(lambda m: m.group(0) if m.group(0) in _ISL_RESERVED else f"{prefix}{at[m.group(0)]}", expr)


def _pieces(relation: isl.Map, relation_text: str, source_loops, sink_loops):
    """The relation's basic maps, each as its constraints ((variables, isl text over x<k>,
    y<k>), ...); None where one has existential variables. Remembered by the relation's text."""
    key = (relation_text, source_loops, sink_loops)
    pieces = _PIECES.get(key, _UNSEEN)
    if pieces is _UNSEEN:                       # (None, a relation that does not split, is kept too)
        pieces = _constraints(relation, len(source_loops), len(sink_loops))
        _PIECES.put(key, pieces)
    return pieces


def _constraints(relation: isl.Map, n_in: int, n_out: int):
    if relation.dim(isl.dim_type.in_) != n_in or relation.dim(isl.dim_type.out) != n_out \
            or relation.dim(isl.dim_type.param):
        return None
    pieces = []
    for bmap in relation.get_basic_maps():
        if bmap.dim(isl.dim_type.div):
            return None
        constraints = []
        for c in bmap.get_constraints():
            terms = [(i, f"{v}*x{i}") for i in range(n_in)
                     if (v := c.get_coefficient_val(isl.dim_type.in_, i).to_python())]
            terms += [(n_in + j, f"{v}*y{n_in + j}") for j in range(n_out)
                      if (v := c.get_coefficient_val(isl.dim_type.out, j).to_python())]
            constant = c.get_constant_val().to_python()
            if not terms:
                if (constant != 0) if c.is_equality() else (constant < 0):
                    break                               # a false constraint: no pair
                continue
            text = " + ".join(t for _, t in terms) + f" + {constant}" + (" = 0" if c.is_equality() else " >= 0")
            constraints.append((tuple(v for v, _ in terms), text))
        else:
            pieces.append(tuple(constraints))
    return tuple(pieces)


def _canonical(constraints: list, positions: list) -> tuple:
    """One group's constraints and positions over its own variables v0, v1, ... (in order):
    equal groups of other kernels, or of other tilings, share their answers."""
    variables = sorted({v for vs, _ in constraints for v in vs} | {v for vs, _, _ in positions for v in vs})
    local = {v: f"v{k}" for k, v in enumerate(variables)}

    def renamed(text: str) -> str:
        return _VARIABLE.sub(lambda m: local[int(m.group(1))], text)

    return (len(variables), tuple(renamed(t) for _, t in constraints),
            tuple((renamed(a), renamed(b)) for _, a, b in positions))


def _answers(key: tuple) -> tuple[tuple[bool, bool, bool], ...]:
    """For one group (`key`: its number of variables, constraints, and (source, sink)
    expressions of its positions, outermost first): [(non-empty, negative, positive)] at each
    of its positions m with the two expressions equal at positions 0..m-1, and last
    (non-empty,) with all of them equal. Remembered."""
    found = _ANSWERS.get(key)
    if found is not None:
        return found
    n, constraints, pairs = key
    space = "[" + ", ".join(f"v{k}" for k in range(n)) + "]"
    rest = isl.Set(f"{{ {space} : {' and '.join(constraints) or 'true'} }}")
    if pairs:
        # the differences of the group's positions, one dimension each
        differences = isl.MultiAff(f"{{ {space} -> [{', '.join(f'({b}) - ({a})' for a, b in pairs)}] }}")
        rest = rest.apply(isl.Map.from_multi_aff(differences))
    out = []
    for m in range(len(pairs)):
        if rest.is_empty():
            out.extend([(False, False, False)] * (len(pairs) + 1 - m))
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


_UNSEEN = object()
_PIECES = LRU("poly.separable_pieces", 4096)
_ANSWERS = LRU("poly.separable_answers", 65536)
