/* cuda_tune.c — see cuda_tune.h. The one reader of the RL_CUDA_* and RL_VRAM_* variables. */
#include "backend/cuda_tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

cuda_tune cuda_tune_default(void) {
    return (cuda_tune){.k = cu_tuning_default(),
                       .device = -1,
                       .graphs = true,
                       .rows = true,
                       .rows_graph = true,
                       .rows_batch = true,
                       .attn_pf_staged = true,
                       .attn_pf_tiled = true,
                       .attn_tc = true,
                       .attn_db = true,
                       .small_moe = 16, /* CU_SMALL_T (cuda_ops.h) */
                       .dn_split = true,
                       .vram_pin = -1,
                       .vram_prefetch = true,
                       .vram_overlap = true,
                       .vram_graph = true,
                       .vram_warm = true};
}

/* The value of `name` when set and not empty, else NULL. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* One of the words of `choices` ("a|b|c") into *out (its index); 0 when unset; -1 with rl_lasterr. */
static int env_word(const char *name, const char *choices, int *out) {
    const char *v = env(name);
    if (!v) return 0;
    int i = 0;
    for (const char *p = choices;; i++) {
        const char *e = strchr(p, '|');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (strlen(v) == n && !strncmp(v, p, n)) {
            *out = i;
            return 0;
        }
        if (!e) break;
        p = e + 1;
    }
    return rl_seterr("%s=%s: expected one of %s", name, v, choices);
}

/* A switch: 1/on/yes/true or 0/off/no/false into *out; -1 with rl_lasterr. */
static int env_bool(const char *name, bool *out) {
    int i = -1;
    if (env_word(name, "0|1|off|on|no|yes|false|true", &i)) return -1;
    if (i >= 0) *out = i % 2 == 1;
    return 0;
}

/* A whole number in [lo, hi] into *out; -1 with rl_lasterr. */
static int env_int(const char *name, long lo, long hi, int *out) {
    const char *v = env(name);
    if (!v) return 0;
    char *end;
    const long n = strtol(v, &end, 10);
    if (end == v || *end || n < lo || n > hi)
        return rl_seterr("%s=%s: expected a whole number %ld..%ld", name, v, lo, hi);
    *out = (int)n;
    return 0;
}

/* One of the numbers of `choices` ("1|2") into *out; -1 with rl_lasterr. */
static int env_num(const char *name, const char *choices, int *out) {
    int i = -1;
    if (env_word(name, choices, &i)) return -1;
    if (i >= 0) *out = atoi(env(name));
    return 0;
}

/* RL_CUDA_SMEM_LIMIT: bytes (a K suffix: KiB), at least 48 KiB (what every GPU gives a block). */
static int env_smem(size_t *out) {
    const char *v = env("RL_CUDA_SMEM_LIMIT");
    if (!v) return 0;
    char *end;
    const double n = strtod(v, &end);
    const double b = n * (!strcmp(end, "K") || !strcmp(end, "KiB") ? 1024.0 : 1.0);
    if (end == v || (*end && strcmp(end, "K") && strcmp(end, "KiB")) || !(b >= 49152.0) || b > 1e9)
        return rl_seterr(
            "RL_CUDA_SMEM_LIMIT=%s: expected bytes of shared memory per block >= 49152 (48 KiB), "
            "e.g. 101376 or 99K",
            v);
    *out = (size_t)b;
    return 0;
}

/* RL_CUDA_FUSE: 0|off (none, the default: on the H200 no tail made the decode graph faster — combine
 * 0 %, norm -0.3 %, router -1 %, bench/results/2026-12-01-cuda-decode-h200.md; with the lane GEMVs all
 * -11 %, router -4 %, combine+norm -8 %: bench/results/2026-12-03-cuda-session17-h200.md), 1|all every
 * tail, or a comma list of combine, norm, router. */
static int env_fuse(int *out) {
    const char *v = env("RL_CUDA_FUSE");
    if (!v) return 0;
    if (!strcmp(v, "0") || !strcmp(v, "off")) *out = 0;
    else if (!strcmp(v, "1") || !strcmp(v, "all")) *out = FUSE_COMBINE | FUSE_NORM | FUSE_ROUTER;
    else {
        *out = 0;
        for (const char *p = v; *p;) {
            const size_t n = strcspn(p, ",");
            if (n == 7 && !strncmp(p, "combine", n)) *out |= FUSE_COMBINE;
            else if (n == 4 && !strncmp(p, "norm", n)) *out |= FUSE_NORM;
            else if (n == 6 && !strncmp(p, "router", n)) *out |= FUSE_ROUTER;
            else
                return rl_seterr("RL_CUDA_FUSE=%s: expected 0, all, or a comma list of combine, norm, router",
                                 v);
            p += n + (p[n] == ',');
        }
    }
    return 0;
}

