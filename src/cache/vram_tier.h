/* vram_tier.h — the VRAM expert tier of the CUDA backend: routed experts live in device slots
 * (vram_slots.h decides which, vram_plan.h how many), filled from host memory (the session's
 * RAM cache, or the mapped file) through pinned staging buffers with cudaMemcpyAsync on a copy
 * stream. Only where the bytes live changes: the grouped expert launches are the same kernels
 * in the same order, given slot s of layer l as "expert" s (expert_stride = the slot size) and a
 * tile plan built on the host, so the output is bit-identical to full residency.
 *
 * Per layer of a forward (backend_cuda_forward.c, moe()):
 *   router (+ layer l+1's router on the same input: the pre-gated prediction) on the stream
 *   vram_tier_layer    copies the chosen ids (and predictions) to the host, waits, splits the
 *                      union of the experts into batches of at most the layer's slot count
 *   per batch b: vram_tier_batch  pins/fills the batch's slots (copies wait for the kernels that
 *                                 last read a slot; the stream waits for the copies), uploads the
 *                                 batch's tile plan; batch 0 also queues the prefetch of layer
 *                                 l+1's predicted experts behind its own copies
 *                grouped gate/up + down launches with the batch's pointers
 *                vram_tier_batch_end  (the batch's slots may be reused after these launches)
 *   vram_tier_cpu      (--vram-miss cpu|auto, T <= VRAM_CPU_MAX_T) the experts the layer left to
 *                      the CPU, computed on the pool from host memory while the GPU runs the
 *                      batches; their output rows are uploaded into the combine's pair rows
 * Host synchronisation per layer means no decode graph in this mode. Every mode is bit-identical
 * to full residency: copy by construction, cpu/auto (auto is the default) because the CPU computes
 * only the experts of layers it can give the GPU's bits (vram_tier_opts.cpu_exact) and copies the
 * rest (tests/cuda/test_cuda_vram.c, hybrid_vs_full).
 *
 * Errors (host source read error, copy failure, RL_VRAM_FAULT=N: the N-th slot fill fails once):
 * the open batch is aborted (no half-filled slot stays valid) and -1 returned with one line in
 * rl_lasterr; the backend restores the recurrent state it saved before the forward. */
#ifndef RL_VRAM_TIER_H
#define RL_VRAM_TIER_H
#ifdef RL_CUDA
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cuda/cuda_ops.h"
#include "base/pool.h"
#include "model/qwen3next.h"
#include "cache/vram_gtab.h"
#include "cache/vram_link.h"
#include "cache/vram_plan.h"
#include "cache/vram_slots.h"

typedef struct vram_tier vram_tier;

/* One batch's grouped launch: slot s's regions at gate/up/down + s * stride. */
typedef struct {
    const uint8_t *gate, *up, *down;
    size_t stride;
    cu_group g;
} vram_batch;

/* The tier's switches (parsed with the other RL_VRAM_* variables in src/backend/cuda_tune.c):
 * pre-gated prefetch (RL_VRAM_PREFETCH=0: off), copy/compute overlap between batches
 * (RL_VRAM_OVERLAP=0: off), fault_at (RL_VRAM_FAULT=N, tests: the N-th demand fill fails once; 0 off),
 * link_gbs (RL_VRAM_LINK_GBS=X: an emulated host->device link of X GB/s, vram_link.h; 0 off). */
typedef struct {
    bool prefetch, overlap;
    bool graph;       /* the tier inside the decode graph where the host tier allows it (vram_gtab.h) */
    bool warm;        /* vram_tier_warm fills the free slots (RL_VRAM_WARM=0: off) */
    int stream;       /* RL_VRAM_STREAM=P: a prompt chunk streams through P slots of each layer and tells the
                       * host tier its rows (vram_slots_set_stream; a chunk's batches then take at most
                       * P/2 slots, P with the overlap off); 0: off (every slot turns over in a chunk) */
    double graph_mib; /* vram_tier_graph_next's switch point (RL_VRAM_GRAPH_MIB; 0: VRAM_GRAPH_MIB) */
    uint64_t fault_at;
    double link_gbs;
    /* per layer: the CPU computes its routed experts with the GPU's bits (the exact hybrid: every
     * expert matrix on CUDA's integer path and of a type whose CPU kernels are vec_dot's bits,
     * kern_type_exact); --vram-miss cpu|auto put misses on the CPU only in such layers */
    bool cpu_exact[Q3N_MAX_LAYERS];
} vram_tier_opts;

