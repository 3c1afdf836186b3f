/* test_cuda_ops.c — every CUDA kernel against the CPU reference (ops.c / quant.c) on random
 * data, outputs NaN-poisoned, odd sizes:
 *   - dequantisation of every supported type: bit-exact with quant_traits.to_float;
 *   - matmul (dense, multi-segment, gate/up, grouped by expert) vs ops_matmul_ref (double):
 *     |err| <= 2e-5 * sum|w x| + 1e-30 per output (fp32 accumulation of <= 4096 products);
 *     and batch invariance: every row of a T-row launch equals its 1-row launch bit for bit;
 *   - the integer path of the K-quant matmuls (Q2_K-Q6_K; cu_dev_set_int8): every output
 *     == quant_traits.vec_dot(row, Q8_K(x)) bit for bit (the CPU backend's value), in every shape
 *     (1-row dp4a, small tiles, tensor-core prefill tiles, two segments, gate/up, grouped experts,
 *     the add+norm tail), with 3 and 9 super-blocks per row; the staged tiles of launches given a
 *     scratch (test_cuda_ops_mmq.h) too; and with mode 2 the same for the IQ types (IQ_INT8 below);
 *   - the integer path of the 32-value types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4; mode >= 1):
 *     the device Q8_0 / Q8_1 quantiser == quant_traits.from_float byte for byte, and every output ==
 *     vec_dot(row, q8_0(x) or q8_1(x)) bit for bit in every shape (test_cuda_ops_mmq.h);
 *   - RMSNorm, q/k norm + RoPE + cache store, attention (split == prefill bit for bit; vs
 *     ops_attn_head), conv, l2norm/gates, delta rule, gated norm (fused decode == prefill
 *     pieces bit for bit), router + plan, combine.
 * Without a GPU: prints "NAME: skipped: no CUDA device ..." and exits 77 (check.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "check.h"
#include "backend/cuda_tune.h"
#include "base/common.h"
#include "cuda/cuda_ops.h"
#include "kern/ops.h"
#include "base/swiglu.h"
#include "gguf/quant.h"
#include "quant_rand.h"

static rl_rng R;
static double worst_rel[64]; /* per type: max err / bound of the matmul test */
static int int8_on;          /* cu_dev_set_int8 as set by main */
static cu_dev DEV;           /* the device under the environment's switches (cuda_tune_from_env) */
static cu_stream S0;         /* the default stream on DEV: every launch of the tests */

static void *dalloc(size_t n) {
    void *p = NULL;
    if (CU_CHECK(cudaMalloc(&p, n ? n : 16))) {
        fprintf(stderr, "%s\n", rl_lasterr());
        exit(1);
    }
    return p;
}
static void *dup_to_dev(const void *h, size_t n) {
    void *d = dalloc(n);
    CU_CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}
static void to_host(void *h, const void *d, size_t n) {
    if (CU_CHECK(cudaDeviceSynchronize()) || CU_CHECK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost)))
        fprintf(stderr, "%s\n", rl_lasterr());
}
static float *dpoison(size_t n) { /* device floats, NaN-filled */
    float *h = malloc(sizeof(float) * (n ? n : 1));
    check_poison(h, n);
    float *d = dup_to_dev(h, sizeof(float) * n);
    free(h);
    return d;
}
static float *randv(size_t n, float scale) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = rl_rng_normal(&R) * scale;
    return x;
}
static int count_bad(const float *a, const float *b, size_t n) { /* bit differences, NaN never equal */
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += isnan(a[i]) || memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}
/* count_bad of two device arrays of n floats, through the host buffers ha and hb */
static int count_bad_dev(const float *d1, const float *d2, size_t n, float *ha, float *hb) {
    to_host(ha, d1, sizeof(float) * n);
    to_host(hb, d2, sizeof(float) * n);
    return count_bad(ha, hb, n);
}
static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = isnan(a[i]) || isnan(b[i]) ? INFINITY : fabs((double)a[i] - b[i]);
        if (d > m) m = d;
    }
    return m;
}

static const uint32_t TYPES[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K,
                                 QT_Q6_K, QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_IQ1_S,
                                 QT_IQ1_M, QT_IQ4_XS,
                                 /* the 32-value types of llama-quantize's fallbacks, and MXFP4 experts */
                                 QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_IQ4_NL, QT_MXFP4};
#define NTYPES (sizeof TYPES / sizeof TYPES[0])
/* the types of the integer path: the K-quants (mmq_k.cuh; RL_CUDA_MMQ >= 1), the 32-value types
 * (mmq_b32.cuh; >= 1), the IQ types (mmq_iq.cuh; 2) */
#define N_KQ 5
#define N_B32 7
#define N_IQ_INT8 8
static const uint32_t KQ[N_KQ] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q3_K, QT_Q2_K};
static const uint32_t B32[N_B32] = {QT_Q8_0, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_IQ4_NL, QT_MXFP4};
static const uint32_t IQ[N_IQ_INT8] = {QT_IQ2_XXS, QT_IQ2_XS, QT_IQ1_M,  QT_IQ2_S,
                                       QT_IQ3_XXS, QT_IQ3_S,  QT_IQ4_XS, QT_IQ1_S};
static bool type_in(uint32_t type, const uint32_t *list, int n) {
    for (int i = 0; i < n; i++)
        if (list[i] == type) return true;
    return false;
}

/* ---- dequantisation --------------------------------------------------------------------- */

static void test_dequant(uint32_t type, int n_in) {
    const quant_traits *qt = quant_get(type);
    const int rows = 7;
    size_t rb = quant_row_size(type, n_in);
    uint8_t *w = malloc(rb * rows);
    fill_random_blocks(type, w, (int64_t)rows * n_in / qt->blck, &R);
    int32_t idx[5] = {3, 0, 6, 3, 1};
    float *ref = malloc(sizeof(float) * 5 * n_in), *got = malloc(sizeof(float) * 5 * n_in);
    for (int t = 0; t < 5; t++) qt->to_float(w + (size_t)idx[t] * rb, ref + (size_t)t * n_in, n_in);
    uint8_t *dw = dup_to_dev(w, rb * rows);
    int32_t *di = dup_to_dev(idx, sizeof idx);
    float *dout = dpoison(5 * (size_t)n_in);
    CHECK(cu_get_rows(type, dw, rb, n_in, di, 5, dout, n_in, S0) == 0, "get_rows %s: %s", qt->name,
          rl_lasterr());
    to_host(got, dout, sizeof(float) * 5 * n_in);
    int bad = count_bad(got, ref, 5 * (size_t)n_in);
    CHECK(bad == 0, "dequant %s: %d of %d values differ from the CPU (bit-exact expected)", qt->name, bad,
          5 * n_in);
    cudaFree(dw);
    cudaFree(di);
    cudaFree(dout);
    free(w);
    free(ref);
    free(got);
}

/* ---- matmul ------------------------------------------------------------------------------- */

/* bound per output: 2e-5 * sum_i |w_i x_i| */
static int check_mm(const char *what, const ops_mat *W, int64_t r0, const float *x, int T, const float *got,
                    int ldg, double *worst) {
    const quant_traits *qt = quant_get(W->type);
    float *row = malloc(sizeof(float) * W->n_in);
    int bad = 0;
    for (int64_t r = 0; r < W->n_out - r0 && bad < 5; r++) {
        qt->to_float(W->data + (size_t)(r0 + r) * W->row_bytes, row, W->n_in);
        for (int t = 0; t < T; t++) {
            double s = 0, a = 0;
            for (int64_t i = 0; i < W->n_in; i++) {
                s += (double)row[i] * x[(size_t)t * W->n_in + i];
                a += fabs((double)row[i] * x[(size_t)t * W->n_in + i]);
            }
            double g = got[(size_t)t * ldg + r], err = fabs(g - s), bound = 2e-5 * a + 1e-30;
            if (!(err <= bound)) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s row %lld tok %d: got %.9g want %.9g (bound %.3g)\n", what,
                            (long long)r, t, g, s, bound);
            }
            if (err / bound > *worst) *worst = err / bound;
        }
    }
    free(row);
    return bad;
}

