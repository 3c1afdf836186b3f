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
    cu_attn_dims a = {.H = H, .Hkv = Hkv, .hd = hd, .n_rot = 0, .n_ctx = n_ctx, .eps = 1e-6f,
                      .scale = 1.0f / sqrtf((float)hd), .inv_freq = NULL, .kv_f16 = f16};
    float *g[3], *ref = malloc(sizeof(float) * on);
    for (int v = 0; v < 3; v++) { /* k_attn_prefill, its staged form, the tiled kernel */
        cu_attn_dims av = a;
        av.prefill_staged = v == 1;
        av.prefill_tiled = v == 2;
        float *o = dpoison(on);
        g[v] = malloc(sizeof(float) * on);
        CHECK(cu_attention(&av, dqg, dK, dV, dpos, T, false, NULL, o, 0) == 0, "%s", rl_lasterr());
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "attention hd %d: prefill variant %d failed", hd, v);
        to_host(g[v], o, sizeof(float) * on);
        cudaFree(o);
    }
    const int b1 = count_bad(g[1], g[0], on), b2 = count_bad(g[2], g[0], on);
    CHECK(b1 == 0 && b2 == 0, "attention hd %d%s H %d/%d T %d at %d: staged %d, tiled %d values != prefill", hd,
          f16 ? " f16" : "", H, Hkv, T, pos, b1, b2);
    attn_ref(qg, hk, hv, f16, T, H, Hkv, hd, pos, ref);
    const double d = max_abs_diff(g[2], ref, on); /* the bound of test_attention_decode */
    CHECK(d <= 5e-5, "tiled prefill attention hd %d%s T %d: max |diff| vs CPU %.3g", hd, f16 ? " f16" : "", T, d);
    printf("  tiled prefill attention hd %d%s H %d/%d, %d rows at %d: == prefill == staged (%s), |gpu - cpu| %.3g\n", hd,
           f16 ? " (f16 KV)" : "", H, Hkv, T, pos, b1 || b2 ? "DIFFERENT" : "bit-identical", d);
    for (int v = 0; v < 3; v++) free(g[v]);
    cudaFree(dK); cudaFree(dV); cudaFree(dqg); cudaFree(dpos);
    free(qg); free(K); free(V); free(hk); free(hv); free(ref);
}
