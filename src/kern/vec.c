/* vec.c — portable vector primitives and the run-time pick (see vec.h). */
#include "kern/vec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "kern/kern.h"

static float dot_portable(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void axpy_portable(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void delta_portable(const float *S_in, float *S, const float *q, const float *k, const float *v,
                           float alpha, float beta, int dk, int dv, float *out) {
    for (int c = 0; c < dv; c++) {
        const float *si = S_in + (size_t)c * dk;
        float *s = S + (size_t)c * dk;
        for (int i = 0; i < dk; i++) s[i] = si[i] * alpha;
        float delta = beta * (v[c] - dot_portable(s, k, dk));
        axpy_portable(s, delta, k, dk);
        out[c] = dot_portable(s, q, dk);
    }
}

/* f16 twins: widen a block of halves, then the f32 arithmetic above, unchanged */
static float dot_f16_portable(const float *a, const uint16_t *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * rl_fp16_to_fp32(b[i + j]);
    float s = 0;
    for (; i < n; i++) s += a[i] * rl_fp16_to_fp32(b[i]);
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void axpy_f16_portable(float *y, float a, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * rl_fp16_to_fp32(x[i]);
}

static void attn_scores_portable(const float *q, size_t qstride, int G, const void *K, bool f16,
                                 size_t stride, int nb, int hd, float scale, float *e, int es) {
    for (int p = 0; p < nb; p++)
        for (int g = 0; g < G; g++)
            e[(size_t)g * es + p] =
                (f16 ? dot_f16_portable(q + (size_t)g * qstride, (const uint16_t *)K + (size_t)p * stride, hd)
                     : dot_portable(q + (size_t)g * qstride, (const float *)K + (size_t)p * stride, hd)) *
                scale;
}

static void attn_mix_portable(float *out, size_t ostride, int G, const float *e, int es, const void *V,
                              bool f16, size_t stride, int nb, int hd) {
    for (int p = 0; p < nb; p++)
        for (int g = 0; g < G; g++) {
            if (f16)
                axpy_f16_portable(out + (size_t)g * ostride, e[(size_t)g * es + p],
                                  (const uint16_t *)V + (size_t)p * stride, hd);
            else
                axpy_portable(out + (size_t)g * ostride, e[(size_t)g * es + p],
                              (const float *)V + (size_t)p * stride, hd);
        }
}

/* The portable block step (the definition in vec.h): libm expf, a sequential sum */
static void attn_softmax_portable(float *e, int nb, float *m, float *l, float *o, int hd) {
    float bm = e[0];
    for (int p = 1; p < nb; p++) bm = e[p] > bm ? e[p] : bm;
    if (bm > *m) { /* rescale what was accumulated under the old max */
        const float c = expf(*m - bm);
        for (int j = 0; j < hd; j++) o[j] *= c;
        *l *= c;
        *m = bm;
    }
    for (int p = 0; p < nb; p++) {
        e[p] = expf(e[p] - *m);
        *l += e[p];
    }
}

static void silu_mul_portable(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        const float x = g[i], si = x / (1.0f + expf(-x)); /* ops_silu */
        y[i] = u ? si * u[i] : si;
    }
}

static void sigmoid_mul_portable(float *y, const float *g, int n) {
    for (int i = 0; i < n; i++) y[i] *= 1.0f / (1.0f + expf(-g[i])); /* ops_sigmoid */
}

static void axpy_d_portable(double *acc, double w, const float *x, int n) {
    for (int i = 0; i < n; i++) acc[i] += w * (double)x[i];
}

static const vec_ops portable = {
    "portable",        dot_portable,         axpy_portable,        delta_portable,    delta_portable,
    dot_f16_portable,  axpy_f16_portable,    attn_scores_portable, attn_mix_portable, attn_softmax_portable,
    silu_mul_portable, sigmoid_mul_portable, axpy_d_portable};

const vec_ops *vec_portable(void) { return &portable; }

#if defined(__x86_64__)
const vec_ops *vec_avx2_table(void); /* vec_avx2.c */
/* AVX2 + FMA + F16C with the OS saving the YMM state: kern.c's CPUID detection of its AVX2 level
 * (the same three features; __builtin_cpu_supports has no "f16c" in clang) */
const vec_ops *vec_avx2(void) { return kern_level_supported(KERN_AVX2) ? vec_avx2_table() : NULL; }
const vec_ops *vec_avx512_table(void); /* vec_avx512.c */
const vec_ops *vec_avx512(void) {
    __builtin_cpu_init();
    return vec_avx2() && __builtin_cpu_supports("avx512f") ? vec_avx512_table() : NULL;
}
#else
const vec_ops *vec_avx2(void) { return NULL; }
const vec_ops *vec_avx512(void) { return NULL; }
#endif

const vec_ops *vec_for_level(int level) {
    const vec_ops *v = level >= 2 ? vec_avx512() : NULL;
    if (!v && level >= 1) v = vec_avx2();
    return v ? v : &portable;
}

const vec_ops *vec_get(void) { return vec_for_level(2); }

void vec_attn_group(const vec_ops *v, const float *q, size_t qstride, int G, const float *K, const float *V,
                    int n_kv, size_t stride, int hd, float scale, float *out, size_t ostride) {
    vec_attn_group_kv(v, q, qstride, G, K, V, false, n_kv, stride, hd, scale, out, ostride);
}

void vec_attn_chunk_kv(const vec_ops *v, const float *q, size_t qstride, int G, const void *K, const void *V,
                       bool f16, int p0, int p1, size_t stride, int hd, float scale, float *o, size_t ostride,
                       float *m, float *l) {
    float e[VEC_ATTN_MAX_G][VEC_ATTN_BLOCK];
    RL_ASSERT(G >= 1 && G <= VEC_ATTN_MAX_G && p1 > p0 && p0 % VEC_ATTN_BLOCK == 0);
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0;
        memset(o + (size_t)g * ostride, 0, sizeof(float) * (size_t)hd);
    }
    const size_t eb = f16 ? sizeof(uint16_t) : sizeof(float); /* bytes per cached element */
    for (int b0 = p0; b0 < p1; b0 += VEC_ATTN_BLOCK) {
        const int nb = p1 - b0 < VEC_ATTN_BLOCK ? p1 - b0 : VEC_ATTN_BLOCK;
        v->attn_scores(q, qstride, G, (const char *)K + (size_t)b0 * stride * eb, f16, stride, nb, hd, scale,
                       &e[0][0], VEC_ATTN_BLOCK);
        for (int g = 0; g < G; g++) v->attn_softmax(e[g], nb, &m[g], &l[g], o + (size_t)g * ostride, hd);
        v->attn_mix(o, ostride, G, &e[0][0], VEC_ATTN_BLOCK, (const char *)V + (size_t)b0 * stride * eb, f16,
                    stride, nb, hd);
    }
}

void vec_attn_merge(int G, int hd, float *o, size_t ostride, float *m, float *l, const float *o2,
                    size_t o2stride, const float *m2, const float *l2) {
    for (int g = 0; g < G; g++) {
        const float M = m2[g] > m[g] ? m2[g] : m[g], a = expf(m[g] - M), b = expf(m2[g] - M);
        float *x = o + (size_t)g * ostride;
        const float *y = o2 + (size_t)g * o2stride;
        for (int j = 0; j < hd; j++) {
            const float xa = x[j] * a, yb = y[j] * b; /* two roundings, then the sum's: no contraction */
            x[j] = xa + yb;
        }
        const float la = l[g] * a, lb = l2[g] * b;
        l[g] = la + lb;
        m[g] = M;
    }
}

void vec_attn_normalize(int G, int hd, const float *o, size_t ostride, const float *l, float *out,
                        size_t outstride) {
    for (int g = 0; g < G; g++) {
        const float inv = 1.0f / l[g];
        for (int j = 0; j < hd; j++) out[(size_t)g * outstride + j] = o[(size_t)g * ostride + j] * inv;
    }
}

enum { ATTN_GROUP_MAX_HD = 1024 }; /* vec_attn_group_kv's head dimension bound: its fold buffer's size */

void vec_attn_group_kv(const vec_ops *v, const float *q, size_t qstride, int G, const void *K, const void *V,
                       bool f16, int n_kv, size_t stride, int hd, float scale, float *out, size_t ostride) {
    float m[VEC_ATTN_MAX_G], l[VEC_ATTN_MAX_G], m2[VEC_ATTN_MAX_G], l2[VEC_ATTN_MAX_G];
    RL_ASSERT(G >= 1 && G <= VEC_ATTN_MAX_G && hd <= ATTN_GROUP_MAX_HD && n_kv >= 1);
    const int c1 = n_kv < VEC_ATTN_CHUNK ? n_kv : VEC_ATTN_CHUNK;
    vec_attn_chunk_kv(v, q, qstride, G, K, V, f16, 0, c1, stride, hd, scale, out, ostride, m, l);
    if (n_kv > VEC_ATTN_CHUNK) { /* later chunks fold in order (vec.h) */
        float part[VEC_ATTN_MAX_G * ATTN_GROUP_MAX_HD]
            __attribute__((aligned(64))); /* 64 KiB: no allocation per call */
        for (int p0 = VEC_ATTN_CHUNK; p0 < n_kv; p0 += VEC_ATTN_CHUNK) {
            const int p1 = n_kv - p0 < VEC_ATTN_CHUNK ? n_kv : p0 + VEC_ATTN_CHUNK;
            vec_attn_chunk_kv(v, q, qstride, G, K, V, f16, p0, p1, stride, hd, scale, part, (size_t)hd, m2,
                              l2);
            vec_attn_merge(G, hd, out, ostride, m, l, part, (size_t)hd, m2, l2);
        }
    }
    vec_attn_normalize(G, hd, out, ostride, l, out, ostride);
}

void vec_attn_rows_kv(const vec_ops *v, const float *q, size_t qrow, int R, size_t qstride, int G,
                      const void *K, const void *V, bool f16, int n_kv0, size_t stride, int hd, float scale,
                      float *out, size_t orow, size_t ostride) {
    const int RG = R * G;
    if (R == 1 || RG > VEC_ATTN_MAX_RG || hd > VEC_ATTN_ROWS_HD) {
        for (int r = 0; r < R; r++)
            vec_attn_group_kv(v, q + (size_t)r * qrow, qstride, G, K, V, f16, n_kv0 + r, stride, hd, scale,
                              out + (size_t)r * orow, ostride);
        return;
    }
    /* the R x G queries and outputs contiguous (one stride), so the table's tiles take them as RG heads;
     * acc: the fold of a row's finished chunks (vec.h), for the rows past the first chunk */
    float qb[VEC_ATTN_MAX_RG * VEC_ATTN_ROWS_HD] __attribute__((aligned(64)));
    float ob[VEC_ATTN_MAX_RG * VEC_ATTN_ROWS_HD] __attribute__((aligned(64)));
    float m[VEC_ATTN_MAX_RG], l[VEC_ATTN_MAX_RG], e[VEC_ATTN_MAX_RG][VEC_ATTN_BLOCK];
    float acc[VEC_ATTN_MAX_RG * VEC_ATTN_ROWS_HD] __attribute__((aligned(64)));
    float am[VEC_ATTN_MAX_RG], al[VEC_ATTN_MAX_RG];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) {
            memcpy(qb + (size_t)(r * G + g) * hd, q + (size_t)r * qrow + (size_t)g * qstride,
                   sizeof(float) * (size_t)hd);
            m[r * G + g] = -INFINITY, l[r * G + g] = 0;
        }
    memset(ob, 0, sizeof(float) * (size_t)RG * hd);
    const int n_last = n_kv0 + R - 1; /* the longest row's positions */
    const size_t eb = f16 ? sizeof(uint16_t) : sizeof(float);
    for (int p0 = 0; p0 < n_last; p0 += VEC_ATTN_BLOCK) {
        if (p0 > 0 && p0 % VEC_ATTN_CHUNK == 0) {
            /* a chunk ends: the rows that go on fold it into acc and start the next afresh (the rows
             * that ended at p0 keep theirs for the last fold) */
            for (int r = 0; r < R; r++) {
                if (n_kv0 + r <= p0) continue;
                for (int g = 0; g < G; g++) {
                    const int k = r * G + g;
                    float *ok = ob + (size_t)k * hd, *ak = acc + (size_t)k * hd;
                    if (p0 == VEC_ATTN_CHUNK)
                        memcpy(ak, ok, sizeof(float) * (size_t)hd), am[k] = m[k], al[k] = l[k];
                    else vec_attn_merge(1, hd, ak, (size_t)hd, &am[k], &al[k], ok, (size_t)hd, &m[k], &l[k]);
                    memset(ok, 0, sizeof(float) * (size_t)hd), m[k] = -INFINITY, l[k] = 0;
                }
            }
        }
        const int nbmax = n_last - p0 < VEC_ATTN_BLOCK ? n_last - p0 : VEC_ATTN_BLOCK;
        const char *Kb = (const char *)K + (size_t)p0 * stride * eb,
                   *Vb = (const char *)V + (size_t)p0 * stride * eb;
        /* scores of every row over the longest row's positions (a score does not depend on the tile;
         * a row ignores the ones past its own length) */
        v->attn_scores(qb, (size_t)hd, RG, Kb, f16, stride, nbmax, hd, scale, &e[0][0], VEC_ATTN_BLOCK);
        const bool same = n_kv0 - p0 >= nbmax; /* every row has the whole block */
        for (int r = 0; r < R; r++) {
            const int nr = n_kv0 + r - p0 < VEC_ATTN_BLOCK ? n_kv0 + r - p0 : VEC_ATTN_BLOCK;
            if (nr <= 0) continue; /* this row ended before the block */
            for (int g = 0; g < G; g++) {
                const int k = r * G + g;
                v->attn_softmax(e[k], nr, &m[k], &l[k], ob + (size_t)k * hd, hd);
            }
            if (!same)
                v->attn_mix(ob + (size_t)r * G * hd, (size_t)hd, G, e[r * G], VEC_ATTN_BLOCK, Vb, f16, stride,
                            nr, hd);
        }
        if (same) v->attn_mix(ob, (size_t)hd, RG, &e[0][0], VEC_ATTN_BLOCK, Vb, f16, stride, nbmax, hd);
    }
    for (int r = 0; r < R; r++) {
        /* a row with more than one chunk: its last chunk folds into acc */
        const bool folded =
            n_kv0 + r > VEC_ATTN_CHUNK; /* its first chunk went into acc at p0 = VEC_ATTN_CHUNK */
        float *src = folded ? acc + (size_t)r * G * hd : ob + (size_t)r * G * hd;
        if (folded)
            vec_attn_merge(G, hd, src, (size_t)hd, &am[r * G], &al[r * G], ob + (size_t)r * G * hd,
                           (size_t)hd, &m[r * G], &l[r * G]);
        vec_attn_normalize(G, hd, src, (size_t)hd, folded ? &al[r * G] : &l[r * G], out + (size_t)r * orow,
                           ostride);
    }
}
