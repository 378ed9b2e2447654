"""Limits instead of crashes (issue 17): every reproducer of the robustness probe, as a test.

Each bad input ends in a `UserError` that names the limit and how to raise it, quickly;
each limit sits beside its legal twin (just under the limit, or the limit raised).
"""
from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autocomp_jupyter import cli, dsl, interp, limits
from autocomp_jupyter.accel.target import PRESET_DIR, TargetError, load_target, parse_target
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.rules.engine import Pattern, RuleError, load_rules

ROOT = Path(__file__).resolve().parent.parent
NPU = (PRESET_DIR / "npu.yaml").read_text()


def parse_error(source: str, **kw) -> UserError:
    with pytest.raises(UserError) as info:
        dsl.parse(source, **kw)
    return info.value


def located(err: UserError) -> bool:
    return all(d.line > 0 for d in err.diagnostics)


# --------------------------------------------------------------------------- DSL nesting

H = "input X: f32[4, 4]\n"


@pytest.mark.parametrize("expr", [
    "(" * 1000 + "X[i, j]" + ")" * 1000,
    "-" * 1000 + "X[i, j]",
    "exp(" * 1000 + "X[i, j]" + ")" * 1000,
    "X[" + "(" * 1000 + "i" + ")" * 1000 + ", j]",
])
def test_deep_nesting_is_a_located_error_naming_the_limit(expr):
    err = parse_error(H + f"Y[i, j] = {expr}\n")
    assert located(err) and err.diagnostics[0].line == 2
    assert "expression nesting depth limit of 64" in err.format()
    assert "AUTOCOMP_MAX_EXPR_DEPTH" in err.format()


def test_nesting_just_under_the_limit_runs_and_the_limit_can_be_raised(monkeypatch):
    program = dsl.parse(H + "Y[i, j] = " + "(" * 60 + "X[i, j]" + ")" * 60 + "\n")
    x = np.arange(16.0).reshape(4, 4)
    assert np.array_equal(interp.run(program, {"X": x})["Y"], x)
    parse_error(H + "Y[i, j] = " + "-" * 100 + "X[i, j]\n")
    monkeypatch.setenv("AUTOCOMP_MAX_EXPR_DEPTH", "120")
    program = dsl.parse(H + "Y[i, j] = " + "-" * 100 + "X[i, j]\n")
    assert np.array_equal(interp.run(program, {"X": x})["Y"], x)  # an even number of signs
    monkeypatch.setenv("AUTOCOMP_MAX_EXPR_DEPTH", "100000")  # past the ceiling: a clear error
    err = parse_error(H + "Y[i, j] = X[i, j]\n")
    assert "cannot exceed 160" in err.format()


def test_a_1500_term_sum_runs_and_gives_the_sum():
    program = dsl.parse(H + "Y[i, j] = " + " + ".join(["X[i, j]"] * 1500) + "\n")
    x = np.arange(16.0).reshape(4, 4)
    assert np.allclose(interp.run(program, {"X": x})["Y"], 1500 * x)


@pytest.mark.parametrize("ops", ["+-", "*/"])
def test_long_chains_fold_to_the_same_value_as_left_to_right(ops):
    rng = random.Random(len(ops))
    for n in (5, 16, 17, 40, 333):
        constants = [rng.choice([0.5, 1.25, 2.0, 3.0]) for _ in range(n)]
        chosen = [rng.choice(ops) for _ in range(n)]
        text = "1.5" + "".join(f" {o} {c}" for o, c in zip(chosen, constants))
        expected = 1.5
        for o, c in zip(chosen, constants):
            expected = {"+": expected + c, "-": expected - c, "*": expected * c, "/": expected / c}[o]
        program = dsl.parse("input X: f32[2]\nY[i] = X[i] * 0 + (" + text + ")\n")
        value = interp.run(program, {"X": np.zeros(2)})["Y"][0]
        assert value == pytest.approx(expected, rel=1e-6), (n, text)


def test_an_expression_too_large_is_a_located_error(monkeypatch):
    monkeypatch.setenv("AUTOCOMP_MAX_EXPR_NODES", "1000")
    err = parse_error(H + "Y[i, j] = " + " + ".join(["X[i, j]"] * 500) + "\n")
    assert located(err) and "expression size limit" in err.format()


