/* test_cuda_ops_mmq.h — part of test_cuda_ops.c: the integer path's staged prefill tiles (k_mmq_tc,
 * cu_matmul with a scratch). Each output must equal quant_traits.vec_dot(row, q8_K(x)) — the CPU
 * backend's value — bit for bit, in dense launches (several row blocks and token tiles, both partial;
 * two segments; gate/up) and grouped ones (plan tiles of experts, pair_in and pair_out), and equal the
 * launches without a scratch (k_mmq_mma, same arithmetic) where the epilogue is silu(g) * u. */

/* A grouped plan on the host: P pairs, pair p on expert ex[p] reading input row pin[p], sorted by
 * expert (mmq_pairs); then tiles of up to tt pairs of one expert (mmq_tiles, returns their number). */
static void mmq_pairs(int P, int E, int T, int32_t *ex, int32_t *pin) {
    int p = 0;
    for (int e = 0; e < E; e++) {
        const int cnt = e == E - 1 ? P - p : (int)(rl_rng_u64(&R) % (uint64_t)(P / E + 6));
        for (int i = 0; i < cnt && p < P; i++, p++) {
            ex[p] = e;
            pin[p] = (int32_t)(rl_rng_u64(&R) % (uint64_t)T);
        }
    }
}
static int mmq_tiles(int P, const int32_t *ex, int tt, cu_tile *tl) {
    int n = 0;
    for (int s = 0; s < P;) {
        int c = 1;
        while (s + c < P && c < tt && ex[s + c] == ex[s]) c++;
        tl[n++] = (cu_tile){.expert = ex[s], .start = s, .count = c};
        s += c;
    }
    return n;
}

