/* kern_x86_repack.h — mat-vec and batched kernels of the lookup-free IQ layouts
 * (src/gguf/quant_repack.h); part of kern_x86.h (included there only, after kern_x86_mm.h, whose
 * kdsb / mm_driver batched machinery the matmul reuses).
 *
 * IQ2_LF (IQ1_LF: the same with off 9 and IQ1_M's epilogue):
 * 32 weights = 32 nibble codes; one pshufb maps them to u = value + 43 (0..86), so the
 * product is maddubs(u, q8) (pairs <= 2 * 86 * 128 < 2^15: never saturates) times the int16 half-block
 * scale (2s+1) by madd, and the offset comes back through the activation's bsums:
 *     sum_h (2s_h+1) sum_j v_j a_j = sum_h (2s_h+1) sum_j u_j a_j - 43 sum_h (2s_h+1) bsum_h.
 * Integer sums are the original type's exactly; the float epilogue is quant_vec_dot_iq2_lf's
 * ((d * y.d) * isum per super-block, 0.125 * sum at the end), so results are bit-identical to it and
 * to the IQ2_XXS / IQ2_XS vec_dot of the rows before repacking (tests/c/test_repack.c).
 * Per 64 weights: one 32-byte load, and + shift + and for the two nibble planes, two pshufb, and per
 * 32 weights the activation load, maddubs, the scale shuffle, madd, add: no table loads at all.
 * The AVX-512 level compiles the same code with EVEX encodings (no 512-bit variant yet).
 */

/* the 16-byte code -> u = value + off tables, in both lanes */
static inline __m256i iq2lf_utab(void) { /* off 43 */
    return _mm256_setr_epi8(51, 68, 86, 43, 35, 18, 0, 43, 43, 43, 43, 43, 43, 43, 43, 43, 51, 68, 86, 43, 35,
                            18, 0, 43, 43, 43, 43, 43, 43, 43, 43, 43);
}
static inline __m256i iq1lf_utab(void) { /* off 9 */
    return _mm256_setr_epi8(2, 10, 18, 9, 0, 8, 16, 9, 9, 9, 9, 9, 9, 9, 9, 9, 2, 10, 18, 9, 0, 8, 16, 9, 9,
                            9, 9, 9, 9, 9, 9, 9);
}

/* The integer sum of one super-block of one row (dot_iq_lf's inner part), offset term included. */
KI __m256i sb_iq_lf(const blk_iq_lf *x, const blk_q8_k *y, __m256i tab, __m256i koff) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i lsv = iq2_half_scales(x->scales);
    const __m256i lanes[2] = {_mm256_permute2x128_si256(lsv, lsv, 0x00),
                              _mm256_permute2x128_si256(lsv, lsv, 0x11)};
    __m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(),
                                   _mm256_madd_epi16(_mm256_mullo_epi16(lsv, koff), loadu(y->bsums)));
    __m256i ctrl = scale_ctrl0();
    UNROLL for (int p = 0; p < 4; p++) {
        const __m256i v = loadu(x->qs + 32 * p);
        const __m256i u0 = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
        const __m256i u1 = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        acc = dot_scaled(acc, u0, loadu(y->qs + 64 * p), _mm256_shuffle_epi8(lanes[p / 2], ctrl));
        ctrl = scale_step(ctrl);
        acc = dot_scaled(acc, u1, loadu(y->qs + 64 * p + 32), _mm256_shuffle_epi8(lanes[p / 2], ctrl));
        ctrl = p == 1 ? scale_ctrl0() : scale_step(ctrl);
    }
    return acc;
}

/* One row of nb IQ*_LF super-blocks. iq1: the IQ1_LF epilogue (d * y.d * (isum / 8) per super-block),
 * else IQ2_LF's (d * y.d * isum, times 1/8 at the end). tab/off: the type's u table and offset. */
KI float dot_iq_lf(const blk_iq_lf *x, const blk_q8_k *y, int64_t nb, __m256i tab, int off, int iq1) {
    const __m256i koff = _mm256_set1_epi16((short)off);
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        pf_block(&x[i], sizeof x[i]);
        const int isum = hsum_i32(sb_iq_lf(&x[i], &y[i], tab, koff));
        if (iq1) sumf += h2f(x[i].d) * y[i].d * (0.125f * (float)isum);
        else sumf += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return iq1 ? sumf : 0.125f * sumf;
}

/* One row at a time: a 4-row variant (shared reduction and 4-lane epilogue, next group prefetched
 * as the 4-row K-quant kernels do) ran no faster hot (13.3-13.6 GB/s) and at half the speed cold
 * (6.1 vs 11-13 GB/s, Zen 3), so it was dropped. */
