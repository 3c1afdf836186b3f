/* slot_plan.h — how many server slots fit in memory: the estimate `redlite serve --parallel auto`
 * uses (from what the first slot's context allocated) and `redlite info` prints (from the model's
 * hyperparameters, nothing loaded), so the two agree.
 *
 * A slot costs its context (KV cache for the whole context, recurrent state with its uncommitted
 * copy, scratch), its in-memory checkpoints and resume point (a recurrent state each) and one
 * RAM-tier entry (a whole context's exported state: KV rows + recurrent state). On a device backend
 * the context part is device memory, the rest host memory. */
#ifndef RL_SLOT_PLAN_H
#define RL_SLOT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#define SLOT_PLAN_AUTO_MAX 4 /* --parallel auto takes at most this many slots */

typedef struct {
    uint64_t ctx_bytes;  /* one context's allocation: KV cache, recurrent state (all copies), scratch */
    uint64_t rec_bytes;  /* one recurrent state of every DeltaNet layer (a checkpoint's cost) */
    uint64_t ram_bytes;  /* one whole-context exported state (the slot's share of the RAM tier) */
    int max_checkpoints; /* in-memory checkpoints per slot (--checkpoints) */
    bool device;         /* ctx_bytes is device memory */
} slot_cost;

/* Host memory one slot costs (its context's part too unless it is on a device). */
uint64_t slot_plan_host_bytes(const slot_cost *c);
/* Everything one slot costs, host and device. */
uint64_t slot_plan_bytes(const slot_cost *c);
/* Slots that fit: the first one (already allocated, or counted by the caller) plus as many more as
 * 80 % of host_free holds (host memory free beyond the first slot) and, on a device, as 90 % of
 * dev_free holds (device memory free beyond the first slot's context); at least 1, at most
 * SLOT_PLAN_AUTO_MAX. */
int slot_plan_fit(const slot_cost *c, uint64_t host_free, uint64_t dev_free);
#endif
