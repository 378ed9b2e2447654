"""Solutions to tutorials/08_onnx_models.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell 5596a3e4: slowest
slowest = max(res_npu.report["kernels"], key=lambda k: k["metrics"]["time_s"])["name"]
print(slowest)

# %% cell d4af490f: share
share = max(k["metrics"]["time_s"] for k in res_npu.report["kernels"]) / sum(
    k["metrics"]["time_s"] for k in res_npu.report["kernels"])
print(f"{share:.3f}")
