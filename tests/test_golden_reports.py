"""Report numbers are unchanged by refactors: every example, fuzz reproducer and a set of generated
programs, on the presets and tuning budgets of tests/golden_reports.py, against tests/golden/reports.json.
Each report also holds what every report must, whatever its numbers (`golden_reports.assert_report_invariants`):
verified, never slower than the library, a gain chain multiplying to the speedup, no version faster than the
physical limit (`golden_reports.assert_within_the_limit`); and every kernel of its
optimised, library and naive plans replays from its trace to the same nest and cost
(`golden_reports.assert_every_kernel_replays`).

`UPDATE_GOLDEN=1` rewrites the file (review the diff: a number moves only when a change means it to).
"""
from __future__ import annotations

import json
import os

import pytest

from autocomp_jupyter.dsl import parse
from golden_reports import (GOLDEN, assert_every_kernel_replays, assert_report_invariants, assert_within_the_limit,
                            differences, kept, optimized, write_golden)

if os.environ.get("UPDATE_GOLDEN"):
    write_golden()

_RECORDS = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("case_id", sorted(_RECORDS))
def test_report_numbers_unchanged(case_id):
    record = _RECORDS[case_id]
    res = optimized(record)
    assert_every_kernel_replays(case_id, res)
    assert_within_the_limit(case_id, res.report)
    report = kept(res.report)
    assert_report_invariants(case_id, report, len(parse(record["source"], case_id).ops))
    diffs = differences(record["report"], report)
    assert not diffs, f"{case_id}: {len(diffs)} report numbers moved:\n" + "\n".join(diffs[:30])
