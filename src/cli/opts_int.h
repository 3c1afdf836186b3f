/* opts_int.h — the option table's entry type, shared by the table (opts_table.c) and its
 * parser / help printer (opts.c). Not for commands: they use opts.h. */
#ifndef RL_CLI_OPTS_INT_H
#define RL_CLI_OPTS_INT_H

#include <stddef.h>

#include "cli/opts.h"

/* K_ALIAS: a llama.cpp spelling of a value of another flag (set(alias) runs, note printed);
 * K_NOTE: a llama.cpp flag taken and ignored with a note (value optional: "[on|off|auto]");
 * K_HINT: a llama.cpp flag with no equivalent here: a usage error whose line is the hint. */
typedef enum { K_FLAG, K_STR, K_I64, K_I32, K_U32, K_F32, K_FN, K_ALIAS, K_NOTE, K_HINT } opt_kind;

typedef struct opt {
    unsigned cmds;       /* CMD_* bits of the commands that take it */
    const char *section; /* help heading */
    const char *names;   /* "-m, --model" */
    const char *value;   /* value name; NULL for a switch */
    const char *help;    /* '\n' continues on the next help line */
    opt_kind kind;
    size_t off;       /* field in cli_opts */
    double lo, hi;    /* bounds of numbers (inclusive) */
    const char *zero; /* how the default reads when the value is 0 / NULL ("all CPUs") */
    /* K_FN: validate and store v; 0, or -1 after cli_fail */
    int (*set)(const char *cmd, const char *flag, const char *v, cli_opts *o);
    const char *env;   /* environment variable mirroring the flag (NULL: none) */
    const char *alias; /* K_ALIAS: the value given to set */
    const char *note;  /* K_ALIAS / K_NOTE: printed on stderr when used; K_HINT: the error */
} opt;

/* The table (opts_table.c): every flag of every command. */
extern const opt opts_table[];
extern const size_t opts_table_n;
/* The setters of the table (opts_set.c): validate v for flag and store it in o; 0, or -1 after
 * cli_fail (exit 2). The help printer tells opts_set_stop and opts_set_prompts apart (their
 * defaults print differently). */
int opts_set_backend(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_weights(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_kv(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_cache(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_vram(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_vram_pin(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_vram_miss(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_stop(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_spec(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_prompts(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_routing(const char *cmd, const char *flag, const char *v, cli_opts *o);
int opts_set_layers(const char *cmd, const char *flag, const char *v, cli_opts *o);

#endif
