/* quant_repack.c — IQ2_XXS / IQ2_XS -> IQ2_LF and IQ1_M -> IQ1_LF repacking, and their scalar references
 * (layout, exactness argument and memory cost: quant_repack.h). */
#include "gguf/quant_repack.h"

#include <pthread.h>
#include <string.h>

#include "gguf/quant_impl.h"

const int8_t iq2lf_values[16] = {8, 25, 43, 0, -8, -25, -43, 0, 0, 0, 0, 0, 0, 0, 0, 0};
const int8_t iq1lf_values[16] = {-7, 1, 9, 0, -9, -1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0};

int quant_repack_type(uint32_t src) {
    switch (src) {
    case QT_IQ2_XXS:
    case QT_IQ2_XS: return QT_IQ2_LF;
    case QT_IQ1_M: return QT_IQ1_LF;
    default: return -1;
    }
}

uint64_t quant_repack_bytes(uint32_t src, int64_t n_rows, int64_t n_cols) {
    const int t = quant_repack_type(src);
    return t < 0 ? 0 : (uint64_t)n_rows * quant_row_size((uint32_t)t, n_cols);
}

/* Per-group lookup tables, built once (pthread_once):
 *   mag_xxs[i] / mag_xs[i]: the 8 magnitude indices (0, 1, 2 for 8, 25, 43) of grid entry i, one per byte;
 *   sign_bits[s]: bit j of sign mask s moved to bit 2 of byte j.
 * The 8 codes of a group are then mag | sign_bits, one 64-bit OR into the nibble plane. */
static uint64_t mag_xxs[256], mag_xs[512], sign_bits[256], grid_iq1[2048];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static uint64_t mag_of(uint64_t g) {
    uint64_t m = 0;
    for (int j = 0; j < 8; j++) {
        const int v = (int)(uint8_t)(g >> (8 * j));
        RL_ASSERT(v == 8 || v == 25 || v == 43); /* the grids of IQ2_XXS/IQ2_XS (tests/c/test_repack.c) */
        m |= (uint64_t)(v == 8 ? 0 : v == 25 ? 1 : 2) << (8 * j);
    }
    return m;
}

static void build_tables(void) {
    for (int i = 0; i < 256; i++) mag_xxs[i] = mag_of(iq2xxs_grid[i]);
    for (int i = 0; i < 512; i++) mag_xs[i] = mag_of(iq2xs_grid[i]);
    for (int i = 0; i < 2048; i++) { /* IQ1_M: grid byte -1, 0, +1 -> code bits 0-1 = grid + 1 */
        uint64_t c = 0;
        for (int j = 0; j < 8; j++) {
            const int v = (int)(int8_t)(iq1s_grid[i] >> (8 * j));
            RL_ASSERT(v >= -1 && v <= 1);
            c |= (uint64_t)(v + 1) << (8 * j);
        }
        grid_iq1[i] = c;
    }
    for (int s = 0; s < 256; s++) {
        uint64_t b = 0;
        for (int j = 0; j < 8; j++) b |= (uint64_t)((s >> j) & 1) << (8 * j + 2);
        sign_bits[s] = b;
    }
}

/* the codes of group l (8 values) of block ib: bytes 32*(ib/2) + 8l .. +7, nibble ib%2 */
static inline void put_group(uint8_t *qs, int ib, int l, uint64_t codes) {
    uint8_t *q = qs + 32 * (ib / 2) + 8 * l;
    uint64_t v;
    memcpy(&v, q, 8);
    v |= codes << (4 * (ib % 2));
    memcpy(q, &v, 8);
}

static void repack_iq2_xxs(const blk_iq2_xxs *x, blk_iq2_lf *o) {
    o->d = x->d;
    memset(o->qs, 0, sizeof o->qs);
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t w0 = rl_le32(x->qs + 4 * ib), w1 = rl_le32(x->qs + 4 * ib + 2);
        o->scales[ib] = (uint8_t)((w1 >> 28) | (w1 >> 28) << 4);
        for (int l = 0; l < 4; l++)
            put_group(o->qs, ib, l,
                      mag_xxs[(w0 >> (8 * l)) & 255] | sign_bits[ksigns_iq2xs[(w1 >> (7 * l)) & 127]]);
    }
}

