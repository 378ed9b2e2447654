"""The benchmark suite: every workload on every preset, in one command.

    python benchmarks/run_suite.py [--quick] [--out benchmarks/results] [--readme]

Sections (see benchmarks/README.md for what each column means):

1. rules only: optimize(src, target, tune=0) for every workload x target;
2. tuned: optimize(src, target, tune=N) (N = --tune, default 1000);
3. search quality: the tuner against exhaustive and random search on a space small enough
   to enumerate (GEMM 256^3, tiles from divisors, all loop orders; benchmarks/bench_tune.py);
4. simulator vs analytic model: autocomp_jupyter.accel.sim.compare on the tuned schedules;
5. host: the generated C of the tuned plan against numpy and the naive loop nest, measured
   on this CPU (skipped with a note when there is no C compiler);
6. ZigZag: predicted cycles, mappings and search times side by side on ZigZag's bundled
   tpu_like accelerator (benchmarks/bench_zigzag.py), when `zigzag-dse` is installed.

Writes results.md, results.json and SVG plots (no plotting library needed) into --out;
--readme also replaces the block between `<!-- results:start -->` and `<!-- results:end -->`
in the repository README with the generated tables.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")        # one core: comparable timings,
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # and numpy's BLAS on one thread like the C

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import autocomp_jupyter as autocomp  # noqa: E402

WORKLOAD_DIR = HERE / "workloads"
TARGETS = ("tpu", "gpu", "npu", "gemmini", "host")
QUICK_WORKLOADS = ("gemm_small_64", "gemm_square_1024", "resnet50_conv4_3x3")
QUICK_TUNE = 100
HOST_WORKLOADS = ("gemm_small_64", "gemm_square_1024", "gemm_tall_4096x64x1024", "gemm_gemv_16x4096x4096",
                  "resnet50_conv2_3x3", "resnet50_conv2_1x1", "bert_ffn")
QUICK_HOST_WORKLOADS = ("gemm_small_64", "gemm_square_1024")
README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"

# The columns of the two main tables, in order: (key in a row dict, Markdown header).
COLUMNS = (
    ("workload", "workload"),
    ("target", "target"),
    ("verified", "verified"),
    ("speedup_vs_naive", "vs naive"),
    ("speedup_vs_library", "vs library"),
    ("speedup_fusion", "fusion"),
    ("fusion_share", "fusion share"),
    ("roofline_fraction", "roofline"),
    ("energy_j", "energy (J)"),
    ("tuning_seconds", "tuning (s)"),
    ("configs_evaluated", "configs"),
    ("pipeline_seconds", "pipeline (s)"),
)


# --------------------------------------------------------------------------- workloads


def workload_paths(names=None) -> list[Path]:
    """The .acir files of benchmarks/workloads, or those named (stem or path)."""
    available = {p.stem: p for p in sorted(WORKLOAD_DIR.glob("*.acir"))}
    if not names:
        return list(available.values())
    paths = []
    for name in names:
        path = Path(name)
        if path.suffix == ".acir" and path.exists():
            paths.append(path)
        elif name in available:
            paths.append(available[name])
        else:
            raise SystemExit(f"run_suite: unknown workload '{name}'; available: {', '.join(available)}")
    return paths


def describe(path: Path) -> str:
    """The first comment line of a workload file."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


# --------------------------------------------------------------------------- 1-2. rules only / tuned


