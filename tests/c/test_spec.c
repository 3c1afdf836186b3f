/* test_spec.c — speculative decoding never changes the answer (src/run/spec.h):
 *   - the lookup index equals a linear-scan reference (latest earlier occurrence of the last 3,
 *     else 2 tokens) on random low-entropy sequences, and stays O(1) per draft at 64K tokens
 *     (hash probes per draft bounded, not growing with the length);
 *   - identity: on the tiny fixtures (tiny-a: no MTP head, tiny-b: with one), for greedy and for
 *     seeded sampling with top-k/top-p/min-p and penalties, every draft mode (lookup, mtp, auto)
 *     gives exactly the tokens of plain decoding, the same end reason, the same context
 *     (position, the logits the run ends with, and the logits of one more step: the recurrent
 *     state and KV rows), and the same sampler state (one more draw), with full residency and a
 *     bounded expert cache at its minimum budget; over random, repetitive and periodic prompts,
 *     with drafts actually accepted (else the test proves nothing);
 *   - stops inside a verify: n_predict, a sink stop, an end-of-generation token, a cancel and the
 *     context end at every token index leave the context exactly as plain decoding does;
 *   - a failed verify (injected read error in the bounded cache) leaves the context as it was:
 *     the failed token is evaluated again by a plain step and matches;
 *   - cost-aware K: the rule (spec_best_k) against brute force on cost curves where drafting
 *     cannot pay (a row costs a step), always pays, and in between; the identity cases run with
 *     --draft-min 1 (every source that has drafts drafts, so every path runs) and once more with
 *     the cost-aware default (0), which must give the same tokens too. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "run/engine.h"
#include "cache/expert_cache.h"
#include "text/sampler.h"
#include "run/spec.h"

/* tests/cuda/test_cuda_spec.c includes this file with TEST_SPEC_BACKEND "cuda" (the identity
 * and stop tests on the GPU; the bounded cache and its injected failures are CPU-only) */
#ifndef TEST_SPEC_BACKEND
#define TEST_SPEC_BACKEND "cpu"
#define TEST_SPEC_NAME "test_spec"
#endif

/* ---- lookup index ------------------------------------------------------------------------ */
static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* the rule by definition: a backward linear scan */
static int ref_draft(const int32_t *t, int L, int k, int32_t *out) {
    for (int n = 3; n >= 2; n--) {
        if (L < n + 1) continue;
        for (int j = L - 2; j >= n - 1; j--) {
            bool eq = true;
            for (int m = 0; m < n && eq; m++) eq = t[j - m] == t[L - 1 - m];
            if (!eq) continue;
            for (int i = 0; i < k; i++) {
                int v = j + 1 + i;
                out[i] = v < L ? t[v] : out[v - L];
            }
            return k;
        }
    }
    return 0;
}

static void test_lookup_ref(void) {
    for (int alpha = 2; alpha <= 40; alpha += 19) {
        spec_lookup *l = spec_lookup_new();
        int32_t seq[3000];
        int bad = 0, hits = 0;
        for (int i = 0; i < 3000; i++) {
            seq[i] = (int32_t)(rnd() % (uint32_t)alpha) * 7919; /* spread ids */
            CHECK(spec_lookup_push(l, seq[i]) == 0, "push");
            int32_t a[8], b[8];
            int k = 1 + (int)(rnd() % 8);
            int na = spec_lookup_draft(l, k, a, NULL), nb = ref_draft(seq, i + 1, k, b);
            hits += na > 0;
            if (na != nb || memcmp(a, b, sizeof(int32_t) * (size_t)na)) bad++;
        }
        CHECK(bad == 0, "alphabet %d: %d drafts differ from the linear scan", alpha, bad);
        CHECK(hits > 100, "alphabet %d: only %d lookups matched", alpha, hits);
        spec_lookup_free(l);
    }
    /* a match at the very end continues the period: a b c a b c -> a b c a b ... */
    spec_lookup *l = spec_lookup_new();
    int32_t per[] = {5, 6, 7, 5, 6, 7}, out[8];
    for (int i = 0; i < 6; i++) spec_lookup_push(l, per[i]);
    int m = 0;
    CHECK(spec_lookup_draft(l, 8, out, &m) == 8 && out[0] == 5 && out[1] == 6 && out[2] == 7 && out[3] == 5 &&
              out[7] == 6 && m == 3,
          "periodic continuation %d %d %d %d (match %d)", out[0], out[1], out[2], out[3], m);
    spec_lookup_free(l);
}

