/* cuda_oracle.h — which CPU engine a CUDA result is compared with, for the GPU tests.
 *
 * CUDA runs a matmul on one of two arithmetics (src/cuda/matmul.cu, cu_tuning.mmq):
 *   - the float path (RL_CUDA_MMQ=0, or a type without an integer path): float activations, like
 *     the CPU reference (engine_params.reference: double-precision products). Its oracle is the
 *     reference, within the float bounds of each test (1e-2 with an f16 KV cache, 1e-3 with f32);
 *   - the integer path (RL_CUDA_MMQ=1|2, the default; src/cuda/mmq.cuh, mmq_b32.cuh): activations
 *     quantised on the device exactly as the CPU's from_float, integer block sums and the scalar
 *     vec_dot's float epilogue, so each product equals quant_traits.vec_dot bit for bit. Its oracle
 *     is a CPU engine on the quantised-activation path with the SCALAR kernels (cuda_int_oracle:
 *     engine_params.reference = false, kern_opts.level = KERN_SCALAR; the AVX2 / AVX-512 kernels sum
 *     the 32-value types in float lanes, not bit-equal to vec_dot).
 * With the integer path the reference is not an oracle: the activation rounding alone moves the
 * logits of the committed fixtures (all matrices Q8_0) by 0.54-0.95 (CPU, 12 steps).
 *
 * The integer path's bounds (cuda_int_check). Given the same inputs the products are the oracle's
 * bit for bit; what differs is the float arithmetic of everything else (norms, attention, DeltaNet,
 * softmax, the F32 router), ~1 ulp per element. Two regimes, measured on the CPU with a difference of
 * that size (the AVX-512 vs the scalar kernels: float lane sums against vec_dot, same quantisation,
 * KV f32 and f16, tiny-a / tiny-b / tiny-q35 / tiny-q35moe, TOKS over 12 steps):
 *   - while no quantised activation rounds the other way, the logits differ by ~1e-6: 3.8e-6 at
 *     position 0 on every fixture, 3.8e-6 on all 12 positions of 4 of the 8 runs, and 3.8e-6 / 4.8e-7
 *     (logits / hidden states) over the 13 MTP pairs of tiny-b. Bound: 1e-3 at position 0 (the
 *     first MTP pair), which any error of the products themselves (a wrong scale, sum or quantiser:
 *     of the size of the rounding, 0.3-0.85 at position 0) exceeds by orders of magnitude;
 *   - once an ulp moves one activation across a rounding boundary of its Q8 code (rare: the
 *     1e-5 noise below never did), the random fixtures' recurrence amplifies the one-code change:
 *     0.35-0.40 over 12 steps on tiny-a (KV f32, f16) and tiny-b (KV f16), 0.022 on tiny-q35moe
 *     (KV f16). Bound over all positions: no farther from the oracle than the float reference is
 *     (max |ref - oracle|, measured in the test: 0.54-0.95 here): the integer path must be closer
 *     to its own arithmetic than the other arithmetic is. The MTP head alone (one layer, fixed
 *     inputs H) is as sensitive: H perturbed by 1e-4 (relative, random) moves its logits on the CPU
 *     oracle by 0.17-0.29 over 13 pairs (by 0 at 1e-5 and 1e-6), so its later pairs take the same
 *     bound.
 */
#ifndef RL_TEST_CUDA_ORACLE_H
#define RL_TEST_CUDA_ORACLE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "run/engine.h"

/* Whether a CUDA context created now runs the integer path for Q8_0 (the fixtures' type):
 * RL_CUDA_MMQ unset (default 2), 1 or 2; "0" is the float path (src/backend/cuda_tune.c). */
static inline bool cuda_int_path(void) {
    const char *v = getenv("RL_CUDA_MMQ");
    return !v || strcmp(v, "0") != 0;
}

/* Force the float path for the contexts created until cuda_float_end (RL_CUDA_MMQ is read when a
 * CUDA context is created); saved holds the caller's value (16 bytes). */
static inline void cuda_float_begin(char saved[16]) {
    const char *v = getenv("RL_CUDA_MMQ");
    snprintf(saved, 16, "%s", v ? v : "");
    setenv("RL_CUDA_MMQ", "0", 1);
}
static inline void cuda_float_end(const char saved[16]) {
    if (saved[0]) setenv("RL_CUDA_MMQ", saved, 1);
    else unsetenv("RL_CUDA_MMQ");
}

/* The integer path's oracle: a CPU engine on the quantised activations with the scalar kernels
 * (every product = quant_traits.vec_dot). Default switches otherwise (not the environment's). */
static inline engine *cuda_int_oracle(const char *model) {
    rl_tuning t = tuning_default();
    t.kern.level = KERN_SCALAR;
    return engine_open(model, &(engine_params){.n_threads = 4, .backend = "cpu", .tuning = &t});
}

/* max |a - b| over n values (infinite where either is not finite). */
static inline double cuda_maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = !isfinite(a[i]) || !isfinite(b[i]) ? INFINITY : fabs((double)a[i] - b[i]);
        m = d > m ? d : m;
    }
    return m;
}

/* The integer path's checks (bounds above) of rows x n values: got (CUDA) against want (the
 * scalar-kernel oracle), ref the float reference on the same inputs: row 0 within 1e-3, all rows
 * no farther from want than ref is. */
static inline void cuda_int_check(const char *what, const float *got, const float *want, const float *ref,
                                  int rows, size_t n) {
    const size_t all = (size_t)rows * n;
    const double d0 = cuda_maxdiff(got, want, n), d = cuda_maxdiff(got, want, all);
    const double dr = cuda_maxdiff(ref, want, all);
    CHECK(d0 <= 1e-3 && d <= dr,
          "%s: integer path vs its CPU oracle (scalar vec_dot): max |diff| %.3g at row 0 (bound 1e-3), "
          "%.3g over %d rows (bound: the float reference's distance %.3g)",
          what, d0, d, rows, dr);
    printf(
        "  %s: integer path vs its CPU oracle (scalar vec_dot) max |diff| %.3g at row 0, %.3g over %d rows "
        "(the float reference: %.3g from the oracle)\n",
        what, d0, d, rows, dr);
}

#endif
