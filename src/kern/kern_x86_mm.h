/* kern_x86_mm.h — batched kernels (several activation rows per weight row) for the K and IQ types;
 * part of kern_x86.h (included there only, after the mat-vec kernels whose helpers it uses).
 *
 * Prefill, speculative verify and the experts of a batch multiply one weight matrix by T activation
 * rows. The mat-vec kernels would decode every weight super-block T times; here a group of weight
 * rows is decoded ONCE into a canonical form (kdsb below) and then applied to the activation rows
 * eight at a time:
 *
 *     u[256]   unsigned codes in value order; the weight value, in the type's integer unit, is
 *              u - off (off: 0 for Q2_K/Q4_K/Q5_K, 32 for Q6_K, 43 for IQ2_XXS/IQ2_XS, 62 for
 *              IQ3_XXS, 15 for IQ3_S, 9 for IQ1_M whose unit is 1/8 and whose codes carry the
 *              +-1/8 delta, see iq1_fold). Signs of the IQ grids are applied here, once.
 *     s16[16]  the int16 scale of each 16 values (the core broadcasts them per maddubs pair)
 *     bc[16]   off * scale of each 16 values, subtracted through the activation's bsums:
 *              sum_k s_k sum_j (u_j - off) a_j = sum_k s_k sum_j u_j a_j - sum_k off s_k bsum_k
 *     mn[16]   the min of each 16 values (Q2_K, Q4_K, Q5_K): summs = sum_k mn_k bsum_k
 *     d, dmin  the float super-block scales
 *
 * Per activation row and super-block the integer sums are the scalar reference's (integer addition
 * is exact in any order: maddubs pairs stay below 2 * 126 * 127 < 2^15, no int32 overflow), and the
 * float epilogue is the scalar expression evaluated in one SIMD lane per activation row, in the
 * same order, without FMA contraction: so every output equals quant_traits.vec_dot (and
 * kern_matvec) bit for bit.
 */

typedef struct {
    uint8_t u[256];
    int16_t s16[16];
    int16_t bc[16];
    int16_t mn[16];
    float d, dmin;
    float pad_[6];
} kdsb;
_Static_assert(
    sizeof(kdsb) % 64 == 0,
    "kdsb keeps 64-byte alignment in arrays (the AVX-512 decoders store u with aligned 512-bit stores)");

enum {
    EP_MIN,
    EP_PLAIN,
    EP_IQ1
}; /* epilogue: (yd*d)*isum - (yd*dmin)*summs | (d*yd)*isum | (d*yd)*(isum/8) */

static inline void kdsb_scales16(kdsb *o, __m256i s16) { _mm256_store_si256((__m256i *)o->s16, s16); }

/* ---- decoders: one super-block -> kdsb ------------------------------------------------------- */

static inline void dec_q2_k(const void *p, kdsb *o) {
    const blk_q2_k *x = p;
    const __m128i sc = _mm_loadu_si128((const __m128i *)x->scales);
    kdsb_scales16(o, _mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(15))));
    _mm256_store_si256((__m256i *)o->mn,
                       _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15))));
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i Q = loadu(x->qs + 32 * h);
        for (int j = 0; j < 4; j++)
            _mm256_store_si256((__m256i *)(o->u + 128 * h + 32 * j), _mm256_and_si256(srl16(Q, 2 * j), m3));
    }
    o->d = h2f(x->d);
    o->dmin = h2f(x->dmin);
}

/* Q4_K/Q5_K scales (one per 32 values) and mins, as k45_scales */
static inline void dec_k45_scales(const uint8_t *scales, kdsb *o) {
    uint32_t u[3];
    memcpy(u, scales, 12);
    const uint64_t sc = (u[0] & 0x3f3f3f3f) | (uint64_t)((u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030))
                                                  << 32;
    const uint64_t m =
        (u[1] & 0x3f3f3f3f) | (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)) << 32;
    const __m128i sv = _mm_cvtsi64_si128((long long)sc);
    kdsb_scales16(o, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sv, sv)));
    const __m128i mv = _mm_cvtsi64_si128((long long)m);
    _mm256_store_si256((__m256i *)o->mn, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv)));
}

static inline void dec_q4_k(const void *p, kdsb *o) {
    const blk_q4_k *x = p;
    dec_k45_scales(x->scales, o);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int c = 0; c < 4; c++) {
        const __m256i q = loadu(x->qs + 32 * c);
        _mm256_store_si256((__m256i *)(o->u + 64 * c), _mm256_and_si256(q, m4));
        _mm256_store_si256((__m256i *)(o->u + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
    o->d = h2f(x->d);
    o->dmin = h2f(x->dmin);
}

static inline void dec_q5_k(const void *p, kdsb *o) {
    const blk_q5_k *x = p;
    dec_k45_scales(x->scales, o);
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1), qh = loadu(x->qh);
    for (int c = 0; c < 4; c++) {
        const __m256i q = loadu(x->qs + 32 * c);
        const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c), one), 4);
        const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c + 1), one), 4);
        _mm256_store_si256((__m256i *)(o->u + 64 * c), _mm256_or_si256(_mm256_and_si256(q, m4), hl));
        _mm256_store_si256((__m256i *)(o->u + 64 * c + 32),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hh));
    }
    o->d = h2f(x->d);
    o->dmin = h2f(x->dmin);
}

