/* kern_x86.h — the x86 SIMD mat-vec kernels, one source compiled twice:
 *   kern_avx2.c   (-mavx2 -mfma -mf16c)            -> kern_fill_avx2
 *   kern_avx512.c (+ AVX-512 F/BW/VL/DQ + VNNI)    -> kern_fill_avx512
 * Included only by those two files. Everything here is static; the including file defines
 * KERN_FILL (the name of its fill function).
 *
 * Integer core: weights and activations are 32-byte vectors of 8-bit codes. maddubs multiplies
 * unsigned weight bytes by signed activation bytes and adds adjacent pairs into int16 (never
 * saturating here: |pair| <= 2*63*127 for the largest code used with it, and 2*128*127 for the
 * abs/sign trick); madd by a vector of int16 block scales then adds pairs again into int32 and
 * applies the scales in one step. Signs (IQ grids store magnitudes) are moved onto the
 * activation with sign_epi8. Per super-block, the int32 lanes are summed horizontally and the
 * float epilogue is the scalar reference's expression (src/quant_k.c, quant_iq.c), so results
 * equal quant_traits.vec_dot exactly. F32/F16/BF16 and the 32-value block types (Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL) accumulate floats in lanes instead.
 */
#ifndef KERN_FILL
#error "kern_x86.h is included by kern_avx2.c / kern_avx512.c only"
#endif

#include <immintrin.h>
#include <string.h>

/* The float epilogues must not be fused into FMAs (the scalar reference, built without FMA,
 * rounds every product): GCC does not contract in ISO C mode (-std=c11); clang needs this. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "kern.h"
#include "quant_impl.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); } /* exact, like rl_fp16_to_fp32 */

static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline float hsum_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256i loadu(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* int32 lanes += scale16 (per int16 lane) * pairwise sums of u8 * s8 */
static inline __m256i dot_scaled(__m256i acc, __m256i u, __m256i s, __m256i scale16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16));
}

/* int32 lanes += sums of 4 products of signed bytes w * a (|a| <= 127). VNNI when available. */
static inline __m256i dot_i8(__m256i acc, __m256i w, __m256i a) {
    const __m256i u = _mm256_abs_epi8(w), s = _mm256_sign_epi8(a, w);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

static inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

/* shuffle controls: from a 128-bit lane of 8 int16, broadcast int16 #2k (low lane) and #2k+1
 * (high lane) -> the [s_lo x 8 | s_hi x 8] scale vector of 32-value block k (k = 0..3) */
/* Scale vector of block k from a 128-bit lane of 8 int16 (duplicated in both lanes): int16 #2k
 * broadcast to the low lane, #2k+1 to the high lane. The shuffle control for block k is
 * scale_ctrl0() + 4k in every byte; kernels step it by scale_step() instead of loading it. */
static inline __m256i scale_ctrl0(void) {
    return _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
}
static inline __m256i scale_step(__m256i ctrl) { return _mm256_add_epi8(ctrl, _mm256_set1_epi8(4)); }

/* sign_epi8 operand from 4 sign bytes (one per group of 8) at p */
static inline __m256i signs_at(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i e = _mm256_shuffle_epi8(_mm256_set1_epi32(v), shuf);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(e, bit), bit), _mm256_set1_epi8(1));
}

/* A mat-vec over rows calling a per-row dot of nb blocks. */
#define ROWS_MATVEC(fname, dotfn, WT, AT, BLK)                                                     \
    static void fname(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, float *o) { \
        for (int64_t r = 0; r < nr; r++)                                                           \
            o[r] = dotfn((const WT *)((const uint8_t *)W + (size_t)r * rb), (const AT *)a, nc / (BLK)); \
    }

/* ---- F32 / F16 ------------------------------------------------------------------------------
 * Products in float with FMA, 4 x 8 lanes (AVX-512: 4 x 16), tail scalar. */

#if defined(__AVX512F__)
static float dot_f32(const float *w, const float *x, int64_t n) {
    __m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16 * k), _mm512_loadu_ps(x + i + 16 * k), acc[k]);
    for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), acc[0]);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}
static float dot_f16(const uint16_t *w, const uint16_t *x, int64_t n) {
    __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 2; k++)
            acc[k] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 16 * k))),
                                     _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16 * k))), acc[k]);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    for (; i < n; i++) s += h2f(w[i]) * h2f(x[i]);
    return s;
}
#else
static float dot_f32(const float *w, const float *x, int64_t n) {
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * k), _mm256_loadu_ps(x + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc[0]);
    float s = hsum_f32(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}
static float dot_f16(const uint16_t *w, const uint16_t *x, int64_t n) {
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8 * k))),
                                     _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * k))), acc[k]);
    float s = hsum_f32(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) s += h2f(w[i]) * h2f(x[i]);
    return s;
}
#endif
ROWS_MATVEC(mv_f32, dot_f32, float, float, 1)
/* bf16 -> f32 is a 16-bit shift; products with FMA in 8 lanes x 2 */
static inline __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static float dot_bf16(const uint16_t *w, const uint16_t *x, int64_t n) {
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc[0] = _mm256_fmadd_ps(bf16x8(w + i), bf16x8(x + i), acc[0]);
        acc[1] = _mm256_fmadd_ps(bf16x8(w + i + 8), bf16x8(x + i + 8), acc[1]);
    }
    float s = hsum_f32(_mm256_add_ps(acc[0], acc[1]));
    for (; i < n; i++) s += rl_bf16_to_fp32(w[i]) * rl_bf16_to_fp32(x[i]);
    return s;
}
ROWS_MATVEC(mv_bf16, dot_bf16, uint16_t, uint16_t, 1)

