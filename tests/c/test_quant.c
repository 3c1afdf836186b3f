/* test_quant.c — unit tests of the quant traits table (src/quant*.c).
 *
 *   - every weight type: random valid blocks, vec_dot(w, quantize(x)) against the double
 *     oracle quant_dot_ref(w, x), with the activation-rounding bound derived below, and against
 *     the exact dot of the dequantised weights and dequantised activations (integer path check);
 *   - from_float / to_float round trips of the activation types (Q8_K, Q8_0, Q8_1, F16, BF16, F32);
 *   - quant_row_size, quant_name, unknown type ids.
 * Bit-exactness of to_float against gguf is tests/test_quant_oracle.py's job.
 * Run: make all && build/tests/test_quant
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "gguf/quant.h"
#include "quant_rand.h"

static const uint32_t weight_types[] = {
    QT_F32,   QT_F16,     QT_BF16,   QT_Q4_0,  QT_Q4_1,  QT_Q5_0,   QT_Q5_1,   QT_Q8_0,
    QT_Q2_K,  QT_Q3_K,    QT_Q4_K,   QT_Q5_K,  QT_Q6_K,  QT_IQ4_NL, QT_IQ4_XS, QT_IQ3_XXS,
    QT_IQ3_S, QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ1_S, QT_IQ1_M,  QT_MXFP4,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

/* Activation with a realistic spread: N(0,1) times a per-32 magnitude in e^[-3,3], plus a few
 * outliers (they set the per-block quantisation step, the worst case for the other values). */
static void fill_activation(float *x, int64_t n, rl_rng *r) {
    for (int64_t i = 0; i < n; i += 32) {
        float mag = expf(-3.0f + 6.0f * rl_rng_f32(r));
        for (int64_t j = i; j < i + 32 && j < n; j++) x[j] = mag * rl_rng_normal(r);
    }
    for (int k = 0; k < 4; k++) x[rl_rng_u64(r) % (uint64_t)n] *= 20.0f;
}

/* Bound on |x_i - dequant(quant(x))_i| for every i of one activation block with max |x| = amax:
 *   Q8_K: q = round(x * 127/amax), dequantised with d = amax/127 (f32): error <= d/2, plus
 *         float rounding of iscale*x and of d (relative 2^-23 each) -> amax/254 * 1.0001.
 *   Q8_0/Q8_1: q = round(x/d) with d = amax/127, but dequantised with fp16(d): error <= d/2 +
 *         |q| * |fp16(d) - d| <= d/2 + 127 * d * 2^-11 = d * 0.5621 -> amax/127 * 0.5625.
 *   F16: relative 2^-11 (plus subnormal absolute 2^-25); BF16: relative 2^-8; F32: exact. */
static double act_err_bound(uint32_t atype, const float *x, int64_t i, int blck_a) {
    const int64_t b0 = i / blck_a * blck_a;
    double amax = 0;
    for (int64_t j = b0; j < b0 + blck_a; j++) amax = fmax(amax, fabs(x[j]));
    switch (atype) {
    case QT_Q8_K: return amax / 254.0 * 1.0001;
    case QT_Q8_0:
    case QT_Q8_1: return amax / 127.0 * 0.5625;
    case QT_F16: return fabs(x[i]) * 0x1p-11 + 0x1p-25;
    case QT_BF16: return fabs(x[i]) * 0x1p-8;
    default: return 0;
    }
}

