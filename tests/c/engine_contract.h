/* engine_contract.h — the engine's exactness contract, for any backend (included by
 * tests/c/test_engine.c and tests/cuda/test_cuda_engine.c):
 *   1. token by token; 2. a multi-row verify gives each row logits bit-identical to the single
 *   steps (with and without per-row snapshots); 3. per-row snapshots restore the exact state after
 *   their row; 4. a chunked prefill ends with the last step's logits; 5. snapshot / restore /
 *   replay and reset are exact; 6. bad input (token id outside the vocab, context overflow) is a
 *   clean error. */
#ifndef RL_ENGINE_CONTRACT_H
#define RL_ENGINE_CONTRACT_H
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "run/engine.h"

#define N 12
static const int32_t TOKS[N] = {151644, 872, 198, 9707, 11, 1879, 0, 34, 4340, 151645, 198, 77091};

/* Every element finite: the outputs are NaN-poisoned before each call, so an element the engine
 * did not write stays NaN and fails here (memcmp of two poisoned buffers would compare equal). */
static int contract_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Runs the contract on e; step (n_vocab x N floats) receives the single-step logits of TOKS.
 * Every call's return code is checked, every output is poisoned before the call that writes it
 * and checked to be finite after it. */
static void engine_contract_kv(engine *e, const char *kv, float *step) {
    int V = engine_hparams(e)->n_vocab;
    size_t VN = (size_t)V * N;
    float *ver = malloc(sizeof(float) * VN), *tmp = malloc(sizeof(float) * V);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    CHECK(ver && tmp && a && b, "out of memory");

    /* 1. token by token */
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16, .kv = kv});
    engine_ctx *c2 = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16, .kv = kv});
    engine_ctx *c3 = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 5, .kv = kv});
    CHECK(c && c2 && c3, "ctx_new: %s", rl_lasterr());
    if (c && kv)
        CHECK(!strcmp(engine_kv_format(c), kv), "context KV format %s, asked %s", engine_kv_format(c), kv);
    if (!c || !c2 || !c3 || !ver || !tmp || !a || !b) goto out;
    check_poison(step, VN);
    for (int i = 0; i < N; i++)
        CHECK(engine_step(c, TOKS[i], step + (size_t)i * V) == 0, "step %d: %s", i, rl_lasterr());
    CHECK(contract_finite(step, VN), "single steps left non-finite logits");
    CHECK(engine_pos(c) == N, "pos after steps");

    /* 2. one verify pass of N rows, with per-row snapshots */
    engine_snapshot *snaps[N];
    int nsnap = 0;
    for (int i = 0; i < N; i++) nsnap += (snaps[i] = engine_snapshot_new(c2)) != NULL;
    CHECK(nsnap == N, "snapshot_new: %s", rl_lasterr());
    if (nsnap != N) {
        for (int i = 0; i < N; i++) engine_snapshot_free(snaps[i]);
        goto out;
    }
    check_poison(ver, VN);
    CHECK(engine_verify(c2, TOKS, N, ver, snaps) == 0, "verify: %s", rl_lasterr());
    CHECK(contract_finite(ver, VN) && memcmp(step, ver, sizeof(float) * VN) == 0,
          "verify rows differ from single steps");
    CHECK(engine_pos(c2) == N, "pos after verify %d", engine_pos(c2));
    engine_reset(c2);
    CHECK(engine_pos(c2) == 0, "pos after reset %d", engine_pos(c2));
    check_poison(ver, VN);
    CHECK(engine_verify(c2, TOKS, N, ver, NULL) == 0, "verify: %s", rl_lasterr());
    CHECK(contract_finite(ver, VN) && memcmp(step, ver, sizeof(float) * VN) == 0,
          "verify (no snapshots) rows differ from single steps");

    /* 3. restoring the snapshot after row k and stepping row k+1 reproduces row k+1 */
    int bad = 0, err = 0;
    for (int k = 0; k + 1 < N; k++) {
        CHECK(engine_snapshot_pos(snaps[k]) == k + 1, "snapshot %d pos %d", k, engine_snapshot_pos(snaps[k]));
        err += engine_snapshot_restore(c2, snaps[k]) != 0;
        err += engine_pos(c2) != k + 1;
        check_poison(tmp, V);
        err += engine_step(c2, TOKS[k + 1], tmp) != 0;
        bad += !contract_finite(tmp, V) || memcmp(tmp, step + (size_t)(k + 1) * V, sizeof(float) * V) != 0;
    }
    CHECK(err == 0, "%d per-row snapshot restores or steps failed: %s", err, rl_lasterr());
    CHECK(bad == 0, "%d per-row snapshots did not restore exactly", bad);
    for (int i = 0; i < N; i++) engine_snapshot_free(snaps[i]);

    /* 4. chunked prefill (chunks of 5) ends with the last row's logits */
    check_poison(tmp, V);
    CHECK(engine_prefill(c3, TOKS, N, tmp) == 0, "prefill: %s", rl_lasterr());
    CHECK(contract_finite(tmp, V) && memcmp(tmp, step + (size_t)(N - 1) * V, sizeof(float) * V) == 0,
          "prefill last row differs");
    CHECK(engine_pos(c3) == N, "pos after prefill %d", engine_pos(c3));

    /* 5. snapshot / continue / restore / replay, and reset */
    engine_snapshot *s = engine_snapshot_new(c3);
    CHECK(s && engine_snapshot_save(c3, s) == 0, "snapshot save: %s", rl_lasterr());
    check_poison(a, V);
    CHECK(engine_step(c3, 42, a) == 0 && engine_step(c3, 43, a) == 0, "steps after prefill: %s",
          rl_lasterr());
    CHECK(s && engine_snapshot_restore(c3, s) == 0, "restore: %s", rl_lasterr());
    CHECK(engine_pos(c3) == N, "restored pos");
    check_poison(b, V);
    CHECK(engine_step(c3, 42, b) == 0 && engine_step(c3, 43, b) == 0, "replay: %s", rl_lasterr());
    CHECK(contract_finite(a, V) && memcmp(a, b, sizeof(float) * V) == 0, "replay after restore differs");
    engine_reset(c3);
    check_poison(tmp, V);
    CHECK(engine_step(c3, TOKS[0], tmp) == 0, "step after reset: %s", rl_lasterr());
    CHECK(contract_finite(tmp, V) && memcmp(tmp, step, sizeof(float) * V) == 0,
          "reset does not give a fresh sequence");
    engine_snapshot_free(s);

    /* 6. errors: a clean message, and the context still usable at the same position */
    CHECK(engine_step(c3, V + 5, tmp) != 0 && strstr(rl_lasterr(), "outside the vocabulary"), "bad id: %s",
          rl_lasterr());
    CHECK(engine_step(c3, -1, tmp) != 0 && strstr(rl_lasterr(), "outside the vocabulary"), "negative id: %s",
          rl_lasterr());
    CHECK(engine_pos(c3) == 1, "a rejected token moved the position to %d", engine_pos(c3));
    engine_ctx *small = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 4, .n_batch = 8, .kv = kv});
    CHECK(small && engine_prefill(small, TOKS, 6, tmp) != 0 && strstr(rl_lasterr(), "context is full"),
          "overflow: %s", rl_lasterr());
    engine_ctx_free(small);

out:
    free(a);
    free(b);
    free(ver);
    free(tmp);
    engine_ctx_free(c);
    engine_ctx_free(c2);
    engine_ctx_free(c3);
}
/* The contract with the default KV cache format. */
static inline void engine_contract(engine *e, float *step) { engine_contract_kv(e, NULL, step); }
#endif
