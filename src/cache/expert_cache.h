/* expert_cache.h — the bounded expert cache: dense weights stay mapped, the routed experts
 * live in a pool of slots under a hard byte budget (docs/EXPERT_CACHE.md has the design).
 *
 * Unit: one (layer, expert) triplet — the gate, up and down slices of that expert, copied
 * byte for byte from the GGUF file into one slot, so the row layout inside a slot is the
 * file's (gate rows, up rows, down rows; a fused ffn_gate_up_exps slice is gate then up).
 * Results are therefore bit-identical to the mapped source whatever the budget.
 *
 * Modes:
 *   EC_BOUNDED  slots under a byte budget; misses are read with pread (never through the
 *               mapping, so the page cache does not grow behind the budget) by a small I/O
 *               thread pool; pre-gated prefetch of the next layer's predicted experts.
 *   EC_FULL     every expert resident: the mapping is preloaded (MADV_WILLNEED + one touch per
 *               page, with a progress bar) and served zero-copy.
 *   EC_MMAP     the plain mapped source (pages fault in on demand), with stats and tracing.
 *
 * Threads: the q3n_expert_src callbacks come from the inference thread (one per cache);
 * the I/O threads only fill slots. Cache state (which keys are resident, LRU order) is a
 * deterministic function of the call sequence: I/O timing never changes a decision.
 */
#ifndef RL_EXPERT_CACHE_H
#define RL_EXPERT_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cache/slot_policy.h"
#include "model/qwen3next.h"

typedef struct expert_cache expert_cache;

typedef enum { EC_MMAP = 0, EC_FULL = 1, EC_BOUNDED = 2 } ec_mode;

const char *ec_mode_name(ec_mode m);

/* How misses are read: O_DIRECT into the slot (faster and no page cache at all, measured in
 * bench/results/cache-*.md), or buffered pread + POSIX_FADV_DONTNEED. AUTO = direct when the
 * file system takes an aligned O_DIRECT read and the block padding of direct slots costs under
 * 5 % of the slot bytes (true for real expert sizes), else buffered. */
typedef enum { EC_IO_AUTO = 0, EC_IO_BUFFERED, EC_IO_DIRECT } ec_io;

typedef struct {
    uint64_t budget;        /* bytes of slots (EC_BOUNDED) */
    int io_threads;         /* I/O threads (0 = 4, or RL_CACHE_IO_THREADS) */
    bool no_prefetch;       /* disable pre-gated prefetch (RL_CACHE_PREFETCH=0) */
    int prefetch_k;         /* predictions per row to prefetch (0 = top-k; RL_CACHE_PREFETCH_K) */
    ec_io io;               /* RL_CACHE_DIRECT=1 / =0 force direct / buffered */
    bool uniform;           /* one slot size for every layer (RL_CACHE_CLASSES=0) */
    bool demote;            /* serve q3n_expert_src.demote: what a VRAM tier took is evicted first
                               (RL_CACHE_DEMOTE=1; off: plain LRU, better in tools/tier_sim.py's replay) */
    bool no_scan;           /* RL_CACHE_SCAN=0: a prompt chunk's loads go to the recent end like any
                               other (default: a forward of >= SLOT_SCAN_ROWS rows is a scan: what it
                               loads leaves first and is not taken back from a VRAM tier; "Scans" in
                               docs/EXPERT_CACHE.md) */
    bool no_victim;         /* RL_CACHE_VICTIM=0: do not serve q3n_expert_src.keep (the RAM cache as a
                               VRAM tier's victim cache: what VRAM evicts is copied back here and what it
                               takes is evicted first; tools/tier_sim.py, docs/EXPERT_CACHE.md) */
    float route_bias;       /* > 0: cache-aware routing (CHANGES OUTPUTS); 0 = exact */
    const char *trace_path; /* route trace, JSON lines (--route-trace, RL_ROUTE_TRACE) */
    bool progress;          /* progress bar for the EC_FULL preload */
    const char *fault;      /* read fault injection (RL_CACHE_FAULT): "eio@N", "eof@N", "short%N",
                               "eintr%N" (expert_cache_set_fault); NULL: none */
} ec_params;

/* Create a cache for model m with p (NULL: the defaults). The RL_CACHE_* switches reach it through
 * p (run/tuning.c parses them; docs/TUNING.md); the cache reads no environment.
 * NULL with rl_lasterr set on failure (budget below the minimum, out of memory, ...). */
expert_cache *expert_cache_new(const q3n_model *m, ec_mode mode, const ec_params *p);
void expert_cache_free(expert_cache *ec);
/* The expert source to install in an engine context (the session does: engine_set_expert_src);
 * valid while ec lives. The cache knows nothing of the engine: the arrow runs session -> cache. */
q3n_expert_src expert_cache_src(expert_cache *ec);
ec_mode expert_cache_mode(const expert_cache *ec);
/* Whether misses are read with O_DIRECT (after AUTO resolved). */
bool expert_cache_direct_io(const expert_cache *ec);

/* ---- sizing -------------------------------------------------------------------------- */
/* Bytes of one slot of layer il (4 KiB aligned triplet; larger with direct I/O padding). */
uint64_t expert_cache_slot_bytes(const q3n_model *m, int il, bool direct_io);
/* Smallest budget expert_cache_new accepts: every class must hold one whole layer's experts
 * plus a prefetch margin (uniform slots of the largest size). */
uint64_t expert_cache_min_budget(const q3n_model *m, bool direct_io);
/* Bytes to hold every expert of every layer in slots (no eviction ever). */
uint64_t expert_cache_full_bytes(const q3n_model *m, bool direct_io);

