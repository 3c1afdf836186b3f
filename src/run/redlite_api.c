/* redlite_api.c — the public C API (include/redlite.h) over the session layer (run/session.h).
 *
 * A thin translation: the public structs carry their own size (a caller compiled against an
 * older header passes a shorter struct; the fields it lacks keep their defaults), the handles
 * wrap a session_model / session, and the feed appends to the sequence (session_feed brings the
 * context to exactly a token list, so the wrapper keeps that list). The token session_generate
 * emits last is not evaluated (session.h): it is kept as `pending` and goes in front of the
 * next feed, so feed / generate / feed continues one sequence. Only redlite_* symbols leave
 * libredlite.so (src/run/redlite.map). */
#include <redlite.h>

#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "run/session.h"

struct redlite_model {
    session_model *m;
};

struct redlite_session {
    redlite_model *model;
    session *s;
    tok_ids seq;  /* the sequence: what the context holds, then the pending token, if any */
    bool pending; /* seq's last token was emitted but not evaluated yet */
};

const char *redlite_version(void) { return REDLITE_VERSION_STRING; }
int redlite_abi_version(void) { return REDLITE_ABI_VERSION; }
const char *redlite_last_error(void) { return rl_lasterr(); }
void redlite_free(void *p) { free(p); }

/* Copy the first `size` bytes a caller's struct covers over the defaults (its fields beyond
 * that, from a newer header, stay default). size 0 or larger than ours: take what we know. */
static void take_params(void *dst, size_t ours, const void *src, size_t theirs) {
    if (!src) return;
    size_t n = theirs && theirs < ours ? theirs : ours;
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t), n - sizeof(size_t));
}

/* ---- model ------------------------------------------------------------------------------- */

void redlite_model_params_init(redlite_model_params *p) {
    memset(p, 0, sizeof *p);
    p->size = sizeof *p;
    p->backend = "cpu";
}

redlite_model *redlite_model_open(const char *path, const redlite_model_params *params) {
    redlite_model_params p;
    redlite_model_params_init(&p);
    take_params(&p, sizeof p, params, params ? params->size : 0);
    if (!path) {
        rl_seterr("redlite_model_open: no model path");
        return NULL;
    }
    redlite_model *m = calloc(1, sizeof *m);
    if (!m) {
        rl_seterr("out of memory");
        return NULL;
    }
    m->m = session_model_open(
        &(session_model_params){.model_path = path, .backend = p.backend, .n_threads = p.n_threads});
    if (!m->m) {
        free(m);
        return NULL;
    }
    return m;
}

void redlite_model_close(redlite_model *m) {
    if (!m) return;
    session_model_close(m->m);
    free(m);
}

int redlite_model_n_vocab(const redlite_model *m) {
    return engine_hparams(session_model_engine(m->m))->n_vocab;
}

int redlite_model_n_ctx_train(const redlite_model *m) {
    return engine_hparams(session_model_engine(m->m))->n_ctx_train;
}

int redlite_tokenize(const redlite_model *m, const char *text, size_t len, int parse_special, int32_t *out,
                     int cap) {
    const tokenizer *t = session_model_tokenizer(m->m);
    if (!t) return -1;
    tok_ids ids = {0};
    if (tokenizer_encode(t, text ? text : "", text ? len : 0, parse_special ? TOK_PARSE_SPECIAL : 0, &ids)) {
        tok_ids_free(&ids);
        return -1;
    }
    if (ids.n > (size_t)INT32_MAX) {
        tok_ids_free(&ids);
        return rl_seterr("redlite_tokenize: text too long");
    }
    for (size_t i = 0; i < ids.n && (int)i < cap; i++) out[i] = ids.ids[i];
    int n = (int)ids.n;
    tok_ids_free(&ids);
    return n;
}

char *redlite_detokenize(const redlite_model *m, const int32_t *ids, int n) {
    const tokenizer *t = session_model_tokenizer(m->m);
    char *out = NULL;
    size_t len = 0;
    if (!t || n < 0 || tokenizer_decode(t, ids, (size_t)n, TOK_DECODE_REPLACE, &out, &len)) return NULL;
    return out;
}

/* ---- session ----------------------------------------------------------------------------- */

void redlite_session_params_init(redlite_session_params *p) {
    memset(p, 0, sizeof *p);
    p->size = sizeof *p;
}

redlite_session *redlite_session_new(redlite_model *m, const redlite_session_params *params) {
    redlite_session_params p;
    redlite_session_params_init(&p);
    take_params(&p, sizeof p, params, params ? params->size : 0);
    redlite_session *s = calloc(1, sizeof *s);
    if (!s) {
        rl_seterr("out of memory");
        return NULL;
    }
    s->model = m;
    /* no checkpoints: the sequence only grows between resets, so every feed extends the history */
    s->s = session_new(m->m, &(session_params){.n_ctx = p.n_ctx,
                                               .n_batch = p.n_batch,
                                               .kv = p.kv,
                                               .cache_spec = p.cache,
                                               .max_checkpoints = -1});
    if (!s->s) {
        free(s);
        return NULL;
    }
    return s;
}

void redlite_session_free(redlite_session *s) {
    if (!s) return;
    session_free(s->s);
    tok_ids_free(&s->seq);
    free(s);
}

