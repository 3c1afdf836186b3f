/* kern_x86_amx.h — batched kernels on Intel AMX int8 tiles for the K and IQ types; part of
 * kern_x86.h (included there only, after kern_x86_mm.h, whose decoded super-blocks it uses). Empty
 * unless compiled with AVX-512 and AMX-TILE/AMX-INT8 (kern_avx512.c); used only where kern.c found
 * the tiles usable (CPUID, XCR0 and the Linux permission request): kern_cfg_set_amx.
 *
 * Why: the 512-bit core (mm_core512) spends two multiply-class instructions per 64 int8 products;
 * one TDPBSSD does 16 x 16 x 64 = 16,384 of them (the H200 host: 2,027 GMAC/s on one thread against
 * ~54 for VPDPBUSD, bench/amx_probe.c). The same integer sums and the same float epilogue, so every
 * output equals kern_matvec's bit for bit, as the other batched cores.
 *
 * The arithmetic. Per super-block and (weight row, activation row) the scalar reference forms
 *     isum = sum_k s_k sum_{j in group k} (u_j - off) a_j      (16 groups of 16 values, kdsb)
 * (and for Q2_K/Q4_K/Q5_K fm = sum_k mn_k bsum_k), then a float epilogue. Tiles multiply int8 by
 * int8, and s_k (u - off) does not fit a byte, so each scale is written in digits,
 * s = sum_p base^p dig_p with |(u - off) dig_p| within a byte, and product p is a tile product with
 * the weights (u - off) * dig_p: C_p = sum_j (u_j - off) dig_p(k(j)) a_j, exact in int32, and
 * isum = C_0 + base (C_1 + base C_2) exactly (integers). fm is one more product whose weight bytes
 * are the group's min (bsum_k is the sum of the group's codes). Per type (digit range, base, count):
 *     Q2_K   u 0..3 (unsigned)   s 0..15     digits 0..15,  base 16, 1   + mins
 *     Q4_K   u 0..15 (unsigned)  s 0..63     digits 0..15,  base 16, 2   + mins
 *     Q5_K   u 0..31 (unsigned)  s 0..63     digits 0..7,   base 8,  2   + mins
 *     Q6_K   w -32..31           s -128..127 digits -3..4,  base 8,  3
 *     IQ2_XXS/IQ2_XS  w -43..43  s 1..31     digits -2..2,  base 5,  3
 *     IQ3_XXS w -62..62          s 1..31     digits -2..2,  base 5,  3
 *     IQ3_S  w -15..15           s 1..31     digits -8..8,  base 17, 2
 *     IQ1_M  w -9..9 (8ths)      s 1..15     digits -8..7,  base 16, 2
 * ("unsigned": the weight bytes are unsigned and the tile op is TDPBSUD, else TDPBSSD; the largest
 * product byte is 225 / 217 unsigned, -128..124 signed.)
 *
 * Layout. Activation rows are the tiles' M dimension: an A tile is 16 activation rows x 64 bytes of
 * their Q8_K codes, loaded straight from the activation buffer with the row stride. Weight rows are
 * N: a row tile of 16 weight rows is decoded once per call (kdsb), transposed into the B layout (row
 * k4 of the tile of K-step c: for each weight row n its values 64c + 4k4 .. +3) and multiplied by its
 * digits, then every tile of 16 activation rows runs over it: per super-block 4 K-steps x (digits +
 * mins) products into C tiles, which are stored and finished with the 512-bit epilogue of
 * mm_core512 in 16 float lanes (lane n = weight row n), in the scalar order. A last partial tile of
 * activation rows starts at T - 16 (rows computed twice, stored once); fewer than 16 rows are padded
 * to one tile. Rows over 4096 columns take the 512-bit core, and so do batches below the type's
 * threshold (kern_table.amx_min, set in fill_amx from the measured crossover: below it the per-call
 * preparation of the weights costs more than the tiles save).
 *
 * The same kernel runs with its tile operations emulated in C (kern_cfg_set_amx(c, KERN_AMX_EMUL)): tests on
 * CPUs without AMX check the digits, layouts and epilogue; only the tile instructions themselves
 * need AMX hardware (tests/c/test_kern_amx.c runs there).
 */