/* A forward of at least SLOT_SCAN_ROWS rows (the engine's hint says how many) is a scan, whose loads
 * stream through the least recent end (docs/EXPERT_CACHE.md, "Scans"); decode and verify rows stay
 * plain LRU. */

/* ---- planner ------------------------------------------------------------------------- */
#define EC_RAM_SHARE 0.70 /* full residency when experts + dense + KV state < 70 % of RAM */
#define EC_MAP_SHARE 0.90 /* beyond that, full residency in the page cache up to 90 % (below) */

typedef struct {
    ec_mode mode;
    uint64_t budget;  /* EC_BOUNDED: slot bytes */
    bool mapped;      /* EC_FULL: the experts stay in the file mapping (page cache), not copied */
    char reason[384]; /* one line */
} ec_plan;

/* spec: NULL/"" or "auto", "full", "mmap", or a number of MiB. ram_bytes: the memory the process
 * may use (0 = rl_total_ram: this machine's RAM or its control group's limit); avail_bytes: what
 * the kernel could give now (0 = rl_mem_available(); ram_bytes to plan for an idle machine).
 * auto on the CPU: full residency with anonymous copies when everything fits in EC_RAM_SHARE of
 * RAM; else, when everything and the reserve fit in EC_MAP_SHARE of RAM and in what is free now,
 * full residency served from the file mapping (mapped: the page cache holds the experts, as
 * llama.cpp's mmap does, preloaded; no second copy, and the kernel may reclaim the pages under
 * pressure, then they fault in again); else a bounded cache. n_ctx: context
 * positions (KV cache); work_bytes: the context's scratch (engine_mem.scratch_bytes; it grows with
 * the prompt batch), kept out of an auto budget with EC_SLACK on top (at least EC_RESERVE in all).
 * device: the cache is the host tier under a VRAM tier, so the dense weights, the state and the
 * scratch live in device memory and only the reserve is kept out of the RAM share (the dense
 * weights' file pages are read once, to upload them, and are the kernel's to reclaim).
 * 0, or -1 with rl_lasterr set on a bad spec or a budget below the minimum. */
int expert_cache_plan(const q3n_model *m, uint64_t ram_bytes, uint64_t avail_bytes, int n_ctx,
                      uint64_t work_bytes, const char *spec, ec_io io, bool device, ec_plan *out);
/* Bytes of per-context state: KV cache (float32, n_ctx positions) + DeltaNet states. */
uint64_t expert_cache_state_bytes(const q3n_model *m, int n_ctx);

/* ---- observability ------------------------------------------------------------------- */
typedef struct {
    ec_mode mode;
    uint64_t budget, n_slots, n_classes;
    uint64_t tokens;                       /* rows seen (counted at layer 0) */
    uint64_t acquires, lookups;            /* acquire calls; experts requested (union sizes) */
    uint64_t hits;                         /* resident and loaded when requested */
    uint64_t hits_inflight;                /* prefetch still in flight when requested (waited for) */
    uint64_t misses;                       /* demand loads */
    uint64_t evictions;                    /* valid entries replaced (demand or prefetch) */
    uint64_t bytes_demand, bytes_prefetch; /* bytes read from the file */
    uint64_t pf_predicted;                 /* experts predicted by pre-gating */
    uint64_t pf_predicted_used;            /* ... that the next layer then used */
    uint64_t pf_used_total;                /* experts used at layers that had a prediction */
    uint64_t pf_loads;                     /* prefetch loads issued */
    uint64_t pf_loads_used;                /* ... later hit by an acquire */
    uint64_t pf_loads_wasted;              /* ... evicted unused */
    uint64_t pf_no_slot;                   /* predictions not loaded: no evictable slot */
    uint64_t io_errors, aborts;            /* failed reads; acquires rolled back */
    uint64_t short_reads, eintr;           /* retried partial / interrupted reads */
    uint64_t bias_calls;                   /* cache-aware routing decisions */
    uint64_t demoted;                      /* entries demoted: a faster tier holds them (demote) */
    uint64_t scan_demoted;                 /* entries a scan loaded, put at the least recent end */
    uint64_t kept, kept_declined;          /* evictions a faster tier handed back: taken / declined */
    uint64_t scan_declined;                /* ... declined: a streamed prompt chunk's own disk reads */
    double io_wait_s;                      /* inference thread blocked on loads */
    double hint_s;                         /* inference thread in pre-gating */
    uint64_t peak_rss;
} ec_stats;

void expert_cache_get_stats(expert_cache *ec, ec_stats *out);
void expert_cache_reset_stats(expert_cache *ec);
/* Human-readable summary (a few lines) to out. */
void expert_cache_print_stats(expert_cache *ec, FILE *out);
/* Consistency check of the index, lists and slot states (tests): 0 or -1 (rl_lasterr). */
int expert_cache_check(expert_cache *ec);
/* Is (layer, expert) resident (valid or being loaded)? */
bool expert_cache_resident(expert_cache *ec, int layer, int expert);

/* ---- fault injection (tests; also RL_CACHE_FAULT="eio@N" | "eof@N" | "short%N" | "eintr%N") ----
 * The N-th read call from now (1-based, counted over all I/O threads) fails with EIO or
 * returns end of file (once), or every N-th read is short / interrupted (periodic). */
typedef enum { EC_FAULT_NONE = 0, EC_FAULT_EIO, EC_FAULT_EOF, EC_FAULT_SHORT, EC_FAULT_EINTR } ec_fault;
void expert_cache_set_fault(expert_cache *ec, ec_fault kind, uint64_t n);

#endif
