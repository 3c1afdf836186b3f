/* kern_x86_512.h — 512-bit mat-vec kernels of the AVX-512 level for the hot decode types; part of
 * kern_x86.h (included there only; empty unless compiled for AVX-512, i.e. in kern_avx512.c).
 *
 * Same arithmetic contract as the 256-bit kernels: per super-block the integer sum of the scalar
 * reference (any order: integer addition is exact) and the scalar float epilogue, so results are
 * bit-identical to quant_traits.vec_dot. What changes:
 *   - 64 values per vector: one maddubs (u8 x s8 pairs -> int16) and one VNNI vpdpwssd (int16
 *     pairs x int16 scales -> int32, accumulating) per 64 values, no separate madd + add;
 *   - the per-16-value scales of a 64-value chunk come from one vpermw of the super-block's 16
 *     scales (index vector: lane j -> 4c + j/8);
 *   - IQ grids are read with vpgatherdq (8 table entries of 8 bytes per instruction) instead of
 *     scalar loads assembled by inserts, which were the bottleneck (one shuffle port);
 *   - IQ signs become a 64-bit mask per 64 values (one bit per value) and a masked negate of the
 *     activation bytes (AVX-512 has no vpsignb).
 */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define KERN_X86_512 1

static inline __m512i loadu512(const void *p) { return _mm512_loadu_si512(p); }

/* vpermw indices of chunk 0: int16 lane j -> scale j/8 (lanes 8k..8k+7 hold the maddubs pairs of
 * values 16k..16k+15 of the chunk); chunk c adds 4c */
static inline __m512i scale_idx0(void) {
    return _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                              15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                             3);
}

/* acc += maddubs(u, a) * (scale of each 16 values), chunk c of a super-block with 16 scales s16 */
static inline __m512i dot_chunk512(__m512i acc, __m512i u, __m512i a, __m512i s16, __m512i idx) {
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, a), _mm512_permutexvar_epi16(idx, s16));
}

/* Lane k of the result = sum of the 16 int32 lanes of a_k (the 4-row mat-vecs reduce four rows
 * together: 10 operations instead of 4 x 9). */
static inline __m128i hsum4x_i32(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
    /* lane k of the result = sum of the 16 lanes of a_k */
    const __m512i t01 =
        _mm512_add_epi32(_mm512_shuffle_i64x2(a0, a1, 0x44), _mm512_shuffle_i64x2(a0, a1, 0xee));
    const __m512i t23 =
        _mm512_add_epi32(_mm512_shuffle_i64x2(a2, a3, 0x44), _mm512_shuffle_i64x2(a2, a3, 0xee));
    /* t01 quarters: a0 lo, a0 hi, a1 lo, a1 hi (each 4 partial sums); same for t23 */
    const __m512i u =
        _mm512_add_epi32(_mm512_shuffle_i64x2(t01, t23, 0x88), _mm512_shuffle_i64x2(t01, t23, 0xdd));
    /* u quarters: a0, a1, a2, a3 (4 partial sums each) */
    const __m512i v = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, 0x4e));
    const __m512i w = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, 0xb1));
    return _mm512_castsi512_si128(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), w));
}

/* ---- IQ1_M ------------------------------------------------------------------------------------
 * The folded table (see iq1_fold) re-indexed by the raw bytes: iq1_fold_nq[n << 8 | q] for the qs
 * byte q and the 4-bit qh nibble n of a group (bits 0-2: grid index bits 8-10, bit 3: delta sign),
 * so a key is just the two bytes interleaved (one unpack), widened to 32 bits for the gather. */
#define iq1_fold_nq kern_iq1_fold_nq /* built in kern.c with kern_iq1_fold */

/* One super-block: S = sum over its 16-value blocks of ls * sum (8g + delta8) a, in 16 int32 lanes
 * (the -9 * sum ls * bsum correction included); *dbits = the fp16 super-block scale. */
static inline __m512i sb_iq1_m_512(const blk_iq1_m *b, const blk_q8_k *y, uint16_t *dbits) {
    /* scale k (of 16 values) = bits 3(k%4)..+2 of scale word k/4: pick the word per int16 lane,
     * shift per lane */
    const __m256i wsel = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4,
                                          5, 6, 7, 6, 7, 6, 7, 6, 7);
    const __m256i wsh = _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9);
    const __m512i four = _mm512_set1_epi16(4);
    const __m128i m4 = _mm_set1_epi8(15);
    uint64_t sc;
    memcpy(&sc, b->scales, 8);
    *dbits =
        (uint16_t)(((sc >> 12) & 0xf) | ((sc >> 24) & 0xf0) | ((sc >> 36) & 0xf00) | ((sc >> 48) & 0xf000));
    const __m256i w16 = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)sc), wsel);
    const __m256i l16 = _mm256_and_si256(_mm256_srlv_epi16(w16, wsh), _mm256_set1_epi16(7));
    const __m256i lsv = _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
    /* the -9 * sum ls * bsum correction starts the accumulator */
    const __m256i l9 = _mm256_add_epi16(_mm256_slli_epi16(lsv, 3), lsv);
    __m512i a0 = _mm512_zextsi256_si512(
        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(l9, loadu(y->bsums))));
    __m512i a1 = _mm512_setzero_si512(), idx = scale_idx0();
    const __m128i qh = _mm_loadu_si128((const __m128i *)b->qh);
    const __m128i nl = _mm_and_si128(qh, m4), nh = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
    const __m128i q0 = _mm_loadu_si128((const __m128i *)b->qs),
                  q1 = _mm_loadu_si128((const __m128i *)(b->qs + 16));
    const __m128i n0 = _mm_unpacklo_epi8(nl, nh), n1 = _mm_unpackhi_epi8(nl, nh); /* groups 0-15, 16-31 */
    const __m128i key[4] = {_mm_unpacklo_epi8(q0, n0), _mm_unpackhi_epi8(q0, n0), _mm_unpacklo_epi8(q1, n1),
                            _mm_unpackhi_epi8(q1, n1)};
    const __m512i s16 = _mm512_castsi256_si512(lsv);
    UNROLL for (int c = 0; c < 4; c++) {
        const __m512i g = _mm512_i32gather_epi64(_mm256_cvtepu16_epi32(key[c]), (const void *)iq1_fold_nq, 8);
        if (c & 1) a1 = dot_chunk512(a1, g, loadu512(y->qs + 64 * c), s16, idx);
        else a0 = dot_chunk512(a0, g, loadu512(y->qs + 64 * c), s16, idx);
        idx = _mm512_add_epi16(idx, four);
    }
    return _mm512_add_epi32(a0, a1);
}

