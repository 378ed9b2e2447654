"""Solutions to tutorials/04_scheduling_and_legality.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell c09: carrying_loop
carrying_loop = "k"

# %% cell c18: my_schedule
my_schedule = original.tile({"i": 4, "j": 4, "k": 4}).interchange("j_outer", "i_outer")
print(my_schedule)

# %% cell c21: parallel
parallel = {"i", "j"}

# %% cell c43: refused_loop, refused_kind
ev = tune.set("parallel k", True)          # what switching the toggle on does
print(ev["reason"][:200])
refused_loop, refused_kind = ev["loop"], "flow"

# %% cell c46: my_trace
# the outer level's order changed, k (the accumulation) still innermost and forward
order = ("j", "i", "k") if tune.base.order_at("VMEM")[:2] != ("j", "i") else ("i", "j", "k")
tune.set("reorder VMEM", order)
my_trace = tune.last_legal["trace"]

# %% cell c51: first_spilling_factor
import html
import re

small_tune.set("unroll", 1)                                  # then k innermost: each step loads A and B
small_tune.set("reorder registers", ("i", "j", "k"))
before = small_tune.last_legal["time_s"]
first_spilling_factor = None
for factor in (2, 4, 8, 16):
    moved = small_tune.set("unroll", factor)["time_s"] > before
    print(html.unescape(re.sub("<[^>]+>", "", small_tune.change.value)))
    if moved and first_spilling_factor is None:
        first_spilling_factor = factor
