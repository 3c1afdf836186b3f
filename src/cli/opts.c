/* opts.c — the parser and help printer of the option table (opts_table.c; see opts.h), and the
 * helpers the commands share: open the model and session, progress of a prompt, read a file. */
#include "cli/opts.h"

#include "cache/vram_plan.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "base/common.h"
#include "run/engine.h"
#include "run/spec.h"
#include "cache/vram_plan.h"
#include "model/synth.h"
#include "cli/opts_int.h"

#define TABLE opts_table
#define N_TABLE opts_table_n

void opts_defaults(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->cache_spec = "auto";
    o->batch = 0; /* auto: engine_default_batch */
    o->n_predict = 128;
    o->sp = sampler_default_params();
    o->sp.temp = OPTS_TEMP; /* generate: greedy (its own default, kept by the oracle tests) */
    o->sp.top_k = OPTS_TOP_K;
    o->sp.top_p = OPTS_TOP_P;
    o->sp.min_p = OPTS_MIN_P;
    /* measured: a 2-row verify costs about 2 steps on a CPU, so MTP drafts do not pay there;
     * lookup drafts only where the text repeats (docs/SPECULATION.md, "Default") */
    o->spec = SPEC_LOOKUP;
    o->spec_name = "lookup";
    o->draft_max = SPEC_DRAFT_MAX;
    o->prompts[0] = 512, o->prompts[1] = 2048, o->n_prompts = 2;
    o->n_decode = 32, o->reps = 3, o->warmup = 2, o->bench_seed = 1;
    o->names = "l_out";
}

static bool has_name(const char *names, const char *a, size_t n) {
    for (const char *p = names; *p;) {
        const char *e = strstr(p, ", ");
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, a, n)) return true;
        if (!e) break;
        p = e + 2;
    }
    return false;
}

static const opt *find(unsigned bit, const char *a, size_t n) {
    for (size_t i = 0; i < N_TABLE; i++)
        if ((TABLE[i].cmds & bit) && has_name(TABLE[i].names, a, n)) return &TABLE[i];
    return NULL;
}

static int set_value(const char *cmd, const opt *t, const char *flag, const char *v, cli_opts *o) {
    char *p = (char *)o + t->off;
    long long iv;
    double d;
    switch (t->kind) {
    case K_STR: *(const char **)p = v; return 0;
    case K_FN: return t->set(cmd, flag, v, o);
    case K_I64:
    case K_I32:
    case K_U32:
        if (t->kind == K_I64 && t->lo == 0 && t->zero && !strcmp(t->zero, "auto") && !strcmp(v, "auto")) {
            *(long long *)p = 0;
            return 0;
        }
        /* a bound of INT64_MAX is 2^63 as a double: converting it back would overflow */
        if (!cli_parse_int(cmd, flag, v, (long long)t->lo, t->hi >= 0x1p63 ? LLONG_MAX : (long long)t->hi,
                           &iv))
            return -1;
        if (t->kind == K_I64) *(long long *)p = iv;
        else if (t->kind == K_I32) *(int32_t *)p = (int32_t)iv;
        else *(uint32_t *)p = (uint32_t)iv;
        return 0;
    case K_F32:
        if (!cli_parse_float(cmd, flag, v, &d)) return -1;
        if (!(d >= t->lo && d <= t->hi))
            return cli_fail(cmd, 2, "%s must be in [%g, %g], got %s", flag, t->lo, t->hi, v), -1;
        *(float *)p = (float)d;
        return 0;
    case K_FLAG:
    case K_ALIAS:
    case K_NOTE:
    case K_HINT: break;
    }
    return -1;
}

/* The value of a K_NOTE flag is optional: taken when it is one of the words in t->value. */
static bool note_takes(const opt *t, const char *next) {
    if (!t->value || !next || next[0] == '-') return false;
    size_t n = strlen(next);
    for (const char *p = t->value + 1; *p && *p != ']';) {
        size_t len = strcspn(p, "|]");
        if (len == n && !strncmp(p, next, n)) return true;
        p += len + (p[len] == '|');
    }
    return false;
}

/* One flag of the table: its value from "--flag=v", the next argument or (env) ev. 0, or 2
 * after a one-line usage error. *i moves past a consumed value. */