static void test_vec_dot(uint32_t type, int64_t n, rl_rng *r) {
    const quant_traits *t = quant_get(type);
    const quant_traits *ta = quant_get((uint32_t)t->vec_dot_type);
    CHECK(ta && ta->from_float, "%s: vec_dot_type %d has no from_float", t->name, t->vec_dot_type);
    if (!ta || !ta->from_float) return;
    const int64_t nb = n / t->blck;
    void *w = malloc(quant_row_size(type, n));
    void *a = malloc(quant_row_size((uint32_t)t->vec_dot_type, n));
    float *x = malloc((size_t)n * sizeof(float)), *wf = malloc((size_t)n * sizeof(float));
    float *xq = malloc((size_t)n * sizeof(float));
    fill_random_blocks(type, w, nb, r);
    fill_activation(x, n, r);
    ta->from_float(x, a, n);
    check_poison(wf, (size_t)n);
    check_poison(xq, (size_t)n);
    t->to_float(w, wf, n);
    ta->to_float(a, xq, n);

    double got = t->vec_dot(n, w, a);
    double ref = quant_dot_ref(type, w, x, n);
    /* (1) integer path: vec_dot must equal sum(wf * xq) up to float rounding of the per-block
     * scale products and the float accumulation over blocks (a few ulps of each block's
     * magnitude: 1e-5 of sum |wf*xq| covers 16+ blocks generously). Q4_1/Q5_1 also use
     * s = fp16(d_a * sum q_a) for the min term, off by <= |m| * |sum q| * d_a * 2^-10. */
    double exact = 0, mag = 0, slack = 0, bound = 0;
    for (int64_t i = 0; i < n; i++) {
        exact += (double)wf[i] * (double)xq[i];
        mag += fabs((double)wf[i] * (double)xq[i]);
        bound += fabs((double)wf[i]) * act_err_bound((uint32_t)t->vec_dot_type, x, i, ta->blck);
    }
    if (type == QT_Q4_1 || type == QT_Q5_1) {
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *bw = (const uint8_t *)w + ib * t->type_size;
            const uint8_t *ba = (const uint8_t *)a + ib * ta->type_size;
            double sq = 0;
            for (int j = 0; j < 32; j++) sq += fabs((double)(int8_t)ba[4 + j]);
            slack += fabs(rl_fp16_to_fp32(rl_le16(bw + 2))) * sq * rl_fp16_to_fp32(rl_le16(ba)) * 0x1p-10;
        }
    }
    int all_finite = 1;
    for (int64_t i = 0; i < n; i++) all_finite &= isfinite(wf[i]) && isfinite(xq[i]);
    CHECK(all_finite, "%s: to_float left NaN/Inf", t->name);
    CHECK(fabs(got - exact) <= 1e-5 * mag + slack + 1e-30, "%s n=%lld: vec_dot %.9g vs dequant-dot %.9g",
          t->name, (long long)n, got, exact);
    /* (2) against the oracle on the unquantised x: |err| <= sum_i |w_i| * e_i (the bound on each
     * activation's rounding error, act_err_bound) plus the float term of (1). Typical errors are
     * ~sqrt(n) smaller than this worst case; (1) is the tight check of the arithmetic. */
    CHECK(fabs(got - ref) <= bound + 1e-5 * mag + slack + 1e-30,
          "%s n=%lld: vec_dot %.9g vs oracle %.9g (bound %.3g)", t->name, (long long)n, got, ref, bound);
    free(w);
    free(a);
    free(x);
    free(wf);
    free(xq);
}

static void test_roundtrip(uint32_t atype, int64_t n, rl_rng *r) {
    const quant_traits *t = quant_get(atype);
    void *a = malloc(quant_row_size(atype, n));
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    fill_activation(x, n, r);
    for (int64_t i = 0; i < t->blck && t->blck > 1; i++) x[i] = 0.0f; /* one all-zero block */
    t->from_float(x, a, n);
    check_poison(y, (size_t)n);
    t->to_float(a, y, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)y[i] - (double)x[i]) <= act_err_bound(atype, x, i, t->blck))) {
            if (bad++ < 3) fprintf(stderr, "  %s[%lld]: %g -> %g\n", t->name, (long long)i, x[i], y[i]);
        }
    CHECK(bad == 0, "%s round trip: %d values out of bound", t->name, bad);
    if (atype == QT_Q8_K) { /* bsums are the 16-value sums of qs; the extreme maps to +-127 */
        const uint8_t *p = a;
        int bs_ok = 1;
        for (int64_t ib = 0; ib < n / QK_K; ib++, p += t->type_size) {
            const int8_t *qs = (const int8_t *)(p + 4);
            for (int k = 0; k < 16; k++) {
                int s = 0;
                for (int j = 0; j < 16; j++) s += qs[16 * k + j];
                bs_ok &= s == (int16_t)rl_le16(p + 260 + 2 * k);
            }
        }
        CHECK(bs_ok, "Q8_K bsums");
    }
    if (atype == QT_Q8_1) { /* s = d * sum(q) */
        const uint8_t *p = a;
        int s_ok = 1;
        for (int64_t ib = 0; ib < n / 32; ib++, p += t->type_size) {
            int s = 0;
            for (int j = 0; j < 32; j++) s += (int8_t)p[4 + j];
            float want = rl_fp16_to_fp32(rl_fp32_to_fp16((float)s * rl_fp16_to_fp32(rl_le16(p))));
            s_ok &= fabsf(rl_fp16_to_fp32(rl_le16(p + 2)) - want) <= fabsf(want) * 0x1p-9f;
        }
        CHECK(s_ok, "Q8_1 s field");
    }
    free(a);
    free(x);
    free(y);
}

