/* slot_plan.c — see slot_plan.h. */
#include "serve/slot_plan.h"

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
