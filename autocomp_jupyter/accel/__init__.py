"""The simulated accelerator: target descriptions, the analytic cost model, the tile-level
simulator that checks it, and the roofline."""
from .target import Target, TargetError, list_targets, load_target, parse_target

__all__ = ["Target", "TargetError", "list_targets", "load_target", "parse_target"]
