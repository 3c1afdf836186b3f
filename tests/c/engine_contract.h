/* engine_contract.h — the engine's exactness contract, for any backend (included by
 * tests/c/test_engine.c and tests/cuda/test_cuda_engine.c):
 *   1. token by token; 2. a multi-row verify gives each row logits bit-identical to the single
 *   steps (with and without per-row snapshots); 3. per-row snapshots restore the exact state after
 *   their row; 4. a chunked prefill ends with the last step's logits; 5. snapshot / restore /
 *   replay and reset are exact; 6. bad input (token id outside the vocab, context overflow) is a
 *   clean error. */
#ifndef RL_ENGINE_CONTRACT_H
#define RL_ENGINE_CONTRACT_H
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine.h"

#define N 12
static const int32_t TOKS[N] = {151644, 872, 198, 9707, 11, 1879, 0, 34, 4340, 151645, 198, 77091};

/* Runs the contract on e; step (n_vocab x N floats) receives the single-step logits of TOKS. */
static void engine_contract(engine *e, float *step) {
    int V = engine_hparams(e)->n_vocab;
    float *ver = malloc(sizeof(float) * V * N), *tmp = malloc(sizeof(float) * V);

    /* 1. token by token */
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
    check_poison(step, (size_t)V * N);
    for (int i = 0; i < N; i++) CHECK(engine_step(c, TOKS[i], step + (size_t)i * V) == 0, "step %d: %s", i, rl_lasterr());
    CHECK(engine_pos(c) == N, "pos after steps");

    /* 2. one verify pass of N rows, with per-row snapshots */
    engine_ctx *c2 = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
    engine_snapshot *snaps[N];
    for (int i = 0; i < N; i++) snaps[i] = engine_snapshot_new(c2);
    check_poison(ver, (size_t)V * N);
    CHECK(engine_verify(c2, TOKS, N, ver, snaps) == 0, "verify: %s", rl_lasterr());
    CHECK(memcmp(step, ver, sizeof(float) * V * N) == 0, "verify rows differ from single steps");
    engine_reset(c2);
    check_poison(ver, (size_t)V * N);
    CHECK(engine_verify(c2, TOKS, N, ver, NULL) == 0, "verify: %s", rl_lasterr());
    CHECK(memcmp(step, ver, sizeof(float) * V * N) == 0, "verify (no snapshots) rows differ from single steps");

    /* 3. restoring the snapshot after row k and stepping row k+1 reproduces row k+1 */
    int bad = 0;
    for (int k = 0; k + 1 < N; k++) {
        CHECK(engine_snapshot_pos(snaps[k]) == k + 1, "snapshot %d pos %d", k, engine_snapshot_pos(snaps[k]));
        engine_snapshot_restore(c2, snaps[k]);
        check_poison(tmp, V);
        engine_step(c2, TOKS[k + 1], tmp);
        bad += memcmp(tmp, step + (size_t)(k + 1) * V, sizeof(float) * V) != 0;
    }
    CHECK(bad == 0, "%d per-row snapshots did not restore exactly", bad);

    /* 4. chunked prefill (chunks of 5) ends with the last row's logits */
    engine_ctx *c3 = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 5});
    check_poison(tmp, V);
    CHECK(engine_prefill(c3, TOKS, N, tmp) == 0, "prefill: %s", rl_lasterr());
    CHECK(memcmp(tmp, step + (size_t)(N - 1) * V, sizeof(float) * V) == 0, "prefill last row differs");

    /* 5. snapshot / continue / restore / replay, and reset */
    engine_snapshot *s = engine_snapshot_new(c3);
    engine_snapshot_save(c3, s);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    engine_step(c3, 42, a);
    engine_step(c3, 43, a);
    engine_snapshot_restore(c3, s);
    CHECK(engine_pos(c3) == N, "restored pos");
    engine_step(c3, 42, b);
    engine_step(c3, 43, b);
    CHECK(memcmp(a, b, sizeof(float) * V) == 0, "replay after restore differs");
    engine_reset(c3);
    check_poison(tmp, V);
    engine_step(c3, TOKS[0], tmp);
    CHECK(memcmp(tmp, step, sizeof(float) * V) == 0, "reset does not give a fresh sequence");

    /* 6. errors */
    CHECK(engine_step(c3, V + 5, tmp) != 0 && strstr(rl_lasterr(), "outside the vocabulary"), "bad id: %s",
          rl_lasterr());
    engine_ctx *small = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 4, .n_batch = 8});
    CHECK(small && engine_prefill(small, TOKS, 6, tmp) != 0 && strstr(rl_lasterr(), "context is full"), "overflow: %s",
          rl_lasterr());

    engine_ctx_free(small);
    engine_snapshot_free(s);
    for (int i = 0; i < N; i++) engine_snapshot_free(snaps[i]);
    free(a);
    free(b);
    free(ver);
    free(tmp);
    engine_ctx_free(c);
    engine_ctx_free(c2);
    engine_ctx_free(c3);
}
#endif