static inline void dec_q6_k(const void *p, kdsb *o) {
    const blk_q6_k *x = p;
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    kdsb_scales16(o, sc16);
    _mm256_store_si256((__m256i *)o->bc, _mm256_slli_epi16(sc16, 5)); /* 32 * s */
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i L0 = loadu(x->ql + 64 * h), L1 = loadu(x->ql + 64 * h + 32), H = loadu(x->qh + 32 * h);
        uint8_t *u = o->u + 128 * h;
        _mm256_store_si256((__m256i *)u, _mm256_or_si256(_mm256_and_si256(L0, m4),
                                                         _mm256_slli_epi16(_mm256_and_si256(H, m3), 4)));
        _mm256_store_si256(
            (__m256i *)(u + 32),
            _mm256_or_si256(_mm256_and_si256(L1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m3), 4)));
        _mm256_store_si256(
            (__m256i *)(u + 64),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m3), 4)));
        _mm256_store_si256(
            (__m256i *)(u + 96),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m3), 4)));
    }
    o->d = h2f(x->d);
}

/* grid magnitudes g (bytes) with sign bytes +-1 s -> u = sign(g) + off */
static inline __m256i signed_codes(__m256i g, __m256i s, int off) {
    return _mm256_add_epi8(_mm256_sign_epi8(g, s), _mm256_set1_epi8((char)off));
}

static inline void dec_iq2_xxs(const void *p, kdsb *o) {
    const blk_iq2_xxs *x = p;
    const uint8_t *q = (const uint8_t *)x->qs;
    const __m256 A = _mm256_castsi256_ps(loadu(q)), B = _mm256_castsi256_ps(loadu(q + 32));
    const __m256i w1 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(A, B, 0xdd)), 0xd8);
    uint8_t sg[32] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)sg, signs_from_words(w1));
    const __m256i lsv = scales_from_words(w1);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(43)));
    for (int ib = 0; ib < 8; ib++) {
        uint32_t w0;
        memcpy(&w0, q + 8 * ib, 4);
        const __m256i g =
            _mm256_set_epi64x((long long)iq2xxs_grid[w0 >> 24], (long long)iq2xxs_grid[(w0 >> 16) & 255],
                              (long long)iq2xxs_grid[(w0 >> 8) & 255], (long long)iq2xxs_grid[w0 & 255]);
        _mm256_store_si256((__m256i *)(o->u + 32 * ib), signed_codes(g, signs_at(sg + 4 * ib), 43));
    }
    o->d = h2f(x->d);
}

static inline void dec_iq2_xs(const void *p, kdsb *o) {
    const blk_iq2_xs *x = p;
    const __m256i e0 = loadu(x->qs), e1 = loadu(x->qs + 16);
    const __m256i idx = _mm256_permute4x64_epi64(
        _mm256_packus_epi16(_mm256_srli_epi16(e0, 9), _mm256_srli_epi16(e1, 9)), 0xd8);
    uint8_t sg[32] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)sg, ksigns_vec(idx));
    const __m256i lsv = iq2_half_scales(x->scales);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(43)));
    for (int ib = 0; ib < 8; ib++) {
        uint64_t e;
        memcpy(&e, x->qs + 4 * ib, 8);
        const __m256i g =
            _mm256_set_epi64x((long long)iq2xs_grid[(e >> 48) & 511], (long long)iq2xs_grid[(e >> 32) & 511],
                              (long long)iq2xs_grid[(e >> 16) & 511], (long long)iq2xs_grid[e & 511]);
        _mm256_store_si256((__m256i *)(o->u + 32 * ib), signed_codes(g, signs_at(sg + 4 * ib), 43));
    }
    o->d = h2f(x->d);
}

static inline void dec_iq3_xxs(const void *p, kdsb *o) {
    const blk_iq3_xxs *x = p;
    const uint8_t *q = x->qs;
    const __m256i w = loadu(q + 64);
    uint8_t sg[32] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)sg, signs_from_words(w));
    const __m256i lsv = scales_from_words(w);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(62)));
    for (int ib = 0; ib < 8; ib++) {
        uint64_t gi;
        memcpy(&gi, q + 8 * ib, 8);
        const __m256i g =
            _mm256_set_epi32((int)iq3xxs_grid[gi >> 56], (int)iq3xxs_grid[(gi >> 48) & 255],
                             (int)iq3xxs_grid[(gi >> 40) & 255], (int)iq3xxs_grid[(gi >> 32) & 255],
                             (int)iq3xxs_grid[(gi >> 24) & 255], (int)iq3xxs_grid[(gi >> 16) & 255],
                             (int)iq3xxs_grid[(gi >> 8) & 255], (int)iq3xxs_grid[gi & 255]);
        _mm256_store_si256((__m256i *)(o->u + 32 * ib), signed_codes(g, signs_at(sg + 4 * ib), 62));
    }
    o->d = h2f(x->d);
}

