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
 * float epilogue is the scalar reference's expression (src/gguf/quant_k.c, quant_iq.c), so results
 * equal quant_traits.vec_dot exactly. F32/F16/BF16 and the 32-value block types (Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) accumulate floats in lanes instead.
 *
 * Parts: kern_x86_k.h (K-quants, IQ4_XS), kern_x86_iq.h (IQ2/IQ3/IQ1), kern_x86_512.h (512-bit
 * mat-vecs, AVX-512 build only), kern_x86_mm.h (batched kernels for several activation rows).
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

#include "kern/kern.h"
#include "gguf/quant_impl.h"

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

/* Software prefetch of the weight stream, PF_DIST bytes ahead: the hardware streamer stops at
 * 4 KiB page boundaries (and the mapped model file has 4 KiB pages), so without it every page
 * starts with a full-latency miss; measured on the 512 MiB mat-vec benchmark: Q4_K 5.6 -> 8.3
 * GB/s per thread. Harmless past the end of a matrix (prefetches never fault). */
#define PF_DIST 2048
static inline void pf_block(const void *p, size_t bsz) {
    for (size_t off = 0; off < bsz; off += 64) _mm_prefetch((const char *)p + PF_DIST + off, _MM_HINT_T0);
}

/* The 4-row mat-vecs take rows g, g + q, g + 2q and g + 3q together (q = nr / 4; rows 4q.. go one at a
 * time): four sequential streams, each prefetched PF_DIST ahead in its own order (PF_ROWS4), which
 * the one-row kernels' prefetch does for one. Groups of 4 adjacent rows (rows r..r+3, then r+4..)
 * could not prefetch a fixed distance per row (it lands in the group's own rows) and prefetched the
 * whole next group instead: on the session-21 Intel VM one thread then streamed Q4_K from DRAM at
 * 10.0-11.4 GB/s, with four streams at 15.9-16.3 (the machine's one-thread STREAM read: 16.1), and a
 * 2-thread Q4_K_M decode went from 50-55 to 69.5-70.7 tok/s. (An L2 hint for the streams gave
 * 15.9-16.0: T0 kept.) A row's arithmetic does not depend on its group: the same bits. */
#define MV4_ROW(W, rb, g, q, k) ((const uint8_t *)(W) + (size_t)((g) + (int64_t)(k) * (q)) * (rb))
#define PF_ROWS4(x, i)                                                                                       \
    do {                                                                                                     \
        for (int k_ = 0; k_ < 4; k_++) pf_block(&(x)[k_][i], sizeof(x)[k_][i]);                              \
    } while (0)
/* the 4 rows' results (lane k: row g + k q) */
static inline void store4(float *o, int64_t g, int64_t q, __m128 v) {
    float t[4];
    _mm_storeu_ps(t, v);
    for (int k = 0; k < 4; k++) o[g + k * q] = t[k];
}

static inline __m256i loadu(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* int32 lanes += scale16 (per int16 lane) * pairwise sums of u8 * s8 */
static inline __m256i dot_scaled(__m256i acc, __m256i u, __m256i s, __m256i scale16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16));
}

/* int32 lanes += sums of 4 products u8 * s8 (u <= 127 or the pairs never saturate int16). VNNI when
 * available. */