static float dot_iq1_m_512(const blk_iq1_m *x, const blk_q8_k *y, int64_t nb) {
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        uint16_t dbits;
        const int S = _mm512_reduce_add_epi32(sb_iq1_m_512(&x[i], &y[i], &dbits));
        sumf += h2f(dbits) * y[i].d * ((float)S * 0.125f);
    }
    return sumf;
}
/* IQ1_M, four rows at a time (the mat-vec): sb_iq1_m_512 for 4 rows (the compiler shares their
 * activation loads), the 4 integer sums reduced together and the float epilogue evaluated in 4
 * lanes with the scalar expression and order, so each row's result is dot_iq1_m_512's bit for bit. */
static void mv_iq1_m_512(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, float *o) {
    const blk_q8_k *y = act;
    const int64_t nb = nc / QK_K;
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_iq1_m *x[4];
        UNROLL for (int k = 0; k < 4; k++) x[k] = (const blk_iq1_m *)MV4_ROW(W, rb, g, q, k);
        __m128 sumf = _mm_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            __m512i acc[4];
            uint16_t dbits[4];
            PF_ROWS4(x, i);
            UNROLL for (int k = 0; k < 4; k++) { acc[k] = sb_iq1_m_512(&x[k][i], &y[i], &dbits[k]); }
            const __m128i S = hsum4x_i32(acc[0], acc[1], acc[2], acc[3]);
            const __m128 d = _mm_cvtph_ps(_mm_setr_epi16((short)dbits[0], (short)dbits[1], (short)dbits[2],
                                                         (short)dbits[3], 0, 0, 0, 0));
            /* scalar: h2f(d) * y.d * ((float)S * 0.125f), per row */
            sumf = _mm_add_ps(sumf, _mm_mul_ps(_mm_mul_ps(d, _mm_set1_ps(y[i].d)),
                                               _mm_mul_ps(_mm_cvtepi32_ps(S), _mm_set1_ps(0.125f))));
        }
        store4(o, g, q, sumf);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        o[r] = dot_iq1_m_512((const blk_iq1_m *)((const uint8_t *)W + (size_t)r * rb), y, nb);
}

/* The one-row dot (dot_NAME_512) and 4-row mat-vec (mv_NAME_512) of a type whose super-block
 * result is d * y.d * (integer sum of sb_NAME_512's lanes) and whose row result is
 * C * (sum over super-blocks). The mat-vec runs sb for 4 rows (the compiler shares their
 * activation loads), reduces the 4 sums together and evaluates the float epilogue in 4 lanes with
 * the scalar expression and order, so each row equals the one-row dot bit for bit. */
