/* test_session.c — the session layer (src/run/session.h) on the committed tiny fixtures:
 *   - session_generate gives the tokens of a plain engine loop (prefill, sample, step: what the
 *     CLI's decode loop did) for greedy and seeded sampling with penalties, and text == the
 *     ids decoded == the concatenation of what on_text streamed;
 *   - session_feed prefix reuse (extend, diverge -> checkpoint restore, the same prompt again,
 *     reset, a rewrite that must invalidate a checkpoint, generation in between) gives logits
 *     bit-identical to a cold prefill in a fresh context (outputs NaN-poisoned first), and
 *     reuses what it says it reuses;
 *   - cancel (flag before feed / generate, on_text returning non-zero), stop strings,
 *     n_predict, the context end, bad input and an unavailable speculation mode. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "run/session.h"

static session_model *M;
static int V; /* model vocabulary (logit rows) */

/* Cold oracle: a fresh context, engine_prefill of all tokens, logits of the last. */
static void cold_logits(const int32_t *t, int n, float *out) {
    engine_ctx *c =
        engine_ctx_new(session_model_engine(M), &(engine_ctx_params){.n_ctx = 512, .n_batch = 16});
    CHECK(c != NULL, "ctx: %s", rl_lasterr());
    check_poison(out, (size_t)V);
    CHECK(c && engine_prefill(c, t, n, out) == 0, "cold prefill: %s", rl_lasterr());
    engine_ctx_free(c);
}

static bool same(const float *a, const float *b) {
    return a && b && !memcmp(a, b, sizeof(float) * (size_t)V);
}

static void seq(int32_t *t, int n, uint64_t seed) {
    rl_rng r;
    rl_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(rl_rng_u64(&r) % 150000u);
}

/* Feed and compare with the cold run; returns n_reused (or -1). */
static int feed_check(session *s, const int32_t *t, int n, const char *what) {
    float *cold = malloc(sizeof(float) * (size_t)V);
    cold_logits(t, n, cold);
    session_feed_stats st;
    memset(&st, 0xff, sizeof st);
    int rc = session_feed(s, t, n, NULL, &st);
    CHECK(rc == 0, "%s: feed: %s", what, rl_lasterr());
    CHECK(st.n_tokens == n && st.n_reused + st.n_evaluated == n && st.n_evaluated >= 1, "%s: stats %d %d %d",
          what, st.n_tokens, st.n_reused, st.n_evaluated);
    int hn = -1;
    const int32_t *h = session_history(s, &hn);
    CHECK(hn == n && !memcmp(h, t, sizeof(int32_t) * (size_t)n), "%s: history", what);
    CHECK(engine_pos(session_ctx(s)) == n, "%s: position %d", what, engine_pos(session_ctx(s)));
    CHECK(same(session_logits(s), cold), "%s: logits differ from a cold prefill", what);
    free(cold);
    return rc ? -1 : st.n_reused;
}

static session *fresh(int max_ck) {
    session *s = session_new(M, &(session_params){.n_ctx = 512, .n_batch = 16, .max_checkpoints = max_ck});
    CHECK(s != NULL, "session: %s", rl_lasterr());
    return s;
}

/* Expected reuse counts follow from the checkpoint rule (n_batch 16: one before the last chunk,
 * one at the end of each feed; nothing every 512 tokens at these lengths). */
