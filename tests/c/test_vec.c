/* test_vec.c — the fast float primitives (vec.h: portable and AVX2) against the double-precision
 * reference ops on random data. Float accumulation of n products has error ~ n * 2^-24 * sum|a_i b_i|
 * in the worst case, ~sqrt(n) * 2^-24 * ... typically; we allow 1e-5 relative to sum|terms|
 * (n <= 256 here: worst case 256 * 6e-8 = 1.5e-5 of the absolute sum, typical far less). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common.h"
#include "ops.h"
#include "vec.h"

static void check_ops(const vec_ops *v, rl_rng *rng) {
    enum { DK = 128, DV = 128, HD = 256, NKV = 37 };
    float *S0 = malloc(sizeof(float) * DK * DV), *S1 = malloc(sizeof(float) * DK * DV), *S2 = malloc(sizeof(float) * DK * DV);
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
    /* attention over 37 positions */
    float *K = malloc(sizeof(float) * NKV * HD), *V = malloc(sizeof(float) * NKV * HD), qa[HD], a1[HD], a2[HD];
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
    CHECK(worst < 1e-5, "%s attention: max abs error %.3e (values are convex combinations of N(0,1))", v->name, worst);
    /* grouped attention: 8 heads on one KV head over 300 positions (3 blocks), each head against
     * the double reference, and a head's result independent of the group size */
    {
        enum { G = 8, NP = 300 };
        float *K2 = malloc(sizeof(float) * NP * HD), *V2 = malloc(sizeof(float) * NP * HD);
        float *qg = malloc(sizeof(float) * G * 2 * HD), *og = malloc(sizeof(float) * G * HD), ref[HD], one[HD];
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
            CHECK(indep, "%s grouped attention n_kv %d: a head's result depends on the group size", v->name, n_kv);
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

int main(void) {
    rl_rng rng;
    rl_rng_seed(&rng, 7);
    check_ops(vec_portable(), &rng);
    if (vec_avx2()) check_ops(vec_avx2(), &rng);
    else printf("test_vec: AVX2 not available, portable only\n");
    return check_done("test_vec");
}
