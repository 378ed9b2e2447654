"""The tensor-IR DSL (docs/guide/dsl.md): `parse(text)` → a shape-checked `Program`.

`syntax.py` tokenizes and parses to a surface tree, `library.py` holds the library ops
and their lowering to comprehensions, `build.py` checks names and shapes and builds the IR.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..limits import SOURCE_BYTES, read_text_file
from ..ir.program import Program
from .build import build_program
from .library import LIBRARY

__all__ = ["parse", "load", "scaled_twin", "LIBRARY"]


def parse(source: str, filename: str = "<program>", max_extent: int | None = None) -> Program:
    """Parse DSL text into a Program; raises `UserError` listing every problem.

    `max_extent` shrinks every declared dimension above it to it (equal dimensions stay
    equal, so the program keeps its structure): the equivalence checks run on that.
    """
    if not isinstance(source, str):
        raise UserError(f"expected program text (str), got {type(source).__name__}")
    if len(source) > SOURCE_BYTES.value():
        raise UserError(f"the program is {len(source):,} characters, over the {SOURCE_BYTES.name} limit of "
                        f"{SOURCE_BYTES.show(SOURCE_BYTES.value())}; {SOURCE_BYTES.hint()}", filename=filename)
    if max_extent is not None and (isinstance(max_extent, bool) or not isinstance(max_extent, int)
                                   or max_extent < 1):
        raise UserError(f"max_extent must be a positive integer, got {max_extent!r}", filename=filename)
    return build_program(source, filename, max_extent)


def scaled_twin(source: str, filename: str = "<program>", max_extent: int = 8,
                up_to: int | None = None) -> Program | None:
    """The program with its dimensions shrunk to about `max_extent`, for equivalence runs.

    Shrinking each declared dimension on its own can break shapes that strided ops derive
    (a stride-2 conv makes width 5 into 3 but width 4 into 2, no longer the declared 3 of a
    tensor it is added to); then the extent doubles until the twin builds. At worst the twin
    is the program itself; with `up_to`, the extent doubles no further than that, and None
    says no twin built within it (an imported transformer's literal reshapes fail at every
    extent: each try parses the whole program). Errors of the program itself are raised as
    they are.
    """
    program = parse(source, filename)
    largest = max((d for t in program.tensors for d in t.shape), default=1)
    extent = max_extent
    while extent < largest and (up_to is None or extent <= up_to):
        try:
            return parse(source, filename, extent)
        except UserError:
            extent *= 2
    return program if up_to is None or largest <= up_to else None


def load(path: str | Path, max_extent: int | None = None) -> Program:
    """Read and parse an `.acir` file; unreadable, non-regular, oversized (`limits.SOURCE_BYTES`)
    or non-text files are user errors."""
    return parse(read_text_file(path, SOURCE_BYTES, "program file"), str(path), max_extent)