static void test_mmq_tc(uint32_t type, int n_in) {
    const quant_traits *qt = quant_get(type), *q8 = quant_get(QT_Q8_K);
    const int n_out = 300, T = 70, H = 150; /* 3 row blocks (the last partial), 3 tiles of 32 (the last 6) */
    const size_t rb = quant_row_size(type, n_in);
    uint8_t *w = malloc(rb * n_out);
    fill_random_blocks(type, w, (int64_t)n_out * n_in / 256, &R);
    float *x = randv((size_t)T * n_in, 1.0f), *got = malloc(sizeof(float) * T * n_out),
          *ref = malloc(sizeof(float) * T * n_out);
    uint8_t *dw = dup_to_dev(w, rb * n_out);
    float *dx = dup_to_dev(x, sizeof(float) * T * n_in), *dy = dpoison((size_t)T * n_out);
    const int P = 61, E = 3;
    void *ws = dalloc(cu_matmul_ws_bytes(n_in, P > T ? P : T));
    ops_mat W = {"w", type, n_in, n_out, rb, w};
    /* dense, one segment: == vec_dot */
    cu_seg s = {.w = dw, .row_bytes = rb, .n_out = n_out, .y = dy, .ldy = n_out};
    CHECK(cu_matmul(type, n_in, &s, 1, dx, n_in, T, NULL, false, NULL, ws, S0) == 0, "%s", rl_lasterr());
    to_host(got, dy, sizeof(float) * T * n_out);
    int bad = check_mm_q8(&W, x, T, got, n_out);
    CHECK(bad == 0, "staged int8 tiles %s n_in %d: %d outputs differ from the CPU's vec_dot", qt->name, n_in,
          bad);
    /* two segments: rows 0..129 and 130..299 */
    float *d2 = dpoison((size_t)T * 130), *d3 = dpoison((size_t)T * 170),
          *h2 = malloc(sizeof(float) * T * 170);
    cu_seg ss[2] = {{.w = dw, .row_bytes = rb, .n_out = 130, .y = d2, .ldy = 130},
                    {.w = dw + 130 * rb, .row_bytes = rb, .n_out = 170, .y = d3, .ldy = 170}};
    CHECK(cu_matmul(type, n_in, ss, 2, dx, n_in, T, NULL, false, NULL, ws, S0) == 0, "%s", rl_lasterr());
    int diff = 0;
    to_host(h2, d2, sizeof(float) * T * 130);
    for (int t = 0; t < T; t++) diff += count_bad(h2 + (size_t)t * 130, got + (size_t)t * n_out, 130);
    to_host(h2, d3, sizeof(float) * T * 170);
    for (int t = 0; t < T; t++) diff += count_bad(h2 + (size_t)t * 170, got + (size_t)t * n_out + 130, 170);
    CHECK(diff == 0, "staged int8 tiles %s: two segments differ from one matrix (%d)", qt->name, diff);
    /* gate/up (rows 0..149 gate, 150..299 up) == the same launch without a scratch (k_mmq_mma) */
    float *dh = dpoison((size_t)T * H), *dh0 = dpoison((size_t)T * H), *hh = malloc(sizeof(float) * T * H),
          *hh0 = malloc(sizeof(float) * T * H);
    cu_seg gu = {.w = dw, .w2 = dw + (size_t)H * rb, .row_bytes = rb, .n_out = H, .y = dh, .ldy = H},
           gu0 = gu;
    gu0.y = dh0;
    CHECK(cu_matmul(type, n_in, &gu, 1, dx, n_in, T, NULL, true, NULL, ws, S0) == 0 &&
              cu_matmul(type, n_in, &gu0, 1, dx, n_in, T, NULL, true, NULL, NULL, S0) == 0,
          "%s", rl_lasterr());
    to_host(hh, dh, sizeof(float) * T * H);
    to_host(hh0, dh0, sizeof(float) * T * H);
    diff = count_bad(hh, hh0, (size_t)T * H);
    CHECK(diff == 0, "staged int8 tiles %s: gate/up differs from the unstaged launch (%d)", qt->name, diff);
    /* grouped: 3 experts of 100 rows, 61 pairs over 70 input rows (pair_in), outputs by pair_out */
    int32_t ex[61], pin[61], pout[61];
    cu_tile tl[61];
    mmq_pairs(P, E, T, ex, pin);
    const int nt = mmq_tiles(P, ex, CU_TT, tl);
    for (int p = 0; p < P; p++) pout[p] = P - 1 - p;
    int32_t *dpin = dup_to_dev(pin, sizeof pin), *dpout = dup_to_dev(pout, sizeof pout);
    cu_tile *dtl = dup_to_dev(tl, sizeof(cu_tile) * nt);
    int *dnt = dup_to_dev(&nt, sizeof nt);
    const int ER = 100;
    float *dg = dpoison((size_t)P * ER), *gg = malloc(sizeof(float) * P * ER);
    cu_group g = {.tiles = dtl,
                  .n_tiles = dnt,
                  .max_tiles = nt + 2,
                  .tt = CU_TT,
                  .pair_in = dpin,
                  .pair_out = dpout,
                  .x_rows = T};
    cu_seg sgp = {
        .w = dw, .row_bytes = rb, .expert_stride = (size_t)ER * rb, .n_out = ER, .y = dg, .ldy = ER};
    CHECK(cu_matmul(type, n_in, &sgp, 1, dx, n_in, P, &g, false, NULL, ws, S0) == 0, "%s", rl_lasterr());
    to_host(gg, dg, sizeof(float) * P * ER);
    void *xq = malloc(quant_row_size(QT_Q8_K, n_in));
    bad = 0;
    for (int p = 0; p < P; p++) {
        q8->from_float(x + (size_t)pin[p] * n_in, xq, n_in);
        for (int r = 0; r < ER; r++) {
            const float want = qt->vec_dot(n_in, w + ((size_t)ex[p] * ER + r) * rb, xq),
                        gv = gg[(size_t)pout[p] * ER + r];
            if (memcmp(&want, &gv, sizeof gv) && bad++ < 3)
                fprintf(stderr, "  %s grouped pair %d row %d: got %.9g want %.9g\n", qt->name, p, r, gv,
                        want);
        }
    }
    CHECK(bad == 0, "staged int8 tiles %s: grouped outputs differ from the CPU's vec_dot (%d)", qt->name,
          bad);
    { /* the same pairs in tiles of up to 2 * CU_TT (cu_matmul_group_tt's tiles): the same bits
       */
        cu_tile tl2[61];
        int n16 = mmq_tiles(P, ex, 2 * CU_TT, tl2);
        cu_tile *dtl2 = dup_to_dev(tl2, sizeof(cu_tile) * n16);
        int *dnt2 = dup_to_dev(&n16, sizeof n16);
        float *dg2 = dpoison((size_t)P * ER), *gg2 = malloc(sizeof(float) * P * ER);
        cu_group g16 = g;
        g16.tiles = dtl2;
        g16.n_tiles = dnt2;
        g16.max_tiles = n16 + 1;
        g16.tt = 2 * CU_TT;
        cu_seg s16 = sgp;
        s16.y = dg2;
        CHECK(cu_matmul(type, n_in, &s16, 1, dx, n_in, P, &g16, false, NULL, ws, S0) == 0, "%s",
              rl_lasterr());
        to_host(gg2, dg2, sizeof(float) * P * ER);
        const int d16 = count_bad(gg2, gg, (size_t)P * ER);
        CHECK(d16 == 0, "staged int8 tiles %s: grouped tiles of 16 pairs differ from tiles of 8 (%d)",
              qt->name, d16);
        CHECK(cu_matmul(type, n_in, &s16, 1, dx, n_in, P, &g16, false, NULL, NULL, S0) != 0,
              "tiles of 16 pairs without a scratch must be refused");
        cudaFree(dtl2);
        cudaFree(dnt2);
        cudaFree(dg2);
        free(gg2);
    }
    /* grouped gate/up (experts of 50 gate + 50 up rows), rows of x by pair (no pair_in): == unstaged */
    float *dgu = dpoison((size_t)P * 50), *dgu0 = dpoison((size_t)P * 50),
          *hg = malloc(sizeof(float) * P * 50), *hg0 = malloc(sizeof(float) * P * 50);
    cu_group g2 = g;
    g2.pair_in = NULL;
    g2.pair_out = NULL;
    g2.x_rows = P;
    cu_seg gs = {.w = dw,
                 .w2 = dw + 50 * rb,
                 .row_bytes = rb,
                 .expert_stride = (size_t)ER * rb,
                 .n_out = 50,
                 .y = dgu,
                 .ldy = 50},
           gs0 = gs;
    gs0.y = dgu0;
    CHECK(cu_matmul(type, n_in, &gs, 1, dx, n_in, P, &g2, true, NULL, ws, S0) == 0 &&
              cu_matmul(type, n_in, &gs0, 1, dx, n_in, P, &g2, true, NULL, NULL, S0) == 0,
          "%s", rl_lasterr());
    to_host(hg, dgu, sizeof(float) * P * 50);
    to_host(hg0, dgu0, sizeof(float) * P * 50);
    diff = count_bad(hg, hg0, (size_t)P * 50);
    CHECK(diff == 0, "staged int8 tiles %s: grouped gate/up differs from the unstaged launch (%d)", qt->name,
          diff);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(d2);
    cudaFree(d3);
    cudaFree(dh);
    cudaFree(dh0);
    cudaFree(dpin);
    cudaFree(dpout);
    cudaFree(dtl);
    cudaFree(dnt);
    cudaFree(dg);
    cudaFree(dgu);
    cudaFree(dgu0);
    cudaFree(ws);
    free(w);
    free(x);
    free(got);
    free(ref);
    free(h2);
    free(hh);
    free(hh0);
    free(gg);
    free(xq);
    free(hg);
    free(hg0);
}

