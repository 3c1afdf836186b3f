/* session.c — one opened model and one sequence (see session.h).
 *
 * The sequence: `hist` holds the tokens whose K/V rows and recurrent state the context holds
 * (hist.n == engine_pos). Checkpoints are engine snapshots (recurrent state + position) with
 * the tokens before their position. A snapshot only stays usable while the KV rows before its
 * position are the ones it was taken with, so every write of rows [q, q+m) drops the
 * checkpoints whose position is beyond q and whose tokens differ from the new rows (a row's
 * K/V is a function of the tokens up to it: rows rewritten with the same tokens after the same
 * prefix are bit-identical, so those checkpoints stay). Invariant: every kept checkpoint's
 * tokens are what the KV rows [0, pos) were computed from.
 *
 * Generation: one function (gen_emit) takes a sampled token through end-of-generation, the
 * penalty history, text decoding, stop strings, streaming, n_predict, the context end and
 * cancellation; the plain loop below samples, emits and evaluates. A speculative loop drafts
 * and verifies, then emits the accepted tokens through the same function, so the stop
 * conditions and the text are the same whatever the loop. */
#include "run/session.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "cache/expert_cache.h"
#include "run/spec.h"

#define MiB 1048576.0

struct session_model {
    engine *e;
    tokenizer *tok;    /* NULL: the file has none (token ids work, text does not) */
    char tok_err[256]; /* why not */
    int n_sessions;
    gvocab *gv; /* grammar masks: built on first use, under gv_lock */
    pthread_mutex_t gv_lock;
};

typedef struct {
    engine_snapshot *snap; /* NULL: free entry */
    int32_t *toks;         /* tokens [0, pos) */
    int pos;
    uint64_t used; /* LRU stamp */
} checkpoint;

struct session {
    session_model *m;
    engine_ctx *c;
    expert_cache *ec; /* routed-expert source, or NULL (the engine's own source) */
    bool ec_shared;   /* ec belongs to another session (session_params.share_experts) */
    int n_ctx, n_batch, n_vocab, n_sample;
    bool verbose;
    tok_ids hist;  /* tokens the context holds */
    float *logits; /* n_vocab: the row of hist's last token */
    bool have_logits;
    checkpoint *ck;
    int max_ck;
    uint64_t tick;
    float route_bias; /* cache-aware routing asked for (speculation refuses it) */
    spec *sp;         /* speculative decoding state (created on first use) */
    bool vram;        /* the context has a VRAM expert tier (ec, if any, feeds it) */
};

/* ---- model -------------------------------------------------------------------------------- */

session_model *session_model_open(const session_model_params *p) {
    if (!p || !p->model_path) {
        rl_seterr("no model file given");
        return NULL;
    }
    session_model *m = rl_calloc(1, sizeof *m, "model");
    if (!m) return NULL;
    pthread_mutex_init(&m->gv_lock, NULL);
    engine_params ep = {.n_threads = p->n_threads,
                        .backend = p->backend,
                        .reference = p->reference,
                        .iq_repack = p->iq_repack,
                        .map_weights = p->map_weights};
    if (!(m->e = engine_open(p->model_path, &ep))) {
        session_model_close(m);
        return NULL;
    }
    if (!(m->tok = tokenizer_load(engine_gguf(m->e)))) {
        snprintf(m->tok_err, sizeof m->tok_err, "%s", rl_lasterr());
        rl_clearerr();
    }
    return m;
}

void session_model_close(session_model *m) {
    if (!m) return;
    if (m->n_sessions)
        fprintf(stderr, "redlite: bug: model closed with %d sessions still open\n", m->n_sessions);
    tokenizer_free(m->tok);
    gvocab_free(m->gv);
    pthread_mutex_destroy(&m->gv_lock);
    engine_close(m->e);
    free(m);
}

const gvocab *session_model_gvocab(session_model *m) {
    if (!m->tok) {
        rl_seterr("constrained decoding needs the model's tokenizer: %s", m->tok_err);
        return NULL;
    }
    pthread_mutex_lock(&m->gv_lock);
    if (!m->gv) m->gv = gvocab_new(m->tok);
    gvocab *v = m->gv;
    pthread_mutex_unlock(&m->gv_lock);
    return v;
}