static inline __m256i dot_us(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
/* int32 lanes += sums of 4 products of signed bytes w * a (|a| <= 127). */
static inline __m256i dot_i8(__m256i acc, __m256i w, __m256i a) {
    return dot_us(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
}

static inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

/* shuffle controls: from a 128-bit lane of 8 int16, broadcast int16 #2k (low lane) and #2k+1
 * (high lane) -> the [s_lo x 8 | s_hi x 8] scale vector of 32-value block k (k = 0..3) */
/* Scale vector of block k from a 128-bit lane of 8 int16 (duplicated in both lanes): int16 #2k
 * broadcast to the low lane, #2k+1 to the high lane. The shuffle control for block k is
 * scale_ctrl0() + 4k in every byte; kernels step it by scale_step() instead of loading it. */
static inline __m256i scale_ctrl0(void) {
    return _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                            3, 2, 3, 2, 3);
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
#define ROWS_MATVEC(fname, dotfn, WT, AT, BLK)                                                               \
    static void fname(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, float *o) {           \
        for (int64_t r = 0; r < nr; r++)                                                                     \
            o[r] = dotfn((const WT *)((const uint8_t *)W + (size_t)r * rb), (const AT *)a, nc / (BLK));      \
    }

/* ---- F32 / F16 / Q8_0: N activation rows per weight row ------------------------------------
 * These sum floats in SIMD lanes, so the summation order is part of the result. Each is written
 * once for N activation rows (dotn_*), with each row's float operations exactly those of N = 1:
 * the mat-vec is dotn_*(N = 1) and the batched kernel dotn_*(N > 1), so they agree bit for bit.
 * F32/F16: products in float with FMA, 4 x 8 lanes (AVX-512: 4 x 16 / 2 x 16), tail scalar. */

#define KI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

#if defined(__AVX512F__)
#define F_NT 4 /* activation rows per pass of the batched float kernels */
KI void dotn_f32(const float *w, const float *x, size_t xs, int N, int64_t n, float *o, size_t os) {
    __m512 acc[F_NT][4];
    UNROLL for (int t = 0; t < N; t++) UNROLL for (int k = 0; k < 4; k++) acc[t][k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) UNROLL for (int k = 0; k < 4; k++) {
            const __m512 wv = _mm512_loadu_ps(w + i + 16 * k);
            UNROLL for (int t = 0; t < N; t++) acc[t][k] =
                _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * xs + i + 16 * k), acc[t][k]);
        }
    for (; i + 16 <= n; i += 16) {
        const __m512 wv = _mm512_loadu_ps(w + i);
        UNROLL for (int t = 0; t < N; t++) acc[t][0] =
            _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * xs + i), acc[t][0]);
    }
    UNROLL for (int t = 0; t < N; t++) {
        float s = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
        for (int64_t j = i; j < n; j++) s += w[j] * x[t * xs + j];
        o[t * os] = s;
    }
}
/* F16 weights; activations F16 (x16) or already widened to float (x32: the exact same values, so the
 * same results; the batched kernel widens each activation row once instead of once per weight row) */
KI void dotn_f16a(const uint16_t *w, const uint16_t *x16, const float *x32, size_t xs, int N, int64_t n,
                  float *o, size_t os) {
    __m512 acc[F_NT][2];
    UNROLL for (int t = 0; t < N; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) UNROLL for (int k = 0; k < 2; k++) {
            const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 16 * k)));
            UNROLL for (int t = 0; t < N; t++) acc[t][k] = _mm512_fmadd_ps(
                wv,
                x32 ? _mm512_loadu_ps(x32 + t * xs + i + 16 * k)
                    /* x16 is read only without x32 (the callers give exactly one of them) */
                    // cppcheck-suppress nullPointerArithmetic
                    : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x16 + t * xs + i + 16 * k))),
                acc[t][k]);
        }
    UNROLL for (int t = 0; t < N; t++) {
        float s = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
        // cppcheck-suppress nullPointer ; x16 is read only without x32, as above
        for (int64_t j = i; j < n; j++) s += h2f(w[j]) * (x32 ? x32[t * xs + j] : h2f(x16[t * xs + j]));
        o[t * os] = s;
    }
}
#else
#define F_NT 2
KI void dotn_f32(const float *w, const float *x, size_t xs, int N, int64_t n, float *o, size_t os) {
    __m256 acc[F_NT][4];
    UNROLL for (int t = 0; t < N; t++) UNROLL for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) UNROLL for (int k = 0; k < 4; k++) {
            const __m256 wv = _mm256_loadu_ps(w + i + 8 * k);
            UNROLL for (int t = 0; t < N; t++) acc[t][k] =
                _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * xs + i + 8 * k), acc[t][k]);
        }
    for (; i + 8 <= n; i += 8) {
        const __m256 wv = _mm256_loadu_ps(w + i);
        UNROLL for (int t = 0; t < N; t++) acc[t][0] =
            _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * xs + i), acc[t][0]);
    }
    UNROLL for (int t = 0; t < N; t++) {
        float s =
            hsum_f32(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
        for (int64_t j = i; j < n; j++) s += w[j] * x[t * xs + j];
        o[t * os] = s;
    }
}
KI void dotn_f16a(const uint16_t *w, const uint16_t *x16, const float *x32, size_t xs, int N, int64_t n,
                  float *o, size_t os) {
    __m256 acc[F_NT][4];
    UNROLL for (int t = 0; t < N; t++) UNROLL for (int k = 0; k < 4; k++) acc[t][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) UNROLL for (int k = 0; k < 4; k++) {
            const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8 * k)));
            UNROLL for (int t = 0; t < N; t++) acc[t][k] = _mm256_fmadd_ps(
                wv,
                x32 ? _mm256_loadu_ps(x32 + t * xs + i + 8 * k)
                    /* x16 is read only without x32 (the callers give exactly one of them) */
                    // cppcheck-suppress nullPointerArithmetic
                    : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x16 + t * xs + i + 8 * k))),
                acc[t][k]);
        }
    UNROLL for (int t = 0; t < N; t++) {
        float s =
            hsum_f32(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
        // cppcheck-suppress nullPointer ; x16 is read only without x32, as above
        for (int64_t j = i; j < n; j++) s += h2f(w[j]) * (x32 ? x32[t * xs + j] : h2f(x16[t * xs + j]));
        o[t * os] = s;
    }
}
#endif

