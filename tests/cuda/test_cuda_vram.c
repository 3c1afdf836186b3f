/* test_cuda_vram.c — the VRAM expert tier (docs/EXPERT_CACHE.md, "VRAM tier") against full
 * residency on the same GPU, on the tiny fixtures with a few slots per layer (RL_VRAM_SLOTS):
 *   - prompt (chunks that need more experts than a layer has slots: batches) + 80 greedy steps:
 *     every logit bit-identical (memcmp) to full residency, same greedy tokens; with and without
 *     pre-gated prefetch; the counters show hits, misses and evictions;
 *   - a multi-row verify on the tier == full residency's single steps, row for row; and verifies
 *     through the decode graph's tables (RL_VRAM_GRAPH_VERIFY=1), also under an emulated link;
 *   - a forced slot-fill failure (RL_VRAM_FAULT=N): the step fails with one clear line, the
 *     retried step and every later one are bit-identical to full residency (nothing corrupted);
 *   - a budget below the dense part is refused in one line;
 *   - --vram-pin auto/on/off (DMA from the page-locked mapping, or the staging ring): bit-identical;
 *   - an emulated slow link (RL_VRAM_LINK_GBS=2, and 0.1 where every copy run is held): bit-identical,
 *     and the host->device rate the tier measured (its stats line) is at most the cap (+10 %), and
 *     at 0.1 GB/s at least half of it (the hold neither missing nor far too long); from the page-locked
 *     mapping the decode steps stay inside the graph, whose reads over the link are held on the device
 *     for at least their bytes at the cap (cu_link_hold's counters, in the stats);
 *   - --vram-miss cpu / auto (CPU-computed experts, the exact hybrid): bit-identical to full
 *     residency on every expert type synth writes (the tiny preset), the CPU computing experts
 *     where their types allow it and none elsewhere (hybrid_vs_full, hybrid_types).
 * Without a GPU: "skipped" and exit 77 (check.h). Never run in CI (no GPU there). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"
#include "base/common.h"
#include "gguf/quant.h"
#include "model/synth.h"
#include "run/engine.h"
#include "text/sampler.h"

#define NP 40 /* prompt tokens: a chunk of 32 (tiles of 8 pairs) and one of 8 (one pair per tile) */
#define NG 80 /* greedy steps */

static const char *g_pin, *g_miss;       /* --vram-pin / --vram-miss of the next run (NULL: defaults) */
static double g_cpu_per_token;           /* CPU-computed experts per token of the last run (its stats) */
static double g_link_gbs;                /* host->device GB/s the tier measured in the last run (its stats) */
static bool g_link_capped;               /* ... and its stats named the emulated link (RL_VRAM_LINK_GBS) */
static unsigned long long g_graph_steps; /* decode steps of the last run inside the graph (its stats) */
static double g_held_ms, g_target_ms;    /* emulated link in the graph: ms/step held, and due at the cap */

/* Prompt then NG steps; logits: (NG + 1) x V (the prompt's last row, then each step's). The
 * steps feed forced[i] when given (teacher forcing: the same positions and tokens as a
 * reference run), else each step's greedy token; toks: the tokens fed. */
