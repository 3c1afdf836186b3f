/* gen.h — what `redlite generate` and `redlite chat` share: sampler / stop / model flags and
 * opening a session with them. The decoding loop is the session's (src/session.h). */
#ifndef RL_CLI_GEN_H
#define RL_CLI_GEN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "session.h"

#define GEN_MAX_STOPS 16

typedef struct {
    sampler_params sp;
    const char *stops[GEN_MAX_STOPS];
    int n_stops;
    spec_mode spec;      /* --spec (default lookup; none with --route-bias) */
    bool spec_set;       /* --spec was given */
    int draft_max;       /* --draft-max (0 = 8) */
} gen_flags;

/* generate: greedy unless --temp; chat: temperature 0.7, top-k 40, top-p 0.95, min-p 0. */
void gen_flags_init(gen_flags *g, bool chat);
/* If argv[*i] is a sampler/stop flag, consume it (and its value): returns 1. Returns 0 when it
 * is not one of ours, -1 after printing a usage error. */
int gen_flags_parse(const char *cmd, int argc, char **argv, int *i, gen_flags *g);
/* The help text of those flags (for the commands' --help). */
extern const char GEN_FLAGS_HELP[];

/* Model-side flags shared by generate and chat: backend and the routed-expert cache. */
typedef struct {
    const char *backend;     /* --backend cpu|cuda|auto (default cpu) */
    const char *cache_spec;  /* --cache-mib N|full|auto|mmap (default auto) */
    float route_bias;        /* --route-bias L (0 = exact routing) */
    const char *route_trace; /* --route-trace FILE */
    long long threads;       /* -t (0 = all CPUs) */
    long long n_ctx;         /* -c (0 = the command's default) */
    long long batch;         /* -b (default 64) */
} gen_model_flags;
extern const char GEN_MODEL_HELP[];
/* Like gen_flags_parse, for the model flags. */
int gen_model_flags_parse(const char *cmd, int argc, char **argv, int *i, gen_model_flags *m);
/* Open the model on the flags' backend and threads. NULL with rl_lasterr set. */
session_model *gen_model_open(const gen_model_flags *mf, const char *model);
/* A session with the expert cache the flags ask for (the plan is one line on stderr when
 * verbose: mode, budget, why). NULL with rl_lasterr set. */
session *gen_session_new(const gen_model_flags *mf, session_model *m, int n_ctx, int n_batch, bool verbose);

/* Settle --spec: the default (lookup) turns off under --route-bias (cache-aware routing and
 * speculation exclude each other; an explicit --spec with it is refused by the session);
 * --spec mtp on a model or backend without an MTP head prints a one-line usage error and
 * returns 2 (0 when the flags can run). */
int gen_spec_check(const char *cmd, gen_flags *g, const gen_model_flags *mf, session_model *m);

/* Read a whole file (NUL terminated). NULL with rl_lasterr set. */
char *gen_read_file(const char *path, size_t *len);

#endif
