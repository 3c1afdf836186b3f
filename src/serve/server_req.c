/* server_req.c — see server.h: the helpers the API modules share (errors, ids, replies, stops)
 * and the parsing of the request fields every API has in common (typed getters, sampling, the
 * context check and the default answer length). Kept apart from the server core (server.c: the queue
 * and the inference threads; server_http.c: the HTTP glue). */
#include "serve/server.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/common.h"

/* ---- small helpers for the API modules -------------------------------------------------- */
const char *srv_reason_name(srv_reason r) {
    static const char *const n[] = {"eog", "length", "stop", "context", "cancelled", "error"};
    return (unsigned)r < 6 ? n[r] : "?";
}

/* the name in parentheses: server.h makes srv_fail a macro for the static analyzer */
int(srv_fail)(srv_error *e, int status, const char *type, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "invalid_request_error");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code[0] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

char *srv_strdup(const char *s) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) rl_seterr("out of memory");
    return d;
}

void srv_request_free(srv_request *rq) {
    tok_ids_free(&rq->prompt);
    for (int i = 0; i < rq->n_stops; i++) free(rq->stops[i]);
    rq->n_stops = 0;
    if (rq->api && rq->api->free && rq->st) rq->api->free(rq->st);
    rq->st = NULL;
    grammar_free(rq->grammar);
    rq->grammar = NULL;
}

int srv_request_add_stop(srv_request *rq, const char *s) {
    if (rq->n_stops >= 16) return rl_seterr("at most 16 stop strings");
    if (!*s) return 0;
    if (!(rq->stops[rq->n_stops] = srv_strdup(s))) return -1;
    rq->n_stops++;
    return 0;
}

int srv_reply_json(srv_reply *r, int status, cJSON *obj) {
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!s) return rl_seterr("out of memory (reply)");
    r->status = status;
    r->ctype = "application/json";
    r->body = s;
    r->n = strlen(s);
    return 0;
}

void srv_new_id(char *out, size_t cap, const char *prefix) {
    unsigned char b[12];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t t = (uint64_t)(rl_now() * 1e9) ^ (uint64_t)getpid() << 32;
        for (int i = 0; i < 12; i++) b[i] = (unsigned char)(t >> (8 * (i % 8))) ^ (unsigned char)(i * 77);
    }
    size_t k = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 12 && k + 2 < cap; i++, k += 2) snprintf(out + k, cap - k, "%02x", b[i]);
}

static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int srv_get_num(const cJSON *o, const char *k, double lo, double hi, double *out, srv_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return srv_fail(e, 400, NULL, k, "'%s' must be a number", k);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return srv_fail(e, 400, NULL, k, "'%s' must be in [%g, %g], got %g", k, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 1;
}

int srv_get_int(const cJSON *o, const char *k, long long lo, long long hi, long long *out, srv_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!cJSON_IsNumber(v) || d != floor(d) || !isfinite(d))
        return srv_fail(e, 400, NULL, k, "'%s' must be an integer", k);
    if (d < (double)lo || d > (double)hi)
        return srv_fail(e, 400, NULL, k, "'%s' must be in [%lld, %lld], got %.0f", k, lo, hi, d);
    *out = (long long)d;
    return 1;
}

int srv_get_bool(const cJSON *o, const char *k, bool *out, srv_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return srv_fail(e, 400, NULL, k, "'%s' must be true or false", k);
    *out = cJSON_IsTrue(v);
    return 1;
}

int srv_get_str(const cJSON *o, const char *k, const char **out, srv_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return srv_fail(e, 400, NULL, k, "'%s' must be a string", k);
    *out = v->valuestring;
    return 1;
}