/* 64K tokens of code-like text (a vocabulary of 151936, repeated blocks with edits): the
 * probes per draft stay bounded and do not grow with the length. */
static void test_lookup_64k(void) {
    enum { N = 65536 };
    int32_t *seq = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N;) { /* runs of fresh tokens and runs copied from earlier places */
        int run = 4 + (int)(rnd() % 60);
        int from = i > 1000 && rnd() % 4 != 0 ? (int)(rnd() % (uint32_t)(i - run > 1 ? i - run : 1)) : -1;
        for (int r = 0; r < run && i < N; r++, i++)
            seq[i] = from >= 0 ? seq[from + r] : (int32_t)(rnd() % 151936);
    }
    spec_lookup *l = spec_lookup_new();
    uint64_t worst_first = 0, worst_last = 0, matched = 0;
    double t0 = rl_now();
    for (int i = 0; i < N; i++) {
        spec_lookup_push(l, seq[i]);
        uint64_t p0 = spec_lookup_probes(l);
        int32_t out[8];
        matched += spec_lookup_draft(l, 8, out, NULL) > 0;
        uint64_t d = spec_lookup_probes(l) - p0;
        if (i < 4096 && d > worst_first) worst_first = d;
        if (i >= N - 4096 && d > worst_last) worst_last = d;
    }
    double us = (rl_now() - t0) * 1e6 / N;
    double avg = (double)spec_lookup_probes(l) / N;
    printf(
        "lookup at 64K: %.2f us per push+draft, %.2f probes per draft (worst %llu in the first 4K, %llu in "
        "the last 4K), %llu matched\n",
        us, avg, (unsigned long long)worst_first, (unsigned long long)worst_last,
        (unsigned long long)matched);
    CHECK(avg < 4.0, "average probes per draft %.2f", avg);
    CHECK(worst_last < 64, "worst probes per draft at 60-64K: %llu", (unsigned long long)worst_last);
    CHECK(matched > N / 4, "only %llu drafts matched", (unsigned long long)matched);
    /* spot check against the linear scan at the far end */
    int32_t a[8] = {0}, b[8] = {0};
    CHECK(spec_lookup_draft(l, 8, a, NULL) == ref_draft(seq, N, 8, b) && !memcmp(a, b, sizeof a),
          "64K draft");
    spec_lookup_free(l);
    free(seq);
}

/* ---- identity on the fixtures -------------------------------------------------------------- */
/* The test's emit path: what a plain decoder does with a sampled token, in the session's order
 * (end of generation, penalty history, record, stop, n_predict, context end, cancel). */
typedef struct {
    int32_t toks[512];
    int n;
    sampler *smp;
    long long n_predict;
    int n_ctx;
    int stop_at;   /* stop after this many tokens (0: never) */
    int cancel_at; /* set cancel after this many tokens */
    int32_t eog;   /* this id is an end-of-generation token (-1: none) */
    atomic_int cancel;
    int evaluated; /* tokens reported kept */
} sink_state;

enum { END_EOG = 1, END_STOP, END_LENGTH, END_CONTEXT, END_CANCEL };

static int t_emit(void *ud, int32_t t, int pos) {
    sink_state *s = ud;
    if (t == s->eog) return END_EOG;
    sampler_accept(s->smp, t);
    if (s->n < 512) s->toks[s->n] = t;
    s->n++;
    if (s->cancel_at && s->n == s->cancel_at) s->cancel = 1;
    if (s->stop_at && s->n == s->stop_at) return END_STOP;
    if (s->n_predict >= 0 && s->n >= s->n_predict) return END_LENGTH;
    if (pos >= s->n_ctx) return END_CONTEXT;
    if (s->cancel) return END_CANCEL;
    return 0;
}