def run_pipeline(path: Path, target: str, tune: int, seed: int, budget: float | None = None):
    """optimize() once: (row for the tables, Result or None)."""
    row = {"workload": path.stem, "target": target, "tune": tune}
    started = time.perf_counter()
    try:
        result = autocomp.optimize(path, target=target, tune=tune, seed=seed, budget=budget if tune else None)
    except Exception as err:  # a suite reports a failure and goes on
        row.update(verified=False, error=f"{type(err).__name__}: {err}",
                   pipeline_seconds=time.perf_counter() - started)
        return row, None
    report = result.report
    tuning = report.get("tuning") or {}
    row.update(
        verified=bool(report["verified"]),
        speedup_vs_naive=float(report["speedup_vs_naive"]),
        speedup_vs_library=float(report["speedup_vs_library"]),
        # gain_breakdown: fusion x tiling x scheduling = speedup_vs_library; the share is
        # fusion's part of the (log) gain, only where there is a gain to share.
        speedup_fusion=float(report["gain_breakdown"]["fusion"]),
        fusion_share=fusion_share(report["gain_breakdown"]["fusion"], report["speedup_vs_library"]),
        roofline_fraction=float(report["roofline_fraction"]),
        energy_j=float(report["optimized"]["energy_j"]),
        tuning_seconds=float(tuning.get("seconds", 0.0)),
        configs_evaluated=int(tuning.get("configs_evaluated", 0)),
        pipeline_seconds=time.perf_counter() - started,
        time_s={k: float(report[k]["time_s"]) for k in ("naive", "library", "optimized")},
        flops=float(report["program"]["flops"]),
        kernels=len(report["kernels"]),
        rules_fired=sum(1 for e in report["rules"] if e.get("applied")),
        rollbacks=len(report["rollbacks"]),
    )
    return row, result


def run_grid(paths, targets, tune, seed, log, keep_results=False, budget=None):
    rows, results = [], {}
    for path in paths:
        for target in targets:
            row, result = run_pipeline(path, target, tune, seed, budget)
            rows.append(row)
            if keep_results and result is not None:
                results[path.stem, target] = result
            log(_progress_line(row))
    return rows, results


def _progress_line(row) -> str:
    if "error" in row:
        return f"  {row['workload']:<26} {row['target']:<8} ERROR {row['error'][:160]}"
    return (f"  {row['workload']:<26} {row['target']:<8} verified={row['verified']!s:<5} "
            f"x{row['speedup_vs_naive']:<8.1f} vs naive  x{row['speedup_vs_library']:<6.2f} vs library  "
            f"roofline {row['roofline_fraction']:.2f}  {row['pipeline_seconds']:.1f} s")


# --------------------------------------------------------------------------- 3. search quality


def search_quality(target: str, seeds: int, budget: int = 1000) -> dict:
    """The tuner vs exhaustive and random search on GEMM 256^3 (bench_tune.py's space)."""
    import bench_tune
    from autocomp_jupyter.accel.cost import naive_schedule
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import kernels_unfused
    from autocomp_jupyter.tune import search_kernel

    tgt = load_target(target)
    program = parse(bench_tune.gemm(256), "<gemm256>")
    start = naive_schedule(kernels_unfused(program)[0], tgt)
    t0 = time.perf_counter()
    optimum, size = bench_tune.exhaustive(start, tgt)
    exhaustive_s = time.perf_counter() - t0
    rows = [{"search": "exhaustive", "evaluations": int(size), "best_time_s": optimum, "gap": 0.0,
             "worst_gap": 0.0, "seconds": exhaustive_s}]
    tuner, evals, secs = [], [], []
    for seed in range(seeds):
        t0 = time.perf_counter()
        best, _, n = search_kernel(start, tgt, budget, seed, divisors_only=True, tune_annotations=False)
        secs.append(time.perf_counter() - t0)
        tuner.append(float(best))
        evals.append(int(n))
    randoms, rsecs = [], []
    for seed in range(seeds):
        t0 = time.perf_counter()
        randoms.append(bench_tune.random_search(start, tgt, budget, seed))
        rsecs.append(time.perf_counter() - t0)
    for label, values, n, s in (("tuner", tuner, max(evals), secs), ("random", randoms, budget, rsecs)):
        med = statistics.median(values)
        rows.append({"search": label, "evaluations": n, "best_time_s": med, "gap": med / optimum - 1,
                     "worst_gap": max(values) / optimum - 1, "seconds": statistics.median(s)})
    return {"workload": "GEMM 256^3", "target": target, "seeds": seeds, "budget": budget,
            "space": int(size), "rows": rows}


# --------------------------------------------------------------------------- 4. simulator vs model


