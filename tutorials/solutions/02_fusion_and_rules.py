"""Solutions to tutorials/02_fusion_and_rules.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell c16: groups
groups = [["C", "D"], ["E", "G"], ["F"]]

# %% cell c19: my_yaml
my_yaml = '''
fusion:
  rules:
    - {name: epilogue, enabled: false}
    - {name: elementwise_chain, enabled: false}
'''

# %% cell c22: depth
depth = 2
