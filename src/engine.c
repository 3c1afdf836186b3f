/* engine.c — see engine.h. CPU reference backend: contexts, chunking, snapshots. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "pool.h"

struct engine {
    gguf_file *f;
    q3n_model m;
    pool *pool;
};

struct engine_ctx {
    engine *e;
    int n_ctx, n_batch, pos;
    q3n_state st;
    q3n_run run;
    float *hidden;         /* [n_batch][D] final-norm hidden of the last forward */
    int hidden_rows;
    engine_snapshot **row_snaps; /* during verify */
    int verify_pos;
};

struct engine_snapshot {
    int pos;
    int n_layer;
    size_t conv_n, ssm_n;
    float **conv, **ssm;   /* per DeltaNet layer */
};

engine *engine_open(const char *path, const engine_params *p) {
    engine *e = rl_calloc(1, sizeof *e, "engine");
    if (!e) return NULL;
    e->f = gguf_open(path);
    if (!e->f) goto fail;
    if (q3n_load(&e->m, e->f)) goto fail;
    e->pool = pool_new(p ? p->n_threads : 0);
    if (!e->pool) goto fail;
    return e;
fail:
    engine_close(e);
    return NULL;
}

void engine_close(engine *e) {
    if (!e) return;
    q3n_free(&e->m);
    if (e->f) gguf_close(e->f);
    pool_free(e->pool);
    free(e);
}

const q3n_hparams *engine_hparams(const engine *e) { return &e->m.hp; }
const q3n_model *engine_model(const engine *e) { return &e->m; }
gguf_file *engine_gguf(const engine *e) { return e->f; }

static void state_free(q3n_state *st, int n_layer) {
    for (int il = 0; il < n_layer; il++) {
        if (st->k_cache) free(st->k_cache[il]);
        if (st->v_cache) free(st->v_cache[il]);
        if (st->conv) free(st->conv[il]);
        if (st->ssm) free(st->ssm[il]);
    }
    free(st->k_cache);
    free(st->v_cache);
    free(st->conv);
    free(st->ssm);
}

engine_ctx *engine_ctx_new(engine *e, const engine_ctx_params *p) {
    const q3n_hparams *hp = &e->m.hp;
    engine_ctx *c = rl_calloc(1, sizeof *c, "context");
    if (!c) return NULL;
    c->e = e;
    c->n_ctx = p && p->n_ctx > 0 ? p->n_ctx : 4096;
    c->n_batch = p && p->n_batch > 0 ? p->n_batch : 64;
    if (c->n_batch > 4096) c->n_batch = 4096;
    int nl = hp->n_layer;
    q3n_state *st = &c->st;
    st->n_ctx = c->n_ctx;
    st->k_cache = rl_calloc((size_t)nl, sizeof(float *), "KV cache");
    st->v_cache = rl_calloc((size_t)nl, sizeof(float *), "KV cache");
    st->conv = rl_calloc((size_t)nl, sizeof(float *), "conv state");
    st->ssm = rl_calloc((size_t)nl, sizeof(float *), "recurrent state");
    if (!st->k_cache || !st->v_cache || !st->conv || !st->ssm) goto fail;
    size_t kvw = (size_t)hp->n_head_kv * hp->head_dim;
    for (int il = 0; il < nl; il++) {
        if (hp->is_attn[il]) {
            st->k_cache[il] = rl_malloc(sizeof(float) * kvw * (size_t)c->n_ctx, "KV cache (lower --ctx)");
            st->v_cache[il] = rl_malloc(sizeof(float) * kvw * (size_t)c->n_ctx, "KV cache (lower --ctx)");
            if (!st->k_cache[il] || !st->v_cache[il]) goto fail;
        } else {
            st->conv[il] = rl_calloc(q3n_conv_floats(hp), sizeof(float), "conv state");
            st->ssm[il] = rl_calloc(q3n_ssm_floats(hp), sizeof(float), "recurrent state");
            if (!st->conv[il] || !st->ssm[il]) goto fail;
        }
    }
    c->run.m = &e->m;
    c->run.pool = e->pool;
    c->run.st = st;
    c->run.max_rows = c->n_batch;
    c->run.scratch = rl_aligned_alloc(sizeof(float) * q3n_scratch_floats(hp, c->n_batch), "scratch");
    c->hidden = rl_malloc(sizeof(float) * (size_t)c->n_batch * hp->n_embd, "hidden states");
    if (!c->run.scratch || !c->hidden) goto fail;
    return c;
fail:
    engine_ctx_free(c);
    return NULL;
}

void engine_ctx_free(engine_ctx *c) {
    if (!c) return;
    state_free(&c->st, c->e->m.hp.n_layer);
    free(c->run.scratch);
    free(c->hidden);
    free(c);
}

int engine_pos(const engine_ctx *c) { return c->pos; }
int engine_n_ctx(const engine_ctx *c) { return c->n_ctx; }

void engine_reset(engine_ctx *c) {
    const q3n_hparams *hp = &c->e->m.hp;
    for (int il = 0; il < hp->n_layer; il++) {
        if (c->st.conv[il]) memset(c->st.conv[il], 0, sizeof(float) * q3n_conv_floats(hp));
        if (c->st.ssm[il]) memset(c->st.ssm[il], 0, sizeof(float) * q3n_ssm_floats(hp));
    }
    c->pos = 0;
    c->hidden_rows = 0;
}

