/* cmd_dump.c — `redlite dump`: run token ids through the CPU reference and write what tests
 * and debugging need: logits of every position, greedy continuations, router choices and
 * named per-layer activations.
 *
 * Output files are raw little-endian float32 (logits: rows x n_vocab) plus JSON lines
 * (routes, activation index) so Python tests can read them with numpy alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "base/common.h"
#include "run/engine.h"
#include "cli/opts.h"
#include "text/sampler.h"
#include "run/session.h"

static const opts_cmd DUMP = {
    "dump", CMD_DUMP, "redlite dump -m MODEL --tokens IDS [options]",
    "Evaluate token ids with the CPU reference and dump results (every row's logits,\n"
    "greedy continuations, router choices, named activations, MTP drafts).",
    "The expert source is the plain file mapping unless --cache-mib says otherwise\n"
    "(every choice gives the same output).\n"};

typedef struct {
    FILE *acts, *acts_idx, *routes;
    const char *names;
    int lay_lo, lay_hi;
    int row_base; /* position of row 0 of the current forward */
    uint64_t acts_off;
} dump_ctx;

static bool name_wanted(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static void on_dump(void *ud, const char *name, int layer, int row, const float *x, int n) {
    dump_ctx *d = ud;
    if (!d->acts || !name_wanted(d->names, name)) return;
    if (layer >= 0 && (layer < d->lay_lo || layer > d->lay_hi)) return;
    fwrite(x, sizeof(float), (size_t)n, d->acts);
    fprintf(d->acts_idx, "{\"name\":\"%s\",\"layer\":%d,\"pos\":%d,\"offset\":%llu,\"n\":%d}\n", name, layer,
            d->row_base + row, (unsigned long long)d->acts_off, n);
    d->acts_off += (uint64_t)n * sizeof(float);
}

static void on_route(void *ud, int layer, int row, const int32_t *ids, const float *w, const float *p,
                     int k) {
    dump_ctx *d = ud;
    if (!d->routes) return;
    fprintf(d->routes, "{\"layer\":%d,\"pos\":%d,\"ids\":[", layer, d->row_base + row);
    for (int i = 0; i < k; i++) fprintf(d->routes, "%s%d", i ? "," : "", ids[i]);
    fprintf(d->routes, "],\"w\":[");
    for (int i = 0; i < k; i++) fprintf(d->routes, "%s%.9g", i ? "," : "", w[i]);
    fprintf(d->routes, "],\"p\":[");
    for (int i = 0; i < k; i++) fprintf(d->routes, "%s%.9g", i ? "," : "", p[i]);
    fprintf(d->routes, "]}\n");
}

/* Parse "1,2,3" or "@file" into a malloc'd array. */
static int32_t *parse_ids(const char *s, int *n) {
    char *buf = NULL;
    if (s[0] == '@') {
        FILE *f = fopen(s + 1, "rb");
        if (!f) {
            rl_seterr("cannot open token file %s", s + 1);
            return NULL;
        }
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc((size_t)len + 1);
        if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
            fclose(f);
            free(buf);
            rl_seterr("cannot read token file %s", s + 1);
            return NULL;
        }
        buf[len] = 0;
        fclose(f);
    } else {
        buf = strdup(s);
    }
    int cap = 64, cnt = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!buf || !ids) {
        rl_seterr("out of memory reading --tokens");
        free(ids);
        free(buf);
        return NULL;
    }
    for (char *p = buf; *p;) {
        while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || v < 0 || v > 0x7fffffff) {
            rl_seterr("bad token id near '%.20s'", p);
            free(ids);
            free(buf);
            return NULL;
        }
        if (cnt == cap) { /* on failure the old block is still ours to free */
            int32_t *grown = realloc(ids, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!grown) {
                rl_seterr("out of memory reading --tokens");
                free(ids);
                free(buf);
                return NULL;
            }
            ids = grown;
        }
        ids[cnt++] = (int32_t)v;
        p = e;
    }
    free(buf);
    *n = cnt;
    return ids;
}