/* The kernels' switches (cu_tuning). */
static int kern_from_env(cu_tuning *k) {
    int i;
    if (env_bool("RL_CUDA_PDL", &k->pdl) || env_num("RL_CUDA_MMQ", "0|1|2", &k->mmq) ||
        env_bool("RL_CUDA_MMQ_LANE", &k->mmq_lane) || env_bool("RL_CUDA_MMQ_ST", &k->mmq_st) ||
        env_bool("RL_CUDA_MMQ_SM", &k->mmq_sm) || env_num("RL_CUDA_MMQ_NT", "1|2", &k->mmq_nt) ||
        env_bool("RL_CUDA_MMQ_TC", &k->mmq_tc) || env_num("RL_CUDA_MMQ_TC_TT", "16|32", &k->mmq_tc_tt) ||
        env_num("RL_CUDA_SMALL_TT", "2|4|8", &k->small_tt) ||
        env_int("RL_CUDA_MMQB_ROWS", 0, 1 << 20, &k->mmqb_rows) || env_smem(&k->smem_limit))
        return -1;
    i = -1;
    if (env_word("RL_CUDA_MM_STAGE", "0|1|iq", &i)) return -1;
    if (i >= 0) k->mm_stage = i;
    return 0;
}

int cuda_tune_from_env(cuda_tune *t) {
    *t = cuda_tune_default();
    int i;
    if (kern_from_env(&t->k) || env_int("RL_CUDA_DEVICE", 0, 1023, &t->device) ||
        env_bool("RL_CUDA_VERBOSE", &t->verbose) || env_bool("RL_CUDA_GRAPHS", &t->graphs) ||
        env_bool("RL_CUDA_ROWS", &t->rows) || env_bool("RL_CUDA_ROWS_GRAPH", &t->rows_graph) ||
        env_bool("RL_CUDA_ROWS_BATCH", &t->rows_batch) || env_bool("RL_CUDA_ATTN_TC", &t->attn_tc) ||
        env_bool("RL_CUDA_ATTN_DB", &t->attn_db) || env_fuse(&t->fuse) ||
        env_int("RL_CUDA_SMALL_MOE", 1, 16, &t->small_moe) || env_bool("RL_CUDA_DN_SPLIT", &t->dn_split) ||
        env_int("RL_VRAM_SLOTS", 1, 1 << 20, &t->vram_slots) ||
        env_bool("RL_VRAM_PREFETCH", &t->vram_prefetch) || env_bool("RL_VRAM_OVERLAP", &t->vram_overlap) ||
        env_bool("RL_VRAM_GRAPH", &t->vram_graph) ||
        env_bool("RL_VRAM_GRAPH_VERIFY", &t->vram_graph_verify) || env_bool("RL_VRAM_WARM", &t->vram_warm) ||
        env_int("RL_VRAM_GRAPH_MIB", 1, 1 << 20, &t->vram_graph_mib) ||
        env_int("RL_VRAM_STREAM", 0, 1 << 20, &t->vram_stream))
        return -1;
    const char *v = env("RL_VRAM_FAULT");
    if (v) {
        char *end;
        t->vram_fault = strtoull(v, &end, 10);
        if (*end || *v == '-') return rl_seterr("RL_VRAM_FAULT=%s: expected a whole number (0: off)", v);
    }
    if ((v = env("RL_VRAM_LINK_GBS"))) {
        char *end;
        t->vram_link = strtod(v, &end);
        if (end == v || *end || !(t->vram_link >= 0 && t->vram_link <= 10000))
            return rl_seterr("RL_VRAM_LINK_GBS=%s: expected GB/s of host->device copies, 0..10000 "
                             "(e.g. 25 for PCIe 4.0 x16; 0: no cap)",
                             v);
    }
    i = -1;
    if (env_word("RL_CUDA_ATTN", "grouped|per-warp", &i)) return -1;
    if (i >= 0) t->attn_per_warp = i == 1;
    i = -1;
    if (env_word("RL_CUDA_ATTN_PF", "tiled|staged|unstaged", &i)) return -1;
    if (i >= 0) {
        t->attn_pf_tiled = i == 0;
        t->attn_pf_staged = i != 2;
    }
    i = -1;
    if (env_word("RL_VRAM_PIN", "0|1", &i)) return -1;
    if (i >= 0) t->vram_pin = i;
    return 0;
}
