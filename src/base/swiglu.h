/* swiglu.h — SiLU(gate) * up of the routed experts' FFN, written once for the CPU and for CUDA.
 *
 * Why: the VRAM tier computes some missed experts on the CPU (--vram-miss cpu|auto,
 * src/cache/vram_tier.c) while the GPU computes the others in its fused gate/up epilogue
 * (src/cuda/matmul.cuh, mmq.cuh, mmq_lane.cuh). Where both sides' gate and up products are the
 * scalar vec_dot's bits (the integer path, docs/CUDA.md), this function is the only arithmetic left
 * between them and the down projection, so it must give the same bits on both. libm's expf and
 * CUDA's expf are each accurate to an ulp or two but are different functions; swiglu_exp uses only
 * operations IEEE 754 rounds the same way everywhere (+, *, /, fma, rint to nearest, scaling by
 * exact powers of two), so a CPU compiled without contraction (ISO C, -std=c11) and nvcc with
 * -fmad=false, IEEE division and denormals kept (no fast-math) agree bit for bit
 * (tests/cuda/test_cuda_ops.c compares the device's results with the host's; tests/c/test_swiglu.c
 * checks the accuracy).
 *
 * swiglu_exp: n = rint(x / ln 2); r = x - n ln 2 with ln 2 split in two (ln2_hi has 16 significant
 * bits, so n * ln2_hi is exact for |n| <= 256); e^r by its Taylor polynomial of degree 7 in Horner
 * form (|r| <= 0.35: truncation < 6e-9 relative, under a tenth of an ulp); times 2^n as two exact
 * scalings (2^n alone leaves the exponent range at n = 128 and below n = -126). Within 2 ulp of
 * e^x over the float range (test_swiglu measures it). x > 88.75: +inf; x < -104: 0 (e^-104 is
 * below half the smallest denormal); NaN: NaN.
 */
#ifndef RL_SWIGLU_H
#define RL_SWIGLU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SWIGLU_FN static __host__ __device__ __forceinline__
#else
#define SWIGLU_FN static inline
#endif

/* 2^n for n in [-126, 127], exactly. */
SWIGLU_FN float swiglu_pow2(int n) {
    const uint32_t b = (uint32_t)(n + 127) << 23;
#ifdef __CUDA_ARCH__
    return __uint_as_float(b);
#else
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
#endif
}

SWIGLU_FN float swiglu_exp(float x) {
    if (x != x) return x;
    if (x > 88.75f) return INFINITY;
    if (x < -104.0f) return 0.0f;
    const float n = rintf(x * 1.44269504f);
    float r = fmaf(-n, 0.693145751953125f, x); /* ln2_hi */
    r = fmaf(-n, 1.42860682e-6f, r);           /* ln2_lo = ln 2 - ln2_hi */
    float p = 1.98412698e-4f;                  /* 1/7! */
    p = fmaf(p, r, 1.38888889e-3f);            /* 1/6! */
    p = fmaf(p, r, 8.33333333e-3f);            /* 1/5! */
    p = fmaf(p, r, 4.16666667e-2f);            /* 1/4! */
    p = fmaf(p, r, 1.66666667e-1f);            /* 1/3! */
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int k = (int)n, k1 = k / 2; /* k in [-150, 128]: both halves in [-75, 64] */
    return p * swiglu_pow2(k1) * swiglu_pow2(k - k1);
}

/* silu(x) = x / (1 + e^-x). */
SWIGLU_FN float swiglu_silu(float x) { return x / (1.0f + swiglu_exp(-x)); }

/* One element of the experts' hidden vector: silu(gate) * up. */
SWIGLU_FN float swiglu(float g, float u) { return swiglu_silu(g) * u; }

#undef SWIGLU_FN
#endif
