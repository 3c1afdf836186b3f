/* opts.h — the one option table of every command (generate, chat, bench, dump, perplexity,
 * serve, info, synth, tokenize, verify-check): for each flag its names, value name, help,
 * bounds, setter, environment mirror (REDLITE_MODEL ...) and which commands take it. A command
 * sets its defaults in a cli_opts, parses with opts_parse and reads the fields; --help is
 * generated from the table with the command's own defaults, so help and behaviour cannot drift
 * apart. llama.cpp's spellings are rows of the same table: an alias (--ctx-size), an alias of a
 * value (--no-mmap = --weights copy), a flag taken and ignored with a note (-fa), or a usage
 * error whose one line names the option that does it here (-ngl -> --backend cuda / --vram-mib).
 *
 * Environment: a variable mirrors a flag (the flag wins); its value is checked as the flag's,
 * and an error names the variable.
 *
 * Exit codes (every command): 0 success, 1 runtime error (file unreadable, out of memory,
 * engine failure), 2 usage error (unknown flag, missing or out-of-range value, missing
 * required option). Errors are one line on stderr: "redlite CMD: what is wrong (what to do)". */
#ifndef RL_CLI_OPTS_H
#define RL_CLI_OPTS_H

#include <stdbool.h>
#include <stdio.h>

#include "text/sampler.h"
#include "run/session.h"
#include "cli/progress.h"

/* Command bits (the `cmds` mask of a table entry). */
enum {
    CMD_GENERATE = 1u << 0,
    CMD_CHAT = 1u << 1,
    CMD_BENCH = 1u << 2,
    CMD_DUMP = 1u << 3,
    CMD_PERPLEXITY = 1u << 4,
    CMD_SERVE = 1u << 5,
    CMD_INFO = 1u << 6,
    CMD_SYNTH = 1u << 7,
    CMD_TOKENIZE = 1u << 8,
    CMD_VERIFY = 1u << 9,
};

/* The commands whose model is one bare argument (info MODEL.gguf), and those without one. */
#define OPTS_MODEL_POSITIONAL CMD_INFO
#define OPTS_MODEL_NONE CMD_SYNTH

#define OPTS_MAX_STOPS 16
#define OPTS_HELP (-1) /* opts_parse: --help was printed (exit 0) */

/* Every value a flag can set. Fields a command does not take keep its defaults. */
typedef struct {
    /* model and context */
    const char *model;       /* -m (required) */
    const char *backend;     /* --backend cpu|cuda|auto */
    const char *cache_spec;  /* --cache-mib N|full|auto|mmap (validated syntax) */
    bool cache_set;          /* --cache-mib was given */
    const char *vram_spec;   /* --vram-mib N|auto|full (NULL: not given = every weight on the device) */
    const char *vram_pin;    /* --vram-pin auto|on|off */
    const char *vram_miss;   /* --vram-miss copy|cpu|auto */
    const char *route_trace; /* --route-trace FILE */
    float route_bias;        /* --route-bias L */
    long long threads;       /* -t (0 = all CPUs) */
    long long n_ctx;         /* -c (0 = the command's choice) */
    long long batch;         /* -b */
    const char *kv;          /* --kv f32|f16 (NULL: the engine's default, engine.h) */
    bool reference;          /* bench --reference */
    bool iq_repack;          /* --iq-repack (session_model_params.iq_repack) */
    const char *weights;     /* --weights copy|map (NULL: copy; "map": session_model_params.map_weights) */
    int checkpoints;         /* session_params.max_checkpoints (the command's choice, no flag) */
    /* prompt and answer */
    const char *prompt;  /* -p TEXT (bench: --prompt LIST) */
    const char *file;    /* -f FILE */
    const char *system;  /* --system TEXT */
    const char *history; /* chat --history FILE */
    long long n_predict; /* -n */
    bool raw;            /* generate --raw */
    /* sampling */
    sampler_params sp;
    const char *stops[OPTS_MAX_STOPS];
    int n_stops;
    /* speculative decoding */
    const char *spec_name; /* --spec none|lookup|mtp|auto */
    spec_mode spec;        /* its value (default lookup; none under --route-bias unless given) */
    bool spec_set;         /* --spec was given */
    int32_t draft_max;     /* --draft-max (default 8) */
    int32_t draft_min;     /* --draft-min (default 0: cost-aware K) */
    /* output */
    bool json, stats, verbose;
    /* bench */
    int prompts[16], n_prompts; /* --prompt LIST */
    long long n_decode, reps, warmup, depth;
    long long bench_seed;
    bool profile;
    /* perplexity */
    long long chunks;       /* --chunks (0 = every window) */
    bool mtp_accept;        /* --mtp-accept */
    const char *tokens_out; /* --tokens-out FILE */
    /* dump */
    const char *tokens, *logits_path, *routes_path, *acts_path, *mtp_path, *names, *layers;
    long long greedy;
    bool fast, check_fast;
    /* synth */
    const char *preset, *output, *vocab, *geometry, *routing;
    const char *expert_type; /* synth --expert-type (a ggml type name) */
    bool mtp, list, quiet;
    /* tokenize */
    const char *text, *jsonl;
    bool no_special, tok_bench;
    /* verify-check (-n: n_predict, --seed: bench_seed) */
    long long draft, timing;
    /* info */
    long long ram_mib;
} cli_opts;

