/* backend_cuda_int.h — private to the CUDA backend: the device copy of the model (dmat, dlayer,
 * dmodel), the context (struct backend_ctx) and what its three files share. backend_cuda.c: the
 * context (device memory, state, KV cache access, VRAM tier set-up) and the backend_ops table;
 * backend_cuda_model.c: the upload of a q3n_model, shared by the contexts of that model;
 * backend_cuda_forward.c: the forward pass as launches, the decode and verify graphs, the MTP head;
 * backend_cuda_rows.c: forward_rows and its graphs.
 * Not a public API; included only under RL_CUDA. */
#ifndef RL_BACKEND_CUDA_INT_H
#define RL_BACKEND_CUDA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda_tune.h"
#include "base/common.h"
#include "cuda/cuda_ops.h"
#include "cache/vram_tier.h"

#define CU_CTR_DN 4 /* backend_ctx.ctr: where the split DeltaNet step's per-head counters start */
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((x)) return -1;                                                                                  \
    } while (0)

/* ---- device copy of the model (shared by the contexts of one q3n_model) ----------------- */

typedef struct {
    const uint8_t *d; /* device rows */
    uint32_t type;
    int n_in;
    int64_t n_out;
    size_t row_bytes;
} dmat;

typedef struct {
    float *attn_norm, *post_norm, *q_norm, *k_norm, *conv_w, *dt_bias, *ssm_a, *ssm_norm, *sh_gate;
    dmat wq, wk, wv, wo, wqkv, wgate, wba, wout, router, gate_exps, up_exps, down_exps, gate_sh, up_sh,
        down_sh;
    dmat wbeta, walpha; /* ba_split architectures (qwen35moe, qwen35): beta and alpha, D -> hv each */
    bool fused_gate_up;
    dmat eh_proj;                            /* MTP layer only */
    float *enorm, *hnorm, *shared_head_norm; /* MTP layer only */
} dlayer;

typedef struct dmodel {
    const q3n_model *m;
    bool experts; /* routed experts uploaded (false: a VRAM tier serves them from slots) */
    int ordinal;  /* the CUDA device the arena lives on (one upload per model and device) */
    int refs;
    uint8_t *arena;
    size_t arena_bytes;
    dmat tok_embd, output;
    float *output_norm, *inv_freq;
    dlayer L[Q3N_MAX_LAYERS];
    struct dmodel *next;
    uint64_t rows_ids; /* the last backend_ctx.rows_id handed out (backend_cuda_rows.c) */
} dmodel;

/* Upload m to device `ordinal` (every tensor, or without the routed experts of the decoder layers:
 * experts false, a VRAM tier serves those) or take a reference to its existing upload on that device;
 * NULL with rl_lasterr set on failure. The device must be current on the calling thread. dmodel_put
 * drops the reference (the last one frees the device memory; any thread, any current device). */
dmodel *dmodel_get(const q3n_model *m, bool experts, int ordinal, bool verbose);
void dmodel_put(dmodel *dm);
/* Device bytes of m's upload (experts: as dmodel_get), without uploading; 0 on failure. */
size_t dmodel_bytes(const q3n_model *m, bool experts);

/* ---- context -------------------------------------------------------------------------- */

