/* quant.c — the traits table of every supported ggml type, plus the float and 32-value
 * ("legacy") block types and MXFP4. K-quants live in quant_k.c, IQ types in quant_iq.c.
 *
 * Contracts (see quant.h): to_float is bit-exact with ggml's dequantize_row_* / the gguf
 * package (same float operations in the same order, fp16 scales via rl_fp16_to_fp32);
 * from_float rounds as ggml's *_ref quantisers; vec_dot is the scalar integer dot product
 * against the activation quantised to vec_dot_type (per-block integer sums times the block
 * scales), the reference every SIMD kernel in kern*.c is tested against.
 *
 * Tested by tests/test_quant_oracle.py (bit-exact against gguf.quants through
 * build/tools/rl_dequant) and tests/c/test_quant.c (vec_dot vs quant_dot_ref).
 */
#include <math.h>
#include <string.h>

#include "gguf/quant.h"
#include "gguf/quant_impl.h"
#include "gguf/quant_repack.h"

/* ---- F32 / F16 / BF16 --------------------------------------------------------------------- */

static void f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
static void f32_from_float(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
/* Float dot products: product in float, sum in double (as ggml's scalar ggml_vec_dot_f32/_f16). */
static float f32_vec_dot(int64_t n, const void *w, const void *act) {
    const float *a = w, *b = act;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(a[i] * b[i]);
    return (float)s;
}

/* F16 and BF16: the same three functions over each type's own conversions. */
#define HALF_FNS(name, to_fp32, from_fp32)                                                                   \
    static void name##_to_float(const void *src, float *dst, int64_t n) {                                    \
        const uint16_t *s = src;                                                                             \
        for (int64_t i = 0; i < n; i++) dst[i] = to_fp32(s[i]);                                              \
    }                                                                                                        \
    static void name##_from_float(const float *src, void *dst, int64_t n) {                                  \
        uint16_t *d = dst;                                                                                   \
        for (int64_t i = 0; i < n; i++) d[i] = from_fp32(src[i]);                                            \
    }                                                                                                        \
    static float name##_vec_dot(int64_t n, const void *w, const void *act) {                                 \
        const uint16_t *a = w, *b = act;                                                                     \
        double s = 0;                                                                                        \
        for (int64_t i = 0; i < n; i++) s += (double)(to_fp32(a[i]) * to_fp32(b[i]));                        \
        return (float)s;                                                                                     \
    }
HALF_FNS(f16, rl_fp16_to_fp32, rl_fp32_to_fp16)
HALF_FNS(bf16, rl_bf16_to_fp32, rl_fp32_to_bf16)
#undef HALF_FNS

/* ---- Q8_0 / Q8_1 --------------------------------------------------------------------------
 *  Q8_0 (34 B):  | d fp16 | qs[32] int8 |            x[j] = d * qs[j]
 *  Q8_1 (36 B):  | d fp16 | s fp16 | qs[32] int8 |   s = d * sum(qs): lets Q4_1/Q5_1 add their
 *                                                    min term without touching qs again.
 * Quantiser: d = max|x| / 127, q = round-half-away(x / d) (computed as x * (1/d)). */

/* One block's values (the part Q8_0 and Q8_1 share): x[j] = d * qs[j]. */
static void q8_block_to_float(uint16_t d16, const int8_t *qs, float *dst) {
    const float d = rl_fp16_to_fp32(d16);
    for (int j = 0; j < QK8_0; j++) dst[j] = (float)qs[j] * d;
}

/* One block's quantiser (the part Q8_0 and Q8_1 share): fills qs, returns d. */
static float q8_block_from_float(const float *x, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK8_0; j++) qs[j] = (int8_t)roundf(x[j] * id);
    return d;
}

static void q8_0_to_float(const void *src, float *dst, int64_t n) {
    const blk_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++) q8_block_to_float(b[i].d, b[i].qs, dst + i * QK8_0);
}

static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    blk_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++)
        b[i].d = rl_fp32_to_fp16(q8_block_from_float(src + i * QK8_0, b[i].qs));
}

static void q8_1_to_float(const void *src, float *dst, int64_t n) {
    const blk_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++) q8_block_to_float(b[i].d, b[i].qs, dst + i * QK8_0);
}

