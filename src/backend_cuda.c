/* backend_cuda.c — the CUDA backend: full residency (every tensor uploaded once, raw
 * quantised blocks), the sequence state on the device, the forward pass as a sequence of
 * kernel launches on one stream (plus a side stream for the shared expert), and the decode
 * step captured as one CUDA graph.
 *
 * Shape of a forward (T rows; kernels in src/cuda, contract in src/cuda/cuda_ops.h):
 *   embedding gather -> per layer: [mixer] -> x += y, xn = norm -> router -> plan ->
 *   expert gate/up, down (grouped by expert) || shared expert -> combine (+ next norm) -> head.
 * Decode (T = 1, no debug hooks) is captured once per context into a graph that reads the
 * token id and position from device memory; RL_CUDA_GRAPHS=0 runs the same launches directly.
 * The only host round trip of a step is the final copy of the logits and hidden state.
 * Debug hooks (dump, route, row_state) are served by synchronous copies (slow, exact).
 *
 * The KV cache format comes from --kv (engine_ctx_params.kv; the old RL_CUDA_KV switch is gone).
 * Environment: RL_CUDA_GRAPHS=0 (no graphs), RL_CUDA_ATTN=per-warp (the previous decode attention
 * split kernel, for A/B timing: same bits),
 * RL_CUDA_VERBOSE=1 (upload time and memory on stderr), RL_CUDA_DEVICE=N; tuning of the
 * small-batch (verify) shapes, same bits whatever the value: RL_CUDA_SMALL_MOE=N (batches of
 * up to N rows run the MoE as one tile per (row, expert) pair, larger ones grouped by expert;
 * 1..16, default 16), RL_CUDA_SMALL_TT=2|4|8 (largest token tile of a small dense batch,
 * default 4). Measured in bench/results/2026-12-01-spec-cuda-h200.md. Decode kernels, same bits
 * whatever the value: RL_CUDA_MM_STAGE=iq|1|0 (weights staged in shared memory: IQ types, the
 * default; all; none), RL_CUDA_FUSE=0|all|combine,norm,router (last-block tails; default none),
 * measured in bench/results/2026-12-01-cuda-decode-h200.md.
 */
#ifdef RL_CUDA
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "common.h"
#include "cuda/cuda_ops.h"
#include "quant.h"
#include "vram_plan.h"
#include "vram_tier.h"

#define TRY(x)                                                                                              \
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
    dmat wq, wk, wv, wo, wqkv, wgate, wba, wout, router, gate_exps, up_exps, down_exps, gate_sh, up_sh, down_sh;
    bool fused_gate_up;
    dmat eh_proj;                                  /* MTP layer only */
    float *enorm, *hnorm, *shared_head_norm;       /* MTP layer only */
} dlayer;

typedef struct dmodel {
    const q3n_model *m;
    bool experts; /* routed experts uploaded (false: a VRAM tier serves them from slots) */
    int refs;
    uint8_t *arena;
    size_t arena_bytes;
    dmat tok_embd, output;
    float *output_norm, *inv_freq;
    dlayer L[Q3N_MAX_LAYERS];
    struct dmodel *next;
} dmodel;

static pthread_mutex_t g_models_lock = PTHREAD_MUTEX_INITIALIZER;
static dmodel *g_models;

enum { FUSE_COMBINE = 1, FUSE_NORM = 2, FUSE_ROUTER = 4 };

/* RL_CUDA_FUSE: unset or "0" = none (the default: on the H200 no tail made the decode graph
 * faster — combine 0 %, norm -0.3 %, router -1 %, bench/results/2026-12-01-cuda-decode-h200.md),
 * "1"/"all" every tail, or a comma list of combine, norm, router. */
static int fuse_mask(void) {
    const char *v = getenv("RL_CUDA_FUSE");
    if (!v || !*v) return 0;
    if (!strcmp(v, "0") || !strcmp(v, "off")) return 0;
    if (!strcmp(v, "1") || !strcmp(v, "all")) return FUSE_COMBINE | FUSE_NORM | FUSE_ROUTER;
    return (strstr(v, "combine") ? FUSE_COMBINE : 0) | (strstr(v, "norm") ? FUSE_NORM : 0) |
           (strstr(v, "router") ? FUSE_ROUTER : 0);
}

static bool env_on(const char *name, bool def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    return strcmp(v, "0") != 0 && strcmp(v, "off") != 0 && strcmp(v, "no") != 0;
}

/* Upload plan: pass 0 sizes the arena (deduplicating host pointers), pass 1 copies. */
typedef struct {
    int pass;
    const void **host;
    size_t *off, *bytes;
    int n, cap;
    size_t total;
    uint8_t *arena;
    /* staging for pass 1 */
    uint8_t *pin[2];
    cudaEvent_t ev[2];
    int cur;
    cudaStream_t st;
} upl;

#define STAGE_BYTES ((size_t)64 << 20)

static int upl_copy(upl *u, uint8_t *dst, const uint8_t *src, size_t n) {
    while (n) {
        size_t k = n < STAGE_BYTES ? n : STAGE_BYTES;
        int b = u->cur;
        u->cur ^= 1;
        TRY(CU_CHECK(cudaEventSynchronize(u->ev[b])));
        memcpy(u->pin[b], src, k);
        TRY(CU_CHECK(cudaMemcpyAsync(dst, u->pin[b], k, cudaMemcpyHostToDevice, u->st)));
        TRY(CU_CHECK(cudaEventRecord(u->ev[b], u->st)));
        dst += k;
        src += k;
        n -= k;
    }
    return 0;
}

/* Device address of host bytes [h, h+n) (uploaded once per distinct host pointer). */
static int upl_add(upl *u, const void *h, size_t n, const uint8_t **out) {
    *out = NULL;
    if (!h || !n) return 0;
    for (int i = 0; i < u->n; i++)
        if (u->host[i] == h && u->bytes[i] >= n) {
            if (u->pass) *out = u->arena + u->off[i];
            return 0;
        }
    if (u->pass) return rl_seterr("CUDA upload: tensor planned twice differently (internal)");
    if (u->n == u->cap) {
        int cap = u->cap ? 2 * u->cap : 256;
        const void **nh = realloc(u->host, sizeof(void *) * (size_t)cap);
        if (nh) u->host = nh;
        size_t *no = realloc(u->off, sizeof(size_t) * (size_t)cap);
        if (no) u->off = no;
        size_t *nb = realloc(u->bytes, sizeof(size_t) * (size_t)cap);
        if (nb) u->bytes = nb;
        if (!nh || !no || !nb) return rl_seterr("out of memory planning the CUDA upload");
        u->cap = cap;
    }
    u->host[u->n] = h;
    u->off[u->n] = u->total;
    u->bytes[u->n] = n;
    u->n++;
    u->total += (n + 255) & ~(size_t)255;
    return 0;
}

/* The matrix's description without its bytes (routed experts under a VRAM tier). */
static int meta_mat(dmat *d, const ops_mat *m) {
    memset(d, 0, sizeof *d);
    if (!m->data) return 0;
    if (!cu_type_supported(m->type))
        return rl_seterr("tensor %s has type %s, which the CUDA backend does not decode (use --backend cpu)",
                         m->name ? m->name : "?", quant_name(m->type));
    if (m->n_in % 8) return rl_seterr("tensor %s: %lld columns is not a multiple of 8", m->name, (long long)m->n_in);
    d->type = m->type;
    d->n_in = (int)m->n_in;
    d->n_out = m->n_out;
    d->row_bytes = m->row_bytes;
    return 0;
}

/* The description plus the bytes, queued for upload. */
static int up_mat(upl *u, dmat *d, const ops_mat *m) {
    TRY(meta_mat(d, m));
    if (!m->data) return 0;
    if (u->pass == 1) {
        int i;
        for (i = 0; i < u->n && u->host[i] != m->data; i++) {}
        if (i < u->n && (u->off[i] & 15)) return rl_seterr("CUDA upload: misaligned tensor (internal)");
    }
    return upl_add(u, m->data, m->row_bytes * (size_t)m->n_out, &d->d);
}

static int up_vec(upl *u, float **d, const float *h, size_t n) {
    const uint8_t *p;
    TRY(upl_add(u, h, n * sizeof(float), &p));
    *d = (float *)p;
    return 0;
}

