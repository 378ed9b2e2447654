"""Statements over domains cut by affine relations (`where t <= s`) and indices read as
values: parsing and errors, the interpreter against numpy, isl's view of the domain, the
generated C, and a property test against numpy's masked reductions."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autocomp_jupyter as autocomp
from autocomp_jupyter import interp
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.host import measure_plan
from autocomp_jupyter.ir.program import Affine, domain_points, relation_text
from autocomp_jupyter.poly import kernel_polyhedra

CAUSAL = """
input Q: f32[2, 12, 8]
input K: f32[2, 12, 8]
input V: f32[2, 12, 8]
S[h, s, t] += Q[h, s, d] * K[h, t, d] * 0.35 where t <= s
M[h, s] max= S[h, s, t] where t <= s
E[h, s, t] = exp(S[h, s, t] - M[h, s]) where t <= s
Z[h, s] += E[h, s, t]
O[h, s, d] += E[h, s, t] * V[h, t, d] where t <= s
Y[h, s, d] = O[h, s, d] / Z[h, s]
output Y
"""


def causal_attention(q, k, v, scale=0.35):
    scores = np.einsum("hsd,htd->hst", q, k) * scale
    n = q.shape[1]
    scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("hst,htd->hsd", p / p.sum(-1, keepdims=True), v)


def test_relations_become_the_statements_domain():
    p = parse(CAUSAL)
    s = p.statements[0]
    assert s.domain == (Affine.of({"s": 1, "t": -1}),)
    assert "where t <= s" in str(s)
    assert s.points == 2 * (12 * 13 // 2) * 8            # the triangle, not the box
    assert s.box_points == 2 * 12 * 12 * 8
    assert p.statements[3].domain == ()                   # Z sums E, which is 0 outside
    eq = parse("input X: f32[6, 6]\nY[s, t] = X[s, t] where t < s + 1, s == t + 0, t >= 1\n").statements[0]
    assert [relation_text(a) for a in eq.domain] == ["t <= s", "s <= t", "t >= 1"]
    assert eq.points == 5                                 # the diagonal without (0, 0)


def test_the_interpreter_reduces_over_the_domain_only():
    p = parse(CAUSAL)
    env = interp.run(p)
    np.testing.assert_allclose(env["Y"], causal_attention(env["Q"], env["K"], env["V"]), rtol=1e-5, atol=1e-6)
    # an '=' statement's element outside its domain is 0; a max over nothing is -inf
    assert env["E"][0, 0, 1] == 0.0
    q = parse("input X: f32[4, 5]\nM[s] max= X[s, t] where t < s\n")
    m = interp.run(q)["M"]
    assert m[0] == -np.inf and m[3] == q_max(interp.run(q)["X"][3, :3])


def q_max(row):
    return row.max()


def test_indices_are_values():
    p = parse("tensor W: f32[5, 4]\nW[s, t] = select(less_equal(t, s), t * 0.5 + s, 0 - 1)\n")
    w = interp.run(p)["W"]
    s, t = np.meshgrid(np.arange(5), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(w, np.where(t <= s, t * 0.5 + s, -1.0))


def test_a_declared_shape_reads_a_sub_range():
    p = parse("input Q: f32[8, 64]\ntensor A: f32[8, 32]\ntensor B: f32[8, 32]\n"
              "A[s, e] = Q[s, e + 32]\nB[s, e] = Q[s, e]\n")
    env = interp.run(p)
    np.testing.assert_array_equal(env["A"], env["Q"][:, 32:])
    np.testing.assert_array_equal(env["B"], env["Q"][:, :32])


@pytest.mark.parametrize("line, message, column", [
    ("Y[s, t] = X[s, t] where t * s <= 3", "a 'where' relation is not affine", 27),
    ("Y[s, t] = X[s, t] where t <= q", "'where' relation names 'q', which is not an index", 25),
    ("Y[s, t] = X[s, t] where t <= X", "tensor 'X' used as an index", 30),
    ("Y[s, t] = X[s, t] where t", "expected a comparison (<, <=, >, >=, ==)", 26),
    ("Y[s, t] = X[s, t] + u", "unknown name 'u'", 21),
])
def test_bad_relations_and_index_values_are_errors_at_their_place(line, message, column):
    with pytest.raises(UserError) as err:
        parse("input X: f32[8, 8]\n" + line + "\n")
    d = err.value.diagnostics[0]
    assert message in d.message and (d.line, d.col) == (2, column)


def test_isl_sees_the_triangle():
    s = parse(CAUSAL).statements[0]
    points = []
    kernel_polyhedra([s]).domain.foreach_point(lambda p: points.append(p))
    assert len(points) == s.points


@pytest.mark.parametrize("target", ["host", "npu"])
def test_causal_attention_optimises_verified(target):
    res = autocomp.optimize(CAUSAL, target=target, tune=0)
    assert res.report["verified"]
    if target == "host":                 # the C, empty tiles skipped, matches the interpreter
        assert "meets the domain" in res.code("c")
        measured = measure_plan(res.after, load_target("host"), repeats=0, threads=1)
        assert measured["matches_interpreter"], measured["reason"]


def test_empty_tiles_cost_nothing():
    """The model skips the tiles a causal domain leaves empty: causal attention costs about
    half the unmasked one; the limit counts the triangle's points."""
    full = "\n".join(line.split(" where")[0] for line in CAUSAL.strip().splitlines())
    big = {"12": "512", "8]": "64]", "[2,": "[4,"}
    def sized(src):
        for a, b in big.items():
            src = src.replace(a, b)
        return src
    causal = autocomp.optimize(sized(CAUSAL), target="npu", tune=0).report
    unmasked = autocomp.optimize(sized(full), target="npu", tune=0).report
    assert causal["verified"] and unmasked["verified"]
    assert causal["optimized"]["time_s"] < 0.7 * unmasked["optimized"]["time_s"]
    assert 0.5 < causal["limit_fraction"] <= 1.0


