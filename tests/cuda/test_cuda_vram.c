/* test_cuda_vram.c — the VRAM expert tier (docs/EXPERT_CACHE.md, "VRAM tier") against full
 * residency on the same GPU, on the tiny fixtures with a few slots per layer (RL_VRAM_SLOTS):
 *   - prompt (chunks that need more experts than a layer has slots: batches) + 80 greedy steps:
 *     every logit bit-identical (memcmp) to full residency, same greedy tokens; with and without
 *     pre-gated prefetch; the counters show hits, misses and evictions;
 *   - a multi-row verify on the tier == full residency's single steps, row for row;
 *   - a forced slot-fill failure (RL_VRAM_FAULT=N): the step fails with one clear line, the
 *     retried step and every later one are bit-identical to full residency (nothing corrupted);
 *   - a budget below the dense part is refused in one line.
 * Without a GPU: "skipped" and exit 77 (check.h). Never run in CI (no GPU there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "common.h"
#include "engine.h"
#include "sampler.h"

#define NP 40  /* prompt tokens: a chunk of 32 (tiles of 8 pairs) and one of 8 (one pair per tile) */
#define NG 80  /* greedy steps */

/* Prompt then NG greedy steps; logits: (NG + 1) x V (the prompt's last row, then each step's). */
static int run(engine *e, const char *vram, float *logits, int32_t *toks) {
    const int V = engine_hparams(e)->n_vocab;
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 128, .n_batch = 32, .vram_spec = vram});
    if (!c) return -1;
    int32_t p[NP];
    for (int i = 0; i < NP; i++) p[i] = (int32_t)((i * 7919 + 13) % V);
    check_poison(logits, (size_t)(NG + 1) * V);
    int rc = engine_prefill(c, p, NP, logits);
    for (int i = 0; rc == 0 && i < NG; i++) {
        toks[i] = sampler_argmax(logits + (size_t)i * V, V);
        rc = engine_step(c, toks[i], logits + (size_t)(i + 1) * V);
    }
    if (vram) {
        char *buf = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&buf, &n);
        engine_print_backend_stats(c, f);
        fclose(f);
        printf("  %s", buf ? buf : "(no stats)\n");
        CHECK(buf && strstr(buf, "vram tier:") && strstr(buf, "evictions"), "stats printed: %s", buf ? buf : "");
        free(buf);
    }
    engine_ctx_free(c);
    return rc;
}

static void vram_vs_full(const char *model, const char *slots, bool prefetch, bool overlap) {
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .backend = "cuda"});
    CHECK(e != NULL, "open %s: %s", model, rl_lasterr());
    if (!e) return;
    const int V = engine_hparams(e)->n_vocab;
    const size_t n = (size_t)(NG + 1) * V;
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    int32_t tr[NG], tg[NG];
    CHECK(run(e, NULL, ref, tr) == 0, "%s full residency: %s", model, rl_lasterr());
    setenv("RL_VRAM_SLOTS", slots, 1);
    setenv("RL_VRAM_PREFETCH", prefetch ? "1" : "0", 1);
    setenv("RL_VRAM_OVERLAP", overlap ? "1" : "0", 1);
    CHECK(run(e, "auto", got, tg) == 0, "%s vram %s slots: %s", model, slots, rl_lasterr());
    unsetenv("RL_VRAM_SLOTS");
    unsetenv("RL_VRAM_PREFETCH");
    unsetenv("RL_VRAM_OVERLAP");
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
        if (memcmp(&ref[i], &got[i], sizeof(float))) first = i;
    CHECK(first == n, "%s, %s slots, prefetch %d, overlap %d: logits differ first at step %zu, token %zu (%g vs %g)", model, slots,
          prefetch, overlap, first / V, first % V, first < n ? ref[first] : 0, first < n ? got[first] : 0);
    CHECK(!memcmp(tr, tg, sizeof tr), "%s: greedy tokens differ", model);
    printf("  %s, %s slots/layer, prefetch %s, overlap %s: prompt + %d steps bit-identical to full residency\n",
           model, slots, prefetch ? "on" : "off", overlap ? "on" : "off", NG);
    free(ref);
    free(got);
    engine_close(e);
}