/* Q8_0: per block, the int8 dot in 8 int32 lanes, scaled by d_w*d_a into 8 float lanes. */
KI void dotn_q8_0(const blk_q8_0 *x, const uint8_t *act, size_t ab, int N, int64_t nb, float *o, size_t os) {
    __m256 acc[8];
    UNROLL for (int t = 0; t < N; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        const __m256i wv = loadu(x[i].qs), u = _mm256_abs_epi8(wv);
        const float dw = h2f(x[i].d);
        UNROLL for (int t = 0; t < N; t++) {
            const blk_q8_0 *y = (const blk_q8_0 *)(act + t * ab) + i;
            const __m256i p = dot_us(_mm256_setzero_si256(), u, _mm256_sign_epi8(loadu(y->qs), wv));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(y->d)), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < N; t++) o[t * os] = hsum_f32(acc[t]);
}

KI void dotn_f16(const uint16_t *w, const uint16_t *x, size_t xs, int N, int64_t n, float *o, size_t os) {
    dotn_f16a(w, x, NULL, xs, N, n, o, os);
}

/* Float mat-vecs (routers: 512 rows of 4-8 KiB, a row per page): the next row is prefetched while one
 * is summed, since the hardware streamer does not cross into the next page (16-thread decode on the H200
 * host: the F16 router at 64 GB/s against ~100 for the products around it). Same sums (dotn_*). */
static inline void pf_row(const void *row, size_t rb) {
    for (size_t off = 0; off < rb; off += 64) _mm_prefetch((const char *)row + off, _MM_HINT_T0);
}
static void mv_f32(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, float *o) {
    for (int64_t r = 0; r < nr; r++) {
        if (r + 1 < nr) pf_row((const uint8_t *)W + (r + 1) * rb, rb);
        dotn_f32((const float *)((const uint8_t *)W + r * rb), a, 0, 1, nc, o + r, 0);
    }
}
static void mv_f16(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, float *o) {
    for (int64_t r = 0; r < nr; r++) {
        if (r + 1 < nr) pf_row((const uint8_t *)W + (r + 1) * rb, rb);
        dotn_f16((const uint16_t *)((const uint8_t *)W + r * rb), a, 0, 1, nc, o + r, 0);
    }
}
/* Q8_0 mat-vec, four weight rows at a time: each row's float operations are exactly those of
 * dotn_q8_0 with N = 1 (same per-block fmadd into its own 8 lanes, same final reduction), so the
 * results equal the one-row kernel and the batched mm_q8_0 bit for bit; the 4 rows share the
 * activation loads; rows g, g + q, g + 2q, g + 3q (MV4_ROW: four prefetched streams). */
static void mv_q8_0(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, float *o) {
    const int64_t nb = nc / 32;
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_q8_0 *x[4];
        __m256 acc[4];
        for (int k = 0; k < 4; k++) {
            x[k] = (const blk_q8_0 *)MV4_ROW(W, rb, g, q, k);
            acc[k] = _mm256_setzero_ps();
        }
        for (int64_t i = 0; i < nb; i++) {
            PF_ROWS4(x, i);
            const blk_q8_0 *y = (const blk_q8_0 *)a + i;
            const __m256i av = loadu(y->qs);
            const float dy = h2f(y->d);
            UNROLL for (int k = 0; k < 4; k++) {
                const __m256i wv = loadu(x[k][i].qs);
                const __m256i p =
                    dot_us(_mm256_setzero_si256(), _mm256_abs_epi8(wv), _mm256_sign_epi8(av, wv));
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[k][i].d) * dy), acc[k]);
            }
        }
        for (int k = 0; k < 4; k++) o[g + k * q] = hsum_f32(acc[k]);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        dotn_q8_0((const blk_q8_0 *)((const uint8_t *)W + r * rb), a, 0, 1, nb, o + r, 0);
}

