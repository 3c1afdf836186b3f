/* vec_avx2.c — AVX2+FMA versions of the vec.h primitives (compiled with -mavx2 -mfma). */
#include <immintrin.h>
#include <math.h>

#include "kern/vec.h"

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_avx2(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* One column of S: one pass to decay and project (m = S^T k), one pass to update and read out
 * (o = S^T q); the column stays in registers/L1 between the two. */
static void delta_col(const float *si, float *s, const float *q, const float *k, float v, __m256 va,
                      float alpha, float beta, int dk, float *out) {
    __m256 m0 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= dk; i += 8) {
        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(si + i), va);
        _mm256_storeu_ps(s + i, x);
        m0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + i), m0);
    }
    float m = hsum(m0);
    for (; i < dk; i++) {
        s[i] = si[i] * alpha;
        m += s[i] * k[i];
    }
    float delta = beta * (v - m);
    __m256 vd = _mm256_set1_ps(delta), o0 = _mm256_setzero_ps();
    for (i = 0; i + 8 <= dk; i += 8) {
        __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(k + i), vd, _mm256_loadu_ps(s + i));
        _mm256_storeu_ps(s + i, x);
        o0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(q + i), o0);
    }
    float o = hsum(o0);
    for (; i < dk; i++) {
        s[i] += k[i] * delta;
        o += s[i] * q[i];
    }
    *out = o;
}

#define UNROLL4 _Pragma("GCC unroll 4") /* the four columns stay in registers */

static void delta_avx2(const float *S_in, float *S, const float *q, const float *k, const float *v,
                       float alpha, float beta, int dk, int dv, float *out) {
    const __m256 va = _mm256_set1_ps(alpha);
    for (int c = 0; c < dv; c++)
        delta_col(S_in + (size_t)c * dk, S + (size_t)c * dk, q, k, v[c], va, alpha, beta, dk, out + c);
}

/* Four columns at a time, interleaved: each column's operations are delta_col's in its order (one
 * accumulator per pass, the same reductions and tails), so the result is delta_avx2's bit for bit.
 * A column alone is two chains of dk/8 dependent FMAs (~150 cycles of latency at dk = 128); with the
 * state in cache that latency was the whole cost of a prompt's delta rule, and four chains in flight
 * hide it (2-core Zen 4 VM: a 128 x 128 head step 3.4 -> 1.8 us, the prompt's recurrence stage
 * x1.35). With the state coming from memory (a decode step) the four interleaved streams were slower
 * than one (the same VM: that stage 0.65-0.84 -> 0.99-1.14 ms per token), so decode keeps delta_avx2. */
static void delta_hot_avx2(const float *S_in, float *S, const float *q, const float *k, const float *v,
                           float alpha, float beta, int dk, int dv, float *out) {
    const __m256 va = _mm256_set1_ps(alpha);
    int c = 0;
    for (; c + 4 <= dv; c += 4) {
        const float *si[4];
        float *s[4];
        __m256 acc[4];
        UNROLL4 for (int j = 0; j < 4; j++) {
            si[j] = S_in + (size_t)(c + j) * dk;
            s[j] = S + (size_t)(c + j) * dk;
            acc[j] = _mm256_setzero_ps();
        }
        int i = 0;
        for (; i + 8 <= dk; i += 8) {
            const __m256 kv = _mm256_loadu_ps(k + i);
            UNROLL4 for (int j = 0; j < 4; j++) {
                __m256 x = _mm256_mul_ps(_mm256_loadu_ps(si[j] + i), va);
                _mm256_storeu_ps(s[j] + i, x);
                acc[j] = _mm256_fmadd_ps(x, kv, acc[j]);
            }
        }
        const int i8 = i;
        float delta[4];
        UNROLL4 for (int j = 0; j < 4; j++) {
            float m = hsum(acc[j]);
            for (i = i8; i < dk; i++) {
                s[j][i] = si[j][i] * alpha;
                m += s[j][i] * k[i];
            }
            delta[j] = beta * (v[c + j] - m);
        }
        __m256 vd[4];
        UNROLL4 for (int j = 0; j < 4; j++) vd[j] = _mm256_set1_ps(delta[j]), acc[j] = _mm256_setzero_ps();
        for (i = 0; i + 8 <= dk; i += 8) {
            const __m256 kv = _mm256_loadu_ps(k + i), qv = _mm256_loadu_ps(q + i);
            UNROLL4 for (int j = 0; j < 4; j++) {
                __m256 x = _mm256_fmadd_ps(kv, vd[j], _mm256_loadu_ps(s[j] + i));
                _mm256_storeu_ps(s[j] + i, x);
                acc[j] = _mm256_fmadd_ps(x, qv, acc[j]);
            }
        }
        UNROLL4 for (int j = 0; j < 4; j++) {
            float o = hsum(acc[j]);
            for (i = i8; i < dk; i++) {
                s[j][i] += k[i] * delta[j];
                o += s[j][i] * q[i];
            }
            out[c + j] = o;
        }
    }
    for (; c < dv; c++)
        delta_col(S_in + (size_t)c * dk, S + (size_t)c * dk, q, k, v[c], va, alpha, beta, dk, out + c);
}

