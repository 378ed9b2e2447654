"""Host benchmark (not a test): generated C against the field's libraries, one thread and all cores.

    python benchmarks/bench_host.py [--quick] [--tune N] [--threads N]

For each kernel — GEMM 1024^3, the tall GEMM M=4096 K=1024 N=256, conv 3x3 64->64 ch 56x56
pad 1, a depthwise 3x3 (64 ch, 56x56, pad 1) and a BERT FFN linear layer (128 tokens,
768 -> 3072, bias) — one table row with GFLOP/s of:

- generated C: the plan `optimize(src, target="host", tune=N)` picks (the host model
  chooses; nothing here is measured to pick it), compiled and run by autocomp_jupyter.host;
- numpy (OpenBLAS): `A @ B` (+ bias); convolutions as im2col (a padded copy and
  sliding_window_view, materialised) + one GEMM, depthwise as im2col + a batched matvec;
- naive C: the untiled loop nest compiled with the same flags;
- TVM (where it installs): the same TE program with a simple schedule — the innermost
  output loop split by 16 and vectorised, reductions outside it, the outer output loops
  fused and parallel — built with LLVM, timed on TVM arrays;
- the host model's prediction for the generated C, predicted / measured (median), and
  predicted / fastest run (on a shared machine other processes only add time, so the
  fastest of the rounds is the nearest to what the model describes: the code alone).

All three libraries run side by side in one child process per thread count, their thread
counts fixed before they load (OPENBLAS_NUM_THREADS, TVM_NUM_THREADS; OMP_NUM_THREADS for
the C): one thread, then all the cores this process may use. Each round calls every
library's kernel once, interleaved, so on a shared machine all of them see the same load;
times are medians over the rounds and the ratios in the last lines come from this one
run. The load average is printed before and after each table: all-core figures are only as
good as the cores other processes leave. The generated C is also run once through
`autocomp_jupyter.host` to check it against the interpreter.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

KERNELS = {
    "GEMM 1024^3": ("input A: f32[1024, 1024]\ninput B: f32[1024, 1024]\nC = matmul(A, B)\n", 2 * 1024 ** 3),
    "GEMM M=4096 K=1024 N=256": ("input A: f32[4096, 1024]\ninput B: f32[1024, 256]\nC = matmul(A, B)\n",
                                 2 * 4096 * 1024 * 256),
    "conv 3x3 64->64 56x56 pad 1": ("input X: f32[1, 64, 56, 56]\nparam W: f32[64, 64, 3, 3]\n"
                                    "Y = conv2d(X, W, stride=1, padding=1)\n", 2 * 64 * 64 * 9 * 56 * 56),
    "depthwise 3x3 64 ch 56x56": ("input X: f32[1, 64, 56, 56]\nparam W: f32[64, 1, 3, 3]\n"
                                  "Y = depthwise_conv2d(X, W, stride=1, padding=1)\n", 2 * 64 * 9 * 56 * 56),
    "BERT FFN linear 128x768->3072": ("input X: f32[128, 768]\nparam W: f32[768, 3072]\nparam b: f32[3072]\n"
                                      "Y = linear(X, W, b)\n", 2 * 128 * 768 * 3072),
}


def _im2col(x, r, s, stride, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]
    n, c, p, q = win.shape[:4]
    return np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * r * s, p * q), (p, q)


def numpy_kernels():
    """name -> zero-argument callable computing the kernel with numpy (inputs made here)."""
    rng = np.random.default_rng(0)
    f32 = lambda *shape: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    a, b = f32(1024, 1024), f32(1024, 1024)
    ta, tb = f32(4096, 1024), f32(1024, 256)
    x, w = f32(1, 64, 56, 56), f32(64, 64, 3, 3)
    dw = f32(64, 1, 3, 3)
    fx, fw, fb = f32(128, 768), f32(768, 3072), f32(3072)

    def conv():
        cols, (p, q) = _im2col(x, 3, 3, 1, 1)
        return (w.reshape(64, -1) @ cols[0]).reshape(1, 64, p, q)

    def depthwise():
        cols, (p, q) = _im2col(x, 3, 3, 1, 1)            # [1, 64*9, p*q]
        return np.matmul(dw.reshape(64, 1, 9), cols[0].reshape(64, 9, p * q)).reshape(1, 64, p, q)

    return {"GEMM 1024^3": lambda: a @ b, "GEMM M=4096 K=1024 N=256": lambda: ta @ tb,
            "conv 3x3 64->64 56x56 pad 1": conv, "depthwise 3x3 64 ch 56x56": depthwise,
            "BERT FFN linear 128x768->3072": lambda: fx @ fw + fb}


def tvm_kernels(threads: int):
    """name -> callable running TVM's build of the kernel with a simple schedule."""
    import tvm
    from tvm import te

    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.tvm_bridge import build_te

    out = {}
    for name, (src, _) in KERNELS.items():
        program = parse(src)
        env = build_te(program)
        args = [env[t.name] for t in program.inputs] + [env[o] for o in program.outputs]
        sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(args)}))
        for op in program.ops:
            for st in op.statements:
                if st.reduce is None:
                    continue
                block = sch.get_sblock(st.target)
                loops = sch.get_loops(block)
                n_out = len(st.target_indices)
                outer, red = loops[:n_out], loops[n_out:]
                # a 4 x 16 register tile (rows: the channel loop of NCHW, else the row loop;
                # columns: the innermost output loop), accumulated locally, reductions outside
                row = 1 if n_out == 4 else n_out - 2
                ho, hi = sch.split(outer[row], factors=[None, 4])
                wo, wi = sch.split(outer[-1], factors=[None, 16])
                rest = [l for d, l in enumerate(outer[:-1]) if d != row]
                sch.reorder(*outer[:row], ho, *rest[row:], wo, *red, hi, wi)
                local = sch.cache_write(block, 0, "local")
                sch.reverse_compute_at(local, wo)
                fused = sch.fuse(*outer[:row], ho) if row > 0 else ho
                if threads > 1:
                    sch.parallel(fused)
                sch.unroll(hi)
                sch.vectorize(wi)
        lib = tvm.compile(sch.mod, target=_tvm_target(tvm))
        dev = tvm.cpu(0)
        rng = np.random.default_rng(0)
        arrays = [tvm.runtime.tensor(rng.standard_normal(t.shape).astype(np.float32), dev) for t in program.inputs]
        outs = [tvm.runtime.tensor(np.zeros(program.tensor(o).shape, dtype=np.float32), dev) for o in program.outputs]
        out[name] = (lambda lib=lib, arrays=arrays, outs=outs: lib["main"](*arrays, *outs))
    return out