static float dot_iq2_lf(const blk_iq2_lf *x, const blk_q8_k *y, int64_t nb) {
    return dot_iq_lf(x, y, nb, iq2lf_utab(), 43, 0);
}
static float dot_iq1_lf(const blk_iq1_lf *x, const blk_q8_k *y, int64_t nb) {
    return dot_iq_lf(x, y, nb, iq1lf_utab(), 9, 1);
}
ROWS_MATVEC(mv_iq2_lf, dot_iq2_lf, blk_iq2_lf, blk_q8_k, QK_K)
ROWS_MATVEC(mv_iq1_lf, dot_iq1_lf, blk_iq1_lf, blk_q8_k, QK_K)

/* one IQ*_LF super-block -> the batched kernels' canonical form (u = value + off, bias off * scale) */
KI void dec_iq_lf(const void *p, kdsb *o, __m256i tab, int off) {
    const blk_iq_lf *x = p;
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i lsv = iq2_half_scales(x->scales);
    kdsb_scales16(o, lsv);
    _mm256_store_si256((__m256i *)o->bc, _mm256_mullo_epi16(lsv, _mm256_set1_epi16((short)off)));
    for (int c = 0; c < 4; c++) {
        const __m256i v = loadu(x->qs + 32 * c);
        _mm256_store_si256((__m256i *)(o->u + 64 * c), _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4)));
        _mm256_store_si256((__m256i *)(o->u + 64 * c + 32),
                           _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)));
    }
    o->d = h2f(x->d);
}
static void dec_iq2_lf(const void *p, kdsb *o) { dec_iq_lf(p, o, iq2lf_utab(), 43); }
static void dec_iq1_lf(const void *p, kdsb *o) { dec_iq_lf(p, o, iq1lf_utab(), 9); }

/* EP_PLAIN with 1/8 at the end (IQ2_XXS's), EP_IQ1 (isum / 8 per super-block, IQ1_M's); the 256-bit
 * core at every level (wide = 0: no matmul_w, so kern_cfg.mm512 leaves these types alone) */
static void mm_iq2_lf(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, size_t ab, int T,
                      float *o, size_t ldo) {
    mm_driver(dec_iq2_lf, sizeof(blk_iq2_lf), mv_iq2_lf, EP_PLAIN, 1, 0.125f, W, rb, nr, nc, a, ab, T, o, ldo,
              0);
}
static void mm_iq1_lf(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, size_t ab, int T,
                      float *o, size_t ldo) {
    mm_driver(dec_iq1_lf, sizeof(blk_iq1_lf), mv_iq1_lf, EP_IQ1, 1, 1.0f, W, rb, nr, nc, a, ab, T, o, ldo, 0);
}

#if defined(KERN_X86_AMX)
/* AMX tiles: the decoded super-blocks are the original types' (same u, scales, offsets), so the tile
 * kinds are IQ2_XXS's and IQ1_M's (kern_x86_amx.h's table) and the outputs the same bits. Without them
 * a repacked file lost the tiles at prompt time: on the AMX host --iq-repack ran prompts 10-28 % slower
 * (bench/results/2026-12-03-cuda-session18-h200.md). Thresholds: the source types' (not measured apart). */
/*                                           off uns nd dmn base sh magic mins mode     post */
AMX_MATMUL(iq2_lf, dec_iq2_lf, blk_iq2_lf, 43, 0, 3, -2, 5, 0, 13108, 0, EP_PLAIN, 0.125f)
AMX_MATMUL(iq1_lf, dec_iq1_lf, blk_iq1_lf, 9, 0, 2, -8, 16, 4, 0, 0, EP_IQ1, 1.0f)
#endif

static void fill_repack(kern_table *t) {
    t->matvec[QT_IQ2_LF] = mv_iq2_lf;
    t->matmul[QT_IQ2_LF] = mm_iq2_lf;
    t->matvec[QT_IQ1_LF] = mv_iq1_lf;
    t->matmul[QT_IQ1_LF] = mm_iq1_lf;
#if defined(KERN_X86_AMX)
    t->matmul_x[QT_IQ2_LF] = amx_iq2_lf, t->matmul_xe[QT_IQ2_LF] = amxe_iq2_lf;
    t->amx_min[QT_IQ2_LF] = t->amx_min[QT_IQ2_XXS];
    t->matmul_x[QT_IQ1_LF] = amx_iq1_lf, t->matmul_xe[QT_IQ1_LF] = amxe_iq1_lf;
    t->amx_min[QT_IQ1_LF] = t->amx_min[QT_IQ1_M];
#endif
}
