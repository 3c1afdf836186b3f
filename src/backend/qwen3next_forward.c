/* qwen3next_forward.c — the CPU reference forward pass of Qwen3-Next (the model description,
 * hyperparameters and tensor binding are in qwen3next.c). See cpu_forward.h for the contract and
 * the shared spec for the op order (§A) and MTP (§F).
 *
 * Per decoder layer:  h = x + Mixer(RMSNorm(x)),  out = h + MoE(RMSNorm(h))
 * where Mixer is gated full attention on layers (i+1) % interval == 0 and Gated DeltaNet
 * elsewhere. Norm weights in GGUF already include the +1 of the zero-centred HF norms.
 */
#include "backend/cpu_forward.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "base/common.h"
#include "gguf/quant.h"
#include "kern/vec.h"
#include "model/experts.h"

/* ---- forward pass (CPU reference) ----------------------------------------------------- */

/* Scratch carved from r->scratch for T = max_rows rows. */
typedef struct {
    float *x, *xn, *y;   /* [T][D] residual stream, normed input, block output */
    float *big;          /* [T][max(2*H*hd, conv_dim)]  q+gate or qkv */
    float *kv;           /* [T][max(2*Hkv*hd, inner)]   k,v or z */
    float *ba;           /* [T][2*hv] */
    float *o;            /* [T][max(H*hd, inner)]       pre-projection output */
    float *u;            /* [T][conv_dim]               conv output */
    float *rl;           /* [T][E] router logits -> probs */
    float *sel_w;        /* [T][K] mixture weights */
    float *sel_id;       /* [T][K] expert ids (stored as float-sized int32 slots) */
    float *xs;           /* [T*K][D]   inputs gathered per expert */
    float *g, *up;       /* [T*K + T][ff] gate / up outputs (experts, then shared expert) */
    float *eo;           /* [T*K][D]   expert outputs, in gathered order */
    float *sh;           /* [T][D] shared expert output */
    /* MoE bookkeeping, sized by the model (n_expert E, top-k K) and the rows, never by a guess: */
    float *sc;           /* [E] biased ranking scores of one row (cache-aware routing) */
    float *pr;           /* [K] the selected experts' probabilities of one row (route hook) */
    int32_t *uniq;       /* [E] union of the selected experts, in order of first use */
    int32_t *slot_of;    /* [E] expert -> index in uniq, or -1 */
    int32_t *first;      /* [E + 1] first gathered row of each expert of uniq */
    int32_t *fill;       /* [E] gather cursor per expert */
    int32_t *gidx;       /* [T*K] gathered row of (row, slot) */
    const uint8_t **gp, **upp, **dp; /* [E] expert weight rows from the expert source */
    ops_mat *mats;       /* [3E] per-expert slices of gate, up, down */
    ops_mm_task *tasks;  /* [2E + 2] one dispatch's products */
    float **rdst;        /* [T][2] per-row snapshot destinations (conv, ssm) of a DeltaNet layer */
    float *spare;        /* the floats past T rows' carve, up to max_rows rows' (attention chunk partials) */
    size_t n_spare;
    /* rows of several sequences (q3n_forward_rows): row t's state and position; NULL: every row
     * is the next position of r->st (pos + t) */
    q3n_state *const *rst;
    const int *rpos;
} scratch;

static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

static size_t fl(size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); } /* bytes -> floats */

static size_t carve(const q3n_hparams *hp, int T, float *base, scratch *out) {
    scratch dummy, *s = out ? out : &dummy; /* sizes only: no member address of a NULL struct */
    size_t D = hp->n_embd, inner = (size_t)hp->ssm_hv * hp->ssm_dv, hd = hp->head_dim;
    size_t ff = mx(mx(hp->n_ff_exp, hp->n_ff_shexp), hp->n_ff), E = hp->n_expert, K = hp->n_expert_used;
    /* {floats per row (times T), floats once}, in the order of the members below */
    const size_t parts[][2] = {
        {D, 0}, /* x */
        {D, 0}, /* xn */
        {D, 0}, /* y */
        {mx(2 * hp->n_head * hd, hp->ssm_conv_dim), 0}, /* big */
        {mx(2 * hp->n_head_kv * hd, inner), 0}, /* kv */
        {2 * (size_t)hp->ssm_hv, 0}, /* ba */
        {mx(hp->n_head * hd, inner), 0}, /* o */
        {hp->ssm_conv_dim, 0}, /* u */
        {E, 0}, /* rl */
        {K, 0}, /* sel_w */
        {K, 0}, /* sel_id */
        {mx(K, 2) * D, 0}, /* xs */
        {(K + 1) * ff, 0}, /* g */
        {(K + 1) * ff, 0}, /* up */
        {K * D, 0}, /* eo */
        {D, 0}, /* sh */
        {0, E}, /* sc */
        {0, K}, /* pr */
        {0, fl(sizeof(int32_t) * E)}, /* uniq */
        {0, fl(sizeof(int32_t) * E)}, /* slot_of */
        {0, fl(sizeof(int32_t) * (E + 1))}, /* first */
        {0, fl(sizeof(int32_t) * E)}, /* fill */
        {fl(sizeof(int32_t) * K), 0}, /* gidx */
        {0, fl(sizeof(uint8_t *) * E)}, /* gp */
        {0, fl(sizeof(uint8_t *) * E)}, /* upp */
        {0, fl(sizeof(uint8_t *) * E)}, /* dp */
        {0, fl(sizeof(ops_mat) * 3 * E)}, /* mats */
        {0, fl(sizeof(ops_mm_task) * (2 * E + 2))}, /* tasks */
        {fl(sizeof(float *) * 2), 0}, /* rdst */
    };
    enum { NP = sizeof parts / sizeof parts[0] };
    float *p[NP];
    size_t off = 0;
    for (size_t i = 0; i < NP; i++) {
        p[i] = base ? base + off : NULL;
        off += ((parts[i][0] * (size_t)T + parts[i][1] + 15) / 16) * 16; /* 64-byte aligned */
    }
    s->x = p[0];
    s->xn = p[1];
    s->y = p[2];
    s->big = p[3];
    s->kv = p[4];
    s->ba = p[5];
    s->o = p[6];
    s->u = p[7];
    s->rl = p[8];
    s->sel_w = p[9];
    s->sel_id = p[10];
    s->xs = p[11];
    s->g = p[12];
    s->up = p[13];
    s->eo = p[14];
    s->sh = p[15];
    s->sc = p[16];
    s->pr = p[17];
    s->uniq = (int32_t *)p[18];
    s->slot_of = (int32_t *)p[19];
    s->first = (int32_t *)p[20];
    s->fill = (int32_t *)p[21];
    s->gidx = (int32_t *)p[22];
    s->gp = (const uint8_t **)p[23];
    s->upp = (const uint8_t **)p[24];
    s->dp = (const uint8_t **)p[25];
    s->mats = (ops_mat *)p[26];
    s->tasks = (ops_mm_task *)p[27];
    s->rdst = (float **)p[28];
    return off;
}

size_t q3n_scratch_floats(const q3n_hparams *hp, int max_rows) { return carve(hp, max_rows, NULL, NULL); }

/* T rows' scratch; what a max_rows-row forward would also use is spare for this one */
static void carve_run(const q3n_run *r, int T, scratch *s) {
    const size_t used = carve(&r->m->hp, T, r->scratch, s);
    s->rst = NULL;
    s->rpos = NULL;
    s->spare = r->scratch + used;
    s->n_spare = q3n_scratch_floats(&r->m->hp, r->max_rows) - used;
}
/* Quantised activations: at most 4 bytes per value (F32 activations of F32 weights) for the
 * widest input (2*D of the MTP eh_proj, or the attention/DeltaNet output widths). */
