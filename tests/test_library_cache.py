"""What makes whole networks fast without changing their results: the library baseline
shared by kernel structure, the tuner's predicted legality, the tiling search's shared
draws and the scheduling pass's batched scoring. Each cache or shortcut is checked against
the uncached answer, and the library stays an honest baseline."""
from __future__ import annotations

import numpy as np
import pytest

from autocomp_jupyter.schedule import by_position
from autocomp_jupyter import baselines, caches, canon, optimize, poly, tune
from autocomp_jupyter.accel.cost import evaluate, library_schedule, naive_schedule, textbook_schedule
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, kernels_unfused
from autocomp_jupyter.passes import PassContext
from autocomp_jupyter.rules import scheduling, tiling
from autocomp_jupyter.rules.engine import load_rules

# Two convolutions of the same shapes under different names (a repeated layer), and a third
# of other shapes.
TWO_CONVS = """input X: f32[1, 8, 10, 10]
param W1: f32[8, 8, 3, 3]
param W2: f32[8, 8, 3, 3]
param W3: f32[4, 8, 1, 1]
Q = relu(X)
A = conv2d(Q, W1, stride=1, padding=1)
R = relu(A)
B = conv2d(R, W2, stride=1, padding=1)
S = relu(B)
C = conv2d(S, W3, stride=1, padding=0)
output C
"""


def test_kernels_equal_up_to_names_share_one_library_result_and_both_verify():
    program = parse(TWO_CONVS, "<test>")
    target = load_target("tpu")
    ctx = PassContext(program, target, load_rules([], target.name), 0)
    caches.clear_all()
    plan = baselines.library_plan(program, ctx)
    stats = caches.stats()["library_schedule"]
    kernels = {k.name: (k, s) for k, s in zip(plan.kernels, plan.schedules)}
    a, b = kernels["A"], kernels["B"]
    assert canon.canonical_kernel(a[0]) is canon.canonical_kernel(b[0])
    # six ops, fewer structures: A and B share one tuning (so do the relus R and S)
    assert stats["misses"] == len({canon.canonical_kernel(k) for k in plan.kernels}) < len(plan.kernels)
    assert by_position(a[1]) == by_position(b[1])
    assert evaluate(a[1], target).time_s == evaluate(b[1], target).time_s
    assert a[1].kernel.name == "A" and b[1].kernel.name == "B"       # each in its own names
    res = optimize(program, target="tpu", tune=0)
    assert res.report["verified"] is True
    assert res.report["library"]["time_s"] == pytest.approx(sum(evaluate(s, target).time_s for s in plan.schedules))


@pytest.mark.parametrize("target_name", ["tpu", "gpu", "host"])
def test_library_never_slower_than_naive_or_textbook_per_kernel(target_name):
    program = parse(TWO_CONVS, "<test>")
    target = load_target(target_name)
    ctx = PassContext(program, target, load_rules([], target.name), 0)
    plan = baselines.library_plan(program, ctx)
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        t = evaluate(schedule, target).time_s
        assert t <= evaluate(naive_schedule(kernel, target), target).time_s * (1 + 1e-12)
        assert t <= evaluate(textbook_schedule(kernel, target), target).time_s * (1 + 1e-12)
        assert poly.check_schedule(schedule).ok


GEMM = "input A: f32[96, 80]\ninput B: f32[80, 72]\nC = matmul(A, B)\nD = relu(C)\n"


def _search(monkeypatch, predict: bool, configs: int = 200):
    program = parse(GEMM, "<test>")
    target = load_target("npu")
    kernel = Kernel.from_ops(program, ["C", "D"])
    monkeypatch.setattr(tune.legality, "PREDICT_LEGALITY", predict)   # the switch the searches read
    tune._LEGALITY_CACHE.clear()
    asked = []
    real = tune._Legality.verdict

    def counting(self, tiles, orders):
        before = len(self.asked)
        found = real(self, tiles, orders)
        if len(self.asked) > before:
            asked.append(found)
        return found

    monkeypatch.setattr(tune._Legality, "verdict", counting)
    t, best, evaluated = tune.search_kernel(library_schedule(kernel, target), target, configs, seed=3)
    return t, best, evaluated, len(asked)


