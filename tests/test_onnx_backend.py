"""ONNX's own test data, shipped in the onnx package, as a test of the importer.

- backend/test/data/pytorch-converted and pytorch-operator (117 cases, opset 6 to 12, IR 3 to
  7): each model is imported, run by the reference interpreter on the case's inputs and
  compared with the case's outputs; a case passes, or is on `REFUSED` with the message it
  gets. Nothing crashes, nothing is silently wrong.
- backend/test/data/light: the model zoo's classic networks (opset 9, IR 3, weights as
  ConstantOfShape nodes): all nine import; the smaller ones, their weights made random,
  match onnxruntime.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from autocomp_jupyter.errors import UserError  # noqa: E402
from autocomp_jupyter.onnx_import import from_onnx, run_with_values  # noqa: E402

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
CASES = sorted(glob.glob(os.path.join(DATA, "pytorch-*", "test_*")))

# The documented refusals: case → the message it must get. DOUBLE inputs: these cases feed
# float64 values past f32's range (uninitialised memory: 1e198, denormals), which f32 would
# silently turn into inf.
_DOUBLE = "has element type DOUBLE"
REFUSED = {
    "test_operator_add_broadcast": _DOUBLE,
    "test_operator_add_size1_broadcast": _DOUBLE,
    "test_operator_add_size1_right_broadcast": _DOUBLE,
    "test_operator_add_size1_singleton_broadcast": _DOUBLE,
    "test_operator_addconstant": _DOUBLE,
}


def _tensors(case: str, kind: str) -> list[np.ndarray]:
    files = sorted(glob.glob(os.path.join(case, "test_data_set_0", f"{kind}_*.pb")),
                   key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
    return [numpy_helper.to_array(onnx.load_tensor(p)) for p in files]


def _close(have: np.ndarray, want: np.ndarray, rtol=1e-4, atol=1e-5) -> float:
    """The worst error beyond tolerance (0 when within); NaN/inf must match exactly."""
    want = want.astype(np.float64)
    same = (np.isnan(want) & np.isnan(have)) | (np.isinf(want) & (want == have))
    err = np.where(same, 0.0, np.abs(have - want))
    err = np.where(np.isnan(err), np.inf, err)
    scale = atol + rtol * float(np.abs(np.where(np.isfinite(want), want, 0.0)).max(initial=0.0))
    return float(err.max(initial=0.0)) if (err > scale).any() else 0.0


def test_the_backend_data_is_there():
    assert len(CASES) >= 117


@pytest.mark.parametrize("case", CASES, ids=[os.path.basename(c) for c in CASES])
def test_backend_case(case):
    name = os.path.basename(case)
    model = onnx.load(os.path.join(case, "model.onnx"))
    if name in REFUSED:
        with pytest.raises(UserError) as err:
            from_onnx(model)
        text = err.value.format()
        assert REFUSED[name] in text and "internal error" not in text
        return
    program = from_onnx(model)
    inputs = [t.name for t in program.inputs if t.role == "input"]
    got = run_with_values(program, dict(zip(inputs, _tensors(case, "input"))))
    expected = _tensors(case, "output")
    assert len(program.outputs) == len(expected)
    for out, want in zip(program.outputs, expected):
        have = got[out].reshape(want.shape) if got[out].size == want.size else got[out]
        assert have.shape == want.shape, (out, have.shape, want.shape)
        assert _close(have, want) == 0.0, f"{name}: output {out} is wrong"


def test_onnxruntime_passes_none_of_the_refused_cases():
    """Every case onnxruntime passes passes here: the others all pass, and onnxruntime fails
    each refused one (it runs opset 7 and later; these are opset 6)."""
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    for name in REFUSED:
        case = next(c for c in CASES if os.path.basename(c) == name)
        try:
            session = ort.InferenceSession(os.path.join(case, "model.onnx"), options,
                                           providers=["CPUExecutionProvider"])
            got = session.run(None, {i.name: v for i, v in zip(session.get_inputs(), _tensors(case, "input"))})
        except Exception:   # onnxruntime refuses the model
            continue
        assert any(_close(g.astype(np.float64), w) for g, w in zip(got, _tensors(case, "output"))), name


# --------------------------------------------------------------------------- the model zoo's classics

def _bench_onnx():
    """benchmarks/bench_onnx.py, which owns the zoo list and the weight randomisation."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_onnx", os.path.join(os.path.dirname(__file__), "..", "benchmarks", "bench_onnx.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH_ONNX = _bench_onnx()
ZOO = list(BENCH_ONNX.ZOO)
randomised = BENCH_ONNX.randomised


def test_the_zoo_classics_import():
    """AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet
    as the zoo exported them (opset 9, IR 3, initializers listed as inputs, Sum, LRN,
    Unsqueeze with axes, VGG's 25,088-wide flatten, Softmax flattening from axis 1)."""
    ops = {}
    for name in ZOO:
        program = from_onnx(os.path.join(DATA, "light", f"light_{name}.onnx"))
        ops[name] = len(program.ops)
        assert program.outputs and program.param_values
    assert ops["resnet50"] > 150 and ops["densenet121"] > 600


@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "shufflenet"])
def test_zoo_classics_match_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime")
    model = randomised(onnx.load(os.path.join(DATA, "light", f"light_{name}.onnx")))
    inits = {i.name for i in model.graph.initializer}
    (x,) = [i for i in model.graph.input if i.name not in inits]
    data = np.random.default_rng(1).standard_normal([d.dim_value for d in x.type.tensor_type.shape.dim])
    data = data.astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    want = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, {x.name: data})[0]
    program = from_onnx(model)
    (x_dsl,) = [t.name for t in program.inputs if t.role == "input"]
    got = run_with_values(program, {x_dsl: data})
    have = got[program.outputs[0]].reshape(want.shape)
    assert _close(have, want) == 0.0