typedef struct {
    const char *name;   /* "generate" */
    unsigned bit;       /* CMD_GENERATE */
    const char *usage;  /* "redlite generate -m MODEL (-p TEXT | -f FILE) [options]" */
    const char *about;  /* paragraph under the usage line */
    const char *footer; /* after the options (may be NULL) */
} opts_cmd;

/* The sampling defaults of generate (with --temp > 0), chat and serve: Qwen's recommended values
 * for the Qwen3-Next / Qwen3-Coder instruct models (model card, "Best Practices"). */
#define OPTS_TEMP 0.7f
#define OPTS_TOP_K 20
#define OPTS_TOP_P 0.8f
#define OPTS_MIN_P 0.0f

/* Defaults shared by the commands (each then adjusts its own: n_predict, temperature, ...). */
void opts_defaults(cli_opts *o);
/* Parse the environment mirrors, then argv[1..argc), into o: 0, OPTS_HELP (help printed on
 * stdout), or 2 (a one-line usage error printed). -m is required except by OPTS_MODEL_NONE. */
int opts_parse(const opts_cmd *c, int argc, char **argv, cli_opts *o);
/* The help of the command: usage, about, its options by section with o's values as defaults. */
void opts_usage(const opts_cmd *c, const cli_opts *o, FILE *out);

/* Open the model (-m, --backend, -t; bench: --reference) and a session on it with the
 * options' expert cache (the plan is one line on stderr with --stats or --verbose).
 * NULL with rl_lasterr set. */
session_model *cli_model_open(const cli_opts *o);
/* --weights map was given (session_model_params.map_weights). */
bool cli_map_weights(const cli_opts *o);
session *cli_session_new(const cli_opts *o, session_model *m, int n_ctx, int n_batch);

/* What a new user sees while a prompt is evaluated: cli_feed_opts gives session_feed a
 * progress report (progress.h: a live "prompt 1024/4096 tokens, 812 tok/s, ETA 4 s" on a
 * terminal unless --json, periodic log lines otherwise) for a prompt of more than one chunk;
 * cli_feed_done clears it. cli_warn_ctx_train warns once when a prompt is longer than the
 * model's trained context (context_length). */
session_feed_opts cli_feed_opts(cli_progress *p, const cli_opts *o, atomic_int *cancel);
void cli_feed_done(cli_progress *p);
void cli_warn_ctx_train(const char *cmd, const session *s, int n_tokens, bool *warned);

/* Settle --spec once the model is open: the default (lookup) turns off under --route-bias
 * (cache-aware routing and speculation exclude each other; an explicit --spec with it is
 * refused by the session); --spec mtp on a model or backend without an MTP head prints a
 * one-line usage error and returns 2. 0 when the options can run. */
int cli_spec_check(const char *cmd, cli_opts *o, session_model *m);

/* Read a whole file ("-" = stdin), NUL terminated. NULL with rl_lasterr set. */
char *cli_read_file(const char *path, size_t *len);

#endif
