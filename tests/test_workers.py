"""The spare cores (autocomp_jupyter/workers.py): searches run there give what a serial
run gives, and a call that cannot run there runs here."""
import re
from pathlib import Path

import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import baselines, caches, workers
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import kernels_unfused
from autocomp_jupyter.passes import PassContext
from autocomp_jupyter.pipeline import load_rules

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "depthwise_separable.acir"


@pytest.fixture
def one_worker(monkeypatch):
    monkeypatch.setenv("AUTOCOMP_WORKERS", "1")
    monkeypatch.setattr(workers, "spare_cores", lambda: 1)   # a worker even on a one-core machine
    workers.shutdown()
    yield
    workers.shutdown()


def _outcome(report: dict) -> tuple:
    return (report["verified"], report["speedup_vs_library"], report["limit_fraction"],
            [(k["name"], k.get("tiles"), k.get("order")) for k in report["kernels"]])


def _serially(source: str, monkeypatch) -> dict:
    """The report of `source` on npu optimised with no spare core, from cold caches."""
    caches.clear_all()
    with monkeypatch.context() as serial:
        serial.setattr(workers, "spare_cores", lambda: 0)
        return autocomp.optimize(source, target="npu", tune=0).report


def test_searches_on_a_spare_core_give_what_a_serial_run_gives(one_worker, monkeypatch):
    source = EXAMPLE.read_text()
    alone = _serially(source, monkeypatch)
    sent = []
    submit = workers.submit
    monkeypatch.setattr(workers, "submit", lambda fn, *a: sent.append(a[0].__name__) or submit(fn, *a))
    caches.clear_all()
    side_by_side = autocomp.optimize(source, target="npu", tune=0).report
    assert {"_tune_alone_task", "_search"} <= set(sent), sent      # library and tile searches went there
    assert not side_by_side["rollbacks"]
    assert workers._POOL is not None
    assert _outcome(side_by_side) == _outcome(alone)


def test_a_call_that_cannot_be_sent_runs_here(one_worker):
    local = lambda: 1          # noqa: E731 - a local function cannot be pickled to a worker
    future = workers.submit(local)
    assert future is not None
    assert workers.result(future, lambda: 2) == 2
    assert workers.pool() is not None      # the pool survives a call it could not take


def test_library_schedules_matches_library_schedule_kernel_by_kernel(one_worker):
    program = parse(EXAMPLE.read_text(), "<example>")
    target = load_target("tpu")
    ctx = PassContext(program, target, load_rules([], target.name), 0)
    kernels = kernels_unfused(program)
    caches.clear_all()
    together = baselines.library_schedules(program, kernels, ctx)
    caches.clear_all()
    one_by_one = [baselines.library_schedule(program, k, ctx) for k in kernels]
    assert together == one_by_one


def test_a_bad_worker_count_is_a_clear_error_before_any_work(monkeypatch):
    monkeypatch.setenv("AUTOCOMP_WORKERS", "two")
    with pytest.raises(autocomp.UserError, match="AUTOCOMP_WORKERS='two': expected"):
        autocomp.optimize(EXAMPLE.read_text(), target="npu", tune=0)


def test_a_daemonic_process_searches_alone():
    """A Dask worker is daemonic and may not have children: its searches run in it."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    answer = context.Queue()

    def ask():
        workers._POOL, workers._BROKEN = None, False
        answer.put(workers.pool() is None and workers.submit(sum, [1, 2]) is None)

    child = context.Process(target=ask, daemon=True)
    child.start()
    child.join(30)
    assert answer.get(timeout=5) is True


def test_a_notebook_kernel_uses_the_spare_cores(tmp_path, monkeypatch):
    """In a notebook kernel (threads serving its channels) the workers fork, search and stay
    quiet; the cell's result verifies."""
    from test_magics import kernel_imports_this_checkout

    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    kernel_imports_this_checkout(monkeypatch)
    monkeypatch.delenv("AUTOCOMP_WORKERS", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext autocomp_jupyter\nfrom autocomp_jupyter import workers\n"
                                          "workers.spare_cores = lambda: 1"),
                nbformat.v4.new_code_cell("%%autocomp --target npu --tune 0 --out res\n" + EXAMPLE.read_text()),
                nbformat.v4.new_code_cell("print(res.report['verified'], workers._POOL is not None)")]
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", shutdown_kernel="immediate",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    assert nb.cells[2].outputs[0]["text"].split() == ["True", "True"]
    assert not [o for o in nb.cells[1].outputs if o.get("name") == "stderr"]


