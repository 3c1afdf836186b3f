/* quant_rand.h — random but valid quantised blocks for the quant / kernel unit tests.
 * Random bytes everywhere except the fp16 scale fields, which get realistic finite values. */
#ifndef RL_QUANT_RAND_H
#define RL_QUANT_RAND_H
#include <math.h>
#include <stdlib.h>

#include "base/common.h"
#include "gguf/quant.h"

/* Random finite normal fp16 with |v| in [1e-3, 1e-1] and random sign: realistic block scales. */
static inline uint16_t rand_scale16(rl_rng *r) {
    float v = expf(logf(1e-3f) + rl_rng_f32(r) * (logf(1e-1f) - logf(1e-3f)));
    return rl_fp32_to_fp16((rl_rng_u64(r) & 1) ? -v : v);
}

static inline void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Random activations: N(0,1), every 7th value 5x larger (outliers as in real hidden states). */
static inline void fill_x(float *x, int64_t n, rl_rng *r) {
    for (int64_t i = 0; i < n; i++) x[i] = rl_rng_normal(r) * (1.0f + 4.0f * (float)(i % 7 == 0));
}

/* Fill nb blocks of `type` with random bytes, then give every fp16 scale field a valid value
 * (random bytes there would give NaN/Inf/huge scales that no real file contains; MXFP4's E8M0
 * byte gets a realistic power of two, its halved scale 2^-10 .. 2^-4). For float
 * types, fill with N(0,1) values. */
static void fill_random_blocks(uint32_t type, void *dst, int64_t nb, rl_rng *r) {
    const quant_traits *t = quant_get(type);
    uint8_t *b = dst;
    if (type == QT_F32 || type == QT_F16 || type == QT_BF16) {
        float *tmp = malloc((size_t)nb * sizeof(float));
        for (int64_t i = 0; i < nb; i++) tmp[i] = rl_rng_normal(r);
        t->from_float(tmp, dst, nb);
        free(tmp);
        return;
    }
    for (size_t i = 0; i < (size_t)nb * t->type_size; i++) b[i] = (uint8_t)rl_rng_u64(r);
    int off[2] = {-1, -1};
    switch (type) {
    case QT_Q4_1:
    case QT_Q5_1:
    case QT_Q4_K:
    case QT_Q5_K:
        off[0] = 0;
        off[1] = 2;
        break;
    case QT_Q2_K:
        off[0] = 80;
        off[1] = 82;
        break;
    case QT_Q3_K: off[0] = 108; break;
    case QT_Q6_K: off[0] = 208; break;
    case QT_IQ1_M:
    case QT_MXFP4: break;
    default: off[0] = 0; break;
    }
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *blk = b + (size_t)i * t->type_size;
        for (int k = 0; k < 2; k++)
            if (off[k] >= 0) put16(blk + off[k], rand_scale16(r));
        if (type == QT_MXFP4) blk[0] = (uint8_t)(118 + rl_rng_u64(r) % 7); /* E8M0: 2^-10 .. 2^-4 */
        if (type == QT_IQ1_M) { /* d's 4 nibbles live in the top nibbles of 4 u16 at byte 48 */
            uint16_t d = rand_scale16(r);
            for (int k = 0; k < 4; k++) {
                uint16_t w = rl_le16(blk + 48 + 2 * k);
                put16(blk + 48 + 2 * k, (uint16_t)((w & 0x0fff) | (((d >> (4 * k)) & 15) << 12)));
            }
        }
    }
}

#endif
