/* qwen3next.h — the Qwen3-Next architecture family: hyperparameters, tensor binding, the contracts
 * of the forward passes (expert source, observers, state sizes) that every backend shares.
 *
 * One description covers the family (docs/QWEN35.md): qwen3next (Qwen3-Next, Qwen3-Coder-Next),
 * qwen35moe (Qwen3.5 / Qwen3.6 MoE) and qwen35 (their dense-FFN models) are rows of one table of
 * architectures (q3n_arch_desc) over one tensor table; what differs is a few switches: routed
 * experts or a dense FFN, the DeltaNet beta/alpha projections fused (ssm_ba) or separate
 * (ssm_beta, ssm_alpha), and the value heads' order (grouped by key head, or tiled).
 *
 * Everything specific to the family lives in qwen3next.c (the description, hyperparameters,
 * tensor binding); the CPU executor is backend/cpu_forward.h (qwen3next_forward.c), the CUDA one
 * backend_cuda*.c; spec:
 * docs/qwen3next-spec.md in the shared reference material: which layers are Gated DeltaNet and
 * which full attention, the tensor names of both GGUF generations, the op order of each block.
 * Generic math comes from ops.h. The engine (engine.h) owns contexts and calls the backends.
 */
#ifndef RL_QWEN3NEXT_H
#define RL_QWEN3NEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kern/ops.h"

/* Limits on values read from a file (checked by q3n_load / q3n_read_hparams, with a one-line
 * error naming the file, the key and the value): */
#define Q3N_MAX_LAYERS 128 /* blocks incl. MTP (48 + 1): per-layer tables of the backends, cache */
#define Q3N_MAX_EXPERTS                                                                                      \
    1024                        /* n_expert (512): ops_matmul_batch's task table (OPS_MAX_TASKS), the        \
                                   expert cache's selection (EC_MAX_SEL), the CUDA router's lanes */
#define Q3N_MAX_HEAD_DIM 1024   /* head_dim (256), DeltaNet dk (128): the reference attention's row */
#define Q3N_MAX_VOCAB (1 << 30) /* token_embd rows (151936): token ids are int32 */

/* ---- the architectures of the family --------------------------------------------------------- */
typedef enum { Q3N_ARCH_QWEN3NEXT, Q3N_ARCH_QWEN35MOE, Q3N_ARCH_QWEN35, Q3N_ARCH_COUNT } q3n_arch;

typedef struct {
    const char *name;   /* general.architecture, also the metadata key prefix */
    const char *family; /* in words, for `info` */
    bool moe;           /* routed experts + gated shared expert (false: a dense SwiGLU FFN) */
    bool ba_split;      /* DeltaNet beta and alpha as two matrices (ssm_beta, ssm_alpha); false: one
                           fused ssm_ba interleaved per key head */
    bool v_tiled;       /* value head h reads key head h % hk (llama.cpp's converter reorders Qwen3.5's
                           value heads so); false: key head h / (hv / hk), HF's grouped order */
    bool rope_sections; /* rope.dimension_sections is required (multi-section RoPE; text positions
                           make it the plain partial RoPE, docs/QWEN35.md) */
} q3n_arch_desc;

const q3n_arch_desc *q3n_arch_get(q3n_arch a);
/* general.architecture -> arch, or -1. */
int q3n_arch_find(const char *name);

/* ---- the model description: tensors and named activations ----------------------------------
 * Every GGUF tensor name of Qwen3-Next lives in one table (qwen3next.c, q3n_tensor), with its
 * role, the kind of block it belongs to, its shape as a function of the hyperparameters and
 * whether it is required. Binding, `synth`, `info`, `bench --profile` and the expert cache read
 * it; adding or renaming a tensor is one edit there. Names of both GGUF generations are listed
 * (spec §B): the split DeltaNet projections (attn_qkv + attn_gate) and the older fused ssm_in,
 * separate or fused (gate_up) expert slabs. */