static int plan_model(upl *u, dmodel *dm, const float *inv_freq) {
    const q3n_model *m = dm->m;
    const q3n_hparams *hp = &m->hp;
    size_t D = hp->n_embd, hd = hp->head_dim;
    TRY(up_mat(u, &dm->tok_embd, &m->tok_embd));
    TRY(up_mat(u, &dm->output, &m->output));
    TRY(up_vec(u, &dm->output_norm, m->output_norm, D));
    TRY(up_vec(u, &dm->inv_freq, inv_freq, (size_t)hp->n_rot / 2));
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) { /* the MTP layer too */
        const q3n_layer *L = &m->layers[il];
        dlayer *d = &dm->L[il];
        d->fused_gate_up = L->fused_gate_up;
        if (il >= hp->n_layer) {
            TRY(up_mat(u, &d->eh_proj, &L->eh_proj));
            TRY(up_vec(u, &d->enorm, L->enorm, D));
            TRY(up_vec(u, &d->hnorm, L->hnorm, D));
            TRY(up_vec(u, &d->shared_head_norm, L->shared_head_norm, D));
        }
        TRY(up_vec(u, &d->attn_norm, L->attn_norm, D));
        TRY(up_vec(u, &d->post_norm, L->post_norm, D));
        if (L->is_attn) {
            TRY(up_mat(u, &d->wq, &L->wq));
            TRY(up_mat(u, &d->wk, &L->wk));
            TRY(up_mat(u, &d->wv, &L->wv));
            TRY(up_mat(u, &d->wo, &L->wo));
            TRY(up_vec(u, &d->q_norm, L->q_norm, hd));
            TRY(up_vec(u, &d->k_norm, L->k_norm, hd));
        } else {
            TRY(up_mat(u, &d->wqkv, &L->wqkv));
            TRY(up_mat(u, &d->wgate, &L->wgate));
            TRY(up_mat(u, &d->wba, &L->wba));
            TRY(up_mat(u, &d->wout, &L->wout));
            TRY(up_vec(u, &d->conv_w, L->conv_w, (size_t)hp->ssm_conv_dim * hp->ssm_kw));
            TRY(up_vec(u, &d->dt_bias, L->dt_bias, (size_t)hp->ssm_hv));
            TRY(up_vec(u, &d->ssm_a, L->ssm_a, (size_t)hp->ssm_hv));
            TRY(up_vec(u, &d->ssm_norm, L->ssm_norm, (size_t)hp->ssm_dv));
        }
        TRY(up_mat(u, &d->router, &L->router));
        if (dm->experts || il >= hp->n_layer) { /* the MTP layer's experts stay resident (no VRAM tier there) */
            TRY(up_mat(u, &d->gate_exps, &L->gate_exps));
            TRY(up_mat(u, &d->up_exps, &L->up_exps));
            TRY(up_mat(u, &d->down_exps, &L->down_exps));
        } else {
            TRY(meta_mat(&d->gate_exps, &L->gate_exps));
            TRY(meta_mat(&d->up_exps, &L->up_exps));
            TRY(meta_mat(&d->down_exps, &L->down_exps));
        }
        TRY(up_mat(u, &d->gate_sh, &L->gate_sh));
        TRY(up_mat(u, &d->up_sh, &L->up_sh));
        TRY(up_mat(u, &d->down_sh, &L->down_sh));
        TRY(up_vec(u, &d->sh_gate, L->sh_gate, D));
    }
    return 0;
}

static void dmodel_free(dmodel *dm) {
    if (!dm) return;
    if (dm->arena) cudaFree(dm->arena);
    free(dm);
}

static dmodel *dmodel_upload(const q3n_model *m, bool experts) {
    const q3n_hparams *hp = &m->hp;
    dmodel *dm = rl_calloc(1, sizeof *dm, "CUDA model");
    float *inv_freq = rl_calloc((size_t)hp->n_rot / 2 + 1, sizeof(float), "rope table");
    upl u = {0};
    if (!dm || !inv_freq) goto fail;
    dm->m = m;
    dm->experts = experts;
    /* RoPE inverse frequencies exactly as the CPU reference computes them (ops_rope_neox) */
    for (int i = 0; i < hp->n_rot / 2; i++)
        inv_freq[i] = (float)(1.0 / pow((double)hp->rope_base, (double)(2 * i) / (double)hp->n_rot));
    double t0 = rl_now();
    if (plan_model(&u, dm, inv_freq)) goto fail;
    if (CU_CHECK(cudaMalloc((void **)&u.arena, u.total))) {
        rl_seterr("cannot allocate %.2f GiB of GPU memory for the model (%s)", u.total / 1073741824.0, rl_lasterr());
        goto fail;
    }
    dm->arena = u.arena;
    dm->arena_bytes = u.total;
    if (CU_CHECK(cudaStreamCreateWithFlags(&u.st, cudaStreamNonBlocking))) goto fail;
    for (int b = 0; b < 2; b++) {
        if (CU_CHECK(cudaMallocHost((void **)&u.pin[b], STAGE_BYTES)) || CU_CHECK(cudaEventCreate(&u.ev[b])))
            goto fail_stage;
        if (CU_CHECK(cudaEventRecord(u.ev[b], u.st))) goto fail_stage;
    }
    for (int i = 0; i < u.n; i++)
        if (upl_copy(&u, u.arena + u.off[i], u.host[i], u.bytes[i])) goto fail_stage;
    if (CU_CHECK(cudaStreamSynchronize(u.st))) goto fail_stage;
    u.pass = 1;
    if (plan_model(&u, dm, inv_freq)) goto fail_stage;
    if (env_on("RL_CUDA_VERBOSE", false))
        fprintf(stderr, "redlite cuda: uploaded %d tensors, %.2f GiB in %.2f s\n", u.n, u.total / 1073741824.0,
                rl_now() - t0);
    for (int b = 0; b < 2; b++) {
        cudaFreeHost(u.pin[b]);
        cudaEventDestroy(u.ev[b]);
    }
    cudaStreamDestroy(u.st);
    free(u.host);
    free(u.off);
    free(u.bytes);
    free(inv_freq);
    return dm;
fail_stage:
    for (int b = 0; b < 2; b++) {
        if (u.pin[b]) cudaFreeHost(u.pin[b]);
        if (u.ev[b]) cudaEventDestroy(u.ev[b]);
    }
    if (u.st) cudaStreamDestroy(u.st);
fail:
    free(u.host);
    free(u.off);
    free(u.bytes);
    free(inv_freq);
    dmodel_free(dm);
    return NULL;
}

/* Device bytes of the model's upload (without the routed experts: the VRAM planner's dense part). */
static size_t dmodel_bytes(const q3n_model *m, bool experts) {
    dmodel *dm = rl_calloc(1, sizeof *dm, "CUDA model");
    float *f = rl_calloc((size_t)m->hp.n_rot / 2 + 1, sizeof(float), "rope table");
    upl u = {0};
    size_t t = 0;
    if (dm && f) {
        dm->m = m;
        dm->experts = experts;
        t = plan_model(&u, dm, f) ? 0 : u.total;
    }
    free(u.host);
    free(u.off);
    free(u.bytes);
    free(f);
    free(dm);
    return t;
}

static dmodel *dmodel_get(const q3n_model *m, bool experts) {
    pthread_mutex_lock(&g_models_lock);
    dmodel *dm;
    for (dm = g_models; dm && (dm->m != m || dm->experts != experts); dm = dm->next) {}
    if (!dm && (dm = dmodel_upload(m, experts))) {
        dm->next = g_models;
        g_models = dm;
    }
    if (dm) dm->refs++;
    pthread_mutex_unlock(&g_models_lock);
    return dm;
}

static void dmodel_put(dmodel *dm) {
    pthread_mutex_lock(&g_models_lock);
    if (--dm->refs == 0) {
        dmodel **pp = &g_models;
        while (*pp != dm) pp = &(*pp)->next;
        *pp = dm->next;
        dmodel_free(dm);
    }
    pthread_mutex_unlock(&g_models_lock);
}

/* ---- context -------------------------------------------------------------------------- */

struct backend_ctx {
    dmodel *dm;
    const q3n_model *m;
    const q3n_hparams *hp;
    int n_ctx, n_batch, max_tiles, logit_rows;
    bool kv_f16, graphs;
    bool attn_per_warp;          /* RL_CUDA_ATTN=per-warp: the previous decode split kernel (A/B) */
    size_t mem_total, mem_free0, mem_free1, mem_free2; /* cudaMemGetInfo: before/after the weights, after the context */
    cudaStream_t st, st2;
    cudaEvent_t ev_fork, ev_join;
    uint8_t *dev;                /* one allocation: state + scratch */
    size_t dev_bytes;
    void *kc[Q3N_MAX_LAYERS], *vc[Q3N_MAX_LAYERS];
    float *conv[Q3N_MAX_LAYERS], *ssm[Q3N_MAX_LAYERS];
    /* scratch (device), rows = n_batch */
    float *x, *xn, *y, *big, *kvb, *ba, *ab, *o, *u, *rl, *wts, *probs, *h, *eo, *hs, *sh, *part, *logits;
    int32_t *tok, *ids, *pair_in, *pair_out;
    int *pos0, *n_tiles, *counts;
    cu_tile *tiles;
    /* pinned host */
    int32_t *h_tok;
    float *h_logits, *h_hidden, *h_tmp;
    size_t h_tmp_floats;
    cudaGraphExec_t gexec;
    bool gtried;
    /* VRAM expert tier (NULL: every expert resident); bk: the DeltaNet states saved before
     * each forward, restored if a slot fill fails half-way (nothing corrupted, retry works) */
    vram_tier *vt;
    uint8_t *bk;
    char vram_msg[256]; /* the plan in one line (--vram-mib given), or "" */
    /* speculative decoding (the end of this file): the DeltaNet states as one block (conv[] and
     * ssm[] point into it) so a verify row's snapshot slot is one copy of it; the slots; the
     * per-row slot ids of this forward; the MTP head's [embedding ; hidden] rows; one graph per
     * verify size */
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
    int small_moe;            /* RL_CUDA_SMALL_MOE */
    /* decode kernel fusion, a mask of FUSE_* (RL_CUDA_FUSE, fuse_mask): the combine ends with
     * the next norm, the mixer's output projection with the residual add + norm, the router GEMV
     * with the top-k (last-block tails; same bits as the separate launches);
     * ctr: the tails' counters (zeroed with the allocation; each tail puts its own back) */
    int fuse;
    unsigned *ctr;
    int graph_nodes, graph_kernels; /* of the decode graph, once captured */
};

static bool cuda_available(const char **why) {
    static char buf[160];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        snprintf(buf, sizeof buf, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
        (void)cudaGetLastError();
        if (why) *why = buf;
        return false;
    }
    return true;
}

static size_t al(size_t n) { return (n + 255) & ~(size_t)255; }

