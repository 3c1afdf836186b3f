/* kern_x86_k.h — K-quant (Q2_K..Q6_K) and IQ4_XS mat-vec kernels; part of kern_x86.h (included
 * there only, after the helpers; see that file for the integer-core conventions). */

/* ---- Q2_K ----------------------------------------------------------------------------------- */

static float dot_q2_k(const blk_q2_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m3 = _mm256_set1_epi8(3);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
        const int summs = hsum_i32(_mm256_madd_epi16(mins, loadu(y[i].bsums)));
        const __m256i s16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(15)));
        const __m256i lanes[2] = { _mm256_permute2x128_si256(s16, s16, 0x00), _mm256_permute2x128_si256(s16, s16, 0x11) };
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i Q = loadu(x[i].qs + 32 * h);
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2j, 8h+2j+1 */
            for (int j = 0; j < 4; j++) {
                const __m256i codes = _mm256_and_si256(srl16(Q, 2 * j), m3);
                acc = dot_scaled(acc, codes, loadu(y[i].qs + 128 * h + 32 * j), _mm256_shuffle_epi8(lanes[h], ctrl));
                ctrl = scale_step(ctrl);
            }
        }
        const int isum = hsum_i32(acc);
        const float dall = y[i].d * h2f(x[i].d);
        const float dmin = y[i].d * h2f(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}
ROWS_MATVEC(mv_q2_k, dot_q2_k, blk_q2_k, blk_q8_k, QK_K)

/* ---- Q3_K ------------------------------------------------------------------------------------
 * Unsigned codes c = low2 | hbit << 2 in 0..7 (q = c - 4); the -4 goes through bsums as in Q6_K. */

static float dot_q3_k(const blk_q3_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        /* 16 six-bit scales: low nibbles from bytes 0..7, bits 5..4 from bytes 8..11 */
        uint32_t a[3];
        memcpy(a, x[i].scales, 12);
        const uint32_t k0 = 0x0f0f0f0f, k1 = 0x03030303;
        const uint32_t g0 = (a[0] & k0) | ((a[2] & k1) << 4), g1 = (a[1] & k0) | (((a[2] >> 2) & k1) << 4);
        const uint32_t g2 = ((a[0] >> 4) & k0) | (((a[2] >> 4) & k1) << 4), g3 = ((a[1] >> 4) & k0) | (((a[2] >> 6) & k1) << 4);
        const __m128i s8 = _mm_sub_epi8(_mm_setr_epi32((int)g0, (int)g1, (int)g2, (int)g3), _mm_set1_epi8(32));
        const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
        const int corr = hsum_i32(_mm256_madd_epi16(sc16, loadu(y[i].bsums)));
        const __m256i lanes[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
        const __m256i hm = loadu(x[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i Q = loadu(x[i].qs + 32 * h);
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2j, 8h+2j+1 */
            for (int j = 0; j < 4; j++) {
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, 4 * h + j), one), 2);
                const __m256i codes = _mm256_or_si256(_mm256_and_si256(srl16(Q, 2 * j), m3), hb);
                acc = dot_scaled(acc, codes, loadu(y[i].qs + 128 * h + 32 * j), _mm256_shuffle_epi8(lanes[h], ctrl));
                ctrl = scale_step(ctrl);
            }
        }
        const int isum = hsum_i32(acc) - 4 * corr;
        sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}
ROWS_MATVEC(mv_q3_k, dot_q3_k, blk_q3_k, blk_q8_k, QK_K)

/* ---- Q4_K / Q5_K ---------------------------------------------------------------------------- */

/* Scales and mins of a Q4_K/Q5_K block, unpacked with 32-bit word ops (same bits as
 * quant_k4_scale_min). Sets *lanes to the 8 scales as int16 in both 128-bit lanes and returns the
 * min term sum_k m_k * (bsum_2k + bsum_2k+1). */
static inline int k45_scales(const uint8_t *scales, const blk_q8_k *y, __m256i *lanes) {
    uint32_t u[3];
    memcpy(u, scales, 12);
    const uint64_t sc = (u[0] & 0x3f3f3f3f) | (uint64_t)((u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030)) << 32;
    const uint64_t m = (u[1] & 0x3f3f3f3f) | (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)) << 32;
    *lanes = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m128i mv = _mm_cvtsi64_si128((long long)m); /* each min twice: once per bsum of its 32 */
    return hsum_i32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv)), loadu(y->bsums)));
}
/* shuffle control broadcasting int16 #0 of each lane; +2 per byte selects the next int16 */
static inline __m256i bcast16_ctrl0(void) { return _mm256_set1_epi16(0x0100); }
static inline __m256i bcast16_step(__m256i c) { return _mm256_add_epi8(c, _mm256_set1_epi8(2)); }