/* f16 rows: 8 halves widened by F16C (vcvtph2ps, exact), then dot_avx2 / axpy_avx2's arithmetic */
static inline __m256 ld16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

static float dot_f16_avx2(const float *a, const uint16_t *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), ld16(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), ld16(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), ld16(b + i), s0);
    float s = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * _cvtsh_ss(b[i]);
    return s;
}

static void axpy_f16_avx2(float *y, float a, const uint16_t *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, ld16(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * _cvtsh_ss(x[i]);
}

/* Attention blocks (vec.h attn_scores / attn_mix), rows taken 8 at a time; f16 rows are widened
 * once into a buffer (exact, so the f32 arithmetic on it is dot_f16's / axpy_f16's). Head dims
 * that are not a multiple of 16 take the plain loops (dot_avx2's and axpy_avx2's scalar tails). */
#define ATT_ROWS 8
#define ATT_MAXHD 1024
#define INLINE static inline __attribute__((always_inline))

/* rows p0..p0+n-1 as f32 rows: the cache itself, or widened into buf (row stride hd) */
static const float *att_rows(const void *X, bool f16, size_t stride, int p0, int n, int hd, float *buf,
                             size_t *rs) {
    if (!f16) {
        *rs = stride;
        return (const float *)X + (size_t)p0 * stride;
    }
    for (int r = 0; r < n; r++) {
        const uint16_t *h = (const uint16_t *)X + (size_t)(p0 + r) * stride;
        for (int i = 0; i < hd; i += 8) _mm256_storeu_ps(buf + (size_t)r * hd + i, ld16(h + i));
    }
    *rs = (size_t)hd;
    return buf;
}

/* NQ heads x NK rows of dot_avx2 (two accumulators: even and odd 8-lane chunks; then hsum(s0 + s1)) */
INLINE void att_dot_tile(int NQ, int NK, const float *const *q, const float *const *k, int hd, float scale,
                         float *e, int es, int p) {
    __m256 s0[2][2], s1[2][2];
    UNROLL4 for (int a = 0; a < NQ; a++) UNROLL4 for (int b = 0; b < NK; b++) s0[a][b] = s1[a][b] =
        _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        __m256 k0[2], k1[2];
        UNROLL4 for (int b = 0; b < NK; b++) k0[b] = _mm256_loadu_ps(k[b] + i),
                                             k1[b] = _mm256_loadu_ps(k[b] + i + 8);
        UNROLL4 for (int a = 0; a < NQ; a++) {
            const __m256 q0 = _mm256_loadu_ps(q[a] + i), q1 = _mm256_loadu_ps(q[a] + i + 8);
            UNROLL4 for (int b = 0; b < NK; b++) {
                s0[a][b] = _mm256_fmadd_ps(q0, k0[b], s0[a][b]);
                s1[a][b] = _mm256_fmadd_ps(q1, k1[b], s1[a][b]);
            }
        }
    }
    UNROLL4 for (int a = 0; a < NQ; a++) UNROLL4 for (int b = 0; b < NK; b++) e[(size_t)a * es + p + b] =
        hsum(_mm256_add_ps(s0[a][b], s1[a][b])) * scale;
}

