"""Flag values shared by the `autocomp` command and the `%%autocomp` magic (argparse types).

Both surfaces take the same flags (docs/guide/cli.md, docs/guide/notebook.md); one definition keeps their checks and
messages the same.
"""
from __future__ import annotations

import argparse


def int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= `minimum`, else "expected <what>, got '<text>'"."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    parse.__name__ = what
    return parse


def positive_seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value