#if defined(KERN_X86_512) && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define KERN_X86_AMX 1

/* super-blocks per row (4096 columns); products per K-step; activation rows per pass */
enum { AMX_MAXSB = 16, AMX_MAXP = 3, AMX_TCHUNK = 1024 };

typedef struct {
    uint8_t palette, start_row, pad[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* How a type's decoded super-blocks become B operands. */
typedef struct {
    int off;      /* weight value w = u - off */
    int uns;      /* 1: weight bytes unsigned (TDPBSUD), 0: signed (TDPBSSD) */
    int nd;       /* digit products */
    int dmn;      /* digits lie in [dmn, dmn + base) */
    int base, sh; /* sh = log2(base), or 0: base 5 / 17, divided by multiply-high with magic */
    int magic;    /* ceil(65536 / base) when sh == 0 (exact for the small quotients here) */
    int mins;     /* one more product: the group mins (EP_MIN) */
    int mode;     /* EP_MIN / EP_PLAIN / EP_IQ1 */
    float post;
} amx_kind;

/* C emulation of the tile state the kernel uses: C tiles 0..2, the A tile. */
typedef struct {
    int32_t c[AMX_MAXP][16][16];
    int8_t a[16][64];
} amx_emu;

static inline void amx_emu_dp(amx_emu *e, int p, const int8_t *b, int uns) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t s = 0;
            for (int k = 0; k < 64; k++) {
                const int8_t bv = b[(k / 4) * 64 + 4 * n + k % 4];
                s += (int32_t)e->a[m][k] * (uns ? (int32_t)(uint8_t)bv : (int32_t)bv);
            }
            e->c[p][m][n] += s;
        }
}

/* Byte k of each dword lane replicated: the lane's low byte in all four. */
#define AMX_REP4 _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0x00000000)

/* The nd digits of 16 scales (dword lanes), lowest first, each lane's digit in all four of its bytes. */
static inline void amx_digits(__m512i s, const amx_kind *k, __m512i *dg) {
    for (int p = 0; p < k->nd; p++) {
        const __m512i t = _mm512_sub_epi32(s, _mm512_set1_epi32(k->dmn));
        __m512i q, r;
        if (k->sh) {
            q = _mm512_srai_epi32(t, k->sh);
            r = _mm512_and_si512(t, _mm512_set1_epi32(k->base - 1));
        } else { /* 0 <= t < 2^16 here (scales >= 1, dmn < 0) */
            q = _mm512_srli_epi32(_mm512_mullo_epi32(t, _mm512_set1_epi32(k->magic)), 16);
            r = _mm512_sub_epi32(t, _mm512_mullo_epi32(q, _mm512_set1_epi32(k->base)));
        }
        dg[p] = _mm512_shuffle_epi8(_mm512_add_epi32(r, _mm512_set1_epi32(k->dmn)), AMX_REP4);
        s = q;
    }
}

/* Byte-wise w * d modulo 256 (the digits keep every product within a byte, so this is the product):
 * the low byte of a 16-bit product depends only on the two low bytes. */
static inline __m512i amx_mul8(__m512i w, __m512i d) {
    const __m512i lo8 = _mm512_set1_epi16(0x00ff);
    const __m512i lo = _mm512_mullo_epi16(w, d),
                  hi = _mm512_mullo_epi16(_mm512_srli_epi16(w, 8), _mm512_andnot_si512(lo8, d));
    return _mm512_or_si512(_mm512_and_si512(lo, lo8), hi);
}

/* Transpose 16 rows of 16 dwords in place: r[i] lane j -> r[j] lane i. */
static inline void amx_tr16(__m512i *r) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* now 128-bit lane L of r[4i + q] holds dword 4L + q of rows 4i .. 4i + 3: a 4 x 4 transpose of
     * 128-bit lanes over r[q], r[4 + q], r[8 + q], r[12 + q] finishes it */
    for (int i = 0; i < 8; i++) {
        const int a = (i / 4) * 8 + (i % 4), b = a + 4;
        t[a] = _mm512_shuffle_i32x4(r[a], r[b], 0x88);
        t[b] = _mm512_shuffle_i32x4(r[a], r[b], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        const int a = i, b = i + 8;
        r[a] = _mm512_shuffle_i32x4(t[a], t[b], 0x88);
        r[b] = _mm512_shuffle_i32x4(t[a], t[b], 0xdd);
    }
}