def test_statement_count_limit(monkeypatch):
    monkeypatch.setenv("AUTOCOMP_MAX_STATEMENTS", "20")
    body = "".join(f"Y{k} = relu(X)\n" for k in range(30))
    err = parse_error(H + body)
    assert located(err) and "statement count limit" in err.format() and "AUTOCOMP_MAX_STATEMENTS" in err.format()
    dsl.parse(H + body[: body.index("Y19 =")])


# --------------------------------------------------------------------------- shapes and numbers


@pytest.mark.parametrize("rank", [17, 40, 65, 200])
def test_rank_above_the_limit_is_refused_at_build_time(rank):
    err = parse_error("input X: f32[" + ", ".join(["1"] * rank) + "]\nY = relu(X)\n")
    assert located(err) and f"rank {rank}, over the tensor rank limit of 16" in err.format()


def test_rank_16_runs():
    program = dsl.parse("input X: f32[" + ", ".join(["1"] * 15 + ["2"]) + "]\nY = relu(X)\n")
    assert interp.run(program)["Y"].shape == (1,) * 15 + (2,)


def test_too_many_loops_in_a_comprehension():
    lhs = ", ".join(f"i{k}" for k in range(8))
    reads = " + ".join(f"X[i{k}, r{k}]" for k in range(8)) + " + " + " + ".join(f"X[r{k}, s{k}]" for k in range(8)) \
        + " + " + " + ".join(f"X[s{k}, t{k}]" for k in range(4))
    err = parse_error(H + f"Y[{lhs}] += {reads}\n")
    assert located(err) and "loops per statement limit of 24" in err.format()


@pytest.mark.parametrize("source, limit", [
    ("input X: f32[99999999999999999999, 4]\nY = relu(X)\n", "dimension extent limit"),
    ("input X: f32[" + "9" * 400 + ", 4]\nY = relu(X)\n", "dimension extent limit"),
    ("input X: f32[3000000000, 4]\nY = relu(X)\n", "dimension extent limit"),
    ("input X: f32[2000000, 2000000]\nY = relu(X)\n", "elements per tensor limit"),
    ("input X: f32[1, 1, 4, 4]\ninput W: f32[1, 1, 3, 3]\nY = conv2d(X, W, padding=99999999999999999999)\n",
     "attribute magnitude limit"),
    ("input X: f32[1, 1, 4, 4]\ninput W: f32[1, 1, 3, 3]\nY = conv2d(X, W, padding=1000000)\n",
     "attribute magnitude limit"),
    ("input X: f32[1, 1, 4, 4]\ninput W: f32[1, 1, 3, 3]\nY = conv2d(X, W, stride=1, dilation=5000)\n",
     "attribute magnitude limit"),
    ("input X: f32[4]\nY[i, r] = X[i] where r < 99999999999999999999\n", "dimension extent limit"),
    ("input X: f32[4]\nY[i] = X[i] * 1e400\n", "out of the floating-point range"),
])
def test_huge_numbers_are_located_errors_at_check_time(source, limit):
    started = time.perf_counter()
    err = parse_error(source)
    assert time.perf_counter() - started < 1.0
    assert located(err) and limit in err.format(), err.format()


def test_attribute_limit_names_its_variable_and_can_be_raised(monkeypatch):
    src = "input X: f32[1, 1, 4, 4]\ninput W: f32[1, 1, 3, 3]\nY = conv2d(X, W, padding=5000)\n"
    assert "AUTOCOMP_MAX_ATTRIBUTE" in parse_error(src).format()
    monkeypatch.setenv("AUTOCOMP_MAX_ATTRIBUTE", "8192")
    assert dsl.parse(src).tensor("Y").shape == (1, 1, 10002, 10002)


def test_thousands_of_unknown_outputs_give_a_short_message_quickly():
    src = H + "Y = relu(X)\noutput " + ", ".join(f"Q{k}" for k in range(8000)) + "\n"
    started = time.perf_counter()
    err = parse_error(src)
    text = err.format()
    assert time.perf_counter() - started < 2.0
    assert len(err.diagnostics) == 8000
    assert len(text) < 40_000
    assert "and 7950 more errors not shown" in text and "AUTOCOMP_MAX_DIAGNOSTICS" in text
    # the caret stays under the name it points at, in a window of the long line
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "unknown tensor 'Q40'" in line)
    source_line, caret = lines[at + 1], lines[at + 2]
    assert source_line[caret.index("^"):].startswith("Q40")


