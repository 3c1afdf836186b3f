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
        const __m256i lanes[2] = {_mm256_permute2x128_si256(s16, s16, 0x00),
                                  _mm256_permute2x128_si256(s16, s16, 0x11)};
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i Q = loadu(x[i].qs + 32 * h);
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2j, 8h+2j+1 */
            for (int j = 0; j < 4; j++) {
                const __m256i codes = _mm256_and_si256(srl16(Q, 2 * j), m3);
                acc = dot_scaled(acc, codes, loadu(y[i].qs + 128 * h + 32 * j),
                                 _mm256_shuffle_epi8(lanes[h], ctrl));
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
        const uint32_t g2 = ((a[0] >> 4) & k0) | (((a[2] >> 4) & k1) << 4),
                       g3 = ((a[1] >> 4) & k0) | (((a[2] >> 6) & k1) << 4);
        const __m128i s8 =
            _mm_sub_epi8(_mm_setr_epi32((int)g0, (int)g1, (int)g2, (int)g3), _mm_set1_epi8(32));
        const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
        const int corr = hsum_i32(_mm256_madd_epi16(sc16, loadu(y[i].bsums)));
        const __m256i lanes[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                  _mm256_permute2x128_si256(sc16, sc16, 0x11)};
        const __m256i hm = loadu(x[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i Q = loadu(x[i].qs + 32 * h);
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2j, 8h+2j+1 */
            for (int j = 0; j < 4; j++) {
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, 4 * h + j), one), 2);
                const __m256i codes = _mm256_or_si256(_mm256_and_si256(srl16(Q, 2 * j), m3), hb);
                acc = dot_scaled(acc, codes, loadu(y[i].qs + 128 * h + 32 * j),
                                 _mm256_shuffle_epi8(lanes[h], ctrl));
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
    const uint64_t sc = (u[0] & 0x3f3f3f3f) | (uint64_t)((u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030))
                                                  << 32;
    const uint64_t m =
        (u[1] & 0x3f3f3f3f) | (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)) << 32;
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
            acc = dot_scaled(acc, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), loadu(y[i].qs + 64 * c + 32),
                             s1);
        }
        const int isum = hsum_i32(acc);
        sumf += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    return sumf;
}

/* Lane k of the result = sum of the 8 int32 lanes of a_k (4-row mat-vecs: 3 hadds + 1 add for
 * four rows instead of 4 x 6 operations). Integer addition is exact in any order. */
static inline __m128i hsum4_i32(__m256i a0, __m256i a1, __m256i a2, __m256i a3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* 4 fp16 values -> 4 floats (exact) */
static inline __m128 h2f4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
    return _mm_cvtph_ps(_mm_setr_epi16((short)a, (short)b, (short)c, (short)d, 0, 0, 0, 0));
}

/* The 4-row Q4_K / Q5_K mat-vecs' shared part of a super-block: the 6-bit scales and mins of four
 * rows (scale arrays s0..s3) unpacked in 32-bit lanes; per row 8 scale bytes in *sc01 (rows 0, 1) and
 * *sc23 (rows 2, 3); returns the 4 rows' min sums (mins . bsum pairs of y), lane k = row k. */