/* The integer path: got[t][r] == vec_dot(row r, q(x_t)) bit for bit, q the type's activation type
 * (Q8_K; Q8_0 or Q8_1 for the 32-value types). */
static int check_mm_q8(const ops_mat *W, const float *x, int T, const float *got, int ldg) {
    const quant_traits *qt = quant_get(W->type), *q8 = quant_get(qt->vec_dot_type);
    void *xq = malloc(quant_row_size(qt->vec_dot_type, W->n_in));
    int bad = 0;
    for (int t = 0; t < T; t++) {
        q8->from_float(x + (size_t)t * W->n_in, xq, W->n_in);
        for (int64_t r = 0; r < W->n_out; r++) {
            const float want = qt->vec_dot(W->n_in, W->data + (size_t)r * W->row_bytes, xq),
                        g = got[(size_t)t * ldg + r];
            if (memcmp(&want, &g, sizeof g) && bad++ < 3)
                fprintf(stderr, "  %s int8 row %lld tok %d: got %.9g want %.9g\n", qt->name, (long long)r, t,
                        g, want);
        }
    }
    free(xq);
    return bad;
}

/* n_in0: 0 for the default size; a large one makes the staged decode / small-batch launches
 * (weights copied to shared memory in chunks of MM_STAGE_WARP_BYTES per warp) take several
 * chunks, the last one partial: they must still equal the unstaged 13-row launch bit for bit. */