static inline void dec_iq3_s(const void *p, kdsb *o) {
    const blk_iq3_s *x = p;
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL), one = _mm256_set1_epi8(1);
    uint16_t idx[64] __attribute__((aligned(32)));
    for (int v = 0; v < 2; v++) {
        int32_t hb;
        memcpy(&hb, x->qh + 4 * v, 4);
        const __m256i e = _mm256_shuffle_epi8(_mm256_set1_epi32(hb), shuf);
        const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(e, bit), bit), one);
        const __m256i q = loadu(x->qs + 32 * v);
        const __m256i lo = _mm256_unpacklo_epi8(q, h), hi = _mm256_unpackhi_epi8(q, h);
        _mm256_store_si256((__m256i *)idx + 2 * v, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_store_si256((__m256i *)idx + 2 * v + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    uint32_t s4;
    memcpy(&s4, x->scales, 4);
    const __m128i sc = _mm_cvtsi32_si128((int)s4), m4 = _mm_set1_epi8(15);
    const __m128i n = _mm_unpacklo_epi8(_mm_and_si128(sc, m4), _mm_and_si128(_mm_srli_epi16(sc, 4), m4));
    const __m256i l16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(n, n));
    const __m256i lsv = _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(15)));
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t *k = idx + 8 * ib;
        const __m256i g = _mm256_set_epi32((int)iq3s_grid[k[7]], (int)iq3s_grid[k[6]], (int)iq3s_grid[k[5]],
                                           (int)iq3s_grid[k[4]], (int)iq3s_grid[k[3]], (int)iq3s_grid[k[2]],
                                           (int)iq3s_grid[k[1]], (int)iq3s_grid[k[0]]);
        _mm256_store_si256((__m256i *)(o->u + 32 * ib), signed_codes(g, signs_at(x->signs + 4 * ib), 15));
    }
    o->d = h2f(x->d);
}

static inline void dec_iq1_m(const void *p, kdsb *o) {
    const blk_iq1_m *x = p;
    const __m256i sel0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                  sel1 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9), m7 = _mm256_set1_epi32(7);
    uint64_t sc;
    memcpy(&sc, x->scales, 8);
    const uint16_t dbits =
        (uint16_t)(((sc >> 12) & 0xf) | ((sc >> 24) & 0xf0) | ((sc >> 36) & 0xf00) | ((sc >> 48) & 0xf000));
    const __m256i w32 = _mm256_cvtepu16_epi32(_mm_cvtsi64_si128((long long)sc));
    const __m256i v0 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(w32, sel0), sh), m7);
    const __m256i v1 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(w32, sel1), sh), m7);
    const __m256i l16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xd8);
    const __m256i lsv = _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(9)));
    uint16_t keys[32] __attribute__((aligned(32)));
    const __m128i qh = _mm_loadu_si128((const __m128i *)x->qh), m4 = _mm_set1_epi8(15);
    const __m128i nl = _mm_and_si128(qh, m4), nh = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
    const __m128i nib[2] = {_mm_unpacklo_epi8(nl, nh), _mm_unpackhi_epi8(nl, nh)};
    for (int v = 0; v < 2; v++) {
        const __m256i n16 = _mm256_cvtepu8_epi16(nib[v]);
        const __m256i q16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(x->qs + 16 * v)));
        const __m256i k =
            _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(q16, 1), _mm256_srli_epi16(n16, 3)),
                            _mm256_slli_epi16(_mm256_and_si256(n16, _mm256_set1_epi16(7)), 9));
        _mm256_store_si256((__m256i *)keys + v, k);
    }
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t *k = keys + 4 * ib;
        _mm256_store_si256((__m256i *)(o->u + 32 * ib),
                           _mm256_set_epi64x((long long)iq1_fold[k[3]], (long long)iq1_fold[k[2]],
                                             (long long)iq1_fold[k[1]], (long long)iq1_fold[k[0]]));
    }
    o->d = h2f(dbits);
}

#if defined(KERN_X86_512)
/* AVX-512 decoders of the IQ types: grids by gather (IQ3_XXS: by permutes; see kern_x86_512.h), signs applied
 * to the gathered magnitudes with the 64-bit sign mask of each 64 values, then + off. */
static inline void store_signed512(uint8_t *u, __m512i g, __mmask64 neg, int off) {
    const __m512i w = _mm512_mask_sub_epi8(g, neg, _mm512_setzero_si512(), g);
    _mm512_store_si512((void *)u, _mm512_add_epi8(w, _mm512_set1_epi8((char)off)));
}

