/* server_int.h — private to the server core (server.c, server_http.c, server_pages.c); the API
 * modules see server.h only.
 *
 * The core is three files along its seams:
 *   server.c        jobs and their output buffer, the queue, slot assignment, the inference
 *                   threads, unknown-field counting, start / drain / stop;
 *   server_http.c   the libmicrohttpd glue: routes, admission (Host, Origin, key, size, body
 *                   budget), dispatch of a parsed request to the queue, the streaming reader and
 *                   its keep-alives, disconnect detection, the request log line;
 *   server_pages.c  the /metrics (Prometheus text) and /slots (JSON) pages.
 *
 * Locking: server.mu guards the queue, the slots, the metrics and body_inflight; a job's mu
 * guards its output buffer and done/started/status (the connection thread waits on its cv);
 * fields.mu guards the unknown-field counts. Never take server.mu while holding a job's mu. */
#ifndef RL_SERVER_INT_H
#define RL_SERVER_INT_H

#include <netinet/in.h>
#include <pthread.h>

#include "serve/conn_guard.h"
#include "serve/http_policy.h"
#include "serve/json_guard.h"
#include "serve/server.h"

/* ---- unknown request fields (srv_check_fields) ------------------------------------------- */
struct srv_fieldlog {
    pthread_mutex_t mu;
    struct {
        char name[48];
        long long n;
    } v[64]; /* the first 64 distinct names; later ones count in `other` */
    int n;
    long long other;
};

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

/* A non-streaming answer not ready after this long gets whitespace keep-alives (dispatch;
 * RL_SERVE_JSON_KEEPALIVE_S overrides it for tests). */
#define JSON_KEEPALIVE_AFTER_S 30.0

/* ---- server.c: jobs and the queue ------------------------------------------------------------ */
/* A job with one reference (the caller's), for a request of API family fam on socket fd. */
srv_job *srv_job_new(server *s, api_family fam, int fd);
void srv_job_ref(srv_job *j);
/* Drop a reference; the last one frees the request, the buffer and the job. */
void srv_job_unref(srv_job *j);
/* Queue j (the queue takes a reference) and hand it to an idle slot if there is one.
 * 0 queued, -1 full, stopping or draining (counted as rejected). */
int srv_queue_add(server *s, srv_job *j);
/* Take a job whose client left out of the queue at once, so it holds no queue place (it never
 * runs; its waiting connection thread then ends). false if it is already running or done. */
bool srv_queue_drop(server *s, srv_job *j);

/* ---- server_pages.c: status pages (take s->mu themselves) ------------------------------------ */
/* /slots: what each inference slot is doing, the queue and the connections (JSON). */
void srv_pages_slots(server *s, chat_buf *o);
/* /metrics: Prometheus text exposition. */
void srv_pages_metrics(server *s, chat_buf *o);

/* ---- server_http.c: the daemon --------------------------------------------------------------- */
/* Start libmicrohttpd on sa with the server's limits and callbacks; sets s->d and s->port.
 * 0, or -1 with rl_lasterr set (the port is taken, ...). */
int srv_http_listen(server *s, struct sockaddr_in *sa);
/* Stop accepting new connections (open ones go on). */
void srv_http_quiesce(server *s);
/* Close every connection and stop the daemon's threads. */
void srv_http_close(server *s);

#endif
