"""The tensor-IR DSL (DESIGN §3): `parse(text)` → a shape-checked `Program`.

`syntax.py` tokenizes and parses to a surface tree, `library.py` holds the library ops
and their lowering to comprehensions, `build.py` checks names and shapes and builds the IR.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..ir.program import Program
from .build import build_program
from .library import LIBRARY

__all__ = ["parse", "load", "LIBRARY"]


def parse(source: str, filename: str = "<program>", max_extent: int | None = None) -> Program:
    """Parse DSL text into a Program; raises `UserError` listing every problem.

    `max_extent` shrinks every declared dimension above it to it (equal dimensions stay
    equal, so the program keeps its structure): the equivalence checks run on that.
    """
    if not isinstance(source, str):
        raise UserError(f"expected program text (str), got {type(source).__name__}")
    return build_program(source, filename, max_extent)


def load(path: str | Path, max_extent: int | None = None) -> Program:
    """Read and parse an `.acir` file; unreadable or non-text files are user errors."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"cannot read '{path}': {err.strerror or err}", filename=str(path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"'{path}' is not UTF-8 text (byte {err.start} is 0x{data[err.start]:02x})",
                        filename=str(path)) from None
    return parse(text, str(path), max_extent)
