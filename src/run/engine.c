/* engine.c — see engine.h. Owns the API, chunking and snapshots; the forward pass and the
 * sequence state live in a backend (backend.h: CPU reference or CUDA). */
#include "run/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/common.h"
#include "cache/expert_repack.h"
#include "cache/vram_plan.h"
#include "base/pool.h"
#include "backend/resident.h"
#include "kern/ops.h"

/* One forward's worth of work waiting for its turn (engine_turn): a decode step (batchable with
 * the other waiting steps) or anything else that touches the backend (exclusive). Lives on the
 * waiting thread's stack. */
typedef struct eng_req {
    engine_ctx *c;
    bool step;
    int32_t token;
    float *logits;
    bool done;
    int rc;
    char err[256];
    struct eng_req *next;
} eng_req;

#define ENGINE_GATHER_S 0.002 /* how long a step waits for the other decoding contexts' steps */

struct engine {
    gguf_file *f;
    q3n_model m;
    pool *pool;
    ops_rt *rt;       /* the CPU ops' runtime (kernel level and switches, profile), on the pool */
    rl_tuning tuning; /* engine_params.tuning or the environment's, as opened */
    const backend_ops *be;
    bool reference;
    expert_repack *rp;    /* --iq-repack: the repacked experts the model's views point at */
    bool map_weights;     /* engine_params.map_weights */
    resident *res[2];     /* the dense / expert copies the model's views point at (resident.h) */
    char res_why[2][160]; /* why a copy was not made ("" while none was asked for) */
    /* contexts used from several threads (server slots): every backend call waits for its turn
     * in arrival order (FIFO), so a long prompt delays the others by one chunk at most, and
     * the decode steps waiting together run as rows of one forward (engine_step) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    eng_req *qhead, *qtail;
    bool busy;                     /* a turn is running */
    int n_decoding;                /* contexts inside a decode loop (engine_ctx_decoding) */
    long long batches, batch_rows; /* engine_batch_stats */
};

struct engine_ctx {
    engine *e;
    backend_ctx *bc;
    int n_ctx, n_batch, pos;
    int mtp_pos;         /* pairs in the MTP head's KV cache */
    backend_hooks hooks; /* user debug hooks */
    float *hidden;       /* [n_batch][D] final-norm hidden of the last forward */
    int hidden_rows;
    engine_snapshot **row_snaps; /* during verify */
    int verify_pos;
    char state_fmt[48]; /* engine_state_format's answer */
    int kv;             /* backend_kv: the KV cache format */
    /* device-resident verify snapshots (backend slot_restore/slot_get): verify row i's state
     * goes to backend slot i; slot_owner[i] is the snapshot whose state that slot holds */
    bool dev_snaps;
    engine_snapshot **slot_owner; /* [n_batch] */
    int *row_slot;                /* [n_batch] scratch of engine_verify */
    bool decoding;                /* engine_ctx_decoding */
};

struct engine_snapshot {
    int pos, mtp_pos;
    int n_layer;
    size_t conv_n, ssm_n;
    float **conv, **ssm; /* per DeltaNet layer, NULL for attention layers */
    engine_ctx *dev;     /* non-NULL: the recurrent state is in backend slot dev_slot of this
                            context, not in conv/ssm (a verify row's snapshot on the device) */
    int dev_slot;
};

/* Detach a device-resident snapshot from its slot (its state there is given up). */
static void snap_detach(engine_snapshot *s) {
    if (!s->dev) return;
    if (s->dev->slot_owner[s->dev_slot] == s) s->dev->slot_owner[s->dev_slot] = NULL;
    s->dev = NULL;
    s->dev_slot = -1;
}

/* Bring a device-resident snapshot's state into its host buffers (before its slot is reused,
 * its context freed, or its state exported); it is a host snapshot afterwards. */
static int snap_materialize(engine_snapshot *s) {
    engine_ctx *c = s->dev;
    if (!c) return 0;
    int rc = 0;
    for (int il = 0; il < s->n_layer && !rc; il++)
        if (s->conv[il]) rc = c->e->be->slot_get(c->bc, s->dev_slot, il, s->conv[il], s->ssm[il]);
    snap_detach(s);
    return rc;
}