ROWS_MATVEC(mv_f16, dot_f16, uint16_t, uint16_t, 1)

static void quant_f16(const float *x, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = rl_fp32_to_fp16(x[i]);
}

/* ---- Q8_0 ----------------------------------------------------------------------------------- */

static float dot_q8_0(const blk_q8_0 *x, const blk_q8_0 *y, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i p = dot_i8(_mm256_setzero_si256(), loadu(x[i].qs), loadu(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
    }
    return hsum_f32(acc);
}
ROWS_MATVEC(mv_q8_0, dot_q8_0, blk_q8_0, blk_q8_0, 32)

/* ---- Q4_0 / Q5_0 / IQ4_NL (x Q8_0) and Q4_1 / Q5_1 (x Q8_1) ------------------------------------
 * 32-value blocks: codes of one block fill one vector (low nibbles = values 0..15, high = 16..31);
 * per block the int32 lanes are scaled by d_w*d_a in float lanes, as Q8_0. */

static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}
/* 32 bits (LE) -> bytes 0x10 where set: the fifth bit of Q5 codes */
static inline __m256i bit5(const uint8_t *qh) {
    return _mm256_and_si256(_mm256_andnot_si256(_mm256_set1_epi8(1), signs_at(qh)), _mm256_set1_epi8(0x10));
}

static float dot_q4_0(const blk_q4_0 *x, const blk_q8_0 *y, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i w = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
        const __m256i p = dot_i8(_mm256_setzero_si256(), w, loadu(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
    }
    return hsum_f32(acc);
}
ROWS_MATVEC(mv_q4_0, dot_q4_0, blk_q4_0, blk_q8_0, 32)

static float dot_q5_0(const blk_q5_0 *x, const blk_q8_0 *y, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i w = _mm256_sub_epi8(_mm256_or_si256(nibbles32(x[i].qs), bit5(x[i].qh)), _mm256_set1_epi8(16));
        const __m256i p = dot_i8(_mm256_setzero_si256(), w, loadu(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
    }
    return hsum_f32(acc);
}
ROWS_MATVEC(mv_q5_0, dot_q5_0, blk_q5_0, blk_q8_0, 32)

static float dot_iq4_nl(const blk_iq4_nl *x, const blk_q8_0 *y, int64_t nb) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i w = _mm256_shuffle_epi8(kv, nibbles32(x[i].qs));
        const __m256i p = dot_i8(_mm256_setzero_si256(), w, loadu(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
    }
    return hsum_f32(acc);
}
ROWS_MATVEC(mv_iq4_nl, dot_iq4_nl, blk_iq4_nl, blk_q8_0, 32)

/* unsigned codes: sum (d q + m) d_a a = d d_a sum q a + m s_a */
static float dot_q4_1(const blk_q4_1 *x, const blk_q8_1 *y, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles32(x[i].qs), loadu(y[i].qs)), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
        summ += h2f(x[i].m) * h2f(y[i].s);
    }
    return hsum_f32(acc) + summ;
}
ROWS_MATVEC(mv_q4_1, dot_q4_1, blk_q4_1, blk_q8_1, 32)

static float dot_q5_1(const blk_q5_1 *x, const blk_q8_1 *y, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i c = _mm256_or_si256(nibbles32(x[i].qs), bit5(x[i].qh));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(c, loadu(y[i].qs)), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
        summ += h2f(x[i].m) * h2f(y[i].s);
    }
    return hsum_f32(acc) + summ;
}
ROWS_MATVEC(mv_q5_1, dot_q5_1, blk_q5_1, blk_q8_1, 32)

/* 8 x int32 lanes (4 vectors, 32 values) -> 32 int8 in order */
static inline __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Q8_0 quantiser, byte-identical to the scalar one: d = amax/127 and id = 1/d in scalar float,
 * q = round-half-away-from-zero(x * id) computed exactly as trunc + (|frac| >= 0.5 ? sign : 0). */
static void quant_q8_0(const float *src, void *dst, int64_t n) {
    blk_q8_0 *b = dst;
    const __m256 sgnmask = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + 32 * i;
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sgnmask, v[k]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = rl_fp32_to_fp16(d);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 t = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
            const __m256 tr = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 frac = _mm256_andnot_ps(sgnmask, _mm256_sub_ps(t, tr));
            const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                            _mm256_or_ps(_mm256_and_ps(t, sgnmask), _mm256_set1_ps(1.0f)));
            q[k] = _mm256_cvttps_epi32(_mm256_add_ps(tr, up));
        }
        _mm256_storeu_si256((__m256i *)b[i].qs, pack_i32x32(q[0], q[1], q[2], q[3]));
    }
}

