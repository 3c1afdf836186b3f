/* synth_gen.c — the random bytes of a synthetic model (API private to synth: synth_int.h; the
 * presets, plan and file writing are in synth.c).
 *
 * Sections: block templates per quant type and the counter-based noise that turns a template into
 * a tensor's bytes · small vector tensors (norms, conv, A, dt) · routers of the non-uniform
 * routing models.
 *
 * Test: tests/test_synth.py, tests/test_synth_routing.py, tests/test_synth_determinism.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "gguf/quant.h"
#include "gguf/quant_impl.h"
#include "model/synth_int.h"

/* Determinism across compilers and flags (the bytes are a contract, tests/test_synth_determinism.py):
 * (1) every random draw is its own statement, never two calls in one expression, whose order C
 * leaves unspecified (an ASan/UBSan build used to draw the IQ2_XS scale nibbles in the other
 * order); (2) a product that feeds an addition is rounded through these helpers, so a compiler
 * allowed to fuse a*b+c into one FMA (-ffp-contract=fast with -mfma, clang's default "on") still
 * computes the same, separately rounded, value: a volatile store must hold the rounded product.
 * The remaining float work is IEEE-exact operations (+ - * / sqrt), the scalar dequantisers and
 * libm's logf/expf/expm1f/cosf (the same glibc gives the same bits). */
static float rounded_f(float x) {
    volatile float v = x;
    return v;
}
static double rounded_d(double x) {
    volatile double v = x;
    return v;
}

/* ---- block templates -------------------------------------------------------------------------
 * A template is TMPL_BLOCKS valid blocks of one type whose dequantised values have std sigma, and
 * a mask of the bits that may take any value (quant indices, signs, low mantissa bits). Tensor
 * byte at offset o = template[o % size] ^ (noise(key, o) & mask[o % size]). Scales, super-scales
 * and fp16 fields are never touched, so every block stays valid and finite. */

#define TMPL_BLOCKS 1024 /* multiple of 8, so the template size is a multiple of 8 bytes */

/* Per type: random scale fields with super-scale d, read/write d, and the free-bits mask. */
typedef struct {
    uint32_t type;
    void (*init)(uint8_t *b, rl_rng *r);
    float (*get_d)(const uint8_t *b);
    void (*set_d)(uint8_t *b, float d);
    void (*mask)(uint8_t *m);
} qgen;

static int rnd(rl_rng *r, int lo, int hi) { return lo + (int)(rl_rng_u64(r) % (uint64_t)(hi - lo + 1)); }
/* +-(lo..hi): the magnitude drawn first, then the sign */
static int rnd_pm(rl_rng *r, int lo, int hi) {
    const int mag = rnd(r, lo, hi), neg = (int)(rl_rng_u64(r) & 1);
    return neg ? -mag : mag;
}
/* n bytes of two 4-bit scales in lo..15 each, the low nibble drawn first */
static void rnd_nibble_pairs(uint8_t *p, int n, int lo, rl_rng *r) {
    for (int k = 0; k < n; k++) {
        int a = rnd(r, lo, 15), b = rnd(r, lo, 15); /* two declarators: drawn in this order */
        p[k] = (uint8_t)(a | b << 4);
    }
}
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static float f16at(const uint8_t *p) { return rl_fp16_to_fp32(rl_le16(p)); }
static void mask_range(uint8_t *m, int lo, int hi) { memset(m + lo, 0xff, (size_t)(hi - lo)); }

/* Q8_0: | d | qs[32] | */
static void q8_0_set(uint8_t *b, float d) { put16(b, rl_fp32_to_fp16(d)); }
static float q8_0_get(const uint8_t *b) { return f16at(b); }
static void q8_0_init(uint8_t *b, rl_rng *r) { (void)r; }
static void q8_0_mask(uint8_t *m) { mask_range(m, 2, 34); }