static void repack_iq2_xs(const blk_iq2_xs *x, blk_iq2_lf *o) {
    o->d = x->d;
    memset(o->qs, 0, sizeof o->qs);
    memcpy(o->scales, x->scales, 8);
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++) {
            const uint16_t e = x->qs[4 * ib + l];
            put_group(o->qs, ib, l, mag_xs[e & 511] | sign_bits[ksigns_iq2xs[e >> 9]]);
        }
}

/* IQ1_M: d's fp16 bits (quant_iq1m_d), the 3-bit scale of each 16 values into a nibble, the codes
 * grid + 1 | delta sign << 2 (nibble bit 3 of the group) */
static void repack_iq1_m(const blk_iq1_m *x, blk_iq1_lf *o) {
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = rl_le16(x->scales + 2 * k);
    o->d = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    memset(o->qs, 0, sizeof o->qs);
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t t = sc[ib / 2];
        const int s1 = (t >> (6 * (ib % 2))) & 7, s2 = (t >> (6 * (ib % 2) + 3)) & 7;
        o->scales[ib] = (uint8_t)(s1 | s2 << 4);
        for (int l = 0; l < 4; l++) {
            const int nib = (x->qh[2 * ib + l / 2] >> (4 * (l & 1))) & 15;
            const uint64_t delta = (nib & 8) ? 0x0404040404040404ULL : 0;
            put_group(o->qs, ib, l, grid_iq1[x->qs[4 * ib + l] | ((nib & 7) << 8)] | delta);
        }
    }
}

void quant_repack_rows(uint32_t src, const void *in, void *out, int64_t n_rows, int64_t n_cols) {
    RL_ASSERT(quant_repack_type(src) >= 0 && n_cols % QK_K == 0);
    pthread_once(&tables_once, build_tables);
    const int64_t nb = n_rows * (n_cols / QK_K); /* rows are whole super-blocks: one flat loop */
    blk_iq_lf *o = out;
    if (src == QT_IQ2_XXS)
        for (int64_t i = 0; i < nb; i++) repack_iq2_xxs((const blk_iq2_xxs *)in + i, o + i);
    else if (src == QT_IQ2_XS)
        for (int64_t i = 0; i < nb; i++) repack_iq2_xs((const blk_iq2_xs *)in + i, o + i);
    else
        for (int64_t i = 0; i < nb; i++) repack_iq1_m((const blk_iq1_m *)in + i, o + i);
}

static inline int lf_code(const blk_iq_lf *b, int k) {
    const uint8_t q = b->qs[32 * (k / 64) + k % 32];
    return (k % 64) < 32 ? q & 15 : q >> 4;
}

void quant_to_float_iq2_lf(const void *src, float *dst, int64_t n) {
    const blk_iq2_lf *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int h = 0; h < 16; h++) {
            const float db = d * (0.5f + (float)((b[i].scales[h / 2] >> (4 * (h % 2))) & 15)) * 0.25f;
            for (int j = 0; j < 16; j++)
                dst[16 * h + j] = db * (float)iq2lf_values[lf_code(&b[i], 16 * h + j)];
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

void quant_to_float_iq1_lf(const void *src, float *dst, int64_t n) {
    const blk_iq1_lf *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rl_fp16_to_fp32(b[i].d);
        for (int h = 0; h < 16; h++) {
            const float dl = d * (float)(2 * ((b[i].scales[h / 2] >> (4 * (h % 2))) & 15) + 1);
            /* (grid + delta) = value / 8, exact: IQ1_M's own to_float rounds only in the product */
            for (int j = 0; j < 16; j++)
                dst[16 * h + j] = dl * ((float)iq1lf_values[lf_code(&b[i], 16 * h + j)] * 0.125f);
        }
    }
}

float quant_vec_dot_iq1_lf(int64_t n, const void *w, const void *act) {
    const blk_iq1_lf *x = w;
    const blk_q8_k *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0; /* = 8 * IQ1_M's sumi1 + its sumi2 */
        for (int h = 0; h < 16; h++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += iq1lf_values[lf_code(&x[i], 16 * h + j)] * y[i].qs[16 * h + j];
            isum += s * (2 * ((x[i].scales[h / 2] >> (4 * (h % 2))) & 15) + 1);
        }
        sumf += rl_fp16_to_fp32(x[i].d) * y[i].d * (0.125f * (float)isum);
    }
    return sumf;
}