/* Allocates the slots of plan (not full), the plan buffers for n_batch rows and the staging;
 * p (may be NULL): threads for the staging memcpy. NULL with rl_lasterr (e.g. out of device
 * memory: "cannot allocate N MiB of VRAM slots"). */
vram_tier *vram_tier_new(const q3n_model *m, const vram_plan *plan, int n_batch, pool *p, vram_pin_mode pin,
                         vram_miss_mode miss, const vram_tier_opts *o);
void vram_tier_free(vram_tier *vt);
/* Host source of the slots' bytes (NULL: the mapped file). A non-NULL source settles
 * --vram-pin at once (its arenas, or the mapping); NULL leaves it to the first forward. */
void vram_tier_set_host_src(vram_tier *vt, const q3n_expert_src *src);
/* Device scratch for the pre-gated router of the next layer (ids, weights: n_batch x top_k),
 * or NULL when prefetch is off (RL_VRAM_PREFETCH=0). */
int32_t *vram_tier_pred_ids(vram_tier *vt);
/* Before a forward: the first time, once --vram-pin is resolved, the slots no expert holds yet are
 * filled (experts in index order, by DMA) where the host tier is the page-locked file mapping, so
 * the first tokens do not pay cold misses the budget has room for (the decode graph cannot prefetch;
 * a prompt would have filled them anyway). Waits for those copies. Best effort: a failed copy leaves
 * its slots free. Any other host tier (the RAM cache, an unpinned mapping): nothing. */
void vram_tier_warm(vram_tier *vt);
/* Whether the next forward of T rows (a decode step, or a verify with RL_VRAM_GRAPH_VERIFY) should
 * run inside the graph: the host->device bytes per decode token, averaged over the recent steps of
 * either path, times T at most the switch point (graph_mib MiB scaled to the rate the tier's copies
 * obtain, vram_graph_limit; the rule and its measurements: vram_graph_take in vram_plan.h). T times, because
 * in the graph each row reads its missed experts over the link itself, where the own path copies a layer's
 * union once. */
bool vram_tier_graph_next(const vram_tier *vt, int T);
/* After every forward: a decode step's host->device bytes (step: one row that could have run in the
 * graph; in_graph: it did) go into that average; any other forward's (a prompt chunk, a verify) are
 * only set aside, so they never count as a step's. */
void vram_tier_forward_done(vram_tier *vt, bool step, bool in_graph);
/* The tier inside the decode graph (vram_gtab.h), or NULL where the host tier does not allow it (not
 * the pinned file mapping, an emulated link, RL_VRAM_GRAPH=0, an injected fault): decode steps then
 * take the tier's own path. Resolves --vram-pin if not yet. */
vram_gtab *vram_tier_graph(vram_tier *vt);
float *vram_tier_pred_w(vram_tier *vt);
/* After layer il's router: returns the number of batches (>= 0: 0 when every expert of the
 * layer goes to the CPU), or -1. tt: pairs per tile of the plans (1: one tile per pair, as full
 * residency's direct path for small T; else CU_TT). d_xn: the layer's input rows (T x n_embd),
 * downloaded for CPU-computed experts (--vram-miss cpu|auto and T <= VRAM_CPU_MAX_T). */
int vram_tier_layer(vram_tier *vt, int il, const int32_t *d_ids, const int32_t *d_pred, const float *d_xn,
                    int T, int tt, cudaStream_t st);
int vram_tier_batch(vram_tier *vt, int b, cudaStream_t st, vram_batch *out);
int vram_tier_batch_end(vram_tier *vt, cudaStream_t st);
/* An error between vram_tier_batch and _end (a failed launch): roll the open batch back. */
void vram_tier_abort(vram_tier *vt);
/* After the layer's batches are queued: the CPU computes the experts vram_tier_layer gave it
 * (while the GPU runs the batches) and queues their output rows into d_eo (n_batch*top_k x
 * n_embd, the pair rows the combine weighs) on st; also the prefetch when there was no batch.
 * 0 (nothing to do, or done) or -1 (rl_lasterr). */
int vram_tier_cpu(vram_tier *vt, float *d_eo, cudaStream_t st);
const vram_plan *vram_tier_plan(const vram_tier *vt);
void vram_tier_get_stats(const vram_tier *vt, vram_stats *out);
/* The host->device copies so far (vram_link.h). */
void vram_tier_link_stats(vram_tier *vt, vram_link_stats *out);
void vram_tier_print(vram_tier *vt, FILE *f);
#endif
#endif