int srv_parse_sampling(const cJSON *b, const srv_info *in, sampler_params *sp, srv_error *e) {
    *sp = in->sp;
    double d;
    long long v;
    int r;
    if ((r = srv_get_num(b, "temperature", 0, 2, &d, e)) < 0) return -1;
    if (r) sp->temp = (float)d;
    if ((r = srv_get_num(b, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (r) sp->top_p = (float)d;
    if ((r = srv_get_int(b, "top_k", -1, 1 << 30, &v, e)) < 0) return -1;
    if (r) sp->top_k = (int32_t)v;
    if ((r = srv_get_num(b, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (r) sp->min_p = (float)d;
    if ((r = srv_get_num(b, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) sp->presence_penalty = (float)d;
    if ((r = srv_get_num(b, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) sp->frequency_penalty = (float)d;
    if ((r = srv_get_num(b, "repetition_penalty", 0.01, 10, &d, e)) < 0) return -1;
    if (r) sp->repeat_penalty = (float)d;
    if ((r = srv_get_int(b, "seed", -(1LL << 62), 1LL << 62, &v, e)) < 0) return -1;
    if (r) sp->seed = (uint32_t)((uint64_t)v & 0xFFFFFFFFu);
    if (sp->seed == SAMPLER_SEED_RANDOM && r) sp->seed = 0xFFFFFFFEu; /* an explicit seed is never "random" */
    return 0;
}

int srv_render_prompt(const srv_info *in, const chat_conv *conv, int enable_thinking, srv_request *rq,
                      srv_error *e) {
    if (conv->n == 0) return srv_fail(e, 400, NULL, "messages", "no messages: send at least one message");
    chat_buf b = {0};
    chat_spans plain = {0};
    chat_render_opts o = {.add_generation_prompt = true, .enable_thinking = enable_thinking};
    if (chat_render_spans(&in->fmt, conv, &o, &b, &plain) || b.oom) {
        chat_buf_free(&b);
        chat_spans_free(&plain);
        return srv_fail(e, 500, "server_error", NULL, "out of memory while rendering the conversation");
    }
    int rc = srv_tokenize_prompt(in, b.p, b.n, plain.v, plain.n, rq, e);
    chat_spans_free(&plain);
    /* reasoning split: on when asked, or (auto) when the template knows <think> blocks and the
     * request did not turn thinking off; mode 2 when the prompt itself opened the block */
    bool on = in->reasoning > 0 || (in->reasoning < 0 && in->fmt.think && enable_thinking != 0);
    if (on) {
        size_t k = b.n;
        while (k && (b.p[k - 1] == '\n' || b.p[k - 1] == ' ')) k--;
        rq->think = k >= 7 && !memcmp(b.p + k - 7, "<think>", 7) ? 2 : 1;
    }
    chat_buf_free(&b);
    return rc;
}

int srv_tokenize_prompt(const srv_info *in, const char *text, size_t n, const size_t *plain, size_t n_plain,
                        srv_request *rq, srv_error *e) {
    int r = plain ? tokenizer_encode_plain(in->tok, text, n, plain, n_plain, &rq->prompt)
                  : tokenizer_encode(in->tok, text, n, TOK_PARSE_SPECIAL, &rq->prompt);
    if (r) return srv_fail(e, 500, "server_error", NULL, "out of memory while tokenising the prompt");
    if (rq->prompt.n == 0)
        return srv_fail(e, 400, NULL, NULL, "the prompt is empty: send at least one token of text");
    return srv_check_context(in, (long long)rq->prompt.n, "messages", e);
}

int srv_check_context(const srv_info *in, long long n_prompt, const char *param, srv_error *e) {
    if (n_prompt < in->n_ctx) return 0;
    /* OpenAI's wording (clients and agents match on it); the Anthropic module words it the
     * way Claude Code's compaction expects, from e->n_prompt */
    srv_fail(
        e, 400, NULL, param,
        "This model's maximum context length is %d tokens. However, your request has %lld input tokens "
        "(one more is needed to answer). Please reduce the length of the input, or restart the server with "
        "a larger --ctx.",
        in->n_ctx, n_prompt);
    snprintf(e->code, sizeof e->code, "context_length_exceeded");
    e->n_prompt = n_prompt;
    return -1;
}

long long srv_default_max_tokens(int n_ctx) {
    long long cap = n_ctx / 4;
    return cap < 1024 ? 1024 : cap > 32768 ? 32768 : cap;
}