size_t q3n_actq_bytes(const q3n_hparams *hp, int max_rows) {
    size_t w = mx(mx(2 * (size_t)hp->n_embd, (size_t)hp->n_head * hp->head_dim), (size_t)hp->ssm_hv * hp->ssm_dv);
    w = mx(w, mx(mx(hp->n_ff_exp, hp->n_ff_shexp), hp->n_ff));
    /* a batch holds at most T*K expert rows + T shared-expert rows, or 3 projections of T rows */
    size_t rows = (size_t)max_rows * (size_t)(hp->n_expert_used + 4);
    return (4 * w + 64) * rows + 4096;
}

/* Carve quantised-activation space for one task of a batch (fast mode only). */
static void *actq_take(q3n_run *r, size_t *off, const ops_mat *W, int T) {
    if (!r->fast) return NULL;
    void *p = (uint8_t *)r->actq + *off;
    *off += (ops_actq_bytes(W, T) + 63) & ~(size_t)63;
    RL_ASSERT(*off <= q3n_actq_bytes(&r->m->hp, r->max_rows));
    return p;
}

/* Run n independent projections in one dispatch. */
static void mm_batch(q3n_run *r, ops_mm_task *tasks, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) tasks[i].actq = actq_take(r, &off, tasks[i].W, tasks[i].T);
    ops_matmul_batch(r->pool, tasks, n, r->fast);
}

#define DUMP(r, act, il, t, ptr, n)                                                                \
    do {                                                                                           \
        if ((r)->dump) (r)->dump((r)->hook_ud, q3n_act_name(act), il, t, ptr, n);                               \
    } while (0)

/* Every projection goes through here: the reference (oracle) or the fast SIMD path. */
static void mm(q3n_run *r, const ops_mat *W, const float *x, int T, float *y) {
    ops_mm_task t = {W, x, T, y, NULL};
    mm_batch(r, &t, 1);
}

/* Gated full attention for T rows at positions pos..pos+T-1 (spec §A.4). xn -> s->y. */
typedef struct {
    q3n_run *r;
    const q3n_layer *L;
    scratch *s;
    int il, T, pos, rope_delta;
    int hpi;          /* attn_qk_items: heads per item (the H query heads, then the Hkv key heads) */
    atomic_long next; /* attn_worker: the next unclaimed work item, counted from the last row */
    int nch;          /* chunk items (attn_chunk_items): chunks of the last row; 0: whole rows */
    float *part;      /* with nch: [T][nch][H][hd] partial outputs, then [T][nch][H] maxima and sums */
} attn_job;

/* Row t's sequence state and KV slot (its position before the RoPE delta). */
static q3n_state *attn_st(const attn_job *j, long t) { return j->s->rst ? j->s->rst[t] : j->r->st; }
static int attn_pos(const attn_job *j, long t) { return j->s->rpos ? j->s->rpos[t] : j->pos + (int)t; }

/* Items lo..hi-1 of the projections, item = (row t, hpi consecutive heads of the H query heads and
 * then the Hkv key heads): the heads' RMSNorm and RoPE, the position's cosines and sines once per item.
 * Each head's operations are the same whichever item holds it (ops_rope_table/apply: the same bits). */
static void attn_qk_items(void *arg, long lo, long hi) {
    attn_job *j = arg;
    const q3n_hparams *hp = &j->r->m->hp;
    const q3n_layer *L = j->L;
    int H = hp->n_head, Hkv = hp->n_head_kv, hd = hp->head_dim, nh = H + Hkv, per = (nh + j->hpi - 1) / j->hpi;
    size_t kvw = (size_t)Hkv * hd;
    float rc[Q3N_MAX_HEAD_DIM / 2], rs[Q3N_MAX_HEAD_DIM / 2]; /* n_rot <= head_dim <= Q3N_MAX_HEAD_DIM */
    for (long it = lo; it < hi; it++) {
        const long t = it / per;
        const int h0 = (int)(it % per) * j->hpi, h1 = h0 + j->hpi < nh ? h0 + j->hpi : nh;
        ops_rope_table(hp->n_rot, attn_pos(j, t) + j->rope_delta, hp->rope_base, rc, rs);
        for (int h = h0; h < h1; h++) {
            float *x = h < H ? j->s->big + (size_t)t * 2 * H * hd + (size_t)h * 2 * hd
                             : j->s->kv + (size_t)t * kvw + (size_t)(h - H) * hd;
            ops_rmsnorm(x, h < H ? L->q_norm : L->k_norm, hd, hp->rms_eps, x);
            ops_rope_apply(x, hp->n_rot, rc, rs);
        }
    }
}

/* Rows lo..hi-1: K (normed, rotated) and V into the cache. */
static void attn_kv_rows(void *arg, long lo, long hi) {
    attn_job *j = arg;
    const q3n_hparams *hp = &j->r->m->hp;
    size_t kvw = (size_t)hp->n_head_kv * hp->head_dim;
    float *k = j->s->kv, *v = j->s->kv + (size_t)j->T * kvw;
    for (long t = lo; t < hi; t++)
        q3n_kv_store(attn_st(j, t), j->il, attn_pos(j, t), k + (size_t)t * kvw, v + (size_t)t * kvw, kvw);
}

/* Work items: (row, KV head, slice of its query-head group). The fast path takes a slice of
 * heads at once (vec_attn_group reads each K and V row once for the slice); slices are as large
 * as the thread count allows (decode on 2 threads: a whole group of 8 per thread). Threads claim
 * items one at a time from a shared counter, the last (longest: causal) rows first: contiguous
 * ranges gave the last thread the longest rows (a 512-row prompt's attention core was 45 % busy at 16
 * threads, H200 host). Each item writes only its own outputs, so no result depends on the claims. */
static int attn_slice(const q3n_hparams *hp, int T, int nth) {
    int group = hp->n_head / hp->n_head_kv, gs = group;
    while (gs > 1 && (long)T * hp->n_head_kv * (group / gs) < nth && gs % 2 == 0) gs /= 2;
    return gs > VEC_ATTN_MAX_G ? 1 : gs;
}

/* Rows per item of the fast path: a prompt's consecutive rows share the K / V rows they read
 * (vec_attn_rows_kv: each cached row read once for the tile's rows, every row's result its own), so
 * long prompts take tiles of up to 8 rows (VM, cf2, 8K prompt: attention core 1.47 -> 0.96 ms per token
 * with 4, 0.78-0.83 with 8); short batches (decode, verify) keep a row per item, which
 * keeps their items numerous enough for the threads. */
static int attn_rows(int T, int gs) {
    int rt = T >= 64 ? 8 : 1;
    while (rt > 1 && rt * gs > VEC_ATTN_MAX_RG) rt /= 2;
    return rt;
}

/* The output gate of row t, query head h: o *= sigmoid(gate), the gate beside the head's query in s->big
 * (the fast path's lanes, or the reference's libm expression) */
static void attn_gate(const attn_job *j, int t, int h, float *o) {
    const int H = j->r->m->hp.n_head, hd = j->r->m->hp.head_dim;
    const float *gate = j->s->big + (size_t)t * 2 * H * hd + (size_t)h * 2 * hd + hd;
    if (j->r->fast)
        ops_vec(j->r->pool)->sigmoid_mul(o, gate, hd);
    else
        for (int i = 0; i < hd; i++) o[i] *= ops_sigmoid(gate[i]);
}

/* Chunk items: a decode or verify row has few (KV head, slice) items, and slicing a head group for
 * more of them reads every K / V row once per slice (16 threads: a 4K-deep row's cache read 8 times).
 * A row past VEC_ATTN_CHUNK positions splits instead into vec.h's fixed chunks: item = (row, slice,
 * chunk), each written as a partial (vec_attn_chunk_kv) to the scratch's spare floats, then
 * attn_fold_items folds every (row, head)'s chunks in order and normalises: vec_attn_group_kv's
 * arithmetic, so the rows are those of a prefill (vec_attn_rows_kv) bit for bit. */
