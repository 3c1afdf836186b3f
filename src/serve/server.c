/* server.c — see server.h and server_int.h. Jobs and their output buffer, the queue, the
 * assignment of jobs to slots, the inference threads, unknown-field counting, and the server's
 * start / drain / stop. The HTTP glue is server_http.c, the status pages server_pages.c. */
#include "serve/server_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"

/* ---- unknown request fields ------------------------------------------------------------- */
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
srv_job *srv_job_new(server *s, api_family fam, int fd) {
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

void srv_job_unref(srv_job *j) {
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

void srv_job_ref(srv_job *j) {
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

/* ---- the inference threads and the queue ----------------------------------------------------- */
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
        srv_job_unref(j);
        pthread_mutex_lock(&s->mu);
        assign(s);
        if (s->stopping && !s->head) /* drained: the idle slots can end too */
            for (int i = 0; i < s->n_slots; i++) pthread_cond_signal(&s->slots[i].cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int srv_queue_add(server *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->draining || s->n_jobs >= s->p.queue + s->n_slots) {
        s->m.rejected++;
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    srv_job_ref(j); /* the queue's reference */
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

bool srv_queue_drop(server *s, srv_job *j) {
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
        srv_job_unref(j); /* the queue's reference */
    }
    return dropped;
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
    if (srv_http_listen(s, &sa)) {
        server_stop(s);
        return NULL;
    }
    return s;
}

int server_port(const server *s) { return s->port; }

void server_drain_stop(server *s, double timeout) {
    if (!s) return;
    srv_http_quiesce(s); /* no new connections */
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
    srv_http_quiesce(s); /* no new connections */
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
    srv_http_close(s);
    server_free(s);
}