struct backend_ctx {
    dmodel *dm;
    const q3n_model *m;
    const q3n_hparams *hp;
    int n_ctx, n_batch, max_tiles, logit_rows;
    bool kv_f16, graphs;
    bool attn_per_warp;  /* RL_CUDA_ATTN=per-warp: the previous decode split kernel (A/B) */
    bool attn_pf_staged; /* prefill attention with staged K/V slices (RL_CUDA_ATTN_PF=unstaged: off) */
    bool attn_pf_tiled;  /* the register-tiled prefill attention (RL_CUDA_ATTN_PF=staged|unstaged: off) */
    bool attn_tc;        /* attention on tensor cores (f16 KV, groups <= 16; RL_CUDA_ATTN_TC=0: off) */
    bool attn_db;        /* its split decode kernel double-buffered (RL_CUDA_ATTN_DB=0: off) */
    size_t mem_total, mem_free0, mem_free1,
        mem_free2; /* cudaMemGetInfo: before/after the weights, after the context */
    cudaStream_t st, st2;
    /* the switches (cuda_tune.h, parsed at creation), the device as the launches see it (its facts,
     * the kernels' switches, their per-kernel state) and the two streams with it: every launch of this
     * context goes to ks or ks2 (the st / st2 of cu_stream) */
    cuda_tune tune;
    cu_dev cd;
    cu_stream ks, ks2;
    cudaEvent_t ev_fork, ev_join;
    uint8_t *dev; /* one allocation: state + scratch */
    size_t dev_bytes;
    void *kc[Q3N_MAX_LAYERS], *vc[Q3N_MAX_LAYERS];
    float *conv[Q3N_MAX_LAYERS], *ssm[Q3N_MAX_LAYERS];
    /* scratch (device), rows = n_batch */
    float *x, *xn, *y, *big, *kvb, *ba, *ab, *o, *u, *rl, *wts, *probs, *h, *eo, *hs, *sh, *shg, *part,
        *logits;
    void *ws, *ws2; /* cu_matmul's scratch: the quantised input rows of the integer path (c->st, c->st2) */
    int32_t *tok, *ids, *pair_in, *pair_out;
    int *pos0, *n_tiles, *counts;
    cu_tile *tiles;
    /* pinned host */
    int32_t *h_tok;
    float *h_logits, *h_hidden, *h_tmp;
    size_t h_tmp_floats;
    cudaGraphExec_t gexec;
    bool gtried;
    vram_gtab *gstep; /* this forward is a decode step of the tier inside the graph (vram_gtab.h), or NULL */
    /* VRAM expert tier (NULL: every expert resident); bk: the DeltaNet states saved before
     * each forward, restored if a slot fill fails half-way (nothing corrupted, retry works) */
    vram_tier *vt;
    uint8_t *bk;
    char vram_msg[256]; /* the plan in one line (--vram-mib given), or "" */
    /* speculative decoding (the end of backend_cuda_forward.c): the DeltaNet states as one block
     * (conv[] and ssm[] point into it) so a verify row's snapshot slot is one copy of it; the
     * slots; the per-row slot ids of this forward; the MTP head's [embedding ; hidden] rows; one
     * graph per verify size */
    float *state;
    size_t state_floats;
    float *slots;
    int n_slots;
    bool snap_rows;
    int32_t *row_slot;
    float *mcat;
    cudaGraphExec_t vexec[CU_SMALL_T + 1];
    bool vtried[CU_SMALL_T + 1];
    cudaGraphExec_t mexec[2]; /* the MTP head on one pair, without / with its logits */
    bool mtried[2];
    int small_moe; /* RL_CUDA_SMALL_MOE */
    /* decode kernel fusion, a mask of FUSE_* (RL_CUDA_FUSE, fuse_mask): the combine ends with
     * the next norm, the mixer's output projection with the residual add + norm, the router GEMV
     * with the top-k (last-block tails; same bits as the separate launches);
     * ctr: the tails' counters (zeroed with the allocation; each tail puts its own back) */
    int fuse;
    unsigned *ctr; /* [0, 3): the tails; [CU_CTR_DN, + ssm_hv): the split DeltaNet step's heads */
    bool dn_split; /* the decode DeltaNet step of a value head over 4 blocks (RL_CUDA_DN_SPLIT=0: one) */
    int graph_nodes, graph_kernels; /* of the decode graph, once captured */
    /* forward_rows (backend_cuda_rows.c): the rows graphs this context heads (NULL until the first),
     * and this context's identity in their keys (0 until first used: unique among dm's contexts, so a
     * context freed and another allocated at its address never matches a graph of the first) */
    struct cuda_rows *rows;
    uint64_t rows_id;
};

/* The backend_ops entries of the forward pass and speculative decoding (backend_cuda_forward.c;
 * contracts in backend.h). */
int cuda_forward(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                 float *hidden, const backend_hooks *hooks);
int cuda_mtp_forward(backend_ctx *c, const float *hidden, const int32_t *next_tokens, int T, int slot,
                     float *logits, float *hidden_out);
int cuda_slot_restore(backend_ctx *c, int slot);
int cuda_slot_get(backend_ctx *c, int slot, int il, float *conv, float *ssm);
int cuda_forward_rows(backend_ctx *const *cs, const int32_t *tokens, const int *pos, int n,
                      float *const *logits, float *const *hidden);
/* backend_cuda_rows.c: drop c's rows graphs (cuda_ctx_free); c's rows graphs captured, launched (the first
 * launch of each included) and held now. */
void cuda_rows_free(backend_ctx *c);
/* forward_rows' DeltaNet of layer il (from mixer_deltanet): the conv and the step of each row t on
 * rc[t]'s state (c->big -> c->u; c->ba, c->kvb -> c->o), in one launch each for all the rows or row by
 * row (the same bits). */
int cuda_rows_deltanet(backend_ctx *c, const cu_dn_dims *d, int il, int T, backend_ctx *const *rc);
void cuda_rows_stats(const backend_ctx *c, long *captures, long *launches, int *cached);
/* backend_cuda_forward.c, for forward_rows: enqueue's launches of n rows of the contexts rc (no hooks, no
 * head); the head of rows [t0, t0+n) into c->logits; the head of rows 0..T-1 to the host rows dst[t]. */
int cuda_enqueue_rows(backend_ctx *c, int n, backend_ctx *const *rc);
int cuda_head(backend_ctx *c, int t0, int n);
/* Drop the captured verify graphs (the next verify of each row count captures again). */
void cuda_verify_graphs_drop(backend_ctx *c);
int cuda_head_to_host(backend_ctx *c, int T, float *const *dst);

#endif
