"""The host CPU's sustained multiply-add rate, measured: the compute ceiling of its physical limit.

The host preset describes this machine from what it reports (`auto`: SIMD lanes and FMA pipes
from /proc/cpuinfo flags, the clock from its `cpu MHz`), and the cost model is calibrated on
that description. As a *limit* the description can be wrong: the reported clock is the base
clock, not what a core runs at, and a core may run its widest SIMD instructions on narrower
pipes (AMD Zen 4 executes an AVX-512 FMA as two 256-bit halves). On this machine it says
166 GFLOP/s per core where no code reaches more than 113, and OpenBLAS's GEMM runs at 100:
every host limit fraction read 0.6 for a GEMM at 88 % of what the core sustains.

So the host's compute floor is measured, as the Empirical Roofline Toolkit measures its
ceilings: a C loop of 12 independent FMA chains at the target's SIMD width (enough to cover
the FMA latency on every pipe), compiled with the host's flags, on one core, best of five
runs. Measured once per machine and compiler (kept in the host cache directory beside the
compiled kernels); where nothing compiles or runs, the description's rate stands.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform

from ..caches import cached

_SOURCE = r"""
#include <time.h>
#include <immintrin.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#if WIDTH == 16
typedef __m512 vec;
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define SUM(v) _mm512_reduce_add_ps(v)
#elif WIDTH == 8
typedef __m256 vec;
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
static float SUM(__m256 v) { float x[8]; _mm256_storeu_ps(x, v); float s = 0; for (int i = 0; i < 8; ++i) s += x[i]; return s; }
#else
typedef __m128 vec;
#define SET1 _mm_set1_ps
#define FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
static float SUM(__m128 v) { float x[4]; _mm_storeu_ps(x, v); return x[0] + x[1] + x[2] + x[3]; }
#endif
double fma_peak(long iterations) {
    vec a[12], b = SET1(1.0000001f), c = SET1(1e-7f);
    for (int i = 0; i < 12; ++i) a[i] = SET1((float)i);
    double best = 0.0;
    for (int rep = 0; rep < 5; ++rep) {
        double t0 = now();
        for (long k = 0; k < iterations; ++k) {
            #pragma GCC unroll 12
            for (int i = 0; i < 12; ++i) a[i] = FMA(a[i], b, c);
        }
        double rate = (double)iterations * 12 * WIDTH * 2 / (now() - t0);
        best = rate > best ? rate : best;
    }
    float s = 0.0f;
    for (int i = 0; i < 12; ++i) s += SUM(a[i]);
    return s == 12345.678f ? -1.0 : best;     /* keeps the chains live */
}
"""
ITERATIONS = 4_000_000      # ~0.05 s a run on a 100 GFLOP/s core


def _machine_key(width: int) -> str:
    """The cache file's key for a measurement: CPU model, flags and SIMD width."""
    model = flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = line.split(":", 1)[1].strip()
    except OSError:
        pass
    text = "\0".join([platform.machine(), model, flags, str(width)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@cached("host_peak.measured", 8)
def measured_flops(width: int) -> float | None:
    """Sustained f32 flop/s of one core at SIMD `width` (f32 lanes: 16, 8 or 4), or None."""
    from ..host import HostError, cache_dir, compile_source

    key = _machine_key(width)
    store = cache_dir() / "fma_peak.json"
    try:
        known = json.loads(store.read_text()) if store.exists() else {}
    except (OSError, ValueError):
        known = {}
    if key in known:
        return float(known[key])
    source = f"#define WIDTH {width}\n" + _SOURCE
    try:
        _, so_path = compile_source(source, ("-O2", "-march=native", "-shared", "-fPIC"), name="fma_peak")
        lib = ctypes.CDLL(str(so_path))
        lib.fma_peak.restype = ctypes.c_double
        lib.fma_peak.argtypes = [ctypes.c_long]
        rate = float(lib.fma_peak(ITERATIONS))
    except (HostError, OSError, AttributeError):
        return None
    if not rate > 0:
        return None
    known[key] = rate
    try:
        tmp = store.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        tmp.replace(store)
    except OSError:
        pass
    return rate


def compute_ceiling(target) -> float:
    """The factor (>= 1) by which the host description's compute rate exceeds what a core
    sustains: its floor's compute seconds are multiplied by it (1.0 off the host, or where the
    measurement cannot run)."""
    compute = target.compute
    width = max(4, min(16, compute.lanes))
    measured = measured_flops(width)
    if measured is None:
        return 1.0
    described = target.peak_flops("f32") / compute.units
    return max(1.0, described / measured)
