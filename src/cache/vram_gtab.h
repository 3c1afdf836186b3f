/* vram_gtab.h — the VRAM tier inside the decode graph: per-expert pointer tables on the device.
 *
 * Why: the tier's own path (vram_tier.h) reads every layer's router choice back to the host before
 * the expert launches (to fill slots), so a decode step with the tier is one host synchronisation per
 * layer and no CUDA graph; past ~12 GiB that, not the link, bounds its decode (docs/CUDA.md). Where
 * every routed expert's bytes are page-locked host memory the GPU can read (the file mapping pinned by
 * --vram-pin), no step has to wait: a decode step runs full residency's launches and plan, with each
 * grouped launch reading expert e where a device table says (cu_seg.wt): its VRAM slot when resident,
 * else its host bytes over the link. The bytes are the same either way, so the output is full
 * residency's bit for bit, and the step is one captured graph.
 *
 * Between steps (vram_gtab_step, after the step's router ids are on the host): each layer's experts
 * go through the tier's slot policy as a batch of the step (vram_slots_prepare: hits to the MRU end,
 * misses into free or LRU slots); a miss's copy into its slot is queued on the copy stream at once and
 * overlaps the next step, whose tables still point at the host bytes; an evicted expert's entries go
 * back to its host bytes before the next step. An entry moves to the slot only once its copy is done
 * (an event polled at the next step), so no step reads a slot being written. A forward outside the
 * graph (prefill, verify: the tier's own path) changes slots; vram_gtab_sync rebuilds the tables from
 * the slot index before the next graph step (vram_gtab_quiesce marks them, vram_gtab_prepare rebuilds).
 *
 * Under an emulated link (RL_VRAM_LINK_GBS=X, vram_link.h) both kinds of traffic are held to X: the
 * fills are the tier's link segments (the copy stream held by vram_link), and after each layer's expert
 * launches a one-thread kernel holds the compute stream for the bytes those launches read over the link
 * at X (vram_gtab_hold, cu_link_hold). The reads themselves ran at this machine's speed before that
 * hold, and the two holds do not share one budget of X, so the emulation is slower than a real X link
 * for the reads and faster where fills and reads would compete; the stats say how much each held.
 *
 * Not used (vram_gtab_new returns NULL, the tier's own path runs): the host tier is the RAM cache
 * (its slots are rewritten: bytes come and go), the mapping is not page-locked, --vram-miss cpu
 * (misses computed on the CPU: the own path). RL_VRAM_GRAPH=0 turns it off. */
#ifndef RL_VRAM_GTAB_H
#define RL_VRAM_GTAB_H
#ifdef RL_CUDA

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cache/vram_link.h"
#include "cache/vram_plan.h"
#include "cache/vram_slots.h"
#include "cuda/cuda_ops.h"
#include "model/qwen3next.h"

typedef struct vram_gtab vram_gtab;

/* What the tables are made from: the model (host expert pointers, q3n_expert_rows), the tier's slot
 * index, per layer the device address of slot 0 (NULL: no slots) and the slot layout, the page-locked
 * host span [lo, hi) holding every expert and its device address, and the tier's copy stream; under an
 * emulated link its cap link_gbs (0: none) and the tier's link (the fills' segments; NULL: none). */
typedef struct {
    const q3n_model *m;
    vram_slots *slots;
    uint8_t *const *base;
    const vram_layout *ly;
    const uint8_t *lo, *hi;
    const uint8_t *dev_lo;
    cudaStream_t cp;
    double link_gbs;
    vram_link *link;
} vram_gtab_src;

typedef struct {
    uint64_t steps;       /* forwards through the tables seen (decode steps and verifies) */
    uint64_t verifies;    /* ... of them with more than one row */
    uint64_t host_reads;  /* experts a step read from host memory (misses and copies in flight) */
    uint64_t fills;       /* copies into slots queued */
    uint64_t fill_bytes;  /* ... their bytes */
    uint64_t table_bytes; /* table bytes uploaded */
    double wait_s;        /* vram_gtab_step's wait for the forward (the ids' read-back): GPU time */
    double host_s;        /* ... its host work after that (slot policy, fills and table changes queued),
                             during which the GPU idles until the next forward is launched */
} vram_gtab_stats;

/* NULL with rl_lasterr on failure (out of device memory). */
vram_gtab *vram_gtab_new(const vram_gtab_src *src);
void vram_gtab_free(vram_gtab *g);
/* Device tables of layer il: which 0 gate (or fused gate_up) rows, 1 up rows, 2 down rows; one
 * pointer per expert. Fixed addresses (a captured graph reads them at every replay). */
const uint8_t *const *vram_gtab_table(const vram_gtab *g, int il, int which);
/* A forward through the tables has 1 (a decode step) to GT_ROWS rows (a verify, RL_VRAM_GRAPH_VERIFY). */
#define GT_ROWS CU_SMALL_T
/* Where a forward of T rows writes layer il's router ids (T x top_k, row-major, the layers packed one
 * after another: device memory, a fixed address per layer and row count, as a captured graph needs),
 * so vram_gtab_step reads back only this forward's ids. */
int32_t *vram_gtab_ids(const vram_gtab *g, int il, int T);
/* Under an emulated link: the hold of layer il's reads over the link (cu_link_hold: ids = the
 * forward's T x K router ids of the layer, on the device; each (row, expert) pair counted, as a
 * one-row tile reads its expert once), queued on s after the layer's expert launches of a forward
 * through the tables; nothing without a cap. 0 or -1. */
int vram_gtab_hold(const vram_gtab *g, int il, const int32_t *ids, int T, cu_stream s);
/* After a forward of T rows through the tables (queued on st): reads its ids back (waits for st),
 * updates the slots with each layer's experts (their union, in batches of at most the layer's slots)
 * and queues the fills on the copy stream and the table changes on st (ahead of the next forward).
 * 0 or -1. */
int vram_gtab_step(vram_gtab *g, cudaStream_t st, int T);
/* After a forward outside the graph: waits for the copy stream, then every table from the slot index
 * (queued on st). Also the first initialisation. 0 or -1. */
int vram_gtab_sync(vram_gtab *g, cudaStream_t st);
/* Before a graph step: the tables made if they are not yet, or again after the tier's own path ran
 * (vram_gtab_sync). 0 or -1. */
int vram_gtab_prepare(vram_gtab *g, cudaStream_t st);
/* Before the tier's own path touches the slots (vram_tier_layer): the steps' fills finished, and the
 * tables marked for a rebuild at the next graph step (the own path moves experts). 0 or -1. */
int vram_gtab_quiesce(vram_gtab *g);
void vram_gtab_get_stats(const vram_gtab *g, vram_gtab_stats *out);
/* Under an emulated link, what the graph steps' holds of reads counted (cu_link_hold, read from the
 * device: waits for the holds queued so far): experts, the seconds their bytes take at the cap, and the
 * seconds held. 0 or -1. */
int vram_gtab_get_held(const vram_gtab *g, uint64_t *experts, double *target_s, double *held_s);
#endif
#endif