static inline void dec_iq1_m_512(const void *p, kdsb *o) {
    const blk_iq1_m *x = p;
    const __m256i wsel = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4,
                                          5, 6, 7, 6, 7, 6, 7, 6, 7);
    const __m256i wsh = _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9);
    const __m128i m4 = _mm_set1_epi8(15);
    uint64_t sc;
    memcpy(&sc, x->scales, 8);
    const uint16_t dbits =
        (uint16_t)(((sc >> 12) & 0xf) | ((sc >> 24) & 0xf0) | ((sc >> 36) & 0xf00) | ((sc >> 48) & 0xf000));
    const __m256i w16 = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)sc), wsel);
    const __m256i l16 = _mm256_and_si256(_mm256_srlv_epi16(w16, wsh), _mm256_set1_epi16(7));
    const __m256i lsv = _mm256_add_epi16(_mm256_add_epi16(l16, l16), _mm256_set1_epi16(1));
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_add_epi16(_mm256_slli_epi16(lsv, 3), lsv));
    const __m128i qh = _mm_loadu_si128((const __m128i *)x->qh);
    const __m128i nl = _mm_and_si128(qh, m4), nh = _mm_and_si128(_mm_srli_epi16(qh, 4), m4);
    const __m128i nib[2] = {_mm_unpacklo_epi8(nl, nh), _mm_unpackhi_epi8(nl, nh)};
    for (int c = 0; c < 4; c++) {
        const __m128i q = _mm_loadu_si128((const __m128i *)(x->qs + 16 * (c >> 1)));
        const __m128i k = (c & 1) ? _mm_unpackhi_epi8(q, nib[c >> 1]) : _mm_unpacklo_epi8(q, nib[c >> 1]);
        _mm512_store_si512((void *)(o->u + 64 * c),
                           _mm512_i32gather_epi64(_mm256_cvtepu16_epi32(k), (const void *)iq1_fold_nq, 8));
    }
    o->d = h2f(dbits);
}

static inline void dec_iq2_xxs_512(const void *p, kdsb *o) {
    const blk_iq2_xxs *x = p;
    const uint8_t *q = (const uint8_t *)x->qs;
    const __m256 A = _mm256_castsi256_ps(loadu(q)), B = _mm256_castsi256_ps(loadu(q + 32));
    const __m256i w0 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(A, B, 0x88)), 0xd8);
    const __m256i w1 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(A, B, 0xdd)), 0xd8);
    uint64_t gi[4], sg[4];
    _mm256_storeu_si256((__m256i *)gi, w0);
    _mm256_storeu_si256((__m256i *)sg, signs_from_words(w1));
    const __m256i lsv = scales_from_words(w1);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(43)));
    for (int c = 0; c < 4; c++) {
        const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(gi + c)));
        store_signed512(o->u + 64 * c, _mm512_i32gather_epi64(k, (const void *)iq2xxs_grid, 8),
                        (__mmask64)sg[c], 43);
    }
    o->d = h2f(x->d);
}

static inline void dec_iq2_xs_512(const void *p, kdsb *o) {
    const blk_iq2_xs *x = p;
    const __m256i e0 = loadu(x->qs), e1 = loadu(x->qs + 16);
    const __m256i sidx = _mm256_permute4x64_epi64(
        _mm256_packus_epi16(_mm256_srli_epi16(e0, 9), _mm256_srli_epi16(e1, 9)), 0xd8);
    uint64_t sg[4];
    _mm256_storeu_si256((__m256i *)sg, ksigns_vec(sidx));
    const __m256i lsv = iq2_half_scales(x->scales);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(43)));
    for (int c = 0; c < 4; c++) {
        const __m256i k = _mm256_and_si256(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 8 * c))), _mm256_set1_epi32(511));
        store_signed512(o->u + 64 * c, _mm512_i32gather_epi64(k, (const void *)iq2xs_grid, 8),
                        (__mmask64)sg[c], 43);
    }
    o->d = h2f(x->d);
}

static inline void dec_iq3_xxs_512(const void *p, kdsb *o) {
    const blk_iq3_xxs *x = p;
    const uint8_t *q = x->qs;
    const __m256i w = loadu(q + 64);
    uint64_t sg[4];
    _mm256_storeu_si256((__m256i *)sg, signs_from_words(w));
    const __m256i lsv = scales_from_words(w);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(62)));
    __m512i g[4];
    iq3_xxs_grid64(q, g); /* by permutes, not a gather (kern_x86_512.h) */
    for (int c = 0; c < 4; c++) store_signed512(o->u + 64 * c, g[c], (__mmask64)sg[c], 62);
    o->d = h2f(x->d);
}