engine *engine_open(const char *path, const engine_params *p) {
    engine *e = rl_calloc(1, sizeof *e, "engine");
    if (!e) return NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    e->be = backend_find(p && p->backend ? p->backend : "cpu");
    if (!e->be) goto fail;
    e->f = gguf_open(path);
    if (!e->f) goto fail;
    if (q3n_load(&e->m, e->f)) goto fail;
    e->reference = p && p->reference;
    e->pool = pool_new(p ? p->n_threads : 0);
    if (!e->pool) goto fail;
    if (p && p->tuning) e->tuning = *p->tuning;
    else if (tuning_from_env(&e->tuning)) goto fail;
    if (!(e->rt = ops_rt_new(&e->tuning.kern, e->tuning.vec_level))) goto fail;
    ops_rt_attach(e->rt, e->pool);
    if (p && p->iq_repack) {
        if (strcmp(e->be->name, "cpu")) {
            rl_seterr("--iq-repack is a CPU layout; the %s backend keeps its own (drop --iq-repack or use "
                      "--backend cpu)",
                      e->be->name);
            goto fail;
        }
        if (!(e->rp = expert_repack_model(&e->m, e->pool, true, &e->tuning.repack))) goto fail;
    }
    e->map_weights = p && p->map_weights;
    if (!strcmp(e->be->name, "cpu")) {
        if (e->map_weights) snprintf(e->res_why[0], sizeof e->res_why[0], "asked for (--weights map)");
        else if (!(e->res[0] = resident_copy(&e->m, e->pool, RESIDENT_DENSE, true))) {
            snprintf(e->res_why[0], sizeof e->res_why[0], "%s", rl_lasterr());
            rl_clearerr(); /* best effort: the mapping serves them */
        }
    }
    return e;
fail:
    engine_close(e);
    return NULL;
}

void engine_close(engine *e) {
    if (!e) return;
    q3n_free(&e->m);
    expert_repack_free(e->rp);
    resident_free(e->res[0]);
    resident_free(e->res[1]);
    if (e->f) gguf_close(e->f);
    pool_free(e->pool);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    ops_rt_free(e->rt);
    free(e);
}

const rl_tuning *engine_tuning(const engine *e) { return &e->tuning; }
const char *engine_cpu_kernels(const engine *e) { return kern_cfg_describe(ops_kern(e->pool)); }
const char *engine_cpu_level(const engine *e) { return kern_level_name(ops_kern(e->pool)->level); }
engine_cpu_info engine_cpu_features(void) {
    return (engine_cpu_info){.avx2 = kern_level_supported(KERN_AVX2),
                             .avx512 = kern_level_supported(KERN_AVX512),
                             .amx = kern_amx_supported(),
                             .best = kern_level_name(kern_best_level())};
}
void engine_prof_begin(engine *e) { ops_prof_begin(e->rt); }
void engine_prof_end(engine *e) { ops_prof_end(e->rt); }
void engine_prof_print(const engine *e, FILE *f, const char *title, double per) {
    ops_prof_print(e->rt, f, title, per);
}
void engine_fast_check(engine *e, bool on) { ops_fast_check_enable(e->rt, on); }
void engine_fast_check_report(const engine *e, long *checked, long *bad, double *worst) {
    ops_fast_check_report(e->rt, checked, bad, worst);
}

const q3n_hparams *engine_hparams(const engine *e) { return &e->m.hp; }
const q3n_model *engine_model(const engine *e) { return &e->m; }
gguf_file *engine_gguf(const engine *e) { return e->f; }
const char *engine_backend_name(const engine *e) { return e->be->name; }
bool engine_repack_describe(const engine *e, char *buf, size_t n) {
    if (e->rp) expert_repack_describe(e->rp, buf, n);
    return e->rp != NULL;
}

int engine_copy_experts(engine *e, bool progress) {
    if (e->res[1]) return 0;
    if (strcmp(e->be->name, "cpu"))
        return rl_seterr("the %s backend holds its own copy of the experts", e->be->name);
    if (e->map_weights) return rl_seterr("asked for (--weights map)");
    if (e->rp) return rl_seterr("--iq-repack holds its own copy of the experts");
    if (!(e->res[1] = resident_copy(&e->m, e->pool, RESIDENT_EXPERTS, progress))) {
        snprintf(e->res_why[1], sizeof e->res_why[1], "%s", rl_lasterr());
        return -1;
    }
    return 0;
}

void engine_note_experts_mapped(engine *e, const char *why) {
    if (!e->res[1]) snprintf(e->res_why[1], sizeof e->res_why[1], "%s", why);
}

