/* quant_iq.c — the "i-quants" (IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M):
 * scalar dequantisation (bit-exact with ggml / gguf-py) and the scalar integer dot product
 * against Q8_K activations.
 *
 * Most IQ types store, per group of 8 (or 4) values, an index into a codebook ("grid") of
 * magnitude vectors plus sign bits, and one small odd integer scale per 32 values. The grids are
 * generated data (quant_tables.c); byte j of a grid entry is value j of the group.
 * The dot products keep everything integer per 32-value block: sum(grid * sign * q8) times the
 * integer block scale (2s+1), and fold the constant factors (0.125, 0.25, ...) in at the end.
 * Tested by tests/test_quant_oracle.py and tests/c/test_quant.c.
 */
#include <string.h>

#include "gguf/quant_impl.h"

static inline int grid8(uint64_t g, int j) { return (int)(uint8_t)(g >> (8 * j)); }
static inline int grid8s(uint64_t g, int j) { return (int)(int8_t)(g >> (8 * j)); }
static inline int grid4(uint32_t g, int j) { return (int)(uint8_t)(g >> (8 * j)); }
static inline float sgn(uint8_t signs, int j) { return (signs & kmask_iq2xs[j]) ? -1.0f : 1.0f; }
static inline int sgni(uint8_t signs, int j) { return (signs & kmask_iq2xs[j]) ? -1 : 1; }

/* Integer dot of one group of 8 grid magnitudes (with sign mask) against 8 activations. */
static inline int dot8_u64(uint64_t g, uint8_t signs, const int8_t *q8) {
    int s = 0;
    for (int j = 0; j < 8; j++) s += sgni(signs, j) * grid8(g, j) * q8[j];
    return s;
}

/* One group of 8 values (grid magnitudes with sign mask) times db: the float twin of dot8_u64. */
static inline void put8_u64(float *o, float db, uint64_t g, uint8_t signs) {
    for (int j = 0; j < 8; j++) o[j] = db * (float)grid8(g, j) * sgn(signs, j);
}

/* One group of 8 values from two 4-value grid entries (the IQ3 types) with sign mask, times db. */
static inline void put8_grid4x2(float *o, float db, uint32_t g1, uint32_t g2, uint8_t signs) {
    for (int j = 0; j < 4; j++) {
        o[j] = db * (float)grid4(g1, j) * sgn(signs, j);
        o[j + 4] = db * (float)grid4(g2, j) * sgn(signs, j + 4);
    }
}

/* Integer dot of one group of 8 (two 4-value grid entries, sign mask) against 8 activations. */
static inline int dot8_grid4x2(uint32_t g1, uint32_t g2, uint8_t signs, const int8_t *q8) {
    int s = 0;
    for (int j = 0; j < 4; j++)
        s += sgni(signs, j) * grid4(g1, j) * q8[j] + sgni(signs, j + 4) * grid4(g2, j) * q8[4 + j];
    return s;
}

/* ---- IQ4_XS (136 B) ------------------------------------------------------------------------
 *  | d fp16 | scales_h u16 | scales_l[4] | qs[128] |
 *  32-value block b: 6-bit scale ls = (scales_l[b/2] >> 4*(b%2)) & 15 | ((scales_h >> 2b) & 3) << 4
 *  qs[16b .. 16b+15]: low nibbles -> values 32b+j, high nibbles -> values 32b+16+j
 *  x = d * (ls - 32) * kvalues_iq4nl[code]                                               */