def test_a_search_on_a_spare_core_leaves_its_draw_here(one_worker):
    """A tile search's random draw comes back with its result: the next search of that
    structure here (from another schedule) does not draw again."""
    from autocomp_jupyter.accel import tile_search

    program = parse(EXAMPLE.read_text(), "<example>")
    target = load_target("npu")
    levels = tile_search.level_mapping(["L2", "L1", "vector"], target.tiling_levels)
    kernels = [k for k in kernels_unfused(program) if len(k.loop_names) > 3][:2]
    caches.clear_all()
    tile_search.search_all([(k, None) for k in kernels], target, levels, {}, seed=0)
    draws = caches.named("tiling.random_draw")
    assert len(draws) == 2 and draws.misses == 1       # one drawn here, one there and sent back
    from autocomp_jupyter.accel.cost import naive_schedule

    for kernel in kernels:          # from another schedule: a search of its own, the same draw
        tile_search.search_tiles(kernel, target, naive_schedule(kernel, target), levels, {}, seed=0)
    assert draws.misses == 1 and draws.hits == 2


def _separable_blocks(blocks: int) -> str:
    """`blocks` depthwise-separable blocks in a row: a plan of 2 x `blocks` kernels whose
    depthwise and pointwise convolutions chain."""
    lines = ["input  X0: f32[1, 16, 8, 8]"]
    for b in range(blocks):
        lines += [f"param  Wd{b}: f32[16, 1, 3, 3]", f"param  Wp{b}: f32[16, 16, 1, 1]",
                  f"D{b} = depthwise_conv2d(X{b}, Wd{b}, stride=1, padding=1)", f"A{b} = relu6(D{b})",
                  f"P{b} = conv2d(A{b}, Wp{b})", f"X{b + 1} = relu6(P{b})"]
    return "\n".join(lines + [f"output X{blocks}"]) + "\n"


def test_the_chain_walk_shared_with_a_spare_core_gives_the_serial_walk(one_worker, monkeypatch):
    """The chain pass gives a spare core segments of the plan's walk from the back while this
    process walks from the front; where this process reaches a kernel a segment's walk
    started a step at, it takes that walk's steps, and the plan, log and rollbacks are the
    serial walk's."""
    from autocomp_jupyter.rules import chains

    monkeypatch.setattr(chains, "SPLIT_KERNELS", 4)     # share the walk of a plan of 8 kernels ...
    monkeypatch.setattr(chains, "MAX_CHAIN", 2)         # ... in 4 segments of two kernels, each one chain
    source = _separable_blocks(4)
    alone = _serially(source, monkeypatch)
    walked = []
    value_carried = workers.value_carried
    monkeypatch.setattr(workers, "value_carried", lambda future, fallback: walked.append(
        value_carried(future, lambda: None)) or walked[-1] or fallback())
    taken = []
    steps_at = chains._Shared.steps_at
    monkeypatch.setattr(chains._Shared, "steps_at", lambda self, at: taken.append((at, steps_at(self, at))) or
                        taken[-1][1])
    caches.clear_all()
    shared = autocomp.optimize(source, target="npu", tune=0).report
    assert [[s.at for s in w] for w in walked if w] and [6] in [[s.at for s in w] for w in walked if w]  # walked there
    # ... and taken here: this process lands on kernel 6, the first of the last segment, given first
    assert [6] in [[s.at for s in steps] for at, steps in taken if steps]
    fused = [e["ops"] for e in alone["rules"] if e["applied"] and "kernels in one" in e["why"]]
    assert len(fused) == 4                                           # every pair chains, in both runs
    assert _outcome(shared) == _outcome(alone)
    assert _untimed(shared["rules"]) == _untimed(alone["rules"]) and shared["rollbacks"] == alone["rollbacks"]


