/* cmd_serve.c — `redlite serve`: OpenAI- and Anthropic-compatible HTTP server (server.h).
 *
 * The main thread parses flags, opens the backend, starts the server and then only waits for
 * SIGINT/SIGTERM/SIGHUP (blocked in every thread and taken with sigwait, so no handler runs
 * inside a library call). SIGINT/SIGTERM: stop now (running answers are ended properly,
 * checkpoints flushed: server_stop). SIGHUP: drain (no new requests; queued and running ones
 * finish, for at most --drain-timeout seconds), flush the checkpoints, exit 0
 * (server_drain_stop): what a process manager's reload or a rolling restart needs. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "base/common.h"
#include "cli/opts.h"
#include "run/engine.h"
#include "serve/server.h"
#include "serve/server_backend.h"
#include "gguf/gguf.h"
#include "model/qwen3next.h"

static const char *CMD = "serve";

/* serve's own flags (the model, context and sampling flags come from the option table) */
static const char SERVE_FOOTER[] =
    "serving:\n"
    "  --host ADDR            IPv4 address to bind (default 127.0.0.1: this machine only;\n"
    "                         0.0.0.0 exposes the server to the network: set --api-key)\n"
    "                         [env REDLITE_HOST]\n"
    "  --port N               port (default 8080; 0 = any free port, printed at start)\n"
    "                         [env REDLITE_PORT]\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
    "                         (default: $REDLITE_API_KEY if set, else no authentication)\n"
    "  --allow-host NAME      accept requests sent to this host name too (repeatable, or\n"
    "                         comma-separated; '.example.com' = the domain and subdomains, '*' =\n"
    "                         any). Default: loopback names, IP addresses, this machine's name\n"
    "  --allow-origin ORIGIN  accept browser requests (CORS) from this origin, e.g.\n"
    "                         https://app.example.com (repeatable; '*' = any). Default: loopback\n"
    "  --max-conns N          open connections in all (default 256); at the cap a new one\n"
    "                         replaces the oldest idle one\n"
    "  --max-conns-per-peer N open connections from one address (default 32; raise it behind\n"
    "                         a reverse proxy)\n"
    "  --read-timeout S       request headers must arrive within S seconds, a body within S +\n"
    "                         1 s per MiB (default 10)\n"
    "  --idle-timeout S       close a keep-alive connection idle for S seconds (default 15)\n"
    "  --drain-timeout S      on SIGHUP: let running and queued requests finish for at most S\n"
    "                         seconds, then exit (default 300; SIGTERM/SIGINT stop at once)\n"
    "  --alias NAME           model id in /v1/models and answers (default: the file name)\n"
    "  --parallel N|auto      conversations held and run at once (slots; default auto: as\n"
    "                         many as memory holds, at most 4); their decode steps share\n"
    "                         forwards, each answer as if it ran alone\n"
    "  --ram-states N         conversations evicted from a slot kept in RAM (default: one per\n"
    "                         slot; 0 = none)\n"
    "  --ram-states-mib N     their size in all at most N MiB (default: no byte cap; alone,\n"
    "                         without --ram-states: as many as N MiB hold)\n"
    "  --queue N              requests waiting for a slot before 503 (default 16)\n"
    "  --max-body MIB         largest request body (default 32)\n"
    "  -n, --max-tokens, --n-predict N\n"
    "                         answer length when a request does not say (default -1: the\n"
    "                         context / 4 within [1024, 32768]); any request's length is\n"
    "                         clamped to the room its prompt leaves (header X-RedLite-Max-Tokens)\n"
    "  --strict-fields        refuse request fields the server does not know (default: ignore\n"
    "                         them, count them in /metrics and log each name once)\n"
    "  --reasoning auto|on|off  text inside <think>...</think> goes to reasoning_content /\n"
    "                         thinking blocks / reasoning items (auto: when the chat template\n"
    "                         has thinking; default auto)\n"
    "  --checkpoints N        in-memory prefix checkpoints (default 8)\n"
    "  --state-dir DIR        disk checkpoints: a restarted server resumes long conversations\n"
    "                         without re-reading them (files of other models are ignored)\n"
    "  --state-max-mib N      size cap of --state-dir, least recently used files go (8192)\n"
    "  --state-min-tokens N   evaluated tokens between two disk saves (default 256; and at exit)\n"
    "  -v, --verbose          one line per request on stderr\n"
    "\n"
    "Sampling defaults (a request's own fields win; the same as chat's and generate --temp's):\n"
    "temperature 0.7, top-k 20, top-p 0.8, min-p 0 (Qwen's recommended values for the\n"
    "Qwen3-Next / Qwen3-Coder instruct models). --stop is per request.\n"
    "\n"
    "Context window: --ctx; by default the model's trained length (context_length) when its KV\n"
    "cache fits the memory plan (RAM: beside the weights, the experts first; GPU: the free\n"
    "memory), else the most that fits, at least 4096; the choice is printed at start. Clients\n"
    "read it from GET /v1/models (context_length, context_window, max_model_len; n_ctx_train\n"
    "in meta); a longer prompt than the trained length is answered with a warning header and\n"
    "log line; an over-long prompt gets OpenAI's\n"
    "context_length_exceeded / Anthropic's 'prompt is too long: N tokens > M maximum'.\n"
    "\n"
    "TEST ONLY (no model evaluation; protocol tests):\n"
    "  --test-script FILE     answer every request with the next scripted text from FILE\n"
    "                         (answers separated by a line '---')\n"
    "  --test-delay-ms N      delay per scripted token\n";

