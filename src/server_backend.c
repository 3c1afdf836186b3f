/* server_backend.c — see server_backend.h. */
#include "server_backend.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "gguf.h"

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
    s->b.n_ctx = p->n_ctx > 0 ? p->n_ctx : 4096;
    s->b.generate = script_generate;
    s->b.free = script_free;
    return &s->b;
oom:
    rl_seterr("out of memory (script)");
fail:
    script_free(s);
    return NULL;
}
