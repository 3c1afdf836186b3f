/* kern_x86_iq.h — IQ2_XXS/IQ2_XS/IQ2_S/IQ3_XXS/IQ3_S/IQ1_S/IQ1_M mat-vec kernels; part of
 * kern_x86.h (included there only, after kern_x86_k.h). */

/* ---- IQ2_XXS / IQ2_XS / IQ3_XXS: signs and scales of a whole super-block at once -----------
 * These types store, per group of 8 values, a 7-bit index into ksigns_iq2xs, whose bit 7 is the
 * parity of bits 0..6. We compute the 32 sign bytes of a super-block in vector registers
 * (idx | parity << 7, parity from a nibble table), and the 16 half-block scales as int16 in the
 * layout scale_from() expects (int16 #2k / #2k+1 of each lane = the two halves of block k). */

static inline __m256i ksigns_vec(__m256i idx) { /* 32 indices 0..127 -> sign bytes */
    const __m256i lut =
        _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128,
                         -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i par =
        _mm256_xor_si256(_mm256_shuffle_epi8(lut, _mm256_and_si256(idx, m4)),
                         _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(idx, 4), m4)));
    return _mm256_or_si256(idx, par);
}

/* 8 words (one per block) holding four 7-bit sign indices at bits 0, 7, 14, 21 -> the 32 sign
 * bytes in block order */
static inline __m256i signs_from_words(__m256i w) {
    const __m256i m = _mm256_set1_epi32(127);
    const __m256i t0 = _mm256_and_si256(w, m), t1 = _mm256_and_si256(_mm256_srli_epi32(w, 7), m);
    const __m256i t2 = _mm256_and_si256(_mm256_srli_epi32(w, 14), m),
                  t3 = _mm256_and_si256(_mm256_srli_epi32(w, 21), m);
    /* in-lane bytes: t0[b], t1[b], t2[b], t3[b] for the lane's 4 blocks b -> regroup by block */
    const __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(t0, t1), _mm256_packs_epi32(t2, t3));
    const __m256i ctrl = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12,
                                          1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
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
        pf_block(&x[i], sizeof x[i]);
        const uint8_t *q = (const uint8_t *)x[i].qs; /* 8 x (w0: 4 grid indices, w1: signs + scale) */
        const __m256 A = _mm256_castsi256_ps(loadu(q)), B = _mm256_castsi256_ps(loadu(q + 32));
        const __m256i w1 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(A, B, 0xdd)), 0xd8);
        uint8_t sg[32] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sg, signs_from_words(w1));
        const __m256i lsv = scales_from_words(w1);
        const __m256i lanes[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),
                                  _mm256_permute2x128_si256(lsv, lsv, 0x11)};
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        /* unrolled: the scale lanes/controls become constants and each grid index is one byte load
         * (the rolled loop extracted them with shifts and read the scale lanes back from the stack) */
        UNROLL for (int ib = 0; ib < 8; ib++) {
            const uint8_t *gi = q + 8 * ib;
            const __m256i g = _mm256_set_epi64x((long long)iq2xxs_grid[gi[3]], (long long)iq2xxs_grid[gi[2]],
                                                (long long)iq2xxs_grid[gi[1]], (long long)iq2xxs_grid[gi[0]]);
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
    const __m256i l16 = _mm256_cvtepu8_epi16(
        _mm_unpacklo_epi8(_mm_and_si128(sc, m4), _mm_and_si128(_mm_srli_epi16(sc, 4), m4)));
    return _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
}