static const opts_cmd SERVE = {
    "serve", CMD_SERVE, "redlite serve -m MODEL [options]",
    "Serve the model over HTTP for coding agents and other clients:\n"
    "  POST /v1/chat/completions   OpenAI Chat Completions (aider, Continue, opencode, ...)\n"
    "  POST /v1/responses          OpenAI Responses (Codex CLI)\n"
    "  POST /v1/messages           Anthropic Messages (Claude Code); /v1/messages/count_tokens\n"
    "  POST /v1/completions        OpenAI legacy completions (raw text)\n"
    "  GET  /v1/models, /health, /metrics (Prometheus)\n"
    "Requests run in slots (--parallel); others wait in a queue. A request goes to the slot\n"
    "holding the longest prefix of its prompt, so a conversation that continues only\n"
    "evaluates its new tokens (docs/SERVER.md).",
    SERVE_FOOTER};

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

#define MAX_ALLOW 32
typedef struct {
    const char *list[MAX_ALLOW];
    int n;
} allow_list;

typedef struct {
    const char *host, *api_key, *alias, *script_path, *state_dir, *parallel;
    long long ram_states, ram_states_mib;
    long long port, queue, max_body, max_tokens, delay_ms, checkpoints, state_max_mib, state_min_tokens;
    long long max_conns, max_per_peer, read_timeout, idle_timeout, drain_timeout;
    allow_list hosts, origins;
    bool api_key_given;
    int reasoning;
    bool verbose, strict_fields;
} serve_flags;

/* Append the comma-separated items of v (kept in argv: the strings are split in place). */
static int allow_add(allow_list *l, const char *flag, char *v) {
    for (char *save = NULL, *t = strtok_r(v, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!*t) continue;
        if (l->n == MAX_ALLOW) return cli_fail(CMD, 2, "%s: at most %d values", flag, MAX_ALLOW), -1;
        l->list[l->n++] = t;
    }
    return 0;
}

/* If argv[*i] is one of serve's own flags, consume it (and its value): 1; 0 if not ours; -1
 * after a usage error. Accepts "--flag value" and "--flag=value". */