def test_predicted_legality_gives_the_checked_search_with_fewer_checks(monkeypatch):
    """On a kernel whose nests all have one verdict, predicting it changes nothing but the
    number of poly checks: the same candidates, the same best schedule."""
    t1, best1, n1, checks1 = _search(monkeypatch, predict=False)
    t2, best2, n2, checks2 = _search(monkeypatch, predict=True)
    assert (t2, n2) == (t1, n1)
    assert best2.tiles == best1.tiles and best2.order == best1.order and best2.annotations == best1.annotations
    assert checks2 < checks1 / 2, (checks1, checks2)
    assert poly.check_schedule(best2).ok


def test_a_failed_prediction_ends_prediction_and_never_yields_an_illegal_result(monkeypatch):
    """An oracle under which orders starting with loop k are illegal (unlike the nests
    the search confirmed first): the search stops predicting, and no result breaks it."""
    program = parse(GEMM, "<test>")
    target = load_target("npu")
    kernel = Kernel.from_ops(program, ["C", "D"])
    real = poly.check_schedule

    def k_first_illegal(schedule):
        if schedule.order_at(schedule.levels[0])[0] == "k":
            return poly.Legality(False, (poly.Violation("flow", "S0", "S1", "C", message="k first (test oracle)"),))
        return real(schedule)

    monkeypatch.setattr(poly, "check_schedule", k_first_illegal)
    tune._LEGALITY_CACHE.clear()
    ended = []
    original = tune._Legality.verdict

    def watch(self, tiles, orders):
        found = original(self, tiles, orders)
        if not self.predicting:
            ended.append(True)
        return found

    monkeypatch.setattr(tune._Legality, "verdict", watch)
    for seed in range(4):
        t, best, _ = tune.search_kernel(library_schedule(kernel, target), target, 300, seed=seed)
        assert best.order_at(best.levels[0])[0] != "k"
        assert k_first_illegal(best).ok
    assert ended, "no search met an order the oracle refuses"
    tune._LEGALITY_CACHE.clear()


def test_tiling_searches_from_different_schedules_share_draws_but_not_answers():
    program = parse(TWO_CONVS, "<test>")
    target = load_target("gpu")
    rules = load_rules([], target.name)
    levels = tiling.level_mapping(rules.tiling.get("levels", ["L2", "L1", "vector"]), target.tiling_levels)
    kernel = kernels_unfused(program)[0]
    first = textbook_schedule(kernel, target)
    cold = {}
    for current in (first, naive_schedule(kernel, target)):
        caches.clear_all()
        cold[id(current)] = tiling.search_tiles(kernel, target, current, levels, rules.tiling)
    caches.clear_all()
    warm = [tiling.search_tiles(kernel, target, c, levels, rules.tiling)
            for c in (first, naive_schedule(kernel, target))]
    stats = caches.stats()["tiling.random_draw"]
    assert (stats["misses"], stats["hits"]) == (1, 1)
    got = [(w[0].tiles, w[0].order, w[2]) for w in warm]
    want = [(c[0].tiles, c[0].order, c[2]) for c in cold.values()]
    assert got == want


def test_interchange_candidates_scored_in_one_batch_get_their_own_times():
    program = parse(TWO_CONVS, "<test>")
    rng = np.random.default_rng(0)
    for name in ("tpu", "host"):
        target = load_target(name)
        ctx = PassContext(program, target, load_rules([], name), 0)
        for kernel in kernels_unfused(program):
            base = textbook_schedule(kernel, target)
            candidates = []
            for level in base.levels:
                order = list(base.order_at(level))
                rng.shuffle(order)
                candidates.append(scheduling._with_order(base, level, tuple(order)))
            caches.clear_all()
            assert scheduling._times(candidates, ctx) == [evaluate(c, target).time_s for c in candidates]


def test_kernels_and_targets_hash_once_and_hash_again_in_another_process():
    """A kernel's and a target's hash is computed once and kept (every cache keys on them);
    it equals a freshly built equal object's, and pickling drops it (string hashes differ
    between processes: an executor's worker hashes again)."""
    import pickle

    program = parse("input X: f32[8, 8]\nparam W: f32[8, 8]\nY = matmul(X, W)\n")
    kernel = kernels_unfused(program)[0]
    twin = kernels_unfused(parse("input X: f32[8, 8]\nparam W: f32[8, 8]\nY = matmul(X, W)\n"))[0]
    target = load_target("npu")
    for obj, equal in ((kernel, twin), (target, load_target("npu"))):
        assert hash(obj) == hash(equal) and obj == equal
        assert obj.__dict__["_hash"] == hash(obj)
        again = pickle.loads(pickle.dumps(obj))
        assert "_hash" not in again.__dict__ and again == obj and hash(again) == hash(obj)
