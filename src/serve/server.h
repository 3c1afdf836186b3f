/* server.h — `redlite serve`: the HTTP server core that the API modules (api_openai.c,
 * api_responses.c, api_anthropic.c) and the inference backends (server_backend.c) plug into.
 *
 * Threads and ownership:
 *   - libmicrohttpd runs one thread per connection. Those threads read and validate requests:
 *     JSON parsing, checks, chat rendering and tokenisation (the tokenizer is immutable, so
 *     this is thread-safe) happen there, and a bad request is answered at once without ever
 *     reaching the model.
 *   - One inference thread per backend slot (srv_backend.n_slots: a sequence each, the model
 *     shared) serves the jobs of a bounded FIFO queue. A request that finds `queue` jobs
 *     waiting gets 503 with Retry-After. A waiting job goes to the idle slot that holds the
 *     longest prefix of its prompt (srv_backend.match), else to the least recently used idle
 *     slot; the backend makes slots that run at once share the model's forwards.
 *   - A job's output (SSE events or the final body) is produced on the inference thread by the
 *     API module's hooks and handed to the connection thread through the job's buffer.
 *   - A client that disconnects sets the job's cancel flag (checked between tokens by the
 *     backend; a queued job is dropped without running).
 *
 * The inference side is behind srv_backend, so protocol code is testable with the scripted
 * test backend (server_backend.h) and runs unchanged on the real session.
 */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "serve/api_think.h"
#include "text/chat.h"
#include "text/grammar.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

/* ---- the inference backend ------------------------------------------------------------- */
typedef enum { SRV_EOG, SRV_LENGTH, SRV_STOP, SRV_CONTEXT, SRV_CANCELLED, SRV_ERROR } srv_reason;
const char *srv_reason_name(srv_reason r);

typedef struct {
    const int32_t *prompt; /* the whole prompt (the backend reuses what it holds) */
    int n_prompt;
    sampler_params sp;
    long long n_predict; /* < 0: until end of generation or context */
    const char *const *stops;
    int n_stops;
    /* called once the prompt is ingested (n_reused of n_prompt tokens were not evaluated) */
    void (*on_prompt)(void *ud, int n_reused);
    /* prefill progress, may be NULL: done of total tokens to evaluate (reused ones excluded),
     * once at the start (done 0) and after each chunk */
    void (*on_progress)(void *ud, int done, int total);
    /* generated text (valid UTF-8, stop strings removed); non-zero return stops (cancelled) */
    int (*on_text)(void *ud, const char *s, size_t n);
    void *ud;
    atomic_int *cancel;
    /* structured outputs (api_grammar.h): the output is a sentence of this grammar, or NULL */
    const grammar *grammar;
    /* log-probabilities: when on_logprobs is set, called for each generated token (before its
     * text) with top_logprobs (0..20) alternatives */
    int top_logprobs;
    void (*on_logprobs)(void *ud, const sampler_logprobs *lp);
} srv_gen;

typedef struct {
    srv_reason reason;
    int n_prompt, n_reused, n_gen;
    double t_prompt, t_gen; /* seconds: prompt ingestion, decoding */
    long long n_drafted, n_accepted;
    int stop_index;  /* SRV_STOP: which of the stop strings ended the text (-1 unknown) */
    char error[256]; /* SRV_ERROR: one line */
} srv_result;

typedef struct {
    void *ud;
    const char *name;     /* "session", "script (test only)" */
    const tokenizer *tok; /* immutable: used from the HTTP threads */
    chat_format fmt;
    int n_ctx;
    int n_ctx_train; /* the model's trained context (GGUF context_length; 0 unknown) */
    int n_slots;     /* sequences held and run at once (>= 1) */
    /* (optional) prompt tokens slot `slot` would reuse (not evaluate) for this prompt; called by
     * the router while the slot is idle */
    int (*match)(void *ud, int slot, const int32_t *prompt, int n);
    /* slot's inference thread only: bring the slot's sequence to the prompt, then generate.
     * Slots run on different threads at once. 0 or -1 (r->error) */
    int (*generate)(void *ud, int slot, const srv_gen *g, srv_result *r);
    /* any inference thread (after a job): extra Prometheus lines (expert cache, ...) */
    void (*metrics)(void *ud, chat_buf *out);
    /* at shutdown, after every inference thread ended: write pending checkpoints */
    void (*flush)(void *ud);
    void (*free)(void *ud);
} srv_backend;

/* ---- what the API modules see ------------------------------------------------------------ */
typedef struct srv_job srv_job;

