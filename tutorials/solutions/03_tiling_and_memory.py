"""Solutions to tutorials/03_tiling_and_memory.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell c09: footprint
t = res.report["kernels"][0]["tiles"]
i, j, k = t["i"]["SRAM"], t["j"]["SRAM"], t["k"]["SRAM"]
footprint = (i * k + k * j + i * j) * 4     # A tile + B tile + C tile, 4 bytes each
print(footprint, "bytes")

# %% cell c17: res_small
res_small = autocomp.optimize('''
input A: f32[512, 512]
input B: f32[512, 512]
C = matmul(A, B)
D = relu(C)
''', target="npu_small.yaml", tune=0)
for name, r in [("npu", res), ("npu_small", res_small)]:
    k0 = r.report["kernels"][0]
    print(f'{name:10} time {r.report["optimized"]["time_s"] * 1e6:8.1f} µs  roofline {r.report["roofline_fraction"]:.2f}  '
          f'SRAM tiles ' + "x".join(str(k0["tiles"][l]["SRAM"]) for l in "ijk"), " DRAM bytes", r.report["optimized"]["bytes"].get("DRAM"))