bool engine_weights_describe(const engine *e, char *buf, size_t n) {
    if (strcmp(e->be->name, "cpu")) return false;
    size_t l = 0;
    buf[0] = 0;
    for (int i = 0; i < 2 && l < n; i++) {
        if (e->res[i]) resident_describe(e->res[i], buf + l, n - l);
        else if (e->res_why[i][0])
            snprintf(buf + l, n - l, "%s: in the file mapping (%s)", i ? "routed experts" : "dense weights",
                     e->res_why[i]);
        else continue;
        l += strlen(buf + l);
        if (l + 1 < n) buf[l++] = '\n', buf[l] = 0;
    }
    if (l && buf[l - 1] == '\n') buf[--l] = 0;
    return true;
}

void engine_weights_print(const engine *e, FILE *f, const char *prefix) {
    char wl[640];
    if (!engine_weights_describe(e, wl, sizeof wl) || !wl[0]) return;
    for (char *ln = wl, *nl; ln; ln = nl) {
        if ((nl = strchr(ln, '\n'))) *nl++ = 0;
        fprintf(f, "%s%s\n", prefix, ln);
    }
}

int engine_kv_parse(const char *name, int *out) {
    if (!strcmp(name, "f32")) return *out = BACKEND_KV_F32, 0;
    if (!strcmp(name, "f16")) return *out = BACKEND_KV_F16, 0;
    return rl_seterr("KV cache format '%s': expected f32 or f16", name);
}

const char *engine_kv_format(const engine_ctx *c) { return c->kv == BACKEND_KV_F16 ? "f16" : "f32"; }

int engine_mem_info(const engine_ctx *c, engine_mem *out) {
    memset(out, 0, sizeof *out);
    if (!c->e->be->mem_info) return rl_seterr("the %s backend does not report its memory", c->e->be->name);
    c->e->be->mem_info(c->bc, out);
    return 0;
}

engine_ctx *engine_ctx_new(engine *e, const engine_ctx_params *p) {
    int kv = BACKEND_KV_F32;
    if (engine_kv_parse(p && p->kv ? p->kv : e->reference ? "f32" : "f16", &kv)) return NULL;
    engine_ctx *c = rl_calloc(1, sizeof *c, "context");
    if (!c) return NULL;
    c->kv = kv;
    c->e = e;
    c->n_ctx = p && p->n_ctx > 0 ? p->n_ctx : 4096;
    /* under a VRAM tier larger prompt chunks share each missed expert's copy (vram_prompt_batch) */
    const int tier_batch = p && p->vram_spec ? vram_prompt_batch(p->vram_spec) : 0;
    c->n_batch = p && p->n_batch > 0 ? p->n_batch : tier_batch > 0 ? tier_batch : engine_default_batch(e);
    if (c->n_batch > ENGINE_BATCH_MAX) c->n_batch = ENGINE_BATCH_MAX;
    if (p && p->vram_spec) {
        if (!e->be->ctx_new_opts) {
            rl_seterr(
                "--vram-mib needs a GPU backend (--backend cuda); the %s backend keeps the experts in RAM "
                "(use --cache-mib)",
                e->be->name);
            free(c);
            return NULL;
        }
        c->bc = e->be->ctx_new_opts(&e->m, e->pool, c->n_ctx, c->n_batch,
                                    &(backend_ctx_opts){.vram_spec = p->vram_spec,
                                                        .kv = (backend_kv)c->kv,
                                                        .vram_pin = p->vram_pin,
                                                        .vram_miss = p->vram_miss});
    } else {
        c->bc = e->be->ctx_new(&e->m, e->pool, c->n_ctx, c->n_batch, (backend_kv)c->kv);
    }
    c->hidden = rl_malloc(sizeof(float) * (size_t)c->n_batch * e->m.hp.n_embd, "hidden states");
    c->dev_snaps = e->be->slot_restore && e->be->slot_get && !(p && p->host_snapshots);
    c->slot_owner = rl_calloc((size_t)c->n_batch, sizeof(engine_snapshot *), "snapshot slots");
    c->row_slot = rl_calloc((size_t)c->n_batch, sizeof(int), "snapshot slots");
    if (!c->bc || !c->hidden || !c->slot_owner || !c->row_slot) {
        engine_ctx_free(c);
        return NULL;
    }
    if (e->be->set_reference) e->be->set_reference(c->bc, e->reference);
    return c;
}

