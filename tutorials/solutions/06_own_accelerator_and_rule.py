"""Solutions to tutorials/06_own_accelerator_and_rule.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell c12: my_target
my_target = my_accel.replace("name: myaccel", "name: myaccel32").replace("pe_rows: 16", "pe_rows: 32").replace("pe_cols: 16", "pe_cols: 32")

# %% cell c21: rule_name
@adrs_rule("pool_relu")
def pool_relu(producer, consumer):
    "relu applied to each pooled tile"
    if producer.kind == "maxpool2d" and consumer.kind == "relu":
        return Fuse("relu applied to each pooled tile")
    return None

rule_name = "pool_relu"