/* Q2_K: | scales[16] | qs[64] | d | dmin |; min = scale and dmin = 1.5 d centre q in 0..3 on 0. */
static void q2_k_set(uint8_t *b, float d) {
    put16(b + 80, rl_fp32_to_fp16(d));
    put16(b + 82, rl_fp32_to_fp16(1.5f * d));
}
static float q2_k_get(const uint8_t *b) { return f16at(b + 80); }
static void q2_k_init(uint8_t *b, rl_rng *r) {
    for (int k = 0; k < 16; k++) {
        int s = rnd(r, 8, 15);
        b[k] = (uint8_t)(s | s << 4);
    }
}
static void q2_k_mask(uint8_t *m) { mask_range(m, 16, 80); }

/* Q4_K / Q5_K: | d | dmin | scales[12] | (qh[32]) | qs[128] |; even 6-bit scales s, mins s/2 and
 * dmin = 15 d (Q4_K) or 31 d (Q5_K) put the mean of each sub-block at zero. */
static void k45_scales(uint8_t *sc12, rl_rng *r) {
    uint8_t s[8], m[8];
    for (int k = 0; k < 8; k++) {
        s[k] = (uint8_t)(2 * rnd(r, 16, 31));
        m[k] = s[k] / 2;
    }
    for (int j = 0; j < 4; j++) { /* inverse of quant_k4_scale_min */
        sc12[j] = (uint8_t)(s[j] | (s[j + 4] >> 4) << 6);
        sc12[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        sc12[j + 8] = (uint8_t)((s[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}
static void q4_k_set(uint8_t *b, float d) {
    put16(b, rl_fp32_to_fp16(d));
    put16(b + 2, rl_fp32_to_fp16(15.0f * d));
}
static void q5_k_set(uint8_t *b, float d) {
    put16(b, rl_fp32_to_fp16(d));
    put16(b + 2, rl_fp32_to_fp16(31.0f * d));
}
static float k45_get(const uint8_t *b) { return f16at(b); }
static void k45_init(uint8_t *b, rl_rng *r) { k45_scales(b + 4, r); }
static void q4_k_mask(uint8_t *m) { mask_range(m, 16, 144); }
static void q5_k_mask(uint8_t *m) { mask_range(m, 16, 176); }

/* Q6_K: | ql[128] | qh[64] | scales[16] int8 | d | */
static void q6_k_set(uint8_t *b, float d) { put16(b + 208, rl_fp32_to_fp16(d)); }
static float q6_k_get(const uint8_t *b) { return f16at(b + 208); }
static void q6_k_init(uint8_t *b, rl_rng *r) {
    for (int k = 0; k < 16; k++) b[192 + k] = (uint8_t)(int8_t)rnd_pm(r, 16, 63);
}
static void q6_k_mask(uint8_t *m) { mask_range(m, 0, 192); }

/* IQ2_XXS: | d | 8 x (grid indices u32, signs+scale u32) |; the scale is the top nibble */
static void d0_set(uint8_t *b, float d) { put16(b, rl_fp32_to_fp16(d)); }
static float d0_get(const uint8_t *b) { return f16at(b); }
static void iq2_xxs_init(uint8_t *b, rl_rng *r) {
    for (int ib = 0; ib < 8; ib++)
        b[2 + 8 * ib + 7] = (uint8_t)((b[2 + 8 * ib + 7] & 0x0f) | rnd(r, 3, 15) << 4);
}
static void iq2_xxs_mask(uint8_t *m) {
    for (int ib = 0; ib < 8; ib++) {
        mask_range(m, 2 + 8 * ib, 2 + 8 * ib + 7);
        m[2 + 8 * ib + 7] = 0x0f;
    }
}

/* IQ3_XXS: | d | qs[64] grid indices (any byte valid) | 8 x u32: four 7-bit sign indices, the
 * scale in the top nibble | */
static void iq3_xxs_init(uint8_t *b, rl_rng *r) {
    for (int ib = 0; ib < 8; ib++)
        b[66 + 4 * ib + 3] = (uint8_t)((b[66 + 4 * ib + 3] & 0x0f) | rnd(r, 3, 15) << 4);
}
static void iq3_xxs_mask(uint8_t *m) {
    mask_range(m, 2, 66);
    for (int ib = 0; ib < 8; ib++) {
        mask_range(m, 66 + 4 * ib, 66 + 4 * ib + 3);
        m[66 + 4 * ib + 3] = 0x0f;
    }
}

/* IQ2_XS: | d | qs[32] u16 (grid index + sign index: any value valid) | scales[8] | */
static void iq2_xs_init(uint8_t *b, rl_rng *r) { rnd_nibble_pairs(b + 66, 8, 3, r); }
static void iq2_xs_mask(uint8_t *m) { mask_range(m, 2, 66); }

/* IQ2_S: | d | qs[32] grid index low bytes | signs[32] | qh[8] (index bits 9..8) | scales[8] |; every
 * index and sign valid, the scales as IQ2_XS's */
static void iq2_s_init(uint8_t *b, rl_rng *r) { rnd_nibble_pairs(b + 74, 8, 3, r); }
static void iq2_s_mask(uint8_t *m) { mask_range(m, 2, 74); }

/* IQ3_S: | d | qs[64] | qh[8] (index bit 8) | signs[32] | scales[4] (a nibble per 32 values) | */
static void iq3_s_init(uint8_t *b, rl_rng *r) { rnd_nibble_pairs(b + 106, 4, 1, r); }
static void iq3_s_mask(uint8_t *m) { mask_range(m, 2, 106); }

/* IQ4_XS: | d | scales_h u16 | scales_l[4] | qs[128] (codebook nibbles) |; 6-bit scales s - 32 with
 * |s - 32| in 8..31, either sign */
static void iq4_xs_init(uint8_t *b, rl_rng *r) {
    uint16_t h = 0;
    memset(b + 4, 0, 4);
    for (int ib = 0; ib < 8; ib++) {
        const int s = 32 + rnd_pm(r, 8, 31);
        b[4 + ib / 2] = (uint8_t)(b[4 + ib / 2] | (s & 15) << (4 * (ib % 2)));
        h = (uint16_t)(h | (s >> 4) << (2 * ib));
    }
    put16(b + 2, h);
}
static void iq4_xs_mask(uint8_t *m) { mask_range(m, 8, 136); }

/* IQ1_S: | d | qs[32] | qh[8] u16: index bits 10..8 of the four groups (bits 11..0), the 3-bit
 * scale (14..12), the delta sign (15) |; the scales fixed, everything else free */
static void iq1_s_init(uint8_t *b, rl_rng *r) {
    for (int ib = 0; ib < 8; ib++) put16(b + 34 + 2 * ib, (uint16_t)(rnd(r, 1, 7) << 12));
}
static void iq1_s_mask(uint8_t *m) {
    mask_range(m, 2, 34);
    for (int ib = 0; ib < 8; ib++) {
        m[34 + 2 * ib] = 0xff;
        m[35 + 2 * ib] = 0x8f;
    }
}

/* Q3_K: | hmask[32] | qs[64] | scales[12] (16 signed 6-bit scales) | d |; |s - 32| in 8..31 */
static void q3_k_set(uint8_t *b, float d) { put16(b + 108, rl_fp32_to_fp16(d)); }
static float q3_k_get(const uint8_t *b) { return f16at(b + 108); }
static void q3_k_init(uint8_t *b, rl_rng *r) {
    uint8_t *sc = b + 96;
    memset(sc, 0, 12);
    for (int k = 0; k < 16; k++) { /* inverse of q3_scale (quant_k.c) */
        const int s = 32 + rnd_pm(r, 8, 31);
        if (k < 8) sc[k] = (uint8_t)(sc[k] | (s & 15));
        else sc[k - 8] = (uint8_t)(sc[k - 8] | (s & 15) << 4);
        sc[8 + (k & 3)] = (uint8_t)(sc[8 + (k & 3)] | (s >> 4) << (2 * (k >> 2)));
    }
}
static void q3_k_mask(uint8_t *m) { mask_range(m, 0, 96); }

/* IQ1_M: | qs[32] | qh[16] | four u16 words: 3-bit scales in bits 0..11, d's nibbles on top | */
static void iq1_m_set(uint8_t *b, float d) {
    uint16_t h = rl_fp32_to_fp16(d);
    for (int i = 0; i < 4; i++) {
        uint16_t w = (uint16_t)((rl_le16(b + 48 + 2 * i) & 0x0fff) | ((h >> (4 * i)) & 15) << 12);
        put16(b + 48 + 2 * i, w);
    }
}
static float iq1_m_get(const uint8_t *b) { return quant_iq1m_d((const blk_iq1_m *)b); }
static void iq1_m_init(uint8_t *b, rl_rng *r) {
    for (int i = 0; i < 4; i++) {
        uint16_t w = 0;
        for (int k = 0; k < 4; k++) w = (uint16_t)(w | rnd(r, 1, 7) << (3 * k));
        put16(b + 48 + 2 * i, w);
    }
}
static void iq1_m_mask(uint8_t *m) { mask_range(m, 0, 48); }

/* MXFP4: | e E8M0 | qs[16] |; its scale 2^(e-128) is a power of two, so set_d takes one of the two
 * powers around d, the upper with probability p = (d^2/lo^2 - 1) / 3, which keeps E[scale^2] = d^2
 * (the template's std comes out right over its blocks); the random number is a hash of the
 * block's code bytes and of d (so the rescaling pass draws afresh), a function of the template. */
static void mxfp4_set(uint8_t *b, float d) {
    int ex;
    frexpf(d, &ex); /* d in [2^(ex-1), 2^ex) */
    const double lo = ldexp(1.0, ex - 1), p = ((double)d * d / (lo * lo) - 1.0) / 3.0;
    uint32_t dbits;
    memcpy(&dbits, &d, 4);
    uint64_t h = dbits;
    for (int k = 1; k < 17; k++) h = synth_mix64(h ^ b[k]);
    const int e = ex - 1 + ((double)(h >> 11) * 0x1p-53 < p) + 128;
    b[0] = (uint8_t)(e < 1 ? 1 : e > 254 ? 254 : e);
}
static float mxfp4_get(const uint8_t *b) { return quant_e8m0_half(b[0]); }
static void mxfp4_init(uint8_t *b, rl_rng *r) { (void)b, (void)r; }
static void mxfp4_mask(uint8_t *m) { mask_range(m, 1, 17); }

static const qgen qgens[] = {
    {QT_Q8_0, q8_0_init, q8_0_get, q8_0_set, q8_0_mask},
    {QT_Q2_K, q2_k_init, q2_k_get, q2_k_set, q2_k_mask},
    {QT_Q3_K, q3_k_init, q3_k_get, q3_k_set, q3_k_mask},
    {QT_Q4_K, k45_init, k45_get, q4_k_set, q4_k_mask},
    {QT_Q5_K, k45_init, k45_get, q5_k_set, q5_k_mask},
    {QT_Q6_K, q6_k_init, q6_k_get, q6_k_set, q6_k_mask},
    {QT_IQ2_XXS, iq2_xxs_init, d0_get, d0_set, iq2_xxs_mask},
    {QT_IQ2_XS, iq2_xs_init, d0_get, d0_set, iq2_xs_mask},
    {QT_IQ3_XXS, iq3_xxs_init, d0_get, d0_set, iq3_xxs_mask},
    {QT_IQ2_S, iq2_s_init, d0_get, d0_set, iq2_s_mask},
    {QT_IQ3_S, iq3_s_init, d0_get, d0_set, iq3_s_mask},
    {QT_IQ4_XS, iq4_xs_init, d0_get, d0_set, iq4_xs_mask},
    {QT_IQ1_S, iq1_s_init, d0_get, d0_set, iq1_s_mask},
    {QT_IQ1_M, iq1_m_init, iq1_m_get, iq1_m_set, iq1_m_mask},
    {QT_MXFP4, mxfp4_init, mxfp4_get, mxfp4_set, mxfp4_mask},
};

bool synth_gen_has(uint32_t type) {
    for (size_t i = 0; i < sizeof qgens / sizeof qgens[0]; i++)
        if (qgens[i].type == type) return true;
    return false;
}

void synth_gen_names(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof qgens / sizeof qgens[0] && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", quant_name(qgens[i].type));
}

static double tmpl_std(const tmpl *t, float *buf, int64_t n) {
    quant_get(t->type)->to_float(t->bytes, buf, n);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) /* float x float is exact in double: fused or not, same sum */
        s += buf[i], s2 += (double)buf[i] * buf[i];
    double mean = s / (double)n;
    return sqrt(s2 / (double)n - rounded_d(mean * mean));
}

int synth_gen_tmpl(tmpl *t, uint32_t type, float sigma, uint64_t seed) {
    const quant_traits *qt = quant_get(type);
    t->type = type;
    t->sigma = sigma;
    int nblk = qt->blck == 1 ? 64 * TMPL_BLOCKS : TMPL_BLOCKS; /* float types: 64K values */
    t->nbytes = (uint64_t)nblk * qt->type_size;
    t->bytes = rl_aligned_alloc(t->nbytes, "synth template");
    t->mask = rl_aligned_alloc(t->nbytes, "synth template");
    if (!t->bytes || !t->mask) return -1;
    rl_rng r;
    rl_rng_seed(&r, synth_mix64(seed ^ (uint64_t)type << 40 ^ (uint64_t)(sigma * 1e6f)));
    memset(t->mask, 0, t->nbytes);
    if (type == QT_F32 || type == QT_F16) {
        /* normal values; free bits: the sign and the low mantissa bits (a few ulps) */
        for (int i = 0; i < nblk; i++) {
            float v = sigma * rl_rng_normal(&r);
            if (type == QT_F32) {
                memcpy(t->bytes + 4 * i, &v, 4);
                uint32_t m = 0x8000ffffu;
                memcpy(t->mask + 4 * i, &m, 4);
            } else {
                put16(t->bytes + 2 * i, rl_fp32_to_fp16(v));
                put16(t->mask + 2 * i, 0x8007);
            }
        }
        return 0;
    }
    const qgen *g = NULL;
    for (size_t i = 0; i < sizeof qgens / sizeof qgens[0]; i++)
        if (qgens[i].type == type) g = &qgens[i];
    if (!g) return rl_seterr("synth: no block generator for type %s", quant_name(type));
    size_t bs = qt->type_size;
    for (uint64_t i = 0; i < t->nbytes; i += 8) {
        uint64_t v = rl_rng_u64(&r);
        memcpy(t->bytes + i, &v, t->nbytes - i < 8 ? t->nbytes - i : 8);
    }
    for (int b = 0; b < TMPL_BLOCKS; b++) {
        uint8_t *blk = t->bytes + (size_t)b * bs;
        g->init(blk, &r);
        g->set_d(blk, 0.75f + rounded_f(0.5f * rl_rng_f32(&r))); /* block-to-block spread of d */
        g->mask(t->mask + (size_t)b * bs);
    }
    int64_t n = (int64_t)TMPL_BLOCKS * qt->blck;
    float *buf = rl_malloc(sizeof(float) * (size_t)n, "synth template");
    if (!buf) return -1;
    for (int pass = 0; pass < 2; pass++) { /* second pass corrects fp16 rounding of the rescale */
        double s = tmpl_std(t, buf, n);
        if (!(s > 0)) {
            free(buf);
            return rl_seterr("synth: degenerate %s template", quant_name(type));
        }
        for (int b = 0; b < TMPL_BLOCKS; b++) {
            uint8_t *blk = t->bytes + (size_t)b * bs;
            g->set_d(blk, (float)(g->get_d(blk) * sigma / s));
        }
    }
    double s = tmpl_std(t, buf, n);
    free(buf);
    if (!(fabs(s / sigma - 1.0) < 0.05))
        return rl_seterr("synth: %s template std %.3g, wanted %.3g", quant_name(type), s, (double)sigma);
    return 0;
}

/* Counter-based noise: 64 random bits for word k of a tensor (splitmix64 of key + k). */
static inline uint64_t noise(uint64_t key, uint64_t k) {
    return synth_mix64(key + k * 0x9e3779b97f4a7c15ull);
}

/* Tensor bytes [off, off + n) into dst: a pure function of (template, key, offset). */
void synth_gen_bytes(const tmpl *tp, uint64_t key, uint8_t *dst, uint64_t off, uint64_t n) {
    const uint64_t tb = tp->nbytes;
    while (n) {
        uint64_t pos = off % tb, run = tb - pos < n ? tb - pos : n;
        const uint8_t *src = tp->bytes + pos, *msk = tp->mask + pos;
        uint64_t i = 0;
        for (; i < run && ((off + i) & 7); i++) /* head up to a word boundary */
            dst[i] =
                (uint8_t)(src[i] ^ (msk[i] & (uint8_t)(noise(key, (off + i) >> 3) >> (8 * ((off + i) & 7)))));
        for (; i + 8 <= run; i += 8) {
            uint64_t w, m;
            memcpy(&w, src + i, 8);
            memcpy(&m, msk + i, 8);
            w ^= m & noise(key, (off + i) >> 3);
            memcpy(dst + i, &w, 8);
        }
        for (; i < run; i++)
            dst[i] =
                (uint8_t)(src[i] ^ (msk[i] & (uint8_t)(noise(key, (off + i) >> 3) >> (8 * ((off + i) & 7)))));
        dst += run;
        off += run;
        n -= run;
    }
}

/* ---- vector tensors (small, generated whole) ---------------------------------------------- */

int synth_gen_vector(stensor *t) {
    int64_t n = t->info.ne[0] * t->info.ne[1];
    t->vec = rl_malloc(sizeof(float) * (size_t)n, t->info.name);
    if (!t->vec) return -1;
    rl_rng r;
    rl_rng_seed(&r, t->key);
    for (int64_t i = 0; i < n; i++) {
        float v;
        switch (t->r) {
        case R_NORM: v = 1.0f + rounded_f(0.05f * rl_rng_normal(&r)); break; /* +1 baked in, as in GGUF */
        case R_CONV: v = 0.3f * rl_rng_normal(&r); break;
        case R_A: v = -expf(logf(16.0f) * rl_rng_f32(&r)); break; /* -exp(A_log), A in [1, 16] */
        case R_DT: {                                              /* softplus^-1 of dt in [1e-3, 1e-1] */
            float dt = expf(logf(1e-3f) + rounded_f((logf(1e-1f) - logf(1e-3f)) * rl_rng_f32(&r)));
            v = logf(expm1f(dt));
            break;
        }
        default: v = t->sigma * rl_rng_normal(&r); break; /* shared-expert gate vector */
        }
        t->vec[i] = v;
    }
    return 0;
}

/* Router of a non-uniform routing model (synth.h): row e (one expert, n_in values) is
 * sigma * s_e * N(0,1) with s_e = exp(beta*g_e - beta^2), g_e ~ N(0,1). Which experts win depends
 * only on the relative row norms and directions; the -beta^2 keeps E[s_e^2] = 1, so the logits'
 * spread (and the routing weights' sharpness) stays that of the uniform file. F32 or F16 bytes. */
int synth_gen_router(stensor *t, synth_routing routing) {
    const int64_t n_in = t->info.ne[0], n_exp = t->info.ne[1];
    const float beta = routing == SYNTH_ROUTING_SKEWED ? SYNTH_BETA_SKEWED : SYNTH_BETA_CALIBRATED;
    if (t->info.type != QT_F32 && t->info.type != QT_F16)
        return rl_seterr("synth: router %s has type %s (need F32 or F16)", t->info.name,
                         quant_name(t->info.type));
    t->raw = rl_malloc(t->info.nbytes, t->info.name);
    if (!t->raw) return -1;
    rl_rng r;
    rl_rng_seed(&r, synth_mix64(t->key ^ 0x726f757465ull));
    for (int64_t e = 0; e < n_exp; e++) {
        float g = rl_rng_normal(&r);
        float s = t->sigma * expf(rounded_f(beta * g) - rounded_f(beta * beta));
        for (int64_t i = 0; i < n_in; i++) {
            float v = s * rl_rng_normal(&r);
            if (t->info.type == QT_F32) memcpy(t->raw + 4 * (e * n_in + i), &v, 4);
            else put16(t->raw + 2 * (e * n_in + i), rl_fp32_to_fp16(v));
        }
    }
    return 0;
}
