"""Real exported networks: torchvision ResNet-18/50, MobileNetV2 and a BERT-base encoder layer
(transformers), exported by torch.onnx.export with random weights (no downloads), imported
with `from_onnx` and optimised on every preset.

Needs torch and torchvision (and transformers for the BERT layer) in the same environment as
autocomp-jupyter; they are not test dependencies (torch pulls gigabytes). One way:

    python -m venv /tmp/tv && /tmp/tv/bin/pip install torch torchvision transformers onnxscript \
        && /tmp/tv/bin/pip install -e ".[onnx]"
    /tmp/tv/bin/python benchmarks/bench_torch.py                       # all models, every preset
    /tmp/tv/bin/python benchmarks/bench_torch.py --models resnet50 --targets tpu,host
    /tmp/tv/bin/python benchmarks/bench_torch.py --exporter torchscript  # the legacy exporter (opset 17)

Per model: the exporter's node census, the import time, and two numerical checks on one
random input: the reference interpreter against torch itself (`torch_err`) and against
onnxruntime (`ort_err`), each max |difference| / max(1, |reference|). Per (model, target):
the rules-only optimise time (cold caches) and its ratio to a 1-layer network's, the
speedups, `verified` and how the kernels were checked tile by tile (see bench_onnx.py).
The exporter defaults to torch's own default (`dynamo`: opset 18, ReduceMean for the
global pool, weights in an external data file).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_onnx import clear_caches, one_layer_net, twins  # noqa: E402

TARGETS = "tpu,gpu,npu,gemmini,host"


def torch_modules() -> dict:
    """name -> (module in eval mode, example input); random weights, nothing downloaded."""
    import torch
    import torchvision

    torch.manual_seed(0)
    image = torch.randn(1, 3, 224, 224)
    mods = {name: (ctor(weights=None).eval(), image)
            for name, ctor in (("resnet18", torchvision.models.resnet18), ("resnet50", torchvision.models.resnet50),
                               ("mobilenetv2", torchvision.models.mobilenet_v2))}
    try:
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertLayer
    except ImportError:
        print("# transformers not installed: no BERT layer", file=sys.stderr)
        return mods

    class BertEncoderLayer(torch.nn.Module):
        """BERT-base's encoder layer (768 hidden, 12 heads, 3072 FFN, erf GELU), one sequence."""

        def __init__(self):
            super().__init__()
            config = BertConfig()
            config._attn_implementation = "eager"      # plain MatMul/Softmax, not an SDPA kernel
            self.layer = BertLayer(config)

        def forward(self, hidden):
            out = self.layer(hidden)
            return out[0] if isinstance(out, tuple) else out

    mods["bert"] = (BertEncoderLayer().eval(), torch.randn(1, 128, 768))
    return mods


def export(module, example, path: Path, exporter: str) -> None:
    import torch

    torch.onnx.export(module, (example,), str(path), input_names=["input"], output_names=["output"],
                      opset_version=18 if exporter == "dynamo" else 17, dynamo=exporter == "dynamo")


def relative_error(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(1.0, float(np.abs(want).max())))


def main(argv=None) -> int:
    import onnx
    import onnxruntime as ort
    import torch

    from autocomp_jupyter import from_onnx, optimize
    from autocomp_jupyter.onnx_import import run_with_values

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenetv2,bert")
    ap.add_argument("--targets", default=TARGETS)
    ap.add_argument("--exporter", choices=("dynamo", "torchscript"), default="dynamo")
    ap.add_argument("--tune", type=int, default=0)
    ap.add_argument("--keep", default="", help="directory to keep the exported .onnx files in")
    args = ap.parse_args(argv)
    modules = torch_modules()
    unknown = [m for m in args.models.split(",") if m not in modules]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(modules)}")
    out_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_torch_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"# torch {torch.__version__}, exporter {args.exporter}, rules only" if not args.tune
          else f"# torch {torch.__version__}, exporter {args.exporter}, tune {args.tune}")
    print(f"{'model':12} {'target':7} {'nodes':>5} {'ops':>4} {'kernels':>7} {'export_s':>8} {'import_s':>8} "
          f"{'optimize_s':>10} {'1-layer_s':>9} {'ratio':>6} {'vs_naive':>8} {'vs_lib':>6} {'verified':>8} "
          f"{'torch_err':>9} {'ort_err':>8} {'twins':>14}")
    all_verified = True
    for name in args.models.split(","):
        module, example = modules[name]
        path = out_dir / f"{name}.onnx"
        t0 = time.perf_counter()
        export(module, example, path, args.exporter)
        export_s = time.perf_counter() - t0
        model = onnx.load(str(path))
        census = Counter(n.op_type for n in model.graph.node)
        print(f"# {name}: opset {model.opset_import[0].version}, "
              + ", ".join(f"{op} {n}" for op, n in census.most_common()), flush=True)
        t0 = time.perf_counter()
        program = from_onnx(str(path))
        import_s = time.perf_counter() - t0
        x = example.numpy()
        with torch.no_grad():
            want_torch = module(example).numpy().astype(np.float64)
        want_ort = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {model.graph.input[0].name: x})[0].astype(np.float64)
        source_inputs = [t.name for t in program.inputs if t.role == "input"]
        got = run_with_values(program, {source_inputs[0]: x})[program.outputs[0]]
        torch_err, ort_err = relative_error(got, want_torch), relative_error(got, want_ort)
        for target in args.targets.split(","):
            clear_caches()
            one_s = optimize(from_onnx(one_layer_net()), target=target, tune=0).report["seconds"]
            clear_caches()
            t0 = time.perf_counter()
            res = optimize(program, target=target, tune=args.tune)
            seconds = time.perf_counter() - t0
            r = res.report
            all_verified &= bool(r["verified"])
            print(f"{name:12} {target:7} {len(model.graph.node):5d} {len(program.ops):4d} {len(r['kernels']):7d} "
                  f"{export_s:8.2f} {import_s:8.2f} {seconds:10.2f} {one_s:9.2f} {seconds / one_s:6.1f} "
                  f"{r['speedup_vs_naive']:8.2f} {r['speedup_vs_library']:6.2f} {str(r['verified']):>8} "
                  f"{torch_err:9.1e} {ort_err:8.1e} {twins(r):>14}", flush=True)
    return 0 if all_verified else 1


if __name__ == "__main__":
    sys.exit(main())