static int serve_flag(int argc, char **argv, int *i, serve_flags *f) {
    static const struct {
        const char *name;
        int kind; /* 0 string, 1 integer, 2 switch, 3 reasoning, 4 allow list */
        size_t off;
        long long lo, hi;
    } T[] = {
        {"--host", 0, offsetof(serve_flags, host), 0, 0},
        {"--api-key", 0, offsetof(serve_flags, api_key), 0, 0},
        {"--alias", 0, offsetof(serve_flags, alias), 0, 0},
        {"--test-script", 0, offsetof(serve_flags, script_path), 0, 0},
        {"--state-dir", 0, offsetof(serve_flags, state_dir), 0, 0},
        {"--parallel", 0, offsetof(serve_flags, parallel), 0, 0},
        {"--ram-states", 1, offsetof(serve_flags, ram_states), 0, 1024},
        {"--ram-states-mib", 1, offsetof(serve_flags, ram_states_mib), 1, 1LL << 24},
        {"--port", 1, offsetof(serve_flags, port), 0, 65535},
        {"--queue", 1, offsetof(serve_flags, queue), 0, 4096},
        {"--max-body", 1, offsetof(serve_flags, max_body), 1, 4096},
        {"-n", 1, offsetof(serve_flags, max_tokens), -1, 1LL << 40},
        {"--max-tokens", 1, offsetof(serve_flags, max_tokens), -1, 1LL << 40},
        {"--n-predict", 1, offsetof(serve_flags, max_tokens), -1, 1LL << 40},
        {"--test-delay-ms", 1, offsetof(serve_flags, delay_ms), 0, 60000},
        {"--checkpoints", 1, offsetof(serve_flags, checkpoints), 1, 1024},
        {"--state-max-mib", 1, offsetof(serve_flags, state_max_mib), 1, 1LL << 24},
        {"--state-min-tokens", 1, offsetof(serve_flags, state_min_tokens), 1, 1LL << 30},
        {"-v", 2, offsetof(serve_flags, verbose), 0, 0},
        {"--strict-fields", 2, offsetof(serve_flags, strict_fields), 0, 0},
        {"--reasoning", 3, offsetof(serve_flags, reasoning), 0, 0},
        {"--allow-host", 4, offsetof(serve_flags, hosts), 0, 0},
        {"--allow-origin", 4, offsetof(serve_flags, origins), 0, 0},
        {"--max-conns", 1, offsetof(serve_flags, max_conns), 4, 16384},
        {"--max-conns-per-peer", 1, offsetof(serve_flags, max_per_peer), 1, 16384},
        {"--read-timeout", 1, offsetof(serve_flags, read_timeout), 1, 3600},
        {"--idle-timeout", 1, offsetof(serve_flags, idle_timeout), 1, 3600},
        {"--drain-timeout", 1, offsetof(serve_flags, drain_timeout), 0, 86400},
    };
    const char *a = argv[*i], *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    for (size_t k = 0; k < sizeof T / sizeof T[0]; k++) {
        if (strlen(T[k].name) != n || strncmp(a, T[k].name, n)) continue;
        char *field = (char *)f + T[k].off;
        if (T[k].kind == 2) {
            if (eq) return cli_fail(CMD, 2, "%s takes no value", T[k].name), -1;
            *(bool *)field = true;
            return 1;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (*i + 1 >= argc)
                return cli_fail(CMD, 2, "%s needs a value (see redlite serve --help)", T[k].name), -1;
            v = argv[++*i];
        }
        if (T[k].kind == 0) {
            *(const char **)field = v;
            if (T[k].off == offsetof(serve_flags, api_key)) f->api_key_given = true;
        } else if (T[k].kind == 4) {
            if (allow_add((allow_list *)field, T[k].name, (char *)v)) return -1;
        } else if (T[k].kind == 1) {
            if (!cli_parse_int(CMD, T[k].name, v, T[k].lo, T[k].hi, (long long *)field)) return -1;
        } else {
            if (!strcmp(v, "auto")) *(int *)field = -1;
            else if (!strcmp(v, "on")) *(int *)field = 1;
            else if (!strcmp(v, "off")) *(int *)field = 0;
            else return cli_fail(CMD, 2, "--reasoning expects auto, on or off, got '%s'", v), -1;
        }
        return 1;
    }
    return 0;
}

/* REDLITE_HOST / REDLITE_PORT: the defaults of --host / --port (the flags win). */
static int serve_env(serve_flags *f) {
    const char *h = getenv("REDLITE_HOST"), *p = getenv("REDLITE_PORT");
    if (h && *h) f->host = h;
    if (p && *p && !cli_parse_int(CMD, "REDLITE_PORT", p, 0, 65535, &f->port)) return -1;
    return 0;
}