static float dot_q4_k(const blk_q4_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(15);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        __m256i lanes, ctrl = bcast16_ctrl0();
        const int summs = k45_scales(x[i].scales, &y[i], &lanes);
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = loadu(x[i].qs + 32 * c);
            const __m256i s0 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            const __m256i s1 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            acc = dot_scaled(acc, _mm256_and_si256(q, m4), loadu(y[i].qs + 64 * c), s0);
            acc = dot_scaled(acc, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), loadu(y[i].qs + 64 * c + 32), s1);
        }
        const int isum = hsum_i32(acc);
        sumf += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    return sumf;
}
ROWS_MATVEC(mv_q4_k, dot_q4_k, blk_q4_k, blk_q8_k, QK_K)

static float dot_q5_k(const blk_q5_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        __m256i lanes, ctrl = bcast16_ctrl0();
        const int summs = k45_scales(x[i].scales, &y[i], &lanes);
        const __m256i qh = loadu(x[i].qh);
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = loadu(x[i].qs + 32 * c);
            const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c), one), 4);
            const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c + 1), one), 4);
            const __m256i s0 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            const __m256i s1 = _mm256_shuffle_epi8(lanes, ctrl);
            ctrl = bcast16_step(ctrl);
            acc = dot_scaled(acc, _mm256_or_si256(_mm256_and_si256(q, m4), hl), loadu(y[i].qs + 64 * c), s0);
            acc = dot_scaled(acc, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hh),
                             loadu(y[i].qs + 64 * c + 32), s1);
        }
        const int isum = hsum_i32(acc);
        sumf += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    return sumf;
}
ROWS_MATVEC(mv_q5_k, dot_q5_k, blk_q5_k, blk_q8_k, QK_K)

/* ---- Q6_K ------------------------------------------------------------------------------------
 * Codes are dotted unsigned (0..63); the -32 offset is applied once per block through bsums:
 * sum_k s_k sum (c-32) a = sum_k s_k sum c a - 32 sum_k s_k bsum_k. */

static float dot_q6_k(const blk_q6_k *x, const blk_q8_k *y, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const int corr = hsum_i32(_mm256_madd_epi16(sc16, loadu(y[i].bsums)));
        const __m256i lanes[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i L0 = loadu(x[i].ql + 64 * h), L1 = loadu(x[i].ql + 64 * h + 32);
            const __m256i H = loadu(x[i].qh + 32 * h);
            const __m256i c[4] = {
                _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_slli_epi16(_mm256_and_si256(H, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m3), 4)),
            };
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2r, 8h+2r+1 */
            for (int r = 0; r < 4; r++) {
                acc = dot_scaled(acc, c[r], loadu(y[i].qs + 128 * h + 32 * r), _mm256_shuffle_epi8(lanes[h], ctrl));
                ctrl = scale_step(ctrl);
            }
        }
        const int isum = hsum_i32(acc) - 32 * corr;
        sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}
ROWS_MATVEC(mv_q6_k, dot_q6_k, blk_q6_k, blk_q8_k, QK_K)

/* ---- IQ4_XS --------------------------------------------------------------------------------------
 * Codes index the signed codebook with one pshufb; signed weights x signed activations use the
 * abs/sign trick (|w| <= 127, so maddubs pairs stay below 2*127*127). */

static float dot_iq4_xs(const blk_iq4_xs *x, const blk_q8_k *y, int64_t nb) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m128i m4 = _mm_set1_epi8(15);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        /* block scales ls_b - 32: low 4 bits from scales_l nibbles, bits 5..4 from scales_h */
        uint32_t sl;
        memcpy(&sl, x[i].scales_l, 4);
        const __m128i slv = _mm_cvtsi32_si128((int)sl);
        const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(slv, m4), _mm_and_si128(_mm_srli_epi16(slv, 4), m4));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x[i].scales_h), shifts), _mm256_set1_epi32(3));
        const __m256i l32 = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(hi, 4)),
                                             _mm256_set1_epi32(32));
        const __m256i p = _mm256_packs_epi32(l32, l32);
        const __m256i lsv = _mm256_unpacklo_epi16(p, p);
        const __m256i lanes[2] = { _mm256_permute2x128_si256(lsv, lsv, 0x00), _mm256_permute2x128_si256(lsv, lsv, 0x11) };
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + 16 * ib));
            const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
            const __m256i w = _mm256_shuffle_epi8(kv, codes);
            const __m256i a = loadu(y[i].qs + 32 * ib);
            acc = dot_scaled(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(a, w), _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq4_xs, dot_iq4_xs, blk_iq4_xs, blk_q8_k, QK_K)
