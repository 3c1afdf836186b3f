/* test_cuda_mgpu.c — the CUDA backend without single-device assumptions (issue 48 item 6,
 * docs/MULTI_GPU.md): every entry point runs on its context's own device, whatever device is current
 * on the calling thread, and contexts on different devices live in one process.
 *   1. a context made on one thread and driven from another whose current device is another GPU
 *      (the last one; with one GPU simply another thread): prompt + steps give the logits of a context
 *      driven from the thread that made it, bit for bit, and its DeltaNet state / KV reads agree;
 *   2. with two or more GPUs: a context on device 1 (RL_CUDA_DEVICE=1) gives device 0's logits bit for
 *      bit (the same kernels on a second GPU of the same kind; its own upload and IQ tables there),
 *      and forward_rows over contexts of two devices answers 1 (the engine takes turns);
 *   3. RL_CUDA_DEVICE past the last device: ctx_new fails with one line naming the variable and the
 *      devices there are.
 * The fixture is tiny-a (IQ types: the device copies of the IQ grids are read). Without a GPU: exit 77. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "base/common.h"
#include "check.h"
#include "run/engine.h"

#define NCTX 256
#define NB 64 /* >= PROMPT: the prompt is one forward */
#define PROMPT 40
#define STEPS 8

static int32_t tok_of(int k, int V) { return (int32_t)((k * 131 + 11) % (V < 400 ? V : 400)); }

/* Prompt + STEPS single steps on b; out: (STEPS + 1) x V logits (the prompt's last row first). */
static int run_seq(backend_ctx *b, int V, float *out) {
    int32_t t[PROMPT];
    for (int i = 0; i < PROMPT; i++) t[i] = tok_of(i, V);
    if (backend_cuda.forward(b, t, PROMPT, 0, out, false, NULL, NULL)) return -1;
    for (int s = 0; s < STEPS; s++) {
        int32_t one = tok_of(PROMPT + s, V);
        if (backend_cuda.forward(b, &one, 1, PROMPT + s, out + (size_t)(s + 1) * V, false, NULL, NULL))
            return -1;
    }
    return 0;
}

typedef struct {
    backend_ctx *b;
    int V, dev; /* dev >= 0: make that device current on this thread first */
    float *out;
    int rc;
    char err[256];
} job;

static void *job_main(void *arg) {
    job *j = arg;
    if (j->dev >= 0 && cudaSetDevice(j->dev) != cudaSuccess) {
        j->rc = -1;
        snprintf(j->err, sizeof j->err, "cudaSetDevice(%d) failed", j->dev);
        return NULL;
    }
    j->rc = run_seq(j->b, j->V, j->out);
    if (j->rc) snprintf(j->err, sizeof j->err, "%s", rl_lasterr());
    return NULL;
}