static bool is_loopback(const char *host) {
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* --host before the model is loaded: an IPv4 address this machine has (a test bind to port 0),
 * so a wrong address is named as such and not blamed on the port; a non-loopback address
 * without an API key is a warning. 0, or 2 after a usage error. */
static int serve_check_host(const char *host, const char *api_key) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return cli_fail(CMD, 2,
                        "--host %s: not an IPv4 address (use 127.0.0.1, 0.0.0.0 or an address of this "
                        "machine)",
                        host);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) {
        int r = bind(fd, (struct sockaddr *)&sa, sizeof sa), err = errno;
        close(fd);
        if (r && err == EADDRNOTAVAIL)
            return cli_fail(CMD, 2,
                            "--host %s: this machine has no such address (use 127.0.0.1, 0.0.0.0 or one of "
                            "its interfaces' addresses)",
                            host);
    }
    if (!is_loopback(host) && !api_key)
        fprintf(stderr,
                "redlite serve: warning: --host %s is reachable from the network without an API key: "
                "anyone who can connect can use the model (set --api-key KEY or REDLITE_API_KEY)\n",
                host);
    return 0;
}

/* -c beyond the model's trained context (context_length): a warning, as for a long prompt. */
static void serve_warn_ctx(const char *model, int n_ctx) {
    gguf_file *f = gguf_open(model);
    q3n_hparams hp;
    if (f && q3n_read_hparams(f, &hp) == 0 && hp.n_ctx_train > 0 && n_ctx > hp.n_ctx_train)
        fprintf(stderr,
                "redlite serve: warning: the context (%d) is larger than the %d tokens the model was trained "
                "on (context_length); answers past that may degrade\n",
                n_ctx, hp.n_ctx_train);
    gguf_close(f);
}

/* The real backend: one session per slot over the model (run/session.h). */
static srv_backend *serve_session_backend(const cli_opts *o, const serve_flags *f, int n_ctx,
                                          long long n_slots, bool verbose) {
    srv_session_params pp = {
        .model_path = o->model,
        .backend = o->backend,
        .n_threads = (int)o->threads,
        .n_ctx = n_ctx,
        .n_batch = (int)o->batch,
        .kv = o->kv,
        .cache_spec = o->cache_spec,
        .iq_repack = o->iq_repack,
        .map_weights = cli_map_weights(o),
        .vram_spec = o->vram_spec,
        .vram_pin = o->vram_pin,
        .vram_miss = o->vram_miss,
        .route_bias = o->route_bias,
        .route_trace = o->route_trace,
        .max_checkpoints = (int)f->checkpoints,
        .n_slots = (int)n_slots,
        .ram_states = (int)f->ram_states,
        .ram_max_bytes = (uint64_t)f->ram_states_mib << 20,
        .state_dir = f->state_dir,
        .state_max_bytes = (uint64_t)f->state_max_mib << 20,
        .state_min_tokens = (int)f->state_min_tokens,
        /* cache-aware routing and speculation exclude each other: the default gives way */
        .spec = o->route_bias > 0 && !o->spec_set ? SPEC_NONE : o->spec,
        .draft_max = o->draft_max,
        .verbose = verbose,
    };
    return srv_backend_session(&pp);
}

