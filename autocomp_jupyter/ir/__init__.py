"""The intermediate representation: a Program (ops as tensor comprehensions), Kernels and
their Schedules, the lowered loop nest, and the Plan that ties kernels to schedules.

Nothing here imports the pipeline, the report or the UI: `import autocomp_jupyter.ir` is
the IR alone.
"""
from .plan import Plan
from .program import Program
from .schedule import Kernel, Schedule

__all__ = ["Plan", "Program", "Kernel", "Schedule"]
