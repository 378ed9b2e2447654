"""Work the passes' checks do once, not once per candidate: the small inlines are checked
together (one at a time only when that check fails), and the original program is run once
for a series of equivalence checks against it."""
from autocomp_jupyter import interp, verify
from autocomp_jupyter.accel.cost import naive_schedule
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import Equivalence, equivalent
from autocomp_jupyter.passes import PassContext
from autocomp_jupyter.pipeline import baseline_plan
from autocomp_jupyter.rules.engine import load_rules
from autocomp_jupyter.rules.fusion import fusion_pass

THREE_INLINES = """input A: f32[4, 8]
param b: f32[8]
param d: f32[8]
param e: f32[8]
c[j] = exp(b[j])
f[j] = sigmoid(d[j])
g[j] = relu(e[j])
D[i, j] = A[i, j] * c[j]
E[i, j] = D[i, j] + f[j]
F[i, j] = E[i, j] * g[j]
"""


def _fusion(equivalence):
    program = parse(THREE_INLINES, "<test>")
    target = load_target("tpu")
    ctx = PassContext(program, target, load_rules([], target.name), 0, equivalence=equivalence)
    return fusion_pass(baseline_plan(program, target, naive_schedule, "naive"), ctx)


def _inlines(outcome):
    return [(e["ops"][0], e["applied"]) for e in outcome.log if e["rule"] == "inline"]


def test_the_small_inlines_are_checked_in_one_run():
    calls = []

    def counted(original, candidate, seed=0):
        calls.append({op.name for op in candidate.ops})
        return equivalent(original, candidate, seed=seed)

    outcome = _fusion(counted)
    assert _inlines(outcome) == [("c", True), ("f", True), ("g", True)]
    assert calls[0] == {"D", "E", "F"}            # the three inlined at once, one check
    assert len([c for c in calls if not c & {"c", "f", "g"}]) == 1
    assert {op.name for op in outcome.plan.program.ops} == {"D", "E", "F"}


def test_an_inline_that_fails_its_check_is_found_one_by_one():
    def refuses_f_inlined(original, candidate, seed=0):
        if "f" not in {op.name for op in candidate.ops}:
            return Equivalence(False, 1.0, "F", "output 'F' differs")
        return equivalent(original, candidate, seed=seed)

    outcome = _fusion(refuses_f_inlined)
    # each decided on its own, on the program the ones before it left ('E' then qualifies too)
    assert _inlines(outcome) == [("c", True), ("f", False), ("g", True), ("E", True)]
    assert [op.name for op in outcome.plan.program.ops] == ["f", "D", "F"]
    assert any(r["kernel"] == "f" and "inline of 'f'" in r["reason"] for r in outcome.rollbacks)


def test_the_original_is_run_once_for_a_series_of_checks(monkeypatch):
    original = parse(THREE_INLINES, "<test>")
    same = parse(THREE_INLINES, "<test>")
    changed = parse(THREE_INLINES.replace("exp(b[j])", "exp(b[j]) + 1.0"), "<test>")
    runs = []
    real_statement = interp.run_statement
    monkeypatch.setattr(interp, "run_statement", lambda st, *a, **k: runs.append(st.target) or real_statement(st, *a, **k))
    assert verify.equivalent_at_scale(original, same)
    assert sorted(runs) == sorted(st.target for st in original.statements)   # the original once; `same` shares it all
    verdict = verify.equivalent_at_scale(original, changed)
    assert not verdict and "output 'F' differs" in verdict.reason
    assert runs[6:] == ["c", "D", "E", "F"]       # only the changed statement and what reads it again
    assert verify.equivalent_at_scale(original, changed, seed=1).ok is False
    assert len(runs[10:]) == 6 + 4                # another seed: other inputs, both run again


def test_a_replay_of_the_inlines_is_done_once_per_program_and_rewrite(monkeypatch):
    from autocomp_jupyter.rules import fusion

    program = parse(THREE_INLINES, "<test>")
    fused = _fusion(equivalent).plan.program                   # c, f and g inlined
    replays = []
    real = fusion._replay
    monkeypatch.setattr(fusion, "_replay", lambda *a: replays.append(a) or real(*a))
    first = fusion.replay_inlines(program, fused)
    assert [op.name for op in first.ops] == ["D", "E", "F"]
    assert fusion.replay_inlines(program, fused) is first and len(replays) == 1
    kept = fusion.replay_inlines(program, fused, keep={"f"})   # another rewrite: replayed again
    assert [op.name for op in kept.ops] == ["f", "D", "E", "F"] and len(replays) == 2