static int t_kept(void *ud, const int32_t *t, int n) {
    sink_state *s = ud;
    /* kept tokens are the emitted ones, in order */
    for (int i = 0; i < n; i++)
        if (s->evaluated + i >= s->n || s->toks[(s->evaluated + i) % 512] != t[i])
            return rl_seterr("kept token %d is not the emitted one", s->evaluated + i);
    s->evaluated += n;
    return 0;
}

typedef struct {
    sink_state sk;
    spec_result r;
    int rc, pos;
    float *lg_end, *lg_next; /* logits at the end, and after one more step of a fixed token */
    int32_t next_draw;       /* the sampler's next token from lg_next */
} outcome;

typedef struct {
    engine *e;
    engine_ctx *c;
    spec *sp;
    expert_cache *ec;
    int V;
} rig;

static int rig_open_ctx(rig *g, const char *path, bool bounded, int n_ctx);
static int rig_open(rig *g, const char *path, bool bounded) { return rig_open_ctx(g, path, bounded, 640); }

static int rig_open_ctx(rig *g, const char *path, bool bounded, int n_ctx) {
    memset(g, 0, sizeof *g);
    g->e = engine_open(path, &(engine_params){.n_threads = 1, .backend = TEST_SPEC_BACKEND});
    if (!g->e) return -1;
    g->V = engine_hparams(g->e)->n_vocab;
    g->c = engine_ctx_new(g->e, &(engine_ctx_params){.n_ctx = n_ctx, .n_batch = 16});
    if (!g->c) return -1;
    if (bounded) {
        const q3n_model *m = engine_model(g->e);
        g->ec = expert_cache_new(
            m, EC_BOUNDED, &(ec_params){.budget = expert_cache_min_budget(m, false), .io = EC_IO_BUFFERED});
        if (!g->ec) return -1;
        q3n_expert_src src = expert_cache_src(g->ec);
        engine_set_expert_src(g->c, &src);
    }
    g->sp = spec_new(g->e, g->c);
    return g->sp ? 0 : -1;
}

static void rig_close(rig *g) {
    spec_free(g->sp);
    if (g->c) engine_set_expert_src(g->c, NULL);
    expert_cache_free(g->ec);
    engine_ctx_free(g->c);
    engine_close(g->e);
}

typedef struct {
    const int32_t *prompt;
    int n_prompt;
    sampler_params sp;
    long long n_predict;
    int stop_at, cancel_at;
    int32_t eog;
} job;

static int g_draft_min = 1; /* spec_params.draft_min of run_job: 1 = always draft when a source can */

static void run_job(rig *g, const job *j, int mode, int dmax, outcome *o) {
    engine_reset(g->c);
    o->next_draw = -1; /* stays -1 when the run ends at the context's end (no step after it) */
    o->lg_end = malloc(sizeof(float) * (size_t)g->V);
    o->lg_next = malloc(sizeof(float) * (size_t)g->V);
    check_poison(o->lg_end, (size_t)g->V);
    check_poison(o->lg_next, (size_t)g->V);
    sampler *smp = sampler_new(&j->sp, g->V);
    for (int i = 0; i < j->n_prompt; i++) sampler_accept(smp, j->prompt[i]);
    memset(&o->sk, 0, sizeof o->sk);
    o->sk.stop_at = j->stop_at;
    o->sk.cancel_at = j->cancel_at;
    o->sk.eog = j->eog;
    o->sk.smp = smp;
    o->sk.n_predict = j->n_predict;
    o->sk.n_ctx = engine_n_ctx(g->c);
    o->rc = engine_prefill(g->c, j->prompt, j->n_prompt, o->lg_end);
    CHECK(o->rc == 0, "prefill: %s", rl_lasterr());
    spec_sink sink = {.emit = t_emit, .kept = t_kept, .ud = &o->sk};
    spec_params p = {.mode = mode, .draft_max = dmax, .draft_min = g_draft_min, .n_predict = j->n_predict};
    o->rc = spec_run(g->sp, smp, o->lg_end, j->prompt, j->n_prompt, &p, &sink, &o->r);
    o->pos = engine_pos(g->c);
    CHECK(o->sk.evaluated == o->r.n_evaluated && o->pos == j->n_prompt + o->r.n_evaluated,
          "kept %d, evaluated %lld, position %d", o->sk.evaluated, o->r.n_evaluated, o->pos);
    int32_t next = o->sk.n > 0 ? o->sk.toks[(o->sk.n - 1) % 512] : 11;
    if (o->pos < engine_n_ctx(g->c) && engine_step(g->c, next, o->lg_next) == 0)
        o->next_draw = sampler_sample(smp, o->lg_next);
    sampler_free(smp);
}