static inline int iq4xs_scale(const blk_iq4_xs *b, int ib) {
    const int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15;
    const int hi = (b->scales_h >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

void quant_to_float_iq4_xs(const void *src, float *dst, int64_t n) {
    const blk_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float dl = d * (float)iq4xs_scale(&b[i], ib);
            const uint8_t *qs = b[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                dst[32 * ib + j] = dl * (float)kvalues_iq4nl[qs[j] & 15];
                dst[32 * ib + 16 + j] = dl * (float)kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

float quant_vec_dot_iq4_xs(int64_t n, const void *w, const void *act) {
    const blk_iq4_xs *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *qs = x[i].qs + 16 * ib;
            const int8_t *q8 = y[i].qs + 32 * ib;
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += kvalues_iq4nl[qs[j] & 15] * q8[j] + kvalues_iq4nl[qs[j] >> 4] * q8[16 + j];
            isum += iq4xs_scale(&x[i], ib) * s;
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}

/* ---- IQ2_XXS (66 B) ------------------------------------------------------------------------
 *  | d fp16 | 8 x (w0 u32, w1 u32) |   one pair per 32-value block b
 *  w0: four grid indices (byte l -> iq2xxs_grid entry for group l of 8 values)
 *  w1: bits 7l+6..7l = sign index of group l (ksigns_iq2xs), bits 31..28 = scale s
 *  x = d * (0.5 + s) * 0.25 * grid * sign      (= d * (2s+1) / 8 * grid * sign)          */

void quant_to_float_iq2_xxs(const void *src, float *dst, int64_t n) {
    const blk_iq2_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t w0 = rl_le32(b[i].qs + 4 * ib), w1 = rl_le32(b[i].qs + 4 * ib + 2);
            const float db = d * (0.5f + (float)(w1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = iq2xxs_grid[(w0 >> (8 * l)) & 255];
                const uint8_t s = ksigns_iq2xs[(w1 >> (7 * l)) & 127];
                put8_u64(dst + 32 * ib + 8 * l, db, g, s);
            }
        }
    }
}

float quant_vec_dot_iq2_xxs(int64_t n, const void *w, const void *act) {
    const blk_iq2_xxs *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t w0 = rl_le32(x[i].qs + 4 * ib), w1 = rl_le32(x[i].qs + 4 * ib + 2);
            const int8_t *q8 = y[i].qs + 32 * ib;
            int s = 0;
            for (int l = 0; l < 4; l++)
                s += dot8_u64(iq2xxs_grid[(w0 >> (8 * l)) & 255], ksigns_iq2xs[(w1 >> (7 * l)) & 127],
                              q8 + 8 * l);
            bsum += s * (int)(2 * (w1 >> 28) + 1);
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.125f * sumf;
}

/* ---- IQ2_XS (74 B) -------------------------------------------------------------------------
 *  | d fp16 | qs[32] u16 | scales[8] |
 *  qs[4b+l] (group l of block b): bits 8..0 = iq2xs_grid index, bits 15..9 = ksigns index
 *  scales[b]: low nibble = s for groups 0,1; high nibble = s for groups 2,3
 *  x = d * (0.5 + s) * 0.25 * grid * sign                                                 */

/* IQ2_XS / IQ2_S: a 32-value block's two 16-value scales s (low nibble: groups 0-1, high: 2-3),
 * as float factors d * (0.5 + s) * 0.25 and as the dot product's integer 2s+1 weights. */
static inline void iq2_half_scales(float d, uint8_t sc, float db[2]) {
    db[0] = d * (0.5f + (float)(sc & 15)) * 0.25f;
    db[1] = d * (0.5f + (float)(sc >> 4)) * 0.25f;
}
static inline int iq2_half_sum(const int s[2], uint8_t sc) {
    return s[0] * (2 * (sc & 15) + 1) + s[1] * (2 * (sc >> 4) + 1);
}

void quant_to_float_iq2_xs(const void *src, float *dst, int64_t n) {
    const blk_iq2_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            float db[2];
            iq2_half_scales(d, b[i].scales[ib], db);
            for (int l = 0; l < 4; l++) {
                const uint16_t e = b[i].qs[4 * ib + l];
                const uint64_t g = iq2xs_grid[e & 511];
                const uint8_t s = ksigns_iq2xs[e >> 9];
                put8_u64(dst + 32 * ib + 8 * l, db[l / 2], g, s);
            }
        }
    }
}

float quant_vec_dot_iq2_xs(int64_t n, const void *w, const void *act) {
    const blk_iq2_xs *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int8_t *q8 = y[i].qs + 32 * ib;
            int s[2] = {0, 0};
            for (int l = 0; l < 4; l++) {
                const uint16_t e = x[i].qs[4 * ib + l];
                s[l / 2] += dot8_u64(iq2xs_grid[e & 511], ksigns_iq2xs[e >> 9], q8 + 8 * l);
            }
            bsum += iq2_half_sum(s, x[i].scales[ib]);
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.125f * sumf;
}

/* ---- IQ2_S (82 B) --------------------------------------------------------------------------
 *  | d fp16 | qs[32] index low bytes | signs[32] | qh[8] | scales[8] |
 *  group l of block b: index = qs[4b+l] | ((qh[b] >> 2l) & 3) << 8   (10 bits, iq2s_grid)
 *                      signs = signs[4b+l] (explicit 8 sign bits)
 *  scales as IQ2_XS; x = d * (0.5 + s) * 0.25 * grid * sign                                 */

static inline uint64_t iq2s_group(const blk_iq2_s *b, int ib, int l) {
    return iq2s_grid[b->qs[4 * ib + l] | (((b->qh[ib] >> (2 * l)) & 3) << 8)];
}

void quant_to_float_iq2_s(const void *src, float *dst, int64_t n) {
    const blk_iq2_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            float db[2];
            iq2_half_scales(d, b[i].scales[ib], db);
            for (int l = 0; l < 4; l++) {
                const uint64_t g = iq2s_group(&b[i], ib, l);
                const uint8_t s = b[i].qs[32 + 4 * ib + l];
                put8_u64(dst + 32 * ib + 8 * l, db[l / 2], g, s);
            }
        }
    }
}

