/* backend_cuda_model.c — the device copy of a q3n_model for the CUDA backend: one arena holding
 * every tensor (raw quantised blocks) uploaded once through pinned double-buffered staging, and
 * shared by the contexts of that model (reference counted, dmodel_get / dmodel_put). Types and
 * contracts in backend_cuda_int.h.
 */
#ifdef RL_CUDA
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_cuda_int.h"
#include "gguf/quant.h"

static pthread_mutex_t g_models_lock = PTHREAD_MUTEX_INITIALIZER;
static dmodel *g_models;

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
    if (m->n_in % 8)
        return rl_seterr("tensor %s: %lld columns is not a multiple of 8", m->name, (long long)m->n_in);
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
            TRY(up_mat(u, &d->wbeta, &L->wbeta)); /* ba_split files: these two instead of wba */
            TRY(up_mat(u, &d->walpha, &L->walpha));
            TRY(up_mat(u, &d->wout, &L->wout));
            TRY(up_vec(u, &d->conv_w, L->conv_w, (size_t)hp->ssm_conv_dim * hp->ssm_kw));
            TRY(up_vec(u, &d->dt_bias, L->dt_bias, (size_t)hp->ssm_hv));
            TRY(up_vec(u, &d->ssm_a, L->ssm_a, (size_t)hp->ssm_hv));
            TRY(up_vec(u, &d->ssm_norm, L->ssm_norm, (size_t)hp->ssm_dv));
        }
        TRY(up_mat(u, &d->router, &L->router));
        if (dm->experts ||
            il >= hp->n_layer) { /* the MTP layer's experts stay resident (no VRAM tier there) */
            TRY(up_mat(u, &d->gate_exps, &L->gate_exps));
            TRY(up_mat(u, &d->up_exps, &L->up_exps));
            TRY(up_mat(u, &d->down_exps, &L->down_exps));
        } else {
            TRY(meta_mat(&d->gate_exps, &L->gate_exps));
            TRY(meta_mat(&d->up_exps, &L->up_exps));
            TRY(meta_mat(&d->down_exps, &L->down_exps));
        }
        /* a dense FFN (qwen35) takes the shared expert's places: the forward runs it as a shared
         * expert without gate and without routed experts (no router either: its data is NULL) */
        TRY(up_mat(u, &d->gate_sh, hp->moe ? &L->gate_sh : &L->ffn_gate));
        TRY(up_mat(u, &d->up_sh, hp->moe ? &L->up_sh : &L->ffn_up));
        TRY(up_mat(u, &d->down_sh, hp->moe ? &L->down_sh : &L->ffn_down));
        TRY(up_vec(u, &d->sh_gate, L->sh_gate, D));
    }
    return 0;
}

static void dmodel_free(dmodel *dm) {
    if (!dm) return;
    int cur = -1;
    if (dm->arena && cudaGetDevice(&cur) == cudaSuccess && cur != dm->ordinal &&
        cudaSetDevice(dm->ordinal) == cudaSuccess) {
        cudaFree(dm->arena); /* on the arena's own device, then the caller's device back */
        (void)cudaSetDevice(cur);
    } else if (dm->arena) cudaFree(dm->arena);
    (void)cudaGetLastError();
    free(dm);
}

static dmodel *dmodel_upload(const q3n_model *m, bool experts, int ordinal, bool verbose) {
    const q3n_hparams *hp = &m->hp;
    dmodel *dm = rl_calloc(1, sizeof *dm, "CUDA model");
    float *inv_freq = rl_calloc((size_t)hp->n_rot / 2 + 1, sizeof(float), "rope table");
    upl u = {0};
    if (!dm || !inv_freq) goto fail;
    dm->m = m;
    dm->experts = experts;
    dm->ordinal = ordinal;
    /* RoPE inverse frequencies exactly as the CPU reference computes them (ops_rope_table) */
    for (int i = 0; i < hp->n_rot / 2; i++)
        inv_freq[i] = (float)(1.0 / pow((double)hp->rope_base, (double)(2 * i) / (double)hp->n_rot));
    double t0 = rl_now();
    if (plan_model(&u, dm, inv_freq)) goto fail;
    if (CU_CHECK(cudaMalloc((void **)&u.arena, u.total))) {
        rl_seterr("cannot allocate %.2f GiB of GPU memory for the model (%s)", u.total / 1073741824.0,
                  rl_lasterr());
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
    if (verbose)
        fprintf(stderr, "redlite cuda: uploaded %d tensors, %.2f GiB in %.2f s\n", u.n,
                u.total / 1073741824.0, rl_now() - t0);
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
size_t dmodel_bytes(const q3n_model *m, bool experts) {
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

dmodel *dmodel_get(const q3n_model *m, bool experts, int ordinal, bool verbose) {
    pthread_mutex_lock(&g_models_lock);
    dmodel *dm;
    for (dm = g_models; dm && (dm->m != m || dm->experts != experts || dm->ordinal != ordinal);
         dm = dm->next) {}
    if (!dm && (dm = dmodel_upload(m, experts, ordinal, verbose))) {
        dm->next = g_models;
        g_models = dm;
    }
    if (dm) dm->refs++;
    pthread_mutex_unlock(&g_models_lock);
    return dm;
}

void dmodel_put(dmodel *dm) {
    pthread_mutex_lock(&g_models_lock);
    if (--dm->refs == 0) {
        dmodel **pp = &g_models;
        while (*pp != dm) pp = &(*pp)->next;
        *pp = dm->next;
        dmodel_free(dm);
    }
    pthread_mutex_unlock(&g_models_lock);
}
#else
typedef int backend_cuda_model_unused; /* ISO C wants a declaration in every translation unit */
#endif