relation_terms = st.dictionaries(st.sampled_from("ijk"), st.integers(-2, 2), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(extents=st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5)),
       relations=st.lists(st.tuples(relation_terms, st.integers(-4, 4)), min_size=1, max_size=3),
       reduce=st.sampled_from(["+=", "max=", "="]))
def test_random_domains_reduce_as_numpy_masked_reductions(extents, relations, reduce):
    constraints = []
    for terms, const in relations:
        if not any(terms.values()):
            continue
        constraints.append(Affine.of(terms, const))
    if not constraints:
        return
    where = ", ".join(f"0 <= {a}" for a in constraints)
    lhs = "Y[i, j, k]" if reduce == "=" else "Y[i]"
    src = f"input X: f32[{extents[0]}, {extents[1]}, {extents[2]}]\n{lhs} {reduce} X[i, j, k] * 2 where {where}\n"
    p = parse(src)
    env = interp.run(p)
    x = env["X"] * 2
    i, j, k = np.meshgrid(*[np.arange(e) for e in extents], indexing="ij")
    mask = np.ones(extents, bool)
    for a in constraints:
        mask &= a.evaluate({"i": i, "j": j, "k": k}) >= 0
    if reduce == "+=":
        expected = np.where(mask, x, 0).sum(axis=(1, 2))
    elif reduce == "max=":
        expected = np.where(mask, x, -np.inf).max(axis=(1, 2))
    else:
        expected = np.where(mask, x, 0)
    np.testing.assert_allclose(env["Y"], interp.round_to_dtype(expected, "f32"), rtol=1e-6)
    brute = sum(all(a.evaluate(dict(zip("ijk", pt))) >= 0 for a in constraints)
                for pt in itertools.product(*[range(e) for e in extents]))
    assert p.statements[0].points == brute == domain_points(dict(zip("ijk", extents)), tuple(constraints))


def test_the_simulator_agrees_with_the_model_on_a_causal_kernel():
    """Both skip the tiles the domain leaves empty; the simulator charges the model's datapath
    traffic per point of the tiles it walks (not of the domain: that would count the cut twice)."""
    from autocomp_jupyter.accel.sim import compare

    src = CAUSAL.replace("12", "256").replace("8]", "64]")
    res = autocomp.optimize(src, target="npu", tune=0)
    for schedule in res.after.schedules:
        assert compare(schedule, res.target)["time_error"] < 0.10     # the simulator's stated tolerance (test_sim)


