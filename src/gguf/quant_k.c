/* quant_k.c — K-quants (Q2_K .. Q6_K) and the Q8_K activation format: scalar dequantisation
 * (bit-exact with ggml / gguf-py) and the scalar integer dot product against Q8_K.
 * All are 256-value super-blocks split into 16- or 32-value sub-blocks with small integer
 * scales; fp16 d (and dmin) multiply those. Layouts are in the comment above each type.
 * Tested by tests/test_quant_oracle.py and tests/c/test_quant.c.
 */
#include <math.h>
#include <string.h>

#include "gguf/quant_impl.h"

/* ---- Q8_K (activation side) ----------------------------------------------------------------
 *  | d f32 | qs[256] int8 | bsums[16] int16 |   x = d * q;   bsums[k] = sum q[16k..16k+15]
 * Quantiser: xmax = the value of largest |x| (sign kept), iscale = -127/xmax,
 * q = min(127, nearest_even(iscale * x)), d = 1/iscale. The sign flip makes the extreme value
 * map to -127, so +128 never occurs. */

void quant_to_float_q8_k(const void *src, float *dst, int64_t n) {
    const blk_q8_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) dst[i * QK_K + j] = b[i].d * (float)b[i].qs[j];
}

void quant_from_float_q8_k(const float *src, void *dst, int64_t n) {
    blk_q8_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + i * QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = quant_nearest_int(iscale * x[j]);
            b[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int k = 0; k < QK_K / 16; k++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += b[i].qs[16 * k + j];
            b[i].bsums[k] = (int16_t)s;
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- Q2_K (84 B) ---------------------------------------------------------------------------
 *  | scales[16] | qs[64] | d fp16 | dmin fp16 |
 *  scales[k]: bits 7..4 = min m_k, bits 3..0 = scale s_k of 16-value sub-block k.
 *  qs: two halves of 32 bytes; in half h, bits 2j+1..2j of byte l hold value
 *      128h + 32j + l (sub-block 8h+2j for l<16, 8h+2j+1 for l>=16).
 *  x = d * s_k * q - dmin * m_k     (q in 0..3)                                        */

static inline int q2_code(const blk_q2_k *b, int idx) { /* idx 0..255 */
    const int h = idx >> 7, j = (idx >> 5) & 3, l = idx & 31;
    return (b->qs[32 * h + l] >> (2 * j)) & 3;
}

void quant_to_float_q2_k(const void *src, float *dst, int64_t n) {
    const blk_q2_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d), dmin = rl_fp16_to_fp32(b[i].dmin);
        for (int k = 0; k < 16; k++) {
            const float dl = d * (float)(b[i].scales[k] & 15), ml = dmin * (float)(b[i].scales[k] >> 4);
            for (int l = 0; l < 16; l++) dst[16 * k + l] = dl * (float)q2_code(&b[i], 16 * k + l) - ml;
        }
    }
}

float quant_vec_dot_q2_k(int64_t n, const void *w, const void *act) {
    const blk_q2_k *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int summs = 0, isum = 0;
        for (int k = 0; k < 16; k++) summs += (x[i].scales[k] >> 4) * y[i].bsums[k];
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += q2_code(&x[i], 16 * k + l) * y[i].qs[16 * k + l];
            isum += (x[i].scales[k] & 15) * s;
        }
        const float dall = y[i].d * rl_fp16_to_fp32(x[i].d);
        const float dmin = y[i].d * rl_fp16_to_fp32(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

/* ---- Q3_K (110 B) --------------------------------------------------------------------------
 *  | hmask[32] | qs[64] | scales[12] | d fp16 |
 *  low 2 bits: as Q2_K's qs. High bit of value 128h+32j+l: bit (4h+j) of hmask[l] (l 0..31);
 *  a CLEAR bit subtracts 4, so q = low2 - (bit ? 0 : 4) in -4..3.
 *  16 six-bit scales (signed, minus 32):        byte:  0..7  low nibble -> scales 0..7 (bits 3..0)
 *                                                      0..7  high nibble-> scales 8..15 (bits 3..0)
 *    bits 5..4 of scale k: (scales[8 + k%4] >> 2*(k/4)) & 3
 *  x = d * (s_k - 32) * q                                                             */

static inline int q3_scale(const uint8_t *sc, int k) {
    const int lo = k < 8 ? (sc[k] & 15) : (sc[k - 8] >> 4);
    const int hi = (sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

static inline int q3_code(const blk_q3_k *b, int idx) {
    const int h = idx >> 7, j = (idx >> 5) & 3, l = idx & 31;
    const int low = (b->qs[32 * h + l] >> (2 * j)) & 3;
    return low - ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
}

void quant_to_float_q3_k(const void *src, float *dst, int64_t n) {
    const blk_q3_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int k = 0; k < 16; k++) {
            const float dl = d * (float)q3_scale(b[i].scales, k);
            for (int l = 0; l < 16; l++) dst[16 * k + l] = dl * (float)q3_code(&b[i], 16 * k + l);
        }
    }
}

float quant_vec_dot_q3_k(int64_t n, const void *w, const void *act) {
    const blk_q3_k *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += q3_code(&x[i], 16 * k + l) * y[i].qs[16 * k + l];
            isum += q3_scale(x[i].scales, k) * s;
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}

/* ---- Q4_K (144 B) / Q5_K (176 B) -----------------------------------------------------------
 *  Q4_K: | d fp16 | dmin fp16 | scales[12] | qs[128] |
 *  Q5_K: | d fp16 | dmin fp16 | scales[12] | qh[32] | qs[128] |
 *  Eight 32-value sub-blocks, each a 6-bit scale s_k and 6-bit min m_k packed in 12 bytes:
 *     byte 0..3 : [m_{k+4} hi2 | s_k 6 bits]        (bits 7..6 | 5..0)
 *     byte 4..7 : [s_{k+4} hi2 | m_k 6 bits]
 *     byte 8..11: [m_{k+4} lo4 | s_{k+4} lo4]       (k = 0..3)
 *  qs chunk c (32 bytes, c 0..3): low nibbles -> values 64c+l (sub-block 2c), high nibbles ->
 *  values 64c+32+l (sub-block 2c+1). Q5_K's fifth bit: bit 2c (low) / 2c+1 (high) of qh[l].
 *  x = d * s_k * q - dmin * m_k                                                         */

static inline int q4k_code(const uint8_t *qs, int idx) {
    const int c = idx >> 6, hi = (idx >> 5) & 1, l = idx & 31;
    return hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
}

static inline int q5k_code(const blk_q5_k *b, int idx) {
    const int sub = idx >> 5, l = idx & 31;
    return q4k_code(b->qs, idx) | (((b->qh[l] >> sub) & 1) << 4);
}

void quant_to_float_q4_k(const void *src, float *dst, int64_t n) {
    const blk_q4_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d), dmin = rl_fp16_to_fp32(b[i].dmin);
        for (int k = 0; k < 8; k++) {
            uint8_t sc, m;
            quant_k4_scale_min(b[i].scales, k, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) dst[32 * k + l] = d1 * (float)q4k_code(b[i].qs, 32 * k + l) - m1;
        }
    }
}