static float *attn_part_m(const attn_job *j) {
    return j->part + (size_t)j->T * j->nch * j->r->m->hp.n_head * j->r->m->hp.head_dim;
}

static void attn_chunk_items(attn_job *j, int nth) {
    const q3n_hparams *hp = &j->r->m->hp;
    const int H = hp->n_head, hd = hp->head_dim, group = H / hp->n_head_kv, nch = j->nch;
    const int gs = attn_slice(hp, j->T * nch, nth), ns = H / gs;
    const size_t kvw = (size_t)hp->n_head_kv * hd;
    const size_t nml = (size_t)j->T * nch * H; /* sums after the maxima */
    float *pm = attn_part_m(j);
    const long n_items = (long)j->T * ns * nch;
    for (;;) {
        const long c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= n_items) break;
        const long w = n_items - 1 - c; /* the last row first, its last chunk first */
        const int t = (int)(w / ((long)ns * nch)), h0 = (int)(w / nch % ns) * gs, ch = (int)(w % nch);
        const int n_kv = attn_pos(j, t) + 1, p0 = ch * VEC_ATTN_CHUNK;
        if (p0 >= n_kv) continue; /* an earlier row has fewer chunks */
        const int p1 = n_kv - p0 < VEC_ATTN_CHUNK ? n_kv : p0 + VEC_ATTN_CHUNK;
        const q3n_state *st = attn_st(j, t);
        const size_t eb = st->kv_f16 ? sizeof(uint16_t) : sizeof(float);
        const size_t kvoff = (size_t)(h0 / group) * hd * eb, at = ((size_t)t * nch + ch) * H + h0;
        const char *K = (const char *)st->k_cache[j->il] + kvoff, *V = (const char *)st->v_cache[j->il] + kvoff;
        vec_attn_chunk_kv(ops_vec(j->r->pool), j->s->big + (size_t)t * 2 * H * hd + (size_t)h0 * 2 * hd, 2 * (size_t)hd, gs, K, V,
                          st->kv_f16, p0, p1, kvw, hd, 1.0f / sqrtf((float)hd), j->part + at * hd, (size_t)hd,
                          pm + at, pm + nml + at);
    }
}

/* Items lo..hi-1 = (row, head) of chunk items: the fold, the normalisation, the output gate. */
static void attn_fold_items(void *arg, long lo, long hi) {
    attn_job *j = arg;
    const q3n_hparams *hp = &j->r->m->hp;
    const int H = hp->n_head, hd = hp->head_dim, nch = j->nch;
    const size_t nml = (size_t)j->T * nch * H;
    const float *pm = attn_part_m(j);
    for (long it = lo; it < hi; it++) {
        const int t = (int)(it / H), h = (int)(it % H), n_kv = attn_pos(j, t) + 1;
        const int nc = (n_kv + VEC_ATTN_CHUNK - 1) / VEC_ATTN_CHUNK;
        float *o = j->s->o + (size_t)t * H * hd + (size_t)h * hd;
        size_t at = (size_t)t * nch * H + h;
        float m = pm[at], l = pm[nml + at];
        memcpy(o, j->part + at * hd, sizeof(float) * (size_t)hd);
        for (int c = 1; c < nc; c++) {
            at += H;
            vec_attn_merge(1, hd, o, (size_t)hd, &m, &l, j->part + at * hd, (size_t)hd, pm + at, pm + nml + at);
        }
        vec_attn_normalize(1, hd, o, (size_t)hd, &l, o, (size_t)hd);
        attn_gate(j, t, h, o);
    }
}

static void attn_worker(void *arg, int ith, int nth) {
    attn_job *j = arg;
    if (j->nch) {
        attn_chunk_items(j, nth);
        return;
    }
    const q3n_hparams *hp = &j->r->m->hp;
    int H = hp->n_head, hd = hp->head_dim, group = H / hp->n_head_kv;
    int gs = j->r->fast ? attn_slice(hp, j->T, nth) : 1, ns = H / gs; /* slices per row */
    /* rows per item (rows of different sequences share no K / V rows: one each) */
    const int rt = j->r->fast && !j->s->rst ? attn_rows(j->T, gs) : 1;
    size_t kvw = (size_t)hp->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const long n_items = (long)((j->T + rt - 1) / rt) * ns;
    (void)ith;
    for (;;) {
        const long c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= n_items) break;
        const long w = n_items - 1 - c;
        int t = (int)(w / ns) * rt, h0 = (int)(w % ns) * gs, R = j->T - t < rt ? j->T - t : rt;
        const float *q = j->s->big + (size_t)t * 2 * H * hd + (size_t)h0 * 2 * hd;
        float *o = j->s->o + (size_t)t * H * hd + (size_t)h0 * hd;
        size_t kvoff = (size_t)(h0 / group) * hd;
        const q3n_state *st = attn_st(j, t);
        const bool f16 = st->kv_f16;
        const size_t eb = f16 ? sizeof(uint16_t) : sizeof(float); /* bytes per cached element */
        const void *Kh = (const char *)st->k_cache[j->il] + kvoff * eb, *Vh = (const char *)st->v_cache[j->il] + kvoff * eb;
        if (j->r->fast)
            vec_attn_rows_kv(ops_vec(j->r->pool), q, 2 * (size_t)H * hd, R, 2 * (size_t)hd, gs, Kh, Vh, f16, attn_pos(j, t) + 1, kvw,
                             hd, scale, o, (size_t)H * hd, hd);
        else
            ops_attn_head_kv(q, Kh, Vh, f16, attn_pos(j, t) + 1, kvw, hd, scale, o);
        for (int r = 0; r < R; r++)
            for (int g = 0; g < gs; g++) attn_gate(j, t + r, h0 + g, o + (size_t)r * H * hd + (size_t)g * hd);
    }
}

void q3n_kv_store(q3n_state *st, int il, int slot, const float *k, const float *v, size_t kvw) {
    if (st->kv_f16) {
        uint16_t *kc = (uint16_t *)st->k_cache[il] + (size_t)slot * kvw, *vc = (uint16_t *)st->v_cache[il] + (size_t)slot * kvw;
        for (size_t i = 0; i < kvw; i++) kc[i] = rl_fp32_to_fp16(k[i]), vc[i] = rl_fp32_to_fp16(v[i]);
    } else {
        memcpy((float *)st->k_cache[il] + (size_t)slot * kvw, k, sizeof(float) * kvw);
        memcpy((float *)st->v_cache[il] + (size_t)slot * kvw, v, sizeof(float) * kvw);
    }
}

/* KV slots pos..pos+T-1; RoPE positions are the slots + rope_delta (the MTP layer puts pair
 * (h_p, x_{p+1}) in slot p at position p+1). */