def sim_vs_model(results: dict, max_steps: int, log) -> list[dict]:
    """Per workload x target: the chosen schedules replayed by the simulator vs the model."""
    from autocomp_jupyter.accel.sim import compare

    rows = []
    for (workload, target), result in results.items():
        t0 = time.perf_counter()
        model_s = sim_s = 0.0
        sampled = False
        try:
            for schedule in result.after.schedules:
                c = compare(schedule, result.target, max_steps=max_steps)
                model_s += c["model_time_s"]
                sim_s += c["sim_time_s"]
                sampled |= bool(c["sampled"])
        except Exception as err:
            rows.append({"workload": workload, "target": target, "error": f"{type(err).__name__}: {err}"})
            log(f"  {workload:<26} {target:<8} ERROR {err}")
            continue
        row = {"workload": workload, "target": target, "kernels": len(result.after.schedules),
               "model_time_s": model_s, "sim_time_s": sim_s,
               "disagreement": abs(model_s - sim_s) / max(sim_s, 1e-30), "sampled": sampled,
               "seconds": time.perf_counter() - t0}
        rows.append(row)
        log(f"  {workload:<26} {target:<8} model {model_s:.3e} s  sim {sim_s:.3e} s  "
            f"{100 * row['disagreement']:.1f} %{' (sampled)' if sampled else ''}")
    return rows


# --------------------------------------------------------------------------- 5. host: C vs numpy vs naive C


def host_available() -> str:
    """'' when generated C can be compiled and run here, else why not."""
    try:
        from autocomp_jupyter import host
        host.find_compiler()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return ""


def numpy_seconds(program, repeats: int = 5) -> tuple[float, str]:
    """numpy's time for the program: np.matmul for a single matmul, else the reference
    interpreter (np.einsum / BLAS per statement), one BLAS thread."""
    from autocomp_jupyter import interp

    inputs = interp.random_inputs(program, 0)
    ops = list(program.ops)
    if len(ops) == 1 and ops[0].kind == "matmul":
        a, b = (inputs[n] for n in ops[0].inputs)
        run, how = (lambda: a @ b), "np.matmul"
    else:
        run, how = (lambda: interp.run(program, inputs)), "interpreter"
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), how


def host_comparison(results: dict, names, log, naive_timeout: float) -> list[dict]:
    from autocomp_jupyter import host

    rows = []
    for name in names:
        result = results.get((name, "host"))
        if result is None:
            continue
        row = {"workload": name, "flops": float(result.program.flops)}
        try:
            measured = host.measure_plan(result.after, result.target, repeats=5, threads=1)
            row["generated_s"] = measured["measured_time_s"]
            row["matches_interpreter"] = measured["matches_interpreter"]
            row["numpy_s"], row["numpy_how"] = numpy_seconds(result.program)
            row["naive_c_s"] = host.measured_time(result.before, repeats=1, threads=1, timeout=naive_timeout)
            row["model_s"] = float(result.report["optimized"]["time_s"])
        except Exception as err:
            row["error"] = f"{type(err).__name__}: {err}"
            log(f"  {name:<26} ERROR {row['error'][:200]}")
            rows.append(row)
            continue
        row["vs_numpy"] = row["numpy_s"] / row["generated_s"]
        row["vs_naive_c"] = row["naive_c_s"] / row["generated_s"] if math.isfinite(row["naive_c_s"]) else None
        rows.append(row)
        log(f"  {name:<26} generated {row['generated_s'] * 1e3:.2f} ms  numpy {row['numpy_s'] * 1e3:.2f} ms  "
            f"naive C {row['naive_c_s'] * 1e3:.2f} ms")
    return rows


# --------------------------------------------------------------------------- 6. ZigZag (optional)


def llm_inference(log) -> dict:
    """The LLM workloads of bench_llm.py at their real sizes (tune 0) on the accelerator presets:
    each one's speedup over the tuned library and limit fraction, and the ratios the LLM
    numbers are stated in (causal / unmasked attention, decode with / without the cache write,
    an embedding's flops per element moved)."""
    sys.path.insert(0, str(HERE))
    import bench_llm

    rows = []
    for name in bench_llm.DEFAULT:
        for target in bench_llm.TARGETS:
            start = time.perf_counter()
            report = autocomp.optimize(bench_llm.WORKLOADS / f"{name}.acir", target=target, tune=0).report
            row = {"workload": name, "target": target, "vs_library": report["speedup_vs_library"],
                   "limit_fraction": report["limit_fraction"], "time_s": report["optimized"]["time_s"],
                   "verified": report["verified"], "seconds": time.perf_counter() - start,
                   "split_k": next((r["applied"] for r in report["rules"] if r["rule"] == "split_k"), None),
                   "flops": sum(k["metrics"]["flops"] for k in report["kernels"])}
            rows.append(row)
            log(f"  {name:<28} {target:<8} {row['vs_library']:6.2f}x  limit {row['limit_fraction']:.2f}  "
                f"{row['seconds']:.1f} s")
    return {"rows": rows, "targets": list(bench_llm.TARGETS)}


