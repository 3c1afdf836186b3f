/* test_engine.c — the engine's exactness contract (engine_contract.h, shared with the CUDA test) on the
 * committed tiny fixture, reference and fast CPU paths:
 *   - a multi-row verify gives each row logits bit-identical to single steps;
 *   - a chunked prefill ends with the same logits and state as steps;
 *   - per-row snapshots of a verify restore the exact state after that row;
 *   - snapshot/restore and reset replay bit-identically;
 *   - bad input (token id outside the vocab, context overflow) is a clean error;
 * with each KV cache format (f32, f16); f16 logits stay within a bound of f32's (the half
 * rounding of K and V is the only difference) and an unknown format is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_contract.h"

static float *ref32; /* the reference path's f32-KV step logits (the fast path's noise floor) */

static void run(const char *model, bool reference) {
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .reference = reference});
    CHECK(e != NULL, "open: %s", rl_lasterr());
    if (!e) return;
    size_t VN = (size_t)engine_hparams(e)->n_vocab * N;
    float *step = malloc(sizeof(float) * VN), *step16 = malloc(sizeof(float) * VN);
    engine_contract_kv(e, "f32", step);
    engine_contract_kv(e, "f16", step16);
    /* f16 KV rounds each K/V element by at most 2^-11 relative. On the reference path that moves
     * these logits (|logit| <= 42) by ~2e-3; the bound 1e-2 catches a wrong layout or a missing
     * conversion (O(1) errors) and an f16 path that silently ran f32 (no difference at all). The
     * fast path quantises activations to 8 bits, so any perturbation can flip a rounding step: its
     * f16-vs-f32 difference is held to twice its own distance from the reference (its noise floor).
     * The figures on real contexts are in bench/results/2026-12-01-kv-f16.md. */
    double md = 0, floor = 0;
    for (size_t i = 0; i < VN; i++) {
        md = fmax(md, fabs((double)step[i] - step16[i]));
        if (!reference && ref32) floor = fmax(floor, fabs((double)step[i] - ref32[i]));
    }
    double bound = reference ? 1e-2 : fmax(1e-2, 2 * floor);
    printf("  %s: f16 vs f32 KV max |logit diff| %.3g (bound %.3g)\n", reference ? "reference" : "fast", md,
           bound);
    CHECK(md > 0 && md < bound, "%s: f16 vs f32 KV max |logit diff| %.3g (expected in (0, %.3g))",
          reference ? "reference" : "fast", md, bound);
    CHECK(engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 16, .kv = "q8"}) == NULL &&
              strstr(rl_lasterr(), "expected f32 or f16"),
          "unknown KV format: %s", rl_lasterr());
    if (reference) ref32 = step;
    else free(step);
    free(step16);
    engine_close(e);
}

int main(void) {
    const char *model = "tests/fixtures/tiny-a.gguf";
    if (access(model, R_OK) != 0) {
        CHECK(0, "fixture %s is missing", model);
        return check_done("test_engine");
    }
    run(model, true);  /* the double-precision reference */
    run(model, false); /* the fast SIMD path: same contract */
    free(ref32);
    return check_done("test_engine");
}
