/* server_backend.c — see server_backend.h. */
#include "serve/server_backend.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/common.h"
#include "cache/expert_cache.h"
#include "gguf/gguf.h"
#include "run/ctx_plan.h"
#include "run/session.h"
#include "run/statefile.h"

void srv_backend_free(srv_backend *b) {
    if (b && b->free) b->free(b->ud);
}

/* Which stop string ended the text: the one that starts right where the emitted text ends in
 * the raw text (earliest in the list on ties, as the stopper scans them). -1 if none. */
static int stop_which(const char *raw, size_t n_raw, size_t emitted, const char *const *stops, int n) {
    for (int i = 0; i < n; i++) {
        size_t l = strlen(stops[i]);
        if (l && emitted + l <= n_raw && !memcmp(raw + emitted, stops[i], l)) return i;
    }
    return -1;
}

/* ---- script backend (test only) -------------------------------------------------------------- */
typedef struct {
    srv_backend b;
    tokenizer *tok;
    tok_ids *answers;
    int n_answers, next;
    int delay_ms;
    tok_ids history; /* what a real session would hold, for the reuse figures */
} script_be;

static void script_free(void *ud) {
    script_be *s = ud;
    for (int i = 0; i < s->n_answers; i++) tok_ids_free(&s->answers[i]);
    free(s->answers);
    tok_ids_free(&s->history);
    tokenizer_free(s->tok);
    free(s);
}