static int take(const opts_cmd *c, const opt *t, const char *flag, const char *eq, const char *ev, int argc,
                char **argv, int *i, cli_opts *o) {
    switch (t->kind) {
    case K_HINT: return cli_fail(c->name, 2, "%s %s", flag, t->note);
    case K_NOTE:
        if (!eq && !ev && *i + 1 < argc && note_takes(t, argv[*i + 1])) ++*i;
        fprintf(stderr, "redlite %s: note: %s %s\n", c->name, flag, t->note);
        return 0;
    case K_ALIAS:
        if (eq) return cli_fail(c->name, 2, "%s takes no value", flag);
        return t->set(c->name, flag, t->alias, o) ? 2 : 0;
    case K_FLAG:
        if (ev) {
            bool on = strcmp(ev, "0") && strcmp(ev, "false") && strcmp(ev, "off");
            *(bool *)((char *)o + t->off) = on;
            return 0;
        }
        if (eq) return cli_fail(c->name, 2, "%s takes no value", flag);
        *(bool *)((char *)o + t->off) = true;
        return 0;
    default: break;
    }
    const char *v = ev ? ev : eq ? eq + 1 : NULL;
    if (!v) {
        if (*i + 1 >= argc)
            return cli_fail(c->name, 2, "%s needs a value %s (see redlite %s --help)", flag, t->value,
                            c->name);
        v = argv[++*i];
    }
    return set_value(c->name, t, flag, v, o) ? 2 : 0;
}

/* The environment mirrors of the command's flags, before argv (which wins). */
static int parse_env(const opts_cmd *c, cli_opts *o) {
    for (size_t k = 0; k < N_TABLE; k++) {
        const opt *t = &TABLE[k];
        const char *ev = t->env && (t->cmds & c->bit) ? getenv(t->env) : NULL;
        if (!ev || !*ev) continue;
        int i = 0;
        if (take(c, t, t->env, NULL, ev, 0, NULL, &i, o)) return 2;
    }
    return 0;
}

int opts_parse(const opts_cmd *c, int argc, char **argv, cli_opts *o) {
    bool positional = c->bit & OPTS_MODEL_POSITIONAL;
    const char *bare = NULL;
    if (positional && argc < 2) { /* `redlite info` alone: what to give */
        opts_usage(c, o, stderr);
        return 2;
    }
    if (parse_env(c, o)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            opts_usage(c, o, stdout);
            return OPTS_HELP;
        }
        if (positional && (a[0] != '-' || !a[1])) {
            if (bare) return cli_fail(c->name, 2, "one model file expected, got '%s' and '%s'", bare, a);
            bare = a;
            continue;
        }
        const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL; /* --flag=value */
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const opt *t = a[0] == '-' ? find(c->bit, a, n) : NULL;
        if (!t) {
            if (a[0] != '-')
                return cli_fail(c->name, 2, "unexpected argument '%s' (see redlite %s --help)", a, c->name);
            return cli_fail(c->name, 2, "unknown option '%.*s' (see redlite %s --help)", (int)n, a, c->name);
        }
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)n, a);
        if (take(c, t, flag, eq, NULL, argc, argv, &i, o)) return 2;
    }
    if (bare) o->model = bare;
    if (!o->model && !(c->bit & OPTS_MODEL_NONE))
        return cli_fail(c->name, 2, "need %s (see redlite %s --help)",
                        positional ? "a MODEL.gguf" : "-m MODEL", c->name);
    return 0;
}

/* The default of an entry as o holds it ("" = none worth printing). */
static void fmt_default(const opt *t, const cli_opts *o, char *buf, size_t n) {
    const char *p = (const char *)o + t->off;
    buf[0] = 0;
    switch (t->kind) {
    case K_FLAG:
    case K_ALIAS:
    case K_NOTE:
    case K_HINT: return;
    case K_STR:
    case K_FN:
        if (t->set == opts_set_stop) return;
        if (t->set == opts_set_prompts) {
            size_t k = 0;
            for (int i = 0; i < o->n_prompts && k + 12 < n; i++)
                k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", o->prompts[i]);
            if (!o->n_prompts) snprintf(buf, n, "0");
            return;
        }
        if (*(const char *const *)p) snprintf(buf, n, "%s", *(const char *const *)p);
        else if (t->zero) snprintf(buf, n, "%s", t->zero);
        return;
    case K_I64:
        if (*(const long long *)p == 0 && t->zero) snprintf(buf, n, "%s", t->zero);
        else snprintf(buf, n, "%lld", *(const long long *)p);
        return;
    case K_I32: snprintf(buf, n, "%d", (int)*(const int32_t *)p); return;
    case K_U32:
        if (*(const uint32_t *)p == SAMPLER_SEED_RANDOM) snprintf(buf, n, "from the clock");
        else snprintf(buf, n, "%u", *(const uint32_t *)p);
        return;
    case K_F32: snprintf(buf, n, "%g", *(const float *)p); return;
    }
}