static int forward(engine_ctx *c, const int32_t *tok, int n, float *logits, bool all) {
    int rc = q3n_forward(&c->run, tok, n, c->pos, logits, all, c->hidden);
    if (rc) return rc;
    c->pos += n;
    c->hidden_rows = n;
    return 0;
}

int engine_step(engine_ctx *c, int32_t token, float *logits) { return forward(c, &token, 1, logits, false); }

int engine_prefill(engine_ctx *c, const int32_t *tokens, int n, float *logits_last) {
    if (n <= 0) return rl_seterr("empty prompt: nothing to evaluate");
    for (int i = 0; i < n; i += c->n_batch) {
        int m = n - i < c->n_batch ? n - i : c->n_batch;
        if (forward(c, tokens + i, m, i + m == n ? logits_last : NULL, false)) return -1;
    }
    return 0;
}

static void verify_row_state(void *ud, int il, int row, const float *conv, const float *ssm) {
    engine_ctx *c = ud;
    engine_snapshot *s = c->row_snaps[row];
    const q3n_hparams *hp = &c->e->m.hp;
    memcpy(s->conv[il], conv, sizeof(float) * q3n_conv_floats(hp));
    memcpy(s->ssm[il], ssm, sizeof(float) * q3n_ssm_floats(hp));
    s->pos = c->verify_pos + row + 1;
}

int engine_verify(engine_ctx *c, const int32_t *tokens, int n, float *logits, engine_snapshot **snaps) {
    if (n <= 0 || n > c->n_batch) return rl_seterr("verify of %d rows: must be 1..%d (n_batch)", n, c->n_batch);
    q3n_row_state_fn saved = c->run.row_state;
    void *saved_ud = c->run.hook_ud;
    if (snaps) {
        /* hooks share one user pointer; verify snapshots need ours, so debug hooks pause */
        c->row_snaps = snaps;
        c->verify_pos = c->pos;
        c->run.row_state = verify_row_state;
        c->run.hook_ud = c;
        c->run.dump = NULL;
        c->run.route = NULL;
    }
    int rc = forward(c, tokens, n, logits, true);
    c->run.row_state = saved;
    c->run.hook_ud = saved_ud;
    c->row_snaps = NULL;
    return rc;
}

const float *engine_last_hidden(const engine_ctx *c, int row) {
    if (row < 0 || row >= c->hidden_rows) return NULL;
    return c->hidden + (size_t)row * c->e->m.hp.n_embd;
}

engine_snapshot *engine_snapshot_new(engine_ctx *c) {
    const q3n_hparams *hp = &c->e->m.hp;
    engine_snapshot *s = rl_calloc(1, sizeof *s, "snapshot");
    if (!s) return NULL;
    s->n_layer = hp->n_layer;
    s->conv_n = q3n_conv_floats(hp);
    s->ssm_n = q3n_ssm_floats(hp);
    s->conv = rl_calloc((size_t)hp->n_layer, sizeof(float *), "snapshot");
    s->ssm = rl_calloc((size_t)hp->n_layer, sizeof(float *), "snapshot");
    if (!s->conv || !s->ssm) goto fail;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->is_attn[il]) continue;
        s->conv[il] = rl_malloc(sizeof(float) * s->conv_n, "snapshot");
        s->ssm[il] = rl_malloc(sizeof(float) * s->ssm_n, "snapshot");
        if (!s->conv[il] || !s->ssm[il]) goto fail;
    }
    return s;
fail:
    engine_snapshot_free(s);
    return NULL;
}

int engine_snapshot_save(engine_ctx *c, engine_snapshot *s) {
    for (int il = 0; il < s->n_layer; il++) {
        if (!s->conv[il]) continue;
        memcpy(s->conv[il], c->st.conv[il], sizeof(float) * s->conv_n);
        memcpy(s->ssm[il], c->st.ssm[il], sizeof(float) * s->ssm_n);
    }
    s->pos = c->pos;
    return 0;
}

int engine_snapshot_restore(engine_ctx *c, const engine_snapshot *s) {
    if (s->n_layer != c->e->m.hp.n_layer) return rl_seterr("snapshot belongs to another model");
    if (s->pos > c->pos + 0 && s->pos > c->n_ctx) return rl_seterr("snapshot position beyond the context");
    for (int il = 0; il < s->n_layer; il++) {
        if (!s->conv[il]) continue;
        memcpy(c->st.conv[il], s->conv[il], sizeof(float) * s->conv_n);
        memcpy(c->st.ssm[il], s->ssm[il], sizeof(float) * s->ssm_n);
    }
    c->pos = s->pos;
    c->hidden_rows = 0;
    return 0;
}

int engine_snapshot_pos(const engine_snapshot *s) { return s->pos; }

void engine_snapshot_free(engine_snapshot *s) {
    if (!s) return;
    for (int il = 0; il < s->n_layer; il++) {
        if (s->conv) free(s->conv[il]);
        if (s->ssm) free(s->ssm[il]);
    }
    free(s->conv);
    free(s->ssm);
    free(s);
}

void engine_set_hooks(engine_ctx *c, q3n_dump_fn dump, q3n_route_fn route, void *ud) {
    c->run.dump = dump;
    c->run.route = route;
    c->run.hook_ud = ud;
}

void engine_set_expert_src(engine_ctx *c, const q3n_expert_src *src) {
    if (src)
        c->run.experts = *src;
    else
        memset(&c->run.experts, 0, sizeof c->run.experts);
}
