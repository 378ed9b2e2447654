"""ONNX import, the public entry point: `from_onnx(model)` → a `Program` with the model's weights.

The importer lives in the `onnx_importer` package (the walk, the validation, one module of op
handlers per op family); this module keeps the names users and the CLI import.
"""
from __future__ import annotations

from .onnx_importer import SUPPORTED_OPS, from_onnx, run_with_values, sanitize

__all__ = ["from_onnx", "run_with_values", "sanitize", "SUPPORTED_OPS"]