static int run_forced(engine *e, const char *vram, float *logits, int32_t *toks, const int32_t *forced) {
    const int V = engine_hparams(e)->n_vocab;
    engine_ctx *c = engine_ctx_new(
        e, &(engine_ctx_params){
               .n_ctx = 128, .n_batch = 32, .vram_spec = vram, .vram_pin = g_pin, .vram_miss = g_miss});
    if (!c) return -1;
    int32_t p[NP];
    for (int i = 0; i < NP; i++) p[i] = (int32_t)((i * 7919 + 13) % V);
    check_poison(logits, (size_t)(NG + 1) * V);
    int rc = engine_prefill(c, p, NP, logits);
    for (int i = 0; rc == 0 && i < NG; i++) {
        toks[i] = forced ? forced[i] : sampler_argmax(logits + (size_t)i * V, V);
        rc = engine_step(c, toks[i], logits + (size_t)(i + 1) * V);
    }
    g_cpu_per_token = 0;
    if (vram) {
        char *buf = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&buf, &n);
        engine_print_backend_stats(c, f);
        fclose(f);
        printf("  %s", buf ? buf : "(no stats)\n");
        CHECK(buf && strstr(buf, "vram tier:") && strstr(buf, "evictions") && strstr(buf, "--vram-pin"),
              "stats printed: %s", buf ? buf : "");
        const char *q = buf ? strstr(buf, "CPU-computed experts ") : NULL;
        if (q) sscanf(q, "CPU-computed experts %lf", &g_cpu_per_token);
        g_link_gbs = -1;
        q = buf ? strstr(buf, "host->device copies ") : NULL;
        CHECK(q && sscanf(q, "host->device copies %lf GB/s", &g_link_gbs) == 1, "link rate in the stats");
        g_link_capped = buf && strstr(buf, "emulated link RL_VRAM_LINK_GBS=");
        g_graph_steps = 0;
        q = buf ? strstr(buf, "in the decode graph: ") : NULL;
        if (q) sscanf(q, "in the decode graph: %llu steps", &g_graph_steps);
        g_held_ms = g_target_ms = -1;
        q = buf ? strstr(buf, "reads over the link held ") : NULL;
        if (q) sscanf(q, "reads over the link held %lf ms/step for %lf", &g_held_ms, &g_target_ms);
        free(buf);
    }
    engine_ctx_free(c);
    return rc;
}

static int run(engine *e, const char *vram, float *logits, int32_t *toks) {
    return run_forced(e, vram, logits, toks, NULL);
}

/* --vram-miss cpu / auto against full residency on the GPU: every logit bit-identical, the same
 * greedy tokens (the exact hybrid). The CPU computes a layer's missed experts only where it gives the
 * GPU's bits (K and IQ expert types on CUDA's integer path, backend_cuda.c experts_exact); exact:
 * whether the model's experts are such types, so `cpu` must have computed experts on the CPU (else
 * the test would not test the CPU path), while a model of other types must have computed none
 * (every miss copied). `auto` may pick copies only (a fast link makes them cheaper): its count is
 * printed, not checked. The 40-token prompt's last chunk (8 rows) runs the multi-row CPU path. */
static void hybrid_vs_full(const char *model, const char *slots, const char *miss, bool exact) {
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .backend = "cuda"});
    CHECK(e != NULL, "open %s: %s", model, rl_lasterr());
    if (!e) return;
    const int V = engine_hparams(e)->n_vocab;
    const size_t n = (size_t)(NG + 1) * V;
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    int32_t tr[NG], tg[NG];
    CHECK(run(e, NULL, ref, tr) == 0, "%s full residency: %s", model, rl_lasterr());
    setenv("RL_VRAM_SLOTS", slots, 1);
    g_miss = miss;
    CHECK(run(e, "auto", got, tg) == 0, "%s vram %s slots, --vram-miss %s: %s", model, slots, miss,
          rl_lasterr());
    const double cpt = g_cpu_per_token;
    g_miss = NULL;
    unsetenv("RL_VRAM_SLOTS");
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
        if (memcmp(&ref[i], &got[i], sizeof(float))) first = i;
    CHECK(first == n,
          "%s, %s slots, --vram-miss %s: logits differ first at step %zu, token %zu (%.9g vs %.9g)", model,
          slots, miss, first / V, first % V, first < n ? ref[first] : 0, first < n ? got[first] : 0);
    CHECK(!memcmp(tr, tg, sizeof tr), "%s --vram-miss %s: greedy tokens differ", model, miss);
    if (!strcmp(miss, "cpu") && exact)
        CHECK(cpt > 0, "%s --vram-miss cpu computed no expert on the CPU", model);
    if (!exact)
        CHECK(cpt == 0, "%s --vram-miss %s: %.2f CPU experts/token on inexact types", model, miss, cpt);
    printf("  %s, %s slots/layer, --vram-miss %s: %.2f CPU-computed experts/token; prompt + %d steps %s\n",
           model, slots, miss, cpt, NG, first == n ? "bit-identical to full residency" : "DIFFER");
    free(ref);
    free(got);
    engine_close(e);
}

