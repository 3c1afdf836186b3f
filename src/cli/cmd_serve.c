/* cmd_serve.c — `redlite serve`: OpenAI- and Anthropic-compatible HTTP server (server.h).
 *
 * The main thread parses flags, opens the backend, starts the server and then only waits for
 * SIGINT/SIGTERM (blocked in every thread and taken with sigwait, so no handler runs inside a
 * library call); on a signal it stops the server gracefully (server_stop). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "gen.h"
#include "server.h"
#include "server_backend.h"

static const char *CMD = "serve";

static void usage(FILE *out) {
    fprintf(out,
            "usage: redlite serve -m MODEL [options]\n"
            "\n"
            "Serve the model over HTTP for coding agents and other clients:\n"
            "  POST /v1/chat/completions   OpenAI Chat Completions (aider, Continue, opencode, ...)\n"
            "  POST /v1/responses          OpenAI Responses (Codex CLI)\n"
            "  POST /v1/messages           Anthropic Messages (Claude Code); /v1/messages/count_tokens\n"
            "  POST /v1/completions        OpenAI legacy completions (raw text)\n"
            "  GET  /v1/models, /health, /metrics (Prometheus)\n"
            "One request is evaluated at a time; others wait in a queue. A conversation that extends\n"
            "the previous one only evaluates its new tokens.\n"
            "\n"
            "  -m, --model FILE       GGUF model (qwen3next)\n"
            "  --host ADDR            address to bind (default 127.0.0.1: this machine only;\n"
            "                         0.0.0.0 exposes the server to the network: set --api-key)\n"
            "  --port N               port (default 8080; 0 = any free port, printed at start)\n"
            "  --api-key KEY          require 'Authorization: Bearer KEY' or 'x-api-key: KEY'\n"
            "                         (default: $REDLITE_API_KEY if set, else no authentication)\n"
            "  --alias NAME           model id in /v1/models and answers (default: file name)\n"
            "  --queue N              requests waiting behind the running one before 503 (default 16)\n"
            "  --max-body MIB         largest request body (default 32)\n"
            "  -n, --max-tokens N     answer length when a request does not say (default -1:\n"
            "                         until the answer ends or the context is full)\n"
            "  --checkpoints N        in-memory prefix checkpoints (default 8)\n"
            "  --state-dir DIR        disk checkpoints: a restarted server resumes long conversations\n"
            "                         without re-reading them (files of other models are ignored)\n"
            "  --state-max-mib N      size cap of --state-dir, least recently used files go (8192)\n"
            "  --state-min-tokens N   evaluated tokens between two disk saves (default 256; and at exit)\n"
            "  --reasoning auto|on|off  answer text inside <think>...</think> goes to reasoning_content\n"
            "                         / thinking blocks / reasoning items (auto: when the chat\n"
            "                         template has thinking; default auto)\n"
            "  -v, --verbose          one line per request on stderr\n"
            "  -h, --help             this help\n"
            "\n%s\n%s"
            "\nSampling defaults (a request's own fields win): temperature 0.7, top-k 20, top-p 0.8,\n"
            "min-p 0 (Qwen's recommendation for Qwen3-Next / Qwen3-Coder).\n"
            "\n"
            "TEST ONLY (no model evaluation; protocol tests):\n"
            "  --test-script FILE     answer every request with the next scripted text from FILE\n"
            "                         (answers separated by a line '---')\n"
            "  --test-delay-ms N      delay per scripted token\n",
            GEN_FLAGS_HELP, GEN_MODEL_HELP);
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *api_key = getenv("REDLITE_API_KEY"), *alias = NULL;
    const char *script_path = NULL, *state_dir = NULL;
    long long checkpoints = 0, state_max_mib = 8192, state_min_tokens = 256;
    long long port = 8080, queue = 16, max_body = 32, max_tokens = -1, delay_ms = 0;
    bool verbose = false;
    int reasoning = -1;
    gen_flags gf;
    gen_model_flags mf = {0};
    gen_flags_init(&gf, true);
    gf.sp.top_k = 20;
    gf.sp.top_p = 0.8f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = gen_flags_parse(CMD, argc, argv, &i, &gf);
        if (r == 0) r = gen_model_flags_parse(CMD, argc, argv, &i, &mf);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--host")) {
            if (!(host = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--api-key")) {
            if (!(api_key = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--alias")) {
            if (!(alias = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--port")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, 0, 65535, &port)) return 2;
        } else if (!strcmp(a, "--queue")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, 0, 4096, &queue)) return 2;
        } else if (!strcmp(a, "--max-body")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, 1, 4096, &max_body)) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, -1, 1LL << 40, &max_tokens)) return 2;
        } else if (!strcmp(a, "--state-dir")) {
            if (!(state_dir = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--state-max-mib")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, 1, 1LL << 24, &state_max_mib)) return 2;
        } else if (!strcmp(a, "--state-min-tokens")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, 1, 1LL << 30, &state_min_tokens)) return 2;
        } else if (!strcmp(a, "--checkpoints")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, 1, 1024, &checkpoints)) return 2;
        } else if (!strcmp(a, "--reasoning")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v) return 2;
            if (!strcmp(v, "auto")) reasoning = -1;
            else if (!strcmp(v, "on")) reasoning = 1;
            else if (!strcmp(v, "off")) reasoning = 0;
            else return cli_fail(CMD, 2, "--reasoning expects auto, on or off, got '%s'", v);
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = true;
        } else if (!strcmp(a, "--test-script")) {
            if (!(script_path = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--test-delay-ms")) {
            const char *v = cli_need_value(CMD, argc, argv, &i);
            if (!v || !cli_parse_int(CMD, a, v, 0, 60000, &delay_ms)) return 2;
        } else {
            return cli_fail(CMD, 2, "unknown option '%s' (see redlite serve --help)", a);
        }
    }
    if (!model) return cli_fail(CMD, 2, "no model: pass -m MODEL.gguf (see redlite serve --help)");
    if (gf.n_stops) return cli_fail(CMD, 2, "--stop is per request here: send 'stop' / 'stop_sequences' in the request");
    if (api_key && !*api_key) api_key = NULL;

    /* every thread started from here on inherits the blocked signals; sigwait takes them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int n_ctx = mf.n_ctx > 0 ? (int)mf.n_ctx : 32768;
    srv_backend *b = NULL;
    if (script_path) {
        size_t n;
        char *script = gen_read_file(script_path, &n);
        if (!script) return cli_fail(CMD, 1, "%s", rl_lasterr());
        b = srv_backend_script(&(srv_script_params){.model_path = model, .n_ctx = mf.n_ctx > 0 ? (int)mf.n_ctx : 4096,
                                                    .script = script, .delay_ms = (int)delay_ms});
        free(script);
        if (b) fprintf(stderr, "redlite serve: TEST MODE: scripted answers from %s, the model is not evaluated\n", script_path);
    } else {
        srv_session_params pp = {
            .model_path = model,
            .backend = mf.backend,
            .n_threads = (int)mf.threads,
            .n_ctx = n_ctx,
            .n_batch = (int)(mf.batch ? mf.batch : 64),
            .cache_spec = mf.cache_spec,
            .route_bias = mf.route_bias,
            .max_checkpoints = (int)checkpoints,
            .state_dir = state_dir,
            .state_max_bytes = (uint64_t)state_max_mib << 20,
            .state_min_tokens = (int)state_min_tokens,
            .verbose = verbose,
        };
        b = srv_backend_session(&pp);
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
        .sp = gf.sp,
        .verbose = verbose,
        .reasoning = reasoning,
    };
    server *s = server_start(&sp, b);
    if (!s) return cli_fail(CMD, 1, "%s", rl_lasterr());
    fprintf(stderr, "redlite serve: listening on http://%s:%d (backend %s, context %d, queue %lld%s)\n", host,
            server_port(s), b->name, b->n_ctx, queue, api_key ? ", API key required" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "redlite serve: %s: stopping (in-flight requests are cancelled, checkpoints flushed)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    server_stop(s);
    fprintf(stderr, "redlite serve: stopped\n");
    return 0;
}