void redlite_session_reset(redlite_session *s) {
    session_reset(s->s);
    s->seq.n = 0;
    s->pending = false;
}

int redlite_session_n_past(const redlite_session *s) { return (int)s->seq.n; }

int redlite_feed_tokens(redlite_session *s, const int32_t *ids, int n) {
    if (n < 0) return rl_seterr("redlite_feed_tokens: negative count");
    if (n == 0 && !s->pending) return 0;
    const size_t had = s->seq.n;
    if (had + (size_t)n + 1 > (size_t)session_n_ctx(s->s))
        return rl_seterr(
            "the sequence (%zu + %d tokens) does not fit the context (%d): reset the session, or "
            "create it with a larger n_ctx",
            had, n, session_n_ctx(s->s));
    for (int i = 0; i < n; i++)
        if (tok_ids_push(&s->seq, ids[i])) {
            s->seq.n = had;
            return rl_seterr("out of memory");
        }
    session_feed_stats st;
    if (session_feed(s->s, s->seq.ids, (int)s->seq.n, &(session_feed_opts){0}, &st)) {
        int held = 0;
        session_history(s->s, &held); /* what completed stays: the sequence is that */
        s->seq.n = (size_t)held;
        s->pending = false;
        return -1;
    }
    s->pending = false;
    return 0;
}

int redlite_feed_text(redlite_session *s, const char *text) {
    const tokenizer *t = session_model_tokenizer(s->model->m);
    if (!t) return -1;
    tok_ids ids = {0}; /* tokenised once (special tokens parsed), fed as it is */
    int rc = tokenizer_encode(t, text ? text : "", text ? strlen(text) : 0, TOK_PARSE_SPECIAL, &ids) ? -1 : 0;
    if (!rc && ids.n > (size_t)INT32_MAX) rc = rl_seterr("redlite_feed_text: text too long");
    if (!rc && ids.n) rc = redlite_feed_tokens(s, ids.ids, (int)ids.n);
    tok_ids_free(&ids);
    return rc;
}

/* ---- generation -------------------------------------------------------------------------- */

void redlite_gen_params_init(redlite_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->size = sizeof *p;
    const sampler_params d = sampler_default_params();
    p->n_predict = -1;
    p->temperature = 0;
    p->top_k = d.top_k;
    p->top_p = d.top_p;
    p->min_p = d.min_p;
    p->seed = SAMPLER_SEED_RANDOM;
}

typedef struct {
    redlite_text_cb cb;
    void *ud;
    bool stopped; /* the callback asked to stop */
} gen_cb;

static int on_text(void *ud, int32_t token, const char *text, size_t n) {
    gen_cb *g = ud;
    if (!g->cb || !g->cb(g->ud, token, text, n)) return 0;
    g->stopped = true;
    return 1;
}

int redlite_generate(redlite_session *s, const redlite_gen_params *params, redlite_text_cb cb,
                     void *user_data) {
    redlite_gen_params p;
    redlite_gen_params_init(&p);
    take_params(&p, sizeof p, params, params ? params->size : 0);
    if (s->pending && redlite_feed_tokens(s, NULL, 0)) return -1; /* the last answer's last token */
    if (!session_logits(s->s)) return rl_seterr("redlite_generate: feed a prompt first");
    sampler_params sp = sampler_default_params();
    sp.temp = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    sp.seed = p.seed;
    gen_cb g = {cb, user_data, false};
    session_gen_params gp = {
        .sp = sp, .n_predict = p.n_predict, .on_text = on_text, .ud = &g, .decode_flags = TOK_DECODE_REPLACE};
    session_gen_result r = {0};
    const size_t before = s->seq.n;
    int rc = session_generate(s->s, &gp, &r);
    if (!rc) {
        /* the context holds the emitted tokens, but for the last one when the loop ended without
         * evaluating it (length, callback): that one is pending, evaluated by the next feed */
        int held = 0;
        const int32_t *h = session_history(s->s, &held);
        s->seq.n = 0;
        for (int i = 0; i < held && !rc; i++) rc = tok_ids_push(&s->seq, h[i]);
        s->pending = false;
        if (!rc && r.ids.n && (size_t)held == before + r.ids.n - 1) {
            rc = tok_ids_push(&s->seq, r.ids.ids[r.ids.n - 1]);
            s->pending = !rc;
        }
        if (rc) rc = rl_seterr("out of memory");
    }
    if (!rc) {
        switch (r.reason) {
        case SESSION_EOG: rc = REDLITE_STOP_EOG; break;
        case SESSION_LENGTH: rc = REDLITE_STOP_LENGTH; break;
        case SESSION_CONTEXT: rc = REDLITE_STOP_CONTEXT; break;
        case SESSION_CANCELLED: rc = g.stopped ? REDLITE_STOP_CALLBACK : REDLITE_STOP_LENGTH; break;
        case SESSION_STOP: rc = REDLITE_STOP_LENGTH; break; /* no stop strings are passed */
        default: rc = rl_seterr("redlite_generate: %s", rl_lasterr()); break;
        }
    }
    session_gen_result_free(&r);
    return rc;
}