static void outcome_free(outcome *o) {
    free(o->lg_end);
    free(o->lg_next);
}

static int g_cases, g_bad;

static bool same_outcome(const outcome *a, const outcome *b, int V, const char *what) {
    bool ok = a->rc == b->rc && a->r.sink_code == b->r.sink_code && a->sk.n == b->sk.n &&
              !memcmp(a->sk.toks, b->sk.toks, sizeof(int32_t) * (size_t)(a->sk.n < 512 ? a->sk.n : 512)) &&
              a->r.n_evaluated == b->r.n_evaluated && a->r.n_sampled == b->r.n_sampled && a->pos == b->pos &&
              !memcmp(a->lg_end, b->lg_end, sizeof(float) * (size_t)V) &&
              !memcmp(a->lg_next, b->lg_next, sizeof(float) * (size_t)V) && a->next_draw == b->next_draw;
    g_cases++;
    if (!ok) {
        g_bad++;
        if (g_bad <= 5) {
            int first = 0;
            while (first < a->sk.n && first < b->sk.n && a->sk.toks[first] == b->sk.toks[first]) first++;
            fprintf(stderr,
                    "  %s: end %d/%d, %d/%d tokens (first difference at %d), pos %d/%d, evaluated %lld/%lld, "
                    "end logits %s, next logits %s\n",
                    what, a->r.sink_code, b->r.sink_code, a->sk.n, b->sk.n, first, a->pos, b->pos,
                    a->r.n_evaluated, b->r.n_evaluated,
                    memcmp(a->lg_end, b->lg_end, sizeof(float) * (size_t)V) ? "differ" : "same",
                    memcmp(a->lg_next, b->lg_next, sizeof(float) * (size_t)V) ? "differ" : "same");
        }
    }
    return ok;
}

static sampler_params greedy(void) {
    sampler_params sp = sampler_default_params();
    sp.temp = 0;
    sp.seed = 1234;
    return sp;
}

static sampler_params sampled(uint32_t seed) {
    sampler_params sp = sampler_default_params();
    sp.temp = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.min_p = 0.02f;
    sp.repeat_penalty = 1.1f;
    sp.presence_penalty = 0.2f;
    sp.frequency_penalty = 0.1f;
    sp.seed = seed;
    return sp;
}

#define NPROMPT 6
static int32_t prompts[NPROMPT][96];
static int prompt_len[NPROMPT];

static void make_prompts(void) {
    for (int p = 0; p < NPROMPT; p++) {
        int n = 24 + 12 * p;
        for (int i = 0; i < n; i++) {
            int32_t t;
            if (p == 0 || p == 1) /* random "prose" */
                t = (int32_t)(rnd() % 151000);
            else if (p == 2 || p == 3) /* a repeated line of "code" */
                t = i < 12 ? (int32_t)(rnd() % 151000) : prompts[p][i - 12];
            else /* a short period */ t = (int32_t)(1000 + 17 * (i % (p - 1)));
            prompts[p][i] = t;
        }
        prompt_len[p] = n;
    }
}