/* 16 rows' int16 x 16 (a kdsb field at byte offset off) as dwords, transposed: v[g] lane n = row n's
 * entry g. */
static inline void amx_tr16_i16(const kdsb *rows, size_t off, __m512i *v) {
    for (int n = 0; n < 16; n++)
        v[n] = _mm512_cvtepi16_epi32(_mm256_load_si256((const __m256i *)((const char *)(rows + n) + off)));
    amx_tr16(v);
}

/* The B operands of one row tile and super-block: rows[n] (16 decoded super-blocks) ->
 * bt[p * 4 + c] (1 KiB tiles, p < np: digit products then the mins). The codes are transposed first
 * (a dword of the B layout is 4 values of one weight row, all in one group of 16), then each B row
 * is multiplied byte-wise by its dwords' digits: transposing once per K-step instead of once per
 * product, and no widening to 16 bits (the previous form spent ~2,000 shuffle-port operations per
 * row tile and super-block, now ~500). */
static inline void amx_prep(const kdsb *rows, const amx_kind *k, int8_t (*bt)[1024]) {
    __m512i sc[16], mn[16], ct[16], dg[AMX_MAXP][16];
    amx_tr16_i16(rows, offsetof(kdsb, s16), sc); /* sc[g] lane n: row n's scale of group g */
    for (int g = 0; g < 16; g++) {
        __m512i d[AMX_MAXP];
        amx_digits(sc[g], k, d);
        for (int p = 0; p < k->nd; p++) dg[p][g] = d[p];
    }
    if (k->mins) {
        amx_tr16_i16(rows, offsetof(kdsb, mn), mn);
        for (int g = 0; g < 16; g++) mn[g] = _mm512_shuffle_epi8(mn[g], AMX_REP4);
    }
    for (int c = 0; c < 4; c++) {
        for (int n = 0; n < 16; n++)
            ct[n] = _mm512_sub_epi8(_mm512_load_si512((const void *)(rows[n].u + 64 * c)),
                                    _mm512_set1_epi8((char)k->off));
        amx_tr16(ct); /* ct[k4] lane n: row n's values 64c + 4k4 .. +3, of group 4c + k4 / 4 */
        for (int k4 = 0; k4 < 16; k4++) {
            const int g = 4 * c + k4 / 4;
            for (int p = 0; p < k->nd; p++)
                _mm512_store_si512((void *)(bt[p * 4 + c] + 64 * k4), amx_mul8(ct[k4], dg[p][g]));
            if (k->mins) _mm512_store_si512((void *)(bt[k->nd * 4 + c] + 64 * k4), mn[g]);
        }
    }
}

/* One tile product into C tile P from A tile AT and B tile BT (literal numbers: the intrinsics paste
 * them into the instruction text). */
#define AMX_DP(E, em, P, AT, BT, bptr, uns)                                                                  \
    do {                                                                                                     \
        if (E) {                                                                                             \
            amx_emu_dp(em, P, bptr, uns);                                                                    \
        } else {                                                                                             \
            _tile_loadd(BT, bptr, 64);                                                                       \
            if (uns) _tile_dpbsud(P, AT, BT);                                                                \
            else _tile_dpbssd(P, AT, BT);                                                                    \
        }                                                                                                    \
    } while (0)

/* K-step c of one activation tile: its A tile into tile AT (3 and 7 alternate, so the next step's load
 * need not wait for this step's products to release the tile), the products into C tiles 0..np-1;
 * and 16 of the 64 lines of the next activation tile's A operands prefetched. */