static inline void dec_iq3_s_512(const void *p, kdsb *o) {
    const blk_iq3_s *x = p;
    const __m256i lsv = iq3_s_scales16(x);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16(15)));
    for (int c = 0; c < 4; c++) {
        uint16_t hb;
        memcpy(&hb, x->qh + 2 * c, 2);
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 16 * c)));
        const __m512i k = _mm512_mask_or_epi32(q, (__mmask16)hb, q, _mm512_set1_epi32(256));
        uint64_t sg;
        memcpy(&sg, x->signs + 8 * c, 8);
        store_signed512(o->u + 64 * c, _mm512_i32gather_epi32(k, (const void *)iq3s_grid, 4), (__mmask64)sg,
                        15);
    }
    o->d = h2f(x->d);
}
#define DEC_IQ(name) dec_##name##_512
#define MV_LEVEL(name) mv_##name##_512 /* the level's own mat-vec, for the fallback */
#else
#define DEC_IQ(name) dec_##name
#define MV_LEVEL(name) mv_##name
#endif

/* ---- the core: one decoded weight row x N activation rows ------------------------------------- */

/* int32 lanes += int16 pairs p * s16 */
static inline __m256i madd_acc(__m256i acc, __m256i p, __m256i s16) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpwssd_epi32(acc, p, s16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s16));
#endif
}

/* lane t of the result = sum of the 8 int32 lanes of v[t] (exact) */
static inline __m256i hsum8_i32(const __m256i *v) {
    const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* One decoded weight row (nsb super-blocks) against N activation rows ap[0..N) (Q8_K rows);
 * writes o[t * ldo] for t < nstore. mode/bias/post are compile-time constants of each kernel. */
KI void mm_core(const kdsb *w, int64_t nsb, const uint8_t *const *ap, int N, int mode, int bias, float post,
                float *o, size_t ldo, int nstore) {
    __m256 sumf = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const kdsb *b = w + i;
        const blk_q8_k *y[8];
        UNROLL for (int t = 0; t < N; t++) y[t] = (const blk_q8_k *)ap[t] + i;
        __m256i acc[8], ms[8];
        UNROLL for (int t = 0; t < 8; t++) acc[t] = ms[t] = _mm256_setzero_si256();
        const __m256i s16 = _mm256_load_si256((const __m256i *)b->s16);
        const __m256i lanes[2] = {_mm256_permute2x128_si256(s16, s16, 0x00),
                                  _mm256_permute2x128_si256(s16, s16, 0x11)};
        __m256i ctrl = scale_ctrl0();
        UNROLL for (int c = 0; c < 8; c++) {
            const __m256i u = _mm256_load_si256((const __m256i *)(b->u + 32 * c));
            const __m256i s = _mm256_shuffle_epi8(lanes[c / 4], ctrl);
            ctrl = c == 3 ? scale_ctrl0() : scale_step(ctrl);
            UNROLL for (int t = 0; t < N; t++) acc[t] =
                madd_acc(acc[t], _mm256_maddubs_epi16(u, loadu(y[t]->qs + 32 * c)), s);
        }
        if (bias) {
            const __m256i bc = _mm256_load_si256((const __m256i *)b->bc);
            UNROLL for (int t = 0; t < N; t++) acc[t] =
                _mm256_sub_epi32(acc[t], _mm256_madd_epi16(bc, loadu(y[t]->bsums)));
        }
        float ydv[8] = {0};
        UNROLL for (int t = 0; t < N; t++) ydv[t] = y[t]->d;
        const __m256 yd = _mm256_loadu_ps(ydv);
        __m256 fi = _mm256_cvtepi32_ps(N == 1 ? _mm256_set1_epi32(hsum_i32(acc[0])) : hsum8_i32(acc));
        __m256 term;
        if (mode == EP_MIN) {
            const __m256i mn = _mm256_load_si256((const __m256i *)b->mn);
            UNROLL for (int t = 0; t < N; t++) ms[t] = _mm256_madd_epi16(mn, loadu(y[t]->bsums));
            const __m256 fm = _mm256_cvtepi32_ps(N == 1 ? _mm256_set1_epi32(hsum_i32(ms[0])) : hsum8_i32(ms));
            term = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(yd, _mm256_set1_ps(b->d)), fi),
                                 _mm256_mul_ps(_mm256_mul_ps(yd, _mm256_set1_ps(b->dmin)), fm));
        } else {
            if (mode == EP_IQ1) fi = _mm256_mul_ps(fi, _mm256_set1_ps(0.125f));
            term = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(b->d), yd), fi);
        }
        sumf = _mm256_add_ps(sumf, term);
    }
    if (post != 1.0f) sumf = _mm256_mul_ps(_mm256_set1_ps(post), sumf);
    float r[8];
    _mm256_storeu_ps(r, sumf);
    for (int t = 0; t < nstore; t++) o[t * ldo] = r[t];
}