/* ---- Q8_K quantiser --------------------------------------------------------------------------
 * Byte-identical to quant_from_float_q8_k: amax by vector max, the signed extreme is the FIRST
 * element with |x| == amax (as the scalar strict-> scan), q = RNE(iscale*x) via cvtps_epi32,
 * clamped to 127. */
static void quant_q8_k(const float *src, void *dst, int64_t n) {
    blk_q8_k *b = dst;
    const __m256 sgnmask = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + QK_K * i;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sgnmask, _mm256_loadu_ps(x + k)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float max = 0.0f;
        const __m256 am = _mm256_set1_ps(amax);
        for (int k = 0; k < QK_K; k += 8) {
            const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sgnmask, _mm256_loadu_ps(x + k)), am, _CMP_EQ_OQ));
            if (mask) {
                max = x[k + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int k = 0; k < QK_K; k += 32) {
            __m256i q[4];
            for (int j = 0; j < 4; j++)
                q[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + k + 8 * j))), lim);
            /* bsums of values k..k+15 and k+16..k+31 */
            b[i].bsums[k / 16] = (int16_t)hsum_i32(_mm256_add_epi32(q[0], q[1]));
            b[i].bsums[k / 16 + 1] = (int16_t)hsum_i32(_mm256_add_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(b[i].qs + k), pack_i32x32(q[0], q[1], q[2], q[3]));
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- Q2_K ----------------------------------------------------------------------------------- */

static float dot_q2_k(const blk_q2_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m3 = _mm256_set1_epi8(3);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
        const int summs = hsum_i32(_mm256_madd_epi16(mins, loadu(y[i].bsums)));
        const __m256i s16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(15)));
        const __m256i lanes[2] = { _mm256_permute2x128_si256(s16, s16, 0x00), _mm256_permute2x128_si256(s16, s16, 0x11) };
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i Q = loadu(x[i].qs + 32 * h);
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2j, 8h+2j+1 */
            for (int j = 0; j < 4; j++) {
                const __m256i codes = _mm256_and_si256(srl16(Q, 2 * j), m3);
                acc = dot_scaled(acc, codes, loadu(y[i].qs + 128 * h + 32 * j), _mm256_shuffle_epi8(lanes[h], ctrl));
                ctrl = scale_step(ctrl);
            }
        }
        const int isum = hsum_i32(acc);
        const float dall = y[i].d * h2f(x[i].d);
        const float dmin = y[i].d * h2f(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}
ROWS_MATVEC(mv_q2_k, dot_q2_k, blk_q2_k, blk_q8_k, QK_K)

/* ---- Q3_K ------------------------------------------------------------------------------------
 * Unsigned codes c = low2 | hbit << 2 in 0..7 (q = c - 4); the -4 goes through bsums as in Q6_K. */

static float dot_q3_k(const blk_q3_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        /* 16 six-bit scales: low nibbles from bytes 0..7, bits 5..4 from bytes 8..11 */
        uint32_t a[3];
        memcpy(a, x[i].scales, 12);
        const uint32_t k0 = 0x0f0f0f0f, k1 = 0x03030303;
        const uint32_t g0 = (a[0] & k0) | ((a[2] & k1) << 4), g1 = (a[1] & k0) | (((a[2] >> 2) & k1) << 4);
        const uint32_t g2 = ((a[0] >> 4) & k0) | (((a[2] >> 4) & k1) << 4), g3 = ((a[1] >> 4) & k0) | (((a[2] >> 6) & k1) << 4);
        const __m128i s8 = _mm_sub_epi8(_mm_setr_epi32((int)g0, (int)g1, (int)g2, (int)g3), _mm_set1_epi8(32));
        const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
        const int corr = hsum_i32(_mm256_madd_epi16(sc16, loadu(y[i].bsums)));
        const __m256i lanes[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
        const __m256i hm = loadu(x[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i Q = loadu(x[i].qs + 32 * h);
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2j, 8h+2j+1 */
            for (int j = 0; j < 4; j++) {
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, 4 * h + j), one), 2);
                const __m256i codes = _mm256_or_si256(_mm256_and_si256(srl16(Q, 2 * j), m3), hb);
                acc = dot_scaled(acc, codes, loadu(y[i].qs + 128 * h + 32 * j), _mm256_shuffle_epi8(lanes[h], ctrl));
                ctrl = scale_step(ctrl);
            }
        }
        const int isum = hsum_i32(acc) - 4 * corr;
        sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}
ROWS_MATVEC(mv_q3_k, dot_q3_k, blk_q3_k, blk_q8_k, QK_K)

/* ---- Q4_K / Q5_K ---------------------------------------------------------------------------- */

/* Scales and mins of a Q4_K/Q5_K block, unpacked with 32-bit word ops (same bits as
 * quant_k4_scale_min). Sets *lanes to the 8 scales as int16 in both 128-bit lanes and returns the
 * min term sum_k m_k * (bsum_2k + bsum_2k+1). */
