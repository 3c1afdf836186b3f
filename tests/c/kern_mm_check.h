/* kern_mm_check.h — the batched-kernel check and speed probe shared by test_kern.c and
 * test_kern_amx.c. */
#ifndef RL_KERN_MM_CHECK_H
#define RL_KERN_MM_CHECK_H
#include "check.h"
#include "kern/kern.h"
#include "kern_bench.h"
#include "quant_rand.h"

/* kern_matmul against T calls of kern_matvec at the same level: bit-identical for every type
 * (batched verify must give each row the single-step result). The output has a row stride
 * ldo > n_rows, NaN-poisoned: the gaps and everything past the last row must stay NaN. */
static void test_matmul(int level, uint32_t type, int64_t n_rows, int64_t n_cols, int T, rl_rng *r) {
    const quant_traits *t = quant_get(type);
    const size_t rb = quant_row_size(type, n_cols), ab = kern_act_size(type, n_cols);
    const int64_t ldo = n_rows + 3;
    uint8_t *W = malloc(rb * (size_t)(n_rows ? n_rows : 1));
    float *x = malloc((size_t)n_cols * sizeof(float));
    uint8_t *act = malloc(ab * (size_t)T);
    const size_t n_out = (size_t)ldo * (size_t)T + 1;
    float *out = malloc(n_out * sizeof(float)), *ref = malloc(n_out * sizeof(float));
    fill_random_blocks(type, W, (int64_t)(rb / t->type_size) * n_rows, r);
    for (int k = 0; k < T; k++) {
        fill_x(x, n_cols, r);
        if (k == 2) /* an all-zero activation row (Q8_K d = 0) */
            for (int64_t i = 0; i < n_cols; i++) x[i] = 0.0f;
        kern_quantize_act(TK(), type, x, n_cols, act + (size_t)k * ab);
    }
    check_poison(out, n_out);
    check_poison(ref, n_out);
    for (int k = 0; k < T; k++)
        kern_matvec(TK(), type, W, n_rows, n_cols, act + (size_t)k * ab, ref + (size_t)k * ldo);
    kern_matmul(TK(), type, W, n_rows, n_cols, act, T, out, ldo);
    int bad = 0;
    for (size_t i = 0; i < n_out; i++) {
        const bool same = isnan(ref[i]) ? isnan(out[i]) : memcmp(&ref[i], &out[i], sizeof(float)) == 0;
        if (!same && bad++ < 3)
            fprintf(stderr, "  %s %s matmul T=%d rows=%lld cols=%lld: out[%zu] = %.9g, matvec %.9g\n",
                    kern_level_name(level), t->name, T, (long long)n_rows, (long long)n_cols, i, out[i],
                    ref[i]);
    }
    CHECK(bad == 0, "%s %s: matmul T=%d rows=%lld cols=%lld: %d values differ from kern_matvec",
          kern_level_name(level), t->name, T, (long long)n_rows, (long long)n_cols, bad);
    free(W);
    free(x);
    free(act);
    free(out);
    free(ref);
}

/* Batched kernel speed: T activation rows against blk-row weight blocks of 256 rows x 2048 columns
 * (ops_matmul_batch cuts a prompt's dense products into a few 16-row blocks per call, an expert's
 * into one call), kern_matmul vs T calls of kern_matvec; returns the speedup and sets *gmacs to the
 * batched rate in G row-dots x columns (multiply-adds) per CPU-second. */
static double bench_mm_one(uint32_t type, int T, int64_t blk, double *gmacs, rl_rng *r) {
    const int64_t n_cols = 2048, n_rows = 256;
    const quant_traits *t = quant_get(type);
    const size_t rb = quant_row_size(type, n_cols), ab = kern_act_size(type, n_cols);
    uint8_t *W = rl_aligned_alloc(rb * (size_t)n_rows, "bench W");
    uint8_t *act = rl_aligned_alloc(ab * (size_t)T, "bench act");
    float *x = malloc((size_t)n_cols * sizeof(float)), *out = malloc((size_t)n_rows * T * sizeof(float));
    fill_random_blocks(type, W, (int64_t)(rb / t->type_size) * n_rows, r);
    for (int k = 0; k < T; k++) {
        fill_x(x, n_cols, r);
        kern_quantize_act(TK(), type, x, n_cols, act + (size_t)k * ab);
    }
    double best[2] = {1e30, 1e30};
    const int reps = T >= 64 ? 5 : 20;
    for (int it = 0; it < reps; it++)
        for (int v = 0; v < 2; v++) {
            const double t0 = cpu_now();
            for (int64_t r0 = 0; r0 < n_rows; r0 += blk) {
                if (v) kern_matmul(TK(), type, W + (size_t)r0 * rb, blk, n_cols, act, T, out + r0, n_rows);
                else
                    for (int k = 0; k < T; k++)
                        kern_matvec(TK(), type, W + (size_t)r0 * rb, blk, n_cols, act + (size_t)k * ab,
                                    out + (size_t)k * n_rows + r0);
            }
            const double dt = cpu_now() - t0;
            best[v] = dt < best[v] ? dt : best[v];
        }
    *gmacs = (double)n_rows * n_cols * T / best[1] / 1e9;
    free(W);
    free(act);
    free(x);
    free(out);
    return best[0] / best[1];
}

#endif