/* Where a tensor lives. */
typedef enum {
    Q3N_KIND_GLOBAL,   /* once per model (embedding, head) */
    Q3N_KIND_BLOCK,    /* every decoder block (the mixer's input norm) */
    Q3N_KIND_DELTANET, /* Gated DeltaNet blocks: (i+1) % full_attention_interval != 0 */
    Q3N_KIND_ATTN,     /* gated full attention blocks (and the MTP block) */
    Q3N_KIND_MOE,      /* the mixture of experts of every block (MoE architectures) */
    Q3N_KIND_FFN,      /* the dense FFN of every block (dense architectures) */
    Q3N_KIND_MTP,      /* the MTP (nextn) block's extras, blocks >= n_layer */
    Q3N_KIND_COUNT
} q3n_kind;

/* Symbolic dimensions: a tensor's shape {ne0 (n_in), ne1 (n_out), ne2 (experts)}. */
typedef enum {
    Q3N_DIM_NONE, /* dimension absent */
    Q3N_DIM_D,    /* n_embd */
    Q3N_DIM_2D,   /* 2 * n_embd (MTP: [embedding ; hidden]) */
    Q3N_DIM_VOCAB,
    Q3N_DIM_E,      /* n_expert */
    Q3N_DIM_FF,     /* expert_feed_forward_length */
    Q3N_DIM_2FF,    /* fused gate_up: 2 * expert_feed_forward_length */
    Q3N_DIM_FF_SH,  /* expert_shared_feed_forward_length */
    Q3N_DIM_HD,     /* attention head dim */
    Q3N_DIM_Q_GATE, /* n_head * head_dim * 2 (query and output gate per head) */
    Q3N_DIM_KV,     /* n_head_kv * head_dim */
    Q3N_DIM_ATT,    /* n_head * head_dim */
    Q3N_DIM_CONV,   /* conv_dim = 2 * hk * dk + hv * dv */
    Q3N_DIM_INNER,  /* hv * dv */
    Q3N_DIM_SSM_IN, /* legacy fused projection: conv_dim + hv * dv */
    Q3N_DIM_HV,     /* value heads */
    Q3N_DIM_2HV,    /* ssm_ba rows: beta and alpha per value head */
    Q3N_DIM_DV,     /* value head dim */
    Q3N_DIM_KW,     /* conv kernel width */
    Q3N_DIM_N_FF,   /* dense FFN width (feed_forward_length) */
    Q3N_DIM_COUNT
} q3n_dim;

typedef enum {
    Q3N_REQUIRED,    /* missing: the model is refused */
    Q3N_OPTIONAL,    /* may be absent (shared expert, untied output) */
    Q3N_ALTERNATIVE, /* another GGUF generation's form of required tensors (see the table) */
} q3n_need;

typedef enum {
    Q3N_T_TOKEN_EMBD,
    Q3N_T_ATTN_NORM,
    Q3N_T_ATTN_Q,
    Q3N_T_ATTN_K,
    Q3N_T_ATTN_V,
    Q3N_T_ATTN_OUTPUT,
    Q3N_T_ATTN_Q_NORM,
    Q3N_T_ATTN_K_NORM,
    Q3N_T_SSM_QKV,
    Q3N_T_SSM_GATE,
    Q3N_T_SSM_IN,
    Q3N_T_SSM_BA,
    Q3N_T_SSM_BETA,
    Q3N_T_SSM_ALPHA,
    Q3N_T_SSM_CONV,
    Q3N_T_SSM_DT,
    Q3N_T_SSM_A,
    Q3N_T_SSM_NORM,
    Q3N_T_SSM_OUT,
    Q3N_T_POST_NORM,
    Q3N_T_ROUTER,
    Q3N_T_GATE_EXPS,
    Q3N_T_UP_EXPS,
    Q3N_T_GATE_UP_EXPS,
    Q3N_T_DOWN_EXPS,
    Q3N_T_SH_GATE,
    Q3N_T_GATE_SH,
    Q3N_T_UP_SH,
    Q3N_T_DOWN_SH,
    Q3N_T_FFN_GATE,
    Q3N_T_FFN_UP,
    Q3N_T_FFN_DOWN,
    Q3N_T_EH_PROJ,
    Q3N_T_ENORM,
    Q3N_T_HNORM,
    Q3N_T_SHARED_HEAD_NORM,
    Q3N_T_OUTPUT_NORM,
    Q3N_T_OUTPUT,
    Q3N_T_COUNT
} q3n_tensor_id;

