/* test_runtime.c — the CPU kernels' state belongs to whoever runs them (kern.h kern_cfg, ops.h
 * ops_rt), not to the process:
 *   - two engines open in one process at different kernel levels (engine_params.tuning) each run
 *     their own level: interleaved steps give each engine the logits it gives when it runs alone,
 *     and each reports its own level;
 *   - products on pools carrying runtimes of different levels equal the kernels of that level,
 *     called directly with a configuration of that level; a pool with no runtime runs the default;
 *   - the profile and the shadow check of one runtime count only its own products;
 *   - tuning_from_env refuses an unknown value with one line naming the variable. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "kern/ops.h"
#include "gguf/quant.h"
#include "run/engine.h"

#define NTOK 6
static const int32_t toks[NTOK] = {1, 17, 42, 5, 99, 3};

static engine *open_at(const char *model, int level) {
    rl_tuning t = tuning_default();
    t.kern.level = level;
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .tuning = &t});
    CHECK(e != NULL, "open at %s: %s", kern_level_name(level), rl_lasterr());
    return e;
}

/* Logits of NTOK single steps of e alone (a fresh context). */
static float *solo(engine *e) {
    const size_t V = (size_t)engine_hparams(e)->n_vocab;
    float *out = malloc(sizeof(float) * V * NTOK);
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 16});
    CHECK(c != NULL, "context: %s", rl_lasterr());
    for (int i = 0; c && i < NTOK; i++)
        CHECK(engine_step(c, toks[i], out + V * i) == 0, "step: %s", rl_lasterr());
    engine_ctx_free(c);
    return out;
}

static void test_two_engines(const char *model) {
    const int hi = kern_best_level();
    engine *a = open_at(model, KERN_SCALAR), *b = open_at(model, hi);
    if (!a || !b) {
        engine_close(a);
        engine_close(b);
        return;
    }
    CHECK(!strcmp(engine_cpu_level(a), "scalar"), "engine a runs %s, asked for scalar", engine_cpu_level(a));
    CHECK(!strcmp(engine_cpu_level(b), kern_level_name(hi)), "engine b runs %s, asked for %s",
          engine_cpu_level(b), kern_level_name(hi));
    const size_t V = (size_t)engine_hparams(a)->n_vocab;
    float *sa = solo(a), *sb = solo(b);
    float *la = malloc(sizeof(float) * V * NTOK), *lb = malloc(sizeof(float) * V * NTOK);
    engine_ctx *ca = engine_ctx_new(a, &(engine_ctx_params){.n_ctx = 16});
    engine_ctx *cb = engine_ctx_new(b, &(engine_ctx_params){.n_ctx = 16});
    for (int i = 0; ca && cb && i < NTOK; i++) { /* interleaved: a step of one between steps of the other */
        CHECK(engine_step(ca, toks[i], la + V * i) == 0, "a step: %s", rl_lasterr());
        CHECK(engine_step(cb, toks[i], lb + V * i) == 0, "b step: %s", rl_lasterr());
    }
    CHECK(!memcmp(la, sa, sizeof(float) * V * NTOK),
          "engine a (scalar) beside engine b: logits differ from a alone");
    CHECK(!memcmp(lb, sb, sizeof(float) * V * NTOK),
          "engine b (%s) beside engine a: logits differ from b alone", kern_level_name(hi));
    /* the levels round the 8-bit activations' float sums differently (Q8_0 lanes, the vector table):
     * on a CPU with SIMD the two engines' logits differ, so the check above is not vacuous */
    if (hi > KERN_SCALAR)
        CHECK(memcmp(la, lb, sizeof(float) * V * NTOK) != 0, "scalar and %s engines gave identical logits",
              kern_level_name(hi));
    printf("  two engines (scalar, %s) interleaved: each equals its solo run\n", kern_level_name(hi));
    engine_ctx_free(ca);
    engine_ctx_free(cb);
    free(sa), free(sb), free(la), free(lb);
    engine_close(a);
    engine_close(b);
}

/* ops_matmul_fast on pools carrying runtimes of each supported level (and on one without) equals
 * kern_matvec with a configuration of that level, bit for bit. F32 weights: the lane-summed type,
 * whose rounding differs between levels. */