def _tvm_target(tvm):
    """LLVM for this CPU (its vector extensions), else plain LLVM."""
    try:
        cpu = tvm.target.codegen.llvm_get_system_cpu()
        return tvm.target.Target({"kind": "llvm", "mcpu": cpu})
    except Exception:
        return tvm.target.Target("llvm")


def generated_kernels(job: list) -> dict:
    """name -> callable running the compiled generated C (ctypes, in this process)."""
    import ctypes

    out = {}
    rng = np.random.default_rng(0)
    for entry in job:
        lib = ctypes.CDLL(entry["library"])
        arrays = [rng.standard_normal(shape, dtype=np.float32) for shape in entry["shapes"]]
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        out[entry["name"]] = (lambda lib=lib, ptrs=ptrs, arrays=arrays: lib.program_run(ptrs))
    return out


def worker(threads: int, repeats: int, job_path: str) -> None:
    """Child process: time the generated C, numpy and TVM side by side, interleaved call by
    call (each round runs every library's kernel once, after one warm-up each), so that all
    three see the same share of a busy machine; print {library: {name: [seconds...]}}."""
    with open(job_path) as f:
        job = json.load(f)
    libs = {"generated": generated_kernels(job), "numpy": numpy_kernels()}
    try:
        libs["tvm"] = tvm_kernels(threads)
    except ImportError:
        pass
    times = {lib: {name: [] for name in fns} for lib, fns in libs.items()}
    for fns in libs.values():
        for fn in fns.values():
            fn()
    for _ in range(repeats):
        for name in KERNELS:
            for lib, fns in libs.items():
                if name in fns:
                    t = time.perf_counter()
                    fns[name]()
                    times[lib][name].append(time.perf_counter() - t)
    print(json.dumps(times))


def run_worker(threads: int, repeats: int, job: list) -> dict:
    """{library: {name: (median, fastest) seconds}} from one side-by-side child (`worker`)."""
    import tempfile

    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               TVM_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.setdefault("OMP_WAIT_POLICY", "passive")     # as autocomp_jupyter.host runs generated code
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(threads), str(repeats),
                               f.name], capture_output=True, text=True, env=env, timeout=3600)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        print(f"  (worker failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode})")
        return {}
    raw = json.loads(proc.stdout.strip().splitlines()[-1])
    return {lib: {name: (float(np.median(ts)), float(min(ts))) for name, ts in per.items()} for lib, per in raw.items()}


