/* test_cuda_ops_attn.h — part of test_cuda_ops.c: the register-tiled prefill attention
 * (cu_attn_dims.prefill_tiled). It must give the bits of k_attn_prefill (and so of the split decode
 * kernels, which test_attention_decode ties to k_attn_prefill) for T prompt rows at any offset:
 * several blocks (the last one partial), rows that end inside a chunk, past a chunk edge and in
 * the first chunk only (the second K/V slice empty), query-head groups that do not divide the
 * block's 32 rows (padded rows), f32 and f16 caches, head dims 64/128/256. */

static void test_attention_tiled(int hd, bool f16, int H, int Hkv, int T, int pos) {
    const int n_ctx = pos + T + 8;
    const size_t kvw = (size_t)Hkv * hd, n = (size_t)n_ctx * kvw, el = f16 ? 2 : 4, on = (size_t)T * H * hd;
    float *qg = randv((size_t)T * H * 2 * hd, 1.0f), *K = randv(n, 1.0f), *V = randv(n, 1.0f);
    void *hk = kv_host(K, n, f16), *hv = kv_host(V, n, f16);
    void *dK = dup_to_dev(hk, el * n), *dV = dup_to_dev(hv, el * n);
    float *dqg = dup_to_dev(qg, sizeof(float) * T * H * 2 * hd);
    int *dpos = dup_to_dev(&pos, sizeof pos);
    cu_attn_dims a = {.H = H,
                      .Hkv = Hkv,
                      .hd = hd,
                      .n_rot = 0,
                      .n_ctx = n_ctx,
                      .eps = 1e-6f,
                      .scale = 1.0f / sqrtf((float)hd),
                      .inv_freq = NULL,
                      .kv_f16 = f16};
    float *g[3], *ref = malloc(sizeof(float) * on);
    for (int v = 0; v < 3; v++) { /* k_attn_prefill, its staged form, the tiled kernel */
        cu_attn_dims av = a;
        av.prefill_staged = v == 1;
        av.prefill_tiled = v == 2;
        float *o = dpoison(on);
        g[v] = malloc(sizeof(float) * on);
        CHECK(cu_attention(&av, dqg, dK, dV, dpos, T, false, NULL, o, S0) == 0, "%s", rl_lasterr());
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "attention hd %d: prefill variant %d failed", hd, v);
        to_host(g[v], o, sizeof(float) * on);
        cudaFree(o);
    }
    const int b1 = count_bad(g[1], g[0], on), b2 = count_bad(g[2], g[0], on);
    CHECK(b1 == 0 && b2 == 0, "attention hd %d%s H %d/%d T %d at %d: staged %d, tiled %d values != prefill",
          hd, f16 ? " f16" : "", H, Hkv, T, pos, b1, b2);
    attn_ref(qg, hk, hv, f16, T, H, Hkv, hd, pos, ref);
    const double d = max_abs_diff(g[2], ref, on); /* the bound of test_attention_decode */
    CHECK(d <= 5e-5, "tiled prefill attention hd %d%s T %d: max |diff| vs CPU %.3g", hd, f16 ? " f16" : "", T,
          d);
    printf("  tiled prefill attention hd %d%s H %d/%d, %d rows at %d: == prefill == staged (%s), |gpu - cpu| "
           "%.3g\n",
           hd, f16 ? " (f16 KV)" : "", H, Hkv, T, pos, b1 || b2 ? "DIFFERENT" : "bit-identical", d);
    for (int v = 0; v < 3; v++) free(g[v]);
    cudaFree(dK);
    cudaFree(dV);
    cudaFree(dqg);
    cudaFree(dpos);
    free(qg);
    free(K);
    free(V);
    free(hk);
    free(hv);
    free(ref);
}

/* The tensor-core attention (cu_attn_dims.tc, attn_tc.cu; f16 cache). Its own numerics, so the contract
 * is checked inside it: the prefill kernel's rows == the split decode kernels' (launches of 1..4 rows, and
 * of 1 and 4 rows with the wide and the scan merges; single- and double-buffered slices)
 * bit for bit — rows ending inside a chunk, at several chunk counts, query groups of 1..16 heads
 * (padded rows) — and against the CPU's double reference within a bound derived from its roundings:
 * q and the weights e are rounded to f16 (u = 2^-11 relative each), and the tensor cores sum in f32
 * (taken as 2^-22 relative per addition, truncation included). A score is off by at most
 *   D = scale * max_p sum_d |q_d k_pd| * (u + hd 2^-22),
 * which moves each softmax weight by a factor within e^(+-2D); rounding e and normalising by the sum
 * of the rounded e adds 2u; the value sums add CH 2^-22 of max |v|; the gate is <= 1. So
 *   |tc - cpu| <= max|v| (2D + 2u + CH 2^-22) + 5e-5 (the FP32 kernels' bound, which covers the rest).
 * qscale > 1 gives peaked softmaxes (the regime where the weights' rounding matters). */
