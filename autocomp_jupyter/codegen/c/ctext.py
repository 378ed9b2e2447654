"""C text of numbers and affine index expressions: float and double literals (`c_float`,
`c_double`), an affine sum of C variables (`c_affine`), an access's flat offset over a
kernel's loops (`flat_reader`), and loop names replaced by their C variables (`rename`).
"""
from __future__ import annotations

import math
import re

from ...host_strategy.access import flat_offsets
from ...ir.program import Access


def c_float(value: float) -> str:
    """`value` as a C float literal (infinities and NaN by name)."""
    if value == math.inf:
        return "INFINITY"
    if value == -math.inf:
        return "(-INFINITY)"
    if math.isnan(value):
        return "NAN"
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


def rename(text: str, names: dict) -> str:
    """`text` with each whole-word name in `names` replaced (loop names → C variables)."""
    if not names:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], text)


def c_double(value: float) -> str:
    """`value` as a C double literal (an integer statement's constant: exactly the DSL's float)."""
    text = c_float(value)
    return text[:-1] if text.endswith("f") else text


def flat_reader(kernel, names):
    """`access` -> its flat element offset in C, the kernel's loops written as `names`."""
    def flat(access: Access) -> str:
        coeff, const = flat_offsets(kernel, access)
        return c_affine({names[l]: c for l, c in coeff.items()}, const)
    return flat


def c_affine(terms: dict[str, int], const: int) -> str:
    parts = []
    for var, coeff in terms.items():
        if coeff == 0:
            continue
        term = var if abs(coeff) == 1 else f"{abs(coeff)} * {var}"
        if not parts:
            parts.append(term if coeff > 0 else f"-{term}")
        else:
            parts.append(("+ " if coeff > 0 else "- ") + term)
    if const or not parts:
        if not parts:
            parts.append(str(const))
        else:
            parts.append(f"+ {const}" if const > 0 else f"- {-const}")
    return " ".join(parts)