def main(argv) -> None:
    import autocomp_jupyter as autocomp
    from autocomp_jupyter import host
    from autocomp_jupyter.accel.cost import naive_schedule
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.result import Plan
    from autocomp_jupyter.ir.schedule import kernels_unfused

    quick = "--quick" in argv
    tune = int(argv[argv.index("--tune") + 1]) if "--tune" in argv else (50 if quick else 300)
    cores = int(argv[argv.index("--threads") + 1]) if "--threads" in argv else host.default_threads()
    repeats = 5 if quick else 11
    target = load_target("host")
    print(f"# bench_host  {time.strftime('%Y-%m-%dT%H:%M:%S')}  cores usable: {host.default_threads()}  "
          f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  tune={tune}")
    plans = {}
    for name, (src, _) in KERNELS.items():
        res = autocomp.optimize(src, target="host", tune=tune, seed=0)
        plans[name] = res.after
    from autocomp_jupyter.codegen.c import buffer_layout, tensor_of

    job = []
    for name, plan in plans.items():
        compiled = host.compile_plan(plan, target)
        job.append({"name": name, "library": str(compiled.library_path),
                    "shapes": [list(tensor_of(plan, t).shape) for t, _ in buffer_layout(plan)]})
    figures = {}
    for threads in dict.fromkeys([1, cores]):
        load_before = os.getloadavg()
        libs = run_worker(threads, repeats, job)
        print(f"\n## {threads} thread{'s' if threads > 1 else ''}  (GFLOP/s, medians of {repeats} side-by-side "
              f"rounds; load average {' '.join(f'{x:.2f}' for x in load_before)} before, "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after)\n")
        print("| kernel | generated C | numpy (OpenBLAS) | naive C | TVM simple schedule | model predicted | "
              "predicted / measured | predicted / fastest |")
        print("|---|---|---|---|---|---|---|---|")
        for name, (src, flops) in KERNELS.items():
            plan = plans[name]
            report = host.measure_plan(plan, target, repeats=1, threads=threads)    # the correctness check
            t_gen, t_fast = libs.get("generated", {}).get(name) or (report["measured_time_s"],) * 2
            predicted = sum(c.time_s for c in _costs(plan, target, threads))
            t_naive = None
            if not quick or flops < 1e9:
                program = parse(src)
                kernels = kernels_unfused(program)
                naive = Plan(program, kernels, tuple(naive_schedule(k, target) for k in kernels))
                t_naive = host.measured_time(naive, repeats=1, threads=threads, timeout=900)
            numpy_s, tvm_s = (libs.get(lib, {}).get(name, (None,))[0] for lib in ("numpy", "tvm"))
            cells = [flops / t_gen / 1e9, flops / numpy_s / 1e9 if numpy_s else None,
                     flops / t_naive / 1e9 if t_naive else None, flops / tvm_s / 1e9 if tvm_s else None,
                     flops / predicted / 1e9]
            text = [f"{c:.1f}" if c else "-" for c in cells]
            ok = "" if report["matches_interpreter"] else " (MISMATCH)"
            print(f"| {name} | {text[0]}{ok} | {text[1]} | {text[2]} | {text[3]} | {text[4]} | {predicted / t_gen:.2f} "
                  f"| {predicted / t_fast:.2f} |")
            figures[(name, threads)] = {"gen": t_gen, "numpy": numpy_s, "tvm": tvm_s, "predicted": predicted}
    print("\n## ratios (this run)\n")
    for name in KERNELS:
        one = figures[(name, 1)]
        line = f"- {name}: generated / numpy {one['numpy'] / one['gen']:.2f} (1 thread)" if one["numpy"] else f"- {name}:"
        if one["tvm"]:
            line += f", generated / TVM {one['tvm'] / one['gen']:.2f}"
        if (name, cores) in figures and cores > 1:
            line += f"; {cores} threads / 1 thread {one['gen'] / figures[(name, cores)]['gen']:.2f}x"
        print(line)


def _costs(plan, target, threads):
    """The host model's per-kernel costs of `plan` (the schedules' parallel annotations; one
    thread when `threads` is 1)."""
    from autocomp_jupyter.accel.cost import evaluate

    out = []
    for schedule in plan.schedules:
        if threads == 1:
            schedule = _without_parallel(schedule)
        out.append(evaluate(schedule, target))
    return out


def _without_parallel(schedule):
    import dataclasses

    return dataclasses.replace(schedule, annotations={**schedule.annotations, "parallel": ()})


if __name__ == "__main__":
    if "--worker" in sys.argv:
        i = sys.argv.index("--worker")
        worker(int(sys.argv[i + 1]), int(sys.argv[i + 2]), sys.argv[i + 3])
    else:
        main(sys.argv[1:])