static void test_attention_tc(int hd, int H, int Hkv, int T, int pos, float qscale) {
    const int n_ctx = pos + T + 8;
    const size_t kvw = (size_t)Hkv * hd, n = (size_t)n_ctx * kvw, on = (size_t)T * H * hd;
    float *qg = randv((size_t)T * H * 2 * hd, 1.0f), *K = randv(n, 1.0f), *V = randv(n, 1.0f);
    for (int t = 0; t < T; t++) /* scale the queries, not the gates */
        for (int h = 0; h < H; h++)
            for (int d = 0; d < hd; d++) qg[((size_t)t * H + h) * 2 * hd + d] *= qscale;
    uint16_t *hk = kv_host(K, n, true), *hv = kv_host(V, n, true);
    uint16_t *dK = dup_to_dev(hk, 2 * n), *dV = dup_to_dev(hv, 2 * n);
    float *dqg = dup_to_dev(qg, sizeof(float) * T * H * 2 * hd);
    int *dpos = dup_to_dev(&pos, sizeof pos);
    cu_attn_dims a = {.H = H,
                      .Hkv = Hkv,
                      .hd = hd,
                      .n_rot = 0,
                      .n_ctx = n_ctx,
                      .eps = 1e-6f,
                      .scale = 1.0f / sqrtf((float)hd),
                      .inv_freq = NULL,
                      .kv_f16 = true,
                      .tc = true};
    float *g_pf = malloc(sizeof(float) * on), *g = malloc(sizeof(float) * on),
          *g32 = malloc(sizeof(float) * on);
    float *ref = malloc(sizeof(float) * on);
    float *o = dpoison(on), *part = dpoison(cu_attn_part_floats(&a, CU_ATTN_SPLIT_MAX_T));
    CHECK(cu_attention(&a, dqg, dK, dV, dpos, T, false, NULL, o, S0) == 0, "%s", rl_lasterr());
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "tc prefill launch failed");
    to_host(g_pf, o, sizeof(float) * on);
    cudaFree(o);
    int bad = 0;
    for (int db = 0; db < 2; db++) /* the split kernel one slice at a time, then double-buffered */
        for (int nrows = 1; nrows <= CU_ATTN_SPLIT_MAX_T; nrows++) {
            a.split_db = db;
            attn_split_rows(&a, dqg, dK, dV, pos, T, nrows, part, g);
            const int b = count_bad(g, g_pf, on);
            CHECK(b == 0, "tc attention hd %d H %d/%d T %d at %d: split (%d rows%s) != prefill in %d values",
                  hd, H, Hkv, T, pos, nrows, db ? ", double-buffered" : "", b);
            bad += b;
        }
    cu_attn_dims af = a; /* the FP32 kernels on the same cache, for the report */
    af.tc = false;
    af.prefill_tiled = true;
    o = dpoison(on);
    CHECK(cu_attention(&af, dqg, dK, dV, dpos, T, false, NULL, o, S0) == 0, "%s", rl_lasterr());
    to_host(g32, o, sizeof(float) * on);
    cudaFree(o);
    attn_ref(qg, hk, hv, true, T, H, Hkv, hd, pos, ref);
    /* the bound: D over every row and the positions it sees, max |v| over the cache */
    double smax = 0, vmax = 0;
    for (size_t i = 0; i < n; i++) {
        const double v = fabs(rl_fp16_to_fp32(hv[i]));
        vmax = v > vmax ? v : vmax;
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *q = qg + ((size_t)t * H + h) * 2 * hd;
            for (int p = 0; p <= pos + t; p++) {
                const uint16_t *k = hk + (size_t)p * kvw + (size_t)(h / (H / Hkv)) * hd;
                double s = 0;
                for (int d = 0; d < hd; d++) s += fabs(q[d]) * fabs(rl_fp16_to_fp32(k[d]));
                smax = s > smax ? s : smax;
            }
        }
    const double u = ldexp(1.0, -11), acc = ldexp(1.0, -22);
    const double D = a.scale * smax * (u + hd * acc),
                 bound = vmax * (2 * D + 2 * u + CU_ATTN_CHUNK * acc) + 5e-5;
    const double d = max_abs_diff(g_pf, ref, on), d32 = max_abs_diff(g_pf, g32, on),
                 dr32 = max_abs_diff(g32, ref, on);
    CHECK(d <= bound, "tc attention hd %d H %d/%d T %d at %d: max |tc - cpu| %.3g > bound %.3g", hd, H, Hkv,
          T, pos, d, bound);
    printf("  tc attention hd %d H %d/%d, %d rows at %d (q x%.0f): split (1..4 rows, 1 or 2 "
           "slices) %s prefill; |tc - cpu| %.3g "
           "(bound %.3g), |tc - fp32| %.3g, |fp32 - cpu| %.3g\n",
           hd, H, Hkv, T, pos, qscale, bad ? "!=" : "==", d, bound, d32, dr32);
    cudaFree(dK);
    cudaFree(dV);
    cudaFree(dqg);
    cudaFree(dpos);
    cudaFree(part);
    free(qg);
    free(K);
    free(V);
    free(hk);
    free(hv);
    free(g_pf);
    free(g);
    free(g32);
    free(ref);
}