/* Per-API output hooks, run on the inference thread; st is the API's request state. */
typedef struct {
    const char *name; /* metrics label: "chat", "completions", "responses", "messages" */
    void (*start)(srv_job *j, void *st, int n_prompt, int n_reused);
    int (*text)(srv_job *j, void *st, const char *s, size_t n);
    void (*finish)(srv_job *j, void *st, const srv_result *r);
    void (*free)(void *st);
    /* Streaming only, on the HTTP thread before the job is queued (nothing else touches st
     * yet): the opening event(s) (role chunk, message_start, response.created), so the client
     * has headers and a first event at once instead of after the queue wait and the prefill.
     * `start` then sends nothing more of its own. n_prompt is known; the reuse is not yet. */
    void (*open)(srv_job *j, void *st, int n_prompt);
    /* (optional) per generated token, before its text, when the request asked for logprobs */
    void (*logprobs)(srv_job *j, void *st, const sampler_logprobs *lp);
} srv_api;

/* What a parser hands to the queue. */
typedef struct {
    tok_ids prompt;
    sampler_params sp;
    long long n_predict;
    char *stops[16];
    int n_stops;
    bool stream;
    int think; /* srv_think mode for the output (set by srv_render_prompt) */
    const srv_api *api;
    void *st;
    long long max_tokens_asked; /* set by the server when it clamped n_predict (0: not clamped) */
    int n_ctx_train_exceeded;   /* set by the server: the trained length the prompt runs past (0: none) */
    grammar *grammar;           /* structured outputs (api_grammar.h), owned; NULL = free text */
    bool logprobs;              /* call api->logprobs per token ... */
    int top_logprobs;           /* ... with this many alternatives (0..20) */
} srv_request;
void srv_request_free(srv_request *rq);
/* Add a stop string (copied). 0 or -1 (too many / oom: rl_lasterr). */
int srv_request_add_stop(srv_request *rq, const char *s);

/* Read-only facts the parsers use (thread-safe). */
/* Unknown top-level request fields, counted per name (thread-safe); each name is logged once on
 * stderr. Owned by the server. */
typedef struct srv_fieldlog srv_fieldlog;

typedef struct {
    const tokenizer *tok;
    chat_format fmt;
    int n_ctx;
    int n_ctx_train;    /* the model's trained context (0 unknown) */
    bool strict_fields; /* unknown fields are a 400 (--strict-fields) instead of ignored */
    srv_fieldlog *unknown;
    const char *model_id;
    sampler_params sp;    /* defaults for fields a request leaves out */
    long long max_tokens; /* default n_predict (-1 = srv_default_max_tokens) */
    int reasoning;        /* split <think> blocks: -1 auto (the template has them), 0 off, 1 on */
} srv_info;