/* Random models never repeat themselves over a 152K vocabulary; a strongly negative presence
 * penalty (a real sampler setting) makes them reuse the tokens seen, the repetitive text that
 * makes lookup (and a penalty-aware MTP draft) fire. */
static void repetitive(sampler_params *sp) {
    sp->presence_penalty = -100.0f;
    sp->repeat_last_n = 64;
}

static void identity(const char *path, bool bounded, bool has_mtp) {
    rig g;
    if (rig_open(&g, path, bounded)) {
        CHECK(0, "open %s: %s", path, rl_lasterr());
        rig_close(&g);
        return;
    }
    if (bounded) CHECK(expert_cache_mode(g.ec) == EC_BOUNDED, "bounded cache");
    int modes[] = {SPEC_DRAFT_LOOKUP, SPEC_DRAFT_MTP, SPEC_DRAFT_AUTO};
    long long acc[4] = {0}, drafted[4] = {0}, acc_rep_lookup = 0;
    int bad0 = g_bad;
    for (int pi = bounded ? 3 : 0; pi < (bounded ? 5 : NPROMPT); pi++)
        for (int si = 0; si < 2; si++) {
            job j = {.prompt = prompts[pi], .n_prompt = prompt_len[pi], .n_predict = 40, .eog = -1};
            j.sp = si == 0 ? greedy() : sampled(77 + (uint32_t)pi);
            if (pi >= 2) repetitive(&j.sp);
            outcome plain;
            run_job(&g, &j, SPEC_DRAFT_NONE, 0, &plain);
            CHECK(plain.rc == 0 && plain.r.n_verifies == 0 && plain.sk.n == 40 &&
                      plain.r.sink_code == END_LENGTH,
                  "plain run");
            for (int mi = 0; mi < 3; mi++) {
                if (modes[mi] == SPEC_DRAFT_MTP && !has_mtp) {
                    CHECK(spec_check(g.sp, SPEC_DRAFT_MTP, 4) == -1 && strstr(rl_lasterr(), "no MTP head"),
                          "mtp refused without a head: %s", rl_lasterr());
                    continue;
                }
                for (int dmax = bounded ? 8 : 2; dmax <= 8; dmax += 6) {
                    outcome o;
                    char what[160];
                    snprintf(what, sizeof what, "%s %s prompt %d %s %s K<=%d", path,
                             bounded ? "bounded" : "full", pi, si ? "sampled" : "greedy",
                             spec_mode_name(modes[mi]), dmax);
                    run_job(&g, &j, modes[mi], dmax, &o);
                    same_outcome(&o, &plain, g.V, what);
                    acc[modes[mi]] += o.r.n_accepted;
                    drafted[modes[mi]] += o.r.n_drafted;
                    if (modes[mi] == SPEC_DRAFT_LOOKUP && pi >= 2) acc_rep_lookup += o.r.n_accepted;
                    if (modes[mi] == SPEC_DRAFT_AUTO && has_mtp)
                        CHECK(o.r.n_drafted_mtp > 0, "%s: auto did not use the MTP head", what);
                    outcome_free(&o);
                }
                /* the cost-aware default picks K from measured costs (timing-dependent): any
                 * choice must give the same outcome */
                outcome o;
                char what[160];
                snprintf(what, sizeof what, "%s %s prompt %d %s %s cost-aware K", path,
                         bounded ? "bounded" : "full", pi, si ? "sampled" : "greedy",
                         spec_mode_name(modes[mi]));
                g_draft_min = 0;
                run_job(&g, &j, modes[mi], 8, &o);
                g_draft_min = 1;
                same_outcome(&o, &plain, g.V, what);
                outcome_free(&o);
            }
            outcome_free(&plain);
        }
    printf("%s (%s): accepted/drafted lookup %lld/%lld, mtp %lld/%lld, auto %lld/%lld\n", path,
           bounded ? "bounded cache" : "full", acc[1], drafted[1], acc[2], drafted[2], acc[3], drafted[3]);
    CHECK(g_bad == bad0, "%s %s: %d runs differ from plain decoding", path, bounded ? "bounded" : "full",
          g_bad - bad0);
    CHECK(acc_rep_lookup > 0, "%s: lookup accepted no draft on the repetitive prompts", path);
    if (has_mtp) CHECK(acc[2] > 0, "%s: the MTP head's drafts were never accepted", path);
    if (bounded) CHECK(expert_cache_check(g.ec) == 0, "cache consistency: %s", rl_lasterr());
    rig_close(&g);
}

