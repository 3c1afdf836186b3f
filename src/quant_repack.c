/* quant_repack.c — IQ2_XXS / IQ2_XS -> IQ2_LF repacking and IQ2_LF's scalar reference
 * (layout, exactness argument and memory cost: quant_repack.h). */
#include "quant_repack.h"

#include <string.h>

#include "quant_impl.h"

const int8_t iq2lf_values[16] = {8, 25, 43, 0, -8, -25, -43, 0, 0, 0, 0, 0, 0, 0, 0, 0};

int quant_repack_type(uint32_t src) {
    switch (src) {
    case QT_IQ2_XXS:
    case QT_IQ2_XS: return QT_IQ2_LF;
    default: return -1;
    }
}

uint64_t quant_repack_bytes(uint32_t src, int64_t n_rows, int64_t n_cols) {
    const int t = quant_repack_type(src);
    return t < 0 ? 0 : (uint64_t)n_rows * quant_row_size((uint32_t)t, n_cols);
}

/* grid byte -> magnitude index; the grids of IQ2_XXS/IQ2_XS hold only 8, 25 and 43 */
static inline int mag_index(int g) {
    RL_ASSERT(g == 8 || g == 25 || g == 43);
    return g == 8 ? 0 : g == 25 ? 1 : 2;
}

/* the 8 codes of one group: grid entry g, sign mask s (bit j set: value j negative) */
static inline void put_group(uint8_t *qs, int first, uint64_t g, uint8_t s) {
    for (int j = 0; j < 8; j++) {
        const int k = first + j, c = mag_index((int)(uint8_t)(g >> (8 * j))) | ((s >> j) & 1) << 2;
        uint8_t *q = qs + 32 * (k / 64) + k % 32;
        *q = (uint8_t)((k % 64) < 32 ? (*q & 0xf0) | c : (*q & 0x0f) | c << 4);
    }
}

static void repack_iq2_xxs(const blk_iq2_xxs *x, blk_iq2_lf *o) {
    o->d = x->d;
    memset(o->qs, 0, sizeof o->qs);
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t w0 = rl_le32(x->qs + 4 * ib), w1 = rl_le32(x->qs + 4 * ib + 2);
        o->scales[ib] = (uint8_t)((w1 >> 28) | (w1 >> 28) << 4);
        for (int l = 0; l < 4; l++)
            put_group(o->qs, 32 * ib + 8 * l, iq2xxs_grid[(w0 >> (8 * l)) & 255], ksigns_iq2xs[(w1 >> (7 * l)) & 127]);
    }
}

static void repack_iq2_xs(const blk_iq2_xs *x, blk_iq2_lf *o) {
    o->d = x->d;
    memset(o->qs, 0, sizeof o->qs);
    memcpy(o->scales, x->scales, 8);
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++) {
            const uint16_t e = x->qs[4 * ib + l];
            put_group(o->qs, 32 * ib + 8 * l, iq2xs_grid[e & 511], ksigns_iq2xs[e >> 9]);
        }
}

void quant_repack_rows(uint32_t src, const void *in, void *out, int64_t n_rows, int64_t n_cols) {
    RL_ASSERT(quant_repack_type(src) >= 0 && n_cols % QK_K == 0);
    const int64_t nb = n_rows * (n_cols / QK_K); /* rows are whole super-blocks: one flat loop */
    blk_iq2_lf *o = out;
    if (src == QT_IQ2_XXS)
        for (int64_t i = 0; i < nb; i++) repack_iq2_xxs((const blk_iq2_xxs *)in + i, o + i);
    else
        for (int64_t i = 0; i < nb; i++) repack_iq2_xs((const blk_iq2_xs *)in + i, o + i);
}

static inline int lf_code(const blk_iq2_lf *b, int k) {
    const uint8_t q = b->qs[32 * (k / 64) + k % 32];
    return (k % 64) < 32 ? q & 15 : q >> 4;
}

void quant_to_float_iq2_lf(const void *src, float *dst, int64_t n) {
    const blk_iq2_lf *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int h = 0; h < 16; h++) {
            const float db = d * (0.5f + (float)((b[i].scales[h / 2] >> (4 * (h % 2))) & 15)) * 0.25f;
            for (int j = 0; j < 16; j++) dst[16 * h + j] = db * (float)iq2lf_values[lf_code(&b[i], 16 * h + j)];
        }
    }
}

float quant_vec_dot_iq2_lf(int64_t n, const void *w, const void *act) {
    const blk_iq2_lf *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int bsum = 0;
        for (int h = 0; h < 16; h++) { /* per 16 values: the integer sum times (2s+1) */
            int s = 0;
            for (int j = 0; j < 16; j++) s += iq2lf_values[lf_code(&x[i], 16 * h + j)] * y[i].qs[16 * h + j];
            bsum += s * (2 * ((x[i].scales[h / 2] >> (4 * (h % 2))) & 15) + 1);
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.125f * sumf;
}
