"""autocomp-jupyter: rule-driven optimisation of tensor programs for tensor accelerators."""
__version__ = "0.1.0"