void opts_usage(const opts_cmd *c, const cli_opts *o, FILE *out) {
    fprintf(out, "usage: %s\n\n%s\n", c->usage, c->about);
    const char *section = NULL, *tsec = NULL; /* printed; the table's (NULL: the one above) */
    for (size_t i = 0; i < N_TABLE; i++) {
        const opt *t = &TABLE[i];
        if (t->section) tsec = t->section;
        if (!(t->cmds & c->bit)) continue;
        if (tsec && (!section || strcmp(section, tsec))) {
            section = tsec;
            fprintf(out, "\n%s:\n", section);
        }
        char head[80], def[64];
        snprintf(head, sizeof head, "%s%s%s", t->names, t->value ? " " : "", t->value ? t->value : "");
        fmt_default(t, o, def, sizeof def);
        if (strlen(head) > 24) fprintf(out, "  %s\n%27s", head, "");
        else fprintf(out, "  %-24s ", head);
        for (const char *h = t->help; *h; h++) {
            fputc(*h, out);
            if (*h == '\n') fprintf(out, "%27s", "");
        }
        if (def[0]) fprintf(out, " (default %s)", def);
        if (t->env) fprintf(out, " [env %s]", t->env);
        fputc('\n', out);
    }
    fprintf(out, "  %-24s %s\n", "-h, --help", "this help");
    fputs("\nExit status: 0 success, 1 runtime error, 2 usage error.\n", out);
    if (c->footer) fprintf(out, "\n%s", c->footer);
}

bool cli_map_weights(const cli_opts *o) { return o->weights && !strcmp(o->weights, "map"); }

session_model *cli_model_open(const cli_opts *o) {
    return session_model_open(&(session_model_params){.model_path = o->model,
                                                      .backend = o->backend,
                                                      .n_threads = (int)o->threads,
                                                      .reference = o->reference,
                                                      .iq_repack = o->iq_repack,
                                                      .map_weights = cli_map_weights(o)});
}

int cli_spec_check(const char *cmd, cli_opts *o, session_model *m) {
    engine *e = session_model_engine(m);
    if (!o->spec_set && o->route_bias > 0) o->spec = SPEC_NONE, o->spec_name = "none";
    if (o->spec != SPEC_MTP || engine_has_mtp(e)) return 0;
    if (engine_hparams(e)->n_nextn > 0)
        return cli_fail(cmd, 2,
                        "--spec mtp: the %s backend has no MTP head forward yet (use --spec lookup or auto, "
                        "or --backend cpu)",
                        engine_backend_name(e));
    return cli_fail(cmd, 2,
                    "--spec mtp: this model has no MTP head (no blk.N.nextn.* tensors); use --spec lookup "
                    "or auto");
}

session *cli_session_new(const cli_opts *o, session_model *m, int n_ctx, int n_batch) {
    int train = engine_hparams(session_model_engine(m))->n_ctx_train;
    if (o->n_ctx > 0 && train > 0 && o->n_ctx > train) /* -c as given (generate's automatic size: no) */
        fprintf(stderr,
                "redlite: warning: -c %lld is larger than the %d tokens the model was trained on "
                "(context_length); answers past that may degrade\n",
                o->n_ctx, train);
    return session_new(m, &(session_params){.n_ctx = n_ctx,
                                            .n_batch = n_batch,
                                            .kv = o->kv,
                                            .cache_spec = o->cache_spec,
                                            .vram_spec = o->vram_spec,
                                            .vram_pin = o->vram_pin,
                                            .vram_miss = o->vram_miss,
                                            .route_bias = o->route_bias,
                                            .route_trace = o->route_trace,
                                            .max_checkpoints = o->checkpoints,
                                            .verbose = o->verbose || o->stats,
                                            .progress = !o->json});
}

static void progress_line(void *ud, int done, int total, double seconds) {
    cli_progress *p = ud;
    progress_update(p, done, total);
}

session_feed_opts cli_feed_opts(cli_progress *p, const cli_opts *o, atomic_int *cancel) {
    bool tty = isatty(STDERR_FILENO);
    progress_begin(p, NULL, "prompt", "tokens", !(tty && o->json));
    return (session_feed_opts){.progress = progress_line, .ud = p, .cancel = cancel};
}

void cli_feed_done(cli_progress *p) { progress_end(p); }

void cli_warn_ctx_train(const char *cmd, const session *s, int n_tokens, bool *warned) {
    int train = session_hparams(s)->n_ctx_train;
    if (train <= 0 || n_tokens <= train || (warned && *warned)) return;
    fprintf(stderr,
            "redlite %s: warning: the prompt has %d tokens, more than the %d the model was trained on "
            "(context_length); answers may degrade\n",
            cmd, n_tokens, train);
    if (warned) *warned = true;
}

char *cli_read_file(const char *path, size_t *len) {
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
