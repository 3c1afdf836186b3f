/* test_cuda_ops_dn.h — the DeltaNet and MoE parts of test_cuda_ops.c (included once). */

/* ---- Gated DeltaNet ------------------------------------------------------------------------- */

/* T rows: 5, and 150 (the prefill conv in chunks of 64 rows, the scan's staged chunks of 16, both
 * with a partial last chunk). q35: the Qwen3.5 layouts (issue 47): value head h on key head h % hk
 * (v_tiled) and gate rows [b x hv | a x hv] (ba_split); else grouped heads and the fused ssm_ba. */
static void test_deltanet(int dk, int dv, int hk, int hv, int T, int q35) {
    const int C = 2 * hk * dk + hv * dv, inner = hv * dv, kw = 4, D = 256;
    float *in = randv((size_t)T * C, 1.0f), *cw = randv((size_t)C * kw, 0.5f),
          *cs0 = randv((size_t)(kw - 1) * C, 1.0f);
    float *ba = randv((size_t)T * 2 * hv, 1.0f), *z = randv((size_t)T * inner, 1.0f), *nw = randv(dv, 0.2f);
    float *A = malloc(sizeof(float) * hv), *dtb = malloc(sizeof(float) * hv);
    for (int i = 0; i < dv; i++) nw[i] += 1.0f;
    for (int h = 0; h < hv; h++) {
        A[h] = -expf(logf(0.05f) + rl_rng_f32(&R) * (logf(8.0f) - logf(0.05f)));
        dtb[h] = -2.5f + 3.5f * rl_rng_f32(&R);
    }
    size_t ns = (size_t)hv * dv * dk;
    float *s0 = randv(ns, 0.1f);
    float *d_in = dup_to_dev(in, sizeof(float) * T * C), *d_cw = dup_to_dev(cw, sizeof(float) * C * kw);
    float *d_ba = dup_to_dev(ba, sizeof(float) * T * 2 * hv), *d_z = dup_to_dev(z, sizeof(float) * T * inner);
    float *d_nw = dup_to_dev(nw, sizeof(float) * dv), *d_A = dup_to_dev(A, sizeof(float) * hv),
          *d_dt = dup_to_dev(dtb, sizeof(float) * hv);
    cu_dn_dims d = {.C = C,
                    .kw = kw,
                    .dk = dk,
                    .dv = dv,
                    .hk = hk,
                    .hv = hv,
                    .eps = 1e-6f,
                    .conv_w = d_cw,
                    .ssm_a = d_A,
                    .dt_bias = d_dt,
                    .ssm_norm = d_nw,
                    .v_tiled = q35,
                    .ba_split = q35};
    { /* a mix of the two layouts (no architecture has one) is refused before any launch */
        cu_dn_dims mix = d;
        mix.v_tiled = !q35;
        CHECK(cu_dn_prep(&mix, NULL, NULL, NULL, T, S0) != 0 && strstr(rl_lasterr(), "layout") &&
                  cu_dn_scan(&mix, NULL, NULL, NULL, NULL, T, S0) != 0 &&
                  cu_dn_step(&mix, NULL, NULL, NULL, NULL, NULL, NULL, S0) != 0,
              "mixed DeltaNet layout accepted");
    }
    /* prefill pieces over T rows */
    float *cs = dup_to_dev(cs0, sizeof(float) * (kw - 1) * C), *ss = dup_to_dev(s0, sizeof(float) * ns);
    float *u = dpoison((size_t)T * C), *ab = dpoison((size_t)T * 2 * hv), *o = dpoison((size_t)T * inner);
    CHECK(cu_dn_conv(&d, d_in, C, u, cs, T, S0) == 0 && cu_dn_prep(&d, u, d_ba, ab, T, S0) == 0 &&
              cu_dn_scan(&d, u, ab, ss, o, T, S0) == 0 && cu_dn_gnorm(&d, o, d_z, inner, T, S0) == 0,
          "%s", rl_lasterr());
    /* decode: per row conv (T=1) + the fused step */
    float *cs2 = dup_to_dev(cs0, sizeof(float) * (kw - 1) * C), *ss2 = dup_to_dev(s0, sizeof(float) * ns);
    float *u2 = dpoison((size_t)T * C), *o2 = dpoison((size_t)T * inner);
    for (int t = 0; t < T; t++) {
        CHECK(cu_dn_conv(&d, d_in + (size_t)t * C, C, u2 + (size_t)t * C, cs2, 1, S0) == 0, "%s",
              rl_lasterr());
        CHECK(cu_dn_step(&d, u2 + (size_t)t * C, d_ba + (size_t)t * 2 * hv, d_z + (size_t)t * inner, ss2,
                         o2 + (size_t)t * inner, NULL, S0) == 0,
              "%s", rl_lasterr());
    }
    /* the split step (a head over 4 blocks, counters) on the same inputs: the fused step's bits */
    float *ss3 = dup_to_dev(s0, sizeof(float) * ns), *o3 = dpoison((size_t)T * inner);
    unsigned *ctr = dalloc(sizeof(unsigned) * hv);
    CHECK(cudaMemset(ctr, 0, sizeof(unsigned) * hv) == cudaSuccess, "memset");
    for (int t = 0; t < T; t++)
        CHECK(cu_dn_step(&d, u2 + (size_t)t * C, d_ba + (size_t)t * 2 * hv, d_z + (size_t)t * inner, ss3,
                         o3 + (size_t)t * inner, ctr, S0) == 0,
              "%s", rl_lasterr());
    float *g_o = malloc(sizeof(float) * T * inner), *g_o2 = malloc(sizeof(float) * T * inner);
    float *g_s = malloc(sizeof(float) * ns), *g_s2 = malloc(sizeof(float) * ns);
    float *g_c = malloc(sizeof(float) * (kw - 1) * C), *g_c2 = malloc(sizeof(float) * (kw - 1) * C);
    to_host(g_o, o, sizeof(float) * T * inner);
    to_host(g_o2, o2, sizeof(float) * T * inner);
    to_host(g_s, ss, sizeof(float) * ns);
    to_host(g_s2, ss2, sizeof(float) * ns);
    to_host(g_c, cs, sizeof(float) * (kw - 1) * C);
    to_host(g_c2, cs2, sizeof(float) * (kw - 1) * C);
    CHECK(count_bad(g_o, g_o2, (size_t)T * inner) == 0 && count_bad(g_s, g_s2, ns) == 0 &&
              count_bad(g_c, g_c2, (size_t)(kw - 1) * C) == 0,
          "DeltaNet %d/%d, %d rows: fused decode step differs from the prefill kernels", dk, dv, T);
    {
        float *g_o3 = malloc(sizeof(float) * T * inner), *g_s3 = malloc(sizeof(float) * ns);
        unsigned hc[128];
        to_host(g_o3, o3, sizeof(float) * T * inner);
        to_host(g_s3, ss3, sizeof(float) * ns);
        to_host(hc, ctr, sizeof(unsigned) * hv);
        int left = 0;
        for (int h = 0; h < hv; h++) left += hc[h] != 0;
        CHECK(
            count_bad(g_o3, g_o2, (size_t)T * inner) == 0 && count_bad(g_s3, g_s2, ns) == 0 && left == 0,
            "DeltaNet %d/%d, %d rows: split decode step differs from the fused one (or left %d counters set)",
            dk, dv, T, left);
        cudaFree(ss3);
        cudaFree(o3);
        cudaFree(ctr);
        free(g_o3);
        free(g_s3);
    }
    /* conv in the matmul epilogue == matmul + conv kernel (Q8_0 weights D -> C) */
    {
        size_t rb = quant_row_size(QT_Q8_0, D);
        uint8_t *w = malloc(rb * C);
        fill_random_blocks(QT_Q8_0, w, (int64_t)C * D / 32, &R);
        float *x = randv(D, 1.0f);
        uint8_t *dw = dup_to_dev(w, rb * C);
        float *dx = dup_to_dev(x, sizeof(float) * D), *raw = dpoison(C), *ua = dpoison(C), *ub = dpoison(C);
        float *csa = dup_to_dev(cs0, sizeof(float) * (kw - 1) * C),
              *csb = dup_to_dev(cs0, sizeof(float) * (kw - 1) * C);
        cu_seg s1 = {.w = dw, .row_bytes = rb, .n_out = C, .y = raw, .ldy = C};
        cu_seg s2 = {.w = dw, .row_bytes = rb, .n_out = C, .y = ua, .ldy = C, .epi = CU_EPI_CONV};
        cu_conv cv = {d_cw, csa, kw, C};
        CHECK(cu_matmul(QT_Q8_0, D, &s1, 1, dx, D, 1, NULL, false, NULL, NULL, S0) == 0 &&
                  cu_dn_conv(&d, raw, C, ub, csb, 1, S0) == 0 &&
                  cu_matmul(QT_Q8_0, D, &s2, 1, dx, D, 1, NULL, false, &cv, NULL, S0) == 0,
              "%s", rl_lasterr());
        float *ha = malloc(sizeof(float) * C), *hb = malloc(sizeof(float) * C);
        to_host(ha, ua, sizeof(float) * C);
        to_host(hb, ub, sizeof(float) * C);
        CHECK(count_bad(ha, hb, C) == 0, "conv epilogue differs from the conv kernel");
        cudaFree(dw);
        cudaFree(dx);
        cudaFree(raw);
        cudaFree(ua);
        cudaFree(ub);
        cudaFree(csa);
        cudaFree(csb);
        free(w);
        free(x);
        free(ha);
        free(hb);
    }
    /* CPU reference (ops.c), the qwen3next_forward.c order */
    float *st = malloc(sizeof(float) * (kw - 1) * C), *S = malloc(sizeof(float) * ns),
          *ref = malloc(sizeof(float) * T * inner);
    memcpy(st, cs0, sizeof(float) * (kw - 1) * C);
    memcpy(S, s0, sizeof(float) * ns);
    float *uu = malloc(sizeof(float) * C);
    const int rr = hv / hk;
    for (int t = 0; t < T; t++) {
        ops_conv_step(st, st, cw, in + (size_t)t * C, C, kw, uu);
        for (int g = 0; g < hk; g++) {
            ops_l2norm(uu + (size_t)g * dk, dk, 1e-6f);
            for (int i = 0; i < dk; i++) uu[(size_t)g * dk + i] *= 1.0f / sqrtf((float)dk);
            ops_l2norm(uu + (size_t)(hk + g) * dk, dk, 1e-6f);
        }
        for (int h = 0; h < hv; h++) {
            const int g = q35 ? h % hk : h / rr, e = h % rr;
            const float *bt = ba + (size_t)t * 2 * hv;
            float b = q35 ? bt[h] : bt[g * 2 * rr + e], a = q35 ? bt[hv + h] : bt[g * 2 * rr + rr + e];
            float *out = ref + (size_t)t * inner + (size_t)h * dv;
            ops_delta_step(S + (size_t)h * dv * dk, S + (size_t)h * dv * dk, uu + (size_t)g * dk,
                           uu + (size_t)(hk + g) * dk, uu + (size_t)2 * hk * dk + (size_t)h * dv,
                           expf(A[h] * ops_softplus(a + dtb[h])), ops_sigmoid(b), dk, dv, out);
            ops_rmsnorm(out, nw, dv, 1e-6f, out);
            for (int i = 0; i < dv; i++) out[i] *= ops_silu(z[(size_t)t * inner + (size_t)h * dv + i]);
        }
    }
    double dO = max_abs_diff(g_o, ref, (size_t)T * inner), dS = max_abs_diff(g_s, S, ns);
    CHECK(dO <= 2e-5 && dS <= 2e-6, "DeltaNet %d/%d%s vs CPU: out %.3g state %.3g", dk, dv,
          q35 ? " (q35)" : "", dO, dS);
    printf("  deltanet dk %d dv %d%s: max |gpu - cpu| out %.3g, state %.3g; decode == prefill bit-exact\n",
           dk, dv, q35 ? " (tiled heads, split beta/alpha)" : "", dO, dS);
    cudaFree(d_in);
    cudaFree(d_cw);
    cudaFree(d_ba);
    cudaFree(d_z);
    cudaFree(d_nw);
    cudaFree(d_A);
    cudaFree(d_dt);
    cudaFree(cs);
    cudaFree(ss);
    cudaFree(u);
    cudaFree(ab);
    cudaFree(o);
    cudaFree(cs2);
    cudaFree(ss2);
    cudaFree(u2);
    cudaFree(o2);
    free(in);
    free(cw);
    free(cs0);
    free(ba);
    free(z);
    free(nw);
    free(A);
    free(dtb);
    free(s0);
    free(g_o);
    free(g_o2);
    free(g_s);
    free(g_s2);
    free(g_c);
    free(g_c2);
    free(st);
    free(S);
    free(ref);
    free(uu);
}