/* Stop conditions at every token index: n_predict, a sink stop, EOG and cancel. */
static void stops(const char *path, bool has_mtp) {
    rig g;
    if (rig_open(&g, path, false)) {
        CHECK(0, "open %s: %s", path, rl_lasterr());
        rig_close(&g);
        return;
    }
    int bad0 = g_bad;
    int mode = has_mtp ? SPEC_DRAFT_AUTO : SPEC_DRAFT_LOOKUP;
    job base = {.prompt = prompts[4], .n_prompt = prompt_len[4], .n_predict = 16, .eog = -1};
    base.sp = greedy();
    repetitive(&base.sp);
    outcome ref;
    run_job(&g, &base, SPEC_DRAFT_NONE, 0, &ref);
    long long verifies = 0;
    for (int kind = 0; kind < 4; kind++)
        for (int at = 1; at <= 11; at++) {
            job j = base;
            if (kind == 0) j.n_predict = at;
            if (kind == 1) j.stop_at = at;
            if (kind == 2) j.eog = ref.sk.toks[at - 1];
            if (kind == 3) j.cancel_at = at;
            for (int si = 0; si < 2; si++) {
                j.sp = si ? sampled(5) : greedy();
                repetitive(&j.sp);
                outcome a, b;
                run_job(&g, &j, SPEC_DRAFT_NONE, 0, &a);
                run_job(&g, &j, mode, 8, &b);
                char what[128];
                snprintf(what, sizeof what, "%s stop kind %d at %d %s", path, kind, at,
                         si ? "sampled" : "greedy");
                same_outcome(&b, &a, g.V, what);
                verifies += b.r.n_verifies;
                outcome_free(&a);
                outcome_free(&b);
            }
        }
    /* the context end inside a verify: contexts of prompt + 1 .. prompt + 11 positions */
    for (int at = 1; at <= 11; at++) {
        rig g2;
        if (rig_open_ctx(&g2, path, false, base.n_prompt + at)) {
            CHECK(0, "open: %s", rl_lasterr());
            rig_close(&g2);
            break;
        }
        job j = base;
        j.n_predict = -1;
        outcome a, b;
        run_job(&g2, &j, SPEC_DRAFT_NONE, 0, &a);
        run_job(&g2, &j, mode, 8, &b);
        CHECK(a.r.sink_code == END_CONTEXT, "context end expected, got %d", a.r.sink_code);
        char what[128];
        snprintf(what, sizeof what, "%s context end at %d", path, at);
        same_outcome(&b, &a, g2.V, what);
        verifies += b.r.n_verifies;
        outcome_free(&a);
        outcome_free(&b);
        rig_close(&g2);
    }
    CHECK(g_bad == bad0, "%s: %d stop cases differ from plain decoding", path, g_bad - bad0);
    CHECK(verifies > 0, "no verifies in the stop cases");
    outcome_free(&ref);
    rig_close(&g);
}

/* An injected read error inside a verify: spec_run fails, the context is as it was before the
 * failed verify (position = prompt + evaluated tokens), and stepping the emitted-but-not-
 * evaluated token gives plain decoding's logits. */
