"""Short display names for kernels: what the views print where a kernel is named.

An imported model's kernels are named after their ops' ONNX tensor names
(`block_conv2_Conv_output_0_conv_block_conv2_Conv_block_Add_block_Relu_1`): too long for a
table cell, a picker or a plot label. When any kernel name of a plan is longer than
`MAX_NAME`, every kernel is shown as its first op's type and its index among the kernels
that start with that type, in plan order (`conv2d_3`, `linear_1`) — stable for a given
plan, short, and still saying what the kernel computes. The full name stays on hover
(`title`) and everywhere data is kept: the report JSON, `result.versions`, the API.
A plan whose names are all short (DSL programs: `C_D`) keeps them.
"""
from __future__ import annotations

from .fmt import esc

MAX_NAME = 24


def kernel_labels(result) -> dict[str, str]:
    """{full kernel name: display name} for the optimised plan (identity when all are short)."""
    return plan_labels(getattr(result, "after", None))


def plan_labels(plan) -> dict[str, str]:
    """{full kernel name: display name} for the kernels of `plan`."""
    kernels = list(getattr(plan, "kernels", ()) or ())
    names = [k.name for k in kernels]
    if not names or max(map(len, names)) <= MAX_NAME:
        labels = {n: n for n in names}
    else:
        program = plan.program
        counts: dict[str, int] = {}
        labels = {}
        for k in kernels:
            try:
                kind = program.op(k.ops[0]).kind
            except Exception:  # a kernel whose op is not in the program: keep a generic name
                kind = "kernel"
            counts[kind] = counts.get(kind, 0) + 1
            labels[k.name] = f"{kind}_{counts[kind]}"
    return labels


def kernel_label(result, name: str) -> str:
    """The display name of kernel `name` (the name itself when it has no short form)."""
    return kernel_labels(result).get(name, name)


def kernel_labeller(result):
    """A function name -> HTML: the short name in <code>, the full name on hover."""
    labels = kernel_labels(result)

    def label(name: str) -> str:
        short = labels.get(name, name)
        if short == name:
            return f"<code>{esc(name)}</code>"
        return f'<code class="autocomp-kname" title="{esc(name)}">{esc(short)}</code>'

    return label