float quant_vec_dot_iq2_s(int64_t n, const void *w, const void *act) {
    const blk_iq2_s *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int8_t *q8 = y[i].qs + 32 * ib;
            int s[2] = {0, 0};
            for (int l = 0; l < 4; l++)
                s[l / 2] += dot8_u64(iq2s_group(&x[i], ib, l), x[i].qs[32 + 4 * ib + l], q8 + 8 * l);
            bsum += iq2_half_sum(s, x[i].scales[ib]);
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.125f * sumf;
}

/* ---- IQ3_XXS (98 B) ------------------------------------------------------------------------
 *  | d fp16 | idx[64] | 8 x w u32 |
 *  block b, group l (8 values): values 0..3 = iq3xxs_grid[idx[8b+2l]], 4..7 = [idx[8b+2l+1]]
 *  w (LE u32 at byte 64+4b of the data): bits 7l+6..7l = ksigns index of group l, 31..28 = s
 *  x = d * (0.5 + s) * 0.5 * grid * sign        (= d * (2s+1) / 4 * ...)                   */

void quant_to_float_iq3_xxs(const void *src, float *dst, int64_t n) {
    const blk_iq3_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t w = rl_le32(b[i].qs + 64 + 4 * ib);
            const float db = d * (0.5f + (float)(w >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t s = ksigns_iq2xs[(w >> (7 * l)) & 127];
                const uint32_t g1 = iq3xxs_grid[b[i].qs[8 * ib + 2 * l]];
                const uint32_t g2 = iq3xxs_grid[b[i].qs[8 * ib + 2 * l + 1]];
                put8_grid4x2(dst + 32 * ib + 8 * l, db, g1, g2, s);
            }
        }
    }
}