/* Carve the device allocation; base NULL only sizes it. */
static size_t carve(backend_ctx *c, uint8_t *base) {
    const q3n_hparams *hp = c->hp;
    size_t T = (size_t)c->n_batch, D = hp->n_embd, hd = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
    size_t C = hp->ssm_conv_dim, inner = (size_t)hp->ssm_hv * hp->ssm_dv, E = hp->n_expert, K = hp->n_expert_used;
    size_t ff = hp->n_ff_exp, ffs = hp->n_ff_shexp, V = hp->n_vocab, kvw = Hkv * hd;
    size_t kv_el = c->kv_f16 ? 2 : 4, off = 0;
#define TAKE(ptr, bytes)                                                                                     \
    do {                                                                                                     \
        if (base) ptr = (void *)(base + off);                                                                \
        off += al(bytes);                                                                                    \
    } while (0)
    for (int il = 0; il < hp->n_layer; il++) { /* the recurrent states first, as one block */
        if (hp->is_attn[il]) continue;
        TAKE(c->conv[il], sizeof(float) * q3n_conv_floats(hp));
        TAKE(c->ssm[il], sizeof(float) * q3n_ssm_floats(hp));
    }
    c->state_floats = off / sizeof(float);
    if (base) c->state = (float *)base;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) { /* KV caches, the MTP layer's too */
        if (!hp->is_attn[il]) continue;
        TAKE(c->kc[il], kv_el * kvw * (size_t)c->n_ctx);
        TAKE(c->vc[il], kv_el * kvw * (size_t)c->n_ctx);
    }
    size_t big = 2 * H * hd > C ? 2 * H * hd : C, kvb = 2 * kvw > inner ? 2 * kvw : inner;
    size_t ow = H * hd > inner ? H * hd : inner;
    cu_attn_dims ad = {.H = (int)H, .Hkv = (int)Hkv, .hd = (int)hd, .n_ctx = c->n_ctx};
    size_t tsplit = T < CU_ATTN_SPLIT_MAX_T ? T : CU_ATTN_SPLIT_MAX_T;
    TAKE(c->x, 4 * T * D);
    TAKE(c->xn, 4 * T * D);
    TAKE(c->y, 4 * T * D);
    TAKE(c->big, 4 * T * big);
    TAKE(c->kvb, 4 * T * kvb);
    TAKE(c->ba, 4 * T * 2 * hp->ssm_hv);
    TAKE(c->ab, 4 * T * 2 * hp->ssm_hv);
    TAKE(c->o, 4 * T * ow);
    TAKE(c->u, 4 * T * C);
    TAKE(c->rl, 4 * T * E);
    TAKE(c->wts, 4 * T * K);
    TAKE(c->probs, 4 * T * K);
    TAKE(c->h, 4 * T * K * ff);
    TAKE(c->eo, 4 * T * K * D);
    TAKE(c->hs, 4 * T * (ffs ? ffs : 1));
    TAKE(c->sh, 4 * T * D);
    TAKE(c->part, 4 * cu_attn_part_floats(&ad, (int)tsplit));
    TAKE(c->logits, 4 * (size_t)c->logit_rows * V);
    TAKE(c->tok, 4 * T);
    TAKE(c->ids, 4 * T * K);
    TAKE(c->pair_in, 4 * T * K);
    TAKE(c->pair_out, 4 * T * K);
    TAKE(c->pos0, 4);
    TAKE(c->n_tiles, 4);
    TAKE(c->counts, 4 * E);
    TAKE(c->tiles, sizeof(cu_tile) * (size_t)c->max_tiles);
    TAKE(c->row_slot, 4 * T);
    TAKE(c->mcat, 4 * T * 2 * D);
    TAKE(c->ctr, 4 * 16);
#undef TAKE
    return off;
}

static void ctx_geometry(backend_ctx *c, const q3n_hparams *hp, int n_ctx, int n_batch, backend_kv kv) {
    c->hp = hp;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->kv_f16 = kv == BACKEND_KV_F16; /* --kv (engine_ctx_params.kv); RL_CUDA_KV is gone */
    c->logit_rows = n_batch < 64 ? n_batch : 64;
    c->max_tiles = n_batch * hp->n_expert_used / CU_TT + hp->n_expert + 1;
    if (c->max_tiles < hp->n_expert_used) c->max_tiles = hp->n_expert_used;
    if (c->max_tiles < (n_batch < CU_SMALL_T ? n_batch : CU_SMALL_T) * hp->n_expert_used) /* one tile per pair */
        c->max_tiles = (n_batch < CU_SMALL_T ? n_batch : CU_SMALL_T) * hp->n_expert_used;
}

size_t backend_cuda_ctx_bytes(const q3n_hparams *hp, int n_ctx, int n_batch, backend_kv kv) {
    backend_ctx c = {0};
    ctx_geometry(&c, hp, n_ctx, n_batch, kv);
    return carve(&c, NULL);
}

/* ---- VRAM expert tier (vram_plan.h, vram_tier.h): set-up, state rollback, stats ---------- */

/* Bytes of every DeltaNet layer's conv + recurrent state (the rollback copy of a tier forward). */
static size_t state_bytes(const q3n_hparams *hp) {
    size_t n = 0;
    for (int il = 0; il < hp->n_layer; il++)
        if (!hp->is_attn[il]) n += al(sizeof(float) * q3n_conv_floats(hp)) + al(sizeof(float) * q3n_ssm_floats(hp));
    return n ? n : 256;
}

/* Plan the tier for --vram-mib spec (c's sizes set, nothing allocated yet); *tier: slots are
 * used (false: every expert fits, the plain resident path). */
static int vram_setup(backend_ctx *c, const backend_ctx_opts *o, bool *tier, pool *p) {
    const q3n_hparams *hp = c->hp;
    const char *spec = o->vram_spec;
    vram_geom g;
    size_t fr = 0, tot = 0;
    *tier = false;
    vram_pin_mode pin;
    vram_miss_mode miss;
    const char *pin_env = getenv("RL_VRAM_PIN"); /* the older switch: 1 = on, 0 = off */
    const char *pin_s = o->vram_pin ? o->vram_pin : pin_env && !strcmp(pin_env, "1") ? "on"
                                                  : pin_env && !strcmp(pin_env, "0") ? "off" : NULL;
    if (vram_pin_parse(pin_s, &pin) || vram_miss_parse(o->vram_miss, &miss)) return -1;
    if (vram_geom_of(c->m, &g) || CU_CHECK(cudaMemGetInfo(&fr, &tot))) return -1;
    const size_t TK = (size_t)c->n_batch * hp->n_expert_used;
    g.dev_free = fr;
    g.dev_total = tot;
    g.dense = dmodel_bytes(c->m, false);
    if (!g.dense) return -1;
    /* context + rollback copy + the tier's plan buffers (and slack for their alignment) */
    g.ctx = carve(c, NULL) + state_bytes(hp) + sizeof(cu_tile) * (TK + (size_t)hp->n_expert + 1) + 24 * TK +
            ((size_t)4 << 20);
    vram_plan plan;
    if (vram_plan_make(&g, spec, &plan)) return -1;
    const char *force = getenv("RL_VRAM_SLOTS"); /* tests: N slots per layer whatever the budget */
    if (force && atoi(force) > 0) {
        int n = atoi(force) < hp->n_expert_used ? hp->n_expert_used : atoi(force);
        n = n > hp->n_expert ? hp->n_expert : n;
        plan.full = false;
        for (int il = 0; il < hp->n_layer; il++) plan.slots[il] = n;
        plan.min_slots = plan.max_slots = n;
        snprintf(plan.reason, sizeof plan.reason, "%d of %d expert slots per layer (RL_VRAM_SLOTS=%s)", n,
                 hp->n_expert, force);
    }
    snprintf(c->vram_msg, sizeof c->vram_msg, "%s", plan.reason);
    if (plan.full) return 0;
    if (!(c->vt = vram_tier_new(c->m, &plan, c->n_batch, p, pin, miss))) return -1;
    *tier = true;
    return 0;
}

/* Copy the recurrent-state block (every DeltaNet layer's conv + ssm, carve's first block) to
 * (save) or from (restore) the rollback buffer, on the stream. */
static int state_backup(backend_ctx *c, bool save) {
    const size_t n = sizeof(float) * c->state_floats;
    if (!n) return 0;
    return CU_CHECK(cudaMemcpyAsync(save ? (void *)c->bk : (void *)c->state, save ? (const void *)c->state : (const void *)c->bk,
                                    n, cudaMemcpyDeviceToDevice, c->st));
}

static int cuda_set_host_src(backend_ctx *c, const q3n_expert_src *src) {
    if (!c->vt) return 1; /* every expert fit: nothing to feed */
    vram_tier_set_host_src(c->vt, src);
    return 0;
}

static void cuda_print_stats(backend_ctx *c, FILE *f) {
    if (c->vt) vram_tier_print(c->vt, f);
    else if (c->vram_msg[0]) fprintf(f, "vram tier: %s\n", c->vram_msg);
}

static void cuda_ctx_free(backend_ctx *c) {
    if (!c) return;
    if (c->st) cudaStreamSynchronize(c->st);
    if (c->gexec) cudaGraphExecDestroy(c->gexec);
    for (int t = 0; t <= CU_SMALL_T; t++)
        if (c->vexec[t]) cudaGraphExecDestroy(c->vexec[t]);
    for (int i = 0; i < 2; i++)
        if (c->mexec[i]) cudaGraphExecDestroy(c->mexec[i]);
    if (c->slots) cudaFree(c->slots);
    if (c->dev) cudaFree(c->dev);
    if (c->h_tok) cudaFreeHost(c->h_tok);
    if (c->h_logits) cudaFreeHost(c->h_logits);
    if (c->h_hidden) cudaFreeHost(c->h_hidden);
    if (c->h_tmp) cudaFreeHost(c->h_tmp);
    if (c->ev_fork) cudaEventDestroy(c->ev_fork);
    if (c->ev_join) cudaEventDestroy(c->ev_join);
    if (c->st2) cudaStreamDestroy(c->st2);
    vram_tier_free(c->vt);
    if (c->bk) cudaFree(c->bk);
    if (c->st) cudaStreamDestroy(c->st);
    if (c->dm) dmodel_put(c->dm);
    free(c);
}

