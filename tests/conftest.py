"""Test-wide settings. The spare-core workers (`autocomp_jupyter.workers`) are off: pytest
runs the tests on every core already, and a worker forked in one test would keep the code
it was forked with through another test's monkeypatches. tests/test_workers.py turns them
on where it checks them."""
import os

os.environ.setdefault("AUTOCOMP_WORKERS", "0")
