/* vram_slots.h — the VRAM expert tier's slot bookkeeping: which (layer, expert) lives in which
 * device slot, per-layer LRU, pinning, pre-gated prefetch and the counters; the replacement is
 * the slot policy the RAM cache shares (slot_policy.h, one pool per layer). Pure C (no CUDA):
 * the CUDA backend (vram_tier.c, driven by backend_cuda_forward.c) moves the bytes; this module
 * only decides, so it is tested in CI on hand-worked traces (tests/c/test_vram.c). Design:
 * docs/EXPERT_CACHE.md, "VRAM tier".
 *
 * Slots belong to a layer (a layer's slot size is its expert size: per-layer size classes);
 * slot s of layer l is the grouped matmul's "expert" s (expert_stride = the slot size).
 *
 * One layer of one forward (the inference thread; nothing here is thread-safe):
 *   vram_slots_begin(l, union, n, rows)   counts rows and prefetch precision for layer l
 *   for each batch of <= capacity(l) distinct experts of the union:
 *     vram_slots_prepare(l, ids, n, slot, miss)  hits pinned first, then each miss takes a free
 *                                                slot or the LRU tail (never a pinned one);
 *                                                returns the misses the caller must copy
 *     vram_slots_commit(l)  (copies issued)   or   vram_slots_abort(l)  (copy failed: the misses'
 *                                                slots become free and leave the index, hits go back
 *                                                to the LRU list; nothing half-filled stays valid)
 *     vram_slots_release(l)                  unpin, to the MRU end in selection order
 *   vram_slots_prefetch(l+1, predicted, n, ...)  plan copies of layer l+1's predicted experts that
 *                                                are not resident into free or LRU slots (never a
 *                                                pinned or a predicted one)
 * The state is a deterministic function of the call sequence. */
#ifndef RL_VRAM_SLOTS_H
#define RL_VRAM_SLOTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cache/slot_policy.h"

typedef struct vram_slots vram_slots;

typedef struct {
    uint64_t tokens;  /* rows seen (counted at layer 0) */
    uint64_t lookups; /* experts requested (union sizes) */
    uint64_t batches; /* prepare calls (> layers x forwards: a chunk ran in batches) */
    uint64_t hits, misses, evictions;
    uint64_t hits_prefetched;              /* hits on a slot a prefetch filled (first use) */
    uint64_t bytes_demand, bytes_prefetch; /* bytes copied host -> device */
    uint64_t pf_predicted;                 /* experts predicted for a layer */
    uint64_t pf_predicted_used;            /* ... that the layer then used */
    uint64_t pf_used_total;                /* experts used at layers that had a prediction */
    uint64_t pf_loads;                     /* prefetch copies planned */
    uint64_t pf_loads_wasted;              /* ... evicted before any use */
    uint64_t pf_no_slot;                   /* predictions not loaded: no evictable slot */
    uint64_t aborts;                       /* prepares rolled back (copy failure) */
} vram_stats;

/* slots[l] slots for layer l (0 = the layer has no slots), bytes[l] bytes copied per expert. */
vram_slots *vram_slots_new(int n_layer, int n_expert, const int *slots, const uint64_t *bytes);
void vram_slots_free(vram_slots *vs);
int vram_slots_capacity(const vram_slots *vs, int layer);

void vram_slots_begin(vram_slots *vs, int layer, const int32_t *ids, int n, int rows);
/* Streaming prompt chunks (RL_VRAM_STREAM=P, off by default until a GPU measures it): in a forward of
 * at least SLOT_SCAN_ROWS rows, once it has filled P slots of a layer, a miss refills the oldest of
 * those (unpinned) instead of the least recent slot, so the layer's other slots keep their experts
 * through the chunk (tools/tier_sim.py's stream policy; docs/EXPERT_CACHE.md, "Scans"). 0: off. */
void vram_slots_set_stream(vram_slots *vs, int pool);
/* ids: n distinct experts, n <= capacity. slot[i] = the slot of ids[i]; miss[0..ret) = the
 * indices i whose slot must be filled. Returns the number of misses, or -1 (rl_lasterr) on bad
 * input (n above the capacity, a repeated or out-of-range id, a prepare already open). */
int vram_slots_prepare(vram_slots *vs, int layer, const int32_t *ids, int n, int32_t *slot, int32_t *miss);
void vram_slots_commit(vram_slots *vs, int layer);
void vram_slots_abort(vram_slots *vs, int layer);
void vram_slots_release(vram_slots *vs, int layer);
/* ids: n predictions (repeats allowed). Fills slot_out/e_out (room for n) with the loads to do
 * and returns their count; records the predicted set for vram_slots_begin's precision. */
int vram_slots_prefetch(vram_slots *vs, int layer, const int32_t *ids, int n, int32_t *slot_out,
                        int32_t *e_out);
/* A planned prefetch copy failed: that slot leaves the index (free again). */
void vram_slots_drop(vram_slots *vs, int layer, int slot);

/* The expert that the last fill of (layer, slot) — by vram_slots_prepare or vram_slots_prefetch —
 * evicted, -1 if the slot was free (victim caching: the tier hands it back to the host tier before
 * its copy overwrites the slot). */
int vram_slots_evicted(const vram_slots *vs, int layer, int slot);
/* Slot of (layer, expert), or -1 if not resident. */
int vram_slots_lookup(const vram_slots *vs, int layer, int expert);
/* Expert in (layer, slot), or -1 if free. */
int vram_slots_key(const vram_slots *vs, int layer, int slot);
void vram_slots_get_stats(const vram_slots *vs, vram_stats *out);
void vram_slots_reset_stats(vram_slots *vs);
/* A few lines: hits, misses and bytes per token, prefetch precision, ... */
void vram_stats_print(const vram_stats *s, FILE *f);
/* Consistency of index, lists and pins (tests): 0 or -1 (rl_lasterr). */
int vram_slots_check(const vram_slots *vs);
#endif