def test_a_tile_on_the_diagonal_runs_only_the_passes_that_meet_the_domain():
    """Counted exactly per tile (what the simulator replays), and over the run by the pass's
    sizes (what the model charges): the same number when the tiles hold whole passes."""
    from autocomp_jupyter.accel.cost.domain import TileDomain

    s, t = 0, 1
    domain = TileDomain([(np.array([1.0, -1.0]), 0.0), (np.array([0.0, 1.0]), -3.0)], np.array([40, 40]))  # 3 <= t <= s
    unit = (1, 8)
    for box in [((8, 16), (16, 16)), ((0, 8), (0, 40)), ((30, 10), (5, 11)), ((16, 8), (0, 16))]:
        brute = sum(domain.meets([(s0, 1), (t0, min(8, box[t][0] + box[t][1] - t0))])
                    for s0 in range(box[s][0], box[s][0] + box[s][1])
                    for t0 in range(box[t][0], box[t][0] + box[t][1], 8))
        assert domain.passes_meeting(box, unit) == brute
    # over the run: the non-empty 16 x 16 tiles' passes that meet it, per pass of the whole box
    tiles = [((a, 16), (b, 16)) for a in range(0, 32, 16) for b in range(0, 32, 16)]
    inside = TileDomain(domain.relations, np.array([32, 32]))
    met = sum(inside.passes_meeting(box, unit) for box in tiles if inside.meets(box))
    assert inside.kept_at(np.array([unit]))[0] == met / (32 * 4) < inside.kept_fraction((16, 16))


def test_the_diagonal_tiles_of_causal_attention_cost_their_passes_not_their_boxes():
    """The softmax's max reads each score of a pass that meets the triangle once, whatever the
    query tile (a tile on the diagonal skips its rows above it); the simulator agrees."""
    from autocomp_jupyter.accel.cost import kernel_model
    from autocomp_jupyter.accel.sim import compare
    from autocomp_jupyter.ir.schedule import Kernel, Schedule
    from autocomp_jupyter.rules.online_softmax import online_softmax

    program = parse(CAUSAL.replace("[2, 12, 8]", "[1, 256, 64]"))
    rewritten, anchor = online_softmax(program, [op.name for op in program.ops])
    kernel = Kernel.from_ops(rewritten, [op.name for op in rewritten.ops], anchor=anchor)
    target = load_target("gemmini")
    kernel = kernel.with_compute_at("S", "t", "scratchpad")
    levels = target.tiling_levels
    names = [st.target for st in kernel.statements]
    passes = 16 * sum(range(1, 17))           # (query row, 16 keys) passes meeting t <= s
    for queries in (32, 128):
        tiles = {"h": (1, 1), "s": (128, queries), "d": (64, 64), "t": (16, 16)}
        schedule = Schedule(kernel, tiles={l: dict(zip(levels, sz)) for l, sz in tiles.items()},
                            order={lv: tuple(o) for lv, o in zip(levels, ("hstd", "hdst"))}, levels=levels)
        model = kernel_model(kernel, target)
        cost = model.evaluate_batch(*model.normalise(*model.schedule_arrays(schedule)))
        scratchpad = list(model.level_names).index("scratchpad")
        assert cost.datapath_bytes[0, names.index("M"), scratchpad] == pytest.approx(passes * 16 * 4)
        check = compare(schedule, target)        # the operands streamed on chip: the same bytes
        # ... up to the S producer's own tiles, which its own search picks: where they do not
        # divide the triangle's extent (86 of 256 rows), the model counts a run's mean kept
        # fraction and the simulator each ragged tile's passes (1.4% apart)
        for level in ("scratchpad", "accumulator"):
            assert check["sim_bytes"][level] == pytest.approx(check["model_bytes"][level], rel=0.02)
        assert check["time_error"] < 0.05
