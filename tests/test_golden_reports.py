"""Report numbers are unchanged by refactors: every example, fuzz reproducer and a set of generated
programs, on the presets and tuning budgets of tests/golden_reports.py, against tests/golden/reports.json.

`UPDATE_GOLDEN=1` rewrites the file (review the diff: a number moves only when a change means it to).
"""
from __future__ import annotations

import json
import os

import pytest

from golden_reports import GOLDEN, differences, run_case, write_golden

if os.environ.get("UPDATE_GOLDEN"):
    write_golden()

_RECORDS = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("case_id", sorted(_RECORDS))
def test_report_numbers_unchanged(case_id):
    record = _RECORDS[case_id]
    diffs = differences(record["report"], run_case(record))
    assert not diffs, f"{case_id}: {len(diffs)} report numbers moved:\n" + "\n".join(diffs[:30])
