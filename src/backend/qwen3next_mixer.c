/* qwen3next_mixer.c — the mixer layer bodies of the CPU forward of Qwen3-Next: gated full attention
 * (spec §A.4) and Gated DeltaNet (spec §A.5), with their thread-pool work items. The scratch, the
 * MoE block and the forward drivers are in qwen3next_forward.c; qwen3next_int.h joins them.
 */
#include "backend/qwen3next_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "base/common.h"
#include "gguf/quant.h"
#include "kern/vec.h"

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
    int H = hp->n_head, Hkv = hp->n_head_kv, hd = hp->head_dim, nh = H + Hkv,
        per = (nh + j->hpi - 1) / j->hpi;
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
    if (j->r->fast) ops_vec(j->r->pool)->sigmoid_mul(o, gate, hd);
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
        const char *K = (const char *)st->k_cache[j->il] + kvoff,
                   *V = (const char *)st->v_cache[j->il] + kvoff;
        vec_attn_chunk_kv(ops_vec(j->r->pool), j->s->big + (size_t)t * 2 * H * hd + (size_t)h0 * 2 * hd,
                          2 * (size_t)hd, gs, K, V, st->kv_f16, p0, p1, kvw, hd, 1.0f / sqrtf((float)hd),
                          j->part + at * hd, (size_t)hd, pm + at, pm + nml + at);
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
            vec_attn_merge(1, hd, o, (size_t)hd, &m, &l, j->part + at * hd, (size_t)hd, pm + at,
                           pm + nml + at);
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
        const void *Kh = (const char *)st->k_cache[j->il] + kvoff * eb,
                   *Vh = (const char *)st->v_cache[j->il] + kvoff * eb;
        if (j->r->fast)
            vec_attn_rows_kv(ops_vec(j->r->pool), q, 2 * (size_t)H * hd, R, 2 * (size_t)hd, gs, Kh, Vh, f16,
                             attn_pos(j, t) + 1, kvw, hd, scale, o, (size_t)H * hd, hd);
        else ops_attn_head_kv(q, Kh, Vh, f16, attn_pos(j, t) + 1, kvw, hd, scale, o);
        for (int r = 0; r < R; r++)
            for (int g = 0; g < gs; g++) attn_gate(j, t + r, h0 + g, o + (size_t)r * H * hd + (size_t)g * hd);
    }
}

void q3n_kv_store(q3n_state *st, int il, int slot, const float *k, const float *v, size_t kvw) {
    if (st->kv_f16) {
        uint16_t *kc = (uint16_t *)st->k_cache[il] + (size_t)slot * kvw,
                 *vc = (uint16_t *)st->v_cache[il] + (size_t)slot * kvw;
        for (size_t i = 0; i < kvw; i++) kc[i] = rl_fp32_to_fp16(k[i]), vc[i] = rl_fp32_to_fp16(v[i]);
    } else {
        memcpy((float *)st->k_cache[il] + (size_t)slot * kvw, k, sizeof(float) * kvw);
        memcpy((float *)st->v_cache[il] + (size_t)slot * kvw, v, sizeof(float) * kvw);
    }
}

/* KV slots pos..pos+T-1; RoPE positions are the slots + rope_delta (the MTP layer puts pair
 * (h_p, x_{p+1}) in slot p at position p+1). */
void q3n_attention_layer(q3n_run *r, const q3n_layer *L, int il, scratch *s, int T, int pos, int rope_delta) {
    const q3n_hparams *hp = &r->m->hp;
    int H = hp->n_head, Hkv = hp->n_head_kv, hd = hp->head_dim;
    size_t kvw = (size_t)Hkv * hd;
    float *k = s->kv, *v = s->kv + (size_t)T * kvw;
    ops_mm_task proj[3] = {
        {&L->wq, s->xn, T, s->big, NULL}, {&L->wk, s->xn, T, k, NULL}, {&L->wv, s->xn, T, v, NULL}};
    q3n_mm_batch(r, proj, 3);
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
    for (int t = 0; s->rpos && t < T; t++)
        n_kv_max = t == 0 || s->rpos[t] + 1 > n_kv_max ? s->rpos[t] + 1 : n_kv_max;
    const int nch = (n_kv_max + VEC_ATTN_CHUNK - 1) / VEC_ATTN_CHUNK;
    if (r->fast && attn_rows(T, 1) == 1 && nch > 1 && pool_size(r->pool) > 1 &&
        (size_t)T * nch * H * (hd + 2) <= s->n_spare)
        j.nch = nch, j.part = s->spare;
    ops_run(r->pool, attn_worker, &j, "attention core");
    if (j.nch)
        ops_parallel_for(r->pool, (long)T * H, (long)nch * hd * 4, attn_fold_items, &j, "attention fold");
    for (int t = 0; t < T; t++) DUMP(r, Q3N_ACT_ATTN_GATED, il, t, s->o + (size_t)t * H * hd, H * hd);
    q3n_mm(r, &L->wo, s->o, T, s->y);
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
            const float *ssm_in = rs       ? rs->ssm[j->il]
                                  : t == 0 ? st->ssm[j->il]
                                           : dn_row_out(j, t - 1, 1, live);
            float *ssm = rs ? rs->ssm_next[j->il] : dn_row_out(j, t, 1, live);
            const int g = q3n_key_head(hp, (int)h);
            const float *q = u + (size_t)g * dk; /* l2-normed and scaled in place before */
            const float *k = u + (size_t)(hk + g) * dk;
            const float *v = u + (size_t)2 * hk * dk + (size_t)h * dv;
            if (t + 2 < j->t1) { /* row t + 2's q, k, v and z of this head: rows are a conv_dim apart,
                                  * a stride the hardware prefetchers do not follow */
                const size_t ahead = 2 * (size_t)hp->ssm_conv_dim, za = 2 * (size_t)hv * dv;
                for (int i = 0; i < dk; i += 16)
                    __builtin_prefetch(q + ahead + i), __builtin_prefetch(k + ahead + i);
                for (int i = 0; i < dv; i += 16)
                    __builtin_prefetch(v + ahead + i), __builtin_prefetch(z + (size_t)h * dv + za + i);
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
            else ops_delta_step(ssm_in + so, ssm + so, q, k, v, expf(gdecay), beta, dk, dv, o);
            /* the last row's snapshot: a copy of this head's slice while it is in cache */
            if (t == j->T - 1 && j->dst && j->s->rdst[2 * t + 1])
                memcpy(j->s->rdst[2 * t + 1] + so, ssm + so, sizeof(float) * (size_t)dv * dk);
            /* gated RMSNorm per value head: norm, weight, then * silu(z) */
            ops_rmsnorm(o, L->ssm_norm, dv, hp->rms_eps, o);
            if (j->r->fast) ops_vec(j->r->pool)->silu_mul(o, z + (size_t)h * dv, o, dv);
            else
                for (int i = 0; i < dv; i++) o[i] *= ops_silu(z[(size_t)h * dv + i]);
        }
}

