"""Solutions to tutorials/09_attention_and_llm_inference.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell 3c0481bc: kernels, rule
kernels = len(attn.report["kernels"])
rule = [r["rule"] for r in attn.report["rules"] if r["pass"] == "fusion" and r["applied"]][-1]

# %% cell ef2722e8: share
n = 512
share = sum(s + 1 for s in range(n)) / (n * n)

# %% cell 585538c8: cache_bytes, seconds
cache_bytes = 2 * 8 * 2048 * 64 * 4
seconds = cache_bytes / decode.target.dram_bandwidth

# %% cell 65ac3e0b: n_chunks
n_chunks = 16