static float dot_iq2_xs(const blk_iq2_xs *x, const blk_q8_k *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        /* entries: bits 8..0 grid index, bits 15..9 sign index */
        const __m256i e0 = loadu(x[i].qs), e1 = loadu(x[i].qs + 16);
        const __m256i idx = _mm256_permute4x64_epi64(
            _mm256_packus_epi16(_mm256_srli_epi16(e0, 9), _mm256_srli_epi16(e1, 9)), 0xd8);
        uint8_t sg[32] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sg, ksigns_vec(idx));
        const __m256i lsv = iq2_half_scales(x[i].scales);
        const __m256i lanes[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),
                                  _mm256_permute2x128_si256(lsv, lsv, 0x11)};
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            uint64_t e;
            memcpy(&e, x[i].qs + 4 * ib, 8);
            const __m256i g = _mm256_set_epi64x(
                (long long)iq2xs_grid[(e >> 48) & 511], (long long)iq2xs_grid[(e >> 32) & 511],
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
    const __m256i hmask = _mm256_set1_epi64x(0x00c00030000c0003LL),
                  hmul = _mm256_set1_epi64x(0x0004001000400100LL);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        uint16_t idx[32] __attribute__((aligned(32)));
        const __m128i qh = _mm_loadl_epi64((const __m128i *)x[i].qh);
        for (int v = 0; v < 2; v++) {
            const __m256i h16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(qh, v ? rep1 : rep0));
            const __m256i hi = _mm256_mullo_epi16(_mm256_and_si256(h16, hmask), hmul);
            const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x[i].qs + 16 * v)));
            _mm256_store_si256((__m256i *)idx + v, _mm256_or_si256(lo, hi));
        }
        const __m256i lsv = iq2_half_scales(x[i].scales);
        const __m256i lanes[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),
                                  _mm256_permute2x128_si256(lsv, lsv, 0x11)};
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
        pf_block(&x[i], sizeof x[i]);
        const uint8_t *q = x[i].qs; /* 64 grid indices, then 8 words of signs + scale */
        const __m256i w = loadu(q + 64);
        uint8_t sg[32] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)sg, signs_from_words(w));
        const __m256i lsv = scales_from_words(w);
        const __m256i lanes[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),
                                  _mm256_permute2x128_si256(lsv, lsv, 0x11)};
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            uint64_t gi; /* 8 grid indices: extracting from one load keeps the load ports free */
            memcpy(&gi, q + 8 * ib, 8);
            const __m256i g =
                _mm256_set_epi32((int)iq3xxs_grid[gi >> 56], (int)iq3xxs_grid[(gi >> 48) & 255],
                                 (int)iq3xxs_grid[(gi >> 40) & 255], (int)iq3xxs_grid[(gi >> 32) & 255],
                                 (int)iq3xxs_grid[(gi >> 24) & 255], (int)iq3xxs_grid[(gi >> 16) & 255],
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
        pf_block(&x[i], sizeof x[i]);
        /* 9-bit indices: qs[k] | (bit k%8 of qh[k/8]) << 8, 64 of them, 32 per step */
        uint16_t idx[64] __attribute__((aligned(32)));
        for (int v = 0; v < 2; v++) {
            int32_t hb;
            memcpy(&hb, x[i].qh + 4 * v, 4);
            const __m256i e = _mm256_shuffle_epi8(_mm256_set1_epi32(hb), shuf);
            const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(e, bit), bit), one);
            const __m256i q = loadu(x[i].qs + 32 * v);
            const __m256i lo = _mm256_unpacklo_epi8(q, h),
                          hi = _mm256_unpackhi_epi8(q, h); /* in-lane interleave */
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
        const __m256i lanes[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),
                                  _mm256_permute2x128_si256(lsv, lsv, 0x11)};
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t *k = idx + 8 * ib;
            const __m256i g = _mm256_set_epi32(
                (int)iq3s_grid[k[7]], (int)iq3s_grid[k[6]], (int)iq3s_grid[k[5]], (int)iq3s_grid[k[4]],
                (int)iq3s_grid[k[3]], (int)iq3s_grid[k[2]], (int)iq3s_grid[k[1]], (int)iq3s_grid[k[0]]);
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
#define iq1_fold kern_iq1_fold /* one copy for every ISA file: kern.h, built in kern.c */

/* One super-block: 8 blocks of 4 folded-table keys (KEYS(ib, k0..k3) computes them), the 16
 * half-block scales in lsv (int16). Returns S = sum ls * sum (8g + delta8) a. */
#define IQ1_SUPERBLOCK(S, lsv, y, KEYS)                                                                      \
    do {                                                                                                     \
        const int corr_ = hsum_i32(_mm256_madd_epi16(lsv, loadu((y)->bsums)));                               \
        const __m256i lanes_[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),                                \
                                   _mm256_permute2x128_si256(lsv, lsv, 0x11)};                               \
        __m256i acc_ = _mm256_setzero_si256(), ctrl_ = scale_ctrl0();                                        \
        for (int ib = 0; ib < 8; ib++) {                                                                     \
            unsigned k0, k1, k2, k3;                                                                         \
            KEYS(ib, k0, k1, k2, k3);                                                                        \
            const __m256i g_ = _mm256_set_epi64x((long long)iq1_fold[k3], (long long)iq1_fold[k2],           \
                                                 (long long)iq1_fold[k1], (long long)iq1_fold[k0]);          \
            acc_ =                                                                                           \
                dot_scaled(acc_, g_, loadu((y)->qs + 32 * ib), _mm256_shuffle_epi8(lanes_[ib / 4], ctrl_));  \
            ctrl_ = ib == 3 ? scale_ctrl0() : scale_step(ctrl_);                                             \
        }                                                                                                    \
        (S) = hsum_i32(acc_) - 9 * corr_;                                                                    \
    } while (0)