static void failed_verify(const char *path) {
    rig g;
    if (rig_open(&g, path, true)) {
        CHECK(0, "open %s: %s", path, rl_lasterr());
        rig_close(&g);
        return;
    }
    job j = {.prompt = prompts[4], .n_prompt = prompt_len[4], .n_predict = 40, .eog = -1};
    j.sp = greedy();
    repetitive(&j.sp);
    outcome plain;
    run_job(&g, &j, SPEC_DRAFT_NONE, 0, &plain);
    int failures = 0;
    for (uint64_t nth = 1; nth <= 40; nth += 3) {
        engine_reset(g.c);
        sampler *smp = sampler_new(&j.sp, g.V);
        for (int i = 0; i < j.n_prompt; i++) sampler_accept(smp, j.prompt[i]);
        float *lg = malloc(sizeof(float) * (size_t)g.V);
        sink_state sk = {.eog = -1, .smp = smp, .n_predict = 40, .n_ctx = engine_n_ctx(g.c)};
        CHECK(engine_prefill(g.c, j.prompt, j.n_prompt, lg) == 0, "prefill");
        expert_cache_set_fault(g.ec, EC_FAULT_EIO, nth);
        spec_sink sink = {.emit = t_emit, .kept = t_kept, .ud = &sk};
        spec_params p = {.mode = SPEC_DRAFT_LOOKUP, .draft_max = 8, .draft_min = 1, .n_predict = 40};
        spec_result r;
        int rc = spec_run(g.sp, smp, lg, j.prompt, j.n_prompt, &p, &sink, &r);
        expert_cache_set_fault(g.ec, EC_FAULT_NONE, 0);
        if (rc == 0) { /* the fault hit nothing (all resident): the run must equal plain */
            CHECK(sk.n == plain.sk.n && !memcmp(sk.toks, plain.sk.toks, sizeof(int32_t) * (size_t)sk.n),
                  "fault %llu: tokens differ", (unsigned long long)nth);
        } else {
            failures++;
            CHECK(r.sink_code == 0 && r.n_evaluated == sk.n - 1 && sk.evaluated == sk.n - 1,
                  "fault: evaluated %lld of %d", r.n_evaluated, sk.n);
            /* the logits are still those of the last token held */
            engine_ctx *c1 = engine_ctx_new(g.e, &(engine_ctx_params){.n_ctx = 640, .n_batch = 16});
            float *lg1 = malloc(sizeof(float) * (size_t)g.V);
            int32_t held[640];
            memcpy(held, j.prompt, sizeof(int32_t) * (size_t)j.n_prompt);
            memcpy(held + j.n_prompt, sk.toks, sizeof(int32_t) * (size_t)(sk.n - 1));
            CHECK(engine_prefill(c1, held, j.n_prompt + sk.n - 1, lg1) == 0, "prefill 1");
            CHECK(!memcmp(lg, lg1, sizeof(float) * (size_t)g.V),
                  "fault %llu: logits after the failure are not the "
                  "held token's",
                  (unsigned long long)nth);
            free(lg1);
            engine_ctx_free(c1);
            CHECK(engine_pos(g.c) == j.n_prompt + r.n_evaluated, "fault: position %d", engine_pos(g.c));
            CHECK(sk.n <= plain.sk.n && !memcmp(sk.toks, plain.sk.toks, sizeof(int32_t) * (size_t)sk.n),
                  "fault: emitted tokens differ from plain decoding");
            /* evaluate the token that failed, and compare with plain decoding at that point */
            CHECK(engine_step(g.c, sk.toks[sk.n - 1], lg) == 0, "retry: %s", rl_lasterr());
            engine_ctx *c2 = engine_ctx_new(g.e, &(engine_ctx_params){.n_ctx = 640, .n_batch = 16});
            float *lg2 = malloc(sizeof(float) * (size_t)g.V);
            int32_t all[640];
            memcpy(all, j.prompt, sizeof(int32_t) * (size_t)j.n_prompt);
            memcpy(all + j.n_prompt, sk.toks, sizeof(int32_t) * (size_t)sk.n);
            CHECK(engine_prefill(c2, all, j.n_prompt + sk.n, lg2) == 0, "prefill 2");
            CHECK(!memcmp(lg, lg2, sizeof(float) * (size_t)g.V), "fault %llu: state after the retry differs",
                  (unsigned long long)nth);
            free(lg2);
            engine_ctx_free(c2);
        }
        free(lg);
        sampler_free(smp);
    }
    printf("failed verify: %d of 14 injected faults hit a run\n", failures);
    CHECK(failures > 0, "no injected fault hit a verify");
    CHECK(expert_cache_check(g.ec) == 0, "cache after faults: %s", rl_lasterr());
    outcome_free(&plain);
    rig_close(&g);
}