engine *session_model_engine(const session_model *m) { return m->e; }
const tokenizer *session_model_tokenizer(const session_model *m) {
    if (!m->tok) rl_seterr("%s", m->tok_err);
    return m->tok;
}

/* ---- session ------------------------------------------------------------------------------ */

/* Plan and install the routed-expert source that p->cache_spec asks for. A backend that keeps
 * every expert resident itself (CUDA) gets no cache at all: "auto"/"full" are what it does
 * anyway, anything that needs a host-side source is refused with a clear error. With a VRAM
 * tier (--vram-mib, and not every expert fit) the cache is the host tier its slots are filled
 * from (disk -> RAM -> VRAM). */
static int attach_experts(session *s, const session_params *p) {
    engine *e = s->m->e;
    if (p->share_experts) { /* another sequence's cache: one budget, one set of slots for both */
        const session *o = p->share_experts;
        if (o->m != s->m) return rl_seterr("session: share_experts names a session of another model");
        s->vram = p->vram_spec != NULL && engine_set_host_expert_src(s->c, NULL) == 0;
        if (!o->ec) return 0;
        s->ec = o->ec;
        s->ec_shared = true;
        q3n_expert_src src = expert_cache_src(s->ec);
        return s->vram ? engine_set_host_expert_src(s->c, &src) : engine_set_expert_src(s->c, &src);
    }
    const q3n_model *m = engine_model(e);
    const char *spec = p->cache_spec && *p->cache_spec ? p->cache_spec : "auto";
    /* VRAM tier (slots, not everything fit): this cache becomes the host tier feeding it */
    const bool vram = p->vram_spec != NULL && engine_set_host_expert_src(s->c, NULL) == 0;
    s->vram = vram;
    if (!m->hp.moe) { /* a dense model (qwen35) has no routed experts: nothing to cache */
        if ((strcmp(spec, "auto") && strcmp(spec, "full") && strcmp(spec, "mmap")) || p->route_bias > 0 ||
            p->route_trace)
            return rl_seterr(
                "--cache-mib / --route-bias / --route-trace: this dense model has no routed experts");
        return 0;
    }
    if (p->vram_spec && p->verbose) engine_print_backend_stats(s->c, stderr); /* the VRAM plan */
    if (vram && (p->route_bias > 0 || p->route_trace))
        return rl_seterr("--route-bias / --route-trace need the CPU backend (not with --vram-mib)");
    if (!engine_can_set_expert_src(e) && !vram) {
        if (strcmp(spec, "auto") && strcmp(spec, "full"))
            return rl_seterr(
                "--cache-mib %s: the %s backend keeps every expert in device memory; use --cache-mib "
                "auto or full (or --backend cpu)",
                spec, engine_backend_name(e));
        if (p->route_bias > 0 || p->route_trace)
            return rl_seterr(
                "--route-bias / --route-trace need the CPU backend (the %s backend keeps every expert "
                "in device memory)",
                engine_backend_name(e));
        if (p->verbose)
            fprintf(stderr, "expert cache: none; the %s backend holds every expert\n",
                    engine_backend_name(e));
        return 0;
    }
    /* --iq-repack: every repacked expert is resident in the model's own views, which the engine's
     * default source serves (mmap: experts without a lookup-free form still fault in from the file);
     * the cache's slots and its full mode would read the file's layout */
    char rp[256];
    if (engine_repack_describe(e, rp, sizeof rp)) {
        if (strcmp(spec, "auto") && strcmp(spec, "full") && strcmp(spec, "mmap"))
            return rl_seterr(
                "--cache-mib %s: --iq-repack keeps every repacked expert resident in memory; use --cache-mib "
                "auto, full or mmap (or drop --iq-repack for a bounded cache)",
                spec);
        if (p->route_bias > 0 || p->route_trace)
            return rl_seterr(
                "--route-bias / --route-trace need the expert cache, which --iq-repack replaces");
        if (p->verbose) fprintf(stderr, "expert cache: none; %s\n", rp);
        return 0;
    }
    ec_plan plan;
    engine_mem mem = {0};
    uint64_t work = engine_mem_info(s->c, &mem) == 0 ? mem.scratch_bytes : 0;
    const ec_params *tuned = &engine_tuning(e)->cache; /* the RL_CACHE_* switches (run/tuning.h) */
    if (expert_cache_plan(m, 0, 0, s->n_ctx, work, spec, tuned->io, vram, &plan)) return -1;
    if (p->verbose) {
        if (plan.mode == EC_FULL) /* mapped or copied: the reason says which */
            fprintf(stderr, "expert cache: every expert stays in memory (%s)\n", plan.reason);
        else if (plan.mode == EC_BOUNDED)
            fprintf(stderr,
                    "expert cache: %.0f MiB keep the most used experts, the others are read from the file "
                    "when needed (%s)\n",
                    plan.budget / MiB, plan.reason);
        else
            fprintf(stderr, "expert cache: none; the experts are paged in from the file mapping (%s)\n",
                    plan.reason);
        if (p->route_bias > 0)
            fprintf(stderr,
                    plan.mode == EC_BOUNDED
                        ? "expert cache: cache-aware routing, bias %.2f: outputs differ from exact routing\n"
                        : "expert cache: --route-bias %.2f ignored: every expert is resident\n",
                    p->route_bias);
    }
    /* full residency on the CPU: the experts go to huge-page memory (resident.h) instead of staying
     * in the mapping (the cache then serves those copies and preloads nothing); a mapped plan keeps
     * them in the page cache (the cache preloads the mapping) */
    if (plan.mode == EC_FULL && plan.mapped) engine_note_experts_mapped(e, "auto: the file nearly fills RAM");
    else if (plan.mode == EC_FULL && !vram) {
        const double t0 = rl_now();
        const int rc = engine_copy_experts(e, p->progress || p->verbose);
        if (p->verbose && rc == 0)
            fprintf(stderr, "expert cache: the experts were copied to memory (%.2f s)\n", rl_now() - t0);
        else if (p->verbose)
            fprintf(stderr, "expert cache: the experts stay in the file mapping: %s\n", rl_lasterr());
        rl_clearerr();
    }
    ec_params ecp = *tuned;
    ecp.budget = plan.budget;
    ecp.route_bias = p->route_bias;
    if (p->route_trace) ecp.trace_path = p->route_trace; /* --route-trace wins over RL_ROUTE_TRACE */
    ecp.progress = p->progress || p->verbose;
    if (!(s->ec = expert_cache_new(m, plan.mode, &ecp))) return -1;
    q3n_expert_src src = expert_cache_src(s->ec);
    return vram ? engine_set_host_expert_src(s->c, &src) : engine_set_expert_src(s->c, &src);
}

