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
 * Both the fast path and the double-precision reference are checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common.h"
#include "engine.h"
#include "synth.h"

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
        CHECK(k == V, "%s: prefill in one chunk vs chunks of 40: %d of %d logits bit-identical", path_name, k, V);
        if (check_fail == fail0) printf("  %s: prefill of %d rows == steps == 1 thread == chunks of 40 (%d logits)\n", path_name, T, V);
    }
    free(pre);
    free(other);
    unlink(path);
    return check_done("test_prefill_par");
}