/* the full 2 x 2 tile written out: the array version kept one accumulator in memory (a store-load
 * chain per step); the same operations in the same order as att_dot_tile(2, 2, ...) */
static void att_dot_2x2(const float *q0, const float *q1, const float *k0, const float *k1, int hd,
                        float scale, float *e0, float *e1) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    for (int i = 0; i < hd; i += 16) {
        const __m256 x0 = _mm256_loadu_ps(k0 + i), x1 = _mm256_loadu_ps(k0 + i + 8);
        const __m256 y0 = _mm256_loadu_ps(k1 + i), y1 = _mm256_loadu_ps(k1 + i + 8);
        __m256 u = _mm256_loadu_ps(q0 + i), w = _mm256_loadu_ps(q0 + i + 8);
        a0 = _mm256_fmadd_ps(u, x0, a0), a1 = _mm256_fmadd_ps(w, x1, a1);
        b0 = _mm256_fmadd_ps(u, y0, b0), b1 = _mm256_fmadd_ps(w, y1, b1);
        u = _mm256_loadu_ps(q1 + i), w = _mm256_loadu_ps(q1 + i + 8);
        c0 = _mm256_fmadd_ps(u, x0, c0), c1 = _mm256_fmadd_ps(w, x1, c1);
        d0 = _mm256_fmadd_ps(u, y0, d0), d1 = _mm256_fmadd_ps(w, y1, d1);
    }
    e0[0] = hsum(_mm256_add_ps(a0, a1)) * scale, e0[1] = hsum(_mm256_add_ps(b0, b1)) * scale;
    e1[0] = hsum(_mm256_add_ps(c0, c1)) * scale, e1[1] = hsum(_mm256_add_ps(d0, d1)) * scale;
}

static void attn_scores_avx2(const float *q, size_t qstride, int G, const void *K, bool f16, size_t stride,
                             int nb, int hd, float scale, float *e, int es) {
    if (hd % 16 || hd > ATT_MAXHD) {
        for (int p = 0; p < nb; p++)
            for (int g = 0; g < G; g++)
                e[(size_t)g * es + p] =
                    (f16 ? dot_f16_avx2(q + (size_t)g * qstride, (const uint16_t *)K + (size_t)p * stride, hd)
                         : dot_avx2(q + (size_t)g * qstride, (const float *)K + (size_t)p * stride, hd)) *
                    scale;
        return;
    }
    float buf[ATT_ROWS * ATT_MAXHD] __attribute__((aligned(32)));
    for (int p0 = 0; p0 < nb; p0 += ATT_ROWS) {
        const int n = nb - p0 < ATT_ROWS ? nb - p0 : ATT_ROWS;
        size_t rs;
        const float *R = att_rows(K, f16, stride, p0, n, hd, buf, &rs);
        for (int g = 0; g < G; g += 2) {
            const float *qq[2] = {q + (size_t)g * qstride, q + (size_t)(g + 1) * qstride};
            float *eg = e + (size_t)g * es;
            int r = 0;
            for (; r + 2 <= n; r += 2) {
                const float *kk[2] = {R + (size_t)r * rs, R + (size_t)(r + 1) * rs};
                if (g + 1 < G)
                    att_dot_2x2(qq[0], qq[1], kk[0], kk[1], hd, scale, eg + p0 + r, eg + es + p0 + r);
                else att_dot_tile(1, 2, qq, kk, hd, scale, eg, es, p0 + r);
            }
            if (r < n) {
                const float *kk[2] = {R + (size_t)r * rs, NULL};
                if (g + 1 < G) att_dot_tile(2, 1, qq, kk, hd, scale, eg, es, p0 + r);
                else att_dot_tile(1, 1, qq, kk, hd, scale, eg, es, p0 + r);
            }
        }
    }
}

