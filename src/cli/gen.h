/* gen.h — what `redlite generate` and `redlite chat` share: sampler / stop flags and the
 * token-by-token decoding loop (sampling, end-of-generation, stop strings, streaming output,
 * interruption between tokens). */
#ifndef RL_CLI_GEN_H
#define RL_CLI_GEN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "sampler.h"
#include "tokenizer.h"

#define GEN_MAX_STOPS 16

typedef struct {
    sampler_params sp;
    const char *stops[GEN_MAX_STOPS];
    int n_stops;
} gen_flags;

/* generate: greedy unless --temp; chat: temperature 0.7, top-k 40, top-p 0.95, min-p 0. */
void gen_flags_init(gen_flags *g, bool chat);
/* If argv[*i] is a sampler/stop flag, consume it (and its value): returns 1. Returns 0 when it
 * is not one of ours, -1 after printing a usage error. */
int gen_flags_parse(const char *cmd, int argc, char **argv, int *i, gen_flags *g);
/* The help text of those flags (for the commands' --help). */
extern const char GEN_FLAGS_HELP[];

typedef enum { GEN_EOG, GEN_LENGTH, GEN_STOP, GEN_CONTEXT, GEN_INTERRUPTED, GEN_ERROR } gen_reason;
const char *gen_reason_name(gen_reason r); /* "eog", "length", "stop", "context", "interrupted", "error" */

typedef struct {
    /* in */
    engine_ctx *ctx;
    const tokenizer *tok;
    sampler *smp;
    float *logits;               /* logits of the last evaluated token; overwritten */
    long long n_predict;         /* < 0: until end of generation or context */
    const gen_flags *flags;      /* stop strings */
    volatile sig_atomic_t *stop; /* set asynchronously (SIGINT) to stop between tokens */
    void (*emit)(void *ud, const char *s, size_t n); /* streamed text (may be NULL) */
    void *ud;
    unsigned decode_flags;       /* TOK_DECODE_* for the text (chat: TOK_DECODE_REPLACE) */
    /* out */
    tok_ids ids;      /* sampled tokens (end-of-generation token excluded); free with tok_ids_free */
    char *text;       /* the text emitted, NUL terminated (malloc'd) */
    size_t text_len;
    gen_reason reason;
    double seconds;   /* decoding wall time */
} gen_run;

/* Sample, stream and evaluate tokens until -n, an end-of-generation token, a stop string, the
 * context end or *stop. Every sampled token except the last one is evaluated (engine_pos
 * tells how many). 0, or -1 with rl_lasterr set (engine or memory failure). */
int gen_decode(gen_run *g);
void gen_run_free(gen_run *g);

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
/* Open the model on the flags' backend. NULL with rl_lasterr set. */
engine *gen_engine_open(const gen_model_flags *mf, const char *model, int threads);
/* A context with the expert cache the flags ask for (the plan is one line on stderr when
 * verbose: mode, budget, why). NULL with rl_lasterr set. Free with gen_ctx_free. */
engine_ctx *gen_ctx_new(const gen_model_flags *mf, engine *e, int n_ctx, int n_batch, bool verbose);
void gen_ctx_free(engine_ctx *c);
/* With --stats: the expert cache's line (hits, misses/token, MiB read/token, prefetch). */
void gen_print_cache_stats(engine_ctx *c);

/* Read a whole file (NUL terminated). NULL with rl_lasterr set. */
char *gen_read_file(const char *path, size_t *len);

#endif
