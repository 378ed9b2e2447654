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