static inline __m128i k45_scales4(const uint8_t *s0, const uint8_t *s1, const uint8_t *s2, const uint8_t *s3,
                                  const blk_q8_k *y, __m128i *sc01, __m128i *sc23) {
    const __m128i k3f = _mm_set1_epi32(0x3f3f3f3f), k0f = _mm_set1_epi32(0x0f0f0f0f),
                  k30 = _mm_set1_epi32(0x30303030);
    /* scale words u0, u1, u2 of the 4 rows, transposed to one vector each */
    const __m128i w0 = _mm_loadu_si128((const __m128i *)s0), w1 = _mm_loadu_si128((const __m128i *)s1);
    const __m128i w2 = _mm_loadu_si128((const __m128i *)s2), w3 = _mm_loadu_si128((const __m128i *)s3);
    const __m128i t0 = _mm_unpacklo_epi32(w0, w1), t1 = _mm_unpacklo_epi32(w2, w3);
    const __m128i t2 = _mm_unpackhi_epi32(w0, w1), t3 = _mm_unpackhi_epi32(w2, w3);
    const __m128i u0 = _mm_unpacklo_epi64(t0, t1), u1 = _mm_unpackhi_epi64(t0, t1),
                  u2 = _mm_unpacklo_epi64(t2, t3);
    const __m128i sc_lo = _mm_and_si128(u0, k3f);
    const __m128i sc_hi = _mm_or_si128(_mm_and_si128(u2, k0f), _mm_and_si128(_mm_srli_epi32(u0, 2), k30));
    const __m128i m_lo = _mm_and_si128(u1, k3f);
    const __m128i m_hi =
        _mm_or_si128(_mm_and_si128(_mm_srli_epi32(u2, 4), k0f), _mm_and_si128(_mm_srli_epi32(u1, 2), k30));
    /* per row: 8 scales / 8 mins as bytes; rows 0,1 in sc01 (8 bytes each), rows 2,3 in sc23 */
    *sc01 = _mm_unpacklo_epi32(sc_lo, sc_hi);
    *sc23 = _mm_unpackhi_epi32(sc_lo, sc_hi);
    const __m128i mn01 = _mm_unpacklo_epi32(m_lo, m_hi), mn23 = _mm_unpackhi_epi32(m_lo, m_hi);
    /* min sums: the bsum pairs once, then one madd per two rows */
    const __m256i bsp = _mm256_madd_epi16(loadu(y->bsums), _mm256_set1_epi16(1));
    const __m256i bp2 = _mm256_broadcastsi128_si256(
        _mm_packs_epi32(_mm256_castsi256_si128(bsp), _mm256_extracti128_si256(bsp, 1)));
    const __m256i ms01 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mn01), bp2);
    const __m256i ms23 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mn23), bp2);
    const __m256i hm = _mm256_hadd_epi32(ms01, ms23); /* [r0 r0 r2 r2 | r1 r1 r3 r3] */
    const __m256i hm2 = _mm256_hadd_epi32(hm, hm);    /* [r0 r2 r0 r2 | r1 r3 r1 r3] */
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(hm2), _mm256_extracti128_si256(hm2, 1));
}

/* The float epilogue of four rows in 4 lanes, each lane exactly the scalar
 * sumf += y.d * d * (float)isum - y.d * dmin * (float)summs. */
static inline __m128 k45_epilogue4(__m128 sumf, const __m256i acc[4], uint16_t d0, uint16_t d1, uint16_t d2,
                                   uint16_t d3, uint16_t m0, uint16_t m1, uint16_t m2, uint16_t m3,
                                   __m128i summs, float ydf) {
    const __m128i isum = hsum4_i32(acc[0], acc[1], acc[2], acc[3]);
    const __m128 d = h2f4(d0, d1, d2, d3), dmin = h2f4(m0, m1, m2, m3), yd = _mm_set1_ps(ydf);
    return _mm_add_ps(sumf, _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(yd, d), _mm_cvtepi32_ps(isum)),
                                       _mm_mul_ps(_mm_mul_ps(yd, dmin), _mm_cvtepi32_ps(summs))));
}

/* Q4_K, four rows at a time (the AVX2 mat-vec; the AVX-512 level has mv_q4_k_512). What does not
 * depend on a row's codes is shared or done for the 4 rows together: the 6-bit scale/min unpacking
 * of 4 rows in 32-bit lanes, the bsum pairs, the reduction of the 4 integer sums and 4 min sums
 * (transposed), and the float epilogue in 4 lanes, one per row, with exactly the scalar expression
 * and order, so each row is the scalar vec_dot bit for bit. The activation is re-read per row from
 * L1 (cheap) so the codes path keeps few registers live. */