static inline int k45_scales(const uint8_t *scales, const blk_q8_k *y, __m256i *lanes) {
    uint32_t u[3];
    memcpy(u, scales, 12);
    const uint64_t sc = (u[0] & 0x3f3f3f3f) | (uint64_t)((u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030)) << 32;
    const uint64_t m = (u[1] & 0x3f3f3f3f) | (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)) << 32;
    *lanes = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m128i mv = _mm_cvtsi64_si128((long long)m); /* each min twice: once per bsum of its 32 */
    return hsum_i32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv)), loadu(y->bsums)));
}
/* shuffle control broadcasting int16 #0 of each lane; +2 per byte selects the next int16 */
static inline __m256i bcast16_ctrl0(void) { return _mm256_set1_epi16(0x0100); }
static inline __m256i bcast16_step(__m256i c) { return _mm256_add_epi8(c, _mm256_set1_epi8(2)); }

static float dot_q4_k(const blk_q4_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(15);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        __m256i lanes, ctrl = bcast16_ctrl0();
        const int summs = k45_scales(x[i].scales, &y[i], &lanes);
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = loadu(x[i].qs + 32 * c);
            const __m256i s0 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            const __m256i s1 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            acc = dot_scaled(acc, _mm256_and_si256(q, m4), loadu(y[i].qs + 64 * c), s0);
            acc = dot_scaled(acc, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), loadu(y[i].qs + 64 * c + 32), s1);
        }
        const int isum = hsum_i32(acc);
        sumf += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    return sumf;
}
ROWS_MATVEC(mv_q4_k, dot_q4_k, blk_q4_k, blk_q8_k, QK_K)

static float dot_q5_k(const blk_q5_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        __m256i lanes, ctrl = bcast16_ctrl0();
        const int summs = k45_scales(x[i].scales, &y[i], &lanes);
        const __m256i qh = loadu(x[i].qh);
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = loadu(x[i].qs + 32 * c);
            const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c), one), 4);
            const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c + 1), one), 4);
            const __m256i s0 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            const __m256i s1 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            acc = dot_scaled(acc, _mm256_or_si256(_mm256_and_si256(q, m4), hl), loadu(y[i].qs + 64 * c), s0);
            acc = dot_scaled(acc, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hh),
                             loadu(y[i].qs + 64 * c + 32), s1);
        }
        const int isum = hsum_i32(acc);
        sumf += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    return sumf;
}
ROWS_MATVEC(mv_q5_k, dot_q5_k, blk_q5_k, blk_q8_k, QK_K)

/* ---- Q6_K ------------------------------------------------------------------------------------
 * Codes are dotted unsigned (0..63); the -32 offset is applied once per block through bsums:
 * sum_k s_k sum (c-32) a = sum_k s_k sum c a - 32 sum_k s_k bsum_k. */

static float dot_q6_k(const blk_q6_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const int corr = hsum_i32(_mm256_madd_epi16(sc16, loadu(y[i].bsums)));
        const __m256i lanes[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i L0 = loadu(x[i].ql + 64 * h), L1 = loadu(x[i].ql + 64 * h + 32);
            const __m256i H = loadu(x[i].qh + 32 * h);
            const __m256i c[4] = {
                _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_slli_epi16(_mm256_and_si256(H, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m3), 4)),
            };
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2r, 8h+2r+1 */
            for (int r = 0; r < 4; r++) {
                acc = dot_scaled(acc, c[r], loadu(y[i].qs + 128 * h + 32 * r), _mm256_shuffle_epi8(lanes[h], ctrl));
                ctrl = scale_step(ctrl);
            }
        }
        const int isum = hsum_i32(acc) - 32 * corr;
        sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}
ROWS_MATVEC(mv_q6_k, dot_q6_k, blk_q6_k, blk_q8_k, QK_K)

/* ---- IQ4_XS --------------------------------------------------------------------------------------
 * Codes index the signed codebook with one pshufb; signed weights x signed activations use the
 * abs/sign trick (|w| <= 127, so maddubs pairs stay below 2*127*127). */

static float dot_iq4_xs(const blk_iq4_xs *x, const blk_q8_k *y, int64_t nb) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m128i m4 = _mm_set1_epi8(15);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        /* block scales ls_b - 32: low 4 bits from scales_l nibbles, bits 5..4 from scales_h */
        uint32_t sl;
        memcpy(&sl, x[i].scales_l, 4);
        const __m128i slv = _mm_cvtsi32_si128((int)sl);
        const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(slv, m4), _mm_and_si128(_mm_srli_epi16(slv, 4), m4));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x[i].scales_h), shifts), _mm256_set1_epi32(3));
        const __m256i l32 = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(hi, 4)),
                                             _mm256_set1_epi32(32));
        const __m256i p = _mm256_packs_epi32(l32, l32);
        const __m256i lsv = _mm256_unpacklo_epi16(p, p);
        const __m256i lanes[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00), _mm256_permute2x128_si256(lsv, lsv, 0x11) };
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + 16 * ib));
            const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
            const __m256i w = _mm256_shuffle_epi8(kv, codes);
            const __m256i a = loadu(y[i].qs + 32 * ib);
            acc = dot_scaled(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(a, w), _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq4_xs, dot_iq4_xs, blk_iq4_xs, blk_q8_k, QK_K)

