/* vram_tier_int.h — the VRAM tier's state and the functions its two files share (vram_tier.c: slots,
 * fills, pinning, the graph; vram_hybrid.c: CPU-computed experts, --vram-miss cpu|auto). Internal to
 * the tier: nothing outside src/cache/vram_tier.c and vram_hybrid.c includes it. */
#ifndef RL_VRAM_TIER_INT_H
#define RL_VRAM_TIER_INT_H
#ifdef RL_CUDA

#include "cache/vram_gtab.h"
#include "cache/vram_tier.h"
#include "kern/ops.h"

#define VT_NSTAGE 4                        /* staging buffers in the ring */
#define VT_STAGE_MIN ((size_t)16 << 20)    /* each at least this (and at least one slot) */
#define VT_NRING 4                         /* events of the last batches' ends (slot reuse) */
#define VT_MAX_SPANS 16                    /* page-locked host spans (the RAM cache's arenas) */
#define VT_MAX_KINDS 8                     /* CPU-cost classes: distinct (gate, down) types */
#define VT_CPU_PAIRS (VRAM_CPU_MAX_T * 32) /* CPU-computed (row, expert) pairs per layer at most */
#define VT_EMA 0.1                         /* weight of a new measurement in the online estimates */
#define VT_LINK_SEEN ((uint64_t)64 << 20)  /* copies measured before the graph's limit follows their rate */

struct vram_tier {
    const q3n_model *m;
    vram_plan plan;
    vram_layout ly[Q3N_MAX_LAYERS];
    uint8_t *base[Q3N_MAX_LAYERS]; /* slot 0 of each layer (device) */
    uint8_t *arena;                /* every slot (device) */
    vram_slots *slots;
    q3n_expert_src src; /* host source (.acquire NULL: the mapped file) */
    int n_batch, K, E;
    bool prefetch;
    uint64_t fault_at, fills; /* RL_VRAM_FAULT: the fault_at-th fill fails (0 = never) */
    cudaStream_t cp;          /* copy stream */
    cudaEvent_t ev_copy, ev_used, sev[VT_NSTAGE];
    bool used_recorded;
    /* overlap (default; RL_VRAM_OVERLAP=0: off): a fill waits only for the end of the batch that
     * last read its slot (ring[seq % VT_NRING], recorded at each batch end; a ring entry reused by
     * a later batch makes the wait longer, never too short), and a chunk needing more experts than
     * a layer has slots runs in batches of half the slots, so batch b+1's copies (into batch
     * b-1's slots, the LRU ones) overlap batch b's compute. Off: every fill waits for the last
     * batch end, batches use every slot. */
    bool overlap;
    int stream; /* vram_tier_opts.stream */
    cudaEvent_t ring[VT_NRING];
    int64_t seq, *slot_seq[Q3N_MAX_LAYERS], *seq_arena; /* per slot: the batch that last read it */
    int bcap;
    uint8_t *stage[VT_NSTAGE]; /* pinned */
    size_t stage_bytes, spos;
    int scur;
    /* device plan + prediction scratch; pinned host mirrors */
    cu_tile *d_tiles, *h_tiles;
    int32_t *d_pin, *d_pout, *h_pin, *h_pout, *d_ntiles, *h_ntiles, *d_pred, *h_ids, *h_pred;
    float *d_predw;
    int max_tiles;
    /* the open layer */
    int il, T, tt, n_union, n_batches, cur_b, tile_off, pair_off;
    int32_t *uni;                 /* [E] the union: resident experts first, then the others */
    int32_t *cnt, *first, *order; /* per expert: pair count and offset into order (pairs by expert) */
    int32_t *bslot, *bmiss, *pf_slot, *pf_e;
    const uint8_t **hg, **hu, **hd;
    uint8_t **hs; /* staging address of each expert of a fill */
    pool *pool;   /* staging memcpy threads (NULL: the calling thread) */
    /* --vram-pin: page-locked host spans (the mapping's expert span, or the RAM cache's arenas);
     * fills from them are DMA. volatile_src: the spans are the RAM cache's slots, which may be
     * rewritten after release, so a DMA from them is waited for before the release. */
    vram_pin_mode pin;
    bool pin_resolved, volatile_src;
    /* the tier inside the decode graph (vram_gtab.h): wanted (RL_VRAM_GRAPH, no --vram-miss cpu, no
     * injected fault), and once the host tier allows it the tables (NULL: the tier's own path) */
    bool graph_want, graph_tried;
    vram_gtab *gt;
    struct {
        uint8_t *lo, *hi;
    } span[VT_MAX_SPANS];
    int n_span;
    double pin_s;
    uint64_t pin_bytes;
    char pin_msg[200];
    /* --vram-miss: CPU-computed experts of small forwards (T <= VRAM_CPU_MAX_T) */
    vram_miss_mode miss;
    bool cpu_exact[Q3N_MAX_LAYERS]; /* the CPU computes this layer's experts with the GPU's bits */
    int n_exact;                    /* layers with cpu_exact */
    bool calibrated;
    int kind[Q3N_MAX_LAYERS], n_kind; /* cost class of each layer */
    uint32_t kind_gate[VT_MAX_KINDS], kind_down[VT_MAX_KINDS];
    double cpu_s[VT_MAX_KINDS];          /* seconds per CPU expert (per row pair), EMA */
    double copy_s_per_byte, cpu_fixed_s; /* fill cost, CPU path's fixed cost (EMA) */
    float *h_xn, *h_eo;                  /* pinned: the layer's input rows, CPU outputs */
    float *xg, *gb, *ub;                 /* gathered rows, gate and up outputs */
    void *actq;
    size_t actq_cap;
    ops_mat *mats;
    ops_mm_task *tasks;
    int32_t *cpu_e, *cpu_pair; /* the open layer's CPU experts, their pairs */
    int n_cpu, n_cpu_pairs;
    uint64_t cpu_experts, cpu_pairs_total, cpu_layers, fills_demand;
    double cpu_total_s;
    bool dma_pending;
    cudaEvent_t ev_dma;
    /* victim caching (q3n_expert_src.keep): write-backs queued on the copy stream, completed by
     * vt_host_release after its wait (keep_l/keep_e: [E + n_batch x K]) */
    int n_keep;
    bool keep_err;
    int32_t *keep_l, *keep_e;
    uint64_t kept, kept_bytes;
    bool open, pf_pending;
    int n_pred;
    double wait_s, stage_s;
    bool warm, warmed; /* vram_tier_warm wanted (RL_VRAM_WARM), ran */
    /* vram_tier_graph_next's switch point, bytes per decode token: graph_bytes at the reference link,
     * graph_limit at this one (vram_graph_limit of link_seen, the copies' rate in GB/s, 0 until
     * measured); graph_fixed: RL_VRAM_GRAPH_MIB was given, graph_limit = graph_bytes */
    double graph_bytes, graph_limit, link_seen;
    bool graph_fixed;
    double step_ema;     /* host->device bytes per decode token, EMA over the recent steps */
    uint64_t last_bytes; /* the counters' bytes after the last forward */
    uint64_t graph_steps, own_steps, graph_switches;
    bool last_graph;
    uint64_t warm_experts, warm_bytes;
    double warm_s;
    vram_link *link; /* the copy stream's segments timed, held under RL_VRAM_LINK_GBS */
    double link_gbs; /* that cap (0: none); the graph steps hold their reads over the link to it too */
};