#if defined(KERN_X86_512)
/* ---- the 512-bit core (AVX-512 level): two decoded weight rows x N activation rows ------------
 * Same integer sums and float epilogue as mm_core, 64 values per instruction: one maddubs (u8 x s8
 * pairs -> int16) and one VNNI vpdpwssd (int16 pairs x the int16 scale of their 16 values -> int32,
 * accumulating) per 64 values and (row, activation row) pair. A register tile is 2 weight rows x up
 * to 8 activation rows (16 accumulators of the 32 zmm registers): each activation load serves both
 * weight rows, each decoded chunk and its scale vector all N activation rows. Per super-block the
 * 16 accumulators are reduced together (red16_i32: lane j = sum of source j, 45 operations for 16
 * sums) and the epilogue runs once on 16 float lanes (lane 8r + t: weight row r, activation row t),
 * each lane in the scalar order. The bias (off * scale against the bsums) is a vpdpwssd with the
 * negated bc into the same accumulators; the mins (EP_MIN) are 256-bit madds reduced by red16_256. */

/* lane j of the result = sum of the 16 int32 lanes of v[j] (exact) */
static inline __m512i red16_i32(const __m512i *v) {
    __m512i x[8], y[4], z[2];
    UNROLL for (int i = 0; i < 8; i++) x[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                                               _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    UNROLL for (int i = 0; i < 4; i++) y[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(x[2 * i], x[2 * i + 1]),
                                                               _mm512_unpackhi_epi64(x[2 * i], x[2 * i + 1]));
    /* y[i]: every 128-bit lane holds partial sums of sources 4i..4i+3 */
    UNROLL for (int i = 0; i < 2; i++) z[i] =
        _mm512_add_epi32(_mm512_shuffle_i32x4(y[2 * i], y[2 * i + 1], 0x88),
                         _mm512_shuffle_i32x4(y[2 * i], y[2 * i + 1], 0xdd));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(z[0], z[1], 0x88), _mm512_shuffle_i32x4(z[0], z[1], 0xdd));
}

/* the same for 16 sources of 8 int32 lanes */
static inline __m512i red16_256(const __m256i *v) {
    __m256i x[8], y[4];
    UNROLL for (int i = 0; i < 8; i++) x[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                                               _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    UNROLL for (int i = 0; i < 4; i++) y[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(x[2 * i], x[2 * i + 1]),
                                                               _mm256_unpackhi_epi64(x[2 * i], x[2 * i + 1]));
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(y[0]), y[1], 1);
    const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(y[2]), y[3], 1);
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
}

/* Weight rows w[0], w[1] (nsb decoded super-blocks each; nrow = 1 computes w[0] twice and stores
 * one) against activation rows ap[0..N); writes o[t * ldo + r] for t < nstore, r < nrow. */
KI void mm_core512(const kdsb *w0, const kdsb *w1, int64_t nsb, const uint8_t *const *ap, int N, int mode,
                   int bias, float post, float *o, size_t ldo, int nstore, int nrow) {
    __m512 sumf = _mm512_setzero_ps();
    const __m512i idx0 = scale_idx0();
    for (int64_t i = 0; i < nsb; i++) {
        const kdsb *b[2] = {w0 + i, w1 + i};
        const blk_q8_k *y[8];
        UNROLL for (int t = 0; t < N; t++) y[t] = (const blk_q8_k *)ap[t] + i;
        __m512i acc[16];
        UNROLL for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_si512();
        const __m512i s16[2] = {_mm512_zextsi256_si512(_mm256_load_si256((const __m256i *)b[0]->s16)),
                                _mm512_zextsi256_si512(_mm256_load_si256((const __m256i *)b[1]->s16))};
        UNROLL for (int c = 0; c < 4; c++) {
            const __m512i idx = _mm512_add_epi16(idx0, _mm512_set1_epi16((short)(4 * c)));
            const __m512i u0 = _mm512_load_si512((const void *)(b[0]->u + 64 * c)),
                          u1 = _mm512_load_si512((const void *)(b[1]->u + 64 * c));
            const __m512i sc0 = _mm512_permutexvar_epi16(idx, s16[0]),
                          sc1 = _mm512_permutexvar_epi16(idx, s16[1]);
            UNROLL for (int t = 0; t < N; t++) {
                const __m512i a = _mm512_loadu_si512((const void *)(y[t]->qs + 64 * c));
                acc[t] = _mm512_dpwssd_epi32(acc[t], _mm512_maddubs_epi16(u0, a), sc0);
                acc[8 + t] = _mm512_dpwssd_epi32(acc[8 + t], _mm512_maddubs_epi16(u1, a), sc1);
            }
        }
        if (bias) {
            const __m256i z = _mm256_setzero_si256();
            const __m512i nb0 =
                _mm512_zextsi256_si512(_mm256_sub_epi16(z, _mm256_load_si256((const __m256i *)b[0]->bc)));
            const __m512i nb1 =
                _mm512_zextsi256_si512(_mm256_sub_epi16(z, _mm256_load_si256((const __m256i *)b[1]->bc)));
            UNROLL for (int t = 0; t < N; t++) {
                const __m512i bs = _mm512_zextsi256_si512(loadu(y[t]->bsums));
                acc[t] = _mm512_dpwssd_epi32(acc[t], nb0, bs);
                acc[8 + t] = _mm512_dpwssd_epi32(acc[8 + t], nb1, bs);
            }
        }
        float ydv[8] = {0};
        UNROLL for (int t = 0; t < N; t++) ydv[t] = y[t]->d;
        const __m512 yd = _mm512_broadcast_f32x8(_mm256_loadu_ps(ydv));
        const __m512 dv = _mm512_insertf32x8(_mm512_set1_ps(b[0]->d), _mm256_set1_ps(b[1]->d), 1);
        __m512 fi = _mm512_cvtepi32_ps(red16_i32(acc));
        __m512 term;
        if (mode == EP_MIN) {
            __m256i ms[16];
            const __m256i mn0 = _mm256_load_si256((const __m256i *)b[0]->mn),
                          mn1 = _mm256_load_si256((const __m256i *)b[1]->mn);
            UNROLL for (int k = 0; k < 16; k++) ms[k] = _mm256_setzero_si256();
            UNROLL for (int t = 0; t < N; t++) {
                const __m256i bs = loadu(y[t]->bsums);
                ms[t] = _mm256_madd_epi16(mn0, bs);
                ms[8 + t] = _mm256_madd_epi16(mn1, bs);
            }
            const __m512 fm = _mm512_cvtepi32_ps(red16_256(ms));
            const __m512 dm = _mm512_insertf32x8(_mm512_set1_ps(b[0]->dmin), _mm256_set1_ps(b[1]->dmin), 1);
            term = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(yd, dv), fi),
                                 _mm512_mul_ps(_mm512_mul_ps(yd, dm), fm));
        } else {
            if (mode == EP_IQ1) fi = _mm512_mul_ps(fi, _mm512_set1_ps(0.125f));
            term = _mm512_mul_ps(_mm512_mul_ps(dv, yd), fi);
        }
        sumf = _mm512_add_ps(sumf, term);
    }
    if (post != 1.0f) sumf = _mm512_mul_ps(_mm512_set1_ps(post), sumf);
    float r[16];
    _mm512_storeu_ps(r, sumf);
    for (int rw = 0; rw < nrow; rw++)
        for (int t = 0; t < nstore; t++) o[t * ldo + rw] = r[8 * rw + t];
}
#endif

