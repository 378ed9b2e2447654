"""Rule files (schema, meaning, safe loading), @adrs_rule, and the fusion pass's decisions."""
import textwrap

import pytest

import autocomp_jupyter as ac
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.ir.program import Call, Op
from autocomp_jupyter.rules.engine import Fuse, Pattern, Replace, adrs_rule, list_rules, load_rules
from autocomp_jupyter.rules.fusion import _in_dependence_order
from autocomp_jupyter.ir.schedule import Kernel

CONV_BN_RELU = """
input  X: f32[1, 16, 28, 28]
param  W: f32[16, 16, 3, 3]
param  s: f32[16]
param  t: f32[16]
Y = conv2d(X, W, padding=1)
Z = batchnorm(Y, s, t)
R = relu(Z)
"""
CONV_RELU = """
input  X: f32[1, 16, 28, 28]
param  W: f32[16, 16, 3, 3]
Y = conv2d(X, W, padding=1)
R = relu(Y)
"""
BN_ADD = """
input  X: f32[1, 16, 28, 28]
input  Q: f32[1, 16, 28, 28]
param  s: f32[16]
param  t: f32[16]
B = batchnorm(X, s, t)
S = add(B, Q)
"""


def fired(res):
    return [(e["rule"], tuple(e["ops"])) for e in res.report["rules"] if e["applied"]]


def groups(res):
    return [k.ops for k in res.after.kernels]


