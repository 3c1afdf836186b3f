/* server_http.c — see server_int.h: the libmicrohttpd glue. Routes; admission from the request
 * line and headers (Host, Origin, API key, content type, body size, the body budget); dispatch of
 * a read body to its API parser and of the parsed request to the queue; the wait for a job's
 * answer with disconnect detection; the streaming reader and its keep-alives; response headers;
 * the per-request log line; the daemon's start and stop. */
#include "serve/server_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "serve/api_anthropic.h"
#include "serve/api_openai.h"
#include "serve/api_responses.h"
#include "base/common.h"

static cJSON *error_json(api_family fam, const srv_error *e) {
    return fam == FAM_ANTHROPIC ? api_anthropic_error(e) : api_openai_error(e);
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

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->out.n == j->out_read && !j->done) {
        timed_wait(j, 0.1);
        if (j->out.n == j->out_read && !j->done && peer_gone(j->fd)) {
            j->cancel = 1;
            pthread_mutex_unlock(&j->mu);
            srv_queue_drop(j->srv, j); /* still queued (a stream opens at once): it leaves the queue now */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        double now = rl_now();
        if (j->out.n == j->out_read && !j->done && now - j->t_sent >= KEEPALIVE_S) {
            static const char ping[] = "event: ping\ndata: {\"type\": \"ping\"}\n\n",
                              comment[] = ": keep-alive\n\n";
            const char *ka = j->ws_keepalive ? "\n" : j->fam == FAM_ANTHROPIC ? ping : comment;
            size_t k = strlen(ka);
            if (k > max) break;
            // NOLINTNEXTLINE(bugprone-not-null-terminated-result): buf is bytes, returned with its length k
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

static void stream_free(void *cls) { srv_job_unref(cls); }

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
    if (!strcmp(rt->path, "/metrics")) srv_pages_metrics(s, &o);
    else if (!strcmp(rt->path, "/slots")) srv_pages_slots(s, &o);
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
    srv_job *j = srv_job_new(s, fam, ci ? ci->connect_fd : -1);
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
    if (srv_queue_add(s, j)) {
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
                if (srv_queue_drop(s, j)) return MHD_NO; /* never ran: it leaves the queue now */
                pthread_mutex_lock(&j->mu);              /* running: keep waiting, the job owns its output */
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
    srv_job_ref(j);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
    if (!resp) {
        srv_job_unref(j);
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
        srv_job_unref(r->job);
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

/* ---- the daemon ------------------------------------------------------------------------------ */
int srv_http_listen(server *s, struct sockaddr_in *sa) {
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                                MHD_USE_POLL,
                            0, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)sa,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)s->p.max_header,
                            /* the guard decides (caps with eviction); this only bounds threads, with
                             * room for evicted connections that are still closing */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.conn_limit + 64,
                            /* deadlines are the guard's (a total time, not an inactivity one) */
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_END);
    if (!s->d) {
        rl_seterr("cannot listen on %s:%d (%s): pick another --port or stop the program using it", s->p.host,
                  s->p.port, strerror(errno ? errno : EADDRINUSE));
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->p.port;
    return 0;
}

void srv_http_quiesce(server *s) {
    if (s->d) MHD_quiesce_daemon(s->d);
}

void srv_http_close(server *s) {
    if (s->d) MHD_stop_daemon(s->d);
}