#define MV4_D(NAME, WT, C)                                                                                   \
    static float dot_##NAME##_512(const WT *x, const blk_q8_k *y, int64_t nb) {                              \
        float sumf = 0.0f;                                                                                   \
        for (int64_t i = 0; i < nb; i++) {                                                                   \
            pf_block(&x[i], sizeof x[i]);                                                                    \
            sumf += h2f(x[i].d) * y[i].d * (float)_mm512_reduce_add_epi32(sb_##NAME##_512(&x[i], &y[i]));    \
        }                                                                                                    \
        return sumf * (C);                                                                                   \
    }                                                                                                        \
    static void mv_##NAME##_512(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act,           \
                                float *o) {                                                                  \
        const blk_q8_k *y = act;                                                                             \
        const int64_t nb = nc / QK_K;                                                                        \
        const int64_t q = nr / 4;                                                                            \
        for (int64_t g = 0; g < q; g++) {                                                                    \
            const WT *x[4];                                                                                  \
            UNROLL for (int k = 0; k < 4; k++) x[k] = (const WT *)MV4_ROW(W, rb, g, q, k);                   \
            __m128 sumf = _mm_setzero_ps();                                                                  \
            for (int64_t i = 0; i < nb; i++) {                                                               \
                __m512i acc[4];                                                                              \
                PF_ROWS4(x, i);                                                                              \
                UNROLL for (int k = 0; k < 4; k++) { acc[k] = sb_##NAME##_512(&x[k][i], &y[i]); }            \
                const __m128i S = hsum4x_i32(acc[0], acc[1], acc[2], acc[3]);                                \
                const __m128 d = _mm_cvtph_ps(_mm_setr_epi16(                                                \
                    (short)x[0][i].d, (short)x[1][i].d, (short)x[2][i].d, (short)x[3][i].d, 0, 0, 0, 0));    \
                sumf = _mm_add_ps(sumf, _mm_mul_ps(_mm_mul_ps(d, _mm_set1_ps(y[i].d)), _mm_cvtepi32_ps(S))); \
            }                                                                                                \
            store4(o, g, q, _mm_mul_ps(_mm_set1_ps(C), sumf));                                               \
        }                                                                                                    \
        for (int64_t r = 4 * q; r < nr; r++)                                                                 \
            o[r] = dot_##NAME##_512((const WT *)((const uint8_t *)W + (size_t)r * rb), y, nb);               \
    }

/* ---- IQ2_XXS / IQ2_XS / IQ3_XXS / IQ3_S -------------------------------------------------------
 * Grid magnitudes gathered per 64 values (8 entries of 8 bytes, or 16 of 4; IQ3_XXS looks them up
 * with permutes instead); the sign bits of a 64-value chunk are one 64-bit mask (bit j: value j
 * negative) that negates activation bytes. */

/* acc += sum over the chunk of scale * grid * (sign ? -a : a) */
static inline __m512i dot_chunk512_signed(__m512i acc, __m512i g, const int8_t *a, __mmask64 neg, __m512i s16,
                                          __m512i idx) {
    const __m512i av = loadu512(a);
    return dot_chunk512(acc, g, _mm512_mask_sub_epi8(av, neg, _mm512_setzero_si512(), av), s16, idx);
}

/* The 4 chunks of 64 values of a super-block: sum over chunk c of scale * grid g[c] * (sign ?
 * -a : a), with the sign bits of chunk c in sg[c]; two accumulators for two dependency chains. */
static inline __m512i sum_chunks_signed(const __m512i g[4], const int8_t *a, const uint64_t sg[4],
                                        __m512i s16) {
    const __m512i four = _mm512_set1_epi16(4);
    __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512(), idx = scale_idx0();
    for (int c = 0; c < 4; c++) {
        if (c & 1) acc2 = dot_chunk512_signed(acc2, g[c], a + 64 * c, (__mmask64)sg[c], s16, idx);
        else acc = dot_chunk512_signed(acc, g[c], a + 64 * c, (__mmask64)sg[c], s16, idx);
        idx = _mm512_add_epi16(idx, four);
    }
    return _mm512_add_epi32(acc, acc2);
}

/* one super-block: the integer sums of its 16-value blocks, times their scales, in 16 lanes */
static inline __m512i sb_iq2_xxs_512(const blk_iq2_xxs *x, const blk_q8_k *y) {
    const uint8_t *q = (const uint8_t *)x->qs; /* 8 x (w0: 4 grid indices, w1: signs + scale) */
    const __m256 A = _mm256_castsi256_ps(loadu(q)), B = _mm256_castsi256_ps(loadu(q + 32));
    const __m256i w0 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(A, B, 0x88)), 0xd8);
    const __m256i w1 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(A, B, 0xdd)), 0xd8);
    uint64_t gi[4], sg[4];
    _mm256_storeu_si256((__m256i *)gi, w0); /* the 32 grid indices in group order */
    _mm256_storeu_si256((__m256i *)sg, signs_from_words(w1));
    const __m512i s16 = _mm512_castsi256_si512(scales_from_words(w1));
    __m512i g[4];
    for (int c = 0; c < 4; c++) {
        const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(gi + c)));
        g[c] = _mm512_i32gather_epi64(k, (const void *)iq2xxs_grid, 8);
    }
    return sum_chunks_signed(g, y->qs, sg, s16);
}

MV4_D(iq2_xxs, blk_iq2_xxs, 0.125f)

/* one super-block: the integer sums of its 16-value blocks, times their scales, in 16 lanes */
static inline __m512i sb_iq2_xs_512(const blk_iq2_xs *x, const blk_q8_k *y) {
    const __m256i m9 = _mm256_set1_epi32(511);
    /* entries: bits 8..0 grid index, bits 15..9 sign index */
    const __m256i e0 = loadu(x->qs), e1 = loadu(x->qs + 16);
    const __m256i sidx = _mm256_permute4x64_epi64(
        _mm256_packus_epi16(_mm256_srli_epi16(e0, 9), _mm256_srli_epi16(e1, 9)), 0xd8);
    uint64_t sg[4];
    _mm256_storeu_si256((__m256i *)sg, ksigns_vec(sidx));
    const __m512i s16 = _mm512_castsi256_si512(iq2_half_scales(x->scales));
    __m512i g[4];
    for (int c = 0; c < 4; c++) {
        const __m256i k =
            _mm256_and_si256(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 8 * c))), m9);
        g[c] = _mm512_i32gather_epi64(k, (const void *)iq2xs_grid, 8);
    }
    return sum_chunks_signed(g, y->qs, sg, s16);
}

MV4_D(iq2_xs, blk_iq2_xs, 0.125f)

/* 32 word indices 0..255 -> their entries' words of a 256-word table (8 registers of 32) */
static inline __m512i lookup256_epi16(__m512i k, const __m512i *t) {
    const __mmask32 m6 = _mm512_test_epi16_mask(k, _mm512_set1_epi16(64)),
                    m7 = _mm512_test_epi16_mask(k, _mm512_set1_epi16(128));
    const __m512i c01 = _mm512_mask_blend_epi16(m6, _mm512_permutex2var_epi16(t[0], k, t[1]),
                                                _mm512_permutex2var_epi16(t[2], k, t[3]));
    const __m512i c23 = _mm512_mask_blend_epi16(m6, _mm512_permutex2var_epi16(t[4], k, t[5]),
                                                _mm512_permutex2var_epi16(t[6], k, t[7]));
    return _mm512_mask_blend_epi16(m7, c01, c23);
}