static void q8_1_from_float(const float *src, void *dst, int64_t n) {
    blk_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = q8_block_from_float(src + i * QK8_0, b[i].qs);
        int sum = 0;
        for (int j = 0; j < QK8_0; j++) sum += b[i].qs[j];
        b[i].d = rl_fp32_to_fp16(d);
        b[i].s = rl_fp32_to_fp16((float)sum * d);
    }
}

static float q8_0_vec_dot(int64_t n, const void *w, const void *act) {
    const blk_q8_0 *x = w, *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (float)sumi * (rl_fp16_to_fp32(x[i].d) * rl_fp16_to_fp32(y[i].d));
    }
    return sumf;
}

/* ---- Q4_0 / Q4_1 ---------------------------------------------------------------------------
 *  Q4_0 (18 B):  | d fp16 | qs[16] |        Q4_1 (20 B):  | d fp16 | m fp16 | qs[16] |
 *  qs byte j:    bits 7..4 = value j+16, bits 3..0 = value j
 *  Q4_0: x = d * (q - 8)                    Q4_1: x = d * q + m           (q in 0..15)  */

/* The value of largest magnitude of a 32-value block, sign kept (the first one on ties):
 * the Q4_0 / Q5_0 quantisers' scale source. */
static float block_signed_absmax(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* Minimum and maximum of a 32-value block (the Q4_1 / Q5_1 quantisers' range). */
static void block_min_max(const float *x, float *min, float *max) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < 32; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *min = lo;
    *max = hi;
}

static void q4_0_to_float(const void *src, float *dst, int64_t n) {
    const blk_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = (float)((b[i].qs[j] & 15) - 8) * d;
            dst[i * 32 + j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void q4_0_from_float(const float *src, void *dst, int64_t n) {
    blk_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float *x = src + i * 32;
        const float d = block_signed_absmax(x) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = rl_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + 16] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static float q4_0_vec_dot(int64_t n, const void *w, const void *act) {
    const blk_q4_0 *x = w;
    const blk_q8_0 *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += ((x[i].qs[j] & 15) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        sumf += (float)sumi * (rl_fp16_to_fp32(x[i].d) * rl_fp16_to_fp32(y[i].d));
    }
    return sumf;
}

static void q4_1_to_float(const void *src, float *dst, int64_t n) {
    const blk_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float d = rl_fp16_to_fp32(b[i].d), m = rl_fp16_to_fp32(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = (float)(b[i].qs[j] & 15) * d + m;
            dst[i * 32 + j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

static void q4_1_from_float(const float *src, void *dst, int64_t n) {
    blk_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float *x = src + i * 32;
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = rl_fp32_to_fp16(d);
        b[i].m = rl_fp32_to_fp16(min);
        for (int j = 0; j < 16; j++) {
            /* ggml's reference rounding, kept bit for bit: (x - min) * id >= 0, where truncating
             * v + 0.5 is round-half-up (the check's wrong case is a negative v) */
            // NOLINTNEXTLINE(bugprone-incorrect-roundings): v >= 0, as the reference rounds
            int q0 = (int8_t)((x[j] - min) * id + 0.5f), q1 = (int8_t)((x[j + 16] - min) * id + 0.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* sum_j (d_w q_j + m_w) * d_a a_j = d_w d_a sum q_j a_j + m_w * (d_a sum a_j) = ... + m_w * s_a */
static float q4_1_vec_dot(int64_t n, const void *w, const void *act) {
    const blk_q4_1 *x = w;
    const blk_q8_1 *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += (x[i].qs[j] & 15) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        sumf += (float)sumi * (rl_fp16_to_fp32(x[i].d) * rl_fp16_to_fp32(y[i].d)) +
                rl_fp16_to_fp32(x[i].m) * rl_fp16_to_fp32(y[i].s);
    }
    return sumf;
}

/* ---- Q5_0 / Q5_1 ---------------------------------------------------------------------------
 *  Q5_0 (22 B):  | d fp16 | qh[4] | qs[16] |      Q5_1 (24 B):  | d | m | qh[4] | qs[16] |
 *  value j (0..31): low 4 bits from qs as in Q4_0, bit 4 = bit j of the LE u32 qh.
 *  Q5_0: x = d * (q - 16)                       Q5_1: x = d * q + m               */

static inline int q5_val(const uint8_t *qs, uint32_t qh, int j) {
    const int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
    return lo | (int)(((qh >> j) & 1) << 4);
}

static void q5_0_to_float(const void *src, float *dst, int64_t n) {
    const blk_q5_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = rl_fp16_to_fp32(b[i].d);
        const uint32_t qh = rl_le32(b[i].qh);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = (float)(q5_val(b[i].qs, qh, j) - 16) * d;
    }
}

static void q5_pack(const int *q, uint8_t *qh, uint8_t *qs) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
    for (int j = 0; j < 32; j++) h |= (uint32_t)((q[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

static void q5_0_from_float(const float *src, void *dst, int64_t n) {
    blk_q5_0 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        const float d = block_signed_absmax(x) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[32];
        for (int j = 0; j < 32; j++) {
            q[j] = (int8_t)(x[j] * id + 16.5f);
            q[j] = q[j] < 31 ? q[j] : 31;
        }
        b[i].d = rl_fp32_to_fp16(d);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

static float q5_0_vec_dot(int64_t n, const void *w, const void *act) {
    const blk_q5_0 *x = w;
    const blk_q8_0 *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = rl_le32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += (q5_val(x[i].qs, qh, j) - 16) * y[i].qs[j];
        sumf += (float)sumi * (rl_fp16_to_fp32(x[i].d) * rl_fp16_to_fp32(y[i].d));
    }
    return sumf;
}

static void q5_1_to_float(const void *src, float *dst, int64_t n) {
    const blk_q5_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = rl_fp16_to_fp32(b[i].d), m = rl_fp16_to_fp32(b[i].m);
        const uint32_t qh = rl_le32(b[i].qh);
        for (int j = 0; j < 32; j++) dst[i * 32 + j] = (float)q5_val(b[i].qs, qh, j) * d + m;
    }
}

static void q5_1_from_float(const float *src, void *dst, int64_t n) {
    blk_q5_1 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[32];
        for (int j = 0; j < 32; j++) {
            // NOLINTNEXTLINE(bugprone-incorrect-roundings): v >= 0, as the reference rounds (q4_1)
            q[j] = (int8_t)((x[j] - min) * id + 0.5f);
            q[j] = q[j] < 31 ? q[j] : 31;
        }
        b[i].d = rl_fp32_to_fp16(d);
        b[i].m = rl_fp32_to_fp16(min);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

static float q5_1_vec_dot(int64_t n, const void *w, const void *act) {
    const blk_q5_1 *x = w;
    const blk_q8_1 *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = rl_le32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += q5_val(x[i].qs, qh, j) * y[i].qs[j];
        sumf += (float)sumi * (rl_fp16_to_fp32(x[i].d) * rl_fp16_to_fp32(y[i].d)) +
                rl_fp16_to_fp32(x[i].m) * rl_fp16_to_fp32(y[i].s);
    }
    return sumf;
}

/* ---- IQ4_NL --------------------------------------------------------------------------------
 *  IQ4_NL (18 B): | d fp16 | qs[16] |  nibbles as Q4_0, but each 4-bit code indexes the
 *  non-linear codebook kvalues_iq4nl (-127..113):  x = d * kvalues[q]                  */

static void iq4_nl_to_float(const void *src, float *dst, int64_t n) {
    const blk_iq4_nl *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = d * (float)kvalues_iq4nl[b[i].qs[j] & 15];
            dst[i * 32 + j + 16] = d * (float)kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

static float iq4_nl_vec_dot(int64_t n, const void *w, const void *act) {
    const blk_iq4_nl *x = w;
    const blk_q8_0 *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += kvalues_iq4nl[x[i].qs[j] & 15] * y[i].qs[j] +
                    kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        sumf += (float)sumi * (rl_fp16_to_fp32(x[i].d) * rl_fp16_to_fp32(y[i].d));
    }
    return sumf;
}

/* ---- MXFP4 ---------------------------------------------------------------------------------
 *  MXFP4 (17 B): | e E8M0 | qs[16] |  nibbles as Q4_0; each 4-bit code is an E2M1 (FP4) value,
 *  kvalues_mxfp4 holds them doubled (0, 1, 2, 3, 4, 6, 8, 12 and their negatives), and the
 *  shared power-of-two scale is taken halved:  x = 2^(e-128) * kvalues_mxfp4[q]  (exact). */

static void mxfp4_to_float(const void *src, float *dst, int64_t n) {
    const blk_mxfp4 *b = src;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = quant_e8m0_half(b[i].e);
        for (int j = 0; j < 16; j++) {
            dst[i * 32 + j] = d * (float)kvalues_mxfp4[b[i].qs[j] & 15];
            dst[i * 32 + j + 16] = d * (float)kvalues_mxfp4[b[i].qs[j] >> 4];
        }
    }
}

/* The gguf package's quantiser: e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block; clamped
 * to 0..255 where the package's uint8 cast would wrap, |x| < 2^-125 or >= 2^129), then each value
 * takes the code of the nearest d * kvalue, the first code on ties (so +0, never -0). */
static void mxfp4_from_float(const float *src, void *dst, int64_t n) {
    blk_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float *x = src + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        int e = amax > 0.0f ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
        e = e < 0 ? 0 : e > 255 ? 255 : e;
        const float d = quant_e8m0_half((uint8_t)e);
        uint8_t q[32];
        for (int j = 0; j < 32; j++) {
            int best = 0;
            float err = fabsf(d * (float)kvalues_mxfp4[0] - x[j]);
            for (int k = 1; k < 16; k++) {
                const float ek = fabsf(d * (float)kvalues_mxfp4[k] - x[j]);
                if (ek < err) err = ek, best = k;
            }
            q[j] = (uint8_t)best;
        }
        b[i].e = (uint8_t)e;
        for (int j = 0; j < 16; j++) b[i].qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    }
}

/* As IQ4_NL against Q8_0; d_w * d_a is exact (a power of two times an fp16 value). */
static float mxfp4_vec_dot(int64_t n, const void *w, const void *act) {
    const blk_mxfp4 *x = w;
    const blk_q8_0 *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += kvalues_mxfp4[x[i].qs[j] & 15] * y[i].qs[j] +
                    kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        sumf += (float)sumi * (quant_e8m0_half(x[i].e) * rl_fp16_to_fp32(y[i].d));
    }
    return sumf;
}

/* ---- the table ---------------------------------------------------------------------------- */

#define KQ(ID, NAME, fn, SIZE)                                                                               \
    [ID] = {.name = (NAME),                                                                                  \
            .blck = QK_K,                                                                                    \
            .type_size = (SIZE),                                                                             \
            .to_float = quant_to_float_##fn,                                                                 \
            .vec_dot_type = QT_Q8_K,                                                                         \
            .vec_dot = quant_vec_dot_##fn}

static const quant_traits traits[QT_COUNT] = {
    [QT_F32] = {.name = "F32",
                .blck = 1,
                .type_size = 4,
                .to_float = f32_to_float,
                .from_float = f32_from_float,
                .vec_dot_type = QT_F32,
                .vec_dot = f32_vec_dot},
    [QT_F16] = {.name = "F16",
                .blck = 1,
                .type_size = 2,
                .to_float = f16_to_float,
                .from_float = f16_from_float,
                .vec_dot_type = QT_F16,
                .vec_dot = f16_vec_dot},
    [QT_BF16] = {.name = "BF16",
                 .blck = 1,
                 .type_size = 2,
                 .to_float = bf16_to_float,
                 .from_float = bf16_from_float,
                 .vec_dot_type = QT_BF16,
                 .vec_dot = bf16_vec_dot},
    [QT_Q4_0] = {.name = "Q4_0",
                 .blck = 32,
                 .type_size = 18,
                 .to_float = q4_0_to_float,
                 .from_float = q4_0_from_float,
                 .vec_dot_type = QT_Q8_0,
                 .vec_dot = q4_0_vec_dot},
    [QT_Q4_1] = {.name = "Q4_1",
                 .blck = 32,
                 .type_size = 20,
                 .to_float = q4_1_to_float,
                 .from_float = q4_1_from_float,
                 .vec_dot_type = QT_Q8_1,
                 .vec_dot = q4_1_vec_dot},
    [QT_Q5_0] = {.name = "Q5_0",
                 .blck = 32,
                 .type_size = 22,
                 .to_float = q5_0_to_float,
                 .from_float = q5_0_from_float,
                 .vec_dot_type = QT_Q8_0,
                 .vec_dot = q5_0_vec_dot},
    [QT_Q5_1] = {.name = "Q5_1",
                 .blck = 32,
                 .type_size = 24,
                 .to_float = q5_1_to_float,
                 .from_float = q5_1_from_float,
                 .vec_dot_type = QT_Q8_1,
                 .vec_dot = q5_1_vec_dot},
    [QT_Q8_0] = {.name = "Q8_0",
                 .blck = 32,
                 .type_size = 34,
                 .to_float = q8_0_to_float,
                 .from_float = q8_0_from_float,
                 .vec_dot_type = QT_Q8_0,
                 .vec_dot = q8_0_vec_dot},
    /* activation-only types: no vec_dot of their own */
    [QT_Q8_1] = {.name = "Q8_1",
                 .blck = 32,
                 .type_size = 36,
                 .to_float = q8_1_to_float,
                 .from_float = q8_1_from_float,
                 .vec_dot_type = QT_Q8_1},
    [QT_Q8_K] = {.name = "Q8_K",
                 .blck = QK_K,
                 .type_size = 292,
                 .to_float = quant_to_float_q8_k,
                 .from_float = quant_from_float_q8_k,
                 .vec_dot_type = QT_Q8_K},
    [QT_IQ4_NL] = {.name = "IQ4_NL",
                   .blck = 32,
                   .type_size = 18,
                   .to_float = iq4_nl_to_float,
                   .vec_dot_type = QT_Q8_0,
                   .vec_dot = iq4_nl_vec_dot},
    [QT_MXFP4] = {.name = "MXFP4",
                  .blck = 32,
                  .type_size = 17,
                  .to_float = mxfp4_to_float,
                  .from_float = mxfp4_from_float,
                  .vec_dot_type = QT_Q8_0,
                  .vec_dot = mxfp4_vec_dot},
    KQ(QT_Q2_K, "Q2_K", q2_k, 84),
    KQ(QT_Q3_K, "Q3_K", q3_k, 110),
    KQ(QT_Q4_K, "Q4_K", q4_k, 144),
    KQ(QT_Q5_K, "Q5_K", q5_k, 176),
    KQ(QT_Q6_K, "Q6_K", q6_k, 210),
    KQ(QT_IQ4_XS, "IQ4_XS", iq4_xs, 136),
    KQ(QT_IQ3_XXS, "IQ3_XXS", iq3_xxs, 98),
    KQ(QT_IQ3_S, "IQ3_S", iq3_s, 110),
    KQ(QT_IQ2_XXS, "IQ2_XXS", iq2_xxs, 66),
    KQ(QT_IQ2_XS, "IQ2_XS", iq2_xs, 74),
    KQ(QT_IQ2_S, "IQ2_S", iq2_s, 82),
    KQ(QT_IQ1_S, "IQ1_S", iq1_s, 50),
    KQ(QT_IQ1_M, "IQ1_M", iq1_m, 56),
    KQ(QT_IQ2_LF, "IQ2_LF", iq2_lf, 138), /* in-memory only (quant_repack.h) */
    KQ(QT_IQ1_LF, "IQ1_LF", iq1_lf, 138),
};

const quant_traits *quant_get(uint32_t type) {
    if (type >= QT_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

const char *quant_name(uint32_t type) {
    const quant_traits *t = quant_get(type);
    return t ? t->name : "?";
}

size_t quant_row_size(uint32_t type, int64_t n) {
    const quant_traits *t = quant_get(type);
    if (!t || n < 0 || n % t->blck) return 0;
    return (size_t)(n / t->blck) * t->type_size;
}

double quant_dot_ref(uint32_t type, const void *w, const float *x, int64_t n) {
    const quant_traits *t = quant_get(type);
    RL_ASSERT(t && n >= 0 && n % t->blck == 0);
    /* dequantise a chunk of whole blocks at a time into a stack buffer */
    enum { CHUNK = 1024 };
    float buf[CHUNK];
    const int64_t per = CHUNK / t->blck * t->blck;
    const uint8_t *wb = w;
    double s = 0;
    for (int64_t i = 0; i < n; i += per) {
        const int64_t m = n - i < per ? n - i : per;
        t->to_float(wb + (size_t)(i / t->blck) * t->type_size, buf, m);
        for (int64_t j = 0; j < m; j++) s += (double)buf[j] * (double)x[i + j];
    }
    return s;
}
