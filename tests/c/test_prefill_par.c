/* test_prefill_par.c — the prefill's threaded row loops (qwen3next_forward.c: norms and residuals, the
 * DeltaNet conv by channel ranges, q/k norms + RoPE, MoE routing, gathers, SwiGLU and the expert
 * sum, each split over the pool by ops_parallel_for) keep the exactness contract.
 *
 * The tiny fixtures are too small for those loops to leave the calling thread (ops_parallel_for
 * runs inline below ~64K operations), so this writes a synthetic model (the tiny preset at hidden
 * 256 with 64 experts top-8, 4 layers: 3 DeltaNet + 1 attention) and prefills 128 random tokens
 * in one chunk with 3 threads, where every one of those loops is split. Its last logits must
 * equal, bit for bit and NaN-poisoned beforehand:
 *   - 128 engine_steps with 3 threads (one row: every loop inline);
 *   - the same prefill with 1 thread (every loop inline, the batched kernels too);
 *   - the prefill in chunks of 40 rows (other splits of the rows).
 * Both the fast path and the double-precision reference are checked. Then deep rows (600 positions:
 * three attention chunks of vec.h) on the fast path: decode and verify rows split into chunk items
 * over threads must equal whole rows, one thread and a prefill's row tiles, f32 and f16 KV. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "run/engine.h"
#include "model/synth.h"

#define T 128

static int32_t toks[T];

/* last logits of T tokens: prefill in chunks of `batch` (batch 0: one step per token) */
static int run(const char *path, bool reference, int threads, int batch, float *out, int n_vocab) {
    engine *e = engine_open(path, &(engine_params){.n_threads = threads, .reference = reference});
    if (!e) return fprintf(stderr, "open: %s\n", rl_lasterr()), -1;
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = T + 8, .n_batch = batch ? batch : 1});
    int rc = -1;
    if (!c) {
        fprintf(stderr, "ctx: %s\n", rl_lasterr());
        goto done;
    }
    check_poison(out, (size_t)n_vocab);
    if (batch) {
        rc = engine_prefill(c, toks, T, out);
    } else {
        rc = 0;
        for (int t = 0; t < T && !rc; t++) rc = engine_step(c, toks[t], t == T - 1 ? out : NULL);
    }
    if (rc) fprintf(stderr, "run: %s\n", rl_lasterr());
done:
    engine_ctx_free(c);
    engine_close(e);
    return rc;
}

/* Deep rows: TD tokens, past two attention chunks (VEC_ATTN_CHUNK 256). The logits of the last ND
 * rows into out (ND x n_vocab): mode 0 steps (n_batch nb: 1 leaves no spare scratch, so decode takes
 * whole rows; 16 lets 3 threads take chunk items), mode 1 a prefill of TD - ND in chunks of nb then
 * one verify of ND rows (chunk items), mode 2 one prefill of TD rows (only the last row: row tiles
 * folding chunks in vec_attn_rows_kv). */
#define TD 600
#define ND 8
static int32_t dtoks[TD];

static int run_deep(const char *path, int threads, int mode, int nb, const char *kv, float *out, int V) {
    engine *e = engine_open(path, &(engine_params){.n_threads = threads});
    if (!e) return fprintf(stderr, "open: %s\n", rl_lasterr()), -1;
    engine_ctx *c =
        engine_ctx_new(e, &(engine_ctx_params){.n_ctx = TD + 8, .n_batch = mode == 2 ? TD : nb, .kv = kv});
    int rc = -1;
    if (!c) {
        fprintf(stderr, "ctx: %s\n", rl_lasterr());
        goto done;
    }
    check_poison(out, (size_t)ND * V);
    if (mode == 0) {
        rc = 0;
        for (int t = 0; t < TD && !rc; t++)
            rc = engine_step(c, dtoks[t], t >= TD - ND ? out + (size_t)(t - TD + ND) * V : NULL);
    } else if (mode == 1) {
        rc = engine_prefill(c, dtoks, TD - ND, NULL);
        if (!rc) rc = engine_verify(c, dtoks + TD - ND, ND, out, NULL);
    } else {
        rc = engine_prefill(c, dtoks, TD, out + (size_t)(ND - 1) * V);
    }
    if (rc) fprintf(stderr, "run: %s\n", rl_lasterr());
done:
    engine_ctx_free(c);
    engine_close(e);
    return rc;
}

static int n_same(const float *a, const float *b, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) == 0 && !isnan(a[i]);
    return k;
}

