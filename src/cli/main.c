/* main.c — `redlite` entry point: dispatches to the subcommands of src/cli/cmd_*.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "base/common.h"
#include "run/engine.h"

/* The commit this binary was built from: the Makefile passes `git describe --always --dirty`
 * when building main.o from a git checkout. */
#ifndef RL_COMMIT
#define RL_COMMIT "unknown"
#endif

/* Commands that a build may not have yet are weak, so the table below stays the single
 * list of commands; an absent one reports itself as not built. */
#pragma weak cmd_chat
#pragma weak cmd_dump
#pragma weak cmd_synth
#pragma weak cmd_bench
#pragma weak cmd_serve
#pragma weak cmd_tokenize
#pragma weak cmd_generate
#pragma weak cmd_info
#pragma weak cmd_perplexity
#pragma weak cmd_verify_check

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command commands[] = {
    {"info", cmd_info, "describe a GGUF model: hyperparameters, layer map, tensor types, sizes"},
    {"generate", cmd_generate, "complete a prompt (one shot)"},
    {"chat", cmd_chat, "interactive chat with the model"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"dump", cmd_dump, "dump named per-layer activations (debugging)"},
    {"synth", cmd_synth, "write a full-size synthetic Qwen3-Next GGUF"},
    {"bench", cmd_bench, "measure decode and prompt-ingestion speed"},
    {"perplexity", cmd_perplexity, "perplexity of a model on a text file (llama.cpp's definition)"},
    {"serve", cmd_serve, "OpenAI/Anthropic-compatible HTTP server"},
    {"verify-check", cmd_verify_check,
     "check that K-row verifies and rollbacks equal single steps, bit for bit"},
};

/* `redlite version` / `--version`: the version, the commit, and the CPU features this process
 * DETECTED (what the run-time dispatch will use), not the ones the build compiled in. */
static int version(void) {
    printf("redlite %s (commit %s)\n", RL_VERSION, RL_COMMIT);
    engine_cpu_info cpu = engine_cpu_features();
    printf("cpu: AVX2 %s  AVX-512/VNNI %s  AMX %s  (detected; kernels: %s)\n", cpu.avx2 ? "yes" : "no",
           cpu.avx512 ? "yes" : "no", cpu.amx ? "yes" : "no", cpu.best);
#ifdef RL_CUDA
    puts("cuda: built in (--backend cuda)");
#else
    puts("cuda: not built (make CUDA=1)");
#endif
    return 0;
}

static void usage(FILE *out) {
    fprintf(out,
            "redlite %s — Qwen3-Next MoE inference from GGUF files\n\n"
            "usage: redlite <command> [options]   (redlite help <command>, or redlite <command> --help)\n\n"
            "commands:\n",
            RL_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].fn) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "  %-10s %s\n", "version",
            "the version, the commit and the CPU features detected (also --version)");
    fputs("\nExit status: 0 success, 1 runtime error, 2 usage error.\n", out);
}

int cli_fail(const char *cmd, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "redlite %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

bool cli_is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
                   long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10); /* out of long long's range: ERANGE (and a clamped v) */
    if (!*s || *end || errno == ERANGE || v < lo || v > hi) {
        cli_fail(cmd, 2, "%s expects an integer in [%lld, %lld], got '%s'", flag, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *cmd, const char *flag, const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end) {
        cli_fail(cmd, 2, "%s expects a number, got '%s'", flag, s);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_need_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_fail(cmd, 2, "%s needs a value (see redlite %s --help)", argv[*i], cmd);
        return NULL;
    }
    return argv[++*i];
}

int cli_emit_stdout(void *ud, int32_t token, const char *s, size_t n) {
    (void)ud;
    (void)token;
    if (n) {
        fwrite(s, 1, n, stdout);
        fflush(stdout);
    }
    return 0;
}

void cli_json_begin(json_writer *j) {
    json_init(j, stdout, 0);
    json_obj_begin(j);
}

int cli_json_end(json_writer *j) {
    json_obj_end(j);
    fputc('\n', stdout);
    if (json_finish(j)) return rl_seterr("cannot write the JSON output");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "help")) { /* redlite help [CMD] = redlite CMD --help */
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        if (argc > 3) {
            fprintf(stderr, "redlite help: one command at a time (redlite help CMD)\n");
            return 2;
        }
        static char help_flag[] = "--help";
        char *hargv[] = {argv[2], help_flag, NULL};
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (!strcmp(argv[2], commands[i].name) && commands[i].fn) return commands[i].fn(2, hargv);
        fprintf(stderr, "redlite help: unknown command '%s' (run redlite help for the list)\n", argv[2]);
        return 2;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version") || !strcmp(argv[1], "-V")) {
        if (argc > 2) {
            fprintf(stderr, "redlite version: takes no arguments\n");
            return 2;
        }
        return version();
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        if (!commands[i].fn) {
            fprintf(stderr, "redlite: command '%s' is not available in this build\n", argv[1]);
            return 2;
        }
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "redlite: unknown command '%s' (run redlite --help for the list)\n", argv[1]);
    return 2;
}
