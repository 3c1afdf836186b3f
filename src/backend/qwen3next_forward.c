/* qwen3next_forward.c — the CPU reference forward pass of Qwen3-Next (the model description,
 * hyperparameters and tensor binding are in qwen3next.c). See cpu_forward.h for the contract and
 * the shared spec for the op order (§A) and MTP (§F).
 *
 * Per decoder layer:  h = x + Mixer(RMSNorm(x)),  out = h + MoE(RMSNorm(h))
 * where Mixer is gated full attention on layers (i+1) % interval == 0 and Gated DeltaNet
 * elsewhere. Norm weights in GGUF already include the +1 of the zero-centred HF norms.
 */
#include "backend/qwen3next_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "base/common.h"
#include "gguf/quant.h"
#include "kern/vec.h"
#include "model/experts.h"

/* ---- forward pass (CPU reference) ----------------------------------------------------- */

static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

static size_t fl(size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); } /* bytes -> floats */

static size_t carve(const q3n_hparams *hp, int T, float *base, scratch *out) {
    scratch dummy = {0}, *s = out ? out : &dummy; /* sizes only: no member address of a NULL struct */
    size_t D = hp->n_embd, inner = (size_t)hp->ssm_hv * hp->ssm_dv, hd = hp->head_dim;
    size_t ff = mx(mx(hp->n_ff_exp, hp->n_ff_shexp), hp->n_ff), E = hp->n_expert, K = hp->n_expert_used;
    /* {floats per row (times T), floats once}, in the order of the members below */
    const size_t parts[][2] = {
        {D, 0},                                         /* x */
        {D, 0},                                         /* xn */
        {D, 0},                                         /* y */
        {mx(2 * hp->n_head * hd, hp->ssm_conv_dim), 0}, /* big */
        {mx(2 * hp->n_head_kv * hd, inner), 0},         /* kv */
        {2 * (size_t)hp->ssm_hv, 0},                    /* ba */
        {mx(hp->n_head * hd, inner), 0},                /* o */
        {hp->ssm_conv_dim, 0},                          /* u */
        {E, 0},                                         /* rl */
        {K, 0},                                         /* sel_w */
        {K, 0},                                         /* sel_id */
        {mx(K, 2) * D, 0},                              /* xs */
        {(K + 1) * ff, 0},                              /* g */
        {(K + 1) * ff, 0},                              /* up */
        {K * D, 0},                                     /* eo */
        {D, 0},                                         /* sh */
        {0, E},                                         /* sc */
        {0, K},                                         /* pr */
        {0, fl(sizeof(int32_t) * E)},                   /* uniq */
        {0, fl(sizeof(int32_t) * E)},                   /* slot_of */
        {0, fl(sizeof(int32_t) * (E + 1))},             /* first */
        {0, fl(sizeof(int32_t) * E)},                   /* fill */
        {fl(sizeof(int32_t) * K), 0},                   /* gidx */
        {0, fl(sizeof(uint8_t *) * E)},                 /* gp */
        {0, fl(sizeof(uint8_t *) * E)},                 /* upp */
        {0, fl(sizeof(uint8_t *) * E)},                 /* dp */
        {0, fl(sizeof(ops_mat) * 3 * E)},               /* mats */
        {0, fl(sizeof(ops_mm_task) * (2 * E + 2))},     /* tasks */
        {fl(sizeof(float *) * 2), 0},                   /* rdst */
    };
    enum { NP = sizeof parts / sizeof parts[0] };
    float *p[NP] = {0};
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
    size_t w =
        mx(mx(2 * (size_t)hp->n_embd, (size_t)hp->n_head * hp->head_dim), (size_t)hp->ssm_hv * hp->ssm_dv);
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
void q3n_mm_batch(q3n_run *r, ops_mm_task *tasks, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) tasks[i].actq = actq_take(r, &off, tasks[i].W, tasks[i].T);
    ops_matmul_batch(r->pool, tasks, n, r->fast);
}

/* Every projection goes through here: the reference (oracle) or the fast SIMD path. */
void q3n_mm(q3n_run *r, const ops_mat *W, const float *x, int T, float *y) {
    ops_mm_task t = {W, x, T, y, NULL};
    q3n_mm_batch(r, &t, 1);
}

