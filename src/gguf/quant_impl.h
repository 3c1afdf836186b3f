/* quant_impl.h — block layouts and per-type functions shared by quant.c, quant_k.c, quant_iq.c
 * and the SIMD kernels (kern*.c). Not part of the public API: callers use quant.h.
 *
 * Every struct below is the exact on-disk byte layout of one block (little-endian host
 * assumed, as everywhere in Red Lite; `_Static_assert`s pin the sizes). fp16 fields are raw
 * IEEE binary16 bits: read them with rl_fp16_to_fp32(). Fields that are not naturally aligned
 * inside a block (IQ3_XXS scale words, Q5 qh) are byte arrays read with rl_le32().
 */
#ifndef RL_QUANT_IMPL_H
#define RL_QUANT_IMPL_H

#include <stdint.h>
#include "base/common.h"
#include "gguf/quant.h"
#include "gguf/quant_tables.h"

#define QK4_0 32
#define QK8_0 32
#define IQ1S_DELTA 0.125f

/* ---- 32-value "legacy" blocks ------------------------------------------------------------ */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} blk_q4_0; /* 18 B */
typedef struct {
    uint16_t d, m;
    uint8_t qs[16];
} blk_q4_1; /* 20 B */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} blk_q5_0; /* 22 B */
typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} blk_q5_1; /* 24 B */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} blk_q8_0; /* 34 B */
typedef struct {
    uint16_t d, s;
    int8_t qs[32];
} blk_q8_1; /* 36 B: s = d*sum(qs) */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} blk_iq4_nl; /* 18 B */
typedef struct {
    uint8_t e;
    uint8_t qs[16];
} blk_mxfp4; /* 17 B: e = E8M0 scale */

/* ---- 256-value K-quant super-blocks -------------------------------------------------------- */
typedef struct {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
} blk_q2_k; /* 84 */
typedef struct {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
} blk_q3_k; /* 110 */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} blk_q4_k; /* 144 */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} blk_q5_k; /* 176 */
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} blk_q6_k; /* 210 */
/* activation side: d is a plain float; bsums[k] = sum of qs[16k .. 16k+15] */
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} blk_q8_k; /* 292 */

/* ---- 256-value IQ super-blocks ------------------------------------------------------------ */
typedef struct {
    uint16_t d;
    uint16_t qs[32];
} blk_iq2_xxs; /* 66 */
typedef struct {
    uint16_t d;
    uint16_t qs[32];
    uint8_t scales[8];
} blk_iq2_xs; /* 74 */
typedef struct {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t scales[8];
} blk_iq2_s; /* 82 */
typedef struct {
    uint16_t d;
    uint8_t qs[96];
} blk_iq3_xxs; /* 98 */
typedef struct {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
} blk_iq3_s; /* 110 */
typedef struct {
    uint16_t d;
    uint8_t qs[32];
    uint16_t qh[8];
} blk_iq1_s; /* 50 */
typedef struct {
    uint8_t qs[32];
    uint8_t qh[16];
    uint8_t scales[8];
} blk_iq1_m; /* 56 */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
} blk_iq4_xs; /* 136 */

_Static_assert(sizeof(blk_q4_0) == 18 && sizeof(blk_q4_1) == 20 && sizeof(blk_q5_0) == 22 &&
                   sizeof(blk_q5_1) == 24 && sizeof(blk_q8_0) == 34 && sizeof(blk_q8_1) == 36 &&
                   sizeof(blk_iq4_nl) == 18 && sizeof(blk_mxfp4) == 17,
               "legacy block sizes");
_Static_assert(sizeof(blk_q2_k) == 84 && sizeof(blk_q3_k) == 110 && sizeof(blk_q4_k) == 144 &&
                   sizeof(blk_q5_k) == 176 && sizeof(blk_q6_k) == 210 && sizeof(blk_q8_k) == 292,
               "K-quant block sizes");
_Static_assert(sizeof(blk_iq2_xxs) == 66 && sizeof(blk_iq2_xs) == 74 && sizeof(blk_iq2_s) == 82 &&
                   sizeof(blk_iq3_xxs) == 98 && sizeof(blk_iq3_s) == 110 && sizeof(blk_iq1_s) == 50 &&
                   sizeof(blk_iq1_m) == 56 && sizeof(blk_iq4_xs) == 136,
               "IQ block sizes");

/* Round to nearest, ties to even, for |x| < 2^22 (the float magic-number trick: adding
 * 1.5*2^23 leaves the rounded integer in the low mantissa bits). */
static inline int quant_nearest_int(float x) {
    union {
        float f;
        int32_t i;
    } v = {.f = x + 12582912.f};
    return (v.i & 0x007fffff) - 0x00400000;
}

/* MXFP4's E8M0 scale byte as a float, HALVED (2^(e - 128); kvalues_mxfp4 holds the E2M1 values
 * doubled): the bits of 2^(e-128) directly, a subnormal for e < 2 (e = 0: 2^-128, e = 1: 2^-127),
 * never Inf/NaN (e = 255 gives 2^127). Exact, as the gguf package's e8m0_to_fp32_half. */
static inline float quant_e8m0_half(uint8_t e) {
    union {
        uint32_t u;
        float f;
    } v = {.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23};
    return v.f;
}

/* K-quant 6-bit scale/min unpacking shared by Q4_K and Q5_K (12 bytes -> 8 scales, 8 mins). */
static inline void quant_k4_scale_min(const uint8_t *b, int k, uint8_t *sc, uint8_t *m) {
    if (k < 4) {
        *sc = b[k] & 63;
        *m = b[k + 4] & 63;
    } else {
        *sc = (uint8_t)((b[k + 4] & 15) | ((b[k - 4] >> 6) << 4));
        *m = (uint8_t)((b[k + 4] >> 4) | ((b[k] >> 6) << 4));
    }
}

/* IQ1_M super-scale: an fp16 assembled from the top nibble of each of the four u16 scale words. */
static inline float quant_iq1m_d(const blk_iq1_m *b) {
    uint16_t sc[4];
    for (int i = 0; i < 4; i++) sc[i] = rl_le16(b->scales + 2 * i);
    uint16_t bits =
        (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    return rl_fp16_to_fp32(bits);
}

/* Per-type scalar functions (quant_k.c, quant_iq.c). Signatures as in quant_traits. */
#define QUANT_DECL(t)                                                                                        \
    void quant_to_float_##t(const void *src, float *dst, int64_t n);                                         \
    float quant_vec_dot_##t(int64_t n, const void *w, const void *act);
QUANT_DECL(q2_k)
QUANT_DECL(q3_k)
QUANT_DECL(q4_k)
QUANT_DECL(q5_k)
QUANT_DECL(q6_k)
QUANT_DECL(iq4_xs)
QUANT_DECL(iq3_xxs)
QUANT_DECL(iq3_s)
QUANT_DECL(iq2_xxs)
QUANT_DECL(iq2_xs)
QUANT_DECL(iq2_s)
QUANT_DECL(iq1_s)
QUANT_DECL(iq1_m)
#undef QUANT_DECL
void quant_to_float_q8_k(const void *src, float *dst, int64_t n);
void quant_from_float_q8_k(const float *src, void *dst, int64_t n);

#endif
