/* qwen3next_int.h — internal to the CPU forward of Qwen3-Next (backend/qwen3next_forward.c, the
 * scratch, MoE block and forward drivers; backend/qwen3next_mixer.c, the attention and Gated DeltaNet
 * layer bodies). Not for other modules: the public contract is backend/cpu_forward.h.
 */
#ifndef RL_QWEN3NEXT_INT_H
#define RL_QWEN3NEXT_INT_H

#include "backend/cpu_forward.h"

/* Scratch carved from r->scratch for T = max_rows rows. */
typedef struct {
    float *x, *xn, *y; /* [T][D] residual stream, normed input, block output */
    float *big;        /* [T][max(2*H*hd, conv_dim)]  q+gate or qkv */
    float *kv;         /* [T][max(2*Hkv*hd, inner)]   k,v or z */
    float *ba;         /* [T][2*hv] */
    float *o;          /* [T][max(H*hd, inner)]       pre-projection output */
    float *u;          /* [T][conv_dim]               conv output */
    float *rl;         /* [T][E] router logits -> probs */
    float *sel_w;      /* [T][K] mixture weights */
    float *sel_id;     /* [T][K] expert ids (stored as float-sized int32 slots) */
    float *xs;         /* [T*K][D]   inputs gathered per expert */
    float *g, *up;     /* [T*K + T][ff] gate / up outputs (experts, then shared expert) */
    float *eo;         /* [T*K][D]   expert outputs, in gathered order */
    float *sh;         /* [T][D] shared expert output */
    /* MoE bookkeeping, sized by the model (n_expert E, top-k K) and the rows, never by a guess: */
    float *sc;                       /* [E] biased ranking scores of one row (cache-aware routing) */
    float *pr;                       /* [K] the selected experts' probabilities of one row (route hook) */
    int32_t *uniq;                   /* [E] union of the selected experts, in order of first use */
    int32_t *slot_of;                /* [E] expert -> index in uniq, or -1 */
    int32_t *first;                  /* [E + 1] first gathered row of each expert of uniq */
    int32_t *fill;                   /* [E] gather cursor per expert */
    int32_t *gidx;                   /* [T*K] gathered row of (row, slot) */
    const uint8_t **gp, **upp, **dp; /* [E] expert weight rows from the expert source */
    ops_mat *mats;                   /* [3E] per-expert slices of gate, up, down */
    ops_mm_task *tasks;              /* [2E + 2] one dispatch's products */
    float **rdst; /* [T][2] per-row snapshot destinations (conv, ssm) of a DeltaNet layer */
    float *spare; /* the floats past T rows' carve, up to max_rows rows' (attention chunk partials) */
    size_t n_spare;
    /* rows of several sequences (q3n_forward_rows): row t's state and position; NULL: every row
     * is the next position of r->st (pos + t) */
    q3n_state *const *rst;
    const int *rpos;
} scratch;

#define DUMP(r, act, il, t, ptr, n)                                                                          \
    do {                                                                                                     \
        if ((r)->dump) (r)->dump((r)->hook_ud, q3n_act_name(act), il, t, ptr, n);                            \
    } while (0)

/* Run n independent projections in one dispatch (qwen3next_forward.c). */
void q3n_mm_batch(q3n_run *r, ops_mm_task *tasks, int n);
/* Every projection goes through here: the reference (oracle) or the fast SIMD path. */
void q3n_mm(q3n_run *r, const ops_mat *W, const float *x, int T, float *y);

/* The mixers of one layer on s->xn (T rows), output in s->y (qwen3next_mixer.c): gated full attention
 * on KV slots pos..pos+T-1 at RoPE positions slot + rope_delta, or Gated DeltaNet. */
void q3n_attention_layer(q3n_run *r, const q3n_layer *L, int il, scratch *s, int T, int pos, int rope_delta);
void q3n_deltanet_layer(q3n_run *r, const q3n_layer *L, int il, scratch *s, int T);
#endif