def _untimed(entries: list[dict]) -> list[dict]:
    """The log without the seconds a search took ('... candidates in 0.06 s')."""
    return [dict(e, why=re.sub(r" in [0-9.]+ s", "", e["why"])) for e in entries]


def _attention_blocks(blocks: int, tokens: int = 64) -> str:
    """`blocks` attentions in a row, each written as comprehensions (six kernels: scores, max,
    exp, sum, probabilities, weighted sum), the next one's queries the last one's output."""
    lines = [f"input Q0: f32[1, {tokens}, 16]", f"input K: f32[1, {tokens}, 16]", f"input V: f32[1, {tokens}, 16]"]
    for b in range(blocks):
        lines += [f"S{b}[h, i, j] += Q{b}[h, i, d] * K[h, j, d]", f"M{b}[h, i] max= S{b}[h, i, j]",
                  f"E{b}[h, i, j] = exp(S{b}[h, i, j] * 0.25 - M{b}[h, i] * 0.25)", f"Z{b}[h, i] += E{b}[h, i, j]",
                  f"P{b}[h, i, j] = E{b}[h, i, j] / Z{b}[h, i]", f"Q{b + 1}[h, i, e] += P{b}[h, i, j] * V[h, j, e]"]
    return "\n".join(lines + [f"output Q{blocks}"]) + "\n"


def test_a_shared_walk_takes_a_segments_online_softmax_rewrite_as_the_serial_walk_makes_it(one_worker, monkeypatch,
                                                                                         tmp_path):
    """An online-softmax chain rewrites the program. The spare core's segment rewrote the
    program as it had it (the second attention's chain); this process, which rewrote the
    first one meanwhile, takes that segment's step and makes its rewrite again on its own
    program: both attentions run online, and the plan, log and rollbacks are the serial walk's."""
    from autocomp_jupyter.rules import chains

    # Gemmini with a 16 KiB scratchpad and a 4 KiB accumulator: 64 keys' score rows are long
    # enough there that the softmax runs against a running max (a small, quick program).
    preset = (Path(autocomp.__file__).parent / "accel" / "presets" / "gemmini.yaml").read_text()
    target = tmp_path / "small_gemmini.yaml"
    target.write_text(preset.replace("name: gemmini", "name: small_gemmini")
                      .replace("size_bytes: 256 KiB", "size_bytes: 16 KiB").replace("size_bytes: 64 KiB", "size_bytes: 4 KiB"))
    monkeypatch.setattr(chains, "SPLIT_KERNELS", 4)     # share the walk of a plan of 12 kernels ...
    monkeypatch.setattr(chains, "MAX_CHAIN", 6)         # ... in 2 segments of six, each one attention
    source = _attention_blocks(2)
    caches.clear_all()
    with monkeypatch.context() as serial:
        serial.setattr(workers, "spare_cores", lambda: 0)
        alone = autocomp.optimize(source, target=str(target), tune=0).report
    taken = []
    steps_at = chains._Shared.steps_at
    monkeypatch.setattr(chains._Shared, "steps_at", lambda self, at: taken.append((at, steps_at(self, at))) or
                        taken[-1][1])
    caches.clear_all()
    shared = autocomp.optimize(source, target=str(target), tune=0).report
    # this process took the spare core's step at kernel 6: the second attention, rewritten there
    assert any(at == 6 and steps and steps[0].program is not None for at, steps in taken)
    online = [e["ops"] for e in alone["rules"] if e["applied"] and "running max" in e["why"]]
    assert len(online) == 2                                       # both attentions online, in both runs
    assert shared["verified"] and _outcome(shared) == _outcome(alone)
    assert _untimed(shared["rules"]) == _untimed(alone["rules"]) and shared["rollbacks"] == alone["rollbacks"]