/* IQ3_XXS, one super-block, without gathers (Zen 4 runs vpgatherdd slowly: the gathering kernel this
 * replaced decoded the 35B-A3B UD-IQ3_XXS-like preset at 10.9-11.0 tok/s on 2 threads of a Zen 4 VM,
 * this one 13.2-14.8, the AVX2 one 12.2; 2026-12-07, not measured on Intel). Every byte of an IQ3_XXS
 * grid entry is one of 8 magnitudes, so entry i is 4 level indices of 3 bits: a 12-bit code. The 64
 * codes of a super-block come from a 256-entry word table (lookup256_epi16); each code's two 6-bit
 * halves then pick their two magnitude bytes from a 64-entry word table, and interleaving the halves'
 * words gives the entries' dwords, the bytes a gather would load. The indices are put in the order
 * that interleaving undoes (iq3_order). The integer sums and scales are then the other IQ types'
 * (sum_chunks_signed). */
static const uint8_t iq3_lev[8] = {4, 12, 20, 28, 36, 44, 52, 62};
static uint16_t iq3_code[256] __attribute__((aligned(64))); /* entry -> 4 level indices, 3 bits each */
static uint16_t iq3_pair[64] __attribute__((aligned(64)));  /* 2 level indices -> their 2 bytes */
static const uint16_t iq3_order[32]
    __attribute__((aligned(64))) = {0, 1, 2,  3,  16, 17, 18, 19, 4,  5,  6,  7,  20, 21, 22, 23,
                                    8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};

/* Fill the tables (fill_512, before any kernel runs). Every byte of the grid is one of iq3_lev: were
 * one not, its code would be wrong and test_kern's comparison with the scalar reference would fail. */
static void iq3_tables_init(void) {
    for (int v = 0; v < 64; v++) iq3_pair[v] = (uint16_t)(iq3_lev[v & 7] | iq3_lev[v >> 3] << 8);
    for (int i = 0; i < 256; i++) {
        unsigned c = 0;
        for (int j = 0; j < 4; j++) {
            const uint8_t b = (uint8_t)(iq3xxs_grid[i] >> (8 * j));
            int l = 0;
            while (l < 7 && iq3_lev[l] != b) l++;
            c |= (unsigned)l << (3 * j);
        }
        iq3_code[i] = (uint16_t)c;
    }
}

/* The grid entries of a super-block's 64 indices q[0..63], 16 per register in index order: g[c]
 * holds the magnitudes of values 64c..64c+63 (what gathering entries q[16c..16c+15] loads). Also the
 * batched kernels' decoder (dec_iq3_xxs_512, kern_x86_mm.h). */
static inline void iq3_xxs_grid64(const uint8_t *q, __m512i g[4]) {
    const __m512i *tp = (const __m512i *)iq3_pair;
    const __m512i order = _mm512_load_si512(iq3_order);
    for (int h = 0; h < 2; h++) {
        const __m512i k = _mm512_permutexvar_epi16(order, _mm512_cvtepu8_epi16(loadu(q + 32 * h)));
        const __m512i c = lookup256_epi16(k, (const __m512i *)iq3_code);
        const __m512i lo = _mm512_permutex2var_epi16(tp[0], c, tp[1]), /* index bits 0-5 only */
            hi = _mm512_permutex2var_epi16(tp[0], _mm512_srli_epi16(c, 6), tp[1]);
        g[2 * h] = _mm512_unpacklo_epi16(lo, hi);
        g[2 * h + 1] = _mm512_unpackhi_epi16(lo, hi);
    }
}

static inline __m512i sb_iq3_xxs_512(const blk_iq3_xxs *x, const blk_q8_k *y) {
    const uint8_t *q = x->qs; /* 64 grid indices, then 8 words of signs + scale */
    const __m256i w = loadu(q + 64);
    uint64_t sg[4];
    _mm256_storeu_si256((__m256i *)sg, signs_from_words(w));
    const __m512i s16 = _mm512_castsi256_si512(scales_from_words(w));
    __m512i g[4];
    iq3_xxs_grid64(q, g);
    return sum_chunks_signed(g, y->qs, sg, s16);
}

MV4_D(iq3_xxs, blk_iq3_xxs, 0.25f)

/* IQ3_S block scales 1 + 2s (one per 32 values), each for both 16-value halves: 16 int16 lanes
 * (shared with dec_iq3_s_512 in kern_x86_mm.h) */
static inline __m256i iq3_s_scales16(const blk_iq3_s *x) {
    const __m128i m4 = _mm_set1_epi8(15);
    uint32_t s4;
    memcpy(&s4, x->scales, 4);
    const __m128i sc = _mm_cvtsi32_si128((int)s4);
    const __m128i n = _mm_unpacklo_epi8(_mm_and_si128(sc, m4), _mm_and_si128(_mm_srli_epi16(sc, 4), m4));
    const __m256i l16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(n, n));
    return _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
}

/* one super-block: the integer sums of its 16-value blocks, times their scales, in 16 lanes */
static inline __m512i sb_iq3_s_512(const blk_iq3_s *x, const blk_q8_k *y) {
    const __m512i b8 = _mm512_set1_epi32(256);
    const __m512i s16 = _mm512_castsi256_si512(iq3_s_scales16(x));
    uint64_t sg[4];
    memcpy(sg, x->signs, 32);
    __m512i g[4];
    for (int c = 0; c < 4; c++) {
        /* 9-bit indices: qs byte | (bit k%8 of qh[k/8]) << 8, 16 per chunk */
        uint16_t hb;
        memcpy(&hb, x->qh + 2 * c, 2);
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 16 * c)));
        const __m512i k = _mm512_mask_or_epi32(q, (__mmask16)hb, q, b8);
        g[c] = _mm512_i32gather_epi32(k, (const void *)iq3s_grid, 4);
    }
    return sum_chunks_signed(g, y->qs, sg, s16);
}

MV4_D(iq3_s, blk_iq3_s, 1.0f)

