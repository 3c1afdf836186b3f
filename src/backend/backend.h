/* backend.h — what a compute backend implements (CPU reference, CUDA).
 *
 * The engine (engine.c) owns the API, chunking and snapshots; a backend owns one sequence's
 * device state (KV cache, conv and recurrent state) and runs the forward pass. Chosen at
 * start with --backend cpu|cuda|auto.
 *
 * Contract of forward: T rows (1..n_batch) at positions pos..pos+T-1; each row's result is
 * independent of T (multi-row verify == single steps). logits: T x n_vocab if all_logits else
 * the last row only (host memory, may be NULL); hidden: T x n_embd final-norm states (host,
 * may be NULL). row_state (optional) is called after each row's recurrent update with host
 * copies (or pointers) of that DeltaNet layer's conv and recurrent state, for per-row
 * snapshots. Returns 0 or -1 with rl_lasterr set.
 */
#ifndef RL_BACKEND_H
#define RL_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/pool.h"
#include "model/qwen3next.h"

typedef struct backend_ctx backend_ctx;

/* What a context allocated (bytes), from the backend: KV cache (attention layers, the MTP
 * layer's included where the backend caches it), recurrent state (all copies), scratch. On a
 * device backend also the device's memory as cudaMemGetInfo saw it: total, free before the
 * weights were uploaded (0 if this context found them uploaded already), after the upload, and
 * after the context's own allocation. */
typedef struct {
    uint64_t kv_bytes, state_bytes, scratch_bytes;
    bool device;
    uint64_t dev_total, dev_free_before_weights, dev_free_after_weights, dev_free_after_ctx;
    int decode_graph_nodes, decode_graph_kernels; /* CUDA: the captured decode step (0: none yet) */
    bool h2d;                                     /* CUDA VRAM tier: its host->device copies so far */
    uint64_t h2d_bytes;                           /* (vram_link_stats): bytes, copy-stream seconds, */
    double h2d_seconds, h2d_cap_gbs, h2d_raw_gbs; /* RL_VRAM_LINK_GBS cap and real rate (0: none) */
} engine_mem;

/* KV cache element formats (engine_ctx_params.kv): f32, or IEEE half rounded to nearest even
 * on store and widened exactly where attention reads it. */
typedef enum { BACKEND_KV_F32 = 0, BACKEND_KV_F16 = 1 } backend_kv;

typedef struct {
    q3n_dump_fn dump;
    q3n_route_fn route;
    q3n_row_state_fn row_state;
    q3n_row_dst_fn row_dst; /* (optional) preferred over row_state by a backend that writes each
                               row's state straight into host snapshot buffers (the CPU) */
    void *ud;
    /* (backends with slot_restore) device-resident per-row snapshots: row t's recurrent state
     * is written into snapshot slot row_slots[t] (-1: none) during the forward, with no host
     * copy; NULL when no row needs one */
    const int *row_slots;
} backend_hooks;

/* Options of a context beyond its size (backends without them take ctx_new). */
typedef struct {
    const char *vram_spec; /* VRAM expert tier: "auto", "full" or MiB (NULL: every weight resident) */
    backend_kv kv;         /* KV cache format (as ctx_new's kv) */
    const char *vram_pin;  /* --vram-pin auto|on|off (NULL: auto; vram_plan.h) */
    const char *vram_miss; /* --vram-miss copy|cpu|auto (NULL: auto; vram_plan.h) */
} backend_ctx_opts;

