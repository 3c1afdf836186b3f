/* test_engine_rows.c — contexts of one engine driven from several threads (engine.h "turns"):
 * decode steps that wait together run as the rows of one forward (the CPU backend's
 * forward_rows), and every context's logits must be bit-identical to the same context run alone.
 *
 * Per model (the tiny fixtures and models/default.gguf when built), per arithmetic (fast SIMD and
 * the double-precision reference): N contexts get prompts of different lengths (so their rows sit
 * at different positions, some past one attention chunk), then
 *   - alone: each context's prompt, then S greedy steps, one context after the other (the oracle);
 *   - together: fresh contexts, the same prompts fed from N threads at once (prompt chunks
 *     interleaved), then the S steps from N threads in a decode loop (engine_ctx_decoding),
 *     a prefill of another context running beside them half way;
 * every step's logits compared bit for bit (NaN-poisoned first), and the batch statistics must
 * show rows shared a forward (else the test proves nothing about forward_rows). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "check.h"
#include "run/engine.h"

#define N 4
#define S 24

typedef struct {
    engine *e;
    engine_ctx *c;
    int32_t *prompt;
    int n_prompt;
    float *logits; /* [S + 1][V]: after the prompt, then after each step */
    int V;
    bool decode_flag;
    int rc;
    pthread_barrier_t *bar;
} run_arg;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The prompt, then S greedy steps; logits of each stage into a->logits. */
static void *drive(void *p) {
    run_arg *a = p;
    a->rc = 0;
    if (a->bar) pthread_barrier_wait(a->bar);
    if (engine_prefill(a->c, a->prompt, a->n_prompt, a->logits)) {
        a->rc = -1;
        fprintf(stderr, "prefill: %s\n", rl_lasterr());
    }
    if (a->bar) pthread_barrier_wait(a->bar); /* all decode together */
    if (a->decode_flag) engine_ctx_decoding(a->c, true);
    for (int s = 0; s < S && !a->rc; s++) {
        int32_t t = argmax(a->logits + (size_t)s * a->V, a->V);
        if (engine_step(a->c, t, a->logits + (size_t)(s + 1) * a->V)) {
            a->rc = -1;
            fprintf(stderr, "step: %s\n", rl_lasterr());
        }
    }
    if (a->decode_flag) engine_ctx_decoding(a->c, false);
    return NULL;
}

/* A prompt of another context running beside the decoders (its chunks take turns with them). */
typedef struct {
    engine *e;
    int rc;
} side_arg;
static void *side(void *p) {
    side_arg *a = p;
    engine_ctx *c = engine_ctx_new(a->e, &(engine_ctx_params){.n_ctx = 512, .n_batch = 8});
    int32_t t[100];
    for (int i = 0; i < 100; i++) t[i] = (int32_t)(i * 37 % 200 + 5);
    a->rc = c && engine_prefill(c, t, 100, NULL) == 0 ? 0 : -1;
    engine_ctx_free(c);
    return NULL;
}

static void run(const char *path, bool reference) {
    engine *e = engine_open(path, &(engine_params){.n_threads = 2, .reference = reference});
    CHECK(e != NULL, "%s: %s", path, rl_lasterr());
    if (!e) return;
    const int V = engine_hparams(e)->n_vocab;
    const int lens[N] = {1, 7, 40, 300}; /* 300: rows past one attention chunk (vec.h) */
    run_arg alone[N], tog[N];
    int32_t *prompts[N];
    for (int i = 0; i < N; i++) {
        prompts[i] = malloc(sizeof(int32_t) * (size_t)lens[i]);
        for (int k = 0; k < lens[i]; k++)
            prompts[i][k] = (int32_t)((k * 131 + i * 17 + 3) % (V < 400 ? V : 400));
    }
    engine_ctx_params cp = {.n_ctx = 512, .n_batch = 16};
    for (int i = 0; i < N; i++) {
        alone[i] = (run_arg){.e = e, .prompt = prompts[i], .n_prompt = lens[i], .V = V};
        alone[i].c = engine_ctx_new(e, &cp);
        alone[i].logits = malloc(sizeof(float) * (size_t)(S + 1) * V);
        check_poison(alone[i].logits, (size_t)(S + 1) * V);
        drive(&alone[i]);
        CHECK(alone[i].rc == 0, "%s: alone %d", path, i);
    }
    long long f0, r0, f1, r1;
    engine_batch_stats(e, &f0, &r0);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, N);
    pthread_t th[N], st;
    side_arg sa = {.e = e};
    for (int i = 0; i < N; i++) {
        tog[i] = alone[i];
        tog[i].c = engine_ctx_new(e, &cp);
        tog[i].logits = malloc(sizeof(float) * (size_t)(S + 1) * V);
        check_poison(tog[i].logits, (size_t)(S + 1) * V);
        tog[i].decode_flag = true;
        tog[i].bar = &bar;
        pthread_create(&th[i], NULL, drive, &tog[i]);
    }
    pthread_create(&st, NULL, side, &sa);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    pthread_join(st, NULL);
    pthread_barrier_destroy(&bar);
    engine_batch_stats(e, &f1, &r1);
    CHECK(sa.rc == 0, "%s: the side prefill failed", path);
    for (int i = 0; i < N; i++) {
        CHECK(tog[i].rc == 0, "%s: together %d", path, i);
        for (int s = 0; s <= S; s++) {
            const size_t o = (size_t)s * V;
            CHECK(!memcmp(alone[i].logits + o, tog[i].logits + o, sizeof(float) * (size_t)V),
                  "%s (%s): context %d (prompt %d) stage %d: logits differ from the context run alone", path,
                  reference ? "reference" : "fast", i, lens[i], s);
        }
        CHECK(engine_pos(tog[i].c) == lens[i] + S, "%s: position %d", path, engine_pos(tog[i].c));
    }
    /* N*S steps ran; shared forwards mean fewer forwards than steps */
    CHECK(r1 - r0 == (long long)N * S, "%s: %lld step rows counted, expected %d", path, r1 - r0, N * S);
    CHECK(f1 - f0 < r1 - r0, "%s: no two steps shared a forward (%lld forwards for %lld rows)", path, f1 - f0,
          r1 - r0);
    printf("%s (%s): %lld steps in %lld forwards\n", path, reference ? "reference" : "fast", r1 - r0,
           f1 - f0);
    for (int i = 0; i < N; i++) {
        engine_ctx_free(alone[i].c);
        engine_ctx_free(tog[i].c);
        free(alone[i].logits);
        free(tog[i].logits);
        free(prompts[i]);
    }
    engine_close(e);
}

int main(void) {
    const char *models[] = {"tests/fixtures/tiny-a.gguf", "tests/fixtures/tiny-b.gguf",
                            "models/default.gguf"};
    for (int i = 0; i < 3; i++) {
        if (access(models[i], R_OK) != 0) {
            CHECK(i == 2, "fixture %s is missing", models[i]); /* the default model is built by make */
            continue;
        }
        run(models[i], false);
        run(models[i], true);
    }
    return check_done("test_engine_rows");
}