static float dot_iq1_s(const blk_iq1_s *x, const blk_q8_k *y, int64_t nb) {
    const __m256i pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9), m7 = _mm256_set1_epi32(7);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        /* ls = 2 * ((qh >> 12) & 7) + 1 per block, duplicated for its two halves */
        const __m128i h = _mm_loadu_si128((const __m128i *)x[i].qh);
        const __m128i l8 = _mm_add_epi16(
            _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(h, 12), _mm_set1_epi16(7)), 1), _mm_set1_epi16(1));
        const __m256i lsv = _mm256_set_m128i(_mm_unpackhi_epi16(l8, l8), _mm_unpacklo_epi16(l8, l8));
        /* the 32 table keys (qs << 1) | (3 index bits from qh) << 9 | delta sign, 8 at a time
         * in 32-bit lanes (lane j of vector v: block 2v + j/4, group j%4) */
        uint32_t keys[32] __attribute__((aligned(32)));
        const __m256i h32 = _mm256_cvtepu16_epi32(h);
        for (int v = 0; v < 4; v++) {
            const __m256i hp =
                _mm256_permutevar8x32_epi32(h32, _mm256_add_epi32(pair, _mm256_set1_epi32(2 * v)));
            const __m256i bits = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(hp, sh), m7), 9);
            const __m256i q32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + 8 * v)));
            _mm256_store_si256(
                (__m256i *)keys + v,
                _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(q32, 1), bits), _mm256_srli_epi32(hp, 15)));
        }
#define IQ1S_KEYS(ib, k0, k1, k2, k3)                                                                        \
    (k0) = keys[4 * (ib)], (k1) = keys[4 * (ib) + 1], (k2) = keys[4 * (ib) + 2], (k3) = keys[4 * (ib) + 3]
        int S;
        IQ1_SUPERBLOCK(S, lsv, &y[i], IQ1S_KEYS);
#undef IQ1S_KEYS
        sumf += h2f(x[i].d) * y[i].d * ((float)S * 0.125f);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq1_s, dot_iq1_s, blk_iq1_s, blk_q8_k, QK_K)

static float dot_iq1_m(const blk_iq1_m *x, const blk_q8_k *y, int64_t nb) {
    const __m256i sel0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                  sel1 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9), m7 = _mm256_set1_epi32(7);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        uint64_t sc;
        memcpy(&sc, x[i].scales, 8);
        /* d: fp16 from the top nibbles of the 4 scale words */
        const uint16_t dbits = (uint16_t)(((sc >> 12) & 0xf) | ((sc >> 24) & 0xf0) | ((sc >> 36) & 0xf00) |
                                          ((sc >> 48) & 0xf000));
        /* ls[k] = 2 * ((word k/4 >> 3*(k%4)) & 7) + 1, k = 0..15 (one per 16 values) */
        const __m256i w32 = _mm256_cvtepu16_epi32(_mm_cvtsi64_si128((long long)sc));
        const __m256i v0 =
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(w32, sel0), sh), m7);
        const __m256i v1 =
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(w32, sel1), sh), m7);
        const __m256i l16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xd8);
        const __m256i lsv = _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
        /* the 32 table keys (qs << 1) | (nibble & 7) << 9 | nibble >> 3, nibble j = 4 bits of qh
         * (low nibble first), in 16-bit lanes */
        uint16_t keys[32] __attribute__((aligned(32)));
        const __m128i qh = _mm_loadu_si128((const __m128i *)x[i].qh), m4 = _mm_set1_epi8(15);
        const __m128i nl = _mm_and_si128(qh, m4), nh = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
        const __m128i nib[2] = {_mm_unpacklo_epi8(nl, nh), _mm_unpackhi_epi8(nl, nh)};
        for (int v = 0; v < 2; v++) {
            const __m256i n16 = _mm256_cvtepu8_epi16(nib[v]);
            const __m256i q16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x[i].qs + 16 * v)));
            const __m256i k =
                _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(q16, 1), _mm256_srli_epi16(n16, 3)),
                                _mm256_slli_epi16(_mm256_and_si256(n16, _mm256_set1_epi16(7)), 9));
            _mm256_store_si256((__m256i *)keys + v, k);
        }
#define IQ1M_KEYS(ib, k0, k1, k2, k3)                                                                        \
    (k0) = keys[4 * (ib)], (k1) = keys[4 * (ib) + 1], (k2) = keys[4 * (ib) + 2], (k3) = keys[4 * (ib) + 3]
        int S;
        IQ1_SUPERBLOCK(S, lsv, &y[i], IQ1M_KEYS);
#undef IQ1M_KEYS
        sumf += h2f(dbits) * y[i].d * ((float)S * 0.125f);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq1_m, dot_iq1_m, blk_iq1_m, blk_q8_k, QK_K)