/* The tiny synthetic preset (hidden 256, 4 layers, 16 experts top-4: CF2's types, IQ1_M / IQ2_XS
 * experts) with the routed experts of type `type` (0: the preset's), written to path. */
static int synth_tiny(const char *path, uint32_t type) {
    synth_params p = {.preset = SYNTH_TINY, .seed = 7, .n_threads = 2, .expert_type = type};
    synth_geom_default(p.preset, &p.g);
    return synth_geom_check(&p) || synth_write(&p, path, NULL);
}

/* The exact hybrid on every expert type synth writes: the K and IQ types the CPU computes (cpu and
 * auto, 4 of 16 slots), and the others (the 32-value Q8_0, MXFP4, which the CPU sums in float lanes),
 * which must be copied. */
static void hybrid_types(void) {
    static const struct {
        uint32_t type;
        bool exact;
    } T[] = {{0, true},         {QT_Q4_K, true},  {QT_Q5_K, true},    {QT_Q6_K, true},  {QT_IQ2_XXS, true},
             {QT_IQ2_XS, true}, {QT_IQ2_S, true}, {QT_IQ3_XXS, true}, {QT_IQ3_S, true}, {QT_IQ4_XS, true},
             {QT_IQ1_S, true},  {QT_Q2_K, true},  {QT_Q3_K, true},    {QT_Q8_0, false}, {QT_MXFP4, false}};
    char path[64];
    snprintf(path, sizeof path, "/tmp/rl_vram_hybrid_%d.gguf", (int)getpid());
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        const int rc = synth_tiny(path, T[i].type);
        CHECK(rc == 0, "synth tiny, experts %s: %s", T[i].type ? quant_name(T[i].type) : "IQ1_M/IQ2_XS",
              rl_lasterr());
        if (rc) continue;
        printf("  experts %s:\n", T[i].type ? quant_name(T[i].type) : "of the preset (IQ1_M, IQ2_XS)");
        hybrid_vs_full(path, "4", "cpu", T[i].exact);
        hybrid_vs_full(path, "4", "auto", T[i].exact);
        unlink(path);
    }
}

static void vram_vs_full(const char *model, const char *slots, bool prefetch, bool overlap, const char *pin) {
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
    g_pin = pin;
    g_miss = "copy";
    CHECK(run(e, "auto", got, tg) == 0, "%s vram %s slots: %s", model, slots, rl_lasterr());
    g_pin = g_miss = NULL;
    unsetenv("RL_VRAM_SLOTS");
    unsetenv("RL_VRAM_PREFETCH");
    unsetenv("RL_VRAM_OVERLAP");
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
        if (memcmp(&ref[i], &got[i], sizeof(float))) first = i;
    CHECK(first == n,
          "%s, %s slots, prefetch %d, overlap %d: logits differ first at step %zu, token %zu (%g vs %g)",
          model, slots, prefetch, overlap, first / V, first % V, first < n ? ref[first] : 0,
          first < n ? got[first] : 0);
    CHECK(!memcmp(tr, tg, sizeof tr), "%s: greedy tokens differ", model);
    /* the page-locked mapping (pin auto / on), RL_VRAM_GRAPH unset: every decode step inside the
     * graph (vram_gtab.h), through per-expert tables (an emulated link too); else the tier's own path */
    const bool graph = (!pin || !strcmp(pin, "on")) && !getenv("RL_VRAM_GRAPH");
    if (graph) CHECK(g_graph_steps >= NG, "%s: %llu of %d steps inside the graph", model, g_graph_steps, NG);
    else CHECK(g_graph_steps == 0, "%s: %llu steps inside the graph where it is off", model, g_graph_steps);
    printf(
        "  %s, %s slots/layer, prefetch %s, overlap %s, --vram-pin %s, --vram-miss copy: prompt + %d steps "
        "bit-identical to full residency (host->device %.3f GB/s; %llu steps inside the graph)\n",
        model, slots, prefetch ? "on" : "off", overlap ? "on" : "off", pin ? pin : "auto", NG, g_link_gbs,
        g_graph_steps);
    free(ref);
    free(got);
    engine_close(e);
}

