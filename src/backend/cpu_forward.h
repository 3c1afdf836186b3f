/* cpu_forward.h — the CPU executor of Qwen3-Next: sequence state, run context, forward passes.
 *
 * The architecture description (tensors, hyperparameters, limits, the expert source and observer
 * contracts that every backend shares) is model/qwen3next.h; this header is the CPU reference
 * forward pass (backend/qwen3next_forward.c, backend/qwen3next_mixer.c) that runs it, used by the
 * CPU backend and by tools that size its buffers.
 */
#ifndef RL_CPU_FORWARD_H
#define RL_CPU_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"
#include "kern/ops.h"
#include "model/qwen3next.h"

/* Sequence state of one context (sizes from q3n_conv_floats, q3n_ssm_floats). */
typedef struct {
    int n_ctx;
    void **k_cache, **v_cache; /* per layer (attention layers): [n_ctx][Hkv*hd] rows of float, or
                                  of IEEE halves (uint16_t) when kv_f16 */
    bool kv_f16;               /* the --kv f16 cache: K/V rows rounded to half (nearest even) on
                                  store, widened exactly in the attention loops */
    float **conv;              /* per layer (DeltaNet): [(kw-1)][conv_dim] */
    float **ssm;               /* per layer (DeltaNet): [hv][dv][dk] */
    /* Uncommitted recurrent state, same shapes (NULL: updates in place). A forward pass reads
     * conv/ssm and writes its new state here; only when every layer succeeded are the pointer
     * pairs swapped. A step that fails half-way (an expert read error in a bounded cache) thus
     * leaves the committed state exactly as it was, with no snapshot: KV rows past the context
     * position are ignored anyway, so the next step simply runs again. */
    float **conv_next, **ssm_next;
} q3n_state;

/* Store one position's K and V rows (kvw = Hkv*hd floats each) into layer il's cache slot, in
 * the cache's format (f16: round to nearest even). */
void q3n_kv_store(q3n_state *st, int il, int slot, const float *k, const float *v, size_t kvw);

typedef struct {
    const q3n_model *m;
    pool *pool;
    q3n_state *st;
    q3n_expert_src experts;
    q3n_dump_fn dump;
    q3n_route_fn route;
    q3n_row_state_fn row_state;
    q3n_row_dst_fn row_dst;
    void *hook_ud;
    int max_rows;   /* largest T a forward may be called with */
    bool fast;      /* SIMD kernels with quantised activations instead of the
                       double-precision reference (ops_matmul_fast) */
    void *actq;     /* owned, q3n_actq_bytes(max_rows): quantised activations */
    float *scratch; /* owned, sized by q3n_scratch_floats(max_rows) */
} q3n_run;

size_t q3n_scratch_floats(const q3n_hparams *hp, int max_rows);
size_t q3n_actq_bytes(const q3n_hparams *hp, int max_rows);

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
int q3n_mtp_forward(q3n_run *r, const float *hidden, const int32_t *next_tokens, int T, int slot,
                    float *logits, float *hidden_out);

/* The CPU forward of rows of several sequences (qwen3next_forward.c; backend_cpu's forward_rows):
 * q3n_forward's arithmetic with row t at position pos[t] of state st[t] (its KV cache, its conv
 * and recurrent state, committed only when every layer succeeded), r's scratch, pool and expert
 * source; no observers. logits[t] / hidden[t] may be NULL; lbuf holds T x n_vocab floats (the
 * output projection of all rows). 0 or -1 (rl_lasterr). */
int q3n_forward_rows(q3n_run *r, q3n_state *const *st, const int32_t *tokens, const int *pos, int T,
                     float *const *logits, float *const *hidden, float *lbuf);
#endif