void engine_ctx_free(engine_ctx *c) {
    if (!c) return;
    for (int i = 0; c->slot_owner && i < c->n_batch; i++) /* snapshots outlive their slots */
        if (c->slot_owner[i]) snap_materialize(c->slot_owner[i]);
    if (c->bc) c->e->be->ctx_free(c->bc);
    free(c->slot_owner);
    free(c->row_slot);
    free(c->hidden);
    free(c);
}

int engine_pos(const engine_ctx *c) { return c->pos; }
int engine_n_ctx(const engine_ctx *c) { return c->n_ctx; }
int engine_n_batch(const engine_ctx *c) { return c->n_batch; }

int engine_default_batch(const engine *e) {
    int b = e->be->prompt_batch ? e->be->prompt_batch(&e->m, e->pool) : ENGINE_BATCH_DEFAULT;
    return b < 1 ? 1 : b > ENGINE_BATCH_MAX ? ENGINE_BATCH_MAX : b;
}

static void reset_locked(engine_ctx *c) {
    c->e->be->reset(c->bc);
    c->pos = 0;
    c->mtp_pos = 0;
    c->hidden_rows = 0;
}

static int forward(engine_ctx *c, const int32_t *tok, int n, float *logits, bool all,
                   const backend_hooks *h) {
    int rc = c->e->be->forward(c->bc, tok, n, c->pos, logits, all, c->hidden, h);
    if (rc) return rc;
    c->pos += n;
    c->hidden_rows = n;
    return 0;
}

/* ---- turns: contexts of one engine driven from several threads ------------------------------
 * The backend (its thread pool, the shared expert source, a device) serves one forward at a
 * time. Every call that touches a context's backend state queues a request and runs when it is
 * at the head of the queue and no other turn runs: first come, first served, so a thread that
 * runs prompt chunk after prompt chunk lets every queued decode step in between. A decode step
 * at the head takes every step queued at that moment (and, when several contexts are decoding,
 * waits up to ENGINE_GATHER_S for their steps to arrive) and runs them as the rows of one
 * forward (backend forward_rows): each row's arithmetic is that of a single step (the exactness
 * contract), so what a context computes never depends on its neighbours. With one thread the
 * queue is always empty and a turn costs one uncontended lock. */
static void q_push(engine *e, eng_req *r) {
    r->next = NULL;
    if (e->qtail) e->qtail->next = r;
    else e->qhead = r;
    e->qtail = r;
}

static void q_remove(engine *e, eng_req *r) {
    eng_req **pp = &e->qhead, *prev = NULL;
    while (*pp && *pp != r) prev = *pp, pp = &(*pp)->next;
    if (!*pp) return;
    *pp = r->next;
    if (e->qtail == r) e->qtail = prev;
}

static void turn_begin(engine *e, eng_req *r) {
    pthread_mutex_lock(&e->mu);
    q_push(e, r);
    while (e->busy || e->qhead != r) pthread_cond_wait(&e->cv, &e->mu);
    q_remove(e, r);
    e->busy = true;
    pthread_mutex_unlock(&e->mu);
}