/* The same run under an emulated link of `cap` GB/s (RL_VRAM_LINK_GBS): the same bits, and the
 * rate the tier measured at most the cap. The fixtures' experts are 6.5 / 9.8 KB, so at 2 GB/s a
 * run of copies costs about what the cap allows (few holds); at 0.1 GB/s every run is held, and the
 * measured rate must also reach half the cap (a hold far too long, e.g. a unit slip, fails). */
static void link_vs_full(const char *model, const char *slots, const char *pin, const char *cap) {
    setenv("RL_VRAM_LINK_GBS", cap, 1);
    vram_vs_full(model, slots, true, true, pin);
    unsetenv("RL_VRAM_LINK_GBS");
    const double c = atof(cap), got = g_link_gbs;
    printf("  %s, emulated link RL_VRAM_LINK_GBS=%s: measured %.3f GB/s", model, cap, got);
    if (g_graph_steps) { /* the graph's reads over the link: held on the device, at least their due */
        printf("; in the graph, reads held %.4f ms/step for %.4f due", g_held_ms, g_target_ms);
        CHECK(g_target_ms > 0, "%s: no read over the link held in the graph (%g ms/step)", model,
              g_target_ms);
        CHECK(g_held_ms >= g_target_ms,
              "%s: reads held %.4f ms/step, under the %.4f their bytes take at %s GB/s", model, g_held_ms,
              g_target_ms, cap);
    }
    printf("\n");
    CHECK(g_link_capped, "%s: the stats do not name the emulated link", model);
    CHECK(got > 0 && got <= 1.10 * c, "%s: measured %.3f GB/s under a cap of %s GB/s", model, got, cap);
    if (c <= 0.2) CHECK(got >= 0.5 * c, "%s: measured %.3f GB/s, under half the cap of %s", model, got, cap);
}

/* The reference: tokens t[0..M) as single decode steps at full residency, each step's logits a row of
 * ref (M x n_vocab). */
static void ref_steps(engine *e, const int32_t *t, int M, float *ref) {
    const int V = engine_hparams(e)->n_vocab;
    engine_ctx *cr = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
    CHECK(cr != NULL, "ref ctx: %s", rl_lasterr());
    for (int i = 0; cr && i < M; i++)
        CHECK(engine_step(cr, t[i], ref + (size_t)i * V) == 0, "ref step %d", i);
    engine_ctx_free(cr);
}

/* Verifies through the decode graph's tables (RL_VRAM_GRAPH_VERIFY=1, vram_gtab.h): steps, then
 * verifies of 8 and 16 rows (whose experts outnumber a layer's 4 slots: the policy takes them in
 * batches), then steps again, every row's logits == full residency's single steps bit for bit, and
 * the stats count the verifies inside the graph (the test fails if they took the own path). cap: an
 * emulated link (RL_VRAM_LINK_GBS) or NULL. */