static void test_prefix_reuse(void) {
    int32_t a[200], b[200];
    seq(a, 200, 1);
    memcpy(b, a, sizeof a);
    seq(b + 40, 160, 2); /* b diverges from a at 40 */
    session *s = fresh(8);
    if (!s) return;
    CHECK(session_logits(s) == NULL, "empty sequence has no logits");
    CHECK(feed_check(s, a, 40, "cold") == 0, "cold feed reuses nothing");     /* ck 32a 40a */
    CHECK(feed_check(s, a, 80, "extend") == 40, "extend reuses the held 40"); /* ck 72a 80a */
    CHECK(feed_check(s, b, 60, "diverge") == 40,
          "diverge restores the checkpoint at 40"); /* 72a 80a dropped */
    CHECK(feed_check(s, b, 60, "same again") == 56, "the same prompt restarts before its last chunk");
    /* b's rows 40..60 replaced a's: a's checkpoints at 72 and 80 must be gone (else 80 here,
     * and logits that differ from the cold run) */
    CHECK(feed_check(s, a, 90, "back to a") == 40, "rewritten rows invalidate later checkpoints");
    session_reset(s);
    CHECK(session_logits(s) == NULL && engine_pos(session_ctx(s)) == 0, "reset");
    CHECK(feed_check(s, a, 95, "after reset") == 90, "after reset: checkpoints are kept (a at 90)");
    CHECK(feed_check(s, a, 200, "long") == 95, "long feed extends the held tokens");
    CHECK(feed_check(s, a, 200, "long again") == 191, "long again: before the last chunk (95 + 6 x 16)");
    session_free(s);

    /* generation writes rows too */
    if (!(s = fresh(8))) return;
    CHECK(feed_check(s, a, 40, "g1") == 0, "g1");  /* ck 32a 40a */
    CHECK(feed_check(s, a, 80, "g2") == 40, "g2"); /* ck 72a 80a */
    /* same tokens again over [32, 40): rows rewritten with the same prefix keep 72a and 80a */
    CHECK(feed_check(s, a, 40, "g3") == 32, "g3 restores 32");
    CHECK(feed_check(s, a, 81, "g4") == 80, "same-token rewrite keeps later checkpoints");
    CHECK(feed_check(s, a, 40, "g5") == 32, "g5");
    session_gen_result r;
    CHECK(session_generate(s, &(session_gen_params){.sp = {.temp = 0}, .n_predict = 30}, &r) == 0, "gen: %s",
          rl_lasterr());
    CHECK(r.ids.n == 30 && r.reason == SESSION_LENGTH, "gen length %zu %s", r.ids.n,
          session_reason_name(r.reason));
    bool differs = r.ids.n && r.ids.ids[0] != a[40];
    session_gen_result_free(&r);
    CHECK(differs, "the generated token differs from a[40] (the next check relies on it)");
    CHECK(feed_check(s, a, 100, "after gen") == 40,
          "generated rows invalidate a's checkpoints at 72, 80, 81");
    session_free(s);

    /* LRU: with 2 checkpoints the oldest go */
    if (!(s = fresh(2))) return;
    CHECK(feed_check(s, a, 40, "l1") == 0, "l1");  /* 32a 40a */
    CHECK(feed_check(s, a, 80, "l2") == 40, "l2"); /* 72a 80a replace them */
    CHECK(feed_check(s, b, 60, "l3") == 0, "l3: no checkpoint of b's prefix left");
    session_free(s);

    /* no checkpoints at all (-1): only the held prefix is reused */
    if (!(s = fresh(-1))) return;
    CHECK(feed_check(s, a, 40, "n1") == 0, "n1");
    CHECK(feed_check(s, a, 80, "n2") == 40, "n2: the held prefix");
    CHECK(feed_check(s, b, 60, "n3") == 0, "n3: nothing to restore");
    CHECK(feed_check(s, b, 60, "n4") == 0, "n4: the same prompt again starts over");
    session_free(s);
}

/* The reference loop: what the CLI's gen_decode did (prefill, then sample / eog / step). */
static void ref_generate(const int32_t *p, int n, const sampler_params *sp, int n_predict, int n_ctx,
                         tok_ids *out) {
    const tokenizer *tok = session_model_tokenizer(M);
    engine_ctx *c =
        engine_ctx_new(session_model_engine(M), &(engine_ctx_params){.n_ctx = n_ctx, .n_batch = 64});
    float *logits = malloc(sizeof(float) * (size_t)V);
    int nv = tokenizer_n_vocab(tok) < V ? tokenizer_n_vocab(tok) : V;
    sampler *smp = sampler_new(sp, nv);
    CHECK(c && logits && smp, "ref setup");
    for (int i = 0; i < n; i++) sampler_accept(smp, p[i]);
    CHECK(engine_prefill(c, p, n, logits) == 0, "ref prefill");
    for (int k = 0; k < n_predict; k++) {
        int32_t t = sampler_sample(smp, logits);
        if (t < 0 || tokenizer_is_eog(tok, t)) break;
        tok_ids_push(out, t);
        sampler_accept(smp, t);
        if (k + 1 >= n_predict || engine_pos(c) >= n_ctx) break;
        CHECK(engine_step(c, t, logits) == 0, "ref step");
    }
    sampler_free(smp);
    free(logits);
    engine_ctx_free(c);
}