typedef struct backend_ops {
    const char *name;
    /* true if this backend can run here (e.g. a CUDA device is present); *why on false */
    bool (*available)(const char **why);
    backend_ctx *(*ctx_new)(const q3n_model *m, pool *p, int n_ctx, int n_batch, backend_kv kv);
    void (*ctx_free)(backend_ctx *c);
    void (*reset)(backend_ctx *c);
    int (*forward)(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                   float *hidden, const backend_hooks *hooks);
    /* copy one DeltaNet layer's state out / in (host floats: conv (kw-1)*conv_dim, ssm hv*dv*dk) */
    int (*state_get)(backend_ctx *c, int layer, float *conv, float *ssm);
    int (*state_set)(backend_ctx *c, int layer, const float *conv, const float *ssm);
    /* (optional) choose the CPU double-precision reference arithmetic (the oracle) over the
     * fast kernels; backends without a reference mode ignore it */
    void (*set_reference)(backend_ctx *c, bool reference);
    /* (optional) the MTP head on T pairs (hidden p, token p+1) into KV slots slot.. (see
     * q3n_mtp_forward); logits T x n_vocab, hidden_out T x n_embd (host, may be NULL) */
    int (*mtp_forward)(backend_ctx *c, const float *hidden, const int32_t *next_tokens, int T, int slot,
                       float *logits, float *hidden_out);
    /* (optional; disk checkpoints) the KV cache rows [0, n) of attention layer il, as raw
     * bytes in the backend's own layout: kv_row_bytes(c) bytes per row for K and for V (f32 or
     * f16 rows, the context's backend_kv). kv_format names that layout ("f32", "f16"; CUDA's
     * "f16-tc": the same rows written by the tensor-core attention) so a saved state is only
     * loaded where it means the same. */
    size_t (*kv_row_bytes)(backend_ctx *c);
    const char *(*kv_format)(backend_ctx *c);
    int (*kv_get)(backend_ctx *c, int il, int n, void *k, void *v);
    int (*kv_set)(backend_ctx *c, int il, int n, const void *k, const void *v);
    /* (optional) what the context allocated (engine_mem, above) */
    void (*mem_info)(backend_ctx *c, engine_mem *out);
    /* (optional; device-resident verify snapshots, see backend_hooks.row_slots) slot_restore
     * makes slot `slot`'s recurrent state the live one (a device copy, ordered before the next
     * forward); slot_get copies one DeltaNet layer of a slot to the host (conv, ssm as in
     * state_get). The engine uses these when present, else the row_state hook. */
    int (*slot_restore)(backend_ctx *c, int slot);
    int (*slot_get)(backend_ctx *c, int slot, int layer, float *conv, float *ssm);
    /* (optional) replace the routed-expert source (bounded expert cache) */
    void (*set_expert_src)(backend_ctx *c, const q3n_expert_src *src);
    /* (optional; VRAM expert tier) a context with options (vram_spec); the host source its
     * slots are filled from (NULL = the mapped file): 0, or 1 where the context has no tier
     * (every expert fit: nothing to feed); the tier's plan and counters as a few lines */
    backend_ctx *(*ctx_new_opts)(const q3n_model *m, pool *p, int n_ctx, int n_batch,
                                 const backend_ctx_opts *o);
    int (*set_host_src)(backend_ctx *c, const q3n_expert_src *src);
    void (*print_stats)(backend_ctx *c, FILE *f);
    /* (optional) one decode step of each of n contexts (n <= the first context's n_batch) as the
     * rows of one forward: row i is tokens[i] at position pos[i] of context cs[i] (its own KV
     * cache and recurrent state); logits[i] (n_vocab, may be NULL) and hidden[i] (n_embd final-norm
     * state, may be NULL) receive row i's. Each row bit-identical to that context's forward of
     * the one token. 0; -1 (rl_lasterr) when it failed, leaving every context as it was; 1 when
     * these contexts cannot share a forward (the engine then runs them one by one). */
    int (*forward_rows)(backend_ctx *const *cs, const int32_t *tokens, const int *pos, int n,
                        float *const *logits, float *const *hidden);
    /* (optional) the prompt rows per forward this backend runs the model best at: the engine's
     * n_batch when the caller leaves it 0 (ENGINE_BATCH_DEFAULT without this hook) */
    int (*prompt_batch)(const q3n_model *m, const pool *p);
} backend_ops;

extern const backend_ops backend_cpu;
#ifdef RL_CUDA
extern const backend_ops backend_cuda;
/* Bytes of the device allocation a CUDA context of n_ctx positions and n_batch rows makes
 * (KV cache + DeltaNet state + scratch; the weights come on top): redlite info's figure. */
size_t backend_cuda_ctx_bytes(const q3n_hparams *hp, int n_ctx, int n_batch, backend_kv kv);
#endif

/* Pick by name ("cpu", "cuda", "auto"); NULL with rl_lasterr if unknown or unavailable. */
const backend_ops *backend_find(const char *name);

#endif