/* Verify rows on the tier == single steps at full residency; then a forced fill failure. */
static void verify_and_fault(const char *model) {
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .backend = "cuda"});
    CHECK(e != NULL, "open: %s", rl_lasterr());
    if (!e) return;
    const int V = engine_hparams(e)->n_vocab, M = 24;
    float *ref = malloc(sizeof(float) * V * M), *got = malloc(sizeof(float) * V * M);
    int32_t t[24];
    for (int i = 0; i < M; i++) t[i] = (int32_t)((i * 104729 + 5) % V);
    engine_ctx *cr = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
    for (int i = 0; cr && i < M; i++) CHECK(engine_step(cr, t[i], ref + (size_t)i * V) == 0, "ref step %d", i);
    engine_ctx_free(cr);

    setenv("RL_VRAM_SLOTS", "1", 1); /* clamped to top_k: the smallest tier */
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16, .vram_spec = "auto"});
    CHECK(c != NULL, "vram ctx: %s", rl_lasterr());
    check_poison(got, (size_t)V * M);
    CHECK(c && engine_verify(c, t, 16, got, NULL) == 0, "verify: %s", rl_lasterr());
    for (int i = 16; c && i < M; i++) CHECK(engine_step(c, t[i], got + (size_t)i * V) == 0, "step %d", i);
    CHECK(!memcmp(ref, got, sizeof(float) * V * M), "verify rows on the tier != full-residency steps");
    engine_ctx_free(c);

    setenv("RL_VRAM_FAULT", "7", 1); /* the 7th demand fill fails once */
    c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16, .vram_spec = "auto"});
    unsetenv("RL_VRAM_FAULT");
    CHECK(c != NULL, "fault ctx: %s", rl_lasterr());
    int fails = 0;
    check_poison(got, (size_t)V * M);
    for (int i = 0; c && i < M; i++) {
        int rc = engine_step(c, t[i], got + (size_t)i * V);
        if (rc) {
            fails++;
            CHECK(strstr(rl_lasterr(), "RL_VRAM_FAULT") != NULL, "fault message: %s", rl_lasterr());
            CHECK(engine_pos(c) == i, "failed step moved the position to %d", engine_pos(c));
            printf("  step %d failed as injected: %s\n", i, rl_lasterr());
            rc = engine_step(c, t[i], got + (size_t)i * V); /* the retry */
        }
        CHECK(rc == 0, "step %d (retry): %s", i, rl_lasterr());
    }
    CHECK(fails == 1, "expected exactly one injected failure, got %d", fails);
    CHECK(!memcmp(ref, got, sizeof(float) * V * M), "after the failure the outputs differ from full residency");
    engine_ctx_free(c);
    unsetenv("RL_VRAM_SLOTS");

    c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16, .vram_spec = "1"});
    CHECK(!c && strstr(rl_lasterr(), "do not fit"), "1 MiB refused: %s", c ? "accepted" : rl_lasterr());
    engine_ctx_free(c);
    free(ref);
    free(got);
    engine_close(e);
}

int main(void) {
    const char *why = NULL;
    if (!backend_cuda.available(&why)) return check_skip("test_cuda_vram", why ? why : "no CUDA device");
    const char *a = "tests/fixtures/tiny-a.gguf", *b = "tests/fixtures/tiny-b.gguf";
    if (access(a, R_OK) || access(b, R_OK)) {
        CHECK(0, "fixtures missing");
        return check_done("test_cuda_vram");
    }
    vram_vs_full(a, "4", true, true);   /* top_k slots: every token evicts */
    vram_vs_full(a, "4", true, false);  /* batches of every slot, each fill waits for the last batch */
    vram_vs_full(a, "6", false, true);
    vram_vs_full(b, "10", true, true);
    vram_vs_full(b, "31", true, true);  /* all but one */
    verify_and_fault(a);
    verify_and_fault(b);
    return check_done("test_cuda_vram");
}