#define AMX_KSTEP(c, AT)                                                                                     \
    do {                                                                                                     \
        const uint8_t *ac = ai + offsetof(blk_q8_k, qs) + 64 * (c);                                          \
        if (E)                                                                                               \
            for (int m = 0; m < 16; m++) memcpy(em.a[m], ac + (size_t)m * ab, 64);                           \
        else _tile_loadd(AT, ac, (long)ab);                                                                  \
        if (an)                                                                                              \
            for (int m = 4 * (c); m < 4 * (c) + 4; m++)                                                      \
                for (int q = 0; q < 4; q++)                                                                  \
                    _mm_prefetch((const char *)an + (size_t)m * ab + 64 * q, _MM_HINT_T0);                   \
        AMX_DP(E, &em, 0, AT, 4, bi[0 * 4 + (c)], k->uns);                                                   \
        if (np > 1) AMX_DP(E, &em, 1, AT, 5, bi[1 * 4 + (c)], k->uns);                                       \
        if (np > 2) AMX_DP(E, &em, 2, AT, 6, bi[2 * 4 + (c)], k->uns);                                       \
    } while (0)

/* W: nr rows of nsb blocks (bsz bytes each, row stride rb); T >= 1 activation rows of ab bytes;
 * 1 <= nsb <= AMX_MAXSB. o[t * ldo + r]. E: emulate the tile operations. Fewer than 16 activation rows
 * are copied into a tile of 16 whose rows past the last repeat it (computed, never stored), as the
 * weight rows past the last of a row tile. */