int main(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/rl_prefill_par_%d.gguf", (int)getpid());
    synth_params p = {0};
    CHECK(synth_preset_find("tiny", &p.preset) == 0, "preset");
    synth_geom_default(p.preset, &p.g);
    CHECK(synth_geom_parse(&p.g, "experts=64,top_k=8") == 0, "geometry: %s", rl_lasterr());
    p.seed = 7;
    p.n_threads = 2;
    if (synth_write(&p, path, NULL)) {
        CHECK(0, "synth: %s", rl_lasterr());
        return check_done("test_prefill_par");
    }
    engine *e = engine_open(path, &(engine_params){.n_threads = 1});
    CHECK(e != NULL, "open: %s", rl_lasterr());
    if (!e) {
        unlink(path);
        return check_done("test_prefill_par");
    }
    const int V = engine_hparams(e)->n_vocab;
    engine_close(e);
    rl_rng r;
    rl_rng_seed(&r, 99);
    for (int t = 0; t < T; t++) toks[t] = (int32_t)(rl_rng_u64(&r) % (uint64_t)V);
    float *pre = malloc(sizeof(float) * V), *other = malloc(sizeof(float) * V);
    for (int ref = 0; ref < 2; ref++) {
        const char *path_name = ref ? "reference" : "fast";
        const int fail0 = check_fail;
        CHECK(run(path, ref, 3, T, pre, V) == 0, "%s: prefill, 3 threads", path_name);
        CHECK(run(path, ref, 3, 0, other, V) == 0, "%s: steps", path_name);
        int k = n_same(pre, other, V);
        CHECK(k == V, "%s: prefill (3 threads) vs steps: %d of %d logits bit-identical", path_name, k, V);
        CHECK(run(path, ref, 1, T, other, V) == 0, "%s: prefill, 1 thread", path_name);
        k = n_same(pre, other, V);
        CHECK(k == V, "%s: prefill 3 threads vs 1 thread: %d of %d logits bit-identical", path_name, k, V);
        CHECK(run(path, ref, 3, 40, other, V) == 0, "%s: prefill in chunks of 40", path_name);
        k = n_same(pre, other, V);
        CHECK(k == V, "%s: prefill in one chunk vs chunks of 40: %d of %d logits bit-identical", path_name, k,
              V);
        if (check_fail == fail0)
            printf("  %s: prefill of %d rows == steps == 1 thread == chunks of 40 (%d logits)\n", path_name,
                   T, V);
    }
    /* deep rows (fast path): chunk items of decode and verify == whole rows == prefill row tiles */
    for (int i = 0; i < TD; i++) dtoks[i] = (int32_t)(rl_rng_u64(&r) % (uint64_t)V);
    float *d0 = malloc(sizeof(float) * ND * V), *d1 = malloc(sizeof(float) * ND * V);
    static const char *kvs[] = {"f32", "f16"};
    for (int ik = 0; ik < 2; ik++) {
        const int fail0 = check_fail;
        CHECK(run_deep(path, 3, 0, 16, kvs[ik], d0, V) == 0, "deep %s: steps, 3 threads", kvs[ik]);
        static const struct {
            int threads, mode, nb;
            const char *what;
        } runs[] = {
            {1, 0, 16, "steps, 1 thread"},
            {3, 0, 1, "steps, no spare scratch"},
            {3, 1, 64, "prefill in chunks of 64 + verify"},
            {2, 1, 512, "prefill + verify, 2 threads"},
        };
        for (int k = 0; k < 4; k++) {
            CHECK(run_deep(path, runs[k].threads, runs[k].mode, runs[k].nb, kvs[ik], d1, V) == 0,
                  "deep %s: %s", kvs[ik], runs[k].what);
            const int same = n_same(d0, d1, ND * V);
            CHECK(same == ND * V, "deep %s: %s vs steps with chunk items: %d of %d logits bit-identical",
                  kvs[ik], runs[k].what, same, ND * V);
        }
        CHECK(run_deep(path, 3, 2, 0, kvs[ik], d1, V) == 0, "deep %s: one prefill", kvs[ik]);
        const int same = n_same(d0 + (size_t)(ND - 1) * V, d1 + (size_t)(ND - 1) * V, V);
        CHECK(same == V, "deep %s: one prefill of %d rows vs steps: %d of %d last logits bit-identical",
              kvs[ik], TD, same, V);
        if (check_fail == fail0)
            printf("  deep rows, KV %s: %d positions (3 chunks): steps with chunk items == 1 thread == whole "
                   "rows == "
                   "verify == prefill\n",
                   kvs[ik], TD);
    }
    free(d0);
    free(d1);
    free(pre);
    free(other);
    unlink(path);
    return check_done("test_prefill_par");
}