int cmd_serve(int argc, char **argv) {
    serve_flags f = {.host = "127.0.0.1",
                     .api_key = getenv("REDLITE_API_KEY"),
                     .port = 8080,
                     .queue = 16,
                     .max_body = 32,
                     .max_tokens = -1,
                     .state_max_mib = 8192,
                     .state_min_tokens = 256,
                     .reasoning = -1,
                     .parallel = "auto",
                     .ram_states = -1,
                     .drain_timeout = 300};
    if (serve_env(&f)) return 2;
    cli_opts o;
    opts_defaults(&o); /* the shared sampling defaults (opts.h) */
    o.n_ctx = 0;       /* planned from the model's trained length and the memory unless -c (run/ctx_plan.h) */
    /* serve's own flags first; the rest goes through the option table */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return cli_fail(CMD, 1, "out of memory");
    int nrest = 0;
    rest[nrest++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            rest[nrest++] = argv[i];
            continue;
        }
        int r = serve_flag(argc, argv, &i, &f);
        if (r < 0) {
            free(rest);
            return 2;
        }
        if (r == 0) rest[nrest++] = argv[i];
    }
    int r = opts_parse(&SERVE, nrest, rest, &o);
    free(rest);
    if (r) return r == OPTS_HELP ? 0 : r;
    const char *model = o.model, *host = f.host, *api_key = f.api_key, *alias = f.alias;
    const char *script_path = f.script_path;
    long long port = f.port, queue = f.queue, max_body = f.max_body, max_tokens = f.max_tokens;
    long long delay_ms = f.delay_ms;
    int reasoning = f.reasoning;
    bool verbose = f.verbose || o.verbose;
    if (o.n_stops)
        return cli_fail(CMD, 2, "--stop is per request here: send 'stop' / 'stop_sequences' in the request");
    if (f.api_key_given && !*api_key)
        return cli_fail(CMD, 2,
                        "--api-key is empty: give a key, or leave the option out to serve without one");
    if (api_key && !*api_key) { /* REDLITE_API_KEY= (set but empty) */
        fprintf(stderr, "redlite serve: warning: REDLITE_API_KEY is set but empty: no API key is required\n");
        api_key = NULL;
    }
    if (!strcmp(host, "localhost")) host = "127.0.0.1"; /* the server binds IPv4 literals */
    if ((r = serve_check_host(host, api_key))) return r;
    long long n_slots = 0; /* auto */
    if (strcmp(f.parallel, "auto") &&
        !cli_parse_int(CMD, "--parallel", f.parallel, 1, ENGINE_ROWS_MAX, &n_slots))
        return 2;

    /* every thread started from here on inherits the blocked signals; sigwait takes them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int n_ctx = (int)o.n_ctx; /* 0: the backend plans it (script: 32768) */
    if (!script_path && o.n_ctx) serve_warn_ctx(model, n_ctx);
    srv_backend *b = NULL;
    if (script_path) {
        size_t n;
        char *script = cli_read_file(script_path, &n);
        if (!script) return cli_fail(CMD, 1, "%s", rl_lasterr());
        b = srv_backend_script(&(srv_script_params){
            .model_path = model, .n_ctx = n_ctx, .script = script, .delay_ms = (int)delay_ms});
        free(script);
        if (b)
            fprintf(stderr,
                    "redlite serve: TEST MODE: scripted answers from %s, the model is not evaluated\n",
                    script_path);
    } else {
        b = serve_session_backend(&o, &f, n_ctx, n_slots, verbose);
    }
    if (!b) return cli_fail(CMD, 1, "%s", rl_lasterr());

    server_params sp = {
        .host = host,
        .port = (int)port,
        .queue = (int)queue,
        .max_body = (size_t)max_body << 20,
        .api_key = api_key,
        .model_id = alias ? alias : base_name(model),
        .max_tokens = max_tokens,
        .sp = o.sp,
        .verbose = verbose,
        .reasoning = reasoning,
        .strict_fields = f.strict_fields,
        .conn_limit = (int)f.max_conns,
        .conn_per_peer = (int)f.max_per_peer,
        .read_timeout = (double)f.read_timeout,
        .idle_timeout = (double)f.idle_timeout,
        .allow_hosts = f.hosts.list,
        .n_allow_hosts = f.hosts.n,
        .allow_origins = f.origins.list,
        .n_allow_origins = f.origins.n,
    };
    server *s = server_start(&sp, b);
    if (!s) return cli_fail(CMD, 1, "%s", rl_lasterr());
    fprintf(stderr,
            "redlite serve: listening on http://%s:%d (backend %s, context %d, %d slot%s, queue %lld%s)\n",
            host, server_port(s), b->name, b->n_ctx, b->n_slots, b->n_slots == 1 ? "" : "s", queue,
            api_key ? ", API key required" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGHUP) {
        fprintf(stderr,
                "redlite serve: SIGHUP: draining (no new requests; running and queued ones finish, at most "
                "%lld s), then checkpoints flushed and exit\n",
                f.drain_timeout);
        server_drain_stop(s, (double)f.drain_timeout);
    } else {
        fprintf(stderr,
                "redlite serve: %s: stopping (in-flight requests are cancelled, checkpoints flushed)\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM");
        server_stop(s);
    }
    fprintf(stderr, "redlite serve: stopped\n");
    return 0;
}