def llm_markdown(section: dict, h: str) -> list[str]:
    rows = section["rows"]
    by = {(r["workload"], r["target"]): r for r in rows}
    targets = section["targets"]
    lines = [f"{h} LLM inference (tune=0, real sizes)", "",
             "Speedup over the tuned library and fraction of the physical limit, per workload "
             "(`benchmarks/workloads/`) and preset.", "",
             md_table(["workload"] + [f"{t} vs library / limit" for t in targets],
                      [[w] + [f"{by[w, t]['vs_library']:.2f} / {by[w, t]['limit_fraction']:.2f}"
                              + ("" if by[w, t]["verified"] else " (NOT verified)") if (w, t) in by else "-"
                              for t in targets]
                       for w in dict.fromkeys(r["workload"] for r in rows)]), ""]
    ratios = []
    for t in targets:
        def time_of(w):
            return by[w, t]["time_s"] if (w, t) in by else None
        causal, full = time_of("attention_2048_causal"), time_of("attention_2048")
        write, nowrite = time_of("decode_4096"), time_of("decode_4096_nowrite")
        emb = by.get(("embedding_32000x2048", t))
        ratios.append([t, f"{causal / full:.2f}" if causal and full else "-",
                       f"{write / nowrite:.2f}" if write and nowrite else "-",
                       f"{emb['flops'] / (64 * 2048):.2f}" if emb else "-"])
    lines += [md_table(["target", "causal / unmasked attention time", "decode with / without the cache write",
                        "embedding flops per element moved"], ratios), ""]
    return lines


def zigzag_status() -> str:
    """Why the ZigZag section has no numbers (see benchmarks/README.md, "Left out")."""
    try:
        from importlib.metadata import version

        import zigzag.api  # noqa: F401
    except Exception as err:
        return f"zigzag-dse does not import ({type(err).__name__}: {err}); `pip install zigzag-dse` to add it"
    return ""


# --------------------------------------------------------------------------- output: Markdown


def _fmt(value, key="") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "**NO**"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if key == "energy_j":
            return f"{value:.3g}"
        if key.startswith("speedup"):
            return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"
        if key in ("roofline_fraction", "fusion_share"):
            return f"{value:.2f}"
        if key.endswith("_s") or key.endswith("seconds"):
            return f"{value:.2f}" if value >= 0.01 else f"{value:.3g}"
        return f"{value:.3g}"
    return str(value)


def md_table(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def fusion_share(fusion: float, vs_library: float) -> float | None:
    """Fusion's share of the gain over the library, log(fusion) / log(speedup_vs_library)
    (1.0: fusion is all of it; < 0: fusion alone lost time the other steps won back); None
    when the gain is under 2%, where a share means nothing."""
    if not (vs_library > 1.02 and fusion > 0):
        return None
    return math.log(fusion) / math.log(vs_library)


def main_table(rows) -> str:
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["workload"], r["target"], "**ERROR**", r["error"][:80].replace("|", "/")]
                        + [""] * (len(COLUMNS) - 4))
        else:
            body.append([_fmt(r.get(k), k) for k, _ in COLUMNS])
    return md_table([h for _, h in COLUMNS], body)


def geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary_table(rows) -> str:
    """Per target: geometric-mean speedups and mean roofline fraction over the workloads."""
    body = []
    for target in dict.fromkeys(r["target"] for r in rows):
        ok = [r for r in rows if r["target"] == target and "error" not in r]
        if not ok:
            continue
        body.append([target, f"{sum(r['verified'] for r in ok)}/{len(ok)}",
                     _fmt(geomean([r["speedup_vs_naive"] for r in ok]), "speedup"),
                     _fmt(geomean([r["speedup_vs_library"] for r in ok]), "speedup"),
                     _fmt(statistics.mean(r["roofline_fraction"] for r in ok), "roofline_fraction")])
    return md_table(["target", "verified", "geomean vs naive", "geomean vs library", "mean roofline"], body)


