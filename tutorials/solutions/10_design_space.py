"""Solutions to tutorials/10_design_space.ipynb, for instructors and for tests/test_tutorials.py.

Each block after a `# %% cell ID` line replaces the exercise cell of that id (the cell that
starts with `# your answer:` and ships blank). `python tutorials/solutions/fill.py` writes the
notebooks with these answers filled in, into build/solutions/."""

# %% cell c16d16ae: front
def beats(a, b):
    keys = ("time_s", "energy_j", "area_mm2")
    return all(a[k] <= b[k] for k in keys) and any(a[k] < b[k] for k in keys)

ok = [i for i, p in enumerate(conv.points) if p["valid"] and p["verified"]]
front = [i for i in ok if not any(beats(conv.points[j], conv.points[i]) for j in ok)]
front

# %% cell 49b9cdf4: small, big, speedup
def find(ex, **params):
    """The index of the design whose params include these (dots written as __)."""
    want = {k.replace("__", "."): v for k, v in params.items()}
    return next(i for i, p in enumerate(ex.points) if all(p["params"][k] == v for k, v in want.items()))

small = find(att, compute__pe_rows=16, memory__SRAM__size_bytes=256 * 1024)
big = find(att, compute__pe_rows=32, memory__SRAM__size_bytes=256 * 1024)
speedup = att.points[small]["time_s"] / att.points[big]["time_s"]
speedup

# %% cell 24bfa4bd: faster, frugal
on16 = [p for p in flows.points if p["params"]["compute.pe_rows"] == 16]
faster = min(on16, key=lambda p: p["time_s"])["params"]["compute.dataflow"]
frugal = min(on16, key=lambda p: p["energy_j"])["params"]["compute.dataflow"]
faster, frugal

# %% cell 067e67ed: choice
within = [i for i, p in enumerate(conv.points)
          if p["valid"] and p["verified"] and p["time_s"] <= budget["max_time_s"]
          and p["energy_j"] <= budget["max_energy_j"] and p["area_mm2"] <= budget["max_area_mm2"]]
choice = min(within, key=lambda i: conv.points[i]["edp"]) if within else None
choice

# %% cell b7e1a0c5: frugal_design, slower_by
ran = [i for i, p in enumerate(by_energy.points) if p["valid"] and p["verified"]]
frugal_design = min(ran, key=lambda i: by_energy.points[i]["energy_j"])
fastest = min(p["time_s"] for p in by_latency.points if p["valid"] and p["verified"])
slower_by = by_energy.points[frugal_design]["time_s"] / fastest
frugal_design, slower_by
