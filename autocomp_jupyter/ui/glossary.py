"""What every word in the views means: hover titles and the legend under a table.

`th(name)` is a table header with its explanation on hover (a dotted underline says there
is one); `legend(names)` is a folded list of the same explanations; `explain_why(text)`
marks the terms of a rule's "why" text (loop-letter tile strings, `in_place`, `spill`...)
with their explanation on hover. The wording follows the cost model (accel/cost/) and
the report's reference (docs/guide/report.md).
"""
from __future__ import annotations

import re

from .fmt import esc

GLOSSARY: dict[str, str] = {
    "time": "modelled run time on the target (cost model: compute and every memory level's "
            "transfers, overlapped where tiles fit twice — double buffering)",
    "flops": "floating-point operations (a multiply-add counts 2)",
    "AI (flop/B)": "arithmetic intensity: flops per byte moved to or from DRAM; right of the roofline's "
                   "ridge a kernel can be compute-bound, left of it it is memory-bound",
    "bw_util": "DRAM bandwidth utilisation: bytes moved to or from DRAM per second, as a fraction of "
               "the target's DRAM bandwidth (1.0 = the memory system is the limit)",
    "occupancy": "fraction of the compute units (cores / SMs / arrays) kept busy by the parallel tile "
                 "loops, including the idle units of a last, partial wave",
    "pe_util": "fraction of the processing elements' (PE array / vector lanes) multiply-add slots doing "
               "useful work; tiles that do not fill the array or do not divide the loop waste slots",
    "spill": "spill ratio: the fraction of a memory level's tile footprint that does not fit in it; that "
             "share of its traffic streams from the parent level instead (0% = every tile fits)",
    "energy": "modelled energy: multiply-adds plus bytes moved at each memory level, per the target's "
              "energy per MAC and per byte",
    "bound by": "what sets the kernel's modelled time: 'compute (<unit>)' (the PE array or vector unit), "
                "'operand streaming' (feeding operands into the datapath), 'serial transfers' (loads "
                "that cannot overlap compute), 'cold start' (the first tiles, loaded before anything "
                "computes), 'drain' (the last results, written back after everything computed), or "
                "'<level> bandwidth' / '<level> latency' for the memory level whose transfers take "
                "longest; '+ <part>' names another part above a quarter of the first",
    "tiles / order": "tile size of each loop at each memory level (outer/inner, e.g. VMEM/vregs: "
                     "a tile of 256 points in VMEM split into tiles of 64 in vregs), the loop order at "
                     "each level (outermost first) and the annotations",
    "in_place": "vectorize option: vectorise the chosen loop where it stands in the nest",
    "moved": "vectorize option: move the vectorised loop innermost at the innermost level, then vectorise",
    "none": "vectorize option: no vectorisation (the baseline the options are compared with)",
    "order@": "loop order at that memory level, outermost first",
    "parallel": "loops whose tiles run on different compute units at once (isl proves they carry no "
                "dependence)",
    "vectorize": "the loop mapped to the vector lanes (stride-1 access makes it a contiguous load)",
    "unroll": "the innermost loop body is repeated this many times per iteration",
    "naive": "one kernel per op, untiled, program order",
    "textbook": "one kernel per op, a fixed textbook tiling, no fusion",
    "library": "one kernel per op, each tuned alone (what a vendor library ships), no fusion",
    "optimized": "the verified plan the pipeline chose (fused, tiled, scheduled, tuned)",
}

GLOSSARY["tiles_letters"] = ("tile sizes listed one per loop, in the order the letters give (each "
                             "letter is a loop of the kernel; 'x' separates them)")
GLOSSARY["nxfxhxwxcxrxs"] = GLOSSARY["tiles_letters"] + " — e.g. a conv: n batch, f output channel, " \
                            "h/w output row/column, c input channel, r/s filter row/column"


def title(name: str) -> str:
    return GLOSSARY.get(name, "")


def th(name: str) -> str:
    """A header cell's content: the name, explained on hover."""
    tip = title(name)
    if not tip:
        return esc(name)
    return f'<span class="autocomp-term" title="{esc(tip)}">{esc(name)}</span>'


def legend(names) -> str:
    """The explanations of `names`, folded under a 'what the columns mean' summary."""
    shown = {"tiles_letters": "i x j x k", "order@": "order@LEVEL"}
    items = "".join(f"<dt>{esc(shown.get(n, n))}</dt><dd>{esc(GLOSSARY[n])}</dd>" for n in names if n in GLOSSARY)
    return ('<details class="autocomp-legend"><summary>what the words mean</summary>'
            f"<dl>{items}</dl></details>")


_LETTERS = re.compile(r"\((\w+(?:x\w+)+)\)")
# in_place / moved / none name vectorize options only where a time follows them.
_TERMS = re.compile(r"\b(?:in_place|moved|none)(?= \d)|\b(?:spill|pe_util|bw_util|occupancy|order@\w+)\b")


_MICRO = re.compile(r"(\d) us\b")


def explain_why(text: str) -> str:
    """A rule's "why" text, escaped, its terms explained on hover."""
    def letters(m: re.Match) -> str:
        loops = m.group(1).split("x")
        tip = GLOSSARY["tiles_letters"] + ": " + " × ".join(loops)
        return f'(<abbr class="autocomp-term" title="{esc(tip)}">{esc(m.group(1))}</abbr>)'

    def term(m: re.Match) -> str:
        word = m.group(0)
        tip = GLOSSARY.get("order@" if word.startswith("order@") else word, "")
        return f'<abbr class="autocomp-term" title="{esc(tip)}">{esc(word)}</abbr>' if tip else esc(word)

    text = _MICRO.sub(r"\1 µs", text)  # one spelling of microseconds in every view
    out, pos = [], 0
    for m in _LETTERS.finditer(text):
        out.append(_TERMS.sub(term, esc(text[pos:m.start()])))
        out.append(letters(m))
        pos = m.end()
    out.append(_TERMS.sub(term, esc(text[pos:])))
    return "".join(out)
