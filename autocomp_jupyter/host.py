"""The host runner: compile a Plan's generated C, run it on this CPU, check it, time it.

    compiled = compile_plan(plan)                 # cc -O3 -march=native -fno-math-errno -fopenmp -shared -fPIC
    outputs, timing = run_compiled(compiled, inputs, repeats=5)
    measure_plan(plan, target, repeats=5)         # run + check against interp.run + time
    measured_time(plan)                           # seconds only: the tuner's measured score

The generated code runs in a child process (a small stand-alone driver script, numpy and
ctypes only), so a crash (segfault, abort) or a hang (timeout) in generated code becomes a
`HostRunError` with the signal or the time limit, never the death of the notebook kernel.
Compilation happens in this process; the shared object is cached by the hash of the source
and the flags. Without a C compiler, or when compilation fails, `HostCompileError` shows the
compiler's message and the path of the generated file.

Timing: one profiled run (per-kernel seconds, `clock_gettime` around each kernel call), one
warm-up, then `repeats` timed calls of `program_run`; medians are reported. Buffers are float32
for f32/f16/bf16 tensors, float64 for i8/i32 (`codegen.c.buffer_ctype`: every integer
exact); the child allocates each with its numpy dtype (`Compiled.dtypes`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .errors import UserError

CFLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC")
DEFAULT_TIMEOUT_S = 120.0
# Spins an idle OpenMP thread waits for the next parallel region before it sleeps (run_compiled).
SPIN_COUNT = 30000


class HostError(UserError):
    """Something went wrong compiling or running generated code on the host."""


class HostCompileError(HostError):
    """No C compiler, or the compiler rejected the generated file."""


class HostRunError(HostError):
    """The generated code crashed, hung past the time limit, or the driver failed."""


@dataclass(frozen=True)
class Compiled:
    """A compiled plan: the C file, the shared object, and the buffer layout it expects."""

    source_path: Path
    library_path: Path
    layout: tuple[tuple[str, str], ...]      # (tensor, role) in buffers[] order
    shapes: tuple[tuple[int, ...], ...]
    kernel_names: tuple[str, ...]
    dtypes: tuple[str, ...] = ()     # numpy dtype of each buffer ("float32", "float64"); () all float32


def find_compiler() -> str:
    """The system C compiler: $CC, else cc, gcc or clang on PATH."""
    for candidate in ([os.environ["CC"]] if os.environ.get("CC") else []) + ["cc", "gcc", "clang"]:
        path = shutil.which(candidate.split()[0])
        if path:
            return path
    raise HostCompileError("no C compiler found (looked for $CC, cc, gcc, clang on PATH): install one, "
                           "e.g. `apt-get install gcc`, or set CC", filename="host")


def cache_dir() -> Path:
    root = os.environ.get("AUTOCOMP_HOST_CACHE") or os.path.join(tempfile.gettempdir(), f"autocomp_host_{os.getuid()}")
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root)


def compile_source(source: str, flags: Sequence[str] = CFLAGS, name: str = "program") -> tuple[Path, Path]:
    """Compile C `source` to a shared object (cached); returns (C path, .so path)."""
    compiler = find_compiler()
    key = hashlib.sha256((compiler + "\0" + " ".join(flags) + "\0" + source).encode()).hexdigest()[:16]
    directory = cache_dir() / f"{name}-{key}"
    directory.mkdir(parents=True, exist_ok=True)
    c_path, so_path = directory / f"{name}.c", directory / f"{name}.so"
    if so_path.exists():
        return c_path, so_path
    c_path.write_text(source)
    tmp_so = directory / f"{name}.{os.getpid()}.so.tmp"
    cmd = [compiler, *flags, str(c_path), "-o", str(tmp_so), "-lm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise HostCompileError(f"the C compiler took over 600 s on {c_path}", filename="host") from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        if len(message) > 4000:
            message = message[:4000] + "\n... (truncated)"
        raise HostCompileError(f"compiling the generated code failed ({' '.join(cmd)}):\n{message}\n"
                               f"generated file: {c_path}", filename="host")
    os.replace(tmp_so, so_path)
    return c_path, so_path


def compile_plan(plan, target=None) -> Compiled:
    """Generate C for `plan` and compile it with the system compiler."""
    from .codegen.c import buffer_ctype, buffer_layout, generate_c, tensor_of

    source = generate_c(plan, target)
    c_path, so_path = compile_source(source)
    layout = tuple(buffer_layout(plan))
    tensors = [tensor_of(plan, name) for name, _ in layout]
    dtypes = tuple({"float": "float32", "double": "float64"}[buffer_ctype(t.dtype)] for t in tensors)
    return Compiled(c_path, so_path, layout, tuple(t.shape for t in tensors), tuple(k.name for k in plan.kernels),
                    dtypes)


# --------------------------------------------------------------------------- the child process

# Stand-alone (numpy + ctypes only) so the child starts fast and shares nothing with the parent.
_DRIVER = r'''
import ctypes, json, sys, time
import numpy as np

def main(job_path):
    with open(job_path) as f:
        job = json.load(f)
    data = np.load(job["inputs"])
    lib = ctypes.CDLL(job["library"])
    arrays = []
    for i, shape in enumerate(job["shapes"]):
        key = "b%d" % i
        dtype = np.dtype(job["dtypes"][i])        # the C buffer's element type (float / double)
        if key in data.files:
            arrays.append(np.ascontiguousarray(data[key], dtype=dtype))
        elif job["nulls"] and i in job["nulls"]:
            arrays.append(None)
        else:
            arrays.append(np.full(shape, np.nan, dtype=dtype))
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data if a is not None else None for a in arrays])
    nk = len(job["kernels"])
    seconds = (ctypes.c_double * max(nk, 1))()
    lib.program_run_profiled(ptrs, seconds)              # first run: outputs and per-kernel times
    per_kernel = [[seconds[i]] for i in range(nk)]
    outputs = {"b%d" % i: arrays[i] for i in job["outputs"]}
    np.savez(job["outputs_path"], **outputs)
    times = []
    if job["repeats"] > 0:
        for _ in range(job["warmup"]):
            lib.program_run(ptrs)
        for _ in range(job["repeats"]):
            t0 = time.perf_counter()
            lib.program_run(ptrs)
            times.append(time.perf_counter() - t0)
        per_kernel = [[] for _ in range(nk)]          # the first run paid for start-up
        for _ in range(min(job["repeats"], 3)):
            lib.program_run_profiled(ptrs, seconds)
            for i in range(nk):
                per_kernel[i].append(seconds[i])
    with open(job["times_path"], "w") as f:
        json.dump({"times": times, "per_kernel": per_kernel}, f)

main(sys.argv[1])
'''


def run_compiled(compiled: Compiled, inputs: Mapping[str, np.ndarray], repeats: int = 0, warmup: int = 1,
                 threads: int | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 null_buffers: Sequence[str] = ()) -> tuple[dict[str, np.ndarray], dict]:
    """Run a compiled plan in a child process.

    inputs: {tensor: array} for every input/param (converted to the buffer's dtype,
    `compiled.dtypes`: float32, or float64 for integer tensors). Returns ({output:
    float64 array}, {"times": [s...], "median_s", "per_kernel": {kernel: median s}}).
    `null_buffers` passes NULL for those tensors (to test crash reporting).
    Raises HostRunError on a crash, a timeout or a driver failure.
    """
    names = [n for n, _ in compiled.layout]
    dtypes = list(compiled.dtypes) or ["float32"] * len(names)
    with tempfile.TemporaryDirectory(prefix="autocomp_run_") as tmp:
        tmp = Path(tmp)
        arrays = {}
        for i, (name, role) in enumerate(compiled.layout):
            if role in ("input", "param"):
                if name not in inputs:
                    raise HostRunError(f"missing value for {role} '{name}' {list(compiled.shapes[i])}", filename="host")
                value = np.asarray(inputs[name], dtype=dtypes[i])
                if value.shape != compiled.shapes[i]:
                    raise HostRunError(f"'{name}' must have shape {list(compiled.shapes[i])}, got {list(value.shape)}",
                                       filename="host")
                if name not in null_buffers:
                    arrays[f"b{i}"] = value
        np.savez(tmp / "inputs.npz", **arrays)
        outputs = [i for i, (_, role) in enumerate(compiled.layout) if role == "output"]
        job = {"inputs": str(tmp / "inputs.npz"), "library": str(compiled.library_path),
               "shapes": [list(s) for s in compiled.shapes], "dtypes": dtypes, "outputs": outputs,
               "nulls": [names.index(n) for n in null_buffers], "kernels": list(compiled.kernel_names),
               "repeats": int(repeats), "warmup": int(warmup),
               "outputs_path": str(tmp / "outputs.npz"), "times_path": str(tmp / "times.json")}
        (tmp / "job.json").write_text(json.dumps(job))
        (tmp / "driver.py").write_text(_DRIVER)
        env = dict(os.environ)
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(int(threads))
        # The driver uses numpy for I/O only: no BLAS pool. An idle OpenBLAS pool spins for
        # ~0.1 s after numpy loads, holding a core while the generated code is timed (measured:
        # conv 3x3 64ch, 2 threads, 2.41 ms with the pool, 1.26 ms without; 2.40 on 1 thread).
        env.update(OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        # Threads that finish their share spin briefly for the next region (GOMP_SPINCOUNT
        # 30000: some 10-30 us), then sleep. Sleeping at once (OMP_WAIT_POLICY=passive) costs
        # a wake-up per region: a layer norm 128 x 768 whose schedule opens a region per tile
        # (144 regions) took 10-15 ms on 2 threads passive against 0.27 ms spinning briefly
        # (0.15 on one thread; load ~3). Spinning long (the default 300000, or active) takes
        # the time a slower sibling on a shared core needs (measured: conv 3x3 64ch, 2
        # threads, one core busy: 10 ms spinning vs 3.3 ms passive). A policy or spin count
        # set in the environment wins.
        if "OMP_WAIT_POLICY" not in env:
            env.setdefault("GOMP_SPINCOUNT", str(SPIN_COUNT))
        # Several threads: one per core, bound. A sleeping worker woken unbound while another
        # process holds the other core is put on its waker's core, and the two run one after
        # the other (measured: conv 3x3 64ch, 2 threads, load ~1.6: 2.42 ms unbound, 1.29
        # bound; 2.40 on one thread). One thread stays free to move to whichever core is idle.
        if threads is not None and int(threads) > 1:
            env.setdefault("OMP_PROC_BIND", "true")
            env.setdefault("OMP_PLACES", "cores")
        try:
            proc = subprocess.run([sys.executable, str(tmp / "driver.py"), str(tmp / "job.json")],
                                  capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise HostRunError(f"the generated code did not finish within {timeout:g} s and was stopped "
                               f"(generated file: {compiled.source_path})", filename="host") from None
        if proc.returncode != 0:
            if proc.returncode < 0:
                try:
                    sig = signal.Signals(-proc.returncode).name
                except ValueError:
                    sig = f"signal {-proc.returncode}"
                what = f"crashed with {sig}"
            else:
                what = f"failed (exit status {proc.returncode})"
            detail = proc.stderr.strip()[-2000:]
            raise HostRunError(f"the generated code {what}; the notebook kernel is unaffected "
                               f"(generated file: {compiled.source_path})" + (f"\n{detail}" if detail else ""),
                               filename="host")
        data = np.load(tmp / "outputs.npz")
        results = {names[i]: data[f"b{i}"].astype(np.float64) for i in outputs}
        times = json.loads((tmp / "times.json").read_text())
    per_kernel = {k: float(np.median(v)) for k, v in zip(compiled.kernel_names, times["per_kernel"])}
    median = float(np.median(times["times"])) if times["times"] else float(sum(per_kernel.values()))
    return results, {"times": times["times"], "median_s": median, "per_kernel": per_kernel}


# --------------------------------------------------------------------------- measuring plans


def default_threads() -> int:
    """The cores this process may use: one thread each."""
    from .workers import cores

    return cores()


def predicted_time(plan, target=None, threads: int | None = None) -> float:
    """The host model's seconds for `plan` run on `threads` threads (default
    `default_threads()`): the target's cores set to `threads`, and no parallel loops on one
    thread, as the generated code runs (codegen/c/: units cut for the thread count)."""
    import dataclasses

    from .canon import evaluate_program
    from .accel.target import load_target

    target = load_target("host") if target is None else target
    threads = default_threads() if threads is None else int(threads)
    if threads > 1 and target.compute.units != threads:
        target = dataclasses.replace(target, compute=dataclasses.replace(target.compute, units=threads))
    schedules = plan.schedules
    if threads == 1:
        schedules = tuple(dataclasses.replace(s, annotations={**s.annotations, "parallel": ()}) for s in schedules)
    return float(evaluate_program(schedules, target).total.time_s)


def _inputs_for(plan, seed: int):
    """Random values for the program's inputs and params, the model's own weights for params
    it carries (an imported ONNX model): random weights through a deep network grow to 1e24,
    where a float C and the float64 interpreter can only be compared loosely."""
    from .interp import random_inputs

    values = random_inputs(plan.program, seed)
    program = plan.program
    values.update({k: np.asarray(v, dtype=np.float64) for k, v in program.param_values.items()
                   if program.has_tensor(k)})
    return values


def measure_plan(plan, target=None, repeats: int = 5, threads: int | None = None, seed: int = 0,
                 timeout: float = DEFAULT_TIMEOUT_S, check: bool = True,
                 inputs: Mapping[str, np.ndarray] | None = None) -> dict:
    """Compile, run and time `plan` on this CPU; check its outputs against the interpreter.

    Returns {"measured_time_s": median seconds of program_run, "per_kernel": {kernel:
    median seconds}, "matches_interpreter": bool, "max_abs_error": float, "reason": str,
    "repeats": int, "threads": int, "source_path": str, "predicted_time_s": the host
    model's seconds on that many threads (`predicted_time`)}. `threads` (OpenMP threads of
    the run): default `default_threads()`. `inputs`: {input or param: array}, default
    `interp.random_inputs(program, seed)` with the params the program carries (`param_values`).
    """
    from .interp import compare_outputs, run
    from .limits import check_memory_budget

    # Before compiling or allocating anything: the interpreter's float64 copies plus the child's
    # buffers (and their transfer copy: f32, or f64 where the program has integer tensors) must
    # fit the memory budget.
    wide = any(t.dtype in ("i8", "i32") for t in plan.program.tensors)
    check_memory_budget(plan.program, extra_bytes_per_element=16 if wide else 8,
                        what="measuring this program on the host",
                        raise_hint="measure a smaller instance of the program, or raise the budget with "
                                   "AUTOCOMP_MEMORY_BUDGET=16GiB")
    threads = default_threads() if threads is None else int(threads)
    compiled = compile_plan(plan, target)
    inputs = _inputs_for(plan, seed) if inputs is None else inputs
    outputs, timing = run_compiled(compiled, inputs, repeats=repeats, threads=threads, timeout=timeout)
    report = {"measured_time_s": timing["median_s"], "per_kernel": timing["per_kernel"],
              "matches_interpreter": None, "max_abs_error": None, "reason": "", "repeats": repeats,
              "threads": threads, "source_path": str(compiled.source_path),
              "predicted_time_s": predicted_time(plan, target if target is not None and target.name == "host" else None,
                                                 threads)}
    if check:
        expected = run(plan.program, inputs)
        verdict = compare_outputs(plan.program, expected, outputs)
        report.update(matches_interpreter=bool(verdict.ok), max_abs_error=float(verdict.max_abs_error),
                      reason=verdict.reason)
    return report


def measured_time(plan, target=None, repeats: int = 3, threads: int | None = None,
                  timeout: float = DEFAULT_TIMEOUT_S) -> float:
    """The tuner's measured score: median seconds of `plan` on this CPU (no correctness check;
    a plan that fails to compile, crashes or times out scores +inf)."""
    try:
        compiled = compile_plan(plan, target)
        _, timing = run_compiled(compiled, _inputs_for(plan, 0), repeats=repeats, threads=threads, timeout=timeout)
    except HostError:
        return float("inf")
    return timing["median_s"]


def measured_scorer(repeats: int = 3, threads: int | None = None, timeout: float = DEFAULT_TIMEOUT_S):
    """`score(plan) -> seconds` with fixed measurement settings (for the tuner's measured mode)."""
    def score(plan) -> float:
        return measured_time(plan, repeats=repeats, threads=threads, timeout=timeout)
    return score