static void attention_layer(q3n_run *r, const q3n_layer *L, int il, scratch *s, int T, int pos, int rope_delta) {
    const q3n_hparams *hp = &r->m->hp;
    int H = hp->n_head, Hkv = hp->n_head_kv, hd = hp->head_dim;
    size_t kvw = (size_t)Hkv * hd;
    float *k = s->kv, *v = s->kv + (size_t)T * kvw;
    ops_mm_task proj[3] = {{&L->wq, s->xn, T, s->big, NULL}, {&L->wk, s->xn, T, k, NULL}, {&L->wv, s->xn, T, v, NULL}};
    mm_batch(r, proj, 3);
    /* rows and heads are independent: a prompt's rows split over the threads (512 rows of RoPE were
     * serial), a decode row's heads by twos (18 heads took 29 us a layer on the calling thread of a
     * 16-thread token, H200 host: their inputs had just been written by the other cores) */
    const int hpi = T >= pool_size(r->pool) ? H + Hkv : 2;
    attn_job j = {r, L, s, il, T, pos, rope_delta, hpi, 0, 0, NULL};
    const long items = (long)T * ((H + Hkv + hpi - 1) / hpi);
    ops_parallel_for(r->pool, items, (long)hpi * hd * 32, attn_qk_items, &j, "attention q/k norm+rope");
    ops_parallel_for(r->pool, T, (long)kvw * 4, attn_kv_rows, &j, "attention kv store");
    /* chunk items where rows go one per item (attn_rows), past one chunk, with threads to spread them
     * over and room in the spare scratch (else whole rows: the same bits) */
    int n_kv_max = pos + T; /* the longest row's keys */
    for (int t = 0; s->rpos && t < T; t++) n_kv_max = t == 0 || s->rpos[t] + 1 > n_kv_max ? s->rpos[t] + 1 : n_kv_max;
    const int nch = (n_kv_max + VEC_ATTN_CHUNK - 1) / VEC_ATTN_CHUNK;
    if (r->fast && attn_rows(T, 1) == 1 && nch > 1 && pool_size(r->pool) > 1 &&
        (size_t)T * nch * H * (hd + 2) <= s->n_spare)
        j.nch = nch, j.part = s->spare;
    ops_run(r->pool, attn_worker, &j, "attention core");
    if (j.nch) ops_parallel_for(r->pool, (long)T * H, (long)nch * hd * 4, attn_fold_items, &j, "attention fold");
    for (int t = 0; t < T; t++) DUMP(r, Q3N_ACT_ATTN_GATED, il, t, s->o + (size_t)t * H * hd, H * hd);
    mm(r, &L->wo, s->o, T, s->y);
}

/* Gated DeltaNet for T rows (spec §A.5): projections for all rows, then the conv and the
 * delta rule token by token (value heads in parallel), then the output projection. */
typedef struct {
    q3n_run *r;
    const q3n_layer *L;
    scratch *s;
    int il, t0, t1; /* rows t0..t1-1 */
    int T;          /* rows of the forward */
    bool dst;       /* s->rdst holds per-row snapshot destinations (q3n_row_dst_fn) */
} dn_job;

/* Where row t's state of a DeltaNet layer is written (k = 0: conv, 1: ssm): its snapshot
 * destination if it has one and is not the last row, else the uncommitted live copy (rows without
 * a destination update it in place). The last row always ends in the live copy (the state the
 * forward commits); its snapshot, if any, is a copy of it. Row t reads row t-1's output. */
static float *dn_row_out(const dn_job *j, int t, int k, float *live) {
    float *d = j->dst ? j->s->rdst[2 * t + k] : NULL;
    return d && t < j->T - 1 ? d : live;
}

/* The delta rule and gated norm of rows t0..t1-1 for a range of value heads: each head runs its rows
 * in order (a head's state depends only on its own previous rows), so one dispatch can cover a
 * whole prefill chunk and a head's 64 KiB state stays in cache across the rows. */
static void dn_heads_worker(void *arg, int ith, int nth) {
    dn_job *j = arg;
    const q3n_hparams *hp = &j->r->m->hp;
    const q3n_layer *L = j->L;
    int dk = hp->ssm_dk, dv = hp->ssm_dv, hk = hp->ssm_hk, hv = hp->ssm_hv, rr = hv / hk;
    /* row 0 reads the committed state and writes the uncommitted one; later rows update it */
    const q3n_state *st = j->r->st;
    float *live = st->ssm_next ? st->ssm_next[j->il] : st->ssm[j->il];
    long lo, hi;
    pool_range(hv, ith, nth, &lo, &hi);
    for (long h = lo; h < hi; h++)
        for (int t = j->t0; t < j->t1; t++) {
            const float *u = j->s->u + (size_t)t * hp->ssm_conv_dim;

            const float *z = j->s->kv + (size_t)t * hv * dv;
            /* rows of several sequences: each reads its own committed state, writes its own copy */
            const q3n_state *rs = j->s->rst ? j->s->rst[t] : NULL;
            const float *ssm_in = rs ? rs->ssm[j->il] : t == 0 ? st->ssm[j->il] : dn_row_out(j, t - 1, 1, live);
            float *ssm = rs ? rs->ssm_next[j->il] : dn_row_out(j, t, 1, live);
            const int g = q3n_key_head(hp, (int)h);
            const float *q = u + (size_t)g * dk; /* l2-normed and scaled in place before */
            const float *k = u + (size_t)(hk + g) * dk;
            const float *v = u + (size_t)2 * hk * dk + (size_t)h * dv;
            if (t + 2 < j->t1) { /* row t + 2's q, k, v and z of this head: rows are a conv_dim apart,
                                  * a stride the hardware prefetchers do not follow */
                const size_t ahead = 2 * (size_t)hp->ssm_conv_dim, za = 2 * (size_t)hv * dv;
                for (int i = 0; i < dk; i += 16) __builtin_prefetch(q + ahead + i), __builtin_prefetch(k + ahead + i);
                for (int i = 0; i < dv; i += 16) __builtin_prefetch(v + ahead + i), __builtin_prefetch(z + (size_t)h * dv + za + i);
            }
            float b, a;
            if (hp->ba_split) { /* beta rows [T][hv], then alpha rows [T][hv] */
                b = j->s->ba[(size_t)t * hv + h], a = j->s->ba[((size_t)j->T + t) * hv + h];
            } else { /* fused, per key head [b x rr | a x rr] (grouped heads: h = g * rr + e) */
                const float *ba = j->s->ba + (size_t)t * 2 * hv;
                const int e = (int)h % rr;
                b = ba[g * 2 * rr + e], a = ba[g * 2 * rr + rr + e];
            }
            float beta = ops_sigmoid(b);
            float gdecay = L->ssm_a[h] * ops_softplus(a + L->dt_bias[h]);
            float *o = j->s->o + (size_t)t * hv * dv + (size_t)h * dv;
            const size_t so = (size_t)h * dv * dk;
            if (j->r->fast)
                (t > j->t0 && !rs ? ops_vec(j->r->pool)->delta_step_hot : ops_vec(j->r->pool)->delta_step)(
                    ssm_in + so, ssm + so, q, k, v, expf(gdecay), beta, dk, dv, o);
            else
                ops_delta_step(ssm_in + so, ssm + so, q, k, v, expf(gdecay), beta, dk, dv, o);
            /* the last row's snapshot: a copy of this head's slice while it is in cache */
            if (t == j->T - 1 && j->dst && j->s->rdst[2 * t + 1])
                memcpy(j->s->rdst[2 * t + 1] + so, ssm + so, sizeof(float) * (size_t)dv * dk);
            /* gated RMSNorm per value head: norm, weight, then * silu(z) */
            ops_rmsnorm(o, L->ssm_norm, dv, hp->rms_eps, o);
            if (j->r->fast)
                ops_vec(j->r->pool)->silu_mul(o, z + (size_t)h * dv, o, dv);
            else
                for (int i = 0; i < dv; i++) o[i] *= ops_silu(z[(size_t)h * dv + i]);
        }
}

/* One row's conv of channels c0..c1-1: the window sums (ops_conv_step_range), then SiLU — libm's on
 * the reference path, the vec table's 8-lane one on the fast path (every row of the fast path, in a
 * prefill chunk or a decode step, takes this same function, so the rows stay bit-identical). */