static int script_generate(void *ud, const srv_gen *g, srv_result *r) {
    script_be *s = ud;
    double t0 = rl_now();
    /* prefix reuse as the session reports it: the longest held prefix, the last token always
     * evaluated */
    size_t k = 0;
    while (k < s->history.n && k < (size_t)g->n_prompt && s->history.ids[k] == g->prompt[k]) k++;
    if (k == (size_t)g->n_prompt) k--;
    r->n_prompt = g->n_prompt;
    r->n_reused = (int)k;
    r->stop_index = -1;
    s->history.n = 0;
    for (int i = 0; i < g->n_prompt; i++)
        if (tok_ids_push(&s->history, g->prompt[i])) return rl_seterr("out of memory");
    r->t_prompt = rl_now() - t0;
    if (g->on_prompt) g->on_prompt(g->ud, r->n_reused);
    const tok_ids *a = &s->answers[s->next];
    s->next = (s->next + 1) % s->n_answers;
    stopper st;
    if (stopper_init(&st, g->stops, g->n_stops)) return rl_seterr("out of memory");
    tokdec d;
    tokdec_init(&d, s->tok, TOK_DECODE_REPLACE);
    chat_buf raw = {0};
    size_t emitted = 0;
    double t1 = rl_now();
    r->reason = SRV_EOG;
    for (size_t i = 0;; i++) {
        if (g->cancel && *g->cancel) {
            r->reason = SRV_CANCELLED;
            break;
        }
        if (i == a->n) break; /* the script ends: as an end-of-generation token */
        if (g->n_predict >= 0 && r->n_gen >= g->n_predict) {
            r->reason = SRV_LENGTH;
            break;
        }
        if (g->n_prompt + r->n_gen >= s->b.n_ctx) {
            r->reason = SRV_CONTEXT;
            break;
        }
        int32_t id = a->ids[i];
        if (tokenizer_is_eog(s->tok, id)) break;
        if (s->delay_ms > 0) {
            struct timespec ts = {s->delay_ms / 1000, (long)(s->delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        r->n_gen++;
        tok_ids_push(&s->history, id);
        size_t n;
        const char *piece = tokdec_push(&d, id, &n);
        if (!piece) {
            r->reason = SRV_ERROR;
            snprintf(r->error, sizeof r->error, "out of memory");
            break;
        }
        chat_buf_put(&raw, piece, n);
        const char *out;
        size_t out_n;
        bool hit = stopper_push(&st, piece, n, &out, &out_n);
        emitted += out_n;
        if (out_n && g->on_text(g->ud, out, out_n)) {
            r->reason = SRV_CANCELLED;
            break;
        }
        if (hit) {
            r->reason = SRV_STOP;
            r->stop_index = stop_which(raw.p, raw.n, emitted, g->stops, g->n_stops);
            break;
        }
    }
    if (r->reason == SRV_EOG || r->reason == SRV_LENGTH || r->reason == SRV_CONTEXT) {
        size_t n;
        const char *tail = tokdec_flush(&d, &n), *out;
        size_t out_n;
        if (tail && n) stopper_push(&st, tail, n, &out, &out_n), out_n ? (void)g->on_text(g->ud, out, out_n) : (void)0;
        stopper_flush(&st, &out, &out_n);
        if (out_n) g->on_text(g->ud, out, out_n);
    }
    r->t_gen = rl_now() - t1;
    chat_buf_free(&raw);
    tokdec_free(&d);
    stopper_free(&st);
    return 0;
}

srv_backend *srv_backend_script(const srv_script_params *p) {
    script_be *s = calloc(1, sizeof *s);
    if (!s) {
        rl_seterr("out of memory");
        return NULL;
    }
    gguf_file *f = gguf_open(p->model_path);
    if (!f) goto fail;
    s->tok = tokenizer_load(f);
    s->b.fmt = chat_format_from_gguf(f);
    uint32_t train = 0;
    char key[96];
    char *arch = gguf_get_str_dup(f, "general.architecture");
    snprintf(key, sizeof key, "%s.context_length", arch ? arch : "qwen3next");
    free(arch);
    if (gguf_get_u32(f, key, &train)) s->b.n_ctx_train = (int)train;
    gguf_close(f);
    if (!s->tok) goto fail;
    /* split the script into answers at lines "---" */
    const char *t = p->script ? p->script : "";
    for (;;) {
        const char *sep = strstr(t, "\n---\n");
        size_t n = sep ? (size_t)(sep - t) : strlen(t);
        tok_ids *na = realloc(s->answers, sizeof *na * (size_t)(s->n_answers + 1));
        if (!na) goto oom;
        s->answers = na;
        s->answers[s->n_answers] = (tok_ids){0};
        if (tokenizer_encode(s->tok, t, n, TOK_PARSE_SPECIAL, &s->answers[s->n_answers++])) goto oom;
        if (!sep) break;
        t = sep + 5;
    }
    s->delay_ms = p->delay_ms;
    s->b.ud = s;
    s->b.name = "script (test only)";
    s->b.tok = s->tok;
    s->b.n_ctx = p->n_ctx > 0 ? p->n_ctx : 32768; /* nothing to plan: no model memory */
    s->b.generate = script_generate;
    s->b.free = script_free;
    return &s->b;
oom:
    rl_seterr("out of memory (script)");
fail:
    script_free(s);
    return NULL;
}

/* ---- session backend --------------------------------------------------------------------------
 * Prompt ingestion: the session reuses the held sequence and its in-memory checkpoints. With a
 * state directory, a disk checkpoint longer than what the held sequence shares with the prompt
 * is imported first (then adopted by the session), so a restarted server resumes a long
 * conversation without re-reading it.
 *
 * What goes to disk is the state after the prompt minus its last token: a prefix of the next
 * turn's prompt (which repeats this prompt and appends the answer as the template renders it,
 * whatever tokens the model generated), and of a re-sent identical prompt. The prompt is fed in
 * two steps (all but the last token, then the last one; bit-identical by the exactness
 * contract), a snapshot is taken in between, and the file is written after the answer (the KV
 * rows of the prompt are unchanged by decoding), when at least state_min_tokens tokens were
 * evaluated since the last save, so the save never delays the first token. */
typedef struct {
    srv_backend b;
    session_model *m;
    session *s;
    statefile_dir *sd;
    int min_tokens;
    spec_mode spec;
    int draft_max;
    long long unsaved;     /* tokens evaluated since the last disk save */
    engine_snapshot *snap; /* the state at pending_n, to be written */
    int32_t *pending;      /* its tokens (NULL: nothing pending) */
    int pending_n;
    bool verbose;
} sess_be;

static void sess_free(void *ud) {
    sess_be *s = ud;
    engine_snapshot_free(s->snap);
    free(s->pending);
    statefile_close(s->sd);
    session_free(s->s);
    session_model_close(s->m);
    free(s);
}

static int sess_on_text(void *ud, int32_t token, const char *text, size_t n) {
    const srv_gen *g = ud;
    return n ? g->on_text(g->ud, text, n) : 0;
}

/* session_feed's progress -> the server's; `base` counts the tokens an earlier feed of the same
 * prompt evaluated (the state-dir path feeds all but the last token, then the last one) */
typedef struct {
    const srv_gen *g;
    int base, extra;
} sess_prog;

static void sess_progress(void *ud, int done, int total, double seconds) {
    sess_prog *p = ud;
    p->g->on_progress(p->g->ud, p->base + done, p->base + total + p->extra);
}

static void sess_save(sess_be *s) {
    if (!s->sd || !s->pending) return;
    double t0 = rl_now();
    if (statefile_save(s->sd, session_ctx(s->s), s->snap, s->pending, s->pending_n))
        fprintf(stderr, "redlite serve: checkpoint not saved: %s\n", rl_lasterr());
    else if (s->verbose)
        fprintf(stderr, "serve: checkpoint of %d tokens saved in %.3f s\n", s->pending_n, rl_now() - t0);
    free(s->pending);
    s->pending = NULL;
    s->unsaved = 0;
}

static int sess_generate(void *ud, const srv_gen *g, srv_result *r) {
    sess_be *s = ud;
    r->n_prompt = g->n_prompt;
    r->stop_index = -1;
    double t0 = rl_now();
    int restored = 0;
    if (s->sd) {
        /* a disk checkpoint is worth importing when it covers more of the prompt than the held
         * sequence does (the in-memory checkpoints are never longer than that shared prefix
         * unless the conversation was rewound, a case the session still handles by itself) */
        int hn, L = 0;
        const int32_t *h = session_history(s->s, &hn);
        while (L < hn && L < g->n_prompt && h[L] == g->prompt[L]) L++;
        if (statefile_best(s->sd, g->prompt, g->n_prompt, L, g->n_prompt - 1) > L) {
            int k = statefile_restore(s->sd, session_ctx(s->s), g->prompt, g->n_prompt, L, g->n_prompt - 1);
            if (k > 0 && session_adopt(s->s, g->prompt, k) == 0) {
                restored = k;
            } else if (k != 0) { /* the context was reset: the session forgets its history */
                fprintf(stderr, "redlite serve: %s\n", rl_lasterr());
                session_reset(s->s);
            }
        }
    }
    session_feed_stats fs, fs1;
    session_feed_opts fo = {.cancel = g->cancel};
    sess_prog prog = {.g = g};
    if (g->on_progress) {
        fo.progress = sess_progress;
        fo.ud = &prog;
    }
    int n = g->n_prompt, rc1 = 0;
    int hn;
    const int32_t *h = session_history(s->s, &hn);
    bool at_last = hn == n - 1 && n >= 2 && !memcmp(h, g->prompt, sizeof(int32_t) * (size_t)(n - 1));
    if (s->sd && n >= 2 && !at_last) { /* all but the last token, a snapshot for the disk, then the last one */
        prog.extra = 1;
        rc1 = session_feed(s->s, g->prompt, n - 1, &fo, &fs);
        prog.base = fs.n_evaluated;
        prog.extra = 0;
        if (!rc1 && s->unsaved + fs.n_evaluated >= s->min_tokens && (s->snap || (s->snap = engine_snapshot_new(session_ctx(s->s))))) {
            free(s->pending);
            s->pending = NULL;
            if (!engine_snapshot_save(session_ctx(s->s), s->snap) && (s->pending = malloc(sizeof(int32_t) * (size_t)(n - 1)))) {
                memcpy(s->pending, g->prompt, sizeof(int32_t) * (size_t)(n - 1));
                s->pending_n = n - 1;
            }
        }
        if (!rc1) {
            rc1 = session_feed(s->s, g->prompt, n, &fo, &fs1);
            fs.n_evaluated += fs1.n_evaluated;
        }
    } else {
        rc1 = session_feed(s->s, g->prompt, n, &fo, &fs);
    }
    if (rc1) {
        r->t_prompt = rl_now() - t0;
        r->reason = g->cancel && *g->cancel ? SRV_CANCELLED : SRV_ERROR;
        snprintf(r->error, sizeof r->error, "%s", rl_lasterr());
        return 0;
    }
    s->unsaved += fs.n_evaluated;
    r->n_reused = fs.n_reused; /* restored tokens count here: the session held them */
    r->t_prompt = rl_now() - t0;
    if (s->verbose && restored) fprintf(stderr, "serve: %d prompt tokens restored from disk\n", restored);
    if (g->on_prompt) g->on_prompt(g->ud, r->n_reused);
    session_gen_params gp = {
        .sp = g->sp,
        .n_predict = g->n_predict,
        .stops = g->stops,
        .n_stops = g->n_stops,
        .decode_flags = TOK_DECODE_REPLACE,
        .on_text = sess_on_text,
        .ud = (void *)g,
        .cancel = g->cancel,
        .spec = s->spec,
        .draft_max = s->draft_max,
    };
    session_gen_result out;
    int rc = session_generate(s->s, &gp, &out);
    r->n_gen = (int)out.ids.n;
    r->t_gen = out.seconds;
    r->n_drafted = out.n_drafted;
    r->n_accepted = out.n_accepted;
    static const srv_reason map[] = {SRV_EOG, SRV_LENGTH, SRV_STOP, SRV_CONTEXT, SRV_CANCELLED, SRV_ERROR};
    r->reason = rc ? SRV_ERROR : map[out.reason];
    if (rc) snprintf(r->error, sizeof r->error, "%s", rl_lasterr());
    if (r->reason == SRV_STOP && g->n_stops) {
        char *full = NULL;
        size_t n_full = 0;
        if (!tokenizer_decode(s->b.tok, out.ids.ids, out.ids.n, TOK_DECODE_REPLACE, &full, &n_full))
            r->stop_index = stop_which(full, n_full, out.text_len, g->stops, g->n_stops);
        free(full);
    }
    session_gen_result_free(&out);
    sess_save(s); /* the prompt's state, if one is pending */
    return 0;
}

static void sess_flush(void *ud) { sess_save(ud); }

static void sess_metrics(void *ud, chat_buf *o) {
    sess_be *s = ud;
    char line[512];
    expert_cache *ec = session_expert_cache(s->s);
    if (ec) {
        ec_stats st;
        expert_cache_get_stats(ec, &st);
        snprintf(line, sizeof line,
                 "# TYPE redlite_expert_cache_hits_total counter\nredlite_expert_cache_hits_total %llu\n"
                 "# TYPE redlite_expert_cache_misses_total counter\nredlite_expert_cache_misses_total %llu\n",
                 (unsigned long long)(st.hits + st.hits_inflight), (unsigned long long)st.misses);
        chat_buf_puts(o, line);
    }
    if (s->sd) {
        statefile_stats st;
        statefile_get_stats(s->sd, &st);
        snprintf(line, sizeof line,
                 "# TYPE redlite_disk_checkpoints gauge\nredlite_disk_checkpoints %d\n"
                 "# TYPE redlite_disk_checkpoint_bytes gauge\nredlite_disk_checkpoint_bytes %llu\n",
                 st.n_files, (unsigned long long)st.bytes);
        chat_buf_puts(o, line);
        snprintf(line, sizeof line,
                 "# TYPE redlite_disk_checkpoint_saves_total counter\nredlite_disk_checkpoint_saves_total %lld\n"
                 "# TYPE redlite_disk_checkpoint_restores_total counter\nredlite_disk_checkpoint_restores_total %lld\n"
                 "# TYPE redlite_disk_checkpoint_rejected_total counter\nredlite_disk_checkpoint_rejected_total %lld\n",
                 st.saves, st.restores, st.rejected);
        chat_buf_puts(o, line);
    }
}

srv_backend *srv_backend_session(const srv_session_params *p) {
    sess_be *s = calloc(1, sizeof *s);
    if (!s) {
        rl_seterr("out of memory");
        return NULL;
    }
    session_model_params mp = {.model_path = p->model_path, .backend = p->backend, .n_threads = p->n_threads,
                               .iq_repack = p->iq_repack, .map_weights = p->map_weights};
    if (!(s->m = session_model_open(&mp))) goto fail;
    session_params sp = {.n_ctx = p->n_ctx, .n_batch = p->n_batch, .kv = p->kv, .cache_spec = p->cache_spec,
                         .vram_spec = p->vram_spec, .vram_pin = p->vram_pin, .vram_miss = p->vram_miss,
                         .route_bias = p->route_bias, .route_trace = p->route_trace, .verbose = p->verbose, .max_checkpoints = p->max_checkpoints};
    if (!session_model_tokenizer(s->m)) {
        rl_seterr("%s has no tokenizer: serve needs one to read and write text", p->model_path);
        goto fail;
    }
    if (p->n_ctx > 0) s->s = session_new(s->m, &sp);
    else { /* the default: from the trained length and the memory plan (ctx_plan.h) */
        ctx_plan plan;
        if ((s->s = ctx_plan_session_new(s->m, &sp, &plan))) fprintf(stderr, "redlite serve: %s\n", plan.reason);
    }
    if (!s->s) goto fail;
    if (p->spec == SPEC_MTP && !engine_has_mtp(session_model_engine(s->m))) {
        rl_seterr("--spec mtp: this model or backend has no MTP head forward; use --spec lookup or auto");
        goto fail;
    }
    s->spec = (spec_mode)p->spec;
    s->draft_max = p->draft_max;
    if (p->state_dir) {
        engine *e = session_model_engine(s->m);
        s->sd = statefile_open(p->state_dir, p->state_max_bytes, statefile_model_fingerprint(engine_gguf(e)),
                               engine_state_format(session_ctx(s->s)));
        if (!s->sd) goto fail;
    }
    s->min_tokens = p->state_min_tokens > 0 ? p->state_min_tokens : 1;
    s->verbose = p->verbose;
    s->b.ud = s;
    s->b.name = "session";
    s->b.tok = session_model_tokenizer(s->m);
    s->b.fmt = chat_format_from_gguf(engine_gguf(session_model_engine(s->m)));
    s->b.n_ctx = session_n_ctx(s->s);
    s->b.n_ctx_train = session_hparams(s->s)->n_ctx_train;
    s->b.generate = sess_generate;
    s->b.metrics = sess_metrics;
    s->b.flush = sess_flush;
    s->b.free = sess_free;
    return &s->b;
fail:
    sess_free(s);
    return NULL;
}