static void mv_q4_k(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, float *o) {
    const blk_q8_k *y = act;
    const int64_t nb = nc / QK_K;
    const __m256i m4 = _mm256_set1_epi8(15);
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_q4_k *x[4];
        for (int k = 0; k < 4; k++) x[k] = (const blk_q4_k *)MV4_ROW(W, rb, g, q, k);
        __m128 sumf = _mm_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            PF_ROWS4(x, i);
            __m128i sc01, sc23;
            const __m128i summs = k45_scales4(x[0][i].scales, x[1][i].scales, x[2][i].scales, x[3][i].scales,
                                              &y[i], &sc01, &sc23);
            const int8_t *a = y[i].qs;
            __m256i acc[4];
            for (int k = 0; k < 4; k++) {
                const __m128i s8 = k & 1 ? _mm_srli_si128(k & 2 ? sc23 : sc01, 8) : (k & 2 ? sc23 : sc01);
                const __m256i lanes = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8));
                __m256i ctrl = bcast16_ctrl0(), s = _mm256_setzero_si256();
                for (int c = 0; c < 4; c++) {
                    const __m256i q = loadu(x[k][i].qs + 32 * c);
                    const __m256i s0 = _mm256_shuffle_epi8(lanes, ctrl);
                    ctrl = bcast16_step(ctrl);
                    const __m256i s1 = _mm256_shuffle_epi8(lanes, ctrl);
                    ctrl = bcast16_step(ctrl);
                    s = dot_scaled(s, _mm256_and_si256(q, m4), loadu(a + 64 * c), s0);
                    s = dot_scaled(s, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), loadu(a + 64 * c + 32),
                                   s1);
                }
                acc[k] = s;
            }
            sumf = k45_epilogue4(sumf, acc, x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d, x[0][i].dmin,
                                 x[1][i].dmin, x[2][i].dmin, x[3][i].dmin, summs, y[i].d);
        }
        store4(o, g, q, sumf);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        o[r] = dot_q4_k((const blk_q4_k *)((const uint8_t *)W + (size_t)r * rb), y, nb);
}

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

/* Q5_K, four rows at a time: mv_q4_k plus the fifth bit of each code (as dot_q5_k). */
static void mv_q5_k(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, float *o) {
    const blk_q8_k *y = act;
    const int64_t nb = nc / QK_K;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_q5_k *x[4];
        for (int k = 0; k < 4; k++) x[k] = (const blk_q5_k *)MV4_ROW(W, rb, g, q, k);
        __m128 sumf = _mm_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            PF_ROWS4(x, i);
            __m128i sc01, sc23;
            const __m128i summs = k45_scales4(x[0][i].scales, x[1][i].scales, x[2][i].scales, x[3][i].scales,
                                              &y[i], &sc01, &sc23);
            const int8_t *a = y[i].qs;
            __m256i acc[4];
            for (int k = 0; k < 4; k++) {
                const __m128i s8 = k & 1 ? _mm_srli_si128(k & 2 ? sc23 : sc01, 8) : (k & 2 ? sc23 : sc01);
                const __m256i lanes = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8));
                __m256i ctrl = bcast16_ctrl0(), s = _mm256_setzero_si256();
                const __m256i qh = loadu(x[k][i].qh);
                for (int c = 0; c < 4; c++) {
                    const __m256i q = loadu(x[k][i].qs + 32 * c);
                    const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c), one), 4);
                    const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c + 1), one), 4);
                    const __m256i s0 = _mm256_shuffle_epi8(lanes, ctrl);
                    ctrl = bcast16_step(ctrl);
                    const __m256i s1 = _mm256_shuffle_epi8(lanes, ctrl);
                    ctrl = bcast16_step(ctrl);
                    s = dot_scaled(s, _mm256_or_si256(_mm256_and_si256(q, m4), hl), loadu(a + 64 * c), s0);
                    s = dot_scaled(s, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hh),
                                   loadu(a + 64 * c + 32), s1);
                }
                acc[k] = s;
            }
            sumf = k45_epilogue4(sumf, acc, x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d, x[0][i].dmin,
                                 x[1][i].dmin, x[2][i].dmin, x[3][i].dmin, summs, y[i].d);
        }
        store4(o, g, q, sumf);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        o[r] = dot_q5_k((const blk_q5_k *)((const uint8_t *)W + (size_t)r * rb), y, nb);
}

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
        const __m256i lanes[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                  _mm256_permute2x128_si256(sc16, sc16, 0x11)};
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i L0 = loadu(x[i].ql + 64 * h), L1 = loadu(x[i].ql + 64 * h + 32);
            const __m256i H = loadu(x[i].qh + 32 * h);
            const __m256i c[4] = {
                _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_slli_epi16(_mm256_and_si256(H, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(L1, m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m3), 4)),
            };
            __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2r, 8h+2r+1 */
            for (int r = 0; r < 4; r++) {
                acc = dot_scaled(acc, c[r], loadu(y[i].qs + 128 * h + 32 * r),
                                 _mm256_shuffle_epi8(lanes[h], ctrl));
                ctrl = scale_step(ctrl);
            }
        }
        const int isum = hsum_i32(acc) - 32 * corr;
        sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}

/* Q6_K, four rows at a time: the -32 offset term is folded into each row's int32 lanes
 * (acc starts at -32 * madd(scales, bsums)), so one transposed reduction gives the 4 rows'
 * isum - 32 * corr; the epilogue (d * y.d) * isum runs in 4 lanes with the scalar order.
 * The high bits are moved with one shift + mask each (H << 4, H << 2, H, H >> 2, masked 0x30). */