static int vram_setup(backend_ctx *c, const backend_ctx_opts *o, bool *tier, pool *p);

static backend_ctx *cuda_ctx_new_opts(const q3n_model *m, pool *p, int n_ctx, int n_batch, const backend_ctx_opts *o) {
    const backend_kv kv = o ? o->kv : BACKEND_KV_F32;
    const q3n_hparams *hp = &m->hp;
    const char *why = NULL;
    if (!cuda_available(&why)) {
        rl_seterr("CUDA backend: %s", why);
        return NULL;
    }
    const char *dev = getenv("RL_CUDA_DEVICE");
    if (dev && CU_CHECK(cudaSetDevice(atoi(dev)))) return NULL;
    if (hp->n_expert > 1024 || hp->n_expert_used > 32 || n_batch * hp->n_expert_used > 65536) {
        rl_seterr("CUDA backend: %d experts / top-%d with batch %d is not supported", hp->n_expert,
                  hp->n_expert_used, n_batch);
        return NULL;
    }
    if (cu_tables_init()) return NULL;
    backend_ctx *c = rl_calloc(1, sizeof *c, "CUDA context");
    if (!c) return NULL;
    c->m = m;
    ctx_geometry(c, hp, n_ctx, n_batch, kv);
    c->graphs = env_on("RL_CUDA_GRAPHS", true);
    c->attn_per_warp = getenv("RL_CUDA_ATTN") && !strcmp(getenv("RL_CUDA_ATTN"), "per-warp");
    c->fuse = fuse_mask();
    c->small_moe = getenv("RL_CUDA_SMALL_MOE") ? atoi(getenv("RL_CUDA_SMALL_MOE")) : CU_SMALL_T;
    if (c->small_moe < 1 || c->small_moe > CU_SMALL_T) c->small_moe = CU_SMALL_T;
    size_t mfree = 0;
    (void)cudaMemGetInfo(&mfree, &c->mem_total); /* for engine_mem_info; a failure leaves zeros */
    (void)cudaGetLastError();
    c->mem_free0 = mfree;
    bool tier = false;
    if (o && o->vram_spec && vram_setup(c, o, &tier, p)) goto fail;
    if (!(c->dm = dmodel_get(m, !tier))) goto fail;
    (void)cudaMemGetInfo(&c->mem_free1, &c->mem_total);
    (void)cudaGetLastError();
    if (CU_CHECK(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) ||
        CU_CHECK(cudaStreamCreateWithFlags(&c->st2, cudaStreamNonBlocking)) ||
        CU_CHECK(cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming)) ||
        CU_CHECK(cudaEventCreateWithFlags(&c->ev_join, cudaEventDisableTiming)))
        goto fail;
    c->dev_bytes = carve(c, NULL);
    if (CU_CHECK(cudaMalloc((void **)&c->dev, c->dev_bytes))) {
        rl_seterr("cannot allocate %.2f GiB of GPU memory for the context (lower --ctx or --batch): %s",
                  c->dev_bytes / 1073741824.0, rl_lasterr());
        goto fail;
    }
    carve(c, c->dev);
    size_t V = hp->n_vocab, D = hp->n_embd;
    {   /* host staging of the debug hooks: 3 dumped buffers of the widest activation, the
         * route triples, or one layer's state */
        size_t w = D, K3 = 3 * (size_t)hp->n_expert_used;
        size_t cand[] = {(size_t)hp->ssm_conv_dim, (size_t)hp->ssm_hv * hp->ssm_dv, (size_t)hp->n_head * hp->head_dim, K3};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) w = cand[i] > w ? cand[i] : w;
        c->h_tmp_floats = 3 * (size_t)n_batch * w;
        if (c->h_tmp_floats < q3n_ssm_floats(hp) + q3n_conv_floats(hp)) c->h_tmp_floats = q3n_ssm_floats(hp) + q3n_conv_floats(hp);
    }
    if (CU_CHECK(cudaMallocHost((void **)&c->h_tok, sizeof(int32_t) * (2 * (size_t)n_batch + 1))) || /* + row slots */
        CU_CHECK(cudaMallocHost((void **)&c->h_logits, sizeof(float) * (size_t)c->logit_rows * V)) ||
        CU_CHECK(cudaMallocHost((void **)&c->h_hidden, sizeof(float) * (size_t)n_batch * D)) ||
        CU_CHECK(cudaMallocHost((void **)&c->h_tmp, sizeof(float) * c->h_tmp_floats)))
        goto fail;
    if (CU_CHECK(cudaMemsetAsync(c->dev, 0, c->dev_bytes, c->st)) || CU_CHECK(cudaStreamSynchronize(c->st))) goto fail;
    (void)cudaMemGetInfo(&c->mem_free2, &c->mem_total);
    (void)cudaGetLastError();
    if (env_on("RL_CUDA_VERBOSE", false))
        fprintf(stderr, "redlite cuda: context %d positions x %d rows: %.2f GiB (KV %s)\n", n_ctx, n_batch,
                c->dev_bytes / 1073741824.0, c->kv_f16 ? "f16" : "f32");
    if (tier) {
        const vram_plan *vp = vram_tier_plan(c->vt);
        if (CU_CHECK(cudaMalloc((void **)&c->bk, sizeof(float) * (c->state_floats ? c->state_floats : 1)))) goto fail;
        /* the host picks the slots per layer: no decode or verify graph (forward_run); the MTP
         * head's graph stays (its layer's experts are resident) */
        if (env_on("RL_CUDA_VERBOSE", false)) fprintf(stderr, "redlite cuda: vram tier: %s\n", vp->reason);
    }
    return c;
fail:
    cuda_ctx_free(c);
    return NULL;
}

static backend_ctx *cuda_ctx_new(const q3n_model *m, pool *p, int n_ctx, int n_batch, backend_kv kv) {
    return cuda_ctx_new_opts(m, p, n_ctx, n_batch, &(backend_ctx_opts){.kv = kv});
}

static void cuda_reset(backend_ctx *c) {
    const q3n_hparams *hp = c->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->is_attn[il]) continue;
        CU_CHECK(cudaMemsetAsync(c->conv[il], 0, sizeof(float) * q3n_conv_floats(hp), c->st));
        CU_CHECK(cudaMemsetAsync(c->ssm[il], 0, sizeof(float) * q3n_ssm_floats(hp), c->st));
    }
    CU_CHECK(cudaStreamSynchronize(c->st));
}