int main(void) {
    const char *why = NULL;
    if (!backend_cuda.available(&why)) return check_skip("test_cuda_mgpu", why ? why : "no CUDA device");
    const char *model = "tests/fixtures/tiny-a.gguf";
    if (access(model, R_OK) != 0) {
        CHECK(0, "fixture %s is missing", model);
        return check_done("test_cuda_mgpu");
    }
    int n_dev = 0;
    CHECK(cudaGetDeviceCount(&n_dev) == cudaSuccess && n_dev >= 1, "device count");
    unsetenv("RL_CUDA_DEVICE");
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .backend = "cuda"});
    CHECK(e != NULL, "open %s: %s", model, rl_lasterr());
    if (!e) return check_done("test_cuda_mgpu");
    const q3n_model *m = engine_model(e);
    const int V = m->hp.n_vocab;
    const size_t n = (size_t)(STEPS + 1) * V;
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    CHECK(ref && got, "out of memory");
    if (!ref || !got) return check_done("test_cuda_mgpu");
    for (size_t i = 0; i < n; i++) ref[i] = got[i] = NAN;

    /* 1. another thread, another current device */
    backend_ctx *a = backend_cuda.ctx_new(m, NULL, NCTX, NB, BACKEND_KV_F16);
    backend_ctx *b = backend_cuda.ctx_new(m, NULL, NCTX, NB, BACKEND_KV_F16);
    CHECK(a && b, "contexts: %s", rl_lasterr());
    if (a && b) {
        CHECK(run_seq(a, V, ref) == 0, "reference run: %s", rl_lasterr());
        job j = {.b = b, .V = V, .dev = n_dev - 1, .out = got};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, job_main, &j) == 0, "thread");
        pthread_join(th, NULL);
        CHECK(j.rc == 0, "run from a thread with device %d current: %s", n_dev - 1, j.err);
        CHECK(memcmp(ref, got, sizeof(float) * n) == 0,
              "logits from another thread (device %d current) differ", n_dev - 1);
        /* the state reads from this thread after the other thread switched devices */
        const size_t kb = backend_cuda.kv_row_bytes(a) * (PROMPT + STEPS);
        uint8_t *k1 = malloc(kb), *v1 = malloc(kb), *k2 = malloc(kb), *v2 = malloc(kb);
        int il = 0;
        while (il < m->hp.n_layer && !m->hp.is_attn[il]) il++;
        if (k1 && v1 && k2 && v2 && il < m->hp.n_layer) {
            if (n_dev > 1) cudaSetDevice(n_dev - 1);
            CHECK(backend_cuda.kv_get(a, il, PROMPT + STEPS, k1, v1) == 0, "kv_get a: %s", rl_lasterr());
            CHECK(backend_cuda.kv_get(b, il, PROMPT + STEPS, k2, v2) == 0, "kv_get b: %s", rl_lasterr());
            CHECK(!memcmp(k1, k2, kb) && !memcmp(v1, v2, kb), "KV rows of layer %d differ", il);
        }
        free(k1), free(v1), free(k2), free(v2);
    }

    /* 2. a context on device 1 */
    if (n_dev >= 2 && a) {
        setenv("RL_CUDA_DEVICE", "1", 1);
        backend_ctx *c = backend_cuda.ctx_new(m, NULL, NCTX, NB, BACKEND_KV_F16);
        unsetenv("RL_CUDA_DEVICE");
        CHECK(c != NULL, "context on device 1: %s", rl_lasterr());
        if (c) {
            for (size_t i = 0; i < n; i++) got[i] = NAN;
            cudaSetDevice(0); /* the wrong device current: the entry points must switch */
            CHECK(run_seq(c, V, got) == 0, "device 1 run: %s", rl_lasterr());
            CHECK(memcmp(ref, got, sizeof(float) * n) == 0, "device 1 logits differ from device 0's");
            engine_mem mi = {0};
            backend_cuda.mem_info(c, &mi);
            CHECK(mi.dev_free_before_weights > mi.dev_free_after_weights,
                  "device 1 has its own upload (free before %llu, after %llu)",
                  (unsigned long long)mi.dev_free_before_weights,
                  (unsigned long long)mi.dev_free_after_weights);
            backend_ctx *cs[2] = {a, c};
            int32_t t[2] = {tok_of(1, V), tok_of(2, V)};
            int pos[2] = {PROMPT + STEPS, PROMPT + STEPS};
            CHECK(backend_cuda.forward_rows(cs, t, pos, 2, NULL, NULL) == 1,
                  "forward_rows over two devices: want 1 (turns)");
            backend_cuda.ctx_free(c);
        }
    } else {
        printf("  one CUDA device: part 2 (a context on device 1) not run\n");
    }

    /* 3. a device past the last */
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n_dev);
    setenv("RL_CUDA_DEVICE", nb, 1);
    backend_ctx *bad = backend_cuda.ctx_new(m, NULL, NCTX, NB, BACKEND_KV_F16);
    unsetenv("RL_CUDA_DEVICE");
    CHECK(bad == NULL && strstr(rl_lasterr(), "RL_CUDA_DEVICE=") && strstr(rl_lasterr(), "CUDA device"),
          "RL_CUDA_DEVICE=%d: want a refusal naming it, got %s", n_dev, bad ? "a context" : rl_lasterr());
    if (bad) backend_cuda.ctx_free(bad);

    if (a) backend_cuda.ctx_free(a);
    if (b) backend_cuda.ctx_free(b);
    free(ref);
    free(got);
    engine_close(e);
    return check_done("test_cuda_mgpu");
}
