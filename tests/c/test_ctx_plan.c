/* test_ctx_plan.c — the default context plan of `redlite serve` (run/ctx_plan.h): the trained
 * length when the KV cache fits, else the most that fits in steps of 1024, never below 4096;
 * the experts keep full residency first on the CPU; device memory on a GPU. And the memory every
 * planner starts from: a control group's limit (v2 memory.max, v1 memory.limit_in_bytes, the
 * smallest along the group's ancestors) read from a made-up hierarchy (rl_cgroup_limit). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "run/ctx_plan.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static void put(const char *dir, const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "write %s", path);
    if (f) fputs(text, f), fclose(f);
}

static void test_cgroup(void) {
    char root[] = "/tmp/rl_cgroup_XXXXXX", d[600];
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    const char *dirs[] = {"a", "a/b", "a/b/c", "memory", "memory/j", "memory/j/k"};
    for (int i = 0; i < 6; i++) snprintf(d, sizeof d, "%s/%s", root, dirs[i]), mkdir(d, 0700);
    /* v2: the group says max, its parent 24 GiB, the grandparent 32 GiB, the root none */
    put(root, "a/b/c/memory.max", "max\n");
    put(root, "a/b/memory.max", "25769803776\n");
    put(root, "a/memory.max", "34359738368\n");
    put(root, "self2", "0::/a/b/c\n");
    snprintf(d, sizeof d, "%s/self2", root);
    CHECK(rl_cgroup_limit(root, d) == 25769803776ull, "v2: the smallest ancestor's limit");
    /* the namespace root ("/") */
    put(root, "self2r", "0::/\n");
    snprintf(d, sizeof d, "%s/self2r", root);
    CHECK(rl_cgroup_limit(root, d) == 0, "v2 root without memory.max: no limit");
    put(root, "memory.max", "8589934592\n");
    CHECK(rl_cgroup_limit(root, d) == 8589934592ull, "v2 root's own memory.max");
    /* v1 (hybrid: a v2 line with no limit beside the memory controller's): "no limit" is 2^63 - 4096 */
    put(root, "memory/j/k/memory.limit_in_bytes", "9223372036854771712\n");
    put(root, "memory/j/memory.limit_in_bytes", "17179869184\n");
    put(root, "self1", "4:cpu,cpuacct:/x\n3:memory:/j/k\n0::/\n");
    snprintf(d, sizeof d, "%s/memory.max", root);
    CHECK(remove(d) == 0, "drop the v2 root limit set above");
    snprintf(d, sizeof d, "%s/self1", root);
    CHECK(rl_cgroup_limit(root, d) == 17179869184ull, "v1: the memory controller's ancestor limit");
    /* a group path that is not there (a namespace shows the host's path): the root still counts */
    put(root, "memory/memory.limit_in_bytes", "4294967296\n");
    put(root, "self1m", "3:memory:/gone/away\n");
    snprintf(d, sizeof d, "%s/self1m", root);
    CHECK(rl_cgroup_limit(root, d) == 4294967296ull, "v1: a missing group falls back to the root");
    snprintf(d, sizeof d, "%s/none", root);
    CHECK(rl_cgroup_limit(root, d) == 0, "no /proc/self/cgroup: no limit");
    /* the process's own figure is never above the machine's RAM */
    CHECK(rl_total_ram() > 0 && rl_total_ram() <= rl_phys_ram(), "rl_total_ram <= physical RAM");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "clean up");
}

int main(void) {
    test_cgroup();
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
