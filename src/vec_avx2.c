/* vec_avx2.c — AVX2+FMA versions of the vec.h primitives (compiled with -mavx2 -mfma). */
#include <immintrin.h>

#include "vec.h"

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
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
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

static void delta_avx2(const float *S_in, float *S, const float *q, const float *k, const float *v, float alpha,
                       float beta, int dk, int dv, float *out) {
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
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, ld16(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * _cvtsh_ss(x[i]);
}

static const vec_ops avx2 = {"avx2",         dot_avx2,     axpy_avx2,    delta_avx2,
                             delta_hot_avx2, dot_f16_avx2, axpy_f16_avx2};

const vec_ops *vec_avx2_table(void);
const vec_ops *vec_avx2_table(void) { return &avx2; }
