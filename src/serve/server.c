/* server.c — see server.h. The queue, the inference threads, jobs, metrics
 * and the libmicrohttpd glue (routing, limits, authentication, streaming, disconnects). */
#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "serve/api_anthropic.h"
#include "serve/api_openai.h"
#include "serve/api_responses.h"
#include "serve/conn_guard.h"
#include "serve/http_policy.h"
#include "serve/json_guard.h"
#include "base/common.h"

/* ---- unknown request fields ------------------------------------------------------------- */
struct srv_fieldlog {
    pthread_mutex_t mu;
    struct {
        char name[48];
        long long n;
    } v[64]; /* the first 64 distinct names; later ones count in `other` */
    int n;
    long long other;
};

static void fieldlog_note(srv_fieldlog *f, const char *raw, const char *where) {
    if (!f) return;
    char name[48]; /* safe for a log line and a Prometheus label */
    size_t k = 0;
    for (; raw[k] && k < sizeof name - 1; k++) {
        char c = raw[k];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '-' || c == '.';
        name[k] = ok ? c : '_';
    }
    name[k] = 0;
    pthread_mutex_lock(&f->mu);
    int i = 0;
    while (i < f->n && strncmp(f->v[i].name, name, sizeof f->v[i].name - 1)) i++;
    if (i < f->n) f->v[i].n++;
    else if (f->n < 64) {
        snprintf(f->v[f->n].name, sizeof f->v[f->n].name, "%s", name);
        f->v[f->n++].n = 1;
        /* once per name: what a client sends is visible without flooding the log */
        fprintf(
            stderr,
            "redlite serve: ignoring unknown request field '%s'%s%s (logged once; --strict-fields refuses "
            "it)\n",
            name, where ? " in " : "", where ? where : "");
    } else f->other++;
    pthread_mutex_unlock(&f->mu);
}

int srv_check_fields(const srv_info *in, const cJSON *obj, const char *const *known, const char *where,
                     srv_error *e) {
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++) ok = it->string && !strcmp(it->string, known[i]);
        if (ok) continue;
        if (!in->strict_fields) {
            fieldlog_note(in->unknown, it->string ? it->string : "?", where);
            continue;
        }
        return srv_fail(e, 400, "invalid_request_error", it->string,
                        "unknown field '%s'%s%s: remove it, or restart the server without --strict-fields "
                        "(see docs/SERVER.md for the supported fields)",
                        it->string ? it->string : "?", where ? " in " : "", where ? where : "");
    }
    return 0;
}

/* ---- jobs ----------------------------------------------------------------------------------- */
typedef enum { FAM_OPENAI, FAM_ANTHROPIC } api_family;

struct srv_job {
    srv_request rq;
    api_family fam;
    server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    chat_buf out; /* bytes not yet taken by the connection */
    size_t out_read;
    int status; /* non-streaming: final status; 0 until set */
    const char *ctype;
    bool started, done;
    atomic_int cancel; /* set by the HTTP threads, read by the inference thread */
    int refs;
    int fd; /* the client's socket (disconnect detection) */
    srv_job *next;
    double t_queued, t_started; /* t_started: 0 until an inference thread takes it */
    double t_sent;              /* streaming: when bytes last went to the client (keep-alives) */
    bool ws_keepalive;          /* non-streaming answer sent as a 200 with whitespace keep-alives first */
    bool prefilling;            /* running, prompt not yet ingested (metrics) */
    double t_run;               /* when it began running */
    int pf_done, pf_total;      /* prefill progress: tokens evaluated of those to evaluate (server mu) */
    double t_pf_log;            /* -v: when the last progress line was written */
    cg_conn *conn;              /* the connection's guard entry (the stream's end starts its send deadline) */
    srv_result res;             /* set when done (the request log line) */
};

static srv_job *job_new(server *s, api_family fam, int fd) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->srv = s;
    j->fam = fam;
    j->refs = 1;
    j->fd = fd;
    return j;
}

