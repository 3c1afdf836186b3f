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

/* One pass to decay and project (m = S^T k), one pass to update and read out (o = S^T q):
 * the column of S stays in registers/L1 between the two. */
static void delta_avx2(const float *S_in, float *S, const float *q, const float *k, const float *v, float alpha,
                       float beta, int dk, int dv, float *out) {
    __m256 va = _mm256_set1_ps(alpha);
    for (int c = 0; c < dv; c++) {
        const float *si = S_in + (size_t)c * dk;
        float *s = S + (size_t)c * dk;
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
        float delta = beta * (v[c] - m);
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
        out[c] = o;
    }
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

static const vec_ops avx2 = {"avx2", dot_avx2, axpy_avx2, delta_avx2, dot_f16_avx2, axpy_f16_avx2};

const vec_ops *vec_avx2_table(void);
const vec_ops *vec_avx2_table(void) { return &avx2; }
