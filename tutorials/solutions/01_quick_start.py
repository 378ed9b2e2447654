"""Solutions to tutorials/01_quick_start.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell c15: speedup, roofline_fraction, verified
speedup = res_npu.report["speedup_vs_naive"]
roofline_fraction = res_npu.report["roofline_fraction"]
verified = res_npu.report["verified"]