/* ---- Q4_K / Q5_K / Q6_K / Q2_K -----------------------------------------------------------------
 * 64 bytes of codes per vector, taken in the storage order: a zmm of Q4_K nibbles holds two
 * 32-value sub-blocks that are 64 values apart (low nibbles of qs[0..63]: values 0..31 and
 * 64..95), so its activation vector is assembled from two 32-byte loads (vinserti64x4 from memory,
 * no shuffle port), and its scales are two sub-block scales, 16 int16 lanes each (vpermw). */

/* vpermw index: lanes 0-15 -> a, lanes 16-31 -> b */
static inline __m512i pair_idx(int a, int b) {
    return _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)a), _mm512_set1_epi16((short)b));
}
static inline __m512i load2x256(const void *lo, const void *hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(loadu(lo)), loadu(hi), 1);
}

/* Q4_K / Q5_K: the 8 six-bit sub-block scales as int16 lanes 0-7 (for pair_idx) and, in *summs, the
 * min term sum over sub-blocks of min * (bsum pair) */
static inline __m512i k4_scales_512(const uint8_t *scales, const int16_t *bsums, int *summs) {
    uint32_t u[3];
    memcpy(u, scales, 12);
    const uint64_t sc = (u[0] & 0x3f3f3f3f) | (uint64_t)((u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030))
                                                  << 32;
    const uint64_t m =
        (u[1] & 0x3f3f3f3f) | (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)) << 32;
    const __m128i mv = _mm_cvtsi64_si128((long long)m);
    *summs = hsum_i32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv)), loadu(bsums)));
    return _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
}

static float dot_q4_k_512(const blk_q4_k *x, const blk_q8_k *y, int64_t nb) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i ix[4] = {pair_idx(0, 2), pair_idx(1, 3), pair_idx(4, 6), pair_idx(5, 7)};
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        int summs;
        const __m512i s16 = k4_scales_512(x[i].scales, y[i].bsums, &summs);
        __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i q = loadu512(x[i].qs + 64 * h);
            const int8_t *a = y[i].qs + 128 * h;
            acc = dot_chunk512(acc, _mm512_and_si512(q, m4), load2x256(a, a + 64), s16, ix[2 * h]);
            acc2 = dot_chunk512(acc2, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                load2x256(a + 32, a + 96), s16, ix[2 * h + 1]);
        }
        const int isum = _mm512_reduce_add_epi32(_mm512_add_epi32(acc, acc2));
        sumf += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    return sumf;
}

/* Q4_K / Q5_K, four rows: the 6-bit scales and mins of rows s[0..3] unpacked together
 * (kern_x86_k.h's k45_scales4, shared with the AVX2 kernels). Returns in lane k row k's min term, sum
 * over sub-blocks j of min_j * (bsums[2j] + bsums[2j+1]); *sc8 gets row k's 8 scales as bytes
 * 8k..8k+7 (row_scales512 takes them out). */
static inline __m128i k4_scales4_512(const uint8_t *const s[4], const blk_q8_k *y, __m256i *sc8) {
    __m128i sc01, sc23;
    const __m128i summs = k45_scales4(s[0], s[1], s[2], s[3], y, &sc01, &sc23);
    *sc8 = _mm256_set_m128i(sc23, sc01);
    return summs;
}

/* row k's 8 scales from k4_scales4_512's *sc8, as int16 lanes 0-7 (for pair_idx) */
static inline __m512i row_scales512(__m256i sc8, int k) {
    const __m128i q = k & 2 ? _mm256_extracti128_si256(sc8, 1) : _mm256_castsi256_si128(sc8);
    return _mm512_castsi128_si512(_mm_cvtepu8_epi16(k & 1 ? _mm_srli_si128(q, 8) : q));
}

/* The Q4_K / Q5_K float epilogue of 4 rows in 4 lanes, added to sumf: per row (lane) the scalar
 * y.d * d * (float)isum - y.d * dmin * (float)summs, same operations in the same order. */
#define K45_EPILOGUE4(sumf, x, i, yd, isum, summs)                                                           \
    do {                                                                                                     \
        const __m128 d_ = _mm_cvtph_ps(_mm_setr_epi16((short)(x)[0][i].d, (short)(x)[1][i].d,                \
                                                      (short)(x)[2][i].d, (short)(x)[3][i].d, 0, 0, 0, 0));  \
        const __m128 dm_ =                                                                                   \
            _mm_cvtph_ps(_mm_setr_epi16((short)(x)[0][i].dmin, (short)(x)[1][i].dmin, (short)(x)[2][i].dmin, \
                                        (short)(x)[3][i].dmin, 0, 0, 0, 0));                                 \
        const __m128 yd_ = _mm_set1_ps(yd);                                                                  \
        (sumf) = _mm_add_ps((sumf), _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(yd_, d_), _mm_cvtepi32_ps(isum)),       \
                                               _mm_mul_ps(_mm_mul_ps(yd_, dm_), _mm_cvtepi32_ps(summs))));   \
    } while (0)

/* Q4_K, four rows at a time (the mat-vec): the per-super-block work that does not depend on the
 * row's codes is shared or vectorised across the rows: activation vectors loaded once, the 6-bit
 * scale/min unpacking for 4 rows in 32-bit lanes, the bsum pairs once, the 4 integer sums and 4
 * min sums reduced together (transposed), and the float epilogue evaluated in 4 lanes, one per
 * row, with exactly the scalar expression and order, so each row's result is that of
 * dot_q4_k_512 / the scalar vec_dot bit for bit. Cache-resident weights: 1.55x the one-row kernel
 * (14-16.7 vs 9.4-10.9 GB/s). Rows g, g + q, g + 2q, g + 3q, each stream prefetched ahead (MV4_ROW,
 * PF_ROWS4 in kern_x86.h: from DRAM 15.9-16.3 GB/s per thread vs 10.0-11.4 for 4 adjacent rows). */