session *session_new(session_model *m, const session_params *p) {
    session_params dp = {0};
    if (!p) p = &dp;
    if (p->n_ctx < 0 || p->n_batch < 0 || p->max_checkpoints < -1) {
        rl_seterr("session: negative context, batch or checkpoint count");
        return NULL;
    }
    if (p->route_bias < 0) {
        rl_seterr("--route-bias must be >= 0, got %g", p->route_bias);
        return NULL;
    }
    session *s = rl_calloc(1, sizeof *s, "session");
    if (!s) return NULL;
    s->m = m;
    m->n_sessions++; /* session_free decrements */
    s->verbose = p->verbose;
    s->route_bias = p->route_bias;
    s->max_ck = p->max_checkpoints < 0 ? 0 : p->max_checkpoints ? p->max_checkpoints : 8;
    const q3n_hparams *hp = engine_hparams(m->e);
    s->n_vocab = hp->n_vocab;
    s->n_sample = m->tok && tokenizer_n_vocab(m->tok) < hp->n_vocab ? tokenizer_n_vocab(m->tok) : hp->n_vocab;
    engine_ctx_params cp = {.n_ctx = p->n_ctx,
                            .n_batch = p->n_batch,
                            .kv = p->kv,
                            .vram_spec = p->vram_spec,
                            .vram_pin = p->vram_pin,
                            .vram_miss = p->vram_miss};
    if (!(s->c = engine_ctx_new(m->e, &cp))) goto fail;
    s->n_ctx = engine_n_ctx(s->c);
    s->n_batch = engine_n_batch(s->c);
    s->logits = rl_malloc(sizeof(float) * (size_t)s->n_vocab, "logits");
    s->ck = rl_calloc((size_t)s->max_ck + 1, sizeof *s->ck, "checkpoints");
    if (!s->logits || !s->ck || attach_experts(s, p)) goto fail;
    return s;
fail:
    session_free(s);
    return NULL;
}