def write(tmp_path, text, name="rules.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# --------------------------------------------------------------------------- loading


def test_default_rules_load_with_order_as_data():
    rules = load_rules(target="tpu")
    names = [r.name for r in rules.fusion_rules]
    assert names[:8] == ["conv_bn_relu", "conv_relu", "bn_add", "residual_layernorm", "attention_scores",
                         "epilogue", "norm_epilogue", "elementwise_chain"]
    assert rules.rollback["min_speedup"] == 1.2 and rules.tune == {"configs": 1000, "top": 3, "seed": 0}
    assert rules.tiling["levels"] == ["L2", "L1", "vector"]
    assert rules.fusion_params["max_fusion_depth"] == 6  # tpu.yaml overrides default.yaml's 4
    assert load_rules(target="gpu").fusion_params["max_fusion_depth"] == 4


def test_list_rules_says_where_each_applies():
    rows = {r["rule"]: r for r in list_rules()}
    assert rows["conv_relu"]["targets"] == "gpu, tpu"
    assert rows["bn_add"]["targets"] == "npu"
    assert rows["epilogue"]["match"] == "contraction → elementwise|broadcast|reshape|transpose|concat+"


@pytest.mark.parametrize("text,key_path,expect", [
    ("fusion:\n  params:\n    max_fusion_dept: 3\n", "fusion.params.max_fusion_dept", "did you mean 'max_fusion_depth'?"),
    ("fusion:\n  params:\n    max_fusion_depth: -1\n", "fusion.params.max_fusion_depth", "expected an integer >= 1"),
    ("rollback:\n  min_speedup: 0.5\n", "rollback.min_speedup", "expected a number >= 1"),
    ("fusion:\n  rules:\n    - {name: r1, match: [conv2d, relux]}\n", "fusion.rules[0].match[1]",
     "unknown op or op class 'relux'"),
    ("fusion:\n  rules:\n    - {name: r1, match: [conv2d]}\n", "fusion.rules[0].match", "at least two"),
    ("fusion:\n  rules:\n    - {name: r1, mach: [conv2d, relu]}\n", "fusion.rules[0].mach", "did you mean 'match'?"),
    ("fusion:\n  rules:\n    - {name: not_registered_rule}\n", "fusion.rules[0]", "no Python rule of that name"),
    ("fusion:\n  rules:\n    - {name: r1, match: [conv2d, relu], targets: [tpx]}\n", "fusion.rules[0].targets",
     "unknown target 'tpx'"),
    ("fusion:\n  order: [conv_rleu]\n", "fusion.order[0]", "did you mean 'conv_relu'?"),
    ("scheduling:\n  priority: [skew, twist]\n", "scheduling.priority", "drawn from interchange, split, skew, reverse"),
    ("tiling:\n  register_tile_factor: [16, 4]\n", "tiling.register_tile_factor", "min <= max"),
    ("bogus: 1\n", "bogus", "expected one of"),
])
def test_malformed_rule_files_name_file_key_and_expectation(tmp_path, text, key_path, expect):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as info:
        load_rules([path])
    message = info.value.format()
    assert path in message and key_path in message and expect in message


def test_yaml_syntax_error_and_safe_loading(tmp_path):
    with pytest.raises(UserError, match="not valid YAML: line 3"):
        load_rules([write(tmp_path, "fusion:\n  params: [1,\n")])
    # A rule file can never run code: python tags are refused by the safe loader.
    evil = write(tmp_path, "fusion: !!python/object/apply:os.system ['touch /tmp/pwned']\n", "evil.yaml")
    with pytest.raises(UserError, match="not valid YAML"):
        load_rules([evil])


def test_unknown_rules_name_is_a_user_error():
    with pytest.raises(UserError, match="unknown rules 'no_such_rule'"):
        load_rules(["no_such_rule"])


def test_pattern_matching_is_greedy_over_classes():
    p = parse(CONV_BN_RELU)
    chain = list(p.ops)
    assert Pattern.parse(["contraction", "elementwise|broadcast+"]).match_chain(chain) == 3
    assert Pattern.parse(["conv2d", "relu"]).match_chain(chain) == 0
    assert Pattern.parse(["conv2d", "batchnorm"]).match_chain(chain) == 2


# --------------------------------------------------------------------------- fusion decisions


def test_conv_bn_relu_fires_on_every_target():
    for target in ("tpu", "gpu", "npu", "gemmini"):
        res = ac.optimize(CONV_BN_RELU, target=target, tune=0, passes="fusion")
        applied = dict(fired(res))
        assert applied.get("conv_bn_relu") == ("Y", "Z", "R"), (target, res.report["rules"])


def test_conv_relu_is_for_gpu_and_tpu_only():
    res = ac.optimize(CONV_RELU, target="tpu", tune=0, passes="fusion")
    assert ("conv_relu", ("Y", "R")) in fired(res)
    res = ac.optimize(CONV_RELU, target="npu", tune=0, passes="fusion")
    skipped = [e for e in res.report["rules"] if e["rule"] == "conv_relu"]
    assert skipped and not skipped[0]["applied"] and "not for target 'npu'" in skipped[0]["why"]
    assert ("epilogue", ("Y", "R")) in fired(res)  # the generic rule still fuses it


def test_bn_add_is_for_npu():
    res = ac.optimize(BN_ADD, target="npu", tune=0, passes="fusion")
    assert ("bn_add", ("B", "S")) in fired(res)
    res = ac.optimize(BN_ADD, target="tpu", tune=0, passes="fusion")
    assert ("elementwise_chain", ("B", "S")) in fired(res)
    assert "bn_add" not in dict(fired(res))


def test_no_fusion_through_a_tensor_with_two_readers():
    src = "input A: f32[64, 64]\ninput B: f32[64, 64]\nC = matmul(A, B)\nD = relu(C)\nE = exp(C)\n"
    res = ac.optimize(src, target="tpu", tune=0, passes="fusion")
    assert all(len(k) == 1 for k in groups(res))


def test_no_fusion_over_the_memory_limit(tmp_path):
    tiny = write(tmp_path, "fusion:\n  params:\n    shared_mem_kb: 1\n")
    res = ac.optimize(CONV_BN_RELU, target="gpu", rules=[tiny], tune=0, passes="fusion")
    assert all(len(k) == 1 for k in groups(res))
    why = [e["why"] for e in res.report["rules"] if e["rule"] == "conv_bn_relu"][0]
    assert "KiB of fast memory > 1 KiB" in why


def test_depth_limit_shortens_the_chain(tmp_path):
    shallow = write(tmp_path, "fusion:\n  params:\n    max_fusion_depth: 2\n")
    res = ac.optimize(CONV_BN_RELU, target="gpu", rules=[shallow], tune=0, passes="fusion")
    assert ("epilogue", ("Y", "Z")) in fired(res)
    assert not any(len(ops) > 2 for _, ops in fired(res))


def test_disabled_rule_stays_silent(tmp_path):
    off = write(tmp_path, """
        fusion:
          rules:
            - {name: conv_bn_relu, enabled: false}
            - {name: epilogue, enabled: false}
            - {name: elementwise_chain, enabled: false}
        """)
    res = ac.optimize(CONV_BN_RELU, target="gpu", rules=[off], tune=0, passes="fusion")
    assert fired(res) == []
    assert all(len(k) == 1 for k in groups(res))


def test_inline_small_intermediate():
    src = "input A: f32[4, 8]\nparam b: f32[8]\nc[j] = exp(b[j])\nD[i, j] = A[i, j] * c[j]\n"
    res = ac.optimize(src, target="tpu", tune=0, passes="fusion")
    assert ("inline", ("c", "D")) in fired(res)
    assert [op.name for op in res.after.program.ops] == ["D"]
    assert res.report["verified"]


def test_python_rule_fuse_and_cli_name():
    @adrs_rule("fuse_exp_after_anything")
    def fuse_exp(producer, consumer):
        return Fuse("exp epilogue") if consumer.kind == "exp" else None

    src = "input A: f32[64, 64]\nB = transpose(A)\nC = exp(B)\n"
    res = ac.optimize(src, target="tpu", rules=["fuse_exp_after_anything"], tune=0, passes="fusion")
    assert ("fuse_exp_after_anything", ("B", "C")) in fired(res)


def test_a_wrong_python_rule_is_caught_rolled_back_and_named():
    @adrs_rule("wrong_relu_fusion")
    def wrong(producer, consumer):
        if producer.kind != "matmul" or consumer.kind != "relu":
            return None
        st = producer.statements[0]
        # "fuse" relu into the accumulation — wrong: relu of each partial product, not of the sum
        bad = st.__class__(consumer.output, st.target_indices, st.reduce, st.loops, Call("relu", (st.expr,)))
        return Replace((Op("fused_mm_relu", "contraction", producer.inputs, consumer.output, (), (bad,)),))

    src = "input A: f32[32, 32]\ninput B: f32[32, 32]\nC = matmul(A, B)\nD = relu(C)\n"
    res = ac.optimize(src, target="tpu", rules=["wrong_relu_fusion"], tune=0)
    entry = [e for e in res.report["rules"] if e["rule"] == "wrong_relu_fusion"][0]
    assert not entry["applied"] and "changes the result" in entry["why"]
    assert any("wrong_relu_fusion" in r["reason"] for r in res.report["rollbacks"])
    assert res.report["verified"]
    assert [op.kind for op in res.after.program.ops] == ["matmul", "relu"]  # the original ops


def test_a_correct_python_rewrite_is_kept():
    @adrs_rule("scale_then_relu")
    def right(producer, consumer):
        if consumer.kind != "relu" or producer.kind != "comprehension":
            return None
        st = producer.statements[0]
        new = st.__class__(consumer.output, st.target_indices, st.reduce, st.loops,
                           Call("relu", (st.expr,)))  # B's expression (A * 2) under the relu
        return Replace((Op("comprehension", "elementwise", producer.inputs, consumer.output, (), (new,)),))

    src = "input A: f32[8, 8]\nB[i, j] = A[i, j] * 2\nC = relu(B)\n"
    res = ac.optimize(src, target="tpu", rules=["scale_then_relu"], tune=0)
    assert ("scale_then_relu", ("B", "C")) in fired(res)
    assert res.report["verified"] and len(res.after.program.ops) == 1


def test_rule_that_raises_is_logged_not_fatal():
    @adrs_rule("explodes")
    def explodes(producer, consumer):
        raise RuntimeError("boom")

    res = ac.optimize(CONV_RELU, target="tpu", rules=["explodes"], tune=0, passes="fusion")
    assert any(e["rule"] == "explodes" and "RuntimeError: boom" in e["why"] for e in res.report["rules"])


def test_adrs_rule_checks_its_signature():
    with pytest.raises(UserError, match="must take \\(producer, consumer\\)"):
        @adrs_rule("one_arg")
        def one_arg(op):
            return None


def test_cycle_detection():
    p = parse("input A: f32[4]\nB = relu(A)\nC = exp(B)\nD = add(B, C)\n")
    # {B, D} as one kernel and {C} as another: B→C→D makes the two kernels depend on each other
    k1 = Kernel.from_ops(p, ["B", "D"])
    k2 = Kernel.from_ops(p, ["C"])
    assert _in_dependence_order((k1, k2)) is None
    kb, kd = Kernel.from_ops(p, ["B"]), Kernel.from_ops(p, ["D"])
    assert _in_dependence_order((kb, k2, kd)) == (kb, k2, kd)          # an order that works is kept


def test_a_kernel_moves_after_the_kernel_whose_output_it_reads():
    # A conv fused with the add of a later branch: its group starts first, but it reads the
    # branch's output, so it must run after the branch's kernel.
    src = ("input X: f32[1, 8, 12, 12]\nparam W: f32[16, 8, 3, 3]\nparam V: f32[16, 8, 1, 1]\n"
           "c = conv2d(X, W, stride=2, padding=1)\nd = conv2d(X, V, stride=2)\ne = add(c, d)\noutput e\n")
    p = parse(src)
    fused, branch = Kernel.from_ops(p, ["c", "e"]), Kernel.from_ops(p, ["d"])
    assert _in_dependence_order((fused, branch)) == (branch, fused)