ATTENTION = """input Q: f32[2, 48, 16]
input K: f32[2, 40, 16]
input V: f32[2, 40, 8]
S[h, i, j] += Q[h, i, d] * K[h, j, d]
M[h, i] max= S[h, i, j]
E[h, i, j] = exp(S[h, i, j] * 0.25 - M[h, i] * 0.25)
Z[h, i] += E[h, i, j]
P[h, i, j] = E[h, i, j] / Z[h, i]
O[h, i, e] += P[h, i, j] * V[h, j, e]
output O
"""


def test_a_rewrite_is_replayed_on_the_twin_once(monkeypatch):
    from autocomp_jupyter.rules.online_softmax import online_softmax

    program = parse(ATTENTION, "<test>")
    rewritten, _ = online_softmax(program, [op.name for op in program.ops])
    assert rewritten.rewrites
    monkeypatch.setattr(verify, "EQUIVALENCE_POINTS", 0)          # large: checked on the scaled twin
    replays = []
    real = verify._REPLAYS["online_softmax"]
    monkeypatch.setitem(verify._REPLAYS, "online_softmax", lambda p, ops: replays.append(ops) or real(p, ops))
    runs = []                                          # the extent of each statement's result run
    real_statement = interp.run_statement
    monkeypatch.setattr(interp, "run_statement", lambda st, env, tensor, *a, **k:
                        runs.append(max(tensor.shape[1:], default=0)) or real_statement(st, env, tensor, *a, **k))
    assert verify.equivalent_at_scale(program, rewritten)
    assert verify.equivalent_at_scale(program, rewritten)
    assert len(replays) == 1
    assert runs and max(runs) < 40                     # only the twin ran, never the full size


def test_an_online_softmax_is_checked_on_its_ops_when_the_programs_twin_is_not_small(monkeypatch):
    from autocomp_jupyter.rules import chains
    from autocomp_jupyter.rules.online_softmax import online_softmax

    program = parse(ATTENTION, "<test>")
    ops = [op.name for op in program.ops]
    rewritten, _ = online_softmax(program, ops)
    full = sum(st.box_points for st in program.statements)
    monkeypatch.setattr(verify, "EQUIVALENCE_POINTS", 0)
    assert 0 < verify.scaled_points(program) < full                 # the source's twin: smaller, not nothing

    class NoWholeProgramRuns:
        seed = 0

        def verify(self, candidate):
            raise AssertionError("the whole program was run")

    monkeypatch.setattr(chains, "EQUIVALENCE_POINTS", verify.scaled_points(program) - 1)   # the twin too large
    assert chains._rewrite_verdict(program, ops, rewritten, NoWholeProgramRuns())


INLINE_INTO_A_MATMUL = """input A: f32[64, 48]
param W: f32[48, 40]
B[i, k] = A[i, k] * 0.5
C[i, j] += B[i, k] * W[k, j]
D[i, j] = max(C[i, j], 0.0)
"""


def test_a_large_programs_rewrite_is_checked_on_a_twin_of_the_ops_it_changed(monkeypatch):
    """A large program whose own twin does not build small (an imported model's literal
    reshapes): an inline is checked on a twin of the ops it changed alone, never the whole
    program at full size; a change no rewrite explains is checked at full size and found."""
    from autocomp_jupyter.rules.fusion import inline

    program = parse(INLINE_INTO_A_MATMUL, "<test>")
    inlined = inline(program, program.producer("B"))
    assert [op.name for op in inlined.ops] == ["C", "D"]
    monkeypatch.setattr(verify, "EQUIVALENCE_POINTS", 0)                     # large ...
    monkeypatch.setattr(verify, "_scaled_source", lambda p: None)             # ... with no twin of its own
    runs = []                                          # (tensor, its largest dimension) of each statement run
    real_statement = interp.run_statement
    monkeypatch.setattr(interp, "run_statement", lambda st, env, tensor, *a, **k:
                        runs.append((st.target, max(tensor.shape))) or real_statement(st, env, tensor, *a, **k))
    assert verify.equivalent_at_scale(program, inlined)
    assert runs and {t for t, _ in runs} <= {"B", "C"} and max(n for _, n in runs) <= verify.TWIN_EXTENT
    scaled = parse(INLINE_INTO_A_MATMUL.replace("max(C[i, j], 0.0)", "max(C[i, j], 0.0) * 2.0"), "<test>")
    runs.clear()
    verdict = verify.equivalent_at_scale(program, scaled)
    assert not verdict and "D" in verdict.reason
    assert ("D", 64) in runs                           # the whole program, at full size