typedef struct {
    const char *name; /* GGUF name; in block tensors "%d" stands for the block index */
    const char *role; /* what it is, in words */
    q3n_kind kind;
    q3n_dim ne[3]; /* {n_in, n_out, n_expert}; vectors use ne[0] (and ne[1] for conv1d) */
    q3n_need need;
    bool vec;       /* float vector, converted to an owned float copy at load */
    bool routed;    /* a stacked routed-expert slab (ne[2] = n_expert), served by the cache */
    int field;      /* byte offset of its ops_mat / float * in q3n_layer (block tensors) or
                       q3n_model (global ones); -1: bound by special code */
    unsigned archs; /* the architectures that have it: bit 1 << q3n_arch; 0: all of them */
} q3n_tensor_desc;

/* Table order is the file order `synth` writes (and the binding order): token_embd, then per
 * block the table's block entries, then output_norm and output. */
const q3n_tensor_desc *q3n_tensor(q3n_tensor_id id);
/* Name of tensor id in block il (ignored for global tensors) into buf; returns buf. */
const char *q3n_tensor_name(q3n_tensor_id id, int il, char *buf, size_t n);
/* A GGUF tensor name -> its id (and *il: block index, -1 for global tensors); -1 if the name is
 * not a Qwen3-Next tensor. */
int q3n_tensor_lookup(const char *name, int *il);
/* The tensor is a stacked routed-expert slab (what the expert cache serves, not dense weights). */
bool q3n_tensor_is_routed(const char *name);

/* Named activations the forward passes emit to the dump hook (both backends, in this order
 * within a block); `redlite dump --names` and `bench --profile` select by them. */
typedef enum {
    Q3N_ACT_INP_EMBD,    /* token embedding rows (layer -1) */
    Q3N_ACT_ATTN_NORM,   /* the block's normed input */
    Q3N_ACT_DN_CONV,     /* DeltaNet: conv output (q|k|v, before the l2 norms) */
    Q3N_ACT_DN_GATED,    /* DeltaNet: gated-normed recurrence output */
    Q3N_ACT_ATTN_GATED,  /* attention: sigmoid-gated attention output */
    Q3N_ACT_ATTN_OUT,    /* the mixer's output projection */
    Q3N_ACT_FFN_INP,     /* residual after the mixer */
    Q3N_ACT_FFN_NORM,    /* the MoE's normed input */
    Q3N_ACT_FFN_OUT,     /* the MoE's output (routed + shared) */
    Q3N_ACT_L_OUT,       /* the block's output */
    Q3N_ACT_RESULT_NORM, /* final norm (layer -1) */
    Q3N_ACT_COUNT
} q3n_act;

const char *q3n_act_name(q3n_act a);
/* name -> q3n_act, or -1. */
int q3n_act_find(const char *name);

typedef struct {
    q3n_arch arch;                   /* which row of the family's table (q3n_arch_get) */
    bool moe, ba_split, v_tiled;     /* that row's switches, copied */
    int n_ff;                        /* dense FFN width (dense architectures; 0 for MoE) */
    int rope_sections[4];            /* rope.dimension_sections (qwen35*; informative for text) */
    int n_vocab;                     /* rows of token_embd / output */
    int n_embd;                      /* hidden size D (2048) */
    int n_layer;                     /* decoder layers of the main model (48); MTP layers excluded */
    int n_nextn;                     /* MTP layers appended after the main ones (0 or 1) */
    int n_ctx_train;                 /* context_length */
    int n_head, n_head_kv, head_dim; /* full attention: 16, 2, 256 */
    int n_rot;                       /* rotary dims (64) */
    float rope_base;                 /* rope.freq_base */
    float rms_eps;                   /* 1e-6 */
    int n_expert, n_expert_used;     /* 512, 10 */
    int n_ff_exp, n_ff_shexp;        /* 512, 512 */
    int ssm_kw;                      /* conv kernel width (4) */
    int ssm_dk;                      /* key head dim (state_size, 128) */
    int ssm_hk;                      /* key heads (group_count, 16) */
    int ssm_hv;                      /* value heads (time_step_rank, 32) */
    int ssm_dv;                      /* value head dim (inner_size / hv, 128) */
    int ssm_conv_dim;                /* 2*hk*dk + hv*dv (8192) */
    int full_attn_interval;
    bool legacy_ssm_in;           /* older GGUF generation: fused, interleaved ssm_in */
    bool is_attn[Q3N_MAX_LAYERS]; /* per layer (including MTP layers, which are attention) */
} q3n_hparams;