static void dn_conv_range(const q3n_run *r, const float *state, float *state_out, const float *w, const float *u, int C,
                          int kw, int c0, int c1, float *out) {
    ops_conv_step_range(state, state_out, w, u, C, kw, c0, c1, !r->fast, out);
    if (r->fast) ops_vec(r->pool)->silu_mul(out + c0, out + c0, NULL, c1 - c0);
}

/* The causal conv of channels lo..hi-1 for every row in order (a channel's window depends only on
 * its own previous inputs), with the rows' state destinations of dn_row_out. */
static void dn_conv_channels(void *arg, long lo, long hi) {
    dn_job *j = arg;
    const q3n_hparams *hp = &j->r->m->hp;
    const q3n_state *st = j->r->st;
    int C = hp->ssm_conv_dim;
    float *conv = st->conv_next ? st->conv_next[j->il] : st->conv[j->il];
    for (int t = 0; t < j->T; t++) {
        const q3n_state *rs = j->s->rst ? j->s->rst[t] : NULL; /* rows of several sequences: their own states */
        dn_conv_range(j->r, rs ? rs->conv[j->il] : t == 0 ? st->conv[j->il] : dn_row_out(j, t - 1, 0, conv),
                      rs ? rs->conv_next[j->il] : dn_row_out(j, t, 0, conv), j->L->conv_w, j->s->big + (size_t)t * C, C,
                      hp->ssm_kw, (int)lo, (int)hi, j->s->u + (size_t)t * C);
    }
}

/* Items lo..hi-1 after the conv, item = (row t, key head g): l2-normalise q of head g (then scale it)
 * and k of head g. */
static void dn_qk_norm_items(void *arg, long lo, long hi) {
    dn_job *j = arg;
    const q3n_hparams *hp = &j->r->m->hp;
    int C = hp->ssm_conv_dim, dk = hp->ssm_dk, hk = hp->ssm_hk;
    float qscale = 1.0f / sqrtf((float)dk);
    for (long it = lo; it < hi; it++) {
        float *u = j->s->u + (size_t)(it / hk) * C;
        const int g = (int)(it % hk);
        ops_l2norm(u + (size_t)g * dk, dk, hp->rms_eps);
        for (int i = 0; i < dk; i++) u[(size_t)g * dk + i] *= qscale;
        ops_l2norm(u + (size_t)(hk + g) * dk, dk, hp->rms_eps);
    }
}

static void deltanet_layer(q3n_run *r, const q3n_layer *L, int il, scratch *s, int T) {
    const q3n_hparams *hp = &r->m->hp;
    int C = hp->ssm_conv_dim, dk = hp->ssm_dk, hk = hp->ssm_hk, inner = hp->ssm_hv * hp->ssm_dv;
    /* beta and alpha: one fused matrix, or two (ba_split: beta rows, then alpha rows in s->ba) */
    ops_mm_task proj[4] = {
        {&L->wqkv, s->xn, T, s->big, NULL}, {&L->wgate, s->xn, T, s->kv, NULL}, {&L->wba, s->xn, T, s->ba, NULL}};
    if (hp->ba_split) {
        proj[2] = (ops_mm_task){&L->wbeta, s->xn, T, s->ba, NULL};
        proj[3] = (ops_mm_task){&L->walpha, s->xn, T, s->ba + (size_t)T * hp->ssm_hv, NULL};
    }
    mm_batch(r, proj, hp->ba_split ? 4 : 3);
    float *conv = r->st->conv_next ? r->st->conv_next[il] : r->st->conv[il];
    /* Per-row observers (dumps, the row_state copies) need the rows one at a time; otherwise the
     * conv runs for all rows and one dispatch does the recurrence of all rows, head by head. With
     * row_dst the snapshot rows are written in place (dn_row_out). The arithmetic is the same
     * either way. */
    dn_job jb = {r, L, s, il, 0, T, T, r->row_dst != NULL};
    if (jb.dst)
        for (int t = 0; t < T; t++) r->row_dst(r->hook_ud, il, t, &s->rdst[2 * t], &s->rdst[2 * t + 1]);
    const bool row_state = r->row_state && !jb.dst;
    const bool per_row = row_state || r->dump;
    if (!per_row) {
        /* all rows at once: the conv chain by channel ranges, then the per-row norms, each split over
         * the threads (the same arithmetic as the loop below, which ran on one thread). A channel
         * costs ~4 loads and stores per tap, so a decode row (8,192 channels) is split too: on the
         * calling thread alone it took 50 us a layer of a 16-thread token (H200 host: its input had
         * just been written by the other cores), and the threads waiting on it fell asleep */
        ops_parallel_for(r->pool, C, (long)T * hp->ssm_kw * 4, dn_conv_channels, &jb, "deltanet conv");
        if (jb.dst && s->rdst[2 * (T - 1)])
            memcpy(s->rdst[2 * (T - 1)], dn_row_out(&jb, T - 1, 0, conv), sizeof(float) * q3n_conv_floats(hp));
        /* (row, key head) items: a decode row's 16 heads took 11 us a layer on the calling thread of a
         * 16-thread token (its input was just written by the conv's threads) */
        ops_parallel_for(r->pool, (long)T * hk, (long)2 * dk * 32, dn_qk_norm_items, &jb, "deltanet q/k norms");
        ops_run(r->pool, dn_heads_worker, &jb, "deltanet recurrence");
        mm(r, &L->wout, s->o, T, s->y);
        return;
    }
    for (int t = 0; t < T; t++) {
        float *u = s->u + (size_t)t * C;
        float *cout = dn_row_out(&jb, t, 0, conv);
        dn_conv_range(r, t == 0 ? r->st->conv[il] : dn_row_out(&jb, t - 1, 0, conv), cout, L->conv_w,
                      s->big + (size_t)t * C, C, hp->ssm_kw, 0, C, u);
        if (t == T - 1 && jb.dst && s->rdst[2 * t]) memcpy(s->rdst[2 * t], cout, sizeof(float) * q3n_conv_floats(hp));
        DUMP(r, Q3N_ACT_DN_CONV, il, t, u, C);
        dn_qk_norm_items(&jb, (long)t * hk, (long)(t + 1) * hk);
        dn_job j = jb;
        j.t0 = t, j.t1 = t + 1;
        pool_run(r->pool, dn_heads_worker, &j);
        if (row_state)
            r->row_state(r->hook_ud, il, t, conv, r->st->ssm_next ? r->st->ssm_next[il] : r->st->ssm[il]);
        DUMP(r, Q3N_ACT_DN_GATED, il, t, s->o + (size_t)t * inner, inner);
    }
    mm(r, &L->wout, s->o, T, s->y);
}

/* Default expert source: slices of the mapped *_exps tensors. */
static int mapped_acquire(void *ud, int il, const int32_t *ids, int n, const uint8_t **gate, const uint8_t **up,
                          const uint8_t **down) {
    const q3n_model *m = ud;
    for (int i = 0; i < n; i++) q3n_expert_rows(&m->hp, &m->layers[il], ids[i], &gate[i], &up[i], &down[i]);
    return 0;
}

static ops_mat slice(const ops_mat *like, const uint8_t *data, int64_t n_out) {
    ops_mat m = *like;
    m.data = data;
    m.n_out = n_out;
    return m;
}

/* The per-row loops of the MoE block, split over the threads by ops_parallel_for (rows are
 * independent; each keeps the arithmetic of the single-thread loop). */
typedef struct {
    q3n_run *r;
    const q3n_layer *L;
    scratch *s;
    int T;
    float *a;       /* moe_swiglu: a = silu(a) * b */
    const float *b;
    const float *gate; /* moe_combine_cols: the rows' shared-expert gates */
} moe_job;

