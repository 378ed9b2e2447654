"""The exporter-shaped generator (fuzz_models, issue 37): what it builds, and a small slice of it
through the pipeline. `python benchmarks/fuzz_pipeline.py --generator models --size mixed` runs
the long ones (torchvision sizes)."""
from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("onnx")

from autocomp_jupyter.dsl import parse  # noqa: E402
from benchmarks.fuzzing import models as fuzz_models  # noqa: E402

SLICE = ((0, "npu"), (5, "gemmini"), (10, "tpu"))     # shuffle unit, inverted residual + SE, ConvNeXt


@pytest.fixture(scope="module")
def small():
    return [fuzz_models.generate_model(seed, "small") for seed in range(40)]


def test_generator_is_deterministic_per_seed_and_size():
    assert fuzz_models.generate_model(7).text == fuzz_models.generate_model(7).text
    assert fuzz_models.generate_model(7).text != fuzz_models.generate_model(8).text
    assert fuzz_models.generate_model(7, "torchvision").text != fuzz_models.generate_model(7).text
    with pytest.raises(ValueError, match="size must be one of"):
        fuzz_models.generate_model(0, "huge")


def test_every_block_and_exporter_op_appears(small):
    kinds = Counter(k for gen in small for k in gen.kinds)
    assert set(fuzz_models.BLOCKS) | {"hard_swish", "layer_scale"} <= set(kinds), \
        set(fuzz_models.BLOCKS) - set(kinds)
    ops = Counter(node.op_type for gen in small for node in gen.model.graph.node)
    for op in ("Shape", "Gather", "Unsqueeze", "Reshape", "Transpose", "Concat", "Split", "Slice", "HardSwish",
               "HardSigmoid", "Clip", "ReduceMean", "GlobalAveragePool", "LayerNormalization", "Erf", "Softmax",
               "MatMul", "Gemm", "BatchNormalization"):
        assert ops[op] > 0, op
    strided_depthwise = [n for gen in small for n in gen.model.graph.node if n.op_type == "Conv"
                         and any(a.name == "group" and a.i > 1 for a in n.attribute)
                         and any(a.name == "strides" and list(a.ints) == [2, 2] for a in n.attribute)]
    assert strided_depthwise


def test_imported_programs_parse(small):
    refused = [gen for gen in small if gen.refused]
    assert len(refused) <= 3, [g.refused for g in refused]
    for gen in small:
        if not gen.refused:
            assert parse(gen.text, f"<seed {gen.seed}>").ops


def test_torchvision_sizes():
    gens = [fuzz_models.generate_model(seed, "torchvision") for seed in range(24)]
    shapes = [[d.dim_value for d in g.model.graph.input[0].type.tensor_type.shape.dim] for g in gens]
    assert all(s[1] >= 16 and s[2] in (7, 14, 28, 56, 112) for s in shapes), shapes
    assert max(s[2] for s in shapes) >= 56


def test_the_import_matches_onnxruntime(small):
    pytest.importorskip("onnxruntime")
    for gen in small[:6]:
        if not gen.refused:
            assert fuzz_models.check_import(gen) == "", gen.seed


def test_a_slice_runs_with_no_crash_and_no_wrong_result():
    pytest.importorskip("onnxruntime")
    for seed, preset in SLICE:
        gen = fuzz_models.generate_model(seed, "small", max_blocks=2)
        outcome = fuzz_models.check_model(gen, preset, tune=0, seed=seed)
        bad = {c: outcome.problems[c] for c in ("crash", "wrong", "not_verified", "import") if c in outcome.problems}
        assert not bad, (seed, preset, gen.kinds, bad)
