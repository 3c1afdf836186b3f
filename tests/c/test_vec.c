/* test_vec.c — the fast float primitives (vec.h: portable and AVX2) against the double-precision
 * reference ops on random data. Float accumulation of n products has error ~ n * 2^-24 * sum|a_i b_i|
 * in the worst case, ~sqrt(n) * 2^-24 * ... typically; we allow 1e-5 relative to sum|terms|
 * (n <= 256 here: worst case 256 * 6e-8 = 1.5e-5 of the absolute sum, typical far less). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "kern/ops.h"
#include "kern/vec.h"

static void check_ops(const vec_ops *v, rl_rng *rng) {
    enum { DK = 128, DV = 128, HD = 256, NKV = 37 };
    float *S0 = malloc(sizeof(float) * DK * DV), *S1 = malloc(sizeof(float) * DK * DV),
          *S2 = malloc(sizeof(float) * DK * DV);
    float q[DK], k[DK], val[DV], o1[DV], o2[DV];
    for (int i = 0; i < DK * DV; i++) S0[i] = 0.1f * rl_rng_normal(rng);
    for (int i = 0; i < DK; i++) q[i] = rl_rng_normal(rng) / sqrtf(DK), k[i] = rl_rng_normal(rng) / sqrtf(DK);
    for (int i = 0; i < DV; i++) val[i] = rl_rng_normal(rng);
    /* a few tokens of the recurrence, odd sizes too */
    for (int dk = DK; dk >= 7; dk = dk == DK ? 13 : 6) {
        memcpy(S1, S0, sizeof(float) * DK * DV);
        memcpy(S2, S0, sizeof(float) * DK * DV);
        double worst = 0;
        for (int t = 0; t < 4; t++) {
            check_poison(o1, DV);
            check_poison(o2, DV);
            ops_delta_step(S1, S1, q, k, val, 0.9f, 0.6f, dk, DV, o1);
            v->delta_step(S2, S2, q, k, val, 0.9f, 0.6f, dk, DV, o2);
            for (int c = 0; c < DV; c++) {
                double e = fabs(o1[c] - o2[c]) / (1e-3 + fabs(o1[c]));
                if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
            }
        }
        CHECK(worst < 1e-4, "%s delta_step dk=%d: worst relative error %.3e", v->name, dk, worst);
    }
    /* out of place (the engine's uncommitted state): the same bits as in place, input untouched */
    {
        float *Sin = malloc(sizeof(float) * DK * DV), *Sout = malloc(sizeof(float) * DK * DV);
        memcpy(S1, S0, sizeof(float) * DK * DV);
        memcpy(Sin, S0, sizeof(float) * DK * DV);
        check_poison(Sout, DK * DV);
        for (int impl = 0; impl < 2; impl++) {
            if (impl == 0) {
                ops_delta_step(S1, S1, q, k, val, 0.9f, 0.6f, DK, DV, o1);
                ops_delta_step(Sin, Sout, q, k, val, 0.9f, 0.6f, DK, DV, o2);
            } else {
                memcpy(S1, S0, sizeof(float) * DK * DV);
                check_poison(Sout, DK * DV);
                v->delta_step(S1, S1, q, k, val, 0.9f, 0.6f, DK, DV, o1);
                v->delta_step(Sin, Sout, q, k, val, 0.9f, 0.6f, DK, DV, o2);
            }
            CHECK(memcmp(S1, Sout, sizeof(float) * DK * DV) == 0 && memcmp(o1, o2, sizeof o1) == 0,
                  "%s delta_step out of place differs from in place", impl ? v->name : "ops");
            CHECK(memcmp(Sin, S0, sizeof(float) * DK * DV) == 0, "%s delta_step wrote its input",
                  impl ? v->name : "ops");
        }
        free(Sin);
        free(Sout);
    }
    /* delta_step_hot (the prefill's rows after the first): delta_step's bits, in place and out of place,
     * with column counts that are and are not multiples of its 4 interleaved columns and odd dk (tails) */
    for (int dk = DK; dk > 0; dk = dk == DK ? 13 : dk == 13 ? 6 : 0)
        for (int dv = DV; dv > 0; dv = dv == DV ? 7 : dv == 7 ? 3 : 0)
            for (int inpl = 0; inpl < 2; inpl++) {
                float *A = malloc(sizeof(float) * DK * DV), *B = malloc(sizeof(float) * DK * DV);
                memcpy(S1, S0, sizeof(float) * DK * DV);
                memcpy(S2, S0, sizeof(float) * DK * DV);
                check_poison(A, DK * DV);
                check_poison(B, DK * DV);
                int same = 1;
                for (int t = 0; t < 3; t++) {
                    check_poison(o1, DV);
                    check_poison(o2, DV);
                    v->delta_step(S1, inpl ? S1 : A, q, k, val, 0.9f, 0.6f, dk, dv, o1);
                    v->delta_step_hot(S2, inpl ? S2 : B, q, k, val, 0.9f, 0.6f, dk, dv, o2);
                    same &= memcmp(inpl ? S1 : A, inpl ? S2 : B, sizeof(float) * (size_t)dk * dv) == 0 &&
                            memcmp(o1, o2, sizeof(float) * (size_t)dv) == 0;
                    if (!inpl) memcpy(S1, A, sizeof(float) * DK * DV), memcpy(S2, B, sizeof(float) * DK * DV);
                }
                CHECK(same, "%s delta_step_hot dk=%d dv=%d %s: not delta_step's bits", v->name, dk, dv,
                      inpl ? "in place" : "out of place");
                free(A);
                free(B);
            }
    /* attention over 37 positions */
    float *K = malloc(sizeof(float) * NKV * HD), *V = malloc(sizeof(float) * NKV * HD), qa[HD], a1[HD],
          a2[HD];
    for (int i = 0; i < NKV * HD; i++) K[i] = rl_rng_normal(rng), V[i] = rl_rng_normal(rng);
    for (int i = 0; i < HD; i++) qa[i] = rl_rng_normal(rng);
    check_poison(a1, HD);
    check_poison(a2, HD);
    ops_attn_head(qa, K, V, NKV, HD, HD, 0.0625f, a1);
    vec_attn_group(v, qa, HD, 1, K, V, NKV, HD, HD, 0.0625f, a2, HD);
    double worst = 0;
    for (int j = 0; j < HD; j++) {
        double e = fabs(a1[j] - a2[j]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    CHECK(worst < 1e-5, "%s attention: max abs error %.3e (values are convex combinations of N(0,1))",
          v->name, worst);
    /* grouped attention: 8 heads on one KV head over 300 positions (3 blocks), each head against
     * the double reference, and a head's result independent of the group size */
    {
        enum { G = 8, NP = 300 };
        float *K2 = malloc(sizeof(float) * NP * HD), *V2 = malloc(sizeof(float) * NP * HD);
        float *qg = malloc(sizeof(float) * G * 2 * HD), *og = malloc(sizeof(float) * G * HD), ref[HD],
              one[HD];
        for (int i = 0; i < NP * HD; i++) K2[i] = rl_rng_normal(rng), V2[i] = rl_rng_normal(rng);
        for (int i = 0; i < G * 2 * HD; i++) qg[i] = rl_rng_normal(rng);
        for (int n_kv = 1; n_kv <= NP; n_kv += n_kv < 128 ? 127 : 86) {
            check_poison(og, (size_t)G * HD);
            vec_attn_group(v, qg, 2 * HD, G, K2, V2, n_kv, HD, HD, 0.0625f, og, HD);
            double gw = 0;
            int indep = 1;
            for (int g = 0; g < G; g++) {
                ops_attn_head(qg + (size_t)g * 2 * HD, K2, V2, n_kv, HD, HD, 0.0625f, ref);
                for (int j = 0; j < HD; j++) {
                    double e = fabs(og[(size_t)g * HD + j] - ref[j]);
                    if (!(e <= gw)) gw = isnan(e) ? INFINITY : e;
                }
                check_poison(one, HD);
                vec_attn_group(v, qg + (size_t)g * 2 * HD, 2 * HD, 1, K2, V2, n_kv, HD, HD, 0.0625f, one, HD);
                indep &= memcmp(one, og + (size_t)g * HD, sizeof one) == 0;
            }
            CHECK(gw < 1e-5, "%s grouped attention n_kv %d: max abs error %.3e", v->name, n_kv, gw);
            CHECK(indep, "%s grouped attention n_kv %d: a head's result depends on the group size", v->name,
                  n_kv);
        }
        free(K2);
        free(V2);
        free(qg);
        free(og);
    }
    float d1 = v->dot(qa, K, HD);
    double d0 = 0, mag = 0;
    for (int j = 0; j < HD; j++) d0 += (double)qa[j] * K[j], mag += fabs((double)qa[j] * K[j]);
    CHECK(fabs(d1 - d0) <= 1e-5 * mag, "%s dot: %.9g vs %.9g", v->name, d1, d0);
    free(S0);
    free(S1);
    free(S2);
    free(K);
    free(V);
}

/* f16 KV rows: the f16 primitives must give exactly the bits of the f32 ones on the widened
 * halves (the widening is exact, the arithmetic the same), and the attention over an f16 cache
 * must match the double reference over the same halves. Odd lengths cover the scalar tails. */
static void check_f16(const vec_ops *v, rl_rng *rng) {
    enum { HD = 256, NP = 300, G = 8 };
    uint16_t *Kh = malloc(sizeof(uint16_t) * NP * HD), *Vh = malloc(sizeof(uint16_t) * NP * HD);
    float *Kf = malloc(sizeof(float) * NP * HD), *Vf = malloc(sizeof(float) * NP * HD);
    float *qg = malloc(sizeof(float) * G * 2 * HD), *o16 = malloc(sizeof(float) * G * HD),
          *o32 = malloc(sizeof(float) * G * HD);
    float ref[HD], y1[HD], y2[HD];
    for (int i = 0; i < NP * HD; i++) {
        /* a wide spread of magnitudes, subnormal halves included */
        float x = rl_rng_normal(rng) * (i % 97 == 0 ? 1e-6f : i % 89 == 0 ? 300.0f : 1.0f);
        Kh[i] = rl_fp32_to_fp16(x);
        Vh[i] = rl_fp32_to_fp16(rl_rng_normal(rng));
        Kf[i] = rl_fp16_to_fp32(Kh[i]);
        Vf[i] = rl_fp16_to_fp32(Vh[i]);
    }
    for (int i = 0; i < G * 2 * HD; i++) qg[i] = rl_rng_normal(rng) * 0.05f;
    int same = 1;
    for (int n = 1; n <= HD; n += n < 24 ? 1 : 29) {
        float a = v->dot(qg, Kf + 3 * HD, n), b = v->dot_f16(qg, Kh + 3 * HD, n);
        same &= memcmp(&a, &b, sizeof a) == 0;
        for (int j = 0; j < HD; j++) y1[j] = y2[j] = rl_rng_normal(rng);
        v->axpy(y1, 0.37f, Vf + 5 * HD, n);
        v->axpy_f16(y2, 0.37f, Vh + 5 * HD, n);
        same &= memcmp(y1, y2, sizeof y1) == 0;
    }
    CHECK(same, "%s dot_f16/axpy_f16 differ from dot/axpy on the widened halves", v->name);
    for (int n_kv = 1; n_kv <= NP; n_kv += n_kv < 128 ? 127 : 86) {
        check_poison(o16, (size_t)G * HD);
        check_poison(o32, (size_t)G * HD);
        vec_attn_group_kv(v, qg, 2 * HD, G, Kh, Vh, true, n_kv, HD, HD, 0.0625f, o16, HD);
        vec_attn_group(v, qg, 2 * HD, G, Kf, Vf, n_kv, HD, HD, 0.0625f, o32, HD);
        CHECK(memcmp(o16, o32, sizeof(float) * G * HD) == 0,
              "%s f16 attention n_kv %d: not the f32 result on the "
              "widened cache",
              v->name, n_kv);
        double w = 0;
        for (int g = 0; g < G; g++) {
            float r2[HD];
            check_poison(ref, HD);
            check_poison(r2, HD);
            ops_attn_head_kv(qg + (size_t)g * 2 * HD, Kh, Vh, true, n_kv, HD, HD, 0.0625f, ref);
            ops_attn_head(qg + (size_t)g * 2 * HD, Kf, Vf, n_kv, HD, HD, 0.0625f, r2);
            CHECK(memcmp(ref, r2, sizeof ref) == 0,
                  "ops_attn_head_kv f16 differs from f32 on the widened cache");
            for (int j = 0; j < HD; j++) {
                double e = fabs(o16[(size_t)g * HD + j] - ref[j]);
                if (!(e <= w)) w = isnan(e) ? INFINITY : e;
            }
        }
        CHECK(w < 1e-5, "%s f16 attention n_kv %d: max abs error %.3e vs the double reference", v->name, n_kv,
              w);
    }
    /* the store rounding: nearest even, and f16 of a widened half is the half itself */
    CHECK(rl_fp32_to_fp16(1.0f + 1.0f / 2048) == 0x3c00 && rl_fp32_to_fp16(1.0f + 3.0f / 2048) == 0x3c02,
          "fp32->fp16 is not round-to-nearest-even");
    free(Kh), free(Vh), free(Kf), free(Vf), free(qg), free(o16), free(o32);
}

/* attn_scores / attn_mix against their definition (loops over the same table's dot / axpy or their
 * f16 twins), bit for bit: every head count 1..16 (tiles of 2 and 4 heads and their remainders),
 * row counts around the 8-row and 2-row tiles, head dims with and without the 16-value tiles
 * (24 and 40 take the loops), f32 and f16 rows, a row stride wider than a head (grouped KV). */
static void check_attn_blocks(const vec_ops *v, rl_rng *rng) {
    enum { MAXHD = 256, MAXG = 16, MAXNB = 130, KVH = 3 };
    const size_t stride = (size_t)KVH * MAXHD;
    float *Kf = malloc(sizeof(float) * MAXNB * stride), *q = malloc(sizeof(float) * MAXG * 2 * MAXHD);
    uint16_t *Kh = malloc(sizeof(uint16_t) * MAXNB * stride);
    float *e1 = malloc(sizeof(float) * MAXG * MAXNB), *e2 = malloc(sizeof(float) * MAXG * MAXNB);
    float *o1 = malloc(sizeof(float) * MAXG * MAXHD), *o2 = malloc(sizeof(float) * MAXG * MAXHD);
    for (size_t i = 0; i < MAXNB * stride; i++)
        Kf[i] = rl_rng_normal(rng), Kh[i] = rl_fp32_to_fp16(rl_rng_normal(rng));
    for (int i = 0; i < MAXG * 2 * MAXHD; i++) q[i] = rl_rng_normal(rng);
    static const int hds[] = {16, 24, 40, 64, 128, 256}, nbs[] = {1, 2, 3, 7, 8, 9, 17, 128, 130};
    int fails = 0, cases = 0;
    for (int ih = 0; ih < 6; ih++)
        for (int G = 1; G <= MAXG; G++)
            for (int in = 0; in < 9; in++)
                for (int f16 = 0; f16 < 2; f16++) {
                    const int hd = hds[ih], nb = nbs[in];
                    const void *K =
                        f16 ? (const void *)(Kh + MAXHD) : (const void *)(Kf + MAXHD); /* KV head 1 */
                    const size_t qs = 2 * (size_t)hd;
                    check_poison(e1, (size_t)MAXG * MAXNB);
                    check_poison(e2, (size_t)MAXG * MAXNB);
                    v->attn_scores(q, qs, G, K, f16, stride, nb, hd, 0.0625f, e1, MAXNB);
                    for (int p = 0; p < nb; p++)
                        for (int g = 0; g < G; g++)
                            e2[(size_t)g * MAXNB + p] =
                                (f16 ? v->dot_f16(q + g * qs, Kh + MAXHD + p * stride, hd)
                                     : v->dot(q + g * qs, Kf + MAXHD + p * stride, hd)) *
                                0.0625f;
                    int ok = 1;
                    for (int g = 0; g < G; g++)
                        ok &= memcmp(e1 + (size_t)g * MAXNB, e2 + (size_t)g * MAXNB, sizeof(float) * nb) == 0;
                    /* mix with these scores as weights, outputs starting from random values */
                    for (int i = 0; i < G * hd; i++) o1[i] = o2[i] = rl_rng_normal(rng);
                    v->attn_mix(o1, hd, G, e2, MAXNB, K, f16, stride, nb, hd);
                    for (int p = 0; p < nb; p++)
                        for (int g = 0; g < G; g++) {
                            if (f16)
                                v->axpy_f16(o2 + g * hd, e2[(size_t)g * MAXNB + p], Kh + MAXHD + p * stride,
                                            hd);
                            else v->axpy(o2 + g * hd, e2[(size_t)g * MAXNB + p], Kf + MAXHD + p * stride, hd);
                        }
                    ok &= memcmp(o1, o2, sizeof(float) * G * hd) == 0;
                    if (!ok && fails++ < 5)
                        printf("%s attention blocks hd %d G %d nb %d %s: not the loops' bits\n", v->name, hd,
                               G, nb, f16 ? "f16" : "f32");
                    cases++;
                }
    CHECK(fails == 0, "%s attn_scores/attn_mix: %d of %d cases differ from dot/axpy loops", v->name, fails,
          cases);
    free(Kf), free(Kh), free(q), free(e1), free(e2), free(o1), free(o2);
}

/* The gates (silu_mul, sigmoid_mul) against double references. Bound: exp8's reduction leaves
 * |r| <= 0.347 with an error of k * 2^-24 ulp-scale (ln 2 split so k * hi is exact), the degree-6
 * Taylor remainder is < 1e-7 relative, and 1 + e, the division and the product by u round once
 * each: a few ulp in all, so 1e-6 relative (8 ulp) plus 1e-35 absolute (below -87.3 exp(-x) is
 * clamped: silu there is |x| e^x < 1e-35 and ours is as small). The portable table must be ops_silu /
 * ops_sigmoid bit for bit, and every table must give an element the same bits whatever the call's
 * n and the element's position (a row's gates in a prefill chunk and in a decode step). */
static void check_gates(const vec_ops *v, rl_rng *rng) {
    enum { N = 203 };
    float g[N], u[N], y[N], y2[N];
    static const float special[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 1.0f,   -1.0f,   20.0f, -20.0f,
                                    87.0f, -87.0f, 88.5f,  -88.5f,  100.0f, -100.0f, 1e4f,  -1e4f};
    for (int i = 0; i < N; i++) {
        const float sc = i % 3 == 0 ? 0.5f : i % 3 == 1 ? 4.0f : 30.0f;
        g[i] = i < 16 ? special[i] : sc * rl_rng_normal(rng);
        u[i] = rl_rng_normal(rng);
    }
    double worst = 0;
    int bits = 0;
    for (int mode = 0; mode < 3; mode++) { /* silu, silu * u, sigmoid * y */
        check_poison(y, N);
        if (mode == 2)
            for (int i = 0; i < N; i++) y[i] = u[i];
        if (mode == 0) v->silu_mul(y, g, NULL, N);
        else if (mode == 1) v->silu_mul(y, g, u, N);
        else v->sigmoid_mul(y, g, N);
        for (int i = 0; i < N; i++) {
            const double x = g[i], sg = 1.0 / (1.0 + exp(-x));
            const double ref = mode == 0 ? x * sg : mode == 1 ? x * sg * u[i] : u[i] * sg;
            const double e = fabs(y[i] - ref) / (fabs(ref) + 1e-35 / 1e-6);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
            if (v == vec_portable()) { /* the reference ops' expressions, bit for bit */
                const float r = mode == 0   ? ops_silu(g[i])
                                : mode == 1 ? ops_silu(g[i]) * u[i]
                                            : u[i] * ops_sigmoid(g[i]);
                bits += memcmp(&r, &y[i], 4) != 0;
            }
        }
        /* every element the same bits from calls over sub-ranges (tails of every length, any offset)
         * and in place (y aliasing g, or u) */
        int moved = 0;
        for (int off = 0; off < 11; off++)
            for (int n = 1; n <= 19; n += 3) {
                if (off + n > N) continue;
                check_poison(y2, N);
                if (mode == 2) memcpy(y2 + off, u + off, sizeof(float) * n);
                if (mode == 0)
                    memcpy(y2 + off, g + off, sizeof(float) * n), v->silu_mul(y2 + off, y2 + off, NULL, n);
                else if (mode == 1)
                    memcpy(y2 + off, u + off, sizeof(float) * n), v->silu_mul(y2 + off, g + off, y2 + off, n);
                else v->sigmoid_mul(y2 + off, g + off, n);
                moved += memcmp(y2 + off, y + off, sizeof(float) * n) != 0;
            }
        CHECK(moved == 0, "%s gate %d: %d sub-range calls differ from the whole call", v->name, mode, moved);
    }
    CHECK(worst < 1e-6, "%s gates: worst relative error %.3e (bound 1e-6)", v->name, worst);
    /* a NaN input stays NaN (a poisoned activation must not turn finite in a gate) */
    float gn[9], yn[9];
    for (int i = 0; i < 9; i++) gn[i] = i == 3 || i == 8 ? NAN : 0.5f, yn[i] = 1.0f;
    v->sigmoid_mul(yn, gn, 9);
    CHECK(isnan(yn[3]) && isnan(yn[8]) && !isnan(yn[0]), "%s sigmoid_mul keeps NaN", v->name);
    v->silu_mul(yn, gn, NULL, 9);
    CHECK(isnan(yn[3]) && isnan(yn[8]) && !isnan(yn[0]), "%s silu_mul keeps NaN", v->name);
    CHECK(bits == 0, "%s gates: %d values differ from ops_silu / ops_sigmoid", v->name, bits);
}

/* vec_attn_rows_kv: R query rows at once equal R calls of vec_attn_group_kv bit for bit, for lengths
 * around the block edges (a row ending just before, at and after one; the rows straddling one), f32 and
 * f16 caches, head groups of 1 to 8 and 2 to 5 or 8 rows (R x G up to 64), outputs poisoned before. */
static void check_attn_rows(const vec_ops *v, rl_rng *rng) {
    enum { HD = 64, NKV = 2, MAXP = 620, MAXR = 8, MAXG = 8 };
    const size_t stride = (size_t)NKV * HD; /* one cached row: 2 KV heads */
    float *Kf = malloc(sizeof(float) * MAXP * stride), *Vf = malloc(sizeof(float) * MAXP * stride);
    uint16_t *Kh = malloc(sizeof(uint16_t) * MAXP * stride), *Vh = malloc(sizeof(uint16_t) * MAXP * stride);
    for (size_t i = 0; i < MAXP * stride; i++) {
        Kf[i] = rl_rng_normal(rng), Vf[i] = rl_rng_normal(rng);
        Kh[i] = rl_fp32_to_fp16(rl_rng_normal(rng)), Vh[i] = rl_fp32_to_fp16(rl_rng_normal(rng));
    }
    const size_t qrow = 2 * (size_t)MAXG * HD + 8, orow = (size_t)MAXG * HD + 4; /* odd row strides */
    float *q = malloc(sizeof(float) * MAXR * qrow), *o1 = malloc(sizeof(float) * MAXR * orow),
          *o2 = malloc(sizeof(float) * MAXR * orow);
    for (size_t i = 0; i < MAXR * qrow; i++) q[i] = rl_rng_normal(rng);
    /* around block edges, and chunk edges (VEC_ATTN_CHUNK 256: rows folding 2 or 3 chunks) */
    static const int lens[] = {1,   5,   126, 127, 128, 129, 200, 254, 255,
                               256, 257, 383, 507, 511, 512, 513, 600};
    enum { NL = sizeof lens / sizeof lens[0] };
    int bad = 0, cases = 0;
    for (int f16 = 0; f16 < 2; f16++)
        for (int G = 1; G <= MAXG; G *= 2)
            for (int R = 2; R <= MAXR; R = R < 5 ? R + 1 : MAXR + (R == MAXR))
                for (int il = 0; il < NL; il++) {
                    const void *K = f16 ? (const void *)(Kh + HD) : (const void *)(Kf + HD); /* KV head 1 */
                    const void *V = f16 ? (const void *)(Vh + HD) : (const void *)(Vf + HD);
                    check_poison(o1, MAXR * orow);
                    check_poison(o2, MAXR * orow);
                    vec_attn_rows_kv(v, q, qrow, R, 2 * HD, G, K, V, f16, lens[il], stride, HD, 0.125f, o1,
                                     orow, HD);
                    for (int r = 0; r < R; r++)
                        vec_attn_group_kv(v, q + r * qrow, 2 * HD, G, K, V, f16, lens[il] + r, stride, HD,
                                          0.125f, o2 + r * orow, HD);
                    for (int r = 0; r < R; r++)
                        bad += memcmp(o1 + r * orow, o2 + r * orow, sizeof(float) * (size_t)G * HD) != 0;
                    cases += R;
                }
    CHECK(bad == 0, "%s attention rows: %d of %d rows differ from row-at-a-time", v->name, bad, cases);
    free(Kf), free(Vf), free(Kh), free(Vh), free(q), free(o1), free(o2);
}

/* The chunk API as a decode step uses it over threads (qwen3next_forward.c): every chunk of a row by
 * vec_attn_chunk_kv, folded in order by vec_attn_merge, normalised — the bits of vec_attn_group_kv,
 * for rows of 1 to 4 chunks (VEC_ATTN_CHUNK 256), f32 and f16 caches, outputs poisoned. */
static void check_attn_chunks(const vec_ops *v, rl_rng *rng) {
    enum { HD = 128, NKV = 2, MAXP = 1000, G = 8 };
    const size_t stride = (size_t)NKV * HD;
    float *Kf = malloc(sizeof(float) * MAXP * stride), *Vf = malloc(sizeof(float) * MAXP * stride);
    uint16_t *Kh = malloc(sizeof(uint16_t) * MAXP * stride), *Vh = malloc(sizeof(uint16_t) * MAXP * stride);
    float *q = malloc(sizeof(float) * G * 2 * HD), *o1 = malloc(sizeof(float) * G * HD),
          *o2 = malloc(sizeof(float) * G * HD);
    float *parts = malloc(sizeof(float) * 4 * G * HD), pm[4][G], pl[4][G];
    for (size_t i = 0; i < MAXP * stride; i++) {
        Kf[i] = rl_rng_normal(rng) * 2, Vf[i] = rl_rng_normal(rng);
        Kh[i] = rl_fp32_to_fp16(Kf[i]), Vh[i] = rl_fp32_to_fp16(Vf[i]);
    }
    for (int i = 0; i < G * 2 * HD; i++) q[i] = rl_rng_normal(rng);
    static const int lens[] = {1, 255, 256, 257, 300, 511, 512, 513, 700, 1000};
    int bad = 0, cases = 0;
    for (int f16 = 0; f16 < 2; f16++)
        for (int il = 0; il < (int)(sizeof lens / sizeof lens[0]); il++) {
            const int n = lens[il], nch = (n + VEC_ATTN_CHUNK - 1) / VEC_ATTN_CHUNK;
            const void *K = f16 ? (const void *)Kh : (const void *)Kf,
                       *V = f16 ? (const void *)Vh : (const void *)Vf;
            check_poison(o1, G * HD);
            check_poison(o2, G * HD);
            check_poison(parts, 4 * G * HD);
            vec_attn_group_kv(v, q, 2 * HD, G, K, V, f16, n, stride, HD, 0.0625f, o1, HD);
            for (int c = nch - 1; c >= 0; c--) { /* any order: each chunk starts afresh */
                const int p0 = c * VEC_ATTN_CHUNK, p1 = n - p0 < VEC_ATTN_CHUNK ? n : p0 + VEC_ATTN_CHUNK;
                vec_attn_chunk_kv(v, q, 2 * HD, G, K, V, f16, p0, p1, stride, HD, 0.0625f,
                                  parts + (size_t)c * G * HD, HD, pm[c], pl[c]);
            }
            for (int c = 1; c < nch; c++)
                vec_attn_merge(G, HD, parts, HD, pm[0], pl[0], parts + (size_t)c * G * HD, HD, pm[c], pl[c]);
            vec_attn_normalize(G, HD, parts, HD, pl[0], o2, HD);
            bad += memcmp(o1, o2, sizeof(float) * G * HD) != 0;
            cases++;
        }
    CHECK(bad == 0, "%s attention chunks: %d of %d rows differ from vec_attn_group_kv", v->name, bad, cases);
    free(Kf), free(Vf), free(Kh), free(Vh), free(q), free(o1), free(o2), free(parts);
}

/* attn_softmax against its definition (vec.h), the portable table being the libm loop bit for bit:
 * the max, the rescale decision and the rescaled outputs are exact in every table (the same expf
 * factor, one product each); e[p] within 1e-6 relative of expf's (exp8 ~2 ulp, see check_gates; below
 * e^-87.3 it clamps, so 1e-30 absolute: nothing against a block sum >= 1); the
 * sum, the same order over those terms, within the elements' 1e-6 plus a rounding per addition that
 * may differ, (nb - 1) u = 7.6e-6; an element's bits do not depend on the block length or its position.
 * Scores span [-60, 20]; the old max is -inf, below or above the block's. */
static void check_attn_softmax(const vec_ops *v, rl_rng *rng) {
    enum { NB = 128, HD = 37 };
    float e0[NB], e1[NB], e2[NB], o1[HD], o2[HD];
    double we = 0, wl = 0;
    int exact_bad = 0, moved = 0;
    for (int trial = 0; trial < 40; trial++) {
        const int nb = 1 + (int)(rl_rng_u64(rng) % NB);
        for (int p = 0; p < nb; p++) e0[p] = -20.0f + 20.0f * rl_rng_normal(rng);
        float bm = e0[0];
        for (int p = 1; p < nb; p++) bm = e0[p] > bm ? e0[p] : bm;
        const float m0 = trial % 3 == 0   ? -INFINITY
                         : trial % 3 == 1 ? bm - 3.0f
                                          : bm + 2.0f,
                    l0 = trial % 3 ? 5.5f : 0;
        float m1 = m0, l1 = l0, m2 = m0, l2 = l0;
        for (int j = 0; j < HD; j++) o1[j] = o2[j] = trial % 3 ? rl_rng_normal(rng) : 0;
        memcpy(e1, e0, sizeof(float) * nb);
        memcpy(e2, e0, sizeof(float) * nb);
        vec_portable()->attn_softmax(e1, nb, &m1, &l1, o1, HD);
        v->attn_softmax(e2, nb, &m2, &l2, o2, HD);
        exact_bad += memcmp(&m1, &m2, sizeof m1) != 0 || memcmp(o1, o2, sizeof o1) != 0;
        for (int p = 0; p < nb; p++) {
            const double d = fabs((double)e2[p] - e1[p]) / ((double)e1[p] + 1e-30 / 1e-6);
            if (!(d <= we)) we = isnan(d) ? INFINITY : d;
        }
        const double dl = fabs((double)l2 - l1) / fabs((double)l1);
        if (!(dl <= wl)) wl = isnan(dl) ? INFINITY : dl;
        if (v == vec_portable()) exact_bad += memcmp(e1, e2, sizeof(float) * nb) != 0 || l1 != l2;
        /* the same scores at another offset and length, under the same max: the same bits each */
        const int off = 1 + trial % 7;
        if (off < nb) {
            float e3[NB], m3 = m2, l3 = 0, o3[HD] = {0};
            memcpy(e3, e0 + off, sizeof(float) * (nb - off));
            v->attn_softmax(e3, nb - off, &m3, &l3, o3, HD);
            moved += m3 != m2 || memcmp(e3, e2 + off, sizeof(float) * (nb - off)) != 0;
        }
    }
    CHECK(exact_bad == 0, "%s attn_softmax: %d blocks with another max or rescale (portable: other bits)",
          v->name, exact_bad);
    CHECK(we < 1e-6, "%s attn_softmax: exp of a score %.3e relative from expf's (bound 1e-6)", v->name, we);
    CHECK(wl < 8.6e-6, "%s attn_softmax: sum %.3e relative from the libm loop's (bound 8.6e-6)", v->name, wl);
    CHECK(moved == 0, "%s attn_softmax: %d sub-blocks gave an element other bits", v->name, moved);
}

/* axpy_d: every table's bits are the portable loop's (a double product and a double sum, each rounded
 * once), for every n (tails) and from a non-zero accumulator. */
static void check_axpy_d(const vec_ops *v, rl_rng *rng) {
    enum { N = 37 };
    double a1[N], a2[N];
    float x[N];
    int bad = 0;
    for (int n = 0; n <= N; n += n < 9 ? 1 : 7) {
        /* w with a full double mantissa (a float w times a float x is exact in double) and accumulators
         * near -w x: the sum cancels, so the product's own rounding shows (a fused multiply-add, which
         * skips it, fails here) */
        const double w = (double)rl_rng_normal(rng) + 1e-9 * (double)rl_rng_normal(rng);
        for (int i = 0; i < N; i++)
            x[i] = rl_rng_normal(rng), a1[i] = a2[i] = -w * x[i] * (1 + 1e-3 * rl_rng_normal(rng));
        vec_portable()->axpy_d(a1, w, x, n);
        v->axpy_d(a2, w, x, n);
        bad += memcmp(a1, a2, sizeof a1) != 0;
    }
    CHECK(bad == 0, "%s axpy_d: %d lengths differ from the portable loop", v->name, bad);
}

int main(void) {
    rl_rng rng;
    rl_rng_seed(&rng, 7);
    check_ops(vec_portable(), &rng);
    check_f16(vec_portable(), &rng);
    check_attn_blocks(vec_portable(), &rng);
    check_gates(vec_portable(), &rng);
    check_attn_rows(vec_portable(), &rng);
    check_attn_chunks(vec_portable(), &rng);
    check_attn_softmax(vec_portable(), &rng);
    if (vec_avx2())
        check_ops(vec_avx2(), &rng), check_f16(vec_avx2(), &rng), check_attn_blocks(vec_avx2(), &rng),
            check_gates(vec_avx2(), &rng), check_axpy_d(vec_avx2(), &rng), check_attn_rows(vec_avx2(), &rng),
            check_attn_chunks(vec_avx2(), &rng), check_attn_softmax(vec_avx2(), &rng);
    else printf("test_vec: AVX2 not available, its table not checked\n");
    if (vec_avx512())
        check_ops(vec_avx512(), &rng), check_f16(vec_avx512(), &rng), check_attn_blocks(vec_avx512(), &rng),
            check_gates(vec_avx512(), &rng), check_axpy_d(vec_avx512(), &rng),
            check_attn_rows(vec_avx512(), &rng), check_attn_chunks(vec_avx512(), &rng),
            check_attn_softmax(vec_avx512(), &rng);
    else printf("test_vec: AVX-512 not available, its table not checked\n");
    return check_done("test_vec");
}
