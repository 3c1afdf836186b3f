/* gen.c — the sampler / stop / model flags that generate and chat share (see gen.h); the
 * decoding itself is the session's (src/session.h). */
#include "gen.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "spec.h"
#include "common.h"

const char GEN_FLAGS_HELP[] =
    "sampling (llama.cpp's chain: penalties -> top-k -> top-p -> min-p -> temperature):\n"
    "  --temp T               temperature; 0 = greedy\n"
    "  --top-k N              keep the N most likely tokens (0 = off)\n"
    "  --top-p P              keep the smallest set with probability >= P (1 = off)\n"
    "  --min-p P              drop tokens below P x the best one's probability (0 = off)\n"
    "  --repeat-penalty R     penalise tokens seen in the last --repeat-last-n tokens (1 = off)\n"
    "  --repeat-last-n N      history length for the penalties (default 64, -1 = context)\n"
    "  --presence-penalty A   subtract A from every token seen (0 = off)\n"
    "  --frequency-penalty F  subtract F per occurrence (0 = off)\n"
    "  --seed S               random seed (default: from the clock)\n"
    "  --stop STR             stop when STR is generated (repeatable; STR is not printed)\n"
    "speculative decoding (never changes the tokens, only the speed):\n"
    "  --spec MODE            none | lookup (default: copy from the prompt and the answer when\n"
    "                         they repeat) | mtp (the model's MTP head) | auto (mtp when the\n"
    "                         model has a head, lookup on long matches and otherwise)\n"
    "  --draft-max N          at most N drafted tokens per verify, 1..8 (default 8)\n";

static int fval(const char *cmd, int argc, char **argv, int *i, double lo, double hi, float *out);
static int ival(const char *cmd, int argc, char **argv, int *i, long long lo, long long hi, long long *out);

const char GEN_MODEL_HELP[] =
    "model:\n"
    "  -c, --ctx N            context size in tokens (generate: prompt + n, at least 4096;\n"
    "                         chat: 4096)\n"
    "  -b, --batch N          prompt rows per forward (default 64)\n"
    "  -t, --threads N        threads (default: all CPUs)\n"
    "  --backend B            cpu | cuda | auto (default cpu)\n"
    "  --cache-mib N|full|auto|mmap\n"
    "                         routed experts: a bounded cache of N MiB, all resident (full),\n"
    "                         planned from RAM (auto, default), or the plain file mapping (mmap)\n"
    "  --route-bias L         cache-aware routing: prefer resident experts when scores are\n"
    "                         within L (CHANGES OUTPUTS; default 0 = exact routing)\n"
    "  --route-trace FILE     record every token's expert choices (tools/cache_sim.py replays)\n";

