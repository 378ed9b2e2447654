"""autocomp-jupyter: rule-driven optimisation of tensor programs for tensor accelerators."""
__version__ = "0.1.0"

from .errors import UserError  # noqa: E402
from .dse import explore  # noqa: E402
from .onnx_import import from_onnx  # noqa: E402  (onnx itself is imported on first use)
from .pipeline import optimize  # noqa: E402
from .rules.engine import Fuse, Replace, adrs_rule  # noqa: E402

__all__ = ["optimize", "explore", "from_onnx", "adrs_rule", "Fuse", "Replace", "UserError", "__version__"]


def load_ipython_extension(ipython):
    """`%load_ext autocomp_jupyter`: registers %%autocomp, %autocomp_targets, %autocomp_rules."""
    from .magics import load_ipython_extension as load

    load(ipython)


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "autocomp-jupyter-labextension"}]
