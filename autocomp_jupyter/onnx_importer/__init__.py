"""ONNX import: an ONNX model → a DSL program (its text and its `Program`), weights attached.

The package, one module per idea:
- `importer`: the walk over the graph (`from_onnx`), the values read and the DSL written, the
  emission helpers every handler uses, constant folding, the op version a node means;
- `validate`: what a model must satisfy first, checked as onnx's checker and onnxruntime check
  it (IR and opset, initializer data against dims, each node's schema and input types), and the
  one refusal listing every unsupported op with its nodes and alternatives;
- one module of op handlers per op family (`op_<OpType>` methods, mixed into the importer):
  `elementwise`, `layout`, `linear` (Gemm, MatMul, Einsum), `conv` (convolution and pooling),
  `normalize` (normalisations and reductions), `resample` (Resize, QDQ), `index` (ops that
  read or write by index values: Gather, GatherElements, TopK, CumSum, Scatter*) and
  `attention` (opset 23's Attention and RotaryEmbedding);
- `common`: the dtype table, the lazy reshape view, formatting, `sanitize`.

`autocomp_jupyter.onnx_import` is the public entry point and re-exports `from_onnx`,
`run_with_values`, `sanitize` and `SUPPORTED_OPS`.
"""
from .importer import SUPPORTED_OPS, from_onnx, run_with_values, sanitize

__all__ = ["from_onnx", "run_with_values", "sanitize", "SUPPORTED_OPS"]