/* A symbolic dimension's value for these hyperparameters. */
int64_t q3n_dim_value(const q3n_hparams *hp, q3n_dim d);
/* Whether tensor kind k is present in block il (main blocks, then the MTP block). */
bool q3n_kind_in_block(const q3n_hparams *hp, q3n_kind k, int il);
/* Whether table entry id belongs to block il of this architecture (its kind and its archs). */
bool q3n_tensor_in_block(const q3n_hparams *hp, q3n_tensor_id id, int il);
/* Key head of DeltaNet value head h (grouped or tiled order, see q3n_arch_desc.v_tiled). */
static inline int q3n_key_head(const q3n_hparams *hp, int h) {
    return hp->v_tiled ? h % hp->ssm_hk : h / (hp->ssm_hv / hp->ssm_hk);
}
/* Block il is gated full attention (every full_attention_interval-th, and the MTP block). */
bool q3n_block_is_attn(const q3n_hparams *hp, int il);

/* Weights of one decoder layer. Float vectors are owned copies (converted from any float
 * type at load); matrices are zero-copy views into the GGUF mapping (or owned buffers for the
 * de-interleaved legacy projection; or, on the CPU backend, copies in huge-page memory: resident.h,
 * and the lookup-free IQ layout: expert_repack.h). */
typedef struct {
    bool is_attn;
    float *attn_norm, *post_norm; /* [D] */
    /* full attention */
    ops_mat wq;             /* D -> H * 2 * hd (query and gate per head) */
    ops_mat wk, wv;         /* D -> Hkv * hd */
    ops_mat wo;             /* H * hd -> D */
    float *q_norm, *k_norm; /* [hd] */
    /* Gated DeltaNet */
    ops_mat wqkv;           /* D -> conv_dim  [q all | k all | v all] */
    ops_mat wgate;          /* D -> hv * dv   (z) */
    ops_mat wba;            /* D -> 2 * hv    per key head [b x r | a x r] (fused) */
    ops_mat wbeta, walpha;  /* D -> hv each (ba_split architectures) */
    float *conv_w;          /* [conv_dim][kw] */
    float *dt_bias, *ssm_a; /* [hv]; ssm_a = -exp(A_log) */
    float *ssm_norm;        /* [dv] */
    ops_mat wout;           /* hv * dv -> D */
    void *owned;            /* de-interleaved legacy ssm_in rows, if any */
    /* MoE */
    ops_mat router;                  /* D -> n_expert */
    ops_mat gate_exps, up_exps;      /* D -> n_ff rows per expert (n_out = n_ff*E) */
    ops_mat down_exps;               /* n_ff -> D rows per expert (n_out = D*E) */
    bool fused_gate_up;              /* gate_up_exps: 2*n_ff rows per expert, gate first */
    ops_mat gate_sh, up_sh, down_sh; /* shared expert */
    float *sh_gate;                  /* [D] shared expert gate (sigmoid) */
    /* dense FFN (dense architectures) */
    ops_mat ffn_gate, ffn_up; /* D -> n_ff */
    ops_mat ffn_down;         /* n_ff -> D */
    /* MTP (nextn) extras, only on MTP layers */
    ops_mat eh_proj; /* 2D -> D */
    float *enorm, *hnorm, *shared_head_norm;
} q3n_layer;

typedef struct {
    q3n_hparams hp;
    gguf_file *gguf;
    ops_mat tok_embd;   /* D x n_vocab */
    ops_mat output;     /* D -> n_vocab */
    float *output_norm; /* [D] */
    q3n_layer layers[Q3N_MAX_LAYERS];
    uint64_t bytes_dense, bytes_experts; /* as stored in the file */
    bool dense_copied, experts_copied;   /* the views of the dense matrices / routed experts point
                                            at copies in memory (resident.h), not at the mapping */
} q3n_model;

/* Read and check the hyperparameters alone (for tools that describe a file without binding
 * it): 0; -1 if keys are missing (not a Qwen3-Next GGUF); -2 if a value is out of range or
 * inconsistent (the file would be refused). rl_lasterr set on failure. */
int q3n_read_hparams(gguf_file *f, q3n_hparams *hp);
/* Every forward's input check (CPU reference and CUDA): 0 when the T token ids are in
 * 0..n_vocab-1, else -1 with rl_lasterr naming the first id outside. */
