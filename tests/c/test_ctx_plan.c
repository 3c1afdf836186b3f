/* test_ctx_plan.c — the default context plan of `redlite serve` (run/ctx_plan.h): the trained
 * length when the KV cache fits, else the most that fits in steps of 1024, never below 4096;
 * the experts keep full residency first on the CPU; device memory on a GPU. */
#include "check.h"
#include "run/ctx_plan.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

int main(void) {
    ctx_plan p;
    /* the 80B CF2 geometry: 24 KiB/position f16, 151 MiB state, dense 1.39 GiB, experts 16.59 GiB */
    ctx_plan_in cf2 = {.n_ctx_train = 262144,
                       .kv_per_pos = 24 * 1024,
                       .state = 151 * MiB,
                       .dense = (uint64_t)(1.39 * GiB),
                       .experts = (uint64_t)(16.59 * GiB)};
    /* 64 GiB RAM: everything fits, the trained length */
    cf2.mem = 64 * GiB;
    CHECK(ctx_plan_choose(&cf2, &p) == 0 && p.n_ctx == 262144 && !p.limited, "%d %s", p.n_ctx, p.reason);
    CHECK(strstr(p.reason, "trained length") != NULL, "%s", p.reason);
    /* 32 GiB: the experts stay resident, the context takes what is left (0.7*32 - 1.39 - 16.59 -
     * 0.147 - 1 = 3.27 GiB = 142,9xx positions -> 142336) */
    cf2.mem = 32 * GiB;
    CHECK(ctx_plan_choose(&cf2, &p) == 0 && p.limited, "%d %s", p.n_ctx, p.reason);
    double left = 0.7 * 32 * GiB - (double)cf2.dense - (double)cf2.experts - (double)cf2.state - (double)GiB;
    int want = (int)(left / (24 * 1024)) / 1024 * 1024;
    CHECK(p.n_ctx == want && p.n_ctx % 1024 == 0, "%d want %d", p.n_ctx, want);
    CHECK(strstr(p.reason, "142336") || want != 142336, "%s", p.reason);
    /* more RAM never gives a shorter context */
    int prev = 0, mono = 1;
    for (uint64_t mib = 2048; mib <= 131072; mib += 64) {
        cf2.mem = mib * MiB;
        ctx_plan_choose(&cf2, &p);
        mono &= p.n_ctx >= prev && p.n_ctx >= 4096 && p.n_ctx <= 262144;
        prev = p.n_ctx;
    }
    CHECK(mono, "the context grows with RAM and stays in [4096, trained]");
    /* 16 GiB: the experts cannot stay resident; the context gets 32768 positions (a quarter of
     * what the dense weights leave holds them), the expert cache the rest */
    cf2.mem = 16 * GiB;
    CHECK(ctx_plan_choose(&cf2, &p) == 0 && p.limited && p.n_ctx == 32768 && strstr(p.reason, "quarter"),
          "%d %s", p.n_ctx, p.reason);
    /* 6 GiB: a quarter of (0.7*6 - 1.39 - 0.147 - 1) GiB */
    cf2.mem = 6 * GiB;
    double q = (0.7 * 6 * GiB - (double)cf2.dense - (double)cf2.state - (double)GiB) / 4;
    CHECK(ctx_plan_choose(&cf2, &p) == 0 && p.n_ctx == (int)(q / (24 * 1024)) / 1024 * 1024 &&
              p.n_ctx < 32768,
          "%d", p.n_ctx);
    /* 3 GiB: nothing to spare, the floor */
    cf2.mem = 3 * GiB;
    CHECK(ctx_plan_choose(&cf2, &p) == 0 && p.n_ctx == 4096, "%d", p.n_ctx);
    /* a model trained shorter than the floor keeps its length */
    ctx_plan_in tiny = {.n_ctx_train = 2048, .kv_per_pos = 1536, .mem = 1 * GiB};
    CHECK(ctx_plan_choose(&tiny, &p) == 0 && p.n_ctx == 2048, "%d", p.n_ctx);
    /* unknown trained length: capped */
    tiny.n_ctx_train = 0;
    tiny.mem = 64 * GiB;
    CHECK(ctx_plan_choose(&tiny, &p) == 0 && p.n_ctx == 32768 && strstr(p.reason, "unknown"), "%d %s",
          p.n_ctx, p.reason);
    /* device: 90% of free device memory after the weights, minus state and reserve */
    ctx_plan_in dev = {
        .n_ctx_train = 262144, .kv_per_pos = 24 * 1024, .state = 400 * MiB, .device = true, .mem = 20 * GiB};
    CHECK(ctx_plan_choose(&dev, &p) == 0 && p.n_ctx == 262144, "%d", p.n_ctx);
    dev.mem = 5 * GiB;
    double db = 0.9 * 5 * GiB - 400.0 * MiB - (double)GiB;
    CHECK(ctx_plan_choose(&dev, &p) == 0 && p.n_ctx == (int)(db / (24 * 1024)) / 1024 * 1024 && p.limited,
          "%d", p.n_ctx);
    CHECK(strstr(p.reason, "device") != NULL, "%s", p.reason);
    /* no per-position cost: an error, not a division by zero */
    ctx_plan_in bad = {.n_ctx_train = 4096};
    CHECK(ctx_plan_choose(&bad, &p) == -1, "kv_per_pos 0 refused");
    return check_done("test_ctx_plan");
}