/* Default expert source: slices of the mapped *_exps tensors. */
static int mapped_acquire(void *ud, int il, const int32_t *ids, int n, const uint8_t **gate,
                          const uint8_t **up, const uint8_t **down) {
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
    float *a; /* moe_swiglu: a = silu(a) * b */
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
    if (j->r->fast) ops_vec(j->r->pool)->silu_mul(j->a + lo, j->a + lo, j->b + lo, (int)(hi - lo));
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
    for (int k = 0; k < K; k++)
        v->axpy_d(acc, s->sel_w[t * K + k], s->eo + (size_t)s->gidx[t * K + k] * D + c0, n);
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
    q3n_mm(r, &L->router, s->xn, T, s->rl);
    moe_job mj = {r, L, s, T, NULL, NULL, NULL};
    /* without the observers and the cache bias (one shared scratch row) rows route independently */
    if (!r->experts.bias && !r->route)
        ops_parallel_for(r->pool, T, (long)E * (K + 8), moe_route_rows, &mj, "moe routing");
    else
        for (int t = 0; t < T; t++) {
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
    q3n_mm_batch(r, tasks, nt);
    mj.a = s->g, mj.b = s->up;
    ops_parallel_for(r->pool, (long)ng * ff, 24, moe_swiglu, &mj, "moe swiglu");
    if (has_sh) {
        mj.a = gsh, mj.b = ush;
        ops_parallel_for(r->pool, (long)T * fs, 24, moe_swiglu, &mj, "moe swiglu");
    }
    nt = 0;
    for (int ui = 0; ui < nu; ui++)
        tasks[nt++] = (ops_mm_task){&mats[3 * ui + 2], s->g + (size_t)first[ui] * ff,
                                    first[ui + 1] - first[ui], s->eo + (size_t)first[ui] * D, NULL};
    if (has_sh) tasks[nt++] = (ops_mm_task){&L->down_sh, gsh, T, s->sh, NULL};
    q3n_mm_batch(r, tasks, nt);
    if (src->release) src->release(src->ud, il);
    if (T < pool_size(r->pool) && T <= 64) {
        float gate[64];
        for (int t = 0; t < T; t++) gate[t] = moe_sh_gate(&mj, t);
        mj.gate = gate;
        const long nc = (D + MOE_SUM_COLS - 1) / MOE_SUM_COLS;
        /* an item: K + 1 rows of 128 floats from other cores' caches, ~0.8 us (13 us a layer for the 16 on
         * one thread of a 16-thread token, H200 host) */
        ops_parallel_for(r->pool, T * nc, (long)MOE_SUM_COLS * (K + 1) * 8, moe_combine_cols, &mj,
                         "moe expert sum");
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
    q3n_mm_batch(r, tasks, 2);
    moe_job mj = {r, L, s, T, NULL, NULL, NULL};
    mj.a = s->g, mj.b = s->up;
    ops_parallel_for(r->pool, (long)T * ff, 24, moe_swiglu, &mj, "ffn swiglu");
    q3n_mm(r, &L->ffn_down, s->g, T, s->y);
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
    if (L->is_attn) q3n_attention_layer(r, L, il, s, T, pos, rope_delta);
    else q3n_deltanet_layer(r, L, il, s, T);
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
    if (!hp->moe) dense_ffn_layer(r, L, s, T);
    else if (moe_layer(r, L, il, s, T)) return -1;
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
    if (logits) q3n_mm(r, &m->output, s.xn + (size_t)t0 * D, T - t0, logits);
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
            return rl_seterr("context is full: %d + 1 tokens exceed the context size %d (raise --ctx)",
                             pos[t], st[t]->n_ctx);
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
        q3n_mm(r, &m->output, s.xn, T, lbuf);
        for (int t = 0; t < T; t++)
            if (logits[t])
                memcpy(logits[t], lbuf + (size_t)t * hp->n_vocab, sizeof(float) * (size_t)hp->n_vocab);
    }
    return 0;
}

int q3n_mtp_forward(q3n_run *r, const float *hidden, const int32_t *next_tokens, int T, int slot,
                    float *logits, float *hidden_out) {
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
    q3n_mm(r, &L->eh_proj, cat, T, s.x);
    if (decoder_layer(r, il, &s, T, slot, 1)) return -1;
    for (int t = 0; t < T; t++)
        ops_rmsnorm(s.x + (size_t)t * D, L->shared_head_norm, D, hp->rms_eps, s.xn + (size_t)t * D);
    if (hidden_out) memcpy(hidden_out, s.xn, sizeof(float) * (size_t)T * D);
    if (logits) q3n_mm(r, &m->output, s.xn, T, logits);
    return 0;
}
