/* vec_avx512.c — the vec.h table in 16-lane (AVX-512F) arithmetic: dot, axpy, their f16 twins and
 * the attention blocks; the delta rule keeps the AVX2 functions (its state columns are 128 wide
 * and were measured at the memory/cache limit already). A table is one arithmetic: every entry
 * that sums products sums them in this file's lanes and order, so decode, verify and prefill
 * attention (all through the same table) stay bit-identical to one another on this CPU; the
 * results differ from the AVX2 table's by rounding only (tests/c/test_vec.c bounds both against
 * the double reference and checks the blocks against this table's own loops bit for bit). */
#include <immintrin.h>
#include <pthread.h>

#include "kern/vec.h"

const vec_ops *vec_avx2_table(void); /* vec_avx2.c: the delta-rule entries */

/* sum of 16 lanes: the halves, then vec_avx2.c's 8-lane tree (hsum) */
static inline float hsum16(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m512 ld16h(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* Two accumulators: 16-lane chunks alternate between them (even, odd), a last lone 16-lane chunk
 * goes to the first; then hsum16(s0 + s1) and the scalar tail. The f16 twin widens exactly first. */
#define DOT_BODY(LOADB, TAILB)                                                                               \
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();                                               \
    int i = 0;                                                                                               \
    for (; i + 32 <= n; i += 32) {                                                                           \
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), LOADB(b + i), s0);                                      \
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), LOADB(b + i + 16), s1);                            \
    }                                                                                                        \
    if (i + 16 <= n) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), LOADB(b + i), s0), i += 16;                \
    float s = hsum16(_mm512_add_ps(s0, s1));                                                                 \
    for (; i < n; i++) s += a[i] * TAILB(b[i]);                                                              \
    return s;

#define F32(x) (x)
static float dot_512(const float *a, const float *b, int n) { DOT_BODY(_mm512_loadu_ps, F32) }
static float dot_f16_512(const float *a, const uint16_t *b, int n) { DOT_BODY(ld16h, _cvtsh_ss) }