/* spec_best_k against a brute-force argmax of tokens per second, and its two limits */
static void test_cost_rule(void) {
    double flat[SPEC_DRAFT_MAX + 2], linear[SPEC_DRAFT_MAX + 2], mid[SPEC_DRAFT_MAX + 2];
    for (int n = 1; n <= SPEC_DRAFT_MAX + 1; n++) {
        flat[n] = 0.010;                       /* rows are free: every draft pays */
        linear[n] = 0.010 * n;                 /* a row costs a step: no draft can pay */
        mid[n] = 0.010 * (1 + 0.35 * (n - 1)); /* between */
    }
    int bad = 0;
    for (int pi = 0; pi <= 20; pi++) {
        double p = pi / 20.0 * 0.99;
        bad += spec_best_k(flat, 0, 8, p, 0, 0) != (p > 0 ? 8 : 0);
        bad += spec_best_k(linear, 0, 8, p, 0, 0) != 0;
        /* brute force on mid, with a draft and a restore cost */
        int bk = 0;
        double br = 0;
        for (int k = 0; k <= 8; k++) {
            double e = 0, cost = mid[k + 1] + 0.001 * k + (k ? (1 - pow(p, k)) * 0.0005 : 0);
            for (int i = 0; i <= k; i++) e += pow(p, i);
            if (e / cost > br * (1 + 1e-12)) bk = k, br = e / cost;
        }
        bad += spec_best_k(mid, 0, 8, p, 0.001, 0.0005) != bk;
        bad += spec_best_k(linear, 2, 8, p, 0, 0) < 2; /* draft_min holds */
    }
    CHECK(bad == 0, "cost-aware K: %d wrong choices", bad);
    /* mid at p = 0.9: about 3 tokens per 1.7 steps; 0 drafts below p = 0.35 */
    CHECK(spec_best_k(mid, 0, 8, 0.9, 0, 0) >= 4 && spec_best_k(mid, 0, 8, 0.3, 0, 0) == 0,
          "cost-aware K: %d / %d", spec_best_k(mid, 0, 8, 0.9, 0, 0), spec_best_k(mid, 0, 8, 0.3, 0, 0));
}

static double lap(const char *what, double t0) {
    double t = rl_now();
    printf("  (%s: %.1f s)\n", what, t - t0);
    return t;
}

int main(void) {
    double t0 = rl_now();
    test_lookup_ref();
    test_lookup_64k();
    const char *a = "tests/fixtures/tiny-a.gguf", *b = "tests/fixtures/tiny-b.gguf";
    if (access(a, R_OK) != 0 || access(b, R_OK) != 0) {
        CHECK(0, "fixtures tiny-a / tiny-b are missing");
        return check_done(TEST_SPEC_NAME);
    }
    make_prompts();
    test_cost_rule();
    t0 = lap("lookup", t0);
    const bool cpu = !strcmp(TEST_SPEC_BACKEND, "cpu"); /* CUDA holds every expert: no bounded cache */
    identity(a, false, false);
    t0 = lap("tiny-a full", t0);
    if (cpu) identity(a, true, false);
    t0 = lap("tiny-a bounded", t0);
    identity(b, false, true);
    t0 = lap("tiny-b full", t0);
    if (cpu) identity(b, true, true);
    t0 = lap("tiny-b bounded", t0);
    stops(a, false);
    stops(b, true);
    t0 = lap("stops", t0);
    if (cpu) failed_verify(a);
    lap("failed verify", t0);
    printf("%d runs compared with plain decoding, %d differ\n", g_cases, g_bad);
    return check_done(TEST_SPEC_NAME);
}