static void mv_q4_k_512(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, float *o) {
    const blk_q8_k *y = act;
    const int64_t nb = nc / QK_K;
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i ix[4] = {pair_idx(0, 2), pair_idx(1, 3), pair_idx(4, 6), pair_idx(5, 7)};
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_q4_k *x[4];
        UNROLL for (int k = 0; k < 4; k++) x[k] = (const blk_q4_k *)MV4_ROW(W, rb, g, q, k);
        __m128 sumf = _mm_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            PF_ROWS4(x, i);
            const uint8_t *const sp[4] = {x[0][i].scales, x[1][i].scales, x[2][i].scales, x[3][i].scales};
            __m256i sc8;
            const __m128i summs = k4_scales4_512(sp, &y[i], &sc8);
            /* the activation vectors of the 4 chunk pairs */
            const int8_t *a = y[i].qs;
            const __m512i A[4] = {load2x256(a, a + 64), load2x256(a + 32, a + 96),
                                  load2x256(a + 128, a + 192), load2x256(a + 160, a + 224)};
            __m512i acc[4];
            UNROLL for (int k = 0; k < 4; k++) {
                const __m512i s16 = row_scales512(sc8, k);
                const __m512i q0 = loadu512(x[k][i].qs), q1 = loadu512(x[k][i].qs + 64);
                __m512i c = dot_chunk512(_mm512_setzero_si512(), _mm512_and_si512(q0, m4), A[0], s16, ix[0]);
                __m512i d = dot_chunk512(_mm512_setzero_si512(),
                                         _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4), A[1], s16, ix[1]);
                c = dot_chunk512(c, _mm512_and_si512(q1, m4), A[2], s16, ix[2]);
                d = dot_chunk512(d, _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4), A[3], s16, ix[3]);
                acc[k] = _mm512_add_epi32(c, d);
            }
            const __m128i isum = hsum4x_i32(acc[0], acc[1], acc[2], acc[3]);
            K45_EPILOGUE4(sumf, x, i, y[i].d, isum, summs);
        }
        store4(o, g, q, sumf);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        o[r] = dot_q4_k_512((const blk_q4_k *)((const uint8_t *)W + (size_t)r * rb), y, nb);
}

/* Q5_K: the fifth bit of value 32c + l is bit c of qh[l]; for the nibble vectors above (two
 * sub-blocks c0, c1 = c0 + 2) move bit c0 (low half) / c1 (high half) of each byte of [qh | qh] to
 * bit 4 with one variable 16-bit shift (left for c <= 4, right above; no bits cross into the
 * neighbour byte's bit 4 for shifts up to 4) */
static inline __m512i q5_hbit(__m512i qh2, int c0, int c1) {
    const __m512i sl = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)(c0 <= 4 ? 4 - c0 : 0)),
                                               _mm512_set1_epi16((short)(c1 <= 4 ? 4 - c1 : 0)));
    const __m512i sr = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)(c0 > 4 ? c0 - 4 : 0)),
                                               _mm512_set1_epi16((short)(c1 > 4 ? c1 - 4 : 0)));
    return _mm512_and_si512(_mm512_srlv_epi16(_mm512_sllv_epi16(qh2, sl), sr), _mm512_set1_epi8(16));
}

static float dot_q5_k_512(const blk_q5_k *x, const blk_q8_k *y, int64_t nb) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i ix[4] = {pair_idx(0, 2), pair_idx(1, 3), pair_idx(4, 6), pair_idx(5, 7)};
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        int summs;
        const __m512i s16 = k4_scales_512(x[i].scales, y[i].bsums, &summs);
        const __m512i qh2 = _mm512_broadcast_i64x4(loadu(x[i].qh));
        __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i q = loadu512(x[i].qs + 64 * h);
            const int8_t *a = y[i].qs + 128 * h;
            const __m512i lo = _mm512_or_si512(_mm512_and_si512(q, m4), q5_hbit(qh2, 4 * h, 4 * h + 2));
            const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                               q5_hbit(qh2, 4 * h + 1, 4 * h + 3));
            acc = dot_chunk512(acc, lo, load2x256(a, a + 64), s16, ix[2 * h]);
            acc2 = dot_chunk512(acc2, hi, load2x256(a + 32, a + 96), s16, ix[2 * h + 1]);
        }
        const int isum = _mm512_reduce_add_epi32(_mm512_add_epi32(acc, acc2));
        sumf += y[i].d * h2f(x[i].d) * (float)isum - y[i].d * h2f(x[i].dmin) * (float)summs;
    }
    return sumf;
}

/* Q5_K, four rows at a time (the mat-vec): mv_q4_k_512's structure (activation vectors, scale/min
 * unpacking and min sums shared or vectorised over the rows, transposed reduction, float epilogue
 * in 4 lanes with the scalar expression and order: each row's result is dot_q5_k_512's bit for
 * bit) plus the fifth bits. Those are taken per chunk as a 64-bit mask (vptestmb of [qh | qh]
 * against the chunk's two bit positions, c0 in the low half, c1 in the high half) and added as 16
 * with a masked byte add: 2 operations per chunk instead of q5_hbit's shifts, and + or. Zen 4 VM,
 * one thread, hot 512 KiB: 1.5x the one-row kernel (20.3-20.9 vs 13.7-13.8 GB/s, medians). */