static void job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int r = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (r > 0) return;
    srv_request_free(&j->rq);
    chat_buf_free(&j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_send(srv_job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    chat_buf_put(&j->out, s, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_sse(srv_job *j, const char *event, cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s) return;
    chat_buf b = {0};
    if (event) {
        chat_buf_puts(&b, "event: ");
        chat_buf_puts(&b, event);
        chat_buf_puts(&b, "\n");
    }
    chat_buf_puts(&b, "data: ");
    chat_buf_puts(&b, s);
    chat_buf_puts(&b, "\n\n");
    free(s);
    if (!b.oom) srv_job_send(j, b.p, b.n);
    chat_buf_free(&b);
}

void srv_job_body(srv_job *j, int status, const char *ctype, char *body, size_t n) {
    pthread_mutex_lock(&j->mu);
    chat_buf_put(&j->out, body, n);
    j->status = status;
    j->ctype = ctype;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(body);
}

void srv_job_body_json(srv_job *j, int status, cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
        s = strdup(oom);
        status = 500;
        if (!s) return;
    }
    srv_job_body(j, status, "application/json", s, strlen(s));
}

static cJSON *error_json(api_family fam, const srv_error *e) {
    return fam == FAM_ANTHROPIC ? api_anthropic_error(e) : api_openai_error(e);
}

/* ---- the server ---------------------------------------------------------------------------- */
typedef struct {
    long long requests[4]; /* by API: chat, completions, responses, messages */
    long long status[600]; /* responses by HTTP status */
    long long rejected, cancelled, errors;
    long long beyond_train; /* prompts longer than the trained context */
    long long abandoned;    /* queued jobs whose client left (dropped from the queue at once) */
    double queue_wait_s;    /* sum of the waits of the jobs run */
    long long queue_waits;
    long long prompt_tokens, prompt_reused, gen_tokens, drafted, accepted;
    double prompt_s, gen_s, last_decode_tps, last_prompt_tps;
    char *backend_lines; /* from the backend, refreshed after each job */
} srv_metrics;

/* One backend slot and the inference thread that serves it. */
typedef struct {
    server *srv;
    int idx;
    pthread_t th;
    bool started;
    pthread_cond_t cv; /* a job was assigned, or stopping */
    srv_job *job;      /* assigned or running; NULL: idle */
    uint64_t used;     /* when it last finished a job (LRU among idle slots) */
} srv_slot;

struct server {
    server_params p;
    srv_backend *b;
    srv_info info;
    struct MHD_Daemon *d;
    int port;
    srv_slot *slots; /* [b->n_slots] */
    int n_slots;
    uint64_t tick;
    pthread_mutex_t mu; /* queue + slots + metrics */
    pthread_cond_t cv;
    srv_job *head, *tail;
    int n_waiting; /* in the queue */
    int n_jobs;    /* waiting + running: at most queue + n_slots */
    int n_running;
    bool stopping;
    int n_open; /* requests between on_access and on_completed */
    srv_metrics m;
    double t_start;
    srv_fieldlog fields;  /* unknown request fields */
    double json_ka_after; /* seconds before a non-streaming answer switches to whitespace keep-alives */
    /* admission (HTTP side) */
    conn_guard *g;    /* connection caps and deadlines */
    http_allow allow; /* Host / Origin allow-lists */
    char hostname[256];
    json_limits jl;       /* parse cost bound of a body */
    size_t body_inflight; /* bytes of request bodies being received or parsed (mu) */
    size_t body_budget;   /* at most this many (4 bodies of the largest size) */
    bool draining;        /* SIGHUP: no new jobs */
};

static int api_index(const srv_api *a) {
    static const char *const names[] = {"chat", "completions", "responses", "messages"};
    for (int i = 0; i < 4; i++)
        if (a && !strcmp(a->name, names[i])) return i;
    return 0;
}

static void on_prompt(void *ud, int n_reused) {
    srv_job *j = ud;
    server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    j->prefilling = false;
    pthread_mutex_unlock(&s->mu);
    if (s->p.verbose) {
        double dt = rl_now() - j->t_run;
        int n = (int)j->rq.prompt.n - n_reused;
        fprintf(stderr, "serve: %s prefill done: %d tokens evaluated (%d reused) in %.2f s (%.1f tok/s)\n",
                j->rq.api->name, n, n_reused, dt, dt > 0 ? n / dt : 0.0);
    }
    pthread_mutex_lock(&j->mu);
    j->started = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (j->rq.api->start) j->rq.api->start(j, j->rq.st, (int)j->rq.prompt.n, n_reused);
}

/* Prefill progress (inference thread): the /metrics gauges, and with -v a line every 2 s. */
#define PROGRESS_LOG_S 2.0
static void on_progress(void *ud, int done, int total) {
    srv_job *j = ud;
    server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    j->pf_done = done;
    j->pf_total = total;
    pthread_mutex_unlock(&s->mu);
    double now = rl_now();
    if (s->p.verbose && done > 0 && done < total && now - j->t_pf_log >= PROGRESS_LOG_S) {
        j->t_pf_log = now;
        double dt = now - j->t_run;
        fprintf(stderr, "serve: %s prefill %d/%d tokens (%.0f%%), %.1f tok/s, %.1f s\n", j->rq.api->name,
                done, total, 100.0 * done / total, dt > 0 ? done / dt : 0.0, dt);
    }
}

static int on_text(void *ud, const char *s, size_t n) {
    srv_job *j = ud;
    if (j->cancel) return 1;
    return j->rq.api->text(j, j->rq.st, s, n);
}

static void on_logprobs(void *ud, const sampler_logprobs *lp) {
    srv_job *j = ud;
    if (j->rq.api->logprobs) j->rq.api->logprobs(j, j->rq.st, lp);
}

static void run_job(server *s, int slot, srv_job *j) {
    srv_result r = {0};
    r.n_prompt = (int)j->rq.prompt.n;
    pthread_mutex_lock(&s->mu); /* /slots and /metrics read it under the server's lock */
    j->t_started = rl_now();
    pthread_mutex_unlock(&s->mu);
    if (j->cancel) {
        /* dropped before it ran: the client left, or the server is stopping; the API answers
         * it as cancelled (503 / an error event: a stream is already open) */
        r.reason = SRV_CANCELLED;
        j->rq.api->finish(j, j->rq.st, &r);
    } else {
        pthread_mutex_lock(&s->mu);
        j->prefilling = true;
        j->t_run = j->t_pf_log = rl_now();
        j->pf_done = 0;
        j->pf_total = (int)j->rq.prompt.n; /* until the backend says how much it reuses */
        pthread_mutex_unlock(&s->mu);
        if (s->p.verbose)
            fprintf(stderr, "serve: %s prefill: %zu prompt tokens (waited %.2f s in the queue)\n",
                    j->rq.api->name, j->rq.prompt.n, j->t_run - j->t_queued);
        srv_gen g = {
            .prompt = j->rq.prompt.ids,
            .n_prompt = (int)j->rq.prompt.n,
            .sp = j->rq.sp,
            .n_predict = j->rq.n_predict,
            .stops = (const char *const *)j->rq.stops,
            .n_stops = j->rq.n_stops,
            .on_prompt = on_prompt,
            .on_progress = on_progress,
            .on_text = on_text,
            .ud = j,
            .cancel = &j->cancel,
            .grammar = j->rq.grammar,
            .top_logprobs = j->rq.top_logprobs,
            .on_logprobs = j->rq.logprobs ? on_logprobs : NULL,
        };
        if (s->b->generate(s->b->ud, slot, &g, &r) && r.reason != SRV_ERROR) {
            r.reason = SRV_ERROR;
            snprintf(r.error, sizeof r.error, "%s", rl_lasterr());
        }
        if (j->cancel && r.reason != SRV_ERROR) r.reason = SRV_CANCELLED;
        j->rq.api->finish(j, j->rq.st, &r);
    }
    chat_buf extra = {0};
    if (s->b->metrics) s->b->metrics(s->b->ud, &extra);
    pthread_mutex_lock(&s->mu);
    srv_metrics *m = &s->m;
    m->requests[api_index(j->rq.api)]++;
    if (r.reason == SRV_CANCELLED) m->cancelled++;
    if (r.reason == SRV_ERROR) m->errors++;
    m->prompt_tokens += r.n_prompt;
    m->prompt_reused += r.n_reused;
    m->gen_tokens += r.n_gen;
    m->drafted += r.n_drafted;
    m->accepted += r.n_accepted;
    m->prompt_s += r.t_prompt;
    m->gen_s += r.t_gen;
    m->queue_wait_s += j->t_started - j->t_queued;
    m->queue_waits++;
    if (r.t_gen > 0 && r.n_gen > 1) m->last_decode_tps = (r.n_gen - 1) / r.t_gen;
    if (r.t_prompt > 0 && r.n_prompt > r.n_reused)
        m->last_prompt_tps = (r.n_prompt - r.n_reused) / r.t_prompt;
    if (extra.p && !extra.oom) {
        free(m->backend_lines);
        m->backend_lines = chat_buf_take(&extra, NULL);
    }
    s->n_running--; /* with the counters, so /metrics never shows a counted job as running */
    pthread_mutex_unlock(&s->mu);
    chat_buf_free(&extra);
    pthread_mutex_lock(&j->mu);
    j->res = r;
    j->done = true;
    j->started = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Hand waiting jobs to idle slots (s->mu held): the head job goes to the idle slot that would
 * reuse the most of its prompt, ties (no reuse anywhere included) to the least recently used
 * one, whose conversation is the one given up (the backend keeps it in its RAM tier). Jobs stay
 * in arrival order. */
static void assign(server *s) {
    while (s->head) {
        srv_job *j = s->head;
        int best = -1, best_len = -1;
        for (int i = 0; i < s->n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            if (sl->job || !sl->started) continue;
            int len = s->b->match && !j->cancel
                          ? s->b->match(s->b->ud, i, j->rq.prompt.ids, (int)j->rq.prompt.n)
                          : 0;
            if (len > best_len || (len == best_len && sl->used < s->slots[best].used))
                best = i, best_len = len;
        }
        if (best < 0) return;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        j->next = NULL;
        s->n_waiting--;
        s->n_running++;
        s->slots[best].job = j;
        pthread_cond_signal(&s->slots[best].cv);
    }
}

static void *infer_main(void *arg) {
    srv_slot *sl = arg;
    server *s = sl->srv;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!sl->job && !(s->stopping && !s->head)) pthread_cond_wait(&sl->cv, &s->mu);
        srv_job *j = sl->job;
        if (!j) break; /* stopping and drained */
        pthread_mutex_unlock(&s->mu);
        run_job(s, sl->idx, j);
        pthread_mutex_lock(&s->mu);
        sl->job = NULL;
        sl->used = ++s->tick;
        s->n_jobs--;
        pthread_mutex_unlock(&s->mu);
        job_unref(j);
        pthread_mutex_lock(&s->mu);
        assign(s);
        if (s->stopping && !s->head) /* drained: the idle slots can end too */
            for (int i = 0; i < s->n_slots; i++) pthread_cond_signal(&s->slots[i].cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* 0 queued, -1 full (or stopping) */
static int enqueue(server *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->draining || s->n_jobs >= s->p.queue + s->n_slots) {
        s->m.rejected++;
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    job_ref(j); /* the queue's reference */
    j->t_queued = rl_now();
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_waiting++;
    s->n_jobs++;
    assign(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Take a job whose client left out of the queue at once, so it holds no queue place (it never
 * runs; its waiting connection thread then ends). false if it is already running or done. */
static bool queue_drop(server *s, srv_job *j) {
    bool dropped = false;
    pthread_mutex_lock(&s->mu);
    for (srv_job **pp = &s->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp != j) continue;
        *pp = j->next;
        if (s->tail == j) s->tail = prev;
        j->next = NULL;
        s->n_waiting--;
        s->n_jobs--;
        s->m.abandoned++;
        s->m.cancelled++;
        dropped = true;
        break;
    }
    pthread_mutex_unlock(&s->mu);
    if (dropped) {
        pthread_mutex_lock(&j->mu);
        j->res.reason = SRV_CANCELLED;
        j->res.n_prompt = (int)j->rq.prompt.n;
        j->done = j->started = true;
        pthread_mutex_unlock(&j->mu);
        job_unref(j); /* the queue's reference */
    }
    return dropped;
}

static bool phase_has_deadline(int k) { return k != CG_WORK; }

/* /slots: what each inference slot is doing, and the queue (JSON). */
static void slots_json(server *s, chat_buf *o) {
    char tmp[512];
    double now = rl_now();
    pthread_mutex_lock(&s->mu);
    chat_buf_puts(o, "{\"slots\":[");
    for (int i = 0; i < s->n_slots; i++) {
        const srv_job *j = s->slots ? s->slots[i].job : NULL;
        if (j && j->t_started)
            snprintf(tmp, sizeof tmp,
                     "%s{\"id\":%d,\"state\":\"%s\",\"api\":\"%s\",\"n_prompt\":%zu,\"stream\":%s,"
                     "\"queue_wait_s\":%.3f,\"running_s\":%.3f,\"n_ctx\":%d}",
                     i ? "," : "", i, j->prefilling ? "prefill" : "decode", j->rq.api ? j->rq.api->name : "?",
                     j->rq.prompt.n, j->rq.stream ? "true" : "false", j->t_started - j->t_queued,
                     now - j->t_started, s->b->n_ctx);
        else /* idle, or assigned and not yet taken by its thread */
            snprintf(tmp, sizeof tmp, "%s{\"id\":%d,\"state\":\"idle\",\"n_ctx\":%d}", i ? "," : "", i,
                     s->b->n_ctx);
        chat_buf_puts(o, tmp);
    }
    snprintf(tmp, sizeof tmp, "]");
    chat_buf_puts(o, tmp);
    double oldest = 0;
    for (srv_job *q = s->head; q; q = q->next)
        if (now - q->t_queued > oldest) oldest = now - q->t_queued;
    snprintf(tmp, sizeof tmp,
             ",\"queue\":{\"waiting\":%d,\"capacity\":%d,\"oldest_wait_s\":%.3f},\"draining\":%s",
             s->n_waiting, s->p.queue, oldest, s->draining ? "true" : "false");
    chat_buf_puts(o, tmp);
    pthread_mutex_unlock(&s->mu);
    cg_stats cs;
    conn_guard_get_stats(s->g, &cs);
    snprintf(tmp, sizeof tmp, ",\"connections\":{\"open\":%d", cs.open);
    chat_buf_puts(o, tmp);
    for (int k = 0; k < CG_NPHASE; k++) {
        snprintf(tmp, sizeof tmp, ",\"%s\":%d", conn_guard_phase_name((cg_phase)k), cs.by_phase[k]);
        chat_buf_puts(o, tmp);
    }
    chat_buf_puts(o, "}}");
}

/* ---- metrics --------------------------------------------------------------------------------- */
static void metrics_text(server *s, chat_buf *o) {
    char line[256];
#define PUT(...)                                                                                             \
    do {                                                                                                     \
        snprintf(line, sizeof line, __VA_ARGS__);                                                            \
        chat_buf_puts(o, line);                                                                              \
    } while (0)
    pthread_mutex_lock(&s->mu);
    srv_metrics *m = &s->m;
    static const char *const api[] = {"chat", "completions", "responses", "messages"};
    PUT("# HELP redlite_requests_total Generation requests served, by API.\n# TYPE redlite_requests_total "
        "counter\n");
    for (int i = 0; i < 4; i++) PUT("redlite_requests_total{api=\"%s\"} %lld\n", api[i], m->requests[i]);
    PUT("# HELP redlite_http_responses_total HTTP responses by status code.\n"
        "# TYPE redlite_http_responses_total counter\n");
    for (int i = 100; i < 600; i++)
        if (m->status[i]) PUT("redlite_http_responses_total{code=\"%d\"} %lld\n", i, m->status[i]);
    PUT("# TYPE redlite_requests_rejected_total counter\nredlite_requests_rejected_total %lld\n",
        m->rejected);
    PUT("# TYPE redlite_requests_cancelled_total counter\nredlite_requests_cancelled_total %lld\n",
        m->cancelled);
    PUT("# TYPE redlite_requests_failed_total counter\nredlite_requests_failed_total %lld\n", m->errors);
    PUT("# HELP redlite_prompts_beyond_trained_total Prompts longer than the model's trained context.\n"
        "# TYPE redlite_prompts_beyond_trained_total counter\nredlite_prompts_beyond_trained_total %lld\n",
        m->beyond_train);
    PUT("# HELP redlite_prompt_tokens_total Prompt tokens of all requests.\n"
        "# TYPE redlite_prompt_tokens_total counter\nredlite_prompt_tokens_total %lld\n",
        m->prompt_tokens);
    PUT("# HELP redlite_prompt_tokens_reused_total Prompt tokens not evaluated (held prefix or checkpoint).\n"
        "# TYPE redlite_prompt_tokens_reused_total counter\nredlite_prompt_tokens_reused_total %lld\n",
        m->prompt_reused);
    PUT("# TYPE redlite_prompt_tokens_evaluated_total counter\nredlite_prompt_tokens_evaluated_total %lld\n",
        m->prompt_tokens - m->prompt_reused);
    PUT("# TYPE redlite_generated_tokens_total counter\nredlite_generated_tokens_total %lld\n",
        m->gen_tokens);
    PUT("# TYPE redlite_prompt_seconds_total counter\nredlite_prompt_seconds_total %.6f\n", m->prompt_s);
    PUT("# TYPE redlite_decode_seconds_total counter\nredlite_decode_seconds_total %.6f\n", m->gen_s);
    PUT("# HELP redlite_decode_tokens_per_second Decode speed of the last request.\n"
        "# TYPE redlite_decode_tokens_per_second gauge\nredlite_decode_tokens_per_second %.3f\n",
        m->last_decode_tps);
    PUT("# TYPE redlite_prompt_tokens_per_second gauge\nredlite_prompt_tokens_per_second %.3f\n",
        m->last_prompt_tps);
    PUT("# TYPE redlite_queue_depth gauge\nredlite_queue_depth %d\n", s->n_waiting);
    PUT("# TYPE redlite_requests_running gauge\nredlite_requests_running %d\n", s->n_running);
    PUT("# TYPE redlite_slots gauge\nredlite_slots %d\n", s->n_slots);
    size_t pf_tokens = 0;               /* summed over the slots whose request is still in its prefill */
    double pf_s = 0.0;                  /* the longest prefill running so far */
    long long pf_done = 0, pf_left = 0; /* their progress (session_feed, chunk by chunk) */
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        const srv_job *rj = s->slots[i].job;
        if (!rj || !rj->prefilling) continue;
        pf_tokens += rj->rq.prompt.n;
        pf_done += rj->pf_done;
        pf_left += rj->pf_total - rj->pf_done;
        if (rl_now() - rj->t_run > pf_s) pf_s = rl_now() - rj->t_run;
    }
    PUT("# HELP redlite_prefill_tokens Prompt tokens of the requests whose prefill runs now (0 otherwise).\n"
        "# TYPE redlite_prefill_tokens gauge\nredlite_prefill_tokens %zu\n",
        pf_tokens);
    PUT("# HELP redlite_prefill_seconds How long the longest running prefill has taken so far (0: none "
        "running).\n"
        "# TYPE redlite_prefill_seconds gauge\nredlite_prefill_seconds %.3f\n",
        pf_s);
    PUT("# HELP redlite_prefill_evaluated_tokens Tokens the running prefills have evaluated so far (0: none "
        "running).\n"
        "# TYPE redlite_prefill_evaluated_tokens gauge\nredlite_prefill_evaluated_tokens %lld\n",
        pf_done);
    PUT("# HELP redlite_prefill_remaining_tokens Tokens the running prefills have still to evaluate (reused "
        "ones "
        "excluded; 0: none running).\n# TYPE redlite_prefill_remaining_tokens gauge\n"
        "redlite_prefill_remaining_tokens %lld\n",
        pf_left);
    pthread_mutex_lock(&s->fields.mu);
    PUT("# HELP redlite_unknown_fields_total Request fields the server does not know, ignored "
        "(--strict-fields "
        "refuses them).\n# TYPE redlite_unknown_fields_total counter\n");
    for (int i = 0; i < s->fields.n; i++)
        PUT("redlite_unknown_fields_total{field=\"%s\"} %lld\n", s->fields.v[i].name, s->fields.v[i].n);
    if (s->fields.other) PUT("redlite_unknown_fields_total{field=\"(other)\"} %lld\n", s->fields.other);
    pthread_mutex_unlock(&s->fields.mu);
    PUT("# TYPE redlite_spec_drafted_tokens_total counter\nredlite_spec_drafted_tokens_total %lld\n",
        m->drafted);
    PUT("# TYPE redlite_spec_accepted_tokens_total counter\nredlite_spec_accepted_tokens_total %lld\n",
        m->accepted);
    PUT("# TYPE redlite_spec_acceptance_ratio gauge\nredlite_spec_acceptance_ratio %.4f\n",
        m->drafted ? (double)m->accepted / (double)m->drafted : 0.0);
    PUT("# HELP redlite_requests_abandoned_total Queued requests whose client left (dropped at once).\n"
        "# TYPE redlite_requests_abandoned_total counter\nredlite_requests_abandoned_total %lld\n",
        m->abandoned);
    PUT("# HELP redlite_queue_wait_seconds Time requests waited in the queue before running.\n"
        "# TYPE redlite_queue_wait_seconds summary\nredlite_queue_wait_seconds_sum %.6f\n"
        "redlite_queue_wait_seconds_count %lld\n",
        m->queue_wait_s, m->queue_waits);
    /* each slot's state (idle, prefill: the prompt is being read, decode) */
    PUT("# HELP redlite_slot_state State of each inference slot (1 = in that state).\n# TYPE "
        "redlite_slot_state gauge\n");
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        const srv_job *sj = s->slots[i].job;
        const char *slot_state = !sj || !sj->t_started ? "idle" : sj->prefilling ? "prefill" : "decode";
        for (int k = 0; k < 3; k++) {
            static const char *const st[] = {"idle", "prefill", "decode"};
            PUT("redlite_slot_state{slot=\"%d\",state=\"%s\"} %d\n", i, st[k], !strcmp(st[k], slot_state));
        }
    }
    PUT("# TYPE redlite_request_body_bytes_inflight gauge\nredlite_request_body_bytes_inflight %zu\n",
        s->body_inflight);
    if (m->backend_lines) chat_buf_puts(o, m->backend_lines);
    pthread_mutex_unlock(&s->mu);
    cg_stats cs;
    conn_guard_get_stats(s->g, &cs);
    PUT("# HELP redlite_connections Open HTTP connections by phase.\n# TYPE redlite_connections gauge\n");
    for (int k = 0; k < CG_NPHASE; k++)
        PUT("redlite_connections{phase=\"%s\"} %d\n", conn_guard_phase_name((cg_phase)k), cs.by_phase[k]);
    PUT("# TYPE redlite_connections_accepted_total counter\nredlite_connections_accepted_total %lld\n",
        cs.accepted);
    PUT("# HELP redlite_connections_refused_total New connections refused at a cap (no idle one to evict).\n"
        "# TYPE redlite_connections_refused_total counter\nredlite_connections_refused_total %lld\n",
        cs.refused);
    PUT("# HELP redlite_connections_evicted_total Idle connections closed to admit a new one at a cap.\n"
        "# TYPE redlite_connections_evicted_total counter\nredlite_connections_evicted_total %lld\n",
        cs.evicted);
    PUT("# HELP redlite_connections_timeouts_total Connections closed at a deadline, by phase.\n"
        "# TYPE redlite_connections_timeouts_total counter\n");
    for (int k = 0; k < CG_NPHASE; k++)
        if (phase_has_deadline(k))
            PUT("redlite_connections_timeouts_total{phase=\"%s\"} %lld\n", conn_guard_phase_name((cg_phase)k),
                cs.timeouts[k]);
    PUT("# TYPE redlite_resident_memory_bytes gauge\nredlite_resident_memory_bytes %llu\n",
        (unsigned long long)rl_cur_rss());
    PUT("# TYPE redlite_peak_resident_memory_bytes gauge\nredlite_peak_resident_memory_bytes %llu\n",
        (unsigned long long)rl_peak_rss());
    PUT("# TYPE redlite_uptime_seconds gauge\nredlite_uptime_seconds %.1f\n", rl_now() - s->t_start);
#undef PUT
}

/* ---- routes ---------------------------------------------------------------------------------- */
typedef int (*srv_handler)(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep,
                           srv_error *e);

typedef struct {
    const char *method, *path;
    api_family fam;
    srv_handler fn; /* NULL: built-in (health, metrics) */
} route;

/* A path ending in '*' matches any non-empty rest, handed to the handler as {"id": rest}. */
static const route ROUTES[] = {
    {"POST", "/v1/chat/completions", FAM_OPENAI, api_openai_chat},
    {"POST", "/v1/completions", FAM_OPENAI, api_openai_completions},
    {"POST", "/v1/responses", FAM_OPENAI, api_responses_create},
    {"POST", "/v1/messages", FAM_ANTHROPIC, api_anthropic_messages},
    {"POST", "/v1/messages/count_tokens", FAM_ANTHROPIC, api_anthropic_count_tokens},
    {"GET", "/v1/models", FAM_OPENAI, api_openai_models},
    {"GET", "/v1/models/*", FAM_OPENAI, api_openai_model},
    {"GET", "/health", FAM_OPENAI, NULL},
    {"GET", "/metrics", FAM_OPENAI, NULL},
    {"GET", "/slots", FAM_OPENAI, NULL},
};
#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

/* Does url name route rt's path? Paths without the "/v1" prefix are aliases (clients whose
 * base URL lacks it: /chat/completions, /messages, /models, /responses, ...). *rest: the part
 * a '*' matched. */
static bool route_match(const route *rt, const char *url, const char **rest) {
    const char *p = rt->path;
    if (!strncmp(p, "/v1/", 4) && strncmp(url, "/v1/", 4)) p += 3;
    size_t n = strlen(p);
    if (p[n - 1] == '*') {
        if (strncmp(url, p, n - 1) || !url[n - 1]) return false;
        *rest = url + n - 1;
        return true;
    }
    return !strcmp(url, p);
}

/* ---- HTTP ------------------------------------------------------------------------------------ */
typedef struct {
    const route *rt;
    chat_buf body;
    bool too_big;
    bool answered;     /* a response was queued before the body was read (refused early) */
    size_t body_bytes; /* received (the log line) */
    size_t reserved;   /* bytes of the server's body budget held by this request */
    srv_job *job;
    char *rest; /* what the route's '*' matched */
    double t0;
    char method[12], path[96];
} conn_req;

/* Per-socket state (libmicrohttpd's socket context, from MHD_CONNECTION_NOTIFY_STARTED to
 * _CLOSED): the connection's guard entry, and the id and status of its current request (for
 * the X-Request-Id header and the log line). */
typedef struct {
    cg_conn *g;
    char peer[48];
    int status;
    char rid[32];
} sock_ctx;

static sock_ctx *sock_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void release_body(server *s, conn_req *r) {
    chat_buf_free(&r->body);
    if (!r->reserved) return;
    pthread_mutex_lock(&s->mu);
    s->body_inflight -= r->reserved;
    pthread_mutex_unlock(&s->mu);
    r->reserved = 0;
}

static void set_phase(server *s, struct MHD_Connection *c, cg_phase p, double extra) {
    sock_ctx *sc = sock_of(c);
    if (sc) conn_guard_set(s->g, sc->g, p, extra);
}

static bool peer_gone(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void timed_wait(srv_job *j, double sec) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(sec * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static void count_status(server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status >= 100 && status < 600) s->m.status[status]++;
    pthread_mutex_unlock(&s->mu);
}

/* The answer length a generation ran under, and what the request asked when the server clamped
 * it to the room left in the context (usage does not have a field for it). */
static void add_length_headers(struct MHD_Response *r, const srv_request *rq) {
    if (!rq) return;
    char v[32];
    snprintf(v, sizeof v, "%lld", rq->n_predict);
    MHD_add_response_header(r, "X-RedLite-Max-Tokens", v);
    if (rq->n_ctx_train_exceeded) {
        char w[160];
        snprintf(w, sizeof w,
                 "the prompt has %zu tokens, more than the model was trained on (%d): answers may degrade",
                 rq->prompt.n, rq->n_ctx_train_exceeded);
        MHD_add_response_header(r, "X-RedLite-Warning", w);
    }
    if (rq->max_tokens_asked) {
        snprintf(v, sizeof v, "%lld", rq->max_tokens_asked);
        MHD_add_response_header(r, "X-RedLite-Max-Tokens-Requested", v);
    }
}

/* Headers of every answer: the request id, and CORS for a browser origin that passed the
 * allow-list (a refused origin never gets this far). Records the status for the log line. */
static void add_common_headers(server *s, struct MHD_Connection *c, struct MHD_Response *r, int status) {
    sock_ctx *sc = sock_of(c);
    if (sc) {
        sc->status = status;
        if (sc->rid[0]) MHD_add_response_header(r, "X-Request-Id", sc->rid);
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && http_policy_origin_ok(&s->allow, origin)) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Vary", "Origin");
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id, Retry-After");
    }
}

static enum MHD_Result send_buf_rq(server *s, struct MHD_Connection *c, int status, const char *ctype,
                                   char *body, size_t n, const char *retry_after, const srv_request *rq) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    add_length_headers(r, rq);
    add_common_headers(s, c, r, status);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(s, status);
    return rc;
}

static enum MHD_Result send_buf(server *s, struct MHD_Connection *c, int status, const char *ctype,
                                char *body, size_t n, const char *retry_after) {
    return send_buf_rq(s, c, status, ctype, body, n, retry_after, NULL);
}

static enum MHD_Result send_error(server *s, struct MHD_Connection *c, api_family fam, const srv_error *e,
                                  const char *retry_after) {
    srv_reply rep = {0};
    if (srv_reply_json(&rep, e->status, error_json(fam, e))) return MHD_NO;
    return send_buf(s, c, e->status, rep.ctype, rep.body, rep.n, retry_after);
}

/* Seconds of silence in a stream before a keep-alive: Anthropic streams get its `ping` event,
 * OpenAI ones an SSE comment (which SSE parsers skip). Sent only when every byte of the
 * events so far went out, so it never lands inside an event. */
#define KEEPALIVE_S 1.0
/* A non-streaming answer not ready after this long gets whitespace keep-alives (dispatch). */
#define JSON_KEEPALIVE_AFTER_S 30.0

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->out.n == j->out_read && !j->done) {
        timed_wait(j, 0.1);
        if (j->out.n == j->out_read && !j->done && peer_gone(j->fd)) {
            j->cancel = 1;
            pthread_mutex_unlock(&j->mu);
            queue_drop(j->srv, j); /* still queued (a stream opens at once): it leaves the queue now */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        double now = rl_now();
        if (j->out.n == j->out_read && !j->done && now - j->t_sent >= KEEPALIVE_S) {
            static const char ping[] = "event: ping\ndata: {\"type\": \"ping\"}\n\n",
                              comment[] = ": keep-alive\n\n";
            const char *ka = j->ws_keepalive ? "\n" : j->fam == FAM_ANTHROPIC ? ping : comment;
            size_t k = strlen(ka);
            if (k > max) break;
            memcpy(buf, ka, k);
            j->t_sent = now;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)k;
        }
    }
    size_t avail = j->out.n - j->out_read;
    if (avail == 0) {
        pthread_mutex_unlock(&j->mu);
        conn_guard_set(j->srv->g, j->conn, CG_SEND, 0); /* the rest must be taken in send_timeout */
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t k = avail < max ? avail : max;
    memcpy(buf, j->out.p + j->out_read, k);
    j->out_read += k;
    j->t_sent = rl_now();
    if (j->out_read == j->out.n) j->out.n = j->out_read = 0;
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)k;
}