/* One row's conv of channels c0..c1-1: the window sums (ops_conv_step_range), then SiLU — libm's on
 * the reference path, the vec table's 8-lane one on the fast path (every row of the fast path, in a
 * prefill chunk or a decode step, takes this same function, so the rows stay bit-identical). */
static void dn_conv_range(const q3n_run *r, const float *state, float *state_out, const float *w,
                          const float *u, int C, int kw, int c0, int c1, float *out) {
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
        const q3n_state *rs =
            j->s->rst ? j->s->rst[t] : NULL; /* rows of several sequences: their own states */
        dn_conv_range(j->r,
                      rs       ? rs->conv[j->il]
                      : t == 0 ? st->conv[j->il]
                               : dn_row_out(j, t - 1, 0, conv),
                      rs ? rs->conv_next[j->il] : dn_row_out(j, t, 0, conv), j->L->conv_w,
                      j->s->big + (size_t)t * C, C, hp->ssm_kw, (int)lo, (int)hi, j->s->u + (size_t)t * C);
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

void q3n_deltanet_layer(q3n_run *r, const q3n_layer *L, int il, scratch *s, int T) {
    const q3n_hparams *hp = &r->m->hp;
    int C = hp->ssm_conv_dim, dk = hp->ssm_dk, hk = hp->ssm_hk, inner = hp->ssm_hv * hp->ssm_dv;
    /* beta and alpha: one fused matrix, or two (ba_split: beta rows, then alpha rows in s->ba) */
    ops_mm_task proj[4] = {{&L->wqkv, s->xn, T, s->big, NULL},
                           {&L->wgate, s->xn, T, s->kv, NULL},
                           {&L->wba, s->xn, T, s->ba, NULL}};
    if (hp->ba_split) {
        proj[2] = (ops_mm_task){&L->wbeta, s->xn, T, s->ba, NULL};
        proj[3] = (ops_mm_task){&L->walpha, s->xn, T, s->ba + (size_t)T * hp->ssm_hv, NULL};
    }
    q3n_mm_batch(r, proj, hp->ba_split ? 4 : 3);
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
            memcpy(s->rdst[2 * (T - 1)], dn_row_out(&jb, T - 1, 0, conv),
                   sizeof(float) * q3n_conv_floats(hp));
        /* (row, key head) items: a decode row's 16 heads took 11 us a layer on the calling thread of a
         * 16-thread token (its input was just written by the conv's threads) */
        ops_parallel_for(r->pool, (long)T * hk, (long)2 * dk * 32, dn_qk_norm_items, &jb,
                         "deltanet q/k norms");
        ops_run(r->pool, dn_heads_worker, &jb, "deltanet recurrence");
        q3n_mm(r, &L->wout, s->o, T, s->y);
        return;
    }
    for (int t = 0; t < T; t++) {
        float *u = s->u + (size_t)t * C;
        float *cout = dn_row_out(&jb, t, 0, conv);
        dn_conv_range(r, t == 0 ? r->st->conv[il] : dn_row_out(&jb, t - 1, 0, conv), cout, L->conv_w,
                      s->big + (size_t)t * C, C, hp->ssm_kw, 0, C, u);
        if (t == T - 1 && jb.dst && s->rdst[2 * t])
            memcpy(s->rdst[2 * t], cout, sizeof(float) * q3n_conv_floats(hp));
        DUMP(r, Q3N_ACT_DN_CONV, il, t, u, C);
        dn_qk_norm_items(&jb, (long)t * hk, (long)(t + 1) * hk);
        dn_job j = jb;
        j.t0 = t, j.t1 = t + 1;
        pool_run(r->pool, dn_heads_worker, &j);
        if (row_state)
            r->row_state(r->hook_ud, il, t, conv, r->st->ssm_next ? r->st->ssm_next[il] : r->st->ssm[il]);
        DUMP(r, Q3N_ACT_DN_GATED, il, t, s->o + (size_t)t * inner, inner);
    }
    q3n_mm(r, &L->wout, s->o, T, s->y);
}
