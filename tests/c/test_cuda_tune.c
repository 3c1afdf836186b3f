/* test_cuda_tune.c — the CUDA backend's switches are parsed in one place (src/backend/cuda_tune.c,
 * runs without a GPU):
 *   - unset (or empty) variables give the defaults, the measured winners (cu_tuning_default);
 *   - each kind of value lands in its field: switches (0/1/on/off), choices (RL_CUDA_ATTN_PF=staged,
 *     RL_CUDA_ATTN=per-warp, RL_CUDA_MM_STAGE=iq|1|0), numbers, the RL_CUDA_FUSE list, the shared
 *     memory cap with its K suffix, the RL_VRAM_* test hooks, the emulated link's GB/s
 *     (RL_VRAM_LINK_GBS, a decimal);
 *   - a bad value is refused with one line naming the variable, the value and what it takes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backend/cuda_tune.h"
#include "base/common.h"

static const char *const VARS[] = {"RL_CUDA_PDL",
                                   "RL_CUDA_MMQ",
                                   "RL_CUDA_ATTN_PF",
                                   "RL_CUDA_ATTN",
                                   "RL_CUDA_MM_STAGE",
                                   "RL_CUDA_SMEM_LIMIT",
                                   "RL_CUDA_FUSE",
                                   "RL_CUDA_DEVICE",
                                   "RL_CUDA_SMALL_MOE",
                                   "RL_VRAM_SLOTS",
                                   "RL_VRAM_FAULT",
                                   "RL_VRAM_PREFETCH",
                                   "RL_VRAM_PIN",
                                   "RL_CUDA_SMALL_TT",
                                   "RL_CUDA_GRAPHS",
                                   "RL_VRAM_LINK_GBS",
                                   NULL};

static void clear(void) {
    for (int i = 0; VARS[i]; i++) unsetenv(VARS[i]);
}

/* cuda_tune_from_env with one variable set: 0 or -1 (rl_lasterr). */
static int parse1(const char *name, const char *value, cuda_tune *t) {
    clear();
    setenv(name, value, 1);
    const int rc = cuda_tune_from_env(t);
    unsetenv(name);
    return rc;
}

static void test_defaults(void) {
    clear();
    cuda_tune t, d = cuda_tune_default();
    CHECK(cuda_tune_from_env(&t) == 0, "%s", rl_lasterr());
    CHECK(!memcmp(&t, &d, sizeof t), "unset variables give the defaults");
    CHECK(t.k.pdl && t.k.mmq == 2 && t.k.mm_stage == 2 && t.k.smem_limit == 0 && t.graphs &&
              t.attn_pf_tiled && t.device == -1 && t.vram_pin == -1 && t.vram_prefetch && t.small_moe == 16 &&
              t.vram_link == 0.0,
          "defaults: the measured winners");
    setenv("RL_CUDA_MMQ", "", 1); /* empty: unset */
    CHECK(cuda_tune_from_env(&t) == 0 && t.k.mmq == 2, "an empty value is the default");
    unsetenv("RL_CUDA_MMQ");
}

