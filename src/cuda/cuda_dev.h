/* cuda_dev.h — one CUDA device as the kernels see it: its facts (compute capability, SMs, shared
 * memory, L2) and the tuning switches the launches run under, in one struct (cu_dev) that the CUDA
 * backend fills when it creates a context (cu_dev_init, cuda_ops.h) and hands to every launch with
 * its stream (cu_stream, cuda_ops.h). Nothing in src/cuda caches a device fact or reads the
 * environment: two contexts (two devices, or two tunings) in one process do not share launch state.
 *
 * Plain C (no CUDA header) so that the switches' parser (src/backend/cuda_tune.c) and its CPU test
 * can use the types. docs/TUNING.md has the table of the RL_CUDA_* variables behind cu_tuning.
 */
#ifndef RL_CUDA_DEV_H
#define RL_CUDA_DEV_H

#include <stdbool.h>
#include <stddef.h>

/* The kernels' tuning switches (the environment variable of each in brackets; docs/TUNING.md has the
 * measurements). Every value gives the same bits except `mmq` (another arithmetic). */
typedef struct {
    bool pdl;      /* programmatic dependent launch where the device has it (RL_CUDA_PDL, 1) */
    int mmq;       /* the integer path: 0 off, 1 K-quants + 32-value types, 2 also the IQ types
                      of mmq_iq.cuh (RL_CUDA_MMQ, 2) */
    bool mmq_lane; /* one-token integer launches on k_mmq_lane (RL_CUDA_MMQ_LANE, 1) */
    bool mmq_st;   /* decode GEMV weights staged in shared memory (RL_CUDA_MMQ_ST, 1) */
    bool mmq_sm;   /* dense one-token launches streamed (RL_CUDA_MMQ_SM, 1) */
    int mmq_nt;    /* token tiles per warp of k_mmq_mma: 1|2 (RL_CUDA_MMQ_NT, 2) */
    bool mmq_tc;   /* the staged prefill tiles k_mmq_tc (RL_CUDA_MMQ_TC, 1) */
    int mmq_tc_tt; /* tokens of a dense staged tile: 16|32 (RL_CUDA_MMQ_TC_TT, 32) */
    int mmqb_rows; /* the 32-value types take the integer path in launches of at least this many output rows
                      (RL_CUDA_MMQB_ROWS, 256: a narrower matrix -- Qwen3-Next's ssm_ba, 64 x 2048 Q8_0 --
                      keeps the float GEMV, whose one warp per row is faster there); a property of the
                      matrix, so every shape of it takes the same path */
    int small_tt;  /* largest token tile of a small dense batch: 2|4|8 (RL_CUDA_SMALL_TT, 4) */
    int mm_stage;  /* float GEMV weights staged: 0 none, 1 every type, 2 the IQ types (RL_CUDA_MM_STAGE) */
    size_t smem_limit; /* a cap on the device's opt-in shared memory per block, bytes; 0: none
                          (RL_CUDA_SMEM_LIMIT: forces the portable launch shapes of smaller GPUs) */
} cu_tuning;

/* The defaults (every switch unset): the measured winners. */
static inline cu_tuning cu_tuning_default(void) {
    cu_tuning t = {0};
    t.pdl = true;
    t.mmq = 2;
    t.mmq_lane = true;
    t.mmq_st = t.mmq_sm = true;
    t.mmq_nt = 2;
    t.mmq_tc = true;
    t.mmq_tc_tt = 32;
    t.mmqb_rows = 256;
    t.small_tt = 4;
    t.mm_stage = 2;
    return t;
}

/* What the launches remember per kernel (one slot per kernel instance a context launched): the
 * dynamic shared memory it was allowed (cudaFuncAttributeMaxDynamicSharedMemorySize) and the answer
 * of the last occupancy query (blocks resident on the whole GPU at occ_smem bytes). */
typedef struct {
    const void *fn;
    size_t optin, occ_smem;
    unsigned resident;
} cu_fn_slot;
#define CU_DEV_FNS 256 /* a context launches ~100 kernel instances; a full table only costs re-queries */

typedef struct {
    int ordinal;       /* the CUDA device index */
    int cc;            /* compute capability, 10 * major + minor (90: H100 / H200) */
    int n_sm;          /* streaming multiprocessors */
    size_t smem_optin; /* sharedMemPerBlockOptin: the most dynamic + static shared memory of a block */
    size_t smem_max;   /* what the launches plan against: smem_optin, capped by tune.smem_limit */
    size_t l2_bytes;   /* L2 cache */
    bool pdl;          /* launches carry the PDL attribute: tune.pdl and cc >= 90 (pdl_enter's wait
                          exists only there: on older GPUs a launch must not overlap the one before) */
    int int8;          /* the integer path's mode (tune.mmq; cu_dev_set_int8) */
    cu_tuning tune;
    cu_fn_slot fns[CU_DEV_FNS];
} cu_dev;

#endif
