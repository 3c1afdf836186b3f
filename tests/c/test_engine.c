/* test_engine.c — the engine's exactness contract (engine_contract.h, shared with the CUDA test) on the
 * committed tiny fixture, reference and fast CPU paths:
 *   - a multi-row verify gives each row logits bit-identical to single steps;
 *   - a chunked prefill ends with the same logits and state as steps;
 *   - per-row snapshots of a verify restore the exact state after that row;
 *   - snapshot/restore and reset replay bit-identically;
 *   - bad input (token id outside the vocab, context overflow) is a clean error. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine_contract.h"

static void run(const char *model, bool reference) {
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .reference = reference});
    CHECK(e != NULL, "open: %s", rl_lasterr());
    if (!e) return;
    float *step = malloc(sizeof(float) * engine_hparams(e)->n_vocab * N);
    engine_contract(e, step);
    free(step);
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
    return check_done("test_engine");
}