/* One-token launches over many rows (n_out in two segments split at an odd row): every output equals
 * vec_dot(row, q8_K(x)) bit for bit. Enough rows that a streaming launch (the default, RL_CUDA_MMQ_SM: as
 * many blocks as fit on the GPU, each walking several row blocks with two staged slices per warp) takes
 * several trips through both slices, the last row block partial; gate/up too (silu(g) * u against the
 * two plain launches). */
static void test_mmq_many_rows(uint32_t type, int n_in, int n_out) {
    const size_t rb = quant_row_size(type, n_in);
    const int n0 = n_out / 3 | 1, n1 = n_out - n0;
    uint8_t *w = malloc(rb * n_out), *u = malloc(rb * n_out);
    fill_random_blocks(type, w, (int64_t)n_out * n_in / 256, &R);
    fill_random_blocks(type, u, (int64_t)n_out * n_in / 256, &R);
    ops_mat W = {"w", type, n_in, n_out, rb, w};
    float *x = randv(n_in, 1.0f), *got = malloc(sizeof(float) * n_out), *gu = malloc(sizeof(float) * n_out);
    uint8_t *dw = dup_to_dev(w, rb * n_out), *du = dup_to_dev(u, rb * n_out);
    float *dx = dup_to_dev(x, sizeof(float) * n_in), *dy = dpoison(n_out), *dz = dpoison(n_out),
          *dg = dpoison(n_out);
    cu_seg ss[2] = {{.w = dw, .row_bytes = rb, .n_out = n0, .y = dy, .ldy = n0},
                    {.w = dw + (size_t)n0 * rb, .row_bytes = rb, .n_out = n1, .y = dy + n0, .ldy = n1}};
    CHECK(cu_matmul(type, n_in, ss, 2, dx, n_in, 1, NULL, false, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    to_host(got, dy, sizeof(float) * n_out);
    int bad = check_mm_q8(&W, x, 1, got, n_out);
    CHECK(bad == 0, "one-token %s launch over %d rows: %d outputs differ from the CPU's vec_dot",
          quant_name(type), n_out, bad);
    /* gate/up: silu(w x) * (u x), from the plain launches of w and u */
    cu_seg su = {.w = du, .row_bytes = rb, .n_out = n_out, .y = dz, .ldy = n_out};
    cu_seg sg = {.w = dw, .w2 = du, .row_bytes = rb, .n_out = n_out, .y = dg, .ldy = n_out};
    CHECK(cu_matmul(type, n_in, &su, 1, dx, n_in, 1, NULL, false, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    CHECK(cu_matmul(type, n_in, &sg, 1, dx, n_in, 1, NULL, true, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    float *hz = malloc(sizeof(float) * n_out);
    to_host(hz, dz, sizeof(float) * n_out);
    to_host(gu, dg, sizeof(float) * n_out);
    /* bit for bit: g and u are vec_dot's bits on both sides and swiglu (src/base/swiglu.h) is one
     * function for the host and the device: what the exact hybrid (--vram-miss cpu|auto) relies on */
    int diff = 0;
    for (int r = 0; r < n_out; r++) {
        const float want = swiglu(got[r], hz[r]);
        diff += memcmp(&gu[r], &want, sizeof want) != 0;
    }
    CHECK(diff == 0,
          "one-token %s gate/up launch over %d rows: %d outputs differ from the host's swiglu(g, u)",
          quant_name(type), n_out, diff);
    cudaFree(dw);
    cudaFree(du);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dz);
    cudaFree(dg);
    free(w);
    free(u);
    free(x);
    free(got);
    free(gu);
    free(hz);
}