static void test_matmul(uint32_t type, int ti, int n_in0) {
    const quant_traits *qt = quant_get(type);
    const int n_in = n_in0             ? n_in0
                     : qt->blck == 256 ? 768
                     : qt->blck == 32  ? 544
                                       : 520,
              n_out = 37, TMAX = 13;
    size_t rb = quant_row_size(type, n_in);
    uint8_t *w = malloc(rb * n_out);
    fill_random_blocks(type, w, (int64_t)n_out * n_in / qt->blck, &R);
    ops_mat W = {"w", type, n_in, n_out, rb, w};
    float *x = randv((size_t)TMAX * n_in, 1.0f);
    uint8_t *dw = dup_to_dev(w, rb * n_out);
    float *dx = dup_to_dev(x, sizeof(float) * TMAX * n_in);
    float *got = malloc(sizeof(float) * TMAX * n_out), *one = malloc(sizeof(float) * n_out);
    float *dy = dpoison((size_t)TMAX * n_out);
    /* T = 13 in one launch (tiles of 8, a partial tile) */
    cu_seg s = {.w = dw, .row_bytes = rb, .n_out = n_out, .y = dy, .ldy = n_out};
    CHECK(cu_matmul(type, n_in, &s, 1, dx, n_in, TMAX, NULL, false, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    to_host(got, dy, sizeof(float) * TMAX * n_out);
    const bool exact = (int8_on && (type_in(type, KQ, N_KQ) || type_in(type, B32, N_B32))) ||
                       (int8_on == 2 && type_in(type, IQ, N_IQ_INT8));
    int bad = exact ? check_mm_q8(&W, x, TMAX, got, n_out)
                    : check_mm(qt->name, &W, 0, x, TMAX, got, n_out, &worst_rel[ti]);
    CHECK(bad == 0, "matmul %s%s T=%d: %d outputs %s", qt->name, exact ? " (int8)" : "", TMAX, bad,
          exact ? "differ from the CPU's vec_dot" : "outside the bound");
    /* batch invariance: each row alone (the decode variant) */
    int diff = 0;
    for (int t = 0; t < TMAX; t++) {
        float *d1 = dpoison(n_out);
        cu_seg s1 = {.w = dw, .row_bytes = rb, .n_out = n_out, .y = d1, .ldy = n_out};
        cu_matmul(type, n_in, &s1, 1, dx + (size_t)t * n_in, n_in, 1, NULL, false, NULL, NULL, S0);
        to_host(one, d1, sizeof(float) * n_out);
        diff += count_bad(one, got + (size_t)t * n_out, n_out);
        cudaFree(d1);
    }
    CHECK(diff == 0, "matmul %s: %d outputs of 1-row launches differ from the %d-row launch", qt->name, diff,
          TMAX);
    /* two segments (rows 0..19 and 20..36 as separate matrices) in one launch, T = 3 */
    float *dy2 = dpoison((size_t)3 * 20), *dy3 = dpoison((size_t)3 * 17);
    cu_seg ss[2] = {{.w = dw, .row_bytes = rb, .n_out = 20, .y = dy2, .ldy = 20},
                    {.w = dw + 20 * rb, .row_bytes = rb, .n_out = 17, .y = dy3, .ldy = 17}};
    CHECK(cu_matmul(type, n_in, ss, 2, dx, n_in, 3, NULL, false, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    float h2[60], h3[51];
    to_host(h2, dy2, sizeof h2);
    to_host(h3, dy3, sizeof h3);
    diff = 0;
    for (int t = 0; t < 3; t++) {
        diff += count_bad(h2 + t * 20, got + (size_t)t * n_out, 20);
        diff += count_bad(h3 + t * 17, got + (size_t)t * n_out + 20, 17);
    }
    CHECK(diff == 0, "matmul %s: two-segment launch differs from one matrix (%d)", qt->name, diff);
    /* gate/up: rows 0..17 gate, 18..35 up -> silu(g) * u, T = 13 */
    float *dh = dpoison((size_t)TMAX * 18), hh[13 * 18];
    cu_seg gu = {.w = dw, .w2 = dw + 18 * rb, .row_bytes = rb, .n_out = 18, .y = dh, .ldy = 18};
    CHECK(cu_matmul(type, n_in, &gu, 1, dx, n_in, TMAX, NULL, true, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    to_host(hh, dh, sizeof hh);
    diff = 0;
    for (int t = 0; t < TMAX; t++)
        for (int r = 0; r < 18; r++) {
            float g = got[(size_t)t * n_out + r], u = got[(size_t)t * n_out + 18 + r];
            float want = swiglu(g, u); /* src/base/swiglu.h, the device's function */
            diff += !(fabsf(hh[t * 18 + r] - want) <= 1e-6f * (1 + fabsf(want)));
        }
    CHECK(diff == 0, "matmul %s: gate/up epilogue differs from silu(g)*u (%d)", qt->name, diff);
    diff = 0; /* gate/up, each row alone (the decode variant) */
    for (int t = 0; t < TMAX; t++) {
        float *d1 = dpoison(18), h1[18];
        cu_seg g1 = {.w = dw, .w2 = dw + 18 * rb, .row_bytes = rb, .n_out = 18, .y = d1, .ldy = 18};
        CHECK(cu_matmul(type, n_in, &g1, 1, dx + (size_t)t * n_in, n_in, 1, NULL, true, NULL, NULL, S0) == 0,
              "%s", rl_lasterr());
        to_host(h1, d1, sizeof h1);
        diff += count_bad(h1, hh + (size_t)t * 18, 18);
        cudaFree(d1);
    }
    CHECK(diff == 0, "matmul %s: %d gate/up outputs of 1-row launches differ from the %d-row launch",
          qt->name, diff, TMAX);
    /* the other shapes give the same bits: small batches (tiles of 2 and 4 tokens, one weight row
     * per warp) and a large one (T = 20 > CU_SMALL_T: 8 rows per warp), plain and gate/up */
    const int TB = 20;
    float *xb = malloc(sizeof(float) * TB * n_in), *gb = malloc(sizeof(float) * TB * n_out);
    for (int t = 0; t < TB; t++)
        memcpy(xb + (size_t)t * n_in, x + (size_t)(t % TMAX) * n_in, sizeof(float) * n_in);
    float *dxb = dup_to_dev(xb, sizeof(float) * TB * n_in), *dyb = dpoison((size_t)TB * n_out);
    const int shapes[3] = {2, 4, TB};
    diff = 0;
    for (int k = 0; k < 3; k++) {
        const int Tk = shapes[k];
        cu_seg sb = {.w = dw, .row_bytes = rb, .n_out = n_out, .y = dyb, .ldy = n_out};
        CHECK(cu_matmul(type, n_in, &sb, 1, dxb, n_in, Tk, NULL, false, NULL, NULL, S0) == 0, "%s",
              rl_lasterr());
        to_host(gb, dyb, sizeof(float) * Tk * n_out);
        for (int t = 0; t < Tk; t++)
            diff += count_bad(gb + (size_t)t * n_out, got + (size_t)(t % TMAX) * n_out, n_out);
        if (exact && Tk == TB) { /* the prefill tiles (no scratch: k_mmq_mma) against vec_dot itself */
            const int b20 = check_mm_q8(&W, xb, Tk, gb, n_out);
            CHECK(b20 == 0, "matmul %s (int8) T=%d: %d outputs differ from the CPU's vec_dot", qt->name, Tk,
                  b20);
        }
        cu_seg gub = {.w = dw, .w2 = dw + 18 * rb, .row_bytes = rb, .n_out = 18, .y = dyb, .ldy = 18};
        CHECK(cu_matmul(type, n_in, &gub, 1, dxb, n_in, Tk, NULL, true, NULL, NULL, S0) == 0, "%s",
              rl_lasterr());
        to_host(gb, dyb, sizeof(float) * Tk * 18);
        for (int t = 0; t < Tk; t++) diff += count_bad(gb + (size_t)t * 18, hh + (size_t)(t % TMAX) * 18, 18);
    }
    CHECK(diff == 0, "matmul %s: launches of 2, 4 and %d rows differ from the %d-row launch (%d)", qt->name,
          TB, TMAX, diff);
    cudaFree(dxb);
    cudaFree(dyb);
    free(xb);
    free(gb);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dy2);
    cudaFree(dy3);
    cudaFree(dh);
    free(w);
    free(x);
    free(got);
    free(one);
}

/* ---- norms ---------------------------------------------------------------------------------- */

static void test_rmsnorm(int n) { /* n > 2048: the generic row, else the register row (norm.cu) */
    const int T = 3;
    float *x = randv((size_t)T * n, 2.0f), *y = randv((size_t)T * n, 1.0f), *w = randv(n, 1.0f);
    float *ref = malloc(sizeof(float) * T * n), *got = malloc(sizeof(float) * T * n),
          *gx = malloc(sizeof(float) * T * n);
    float *dx = dup_to_dev(x, sizeof(float) * T * n), *dy = dup_to_dev(y, sizeof(float) * T * n),
          *dw = dup_to_dev(w, sizeof(float) * n), *dout = dpoison((size_t)T * n);
    CHECK(cu_add_rmsnorm(dx, dy, dw, dout, n, T, 1e-6f, S0) == 0, "%s", rl_lasterr());
    to_host(got, dout, sizeof(float) * T * n);
    to_host(gx, dx, sizeof(float) * T * n);
    for (int i = 0; i < T * n; i++) x[i] += y[i];
    for (int t = 0; t < T; t++) ops_rmsnorm(x + (size_t)t * n, w, n, 1e-6f, ref + (size_t)t * n);
    CHECK(count_bad(gx, x, (size_t)T * n) == 0, "residual add differs");
    double d = max_abs_diff(got, ref, (size_t)T * n);
    CHECK(d <= 1e-6, "rmsnorm max |diff| %.3g", d);
    printf("  rmsnorm n %d: max |gpu - cpu| = %.3g\n", n, d);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    cudaFree(dout);
    free(x);
    free(y);
    free(w);
    free(ref);
    free(got);
    free(gx);
}

/* ---- attention -------------------------------------------------------------------------------- */

/* Decode attention at long contexts: the grouped split kernel (default: K/V slices staged in
 * shared memory once per KV group), the per-warp split kernel (RL_CUDA_ATTN=per-warp) and the
 * prefill kernel must give the same bits, row by row, for T = 1..4 rows per split launch and
 * contexts that end inside a chunk, at a chunk edge and inside a 32-position slice; every
 * output poisoned first; and all within 5e-5 of the CPU double reference (ops_attn_head_kv on
 * the same f32 / f16 cache). H/Hkv: the group sizes of the 80B (16/2) and a large group (24/1,
 * 24 warps: more than 48 KiB of shared memory at hd 256). */
/* n cache values as the cache stores them (f16 halves or f32), malloc'ed. */
static void *kv_host(const float *x, size_t n, bool f16) {
    void *h = malloc((f16 ? 2 : 4) * n);
    for (size_t i = 0; i < n; i++) {
        if (f16) ((uint16_t *)h)[i] = rl_fp32_to_fp16(x[i]);
        else ((float *)h)[i] = x[i];
    }
    return h;
}

/* The CPU's gated attention of T query rows (qg: [T][H][q | gate]) at positions pos + 1 .. pos + T
 * over the host cache hk / hv (rows of Hkv heads) into ref [T][H][hd]. */
static void attn_ref(const float *qg, const void *hk, const void *hv, bool f16, int T, int H, int Hkv, int hd,
                     int pos, float *ref) {
    const size_t kvw = (size_t)Hkv * hd;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *q = qg + (size_t)t * H * 2 * hd + (size_t)h * 2 * hd;
            float *o = ref + (size_t)t * H * hd + (size_t)h * hd;
            const size_t ho = (size_t)(h / (H / Hkv)) * hd * (f16 ? 2 : 4);
            ops_attn_head_kv(q, (const char *)hk + ho, (const char *)hv + ho, f16, pos + t + 1, kvw, hd,
                             1.0f / sqrtf((float)hd), o);
            for (int i = 0; i < hd; i++) o[i] *= ops_sigmoid(q[hd + i]);
        }
}

/* T query rows at positions pos + 1 .. through the split (decode / verify) path as launches of `rows`
 * rows each, into the host buffer g [T][H][hd] (outputs poisoned first). */
static void attn_split_rows(const cu_attn_dims *a, const float *dqg, const void *dK, const void *dV, int pos,
                            int T, int rows, float *part, float *g) {
    const int H = a->H, hd = a->hd;
    const size_t on = (size_t)T * H * hd;
    float *o = dpoison(on);
    for (int t0 = 0; t0 < T; t0 += rows) {
        int nr = T - t0 < rows ? T - t0 : rows, p1 = pos + t0;
        int *dp1 = dup_to_dev(&p1, sizeof p1);
        CHECK(cu_attention(a, dqg + (size_t)t0 * H * 2 * hd, dK, dV, dp1, nr, true, part,
                           o + (size_t)t0 * H * hd, S0) == 0,
              "%s", rl_lasterr());
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "split launch failed");
        cudaFree(dp1);
    }
    to_host(g, o, sizeof(float) * on);
    cudaFree(o);
}

static void test_attention_decode(int hd, bool f16, int H, int Hkv, int n_kv_last) {
    const int T = 4, n_ctx = n_kv_last + 8, pos = n_kv_last - T; /* rows see pos+1 .. n_kv_last */
    const size_t kvw = (size_t)Hkv * hd, n = (size_t)n_ctx * kvw;
    float *qg = randv((size_t)T * H * 2 * hd, 1.0f), *K = randv(n, 1.0f), *V = randv(n, 1.0f);
    void *hk = kv_host(K, n, f16), *hv = kv_host(V, n, f16);
    void *dK = dup_to_dev(hk, (f16 ? 2 : 4) * n), *dV = dup_to_dev(hv, (f16 ? 2 : 4) * n);
    float *dqg = dup_to_dev(qg, sizeof(float) * T * H * 2 * hd);
    int *dpos = dup_to_dev(&pos, sizeof pos);
    cu_attn_dims a = {.H = H,
                      .Hkv = Hkv,
                      .hd = hd,
                      .n_rot = 0,
                      .n_ctx = n_ctx,
                      .eps = 1e-6f,
                      .scale = 1.0f / sqrtf((float)hd),
                      .inv_freq = NULL,
                      .kv_f16 = f16};
    size_t on = (size_t)T * H * hd;
    float *o_pf = dpoison(on), *part = dpoison(cu_attn_part_floats(&a, T));
    float *g_pf = malloc(sizeof(float) * on), *g = malloc(sizeof(float) * on),
          *ref = malloc(sizeof(float) * on);
    CHECK(cu_attention(&a, dqg, dK, dV, dpos, T, false, NULL, o_pf, S0) == 0, "%s", rl_lasterr());
    to_host(g_pf, o_pf, sizeof(float) * on);
    for (int v = 0; v < 2; v++) { /* the staged prefill kernel (24 heads: a partial second block of warps)
                                   * and the tiled one: the same bits */
        cu_attn_dims as = a;
        as.prefill_staged = v == 0;
        as.prefill_tiled = v == 1;
        float *o = dpoison(on);
        CHECK(cu_attention(&as, dqg, dK, dV, dpos, T, false, NULL, o, S0) == 0, "%s", rl_lasterr());
        to_host(g, o, sizeof(float) * on);
        CHECK(count_bad(g, g_pf, on) == 0, "attention hd %d%s H %d/%d ctx %d: %s prefill != prefill", hd,
              f16 ? " f16" : "", H, Hkv, n_kv_last, v ? "tiled" : "staged");
        cudaFree(o);
    }
    static const char *const vname[2] = {"grouped", "per-warp"};
    for (int v = 0; v < 2; v++)                 /* the grouped split kernel, the per-warp one */
        for (int rows = 1; rows <= T; rows++) { /* T rows as launches of `rows` rows */
            a.split_per_warp = v == 1;
            attn_split_rows(&a, dqg, dK, dV, pos, T, rows, part, g);
            CHECK(count_bad(g, g_pf, on) == 0,
                  "decode attention hd %d%s H %d/%d ctx %d: %s split (%d rows) != prefill", hd,
                  f16 ? " f16" : "", H, Hkv, n_kv_last, vname[v], rows);
        }
    attn_ref(qg, hk, hv, f16, T, H, Hkv, hd, pos, ref);
    double d = max_abs_diff(g_pf, ref, on);
    CHECK(d <= 5e-5, "decode attention hd %d%s ctx %d: max |diff| vs CPU %.3g", hd, f16 ? " f16" : "",
          n_kv_last, d);
    printf("  decode attention hd %d%s H %d/%d ctx %d: grouped == per-warp == prefill "
           "(1..4 rows), "
           "|gpu - cpu| %.3g\n",
           hd, f16 ? " (f16 KV)" : "", H, Hkv, n_kv_last, d);
    cudaFree(dK);
    cudaFree(dV);
    cudaFree(dqg);
    cudaFree(dpos);
    cudaFree(o_pf);
    cudaFree(part);
    free(qg);
    free(K);
    free(V);
    free(hk);
    free(hv);
    free(g_pf);
    free(g);
    free(ref);
}

static void test_attention(int hd, bool f16) {
    const int H = 8, Hkv = 2, n_rot = hd / 4, n_ctx = 700, T = 6, pos = 600; /* 3 chunks */
    const size_t kvw = (size_t)Hkv * hd;
    float *inv = malloc(sizeof(float) * n_rot / 2);
    for (int i = 0; i < n_rot / 2; i++) inv[i] = (float)(1.0 / pow(1e7, (double)(2 * i) / n_rot));
    float *qg = randv((size_t)T * H * 2 * hd, 1.0f), *k = randv((size_t)T * kvw, 1.0f),
          *v = randv((size_t)T * kvw, 1.0f);
    float *qn = randv(hd, 0.3f), *kn = randv(hd, 0.3f);
    for (int i = 0; i < hd; i++) {
        qn[i] += 1;
        kn[i] += 1;
    }
    float *K = randv((size_t)n_ctx * kvw, 1.0f), *V = randv((size_t)n_ctx * kvw, 1.0f);
    if (f16) /* the cache stores halves: round the host copy the same way */
        for (size_t i = 0; i < (size_t)n_ctx * kvw; i++) {
            K[i] = rl_fp16_to_fp32(rl_fp32_to_fp16(K[i]));
            V[i] = rl_fp16_to_fp32(rl_fp32_to_fp16(V[i]));
        }
    const size_t el = f16 ? 2 : 4;
    void *hk = kv_host(K, (size_t)n_ctx * kvw, f16), *hv = kv_host(V, (size_t)n_ctx * kvw, f16);
    void *dK = dup_to_dev(hk, el * n_ctx * kvw), *dV = dup_to_dev(hv, el * n_ctx * kvw);
    free(hk);
    free(hv);
    float *dqg = dup_to_dev(qg, sizeof(float) * T * H * 2 * hd), *dk = dup_to_dev(k, sizeof(float) * T * kvw);
    float *dv = dup_to_dev(v, sizeof(float) * T * kvw), *dqn = dup_to_dev(qn, sizeof(float) * hd),
          *dkn = dup_to_dev(kn, sizeof(float) * hd);
    float *dinv = dup_to_dev(inv, sizeof(float) * n_rot / 2);
    int *dpos = dup_to_dev(&pos, sizeof pos);
    cu_attn_dims a = {.H = H,
                      .Hkv = Hkv,
                      .hd = hd,
                      .n_rot = n_rot,
                      .n_ctx = n_ctx,
                      .eps = 1e-6f,
                      .scale = 1.0f / sqrtf((float)hd),
                      .inv_freq = dinv,
                      .kv_f16 = f16};
    CHECK(cu_qk_norm_rope_store(&a, dqg, dk, dv, dqn, dkn, dpos, T, dK, dV, S0) == 0, "%s", rl_lasterr());
    /* CPU: the same norm + rope, cache rows pos..pos+T-1 */
    for (int t = 0; t < T; t++) {
        float rc[512], rs[512]; /* n_rot / 2 <= hd / 2 <= 128 in every shape here */
        ops_rope_table(n_rot, pos + t, 1e7f, rc, rs);
        for (int h = 0; h < H; h++) {
            float *q = qg + (size_t)t * H * 2 * hd + (size_t)h * 2 * hd;
            ops_rmsnorm(q, qn, hd, 1e-6f, q);
            ops_rope_apply(q, n_rot, rc, rs);
        }
        for (int h = 0; h < Hkv; h++) {
            float *kh = k + (size_t)t * kvw + (size_t)h * hd;
            ops_rmsnorm(kh, kn, hd, 1e-6f, kh);
            ops_rope_apply(kh, n_rot, rc, rs);
        }
        for (size_t j = 0; j < kvw; j++) {
            float kk = k[(size_t)t * kvw + j], vv = v[(size_t)t * kvw + j];
            if (f16) {
                kk = rl_fp16_to_fp32(rl_fp32_to_fp16(kk));
                vv = rl_fp16_to_fp32(rl_fp32_to_fp16(vv));
            }
            K[(size_t)(pos + t) * kvw + j] = kk;
            V[(size_t)(pos + t) * kvw + j] = vv;
        }
    }
    float *gq = malloc(sizeof(float) * T * H * 2 * hd), *gK = malloc(sizeof(float) * n_ctx * kvw);
    to_host(gq, dqg, sizeof(float) * T * H * 2 * hd);
    double dq = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            size_t o = (size_t)t * H * 2 * hd + (size_t)h * 2 * hd;
            double m = max_abs_diff(gq + o, qg + o, hd);
            dq = m > dq ? m : dq;
        }
    CHECK(dq <= 2e-5, "q norm+rope max |diff| %.3g", dq);
    /* attention: split (rows one by one, T<=4 per launch) vs prefill (all rows) */
    float *o_pf = dpoison((size_t)T * H * hd), *o_sp = dpoison((size_t)T * H * hd);
    float *part = dpoison(cu_attn_part_floats(&a, 1));
    CHECK(cu_attention(&a, dqg, dK, dV, dpos, T, false, NULL, o_pf, S0) == 0, "%s", rl_lasterr());
    for (int t = 0; t < T; t++) {
        int p1 = pos + t;
        int *dp1 = dup_to_dev(&p1, sizeof p1);
        CHECK(cu_attention(&a, dqg + (size_t)t * H * 2 * hd, dK, dV, dp1, 1, true, part,
                           o_sp + (size_t)t * H * hd, S0) == 0,
              "%s", rl_lasterr());
        cudaDeviceSynchronize();
        cudaFree(dp1);
    }
    float *gpf = malloc(sizeof(float) * T * H * hd), *gsp = malloc(sizeof(float) * T * H * hd),
          *ref = malloc(sizeof(float) * T * H * hd);
    to_host(gpf, o_pf, sizeof(float) * T * H * hd);
    to_host(gsp, o_sp, sizeof(float) * T * H * hd);
    CHECK(count_bad(gpf, gsp, (size_t)T * H * hd) == 0, "attention hd %d: split and prefill paths differ",
          hd);
    { /* the staged prefill kernel (K/V slices in shared memory per block): the same bits */
        cu_attn_dims as = a;
        as.prefill_staged = true;
        float *o_st = dpoison((size_t)T * H * hd), *gst = malloc(sizeof(float) * T * H * hd);
        CHECK(cu_attention(&as, dqg, dK, dV, dpos, T, false, NULL, o_st, S0) == 0, "%s", rl_lasterr());
        to_host(gst, o_st, sizeof(float) * T * H * hd);
        CHECK(count_bad(gst, gpf, (size_t)T * H * hd) == 0,
              "attention hd %d: staged prefill differs from prefill", hd);
        cudaFree(o_st);
        free(gst);
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *q = qg + (size_t)t * H * 2 * hd + (size_t)h * 2 * hd;
            float *o = ref + (size_t)t * H * hd + (size_t)h * hd;
            ops_attn_head(q, K + (size_t)(h / (H / Hkv)) * hd, V + (size_t)(h / (H / Hkv)) * hd, pos + t + 1,
                          kvw, hd, 1.0f / sqrtf((float)hd), o);
            for (int i = 0; i < hd; i++) o[i] *= ops_sigmoid(q[hd + i]);
        }
    double d = max_abs_diff(gpf, ref, (size_t)T * H * hd);
    CHECK(d <= 5e-5, "attention hd %d%s: max |diff| vs CPU %.3g", hd, f16 ? " f16" : "", d);
    printf("  attention hd %d%s: max |gpu - cpu| = %.3g (q norm+rope %.3g)\n", hd, f16 ? " (f16 KV)" : "", d,
           dq);
    (void)gK;
    cudaFree(dK);
    cudaFree(dV);
    cudaFree(dqg);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dqn);
    cudaFree(dkn);
    cudaFree(dinv);
    cudaFree(dpos);
    cudaFree(o_pf);
    cudaFree(o_sp);
    cudaFree(part);
    free(inv);
    free(qg);
    free(k);
    free(v);
    free(qn);
    free(kn);
    free(K);
    free(V);
    free(gq);
    free(gK);
    free(gpf);
    free(gsp);
    free(ref);
}

#include "test_cuda_ops_dn.h"
#include "test_cuda_ops_mmq.h"
#include "test_cuda_ops_attn.h"
#include "test_cuda_ops_smem.h"

/* ---- fused decode kernels: the same bits as the separate launches --------------------------- */

/* The decode combine with the next norm in its last block (cu_moe_combine_norm1) == cu_moe_combine
 * (combine, then the norm kernel), with out aliasing xn (the backend's use), twice in a row (the
 * counter must be back at 0, else the second norm never runs: poisoned out); and both again with the
 * shared-expert gate made beforehand by cu_moe_sh_gate (the backend's default) == the combine's own. */
static void test_fused_combine(void) {
    const int D = 2048 + 64, K = 10;
    float *sg = randv(D, 0.05f), *wn = randv(D, 1.0f);
    float *dsg = dup_to_dev(sg, sizeof(float) * D), *dwn = dup_to_dev(wn, sizeof(float) * D);
    unsigned zero = 0, *ctr = dup_to_dev(&zero, sizeof zero);
    float *a = malloc(sizeof(float) * D), *b = malloc(sizeof(float) * D), *dg = dpoison(1);
    int bad = 0;
    for (int rep = 0; rep < 4; rep++) {
        const bool side = rep >= 2; /* reps 2, 3: the gate from cu_moe_sh_gate */
        float *eo = randv((size_t)D * K, 1.0f), *w = randv(K, 0.3f), *sh = randv(D, 1.0f),
              *xn = randv(D, 1.0f), *x0 = randv(D, 1.0f);
        float *deo = dup_to_dev(eo, sizeof(float) * D * K), *dw = dup_to_dev(w, sizeof(float) * K),
              *dsh = dup_to_dev(sh, sizeof(float) * D);
        float *dxn1 = dup_to_dev(xn, sizeof(float) * D), *dxn2 = dup_to_dev(xn, sizeof(float) * D);
        float *dx1 = dup_to_dev(x0, sizeof(float) * D), *dx2 = dup_to_dev(x0, sizeof(float) * D);
        float *dy1 = dpoison(D), *dy2 = dpoison(D);
        if (side) CHECK(cu_moe_sh_gate(dsg, dxn2, dg, D, 1, S0) == 0, "%s", rl_lasterr());
        CHECK(cu_moe_combine(deo, dw, K, dsh, dsg, NULL, dxn1, dy1, dx1, dwn, dxn1, D, 1, 1e-6f, S0) == 0,
              "%s", rl_lasterr());
        CHECK(cu_moe_combine_norm1(deo, dw, K, dsh, dsg, side ? dg : NULL, dxn2, dy2, dx2, dwn, dxn2, D,
                                   1e-6f, ctr, S0) == 0,
              "%s", rl_lasterr());
        bad += count_bad_dev(dy1, dy2, D, a, b);
        bad += count_bad_dev(dx1, dx2, D, a, b);
        bad += count_bad_dev(dxn1, dxn2, D, a, b);
        cudaFree(deo);
        cudaFree(dw);
        cudaFree(dsh);
        cudaFree(dxn1);
        cudaFree(dxn2);
        cudaFree(dx1);
        cudaFree(dx2);
        cudaFree(dy1);
        cudaFree(dy2);
        free(eo);
        free(w);
        free(sh);
        free(xn);
        free(x0);
    }
    unsigned hc = 1;
    to_host(&hc, ctr, sizeof hc);
    CHECK(bad == 0 && hc == 0,
          "decode combine + norm tail differs from combine then norm (%d values; counter %u)", bad, hc);
    printf("  decode combine + norm tail (own gate / cu_moe_sh_gate's) == combine, then norm (2 launches): "
           "%d values differ\n",
           bad);
    cudaFree(dsg);
    cudaFree(dwn);
    cudaFree(ctr);
    cudaFree(dg);
    free(sg);
    free(wn);
    free(a);
    free(b);
}

/* The add+norm tail of a one-row matmul == cu_matmul then cu_add_rmsnorm, twice in a row (the
 * counter must be back at 0 after each launch, else the second tail never runs: poisoned out). The
 * tail runs rowops.cuh's add_rmsnorm_row on 128 threads; k_add_rmsnorm takes add_rmsnorm_row_regs
 * for D <= 2048 (the 80B's 2048 and a short row) and add_rmsnorm_row above: the same bits. */
static void test_tail_add_norm(int D) {
    const int n_in = 1024;
    const size_t rb = quant_row_size(QT_Q4_K, n_in);
    uint8_t *w = malloc(rb * D);
    fill_random_blocks(QT_Q4_K, w, (int64_t)D * n_in / 256, &R);
    uint8_t *dW = dup_to_dev(w, rb * D);
    float *nw = randv(D, 1.0f), *dnw = dup_to_dev(nw, sizeof(float) * D);
    unsigned zero = 0, *ctr = dup_to_dev(&zero, sizeof zero);
    float *a = malloc(sizeof(float) * D), *b = malloc(sizeof(float) * D);
    int bad = 0;
    for (int rep = 0; rep < 2; rep++) {
        float *in = randv(n_in, 1.0f), *x0 = randv(D, 1.0f);
        float *din = dup_to_dev(in, sizeof(float) * n_in);
        float *dx1 = dup_to_dev(x0, sizeof(float) * D), *dx2 = dup_to_dev(x0, sizeof(float) * D);
        float *dy1 = dpoison(D), *dy2 = dpoison(D), *do1 = dpoison(D), *do2 = dpoison(D);
        cu_seg s1 = {.w = dW, .row_bytes = rb, .n_out = D, .y = dy1, .ldy = D}, s2 = s1;
        s2.y = dy2;
        CHECK(cu_matmul(QT_Q4_K, n_in, &s1, 1, din, n_in, 1, NULL, false, NULL, NULL, S0) == 0, "%s",
              rl_lasterr());
        CHECK(cu_add_rmsnorm(dx1, dy1, dnw, do1, D, 1, 1e-6f, S0) == 0, "%s", rl_lasterr());
        cu_tail t = {.kind = CU_TAIL_ADD_NORM, .counter = ctr, .x = dx2, .out = do2, .w = dnw, .eps = 1e-6f};
        CHECK(cu_matmul_tail(QT_Q4_K, n_in, &s2, 1, din, &t, S0) == 0, "%s", rl_lasterr());
        bad += count_bad_dev(dy1, dy2, D, a, b);
        bad += count_bad_dev(dx1, dx2, D, a, b);
        bad += count_bad_dev(do1, do2, D, a, b);
        cudaFree(din);
        cudaFree(dx1);
        cudaFree(dx2);
        cudaFree(dy1);
        cudaFree(dy2);
        cudaFree(do1);
        cudaFree(do2);
        free(in);
        free(x0);
    }
    unsigned hc = 1;
    to_host(&hc, ctr, sizeof hc);
    CHECK(bad == 0 && hc == 0, "matmul + add/norm tail differs from matmul then norm (%d values; counter %u)",
          bad, hc);
    printf("  matmul + add/norm tail == matmul, then norm (2 launches), D %d: %d values differ\n", D, bad);
    cudaFree(dW);
    cudaFree(dnw);
    cudaFree(ctr);
    free(w);
    free(nw);
    free(a);
    free(b);
}

/* The router tail of a one-row F32 router GEMV == cu_matmul then cu_router (ids, weights, probs,
 * the decode plan), twice in a row; E not a multiple of 32. */
static void test_tail_router(void) {
    const int n_in = 2048, E = 500, K = 10;
    const size_t rb = sizeof(float) * n_in;
    float *w = randv((size_t)E * n_in, 0.05f);
    uint8_t *dW = dup_to_dev(w, rb * E);
    unsigned zero = 0, *ctr = dup_to_dev(&zero, sizeof zero);
    int bad = 0;
    for (int rep = 0; rep < 2; rep++) {
        float *in = randv(n_in, 1.0f), *din = dup_to_dev(in, sizeof(float) * n_in);
        int32_t *ids[2], *pin[2], *pout[2];
        float *wt[2], *pr[2], *lg[2];
        cu_tile *tl[2];
        int *nt[2];
        for (int k = 0; k < 2; k++) {
            ids[k] = dup_to_dev(in, 4 * K), pin[k] = dup_to_dev(in, 4 * K), pout[k] = dup_to_dev(in, 4 * K);
            wt[k] = dpoison(K), pr[k] = dpoison(K), lg[k] = dpoison(E);
            tl[k] = dup_to_dev(in, sizeof(cu_tile) * K), nt[k] = dup_to_dev(in, 4);
        }
        cu_seg s0 = {.w = dW, .row_bytes = rb, .n_out = E, .y = lg[0], .ldy = E}, s1 = s0;
        s1.y = lg[1];
        CHECK(cu_matmul(QT_F32, n_in, &s0, 1, din, n_in, 1, NULL, false, NULL, NULL, S0) == 0, "%s",
              rl_lasterr());
        CHECK(cu_router(lg[0], E, K, 1, ids[0], wt[0], pr[0], tl[0], nt[0], pin[0], pout[0], S0) == 0, "%s",
              rl_lasterr());
        cu_tail t = {.kind = CU_TAIL_ROUTER,
                     .counter = ctr,
                     .K = K,
                     .ids = ids[1],
                     .wts = wt[1],
                     .probs = pr[1],
                     .tiles = tl[1],
                     .n_tiles = nt[1],
                     .pair_in = pin[1],
                     .pair_out = pout[1]};
        CHECK(cu_matmul_tail(QT_F32, n_in, &s1, 1, din, &t, S0) == 0, "%s", rl_lasterr());
        uint8_t h[2][4096];
        const void *pp[2][7] = {{ids[0], pin[0], pout[0], wt[0], pr[0], tl[0], nt[0]},
                                {ids[1], pin[1], pout[1], wt[1], pr[1], tl[1], nt[1]}};
        const size_t nb[7] = {4 * K, 4 * K, 4 * K, 4 * K, 4 * K, sizeof(cu_tile) * K, 4};
        for (int q = 0; q < 7; q++) {
            to_host(h[0], pp[0][q], nb[q]);
            to_host(h[1], pp[1][q], nb[q]);
            bad += memcmp(h[0], h[1], nb[q]) != 0;
        }
        float *l0 = malloc(sizeof(float) * E), *l1 = malloc(sizeof(float) * E);
        to_host(l0, lg[0], sizeof(float) * E), to_host(l1, lg[1], sizeof(float) * E),
            bad += count_bad(l0, l1, E);
        free(l0);
        free(l1);
        for (int k = 0; k < 2; k++) {
            cudaFree(ids[k]);
            cudaFree(pin[k]);
            cudaFree(pout[k]);
            cudaFree(wt[k]);
            cudaFree(pr[k]);
            cudaFree(lg[k]);
            cudaFree(tl[k]);
            cudaFree(nt[k]);
        }
        cudaFree(din);
        free(in);
    }
    unsigned hc = 1;
    to_host(&hc, ctr, sizeof hc);
    CHECK(bad == 0 && hc == 0, "router GEMV + top-k tail differs from GEMV then router (%d; counter %u)", bad,
          hc);
    printf("  router GEMV + top-k tail == GEMV, then router (2 launches): %d outputs differ\n", bad);
    cudaFree(dW);
    cudaFree(ctr);
    free(w);
}

/* cu_router against the CPU (ops_softmax, ops_topk, the weights' double sum) on logits with many ties
 * (6 levels; one row all equal, where the top 10 are ids 0..9), E = 512 and 1000 experts (router_row's 16
 * and 32 values per lane): ids and their order exactly, weights
 * and probabilities within 1e-6 (GPU and CPU expf may differ in the last bit; tied values are the same
 * value on each side, so ties break the same way: lower id first). This checks the packed-key selection
 * (the router's only one; its butterfly variant is deleted); test_tail_router checks it bit for bit
 * against the matmul tail's butterfly picks. */
static void test_router_ties(int E) {
    const int K = 10, T = 4;
    float *lg = malloc(sizeof(float) * E * T), *p = malloc(sizeof(float) * E);
    for (int i = 0; i < E * T; i++) lg[i] = i >= 3 * E ? 0.25f : (float)(rl_rng_u64(&R) % 6) * 0.75f - 1.0f;
    float *dlg = dup_to_dev(lg, sizeof(float) * E * T), *dw = dpoison(T * K), *dp = dpoison(T * K);
    int32_t *dids = dup_to_dev(lg, sizeof(int32_t) * T * K);
    CHECK(cu_router(dlg, E, K, T, dids, dw, dp, NULL, NULL, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    int32_t gid[40], rid[10];
    float gw[40], gp[40];
    to_host(gid, dids, sizeof gid), to_host(gw, dw, sizeof gw), to_host(gp, dp, sizeof gp);
    int bad_ids = 0;
    double dwmax = 0;
    for (int t = 0; t < T; t++) {
        memcpy(p, lg + (size_t)t * E, sizeof(float) * E);
        ops_softmax(p, E);
        ops_topk(p, E, K, rid);
        double sum = 0;
        for (int k = 0; k < K; k++) sum += p[rid[k]];
        for (int k = 0; k < K; k++) {
            bad_ids += gid[t * K + k] != rid[k];
            const double w = (float)(p[rid[k]] / sum);
            dwmax = fmax(dwmax, fmax(fabs(gw[t * K + k] - w), fabs(gp[t * K + k] - p[rid[k]])));
        }
    }
    CHECK(bad_ids == 0, "router ids differ from the CPU's on tied logits (%d of %d)", bad_ids, T * K);
    CHECK(dwmax <= 1e-6, "router weights / probabilities differ from the CPU's by %.3g", dwmax);
    printf("  router on tied logits, %d experts: ids == CPU (%d differ), max |w - w_cpu| %.3g\n", E, bad_ids,
           dwmax);
    cudaFree(dlg);
    cudaFree(dw);
    cudaFree(dp);
    cudaFree(dids);
    free(lg);
    free(p);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        return check_skip("test_cuda_ops", "no CUDA device");
    }
    /* the test matrices are narrower than RL_CUDA_MMQB_ROWS's default (256 rows), which would keep
     * every one of them on the float path: 0 puts them on the integer path this test checks (a value
     * in the environment wins) */
    setenv("RL_CUDA_MMQB_ROWS", "0", 0);
    rl_rng_seed(&R, 20261130);
    cuda_tune tune;
    int ordinal = 0;
    if (cuda_tune_from_env(&tune) || cudaGetDevice(&ordinal) != cudaSuccess ||
        cu_dev_init(&DEV, ordinal, &tune.k)) {
        fprintf(stderr, "%s\n", rl_lasterr());
        return 1;
    }
    S0 = (cu_stream){0, &DEV};
    printf("  device %d: sm_%d, %d SMs, shared memory per block %zu of %zu bytes, PDL %s\n", DEV.ordinal,
           DEV.cc, DEV.n_sm, DEV.smem_max, DEV.smem_optin, DEV.pdl ? "on" : "off");
    cu_dev_set_int8(&DEV, int8_on = 0); /* the float path first (the bounds above) */
    if (cu_tables_init()) {
        fprintf(stderr, "%s\n", rl_lasterr());
        return 1;
    }
    for (size_t i = 0; i < NTYPES; i++) {
        CHECK(cu_type_supported(TYPES[i]), "type %s unsupported", quant_name(TYPES[i]));
        test_dequant(TYPES[i], 1024);
        if (TYPES[i] == QT_MXFP4) test_dequant(TYPES[i], 33 * 32); /* 561-byte rows: odd addresses */
        test_matmul(TYPES[i], (int)i, 0);
        if (TYPES[i] == QT_F32) test_matmul(TYPES[i], (int)i, 4360);        /* 17 KB rows: 3 chunks */
        if (TYPES[i] == QT_Q8_0) test_matmul(TYPES[i], (int)i, 8288);       /* 8.8 KB rows, 2-byte aligned */
        if (TYPES[i] == QT_IQ2_XS) test_matmul(TYPES[i], (int)i, 11 * 256); /* 814-byte rows: 2-byte copies */
        /* MXFP4: 17-byte blocks, so rows of an odd number of blocks start at odd addresses (the default
         * 544 columns: 289-byte rows); 4128 columns: 129 blocks, 2,193-byte rows over several 32-unit
         * iterations. The 32-value types: 8288 columns, rows of 259 blocks (2-byte aligned). */
        if (TYPES[i] == QT_MXFP4) test_matmul(TYPES[i], (int)i, 4128);
        if (TYPES[i] == QT_Q4_0 || TYPES[i] == QT_Q5_1 || TYPES[i] == QT_IQ4_NL)
            test_matmul(TYPES[i], (int)i, 8288);
    }
    printf("  dequant: %zu types bit-exact; matmul worst err/bound per type:", NTYPES);
    for (size_t i = 0; i < NTYPES; i++) printf(" %s %.2g", quant_name(TYPES[i]), worst_rel[i]);
    printf("\n");
    /* the integer path of the K-quants: bit-exact with the CPU's vec_dot in every shape */
    cu_dev_set_int8(&DEV, int8_on = 1);
    const int fails0 = check_fail;
    for (int i = 0; i < N_KQ; i++) {
        test_matmul(KQ[i], 63, 0);       /* 3 super-blocks per row */
        test_matmul(KQ[i], 63, 9 * 256); /* 9: two full groups of four and one */
        test_matmul(KQ[i], 63, 512);     /* 2 and 1 (the expert down rows; 4 row sets) */
        test_matmul(KQ[i], 63, 256);
    }
    for (int i = 0; i < N_KQ; i++) { /* the staged tiles (a scratch given): 3 and 9 super-blocks per row */
        test_mmq_tc(KQ[i], 768);
        test_mmq_tc(KQ[i], 9 * 256);
    }
    /* one-token launches take k_mmq_lane (a lane per row and super-block) up to 32 super-blocks per row,
     * k_mmq_vec beyond (RL_CUDA_MMQ_LANE=0: always): 16 (the 80B's 4096-column rows), 32 and 33 */
    test_matmul(QT_Q4_K, 63, 16 * 256);
    test_matmul(QT_Q6_K, 63, 32 * 256);
    test_matmul(QT_Q5_K, 63, 33 * 256);
    test_mmq_many_rows(QT_Q4_K, 1024,
                       40003); /* one token, 5,000 row blocks (streamed, the default: many per block) */
    test_mmq_many_rows(QT_Q6_K, 512,
                       30001);     /* 420-byte rows, the second segment 4-byte aligned; 2 row sets */
    test_moe();                    /* Q4_K gate/up grouped (tensor cores) == per-pair 1-row launches */
    test_tail_add_norm(2048 + 64); /* Q4_K one-row launch + tail; the norm kernel's generic row */
    test_tail_add_norm(2048);      /* its register row (the 80B's hidden size) */
    test_tail_add_norm(1000);      /* a partial last chunk */
    test_mmq_many_rows(QT_Q3_K, 512, 30001); /* 220-byte rows, 2-byte aligned; 2 row sets */
    test_mmq_many_rows(QT_Q2_K, 256, 20001); /* 84-byte rows, 4-byte aligned; 4 row sets */
    printf("  int8 K-quant matmuls (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): %s the CPU's vec_dot in every shape\n",
           check_fail == fails0 ? "bit-identical to" : "DIFFERENT from");
    /* mode 2: the IQ types too (mmq_iq.cuh), the same checks */
    cu_dev_set_int8(&DEV, int8_on = 2);
    const int fails1 = check_fail;
    for (int i = 0; i < N_IQ_INT8; i++) {
        test_matmul(IQ[i], 63, 0);
        test_matmul(IQ[i], 63, 9 * 256);
        test_matmul(IQ[i], 63, 512);
        test_matmul(IQ[i], 63, 256);
        test_mmq_tc(IQ[i], 768);
        test_mmq_tc(IQ[i], 9 * 256);
        /* IQ2_XS / IQ2_S: 74 / 82-byte rows, 4 row sets */
        test_mmq_many_rows(IQ[i], IQ[i] == QT_IQ2_XS || IQ[i] == QT_IQ2_S ? 256 : 2048, 20001);
        test_matmul(IQ[i], 63, 6 * 256); /* 6 super-blocks: 2 idle lanes of 8 per row in k_mmq_lane */
    }
    printf(
        "  int8 IQ matmuls (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS; RL_CUDA_MMQ=2): %s "
        "the CPU's vec_dot in every shape\n",
        check_fail == fails1 ? "bit-identical to" : "DIFFERENT from");
    /* the 32-value types (mmq_b32.cuh, mode >= 1): the quantiser, then every shape */
    cu_dev_set_int8(&DEV, int8_on = 1);
    const int fails2 = check_fail;
    test_q8_quantise(QT_Q8_0);
    test_q8_quantise(QT_Q8_1);
    for (int i = 0; i < N_B32; i++) {
        test_matmul(B32[i], 63, 0);      /* 544 columns: 17 blocks */
        test_matmul(B32[i], 63, 8288);   /* 259 blocks: 9 chunks of 32 in k_mmqb_vec, the last partial */
        test_mmq_b32(B32[i], 32);        /* one block per row */
        test_mmq_b32(B32[i], 2048 + 96); /* 67 blocks */
        test_mmq_many_rows(B32[i], 1024, 20001);
    }
    printf("  int8 32-value matmuls (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): %s the CPU's vec_dot in "
           "every shape\n",
           check_fail == fails2 ? "bit-identical to" : "DIFFERENT from");
    cu_dev_set_int8(&DEV, int8_on = 0);
    test_rmsnorm(2048 + 64);
    test_rmsnorm(2048);
    test_rmsnorm(1000);
    test_attention(256, false);
    test_attention(64, false);
    test_attention(128, true);
    test_attention_decode(256, false, 16, 2, 5000); /* 80B geometry: ends inside a chunk */
    test_attention_decode(256, true, 16, 2, 4096);  /* ends at a chunk edge */
    test_attention_decode(256, true, 16, 2, 17000); /* 67 chunks: whole merge batches (64) and a tail */
    test_attention_decode(128, true, 16, 2, 2600);
    test_attention_decode(64, false, 8, 2, 777);     /* DPL 2: scalar V loads */
    test_attention_decode(64, true, 8, 2, 17000);    /* 67 chunks: two batches of the 64-thread scan merge */
    test_attention_decode(256, false, 24, 1, 1500);  /* 24 warps: > 48 KiB of shared memory */
    test_attention_tiled(256, true, 16, 2, 70, 300); /* 80B geometry: 18 blocks, the last partial; 2 chunks */
    test_attention_tiled(256, false, 16, 2, 37, 0);  /* the first chunk only: second slice empty */
    test_attention_tiled(128, true, 16, 2, 45, 220); /* rows cross the edge of chunk 0 */
    test_attention_tiled(64, false, 8, 2, 33, 500);  /* DPL 2: scalar V loads; G 4: 8 positions per block */
    test_attention_tiled(256, false, 24, 2, 20, 700); /* G 12: 2 positions, 8 padded rows per block */
    test_attention_tiled(128, false, 3, 1, 50, 260);  /* G 3: 10 positions, 2 padded rows */
    test_attention_tc(256, 16, 2, 70, 200, 3.0f);     /* 80B geometry: rows cross chunk 0's edge, 9 blocks */
    test_attention_tc(256, 16, 2, 37, 0, 1.0f);       /* the first chunk only, short rows */
    test_attention_tc(256, 16, 2, 6, 5000, 3.0f);     /* 20 chunks: the split decode's partials and merge */
    test_attention_tc(256, 16, 2, 3, 17000, 3.0f);    /* 67 chunks: whole merge batches (64) and a tail */
    test_attention_tc(128, 16, 2, 45, 220, 3.0f);
    test_attention_tc(64, 8, 2, 33, 500, 3.0f);  /* hd 64: one value tile per warp in decode */
    test_attention_tc(128, 3, 1, 50, 260, 3.0f); /* G 3: 21 positions, 1 padded row per block; 13 in decode */
    test_attention_tc(256, 24, 2, 20, 700, 3.0f); /* G 12 */
    test_attention_tc(128, 16, 1, 9, 1000, 3.0f); /* G 16: a full row tile in decode */
    test_attention_tc(64, 4, 4, 40, 100, 3.0f);   /* G 1: 64 positions per block */
    test_smem_portable();                         /* the 99 KiB launch shapes == this GPU's */
    test_deltanet(128, 128, 16, 32, 5, 0);
    test_deltanet(128, 128, 16, 32, 150, 0);
    test_deltanet(32, 32, 4, 8, 5, 0);
    test_deltanet(64, 32, 4, 8, 37, 0);
    test_deltanet(128, 128, 16, 32, 150, 1); /* Qwen3.5 layouts (35B-A3B heads) */
    test_deltanet(64, 32, 4, 8, 37, 1);
    test_moe();
    test_fused_combine();
    test_tail_add_norm(2048 + 64); /* the float path's GEMV + tail, both norm rows */
    test_tail_add_norm(2048);
    test_tail_router();
    test_router_ties(512);  /* 16 values per lane */
    test_router_ties(1000); /* 32 values per lane */
    return check_done("test_cuda_ops");
}
