"""Solutions to tutorials/07_host_c.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell c10: kernel_functions
import re
kernel_functions = re.findall(r"static void (kernel_\w+)\(", res.code("c"))
print(kernel_functions)

# %% cell c13: ratio
ratio = res.report["measured"]["measured_time_s"] / res.report["optimized"]["time_s"]
print("measured / predicted = %.2f" % ratio)