static void stream_free(void *cls) { job_unref(cls); }

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = tok_utf8_len((const uint8_t *)s + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

/* Constant-time comparison of a presented key with the server's. */
static bool key_eq(const char *got, const char *want) {
    size_t n = strlen(want);
    if (!got || strlen(got) != n) return false;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(got[i] ^ want[i]);
    return d == 0;
}

/* Either header may carry the key (OpenAI clients send Authorization: Bearer, Anthropic ones
 * x-api-key; Claude Code with ANTHROPIC_AUTH_TOKEN sends Bearer). */
static bool key_ok(server *s, struct MHD_Connection *c) {
    if (!s->p.api_key) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    bool bearer = auth && !strncasecmp(auth, "Bearer ", 7) && key_eq(auth + 7, s->p.api_key);
    return bearer || key_eq(x, s->p.api_key);
}

/* The answer length: the request's, else --max-tokens, else srv_default_max_tokens; never more
 * than the context leaves after the prompt (agents ask for 32K-128K: an answer that fills the
 * context would leave no room for the next turn's prompt either, but the turn after that is
 * answered with the overflow error that clients compact on). */
static void clamp_length(const srv_info *in, srv_request *rq) {
    long long room = in->n_ctx - (long long)rq->prompt.n, want = rq->n_predict;
    if (want < 0) want = srv_default_max_tokens(in->n_ctx);
    else if (want > room) rq->max_tokens_asked = want;
    rq->n_predict = want < room ? want : room;
}

/* A prompt longer than the model's trained context (possible when --ctx is set above it): a
 * header on the answer, a counter, and a log line (the first one; each one with -v). */
static void warn_train(server *s, srv_request *rq) {
    int train = s->info.n_ctx_train;
    if (train <= 0 || rq->prompt.n <= (size_t)train) return;
    rq->n_ctx_train_exceeded = train;
    pthread_mutex_lock(&s->mu);
    bool first = s->m.beyond_train++ == 0;
    pthread_mutex_unlock(&s->mu);
    if (first || s->p.verbose)
        fprintf(stderr,
                "redlite serve: warning: a prompt of %zu tokens is longer than the model's trained context "
                "(%d tokens): answers may degrade%s\n",
                rq->prompt.n, train,
                first && !s->p.verbose ? " (later ones: redlite_prompts_beyond_trained_total in /metrics)"
                                       : "");
}

/* GET /metrics (Prometheus text), /slots (JSON) and /health: answered on the connection thread. */
static enum MHD_Result send_status_page(server *s, struct MHD_Connection *c, const route *rt) {
    chat_buf o = {0};
    if (!strcmp(rt->path, "/metrics")) metrics_text(s, &o);
    else if (!strcmp(rt->path, "/slots")) slots_json(s, &o);
    else {
        pthread_mutex_lock(&s->mu);
        int q = s->n_waiting;
        pthread_mutex_unlock(&s->mu);
        char tmp[160];
        snprintf(tmp, sizeof tmp, "{\"status\":\"ok\",\"backend\":\"%s\",\"queue_depth\":%d}", s->b->name, q);
        chat_buf_puts(&o, tmp);
    }
    size_t n;
    char *p = chat_buf_take(&o, &n);
    if (!p) return MHD_NO;
    return send_buf(s, c, 200,
                    strcmp(rt->path, "/metrics") ? "application/json" : "text/plain; version=0.0.4", p, n,
                    NULL);
}

static enum MHD_Result dispatch(server *s, struct MHD_Connection *c, conn_req *r) {
    double t_in = rl_now(); /* the body is read: parsing, rendering and tokenising start */
    srv_error e = {0};
    api_family fam = r->rt->fam;
    if (r->too_big) {
        srv_fail(&e, 413, fam == FAM_ANTHROPIC ? "request_too_large" : "invalid_request_error", NULL,
                 "the request body is larger than the server's limit of %zu bytes (--max-body)",
                 s->p.max_body);
        return send_error(s, c, fam, &e, NULL);
    }
    const route *rt = r->rt;
    if (!rt->fn) return send_status_page(s, c, rt);
    cJSON *body = NULL;
    if (!strcmp(rt->method, "POST")) {
        char why[320];
        if (json_guard_check(r->body.p ? r->body.p : "", r->body.n, &s->jl, why, sizeof why)) {
            srv_fail(&e, 413, fam == FAM_ANTHROPIC ? "request_too_large" : "invalid_request_error", NULL,
                     "%s", why);
            return send_error(s, c, fam, &e, NULL);
        }
        if (!valid_utf8(r->body.p ? r->body.p : "", r->body.n)) {
            srv_fail(&e, 400, NULL, NULL, "the request body is not valid UTF-8: send UTF-8 encoded JSON");
            return send_error(s, c, fam, &e, NULL);
        }
        body = r->body.n ? chat_json_parse(r->body.p, r->body.n) : NULL;
        if (!body || !cJSON_IsObject(body)) {
            srv_fail(&e, 400, NULL, NULL, "the request body is not a JSON object%s%s", body ? "" : ": ",
                     body ? "" : (r->body.n ? rl_lasterr() : "empty body"));
            cJSON_Delete(body);
            return send_error(s, c, fam, &e, NULL);
        }
    }
    if (r->rest && !body) { /* GET /v1/models/{id}: the id as the handler's body */
        if (!(body = cJSON_CreateObject()) || !cJSON_AddStringToObject(body, "id", r->rest)) {
            cJSON_Delete(body);
            return MHD_NO;
        }
    }
    srv_request rq = {0};
    srv_reply rep = {0};
    int k = rt->fn(&s->info, body, &rq, &rep, &e);
    cJSON_Delete(body);
    release_body(s, r); /* parsed: the job holds token ids only */
    if (k < 0) {
        srv_request_free(&rq);
        if (!e.status) srv_fail(&e, 500, "server_error", NULL, "%s", rl_lasterr());
        return send_error(s, c, fam, &e, NULL);
    }
    if (k == 0) return send_buf(s, c, rep.status, rep.ctype, rep.body, rep.n, NULL);

    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    srv_job *j = job_new(s, fam, ci ? ci->connect_fd : -1);
    if (!j) {
        srv_request_free(&rq);
        return MHD_NO;
    }
    j->rq = rq;
    j->conn = sock_of(c) ? sock_of(c)->g : NULL;
    r->job = j;
    clamp_length(&s->info, &j->rq);
    warn_train(s, &j->rq);
    /* A stream opens now (headers and its first event), before the queue wait and the prefill:
     * clients' first-byte timeouts never see the silence; keep-alives follow (stream_reader).
     * Nothing else touches the API state before enqueue. */
    bool open_now = j->rq.stream && j->rq.api->open;
    if (open_now) {
        j->rq.api->open(j, j->rq.st, (int)j->rq.prompt.n);
        j->t_sent = rl_now();
    }
    if (s->p.verbose)
        fprintf(stderr, "serve: %s accepted: %zu prompt tokens, parsed and tokenised in %.1f ms%s\n",
                j->rq.api->name, j->rq.prompt.n, (rl_now() - t_in) * 1e3, open_now ? ", stream opened" : "");
    if (enqueue(s, j)) {
        srv_fail(&e, 503, fam == FAM_ANTHROPIC ? "overloaded_error" : "server_error", NULL,
                 "the server is busy (%d requests queued, --queue): retry later", s->p.queue);
        return send_error(s, c, fam, &e, "1");
    }
    if (!open_now) {
        /* Wait until the job starts (streaming) or is done (non-streaming), watching the client
         * (a client gone while its job still waits in the queue takes it out at once). A
         * non-streaming answer that takes longer than json_ka_after (a long prefill, a queue wait)
         * is sent as it comes instead: status 200 and its headers now, a newline a second (JSON
         * allows leading whitespace) so that clients' and proxies' idle and first-byte timeouts
         * (Node's fetch: 300 s for headers; nginx: 60 s) do not fire, then the body. The price:
         * an error found later (the server stops, the engine fails) can no longer change the
         * status; the body is then the API's error object under 200 (docs/SERVER.md). */
        double t_wait = rl_now();
        bool ws = false;
        pthread_mutex_lock(&j->mu);
        while (!(j->rq.stream ? j->started : j->done)) {
            timed_wait(j, 0.1);
            if (!j->done && peer_gone(j->fd)) {
                j->cancel = 1;
                pthread_mutex_unlock(&j->mu);
                if (queue_drop(s, j)) return MHD_NO; /* never ran: it leaves the queue now */
                pthread_mutex_lock(&j->mu);          /* running: keep waiting, the job owns its output */
            }
            if (!j->rq.stream && !j->done && !j->cancel && rl_now() - t_wait >= s->json_ka_after) {
                ws = j->ws_keepalive = true;
                j->t_sent = rl_now() - KEEPALIVE_S; /* the first newline at once */
                break;
            }
        }
        bool body_ready = j->done && j->status; /* a complete non-streaming answer (or a drop) */
        pthread_mutex_unlock(&j->mu);
        if (!ws && (!j->rq.stream || body_ready)) {
            pthread_mutex_lock(&j->mu);
            /* a streaming job that ended before starting has its body too; otherwise it is a stream */
            int status = j->status ? j->status : 200;
            const char *ctype = j->ctype ? j->ctype : "application/json";
            size_t n;
            char *p = chat_buf_take(&j->out, &n);
            j->out_read = 0;
            pthread_mutex_unlock(&j->mu);
            if (!p) return MHD_NO;
            set_phase(s, c, CG_SEND, 0);
            return send_buf_rq(s, c, status, ctype, p, n, NULL, &j->rq);
        }
    }
    job_ref(j);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
    if (!resp) {
        job_unref(j);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", j->ws_keepalive ? "application/json" : "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    add_length_headers(resp, &j->rq);
    add_common_headers(s, c, resp, 200);
    enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    count_status(s, 200);
    return rc;
}

static bool is_post(const char *m) { return !strcmp(m, "POST"); }

/* CORS preflight: 204 with what the browser may send, for an allowed origin on a known path. */
static enum MHD_Result preflight(server *s, struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            want ? want : "Authorization, Content-Type, x-api-key, anthropic-version");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    add_common_headers(s, c, r, 204);
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    count_status(s, 204);
    return rc;
}

/* Everything decided from the request line and headers, before any body byte is read (cheapest
 * first): route, Host, Origin, API key, content type, body size, the server's body budget.
 * 0 admitted; else e is the answer. A CORS preflight answers itself (*preflight_ok). */
static int admit(server *s, struct MHD_Connection *c, conn_req *r, const char *url, const char *method,
                 bool *preflight_ok, srv_error *e) {
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES && !r->rt; i++) {
        const char *rest = NULL;
        if (!route_match(&ROUTES[i], url, &rest)) continue;
        path_known = true;
        if (strcmp(method, ROUTES[i].method)) continue;
        r->rt = &ROUTES[i];
        if (rest && !(r->rest = strdup(rest))) return srv_fail(e, 500, NULL, NULL, "out of memory");
    }
    bool ant = r->rt && r->rt->fam == FAM_ANTHROPIC;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!http_policy_host_ok(&s->allow, host))
        return srv_fail(e, 403, ant ? "permission_error" : "invalid_request_error", NULL,
                        "Host '%.100s' is not allowed (DNS-rebinding protection): start the server with "
                        "--allow-host NAME to accept it",
                        host);
    if (!http_policy_origin_ok(&s->allow, origin))
        return srv_fail(e, 403, ant ? "permission_error" : "invalid_request_error", NULL,
                        "browser origin '%.100s' is not allowed: start the server with --allow-origin ORIGIN "
                        "to accept it",
                        origin);
    if (!strcmp(method, "OPTIONS") && path_known) {
        *preflight_ok = true;
        return 0;
    }
    if (!r->rt)
        return srv_fail(e, path_known ? 405 : 404, path_known ? "invalid_request_error" : "not_found_error",
                        NULL, path_known ? "method %s is not allowed on %s" : "no such endpoint: %s %s",
                        method, url);
    if (strcmp(url, "/health") && !key_ok(s, c)) {
        srv_fail(e, 401, ant ? "authentication_error" : "invalid_request_error", NULL,
                 "invalid or missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
        snprintf(e->code, sizeof e->code, "invalid_api_key");
        return -1;
    }
    if (!is_post(method)) return 0;
    bool browser = origin || MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Mode");
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!http_policy_ctype_ok(ct, browser))
        return srv_fail(e, 415, NULL, NULL,
                        "Content-Type '%.60s' is not accepted: send the body as "
                        "'Content-Type: application/json'",
                        ct ? ct : "(none)");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    char *end = NULL;
    unsigned long long len = cl ? strtoull(cl, &end, 10) : 0;
    if (cl && (end == cl || *end || len > s->p.max_body))
        return srv_fail(
            e, 413, ant ? "request_too_large" : "invalid_request_error", NULL,
            "the request body (%s bytes) is larger than the server's limit of %zu bytes (--max-body)", cl,
            s->p.max_body);
    size_t want = cl ? (size_t)len : s->p.max_body; /* chunked: the most it may grow to */
    pthread_mutex_lock(&s->mu);
    bool room = s->body_inflight + want <= s->body_budget || s->body_inflight == 0;
    if (room) s->body_inflight += want;
    pthread_mutex_unlock(&s->mu);
    if (!room)
        return srv_fail(e, 503, ant ? "overloaded_error" : "server_error", NULL,
                        "the server is receiving too many large requests at once: retry later");
    r->reserved = want;
    if (cl && len) { /* the exact size: no doubling of the buffer */
        r->body.p = malloc((size_t)len + 1);
        r->body.cap = r->body.p ? (size_t)len + 1 : 0;
    }
    return 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size,
                                 void **con_cls) {
    server *s = cls;
    conn_req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        *con_cls = r;
        r->t0 = rl_now();
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        sock_ctx *sc = sock_of(c);
        if (sc) srv_new_id(sc->rid, sizeof sc->rid, "req_"), sc->status = 0;
        pthread_mutex_lock(&s->mu);
        s->n_open++;
        pthread_mutex_unlock(&s->mu);
        srv_error e = {0};
        bool pre = false;
        if (admit(s, c, r, url, method, &pre, &e)) {
            r->answered = true; /* the body, if any, is never read: the connection closes after */
            set_phase(s, c, CG_SEND, 0);
            if (sc && is_post(method)) conn_guard_linger(s->g, sc->g);
            return send_error(s, c, r->rt ? r->rt->fam : FAM_OPENAI, &e, e.status == 503 ? "1" : NULL);
        }
        if (pre) {
            r->answered = true;
            set_phase(s, c, CG_SEND, 0);
            return preflight(s, c);
        }
        /* the body must arrive in read_timeout plus its size at body_rate */
        if (is_post(method))
            set_phase(s, c, CG_BODY, (double)r->reserved / conn_guard_params(s->g).body_rate);
        return MHD_YES;
    }
    if (r->answered) { /* refused early: whatever comes is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_big) {
            if (r->body.n + *upload_size > s->p.max_body) { /* chunked, past the limit: answer now */
                r->too_big = true;
                release_body(s, r);
                *upload_size = 0;
                r->answered = true;
                set_phase(s, c, CG_SEND, 0);
                if (sock_of(c)) conn_guard_linger(s->g, sock_of(c)->g);
                return dispatch(s, c, r);
            }
            chat_buf_put(&r->body, upload, *upload_size);
        }
        r->body_bytes += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->body.oom) return MHD_NO;
    set_phase(s, c, CG_WORK, 0);
    return dispatch(s, c, r);
}