static void turn_end(engine *e) {
    pthread_mutex_lock(&e->mu);
    e->busy = false;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

#define TURN_BEGIN(c)                                                                                        \
    eng_req turn_req_ = {.c = (c)};                                                                          \
    turn_begin((c)->e, &turn_req_)
#define TURN_END(c) turn_end((c)->e)

/* Queued requests of decoding contexts (steps, or a verify of a speculative loop). */
static int q_decoders(const engine *e) {
    int n = 0;
    for (const eng_req *r = e->qhead; r; r = r->next) n += r->c && r->c->decoding;
    return n;
}

/* The leader's short wait for the other decoding contexts (mutex held). */
static void gather(engine *e) {
    if (e->n_decoding < 2) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(ENGINE_GATHER_S * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    while (q_decoders(e) < e->n_decoding)
        if (pthread_cond_timedwait(&e->cv, &e->mu, &ts)) break;
}

/* Run the steps of a batch: rows of one forward where the backend has forward_rows and no
 * context has debug hooks, else one forward each. Failures are per request (err copied). */
static void run_steps(engine *e, eng_req **b, int n) {
    bool rows = n > 1 && e->be->forward_rows;
    for (int i = 0; i < n && rows; i++) rows = !b[i]->c->hooks.dump && !b[i]->c->hooks.route;
    if (rows) {
        backend_ctx *bcs[ENGINE_ROWS_MAX];
        int32_t tok[ENGINE_ROWS_MAX];
        int pos[ENGINE_ROWS_MAX];
        float *lg[ENGINE_ROWS_MAX], *hid[ENGINE_ROWS_MAX];
        for (int i = 0; i < n; i++) {
            engine_ctx *c = b[i]->c;
            bcs[i] = c->bc, tok[i] = b[i]->token, pos[i] = c->pos, lg[i] = b[i]->logits, hid[i] = c->hidden;
        }
        int rc = e->be->forward_rows(bcs, tok, pos, n, lg, hid);
        if (rc <= 0) { /* > 0: these contexts cannot share a forward (e.g. different expert sources) */
            for (int i = 0; i < n; i++) {
                b[i]->rc = rc;
                if (rc) snprintf(b[i]->err, sizeof b[i]->err, "%s", rl_lasterr());
                else b[i]->c->pos++, b[i]->c->hidden_rows = 1;
            }
            return;
        }
    }
    for (int i = 0; i < n; i++) {
        engine_ctx *c = b[i]->c;
        b[i]->rc = forward(c, &b[i]->token, 1, b[i]->logits, false, &c->hooks);
        if (b[i]->rc) snprintf(b[i]->err, sizeof b[i]->err, "%s", rl_lasterr());
    }
}

int engine_step(engine_ctx *c, int32_t token, float *logits) {
    engine *e = c->e;
    eng_req me = {.c = c, .step = true, .token = token, .logits = logits};
    pthread_mutex_lock(&e->mu);
    q_push(e, &me);
    while (!me.done) {
        if (e->busy || e->qhead != &me) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        gather(e);
        eng_req *batch[ENGINE_ROWS_MAX];
        int n = 0, cap = c->n_batch < ENGINE_ROWS_MAX ? c->n_batch
                                                      : ENGINE_ROWS_MAX; /* c's scratch holds the rows */
        for (eng_req *r = e->qhead, *nx; r && n < cap; r = nx) {
            nx = r->next;
            if (r->step) q_remove(e, r), batch[n++] = r;
        }
        e->busy = true;
        pthread_mutex_unlock(&e->mu);
        run_steps(e, batch, n);
        pthread_mutex_lock(&e->mu);
        for (int i = 0; i < n; i++) batch[i]->done = true;
        e->batches++;
        e->batch_rows += n;
        e->busy = false;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (me.rc) rl_seterr("%s", me.err);
    return me.rc;
}

void engine_ctx_decoding(engine_ctx *c, bool on) {
    pthread_mutex_lock(&c->e->mu);
    if (on != c->decoding) c->e->n_decoding += on ? 1 : -1;
    c->decoding = on;
    pthread_mutex_unlock(&c->e->mu);
}

void engine_batch_stats(engine *e, long long *forwards, long long *rows) {
    pthread_mutex_lock(&e->mu);
    *forwards = e->batches;
    *rows = e->batch_rows;
    pthread_mutex_unlock(&e->mu);
}

int engine_prefill(engine_ctx *c, const int32_t *tokens, int n, float *logits_last) {
    if (n <= 0) return rl_seterr("empty prompt: nothing to evaluate");
    for (int i = 0; i < n; i += c->n_batch) {
        int m = n - i < c->n_batch ? n - i : c->n_batch;
        TURN_BEGIN(c); /* a turn per chunk: other contexts' steps run in between */
        int rc = forward(c, tokens + i, m, i + m == n ? logits_last : NULL, false, &c->hooks);
        TURN_END(c);
        if (rc) return -1;
    }
    return 0;
}

static void verify_row_state(void *ud, int il, int row, const float *conv, const float *ssm) {
    engine_ctx *c = ud;
    engine_snapshot *s = c->row_snaps[row];
    if (!s) return; /* the caller does not need this row's state */
    memcpy(s->conv[il], conv, sizeof(float) * s->conv_n);
    memcpy(s->ssm[il], ssm, sizeof(float) * s->ssm_n);
    s->pos = c->verify_pos + row + 1;
}

/* The same snapshots without copies, on backends that take destinations (the CPU): the forward
 * writes row `row`'s state of layer il straight into the snapshot's buffers. */
static void verify_row_dst(void *ud, int il, int row, float **conv, float **ssm) {
    engine_ctx *c = ud;
    engine_snapshot *s = c->row_snaps[row];
    *conv = s ? s->conv[il] : NULL;
    *ssm = s ? s->ssm[il] : NULL;
}

static int verify_locked(engine_ctx *c, const int32_t *tokens, int n, float *logits,
                         engine_snapshot **snaps) {
    if (n <= 0 || n > c->n_batch)
        return rl_seterr("verify of %d rows: must be 1..%d (n_batch)", n, c->n_batch);
    backend_hooks h = c->hooks;
    if (snaps && c->dev_snaps) {
        /* row i's state goes to backend slot i, written in the forward itself (no host copy) */
        for (int i = 0; i < n; i++) {
            c->row_slot[i] = -1;
            if (!snaps[i]) continue;
            engine_snapshot *o = c->slot_owner[i];
            if (o && o != snaps[i] && snap_materialize(o)) return -1; /* keep another snapshot's state */
            if (snaps[i]->dev && (snaps[i]->dev != c || snaps[i]->dev_slot != i)) snap_detach(snaps[i]);
            c->row_slot[i] = i;
        }
        c->verify_pos = c->pos;
        h = (backend_hooks){.row_slots = c->row_slot};
    } else if (snaps) {
        /* the hooks share one user pointer; per-row snapshots need ours, so debug hooks pause */
        c->row_snaps = snaps;
        c->verify_pos = c->pos;
        h = (backend_hooks){.row_state = verify_row_state, .row_dst = verify_row_dst, .ud = c};
    }
    int rc = forward(c, tokens, n, logits, true, &h);
    c->row_snaps = NULL;
    for (int i = 0; snaps && h.row_slots && i < n; i++) {
        if (!snaps[i]) continue;
        if (rc) { /* the slot holds a partial state now */
            snap_detach(snaps[i]);
            continue;
        }
        snaps[i]->dev = c;
        snaps[i]->dev_slot = i;
        c->slot_owner[i] = snaps[i];
    }
    /* positions set here too, not only per DeltaNet row; the MTP head's position is not touched
     * by a verify: without this a restore would take the stale value of the snapshot's previous
     * use and cut the head's KV history */
    for (int i = 0; rc == 0 && snaps && i < n; i++)
        if (snaps[i]) snaps[i]->pos = c->verify_pos + i + 1, snaps[i]->mtp_pos = c->mtp_pos;
    return rc;
}

int engine_last_rows(const engine_ctx *c) { return c->hidden_rows; }

const float *engine_last_hidden(const engine_ctx *c, int row) {
    if (row < 0 || row >= c->hidden_rows) return NULL;
    return c->hidden + (size_t)row * c->e->m.hp.n_embd;
}

bool engine_has_mtp(const engine *e) { return e->m.hp.n_nextn > 0 && e->be->mtp_forward; }
int engine_mtp_pos(const engine_ctx *c) { return c->mtp_pos; }

void engine_mtp_rewind(engine_ctx *c, int pos) {
    if (pos >= 0 && pos < c->mtp_pos) c->mtp_pos = pos;
}

static int mtp_locked(engine_ctx *c, const float *hidden, const int32_t *next_tokens, int n, float *logits,
                      float *hidden_out) {
    if (!engine_has_mtp(c->e)) return rl_seterr("this model has no MTP head (no blk.N.nextn.* tensors)");
    const q3n_hparams *hp = &c->e->m.hp;
    for (int i = 0; i < n; i += c->n_batch) {
        int m = n - i < c->n_batch ? n - i : c->n_batch;
        int rc = c->e->be->mtp_forward(c->bc, hidden + (size_t)i * hp->n_embd, next_tokens + i, m, c->mtp_pos,
                                       logits ? logits + (size_t)i * hp->n_vocab : NULL,
                                       hidden_out ? hidden_out + (size_t)i * hp->n_embd : NULL);
        if (rc) return rc;
        c->mtp_pos += m;
    }
    return 0;
}

engine_snapshot *engine_snapshot_new(engine_ctx *c) {
    const q3n_hparams *hp = &c->e->m.hp;
    engine_snapshot *s = rl_calloc(1, sizeof *s, "snapshot");
    if (!s) return NULL;
    s->n_layer = hp->n_layer;
    s->dev_slot = -1;
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

static int snapshot_save_locked(engine_ctx *c, engine_snapshot *s) {
    snap_detach(s);
    for (int il = 0; il < s->n_layer; il++)
        if (s->conv[il] && c->e->be->state_get(c->bc, il, s->conv[il], s->ssm[il])) return -1;
    s->pos = c->pos;
    s->mtp_pos = c->mtp_pos;
    return 0;
}

static int snapshot_restore_locked(engine_ctx *c, const engine_snapshot *s) {
    if (s->n_layer != c->e->m.hp.n_layer) return rl_seterr("snapshot belongs to another model");
    if (s->pos > c->n_ctx)
        return rl_seterr("snapshot position %d is beyond the context (%d)", s->pos, c->n_ctx);
    if (s->dev && s->dev != c && snap_materialize((engine_snapshot *)s))
        return -1; /* another context's slot */
    if (s->dev) {
        if (c->e->be->slot_restore(c->bc, s->dev_slot)) return -1;
    } else {
        for (int il = 0; il < s->n_layer; il++)
            if (s->conv[il] && c->e->be->state_set(c->bc, il, s->conv[il], s->ssm[il])) return -1;
    }
    c->pos = s->pos;
    c->mtp_pos = s->mtp_pos < c->mtp_pos ? s->mtp_pos : c->mtp_pos;
    c->hidden_rows = 0;
    return 0;
}

int engine_snapshot_pos(const engine_snapshot *s) { return s->pos; }

void engine_snapshot_free(engine_snapshot *s) {
    if (!s) return;
    snap_detach(s);
    for (int il = 0; il < s->n_layer; il++) {
        if (s->conv) free(s->conv[il]);
        if (s->ssm) free(s->ssm[il]);
    }
    free(s->conv);
    free(s->ssm);
    free(s);
}

/* ---- state export / import --------------------------------------------------------------- */
size_t engine_state_bytes(const engine_ctx *c, int pos) {
    const q3n_hparams *hp = &c->e->m.hp;
    const backend_ops *be = c->e->be;
    if (!be->kv_row_bytes) return 0;
    size_t n = 0, rec = sizeof(float) * (q3n_conv_floats(hp) + q3n_ssm_floats(hp));
    size_t kv = 2 * be->kv_row_bytes(c->bc) * (size_t)pos;
    for (int il = 0; il < hp->n_layer; il++) n += hp->is_attn[il] ? kv : rec;
    return n;
}

const char *engine_state_format(const engine_ctx *c) {
    engine_ctx *m = (engine_ctx *)c;
    const backend_ops *be = c->e->be;
    snprintf(m->state_fmt, sizeof m->state_fmt, "%s/%s", be->name,
             be->kv_format ? be->kv_format(c->bc) : "none");
    return m->state_fmt;
}

/* Export with the recurrent state from snapshot `snap` (or the context's own when NULL) and the
 * KV rows [0, pos) from the context. */
static int state_export(engine_ctx *c, const engine_snapshot *snap, void *buf, size_t n) {
    const q3n_hparams *hp = &c->e->m.hp;
    const backend_ops *be = c->e->be;
    int pos = snap ? snap->pos : c->pos;
    if (!be->kv_get) return rl_seterr("the %s backend cannot export its state", be->name);
    if (snap && (snap->n_layer != hp->n_layer || pos > c->pos))
        return rl_seterr("state export: the snapshot (position %d) does not belong to this context (at %d)",
                         pos, c->pos);
    if (snap && snap_materialize((engine_snapshot *)snap)) return -1;
    if (n != engine_state_bytes(c, pos))
        return rl_seterr("state export: buffer of %zu bytes, need %zu", n, engine_state_bytes(c, pos));
    uint8_t *p = buf;
    size_t kv = be->kv_row_bytes(c->bc) * (size_t)pos, cn = q3n_conv_floats(hp), sn = q3n_ssm_floats(hp);
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->is_attn[il]) {
            if (be->kv_get(c->bc, il, pos, p, p + kv)) return -1;
            p += 2 * kv;
            continue;
        }
        float *conv = (float *)p, *ssm = conv + cn;
        if (snap) {
            memcpy(conv, snap->conv[il], sizeof(float) * cn);
            memcpy(ssm, snap->ssm[il], sizeof(float) * sn);
        } else if (be->state_get(c->bc, il, conv, ssm)) {
            return -1;
        }
        p += sizeof(float) * (cn + sn);
    }
    return 0;
}

/* The public calls that touch a context's backend state, each in one turn (see engine_step). */
#define IN_TURN(c, call)                                                                                     \
    do {                                                                                                     \
        TURN_BEGIN(c);                                                                                       \
        int rc_ = (call);                                                                                    \
        TURN_END(c);                                                                                         \
        return rc_;                                                                                          \
    } while (0)

void engine_reset(engine_ctx *c) {
    TURN_BEGIN(c);
    reset_locked(c);
    TURN_END(c);
}
int engine_verify(engine_ctx *c, const int32_t *tokens, int n, float *logits, engine_snapshot **snaps) {
    IN_TURN(c, verify_locked(c, tokens, n, logits, snaps));
}
int engine_mtp(engine_ctx *c, const float *hidden, const int32_t *next_tokens, int n, float *logits,
               float *hidden_out) {
    IN_TURN(c, mtp_locked(c, hidden, next_tokens, n, logits, hidden_out));
}
int engine_snapshot_save(engine_ctx *c, engine_snapshot *s) { IN_TURN(c, snapshot_save_locked(c, s)); }
int engine_snapshot_restore(engine_ctx *c, const engine_snapshot *s) {
    IN_TURN(c, snapshot_restore_locked(c, s));
}
int engine_state_export(engine_ctx *c, void *buf, size_t n) { IN_TURN(c, state_export(c, NULL, buf, n)); }

int engine_state_export_snapshot(engine_ctx *c, const engine_snapshot *s, void *buf, size_t n) {
    IN_TURN(c, state_export(c, s, buf, n));
}

static int state_import_locked(engine_ctx *c, int pos, const void *buf, size_t n) {
    const q3n_hparams *hp = &c->e->m.hp;
    const backend_ops *be = c->e->be;
    if (!be->kv_set) return rl_seterr("the %s backend cannot import a state", be->name);
    if (pos < 0 || pos > c->n_ctx)
        return rl_seterr("state import: position %d is beyond the context (%d)", pos, c->n_ctx);
    if (n != engine_state_bytes(c, pos))
        return rl_seterr("state import: %zu bytes, need %zu for position %d (state format %s: KV %s)", n,
                         engine_state_bytes(c, pos), pos, engine_state_format(c), engine_kv_format(c));
    const uint8_t *p = buf;
    size_t kv = be->kv_row_bytes(c->bc) * (size_t)pos;
    for (int il = 0; il < hp->n_layer; il++) {
        int rc;
        if (hp->is_attn[il]) {
            rc = be->kv_set(c->bc, il, pos, p, p + kv);
            p += 2 * kv;
        } else {
            const float *conv = (const float *)p, *ssm = conv + q3n_conv_floats(hp);
            rc = be->state_set(c->bc, il, conv, ssm);
            p += sizeof(float) * (q3n_conv_floats(hp) + q3n_ssm_floats(hp));
        }
        if (rc) {
            reset_locked(c);
            return -1;
        }
    }
    c->pos = pos;
    c->mtp_pos = 0;
    c->hidden_rows = 0;
    return 0;
}

int engine_state_import(engine_ctx *c, int pos, const void *buf, size_t n) {
    IN_TURN(c, state_import_locked(c, pos, buf, n));
}

void engine_set_hooks(engine_ctx *c, q3n_dump_fn dump, q3n_route_fn route, void *ud) {
    c->hooks = (backend_hooks){.dump = dump, .route = route, .ud = ud};
}

bool engine_can_set_expert_src(const engine *e) { return e->be->set_expert_src != NULL; }

int engine_set_host_expert_src(engine_ctx *c, const q3n_expert_src *src) {
    if (!c->e->be->set_host_src) return rl_seterr("the %s backend has no VRAM expert tier", c->e->be->name);
    return c->e->be->set_host_src(c->bc, src);
}

void engine_print_backend_stats(engine_ctx *c, FILE *f) {
    if (c->e->be->print_stats) c->e->be->print_stats(c->bc, f);
}

int engine_set_expert_src(engine_ctx *c, const q3n_expert_src *src) {
    if (!c->e->be->set_expert_src)
        return src ? rl_seterr("the %s backend holds every expert in device memory: it takes no expert "
                               "source (cache, "
                               "route bias, profile); use the CPU backend for those",
                               c->e->be->name)
                   : 0;
    c->e->be->set_expert_src(c->bc, src);
    return 0;
}
