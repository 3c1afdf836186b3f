/* expert_cache_plan.c — the --cache-mib planner (see expert_cache.h); the session
 * (src/run/session.c) creates the cache it plans and installs it in its context.
 *
 * Planner rule (upstream's, docs/EXPERT_CACHE.md): full residency when
 *   experts + dense weights + per-context state (KV cache + DeltaNet states)
 * stay under EC_RAM_SHARE (70 %) of physical RAM; ours adds full residency in the page cache
 * (the experts served from the file mapping, preloaded) when that and a reserve stay under
 * EC_MAP_SHARE (90 %) and under what the kernel could give now (a file that nearly fills RAM: a
 * bounded cache there reads the misses from disk while llama.cpp's mmap holds it all); otherwise
 * a bounded cache whose budget is the 70 % share minus the dense weights, the state and a
 * working-memory reserve, clamped to [the minimum a layer needs, what every expert needs]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "cache/expert_cache.h"

#define MiB 1048576.0
#define GiB (1024.0 * MiB)
#define EC_RESERVE (512ull << 20) /* the least kept free: scratch, tokenizer, allocator slack */
#define EC_SLACK (256ull << 20)   /* kept free beyond the context's scratch */

uint64_t expert_cache_state_bytes(const q3n_model *m, int n_ctx) {
    const q3n_hparams *hp = &m->hp;
    uint64_t kv_pos = 0, dn = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->is_attn[il]) kv_pos += 2ull * hp->n_head_kv * hp->head_dim * sizeof(float);
        else dn += (q3n_conv_floats(hp) + q3n_ssm_floats(hp)) * sizeof(float);
    }
    return kv_pos * (uint64_t)(n_ctx > 0 ? n_ctx : 4096) + dn;
}

int expert_cache_plan(const q3n_model *m, uint64_t ram, uint64_t avail, int n_ctx, uint64_t work_bytes,
                      const char *spec, ec_io io, bool device, ec_plan *out) {
    memset(out, 0, sizeof *out);
    if (!ram) ram = rl_total_ram();
    /* slot sizes for the planner: O_DIRECT's (a little larger) unless buffered reads are forced */
    const bool direct = io != EC_IO_BUFFERED;
    uint64_t experts = m->bytes_experts, dense = device ? 0 : m->bytes_dense;
    uint64_t state = device ? 0 : expert_cache_state_bytes(m, n_ctx);
    if (device) work_bytes = 0;
    uint64_t need = experts + dense + state, limit = (uint64_t)(EC_RAM_SHARE * (double)ram);
    uint64_t minb = expert_cache_min_budget(m, direct), fullb = expert_cache_full_bytes(m, direct);
    int share = (int)(EC_RAM_SHARE * 100 + 0.5);
    if (!spec || !*spec || !strcmp(spec, "auto")) {
        if (need <= limit) {
            out->mode = EC_FULL;
            if (device)
                snprintf(
                    out->reason, sizeof out->reason,
                    "auto: experts %.1f GiB fit in %d%% of RAM (%.1f GiB); dense weights and state on the "
                    "GPU",
                    experts / GiB, share, ram / GiB);
            else
                snprintf(out->reason, sizeof out->reason,
                         "auto: experts %.1f + dense %.1f + state %.1f GiB fit in %d%% of RAM (%.1f GiB)",
                         experts / GiB, dense / GiB, state / GiB, share, ram / GiB);
            return 0;
        }
        uint64_t reserve = work_bytes + EC_SLACK > EC_RESERVE ? work_bytes + EC_SLACK : EC_RESERVE;
        /* not under a VRAM tier: there the RAM cache feeds DMA fills from page-locked slots */
        if (!device) {
            if (!avail) avail = rl_mem_available();
            const uint64_t map_limit = (uint64_t)(EC_MAP_SHARE * (double)ram);
            if (need + reserve <= map_limit && need + reserve <= avail) {
                out->mode = EC_FULL;
                out->mapped = true;
                snprintf(
                    out->reason, sizeof out->reason,
                    "auto: experts %.1f + dense %.1f + state %.1f GiB exceed %d%% of RAM (%.1f GiB) but fit "
                    "in %d%% of it and in what is free (%.1f GiB): the experts stay in the file's page "
                    "cache, preloaded, not copied; --cache-mib N bounds them instead",
                    experts / GiB, dense / GiB, state / GiB, share, ram / GiB,
                    (int)(EC_MAP_SHARE * 100 + 0.5), avail / GiB);
                return 0;
            }
        }
        out->mode = EC_BOUNDED;
        uint64_t fixed = dense + state + reserve;
        uint64_t b = limit > fixed ? limit - fixed : 0;
        const char *note = "";
        if (b < minb) {
            b = minb;
            note = " (raised to the minimum: memory is tight)";
        }
        if (b > fullb) b = fullb;
        out->budget = b;
        if (device)
            snprintf(out->reason, sizeof out->reason,
                     "auto: experts %.1f GiB exceed %d%% of RAM (%.1f GiB); cache = that share - %.1f GiB "
                     "reserve (dense weights and state on the GPU)%s",
                     experts / GiB, share, ram / GiB, reserve / GiB, note);
        else
            snprintf(
                out->reason, sizeof out->reason,
                "auto: experts %.1f + dense %.1f + state %.1f GiB exceed %d%% of RAM (%.1f GiB); cache = "
                "that share - dense - state - %.1f GiB reserve%s",
                experts / GiB, dense / GiB, state / GiB, share, ram / GiB, reserve / GiB, note);
        return 0;
    }
    if (!strcmp(spec, "full")) {
        out->mode = EC_FULL;
        snprintf(out->reason, sizeof out->reason, "requested; needs %.1f GiB%s", need / GiB,
                 need > limit ? ", more than 70% of RAM: the system may page" : "");
        return 0;
    }
    if (!strcmp(spec, "mmap")) {
        out->mode = EC_MMAP;
        snprintf(out->reason, sizeof out->reason, "requested: experts fault in from the mapping on demand");
        return 0;
    }
    char *end;
    double mib = strtod(spec, &end);
    if (end == spec || *end || !(mib > 0) || mib > 1e9)
        return rl_seterr("--cache-mib expects a number of MiB, 'auto', 'full' or 'mmap', got '%s'", spec);
    uint64_t b = (uint64_t)(mib * MiB);
    if (b < minb)
        return rl_seterr(
            "--cache-mib %s is below the minimum %.0f MiB for this model (one layer's %d experts plus a "
            "prefetch margin)",
            spec, minb / MiB + 0.5, m->hp.n_expert);
    out->mode = EC_BOUNDED;
    out->budget = b > fullb ? fullb : b;
    snprintf(out->reason, sizeof out->reason, "requested %s MiB%s", spec,
             b >= fullb ? " (holds every expert: nothing is evicted)" : "");
    return 0;
}