/* One structured line per request on stderr (-v): ids, sizes, timings, outcome. */
static void log_request(server *s, struct MHD_Connection *c, conn_req *r,
                        enum MHD_RequestTerminationCode toe) {
    sock_ctx *sc = sock_of(c);
    srv_result res = {0};
    double wait = 0;
    const char *api = "-";
    if (r->job) {
        pthread_mutex_lock(&r->job->mu);
        res = r->job->res;
        pthread_mutex_unlock(&r->job->mu);
        if (r->job->t_started) wait = r->job->t_started - r->job->t_queued;
        if (r->job->rq.api) api = r->job->rq.api->name;
    }
    static const char *const toes[] = {"ok", "error", "timeout", "shutdown", "read_error", "client_abort"};
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "event", "request");
    cJSON_AddStringToObject(o, "id", sc ? sc->rid : "");
    cJSON_AddStringToObject(o, "peer", sc ? sc->peer : "");
    cJSON_AddStringToObject(o, "method", r->method);
    cJSON_AddStringToObject(o, "path", r->path); /* escaped: a client cannot forge log lines */
    cJSON_AddNumberToObject(o, "status", sc ? sc->status : 0);
    cJSON_AddStringToObject(o, "end", (unsigned)toe < 6 ? toes[toe] : "?");
    cJSON_AddNumberToObject(o, "body_bytes", (double)r->body_bytes);
    if (r->job) {
        cJSON_AddStringToObject(o, "api", api);
        cJSON_AddStringToObject(o, "outcome", srv_reason_name(res.reason));
        cJSON_AddNumberToObject(o, "prompt_tokens", res.n_prompt);
        cJSON_AddNumberToObject(o, "reused_tokens", res.n_reused);
        cJSON_AddNumberToObject(o, "gen_tokens", res.n_gen);
        cJSON_AddNumberToObject(o, "queue_s", round(wait * 1e3) / 1e3);
        cJSON_AddNumberToObject(o, "prompt_s", round(res.t_prompt * 1e3) / 1e3);
        cJSON_AddNumberToObject(o, "gen_s", round(res.t_gen * 1e3) / 1e3);
        if (res.reason == SRV_ERROR) cJSON_AddStringToObject(o, "error", res.error);
    }
    cJSON_AddNumberToObject(o, "total_s", round((rl_now() - r->t0) * 1e3) / 1e3);
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (line) fprintf(stderr, "%s\n", line);
    free(line);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    server *s = cls;
    conn_req *r = *con_cls;
    if (!r) return;
    if (s->p.verbose) log_request(s, c, r, toe);
    pthread_mutex_lock(&s->mu);
    s->n_open--;
    pthread_mutex_unlock(&s->mu);
    if (r->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) r->job->cancel = 1;
        job_unref(r->job);
    }
    release_body(s, r);
    free(r->rest);
    free(r);
    *con_cls = NULL;
    set_phase(s, c, CG_IDLE, 0); /* keep-alive: the next request must come within idle_timeout */
}