def markdown(data: dict, for_readme: bool = False) -> str:
    meta = data["meta"]
    lines = []
    if not for_readme:
        lines += ["# autocomp-jupyter benchmark suite", ""]
    lines += [f"Generated by `{meta['command']}` on {meta['date']} ({meta['machine']}, Python {meta['python']}, "
              f"autocomp-jupyter {meta['version']}); suite wall time {meta['wall_seconds']:.0f} s. "
              "Times and energy come from the analytic cost model of each simulated target "
              "(the host section measures real runs). Column meanings: `benchmarks/README.md`.", ""]
    h = "###" if for_readme else "##"
    sections = data["sections"]
    if "tuned" in sections:
        lines += [f"{h} Tuned (tune={meta['tune']})", "", summary_table(sections["tuned"]), "",
                  main_table(sections["tuned"]), ""]
    if "rules" in sections:
        lines += [f"{h} Rules only (tune=0)", "", summary_table(sections["rules"]), "",
                  main_table(sections["rules"]), ""]
    if for_readme:
        return "\n".join(lines).rstrip() + "\n"
    if "search" in sections:
        s = sections["search"]
        lines += [f"{h} Search quality: tuner vs exhaustive vs random", ""]
        if "skipped" in s:
            lines += [f"Skipped: {s['skipped']}", ""]
        else:
            lines += [f"{s['workload']} on `{s['target']}`: tiles from divisors, every loop order at every level "
                      f"({s['space']:,} configurations); tuner and random search get {s['budget']} evaluations, "
                      f"median over {s['seeds']} seeds; gap = best time / exhaustive optimum - 1.", "",
                      md_table(["search", "evaluations", "best time (us)", "median gap", "worst gap", "seconds"],
                               [[r["search"], f"{r['evaluations']:,}", f"{r['best_time_s'] * 1e6:.3f}",
                                 f"{100 * r['gap']:.2f} %", f"{100 * r['worst_gap']:.2f} %", f"{r['seconds']:.2f}"]
                                for r in s["rows"]]), ""]
    if "sim" in sections:
        rows = sections["sim"]
        ok = [r for r in rows if "error" not in r]
        lines += [f"{h} Simulator vs analytic model (tuned schedules)", ""]
        if ok:
            errs = [r["disagreement"] for r in ok]
            lines += [f"Disagreement = |model - simulator| / simulator on the whole program's time; "
                      f"median {100 * statistics.median(errs):.1f} %, max {100 * max(errs):.1f} % over {len(ok)} "
                      f"workload x target pairs. 'sampled': the simulator replayed the first "
                      f"{data['meta']['sim_max_steps']:,} innermost tiles of a kernel and scaled up.", ""]
        lines += [md_table(["workload", "target", "kernels", "model (s)", "simulator (s)", "disagreement", "sampled"],
                           [[r["workload"], r["target"], "", "", "", "ERROR " + r["error"][:60], ""] if "error" in r
                            else [r["workload"], r["target"], r["kernels"], f"{r['model_time_s']:.3e}",
                                  f"{r['sim_time_s']:.3e}", f"{100 * r['disagreement']:.1f} %",
                                  "yes" if r["sampled"] else ""] for r in rows]), ""]
    if "host" in sections:
        s = sections["host"]
        lines += [f"{h} Host: generated C vs numpy vs naive C (measured, one thread)", ""]
        if isinstance(s, dict) and "skipped" in s:
            lines += [f"Skipped: {s['skipped']}", ""]
        else:
            body = []
            for r in s:
                if "error" in r:
                    body.append([r["workload"], "ERROR " + r["error"][:80].replace("|", "/"), "", "", "", "", "", ""])
                    continue
                gflops = r["flops"] / r["generated_s"] / 1e9
                body.append([r["workload"], f"{r['generated_s'] * 1e3:.3f}", f"{gflops:.1f}",
                             f"{r['numpy_s'] * 1e3:.3f} ({r['numpy_how']})", f"{r['vs_numpy']:.2f}",
                             f"{r['naive_c_s'] * 1e3:.3f}" if math.isfinite(r["naive_c_s"]) else "timeout",
                             _fmt(r["vs_naive_c"], "speedup"), _fmt(r["matches_interpreter"])])
            lines += ["`numpy / generated` > 1 means the generated C is faster than numpy.", "",
                      md_table(["workload", "generated C (ms)", "GFLOP/s", "numpy (ms)", "numpy / generated",
                                "naive C (ms)", "speedup vs naive C", "correct"], body), ""]
    if "llm" in sections:
        lines += llm_markdown(sections["llm"], h)
    if "zigzag" in sections:
        s = sections["zigzag"]
        lines += [f"{h} ZigZag", ""]
        if s.get("skipped"):
            lines += [f"Skipped: {s['skipped']}", ""]
        else:
            from bench_zigzag import markdown as zigzag_markdown
            lines += [zigzag_markdown(s["rows"]), ""]
    if data.get("plots"):
        lines += [f"{h} Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in data["plots"]] + [""]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- output: SVG plots


_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def svg_grouped_bars(title: str, groups: list[str], series: list[str], values: dict, ylabel: str,
                     log_scale: bool = False, ymax: float | None = None, reference: float | None = None) -> str:
    """A grouped bar chart as SVG text: one group per workload, one bar per series (target).
    values[(group, series)] -> float (missing or non-positive: no bar)."""
    width = max(640, 70 + len(groups) * (len(series) * 9 + 18) + 120)
    height, left, right, top, bottom = 380, 62, 110, 34, 120
    plot_w, plot_h = width - left - right, height - top - bottom
    finite = [v for v in values.values() if v and math.isfinite(v) and v > 0]
    hi = ymax or (max(finite) if finite else 1.0)
    lo = 1.0
    if log_scale:
        lo = 10 ** math.floor(math.log10(min(finite + [1.0])))
        hi = 10 ** math.ceil(math.log10(max(hi, lo * 10)))

    def y_of(v: float) -> float:
        if log_scale:
            frac = (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        else:
            frac = v / hi
        return top + plot_h * (1 - min(max(frac, 0.0), 1.0))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="20" font-size="14" font-weight="bold">{_esc(title)}</text>']
    ticks = ([lo * 10 ** i for i in range(int(round(math.log10(hi / lo))) + 1)] if log_scale
             else [hi * i / 5 for i in range(6)])
    for t in ticks:
        y = y_of(t)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t:g}</text>')
    if reference is not None:
        y = y_of(reference)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#333" '
                   f'stroke-dasharray="4 3"/>')
    out.append(f'<text transform="translate(16,{top + plot_h / 2}) rotate(-90)" text-anchor="middle">'
               f'{_esc(ylabel)}</text>')
    group_w = plot_w / max(len(groups), 1)
    bar_w = min(14.0, (group_w - 8) / max(len(series), 1))
    for gi, group in enumerate(groups):
        x0 = left + gi * group_w + (group_w - bar_w * len(series)) / 2
        for si, name in enumerate(series):
            v = values.get((group, name))
            if not v or not math.isfinite(v) or v <= 0:
                continue
            y = y_of(v)
            out.append(f'<rect x="{x0 + si * bar_w:.1f}" y="{y:.1f}" width="{bar_w - 1:.1f}" '
                       f'height="{top + plot_h - y:.1f}" fill="{_PALETTE[si % len(_PALETTE)]}">'
                       f'<title>{_esc(group)} / {_esc(name)}: {v:.3g}</title></rect>')
        cx = left + gi * group_w + group_w / 2
        out.append(f'<text transform="translate({cx:.1f},{top + plot_h + 10}) rotate(40)" '
                   f'text-anchor="start">{_esc(group)}</text>')
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#333"/>')
    for si, name in enumerate(series):
        y = top + 10 + si * 16
        out.append(f'<rect x="{left + plot_w + 14}" y="{y - 9}" width="10" height="10" '
                   f'fill="{_PALETTE[si % len(_PALETTE)]}"/>')
        out.append(f'<text x="{left + plot_w + 28}" y="{y}">{_esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _esc(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_plots(data: dict, out: Path) -> list[str]:
    written = []
    for section in ("tuned", "rules"):
        rows = [r for r in data["sections"].get(section, []) if "error" not in r]
        if not rows:
            continue
        groups = list(dict.fromkeys(r["workload"] for r in rows))
        series = list(dict.fromkeys(r["target"] for r in rows))
        for key, label, log_scale, ymax, ref in (
                ("speedup_vs_library", "speedup vs library (log)", True, None, 1.0),
                ("roofline_fraction", "roofline fraction", False, 1.0, 1.0)):
            values = {(r["workload"], r["target"]): r[key] for r in rows}
            svg = svg_grouped_bars(f"{label} — {section}", groups, series, values, label, log_scale, ymax, ref)
            path = out / f"{key}_{section}.svg"
            path.write_text(svg)
            written.append(str(path))
    return written


# --------------------------------------------------------------------------- README block


def update_readme(readme: Path, block: str) -> None:
    """Replace what lies between the results markers in `readme` with `block`."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < 0 or end < start:
        missing = [m for m, i in ((README_START, start), (README_END, end)) if i < 0]
        what = (f"missing {' and '.join(missing)}" if missing else f"{README_END} comes before {README_START}")
        raise SystemExit(f"run_suite --readme: {readme}: {what}; put the two markers on their own lines where "
                         f"the results table belongs:\n{README_START}\n{README_END}")
    new = text[:start + len(README_START)] + "\n" + block.rstrip() + "\n" + text[end:]
    readme.write_text(new)


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help=f"fewer workloads ({', '.join(QUICK_WORKLOADS)}), tune={QUICK_TUNE}, 3 seeds: a couple of minutes")
    ap.add_argument("--out", default=str(HERE / "results"), help="output directory (default benchmarks/results)")
    ap.add_argument("--readme", nargs="?", const=str(ROOT / "README.md"), default=None, metavar="PATH",
                    help="also replace the block between the results markers in README.md (or PATH)")
    ap.add_argument("--workloads", nargs="+", metavar="NAME", help="workload names (file stems) or .acir paths")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), metavar="T", help="presets (default: all five)")
    ap.add_argument("--tune", type=int, default=None, help=f"configurations for the tuned section (default 1000, "
                                                           f"--quick {QUICK_TUNE})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=None,
                    help="tuning seconds per workload x target (optimize(budget=...)); default: no limit")
    ap.add_argument("--skip", nargs="+", default=[],
                    choices=["rules", "tuned", "search", "sim", "host", "zigzag", "llm"],
                    help="sections to leave out")
    ap.add_argument("--search-target", default="npu", help="target of the search-quality section (default npu)")
    ap.add_argument("--sim-max-steps", type=int, default=None,
                    help="innermost tiles the simulator replays per kernel before scaling up "
                         "(default 200000, --quick 20000)")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="run nothing: rebuild results.md, the plots (and --readme) from a saved results.json")
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, flush=True))
    if args.render:
        return render(Path(args.render), Path(args.out), args.readme, log)
    quick = args.quick
    tune = args.tune if args.tune is not None else (QUICK_TUNE if quick else 1000)
    paths = workload_paths(args.workloads or (QUICK_WORKLOADS if quick else None))
    targets = list(args.targets)
    seeds = 3 if quick else 10
    sim_steps = args.sim_max_steps or (20_000 if quick else 200_000)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/run_suite.py" + ("" if argv is None and len(sys.argv) < 2 else
                                              " " + " ".join(sys.argv[1:] if argv is None else argv))
    data = {"meta": {"command": cmd.strip(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
                     "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
                     "python": platform.python_version(), "version": autocomp.__version__,
                     "quick": quick, "tune": tune, "seed": args.seed, "budget": args.budget, "targets": targets,
                     "workloads": {p.stem: describe(p) for p in paths}, "sim_max_steps": sim_steps,
                     "columns": {k: h for k, h in COLUMNS}},
            "sections": {}}
    sections = data["sections"]

    def checkpoint():
        """Write what is done so far: a long run that is stopped still leaves its tables."""
        data["meta"]["wall_seconds"] = time.perf_counter() - started
        write_outputs(data, out, None, lambda msg: None)

    if "rules" not in args.skip:
        log(f"== rules only (tune=0): {len(paths)} workloads x {len(targets)} targets")
        sections["rules"], _ = run_grid(paths, targets, 0, args.seed, log)
        checkpoint()
    tuned_results = {}
    if "tuned" not in args.skip:
        log(f"== tuned (tune={tune})")
        sections["tuned"], tuned_results = run_grid(paths, targets, tune, args.seed, log, keep_results=True,
                                                     budget=args.budget)
        checkpoint()
    if "search" not in args.skip:
        log(f"== search quality on {args.search_target}: tuner vs exhaustive vs random (GEMM 256^3)")
        try:
            sections["search"] = search_quality(args.search_target, seeds)
            for r in sections["search"]["rows"]:
                log(f"  {r['search']:<10} {r['evaluations']:>9,} evals  gap {100 * r['gap']:6.2f} %  "
                    f"{r['seconds']:.2f} s")
        except Exception as err:
            sections["search"] = {"skipped": f"{type(err).__name__}: {err}"}
            log(f"  skipped: {sections['search']['skipped']}")
    if "sim" not in args.skip and tuned_results:
        log(f"== simulator vs analytic model (max {sim_steps:,} steps per kernel)")
        sections["sim"] = sim_vs_model(tuned_results, sim_steps, log)
        checkpoint()
    if "host" not in args.skip and "host" in targets:
        log("== host: generated C vs numpy vs naive C")
        why_not = host_available()
        names = [p.stem for p in paths if p.stem in (QUICK_HOST_WORKLOADS if quick else HOST_WORKLOADS)]
        if why_not:
            sections["host"] = {"skipped": f"no C toolchain ({why_not})"}
            log(f"  skipped: {why_not}")
        elif not tuned_results:
            sections["host"] = {"skipped": "needs the tuned section"}
        else:
            sections["host"] = host_comparison(tuned_results, names, log, naive_timeout=60 if quick else 600)
    if "llm" not in args.skip:
        log("== LLM inference (bench_llm.py's workloads, tune=0)")
        sections["llm"] = llm_inference(log)
        checkpoint()
    if "zigzag" not in args.skip:
        why = zigzag_status()
        if why:
            sections["zigzag"] = {"skipped": why}
            log(f"== ZigZag: skipped ({why})")
        else:
            sys.path.insert(0, str(HERE))
            from bench_zigzag import markdown as zigzag_markdown, table as zigzag_table
            log("== ZigZag: cost model vs ZigZag on tpu_like")
            sections["zigzag"] = {"rows": zigzag_table()}
            log(zigzag_markdown(sections["zigzag"]["rows"]))

    data["meta"]["wall_seconds"] = time.perf_counter() - started
    write_outputs(data, out, args.readme, log)
    return data


def write_outputs(data: dict, out: Path, readme: str | None, log) -> None:
    """results.json, results.md and the plots in `out`; the README block if asked."""
    out.mkdir(parents=True, exist_ok=True)
    data["plots"] = write_plots(data, out)
    (out / "results.json").write_text(json.dumps(_finite(data), indent=1, default=_json_default))
    (out / "results.md").write_text(markdown(data))
    log(f"\nwrote {out / 'results.md'}, {out / 'results.json'} and {len(data['plots'])} plots "
        f"(suite wall time {data['meta']['wall_seconds']:.0f} s)")
    if readme:
        update_readme(Path(readme), markdown(data, for_readme=True))
        log(f"updated the results block of {readme}")


def render(results_json: Path, out: Path, readme: str | None, log) -> dict:
    """Rebuild the Markdown, the plots and the README block from a saved results.json."""
    if not results_json.exists():
        raise SystemExit(f"run_suite --render: {results_json} does not exist; run the suite first")
    data = json.loads(results_json.read_text())
    write_outputs(data, out, readme, log)
    return data


def _finite(value):
    """JSON has no inf/nan: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return _finite(value.item())
    return str(value)


if __name__ == "__main__":
    main()