int q3n_check_tokens(const int32_t *tokens, int T, int n_vocab);
/* Read hyperparameters (one table of keys with defaults and limits) and bind every tensor of the
 * table with type and shape checks. Returns 0, or -1 with rl_lasterr set. */
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
     * router to xn) and prefetch them while this layer computes. xn NULL: only the row count (a
     * GPU's VRAM tier streaming its prompt chunks, whose input is on the device; a bounded cache
     * reads a forward of many rows as a scan, expert_cache.h). */
    void (*hint)(void *ud, int layer, const float *xn, int T);
    /* (optional) cache-aware routing — CHANGES OUTPUTS, NULL (exact routing) by default:
     * called per row with a copy of the router probabilities (n = n_expert) that may be
     * rewritten into any ranking scores; the top-k ids are chosen from the scores, the
     * mixture weights still come from the unbiased probabilities. */
    void (*bias)(void *ud, int layer, float *scores, int n);
    /* (optional) the i-th memory span the source serves experts from (its own buffers, e.g.
     * the bounded cache's slot arenas: a GPU tier page-locks them for DMA): 1 with *p, *n set,
     * 0 past the last one. NULL or no span: experts come from the file mapping. The bytes of
     * a span may be rewritten after release (a slot reused). */
    int (*span)(void *ud, int i, void **p, uint64_t *n);
    /* (optional) experts ids[0..n) of `layer`, just served by acquire and released, are now held
     * by a faster tier (a GPU's VRAM slots): the source may evict them first, so the two tiers
     * together hold more distinct experts (exclusive caching). Changes no output. */
    void (*demote)(void *ud, int layer, const int32_t *ids, int n);
    /* (optional) experts ids[0..n) of `layer` will likely be asked for soon (a faster tier's own
     * prediction, made where `hint` cannot run: a GPU's pre-gated router): the source may start
     * reading them now, without pinning, so a later acquire finds them loaded or on their way.
     * Best effort; changes no output. */
    void (*prefetch)(void *ud, int layer, const int32_t *ids, int n);
    /* (optional) victim caching: a faster tier is about to overwrite its copy of expert `id` of
     * `layer` (an eviction) and offers it back. 1: the source reserved room and set gate/up/down to
     * where its rows go (acquire's layout, in a span); the tier copies the bytes there, then calls
     * kept(ok) once they are in (ok false: a failed copy, the room is given back). Until then the
     * entry is loading: no acquire is served from it. 0: declined (already held, no room). Every
     * keep is answered by one kept before the tier's next acquire. Changes no output. */
    int (*keep)(void *ud, int layer, int id, uint8_t **gate, uint8_t **up, uint8_t **down);
    void (*kept)(void *ud, int layer, int id, bool ok);
    void *ud;
} q3n_expert_src;

/* Optional observers for debugging and tests. */
typedef void (*q3n_dump_fn)(void *ud, const char *name, int layer, int row, const float *x, int n);
typedef void (*q3n_route_fn)(void *ud, int layer, int row, const int32_t *ids, const float *w,
                             const float *probs, int k);
/* Called after each row's recurrent update of each DeltaNet layer (for per-row snapshots). */
typedef void (*q3n_row_state_fn)(void *ud, int layer, int row, const float *conv, const float *ssm);
/* Per-row snapshots without copies: where row `row`'s conv and recurrent state of DeltaNet layer
 * `layer` go (*conv = *ssm = NULL: that row needs none). The recurrence writes each such row's
 * state there as its output (the next row reads it back), so a verify pays no snapshot copy and
 * runs the recurrence of all rows in one dispatch; the last row's state also lands in the live
 * state as always. The arithmetic is that of the plain forward (only where the values are
 * stored differs), so rows stay bit-identical to single steps. When set, row_state is not
 * called. */
typedef void (*q3n_row_dst_fn)(void *ud, int layer, int row, float **conv, float **ssm);

/* Sizes of one context's recurrent state per DeltaNet layer, in floats (every backend holds
 * the same state): the conv window [(kw-1)][conv_dim] and the recurrence [hv][dv][dk]. */
size_t q3n_conv_floats(const q3n_hparams *hp);
size_t q3n_ssm_floats(const q3n_hparams *hp);
#endif
