/* cli.h — the `redlite` command set. Each command lives in src/cli/cmd_<name>.c and has the
 * signature int cmd_<name>(int argc, char **argv) where argv[0] is the command name.
 * Return value is the process exit status (0 ok, 1 runtime error, 2 usage error). */
#ifndef RL_CLI_H
#define RL_CLI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/json.h"

int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_verify_check(int argc, char **argv);

/* Print "redlite <cmd>: <msg>" to stderr; returns `code`. */
int cli_fail(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* True if a == "--help" or "-h". */
bool cli_is_help(const char *a);
/* Parse helpers: return false (after printing a one-line error) on bad numbers. */
bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
                   long long *out);
bool cli_parse_float(const char *cmd, const char *flag, const char *s, double *out);
/* Fetch the value of a flag that needs one: returns NULL and prints an error if missing. */
const char *cli_need_value(const char *cmd, int argc, char **argv, int *i);
/* Token-text callback (session on_text) that streams the text to stdout, flushed per piece. */
int cli_emit_stdout(void *ud, int32_t token, const char *s, size_t n);
/* Begin a --json document on stdout: compact (one line), its top-level object open. */
void cli_json_begin(json_writer *j);
/* End a --json document on stdout: close its top-level object, a newline, then json_finish.
 * 0, or -1 with the error set ("cannot write the JSON output"). */
int cli_json_end(json_writer *j);
#endif