float quant_vec_dot_iq3_xxs(int64_t n, const void *w, const void *act) {
    const blk_iq3_xxs *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t aux = rl_le32(x[i].qs + 64 + 4 * ib);
            const int8_t *q8 = y[i].qs + 32 * ib;
            int s = 0;
            for (int l = 0; l < 4; l++) {
                const uint8_t sg = ksigns_iq2xs[(aux >> (7 * l)) & 127];
                const uint32_t g1 = iq3xxs_grid[x[i].qs[8 * ib + 2 * l]];
                const uint32_t g2 = iq3xxs_grid[x[i].qs[8 * ib + 2 * l + 1]];
                s += dot8_grid4x2(g1, g2, sg, q8 + 8 * l);
            }
            bsum += s * (int)(2 * (aux >> 28) + 1);
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.25f * sumf;
}

/* ---- IQ3_S (110 B) -------------------------------------------------------------------------
 *  | d fp16 | qs[64] | qh[8] | signs[32] | scales[4] |
 *  block b, group l: values 0..3 = iq3s_grid[qs[8b+2l]   | bit 2l   of qh[b] << 8],
 *                    values 4..7 = iq3s_grid[qs[8b+2l+1] | bit 2l+1 of qh[b] << 8];
 *  sign bits: signs[4b+l]; scale s = (scales[b/2] >> 4*(b%2)) & 15
 *  x = d * (1 + 2s) * grid * sign                                                          */

static inline uint32_t iq3s_group(const blk_iq3_s *b, int ib, int k) { /* k: 0..7 half-group */
    return iq3s_grid[b->qs[8 * ib + k] | (((b->qh[ib] >> k) & 1) << 8)];
}

void quant_to_float_iq3_s(const void *src, float *dst, int64_t n) {
    const blk_iq3_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db = d * (float)(1 + 2 * ((b[i].scales[ib / 2] >> (4 * (ib % 2))) & 15));
            for (int l = 0; l < 4; l++) {
                const uint8_t s = b[i].signs[4 * ib + l];
                const uint32_t g1 = iq3s_group(&b[i], ib, 2 * l), g2 = iq3s_group(&b[i], ib, 2 * l + 1);
                put8_grid4x2(dst + 32 * ib + 8 * l, db, g1, g2, s);
            }
        }
    }
}

float quant_vec_dot_iq3_s(int64_t n, const void *w, const void *act) {
    const blk_iq3_s *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int8_t *q8 = y[i].qs + 32 * ib;
            int s = 0;
            for (int l = 0; l < 4; l++) {
                const uint8_t sg = x[i].signs[4 * ib + l];
                const uint32_t g1 = iq3s_group(&x[i], ib, 2 * l), g2 = iq3s_group(&x[i], ib, 2 * l + 1);
                s += dot8_grid4x2(g1, g2, sg, q8 + 8 * l);
            }
            bsum += s * (1 + 2 * ((x[i].scales[ib / 2] >> (4 * (ib % 2))) & 15));
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return sumf;
}

/* ---- IQ1_S (50 B) --------------------------------------------------------------------------
 *  | d fp16 | qs[32] | qh[8] u16 |
 *  block b: h = qh[b]; group l index = qs[4b+l] | ((h >> 3l) & 7) << 8  (11 bits, iq1s_grid,
 *  entries are 8 signed values in {-1, 0, +1}); scale s = (h >> 12) & 7;
 *  delta = (h & 0x8000) ? -0.125 : +0.125
 *  x = d * (2s+1) * (grid + delta)
 * Dot: sum (2s+1) * (sum grid*q8 + delta * sum q8); sum q8 over the block is bsums[2b]+[2b+1]. */

static inline uint64_t iq1s_group(const blk_iq1_s *b, int ib, int l) {
    return iq1s_grid[b->qs[4 * ib + l] | (((b->qh[ib] >> (3 * l)) & 7) << 8)];
}

void quant_to_float_iq1_s(const void *src, float *dst, int64_t n) {
    const blk_iq1_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t h = b[i].qh[ib];
            const float dl = d * (float)(2 * ((h >> 12) & 7) + 1);
            const float delta = (h & 0x8000) ? -IQ1S_DELTA : IQ1S_DELTA;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = iq1s_group(&b[i], ib, l);
                for (int j = 0; j < 8; j++) dst[32 * ib + 8 * l + j] = dl * ((float)grid8s(g, j) + delta);
            }
        }
    }
}