static inline void amx_driver(void (*dec)(const void *, kdsb *), size_t bsz, const amx_kind *k, int E,
                              const void *W, size_t rb, int64_t nr, int64_t nsb, const void *act, size_t ab,
                              int T, float *o, size_t ldo) {
    const int np = k->nd + k->mins;
    int8_t bt[AMX_MAXSB * AMX_MAXP * 4][1024] __attribute__((aligned(64)));
    float dv[AMX_MAXSB][16] __attribute__((aligned(64))), dm[AMX_MAXSB][16] __attribute__((aligned(64)));
    int32_t cb[AMX_MAXP][16][16] __attribute__((aligned(64)));
    float sum[AMX_TCHUNK][16] __attribute__((aligned(64))); /* running sums: [activation row][weight row] */
    kdsb rows[16] __attribute__((aligned(64)));
    amx_emu em;
    const int Tt = T < 16 ? 16 : T; /* activation rows the tiles run over */
    uint8_t pad[16 * AMX_MAXSB * sizeof(blk_q8_k)] __attribute__((aligned(64)));
    if (T < 16) {
        for (int t = 0; t < 16; t++)
            memcpy(pad + (size_t)t * ab, (const uint8_t *)act + (size_t)(t < T ? t : T - 1) * ab, ab);
        act = pad;
    }
    memset(rows, 0, sizeof rows); /* fields a type's decoder leaves alone (dmin, mn) stay defined */
    if (!E) {
        amx_cfg cfg __attribute__((aligned(64)));
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
        _tile_loadconfig(&cfg);
    }
    for (int64_t r0 = 0; r0 < nr; r0 += 16) {
        const int nrow = nr - r0 < 16 ? (int)(nr - r0) : 16;
        for (int64_t i = 0; i < nsb; i++) {
            for (int n = 0; n < 16; n++) /* rows past the last repeat it (computed, never stored) */
                dec((const uint8_t *)W + (size_t)(r0 + (n < nrow ? n : nrow - 1)) * rb + (size_t)i * bsz,
                    &rows[n]);
            for (int n = 0; n < 16; n++) dv[i][n] = rows[n].d, dm[i][n] = rows[n].dmin;
            amx_prep(rows, k, bt + i * np * 4);
        }
        const __mmask16 keep = (__mmask16)((1u << nrow) - 1);
        /* super-blocks outside, activation tiles inside: a super-block's B operands (np x 4 KiB) stay in
         * L1 while every activation tile of the chunk passes (tiles outside re-read the row tile's whole
         * nsb x np x 4 KiB from L2 per activation tile); the running sums live in sum[] instead of
         * registers, each row's terms still added in super-block order from 0 */
        for (int c0 = 0; c0 < Tt; c0 += AMX_TCHUNK) {
            const int cn = Tt - c0 < AMX_TCHUNK ? Tt - c0 : AMX_TCHUNK;
            for (int t = 0; t < cn; t++) _mm512_store_ps(sum[t], _mm512_setzero_ps());
            for (int64_t i = 0; i < nsb; i++) {
                const int8_t(*bi)[1024] = bt + i * np * 4;
                const __m512 d = _mm512_load_ps(dv[i]), dmin = _mm512_load_ps(dm[i]);
                for (int t0 = c0; t0 < c0 + cn; t0 += 16) {
                    /* the last tile starts at Tt - 16 and adds only its rows from t0 on */
                    const int ts = t0 + 16 <= Tt ? t0 : Tt - 16;
                    const uint8_t *ai = (const uint8_t *)act + (size_t)ts * ab + (size_t)i * sizeof(blk_q8_k);
                    const int tn = t0 + 16 < c0 + cn ? (t0 + 32 <= Tt ? t0 + 16 : Tt - 16) : -1;
                    const uint8_t *an =
                        tn < 0 ? NULL : (const uint8_t *)act + (size_t)tn * ab + (size_t)i * sizeof(blk_q8_k);
                    if (E) {
                        memset(em.c, 0, sizeof em.c);
                    } else {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                    }
                    AMX_KSTEP(0, 3);
                    AMX_KSTEP(1, 7);
                    AMX_KSTEP(2, 3);
                    AMX_KSTEP(3, 7);
                    if (E) {
                        memcpy(cb, em.c, sizeof cb);
                    } else {
                        _tile_stored(0, cb[0], 64);
                        if (np > 1) _tile_stored(1, cb[1], 64);
                        if (np > 2) _tile_stored(2, cb[2], 64);
                    }
                    for (int m = t0 - ts; m < 16; m++) {
                        /* isum = C_0 + base (C_1 + base C_2), the digits' products recombined */
                        __m512i acc = _mm512_load_si512((const void *)cb[k->nd - 1][m]);
                        for (int p = k->nd - 2; p >= 0; p--)
                            acc =
                                _mm512_add_epi32(k->sh ? _mm512_slli_epi32(acc, k->sh)
                                                       : _mm512_mullo_epi32(acc, _mm512_set1_epi32(k->base)),
                                                 _mm512_load_si512((const void *)cb[p][m]));
                        __m512 fi = _mm512_cvtepi32_ps(acc);
                        const __m512 yd = _mm512_set1_ps(((const blk_q8_k *)(ai + (size_t)m * ab))->d);
                        __m512 term;
                        if (k->mode == EP_MIN) {
                            const __m512 fm =
                                _mm512_cvtepi32_ps(_mm512_load_si512((const void *)cb[k->nd][m]));
                            term = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(yd, d), fi),
                                                 _mm512_mul_ps(_mm512_mul_ps(yd, dmin), fm));
                        } else {
                            if (k->mode == EP_IQ1) fi = _mm512_mul_ps(fi, _mm512_set1_ps(0.125f));
                            term = _mm512_mul_ps(_mm512_mul_ps(d, yd), fi);
                        }
                        float *sr = sum[ts + m - c0];
                        _mm512_store_ps(sr, _mm512_add_ps(_mm512_load_ps(sr), term));
                    }
                }
            }
            for (int t = 0; t < cn && c0 + t < T; t++) {
                __m512 v = _mm512_load_ps(sum[t]);
                if (k->post != 1.0f) v = _mm512_mul_ps(_mm512_set1_ps(k->post), v);
                _mm512_mask_storeu_ps(o + (size_t)(c0 + t) * ldo + r0, keep, v);
            }
        }
    }
    if (!E) _tile_release();
}

/* amx_<type> (tiles) and amxe_<type> (emulated), for any T >= 1 (kern_matmul sends batches below the
 * type's amx_min rows to the 512-bit core); the 512-bit core past AMX_MAXSB super-blocks per row. */
#define AMX_ARGS                                                                                             \
    const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, size_t ab, int T, float *o, size_t ldo
