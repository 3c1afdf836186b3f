/* qwen3next.h — the Qwen3-Next architecture: hyperparameters, tensor binding, forward pass.
 *
 * Everything specific to Qwen3-Next lives in qwen3next.c (spec: docs/qwen3next-spec.md in
 * the shared reference material): which layers are Gated DeltaNet and which full attention,
 * the tensor names of both GGUF generations, the op order of each block. Generic math comes
 * from ops.h. The engine (engine.h) owns contexts and calls q3n_forward.
 */
#ifndef RL_QWEN3NEXT_H
#define RL_QWEN3NEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "ops.h"
#include "pool.h"

#define Q3N_MAX_LAYERS 128

typedef struct {
    int n_vocab;          /* rows of token_embd / output */
    int n_embd;           /* hidden size D (2048) */
    int n_layer;          /* decoder layers of the main model (48); MTP layers excluded */
    int n_nextn;          /* MTP layers appended after the main ones (0 or 1) */
    int n_ctx_train;      /* context_length */
    int n_head, n_head_kv, head_dim; /* full attention: 16, 2, 256 */
    int n_rot;            /* rotary dims (64) */
    float rope_base;      /* rope.freq_base */
    float rms_eps;        /* 1e-6 */
    int n_expert, n_expert_used; /* 512, 10 */
    int n_ff_exp, n_ff_shexp;    /* 512, 512 */
    int ssm_kw;           /* conv kernel width (4) */
    int ssm_dk;           /* key head dim (state_size, 128) */
    int ssm_hk;           /* key heads (group_count, 16) */
    int ssm_hv;           /* value heads (time_step_rank, 32) */
    int ssm_dv;           /* value head dim (inner_size / hv, 128) */
    int ssm_conv_dim;     /* 2*hk*dk + hv*dv (8192) */
    int full_attn_interval;
    bool legacy_ssm_in;   /* older GGUF generation: fused, interleaved ssm_in */
    bool is_attn[Q3N_MAX_LAYERS]; /* per layer (including MTP layers, which are attention) */
} q3n_hparams;

/* Weights of one decoder layer. Float vectors are owned copies (converted from any float
 * type at load); matrices are zero-copy views into the GGUF mapping (or owned buffers for the
 * de-interleaved legacy projection). */
typedef struct {
    bool is_attn;
    float *attn_norm, *post_norm;          /* [D] */
    /* full attention */
    ops_mat wq;                            /* D -> H * 2 * hd (query and gate per head) */
    ops_mat wk, wv;                        /* D -> Hkv * hd */
    ops_mat wo;                            /* H * hd -> D */
    float *q_norm, *k_norm;                /* [hd] */
    /* Gated DeltaNet */
    ops_mat wqkv;                          /* D -> conv_dim  [q all | k all | v all] */
    ops_mat wgate;                         /* D -> hv * dv   (z) */
    ops_mat wba;                           /* D -> 2 * hv    per key head [b x r | a x r] */
    float *conv_w;                         /* [conv_dim][kw] */
    float *dt_bias, *ssm_a;                /* [hv]; ssm_a = -exp(A_log) */
    float *ssm_norm;                       /* [dv] */
    ops_mat wout;                          /* hv * dv -> D */
    void *owned;                           /* de-interleaved legacy ssm_in rows, if any */
    /* MoE */
    ops_mat router;                        /* D -> n_expert */
    ops_mat gate_exps, up_exps;            /* D -> n_ff rows per expert (n_out = n_ff*E) */
    ops_mat down_exps;                     /* n_ff -> D rows per expert (n_out = D*E) */
    bool fused_gate_up;                    /* gate_up_exps: 2*n_ff rows per expert, gate first */
    ops_mat gate_sh, up_sh, down_sh;       /* shared expert */
    float *sh_gate;                        /* [D] shared expert gate (sigmoid) */
    /* MTP (nextn) extras, only on MTP layers */
    ops_mat eh_proj;                       /* 2D -> D */
    float *enorm, *hnorm, *shared_head_norm;
} q3n_layer;

typedef struct {
    q3n_hparams hp;
    gguf_file *gguf;
    ops_mat tok_embd;                      /* D x n_vocab */
    ops_mat output;                        /* D -> n_vocab */
    float *output_norm;                    /* [D] */
    q3n_layer layers[Q3N_MAX_LAYERS];
    uint64_t bytes_dense, bytes_experts;   /* as stored in the file */
} q3n_model;

/* Read hyperparameters (one function, explicit required/optional keys) and bind every
 * tensor with type and shape checks. Returns 0, or -1 with rl_lasterr set. */