/* softmax, top-k, renormalised weights of rows lo..hi-1 (no cache bias, no route observer) */
static void moe_route_rows(void *arg, long lo, long hi) {
    moe_job *j = arg;
    const q3n_hparams *hp = &j->r->m->hp;
    int E = hp->n_expert, K = hp->n_expert_used;
    int32_t *ids = (int32_t *)j->s->sel_id;
    for (long t = lo; t < hi; t++) {
        float *p = j->s->rl + (size_t)t * E;
        ops_softmax(p, E);
        ops_topk(p, E, K, ids + (size_t)t * K);
        double sum = 0;
        for (int k = 0; k < K; k++) sum += p[ids[t * K + k]];
        if (sum < 6.103515625e-5) sum = 6.103515625e-5;
        for (int k = 0; k < K; k++) j->s->sel_w[t * K + k] = (float)(p[ids[t * K + k]] / sum);
    }
}

/* copy the input row of (row, slot) pairs lo..hi-1 to its gathered position gidx */
static void moe_gather_rows(void *arg, long lo, long hi) {
    moe_job *j = arg;
    int D = j->r->m->hp.n_embd, K = j->r->m->hp.n_expert_used;
    for (long i = lo; i < hi; i++)
        memcpy(j->s->xs + (size_t)j->s->gidx[i] * D, j->s->xn + (size_t)(i / K) * D, sizeof(float) * D);
}

static void moe_swiglu(void *arg, long lo, long hi) {
    moe_job *j = arg;
    if (j->r->fast)
        ops_vec(j->r->pool)->silu_mul(j->a + lo, j->a + lo, j->b + lo, (int)(hi - lo));
    else
        for (long i = lo; i < hi; i++) j->a[i] = ops_silu(j->a[i]) * j->b[i];
}

/* The shared expert's gate of row t: sigmoid(sh_gate . xn_t) (a fixed-order double sum); 1 without one. */
static float moe_sh_gate(const moe_job *j, long t) {
    const q3n_hparams *hp = &j->r->m->hp;
    int D = hp->n_embd;
    if (!j->L->gate_sh.data || !j->L->sh_gate) return 1.0f;
    double d = 0;
    for (int i = 0; i < D; i++) d += (double)j->L->sh_gate[i] * j->s->xn[(size_t)t * D + i];
    return ops_sigmoid((float)d);
}

/* y[t][c0..c1): the experts' outputs in the row's selection order, then the gated shared expert. Expert by
 * expert over the columns (vec axpy_d: 4 doubles a step, each element its own); every element adds its
 * experts in selection order, then the shared expert, with the same roundings whatever the column range:
 * the same sums. */
static void moe_combine_range(const moe_job *j, long t, float gate, int c0, int c1) {
    const q3n_hparams *hp = &j->r->m->hp;
    const scratch *s = j->s;
    int D = hp->n_embd, K = hp->n_expert_used, n = c1 - c0;
    double acc[OPS_MAX_ROW / 2]; /* D <= OPS_MAX_ROW / 2: the hparams table bounds embedding_length */
    const vec_ops *v = ops_vec(j->r->pool);
    for (int i = 0; i < n; i++) acc[i] = 0;
    for (int k = 0; k < K; k++) v->axpy_d(acc, s->sel_w[t * K + k], s->eo + (size_t)s->gidx[t * K + k] * D + c0, n);
    if (j->L->gate_sh.data) v->axpy_d(acc, gate, s->sh + (size_t)t * D + c0, n);
    for (int i = 0; i < n; i++) s->y[(size_t)t * D + c0 + i] = (float)acc[i];
}

/* y of rows lo..hi-1 (a prompt: rows over the threads) */
static void moe_combine_rows(void *arg, long lo, long hi) {
    const moe_job *j = arg;
    for (long t = lo; t < hi; t++) moe_combine_range(j, t, moe_sh_gate(j, t), 0, j->r->m->hp.n_embd);
}

/* Items lo..hi-1 of (row, MOE_SUM_COLS columns), gates computed before (decode and short verifies: fewer
 * rows than threads, so the columns are split; on the calling thread alone a decode row's sum took
 * ~12 us a layer of a 16-thread token, H200 host). */
#define MOE_SUM_COLS 128
static void moe_combine_cols(void *arg, long lo, long hi) {
    const moe_job *j = arg;
    int D = j->r->m->hp.n_embd, nc = (D + MOE_SUM_COLS - 1) / MOE_SUM_COLS;
    for (long it = lo; it < hi; it++) {
        long t = it / nc;
        int c0 = (int)(it % nc) * MOE_SUM_COLS, c1 = c0 + MOE_SUM_COLS < D ? c0 + MOE_SUM_COLS : D;
        moe_combine_range(j, t, j->gate[t], c0, c1);
    }
}

/* MoE block (spec §A.6): softmax router -> top-k -> renormalise; experts grouped so each
 * selected expert runs once over the rows that chose it; each row sums its experts in its
 * own selection order (so grouping never changes a row's result), then adds the
 * sigmoid-gated shared expert. xn -> s->y. */