#define AMX_MATMUL(name, DEC, BLK, ...)                                                                      \
    static const amx_kind amx_kind_##name = {__VA_ARGS__};                                                   \
    static void amx_go_##name(int E, const void *W, size_t rb, int64_t nr, int64_t nc, const void *a,        \
                              size_t ab, int T, float *o, size_t ldo) {                                      \
        if (nc / QK_K > AMX_MAXSB || nc / QK_K == 0 || nr == 0 || T < 1)                                     \
            mm_##name(W, rb, nr, nc, a, ab, T, o, ldo);                                                      \
        else amx_driver(DEC, sizeof(BLK), &amx_kind_##name, E, W, rb, nr, nc / QK_K, a, ab, T, o, ldo);      \
    }                                                                                                        \
    static void amx_##name(AMX_ARGS) { amx_go_##name(0, W, rb, nr, nc, a, ab, T, o, ldo); }                  \
    static void amxe_##name(AMX_ARGS) { amx_go_##name(1, W, rb, nr, nc, a, ab, T, o, ldo); }
/*                                     off uns nd dmn base sh magic mins mode     post */
AMX_MATMUL(q2_k, dec_q2_k, blk_q2_k, 0, 1, 1, 0, 16, 4, 0, 1, EP_MIN, 1.0f)
AMX_MATMUL(q4_k, dec_q4_k, blk_q4_k, 0, 1, 2, 0, 16, 4, 0, 1, EP_MIN, 1.0f)
AMX_MATMUL(q5_k, dec_q5_k, blk_q5_k, 0, 1, 2, 0, 8, 3, 0, 1, EP_MIN, 1.0f)
AMX_MATMUL(q6_k, dec_q6_k, blk_q6_k, 32, 0, 3, -3, 8, 3, 0, 0, EP_PLAIN, 1.0f)
AMX_MATMUL(iq2_xxs, DEC_IQ(iq2_xxs), blk_iq2_xxs, 43, 0, 3, -2, 5, 0, 13108, 0, EP_PLAIN, 0.125f)
AMX_MATMUL(iq2_xs, DEC_IQ(iq2_xs), blk_iq2_xs, 43, 0, 3, -2, 5, 0, 13108, 0, EP_PLAIN, 0.125f)
AMX_MATMUL(iq3_xxs, DEC_IQ(iq3_xxs), blk_iq3_xxs, 62, 0, 3, -2, 5, 0, 13108, 0, EP_PLAIN, 0.25f)
AMX_MATMUL(iq3_s, DEC_IQ(iq3_s), blk_iq3_s, 15, 0, 2, -8, 17, 0, 3856, 0, EP_PLAIN, 1.0f)
AMX_MATMUL(iq1_m, DEC_IQ(iq1_m), blk_iq1_m, 9, 0, 2, -8, 16, 4, 0, 0, EP_IQ1, 1.0f)

static void fill_amx(kern_table *t) {
#define SET_AMX(QT, name, rows)                                                                              \
    t->matmul_x[QT] = amx_##name, t->matmul_xe[QT] = amxe_##name, t->amx_min[QT] = rows
    /* the activation rows from which the tiles beat the 512-bit core: one-thread sweeps on the H200 host,
     * bench/results/2026-12-02-cpu-amx2-h200-raw.txt */
    SET_AMX(QT_Q2_K, q2_k, 16);
    SET_AMX(QT_Q4_K, q4_k, 32);
    SET_AMX(QT_Q5_K, q5_k, 32);
    SET_AMX(QT_Q6_K, q6_k, 48);
    SET_AMX(QT_IQ2_XXS, iq2_xxs, 32);
    SET_AMX(QT_IQ2_XS, iq2_xs, 32);
    SET_AMX(QT_IQ3_XXS, iq3_xxs, 32);
    SET_AMX(QT_IQ3_S, iq3_s, 32);
    SET_AMX(QT_IQ1_M, iq1_m, 32);
#undef SET_AMX
}
#else
static void fill_amx(kern_table *t) { (void)t; }
#endif