static void verify_in_graph(const char *model, const char *cap) {
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .backend = "cuda"});
    CHECK(e != NULL, "open: %s", rl_lasterr());
    if (!e) return;
    const int V = engine_hparams(e)->n_vocab, M = 30;
    float *ref = malloc(sizeof(float) * V * M), *got = malloc(sizeof(float) * V * M);
    int32_t t[30];
    for (int i = 0; i < M; i++) t[i] = (int32_t)((i * 7877 + 3) % V);
    ref_steps(e, t, M, ref);
    setenv("RL_VRAM_SLOTS", "4", 1);
    setenv("RL_VRAM_GRAPH_VERIFY", "1", 1);
    if (cap) setenv("RL_VRAM_LINK_GBS", cap, 1);
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16, .vram_spec = "auto"});
    unsetenv("RL_VRAM_SLOTS");
    unsetenv("RL_VRAM_GRAPH_VERIFY");
    unsetenv("RL_VRAM_LINK_GBS");
    CHECK(c != NULL, "vram ctx: %s", rl_lasterr());
    check_poison(got, (size_t)V * M);
    int i = 0;
    for (; c && i < 3; i++)
        CHECK(engine_step(c, t[i], got + (size_t)i * V) == 0, "step %d: %s", i, rl_lasterr());
    CHECK(c && engine_verify(c, t + i, 8, got + (size_t)i * V, NULL) == 0, "verify 8: %s", rl_lasterr());
    i += 8;
    CHECK(c && engine_verify(c, t + i, 16, got + (size_t)i * V, NULL) == 0, "verify 16: %s", rl_lasterr());
    i += 16;
    for (; c && i < M; i++)
        CHECK(engine_step(c, t[i], got + (size_t)i * V) == 0, "step %d: %s", i, rl_lasterr());
    size_t first = (size_t)V * M;
    for (size_t k = 0; k < (size_t)V * M && first == (size_t)V * M; k++)
        if (memcmp(&ref[k], &got[k], sizeof(float))) first = k;
    CHECK(first == (size_t)V * M, "%s: verifies in the graph differ from full residency first at row %zu",
          model, first / V);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (c) engine_print_backend_stats(c, f);
    fclose(f);
    unsigned long long steps = 0, verifies = 0;
    const char *q = buf ? strstr(buf, "in the decode graph: ") : NULL;
    if (q) sscanf(q, "in the decode graph: %llu steps (%llu verifies", &steps, &verifies);
    CHECK(verifies == 2, "%s: %llu of 2 verifies inside the graph (%llu forwards there)", model, verifies,
          steps);
    if (cap) {
        double held = -1, due = -1;
        q = buf ? strstr(buf, "reads over the link held ") : NULL;
        if (q) sscanf(q, "reads over the link held %lf ms/step for %lf", &held, &due);
        CHECK(due > 0 && held >= due, "%s: verifies' reads over the link held %g ms/step for %g due", model,
              held, due);
    }
    printf("  %s, 4 slots/layer%s%s: 3 steps, verifies of 8 and 16 rows, 3 steps through the graph's tables "
           "(%llu forwards, %llu verifies there): %s\n",
           model, cap ? ", emulated link " : "", cap ? cap : "", steps, verifies,
           first == (size_t)V * M ? "bit-identical to full residency" : "DIFFER");
    free(buf);
    engine_ctx_free(c);
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
    ref_steps(e, t, M, ref);

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
    CHECK(!memcmp(ref, got, sizeof(float) * V * M),
          "after the failure the outputs differ from full residency");
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
    vram_vs_full(a, "4", true, true, NULL);  /* top_k slots: every token evicts (pin auto: DMA) */
    vram_vs_full(a, "4", true, true, "off"); /* the staging ring */
    vram_vs_full(a, "4", true, false, NULL); /* batches of every slot, each fill waits for the last batch */
    vram_vs_full(a, "6", false, true, NULL);
    vram_vs_full(b, "10", true, true, "off");
    vram_vs_full(b, "10", true, true, "on");
    vram_vs_full(b, "31", true, true, NULL); /* all but one */
    setenv("RL_VRAM_GRAPH", "0", 1);         /* decode steps on the tier's own path (per-layer sync) */
    vram_vs_full(a, "4", true, true, NULL);
    vram_vs_full(b, "10", true, true, "on");
    unsetenv("RL_VRAM_GRAPH");
    link_vs_full(a, "4", NULL, "2");    /* DMA from the mapping, held to 2 GB/s; decode in the graph */
    link_vs_full(b, "10", "off", "2");  /* the staging ring, held */
    link_vs_full(b, "10", NULL, "0.1"); /* every run of copies held; decode in the graph */
    setenv("RL_VRAM_GRAPH", "0", 1);    /* the own path under the cap */
    link_vs_full(a, "4", NULL, "2");
    unsetenv("RL_VRAM_GRAPH");
    hybrid_vs_full(a, "4", "cpu", false); /* Q8_0 experts: every miss copied */
    hybrid_vs_full(b, "10", "auto", false);
    hybrid_types();
    verify_and_fault(a);
    verify_and_fault(b);
    verify_in_graph(a, NULL);
    verify_in_graph(b, NULL);
    verify_in_graph(b, "0.5");
    return check_done("test_cuda_vram");
}