void quant_to_float_q5_k(const void *src, float *dst, int64_t n) {
    const blk_q5_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d), dmin = rl_fp16_to_fp32(b[i].dmin);
        for (int k = 0; k < 8; k++) {
            uint8_t sc, m;
            quant_k4_scale_min(b[i].scales, k, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) dst[32 * k + l] = d1 * (float)q5k_code(&b[i], 32 * k + l) - m1;
        }
    }
}

/* Shared Q4_K/Q5_K dot: codes[] are the 256 unsigned codes of one super-block. */
static float k45_block_dot(const uint8_t *scales, uint16_t d, uint16_t dmin, const uint8_t *codes,
                           const blk_q8_k *y) {
    int isum = 0, summs = 0;
    for (int k = 0; k < 8; k++) {
        uint8_t sc, m;
        quant_k4_scale_min(scales, k, &sc, &m);
        int s = 0;
        for (int l = 0; l < 32; l++) s += codes[32 * k + l] * y->qs[32 * k + l];
        isum += sc * s;
        summs += m * (y->bsums[2 * k] + y->bsums[2 * k + 1]);
    }
    return y->d * rl_fp16_to_fp32(d) * (float)isum - y->d * rl_fp16_to_fp32(dmin) * (float)summs;
}

float quant_vec_dot_q4_k(int64_t n, const void *w, const void *act) {
    const blk_q4_k *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t codes[QK_K];
        for (int j = 0; j < QK_K; j++) codes[j] = (uint8_t)q4k_code(x[i].qs, j);
        sumf += k45_block_dot(x[i].scales, x[i].d, x[i].dmin, codes, &y[i]);
    }
    return sumf;
}

float quant_vec_dot_q5_k(int64_t n, const void *w, const void *act) {
    const blk_q5_k *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t codes[QK_K];
        for (int j = 0; j < QK_K; j++) codes[j] = (uint8_t)q5k_code(&x[i], j);
        sumf += k45_block_dot(x[i].scales, x[i].d, x[i].dmin, codes, &y[i]);
    }
    return sumf;
}

/* ---- Q6_K (210 B) --------------------------------------------------------------------------
 *  | ql[128] | qh[64] | scales[16] int8 | d fp16 |
 *  Half h (128 values) uses L = ql[64h..], H = qh[32h..]; for l 0..31:
 *     value 128h+l     = L[l]    low nibble | ((H[l] >> 0) & 3) << 4
 *     value 128h+32+l  = L[l+32] low nibble | ((H[l] >> 2) & 3) << 4
 *     value 128h+64+l  = L[l]    high nibble| ((H[l] >> 4) & 3) << 4
 *     value 128h+96+l  = L[l+32] high nibble| ((H[l] >> 6) & 3) << 4
 *  q = code - 32 (in -32..31); 16-value sub-block k has signed scale scales[k].
 *  x = d * scales[k] * q                                                               */

static inline int q6_code(const blk_q6_k *b, int idx) {
    const int h = idx >> 7, r = (idx >> 5) & 3, l = idx & 31;
    const uint8_t L = b->ql[64 * h + l + 32 * (r & 1)];
    const int low = (r & 2) ? L >> 4 : L & 15;
    return (low | (((b->qh[32 * h + l] >> (2 * r)) & 3) << 4)) - 32;
}

void quant_to_float_q6_k(const void *src, float *dst, int64_t n) {
    const blk_q6_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int k = 0; k < 16; k++) {
            const float dl = d * (float)b[i].scales[k];
            for (int l = 0; l < 16; l++) dst[16 * k + l] = dl * (float)q6_code(&b[i], 16 * k + l);
        }
    }
}

float quant_vec_dot_q6_k(int64_t n, const void *w, const void *act) {
    const blk_q6_k *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += q6_code(&x[i], 16 * k + l) * y[i].qs[16 * k + l];
            isum += x[i].scales[k] * s;
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}