/* ---- IQ2_XXS / IQ2_XS / IQ3_XXS: signs and scales of a whole super-block at once -----------
 * These types store, per group of 8 values, a 7-bit index into ksigns_iq2xs, whose bit 7 is the
 * parity of bits 0..6. We compute the 32 sign bytes of a super-block in vector registers
 * (idx | parity << 7, parity from a nibble table), and the 16 half-block scales as int16 in the
 * layout scale_from() expects (int16 #2k / #2k+1 of each lane = the two halves of block k). */

static inline __m256i ksigns_vec(__m256i idx) { /* 32 indices 0..127 -> sign bytes */
    const __m256i lut = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
                                         0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i par = _mm256_xor_si256(_mm256_shuffle_epi8(lut, _mm256_and_si256(idx, m4)),
                                         _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(idx, 4), m4)));
    return _mm256_or_si256(idx, par);
}

/* 8 words (one per block) holding four 7-bit sign indices at bits 0, 7, 14, 21 -> the 32 sign
 * bytes in block order */
static inline __m256i signs_from_words(__m256i w) {
    const __m256i m = _mm256_set1_epi32(127);
    const __m256i t0 = _mm256_and_si256(w, m), t1 = _mm256_and_si256(_mm256_srli_epi32(w, 7), m);
    const __m256i t2 = _mm256_and_si256(_mm256_srli_epi32(w, 14), m), t3 = _mm256_and_si256(_mm256_srli_epi32(w, 21), m);
    /* in-lane bytes: t0[b], t1[b], t2[b], t3[b] for the lane's 4 blocks b -> regroup by block */
    const __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(t0, t1), _mm256_packs_epi32(t2, t3));
    const __m256i ctrl = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                          0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return ksigns_vec(_mm256_shuffle_epi8(v, ctrl));
}

/* 8 words with a 4-bit scale s in bits 31..28 -> int16 (2s+1), each twice (both halves) */
static inline __m256i scales_from_words(__m256i w) {
    const __m256i l = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(w, 28), 1), _mm256_set1_epi32(1));
    const __m256i p = _mm256_packs_epi32(l, l);
    return _mm256_unpacklo_epi16(p, p);
}

static float dot_iq2_xxs(const blk_iq2_xxs *x, const blk_q8_k *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = (const uint8_t *)x[i].qs; /* 8 x (w0: 4 grid indices, w1: signs + scale) */
        const __m256 A = _mm256_castsi256_ps(loadu(q)), B = _mm256_castsi256_ps(loadu(q + 32));
        const __m256i w1 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(A, B, 0xdd)), 0xd8);
        uint8_t sg[32] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sg, signs_from_words(w1));
        const __m256i lsv = scales_from_words(w1);
        const __m256i lanes[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00), _mm256_permute2x128_si256(lsv, lsv, 0x11) };
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            uint32_t w0;
            memcpy(&w0, q + 8 * ib, 4);
            const __m256i g = _mm256_set_epi64x((long long)iq2xxs_grid[w0 >> 24], (long long)iq2xxs_grid[(w0 >> 16) & 255],
                                                (long long)iq2xxs_grid[(w0 >> 8) & 255], (long long)iq2xxs_grid[w0 & 255]);
            const __m256i a = _mm256_sign_epi8(loadu(y[i].qs + 32 * ib), signs_at(sg + 4 * ib));
            acc = dot_scaled(acc, g, a, _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return 0.125f * sumf;
}
ROWS_MATVEC(mv_iq2_xxs, dot_iq2_xxs, blk_iq2_xxs, blk_q8_k, QK_K)

/* half-block scales of IQ2_XS / IQ2_S: 8 bytes, low nibble -> first 16 values of block b, high
 * nibble -> last 16; as int16 (2s+1) in the scale_ctrl layout */
static inline __m256i iq2_half_scales(const uint8_t *scales) {
    const __m128i m4 = _mm_set1_epi8(15), sc = _mm_loadl_epi64((const __m128i *)scales);
    const __m256i l16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_and_si128(sc, m4), _mm_and_si128(_mm_srli_epi16(sc, 4), m4)));
    return _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
}

static float dot_iq2_xs(const blk_iq2_xs *x, const blk_q8_k *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        /* entries: bits 8..0 grid index, bits 15..9 sign index */
        const __m256i e0 = loadu(x[i].qs), e1 = loadu(x[i].qs + 16);
        const __m256i idx = _mm256_permute4x64_epi64(
            _mm256_packus_epi16(_mm256_srli_epi16(e0, 9), _mm256_srli_epi16(e1, 9)), 0xd8);
        uint8_t sg[32] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sg, ksigns_vec(idx));
        const __m256i lsv = iq2_half_scales(x[i].scales);
        const __m256i lanes[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00), _mm256_permute2x128_si256(lsv, lsv, 0x11) };
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            uint64_t e;
            memcpy(&e, x[i].qs + 4 * ib, 8);
            const __m256i g = _mm256_set_epi64x((long long)iq2xs_grid[(e >> 48) & 511], (long long)iq2xs_grid[(e >> 32) & 511],
                                                (long long)iq2xs_grid[(e >> 16) & 511], (long long)iq2xs_grid[e & 511]);
            const __m256i a = _mm256_sign_epi8(loadu(y[i].qs + 32 * ib), signs_at(sg + 4 * ib));
            acc = dot_scaled(acc, g, a, _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return 0.125f * sumf;
}
ROWS_MATVEC(mv_iq2_xs, dot_iq2_xs, blk_iq2_xs, blk_q8_k, QK_K)