static void test_values(void) {
    cuda_tune t;
    CHECK(parse1("RL_CUDA_PDL", "0", &t) == 0 && !t.k.pdl, "RL_CUDA_PDL=0");
    CHECK(parse1("RL_CUDA_GRAPHS", "off", &t) == 0 && !t.graphs, "RL_CUDA_GRAPHS=off");
    CHECK(parse1("RL_CUDA_MMQ", "1", &t) == 0 && t.k.mmq == 1, "RL_CUDA_MMQ=1");
    CHECK(parse1("RL_CUDA_ATTN_PF", "staged", &t) == 0 && !t.attn_pf_tiled && t.attn_pf_staged, "staged");
    CHECK(parse1("RL_CUDA_ATTN_PF", "unstaged", &t) == 0 && !t.attn_pf_tiled && !t.attn_pf_staged,
          "unstaged");
    CHECK(parse1("RL_CUDA_ATTN", "per-warp", &t) == 0 && t.attn_per_warp, "RL_CUDA_ATTN=per-warp");
    CHECK(parse1("RL_CUDA_MM_STAGE", "0", &t) == 0 && t.k.mm_stage == 0, "RL_CUDA_MM_STAGE=0");
    CHECK(parse1("RL_CUDA_MM_STAGE", "1", &t) == 0 && t.k.mm_stage == 1, "RL_CUDA_MM_STAGE=1");
    CHECK(parse1("RL_CUDA_SMALL_TT", "8", &t) == 0 && t.k.small_tt == 8, "RL_CUDA_SMALL_TT=8");
    CHECK(parse1("RL_CUDA_SMEM_LIMIT", "99K", &t) == 0 && t.k.smem_limit == 101376, "99K: %zu",
          t.k.smem_limit);
    CHECK(parse1("RL_CUDA_SMEM_LIMIT", "166912", &t) == 0 && t.k.smem_limit == 166912, "bytes");
    CHECK(parse1("RL_CUDA_SMEM_LIMIT", "163KiB", &t) == 0 && t.k.smem_limit == 166912, "KiB");
    CHECK(parse1("RL_CUDA_FUSE", "norm,router", &t) == 0 && t.fuse == (FUSE_NORM | FUSE_ROUTER), "fuse list");
    CHECK(parse1("RL_CUDA_FUSE", "all", &t) == 0 && t.fuse == (FUSE_COMBINE | FUSE_NORM | FUSE_ROUTER),
          "all");
    CHECK(parse1("RL_CUDA_DEVICE", "1", &t) == 0 && t.device == 1, "RL_CUDA_DEVICE=1");
    CHECK(parse1("RL_VRAM_SLOTS", "12", &t) == 0 && t.vram_slots == 12, "RL_VRAM_SLOTS=12");
    CHECK(parse1("RL_VRAM_FAULT", "7", &t) == 0 && t.vram_fault == 7, "RL_VRAM_FAULT=7");
    CHECK(parse1("RL_VRAM_PREFETCH", "0", &t) == 0 && !t.vram_prefetch, "RL_VRAM_PREFETCH=0");
    CHECK(parse1("RL_VRAM_PIN", "0", &t) == 0 && t.vram_pin == 0, "RL_VRAM_PIN=0");
    CHECK(parse1("RL_VRAM_LINK_GBS", "25", &t) == 0 && t.vram_link == 25.0, "RL_VRAM_LINK_GBS=25");
    CHECK(parse1("RL_VRAM_LINK_GBS", "12.5", &t) == 0 && t.vram_link == 12.5, "RL_VRAM_LINK_GBS=12.5");
    CHECK(parse1("RL_VRAM_LINK_GBS", "0", &t) == 0 && t.vram_link == 0.0, "RL_VRAM_LINK_GBS=0: off");
}

/* A bad value: -1 and one line naming the variable and the value. */
static void refused(const char *name, const char *value, const char *expect) {
    cuda_tune t;
    CHECK(parse1(name, value, &t) == -1, "%s=%s accepted", name, value);
    const char *e = rl_lasterr();
    CHECK(strstr(e, name) && strstr(e, value) && strstr(e, expect) && !strchr(e, '\n'), "%s=%s: '%s'", name,
          value, e);
}

static void test_refused(void) {
    refused("RL_CUDA_MMQ", "3", "expected one of 0|1|2");
    refused("RL_CUDA_PDL", "maybe", "expected one of");
    refused("RL_CUDA_ATTN_PF", "fast", "tiled|staged|unstaged");
    refused("RL_CUDA_SMEM_LIMIT", "1000", ">= 49152");
    refused("RL_CUDA_SMEM_LIMIT", "99M", ">= 49152");
    refused("RL_CUDA_FUSE", "norm,tails", "combine, norm, router");
    refused("RL_CUDA_SMALL_MOE", "17", "1..16");
    refused("RL_VRAM_FAULT", "x", "whole number");
    refused("RL_VRAM_LINK_GBS", "fast", "GB/s");
    refused("RL_VRAM_LINK_GBS", "-3", "GB/s");
    refused("RL_VRAM_LINK_GBS", "25GB", "GB/s");
    refused("RL_VRAM_LINK_GBS", "nan", "GB/s");
}

int main(void) {
    test_defaults();
    test_values();
    test_refused();
    clear();
    return check_done("test_cuda_tune");
}
