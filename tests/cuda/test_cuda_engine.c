/* test_cuda_engine.c — the engine's exactness contract (test_engine.c) on the CUDA backend,
 * with the committed tiny fixture, plus CUDA vs the CPU reference:
 *   - a multi-row verify gives each row logits bit-identical to single steps (decode graph);
 *   - per-row snapshots of a verify restore the exact state after that row;
 *   - chunked prefill ends with the logits of the last single step;
 *   - snapshot / restore / replay and reset are exact;
 *   - every step's logits within 1e-2 of the CPU reference (bound: tests/cuda/test_cuda_fixtures.py);
 *   - bad input is a clean error;
 * with each KV cache format (f32, f16: each against the CPU reference with the same format).
 * Without a GPU: prints "NAME: skipped: no CUDA device ..." and exits 77 (check.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "engine_contract.h"

int main(void) {
    const char *why = NULL;
    if (!backend_cuda.available(&why)) {
        return check_skip("test_cuda_engine", why ? why : "no CUDA device");
    }
    const char *model = "tests/fixtures/tiny-a.gguf";
    if (access(model, R_OK) != 0) {
        CHECK(0, "fixture %s is missing", model);
        return check_done("test_cuda_engine");
    }
    engine *e = engine_open(model, &(engine_params){.n_threads = 4, .backend = "cuda"});
    engine *ref = engine_open(model, &(engine_params){.n_threads = 4, .backend = "cpu", .reference = true});
    CHECK(e && ref, "open: %s", rl_lasterr());
    if (!e || !ref) return check_done("test_cuda_engine");
    CHECK(!strcmp(engine_backend_name(e), "cuda"), "backend %s", engine_backend_name(e));
    int V = engine_hparams(e)->n_vocab;
    float *step = malloc(sizeof(float) * V * N), *cpu = malloc(sizeof(float) * V * N);
    static const char *const kvs[2] = {"f32", "f16"};
    for (int f = 0; f < 2; f++) {
        engine_contract_kv(e, kvs[f], step); /* the single steps run the decode graph */

        /* every step's logits against the CPU reference with the same KV format */
        engine_ctx *cr = engine_ctx_new(ref, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16, .kv = kvs[f]});
        CHECK(cr != NULL, "ctx: %s", rl_lasterr());
        check_poison(cpu, (size_t)V * N);
        for (int i = 0; cr && i < N; i++) CHECK(engine_step(cr, TOKS[i], cpu + (size_t)i * V) == 0, "cpu step %d", i);
        double dmax = 0;
        for (size_t i = 0; i < (size_t)V * N; i++) {
            double d = !isfinite(step[i]) || !isfinite(cpu[i]) ? INFINITY : fabs((double)step[i] - cpu[i]);
            dmax = d > dmax ? d : dmax;
        }
        CHECK(dmax <= 1e-2, "KV %s: CUDA vs CPU reference: max |logit diff| %.3g", kvs[f], dmax);
        printf("  KV %s steps: CUDA vs CPU reference max |logit diff| %.3g over %d positions\n", kvs[f], dmax, N);
        engine_ctx_free(cr);
    }

    free(step);
    free(cpu);
    engine_close(e);
    engine_close(ref);
    return check_done("test_cuda_engine");
}