typedef struct {
    char buf[8192];
    size_t n;
    int calls, stop_after;
    atomic_int *flag;
    int flag_after;
} sink;

static int on_text(void *ud, int32_t token, const char *text, size_t n) {
    sink *k = ud;
    CHECK(text != NULL, "on_text text");
    if (k->n + n < sizeof k->buf) memcpy(k->buf + k->n, text, n), k->n += n;
    k->calls += token >= 0;
    if (k->flag && k->calls == k->flag_after) *k->flag = 1;
    return k->stop_after && k->calls >= k->stop_after;
}

static void test_generate(void) {
    const tokenizer *tok = session_model_tokenizer(M);
    tok_ids p = {0};
    CHECK(tokenizer_encode(tok, "Once upon a time", 16, 0, &p) == 0 && p.n > 0, "encode");
    sampler_params greedy = sampler_default_params();
    greedy.temp = 0;
    sampler_params hot = sampler_default_params();
    hot.temp = 1.0f, hot.top_k = 50, hot.top_p = 0.9f, hot.min_p = 0.01f, hot.repeat_penalty = 1.1f;
    hot.presence_penalty = 0.2f, hot.frequency_penalty = 0.1f, hot.seed = 123;
    const sampler_params *sps[2] = {&greedy, &hot};
    for (int v = 0; v < 2; v++) {
        tok_ids want = {0};
        ref_generate(p.ids, (int)p.n, sps[v], 40, 4096, &want);
        session *s = session_new(M, &(session_params){.n_ctx = 4096});
        CHECK(s && session_feed(s, p.ids, (int)p.n, NULL, NULL) == 0, "feed: %s", rl_lasterr());
        sink k = {0};
        session_gen_result r;
        CHECK(session_generate(
                  s, &(session_gen_params){.sp = *sps[v], .n_predict = 40, .on_text = on_text, .ud = &k},
                  &r) == 0,
              "generate: %s", rl_lasterr());
        CHECK(r.ids.n == want.n && !memcmp(r.ids.ids, want.ids, sizeof(int32_t) * want.n),
              "variant %d: session tokens differ from the plain loop", v);
        CHECK(r.reason == (want.n == 40 ? SESSION_LENGTH : SESSION_EOG), "reason %s",
              session_reason_name(r.reason));
        CHECK(v == 0 || r.seed == 123, "seed");
        char *dec = NULL;
        size_t dn = 0;
        CHECK(tokenizer_decode(tok, r.ids.ids, r.ids.n, 0, &dec, &dn) == 0, "decode");
        CHECK(dec && dn == r.text_len && !memcmp(dec, r.text, dn), "text == decoded ids");
        CHECK(k.n == r.text_len && !memcmp(k.buf, r.text, k.n), "streamed text == text");
        CHECK(k.calls == (int)r.ids.n, "on_text once per token (%d, %zu)", k.calls, r.ids.n);
        int hn;
        session_history(s, &hn);
        CHECK(hn == (int)p.n + (int)r.ids.n - 1, "history: prompt + all tokens but the last (%d)", hn);
        free(dec);
        /* stop string: a piece from the middle of the text (the fixture's greedy text is long) */
        if (v == 0) {
            CHECK(r.text_len > 12, "greedy text long enough (%zu)", r.text_len);
            size_t at = r.text_len / 2;
            while (at < r.text_len && (r.text[at] & 0xC0) == 0x80) at++;
            char stop[4] = {0};
            memcpy(stop, r.text + at, 3);
            const char *first = strstr(r.text, stop);
            const char *stops[1] = {stop};
            sink k2 = {0};
            session_gen_result r2;
            CHECK(session_feed(s, p.ids, (int)p.n, NULL, NULL) == 0, "refeed");
            CHECK(session_generate(s,
                                   &(session_gen_params){.sp = greedy,
                                                         .n_predict = 40,
                                                         .stops = stops,
                                                         .n_stops = 1,
                                                         .on_text = on_text,
                                                         .ud = &k2},
                                   &r2) == 0,
                  "stop gen");
            CHECK(r2.reason == SESSION_STOP, "stop reason %s", session_reason_name(r2.reason));
            CHECK(first && r2.text_len == (size_t)(first - r.text) && !memcmp(r2.text, r.text, r2.text_len),
                  "text cut before the stop string");
            CHECK(k2.n == r2.text_len && !memcmp(k2.buf, r2.text, k2.n), "streamed text == text (stop)");
            session_gen_result_free(&r2);
            /* n_predict */
            CHECK(session_feed(s, p.ids, (int)p.n, NULL, NULL) == 0, "refeed");
            CHECK(session_generate(s, &(session_gen_params){.sp = greedy, .n_predict = 5}, &r2) == 0, "n=5");
            CHECK(r2.ids.n == 5 && r2.reason == SESSION_LENGTH &&
                      !memcmp(r2.ids.ids, want.ids, 5 * sizeof(int32_t)),
                  "n_predict 5");
            session_history(s, &hn);
            CHECK(hn == (int)p.n + 4, "history after 5");
            session_gen_result_free(&r2);
            /* n_predict 0: nothing */
            CHECK(session_generate(s, &(session_gen_params){.sp = greedy, .n_predict = 0}, &r2) == 0, "n=0");
            CHECK(r2.ids.n == 0 && r2.reason == SESSION_LENGTH && r2.text && r2.text_len == 0, "n_predict 0");
            session_gen_result_free(&r2);
            /* cancel: the flag set before generate, on_text asking to stop, the flag set from
             * on_text (as a signal handler would) */
            atomic_int flag = 1;
            CHECK(session_feed(s, p.ids, (int)p.n, NULL, NULL) == 0, "refeed");
            CHECK(session_generate(s, &(session_gen_params){.sp = greedy, .n_predict = 40, .cancel = &flag},
                                   &r2) == 0,
                  "cancel gen");
            CHECK(r2.ids.n == 0 && r2.reason == SESSION_CANCELLED, "cancelled before the first token");
            session_gen_result_free(&r2);
            sink k3 = {.stop_after = 3};
            CHECK(session_generate(
                      s, &(session_gen_params){.sp = greedy, .n_predict = 40, .on_text = on_text, .ud = &k3},
                      &r2) == 0,
                  "on_text stop");
            CHECK(r2.ids.n == 3 && r2.reason == SESSION_CANCELLED &&
                      !memcmp(r2.ids.ids, want.ids, 3 * sizeof(int32_t)),
                  "on_text stop after 3 (%zu)", r2.ids.n);
            session_gen_result_free(&r2);
            flag = 0;
            CHECK(session_feed(s, p.ids, (int)p.n, NULL, NULL) == 0, "refeed");
            sink k4 = {.flag = &flag, .flag_after = 4};
            CHECK(session_generate(
                      s,
                      &(session_gen_params){
                          .sp = greedy, .n_predict = 40, .on_text = on_text, .ud = &k4, .cancel = &flag},
                      &r2) == 0,
                  "flag gen");
            CHECK(r2.ids.n == 4 && r2.reason == SESSION_CANCELLED, "cancel flag after 4 (%zu)", r2.ids.n);
            session_history(s, &hn);
            CHECK(hn == (int)p.n + 3, "history after a cancel");
            session_gen_result_free(&r2);
            /* a cancelled feed */
            flag = 1;
            int32_t big[100];
            seq(big, 100, 9);
            session_feed_opts fo = {.cancel = &flag};
            CHECK(session_feed(s, big, 100, &fo, NULL) == -1 && strstr(rl_lasterr(), "cancel"),
                  "cancelled feed");
            CHECK(session_logits(s) == NULL, "no logits after a cancelled feed");
            /* speculation gives plain decoding's tokens and history (the full checks: test_spec) */
            session_gen_result r3;
            CHECK(session_feed(s, p.ids, (int)p.n, NULL, NULL) == 0, "refeed");
            CHECK(session_generate(s, &(session_gen_params){.sp = greedy, .n_predict = 12}, &r3) == 0,
                  "plain");
            CHECK(session_feed(s, p.ids, (int)p.n, NULL, NULL) == 0, "refeed");
            CHECK(session_generate(s, &(session_gen_params){.sp = greedy, .n_predict = 12, .spec = SPEC_AUTO},
                                   &r2) == 0,
                  "spec: %s", rl_lasterr());
            session_history(s, &hn);
            CHECK(r2.ids.n == r3.ids.n && !memcmp(r2.ids.ids, r3.ids.ids, sizeof(int32_t) * r3.ids.n) &&
                      hn == (int)p.n + 11,
                  "spec tokens / history");
            session_gen_result_free(&r2);
            session_gen_result_free(&r3);
        }
        session_gen_result_free(&r);
        tok_ids_free(&want);
        session_free(s);
    }
    tok_ids_free(&p);
}