static int cuda_state_get(backend_ctx *c, int il, float *conv, float *ssm) {
    if (il < 0 || il >= c->hp->n_layer || !c->conv[il]) return rl_seterr("layer %d has no recurrent state", il);
    TRY(CU_CHECK(cudaMemcpyAsync(conv, c->conv[il], sizeof(float) * q3n_conv_floats(c->hp), cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(ssm, c->ssm[il], sizeof(float) * q3n_ssm_floats(c->hp), cudaMemcpyDeviceToHost, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static int cuda_state_set(backend_ctx *c, int il, const float *conv, const float *ssm) {
    if (il < 0 || il >= c->hp->n_layer || !c->conv[il]) return rl_seterr("layer %d has no recurrent state", il);
    TRY(CU_CHECK(cudaMemcpyAsync(c->conv[il], conv, sizeof(float) * q3n_conv_floats(c->hp), cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(c->ssm[il], ssm, sizeof(float) * q3n_ssm_floats(c->hp), cudaMemcpyHostToDevice, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static size_t cuda_kv_row_bytes(backend_ctx *c) {
    return (c->kv_f16 ? 2 : 4) * (size_t)c->hp->n_head_kv * (size_t)c->hp->head_dim;
}

static const char *cuda_kv_format(backend_ctx *c) { return c->kv_f16 ? "f16" : "f32"; }

static void cuda_mem_info(backend_ctx *c, engine_mem *out) {
    const q3n_hparams *hp = c->hp;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) { /* the MTP layer's KV cache too */
        if (hp->is_attn[il]) out->kv_bytes += 2 * cuda_kv_row_bytes(c) * (size_t)c->n_ctx;
        else if (il < hp->n_layer) out->state_bytes += sizeof(float) * (q3n_conv_floats(hp) + q3n_ssm_floats(hp));
    }
    out->scratch_bytes = c->dev_bytes - out->kv_bytes - out->state_bytes; /* carve's alignment padding included */
    out->device = true;
    out->dev_total = c->mem_total;
    /* a model already uploaded by another context: mem_free0 == mem_free1 says nothing of the weights */
    out->dev_free_before_weights = c->mem_free0 > c->mem_free1 ? c->mem_free0 : 0;
    out->dev_free_after_weights = c->mem_free1;
    out->dev_free_after_ctx = c->mem_free2;
    out->decode_graph_nodes = c->graph_nodes;
    out->decode_graph_kernels = c->graph_kernels;
}

static int cuda_kv_get(backend_ctx *c, int il, int n, void *k, void *v) {
    if (il < 0 || il >= c->hp->n_layer || !c->hp->is_attn[il]) return rl_seterr("layer %d has no KV cache", il);
    if (n < 0 || n > c->n_ctx) return rl_seterr("KV rows %d: beyond the context (%d)", n, c->n_ctx);
    size_t b = cuda_kv_row_bytes(c) * (size_t)n;
    TRY(CU_CHECK(cudaMemcpyAsync(k, c->kc[il], b, cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(v, c->vc[il], b, cudaMemcpyDeviceToHost, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static int cuda_kv_set(backend_ctx *c, int il, int n, const void *k, const void *v) {
    if (il < 0 || il >= c->hp->n_layer || !c->hp->is_attn[il]) return rl_seterr("layer %d has no KV cache", il);
    if (n < 0 || n > c->n_ctx) return rl_seterr("KV rows %d: beyond the context (%d)", n, c->n_ctx);
    size_t b = cuda_kv_row_bytes(c) * (size_t)n;
    TRY(CU_CHECK(cudaMemcpyAsync(c->kc[il], k, b, cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(c->vc[il], v, b, cudaMemcpyHostToDevice, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

/* ---- forward ----------------------------------------------------------------------------- */

/* Debug dump of k device buffers of T rows (row-major, widths n[i]) in the CPU's order: row by
 * row, the k names within a row. Synchronous; only when a dump hook is set. */
static int dump_rows(backend_ctx *c, const backend_hooks *hk, int il, int row0, int T, int k, const q3n_act *acts,
                     float *const *ptrs, const int *n) {
    if (!hk || !hk->dump) return 0;
    size_t off[4], tot = 0;
    for (int i = 0; i < k; i++) {
        off[i] = tot;
        tot += (size_t)T * n[i];
    }
    RL_ASSERT(k <= 4 && tot <= c->h_tmp_floats);
    for (int i = 0; i < k; i++)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_tmp + off[i], ptrs[i], sizeof(float) * (size_t)T * n[i], cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < k; i++)
            hk->dump(hk->ud, q3n_act_name(acts[i]), il, row0 + t, c->h_tmp + off[i] + (size_t)t * n[i], n[i]);
    return 0;
}

static int dump1(backend_ctx *c, const backend_hooks *hk, q3n_act act, int il, int row0, int T, float *p, int n) {
    return dump_rows(c, hk, il, row0, T, 1, &act, &p, &n);
}

/* y_i = W_i x for up to 3 matrices of one input; runs of equal type share a launch. */
static int mm_run(backend_ctx *c, const dmat *const *W, float *const *Y, const int *ldy, const int *epi, int n,
                  const float *x, int ldx, int T, const cu_conv *conv, cudaStream_t s) {
    for (int i = 0; i < n;) {
        cu_seg seg[3];
        int k = 0;
        do {
            seg[k] = (cu_seg){.w = W[i]->d, .row_bytes = W[i]->row_bytes, .n_out = (int)W[i]->n_out, .y = Y[i],
                              .ldy = ldy[i], .epi = epi ? epi[i] : CU_EPI_STORE};
            k++;
            i++;
        } while (i < n && W[i]->type == W[i - 1]->type && W[i]->n_in == W[i - 1]->n_in);
        TRY(cu_matmul(W[i - 1]->type, W[i - 1]->n_in, seg, k, x, ldx, T, NULL, false, conv, s));
    }
    return 0;
}

/* The mixer's output projection y = W in; with norm_w (decode, c->fuse) its last block also does
 * x += y, xn = rmsnorm(x) * norm_w (cu_tail: the bits of the separate cu_add_rmsnorm). */
static int out_proj(backend_ctx *c, const dmat *W, const float *in, int T, const float *norm_w) {
    const int D = c->hp->n_embd;
    if (norm_w) {
        cu_seg s = {.w = W->d, .row_bytes = W->row_bytes, .n_out = (int)W->n_out, .y = c->y, .ldy = D};
        cu_tail t = {.kind = CU_TAIL_ADD_NORM, .counter = c->ctr, .x = c->x, .out = c->xn, .w = norm_w,
                     .eps = c->hp->rms_eps};
        return cu_matmul_tail(W->type, W->n_in, &s, 1, in, &t, c->st);
    }
    const dmat *Wo[1] = {W};
    float *Yo[1] = {c->y};
    return mm_run(c, Wo, Yo, &D, NULL, 1, in, W->n_in, T, NULL, c->st);
}

static int mixer_deltanet(backend_ctx *c, int il, int T, const backend_hooks *hk, const float *norm_w) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int C = hp->ssm_conv_dim, inner = hp->ssm_hv * hp->ssm_dv, D = hp->n_embd, hv2 = 2 * hp->ssm_hv;
    const cu_dn_dims d = {.C = C, .kw = hp->ssm_kw, .dk = hp->ssm_dk, .dv = hp->ssm_dv, .hk = hp->ssm_hk,
                          .hv = hp->ssm_hv, .eps = hp->rms_eps, .conv_w = L->conv_w, .ssm_a = L->ssm_a,
                          .dt_bias = L->dt_bias, .ssm_norm = L->ssm_norm};
    const bool per_row = hk && hk->row_state, snap = c->snap_rows && !per_row, fused = T == 1 && !per_row && !snap;
    const cu_conv cv = {L->conv_w, c->conv[il], hp->ssm_kw, C};
    const dmat *W[3] = {&L->wqkv, &L->wgate, &L->wba};
    float *Y[3] = {fused ? c->u : c->big, c->kvb, c->ba};
    const int ldy[3] = {C, inner, hv2}, epi[3] = {fused ? CU_EPI_CONV : CU_EPI_STORE, CU_EPI_STORE, CU_EPI_STORE};
    TRY(mm_run(c, W, Y, ldy, epi, 3, c->xn, D, T, &cv, c->st));
    if (fused) { /* conv done in the qkv epilogue */
        TRY(dump1(c, hk, Q3N_ACT_DN_CONV, il, 0, 1, c->u, C));
        TRY(cu_dn_step(&d, c->u, c->ba, c->kvb, c->ssm[il], c->o, c->st));
    } else if (per_row) { /* row by row, the state copied out after each (per-row snapshots) */
        size_t nc = q3n_conv_floats(hp), ns = q3n_ssm_floats(hp);
        for (int t = 0; t < T; t++) {
            float *u = c->u + (size_t)t * C, *ab = c->ab + (size_t)t * hv2;
            TRY(cu_dn_conv(&d, c->big + (size_t)t * C, C, u, c->conv[il], 1, c->st));
            TRY(dump1(c, hk, Q3N_ACT_DN_CONV, il, t, 1, u, C));
            TRY(cu_dn_prep(&d, u, c->ba + (size_t)t * hv2, ab, 1, c->st));
            TRY(cu_dn_scan(&d, u, ab, c->ssm[il], c->o + (size_t)t * inner, 1, c->st));
            TRY(CU_CHECK(cudaMemcpyAsync(c->h_tmp, c->conv[il], sizeof(float) * nc, cudaMemcpyDeviceToHost, c->st)));
            TRY(CU_CHECK(cudaMemcpyAsync(c->h_tmp + nc, c->ssm[il], sizeof(float) * ns, cudaMemcpyDeviceToHost, c->st)));
            TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
            hk->row_state(hk->ud, il, t, c->h_tmp, c->h_tmp + nc);
        }
        TRY(cu_dn_gnorm(&d, c->o, c->kvb, inner, T, c->st));
    } else { /* snap: each row's state also into its verify snapshot slot (c->row_slot) */
        float *sconv = snap ? c->slots + (c->conv[il] - c->state) : NULL, *sssm = snap ? c->slots + (c->ssm[il] - c->state) : NULL;
        const int32_t *rs = snap ? c->row_slot : NULL;
        TRY(cu_dn_conv_snap(&d, c->big, C, c->u, c->conv[il], T, sconv, c->state_floats, rs, c->st));
        TRY(dump1(c, hk, Q3N_ACT_DN_CONV, il, 0, T, c->u, C));
        TRY(cu_dn_prep(&d, c->u, c->ba, c->ab, T, c->st));
        TRY(cu_dn_scan_snap(&d, c->u, c->ab, c->ssm[il], c->o, T, sssm, c->state_floats, rs, c->st));
        TRY(cu_dn_gnorm(&d, c->o, c->kvb, inner, T, c->st));
    }
    TRY(dump1(c, hk, Q3N_ACT_DN_GATED, il, 0, T, c->o, inner));
    return out_proj(c, &L->wout, c->o, T, norm_w);
}

static int mixer_attention(backend_ctx *c, int il, int T, const backend_hooks *hk, const float *norm_w) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int H = hp->n_head, hd = hp->head_dim, kvw = hp->n_head_kv * hd, D = hp->n_embd;
    float *k = c->kvb, *v = c->kvb + (size_t)T * kvw;
    const dmat *W[3] = {&L->wq, &L->wk, &L->wv};
    float *Y[3] = {c->big, k, v};
    const int ldy[3] = {2 * H * hd, kvw, kvw};
    TRY(mm_run(c, W, Y, ldy, NULL, 3, c->xn, D, T, NULL, c->st));
    const cu_attn_dims a = {.H = H, .Hkv = hp->n_head_kv, .hd = hd, .n_rot = hp->n_rot, .n_ctx = c->n_ctx,
                            .eps = hp->rms_eps, .scale = 1.0f / sqrtf((float)hd), .inv_freq = c->dm->inv_freq,
                            .kv_f16 = c->kv_f16, .split_per_warp = c->attn_per_warp, .rope_delta = il >= hp->n_layer};
    TRY(cu_qk_norm_rope_store(&a, c->big, k, v, L->q_norm, L->k_norm, c->pos0, T, c->kc[il], c->vc[il], c->st));
    TRY(cu_attention(&a, c->big, c->kc[il], c->vc[il], c->pos0, T, T <= CU_ATTN_SPLIT_MAX_T, c->part, c->o, c->st));
    TRY(dump1(c, hk, Q3N_ACT_ATTN_GATED, il, 0, T, c->o, H * hd));
    return out_proj(c, &L->wo, c->o, T, norm_w);
}

/* The routed experts of layer il from the VRAM slots (router ids in c->ids): the same grouped
 * launches as full residency, per batch of resident experts, with slot s as "expert" s. First
 * the pre-gated prediction: layer il+1's router on this layer's input (its copies overlap). */
static int experts_vram(backend_ctx *c, int il, int T, bool direct) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int D = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, ff = hp->n_ff_exp;
    int32_t *pred = il + 1 < hp->n_layer ? vram_tier_pred_ids(c->vt) : NULL;
    if (pred) {
        const dmat *Wr[1] = {&c->dm->L[il + 1].router};
        float *Yr[1] = {c->rl};
        TRY(mm_run(c, Wr, Yr, &E, NULL, 1, c->xn, D, T, NULL, c->st));
        TRY(cu_router(c->rl, E, K, T, pred, vram_tier_pred_w(c->vt), NULL, NULL, NULL, NULL, NULL, c->st));
    }
    int nb = vram_tier_layer(c->vt, il, c->ids, pred, c->xn, T, direct ? 1 : CU_TT, c->st); /* tiles as full residency's */
    if (nb < 0) return -1;
    for (int b = 0; b < nb; b++) {
        vram_batch vb;
        TRY(vram_tier_batch(c->vt, b, c->st, &vb));
        cu_group gg = vb.g, gd = vb.g;
        gg.pair_out = NULL; /* gate/up: input row pair_in[p] -> h row p; down: h row p -> eo row pair_out[p] */
        gd.pair_in = NULL;
        cu_seg gu = {.w = vb.gate, .w2 = vb.up, .row_bytes = L->gate_exps.row_bytes, .expert_stride = vb.stride,
                     .n_out = ff, .y = c->h, .ldy = ff};
        cu_seg dn = {.w = vb.down, .row_bytes = L->down_exps.row_bytes, .expert_stride = vb.stride, .n_out = D,
                     .y = c->eo, .ldy = D};
        if (cu_matmul(L->gate_exps.type, D, &gu, 1, c->xn, D, T, &gg, true, NULL, c->st) ||
            cu_matmul(L->down_exps.type, ff, &dn, 1, c->h, ff, T, &gd, false, NULL, c->st)) {
            vram_tier_abort(c->vt);
            return -1;
        }
        TRY(vram_tier_batch_end(c->vt, c->st));
    }
    return vram_tier_cpu(c->vt, c->eo, c->st); /* misses left to the CPU (--vram-miss cpu|auto), if any */
}

static int moe(backend_ctx *c, int il, int T, const backend_hooks *hk) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int D = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, ff = hp->n_ff_exp, ffs = hp->n_ff_shexp;
    /* direct: one tile per (row, expert) pair, planned by the router (decode and small batches) */
    const bool has_sh = L->gate_sh.d != NULL, direct = T == 1 || T <= c->small_moe;
    const bool tier = c->vt && il < hp->n_layer; /* VRAM slots (the MTP layer's experts stay resident) */
    if (has_sh) { /* the shared expert runs beside the router and the routed experts */
        if (L->gate_sh.type != L->up_sh.type) return rl_seterr("CUDA backend: shared gate/up types differ (layer %d)", il);
        TRY(CU_CHECK(cudaEventRecord(c->ev_fork, c->st)));
        TRY(CU_CHECK(cudaStreamWaitEvent(c->st2, c->ev_fork, 0)));
        cu_seg gu = {.w = L->gate_sh.d, .w2 = L->up_sh.d, .row_bytes = L->gate_sh.row_bytes, .n_out = ffs, .y = c->hs, .ldy = ffs};
        TRY(cu_matmul(L->gate_sh.type, D, &gu, 1, c->xn, D, T, NULL, true, NULL, c->st2));
        cu_seg dn = {.w = L->down_sh.d, .row_bytes = L->down_sh.row_bytes, .n_out = D, .y = c->sh, .ldy = D};
        TRY(cu_matmul(L->down_sh.type, ffs, &dn, 1, c->hs, ffs, T, NULL, false, NULL, c->st2));
        TRY(CU_CHECK(cudaEventRecord(c->ev_join, c->st2)));
    }
    if (T == 1 && (c->fuse & FUSE_ROUTER)) { /* the router GEMV's last block does the top-k (cu_tail, same bits) */
        cu_seg s = {.w = L->router.d, .row_bytes = L->router.row_bytes, .n_out = E, .y = c->rl, .ldy = E};
        cu_tail t = {.kind = CU_TAIL_ROUTER, .counter = c->ctr + 1, .K = K, .ids = c->ids, .wts = c->wts,
                     .probs = c->probs, .tiles = direct && !tier ? c->tiles : NULL, .n_tiles = c->n_tiles,
                     .pair_in = c->pair_in, .pair_out = c->pair_out};
        TRY(cu_matmul_tail(L->router.type, D, &s, 1, c->xn, &t, c->st));
    } else {
        const dmat *Wr[1] = {&L->router};
        float *Yr[1] = {c->rl};
        TRY(mm_run(c, Wr, Yr, &E, NULL, 1, c->xn, D, T, NULL, c->st));
        TRY(cu_router(c->rl, E, K, T, c->ids, c->wts, c->probs, direct && !tier ? c->tiles : NULL, c->n_tiles,
                      c->pair_in, c->pair_out, c->st));
    }
    if (!direct && !tier)
        TRY(cu_moe_plan(c->ids, T, K, E, CU_TT, c->tiles, c->n_tiles, c->pair_in, c->pair_out, c->counts, c->st));
    if (hk && hk->route) {
        int32_t *hid = (int32_t *)c->h_tmp;
        float *hw = c->h_tmp + (size_t)T * K, *hpr = hw + (size_t)T * K;
        TRY(CU_CHECK(cudaMemcpyAsync(hid, c->ids, sizeof(int32_t) * (size_t)T * K, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaMemcpyAsync(hw, c->wts, sizeof(float) * (size_t)T * K, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaMemcpyAsync(hpr, c->probs, sizeof(float) * (size_t)T * K, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        for (int t = 0; t < T; t++) hk->route(hk->ud, il, t, hid + (size_t)t * K, hw + (size_t)t * K, hpr + (size_t)t * K, K);
    }
    /* routed experts, grouped by expert: gate/up (silu(g) * u) then down */
    if (!L->fused_gate_up && L->gate_exps.type != L->up_exps.type)
        return rl_seterr("CUDA backend: expert gate/up types differ (layer %d)", il);
    if (tier) {
        TRY(experts_vram(c, il, T, direct));
        goto combine;
    }
    const size_t rb = L->gate_exps.row_bytes;
    cu_group g = {.tiles = c->tiles, .n_tiles = c->n_tiles, .max_tiles = direct ? T * K : c->max_tiles,
                  .tt = direct ? 1 : CU_TT, .pair_in = c->pair_in, .pair_out = NULL};
    cu_seg gu = {.w = L->gate_exps.d, .w2 = L->fused_gate_up ? L->gate_exps.d + (size_t)ff * rb : L->up_exps.d,
                 .row_bytes = rb, .expert_stride = (size_t)ff * rb * (L->fused_gate_up ? 2 : 1), .n_out = ff,
                 .y = c->h, .ldy = ff};
    TRY(cu_matmul(L->gate_exps.type, D, &gu, 1, c->xn, D, T, &g, true, NULL, c->st));
    g.pair_in = NULL;
    g.pair_out = c->pair_out;
    cu_seg dn = {.w = L->down_exps.d, .row_bytes = L->down_exps.row_bytes,
                 .expert_stride = (size_t)D * L->down_exps.row_bytes, .n_out = D, .y = c->eo, .ldy = D};
    TRY(cu_matmul(L->down_exps.type, ff, &dn, 1, c->h, ff, T, &g, false, NULL, c->st));
combine:
    if (has_sh) TRY(CU_CHECK(cudaStreamWaitEvent(c->st, c->ev_join, 0)));
    const float *w_next = il + 1 < hp->n_layer ? c->dm->L[il + 1].attn_norm
                          : il >= hp->n_layer  ? L->shared_head_norm /* the MTP head's output norm */
                                               : c->dm->output_norm;
    if (T == 1 && (c->fuse & FUSE_COMBINE)) /* the next norm in the combine's last block (same bits) */
        return cu_moe_combine_norm1(c->eo, c->wts, K, has_sh ? c->sh : NULL, L->sh_gate, c->xn, c->y, c->x, w_next,
                                    c->xn, D, hp->rms_eps, c->ctr + 2, c->st);
    return cu_moe_combine(c->eo, c->wts, K, has_sh ? c->sh : NULL, L->sh_gate, c->xn, c->y, c->x, w_next, c->xn, D, T,
                          hp->rms_eps, c->st);
}

/* Logits of rows [t0, t0+n) (n <= logit_rows) into c->logits. */
static int head(backend_ctx *c, int t0, int n) {
    const dmat *o = &c->dm->output;
    cu_seg s = {.w = o->d, .row_bytes = o->row_bytes, .n_out = (int)o->n_out, .y = c->logits, .ldy = (int)o->n_out};
    return cu_matmul(o->type, c->hp->n_embd, &s, 1, c->xn + (size_t)t0 * c->hp->n_embd, c->hp->n_embd, n, NULL, false,
                     NULL, c->st);
}

/* Every launch of a forward of T rows (tokens and position already in c->tok / c->pos0).
 * last_logits: also the head of the last row. */
static int enqueue(backend_ctx *c, int T, const backend_hooks *hk, bool last_logits) {
    const q3n_hparams *hp = c->hp;
    const dmodel *dm = c->dm;
    const int D = hp->n_embd;
    TRY(cu_get_rows(dm->tok_embd.type, dm->tok_embd.d, dm->tok_embd.row_bytes, D, c->tok, T, c->x, D, c->st));
    TRY(dump1(c, hk, Q3N_ACT_INP_EMBD, -1, 0, T, c->x, D));
    TRY(cu_add_rmsnorm(c->x, NULL, dm->L[0].attn_norm, c->xn, D, T, hp->rms_eps, c->st));
    for (int il = 0; il < hp->n_layer; il++) {
        TRY(dump1(c, hk, Q3N_ACT_ATTN_NORM, il, 0, T, c->xn, D));
        /* decode: the residual add + norm in the output projection's tail (same bits) */
        const float *fz = (c->fuse & FUSE_NORM) && T == 1 ? dm->L[il].post_norm : NULL;
        TRY(hp->is_attn[il] ? mixer_attention(c, il, T, hk, fz) : mixer_deltanet(c, il, T, hk, fz));
        if (!fz) TRY(cu_add_rmsnorm(c->x, c->y, dm->L[il].post_norm, c->xn, D, T, hp->rms_eps, c->st));
        static const q3n_act n1[3] = {Q3N_ACT_ATTN_OUT, Q3N_ACT_FFN_INP, Q3N_ACT_FFN_NORM};
        float *const p1[3] = {c->y, c->x, c->xn};
        const int w1[3] = {D, D, D};
        TRY(dump_rows(c, hk, il, 0, T, 3, n1, p1, w1));
        TRY(moe(c, il, T, hk));
        static const q3n_act n2[2] = {Q3N_ACT_FFN_OUT, Q3N_ACT_L_OUT};
        float *const p2[2] = {c->y, c->x};
        TRY(dump_rows(c, hk, il, 0, T, 2, n2, p2, w1));
    }
    TRY(dump1(c, hk, Q3N_ACT_RESULT_NORM, -1, 0, T, c->xn, D));
    return last_logits ? head(c, T - 1, 1) : 0;
}

/* Nodes of a captured graph, and how many of them are kernels (bench --json: decode_graph). */
static void graph_count(cudaGraph_t g, int *nodes, int *kernels) {
    size_t n = 0;
    *nodes = *kernels = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess || !n) {
        (void)cudaGetLastError();
        return;
    }
    cudaGraphNode_t *v = malloc(sizeof *v * n);
    if (v && cudaGraphGetNodes(g, v, &n) == cudaSuccess) {
        *nodes = (int)n;
        for (size_t i = 0; i < n; i++) {
            enum cudaGraphNodeType t;
            if (cudaGraphNodeGetType(v[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel) ++*kernels;
        }
    }
    (void)cudaGetLastError();
    free(v);
}

static int capture(backend_ctx *c) {
    cudaGraph_t g = NULL;
    c->gtried = true;
    TRY(CU_CHECK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal)));
    int rc = enqueue(c, 1, NULL, true);
    cudaError_t e = cudaStreamEndCapture(c->st, &g);
    if (rc || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        return rc ? -1 : cu_fail(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    graph_count(g, &c->graph_nodes, &c->graph_kernels);
    e = cudaGraphInstantiate(&c->gexec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        c->gexec = NULL;
        return cu_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    return 0;
}

/* The lm head over rows 0..T-1 of xn in chunks of logit_rows, each chunk's logits copied to the
 * host rows of logits (T x n_vocab). */
static int head_rows_to_host(backend_ctx *c, int T, float *logits) {
    const size_t V = (size_t)c->hp->n_vocab;
    for (int t0 = 0; t0 < T; t0 += c->logit_rows) {
        const int n = T - t0 < c->logit_rows ? T - t0 : c->logit_rows;
        TRY(head(c, t0, n));
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * (size_t)n * V, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        memcpy(logits + (size_t)t0 * V, c->h_logits, sizeof(float) * (size_t)n * V);
    }
    return 0;
}

static int snap_rows_upload(backend_ctx *c, const int *rows_to_slots, int T);
static int capture_verify(backend_ctx *c, int T);

static int forward_run(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                       float *hidden, const backend_hooks *hooks) {
    const q3n_hparams *hp = c->hp;
    const int V = hp->n_vocab, D = hp->n_embd;
    if (T < 1 || T > c->n_batch) return rl_seterr("forward of %d rows: must be 1..%d (n_batch)", T, c->n_batch);
    if (pos < 0 || pos + T > c->n_ctx)
        return rl_seterr("context is full: %d + %d tokens exceed the context size %d (raise --ctx)", pos, T, c->n_ctx);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return rl_seterr("token id %d is outside the vocabulary (0..%d)", tokens[t], V - 1);
    const bool hooked = hooks && (hooks->dump || hooks->route || hooks->row_state);
    const int *rows_to_slots = hooks && !hooks->row_state ? hooks->row_slots : NULL;
    /* small all-logits batches (verifies) replay a graph per row count, the snapshot slots of
     * its rows read from device memory (-1: none) */
    const bool vgraph = !hooked && c->graphs && !c->vt && T > 1 && T <= CU_SMALL_T && logits && all_logits;
    memcpy(c->h_tok, tokens, sizeof(int32_t) * (size_t)T);
    c->h_tok[c->n_batch] = pos;
    TRY(CU_CHECK(cudaMemcpyAsync(c->tok, c->h_tok, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(c->pos0, c->h_tok + c->n_batch, sizeof(int), cudaMemcpyHostToDevice, c->st)));
    c->snap_rows = false;
    if (rows_to_slots || vgraph) TRY(snap_rows_upload(c, rows_to_slots, T));
    const bool one_row_logits = logits && (!all_logits || T == 1);
    bool all_done = false; /* every row's logits already in c->logits */
    if (T == 1 && !hooked && !c->snap_rows && c->graphs && !c->vt) {
        if (!c->gexec && !c->gtried) TRY(capture(c));
        if (c->gexec) TRY(CU_CHECK(cudaGraphLaunch(c->gexec, c->st)));
        else TRY(enqueue(c, 1, NULL, true));
    } else if (vgraph) {
        if (!c->vexec[T] && !c->vtried[T]) TRY(capture_verify(c, T));
        if (c->vexec[T]) TRY(CU_CHECK(cudaGraphLaunch(c->vexec[T], c->st)));
        else TRY(enqueue(c, T, NULL, false) || head(c, 0, T));
        all_done = true;
    } else {
        TRY(enqueue(c, T, hooks, one_row_logits));
    }
    c->snap_rows = false;
    if (one_row_logits)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * V, cudaMemcpyDeviceToHost, c->st)));
    if (hidden)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_hidden, c->xn, sizeof(float) * (size_t)T * D, cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
    if (one_row_logits) memcpy(logits, c->h_logits, sizeof(float) * V);
    if (hidden) memcpy(hidden, c->h_hidden, sizeof(float) * (size_t)T * D);
    if (all_done) {
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * (size_t)T * V, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        memcpy(logits, c->h_logits, sizeof(float) * (size_t)T * V);
    } else if (logits && !one_row_logits) { /* every row's logits, in chunks of logit_rows */
        TRY(head_rows_to_host(c, T, logits));
    }
    return 0;
}

/* With a VRAM tier a forward can fail half-way (a slot fill): the DeltaNet states saved before
 * it are put back, so the context is as it was (KV rows past its position are ignored). */
static int cuda_forward(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                        float *hidden, const backend_hooks *hooks) {
    if (!c->vt) return forward_run(c, tokens, T, pos, logits, all_logits, hidden, hooks);
    TRY(state_backup(c, true));
    if (forward_run(c, tokens, T, pos, logits, all_logits, hidden, hooks) == 0) return 0;
    char err[512];
    snprintf(err, sizeof err, "%s", rl_lasterr());
    cudaStreamSynchronize(c->st); /* let what was queued finish before the states go back */
    (void)cudaGetLastError();
    if (state_backup(c, false) || CU_CHECK(cudaStreamSynchronize(c->st)))
        return rl_seterr("%s; restoring the recurrent state failed too: %s (reset the context)", err, rl_lasterr());
    return rl_seterr("%s", err);
}

/* ---- speculative decoding: verify snapshots on the device, verify graphs, the MTP head ---- */

/* Drop the verify graphs (they hold the slots' address). */
static void verify_graphs_drop(backend_ctx *c) {
    for (int t = 0; t <= CU_SMALL_T; t++) {
        if (c->vexec[t]) cudaGraphExecDestroy(c->vexec[t]);
        c->vexec[t] = NULL;
        c->vtried[t] = false;
    }
}

/* At least n snapshot slots (each one copy of the state block), keeping the slots' contents. */
static int slots_reserve(backend_ctx *c, int n) {
    if (n <= c->n_slots) return 0;
    const size_t per = sizeof(float) * c->state_floats;
    float *p = NULL;
    if (CU_CHECK(cudaMalloc((void **)&p, per * (size_t)n)))
        return rl_seterr("cannot allocate %d verify snapshot slots of %.1f MiB on the GPU: %s", n, per / 1048576.0,
                         rl_lasterr());
    if (c->n_slots && (CU_CHECK(cudaMemcpyAsync(p, c->slots, per * (size_t)c->n_slots, cudaMemcpyDeviceToDevice, c->st)) ||
                       CU_CHECK(cudaStreamSynchronize(c->st)))) {
        cudaFree(p);
        return -1;
    }
    if (c->slots) cudaFree(c->slots);
    c->slots = p;
    c->n_slots = n;
    verify_graphs_drop(c);
    return 0;
}

/* This forward writes row t's state into slot rows_to_slots[t] (NULL: no row does). */
static int snap_rows_upload(backend_ctx *c, const int *rows_to_slots, int T) {
    int32_t *h = c->h_tok + c->n_batch + 1;
    int need = 1; /* one slot even when no row needs one: the graphs take the slots' address */
    for (int t = 0; t < T; t++) {
        h[t] = rows_to_slots ? rows_to_slots[t] : -1;
        if (h[t] >= c->n_batch) return rl_seterr("verify snapshot slot %d: at most %d (n_batch)", h[t], c->n_batch);
        if (h[t] + 1 > need) need = h[t] + 1;
    }
    TRY(slots_reserve(c, need));
    TRY(CU_CHECK(cudaMemcpyAsync(c->row_slot, h, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice, c->st)));
    c->snap_rows = true;
    return 0;
}

/* Capture what f(c, T, arg) enqueues into *out (inputs are read from device memory). */
static int graph_capture(backend_ctx *c, cudaGraphExec_t *out, int (*f)(backend_ctx *, int, int), int T, int arg) {
    cudaGraph_t g = NULL;
    TRY(CU_CHECK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal)));
    int rc = f(c, T, arg);
    cudaError_t e = cudaStreamEndCapture(c->st, &g);
    if (rc || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        return rc ? -1 : cu_fail(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    e = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        *out = NULL;
        return cu_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    return 0;
}

/* The forward of T rows with every row's logits (snapshot slots on). */
static int verify_enqueue(backend_ctx *c, int T, int unused) {
    (void)unused;
    return enqueue(c, T, NULL, false) || head(c, 0, T);
}

static int capture_verify(backend_ctx *c, int T) {
    c->vtried[T] = true;
    return graph_capture(c, &c->vexec[T], verify_enqueue, T, 0);
}

static int cuda_slot_restore(backend_ctx *c, int slot) {
    if (slot < 0 || slot >= c->n_slots) return rl_seterr("verify snapshot slot %d does not exist (%d)", slot, c->n_slots);
    const size_t per = c->state_floats;
    return CU_CHECK(cudaMemcpyAsync(c->state, c->slots + (size_t)slot * per, sizeof(float) * per,
                                    cudaMemcpyDeviceToDevice, c->st));
}

static int cuda_slot_get(backend_ctx *c, int slot, int il, float *conv, float *ssm) {
    if (slot < 0 || slot >= c->n_slots) return rl_seterr("verify snapshot slot %d does not exist (%d)", slot, c->n_slots);
    if (il < 0 || il >= c->hp->n_layer || !c->conv[il]) return rl_seterr("layer %d has no recurrent state", il);
    const float *b = c->slots + (size_t)slot * c->state_floats;
    TRY(CU_CHECK(cudaMemcpyAsync(conv, b + (c->conv[il] - c->state), sizeof(float) * q3n_conv_floats(c->hp),
                                 cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(ssm, b + (c->ssm[il] - c->state), sizeof(float) * q3n_ssm_floats(c->hp),
                                 cudaMemcpyDeviceToHost, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static int mtp_enqueue(backend_ctx *c, int T, int with_head);

/* The MTP head (q3n_mtp_forward's arithmetic, every kernel batch-invariant): pairs (hidden p,
 * token p+1) -> [enorm(embed) ; hnorm(hidden)] -> eh_proj -> the MTP decoder layer (its own KV
 * slots slot.., RoPE at slot+1..) -> shared_head_norm (moe's combine) -> hidden_out, lm head. */
static int cuda_mtp_forward(backend_ctx *c, const float *hidden, const int32_t *next_tokens, int T, int slot,
                            float *logits, float *hidden_out) {
    const q3n_hparams *hp = c->hp;
    const int V = hp->n_vocab, D = hp->n_embd, il = hp->n_layer;
    const dmodel *dm = c->dm;
    const dlayer *L = &dm->L[il];
    if (hp->n_nextn < 1 || !L->eh_proj.d) return rl_seterr("this model has no MTP block (nextn_predict_layers is 0)");
    if (T < 1 || T > c->n_batch) return rl_seterr("MTP forward of %d pairs: must be 1..%d (n_batch)", T, c->n_batch);
    if (slot < 0 || slot + T > c->n_ctx)
        return rl_seterr("MTP context is full: %d + %d pairs exceed %d", slot, T, c->n_ctx);
    for (int t = 0; t < T; t++)
        if (next_tokens[t] < 0 || next_tokens[t] >= V)
            return rl_seterr("token id %d is outside the vocabulary (0..%d)", next_tokens[t], V - 1);
    c->snap_rows = false;
    memcpy(c->h_tok, next_tokens, sizeof(int32_t) * (size_t)T);
    c->h_tok[c->n_batch] = slot;
    memcpy(c->h_hidden, hidden, sizeof(float) * (size_t)T * D);
    TRY(CU_CHECK(cudaMemcpyAsync(c->tok, c->h_tok, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(c->pos0, c->h_tok + c->n_batch, sizeof(int), cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(c->y, c->h_hidden, sizeof(float) * (size_t)T * D, cudaMemcpyHostToDevice, c->st)));
    const bool with_head = logits != NULL;
    if (T == 1 && c->graphs) { /* one pair (a chained draft): a captured graph */
        if (!c->mexec[with_head] && !c->mtried[with_head]) {
            c->mtried[with_head] = true;
            TRY(graph_capture(c, &c->mexec[with_head], mtp_enqueue, 1, with_head));
        }
    }
    if (T == 1 && c->mexec[with_head]) TRY(CU_CHECK(cudaGraphLaunch(c->mexec[with_head], c->st)));
    else TRY(mtp_enqueue(c, T, 0));
    if (hidden_out)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_hidden, c->xn, sizeof(float) * (size_t)T * D, cudaMemcpyDeviceToHost, c->st)));
    if (T == 1 && c->mexec[with_head]) { /* the head (if asked for) ran in the graph */
        if (with_head)
            TRY(CU_CHECK(cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * V, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        if (hidden_out) memcpy(hidden_out, c->h_hidden, sizeof(float) * D);
        if (logits) memcpy(logits, c->h_logits, sizeof(float) * V);
        return 0;
    }
    TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
    if (hidden_out) memcpy(hidden_out, c->h_hidden, sizeof(float) * (size_t)T * D);
    return logits ? head_rows_to_host(c, T, logits) : 0;
}

/* The MTP head's launches on T pairs (tokens in c->tok, slot in c->pos0, hidden in c->y);
 * with_head: also the logits of row 0 (the one-pair graph). */
static int mtp_enqueue(backend_ctx *c, int T, int with_head) {
    const q3n_hparams *hp = c->hp;
    const int D = hp->n_embd, il = hp->n_layer;
    const dmodel *dm = c->dm;
    const dlayer *L = &dm->L[il];
    const size_t row = sizeof(float) * (size_t)D;
    TRY(cu_get_rows(dm->tok_embd.type, dm->tok_embd.d, dm->tok_embd.row_bytes, D, c->tok, T, c->x, D, c->st));
    TRY(cu_add_rmsnorm(c->x, NULL, L->enorm, c->xn, D, T, hp->rms_eps, c->st));
    TRY(cu_add_rmsnorm(c->y, NULL, L->hnorm, c->sh, D, T, hp->rms_eps, c->st));
    TRY(CU_CHECK(cudaMemcpy2DAsync(c->mcat, 2 * row, c->xn, row, row, T, cudaMemcpyDeviceToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpy2DAsync(c->mcat + D, 2 * row, c->sh, row, row, T, cudaMemcpyDeviceToDevice, c->st)));
    const dmat *We[1] = {&L->eh_proj};
    float *Ye[1] = {c->x};
    TRY(mm_run(c, We, Ye, &D, NULL, 1, c->mcat, 2 * D, T, NULL, c->st));
    TRY(cu_add_rmsnorm(c->x, NULL, L->attn_norm, c->xn, D, T, hp->rms_eps, c->st));
    TRY(mixer_attention(c, il, T, NULL, NULL));
    TRY(cu_add_rmsnorm(c->x, c->y, L->post_norm, c->xn, D, T, hp->rms_eps, c->st));
    TRY(moe(c, il, T, NULL)); /* ends with xn = shared_head_norm(x) */
    return with_head ? head(c, 0, 1) : 0;
}

const backend_ops backend_cuda = {
    .name = "cuda",
    .available = cuda_available,
    .ctx_new = cuda_ctx_new,
    .ctx_free = cuda_ctx_free,
    .reset = cuda_reset,
    .forward = cuda_forward,
    .state_get = cuda_state_get,
    .state_set = cuda_state_set,
    .set_reference = NULL,  /* no double-precision mode: the CPU backend is the oracle */
    .mtp_forward = cuda_mtp_forward,
    .slot_restore = cuda_slot_restore,
    .slot_get = cuda_slot_get,
    .kv_row_bytes = cuda_kv_row_bytes,
    .kv_format = cuda_kv_format,
    .mem_info = cuda_mem_info,
    .kv_get = cuda_kv_get,
    .kv_set = cuda_kv_set,
    .set_expert_src = NULL, /* full residency, or the VRAM tier's slots fed by set_host_src */
    .ctx_new_opts = cuda_ctx_new_opts,
    .set_host_src = cuda_set_host_src,
    .print_stats = cuda_print_stats,
};
#else
typedef int backend_cuda_unused; /* ISO C wants a declaration in every translation unit */
#endif