int q3n_load(q3n_model *m, gguf_file *f);
void q3n_free(q3n_model *m);

/* Pointers to the weights of experts of one layer. The default source serves slices of the
 * mapped file; the bounded expert cache supplies its own. `acquire` is called once per layer
 * per forward with the union of the selected experts and must fill gate/up/down row pointers
 * for each (the matrices' row layout is that of the layer's *_exps tensors); `release` ends
 * the use of that selection. */
typedef struct {
    int (*acquire)(void *ud, int layer, const int32_t *ids, int n, const uint8_t **gate, const uint8_t **up,
                   const uint8_t **down);
    void (*release)(void *ud, int layer);
    /* (optional) called at the start of layer `layer`'s MoE with its normed input
     * xn (T x D), before acquire: lets a cache pre-gate layer+1's experts (apply layer+1's
     * router to xn) and prefetch them while this layer computes. */
    void (*hint)(void *ud, int layer, const float *xn, int T);
    /* (optional) cache-aware routing — CHANGES OUTPUTS, NULL (exact routing) by default:
     * called per row with a copy of the router probabilities (n = n_expert) that may be
     * rewritten into any ranking scores; the top-k ids are chosen from the scores, the
     * mixture weights still come from the unbiased probabilities. */
    void (*bias)(void *ud, int layer, float *scores, int n);
    void *ud;
} q3n_expert_src;

/* Sequence state of one context (sizes from q3n_state_sizes). */
typedef struct {
    int n_ctx;
    float **k_cache, **v_cache;  /* per layer (attention layers): [n_ctx][Hkv*hd] */
    float **conv;                /* per layer (DeltaNet): [(kw-1)][conv_dim] */
    float **ssm;                 /* per layer (DeltaNet): [hv][dv][dk] */
    /* Uncommitted recurrent state, same shapes (NULL: updates in place). A forward pass reads
     * conv/ssm and writes its new state here; only when every layer succeeded are the pointer
     * pairs swapped. A step that fails half-way (an expert read error in a bounded cache) thus
     * leaves the committed state exactly as it was, with no snapshot: KV rows past the context
     * position are ignored anyway, so the next step simply runs again. */
    float **conv_next, **ssm_next;
} q3n_state;

/* Optional observers for debugging and tests. */
typedef void (*q3n_dump_fn)(void *ud, const char *name, int layer, int row, const float *x, int n);
typedef void (*q3n_route_fn)(void *ud, int layer, int row, const int32_t *ids, const float *w, const float *probs,
                             int k);
/* Called after each row's recurrent update of each DeltaNet layer (for per-row snapshots). */
typedef void (*q3n_row_state_fn)(void *ud, int layer, int row, const float *conv, const float *ssm);

typedef struct {
    const q3n_model *m;
    pool *pool;
    q3n_state *st;
    q3n_expert_src experts;
    q3n_dump_fn dump;
    q3n_route_fn route;
    q3n_row_state_fn row_state;
    void *hook_ud;
    int max_rows;                /* largest T a forward may be called with */
    bool fast;                   /* SIMD kernels with quantised activations instead of the
                                    double-precision reference (ops_matmul_fast) */
    void *actq;                  /* owned, q3n_actq_bytes(max_rows): quantised activations */
    float *scratch;              /* owned, sized by q3n_scratch_floats(max_rows) */
} q3n_run;

size_t q3n_scratch_floats(const q3n_hparams *hp, int max_rows);
size_t q3n_conv_floats(const q3n_hparams *hp);
size_t q3n_actq_bytes(const q3n_hparams *hp, int max_rows);
size_t q3n_ssm_floats(const q3n_hparams *hp);

/* Run T tokens (T <= r->max_rows) at positions pos..pos+T-1 through the main model,
 * updating the state. hidden_out (optional): T x D final-norm hidden states (for MTP).
 * logits (optional): T x n_vocab if all_logits, else only the last row's n_vocab.
 * Returns 0 or -1 (rl_lasterr) — e.g. the expert source failed to load a slice. */
int q3n_forward(q3n_run *r, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                float *hidden_out);
/* The MTP head (spec F.2) on T pairs (h_p, x_{p+1}): hidden is T x D final-norm states of the
 * main model, next_tokens the tokens that followed. Pair i goes to the MTP layer's KV slot
 * slot+i at RoPE position slot+i+1. logits: T x n_vocab (drafts for p+2); hidden_out (optional):
 * T x D states after the MTP head's norm (the input of a further draft step). */
int q3n_mtp_forward(q3n_run *r, const float *hidden, const int32_t *next_tokens, int T, int slot, float *logits,
                    float *hidden_out);
#endif