static void test_context_end(void) {
    int32_t t[30];
    seq(t, 30, 5);
    sampler_params greedy = sampler_default_params();
    greedy.temp = 0;
    tok_ids want = {0};
    ref_generate(t, 30, &greedy, 100, 32, &want);
    session *s = session_new(M, &(session_params){.n_ctx = 32, .n_batch = 8});
    CHECK(s && session_feed(s, t, 30, NULL, NULL) == 0, "feed");
    session_gen_result r;
    CHECK(session_generate(s, &(session_gen_params){.sp = greedy, .n_predict = -1}, &r) == 0, "gen");
    CHECK(want.n == 3 && r.ids.n == 3 && !memcmp(r.ids.ids, want.ids, 3 * sizeof(int32_t)),
          "3 tokens fill a context of 32 after 30 (%zu, %zu)", r.ids.n, want.n);
    CHECK(r.reason == SESSION_CONTEXT, "reason %s", session_reason_name(r.reason));
    CHECK(engine_pos(session_ctx(s)) == 32, "position at the end");
    session_gen_result_free(&r);
    /* bad input */
    int32_t big[40] = {0};
    CHECK(session_feed(s, big, 40, NULL, NULL) == -1 && strstr(rl_lasterr(), "context"), "feed over n_ctx");
    CHECK(session_feed(s, big, 0, NULL, NULL) == -1, "empty feed");
    int32_t bad[2] = {1, V + 5};
    CHECK(session_feed(s, bad, 2, NULL, NULL) == -1 && strstr(rl_lasterr(), "vocabulary"), "id out of range");
    session_reset(s);
    CHECK(session_generate(s, &(session_gen_params){.sp = greedy, .n_predict = 3}, &r) == -1,
          "generate on nothing");
    session_gen_result_free(&r);
    session_free(s);
    tok_ids_free(&want);
    /* a cache spec the planner refuses */
    CHECK(session_new(M, &(session_params){.cache_spec = "lots"}) == NULL &&
              strstr(rl_lasterr(), "cache-mib"),
          "bad cache spec: %s", rl_lasterr());
}