/* Connection start / end: the guard's admission (caps, eviction) and its entry. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode t) {
    server *s = cls;
    if (t == MHD_CONNECTION_NOTIFY_STARTED) {
        sock_ctx *sc = calloc(1, sizeof *sc);
        *socket_ctx = sc;
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        uint32_t peer = 0;
        if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET)
            peer = ((const struct sockaddr_in *)ai->client_addr)->sin_addr.s_addr;
        if (sc) inet_ntop(AF_INET, &peer, sc->peer, sizeof sc->peer);
        if (fi) {
            cg_conn *g = conn_guard_open(s->g, fi->connect_fd, peer);
            if (sc) sc->g = g;
            else if (g) conn_guard_close(s->g, g); /* out of memory: untracked, but closed */
        }
    } else {
        sock_ctx *sc = *socket_ctx;
        if (sc) conn_guard_close(s->g, sc->g);
        free(sc);
        *socket_ctx = NULL;
    }
}

/* The request line of a new request arrived: its headers must follow within read_timeout. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    set_phase(cls, c, CG_HEADERS, 0);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */
static void server_free(server *s) {
    if (!s) return;
    if (s->b && s->b->free) s->b->free(s->b->ud);
    for (int i = 0; s->slots && i < s->n_slots; i++) pthread_cond_destroy(&s->slots[i].cv);
    free(s->slots);
    conn_guard_free(s->g);
    free(s->m.backend_lines);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->fields.mu);
    free(s);
}