static float dot_iq2_s(const blk_iq2_s *x, const blk_q8_k *y, int64_t nb) {
    /* index = qs[4b+l] | ((qh[b] >> 2l) & 3) << 8, 16 at a time in 16-bit lanes: replicate qh[b] to
     * lanes 4b..4b+3, mask bits 2l..2l+1, multiply by 2^(8-2l) */
    const __m128i rep0 = _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m128i rep1 = _mm_add_epi8(rep0, _mm_set1_epi8(4));
    const __m256i hmask = _mm256_set1_epi64x(0x00c00030000c0003LL), hmul = _mm256_set1_epi64x(0x0004001000400100LL);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t idx[32] __attribute__((aligned(32)));
        const __m128i qh = _mm_loadl_epi64((const __m128i *)x[i].qh);
        for (int v = 0; v < 2; v++) {
            const __m256i h16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(qh, v ? rep1 : rep0));
            const __m256i hi = _mm256_mullo_epi16(_mm256_and_si256(h16, hmask), hmul);
            const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x[i].qs + 16 * v)));
            _mm256_store_si256((__m256i *)idx + v, _mm256_or_si256(lo, hi));
        }
        const __m256i lsv = iq2_half_scales(x[i].scales);
        const __m256i lanes[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00), _mm256_permute2x128_si256(lsv, lsv, 0x11) };
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t *e = idx + 4 * ib;
            const __m256i g = _mm256_set_epi64x((long long)iq2s_grid[e[3]], (long long)iq2s_grid[e[2]],
                                                (long long)iq2s_grid[e[1]], (long long)iq2s_grid[e[0]]);
            const __m256i a = _mm256_sign_epi8(loadu(y[i].qs + 32 * ib), signs_at(x[i].qs + 32 + 4 * ib));
            acc = dot_scaled(acc, g, a, _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return 0.125f * sumf;
}
ROWS_MATVEC(mv_iq2_s, dot_iq2_s, blk_iq2_s, blk_q8_k, QK_K)

/* ---- IQ3_XXS / IQ3_S ------------------------------------------------------------------------- */

static float dot_iq3_xxs(const blk_iq3_xxs *x, const blk_q8_k *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs; /* 64 grid indices, then 8 words of signs + scale */
        const __m256i w = loadu(q + 64);
        uint8_t sg[32] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sg, signs_from_words(w));
        const __m256i lsv = scales_from_words(w);
        const __m256i lanes[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00), _mm256_permute2x128_si256(lsv, lsv, 0x11) };
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            uint64_t gi; /* 8 grid indices: extracting from one load keeps the load ports free */
            memcpy(&gi, q + 8 * ib, 8);
            const __m256i g = _mm256_set_epi32(
                (int)iq3xxs_grid[gi >> 56], (int)iq3xxs_grid[(gi >> 48) & 255], (int)iq3xxs_grid[(gi >> 40) & 255],
                (int)iq3xxs_grid[(gi >> 32) & 255], (int)iq3xxs_grid[(gi >> 24) & 255], (int)iq3xxs_grid[(gi >> 16) & 255],
                (int)iq3xxs_grid[(gi >> 8) & 255], (int)iq3xxs_grid[gi & 255]);
            const __m256i a = _mm256_sign_epi8(loadu(y[i].qs + 32 * ib), signs_at(sg + 4 * ib));
            acc = dot_scaled(acc, g, a, _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return 0.25f * sumf;
}
ROWS_MATVEC(mv_iq3_xxs, dot_iq3_xxs, blk_iq3_xxs, blk_q8_k, QK_K)

static float dot_iq3_s(const blk_iq3_s *x, const blk_q8_k *y, int64_t nb) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL), one = _mm256_set1_epi8(1);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        /* 9-bit indices: qs[k] | (bit k%8 of qh[k/8]) << 8, 64 of them, 32 per step */
        uint16_t idx[64] __attribute__((aligned(32)));
        for (int v = 0; v < 2; v++) {
            int32_t hb;
            memcpy(&hb, x[i].qh + 4 * v, 4);
            const __m256i e = _mm256_shuffle_epi8(_mm256_set1_epi32(hb), shuf);
            const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(e, bit), bit), one);
            const __m256i q = loadu(x[i].qs + 32 * v);
            const __m256i lo = _mm256_unpacklo_epi8(q, h), hi = _mm256_unpackhi_epi8(q, h); /* in-lane interleave */
            _mm256_store_si256((__m256i *)idx + 2 * v, _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_store_si256((__m256i *)idx + 2 * v + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
        }
        /* block scales 1 + 2s, each for both halves */
        uint32_t s4;
        memcpy(&s4, x[i].scales, 4);
        const __m128i sc = _mm_cvtsi32_si128((int)s4), m4 = _mm_set1_epi8(15);
        const __m128i n = _mm_unpacklo_epi8(_mm_and_si128(sc, m4), _mm_and_si128(_mm_srli_epi16(sc, 4), m4));
        const __m256i l16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(n, n));
        const __m256i lsv = _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
        const __m256i lanes[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00), _mm256_permute2x128_si256(lsv, lsv, 0x11) };
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t *k = idx + 8 * ib;
            const __m256i g = _mm256_set_epi32((int)iq3s_grid[k[7]], (int)iq3s_grid[k[6]], (int)iq3s_grid[k[5]],
                                               (int)iq3s_grid[k[4]], (int)iq3s_grid[k[3]], (int)iq3s_grid[k[2]],
                                               (int)iq3s_grid[k[1]], (int)iq3s_grid[k[0]]);
            const __m256i a = _mm256_sign_epi8(loadu(y[i].qs + 32 * ib), signs_at(x[i].signs + 4 * ib));
            acc = dot_scaled(acc, g, a, _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq3_s, dot_iq3_s, blk_iq3_s, blk_q8_k, QK_K)