static int moe_layer(q3n_run *r, const q3n_layer *L, int il, scratch *s, int T) {
    const q3n_hparams *hp = &r->m->hp;
    int D = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, ff = hp->n_ff_exp;
    int32_t *ids = (int32_t *)s->sel_id;
    if (r->experts.hint) r->experts.hint(r->experts.ud, il, s->xn, T);
    mm(r, &L->router, s->xn, T, s->rl);
    moe_job mj = {r, L, s, T, NULL, NULL, NULL};
    /* without the observers and the cache bias (one shared scratch row) rows route independently */
    if (!r->experts.bias && !r->route)
        ops_parallel_for(r->pool, T, (long)E * (K + 8), moe_route_rows, &mj, "moe routing");
    else for (int t = 0; t < T; t++) {
        float *p = s->rl + (size_t)t * E;
        ops_softmax(p, E);
        if (r->experts.bias) { /* cache-aware routing (opt-in, changes outputs): rank a biased copy */
            float *sc = s->sc;
            memcpy(sc, p, sizeof(float) * (size_t)E);
            r->experts.bias(r->experts.ud, il, sc, E);
            ops_topk(sc, E, K, ids + (size_t)t * K);
        } else {
            ops_topk(p, E, K, ids + (size_t)t * K);
        }
        double sum = 0;
        for (int k = 0; k < K; k++) sum += p[ids[t * K + k]];
        if (sum < 6.103515625e-5) sum = 6.103515625e-5;
        for (int k = 0; k < K; k++) s->sel_w[t * K + k] = (float)(p[ids[t * K + k]] / sum);
        if (r->route) {
            float *pr = s->pr;
            for (int k = 0; k < K; k++) pr[k] = p[ids[t * K + k]];
            r->route(r->hook_ud, il, t, ids + (size_t)t * K, s->sel_w + (size_t)t * K, pr, K);
        }
    }
    /* union of the selected experts, in order of first use (slot_of: expert -> index in uniq) */
    int32_t *uniq = s->uniq, *slot_of = s->slot_of;
    int nu = 0;
    memset(slot_of, 0xff, sizeof(int32_t) * (size_t)E);
    for (int i = 0; i < T * K; i++)
        if (slot_of[ids[i]] < 0) {
            slot_of[ids[i]] = nu;
            uniq[nu++] = ids[i];
        }
    const uint8_t **gp = s->gp, **upp = s->upp, **dp = s->dp;
    const q3n_expert_src *src = &r->experts;
    int rc = src->acquire ? src->acquire(src->ud, il, uniq, nu, gp, upp, dp)
                          : mapped_acquire((void *)r->m, il, uniq, nu, gp, upp, dp);
    if (rc) return -1;
    /* gather each expert's rows (a counting sort by expert that keeps row order); gidx maps
     * (row, slot) to the gathered row */
    int32_t *gidx = s->gidx, *first = s->first, *fill = s->fill;
    memset(first, 0, sizeof(int32_t) * (size_t)(nu + 1));
    for (int i = 0; i < T * K; i++) first[slot_of[ids[i]] + 1]++;
    for (int ui = 0; ui < nu; ui++) first[ui + 1] += first[ui];
    memcpy(fill, first, sizeof(int32_t) * (size_t)nu);
    int ng = first[nu];
    for (int i = 0; i < T * K; i++) gidx[i] = fill[slot_of[ids[i]]]++;
    ops_parallel_for(r->pool, (long)T * K, D, moe_gather_rows, &mj, "moe gather");
    /* all gate/up projections (and the shared expert's) in one dispatch, then all downs */
    ops_mat *mats = s->mats;
    ops_mm_task *tasks = s->tasks;
    bool has_sh = L->gate_sh.data != NULL;
    int fs = hp->n_ff_shexp, nt = 0;
    float *gsh = s->g + (size_t)T * K * ff, *ush = s->up + (size_t)T * K * ff;
    for (int ui = 0; ui < nu; ui++) {
        int n = first[ui + 1] - first[ui];
        const float *xs = s->xs + (size_t)first[ui] * D;
        mats[3 * ui] = slice(&L->gate_exps, gp[ui], ff);
        mats[3 * ui + 1] = slice(&L->up_exps, upp[ui], ff);
        mats[3 * ui + 2] = slice(&L->down_exps, dp[ui], D);
        tasks[nt++] = (ops_mm_task){&mats[3 * ui], xs, n, s->g + (size_t)first[ui] * ff, NULL};
        tasks[nt++] = (ops_mm_task){&mats[3 * ui + 1], xs, n, s->up + (size_t)first[ui] * ff, NULL};
    }
    if (has_sh) {
        tasks[nt++] = (ops_mm_task){&L->gate_sh, s->xn, T, gsh, NULL};
        tasks[nt++] = (ops_mm_task){&L->up_sh, s->xn, T, ush, NULL};
    }
    mm_batch(r, tasks, nt);
    mj.a = s->g, mj.b = s->up;
    ops_parallel_for(r->pool, (long)ng * ff, 24, moe_swiglu, &mj, "moe swiglu");
    if (has_sh) {
        mj.a = gsh, mj.b = ush;
        ops_parallel_for(r->pool, (long)T * fs, 24, moe_swiglu, &mj, "moe swiglu");
    }
    nt = 0;
    for (int ui = 0; ui < nu; ui++)
        tasks[nt++] = (ops_mm_task){&mats[3 * ui + 2], s->g + (size_t)first[ui] * ff, first[ui + 1] - first[ui],
                                    s->eo + (size_t)first[ui] * D, NULL};
    if (has_sh) tasks[nt++] = (ops_mm_task){&L->down_sh, gsh, T, s->sh, NULL};
    mm_batch(r, tasks, nt);
    if (src->release) src->release(src->ud, il);
    if (T < pool_size(r->pool) && T <= 64) {
        float gate[64];
        for (int t = 0; t < T; t++) gate[t] = moe_sh_gate(&mj, t);
        mj.gate = gate;
        const long nc = (D + MOE_SUM_COLS - 1) / MOE_SUM_COLS;
        /* an item: K + 1 rows of 128 floats from other cores' caches, ~0.8 us (13 us a layer for the 16 on one
         * thread of a 16-thread token, H200 host) */
        ops_parallel_for(r->pool, T * nc, (long)MOE_SUM_COLS * (K + 1) * 8, moe_combine_cols, &mj, "moe expert sum");
    } else {
        ops_parallel_for(r->pool, T, (long)D * (K + 2), moe_combine_rows, &mj, "moe expert sum");
    }
    return 0;
}

/* The dense FFN of the dense architectures (qwen35): y = down(silu(gate(xn)) * up(xn)), the same
 * SwiGLU and projections as the shared expert, without its gate. xn -> s->y. */
static void dense_ffn_layer(q3n_run *r, const q3n_layer *L, scratch *s, int T) {
    const int ff = r->m->hp.n_ff;
    ops_mm_task tasks[2] = {{&L->ffn_gate, s->xn, T, s->g, NULL}, {&L->ffn_up, s->xn, T, s->up, NULL}};
    mm_batch(r, tasks, 2);
    moe_job mj = {r, L, s, T, NULL, NULL, NULL};
    mj.a = s->g, mj.b = s->up;
    ops_parallel_for(r->pool, (long)T * ff, 24, moe_swiglu, &mj, "ffn swiglu");
    mm(r, &L->ffn_down, s->g, T, s->y);
}

/* Rows lo..hi-1: x += y (y not NULL), then xn = RMSNorm(x) * w (w not NULL). */
typedef struct {
    const q3n_hparams *hp;
    float *x, *xn;
    const float *y, *w;
} resnorm_job;

static void resnorm_rows(void *arg, long lo, long hi) {
    const resnorm_job *j = arg;
    int D = j->hp->n_embd;
    for (long t = lo; t < hi; t++) {
        float *x = j->x + (size_t)t * D;
        if (j->y)
            for (int i = 0; i < D; i++) x[i] += j->y[(size_t)t * D + i];
        if (j->w) ops_rmsnorm(x, j->w, D, j->hp->rms_eps, j->xn + (size_t)t * D);
    }
}

static void state_commit(const q3n_hparams *hp, q3n_state *st);

/* One decoder layer on s->x (T rows): h = x + Mixer(RMSNorm(x)); x = h + MoE(RMSNorm(h)). */
static int decoder_layer(q3n_run *r, int il, scratch *s, int T, int pos, int rope_delta) {
    const q3n_model *m = r->m;
    const q3n_hparams *hp = &m->hp;
    int D = hp->n_embd;
    const q3n_layer *L = &m->layers[il];
    /* without observers the row loops run split over the threads (resnorm_rows), else in row order */
    resnorm_job rj = {hp, s->x, s->xn, NULL, L->attn_norm};
    if (!r->dump) ops_parallel_for(r->pool, T, 4L * D, resnorm_rows, &rj, "norms+residuals");
    for (int t = 0; t < T && r->dump; t++) {
        ops_rmsnorm(s->x + (size_t)t * D, L->attn_norm, D, hp->rms_eps, s->xn + (size_t)t * D);
        DUMP(r, Q3N_ACT_ATTN_NORM, il, t, s->xn + (size_t)t * D, D);
    }
    if (L->is_attn)
        attention_layer(r, L, il, s, T, pos, rope_delta);
    else
        deltanet_layer(r, L, il, s, T);
    rj.y = s->y, rj.w = L->post_norm;
    if (!r->dump) ops_parallel_for(r->pool, T, 5L * D, resnorm_rows, &rj, "norms+residuals");
    for (int t = 0; t < T && r->dump; t++) {
        float *x = s->x + (size_t)t * D, *y = s->y + (size_t)t * D;
        DUMP(r, Q3N_ACT_ATTN_OUT, il, t, y, D);
        for (int i = 0; i < D; i++) x[i] += y[i];
        DUMP(r, Q3N_ACT_FFN_INP, il, t, x, D);
        ops_rmsnorm(x, L->post_norm, D, hp->rms_eps, s->xn + (size_t)t * D);
        DUMP(r, Q3N_ACT_FFN_NORM, il, t, s->xn + (size_t)t * D, D);
    }
    if (!hp->moe)
        dense_ffn_layer(r, L, s, T);
    else if (moe_layer(r, L, il, s, T))
        return -1;
    rj.w = NULL;
    if (!r->dump) ops_parallel_for(r->pool, T, 2L * D, resnorm_rows, &rj, "norms+residuals");
    for (int t = 0; t < T && r->dump; t++) {
        float *x = s->x + (size_t)t * D, *y = s->y + (size_t)t * D;
        DUMP(r, Q3N_ACT_FFN_OUT, il, t, y, D);
        for (int i = 0; i < D; i++) x[i] += y[i];
        DUMP(r, Q3N_ACT_L_OUT, il, t, x, D);
    }
    return 0;
}