static void axpy_512(float *y, float a, const float *x, int n) {
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static void axpy_f16_512(float *y, float a, const uint16_t *x, int n) {
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, ld16h(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * _cvtsh_ss(x[i]);
}

/* Attention blocks (vec.h): rows 8 at a time, f16 rows widened once into a buffer; head dims that
 * are not a multiple of 32 take the plain loops. */
#define ATT_ROWS 8
#define ATT_MAXHD 1024
#define UNROLL _Pragma("GCC unroll 8")

static const float *att_rows(const void *X, bool f16, size_t stride, int p0, int n, int hd, float *buf,
                             size_t *rs) {
    if (!f16) {
        *rs = stride;
        return (const float *)X + (size_t)p0 * stride;
    }
    for (int r = 0; r < n; r++) {
        const uint16_t *h = (const uint16_t *)X + (size_t)(p0 + r) * stride;
        for (int i = 0; i < hd; i += 16) _mm512_storeu_ps(buf + (size_t)r * hd + i, ld16h(h + i));
    }
    *rs = (size_t)hd;
    return buf;
}

/* NQ heads x NK rows of dot_512 (hd a multiple of 32: only the two-accumulator loop runs) */
static inline __attribute__((always_inline)) void att_dot_tile(int NQ, int NK, const float *const *q,
                                                               const float *const *k, int hd, float scale,
                                                               float *e, int es, int p) {
    __m512 s0[4][2], s1[4][2];
    UNROLL for (int a = 0; a < NQ; a++) UNROLL for (int b = 0; b < NK; b++) s0[a][b] = s1[a][b] =
        _mm512_setzero_ps();
    for (int i = 0; i < hd; i += 32) {
        __m512 k0[2], k1[2];
        UNROLL for (int b = 0; b < NK; b++) k0[b] = _mm512_loadu_ps(k[b] + i),
                                            k1[b] = _mm512_loadu_ps(k[b] + i + 16);
        UNROLL for (int a = 0; a < NQ; a++) {
            const __m512 q0 = _mm512_loadu_ps(q[a] + i), q1 = _mm512_loadu_ps(q[a] + i + 16);
            UNROLL for (int b = 0; b < NK; b++) {
                s0[a][b] = _mm512_fmadd_ps(q0, k0[b], s0[a][b]);
                s1[a][b] = _mm512_fmadd_ps(q1, k1[b], s1[a][b]);
            }
        }
    }
    UNROLL for (int a = 0; a < NQ; a++) UNROLL for (int b = 0; b < NK; b++) e[(size_t)a * es + p + b] =
        hsum16(_mm512_add_ps(s0[a][b], s1[a][b])) * scale;
}

#define TILE_CASE(nq, nk) att_dot_tile(nq, nk, qq, kk, hd, scale, eg, es, p0 + r)

static void attn_scores_512(const float *q, size_t qstride, int G, const void *K, bool f16, size_t stride,
                            int nb, int hd, float scale, float *e, int es) {
    if (hd % 32 || hd > ATT_MAXHD) {
        for (int p = 0; p < nb; p++)
            for (int g = 0; g < G; g++)
                e[(size_t)g * es + p] =
                    (f16 ? dot_f16_512(q + (size_t)g * qstride, (const uint16_t *)K + (size_t)p * stride, hd)
                         : dot_512(q + (size_t)g * qstride, (const float *)K + (size_t)p * stride, hd)) *
                    scale;
        return;
    }
    float buf[ATT_ROWS * ATT_MAXHD] __attribute__((aligned(64)));
    for (int p0 = 0; p0 < nb; p0 += ATT_ROWS) {
        const int n = nb - p0 < ATT_ROWS ? nb - p0 : ATT_ROWS;
        size_t rs;
        const float *R = att_rows(K, f16, stride, p0, n, hd, buf, &rs);
        for (int g = 0; g < G; g += 4) { /* tiles of 4 heads x 2 rows: 16 accumulators */
            const int nq = G - g < 4 ? G - g : 4;
            const float *qq[4];
            for (int a = 0; a < nq; a++) qq[a] = q + (size_t)(g + a) * qstride;
            float *eg = e + (size_t)g * es;
            for (int r = 0; r < n; r += 2) {
                const float *kk[2] = {R + (size_t)r * rs, R + (size_t)(r + (r + 1 < n)) * rs};
                if (r + 1 < n) switch (nq) {
                    case 4: TILE_CASE(4, 2); break;
                    case 3: TILE_CASE(3, 2); break;
                    case 2: TILE_CASE(2, 2); break;
                    default: TILE_CASE(1, 2); break;
                    }
                else switch (nq) {
                    case 4: TILE_CASE(4, 1); break;
                    case 3: TILE_CASE(3, 1); break;
                    case 2: TILE_CASE(2, 1); break;
                    default: TILE_CASE(1, 1); break;
                    }
            }
        }
    }
}

/* NG heads' outputs, 32 values each, in registers across n rows: y = fma(a, x, y) row by row (axpy_512) */
static inline __attribute__((always_inline)) void
att_mix_tile(int NG, float *const *o, const float *const *eg, const float *R, size_t rs, int n, int d) {
    __m512 y0[8], y1[8];
    UNROLL for (int a = 0; a < NG; a++) y0[a] = _mm512_loadu_ps(o[a] + d),
                                        y1[a] = _mm512_loadu_ps(o[a] + d + 16);
    for (int r = 0; r < n; r++) {
        const __m512 x0 = _mm512_loadu_ps(R + (size_t)r * rs + d),
                     x1 = _mm512_loadu_ps(R + (size_t)r * rs + d + 16);
        UNROLL for (int a = 0; a < NG; a++) {
            const __m512 va = _mm512_set1_ps(eg[a][r]);
            y0[a] = _mm512_fmadd_ps(va, x0, y0[a]);
            y1[a] = _mm512_fmadd_ps(va, x1, y1[a]);
        }
    }
    UNROLL for (int a = 0; a < NG; a++) _mm512_storeu_ps(o[a] + d, y0[a]),
        _mm512_storeu_ps(o[a] + d + 16, y1[a]);
}

static void attn_mix_512(float *out, size_t ostride, int G, const float *e, int es, const void *V, bool f16,
                         size_t stride, int nb, int hd) {
    if (hd % 32 || hd > ATT_MAXHD) {
        for (int p = 0; p < nb; p++)
            for (int g = 0; g < G; g++) {
                if (f16)
                    axpy_f16_512(out + (size_t)g * ostride, e[(size_t)g * es + p],
                                 (const uint16_t *)V + (size_t)p * stride, hd);
                else
                    axpy_512(out + (size_t)g * ostride, e[(size_t)g * es + p],
                             (const float *)V + (size_t)p * stride, hd);
            }
        return;
    }
    float buf[ATT_ROWS * ATT_MAXHD] __attribute__((aligned(64)));
    for (int p0 = 0; p0 < nb; p0 += ATT_ROWS) {
        const int n = nb - p0 < ATT_ROWS ? nb - p0 : ATT_ROWS;
        size_t rs;
        const float *R = att_rows(V, f16, stride, p0, n, hd, buf, &rs);
        for (int g = 0; g < G; g += 8) { /* 8 heads x 32 values: 16 accumulators */
            const int ng = G - g < 8 ? G - g : 8;
            float *o[8];
            const float *eg[8];
            for (int a = 0; a < ng; a++)
                o[a] = out + (size_t)(g + a) * ostride, eg[a] = e + (size_t)(g + a) * es + p0;
            for (int d = 0; d < hd; d += 32) switch (ng) {
                case 8: att_mix_tile(8, o, eg, R, rs, n, d); break;
                case 7: att_mix_tile(7, o, eg, R, rs, n, d); break;
                case 6: att_mix_tile(6, o, eg, R, rs, n, d); break;
                case 5: att_mix_tile(5, o, eg, R, rs, n, d); break;
                case 4: att_mix_tile(4, o, eg, R, rs, n, d); break;
                case 3: att_mix_tile(3, o, eg, R, rs, n, d); break;
                case 2: att_mix_tile(2, o, eg, R, rs, n, d); break;
                default: att_mix_tile(1, o, eg, R, rs, n, d); break;
                }
        }
    }
}

static vec_ops table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
    const vec_ops *a = vec_avx2_table();
    table = (vec_ops){"avx512",    dot_512,        axpy_512,        a->delta_step, a->delta_step_hot,
                      dot_f16_512, axpy_f16_512,   attn_scores_512, attn_mix_512,  a->attn_softmax,
                      a->silu_mul, a->sigmoid_mul, a->axpy_d};
}

const vec_ops *vec_avx512_table(void) {
    pthread_once(&table_once, table_init);
    return &table;
}
