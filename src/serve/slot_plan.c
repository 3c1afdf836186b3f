/* slot_plan.c — see slot_plan.h. */
#include "serve/slot_plan.h"

#include "base/common.h"

#include <stdio.h>

uint64_t slot_plan_host_bytes(const slot_cost *c) {
    return (uint64_t)(c->max_checkpoints + 1) * c->rec_bytes + c->ram_bytes + (c->device ? 0 : c->ctx_bytes);
}

uint64_t slot_plan_bytes(const slot_cost *c) {
    return slot_plan_host_bytes(c) + (c->device ? c->ctx_bytes : 0);
}

int slot_plan_fit(const slot_cost *c, uint64_t host_free, uint64_t dev_free) {
    uint64_t host = slot_plan_host_bytes(c);
    uint64_t n = host ? host_free / 5 * 4 / host + 1 : SLOT_PLAN_AUTO_MAX;
    if (c->device && c->ctx_bytes) {
        uint64_t nd = dev_free / 10 * 9 / c->ctx_bytes + 1;
        if (nd < n) n = nd;
    }
    return n < 1 ? 1 : n > SLOT_PLAN_AUTO_MAX ? SLOT_PLAN_AUTO_MAX : (int)n;
}

uint64_t slot_plan_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    uint64_t avail = (uint64_t)kb << 10;
    /* inside a control group the limit counts, less this process's own anonymous memory (its
     * file pages are the kernel's to reclaim, as MemAvailable counts them) */
    const uint64_t lim = rl_mem_limit(), anon = rl_anon_rss();
    if (lim) {
        const uint64_t left = lim > anon ? lim - anon : 0;
        if (!avail || left < avail) avail = left;
    }
    return avail;
}