int q3n_forward(q3n_run *r, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                float *hidden_out) {
    const q3n_model *m = r->m;
    const q3n_hparams *hp = &m->hp;
    int D = hp->n_embd;
    RL_ASSERT(T >= 1 && T <= r->max_rows);
    if (pos + T > r->st->n_ctx)
        return rl_seterr("context is full: %d + %d tokens exceed the context size %d (raise --ctx)", pos, T,
                         r->st->n_ctx);
    scratch s;
    carve_run(r, T, &s);
    const quant_traits *et = quant_get(m->tok_embd.type);
    if (q3n_check_tokens(tokens, T, hp->n_vocab)) return -1;
    for (int t = 0; t < T; t++) {
        et->to_float(m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes, s.x + (size_t)t * D, D);
        DUMP(r, Q3N_ACT_INP_EMBD, -1, t, s.x + (size_t)t * D, D);
    }
    for (int il = 0; il < hp->n_layer; il++)
        if (decoder_layer(r, il, &s, T, pos, 0)) return -1; /* committed state untouched */
    state_commit(hp, r->st);
    int t0 = all_logits ? 0 : T - 1;
    for (int t = 0; t < T; t++) {
        ops_rmsnorm(s.x + (size_t)t * D, m->output_norm, D, hp->rms_eps, s.xn + (size_t)t * D);
        DUMP(r, Q3N_ACT_RESULT_NORM, -1, t, s.xn + (size_t)t * D, D);
    }
    if (hidden_out) memcpy(hidden_out, s.xn, sizeof(float) * (size_t)T * D);
    if (logits) mm(r, &m->output, s.xn + (size_t)t0 * D, T - t0, logits);
    return 0;
}

/* Swap the committed and uncommitted recurrent state of every DeltaNet layer (a forward that
 * succeeded). */
static void state_commit(const q3n_hparams *hp, q3n_state *st) {
    if (!st->conv_next) return;
    for (int il = 0; il < hp->n_layer; il++) {
        if (!st->conv[il]) continue;
        float *c = st->conv[il], *S = st->ssm[il];
        st->conv[il] = st->conv_next[il], st->ssm[il] = st->ssm_next[il];
        st->conv_next[il] = c, st->ssm_next[il] = S;
    }
}

/* Rows of several sequences (backend.h). Every per-row step of q3n_forward is per row here too
 * (RoPE position, KV slot and keys, conv and recurrent state), and the shared steps (projections,
 * routing, expert products, norms) compute each row as they would in a forward of that row
 * alone (the exactness contract: a row's result does not depend on the other rows), so a row is
 * bit-identical to its sequence's single step. The logits go through lbuf (T x n_vocab: the
 * output projection of all rows at once), then to each row's destination. */
int q3n_forward_rows(q3n_run *r, q3n_state *const *st, const int32_t *tokens, const int *pos, int T,
                     float *const *logits, float *const *hidden, float *lbuf) {
    const q3n_model *m = r->m;
    const q3n_hparams *hp = &m->hp;
    int D = hp->n_embd;
    RL_ASSERT(T >= 1 && T <= r->max_rows);
    for (int t = 0; t < T; t++) {
        if (pos[t] + 1 > st[t]->n_ctx)
            return rl_seterr("context is full: %d + 1 tokens exceed the context size %d (raise --ctx)", pos[t],
                             st[t]->n_ctx);
        if (!st[t]->conv_next) return rl_seterr("q3n_forward_rows: a state without its uncommitted copy");
        for (int u = 0; u < t; u++)
            if (st[u] == st[t]) return rl_seterr("q3n_forward_rows: two rows of one sequence");
    }
    if (q3n_check_tokens(tokens, T, hp->n_vocab)) return -1;
    scratch s;
    carve_run(r, T, &s);
    s.rst = st;
    s.rpos = pos;
    /* no observers: they see one sequence's rows */
    q3n_dump_fn dump = r->dump;
    q3n_route_fn route = r->route;
    q3n_row_state_fn row_state = r->row_state;
    q3n_row_dst_fn row_dst = r->row_dst;
    r->dump = NULL, r->route = NULL, r->row_state = NULL, r->row_dst = NULL;
    const quant_traits *et = quant_get(m->tok_embd.type);
    for (int t = 0; t < T; t++)
        et->to_float(m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes, s.x + (size_t)t * D, D);
    int rc = 0;
    for (int il = 0; il < hp->n_layer && !rc; il++) rc = decoder_layer(r, il, &s, T, 0, 0);
    r->dump = dump, r->route = route, r->row_state = row_state, r->row_dst = row_dst;
    if (rc) return -1; /* committed states untouched */
    for (int t = 0; t < T; t++) state_commit(hp, st[t]);
    bool any = false;
    for (int t = 0; t < T; t++) {
        ops_rmsnorm(s.x + (size_t)t * D, m->output_norm, D, hp->rms_eps, s.xn + (size_t)t * D);
        if (hidden[t]) memcpy(hidden[t], s.xn + (size_t)t * D, sizeof(float) * (size_t)D);
        any |= logits[t] != NULL;
    }
    if (any) {
        mm(r, &m->output, s.xn, T, lbuf);
        for (int t = 0; t < T; t++)
            if (logits[t]) memcpy(logits[t], lbuf + (size_t)t * hp->n_vocab, sizeof(float) * (size_t)hp->n_vocab);
    }
    return 0;
}

int q3n_mtp_forward(q3n_run *r, const float *hidden, const int32_t *next_tokens, int T, int slot, float *logits,
                    float *hidden_out) {
    const q3n_model *m = r->m;
    const q3n_hparams *hp = &m->hp;
    int D = hp->n_embd, il = hp->n_layer;
    if (hp->n_nextn < 1) return rl_seterr("this model has no MTP block (nextn_predict_layers is 0)");
    RL_ASSERT(T >= 1 && T <= r->max_rows);
    if (slot + T > r->st->n_ctx)
        return rl_seterr("MTP context is full: %d + %d pairs exceed %d", slot, T, r->st->n_ctx);
    const q3n_layer *L = &m->layers[il];
    scratch s;
    carve_run(r, T, &s);
    /* [RMSNorm_e(embed(x_{p+1})) ; RMSNorm_h(h_p)] -> eh_proj (embedding first, spec F.2) */
    float *cat = s.xs; /* carve gives xs at least 2D floats per row */
    const quant_traits *et = quant_get(m->tok_embd.type);
    if (q3n_check_tokens(next_tokens, T, hp->n_vocab)) return -1;
    for (int t = 0; t < T; t++) {
        float *e = cat + (size_t)t * 2 * D, *h = e + D;
        et->to_float(m->tok_embd.data + (size_t)next_tokens[t] * m->tok_embd.row_bytes, e, D);
        ops_rmsnorm(e, L->enorm, D, hp->rms_eps, e);
        ops_rmsnorm(hidden + (size_t)t * D, L->hnorm, D, hp->rms_eps, h);
    }
    mm(r, &L->eh_proj, cat, T, s.x);
    if (decoder_layer(r, il, &s, T, slot, 1)) return -1;
    for (int t = 0; t < T; t++)
        ops_rmsnorm(s.x + (size_t)t * D, L->shared_head_norm, D, hp->rms_eps, s.xn + (size_t)t * D);
    if (hidden_out) memcpy(hidden_out, s.xn, sizeof(float) * (size_t)T * D);
    if (logits) mm(r, &m->output, s.xn, T, logits);
    return 0;
}