/* ---- IQ1_S / IQ1_M ------------------------------------------------------------------------------
 * Value = (grid + delta) with grid in {-1,0,1} and delta = +-1/8. We fold the delta into a derived
 * table: iq1_fold[(index << 1) | neg] has bytes 8*grid + (neg ? -1 : +1) + 9, all in 0..18, so a
 * single unsigned maddubs does the whole group: sum (8g + delta8) a = sum (byte) a - 9 sum a, and
 * sum a over 16 values is a bsum. Per super-block with S = sum_k ls_k sum (8g + delta8) a:
 *   sumi1 + sumi2 / 8 = S / 8 exactly, and |S| < 2^22, so (float)S * 0.125f equals the scalar
 *   (float)sumi1 + 0.125f * (float)sumi2 bit for bit. */
static uint64_t iq1_fold[4096];
static void init_iq1_fold(void) {
    for (int i = 0; i < 4096; i++) {
        const uint64_t g = iq1s_grid[i >> 1];
        uint64_t v = 0;
        for (int j = 0; j < 8; j++)
            v |= (uint64_t)(8 * (int)(int8_t)(g >> (8 * j)) + ((i & 1) ? -1 : 1) + 9) << (8 * j);
        iq1_fold[i] = v;
    }
}

/* One super-block: 8 blocks of 4 folded-table keys (KEYS(ib, k0..k3) computes them), the 16
 * half-block scales in lsv (int16). Returns S = sum ls * sum (8g + delta8) a. */
#define IQ1_SUPERBLOCK(S, lsv, y, KEYS)                                                            \
    do {                                                                                           \
        const int corr_ = hsum_i32(_mm256_madd_epi16(lsv, loadu((y)->bsums)));                     \
        const __m256i lanes_[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00),                     \
                                    _mm256_permute2x128_si256(lsv, lsv, 0x11) };                   \
        __m256i acc_ = _mm256_setzero_si256(), ctrl_ = scale_ctrl0();                              \
        for (int ib = 0; ib < 8; ib++) {                                                           \
            unsigned k0, k1, k2, k3;                                                               \
            KEYS(ib, k0, k1, k2, k3);                                                              \
            const __m256i g_ = _mm256_set_epi64x((long long)iq1_fold[k3], (long long)iq1_fold[k2], \
                                                 (long long)iq1_fold[k1], (long long)iq1_fold[k0]); \
            acc_ = dot_scaled(acc_, g_, loadu((y)->qs + 32 * ib), _mm256_shuffle_epi8(lanes_[ib / 4], ctrl_)); \
            ctrl_ = ib == 3 ? scale_ctrl0() : scale_step(ctrl_);                                   \
        }                                                                                          \
        S = hsum_i32(acc_) - 9 * corr_;                                                            \
    } while (0)

static float dot_iq1_s(const blk_iq1_s *x, const blk_q8_k *y, int64_t nb) {
    const __m256i pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9), m7 = _mm256_set1_epi32(7);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        /* ls = 2 * ((qh >> 12) & 7) + 1 per block, duplicated for its two halves */
        const __m128i h = _mm_loadu_si128((const __m128i *)x[i].qh);
        const __m128i l8 = _mm_add_epi16(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(h, 12), _mm_set1_epi16(7)), 1),
                                         _mm_set1_epi16(1));
        const __m256i lsv = _mm256_set_m128i(_mm_unpackhi_epi16(l8, l8), _mm_unpacklo_epi16(l8, l8));
        /* the 32 table keys (qs << 1) | (3 index bits from qh) << 9 | delta sign, 8 at a time
         * in 32-bit lanes (lane j of vector v: block 2v + j/4, group j%4) */
        uint32_t keys[32] __attribute__((aligned(32)));
        const __m256i h32 = _mm256_cvtepu16_epi32(h);
        for (int v = 0; v < 4; v++) {
            const __m256i hp = _mm256_permutevar8x32_epi32(h32, _mm256_add_epi32(pair, _mm256_set1_epi32(2 * v)));
            const __m256i bits = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(hp, sh), m7), 9);
            const __m256i q32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + 8 * v)));
            _mm256_store_si256((__m256i *)keys + v, _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(q32, 1), bits),
                                                                    _mm256_srli_epi32(hp, 15)));
        }
