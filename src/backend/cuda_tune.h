/* cuda_tune.h — the CUDA backend's switches: every RL_CUDA_* and RL_VRAM_* environment variable,
 * parsed in one place (cuda_tune_from_env) when a CUDA context is created, into one struct that the
 * context keeps and passes down (the kernels' part, cu_tuning, travels in the device struct cu_dev
 * with every launch). Nothing else in src/backend or src/cuda reads the environment. docs/TUNING.md is
 * the table (name, default, what it trades). Plain C, no CUDA header: tests/c/test_cuda_tune.c runs on
 * any machine.
 */
#ifndef RL_CUDA_TUNE_H
#define RL_CUDA_TUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda/cuda_dev.h"

/* bits of cuda_tune.fuse (RL_CUDA_FUSE) */
enum { FUSE_COMBINE = 1, FUSE_NORM = 2, FUSE_ROUTER = 4 };

typedef struct {
    cu_tuning k;         /* the kernels' switches (src/cuda/cuda_dev.h) */
    int device;          /* RL_CUDA_DEVICE=N; -1: the current device */
    bool verbose;        /* RL_CUDA_VERBOSE=1: upload time and device memory on stderr */
    bool graphs;         /* decode in a CUDA graph (RL_CUDA_GRAPHS=0: off) */
    bool rows;           /* several contexts' steps as rows of one forward (RL_CUDA_ROWS=0: turns) */
    bool rows_graph;     /* the rows forward in a CUDA graph (RL_CUDA_ROWS_GRAPH=0: direct launches) */
    bool rows_batch;     /* its DeltaNet in one launch for all rows (RL_CUDA_ROWS_BATCH=0: row by row) */
    bool attn_per_warp;  /* RL_CUDA_ATTN=per-warp: the previous decode split kernel */
    bool attn_pf_staged; /* prefill attention with staged K/V slices (RL_CUDA_ATTN_PF=unstaged: off) */
    bool attn_pf_tiled;  /* the register-tiled prefill attention (RL_CUDA_ATTN_PF=staged|unstaged: off) */
    bool attn_tc;        /* attention on tensor cores where it applies (RL_CUDA_ATTN_TC=0: off) */
    bool attn_db;        /* its split decode kernel double-buffered (RL_CUDA_ATTN_DB=0: off) */
    int fuse;            /* FUSE_* (RL_CUDA_FUSE=0|all|combine,norm,router) */
    int small_moe;       /* verify batches of up to N rows: MoE per (row, expert) pair (RL_CUDA_SMALL_MOE) */
    bool dn_split;       /* the decode DeltaNet step over 4 blocks per head (RL_CUDA_DN_SPLIT=0: one) */
    int vram_pin;        /* RL_VRAM_PIN=0|1, the older alias of --vram-pin; -1: unset */
    int vram_slots;      /* RL_VRAM_SLOTS=N: N expert slots per layer whatever the budget; 0: the plan's */
    bool vram_prefetch;  /* the tier's pre-gated prefetch (RL_VRAM_PREFETCH=0: off) */
    bool vram_overlap;   /* the tier's copy/compute overlap between batches (RL_VRAM_OVERLAP=0: off) */
    bool vram_graph;     /* the tier inside the decode graph where it can be (RL_VRAM_GRAPH=0: off) */
    bool vram_graph_verify; /* verifies (2..CU_SMALL_T rows) through it too (RL_VRAM_GRAPH_VERIFY=1; off
                             * until its speed is measured) */
    bool vram_warm;         /* free slots filled before the first forward (RL_VRAM_WARM=0: off) */
    int vram_stream;        /* RL_VRAM_STREAM=P: prompt chunks stream through P slots a layer; 0: off */
    int vram_graph_mib;     /* RL_VRAM_GRAPH_MIB: graph steps while <= N MiB/token cross; 0: VRAM_GRAPH_MIB */
    uint64_t vram_fault;    /* RL_VRAM_FAULT=N (tests): the N-th demand slot fill fails once; 0: off */
    double vram_link;       /* RL_VRAM_LINK_GBS=X: the tier's host->device copies held to X GB/s (an
                             * emulated slower link, e.g. 25 for PCIe 4.0 x16); 0: off */
} cuda_tune;

/* The defaults (every switch unset). */
cuda_tune cuda_tune_default(void);
/* The defaults with the environment's RL_CUDA_* / RL_VRAM_* applied (unset or empty: the default):
 * 0, or -1 with rl_lasterr one line naming the variable, its value and what it takes. */
int cuda_tune_from_env(cuda_tune *t);

#endif