/* NG heads' outputs, 16 values each, in registers across n rows: y = fma(a, x, y) row by row (axpy_avx2) */
INLINE void att_mix_tile(int NG, float *const *o, const float *const *eg, const float *R, size_t rs, int n,
                         int d) {
    __m256 y0[4], y1[4];
    UNROLL4 for (int a = 0; a < NG; a++) y0[a] = _mm256_loadu_ps(o[a] + d),
                                         y1[a] = _mm256_loadu_ps(o[a] + d + 8);
    for (int r = 0; r < n; r++) {
        const __m256 x0 = _mm256_loadu_ps(R + (size_t)r * rs + d),
                     x1 = _mm256_loadu_ps(R + (size_t)r * rs + d + 8);
        UNROLL4 for (int a = 0; a < NG; a++) {
            const __m256 va = _mm256_broadcast_ss(eg[a] + r);
            y0[a] = _mm256_fmadd_ps(va, x0, y0[a]);
            y1[a] = _mm256_fmadd_ps(va, x1, y1[a]);
        }
    }
    UNROLL4 for (int a = 0; a < NG; a++) _mm256_storeu_ps(o[a] + d, y0[a]),
        _mm256_storeu_ps(o[a] + d + 8, y1[a]);
}

static void attn_mix_avx2(float *out, size_t ostride, int G, const float *e, int es, const void *V, bool f16,
                          size_t stride, int nb, int hd) {
    if (hd % 16 || hd > ATT_MAXHD) {
        for (int p = 0; p < nb; p++)
            for (int g = 0; g < G; g++) {
                if (f16)
                    axpy_f16_avx2(out + (size_t)g * ostride, e[(size_t)g * es + p],
                                  (const uint16_t *)V + (size_t)p * stride, hd);
                else
                    axpy_avx2(out + (size_t)g * ostride, e[(size_t)g * es + p],
                              (const float *)V + (size_t)p * stride, hd);
            }
        return;
    }
    float buf[ATT_ROWS * ATT_MAXHD] __attribute__((aligned(32)));
    for (int p0 = 0; p0 < nb; p0 += ATT_ROWS) {
        const int n = nb - p0 < ATT_ROWS ? nb - p0 : ATT_ROWS;
        size_t rs;
        const float *R = att_rows(V, f16, stride, p0, n, hd, buf, &rs);
        for (int g = 0; g < G; g += 4) {
            const int ng = G - g < 4 ? G - g : 4;
            float *o[4];
            const float *eg[4];
            for (int a = 0; a < ng; a++)
                o[a] = out + (size_t)(g + a) * ostride, eg[a] = e + (size_t)(g + a) * es + p0;
            for (int d = 0; d < hd; d += 16) switch (ng) {
                case 4: att_mix_tile(4, o, eg, R, rs, n, d); break;
                case 3: att_mix_tile(3, o, eg, R, rs, n, d); break;
                case 2: att_mix_tile(2, o, eg, R, rs, n, d); break;
                default: att_mix_tile(1, o, eg, R, rs, n, d); break;
                }
        }
    }
}

/* exp(x) in 8 lanes: x clamped to [-87.3, 88.3] (k = round(x log2 e) in [-126, 127], so 2^k is a
 * normal float built in the exponent field), r = x - k ln 2 in two FMA steps (ln 2 split so k * hi
 * is exact), e^r by its degree-6 Taylor polynomial in Horner form (|r| <= 0.347: truncation below
 * 1e-7 relative), times 2^k; above 88.3 +inf (as expf past 88.72), so silu(x) and sigmoid(x) go to 0
 * for very negative x, as the libm expressions do. */
static inline __m256 exp8(__m256 x0) {
    /* max / min return their second operand when either is NaN: a NaN input stays NaN */
    const __m256 x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x0));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-0.693145752f), x);
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(-1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(INFINITY),
                            _mm256_cmp_ps(x0, _mm256_set1_ps(88.3f), _CMP_GT_OQ));
}

/* 1 / (1 + exp(-g)) */
static inline __m256 sigm8(__m256 g) {
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}

/* g / (1 + exp(-g)) (times u) */
static inline __m256 silu8(__m256 g, const float *u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    return u ? _mm256_mul_ps(s, _mm256_loadu_ps(u)) : s;
}

