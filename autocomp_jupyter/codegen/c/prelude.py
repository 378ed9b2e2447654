"""The runtime the generated file carries ahead of its kernels: `AC_MIN`/`AC_MAX`, timing
(`ac_now`), the team of threads a parallel region takes (`ac_team`, `ac_team_waited`), kept
and scratch memory (`ac_kept`, `ac_scratch`), the vectorised exp/tanh/sigmoid/gelu; and, only
where a plan needs them, the integer (`ac_saturate`), f16/bf16 rounding, 16-channel block
transpose (`ac_transpose16`) and checked index (`ac_index`) helpers (`prelude`).
"""
from __future__ import annotations

from .layout import INT_RANGE

_PRELUDE = r"""#define _POSIX_C_SOURCE 199309L
#define _DEFAULT_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#ifdef __linux__
#include <sys/mman.h>
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#define AC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AC_MAX(a, b) ((a) > (b) ? (a) : (b))
/* floor(a / b) for b > 0 and any a (affine point-loop bounds) */
#define AC_FLOORDIV(a, b) ((a) >= 0 ? (a) / (b) : -((-(a) + (b) - 1) / (b)))

static inline float ac_relu(float x) { return x > 0.0f ? x : 0.0f; }
/* exp, tanh, sigmoid and GELU in float, branch-free and inline so that the compiler vectorises
   the loops (and fused epilogues) that call them; libm's expf/tanhf are scalar calls (the
   FFN's linear + GELU took 9.5 ms against 6.8 for the plain GEMM of the same size).
   ac_expf: e^x = 2^n e^r, n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts, |r| <= 0.35),
   e^r by its degree-7 Taylor polynomial (truncation < 3e-9 relative), 2^n put in the exponent
   bits (as two factors, each a normal float): within 2e-7 relative of e^x (measured over [-87, 88] against float64: 7.5e-8); 0 below
   -87.3 (where float e^x is subnormal), +inf above 88.7, NaN stays NaN.
   ac_exp_sat: the same e^x for what tanh, sigmoid and GELU feed it, where a saturated
   value serves as well as the limit: clamped to [-87.3, 88] (2^n one normal factor, no
   selects for NaN, 0 or +inf: a NaN argument still gives NaN).
   ac_tanhf: sign(x) (1 - 2 / (e^(2|x|) + 1)), x itself below |x| < 2^-9 (where tanh x = x
   within 4e-6 relative): within 3e-7 absolute of tanh x (sigmoid too; GELU within
   3e-7 max(1, |x|)). tests/test_host.py checks these bounds.
   ac_gelu: the tanh form as 0.5 x (1 + tanh u) = x / (1 + e^(-2u)), one exponential and one
   division (no |u|, sign or small-argument selects): 1.3 cycles a point in a vectorised loop
   against 2.9 through ac_tanhf (128 x 3072 points, this machine), its error the same. */
static inline float ac_bits_f(int i) { float f; __builtin_memcpy(&f, &i, sizeof f); return f; }
/* x = n ln 2 + r, |r| <= ln2 / 2, for x already clamped: n rounded to nearest by adding and
   taking away 1.5 * 2^23 (roundf does not vectorise without -fno-trapping-math; a union's bits
   do not at all: the float goes through memcpy); e^r by its degree-7 Taylor polynomial */
static inline float ac_exp_n(float xc) { return (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; }
static inline float ac_exp_poly(float xc, float n) {
    const float r = (xc - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    return p * r + 1.0f;
}
static inline float ac_expf(float x) {
    const float xc = x < -87.33654f ? -87.33654f : (x > 88.72284f ? 88.72284f : x);
    const float n = ac_exp_n(xc), p = ac_exp_poly(xc, n);
    const int h = (int)n / 2;     /* 2^n as 2^(n/2) 2^(n - n/2): n = 128 and -126 stay normal */
    const float y = p * ac_bits_f((h + 127) << 23) * ac_bits_f(((int)n - h + 127) << 23);
    return x != x ? x : (x < -87.33654f ? 0.0f : (x > 88.72284f ? INFINITY : y));
}
static inline float ac_exp_sat(float x) {
    const float xc = x < -87.33654f ? -87.33654f : (x > 88.0f ? 88.0f : x);
    const float n = ac_exp_n(xc);
    return ac_exp_poly(xc, n) * ac_bits_f(((int)n + 127) << 23);
}
static inline float ac_tanhf(float x) {
    const float a = fabsf(x);
    const float t = 1.0f - 2.0f / (ac_exp_sat(2.0f * (a < 20.0f ? a : 20.0f)) + 1.0f);
    return (a < 0.001953125f || x != x) ? x : copysignf(t, x);
}
static inline float ac_sigmoid(float x) { return 1.0f / (1.0f + ac_exp_sat(-x)); }
/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) = x / (1 + e^(-2u)) */
static inline float ac_gelu(float x) {
    return x / (1.0f + ac_exp_sat(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
}
/* Memory kept for all calls (weights packed once, Winograd's transformed weights), carved
   from chunks aligned to 2 MiB and asked for as transparent huge pages: in 4 KiB pages a
   network's packed weights (14 MB for MobileNetV2) need ~3500 TLB entries, more than the
   second-level TLB holds, and each kernel's weight stream walked the page tables again.
   Each kept copy has a size fixed at generation, is allocated on its first pack and packed
   again in place (never freed); one thread packs (before its kernel's parallel region). */
#define AC_KEPT_PAGE (2UL << 20)
#define AC_KEPT_CHUNK (8UL << 20)
static void* ac_kept(size_t bytes) {
    static char* chunk = NULL;
    static size_t left = 0;
    bytes = (bytes + 63) / 64 * 64;
    if (bytes > left) {
        const size_t n = bytes > AC_KEPT_CHUNK ? (bytes + AC_KEPT_PAGE - 1) / AC_KEPT_PAGE * AC_KEPT_PAGE
                                               : AC_KEPT_CHUNK;
        chunk = aligned_alloc(AC_KEPT_PAGE, n);
        left = chunk ? n : 0;
        if (!chunk) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(chunk, n, MADV_HUGEPAGE);
#endif
    }
    void* p = chunk;
    chunk += bytes;
    left -= bytes;
    return p;
}
/* Scratch memory kept between calls, per thread and slot (packed panels, padded copies):
   fresh pages from malloc/free each call cost page faults in every thread (~50 a call, on
   a 2.4 ms conv). Grown when a larger block is asked for, never freed: its size is bounded
   by the program's largest panel block and padded tensor. */
#define AC_SCRATCH_SLOTS 5
static inline void* ac_scratch(int slot, size_t bytes) {
    static _Thread_local void* block[AC_SCRATCH_SLOTS];
    static _Thread_local size_t size[AC_SCRATCH_SLOTS];
    if (size[slot] < bytes) {
        free(block[slot]);
        block[slot] = aligned_alloc(64, (bytes + 63) / 64 * 64);
        size[slot] = block[slot] ? bytes : 0;
    }
    return block[slot];
}
static inline double ac_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* The team of every parallel region: all the threads, or one for the next AC_SOLO_SECONDS
   (twice as long each time the try after them waits again, up to AC_SOLO_MAX_SECONDS) after a
   region whose first thread to finish waited at its end for over half the region (and
   AC_SOLO_WAIT) for another: that one's core was taken by another process, and each region's
   end would wait a time slice for it (ResNet-50 on 2 threads with another process on one core:
   113-150 ms, against 72 on one thread and 39 on two idle cores). A shorter wait is a sleeping
   thread's wake-up or a hiccup of the virtual CPU, not a taken core: at 0.1 ms, MobileNetV2 on
   two idle cores fell to one thread in 4 of 40 runs (7.9-8.4 ms against 4.7), at 0.5 ms in none.
   The time away is counted in seconds, not regions: counted in regions (64, doubling to 4096),
   two unlucky tries kept MobileNetV2 (54 regions a run) on one thread for dozens of runs. */
#define AC_SOLO_WAIT 5e-4
#define AC_SOLO_SECONDS 2e-3
#define AC_SOLO_MAX_SECONDS 3.2e-2
static double ac_solo_until = 0.0, ac_solo_span = AC_SOLO_SECONDS;
static inline int ac_team(void) {
#ifdef _OPENMP
    if (ac_solo_until > 0.0) {
        if (ac_now() < ac_solo_until) return 1;
        ac_solo_until = 0.0;          /* the next region is the try */
    }
    return omp_get_max_threads();
#else
    return 1;
#endif
}
static inline int ac_thread(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
/* done[t * 8]: when thread t of `n` ran out of work, in a region begun at `start` */
static inline void ac_team_waited(const double* done, int n, double start) {
    if (n <= 1) return;
    double first = done[0], last = done[0];
    for (int t = 1; t < n; ++t) {
        first = done[t * 8] < first ? done[t * 8] : first;
        last = done[t * 8] > last ? done[t * 8] : last;
    }
    if (last - first > AC_SOLO_WAIT && last - first > 0.5 * (last - start)) {
        ac_solo_until = last + ac_solo_span;
        ac_solo_span = ac_solo_span < AC_SOLO_MAX_SECONDS ? 2 * ac_solo_span : AC_SOLO_MAX_SECONDS;
    } else {
        ac_solo_span = AC_SOLO_SECONDS;
    }
}
"""

