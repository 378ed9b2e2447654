"""Report numbers are unchanged by refactors: every example, fuzz reproducer and a set of generated
programs, on the presets and tuning budgets of tests/golden_reports.py, against tests/golden/reports.json.
Each report also holds what every report must, whatever its numbers (`_holds_every_report_invariant`):
verified, never slower than the library, a gain chain multiplying to the speedup.

`UPDATE_GOLDEN=1` rewrites the file (review the diff: a number moves only when a change means it to).
"""
from __future__ import annotations

import json
import math
import os

import pytest

from autocomp_jupyter.dsl import parse
from golden_reports import GOLDEN, differences, run_case, write_golden

if os.environ.get("UPDATE_GOLDEN"):
    write_golden()

_RECORDS = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("case_id", sorted(_RECORDS))
def test_report_numbers_unchanged(case_id):
    record = _RECORDS[case_id]
    report = run_case(record)
    _holds_every_report_invariant(case_id, report, len(parse(record["source"], case_id).ops))
    diffs = differences(record["report"], report)
    assert not diffs, f"{case_id}: {len(diffs)} report numbers moved:\n" + "\n".join(diffs[:30])


def _holds_every_report_invariant(case_id: str, r: dict, ops: int) -> None:
    assert r["verified"], case_id
    for block in ("naive", "textbook", "library", "optimized"):
        assert math.isfinite(r[block]["time_s"]) and r[block]["time_s"] > 0, (case_id, block)
    assert r["speedup_vs_library"] >= 1.0 - 1e-9, case_id
    assert math.prod(r["gain_breakdown"].values()) == pytest.approx(r["speedup_vs_library"]), case_id
    if len(r["kernels"]) == ops:        # nothing fused: fusion gains exactly nothing
        assert r["gain_breakdown"]["fusion"] == pytest.approx(1.0), case_id
    elif r["optimized"]["bytes"]["DRAM"] < r["library"]["bytes"]["DRAM"] and not r["rollbacks"]:
        assert r["speedup_vs_library"] > 1.0, case_id     # fused, less DRAM traffic: faster
    assert 0 < r["limit_fraction"] <= 1 + 1e-9, case_id