/* Rows are decoded in groups that fit MM_BUF super-blocks (78 KiB, L2-resident), then every tile of
 * 8 activation rows runs over the whole group. The decode prefetches the weight stream 2 KiB ahead,
 * as the one-row mat-vecs do: without it a verify-sized forward waited on DRAM (VM, 2 threads, 4-layer
 * Q4_K_M, 8 rows: 142-147 -> 181-183 tok/s, 4 rows 110-112 -> 138, 3 interleaved pairs). Each tile of
 * 8 activation rows (18 KiB at 2048 columns) is L1-resident. Rows wider
 * than MM_BUF super-blocks (no Qwen3-Next matrix: at most 4096 columns = 16) and a single
 * activation row use the mat-vec. */
#define MM_BUF 128
KI void mm_driver(void (*dec)(const void *, kdsb *), size_t bsz, kern_matvec_fn mv, int mode, int bias,
                  float post, const void *W, size_t rb, int64_t nr, int64_t nc, const void *act, size_t ab,
                  int T, float *o, size_t ldo, int wide) {
    const int64_t nsb = nc / QK_K;
    /* from 2 rows on the decoded block pays (RL_KERN_BENCH=mm on the 2-CPU EPYC, AVX2, T = 2:
     * 1.13x Q4_K, 1.3-1.5x Q2_K/Q5_K/Q6_K/IQ1_M, 1.5-1.7x IQ2/IQ3 over two mat-vecs; a 2-row
     * speculative verify is the case) */
    if (nsb > MM_BUF || nsb == 0 || T < 2) {
        for (int t = 0; t < T; t++)
            mv(W, rb, nr, nc, (const uint8_t *)act + (size_t)t * ab, o + (size_t)t * ldo);
        return;
    }
    /* 64-byte aligned: the AVX-512 IQ decoders write u[] with _mm512_store_si512 (a 32-byte aligned
     * buffer faulted on the H200 host whenever the stack put it at 32 mod 64) */
    kdsb buf[MM_BUF] __attribute__((aligned(64)));
    const int64_t g = MM_BUF / nsb;
    for (int64_t r0 = 0; r0 < nr; r0 += g) {
        const int64_t gn = nr - r0 < g ? nr - r0 : g;
        for (int64_t r = 0; r < gn; r++) {
            const uint8_t *row = (const uint8_t *)W + (size_t)(r0 + r) * rb;
            for (int64_t i = 0; i < nsb; i++) {
                pf_block(row + (size_t)i * bsz, bsz); /* the weight stream, PF_DIST ahead (as the mat-vecs) */
                dec(row + (size_t)i * bsz, &buf[r * nsb + i]);
            }
        }
        for (int t0 = 0; t0 < T; t0 += 8) {
            const int n = T - t0 < 8 ? T - t0 : 8;
            const uint8_t *ap[8];
            for (int k = 0; k < 8; k++)
                ap[k] = (const uint8_t *)act + (size_t)(t0 + (k < n ? k : n - 1)) * ab;
            float *ot = o + (size_t)t0 * ldo + r0;
#if defined(KERN_X86_512)
            if (wide) { /* weight rows in pairs (an odd last row is computed twice, stored once) */
                for (int64_t r = 0; r < gn; r += 2) {
                    const kdsb *w0 = buf + r * nsb, *w1 = r + 1 < gn ? w0 + nsb : w0;
                    const int nrow = r + 1 < gn ? 2 : 1;
                    if (n > 4) mm_core512(w0, w1, nsb, ap, 8, mode, bias, post, ot + r, ldo, n, nrow);
                    else if (n > 2) mm_core512(w0, w1, nsb, ap, 4, mode, bias, post, ot + r, ldo, n, nrow);
                    else if (n == 2) mm_core512(w0, w1, nsb, ap, 2, mode, bias, post, ot + r, ldo, n, nrow);
                    else mm_core512(w0, w1, nsb, ap, 1, mode, bias, post, ot + r, ldo, n, nrow);
                }
                continue;
            }
#else
            (void)wide;
#endif
            for (int64_t r = 0; r < gn; r++) {
                const kdsb *wr = buf + r * nsb;
                if (n > 4) mm_core(wr, nsb, ap, 8, mode, bias, post, ot + r, ldo, n);
                else if (n > 2) mm_core(wr, nsb, ap, 4, mode, bias, post, ot + r, ldo, n);
                else if (n == 2) mm_core(wr, nsb, ap, 2, mode, bias, post, ot + r, ldo, n);
                else mm_core(wr, nsb, ap, 1, mode, bias, post, ot + r, ldo, n);
            }
        }
    }
}