server *server_start(const server_params *p, srv_backend *b) {
    server *s = calloc(1, sizeof *s);
    if (!s) {
        if (b->free) b->free(b->ud);
        rl_seterr("out of memory (server)");
        return NULL;
    }
    s->p = *p;
    s->b = b;
    if (s->p.queue < 0) s->p.queue = 0;
    if (!s->p.max_body) s->p.max_body = 32u << 20;
    if (!s->p.max_header) s->p.max_header = 64u << 10;
    s->body_budget = 4 * s->p.max_body;
    /* parse cost: token-id prompts are the densest legitimate JSON (a value per ~6 bytes), a
     * prompt is at most n_ctx of them */
    s->jl = (json_limits){.max_values = 65536 + 2 * (size_t)(b->n_ctx > 0 ? b->n_ctx : 0),
                          .values_per_4b = 4096,
                          .max_depth = 128};
    s->allow = (http_allow){.hosts = p->allow_hosts,
                            .n_hosts = p->n_allow_hosts,
                            .origins = p->allow_origins,
                            .n_origins = p->n_allow_origins,
                            .hostname = s->hostname};
    if (gethostname(s->hostname, sizeof s->hostname - 1)) s->hostname[0] = 0;
    pthread_mutex_init(&s->fields.mu, NULL);
    s->info = (srv_info){.tok = b->tok,
                         .fmt = b->fmt,
                         .n_ctx = b->n_ctx,
                         .model_id = p->model_id,
                         .sp = p->sp,
                         .max_tokens = p->max_tokens,
                         .reasoning = p->reasoning,
                         .strict_fields = p->strict_fields,
                         .unknown = &s->fields,
                         .n_ctx_train = p->n_ctx_train ? p->n_ctx_train : b->n_ctx_train};
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->t_start = rl_now();
    const char *ka = getenv("RL_SERVE_JSON_KEEPALIVE_S"); /* tests: a shorter wait */
    s->json_ka_after = ka && atof(ka) > 0 ? atof(ka) : JSON_KEEPALIVE_AFTER_S;

    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p->port);
    if (inet_pton(AF_INET, p->host, &sa.sin_addr) != 1) {
        rl_seterr("--host %s: not an IPv4 address (use 127.0.0.1, 0.0.0.0 or a local interface address)",
                  p->host);
        server_free(s);
        return NULL;
    }
    s->n_slots = b->n_slots > 0 ? b->n_slots : 1;
    if (!(s->slots = calloc((size_t)s->n_slots, sizeof *s->slots))) {
        rl_seterr("out of memory (server)");
        server_free(s);
        return NULL;
    }
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        sl->srv = s;
        sl->idx = i;
        pthread_cond_init(&sl->cv, NULL);
        if (pthread_create(&sl->th, NULL, infer_main, sl)) {
            rl_seterr("cannot start the inference threads");
            server_stop(s);
            return NULL;
        }
        pthread_mutex_lock(&s->mu);
        sl->started = true;
        pthread_mutex_unlock(&s->mu);
    }
    cg_params gp = {.max_conns = p->conn_limit,
                    .max_per_peer = p->conn_per_peer,
                    .read_timeout = p->read_timeout,
                    .idle_timeout = p->idle_timeout};
    if (!(s->g = conn_guard_new(&gp))) {
        server_stop(s);
        return NULL;
    }
    s->p.conn_limit = conn_guard_params(s->g).max_conns;
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                                MHD_USE_POLL,
                            0, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)s->p.max_header,
                            /* the guard decides (caps with eviction); this only bounds threads, with
                             * room for evicted connections that are still closing */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.conn_limit + 64,
                            /* deadlines are the guard's (a total time, not an inactivity one) */
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_END);
    if (!s->d) {
        rl_seterr("cannot listen on %s:%d (%s): pick another --port or stop the program using it", p->host,
                  p->port, strerror(errno ? errno : EADDRINUSE));
        server_stop(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    return s;
}

int server_port(const server *s) { return s->port; }

void server_drain_stop(server *s, double timeout) {
    if (!s) return;
    if (s->d) MHD_quiesce_daemon(s->d); /* no new connections */
    pthread_mutex_lock(&s->mu);
    s->draining = true; /* requests on open connections get 503 */
    pthread_mutex_unlock(&s->mu);
    for (double t0 = rl_now(); rl_now() - t0 < timeout;) {
        pthread_mutex_lock(&s->mu);
        int jobs = s->n_jobs;
        pthread_mutex_unlock(&s->mu);
        if (!jobs) break;
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
    }
    server_stop(s);
}

void server_stop(server *s) {
    if (!s) return;
    if (s->d) MHD_quiesce_daemon(s->d); /* no new connections */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (srv_job *j = s->head; j; j = j->next) j->cancel = 1;
    assign(s); /* the queued jobs go to idle slots, which answer them 503 at once */
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].job) s->slots[i].job->cancel = 1;
        pthread_cond_signal(&s->slots[i].cv);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].started) pthread_join(s->slots[i].th, NULL);
    if (s->b->flush) s->b->flush(s->b->ud); /* the backend's pending checkpoints */
    /* let the connections send what their jobs produced (bounded: 5 s) before closing them */
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&s->mu);
        int open = s->n_open;
        pthread_mutex_unlock(&s->mu);
        if (!open) break;
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    if (s->d) MHD_stop_daemon(s->d);
    server_free(s);
}