static void mv_q5_k_512(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, float *o) {
    const blk_q8_k *y = act;
    const int64_t nb = nc / QK_K;
    const __m512i m4 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    const __m512i ix[4] = {pair_idx(0, 2), pair_idx(1, 3), pair_idx(4, 6), pair_idx(5, 7)};
    /* chunk j (nibble vector of ix[j]) holds sub-blocks (0, 2), (1, 3), (4, 6), (5, 7): their bits */
    const __m512i hb[4] = {
        _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8(1), _mm512_set1_epi8(4)),
        _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8(2), _mm512_set1_epi8(8)),
        _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8(16), _mm512_set1_epi8(64)),
        _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8(32), _mm512_set1_epi8(-128))};
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_q5_k *x[4];
        UNROLL for (int k = 0; k < 4; k++) x[k] = (const blk_q5_k *)MV4_ROW(W, rb, g, q, k);
        __m128 sumf = _mm_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            PF_ROWS4(x, i);
            const uint8_t *const sp[4] = {x[0][i].scales, x[1][i].scales, x[2][i].scales, x[3][i].scales};
            __m256i sc8;
            const __m128i summs = k4_scales4_512(sp, &y[i], &sc8);
            const int8_t *a = y[i].qs;
            const __m512i A[4] = {load2x256(a, a + 64), load2x256(a + 32, a + 96),
                                  load2x256(a + 128, a + 192), load2x256(a + 160, a + 224)};
            __m512i acc[4];
            UNROLL for (int k = 0; k < 4; k++) {
                const __m512i s16 = row_scales512(sc8, k);
                const __m512i qh2 = _mm512_broadcast_i64x4(loadu(x[k][i].qh));
                const __m512i q0 = loadu512(x[k][i].qs), q1 = loadu512(x[k][i].qs + 64);
                const __m512i n[4] = {
                    _mm512_and_si512(q0, m4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4),
                    _mm512_and_si512(q1, m4), _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4)};
                __m512i v[4];
                UNROLL for (int j = 0; j < 4; j++) v[j] =
                    _mm512_mask_add_epi8(n[j], _mm512_test_epi8_mask(qh2, hb[j]), n[j], b16);
                __m512i c = dot_chunk512(_mm512_setzero_si512(), v[0], A[0], s16, ix[0]);
                __m512i d = dot_chunk512(_mm512_setzero_si512(), v[1], A[1], s16, ix[1]);
                c = dot_chunk512(c, v[2], A[2], s16, ix[2]);
                d = dot_chunk512(d, v[3], A[3], s16, ix[3]);
                acc[k] = _mm512_add_epi32(c, d);
            }
            const __m128i isum = hsum4x_i32(acc[0], acc[1], acc[2], acc[3]);
            K45_EPILOGUE4(sumf, x, i, y[i].d, isum, summs);
        }
        store4(o, g, q, sumf);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        o[r] = dot_q5_k_512((const blk_q5_k *)((const uint8_t *)W + (size_t)r * rb), y, nb);
}

/* Q6_K: half h: codes of values 128h + 32r + l from ql[64h + l + 32(r&1)] (low nibble for r < 2)
 * and bits 2r..2r+1 of qh[32h + l]; a zmm of ql[64h..64h+63] low nibbles = values r = 0 | r = 1,
 * high nibbles = r = 2 | r = 3 (consecutive: the activation is one plain load). Unsigned codes
 * 0..63 with the -32 through bsums. */
static float dot_q6_k_512(const blk_q6_k *x, const blk_q8_k *y, int64_t nb) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i idx0 = scale_idx0(), four = _mm512_set1_epi16(4);
    /* bits 2r..2r+1 of qh to bits 4..5: r = 0 | 1 -> shift left 4 | 2; r = 2 | 3 -> 0 | right 2 */
    const __m512i sl_lo = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i sr_hi = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
    const __m512i m30 = _mm512_set1_epi8(0x30);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const int corr = hsum_i32(_mm256_madd_epi16(sc16, loadu(y[i].bsums)));
        const __m512i s16 = _mm512_castsi256_si512(sc16);
        __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512(), idx = idx0;
        for (int h = 0; h < 2; h++) {
            const __m512i L = loadu512(x[i].ql + 64 * h);
            const __m512i H = _mm512_broadcast_i64x4(loadu(x[i].qh + 32 * h));
            const __m512i c01 =
                _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_and_si512(_mm512_sllv_epi16(H, sl_lo), m30));
            const __m512i c23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                                _mm512_and_si512(_mm512_srlv_epi16(H, sr_hi), m30));
            acc = dot_chunk512(acc, c01, loadu512(y[i].qs + 128 * h), s16, idx);
            idx = _mm512_add_epi16(idx, four);
            acc2 = dot_chunk512(acc2, c23, loadu512(y[i].qs + 128 * h + 64), s16, idx);
            idx = _mm512_add_epi16(idx, four);
        }
        const int isum = _mm512_reduce_add_epi32(_mm512_add_epi32(acc, acc2)) - 32 * corr;
        sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}

/* Q6_K, four rows at a time (the mat-vec): the 4 activation vectors of a super-block loaded once
 * for the 4 rows; each row's -32 * sum scale * bsum correction starts its accumulator instead of
 * being reduced on its own ((32 scale) * (-bsum) pairs: |32 scale| <= 4096 fits int16, the pair
 * sums fit int32; integer sums, so the order does not matter), the 4 sums reduced together
 * (hsum4x_i32) and the float epilogue evaluated in 4 lanes with the scalar expression and order,
 * h2f(d) * y.d * (float)isum, so each row's result is dot_q6_k_512's bit for bit. Zen 4 VM, one
 * thread, hot 512 KiB: 27.5-28.4 vs 19.7-25.3 GB/s (medians). Scales by vpshufb of broadcast
 * halves instead of vpermw: no faster (27-28 GB/s); prefetching 2 or 3 groups ahead: slower. */
