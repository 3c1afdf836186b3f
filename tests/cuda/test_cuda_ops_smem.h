/* test_cuda_ops_smem.h — part of test_cuda_ops.c: the launch shapes of GPUs with less shared memory
 * per block (sm_86 / sm_89 / sm_120: 99 KiB opt-in; sm_80: 163 KiB) give the bits of the shapes this
 * GPU picks. A second device struct of the same GPU believes it has 99 KiB (cu_tuning.smem_limit, as
 * RL_CUDA_SMEM_LIMIT=99K): every launch that needs more takes its portable shape — the tensor-core
 * prefill with 16 rows per block instead of 64, the split decode single-buffered, the FP32 prefill
 * staged instead of register-tiled, k_mmq_mma with one token tile per warp, the decode GEMV's weights
 * staged once instead of streamed — and each output must equal the first device's bit for bit. Where this
 * GPU has 99 KiB or less itself, both structs pick the same shapes (the comparison still runs). */

/* cu_attention on both devices (prefill rows, then decode rows split over chunks), outputs compared. */
static void smem_attention(cu_stream big, cu_stream small, int hd, bool f16, bool tc, int T, int pos) {
    const int H = 16, Hkv = 2, n_ctx = pos + T + 8;
    const size_t kvw = (size_t)Hkv * hd, n = (size_t)n_ctx * kvw, el = f16 ? 2 : 4, on = (size_t)T * H * hd;
    float *qg = randv((size_t)T * H * 2 * hd, 1.0f), *K = randv(n, 1.0f), *V = randv(n, 1.0f);
    void *hk = kv_host(K, n, f16), *hv = kv_host(V, n, f16);
    void *dK = dup_to_dev(hk, el * n), *dV = dup_to_dev(hv, el * n);
    float *dqg = dup_to_dev(qg, sizeof(float) * T * H * 2 * hd);
    int *dpos = dup_to_dev(&pos, sizeof pos);
    cu_attn_dims a = {.H = H,
                      .Hkv = Hkv,
                      .hd = hd,
                      .n_ctx = n_ctx,
                      .eps = 1e-6f,
                      .scale = 1.0f / sqrtf((float)hd),
                      .kv_f16 = f16,
                      .prefill_staged = true,
                      .prefill_tiled = true,
                      .tc = tc,
                      .split_db = true};
    float *h1 = malloc(sizeof(float) * on), *h2 = malloc(sizeof(float) * on);
    int bad = 0;
    for (int split = 0; split < 2; split++) {
        const int rows = split ? (T < CU_ATTN_SPLIT_MAX_T ? T : CU_ATTN_SPLIT_MAX_T) : T;
        for (int side = 0; side < 2; side++) {
            float *o = dpoison(on), *part = split ? dpoison(cu_attn_part_floats(&a, rows)) : NULL;
            CHECK(cu_attention(&a, dqg, dK, dV, dpos, rows, split, part, o, side ? small : big) == 0, "%s",
                  rl_lasterr());
            to_host(side ? h2 : h1, o, sizeof(float) * rows * H * hd);
            cudaFree(o);
            cudaFree(part);
        }
        bad += count_bad(h1, h2, (size_t)rows * H * hd);
    }
    CHECK(bad == 0, "attention hd %d %s%s: %d outputs of the 99 KiB shapes differ", hd, f16 ? "f16" : "f32",
          tc ? " tensor cores" : "", bad);
    free(qg), free(K), free(V), free(hk), free(hv), free(h1), free(h2);
    cudaFree(dK), cudaFree(dV), cudaFree(dqg), cudaFree(dpos);
}

/* cu_matmul of T rows (and of one row) on both devices, outputs compared. */
static void smem_matmul(cu_stream big, cu_stream small, uint32_t type, int n_in, int T) {
    const quant_traits *qt = quant_get(type);
    const int n_out = 300;
    const size_t rb = quant_row_size(type, n_in);
    uint8_t *w = malloc(rb * n_out);
    fill_random_blocks(type, w, (int64_t)n_out * n_in / qt->blck, &R);
    float *x = randv((size_t)T * n_in, 1.0f);
    uint8_t *dw = dup_to_dev(w, rb * n_out);
    float *dx = dup_to_dev(x, sizeof(float) * T * n_in);
    float *h1 = malloc(sizeof(float) * T * n_out), *h2 = malloc(sizeof(float) * T * n_out);
    int bad = 0;
    for (int rows = T; rows >= 1; rows = rows > 1 ? 1 : 0) {
        for (int side = 0; side < 2; side++) {
            float *dy = dpoison((size_t)rows * n_out);
            cu_seg s = {.w = dw, .row_bytes = rb, .n_out = n_out, .y = dy, .ldy = n_out};
            CHECK(cu_matmul(type, n_in, &s, 1, dx, n_in, rows, NULL, false, NULL, NULL, side ? small : big) ==
                      0,
                  "%s", rl_lasterr());
            to_host(side ? h2 : h1, dy, sizeof(float) * rows * n_out);
            cudaFree(dy);
        }
        bad += count_bad(h1, h2, (size_t)rows * n_out);
    }
    CHECK(bad == 0, "matmul %s n_in %d: %d outputs of the 99 KiB shapes differ", qt->name, n_in, bad);
    free(w), free(x), free(h1), free(h2);
    cudaFree(dw), cudaFree(dx);
}

static void test_smem_portable(void) {
    static cu_dev small_dev; /* (large: the per-kernel table) */
    cu_tuning t = DEV.tune;
    t.smem_limit = 99 << 10;
    CHECK(cu_dev_init(&small_dev, DEV.ordinal, &t) == 0, "%s", rl_lasterr());
    small_dev.int8 = DEV.int8;
    const cu_stream small = {0, &small_dev};
    const int fails = check_fail;
    smem_attention(S0, small, 256, true, true, 70, 300);   /* tc prefill 165 KB -> 91 KB; split 157 -> 91 */
    smem_attention(S0, small, 128, true, true, 45, 220);   /* tc prefill 117 KB -> 76 KB */
    smem_attention(S0, small, 256, false, false, 40, 300); /* tiled f32 199 KB -> staged */
    smem_attention(S0, small, 256, true, false, 40, 300);  /* tiled f16 134 KB -> staged */
    smem_attention(S0, small, 128, false, false, 40, 300); /* tiled f32 117 KB -> staged */
    const int was = cu_dev_set_int8(&DEV, 2);
    cu_dev_set_int8(&small_dev, 2);
    smem_matmul(S0, small, QT_Q4_K, 8192, 40);           /* k_mmq_mma: 16 tokens (130 KB) -> 8 */
    DEV.tune.mmq_lane = small_dev.tune.mmq_lane = false; /* one token on k_mmq_vec (RL_CUDA_MMQ_LANE=0) */
    smem_matmul(S0, small, QT_Q6_K, 7424, 20); /* 29 super-blocks: streamed slices (103 KB) -> staged once */
    DEV.tune.mmq_lane = t.mmq_lane;
    cu_dev_set_int8(&DEV, was);
    printf("  99 KiB launch shapes (RL_CUDA_SMEM_LIMIT=99K): %s the shapes of this GPU (%zu bytes)\n",
           check_fail == fails ? "bit-identical to" : "DIFFERENT from", DEV.smem_max);
}