static void ck_drop(checkpoint *k) {
    engine_snapshot_free(k->snap);
    free(k->toks);
    memset(k, 0, sizeof *k);
}

void session_free(session *s) {
    if (!s) return;
    spec_free(s->sp);
    for (int i = 0; s->ck && i < s->max_ck; i++) ck_drop(&s->ck[i]);
    free(s->ck);
    if (s->c) {
        if (s->ec && s->vram) engine_set_host_expert_src(s->c, NULL);
        else if (s->ec) engine_set_expert_src(s->c, NULL);
        engine_ctx_free(s->c);
    }
    if (!s->ec_shared) expert_cache_free(s->ec);
    tok_ids_free(&s->hist);
    free(s->logits);
    s->m->n_sessions--;
    free(s);
}

engine_ctx *session_ctx(const session *s) { return s->c; }
const tokenizer *session_tokenizer(const session *s) { return s->m->tok; }
const q3n_hparams *session_hparams(const session *s) { return engine_hparams(s->m->e); }
int session_n_ctx(const session *s) { return s->n_ctx; }
int session_n_batch(const session *s) { return s->n_batch; }
expert_cache *session_expert_cache(const session *s) { return s->ec; }

const int32_t *session_history(const session *s, int *n) {
    if (n) *n = (int)s->hist.n;
    return s->hist.ids;
}

const float *session_logits(const session *s) { return s->have_logits && s->hist.n ? s->logits : NULL; }

void session_reset(session *s) {
    engine_reset(s->c);
    s->hist.n = 0;
    s->have_logits = false;
}

/* ---- the sequence ------------------------------------------------------------------------- */

/* Rows [q, q+m) are about to hold tokens t[0..m) (after hist[0..q)): drop the checkpoints this
 * invalidates (see the file comment). */
static void ck_invalidate(session *s, int q, const int32_t *t, int m) {
    for (int i = 0; i < s->max_ck; i++) {
        checkpoint *k = &s->ck[i];
        if (!k->snap || k->pos <= q) continue;
        int end = k->pos < q + m ? k->pos : q + m;
        if (memcmp(k->toks + q, t, sizeof(int32_t) * (size_t)(end - q)) != 0) ck_drop(k);
    }
}

/* Append evaluated tokens to the history (after ck_invalidate and a successful forward). */
static int hist_append(session *s, const int32_t *t, int m) {
    for (int i = 0; i < m; i++)
        if (tok_ids_push(&s->hist, t[i])) return rl_seterr("out of memory (sequence tokens)");
    return 0;
}

/* Checkpoint of the current state (position hist.n). A failure only costs the reuse. */
static void ck_take(session *s) {
    int pos = (int)s->hist.n, slot = -1;
    if (pos == 0 || s->max_ck == 0) return;
    for (int i = 0; i < s->max_ck; i++) {
        checkpoint *k = &s->ck[i];
        if (k->snap && k->pos == pos && !memcmp(k->toks, s->hist.ids, sizeof(int32_t) * (size_t)pos)) {
            k->used = ++s->tick; /* already held */
            return;
        }
    }
    for (int i = 0; i < s->max_ck && slot < 0; i++)
        if (!s->ck[i].snap) slot = i;
    if (slot < 0) { /* least recently used */
        slot = 0;
        for (int i = 1; i < s->max_ck; i++)
            if (s->ck[i].used < s->ck[slot].used) slot = i;
    }
    checkpoint *k = &s->ck[slot];
    engine_snapshot *snap = k->snap; /* reuse the evicted entry's buffers */
    free(k->toks);
    k->snap = NULL;
    k->toks = NULL;
    if (!snap && !(snap = engine_snapshot_new(s->c))) goto fail;
    if (!(k->toks = malloc(sizeof(int32_t) * (size_t)pos))) goto fail;
    if (engine_snapshot_save(s->c, snap)) goto fail;
    memcpy(k->toks, s->hist.ids, sizeof(int32_t) * (size_t)pos);
    k->snap = snap;
    k->pos = pos;
    k->used = ++s->tick;
    return;
fail:
    engine_snapshot_free(snap);
    free(k->toks);
    memset(k, 0, sizeof *k);
    if (s->verbose)
        fprintf(stderr, "session: no checkpoint at %d (%s); prefix reuse is smaller\n", pos, rl_lasterr());
}

