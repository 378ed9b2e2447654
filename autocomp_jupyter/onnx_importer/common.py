"""What the importer's modules share: the ONNX element types as DSL dtypes, the lazy view of a
reshaped tensor, number and shape formatting, and `sanitize` (an ONNX name as a DSL name).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import UserError


def _onnx():
    try:
        import onnx
    except ImportError:
        raise UserError("reading ONNX models needs the 'onnx' package",
                        filename="from_onnx") from None
    return onnx


# onnx.TensorProto codes → DSL dtypes: the 64-bit and unsigned integer types as i32 (values
# past its range saturate), BOOL as i8 holding 0 or 1. DOUBLE graph inputs are refused: f32
# would silently lose their range (1e200 becomes inf); float64 constants become f32 params.
_DTYPES = {1: "f32", 10: "f16", 16: "bf16", 3: "i8", 6: "i32", 7: "i32", 2: "i32", 4: "i32",
           5: "i32", 12: "i32", 13: "i32", 9: "i8"}
# Folding a constant computation may build at most this many elements (a mutated
# ConstantOfShape or Expand must not exhaust memory).
_FOLD_ELEMENTS = 1 << 27
_F32_MAX = float(np.finfo(np.float32).max)
_NP_DTYPE = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i8": np.int8, "i32": np.int32}
_RESERVED = {"input", "param", "tensor", "output", "where", "and"}
_INDEX_NAME = re.compile(r"^(?:[ijkbu]\d*|n|c|h|w|r|s|f|g|fo|a\d+)$")  # index names the importer and library use


@dataclass
class _View:
    """A tensor that is `base` (a DSL tensor) reshaped to `shape`, not yet materialised."""

    base: str
    shape: tuple[int, ...]


class _Skip(Exception):
    """This node has an error already recorded (or reads one that had)."""


def _type_name(onnx, code: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return f"an unknown element type (code {code})"


class _NotFinite(ValueError):
    """A constant the op's written form needs as a number is inf or NaN."""


def _fmt_num(value: float) -> str:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise _NotFinite(value)
    text = repr(value)
    return text if not text.startswith("-") else f"({text})"


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def sanitize(name: str) -> str:
    """An ONNX tensor name as a DSL name: kept where legal, else runs of other characters
    become '_' ('/layer1/conv1/Conv_output_0' → 'layer1_conv1_Conv', 'input.1' → 'input_1')."""
    out = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    out = re.sub(r"^onnx_+", "", out)
    if out.endswith("_output_0") and len(out) > len("_output_0"):
        out = out[: -len("_output_0")]
    if not out or out[0].isdigit():
        out = "t_" + out
    if out in _RESERVED or _INDEX_NAME.match(out):
        out += "_"
    return out