/* Batched: activation rows in passes of NT (then 2, then 1) per weight row; a pass reads the
 * weight row once for its NT activation rows. Activation rows in blocks of F_TB, all weight rows per
 * block: with rows outside, every weight row re-read all T activation rows (a 512-row prompt's router
 * input is 4 MiB of F32, past L2, streamed again for each of the 512 router rows); per block they stay
 * in L2 and the weight rows of a call (16-64) are what is re-read. Each output's arithmetic is
 * unchanged (dotn_*), so the order of the loops changes no result. */
#define F_TB 64
#define FLOAT_MATMUL(fname, dotfn, WT, NT, XS, NB)                                                           \
    static void fname(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, size_t ab, int T,     \
                      float *o, size_t ldo) {                                                                \
        const size_t xs = (XS);                                                                              \
        for (int t0 = 0; t0 < T; t0 += F_TB) {                                                               \
            const int t1 = T - t0 < F_TB ? T : t0 + F_TB;                                                    \
            for (int64_t r = 0; r < nr; r++) {                                                               \
                const WT *w = (const WT *)((const uint8_t *)W + r * rb);                                     \
                int t = t0;                                                                                  \
                for (; t + (NT) <= t1; t += (NT))                                                            \
                    dotn_##dotfn(w, (const void *)((const uint8_t *)a + t * ab), xs, NT, NB,                 \
                                 o + t * ldo + r, ldo);                                                      \
                for (; t + 2 <= t1; t += 2)                                                                  \
                    dotn_##dotfn(w, (const void *)((const uint8_t *)a + t * ab), xs, 2, NB, o + t * ldo + r, \
                                 ldo);                                                                       \
                for (; t < t1; t++)                                                                          \
                    dotn_##dotfn(w, (const void *)((const uint8_t *)a + t * ab), xs, 1, NB, o + t * ldo + r, \
                                 ldo);                                                                       \
            }                                                                                                \
        }                                                                                                    \
    }
FLOAT_MATMUL(mm_f32, f32, float, F_NT, ab / sizeof(float), nc)
FLOAT_MATMUL(mm_f16_halves, f16, uint16_t, F_NT, ab / sizeof(uint16_t), nc) /* mm_f16's rows past F16_MAXC */

/* F16: each pass's activation rows are widened to float once (exact), then every weight row of the
 * call runs over them (dotn_f16a: the same products and sums as from the halves, so the same bits as
 * the mat-vec). Widening them again for every weight row cost one conversion per multiply-add: on
 * Intel cores VCVTPH2PS (zmm) is two uops on the FMA ports, so 5 conversions per 4 FMAs left ~9
 * multiply-adds per cycle, and a prompt's F16 router ran at ~32 GMAC/s on two threads of the AMX host;
 * now 1 per 4. Zen 4 converts cheaply: no change measured there (the 2-core VM, router
 * stage 43-54 GMAC/s before and after); the host has not measured it yet. Rows wider than F16_MAXC keep
 * the kernel that widens per weight row (mm_f16_halves, the other float kernels' loops). */
#define F16_MAXC 4096
static void mm_f16(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, size_t ab, int T,
                   float *o, size_t ldo) {
    if (nc > F16_MAXC) {
        mm_f16_halves(W, rb, nr, nc, a, ab, T, o, ldo);
        return;
    }
    float buf[F_NT * F16_MAXC] __attribute__((aligned(64)));
    for (int t = 0; t < T;) {
        const int n = T - t >= F_NT ? F_NT : T - t >= 2 ? 2 : 1;
        for (int k = 0; k < n; k++) {
            const uint16_t *x = (const uint16_t *)((const uint8_t *)a + (size_t)(t + k) * ab);
            for (int64_t j = 0; j < nc; j++) buf[(size_t)k * nc + j] = h2f(x[j]);
        }
        for (int64_t r = 0; r < nr; r++) { /* N a constant in each call, so its loops unroll */
            const uint16_t *w = (const uint16_t *)((const uint8_t *)W + r * rb);
            float *ot = o + (size_t)t * ldo + r;
            if (n == F_NT) dotn_f16a(w, NULL, buf, (size_t)nc, F_NT, nc, ot, ldo);
            else if (n == 2) dotn_f16a(w, NULL, buf, (size_t)nc, 2, nc, ot, ldo);
            else dotn_f16a(w, NULL, buf, (size_t)nc, 1, nc, ot, ldo);
        }
        t += n;
    }
}
FLOAT_MATMUL(mm_q8_0, q8_0, blk_q8_0, 8, ab, nc / 32)

