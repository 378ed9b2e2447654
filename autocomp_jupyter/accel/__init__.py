"""The simulated accelerator: target descriptions, the analytic cost model, the tile search
that schedules with it, the tile-level simulator that checks it, and the roofline."""
from .cost import register_producer_search
from .target import Target, TargetError, list_targets, load_target, parse_target
from .tile_search import producer_schedule

# The cost model schedules a compute_at producer nest alone as the tile search does, and the
# search scores with the cost model: neither can import the other, so they meet here, below
# every user of either (a producer costed before any pass ran is scheduled as it is later).
register_producer_search(producer_schedule)

__all__ = ["Target", "TargetError", "list_targets", "load_target", "parse_target"]
