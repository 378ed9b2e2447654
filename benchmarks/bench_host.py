"""Host benchmark (not a test): generated C against the field's libraries, one thread and all cores.

    python benchmarks/bench_host.py [--quick] [--tune N] [--threads N] [--rounds N]
    python benchmarks/bench_host.py --networks [resnet50,mobilenetv2,bert] [--tune N] [--rounds N]
    python benchmarks/bench_host.py --workloads A.acir[,B.acir] [--against DIR] [--rounds N]

`--workloads`: each workload's rules-only (or --tune) plan, its generated C timed on one thread
and all cores with, per kernel, the host model's time, the measured time (`measure_plan`'s
per-kernel medians) and the kernel's FMA floor (its flops at the FMA rate a core sustains,
`host_peak`, as the physical limit counts a contraction), then the program's physical limit
over the optimised time (`limit_fraction`) by the model and as measured. `--against DIR`: the
same workloads planned and compiled by another checkout's package (DIR holds its
`autocomp_jupyter/` and `rules/`, e.g. `git worktree add DIR main`), in a process of its
own; both builds' C run interleaved round by round in one worker (old vs new).

`--networks`: whole networks from ONNX (ResNet-50, MobileNetV2, a BERT-base layer, built as
`bench_onnx.py` builds them, random weights): the generated C (`optimize(model, target="host")`,
rules only unless --tune) against onnxruntime (one intra-op thread, then all cores), each
in a worker process of its own, run interleaved round by round as the kernels below; the
C is checked against the interpreter (`measure_plan`, the `--measure` path) and its host
model prediction printed beside the time; then, per network, the 10 slowest kernels on one
thread (with all cores: the same kernels' time through `measure_plan`, their scaling and
the model's time for that many threads) against their roofline (time at min(peak, bytes / L3 bandwidth): a network's
intermediates live in L3; a Winograd convolution's GFLOP/s count the direct convolution's
multiply-adds) with the path the C takes (packed GEMM, Winograd, direct rows, window rows,
channel blocks, loop nest). TVM is not run on the networks (no ONNX import here).

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

Every library runs in a process of its own per thread count (`worker`), its thread count
fixed before it loads (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS,
TVM_NUM_THREADS; one thread, then all the cores this process may use) and its idle threads
made to sleep rather than spin (OMP_WAIT_POLICY=passive, OPENBLAS_THREAD_TIMEOUT=4,
TVM_THREAD_POOL_SPIN_COUNT=0; the generated C's spin briefly, then sleep, GOMP_SPINCOUNT as
autocomp_jupyter.host runs them); the C's threads are bound one per core as
autocomp_jupyter.host runs them (TVM binds its own by default).
In one process, a library whose pool spins after its call (OpenBLAS spins ~0.1 s) holds a
core while the next library runs: the generated C measured 1.0x with "2 threads" that way,
and the compiled-C workers load numpy without a BLAS pool for the same reason. Each worker checks
that it may use the cores it is given (`os.sched_getaffinity`) and reports, per kernel, the
process's CPU time over wall time: the cores a call actually kept busy (~1 with one thread,
up to the thread count when it scales). The parent drives the rounds: each round calls
every library's kernel once, interleaved, so on a shared machine all of them see the same
load; times are medians over the rounds and the ratios in the last lines come from this one
run. The load average is printed before and after each table, and the cores other processes
kept busy meanwhile (the machine's busy CPU time from /proc/stat less ours): a round during
which they held more than OTHERS_MAX cores is run again, up to ROUNDS_RETRY times the rounds
asked for, and the table says how many of its rounds were clean — all-core figures are only
as good as the cores other processes leave. The generated C is also run once through
`autocomp_jupyter.host.measure_plan` (the product's `--measure --threads N` path) to check it
against the interpreter.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from autocomp_jupyter.host import SPIN_COUNT  # noqa: E402

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


def compiled_kernels(job: list) -> dict:
    """name -> callable running a compiled plan's `program_run` (ctypes, in this process)."""
    import ctypes

    out = {}
    rng = np.random.default_rng(0)
    for entry in job:
        lib = ctypes.CDLL(entry["library"])
        arrays = [rng.standard_normal(shape, dtype=np.float32) for shape in entry["shapes"]]
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        out[entry["name"]] = (lambda lib=lib, ptrs=ptrs, arrays=arrays: lib.program_run(ptrs))
    return out


