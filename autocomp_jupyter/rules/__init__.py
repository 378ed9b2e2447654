"""The rewriting system: the rule engine (rule files, @adrs_rule, matching) and the passes."""
from .engine import Fuse, Replace, adrs_rule, list_rules, load_rules

__all__ = ["adrs_rule", "Fuse", "Replace", "load_rules", "list_rules"]