# Helpers a program needs only when it has tensors of that dtype (appended to the prelude).
_PRELUDE_INT = r"""/* Integer tensors (i8, i32) are double: every value exact, as the interpreter's float64. An
   integer dtype's value: rounded half to even (the default rounding mode), saturated (NaN stays
   NaN, as numpy's clip). Statements with integer targets compute in double (_d functions). */
static inline double ac_saturate(double x, double lo, double hi) {
    x = nearbyint(x);
    return x < lo ? lo : (x > hi ? hi : x);
}
static inline double ac_relu_d(double x) { return x < 0.0 ? 0.0 : x; }
static inline double ac_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline double ac_gelu_d(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * pow(x, 3.0))));
}
/* A kernel whose integer statements could round an intermediate (x * 0.1 + y) computes them
   without contracting a*b+c into an FMA, as numpy does (a result then rounds half to even
   from the same value). */
#if defined(__GNUC__) && !defined(__clang__)
#define AC_EXACT __attribute__((optimize("fp-contract=off")))
#define AC_EXACT_BODY
#elif defined(__clang__)
#define AC_EXACT
#define AC_EXACT_BODY _Pragma("clang fp contract(off)")
#else
#define AC_EXACT
#define AC_EXACT_BODY
#endif
"""
_PRELUDE_BLOCK16 = r"""/* Channel blocks (a depthwise convolution in blocks of 16 channels): ac_v16 is 16 floats, one
   AVX-512 register (two AVX2 ones elsewhere); ac_transpose16 writes dst[j * ldd + i] =
   src[i * ld + j] for the 16 rows i of src and its first `cols` columns j, and 0 for the
   other columns (never loaded): all 16 rows of dst, always (storing only `cols` of them, a
   run-time count, kept the 16 vectors in memory: 64 spills per transpose). With AVX-512 in
   64 shuffles. */
typedef float ac_v16 __attribute__((vector_size(64), may_alias));
#if defined(__AVX512F__)
#include <immintrin.h>
static inline void ac_transpose16(const float* src, long ld, int cols, float* dst, long ldd) {
    const __mmask16 m = (__mmask16)((1u << cols) - 1u);
    __m512 r[16], t[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_ps(m, src + i * ld);
    #pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    #pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + j * ldd, r[j]);
}
#else
static inline void ac_transpose16(const float* src, long ld, int cols, float* dst, long ldd) {
    for (int j = 0; j < 16; ++j)
        for (int i = 0; i < 16; ++i) dst[j * ldd + i] = j < cols ? src[i * ld + j] : 0.0f;
}
#endif
"""
_PRELUDE_F16 = r"""/* An f16 value (round to nearest even; past 65504: infinity), from float. */
static inline float ac_round_f16(float x) {
#ifdef __FLT16_MAX__
    return (float)(_Float16)x;
#else
    float a = fabsf(x);
    if (!(a < INFINITY)) return x;
    int e;
    frexpf(a, &e);
    const float q = ldexpf(1.0f, (e < -13 ? -13 : e) - 11);     /* the spacing of f16 values near a */
    const float r = nearbyintf(a / q) * q;
    return copysignf(r > 65504.0f ? INFINITY : r, x);
#endif
}
"""
_PRELUDE_BF16 = r"""/* A bf16 value: the top 16 bits of the float, rounded to nearest even (interp.round_to_dtype). */
static inline float ac_round_bf16(float x) {
    union { float f; unsigned int u; } v = {x};
    v.u = (v.u + 0x7FFFu + ((v.u >> 16) & 1u)) & 0xFFFF0000u;
    return v.f;
}
"""


# Only where a plan reads through an index tensor (W[ids[s], c]).
_PRELUDE_INDEX = r"""
#include <stdio.h>
/* An index read from an integer tensor: checked against the dimension's range, never
   clamped; out of range stops the program with a message naming the tensor. */
static long ac_index(double value, long size, const char* tensor, int dim) {
    long i = (long)value;
    if (i < 0 || i >= size) {
        fprintf(stderr, "index %ld is outside dimension %d of '%s' (0 to %ld)\n", i, dim, tensor, size - 1);
        exit(3);
    }
    return i;
}
"""


def prelude(dtypes: set[str], functions: list[str]) -> str:
    """The runtime for a file whose tensors have `dtypes` and whose kernels are `functions`
    (C text): the common part, then each optional part the kernels call."""
    return _PRELUDE + (_PRELUDE_INT if dtypes & set(INT_RANGE) else "") \
        + (_PRELUDE_F16 if "f16" in dtypes else "") + (_PRELUDE_BF16 if "bf16" in dtypes else "") \
        + (_PRELUDE_BLOCK16 if any("ac_transpose16(" in text for text in functions) else "") \
        + (_PRELUDE_INDEX if any("ac_index(" in text for text in functions) else "")