static void silu_mul_avx2(float *y, const float *g, const float *u, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(g + i), u ? u + i : NULL));
    if (i < n) { /* the tail through the same lanes (padding 0: silu(0) = 0, no traps) */
        float gb[8] = {0}, ub[8] = {0}, yb[8];
        for (int j = 0; j < n - i; j++) gb[j] = g[i + j], ub[j] = u ? u[i + j] : 0;
        _mm256_storeu_ps(yb, silu8(_mm256_loadu_ps(gb), u ? ub : NULL));
        for (int j = 0; j < n - i; j++) y[i + j] = yb[j];
    }
}

static void sigmoid_mul_avx2(float *y, const float *g, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sigm8(_mm256_loadu_ps(g + i))));
    if (i < n) {
        float gb[8] = {0}, yb[8] = {0};
        for (int j = 0; j < n - i; j++) gb[j] = g[i + j], yb[j] = y[i + j];
        _mm256_storeu_ps(yb, _mm256_mul_ps(_mm256_loadu_ps(yb), sigm8(_mm256_loadu_ps(gb))));
        for (int j = 0; j < n - i; j++) y[i + j] = yb[j];
    }
}

/* The attention block step of vec.h: the max in lanes (a max is exact in any order), o and *l
 * rescaled as the portable step does, exp8(e - m) in lanes (a tail through padded lanes: an element's
 * bits do not depend on its position or nb), then *l += e[p] in position order, as the portable
 * step adds: a lane-wise sum moved a random tiny model's perplexity by 1.1 % (tiny-b: activations
 * that land within rounding of a Q8 step flip), exp8's ulps did not move it at all. */
static void attn_softmax_avx2(float *e, int nb, float *m, float *l, float *o, int hd) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int p = 0;
    for (; p + 8 <= nb; p += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(e + p));
    float t[8];
    _mm256_storeu_ps(t, mx);
    float bm = t[0];
    for (int i = 1; i < 8; i++) bm = t[i] > bm ? t[i] : bm;
    for (; p < nb; p++) bm = e[p] > bm ? e[p] : bm;
    if (bm > *m) { /* rescale what was accumulated under the old max */
        const float c = expf(*m - bm);
        const __m256 cv = _mm256_set1_ps(c);
        int j = 0;
        for (; j + 8 <= hd; j += 8) _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_loadu_ps(o + j), cv));
        for (; j < hd; j++) o[j] *= c;
        *l *= c;
        *m = bm;
    }
    const __m256 mv = _mm256_set1_ps(*m);
    for (p = 0; p + 8 <= nb; p += 8) _mm256_storeu_ps(e + p, exp8(_mm256_sub_ps(_mm256_loadu_ps(e + p), mv)));
    if (p < nb) {
        float b[8] = {0};
        for (int j = 0; j < nb - p; j++) b[j] = e[p + j];
        _mm256_storeu_ps(b, exp8(_mm256_sub_ps(_mm256_loadu_ps(b), mv)));
        for (int j = 0; j < nb - p; j++) e[p + j] = b[j];
    }
    float s = *l;
    for (p = 0; p < nb; p++) s += e[p];
    *l = s;
}

static void axpy_d_avx2(double *acc, double w, const float *x, int n) {
    const __m256d wv = _mm256_set1_pd(w);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_pd(acc + i, _mm256_add_pd(_mm256_loadu_pd(acc + i),
                                                _mm256_mul_pd(wv, _mm256_cvtps_pd(_mm_loadu_ps(x + i)))));
    for (; i < n; i++) acc[i] += w * (double)x[i];
}

static const vec_ops avx2 = {"avx2",         dot_avx2,          axpy_avx2,     delta_avx2,
                             delta_hot_avx2, dot_f16_avx2,      axpy_f16_avx2, attn_scores_avx2,
                             attn_mix_avx2,  attn_softmax_avx2, silu_mul_avx2, sigmoid_mul_avx2,
                             axpy_d_avx2};

const vec_ops *vec_avx2_table(void);
const vec_ops *vec_avx2_table(void) { return &avx2; }