/* vram_tier.c */
/* Host pointers of experts ids[0..n) of layer il (hg/hu/hd): the host source's acquire (the caller
 * releases) or the mapped file's slices. 0 or -1. */
int vt_host_rows(vram_tier *vt, int il, const int32_t *ids, int n);
/* End the use of the last vt_host_rows (waits for DMAs from the RAM cache's slots first). 0 or -1. */
int vt_host_release(vram_tier *vt, int il);
/* Copy experts 0..n-1 of the last vt_host_rows into slots s[] of layer il on the copy stream; *done:
 * experts whose copy was queued. 0 or -1. */
int vt_fill_slots(vram_tier *vt, int il, const int32_t *s, const int32_t *e, int n, bool demand, int *done);
/* Settle --vram-pin (the RAM cache's arenas or the mapping page-locked, or the staging ring). */
void vt_pin_resolve(vram_tier *vt);

/* vram_hybrid.c */
/* Experts ids[0..n) of layer il on the CPU pool, with the GPU's bits (rows xg -> h_eo). 0 or -1. */
int vt_cpu_compute(vram_tier *vt, int il, const int32_t *ids, const int32_t *c, int n);
/* The cost model's estimates (fill time per byte, CPU time per expert), measured once. */
void vt_calibrate(vram_tier *vt);
/* Which of the layer's non-resident experts uni[nres..n) the CPU computes; returns the new n. */
int vt_choose_cpu(vram_tier *vt, int il, int nres, int n);

#endif
#endif