static void test_pool_runtimes(void) {
    enum { NI = 256, NO = 40 };
    rl_rng r;
    rl_rng_seed(&r, 11);
    float *w = malloc(sizeof(float) * NI * NO), x[NI], y[NO], ref[NO];
    for (int i = 0; i < NI * NO; i++) w[i] = rl_rng_f32(&r) - 0.5f;
    for (int i = 0; i < NI; i++) x[i] = rl_rng_f32(&r) - 0.5f;
    ops_mat W = {"w", QT_F32, NI, NO, sizeof(float) * NI, (const uint8_t *)w};
    void *actq = rl_aligned_alloc(ops_actq_bytes(&W, 1), "actq");
    pool *p = pool_new(2);
    for (int level = 0; level < KERN_NLEVELS; level++) {
        if (!kern_level_supported(level)) continue;
        kern_opts o = kern_opts_default();
        o.level = level;
        ops_rt *rt = ops_rt_new(&o, -1);
        ops_rt_attach(rt, p);
        CHECK(ops_kern(p)->level == level, "pool runs level %d, attached %d", ops_kern(p)->level, level);
        ops_matmul_fast(p, &W, x, 1, y, actq);
        kern_cfg c;
        kern_cfg_init(&c, &o);
        kern_quantize_act(&c, QT_F32, x, NI, actq);
        kern_matvec(&c, QT_F32, w, NO, NI, actq, ref);
        CHECK(!memcmp(y, ref, sizeof y), "pool with a %s runtime: product differs from the %s kernel",
              kern_level_name(level), kern_level_name(level));
        ops_rt_attach(NULL, p);
        ops_rt_free(rt);
    }
    CHECK(ops_kern(p) == kern_cfg_default(), "a pool without a runtime runs the default configuration");
    ops_matmul_fast(p, &W, x, 1, y, actq);
    kern_quantize_act(NULL, QT_F32, x, NI, actq);
    kern_matvec(NULL, QT_F32, w, NO, NI, actq, ref);
    CHECK(!memcmp(y, ref, sizeof y), "pool without a runtime: product differs from the default kernels");

    /* profile and check: per runtime. rt1's check sees its products, rt2's none. */
    pool *p2 = pool_new(1);
    ops_rt *rt1 = ops_rt_new(NULL, -1), *rt2 = ops_rt_new(NULL, -1);
    ops_rt_attach(rt1, p);
    ops_rt_attach(rt2, p2);
    ops_fast_check_enable(rt1, true);
    ops_matmul_fast(p, &W, x, 1, y, actq);
    ops_matmul_fast(p2, &W, x, 1, y, actq);
    long checked1, bad1, checked2, bad2;
    double worst;
    ops_fast_check_report(rt1, &checked1, &bad1, &worst);
    ops_fast_check_report(rt2, &checked2, &bad2, &worst);
    CHECK(checked1 == NO && bad1 == 0 && checked2 == 0,
          "shadow check: rt1 %ld checked (%ld bad), rt2 %ld (want %d, 0, 0)", checked1, bad1, checked2, NO);
    for (int k = 0; k < 2; k++) { /* k = 0: a product on rt1's pool alone; 1: one on rt2's too */
        ops_prof_begin(rt2);
        ops_matmul_fast(p, &W, x, 1, y, actq);
        if (k) ops_matmul_fast(p2, &W, x, 1, y, actq);
        ops_prof_end(rt2);
        char *txt = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&txt, &len);
        ops_prof_print(rt2, f, "t", 1);
        fclose(f);
        CHECK(txt && (strstr(txt, "other products") != NULL) == k, "rt2's profile, %s:\n%s",
              k ? "its own product missing" : "counted a product run on rt1's pool", txt);
        free(txt);
    }
    ops_rt_attach(NULL, p);
    ops_rt_attach(NULL, p2);
    ops_rt_free(rt1);
    ops_rt_free(rt2);
    pool_free(p2);
    pool_free(p);
    free(actq);
    free(w);
}

static void test_env(void) {
    rl_tuning t;
    setenv("RL_KERN", "avx3", 1);
    CHECK(tuning_from_env(&t) == -1 && strstr(rl_lasterr(), "RL_KERN=avx3"), "bad RL_KERN: %s", rl_lasterr());
    setenv("RL_KERN", "avx2", 1);
    setenv("RL_KERN_AMX_ROWS", "-3", 1);
    CHECK(tuning_from_env(&t) == -1 && strstr(rl_lasterr(), "RL_KERN_AMX_ROWS=-3"), "bad rows: %s",
          rl_lasterr());
    setenv("RL_KERN_AMX_ROWS", "64", 1);
    setenv("RL_KERN_MM", "256", 1);
    CHECK(tuning_from_env(&t) == 0 && t.kern.level == KERN_AVX2 && t.kern.amx_rows == 64 && !t.kern.mm512,
          "RL_KERN=avx2 RL_KERN_AMX_ROWS=64 RL_KERN_MM=256 parsed");
    unsetenv("RL_KERN");
    unsetenv("RL_KERN_AMX_ROWS");
    unsetenv("RL_KERN_MM");
    setenv("RL_CACHE_DIRECT", "2", 1);
    CHECK(tuning_from_env(&t) == -1 && strstr(rl_lasterr(), "RL_CACHE_DIRECT=2"), "bad RL_CACHE_DIRECT: %s",
          rl_lasterr());
    setenv("RL_CACHE_DIRECT", "0", 1);
    setenv("RL_CACHE_IO_THREADS", "6", 1);
    setenv("RL_CACHE_FAULT", "eio@3", 1);
    CHECK(tuning_from_env(&t) == 0 && t.cache.io == EC_IO_BUFFERED && t.cache.io_threads == 6 &&
              t.cache.fault && !strcmp(t.cache.fault, "eio@3"),
          "RL_CACHE_DIRECT=0 RL_CACHE_IO_THREADS=6 RL_CACHE_FAULT=eio@3 parsed");
    unsetenv("RL_CACHE_DIRECT");
    unsetenv("RL_CACHE_IO_THREADS");
    unsetenv("RL_CACHE_FAULT");
    const rl_tuning d = tuning_default();
    CHECK(tuning_from_env(&t) == 0 && t.kern.level == d.kern.level && t.kern.mm512 == d.kern.mm512 &&
              t.kern.amx == d.kern.amx && t.kern.amx_rows == 0 && t.kern.iq_mv == 0 && t.vec_level == -1 &&
              t.cache.io == EC_IO_AUTO && t.cache.io_threads == 0 && !t.cache.no_prefetch && !t.cache.fault &&
              !t.cache.trace_path,
          "no variables: the defaults");
}

int main(void) {
    const char *model = "tests/fixtures/tiny-a.gguf";
    test_pool_runtimes();
    test_env();
    if (access(model, R_OK) != 0) CHECK(0, "fixture %s is missing", model);
    else test_two_engines(model);
    return check_done("test_runtime");
}