static void test_table(void) {
    /* sizes as the GGUF spec (D.1) */
    static const struct {
        uint32_t t;
        int blck;
        size_t size;
    } want[] = {
        {QT_F32, 1, 4},        {QT_F16, 1, 2},        {QT_BF16, 1, 2},      {QT_Q4_0, 32, 18},
        {QT_Q4_1, 32, 20},     {QT_Q5_0, 32, 22},     {QT_Q5_1, 32, 24},    {QT_Q8_0, 32, 34},
        {QT_Q8_1, 32, 36},     {QT_Q2_K, 256, 84},    {QT_Q3_K, 256, 110},  {QT_Q4_K, 256, 144},
        {QT_Q5_K, 256, 176},   {QT_Q6_K, 256, 210},   {QT_Q8_K, 256, 292},  {QT_IQ4_NL, 32, 18},
        {QT_IQ4_XS, 256, 136}, {QT_IQ3_XXS, 256, 98}, {QT_IQ3_S, 256, 110}, {QT_IQ2_XXS, 256, 66},
        {QT_IQ2_XS, 256, 74},  {QT_IQ2_S, 256, 82},   {QT_IQ1_S, 256, 50},  {QT_IQ1_M, 256, 56},
        {QT_MXFP4, 32, 17},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const quant_traits *t = quant_get(want[i].t);
        CHECK(t && t->blck == want[i].blck && t->type_size == want[i].size && t->to_float, "type %u traits",
              want[i].t);
    }
    /* vec_dot_type mapping as ggml's CPU backend */
    CHECK(quant_get(QT_Q4_K)->vec_dot_type == QT_Q8_K && quant_get(QT_IQ1_M)->vec_dot_type == QT_Q8_K &&
              quant_get(QT_IQ4_XS)->vec_dot_type == QT_Q8_K,
          "K/IQ -> Q8_K");
    CHECK(quant_get(QT_Q8_0)->vec_dot_type == QT_Q8_0 && quant_get(QT_IQ4_NL)->vec_dot_type == QT_Q8_0 &&
              quant_get(QT_Q5_0)->vec_dot_type == QT_Q8_0 && quant_get(QT_MXFP4)->vec_dot_type == QT_Q8_0,
          "-> Q8_0");
    CHECK(quant_get(QT_Q4_1)->vec_dot_type == QT_Q8_1 && quant_get(QT_Q5_1)->vec_dot_type == QT_Q8_1,
          "-> Q8_1");
    CHECK(quant_get(QT_BF16)->vec_dot_type == QT_BF16 && quant_get(QT_F16)->vec_dot_type == QT_F16, "float");
    /* unknown / unsupported ids */
    const uint32_t unknown[] = {4,  5,  QT_I8, QT_I16, QT_I32, QT_I64,     QT_F64,
                                31, 40, 63,    64,     1000,   0xffffffffu};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(quant_get(unknown[i]) == NULL, "quant_get(%u) should be NULL", unknown[i]);
        CHECK(strcmp(quant_name(unknown[i]), "?") == 0, "quant_name(%u)", unknown[i]);
        CHECK(quant_row_size(unknown[i], 256) == 0, "row size of unknown %u", unknown[i]);
    }
    CHECK(strcmp(quant_name(QT_IQ2_XXS), "IQ2_XXS") == 0, "name");
    /* row sizes */
    CHECK(quant_row_size(QT_Q4_K, 2048) == 8 * 144, "Q4_K row");
    CHECK(quant_row_size(QT_Q4_K, 255) == 0, "partial block");
    CHECK(quant_row_size(QT_Q4_K, -256) == 0, "negative n");
    CHECK(quant_row_size(QT_F32, 3) == 12, "F32 row");
    CHECK(quant_row_size(QT_Q8_0, 0) == 0, "empty row");
    CHECK(quant_row_size(QT_IQ1_M, 512) == 112, "IQ1_M row");
}

int main(void) {
    rl_rng r;
    rl_rng_seed(&r, 12345);
    test_table();
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        const quant_traits *t = quant_get(weight_types[k]);
        const int64_t ns[] = {t->blck == 1 ? 33 : t->blck, 2048, 4096 + 3 * (t->blck == 256 ? 256 : 32)};
        for (int rep = 0; rep < 8; rep++)
            for (size_t i = 0; i < 3; i++) test_vec_dot(weight_types[k], ns[i], &r);
    }
    const uint32_t act[] = {QT_Q8_K, QT_Q8_0, QT_Q8_1, QT_F16, QT_BF16, QT_F32};
    for (size_t k = 0; k < 6; k++)
        for (int rep = 0; rep < 4; rep++) test_roundtrip(act[k], 2048, &r);
    return check_done("test_quant");
}