# Idle threads sleep instead of spinning, so that no library's pool holds a core another
# library's call is timed on (see the module docstring).
QUIET_POOLS = {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "4", "TVM_THREAD_POOL_SPIN_COUNT": "0"}
LIBRARIES = ("generated", "numpy", "naive", "tvm")


def worker_env(library: str, threads: int) -> dict:
    """The environment of `library`'s worker running `threads` threads (set before any library
    loads). The compiled-C workers load numpy for their arrays only: no BLAS pool there (an
    idle OpenBLAS pool spins after numpy loads, as autocomp_jupyter.host's driver found)."""
    blas = threads if library in ("numpy", "tvm", "onnxruntime") else 1
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(blas),
               MKL_NUM_THREADS=str(blas), TVM_NUM_THREADS=str(threads))
    env.update(QUIET_POOLS)
    if library in ("generated", "naive"):   # the C's threads wait as autocomp_jupyter.host runs them
        del env["OMP_WAIT_POLICY"]
        env["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    if library in ("generated", "naive") and threads > 1:    # bound, as autocomp_jupyter.host runs the C
        env.update(OMP_PROC_BIND="true", OMP_PLACES="cores")
    return env


def worker(library: str, threads: int, job_path: str) -> None:
    """Child process for one library at one thread count: load its kernels, warm each up
    once, print one JSON line {"ready": ..., "affinity": [...]}, then for each kernel name
    read on stdin run it once and print {"s": wall seconds, "cpu": process CPU seconds}."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    with open(job_path) as f:
        job = json.load(f)
    kernels: dict = {}
    error = ""
    try:
        if "networks" in job:
            kernels = network_kernels(library, job["networks"], threads)
        elif library in ("generated", "naive"):
            kernels = compiled_kernels(job[library])
        elif library == "numpy":
            kernels = numpy_kernels()
        elif library == "tvm":
            kernels = tvm_kernels(threads)
    except ImportError as exc:
        error = f"{library} unavailable: {exc}"
    for fn in kernels.values():
        fn()
    print(json.dumps({"ready": sorted(kernels), "affinity": cores, "error": error}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            break
        c, t = time.process_time(), time.perf_counter()
        kernels[name]()
        t, c = time.perf_counter() - t, time.process_time() - c
        print(json.dumps({"s": t, "cpu": c}), flush=True)


class Worker:
    """A running `worker` process (one library, one thread count), driven over a pipe."""

    def __init__(self, library: str, threads: int, job_path: str):
        import tempfile

        self.library = library
        self.stderr = tempfile.TemporaryFile("w+")     # a file, not a pipe: warnings never block the worker
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", library, str(threads),
                                      job_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, env=worker_env(library, threads))
        line = self.proc.stdout.readline()
        if not line:
            self.stderr.seek(0)
            err = self.stderr.read().strip().splitlines()
            raise RuntimeError(f"{library} worker failed: {err[-1] if err else self.proc.wait()}")
        hello = json.loads(line)
        self.kernels, self.affinity, self.error = set(hello["ready"]), hello["affinity"], hello["error"]

    def run(self, name: str) -> tuple[float, float]:
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        return reply["s"], reply["cpu"]

    def close(self) -> None:
        try:
            self.proc.stdin.write("\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=60)
        self.stderr.close()


# A round during which other processes kept more than this many cores busy is run again (up to
# ROUNDS_RETRY times the rounds asked for, the last ones kept whatever the load): on this
# 2-core machine shared with other jobs, one such process halves a 2-thread run, and an
# all-cores figure with it is not a 2-thread figure (MobileNetV2: onnxruntime 7.4 ms
# "on 2 threads" with one core taken, 4.9 with both free).
OTHERS_MAX = 0.25
ROUNDS_RETRY = 3


def busy_cpu_seconds() -> float | None:
    """CPU seconds all processes have used on this machine (/proc/stat: user, nice, system,
    irq, softirq, steal), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_side_by_side(threads: int, rounds: int, job: dict, libraries=LIBRARIES, names=None) -> dict:
    """{library: {name: {"median", "fastest", "cores", "others", "rounds", "tried"}}}: every
    library's kernels, one process per library (`worker`), interleaved call by call for
    `rounds` rounds; "cores" is the process CPU time over the wall time, summed over the
    rounds; "others" the median over the kept rounds of the cores other processes kept busy
    meanwhile (the machine's busy CPU time less ours, over the round's wall time). A round
    with others above OTHERS_MAX is run again, up to ROUNDS_RETRY x `rounds` rounds in all
    ("tried"); then the last rounds are kept whatever the load."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    workers = {}
    try:
        for lib in libraries:
            try:
                w = Worker(lib, threads, f.name)
            except RuntimeError as exc:
                print(f"  ({exc})")
                continue
            if w.error:
                print(f"  ({w.error})")
            if len(w.affinity) < threads:
                print(f"  (warning: the {lib} worker may use only cores {w.affinity}, fewer than {threads} threads)")
            workers[lib] = w
        clean, loaded = [], []      # rounds: ({lib: {name: (s, cpu)}}, others)
        tried = 0
        while len(clean) < rounds and tried < ROUNDS_RETRY * rounds:
            tried += 1
            busy0, own0, t0 = busy_cpu_seconds(), time.process_time(), time.perf_counter()
            runs = {lib: {} for lib in workers}
            for name in names or KERNELS:
                for lib, w in workers.items():
                    if name in w.kernels:
                        runs[lib][name] = w.run(name)
            busy1, own1, wall = busy_cpu_seconds(), time.process_time(), time.perf_counter() - t0
            ours = sum(c for per in runs.values() for _, c in per.values()) + own1 - own0
            others = max(0.0, (busy1 - busy0 - ours) / wall) if busy0 is not None and wall > 0 else 0.0
            (clean if others <= OTHERS_MAX else loaded).append((runs, others))
        kept = clean + loaded[len(loaded) - max(0, rounds - len(clean)):] if len(clean) < rounds else clean
    finally:
        for w in workers.values():
            w.close()
        os.unlink(f.name)
    out = {}
    for lib in workers:
        for name in workers[lib].kernels:
            runs = [r[lib][name] for r, _ in kept if name in r[lib]]
            if runs:
                out.setdefault(lib, {})[name] = {
                    "median": float(np.median([s for s, _ in runs])), "fastest": float(min(s for s, _ in runs)),
                    "cores": sum(c for _, c in runs) / sum(s for s, _ in runs),
                    "others": float(np.median([o for _, o in kept])), "rounds": len(kept),
                    "clean": min(len(clean), rounds), "tried": tried}
    return out


def others_note(libs: dict) -> str:
    """How loaded the machine was over a side-by-side table (`run_side_by_side`'s record)."""
    entry = next((e for per in libs.values() for e in per.values()), None)
    if entry is None:
        return ""
    return (f"other processes kept {entry['others']:.2f} cores busy (median over the kept rounds); "
            f"{entry['clean']} of {entry['rounds']} kept rounds under {OTHERS_MAX} cores, {entry['tried']} run")


def parse_args(argv):
    import argparse

    parser = argparse.ArgumentParser(
        prog="bench_host.py", description="Generated C against numpy (OpenBLAS), naive C and TVM on this CPU, "
        "one thread and all cores (GFLOP/s tables; a benchmark, not a test).")
    parser.add_argument("--quick", action="store_true", help="tune 50, 5 rounds, naive C only for the small kernels")
    parser.add_argument("--tune", type=int, default=None, metavar="N",
                        help="configurations the tuner evaluates (default 300, 50 with --quick; 0: rules only)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="the all-cores thread count (default: the cores this process may use)")
    parser.add_argument("--networks", nargs="?", const="resnet50,mobilenetv2,bert", default=None, metavar="NAMES",  # or .onnx paths
                        help="whole networks instead of kernels (default all three: resnet50,mobilenetv2,bert)")
    parser.add_argument("--rounds", type=int, default=None, metavar="N",
                        help="side-by-side rounds per table (default 11, 5 with --quick)")
    parser.add_argument("--workloads", default=None, metavar="PATHS",
                        help="comma-separated .acir files: their plans' C per kernel against the model and "
                             "the FMA floor, and the limit fraction modelled and measured")
    parser.add_argument("--against", default=None, metavar="DIR",
                        help="with --workloads: also the plans another checkout (DIR/autocomp_jupyter, "
                             "DIR/rules) makes, run interleaved with this checkout's")
    args = parser.parse_args(argv)
    if args.against is not None and args.workloads is None:
        parser.error("--against needs --workloads")
    if args.against is not None and not os.path.isdir(os.path.join(args.against, "autocomp_jupyter")):
        parser.error(f"--against: {args.against!r} holds no autocomp_jupyter/ package")
    for path in (args.workloads or "").split(","):
        if path and not os.path.isfile(path):
            parser.error(f"--workloads: no such file {path!r}")
    for flag in ("tune", "threads", "rounds"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "tune" else 1):
            parser.error(f"--{flag} must be {'>= 0' if flag == 'tune' else '>= 1'}, got {value}")
    known = ("resnet50", "mobilenetv2", "bert")
    for name in (args.networks or "").split(","):
        if name.endswith(".onnx") and not os.path.exists(name):
            parser.error(f"--networks: no file {name!r}")
        if name and name not in known and not name.endswith(".onnx"):
            parser.error(f"--networks: unknown network {name!r} (expected a comma-separated list of "
                         f"{', '.join(known)}, or .onnx files)")
    return args


def main(argv) -> None:
    import autocomp_jupyter as autocomp
    from autocomp_jupyter import host
    from autocomp_jupyter.accel.cost import naive_schedule
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.codegen.c import buffer_layout, tensor_of
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import kernels_unfused
    from autocomp_jupyter.result import Plan

    args = parse_args(argv)
    if args.networks is not None:
        return networks_main(args)
    if args.workloads is not None:
        return workloads_main(args)
    quick = args.quick
    tune = args.tune if args.tune is not None else (50 if quick else 300)
    cores = args.threads or host.default_threads()
    rounds = args.rounds or (5 if quick else 11)
    target = load_target("host")
    _banner("", tune)
    plans, naive_plans = {}, {}
    for name, (src, flops) in KERNELS.items():
        plans[name] = autocomp.optimize(src, target="host", tune=tune, seed=0).after
        if not quick or flops < 1e9:
            program = parse(src)
            kernels = kernels_unfused(program)
            naive_plans[name] = Plan(program, kernels, tuple(naive_schedule(k, target) for k in kernels))

    def entries(which: dict) -> list:
        out = []
        for name, plan in which.items():
            compiled = host.compile_plan(plan, target)
            out.append({"name": name, "library": str(compiled.library_path),
                        "shapes": [list(tensor_of(plan, t).shape) for t, _ in buffer_layout(plan)]})
        return out

    job = {"generated": entries(plans), "naive": entries(naive_plans)}
    figures = {}
    for threads in dict.fromkeys([1, cores]):
        load_before = os.getloadavg()
        libs = run_side_by_side(threads, rounds, job)
        print(f"\n## {threads} thread{'s' if threads > 1 else ''}  (GFLOP/s, medians of {rounds} side-by-side "
              f"rounds; load average {' '.join(f'{x:.2f}' for x in load_before)} before, "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after; {others_note(libs)})\n")
        print("| kernel | generated C | numpy (OpenBLAS) | naive C | TVM simple schedule | model predicted | "
              "predicted / measured | predicted / fastest | measure_plan |")
        print("|---|---|---|---|---|---|---|---|---|")
        busy = {lib: [] for lib in libs}
        for name, (src, flops) in KERNELS.items():
            plan = plans[name]
            # the product's own path (`--measure --threads N`): the correctness check, and its time
            report = host.measure_plan(plan, target, repeats=9, threads=threads)
            gen = libs.get("generated", {}).get(name)
            t_gen, t_fast = (gen["median"], gen["fastest"]) if gen else (report["measured_time_s"],) * 2
            predicted = sum(c.time_s for c in _costs(plan, target, threads))
            secs = {lib: libs.get(lib, {}).get(name, {}).get("median") for lib in ("numpy", "naive", "tvm")}
            for lib, per in libs.items():
                if name in per:
                    busy[lib].append(f"{per[name]['cores']:.2f}")
            cells = [flops / t_gen / 1e9] + [flops / secs[lib] / 1e9 if secs[lib] else None
                                             for lib in ("numpy", "naive", "tvm")] + [flops / predicted / 1e9]
            text = [f"{c:.1f}" if c else "-" for c in cells]
            ok = "" if report["matches_interpreter"] else " (MISMATCH)"
            print(f"| {name} | {text[0]}{ok} | {text[1]} | {text[2]} | {text[3]} | {text[4]} | {predicted / t_gen:.2f} "
                  f"| {predicted / t_fast:.2f} | {flops / report['measured_time_s'] / 1e9:.1f} |")
            figures[(name, threads)] = {"gen": t_gen, "numpy": secs["numpy"], "tvm": secs["tvm"],
                                        "predicted": predicted, "product": report["measured_time_s"]}
        print("\ncores kept busy (process CPU time / wall time, per kernel in table order): "
              + "; ".join(f"{lib} {' '.join(v)}" for lib, v in busy.items()))
    print("\n## ratios (this run)\n")
    for name in KERNELS:
        one = figures[(name, 1)]
        line = f"- {name}: generated / numpy {one['numpy'] / one['gen']:.2f} (1 thread)" if one["numpy"] else f"- {name}:"
        if one["tvm"]:
            line += f", generated / TVM {one['tvm'] / one['gen']:.2f}"
        if (name, cores) in figures and cores > 1:
            many = figures[(name, cores)]
            line += (f"; {cores} threads / 1 thread: generated {one['gen'] / many['gen']:.2f}x "
                     f"(measure_plan {one['product'] / many['product']:.2f}x)")
            if one["numpy"] and many["numpy"]:
                line += f", numpy {one['numpy'] / many['numpy']:.2f}x"
        print(line)


# --------------------------------------------------------------------------- workloads, old vs new

def workload_build(path: str, tune: int) -> dict:
    """The plan `optimize(path, target="host", tune=tune)` makes with the package this process
    imports, compiled: {"library", "shapes", "kernels", "report": limit fraction, speedup, the
    limit, "model": {threads: {kernel: s}}, "flops": {kernel: flops}} (JSON-ready: what
    `--against` reads back from the other checkout's process)."""
    import autocomp_jupyter as autocomp
    from autocomp_jupyter import host
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.codegen.c import buffer_layout, tensor_of

    target = load_target("host")
    result = autocomp.optimize(path, target="host", tune=tune, seed=0)
    plan = result.after
    compiled = host.compile_plan(plan, target)
    cores = host.default_threads()
    model = {str(t): {k.name: c.time_s for k, c in zip(plan.kernels, _costs(plan, target, t))}
             for t in dict.fromkeys([1, cores])}
    return {"library": str(compiled.library_path), "source": str(compiled.source_path),
            "shapes": [list(tensor_of(plan, t).shape) for t, _ in buffer_layout(plan)],
            "kernels": [k.name for k in plan.kernels], "model": model,
            "flops": {k["name"]: k["metrics"]["flops"] for k in result.report["kernels"]},
            "limit": result.report["limit"], "limit_fraction": result.report["limit_fraction"],
            "speedup_vs_library": result.report["speedup_vs_library"], "package": autocomp.__file__}


def _banner(mode: str, tune: int, extra: str = "") -> None:
    """The run's first line: mode, time, usable cores, load average, tune (and `extra`)."""
    from autocomp_jupyter import host

    print(f"# bench_host{' ' + mode if mode else ''}  {time.strftime('%Y-%m-%dT%H:%M:%S')}  "
          f"cores usable: {host.default_threads()}  "
          f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  tune={tune}"
          + (f"  {extra}" if extra else ""))


def _limit_on(limit: dict, units: int, threads: int) -> float:
    """The report's physical limit (`limit.physical_limit`, for the target's `units` cores)
    on `threads` threads: each datapath's floor scaled to that many cores, the memory floor
    as it is."""
    scale = units / threads
    return max([limit["dram_s"]] + [s * scale for s in limit["datapaths_s"].values()]
               + list(limit.get("ports_s", {}).values()))


def workloads_main(args) -> None:
    import tempfile

    import autocomp_jupyter as autocomp
    from autocomp_jupyter import host
    from autocomp_jupyter.accel.host_peak import measured_flops
    from autocomp_jupyter.accel.target import load_target

    paths = [p for p in args.workloads.split(",") if p]
    tune = args.tune or 0
    cores = args.threads or host.default_threads()
    rounds = args.rounds or 11
    target = load_target("host")
    rate = measured_flops(max(4, min(16, target.compute.lanes))) or target.peak_flops("f32") / target.compute.units
    _banner("--workloads", tune, f"FMA rate a core sustains {rate / 1e9:.1f} GFLOP/s")
    builds = {}     # (path, "this" | "against") -> workload_build
    for path in paths:
        builds[(path, "this")] = workload_build(path, tune)
        if args.against:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(args.against))
            # run from DIR, its package imported first: bench_host puts this checkout on sys.path
            code = (f"import sys, json, autocomp_jupyter; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                    f"import bench_host; print(json.dumps(bench_host.workload_build({os.path.abspath(path)!r}, {tune})))")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                 cwd=os.path.abspath(args.against))
            if out.returncode:
                raise SystemExit(f"--against {args.against}: planning {path} failed:\n{out.stderr[-2000:]}")
            builds[(path, "against")] = json.loads(out.stdout.strip().splitlines()[-1])
    label = {"this": os.path.dirname(os.path.dirname(os.path.abspath(autocomp.__file__))),
             "against": os.path.abspath(args.against) if args.against else ""}
    names = {key: f"{os.path.basename(key[0])} ({key[1]})" for key in builds}
    job = {"generated": [{"name": names[key], "library": b["library"], "shapes": b["shapes"]} for key, b in builds.items()]}
    print("builds: " + "; ".join(f"{which} = {label[which]}" for which in ("this", "against") if label[which]))
    for threads in dict.fromkeys([1, cores]):
        libs = run_side_by_side(threads, rounds, job, libraries=("generated",), names=list(names.values()))
        gen = libs.get("generated", {})
        print(f"\n## {threads} thread{'s' if threads > 1 else ''}  (ms, medians of {rounds} interleaved rounds; "
              f"{others_note(libs)})\n")
        print("| workload | build | measured | fastest | model | model / fastest | limit | limit fraction: model, "
              "measured (fastest) | speedup vs library (model) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for key, b in builds.items():
            run = gen.get(names[key])
            if run is None:
                continue
            model = sum(b["model"][str(threads)].values())
            limit = _limit_on(b["limit"], target.compute.units, threads)
            print(f"| {os.path.basename(key[0])} | {key[1]} | {run['median'] * 1e3:.3f} | {run['fastest'] * 1e3:.3f} "
                  f"| {model * 1e3:.3f} | {model / run['fastest']:.2f} | {limit * 1e3:.3f} "
                  f"| {limit / model:.3f}, {limit / run['fastest']:.3f} | {b['speedup_vs_library']:.3f} |")
        if args.against:
            for path in paths:
                a, t = gen.get(names[(path, "against")]), gen.get(names[(path, "this")])
                if a and t:
                    print(f"- {os.path.basename(path)}: this / against {t['median'] / a['median']:.3f} (medians), "
                          f"{t['fastest'] / a['fastest']:.3f} (fastest)")
        for path in paths:
            b = builds[(path, "this")]
            plan_report = host.measure_plan(autocomp.optimize(path, target="host", tune=tune, seed=0).after, target,
                                            repeats=5, threads=threads)
            print(f"\n{os.path.basename(path)} (this build), per kernel on {threads} thread{'s' if threads > 1 else ''} "
                  f"(matches interpreter: {plan_report['matches_interpreter']}):\n")
            print("| kernel | measured ms | model ms | FMA floor ms | floor / measured | floor / model |")
            print("|---|---|---|---|---|---|")
            for k in b["kernels"]:
                meas, mod = plan_report["per_kernel"][k], b["model"][str(threads)][k]
                floor = b["flops"].get(k, 0.0) / (rate * threads)
                print(f"| {k} | {meas * 1e3:.3f} | {mod * 1e3:.3f} | {floor * 1e3:.3f} | {floor / meas:.3f} "
                      f"| {floor / mod:.3f} |")


# --------------------------------------------------------------------------- whole networks

def network_plan(name: str, tune: int):
    """(onnx model, optimised host Plan) of network `name`: one of bench_onnx.py's builders,
    or an .onnx file (an exporter's: its external weights beside it)."""
    import onnx

    import autocomp_jupyter as autocomp
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_onnx

    model = onnx.load(name) if name.endswith(".onnx") else bench_onnx.MODELS[name]()
    return model, autocomp.optimize(autocomp.from_onnx(model), target="host", tune=tune, seed=0).after


def network_job(name: str, model, plan, directory: str) -> dict:
    """What the workers need for network `name`: the compiled C with its buffers (the
    model's own weights, one random input) and the ONNX file."""
    from autocomp_jupyter import host
    from autocomp_jupyter.codegen.c import buffer_ctype, buffer_layout, tensor_of

    compiled = host.compile_plan(plan)
    stem = os.path.basename(name).removesuffix(".onnx")
    onnx_path = name if name.endswith(".onnx") else os.path.join(directory, f"{stem}.onnx")
    if not name.endswith(".onnx"):
        with open(onnx_path, "wb") as f:
            f.write(model.SerializeToString())
    values = host._inputs_for(plan, 0)
    # each buffer in its C type (float, or double for integer tensors: `buffer_ctype`)
    dtypes = [("float64" if buffer_ctype(tensor_of(plan, t).dtype) == "double" else "float32")
              for t, _ in buffer_layout(plan)]
    arrays = {f"b{i}": np.asarray(values[t], dtype=dtypes[i]) for i, (t, role) in enumerate(buffer_layout(plan))
              if role in ("input", "param")}
    npz = os.path.join(directory, f"{stem}.npz")
    np.savez(npz, **arrays)
    shapes = [list(tensor_of(plan, t).shape) for t, _ in buffer_layout(plan)]
    feeds = onnx_path.removesuffix(".onnx") + ".inputs.npz"        # an exporter's sample inputs, if beside it
    return {"name": name, "library": str(compiled.library_path), "shapes": shapes, "dtypes": dtypes, "values": npz,
            "onnx": onnx_path, "feeds": feeds if os.path.exists(feeds) else None}


def network_kernels(library: str, entries: list, threads: int) -> dict:
    """name -> callable running a network once: the generated C's `program_run` (ctypes) or
    an onnxruntime session with `threads` intra-op threads."""
    out = {}
    rng = np.random.default_rng(1)
    for entry in entries:
        if library == "generated":
            import ctypes

            lib = ctypes.CDLL(entry["library"])
            data = np.load(entry["values"])
            dtypes = entry.get("dtypes") or ["float32"] * len(entry["shapes"])
            arrays = [np.ascontiguousarray(data[f"b{i}"]) if f"b{i}" in data.files else np.zeros(shape, dtypes[i])
                      for i, shape in enumerate(entry["shapes"])]
            ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
            out[entry["name"]] = (lambda lib=lib, ptrs=ptrs, arrays=arrays: lib.program_run(ptrs))
        elif library == "onnxruntime":
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
            # its pool sleeps between calls (QUIET_POOLS): spinning after a run, it held a core
            # while the generated C was timed (ResNet-50 on 2 threads: 90 ms against 55 alone)
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(entry["onnx"], opts, providers=["CPUExecutionProvider"])
            if entry.get("feeds"):
                sample = np.load(entry["feeds"])
                x = {vi.name: sample[vi.name] for vi in sess.get_inputs()}
            else:
                vi = sess.get_inputs()[0]
                x = {vi.name: rng.standard_normal(vi.shape).astype(np.float32)}
            out[entry["name"]] = (lambda sess=sess, x=x: sess.run(None, x))
    return out


def roofline_rows(plan, per_kernel: dict, target, threads: int = 1, top: int = 10) -> list[dict]:
    """The `top` slowest kernels of `plan` (measured seconds `per_kernel`) with their flops,
    the roofline time max(flops / peak, bytes / L3 bandwidth) (bytes: the kernel's inputs and
    outputs once; peak and bandwidth for `threads` cores), the host model's prediction and
    the path the C takes."""
    from autocomp_jupyter.host_strategy.contraction import packed_contraction
    from autocomp_jupyter.host_strategy.depthwise import channel_blocks
    from autocomp_jupyter.host_strategy.rows import direct_rows, window_rows
    from autocomp_jupyter.host_strategy.winograd import winograd

    costs = {k.name: c for k, c in zip(plan.kernels, _costs(plan, target, threads))}
    peak = target.peak_flops("f32") / target.compute.units * threads
    bw = target.level("L3").bandwidth_gbps * 1e9
    rows = []
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        t = per_kernel.get(kernel.name)
        if t is None:
            continue
        flops = float(kernel.flops)
        nbytes = sum(x.size * 4 for x in kernel.tensors if x.name not in kernel.internals)
        pk = packed_contraction(kernel, schedule)
        if pk is not None:
            dims = "x".join(str(pk.size(g)) for g in ("batch", "m", "n", "k"))
            dr = direct_rows(kernel, pk)
            path = (f"channel blocks {dims}" if dr and channel_blocks(kernel, pk, dr) else
                    f"direct rows {dims}" if dr else
                    f"Winograd F(2x2, 3x3) {dims}" if winograd(kernel, pk) else
                    f"packed {dims} {pk.micro[0]}x{pk.micro[1]}" + (" transposed" if pk.swapped else ""))
        else:
            path = "window rows" if window_rows(kernel, schedule) else "loop nest"
        roof = max(flops / peak, nbytes / bw)
        rows.append({"kernel": kernel.name, "ops": ",".join(kernel.ops), "s": t, "flops": flops, "roofline_s": roof,
                     "predicted_s": costs[kernel.name].time_s, "path": path})
    rows.sort(key=lambda r: -r["s"])
    return rows[:top]


def networks_main(args) -> None:
    import tempfile

    from autocomp_jupyter import host
    from autocomp_jupyter.accel.target import load_target

    names = [n for n in args.networks.split(",") if n]
    tune = args.tune or 0
    cores = args.threads or host.default_threads()
    rounds = args.rounds or 7
    target = load_target("host")
    _banner("--networks", tune)
    plans, entries = {}, []
    with tempfile.TemporaryDirectory(prefix="bench_networks_") as tmp:
        for name in names:
            t0 = time.perf_counter()
            model, plan = network_plan(name, tune)
            plans[name] = plan
            entries.append(network_job(name, model, plan, tmp))
            print(f"  {name}: {len(plan.kernels)} kernels, optimised in {time.perf_counter() - t0:.1f} s", flush=True)
        job = {"networks": entries}
        checks = {}
        for threads in dict.fromkeys([1, cores]):
            load_before = os.getloadavg()
            libs = run_side_by_side(threads, rounds, job, libraries=("generated", "onnxruntime"), names=names)
            print(f"\n## {threads} thread{'s' if threads > 1 else ''}  (ms, medians of {rounds} side-by-side rounds; "
                  f"load average {' '.join(f'{x:.2f}' for x in load_before)} before, "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after; {others_note(libs)})\n")
            print("| network | generated C | onnxruntime | onnxruntime / generated | fastest: generated, onnxruntime "
                  "| model predicted | predicted / measured | matches interpreter |")
            print("|---|---|---|---|---|---|---|---|")
            for name in names:
                report = host.measure_plan(plans[name], target, repeats=5, threads=threads)
                checks[(name, threads)] = report
                gen, ort = libs.get("generated", {}).get(name), libs.get("onnxruntime", {}).get(name)
                t_gen = gen["median"] if gen else report["measured_time_s"]
                predicted = report["predicted_time_s"]
                ort_cell = f"{ort['median'] * 1e3:.3f}" if ort else "-"
                ratio = f"{ort['median'] / t_gen:.2f}" if ort else "-"
                fast = f"{gen['fastest'] * 1e3:.1f}, {ort['fastest'] * 1e3:.1f}" if gen and ort else "-"
                print(f"| {name} | {t_gen * 1e3:.3f} | {ort_cell} | {ratio} | {fast} | {predicted * 1e3:.1f} "
                      f"| {predicted / t_gen:.2f} | {report['matches_interpreter']} |")
        for name in names:
            report = checks[(name, 1)]
            print(f"\n### {name}: the 10 slowest kernels, one thread (measure_plan's per-kernel medians; with "
                  f"{cores} threads: the same kernels, their scaling and the model's {cores}-thread time)\n")
            many = checks.get((name, cores)) if cores > 1 else None
            costs = {k.name: c.time_s for k, c in zip(plans[name].kernels, _costs(plans[name], target, cores))}
            print(f"| kernel | ms | GFLOP/s | roofline ms | roofline / measured | model ms | path |"
                  + (f" {cores} threads ms | scaling | model {cores} threads ms |" if many else ""))
            print("|---|---|---|---|---|---|---|" + ("---|---|---|" if many else ""))
            for r in roofline_rows(plans[name], report["per_kernel"], target, 1):
                line = (f"| {r['kernel']} | {r['s'] * 1e3:.3f} | {r['flops'] / r['s'] / 1e9:.1f} | {r['roofline_s'] * 1e3:.3f} "
                        f"| {r['roofline_s'] / r['s']:.2f} | {r['predicted_s'] * 1e3:.3f} | {r['path']} |")
                if many:
                    t = many["per_kernel"][r["kernel"]]
                    line += f" {t * 1e3:.3f} | {r['s'] / t:.2f} | {costs[r['kernel']] * 1e3:.3f} |"
                print(line)


def _costs(plan, target, threads):
    """The host model's per-kernel costs of `plan` on `threads` threads (the schedules'
    parallel annotations, the target's cores set to `threads`; none when `threads` is 1)."""
    import dataclasses

    from autocomp_jupyter.accel.cost import evaluate

    if threads > 1 and target.compute.units != threads:
        target = dataclasses.replace(target, compute=dataclasses.replace(target.compute, units=threads))
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
    if "--worker" in sys.argv:      # internal: one library's process (see `worker`)
        i = sys.argv.index("--worker")
        worker(sys.argv[i + 1], int(sys.argv[i + 2]), sys.argv[i + 3])
    else:
        main(sys.argv[1:])
