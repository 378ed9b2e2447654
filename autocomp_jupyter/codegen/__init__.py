"""Code generation for an optimised Plan: `generate(plan, target, lang)`.

- "c": a compilable C translation unit (`c/`, one module per strategy): one function per
  kernel following its Schedule, and `program_run(void* const* buffers)` (float or double
  arrays); what the host target compiles and runs. Which strategy each kernel takes is the
  host analysis's (`host_strategy`), shared with the host cost model.
- "pseudo": a readable accelerator kernel (`pseudo.py`): the tile loops with the memory level
  of each tile, the transfers between levels and the compute calls on the PE array.
"""
from __future__ import annotations

from ..errors import UserError

LANGUAGES = ("c", "pseudo")


def generate_or_reason(plan, target=None, lang: str = "c"):
    """`generate(...)`, or the exception codegen raised refusing this plan (what the Code tab
    shows; `Result.code` raises it again). An unknown `lang` still raises."""
    try:
        return generate(plan, target, lang)
    except UserError:
        raise
    except Exception as err:  # codegen refusing a plan is information for the Code tab, not a failed run
        return err


def generate(plan, target=None, lang: str = "c") -> str:
    """Source text for `plan` on `target` in `lang` ('c' or 'pseudo')."""
    if lang == "c":
        from .c import generate_c

        return generate_c(plan, target)
    if lang == "pseudo":
        from .pseudo import generate_pseudo

        return generate_pseudo(plan, target)
    from ..errors import did_you_mean

    hint = did_you_mean(str(lang), LANGUAGES)
    raise UserError(f"unknown code language {lang!r}: expected one of {', '.join(LANGUAGES)}"
                    + (f" ({hint})" if hint and "did you mean" in hint else ""), filename="code()")