static void mv_q6_k(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, float *o) {
    const blk_q8_k *y = act;
    const int64_t nb = nc / QK_K;
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_q6_k *x[4];
        for (int k = 0; k < 4; k++) x[k] = (const blk_q6_k *)MV4_ROW(W, rb, g, q, k);
        __m128 sumf = _mm_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            PF_ROWS4(x, i);
            const __m256i bs = loadu(y[i].bsums);
            const int8_t *a = y[i].qs;
            __m256i acc[4];
            for (int k = 0; k < 4; k++) {
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[k][i].scales));
                __m256i s = _mm256_sub_epi32(_mm256_setzero_si256(),
                                             _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
                const __m256i lanes2[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                           _mm256_permute2x128_si256(sc16, sc16, 0x11)};
                for (int h = 0; h < 2; h++) {
                    const __m256i lanes = lanes2[h];
                    const __m256i L0 = loadu(x[k][i].ql + 64 * h), L1 = loadu(x[k][i].ql + 64 * h + 32);
                    const __m256i H = loadu(x[k][i].qh + 32 * h);
                    const __m256i c0 = _mm256_or_si256(_mm256_and_si256(L0, m4),
                                                       _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
                    const __m256i c1 = _mm256_or_si256(_mm256_and_si256(L1, m4),
                                                       _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
                    const __m256i c2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4),
                                                       _mm256_and_si256(H, m30));
                    const __m256i c3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                                       _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
                    __m256i ctrl = scale_ctrl0(); /* sub-blocks 8h+2j, 8h+2j+1 */
                    s = dot_scaled(s, c0, loadu(a + 128 * h), _mm256_shuffle_epi8(lanes, ctrl));
                    ctrl = scale_step(ctrl);
                    s = dot_scaled(s, c1, loadu(a + 128 * h + 32), _mm256_shuffle_epi8(lanes, ctrl));
                    ctrl = scale_step(ctrl);
                    s = dot_scaled(s, c2, loadu(a + 128 * h + 64), _mm256_shuffle_epi8(lanes, ctrl));
                    ctrl = scale_step(ctrl);
                    s = dot_scaled(s, c3, loadu(a + 128 * h + 96), _mm256_shuffle_epi8(lanes, ctrl));
                }
                acc[k] = s;
            }
            const __m128i isum = hsum4_i32(acc[0], acc[1], acc[2], acc[3]);
            const __m128 d = h2f4(x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d);
            /* scalar: d * y.d * (float)isum, per row */
            sumf = _mm_add_ps(sumf, _mm_mul_ps(_mm_mul_ps(d, _mm_set1_ps(y[i].d)), _mm_cvtepi32_ps(isum)));
        }
        store4(o, g, q, sumf);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        o[r] = dot_q6_k((const blk_q6_k *)((const uint8_t *)W + (size_t)r * rb), y, nb);
}

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
        const __m128i nib =
            _mm_unpacklo_epi8(_mm_and_si128(slv, m4), _mm_and_si128(_mm_srli_epi16(slv, 4), m4));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x[i].scales_h), shifts),
                                            _mm256_set1_epi32(3));
        const __m256i l32 = _mm256_sub_epi32(
            _mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        const __m256i p = _mm256_packs_epi32(l32, l32);
        const __m256i lsv = _mm256_unpacklo_epi16(p, p);
        const __m256i lanes[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),
                                  _mm256_permute2x128_si256(lsv, lsv, 0x11)};
        __m256i acc = _mm256_setzero_si256(), ctrl = scale_ctrl0();
        for (int ib = 0; ib < 8; ib++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + 16 * ib));
            const __m256i codes =
                _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
            const __m256i w = _mm256_shuffle_epi8(kv, codes);
            const __m256i a = loadu(y[i].qs + 32 * ib);
            acc = dot_scaled(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(a, w),
                             _mm256_shuffle_epi8(lanes[ib / 4], ctrl));
            ctrl = ib == 3 ? scale_ctrl0() : scale_step(ctrl);
        }
        sumf += h2f(x[i].d) * y[i].d * (float)hsum_i32(acc);
    }
    return sumf;
}
ROWS_MATVEC(mv_iq4_xs, dot_iq4_xs, blk_iq4_xs, blk_q8_k, QK_K)