/* ---- MoE: router, plan, grouped experts, combine ----------------------------------------- */

static void test_moe(void) {
    const int E = 20, K = 4, T = 11, D = 256, ff = 64;
    float *lg = randv((size_t)T * E, 2.0f);
    lg[3 * E + 5] = lg[3 * E + 6]; /* an exact tie: the lower id must win */
    float *dlg = dup_to_dev(lg, sizeof(float) * T * E);
    int32_t *ids = dalloc(4 * T * K), *pin = dalloc(4 * T * K), *pout = dalloc(4 * T * K);
    float *w = dpoison((size_t)T * K), *p = dpoison((size_t)T * K);
    int max_tiles = T * K / CU_TT + E + 1, *nt = dalloc(4), *cnt = dalloc(4 * E);
    cu_tile *tiles = dalloc(sizeof(cu_tile) * max_tiles);
    CHECK(cu_router(dlg, E, K, T, ids, w, p, NULL, NULL, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    int32_t hid[11 * 4];
    float hw[11 * 4], hp[11 * 4];
    to_host(hid, ids, sizeof hid);
    to_host(hw, w, sizeof hw);
    to_host(hp, p, sizeof hp);
    int bad = 0;
    double dw = 0;
    for (int t = 0; t < T; t++) {
        float pr[20];
        int32_t ref[4];
        memcpy(pr, lg + (size_t)t * E, sizeof pr);
        ops_softmax(pr, E);
        ops_topk(pr, E, K, ref);
        double sum = 0;
        for (int k = 0; k < K; k++) sum += pr[ref[k]];
        for (int k = 0; k < K; k++) {
            bad += ref[k] != hid[t * K + k];
            double e = fabs((double)hw[t * K + k] - pr[ref[k]] / sum);
            dw = e > dw ? e : dw;
        }
    }
    CHECK(bad == 0, "router: %d expert ids differ from the CPU", bad);
    CHECK(dw <= 1e-6, "router weights max |diff| %.3g", dw);
    /* experts: gate/up Q4_K (E*ff rows x D), down Q8_0 (E*D rows x ff) */
    size_t rbg = quant_row_size(QT_Q4_K, D), rbd = quant_row_size(QT_Q8_0, ff);
    uint8_t *hg = malloc(rbg * E * ff), *hu = malloc(rbg * E * ff), *hd = malloc(rbd * E * D);
    fill_random_blocks(QT_Q4_K, hg, (int64_t)E * ff * D / 256, &R);
    fill_random_blocks(QT_Q4_K, hu, (int64_t)E * ff * D / 256, &R);
    fill_random_blocks(QT_Q8_0, hd, (int64_t)E * D * ff / 32, &R);
    uint8_t *dg = dup_to_dev(hg, rbg * E * ff), *du = dup_to_dev(hu, rbg * E * ff),
            *dd = dup_to_dev(hd, rbd * E * D);
    float *x = randv((size_t)T * D, 1.0f), *dx = dup_to_dev(x, sizeof(float) * T * D);
    float *h = dpoison((size_t)T * K * ff), *eo = dpoison((size_t)T * K * D);
    CHECK(cu_moe_plan(ids, T, K, E, CU_TT, tiles, nt, pin, pout, cnt, S0) == 0, "%s", rl_lasterr());
    cu_group g = {.tiles = tiles, .n_tiles = nt, .max_tiles = max_tiles, .tt = CU_TT, .pair_in = pin};
    cu_seg gu = {
        .w = dg, .w2 = du, .row_bytes = rbg, .expert_stride = rbg * ff, .n_out = ff, .y = h, .ldy = ff};
    CHECK(cu_matmul(QT_Q4_K, D, &gu, 1, dx, D, T, &g, true, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    g.pair_in = NULL;
    g.pair_out = pout;
    cu_seg dn = {.w = dd, .row_bytes = rbd, .expert_stride = rbd * D, .n_out = D, .y = eo, .ldy = D};
    CHECK(cu_matmul(QT_Q8_0, ff, &dn, 1, h, ff, T, &g, false, NULL, NULL, S0) == 0, "%s", rl_lasterr());
    float *geo = malloc(sizeof(float) * T * K * D), *one = malloc(sizeof(float) * D);
    to_host(geo, eo, sizeof(float) * T * K * D);
    /* each (row, slot) alone through dense 1-row launches on that expert's rows: bit-identical */
    float *h1 = dpoison(ff), *o1 = dpoison(D);
    int diff = 0;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            int e = hid[t * K + k];
            cu_seg a = {.w = dg + (size_t)e * ff * rbg,
                        .w2 = du + (size_t)e * ff * rbg,
                        .row_bytes = rbg,
                        .n_out = ff,
                        .y = h1,
                        .ldy = ff};
            cu_seg b = {.w = dd + (size_t)e * D * rbd, .row_bytes = rbd, .n_out = D, .y = o1, .ldy = D};
            cu_matmul(QT_Q4_K, D, &a, 1, dx + (size_t)t * D, D, 1, NULL, true, NULL, NULL, S0);
            cu_matmul(QT_Q8_0, ff, &b, 1, h1, ff, 1, NULL, false, NULL, NULL, S0);
            to_host(one, o1, sizeof(float) * D);
            diff += count_bad(one, geo + ((size_t)t * K + k) * D, D);
        }
    CHECK(diff == 0, "grouped expert matmuls differ from per-pair launches (%d values)", diff);
    /* decode plan (T = 1) from the router */
    float *eo1 = dpoison((size_t)K * D), *hh1 = dpoison((size_t)K * ff);
    CHECK(cu_router(dlg + 5 * E, E, K, 1, ids, w, p, tiles, nt, pin, pout, S0) == 0, "%s", rl_lasterr());
    cu_group g1 = {.tiles = tiles, .n_tiles = nt, .max_tiles = K, .tt = 1, .pair_in = pin};
    cu_seg gu1 = gu, dn1 = dn;
    gu1.y = hh1;
    dn1.y = eo1;
    g1.pair_in = pin;
    cu_matmul(QT_Q4_K, D, &gu1, 1, dx + 5 * D, D, 1, &g1, true, NULL, NULL, S0);
    g1.pair_in = NULL;
    g1.pair_out = pout;
    cu_matmul(QT_Q8_0, ff, &dn1, 1, hh1, ff, 1, &g1, false, NULL, NULL, S0);
    float *geo1 = malloc(sizeof(float) * K * D);
    to_host(geo1, eo1, sizeof(float) * K * D);
    CHECK(count_bad(geo1, geo + (size_t)5 * K * D, (size_t)K * D) == 0,
          "decode plan differs from the prefill plan for row 5");
    /* combine: y = sum w eo + sigmoid(g.xn) sh; x += y; out = rmsnorm(x) w_next */
    float *sh = randv((size_t)T * D, 1.0f), *sg = randv(D, 0.1f), *wn = randv(D, 1.0f),
          *x0 = randv((size_t)T * D, 1.0f);
    float *dsh = dup_to_dev(sh, sizeof(float) * T * D), *dsg = dup_to_dev(sg, sizeof(float) * D),
          *dwn = dup_to_dev(wn, sizeof(float) * D);
    float *dres = dup_to_dev(x0, sizeof(float) * T * D), *dy = dpoison((size_t)T * D),
          *dout = dpoison((size_t)T * D);
    /* the same combine with the gates made beforehand (cu_moe_sh_gate, the backend's default): the same bits
     */
    float *dres2 = dup_to_dev(x0, sizeof(float) * T * D), *dy2 = dpoison((size_t)T * D),
          *dout2 = dpoison((size_t)T * D);
    float *dgt = dpoison(T);
    CHECK(cu_moe_combine(eo, w, K, dsh, dsg, NULL, dx, dy, dres, dwn, dout, D, T, 1e-6f, S0) == 0, "%s",
          rl_lasterr());
    CHECK(cu_moe_sh_gate(dsg, dx, dgt, D, T, S0) == 0, "%s", rl_lasterr());
    CHECK(cu_moe_combine(eo, w, K, dsh, dsg, dgt, dx, dy2, dres2, dwn, dout2, D, T, 1e-6f, S0) == 0, "%s",
          rl_lasterr());
    float *gy = malloc(sizeof(float) * T * D), *gout = malloc(sizeof(float) * T * D),
          *ry = malloc(sizeof(float) * T * D), *rout = malloc(sizeof(float) * T * D);
    to_host(gy, dy, sizeof(float) * T * D);
    to_host(gout, dout, sizeof(float) * T * D);
    to_host(ry, dy2, sizeof(float) * T * D); /* ry / rout: the side-gate run here, the CPU reference below */
    to_host(rout, dout2, sizeof(float) * T * D);
    const int gbad = count_bad(ry, gy, (size_t)T * D) + count_bad(rout, gout, (size_t)T * D);
    CHECK(gbad == 0, "combine with cu_moe_sh_gate's gates differs from the combine's own (%d values)", gbad);
    cudaFree(dres2);
    cudaFree(dy2);
    cudaFree(dout2);
    cudaFree(dgt);
    to_host(hw, w, sizeof(float) * T * K); /* rows 0 was overwritten by the T=1 router: reread */
    for (int t = 0; t < T; t++) {
        double gd = 0;
        for (int i = 0; i < D; i++) gd += (double)sg[i] * x[(size_t)t * D + i];
        float gate = ops_sigmoid((float)gd);
        for (int i = 0; i < D; i++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)hw[t * K + k] * geo[((size_t)t * K + k) * D + i];
            acc += (double)gate * sh[(size_t)t * D + i];
            ry[(size_t)t * D + i] = (float)acc;
            x0[(size_t)t * D + i] += ry[(size_t)t * D + i];
        }
        ops_rmsnorm(x0 + (size_t)t * D, wn, D, 1e-6f, rout + (size_t)t * D);
    }
    double dy_ = max_abs_diff(gy, ry, (size_t)T * D), do_ = max_abs_diff(gout, rout, (size_t)T * D);
    CHECK(dy_ <= 1e-6 && do_ <= 1e-5, "combine vs CPU: y %.3g out %.3g", dy_, do_);
    printf("  moe: router ids exact (tie -> lower id), weights %.3g; grouped == per-pair bit-exact; combine "
           "%.3g / %.3g"
           " (with side-made gates: %d values differ)\n",
           dw, dy_, do_, gbad);
    cudaFree(dlg);
    cudaFree(ids);
    cudaFree(pin);
    cudaFree(pout);
    cudaFree(w);
    cudaFree(p);
    cudaFree(nt);
    cudaFree(cnt);
    cudaFree(tiles);
    cudaFree(dg);
    cudaFree(du);
    cudaFree(dd);
    cudaFree(dx);
    cudaFree(h);
    cudaFree(eo);
    cudaFree(h1);
    cudaFree(o1);
    cudaFree(eo1);
    cudaFree(hh1);
    cudaFree(dsh);
    cudaFree(dsg);
    cudaFree(dwn);
    cudaFree(dres);
    cudaFree(dy);
    cudaFree(dout);
    free(lg);
    free(hg);
    free(hu);
    free(hd);
    free(x);
    free(geo);
    free(one);
    free(geo1);
    free(sh);
    free(sg);
    free(wn);
    free(x0);
    free(gy);
    free(gout);
    free(ry);
    free(rout);
}