/* The bounded cache (smallest budget, misses every layer) gives the same logits. */
static void test_cache_modes(void) {
    int32_t t[50];
    seq(t, 50, 11);
    const char *specs[] = {"mmap", "full", "1"};
    for (int i = 0; i < 3; i++) {
        session *s = session_new(M, &(session_params){.n_ctx = 128, .n_batch = 16, .cache_spec = specs[i]});
        CHECK(s != NULL, "cache %s: %s", specs[i], rl_lasterr());
        if (!s) continue;
        CHECK(session_expert_cache(s) != NULL, "the session owns its cache (%s)", specs[i]);
        feed_check(s, t, 50, specs[i]);
        session_free(s);
    }
}

int main(void) {
    const char *models[] = {"tests/fixtures/tiny-a.gguf", "tests/fixtures/tiny-b.gguf"};
    for (int i = 0; i < 2; i++) {
        if (access(models[i], R_OK) != 0) {
            CHECK(0, "fixture %s is missing", models[i]);
            continue;
        }
        M = session_model_open(&(session_model_params){.model_path = models[i], .n_threads = 2});
        CHECK(M != NULL, "open %s: %s", models[i], rl_lasterr());
        if (!M) continue;
        V = engine_hparams(session_model_engine(M))->n_vocab;
        test_prefix_reuse();
        test_generate();
        test_context_end();
        test_cache_modes();
        session_model_close(M);
    }
    return check_done("test_session");
}