#define IQ1S_KEYS(ib, k0, k1, k2, k3) \
        k0 = keys[4 * ib], k1 = keys[4 * ib + 1], k2 = keys[4 * ib + 2], k3 = keys[4 * ib + 3]
        int S;
        IQ1_SUPERBLOCK(S, lsv, &y[i], IQ1S_KEYS);
#undef IQ1S_KEYS
        sumf += h2f(x[i].d) * y[i].d * ((float)S * 0.125f);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq1_s, dot_iq1_s, blk_iq1_s, blk_q8_k, QK_K)

static float dot_iq1_m(const blk_iq1_m *x, const blk_q8_k *y, int64_t nb) {
    const __m256i sel0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), sel1 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9), m7 = _mm256_set1_epi32(7);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint64_t sc;
        memcpy(&sc, x[i].scales, 8);
        /* d: fp16 from the top nibbles of the 4 scale words */
        const uint16_t dbits = (uint16_t)(((sc >> 12) & 0xf) | ((sc >> 24) & 0xf0) | ((sc >> 36) & 0xf00) |
                                          ((sc >> 48) & 0xf000));
        /* ls[k] = 2 * ((word k/4 >> 3*(k%4)) & 7) + 1, k = 0..15 (one per 16 values) */
        const __m256i w32 = _mm256_cvtepu16_epi32(_mm_cvtsi64_si128((long long)sc));
        const __m256i v0 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(w32, sel0), sh), m7);
        const __m256i v1 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(w32, sel1), sh), m7);
        const __m256i l16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xd8);
        const __m256i lsv = _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
        /* the 32 table keys (qs << 1) | (nibble & 7) << 9 | nibble >> 3, nibble j = 4 bits of qh
         * (low nibble first), in 16-bit lanes */
        uint16_t keys[32] __attribute__((aligned(32)));
        const __m128i qh = _mm_loadu_si128((const __m128i *)x[i].qh), m4 = _mm_set1_epi8(15);
        const __m128i nl = _mm_and_si128(qh, m4), nh = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
        const __m128i nib[2] = { _mm_unpacklo_epi8(nl, nh), _mm_unpackhi_epi8(nl, nh) };
        for (int v = 0; v < 2; v++) {
            const __m256i n16 = _mm256_cvtepu8_epi16(nib[v]);
            const __m256i q16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x[i].qs + 16 * v)));
            const __m256i k = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(q16, 1), _mm256_srli_epi16(n16, 3)),
                                              _mm256_slli_epi16(_mm256_and_si256(n16, _mm256_set1_epi16(7)), 9));
            _mm256_store_si256((__m256i *)keys + v, k);
        }
#define IQ1M_KEYS(ib, k0, k1, k2, k3) \
        k0 = keys[4 * ib], k1 = keys[4 * ib + 1], k2 = keys[4 * ib + 2], k3 = keys[4 * ib + 3]
        int S;
        IQ1_SUPERBLOCK(S, lsv, &y[i], IQ1M_KEYS);
#undef IQ1M_KEYS
        sumf += h2f(dbits) * y[i].d * ((float)S * 0.125f);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq1_m, dot_iq1_m, blk_iq1_m, blk_q8_k, QK_K)

/* ---- the fill function ----------------------------------------------------------------------- */

void KERN_FILL(kern_table *t) {
    init_iq1_fold();
    t->matvec[QT_F32] = mv_f32;
    t->matvec[QT_F16] = mv_f16;
    t->matvec[QT_BF16] = mv_bf16;
    t->matvec[QT_Q8_0] = mv_q8_0;
    t->matvec[QT_Q4_0] = mv_q4_0;
    t->matvec[QT_Q5_0] = mv_q5_0;
    t->matvec[QT_IQ4_NL] = mv_iq4_nl;
    t->matvec[QT_Q4_1] = mv_q4_1;
    t->matvec[QT_Q5_1] = mv_q5_1;
    t->matvec[QT_Q2_K] = mv_q2_k;
    t->matvec[QT_Q3_K] = mv_q3_k;
    t->matvec[QT_Q4_K] = mv_q4_k;
    t->matvec[QT_Q5_K] = mv_q5_k;
    t->matvec[QT_Q6_K] = mv_q6_k;
    t->matvec[QT_IQ4_XS] = mv_iq4_xs;
    t->matvec[QT_IQ2_XXS] = mv_iq2_xxs;
    t->matvec[QT_IQ2_XS] = mv_iq2_xs;
    t->matvec[QT_IQ2_S] = mv_iq2_s;
    t->matvec[QT_IQ3_XXS] = mv_iq3_xxs;
    t->matvec[QT_IQ3_S] = mv_iq3_s;
    t->matvec[QT_IQ1_S] = mv_iq1_s;
    t->matvec[QT_IQ1_M] = mv_iq1_m;
    t->quant[QT_F16] = quant_f16;
    t->quant[QT_Q8_0] = quant_q8_0;
    t->quant[QT_Q8_K] = quant_q8_k;
}