static void mv_q6_k_512(const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, float *o) {
    const blk_q8_k *y = act;
    const int64_t nb = nc / QK_K;
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i sl_lo = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i sr_hi = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
    const __m512i four = _mm512_set1_epi16(4);
    const __m512i idx[4] = {scale_idx0(), _mm512_add_epi16(scale_idx0(), four),
                            _mm512_add_epi16(scale_idx0(), _mm512_add_epi16(four, four)),
                            _mm512_add_epi16(scale_idx0(), _mm512_set1_epi16(12))};
    const int64_t q = nr / 4;
    for (int64_t g = 0; g < q; g++) {
        const blk_q6_k *x[4];
        UNROLL for (int k = 0; k < 4; k++) x[k] = (const blk_q6_k *)MV4_ROW(W, rb, g, q, k);
        __m128 sumf = _mm_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            PF_ROWS4(x, i);
            const __m256i nbs = _mm256_sub_epi16(_mm256_setzero_si256(), loadu(y[i].bsums));
            const __m512i A[4] = {loadu512(y[i].qs), loadu512(y[i].qs + 64), loadu512(y[i].qs + 128),
                                  loadu512(y[i].qs + 192)};
            __m512i acc[4];
            UNROLL for (int k = 0; k < 4; k++) {
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[k][i].scales));
                const __m512i s16 = _mm512_castsi256_si512(sc16);
                __m512i c = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_slli_epi16(sc16, 5), nbs));
                __m512i d = _mm512_setzero_si512();
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m512i L = loadu512(x[k][i].ql + 64 * h);
                    const __m512i H = _mm512_broadcast_i64x4(loadu(x[k][i].qh + 32 * h));
                    const __m512i c01 = _mm512_or_si512(_mm512_and_si512(L, m4),
                                                        _mm512_and_si512(_mm512_sllv_epi16(H, sl_lo), m30));
                    const __m512i c23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                                        _mm512_and_si512(_mm512_srlv_epi16(H, sr_hi), m30));
                    c = dot_chunk512(c, c01, A[2 * h], s16, idx[2 * h]);
                    d = dot_chunk512(d, c23, A[2 * h + 1], s16, idx[2 * h + 1]);
                }
                acc[k] = _mm512_add_epi32(c, d);
            }
            const __m128i isum = hsum4x_i32(acc[0], acc[1], acc[2], acc[3]);
            const __m128 d = _mm_cvtph_ps(_mm_setr_epi16((short)x[0][i].d, (short)x[1][i].d, (short)x[2][i].d,
                                                         (short)x[3][i].d, 0, 0, 0, 0));
            /* scalar: h2f(d) * y.d * (float)isum, per row */
            sumf = _mm_add_ps(sumf, _mm_mul_ps(_mm_mul_ps(d, _mm_set1_ps(y[i].d)), _mm_cvtepi32_ps(isum)));
        }
        store4(o, g, q, sumf);
    }
    for (int64_t r = 4 * q; r < nr; r++)
        o[r] = dot_q6_k_512((const blk_q6_k *)((const uint8_t *)W + (size_t)r * rb), y, nb);
}

/* Q2_K: value 128h + 32j + l = bits 2j..2j+1 of qs[32h + l]; a zmm of [qs[32h..] | same] shifted
 * by 2j | 2j + 2 per half gives values 32j.. | 32(j+1).. of half h (consecutive) */
static float dot_q2_k_512(const blk_q2_k *x, const blk_q8_k *y, int64_t nb) {
    const __m512i m3 = _mm512_set1_epi8(3), idx0 = scale_idx0(), four = _mm512_set1_epi16(4);
    const __m512i sh0 = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
    const __m512i sh1 = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(6));
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
        const int summs = hsum_i32(_mm256_madd_epi16(mins, loadu(y[i].bsums)));
        const __m512i s16 =
            _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(15))));
        __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512(), idx = idx0;
        for (int h = 0; h < 2; h++) {
            const __m512i Q = _mm512_broadcast_i64x4(loadu(x[i].qs + 32 * h));
            acc = dot_chunk512(acc, _mm512_and_si512(_mm512_srlv_epi16(Q, sh0), m3),
                               loadu512(y[i].qs + 128 * h), s16, idx);
            idx = _mm512_add_epi16(idx, four);
            acc2 = dot_chunk512(acc2, _mm512_and_si512(_mm512_srlv_epi16(Q, sh1), m3),
                                loadu512(y[i].qs + 128 * h + 64), s16, idx);
            idx = _mm512_add_epi16(idx, four);
        }
        const int isum = _mm512_reduce_add_epi32(_mm512_add_epi32(acc, acc2));
        const float dall = y[i].d * h2f(x[i].d);
        const float dmin = y[i].d * h2f(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}
ROWS_MATVEC(mv_q2_k_512, dot_q2_k_512, blk_q2_k, blk_q8_k, QK_K)

static void fill_512(kern_table *t) {
    t->matvec[QT_IQ1_M] = mv_iq1_m_512;
    t->matvec[QT_IQ2_XXS] = mv_iq2_xxs_512;
    t->matvec[QT_IQ2_XS] = mv_iq2_xs_512;
    iq3_tables_init();
    t->matvec[QT_IQ3_XXS] = mv_iq3_xxs_512;
    t->matvec[QT_IQ3_S] = mv_iq3_s_512;
    t->matvec[QT_Q2_K] = mv_q2_k_512;
    t->matvec[QT_Q4_K] = mv_q4_k_512;
    t->matvec[QT_Q5_K] = mv_q5_k_512;
    /* Q6_K: the 4-row kernel (four streams, MV4_ROW); the one-row kernel it replaced measured slower
     * (docs/TUNING.md, "Deleted variants") and is gone */
    t->matvec[QT_Q6_K] = mv_q6_k_512;
}

#else
static void fill_512(kern_table *t) { (void)t; }
#endif