/* mm256_<type>: the 256-bit core (every level); mm_<type>: the 512-bit core at the AVX-512 level
 * (matmul_w, selected by kern_cfg.mm512; the same as mm256_ at the AVX2 level, where it is unused).
 * Both are bit-identical to the mat-vec. */
#define KQ_MATMUL(name, DEC, BLK, MODE, BIAS, POST)                                                          \
    static void mm_##name(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, size_t ab, int T, \
                          float *o, size_t ldo) {                                                            \
        mm_driver(DEC, sizeof(BLK), MV_LEVEL(name), MODE, BIAS, POST, W, rb, nr, nc, a, ab, T, o, ldo, 1);   \
    }                                                                                                        \
    static void mm256_##name(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, size_t ab,     \
                             int T, float *o, size_t ldo) {                                                  \
        mm_driver(DEC, sizeof(BLK), MV_LEVEL(name), MODE, BIAS, POST, W, rb, nr, nc, a, ab, T, o, ldo, 0);   \
    }
KQ_MATMUL(q2_k, dec_q2_k, blk_q2_k, EP_MIN, 0, 1.0f)
KQ_MATMUL(q4_k, dec_q4_k, blk_q4_k, EP_MIN, 0, 1.0f)
KQ_MATMUL(q5_k, dec_q5_k, blk_q5_k, EP_MIN, 0, 1.0f)
KQ_MATMUL(q6_k, dec_q6_k, blk_q6_k, EP_PLAIN, 1, 1.0f)
KQ_MATMUL(iq2_xxs, DEC_IQ(iq2_xxs), blk_iq2_xxs, EP_PLAIN, 1, 0.125f)
KQ_MATMUL(iq2_xs, DEC_IQ(iq2_xs), blk_iq2_xs, EP_PLAIN, 1, 0.125f)
KQ_MATMUL(iq3_xxs, DEC_IQ(iq3_xxs), blk_iq3_xxs, EP_PLAIN, 1, 0.25f)
KQ_MATMUL(iq3_s, DEC_IQ(iq3_s), blk_iq3_s, EP_PLAIN, 1, 1.0f)
KQ_MATMUL(iq1_m, DEC_IQ(iq1_m), blk_iq1_m, EP_IQ1, 1, 1.0f)

static void fill_matmul_kq(kern_table *t) {
#if defined(KERN_X86_512)
#define SET_MM(QT, name) t->matmul[QT] = mm256_##name, t->matmul_w[QT] = mm_##name
#else
#define SET_MM(QT, name) t->matmul[QT] = mm256_##name, (void)mm_##name
#endif
    SET_MM(QT_Q2_K, q2_k);
    SET_MM(QT_Q4_K, q4_k);
    SET_MM(QT_Q5_K, q5_k);
    SET_MM(QT_Q6_K, q6_k);
    SET_MM(QT_IQ2_XXS, iq2_xxs);
    SET_MM(QT_IQ2_XS, iq2_xs);
    SET_MM(QT_IQ3_XXS, iq3_xxs);
    SET_MM(QT_IQ3_S, iq3_s);
    SET_MM(QT_IQ1_M, iq1_m);
#undef SET_MM
}