float quant_vec_dot_iq1_s(int64_t n, const void *w, const void *act) {
    const blk_iq1_s *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi1 = 0, sumi2 = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t h = x[i].qh[ib];
            const int ls = 2 * ((h >> 12) & 7) + 1;
            const int8_t *q8 = y[i].qs + 32 * ib;
            int s = 0;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = iq1s_group(&x[i], ib, l);
                for (int j = 0; j < 8; j++) s += grid8s(g, j) * q8[8 * l + j];
            }
            sumi1 += ls * s;
            sumi2 += ls * ((h & 0x8000) ? -1 : 1) * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * ((float)sumi1 + IQ1S_DELTA * (float)sumi2);
    }
    return sumf;
}

/* ---- IQ1_M (56 B) --------------------------------------------------------------------------
 *  | qs[32] | qh[16] | scales[8] = four LE u16 |      (no separate d field)
 *  d = fp16 whose 4 nibbles are the top nibbles of the four scale words (quant_iq1m_d).
 *  block b: t = scale word b/2, o = 6*(b%2); groups 0,1 use s1 = (t >> o) & 7, groups 2,3 use
 *  s2 = (t >> (o+3)) & 7. qh[2b] serves groups 0,1 and qh[2b+1] groups 2,3: per group a nibble
 *  whose bits 2..0 are index bits 10..8 and whose bit 3 is the delta sign (set -> -0.125).
 *  index = qs[4b+l] | (nibble & 7) << 8;    x = d * (2s+1) * (grid + delta)
 * Deltas are per 8 values, so the dot sums q8 per group directly (bsums are per 16).       */

static inline int iq1m_nibble(const blk_iq1_m *b, int ib, int l) {
    return (b->qh[2 * ib + l / 2] >> (4 * (l & 1))) & 15;
}
static inline int iq1m_scale(const blk_iq1_m *b, int ib, int l) {
    const uint16_t t = rl_le16(b->scales + 2 * (ib / 2));
    return (t >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
}

void quant_to_float_iq1_m(const void *src, float *dst, int64_t n) {
    const blk_iq1_m *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = quant_iq1m_d(&b[i]);
        for (int ib = 0; ib < 8; ib++) {
            for (int l = 0; l < 4; l++) {
                const float dl = d * (float)(2 * iq1m_scale(&b[i], ib, l) + 1);
                const int nib = iq1m_nibble(&b[i], ib, l);
                const float delta = (nib & 8) ? -IQ1S_DELTA : IQ1S_DELTA;
                const uint64_t g = iq1s_grid[b[i].qs[4 * ib + l] | ((nib & 7) << 8)];
                for (int j = 0; j < 8; j++) dst[32 * ib + 8 * l + j] = dl * ((float)grid8s(g, j) + delta);
            }
        }
    }
}

float quant_vec_dot_iq1_m(int64_t n, const void *w, const void *act) {
    const blk_iq1_m *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi1 = 0, sumi2 = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int8_t *q8 = y[i].qs + 32 * ib;
            for (int l = 0; l < 4; l++) {
                const int ls = 2 * iq1m_scale(&x[i], ib, l) + 1;
                const int nib = iq1m_nibble(&x[i], ib, l);
                const uint64_t g = iq1s_grid[x[i].qs[4 * ib + l] | ((nib & 7) << 8)];
                int s = 0, sq = 0;
                for (int j = 0; j < 8; j++) {
                    s += grid8s(g, j) * q8[8 * l + j];
                    sq += q8[8 * l + j];
                }
                sumi1 += ls * s;
                sumi2 += ls * ((nib & 8) ? -sq : sq);
            }
        }
        sumf += quant_iq1m_d(&x[i]) * y[i].d * ((float)sumi1 + IQ1S_DELTA * (float)sumi2);
    }
    return sumf;
}