int gen_model_flags_parse(const char *cmd, int argc, char **argv, int *i, gen_model_flags *m) {
    const char *a = argv[*i];
    if (!strcmp(a, "--backend")) return (m->backend = cli_need_value(cmd, argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--cache-mib")) return (m->cache_spec = cli_need_value(cmd, argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--route-trace")) return (m->route_trace = cli_need_value(cmd, argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--route-bias")) return fval(cmd, argc, argv, i, 0, 1, &m->route_bias);
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) return ival(cmd, argc, argv, i, 0, 1024, &m->threads);
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--context"))
        return ival(cmd, argc, argv, i, 16, 1 << 24, &m->n_ctx);
    if (!strcmp(a, "-b") || !strcmp(a, "--batch")) return ival(cmd, argc, argv, i, 1, 4096, &m->batch);
    return 0;
}

session_model *gen_model_open(const gen_model_flags *mf, const char *model) {
    return session_model_open(
        &(session_model_params){.model_path = model, .backend = mf->backend, .n_threads = (int)mf->threads});
}

session *gen_session_new(const gen_model_flags *mf, session_model *m, int n_ctx, int n_batch, bool verbose) {
    return session_new(m, &(session_params){.n_ctx = n_ctx, .n_batch = n_batch, .cache_spec = mf->cache_spec,
                                            .route_bias = mf->route_bias, .route_trace = mf->route_trace,
                                            .verbose = verbose});
}

void gen_flags_init(gen_flags *g, bool chat) {
    memset(g, 0, sizeof *g);
    g->sp = sampler_default_params();
    g->spec = SPEC_LOOKUP; /* measured: docs/SPECULATION.md, "Default" */
    if (chat) {
        g->sp.temp = 0.7f;
        g->sp.min_p = 0.0f;
    } else {
        g->sp.temp = 0.0f;
    }
}

static int fval(const char *cmd, int argc, char **argv, int *i, double lo, double hi, float *out) {
    const char *flag = argv[*i], *v = cli_need_value(cmd, argc, argv, i);
    double d;
    if (!v || !cli_parse_float(cmd, flag, v, &d)) return -1;
    if (!(d >= lo && d <= hi)) {
        cli_fail(cmd, 2, "%s must be in [%g, %g], got %s", flag, lo, hi, v);
        return -1;
    }
    *out = (float)d;
    return 1;
}

static int ival(const char *cmd, int argc, char **argv, int *i, long long lo, long long hi, long long *out) {
    const char *flag = argv[*i], *v = cli_need_value(cmd, argc, argv, i);
    if (!v || !cli_parse_int(cmd, flag, v, lo, hi, out)) return -1;
    return 1;
}

int gen_flags_parse(const char *cmd, int argc, char **argv, int *i, gen_flags *g) {
    const char *a = argv[*i];
    long long n;
    int r;
    if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) return fval(cmd, argc, argv, i, -1e9, 1e9, &g->sp.temp);
    if (!strcmp(a, "--top-p")) return fval(cmd, argc, argv, i, 0, 1e9, &g->sp.top_p);
    if (!strcmp(a, "--min-p")) return fval(cmd, argc, argv, i, 0, 1, &g->sp.min_p);
    if (!strcmp(a, "--repeat-penalty")) return fval(cmd, argc, argv, i, 1e-6, 1e6, &g->sp.repeat_penalty);
    if (!strcmp(a, "--presence-penalty")) return fval(cmd, argc, argv, i, -1e6, 1e6, &g->sp.presence_penalty);
    if (!strcmp(a, "--frequency-penalty")) return fval(cmd, argc, argv, i, -1e6, 1e6, &g->sp.frequency_penalty);
    if (!strcmp(a, "--top-k")) {
        if ((r = ival(cmd, argc, argv, i, 0, INT32_MAX, &n)) > 0) g->sp.top_k = (int32_t)n;
        return r;
    }
    if (!strcmp(a, "--repeat-last-n")) {
        if ((r = ival(cmd, argc, argv, i, -1, INT32_MAX, &n)) > 0) g->sp.repeat_last_n = (int32_t)n;
        return r;
    }
    if (!strcmp(a, "--seed")) {
        if ((r = ival(cmd, argc, argv, i, 0, UINT32_MAX, &n)) > 0) g->sp.seed = (uint32_t)n;
        return r;
    }
    if (!strcmp(a, "--spec")) {
        const char *v = cli_need_value(cmd, argc, argv, i);
        if (!v) return -1;
        int m = spec_mode_parse(v);
        if (m < 0) {
            cli_fail(cmd, 2, "--spec expects none, lookup, mtp or auto, got '%s'", v);
            return -1;
        }
        g->spec = (spec_mode)m;
        g->spec_set = true;
        return 1;
    }
    if (!strcmp(a, "--draft-max")) {
        if ((r = ival(cmd, argc, argv, i, 1, SPEC_DRAFT_MAX, &n)) > 0) g->draft_max = (int)n;
        return r;
    }
    if (!strcmp(a, "--stop")) {
        const char *v = cli_need_value(cmd, argc, argv, i);
        if (!v) return -1;
        if (!*v) {
            cli_fail(cmd, 2, "--stop needs a non-empty string");
            return -1;
        }
        if (g->n_stops == GEN_MAX_STOPS) {
            cli_fail(cmd, 2, "at most %d --stop strings", GEN_MAX_STOPS);
            return -1;
        }
        g->stops[g->n_stops++] = v;
        return 1;
    }
    return 0;
}

int gen_spec_check(const char *cmd, gen_flags *g, const gen_model_flags *mf, session_model *m) {
    engine *e = session_model_engine(m);
    if (!g->spec_set && mf->route_bias > 0) g->spec = SPEC_NONE;
    if (g->spec != SPEC_MTP || engine_has_mtp(e)) return 0;
    if (engine_hparams(e)->n_nextn > 0)
        return cli_fail(cmd, 2, "--spec mtp: the %s backend has no MTP head forward yet (use --spec lookup or auto, "
                        "or --backend cpu)", engine_backend_name(e));
    return cli_fail(cmd, 2, "--spec mtp: this model has no MTP head (no blk.N.nextn.* tensors); use --spec lookup "
                    "or auto");
}

char *gen_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        rl_seterr("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            } else {
                buf = b;
            }
        }
    }
    bool err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) {
        rl_seterr("out of memory reading %s", path);
        return NULL;
    }
    if (err) {
        free(buf);
        rl_seterr("cannot read %s", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
