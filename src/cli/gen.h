/* gen.h — the model-flag parser of the first CLI code, kept so that `perplexity` builds until it
 * moves to the option table (src/cli/opts.h: opts_parse). It parses through that table (same
 * names, bounds and messages); new code uses opts_parse / cli_model_open directly. */
#ifndef RL_CLI_GEN_H
#define RL_CLI_GEN_H

#include <stddef.h>

typedef struct {
    const char *backend;     /* --backend (NULL = cpu) */
    const char *cache_spec;  /* --cache-mib (NULL = auto) */
    float route_bias;        /* --route-bias */
    const char *route_trace; /* --route-trace */
    long long threads;       /* -t (0 = all CPUs) */
    long long n_ctx;         /* -c (0 = the command's default) */
    long long batch;         /* -b (0 = the command's default) */
} gen_model_flags;

/* If argv[*i] is a model flag, consume it (and its value): 1; 0 when it is not one; -1 after
 * printing a usage error. */
int gen_model_flags_parse(const char *cmd, int argc, char **argv, int *i, gen_model_flags *m);
/* Read a whole file (NUL terminated; "-" = stdin). NULL with rl_lasterr set. */
char *gen_read_file(const char *path, size_t *len);

#endif