def test_empty_program_error_has_a_location():
    err = parse_error("# nothing here\n\n")
    assert located(err) and "empty program" in err.format()


def test_scaled_twin_grows_until_strided_shapes_agree():
    src = ("input A: f32[16, 1, 3, 5]\nparam W: f32[1, 1, 1, 1]\nY = conv2d(A, W, stride=2, padding=1)\n"
           "param B: f32[16, 1, 3, 4]\nZ = sub(Y, B)\n")
    with pytest.raises(UserError):
        dsl.parse(src, max_extent=4)  # shrinking 5 to 4 gives a conv width of 3, not B's 4
    twin = dsl.scaled_twin(src, max_extent=4)
    assert twin.tensor("Z").shape == (8, 1, 3, 4)
    assert interp.run(twin)["Z"].shape == (8, 1, 3, 4)


# --------------------------------------------------------------------------- files and the CLI


def run_cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "autocomp_jupyter.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_check_dev_zero_returns_at_once():
    proc = run_cli("check", "/dev/zero", timeout=30)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr and "Traceback" not in proc.stderr


def test_files_are_read_up_to_the_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.acir"
    path.write_text(H + "Y = relu(X)\n" + "# padding\n" * 200)
    monkeypatch.setenv("AUTOCOMP_MAX_SOURCE_BYTES", "1KiB")
    with pytest.raises(UserError, match="program size limit of 1 KiB"):
        dsl.load(path)
    with pytest.raises(UserError, match="directory"):
        dsl.load(tmp_path)
    monkeypatch.setenv("AUTOCOMP_MAX_SOURCE_BYTES", "1MiB")
    assert dsl.load(path).outputs == ("Y",)


def test_check_run_refuses_above_the_memory_budget_before_allocating(tmp_path):
    path = tmp_path / "big.acir"
    path.write_text("input X: f32[20000, 20000]\nY = relu(X)\n")
    started = time.perf_counter()
    proc = run_cli("check", "--run", str(path))
    assert time.perf_counter() - started < 20
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "over the memory budget" in proc.stderr and "--max-extent" in proc.stderr
    assert "AUTOCOMP_MEMORY_BUDGET" in proc.stderr
    proc = run_cli("check", "--run", "--max-extent", "64", str(path))
    assert proc.returncode == 0 and "Y: shape [64, 64]" in proc.stdout


def test_memory_budget_counts_every_tensor(monkeypatch):
    program = dsl.parse("input X: f32[1000, 1000]\nY = relu(X)\n")
    need = limits.run_memory_bytes(program)
    assert need == 2 * 8 * 10**6 + 4 * 8 * interp.MAX_BOX_POINTS
    limits.check_memory_budget(program, budget=need)
    with pytest.raises(UserError, match="over the memory budget"):
        limits.check_memory_budget(program, budget=need - 1)
    monkeypatch.setenv("AUTOCOMP_MEMORY_BUDGET", "100MB")
    with pytest.raises(UserError, match="memory budget of 95.4 MiB"):
        limits.check_memory_budget(program)


def test_measure_refuses_above_the_memory_budget_before_compiling(monkeypatch):
    from autocomp_jupyter import host
    from autocomp_jupyter.pipeline import optimize

    result = optimize("input X: f32[512, 512]\nY = relu(X)\n", target="host", tune=0)
    monkeypatch.setenv("AUTOCOMP_MEMORY_BUDGET", str(limits.run_memory_bytes(result.after.program)))
    monkeypatch.setattr(host, "compile_plan", lambda *a, **k: pytest.fail("compiled despite the budget"))
    with pytest.raises(UserError, match="measuring this program on the host needs about"):
        host.measure_plan(result.after)


def test_bad_limit_variables_are_clear_errors(monkeypatch):
    monkeypatch.setenv("AUTOCOMP_MAX_RANK", "lots")
    with pytest.raises(UserError, match="AUTOCOMP_MAX_RANK='lots': expected a positive integer"):
        dsl.parse(H + "Y = relu(X)\n")


def test_json_never_prints_nan():
    cleaned = cli._finite({"a": float("nan"), "b": [np.float64("inf"), 1.5], "c": {"d": -float("inf")}})
    assert cleaned == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    json.dumps(cleaned, allow_nan=False)