/* --mtp: the MTP head's logits for the pairs (h_p, x_{p+1}), p = 0 .. n+greedy-2, one row at a
 * time (hid: the final-norm hidden state of every position). 0, or 1 after saying why. */
static int dump_mtp_pairs(engine_ctx *c, const q3n_hparams *hp, const char *mtp_path, const float *hid,
                          const int32_t *ids, int n, const int32_t *gen, int greedy, float *logits) {
    FILE *mf = fopen(mtp_path, "wb");
    if (!mf) return cli_fail("dump", 1, "cannot write %s", mtp_path);
    for (int p = 0; p + 1 < n + greedy; p++) {
        int32_t x = p + 1 < n ? ids[p + 1] : gen[p + 1 - n];
        if (engine_mtp(c, hid + (size_t)p * hp->n_embd, &x, 1, logits, NULL)) {
            fclose(mf);
            return cli_fail("dump", 1, "%s", rl_lasterr());
        }
        fwrite(logits, sizeof(float), (size_t)hp->n_vocab, mf);
    }
    if (fclose(mf)) return cli_fail("dump", 1, "error writing %s (disk full?)", mtp_path);
    return 0;
}

int cmd_dump(int argc, char **argv) {
    cli_opts o;
    opts_defaults(&o);
    o.cache_spec = "mmap";
    o.batch = 64; /* every row's logits are kept: 64 x n_vocab floats */
    int r = opts_parse(&DUMP, argc, argv, &o);
    if (r) return r == OPTS_HELP ? 0 : r;
    const char *tokens = o.tokens, *logits_path = o.logits_path, *routes_path = o.routes_path,
               *acts_path = o.acts_path;
    const char *mtp_path = o.mtp_path;
    dump_ctx d = {.names = o.names, .lay_lo = 0, .lay_hi = 1 << 20};
    if (o.layers && sscanf(o.layers, "%d-%d", &d.lay_lo, &d.lay_hi) != 2) {
        sscanf(o.layers, "%d", &d.lay_lo);
        d.lay_hi = d.lay_lo;
    }
    long long greedy = o.greedy, batch = o.batch;
    bool json = o.json, fast = o.fast, stats = o.stats, check_fast = o.check_fast;
    if (!tokens) return cli_fail("dump", 2, "need --tokens IDS (see redlite dump --help)");
    if (!logits_path && !routes_path && !acts_path && !mtp_path && !json && !stats)
        return cli_fail("dump", 2,
                        "nothing to write: give --logits, --routes, --acts, --mtp, --json or --stats "
                        "(see redlite dump --help)");
    if (check_fast && !fast) return cli_fail("dump", 2, "--check-fast checks the --fast kernels: add --fast");
    int n = 0;
    int32_t *ids = parse_ids(tokens, &n);
    if (!ids) return cli_fail("dump", 2, "%s", rl_lasterr());
    if (n == 0) {
        free(ids);
        return cli_fail("dump", 2, "--tokens is empty");
    }
    o.reference = !fast;
    session_model *sm = cli_model_open(&o);
    if (!sm) {
        free(ids);
        return cli_fail("dump", 1, "%s", rl_lasterr());
    }
    int rc = 1;
    engine *e = session_model_engine(sm);
    const q3n_hparams *hp = engine_hparams(e);
    int V = hp->n_vocab;
    if (batch == 0) batch = engine_default_batch(e); /* -b auto */
    /* The session opens the context with its expert source: the plain mapping unless --cache-mib
     * says otherwise (a backend that holds every expert: its own).
     * The rows below are driven on the context directly: dump is the oracle's tool and needs
     * every row's logits and observers, which generation does not expose. */
    if (!o.cache_set && !engine_can_set_expert_src(e)) o.cache_spec = "auto"; /* the device holds them */
    session *S = cli_session_new(&o, sm, n + (int)greedy + 1, (int)batch);
    engine_ctx *c = S ? session_ctx(S) : NULL;
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)batch);
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)(greedy + 1));
    /* with --mtp: the final-norm hidden state of every position */
    float *hid = mtp_path ? malloc(sizeof(float) * (size_t)hp->n_embd * (size_t)(n + greedy)) : NULL;
    FILE *lf = NULL;
    if (!c || !logits || !gen || (mtp_path && !hid)) {
        cli_fail("dump", 1, "%s", rl_lasterr()[0] ? rl_lasterr() : "out of memory");
        goto done;
    }
    if (logits_path && !(lf = fopen(logits_path, "wb"))) {
        cli_fail("dump", 1, "cannot write %s", logits_path);
        goto done;
    }
    if (routes_path && !(d.routes = fopen(routes_path, "w"))) {
        cli_fail("dump", 1, "cannot write %s", routes_path);
        goto done;
    }
    if (acts_path) {
        char idx[4096];
        snprintf(idx, sizeof idx, "%s.json", acts_path);
        d.acts = fopen(acts_path, "wb");
        d.acts_idx = fopen(idx, "w");
        if (!d.acts || !d.acts_idx) {
            cli_fail("dump", 1, "cannot write %s", acts_path);
            goto done;
        }
    }
    engine_fast_check(e, check_fast && fast);
    engine_set_hooks(c, d.acts ? on_dump : NULL, d.routes ? on_route : NULL,
                     &d); /* observers only when wanted */
    /* prompt: chunks of `batch` rows, every row's logits */
    for (int i = 0; i < n; i += (int)batch) {
        int m = n - i < batch ? n - i : (int)batch;
        d.row_base = engine_pos(c);
        if (engine_verify(c, ids + i, m, logits, NULL)) {
            cli_fail("dump", 1, "%s", rl_lasterr());
            goto done;
        }
        if (lf) fwrite(logits, sizeof(float), (size_t)m * V, lf);
        for (int r = 0; hid && r < m; r++)
            memcpy(hid + (size_t)(i + r) * hp->n_embd, engine_last_hidden(c, r), sizeof(float) * hp->n_embd);
    }
    int next = sampler_argmax(logits + (size_t)((n - 1) % batch) * V, V);
    for (int g = 0; g < greedy; g++) {
        gen[g] = next;
        d.row_base = engine_pos(c);
        if (engine_step(c, next, logits)) {
            cli_fail("dump", 1, "%s", rl_lasterr());
            goto done;
        }
        if (lf) fwrite(logits, sizeof(float), (size_t)V, lf);
        if (hid)
            memcpy(hid + (size_t)(n + g) * hp->n_embd, engine_last_hidden(c, 0), sizeof(float) * hp->n_embd);
        next = sampler_argmax(logits, V);
    }
    if (mtp_path && dump_mtp_pairs(c, hp, mtp_path, hid, ids, n, gen, (int)greedy, logits)) goto done;
    if (json) {
        printf("{\"prompt\":[");
        for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("],\"generated\":[");
        for (int i = 0; i < greedy; i++) printf("%s%d", i ? "," : "", gen[i]);
        printf("]}\n");
    }
    rc = 0;
    if (check_fast) {
        long checked, bad;
        double worst;
        engine_fast_check_report(e, &checked, &bad, &worst);
        fprintf(stderr, "fast-check: %ld products checked, %ld beyond tolerance, worst relative error %.3e\n",
                checked, bad, worst);
        if (bad) rc = 1;
    }
done:
    if (lf && fclose(lf)) rc = cli_fail("dump", 1, "error writing %s (disk full?)", logits_path);
    if (d.routes) fclose(d.routes);
    if (d.acts) fclose(d.acts);
    if (d.acts_idx) fclose(d.acts_idx);
    free(logits);
    free(gen);
    free(hid);
    free(ids);
    if (S && stats) session_print_cache_stats(S, stderr, true);
    session_free(S);
    session_model_close(sm);
    return rc;
}