int session_match(const session *s, const int32_t *tokens, int n) {
    int held = (int)s->hist.n, L = 0;
    while (L < held && L < n && s->hist.ids[L] == tokens[L]) L++;
    /* the held state continues only from its end (the recurrent state is at held) */
    int best = L == held && held <= n - 1 ? held : 0;
    for (int i = 0; i < s->max_ck; i++) {
        const checkpoint *k = &s->ck[i];
        if (k->snap && k->pos <= n - 1 && k->pos > best &&
            !memcmp(k->toks, tokens, sizeof(int32_t) * (size_t)k->pos))
            best = k->pos;
    }
    return best > 0 ? best : 0;
}

/* Distance between two checkpoints taken in one feed: every chunk boundary would cost a state
 * copy per chunk (tens of MB on a real model, device-to-host on CUDA) and churn the LRU. */
static int ck_interval(const session *s) { return s->n_batch > 512 ? s->n_batch : 512; }

int session_feed(session *s, const int32_t *tokens, int n, const session_feed_opts *o,
                 session_feed_stats *st) {
    double t0 = rl_now();
    session_feed_stats dummy;
    if (!st) st = &dummy;
    memset(st, 0, sizeof *st);
    st->n_tokens = n;
    if (n < 1 || !tokens) return rl_seterr("empty prompt: nothing to evaluate");
    if (n > s->n_ctx)
        return rl_seterr("the prompt has %d tokens, more than the context (%d): raise --ctx", n, s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return rl_seterr("token id %d at %d is outside the vocabulary (0..%d)", tokens[i], i,
                             s->n_vocab - 1);
    /* where to start: the longest of the held sequence (when it is a prefix and leaves at
     * least the last token to evaluate) and the checkpoints whose tokens are a prefix */
    int held = (int)s->hist.n, L = 0;
    while (L < held && L < n && s->hist.ids[L] == tokens[L]) L++;
    int from = L == held && held <= n - 1 ? held : -1;
    checkpoint *best = NULL;
    for (int i = 0; i < s->max_ck; i++) {
        checkpoint *k = &s->ck[i];
        if (!k->snap || k->pos > n - 1 || k->pos <= from || (best && k->pos <= best->pos)) continue;
        if (!memcmp(k->toks, tokens, sizeof(int32_t) * (size_t)k->pos)) best = k;
    }
    if (best || from < 0) {
        s->have_logits = false;
        if (best && engine_snapshot_restore(s->c, best->snap) == 0) {
            best->used = ++s->tick;
            from = best->pos;
        } else {
            engine_reset(s->c);
            from = 0;
        }
        s->hist.n = (size_t)from;
    }
    st->n_reused = from;
    /* evaluate [from, n) in chunks of n_batch rows (as engine_prefill would); checkpoints at
     * chunk boundaries every ck_interval tokens, before the last chunk and at the end */
    int last_ck = from, total = n - from;
    if (o && o->progress) o->progress(o->ud, 0, total, rl_now() - t0); /* what is left to evaluate, at once */
    for (int i = from; i < n;) {
        if (o && o->cancel && *o->cancel) {
            s->have_logits = false;
            st->seconds = rl_now() - t0;
            return rl_seterr("cancelled");
        }
        int m = n - i < s->n_batch ? n - i : s->n_batch;
        bool last = i + m == n;
        if (last && i > last_ck) ck_take(s); /* a re-run of this prompt restarts here */
        ck_invalidate(s, i, tokens + i, m);
        s->have_logits = false;
        if (engine_prefill(s->c, tokens + i, m, last ? s->logits : NULL)) {
            st->seconds = rl_now() - t0;
            return -1;
        }
        if (hist_append(s, tokens + i, m)) return -1;
        i += m;
        st->n_evaluated += m;
        if (!last && i - last_ck >= ck_interval(s)) {
            ck_take(s);
            last_ck = i;
        }
        if (o && o->progress) o->progress(o->ud, i - from, total, rl_now() - t0);
    }
    s->have_logits = true;
    ck_take(s);
    st->seconds = rl_now() - t0;
    return 0;
}

int session_adopt(session *s, const int32_t *tokens, int n) {
    if (n < 0 || n > s->n_ctx || n != engine_pos(s->c)) {
        session_reset(s);
        return rl_seterr("session_adopt: %d tokens for a context at position %d", n, engine_pos(s->c));
    }
    ck_invalidate(s, 0, tokens, n);
    s->hist.n = 0;
    s->have_logits = false;
    if (hist_append(s, tokens, n)) {
        session_reset(s);
        return -1;
    }
    return 0;
}

/* ---- generation --------------------------------------------------------------------------- */

const char *session_reason_name(session_reason r) {
    static const char *const names[] = {"eog", "length", "stop", "context", "cancelled", "error"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

/* The state of one session_generate call: what gen_emit needs. */
typedef struct {
    session *s;
    const session_gen_params *gp;
    sampler *smp;
    tokdec dec;
    stopper stop;
    session_gen_result *out;
    gmatch *gm; /* constrained decoding (gp->grammar), or NULL */
} gen_state;

static int out_text(gen_state *g, int32_t token, const char *t, size_t n, bool *cancel) {
    session_gen_result *r = g->out;
    if (n) {
        char *p = realloc(r->text, r->text_len + n + 1);
        if (!p) return rl_seterr("out of memory (generated text)");
        r->text = p;
        memcpy(r->text + r->text_len, t, n);
        r->text_len += n;
        r->text[r->text_len] = 0;
    }
    if (g->gp->on_text && (n || token >= 0) && g->gp->on_text(g->gp->ud, token, n ? t : "", n))
        *cancel = true;
    return 0;
}

/* Emit a sampled token that would be evaluated at position pos: 0 = continue (the caller
 * evaluates it, then samples the next one), 1 = generation ends here (out->reason set; the
 * token, if emitted, is not evaluated), -1 = error. The one path every emitted token takes,
 * whatever loop produced it (a speculative loop's pos runs ahead of hist.n inside a verify). */
static int gen_emit(gen_state *g, int32_t t, int pos) {
    session_gen_result *r = g->out;
    const session_gen_params *gp = g->gp;
    if (t < 0 || tokenizer_is_eog(g->s->m->tok, t)) {
        r->reason = SESSION_EOG;
        return 1;
    }
    if (gp->on_logprobs && sampler_last_logprobs(g->smp))
        gp->on_logprobs(gp->ud, sampler_last_logprobs(g->smp));
    if (tok_ids_push(&r->ids, t)) return rl_seterr("out of memory (generated tokens)");
    sampler_accept(g->smp, t);
    if (g->gm && gmatch_accept(g->gm, t)) return -1; /* the mask allowed it: a bug if this fails */
    size_t n, out_n;
    const char *piece = tokdec_push(&g->dec, t, &n), *out;
    if (!piece) return rl_seterr("out of memory (decoding)");
    bool hit = stopper_push(&g->stop, piece, n, &out, &out_n), cancel = false;
    if (out_text(g, t, out, out_n, &cancel)) return -1;
    if (hit) {
        r->reason = SESSION_STOP;
        return 1;
    }
    if (cancel) {
        r->reason = SESSION_CANCELLED;
        return 1;
    }
    if (g->gm && gmatch_done(g->gm)) { /* the sentence is complete and nothing may follow */
        r->reason = SESSION_EOG;
        return 1;
    }
    if (gp->n_predict >= 0 && (long long)r->ids.n >= gp->n_predict) {
        r->reason = SESSION_LENGTH;
        return 1;
    }
    if (pos >= g->s->n_ctx) {
        r->reason = SESSION_CONTEXT;
        return 1;
    }
    if (gp->cancel && *gp->cancel) {
        r->reason = SESSION_CANCELLED;
        return 1;
    }
    return 0;
}

/* End of generation: release the text held back (an incomplete UTF-8 sequence, a possible
 * stop-string prefix) unless a stop string ended it. */
static int gen_finish(gen_state *g) {
    session_gen_result *r = g->out;
    if (r->reason == SESSION_STOP) return 0;
    size_t n, out_n = 0;
    const char *tail = tokdec_flush(&g->dec, &n), *out = "";
    bool cancel = false;
    if (tail && n && stopper_push(&g->stop, tail, n, &out, &out_n)) {
        r->reason = SESSION_STOP;
        return out_text(g, -1, out, out_n, &cancel);
    }
    if (out_n && out_text(g, -1, out, out_n, &cancel)) return -1;
    stopper_flush(&g->stop, &out, &out_n);
    return out_n ? out_text(g, -1, out, out_n, &cancel) : 0;
}

/* Evaluate an emitted token (the next position). */
static int gen_eval(session *s, int32_t t) {
    int q = (int)s->hist.n;
    ck_invalidate(s, q, &t, 1);
    s->have_logits = false;
    if (engine_step(s->c, t, s->logits)) return -1;
    if (hist_append(s, &t, 1)) return -1;
    s->have_logits = true;
    return 0;
}

/* The plain loop: sample from the last row, emit, evaluate. */
static int gen_plain(gen_state *g) {
    session *s = g->s;
    for (;;) {
        if (g->gp->cancel && *g->gp->cancel) {
            g->out->reason = SESSION_CANCELLED;
            return 0;
        }
        int r = gen_emit(g, sampler_sample(g->smp, s->logits), (int)s->hist.n);
        if (r) return r < 0 ? -1 : 0;
        if (gen_eval(s, g->out->ids.ids[g->out->ids.n - 1])) return -1;
    }
}

/* The speculative loop (src/run/spec.h): it drafts and verifies; every sampled token goes through
 * gen_emit, the rows a step or verify writes drop the checkpoints they overwrite, and the kept
 * rows join the history, so the tokens, the text and the sequence equal gen_plain's. */
static int spec_emit(void *ud, int32_t t, int pos) { return gen_emit(ud, t, pos); }
static void spec_will_write(void *ud, int pos, const int32_t *t, int n) {
    gen_state *g = ud;
    ck_invalidate(g->s, pos, t, n);
}
static int spec_kept(void *ud, const int32_t *t, int n) { return hist_append(((gen_state *)ud)->s, t, n); }

static int gen_spec(gen_state *g) {
    session *s = g->s;
    const session_gen_params *gp = g->gp;
    _Static_assert((int)SPEC_LOOKUP == SPEC_DRAFT_LOOKUP && (int)SPEC_MTP == SPEC_DRAFT_MTP &&
                       (int)SPEC_AUTO == SPEC_DRAFT_AUTO,
                   "spec_mode values");
    if (s->route_bias > 0 && s->ec && expert_cache_mode(s->ec) == EC_BOUNDED)
        return rl_seterr(
            "speculative decoding needs exact routing: --route-bias picks experts from the cache "
            "state, which a verify changes in another order than steps (use --spec none, or drop "
            "--route-bias)");
    if (!s->sp && !(s->sp = spec_new(s->m->e, s->c))) return -1;
    if (gp->cancel && *gp->cancel) {
        g->out->reason = SESSION_CANCELLED;
        return 0;
    }
    spec_params p = {.mode = (int)gp->spec,
                     .draft_max = gp->draft_max,
                     .draft_min = gp->draft_min,
                     .n_predict = gp->n_predict};
    spec_sink sink = {.emit = spec_emit, .will_write = spec_will_write, .kept = spec_kept, .ud = g};
    spec_result r;
    int rc = spec_run(s->sp, g->smp, s->logits, s->hist.ids, (int)s->hist.n, &p, &sink, &r);
    g->out->n_drafted = r.n_drafted;
    g->out->n_accepted = r.n_accepted;
    g->out->n_verifies = r.n_verifies;
    return rc;
}

/* Grammar and log-probabilities for one call: the matcher (its budget: the tokens n_predict and
 * the context leave) becomes the sampler's mask. 0 or -1. */
static int gen_constrain(gen_state *g) {
    const session_gen_params *gp = g->gp;
    if (gp->on_logprobs) sampler_set_logprobs(g->smp, gp->top_logprobs);
    if (!gp->grammar) return 0;
    const gvocab *v = session_model_gvocab(g->s->m);
    if (!v || !(g->gm = gmatch_new(gp->grammar, v))) return -1;
    long long left = (long long)g->s->n_ctx - (long long)g->s->hist.n + 1;
    if (gp->n_predict >= 0 && gp->n_predict < left) left = gp->n_predict;
    gmatch_set_budget(g->gm, left);
    sampler_mask mk = gmatch_sampler_mask(g->gm);
    sampler_set_mask(g->smp, &mk);
    return 0;
}

int session_generate(session *s, const session_gen_params *gp, session_gen_result *out) {
    memset(out, 0, sizeof *out);
    out->reason = SESSION_ERROR;
    if (!session_logits(s)) return rl_seterr("nothing to continue: feed a prompt first");
    if (!s->m->tok) return rl_seterr("cannot generate text: %s", s->m->tok_err);
    if (!(out->text = calloc(1, 1))) return rl_seterr("out of memory (generated text)");
    double t0 = rl_now();
    int rc = -1;
    gen_state g = {.s = s, .gp = gp, .out = out, .smp = gp->smp};
    tokdec_init(&g.dec, s->m->tok, gp->decode_flags);
    if (stopper_init(&g.stop, gp->stops, gp->n_stops)) {
        tokdec_free(&g.dec);
        return rl_seterr("out of memory (stop strings)");
    }
    if (!g.smp) {
        sampler_params sp = gp->sp;
        if (sp.repeat_last_n < 0) sp.repeat_last_n = s->n_ctx;
        if (!(g.smp = sampler_new(&sp, s->n_sample))) goto done;
    }
    out->seed = sampler_seed(g.smp);
    if (gen_constrain(&g)) goto fail;
    /* the penalty history is the sequence */
    sampler_reset(g.smp);
    for (size_t i = 0; i < s->hist.n; i++) sampler_accept(g.smp, s->hist.ids[i]);
    out->reason = SESSION_LENGTH;
    engine_ctx_decoding(s->c, true); /* steps of other sequences' decode loops may share forwards */
    int grc = gp->n_predict != 0 && (gp->spec == SPEC_NONE ? gen_plain(&g) : gen_spec(&g));
    engine_ctx_decoding(s->c, false);
    if (grc) goto fail;
    if (gen_finish(&g)) goto fail;
    rc = 0;
    goto done;
fail:
    out->reason = SESSION_ERROR;
done:
    out->seconds = rl_now() - t0;
    if (g.smp) {
        sampler_set_mask(g.smp, NULL);
        sampler_set_logprobs(g.smp, -1);
    }
    gmatch_free(g.gm);
    if (g.smp && g.smp != gp->smp) sampler_free(g.smp);
    tokdec_free(&g.dec);
    stopper_free(&g.stop);
    return rc;
}

void session_gen_result_free(session_gen_result *r) {
    if (!r) return;
    tok_ids_free(&r->ids);
    free(r->text);
    r->text = NULL;
    r->text_len = 0;
}

/* ---- statistics --------------------------------------------------------------------------- */

void session_print_cache_stats(const session *s, FILE *f, bool weights) {
    if (weights)
        engine_weights_print(s->m->e, f, "weights: "); /* where the streamed weights live (resident.h) */
    if (s->ec) expert_cache_print_stats(s->ec, f);
    engine_print_backend_stats(s->c, f); /* the VRAM tier's plan and counters, if any */
}