typedef struct {
    int status;     /* HTTP status */
    char type[48];  /* API error type, e.g. "invalid_request_error" */
    char code[48];  /* OpenAI "code" ("" = null) */
    char param[64]; /* offending field ("" = null) */
    char msg[512];
    long long n_prompt; /* context_length_exceeded: the prompt's tokens (0 otherwise) */
} srv_error;
/* Fill e; returns -1 so parsers can `return srv_fail(...)`. */
int srv_fail(srv_error *e, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#ifdef __clang_analyzer__
/* the contract where make lint's static analyzer sees it (it does not look into variadic
 * functions; as rl_seterr in base/common.h) */
#define srv_fail(...) (srv_fail(__VA_ARGS__), -1)
#endif

/* A synchronous answer (no model work): body malloc'd, taken over by the server. */
typedef struct {
    int status;
    const char *ctype;
    char *body;
    size_t n;
} srv_reply;
/* Set a reply from a cJSON tree (printed compact; the tree is deleted). 0 or -1. */
int srv_reply_json(srv_reply *r, int status, cJSON *obj);

/* Output of a job (inference thread). Bytes go to the client in order. */
void srv_job_send(srv_job *j, const char *s, size_t n);
/* One SSE event: "event: NAME\n" (when name) + "data: JSON\n\n". obj is deleted. */
void srv_job_sse(srv_job *j, const char *event, cJSON *obj);
/* Non-streaming: the whole answer (takes body). */
void srv_job_body(srv_job *j, int status, const char *ctype, char *body, size_t n);
void srv_job_body_json(srv_job *j, int status, cJSON *obj);

/* Helpers for parsers ---------------------------------------------------------------------- */
/* Field check: members of obj not named in `known` (NULL-terminated) are ignored and counted
 * (in->unknown; each name logged once), or a 400 when in->strict_fields. */
int srv_check_fields(const srv_info *in, const cJSON *obj, const char *const *known, const char *where,
                     srv_error *e);
/* Tokenise prompt text into rq->prompt and check that it leaves room in the context (400
 * context_length_exceeded otherwise, e->n_prompt set; param "messages": callers whose field has
 * another name set e->param). special: added tokens in the text are parsed (raw prompts);
 * plain/n_plain: byte ranges [plain[2i], plain[2i+1]) where no added token is matched (the
 * message contents of a rendered conversation), may be NULL. */
int srv_tokenize_prompt(const srv_info *in, const char *text, size_t n, const size_t *plain, size_t n_plain,
                        srv_request *rq, srv_error *e);
/* 0 when a prompt of n_prompt tokens leaves room to answer; else a 400 context_length_exceeded
 * naming `param` (e->n_prompt set). */
int srv_check_context(const srv_info *in, long long n_prompt, const char *param, srv_error *e);
/* The answer length when neither the request nor --max-tokens sets one: n_ctx / 4 within
 * [1024, 32768] (then clamped to the room the prompt leaves). */
long long srv_default_max_tokens(int n_ctx);
/* Render a conversation with the model's template (generation prompt added; enable_thinking
 * -1 = the template's default) and tokenise it as above: the template's markup is special,
 * the text of system, user and tool messages (and tool definitions) is plain text. */
int srv_render_prompt(const srv_info *in, const chat_conv *conv, int enable_thinking, srv_request *rq,
                      srv_error *e);
/* Common sampler fields (temperature, top_p, top_k, min_p, presence/frequency/repetition
 * penalties, seed): type and range checked. 0 or -1. */
int srv_parse_sampling(const cJSON *body, const srv_info *in, sampler_params *sp, srv_error *e);
/* Optional number/int/bool/string field with type check: 0 absent (or null), 1 present, -1 bad. */
int srv_get_num(const cJSON *o, const char *k, double lo, double hi, double *out, srv_error *e);
int srv_get_int(const cJSON *o, const char *k, long long lo, long long hi, long long *out, srv_error *e);
int srv_get_bool(const cJSON *o, const char *k, bool *out, srv_error *e);
int srv_get_str(const cJSON *o, const char *k, const char **out, srv_error *e);
/* A fresh id "<prefix><24 hex>" into out (size >= strlen(prefix) + 25). */
void srv_new_id(char *out, size_t cap, const char *prefix);
/* Duplicate a string or NULL (oom sets rl_lasterr). */
char *srv_strdup(const char *s);

/* ---- the server -------------------------------------------------------------------------- */
typedef struct {
    const char *host;               /* "127.0.0.1" */
    int port;                       /* 8080; 0 = any free port (see server_port) */
    int queue;                      /* jobs waiting or running before 503 (16) */
    size_t max_body;                /* bytes (32 MiB) */
    size_t max_header;              /* bytes of request line + headers (64 KiB) */
    const char *api_key;            /* NULL = no authentication */
    const char *model_id;           /* id shown in /v1/models and responses */
    long long max_tokens;           /* default generation length (-1: srv_default_max_tokens) */
    sampler_params sp;              /* default sampling */
    int conn_limit;                 /* open connections in all (0 = 256; conn_guard.h) */
    int conn_per_peer;              /* open connections from one client address (0 = 32) */
    double read_timeout;            /* s: request headers (+ body at >= 1 MiB/s) must arrive in (0 = 10) */
    double idle_timeout;            /* s: keep-alive connection with no request (0 = 15) */
    const char *const *allow_hosts; /* extra Host names (http_policy.h) */
    int n_allow_hosts;
    const char *const *allow_origins; /* extra browser origins allowed (CORS) */
    int n_allow_origins;
    int reasoning;      /* srv_info.reasoning */
    bool strict_fields; /* srv_info.strict_fields */
    int n_ctx_train;    /* srv_info.n_ctx_train (0: the backend's) */
    bool verbose;       /* one structured (JSON) line per request on stderr */
} server_params;

typedef struct server server;

/* Start the inference thread and the HTTP daemon; the server owns b from here on (also on
 * failure). NULL with rl_lasterr set (e.g. the port is taken). */
server *server_start(const server_params *p, srv_backend *b);
int server_port(const server *s);
/* Graceful stop: refuse new work, cancel queued and running jobs (their clients get what was
 * generated so far and a proper end), flush the backend's checkpoints, stop the daemon. */
void server_stop(server *s);
/* Drain (SIGHUP): stop accepting connections and jobs (new requests get 503), let the queued
 * and running jobs finish for at most timeout seconds, then server_stop (which cancels what
 * is left and flushes the checkpoints). */
void server_drain_stop(server *s, double timeout);

#endif