# --------------------------------------------------------------------------- YAML


def bomb(levels: int, key: str = "a") -> str:
    lines = [f'{key}0: &{key}0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"{key}{i}: &{key}{i} [" + ", ".join([f"*{key}{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def target_error(text: str) -> str:
    started = time.perf_counter()
    with pytest.raises(TargetError) as info:
        parse_target(text)
    assert time.perf_counter() - started < 1.0
    return info.value.format()


@pytest.mark.parametrize("levels", [7, 8, 12])
def test_target_alias_bomb_is_refused_within_a_second(levels):
    text = bomb(levels) + NPU.replace("description: Edge", f"description: *a{levels} #")
    assert "over the YAML size after alias expansion limit" in target_error(text)


def test_small_aliases_still_work():
    text = NPU.replace("bandwidth_gbps: 256", "bandwidth_gbps: &bw 256").replace("bandwidth_gbps: 128",
                                                                                  "bandwidth_gbps: *bw")
    assert parse_target(text).level("SRAM").bandwidth_gbps == 256
    assert "refers to its own enclosing anchor" in target_error(NPU + "extra: &r [*r]\n")


@pytest.mark.parametrize("replace, message", [
    (("clock_ghz: 1.0", "clock_ghz: " + "9" * 400), "400-digit integer is out of range"),
    (("latency_cycles: 1", "latency_cycles: .nan"), "got NaN"),
    (("latency_cycles: 1", "latency_cycles: .inf"), "expected a finite number"),
    (("bandwidth_gbps: 256", "bandwidth_gbps: -.inf"), "expected a finite number"),
    (("name: npu", "name: ../../x"), "a plain name"),
    (("name: npu", "name: /etc/passwd"), "a plain name"),
    (("name: npu", "name: 'a b'"), "a plain name"),
    (("description: Edge", "description: " + "[" * 40 + "]" * 40 + " #"), "YAML nesting depth limit of 32"),
    (("description: Edge", "description: " + "[" * 5000 + "]" * 5000 + " #"), "nesting depth"),
])
def test_malformed_target_values_are_clear_errors_within_a_second(replace, message):
    assert message in target_error(NPU.replace(*replace, 1))


def test_a_plain_target_name_with_a_hyphen_is_fine():
    assert parse_target(NPU.replace("name: npu", "name: edge-npu_2")).name == "edge-npu_2"


def test_a_target_name_never_selects_a_rule_file_elsewhere(tmp_path):
    (tmp_path / "x.yaml").write_text("fusion: {params: {max_fusion_depth: 2}}\n")
    rules = load_rules(target=str(tmp_path / "x"))
    assert all("x.yaml" not in s for s in rules.sources)
    with pytest.raises(TargetError):
        load_target("../../" + str(tmp_path / "x"))


def test_target_file_that_is_a_device_or_too_big(tmp_path, monkeypatch):
    with pytest.raises(TargetError, match="not a regular file"):
        load_target("/dev/zero")
    path = tmp_path / "t.yaml"
    path.write_text(NPU + "#" * 5000 + "\n")
    monkeypatch.setenv("AUTOCOMP_MAX_YAML_BYTES", "4KiB")
    with pytest.raises(TargetError, match="YAML file size limit of 4 KiB"):
        load_target(str(path))


def rule_error(tmp_path, text: str) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    started = time.perf_counter()
    with pytest.raises(RuleError) as info:
        load_rules([str(path)])
    assert time.perf_counter() - started < 1.0
    return info.value.format()


@pytest.mark.parametrize("text, message", [
    (bomb(9) + "fusion: {params: {max_fusion_depth: *a9}}\n", "alias expansion limit"),
    ("fusion: {params: {max_fusion_depth: " + "9" * 400 + "}}\n", "400-digit integer"),
    ("fusion: {params: {fusion_threshold_gb: .nan}}\n", "got NaN"),
    ("fusion: {params: {fusion_threshold_gb: .inf}}\n", "finite number"),
    ("rollback: {min_speedup: .inf}\n", "finite number"),
    ("fusion: " + "[" * 5000 + "]" * 5000 + "\n", "nesting depth"),
    ("fusion: {params: {max_fusion_depth: 200}}\n", "over the max_fusion_depth limit of 64"),
    ("fusion: {rules: [{name: big, match: " + str(list(range(100000))) + "}]}\n", "alias expansion limit"),
])
def test_malformed_rule_files_are_clear_errors_within_a_second(tmp_path, text, message):
    assert message in rule_error(tmp_path, text)


def test_rule_names_never_select_files_outside_the_rules_folder(tmp_path):
    (tmp_path / "x.yaml").write_text("fusion: {params: {max_fusion_depth: 2}}\n")
    with pytest.raises(UserError, match="unknown rules"):
        load_rules(["../" + str(tmp_path / "x")])


# --------------------------------------------------------------------------- rule matching


class FakeOp:
    def __init__(self, kind, op_class):
        self.kind, self.op_class = kind, op_class


def brute_force(pattern: Pattern, chain) -> int:
    """Every way to give each item a run (one op, or one or more for '+'): the reference."""
    best = 0
    n = len(pattern.items)
    for lengths in itertools.product(range(1, len(chain) + 1), repeat=n):
        if any(k > 1 and not it.repeat for k, it in zip(lengths, pattern.items)) or sum(lengths) > len(chain):
            continue
        pos, ok = 0, True
        for k, it in zip(lengths, pattern.items):
            ok = ok and all(it.accepts(op) for op in chain[pos:pos + k])
            pos += k
        if ok:
            best = max(best, pos)
    return best


def test_chain_matching_agrees_with_brute_force():
    rng = random.Random(0)
    kinds = [("relu", "elementwise"), ("add", "broadcast"), ("matmul", "contraction"), ("softmax", "reduction")]
    words = ["relu", "elementwise", "broadcast", "contraction", "elementwise|broadcast", "matmul", "reduction"]
    for _ in range(300):
        pattern = Pattern.parse([rng.choice(words) + rng.choice(["", "+"]) for _ in range(rng.randint(1, 3))])
        chain = [FakeOp(*rng.choice(kinds)) for _ in range(rng.randint(1, 6))]
        assert pattern.match_chain(chain) == brute_force(pattern, chain), (str(pattern), [o.kind for o in chain])


def test_chain_matching_is_polynomial():
    pattern = Pattern.parse(["elementwise+"] * 12)
    chain = [FakeOp("relu", "elementwise")] * 4096
    started = time.perf_counter()
    assert pattern.match_chain(chain) == 4096
    assert pattern.match_chain(chain + [FakeOp("matmul", "contraction")]) == 4096
    assert Pattern.parse(["elementwise+"] * 12 + ["contraction"]).match_chain(chain) == 0
    assert time.perf_counter() - started < 2.0


def test_cycle_check_handles_long_kernel_chains():
    from autocomp_jupyter.ir.schedule import Kernel
    from autocomp_jupyter.rules.fusion import _in_dependence_order

    program = dsl.parse("input X0: f32[4]\n" + "".join(f"X{i + 1} = relu(X{i})\n" for i in range(1500)))
    kernels = tuple(Kernel.from_ops(program, [op.name]) for op in program.ops)
    assert _in_dependence_order(kernels) == kernels
    # X1..X3 in one kernel, X2 alone: the fused kernel feeds X2's kernel and reads it back
    small = dsl.parse("input X0: f32[4]\nX1 = relu(X0)\nX2 = relu(X1)\nX3 = relu(X2)\n")
    fused = (Kernel.from_ops(small, ["X1", "X3"]), Kernel.from_ops(small, ["X2"]))
    assert _in_dependence_order(fused) is None


def test_a_reduction_whose_declared_shape_the_right_side_does_not_index_runs():
    program = dsl.parse("input X: f32[4, 5]\ninput W: f32[5, 4]\ntensor Y: f32[4, 3]\n"
                        "Y[i, j] += X[i, k] * W[k, i]\ntensor Z: f32[4, 3]\nZ[i, j] += X[i, k]\n")
    x, w = np.arange(20.0).reshape(4, 5), np.arange(20.0).reshape(5, 4) / 7
    values = interp.run(program, {"X": x, "W": w})
    expected = np.einsum("ik,ki->i", x, w)
    assert np.allclose(values["Y"], np.repeat(expected[:, None], 3, axis=1), rtol=1e-6)
    assert np.allclose(values["Z"], np.repeat(x.sum(axis=1)[:, None], 3, axis=1))