/* bf16 -> f32 is a 16-bit shift; products with FMA in 8 lanes x 2 */
static inline __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static float dot_bf16(const uint16_t *w, const uint16_t *x, int64_t n) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
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

static void quant_f16(const float *x, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = rl_fp32_to_fp16(x[i]);
}

/* ---- Q4_0 / Q5_0 / IQ4_NL / MXFP4 (x Q8_0) and Q4_1 / Q5_1 (x Q8_1) ------------------------------------
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
        const __m256i w =
            _mm256_sub_epi8(_mm256_or_si256(nibbles32(x[i].qs), bit5(x[i].qh)), _mm256_set1_epi8(16));
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

/* MXFP4: IQ4_NL's kernel with the E2M1 table (doubled values) and the power-of-two scale */
static float dot_mxfp4(const blk_mxfp4 *x, const blk_q8_0 *y, int64_t nb) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_mxfp4));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        const __m256i w = _mm256_shuffle_epi8(kv, nibbles32(x[i].qs));
        const __m256i p = dot_i8(_mm256_setzero_si256(), w, loadu(y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(quant_e8m0_half(x[i].e) * h2f(y[i].d)),
                              acc);
    }
    return hsum_f32(acc);
}
ROWS_MATVEC(mv_mxfp4, dot_mxfp4, blk_mxfp4, blk_q8_0, 32)

/* unsigned codes: sum (d q + m) d_a a = d d_a sum q a + m s_a */
static float dot_q4_1(const blk_q4_1 *x, const blk_q8_1 *y, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i p =
            _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles32(x[i].qs), loadu(y[i].qs)), _mm256_set1_epi16(1));
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
        for (int k = 0; k < QK_K; k += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sgnmask, _mm256_loadu_ps(x + k)));
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
            const int mask = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sgnmask, _mm256_loadu_ps(x + k)), am, _CMP_EQ_OQ));
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
                q[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + k + 8 * j))),
                                        lim);
            /* bsums of values k..k+15 and k+16..k+31 */
            b[i].bsums[k / 16] = (int16_t)hsum_i32(_mm256_add_epi32(q[0], q[1]));
            b[i].bsums[k / 16 + 1] = (int16_t)hsum_i32(_mm256_add_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(b[i].qs + k), pack_i32x32(q[0], q[1], q[2], q[3]));
        }
        b[i].d = 1.0f / iscale;
    }
}

#include "kern/kern_x86_k.h"
#include "kern/kern_x86_iq.h"
#include "kern/kern_x86_512.h"
#include "kern/kern_x86_mm.h"
#include "kern/kern_x86_amx.h" /* AMX tiles (kern_cfg_set_amx) */
#include "gguf/quant_repack.h"
#include "kern/kern_x86_repack.h" /* lookup-free IQ layouts (--iq-repack) */

/* ---- the fill function ----------------------------------------------------------------------- */

void KERN_FILL(kern_table *t) {
    t->matvec[QT_F32] = mv_f32;
    t->matvec[QT_F16] = mv_f16;
    t->matvec[QT_BF16] = mv_bf16;
    t->matvec[QT_Q8_0] = mv_q8_0;
    t->matvec[QT_Q4_0] = mv_q4_0;
    t->matvec[QT_Q5_0] = mv_q5_0;
    t->matvec[QT_IQ4_NL] = mv_iq4_nl;
    t->matvec[QT_MXFP4] = mv_mxfp4;
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
    fill_matmul_kq(t);
    t->matmul[QT_F32] = mm_f32;
    t->matmul[QT_F16] = mm_f16;
    t->matmul[QT_Q8_0] = mm_q8_0;
    t->quant[QT_F16] = quant_f16;
    t->quant[QT_Q8_0] = quant_q8_0;
    t->quant[QT_Q8_K] = quant_q8_k;
    fill_512(t);
    fill_amx(t);
    fill_repack(t);
}
