/* cmd_bench.c — `redlite bench`: decode and prompt-ingestion speed of a model, with the
 * effective bandwidth over the bytes one token must read and an optional per-stage profile.
 *
 * Decode: after a warm-up, N timed runs of --n-decode single steps (random token ids, fixed
 * seed) from position 0 and, with --depth D, from a context already filled with D tokens
 * (restored from a snapshot before each run); the median run is reported. Prompt ingestion:
 * engine_prefill of 512 and 2048 random tokens (--prompt) in --batch chunks (default: the backend's
 * choice, what generate/chat/serve use).
 *
 * Bytes per decoded token = dense weights (everything but the routed experts, the MTP block and
 * the embedding table, of which one row) + top-k of each layer's experts (k/E of its *_exps
 * bytes) + recurrent state (read and written) + the KV cache rows attention reads at that
 * position (f32). GB/s = bytes per token x tokens per second.
 *
 * --profile splits a token's time into stages without touching the engine: it timestamps the
 * engine's debug observers (named activations, router choices) and the routed-expert source
 * (acquire / release around the routed experts), and attributes each interval by the pair of
 * events that bound it. The observers are off while the speed itself is measured. "moe experts"
 * is acquire..release: the routed experts and, in the current engine, the shared expert, which
 * runs in the same dispatch; "moe tail" is release..ffn_out (the weighted sum).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "base/common.h"
#include "cache/expert_cache.h"
#include "base/json.h"
#include "cli/opts.h"
#include "run/session.h"

static const opts_cmd BENCH = {"bench", CMD_BENCH, "redlite bench -m MODEL [options]",
                               "Measure decode and prompt-ingestion speed (random token ids, deterministic).",
                               NULL};

/* ---- bytes a token reads ------------------------------------------------------------------ */

enum {
    ST_OTHER,
    ST_DN_PROJ,
    ST_DN_REC,
    ST_DN_OUT,
    ST_ATT_CORE,
    ST_ATT_OUT,
    ST_ROUTER,
    ST_EXPERTS,
    ST_SHARED,
    ST_HEAD,
    ST_N
};
static const char *const stage_names[ST_N] = {
    "norms/residual/other", "deltanet projections", "deltanet conv+recurrence",
    "deltanet ssm_out",     "attention qkv+core",   "attention output",
    "moe router",           "moe experts",          "moe tail",
    "output head"};

typedef struct {
    double stage[ST_N];    /* bytes per decoded token per stage (weights + state; KV separately) */
    double dense, experts; /* weights read per token */
    double state;          /* recurrent + conv state, read and written */
    double kv_per_pos;     /* K and V bytes attention reads per position of context */
    uint64_t file_bytes;
} token_bytes;

static void count_bytes(const engine *e, token_bytes *b) {
    const q3n_hparams *hp = engine_hparams(e);
    const gguf_file *f = engine_gguf((engine *)e);
    memset(b, 0, sizeof *b);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const char *n = t->name;
        double nb = (double)t->nbytes;
        b->file_bytes += t->nbytes;
        int layer = -1, id = q3n_tensor_lookup(n, &layer); /* the model's tensor table */
        if (layer >= hp->n_layer) continue;                /* MTP block */
        if (id >= 0 && q3n_tensor((q3n_tensor_id)id)->routed) {
            double per_tok = nb * hp->n_expert_used / hp->n_expert;
            b->experts += per_tok;
            b->stage[ST_EXPERTS] += per_tok;
            continue;
        }
        if (id == Q3N_T_TOKEN_EMBD) nb = t->ne[1] ? nb / (double)t->ne[1] : nb; /* one row */
        b->dense += nb;
        int st = ST_OTHER;
        switch (id) {
        case Q3N_T_SSM_QKV:
        case Q3N_T_SSM_GATE:
        case Q3N_T_SSM_BA:
        case Q3N_T_SSM_IN: st = ST_DN_PROJ; break;
        case Q3N_T_SSM_OUT: st = ST_DN_OUT; break;
        case Q3N_T_ATTN_Q:
        case Q3N_T_ATTN_K:
        case Q3N_T_ATTN_V: st = ST_ATT_CORE; break;
        case Q3N_T_ATTN_OUTPUT: st = ST_ATT_OUT; break;
        case Q3N_T_ROUTER: st = ST_ROUTER; break;
        case Q3N_T_SH_GATE:
        case Q3N_T_GATE_SH:
        case Q3N_T_UP_SH:
        case Q3N_T_DOWN_SH: st = ST_EXPERTS; break; /* computed together with the routed experts */
        case Q3N_T_OUTPUT: st = ST_HEAD; break;
        default: break;
        }
        b->stage[st] += nb;
    }
    int n_attn = 0;
    for (int il = 0; il < hp->n_layer; il++) n_attn += hp->is_attn[il];
    double per_dn = 4.0 * (double)(q3n_ssm_floats(hp) + q3n_conv_floats(hp));
    b->state = 2.0 * per_dn * (hp->n_layer - n_attn);
    b->stage[ST_DN_REC] += b->state;
    b->kv_per_pos = 2.0 * 4.0 * hp->n_head_kv * hp->head_dim * n_attn;
}

/* bytes one decoded token reads at context position pos */
static double bytes_at(const token_bytes *b, double pos) {
    return b->dense + b->experts + b->state + b->kv_per_pos * pos;
}

/* ---- profile via the engine's observers ------------------------------------------------------ */

enum {
    EV_START,
    EV_OTHER,
    EV_ATTN_NORM,
    EV_DN_CONV,
    EV_DN_GATED,
    EV_ATT_GATED,
    EV_ATTN_OUT,
    EV_FFN_NORM,
    EV_ROUTE,
    EV_ACQUIRE,
    EV_RELEASE,
    EV_FFN_OUT,
    EV_RESULT_NORM,
    EV_END
};

typedef struct {
    const q3n_model *m;
    double t_last;
    int last;
    double sec[ST_N];
    q3n_expert_src inner; /* the session's expert source, timed around (acquire NULL: the mapping) */
} prof;

static int stage_of(int prev, int cur) {
    switch (cur) {
    case EV_DN_CONV: return prev == EV_ATTN_NORM ? ST_DN_PROJ : ST_DN_REC;
    case EV_DN_GATED: return ST_DN_REC;
    case EV_ATT_GATED: return ST_ATT_CORE;
    case EV_ATTN_OUT: return prev == EV_DN_GATED ? ST_DN_OUT : prev == EV_ATT_GATED ? ST_ATT_OUT : ST_OTHER;
    case EV_ROUTE:
    case EV_ACQUIRE: return prev == EV_FFN_NORM || prev == EV_ROUTE ? ST_ROUTER : ST_OTHER;
    case EV_RELEASE: return ST_EXPERTS;
    case EV_FFN_OUT: return prev == EV_RELEASE ? ST_SHARED : ST_OTHER;
    case EV_END: return prev == EV_RESULT_NORM ? ST_HEAD : ST_OTHER;
    default: return ST_OTHER;
    }
}

static void mark(prof *p, int ev) {
    double now = rl_now();
    p->sec[stage_of(p->last, ev)] += now - p->t_last;
    p->t_last = now;
    p->last = ev;
}

static void on_dump(void *ud, const char *name, int layer, int row, const float *x, int n) {
    int ev;
    switch (q3n_act_find(name)) {
    case Q3N_ACT_ATTN_NORM: ev = EV_ATTN_NORM; break;
    case Q3N_ACT_DN_CONV: ev = EV_DN_CONV; break;
    case Q3N_ACT_DN_GATED: ev = EV_DN_GATED; break;
    case Q3N_ACT_ATTN_GATED: ev = EV_ATT_GATED; break;
    case Q3N_ACT_ATTN_OUT: ev = EV_ATTN_OUT; break;
    case Q3N_ACT_FFN_NORM: ev = EV_FFN_NORM; break;
    case Q3N_ACT_FFN_OUT: ev = EV_FFN_OUT; break;
    case Q3N_ACT_RESULT_NORM: ev = EV_RESULT_NORM; break;
    default: ev = EV_OTHER; break;
    }
    mark(ud, ev);
}

static void on_route(void *ud, int layer, int row, const int32_t *ids, const float *w, const float *p,
                     int k) {
    mark(ud, EV_ROUTE);
}

/* The session's expert source, or the mapped file (slices of the *_exps tensors), with
 * timestamps. */
static int prof_acquire(void *ud, int il, const int32_t *ids, int n, const uint8_t **gate, const uint8_t **up,
                        const uint8_t **down) {
    prof *p = ud;
    mark(p, EV_ACQUIRE);
    if (p->inner.acquire) return p->inner.acquire(p->inner.ud, il, ids, n, gate, up, down);
    const q3n_layer *L = &p->m->layers[il];
    size_t ff = (size_t)p->m->hp.n_ff_exp, D = (size_t)p->m->hp.n_embd;
    for (int i = 0; i < n; i++) {
        size_t e = (size_t)ids[i];
        if (L->fused_gate_up) {
            gate[i] = L->gate_exps.data + e * 2 * ff * L->gate_exps.row_bytes;
            up[i] = gate[i] + ff * L->gate_exps.row_bytes;
        } else {
            gate[i] = L->gate_exps.data + e * ff * L->gate_exps.row_bytes;
            up[i] = L->up_exps.data + e * ff * L->up_exps.row_bytes;
        }
        down[i] = L->down_exps.data + e * D * L->down_exps.row_bytes;
    }
    return 0;
}

static void prof_release(void *ud, int il) {
    prof *p = ud;
    if (p->inner.release) p->inner.release(p->inner.ud, il);
    mark(ud, EV_RELEASE);
}

static void prof_hint(void *ud, int il, const float *xn, int T) {
    prof *p = ud;
    p->inner.hint(p->inner.ud, il, xn, T);
}

static void prof_bias(void *ud, int il, float *scores, int n) {
    prof *p = ud;
    p->inner.bias(p->inner.ud, il, scores, n);
}

/* The profile wraps the session's expert source (timing the routed experts); a backend that
 * takes no expert source (CUDA) is profiled by the observers alone. */
static void prof_begin(session *S, prof *p) {
    engine_ctx *c = session_ctx(S);
    engine_set_hooks(c, on_dump, on_route, p);
    expert_cache *ec = session_expert_cache(S);
    if (ec) p->inner = expert_cache_src(ec);
    q3n_expert_src src = {.acquire = prof_acquire,
                          .release = prof_release,
                          .hint = p->inner.hint ? prof_hint : NULL,
                          .bias = p->inner.bias ? prof_bias : NULL,
                          .ud = p};
    if (engine_set_expert_src(c, &src)) rl_clearerr(); /* CUDA: observers only */
}

static void prof_end(session *S) {
    engine_ctx *c = session_ctx(S);
    engine_set_hooks(c, NULL, NULL, NULL);
    expert_cache *ec = session_expert_cache(S);
    q3n_expert_src src = ec ? expert_cache_src(ec) : (q3n_expert_src){0};
    engine_set_expert_src(c, ec ? &src : NULL);
}

/* ---- measurements ------------------------------------------------------------------------- */

typedef struct {
    session_model *m;
    session *S;
    engine *e;
    engine_ctx *c; /* the session's context, driven step by step: bench times the engine */
    float *logits;
    rl_rng rng;
    int n_vocab;
} bench;

static int32_t rand_tok(bench *b) { return (int32_t)(rl_rng_u64(&b->rng) % (uint64_t)b->n_vocab); }

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return v[0];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_dbl);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* n decode steps from the current state; tokens/s, or -1 on error. p: profile (optional). */
static double decode_run(bench *b, int n, prof *p) {
    double t0 = rl_now();
    if (p) p->t_last = t0, p->last = EV_START;
    for (int i = 0; i < n; i++) {
        if (engine_step(b->c, rand_tok(b), b->logits)) return -1;
        if (p) mark(p, EV_END), p->last = EV_START;
    }
    return n / (rl_now() - t0);
}

static double prefill_run(bench *b, int n, prof *p) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    if (!tok) return rl_seterr("out of memory"), -1;
    for (int i = 0; i < n; i++) tok[i] = rand_tok(b);
    engine_reset(b->c);
    double t0 = rl_now();
    if (p) p->t_last = t0, p->last = EV_START;
    int rc = engine_prefill(b->c, tok, n, b->logits);
    if (p && !rc) mark(p, EV_END);
    double dt = rl_now() - t0;
    free(tok);
    return rc ? -1 : n / dt;
}

typedef struct {
    int depth;
    double tok_s, all[64], pos_avg;
    int reps;
    uint64_t ec_hits, ec_lookups; /* the RAM expert cache over the timed runs (0/0: no cache) */
} decode_res;

typedef struct {
    int n;
    double tok_s, all[64];
    int reps;
} prompt_res;

/* The RL_* variables of the environment: the tuning switches (docs/CUDA.md, docs/CPU.md) a run's figures
 * depend on. With j: an object "tuning" of name -> value; else a line "tuning    NAME=VALUE ..." when any
 * is set. */
static void print_tuning(json_writer *j) {
    if (j) {
        json_key(j, "tuning");
        json_obj_begin(j);
    }
    bool any = false;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "RL_", 3) || !eq || eq - *e >= 128) continue;
        char name[128];
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = 0;
        if (j) json_kv_str(j, name, eq + 1);
        else printf("%s %s", any ? "" : "tuning   ", *e);
        any = true;
    }
    if (j) json_obj_end(j);
    else if (any) printf("\n");
}

static void print_profile(const char *title, const prof *p, double per, const token_bytes *tb,
                          json_writer *j) {
    double tot = 0;
    for (int s = 0; s < ST_N; s++) tot += p->sec[s];
    if (j) {
        json_key(j, title);
        json_arr_begin(j);
    } else {
        printf("\nprofile: %s (%.3f ms per token)\n  %-26s %10s %6s", title, 1e3 * tot / per, "stage",
               "ms/token", "%");
        printf(tb ? " %10s %8s\n" : "\n", "MB/token", "GB/s");
    }
    for (int s = 0; s < ST_N; s++) {
        double ms = 1e3 * p->sec[s] / per, mb = tb ? tb->stage[s] / 1e6 : 0;
        double gbs = tb && p->sec[s] > 0 && s != ST_OTHER ? tb->stage[s] * per / p->sec[s] / 1e9 : 0;
        if (j) {
            json_obj_begin(j);
            json_kv_str(j, "stage", stage_names[s]);
            json_kv_num(j, "ms_per_token", ms);
            json_kv_num(j, "pct", tot > 0 ? 100 * p->sec[s] / tot : 0);
            if (tb) {
                json_kv_num(j, "bytes_per_token", tb->stage[s]);
                json_kv_num(j, "gb_s", gbs);
            }
            json_obj_end(j);
        } else if (tb && s != ST_OTHER) {
            printf("  %-26s %10.3f %5.1f%% %10.2f %8.2f\n", stage_names[s], ms,
                   tot > 0 ? 100 * p->sec[s] / tot : 0, mb, gbs);
        } else {
            printf("  %-26s %10.3f %5.1f%%\n", stage_names[s], ms, tot > 0 ? 100 * p->sec[s] / tot : 0);
        }
    }
    if (j) json_arr_end(j);
}

/* One bench command's state, shared by its set-up, measurement and report pieces. */
typedef struct {
    cli_opts o;
    bench b;
    const q3n_hparams *hp;
    double t_load;
    long long need, batch;
    engine_snapshot *snap;
    bool cpu;
    FILE *dec_ops; /* the decode products profile, printed after the decode stages */
    char *dec_ops_txt;
    size_t dec_ops_len;
    token_bytes tb;
    decode_res dec[2];
    prompt_res pr[16];
    int n_dec;
    prof pdec, ppre;
    const char *kv_fmt;
    engine_mem mem;
    bool have_mem, amx;
    const char *kernels;
    char path[96];
    uint64_t rss;
} bench_cmd;

/* The model header lines of the text report. */
static void bench_print_header(const bench_cmd *bc) {
    const q3n_hparams *hp = bc->hp;
    const token_bytes tb = bc->tb;
    const engine_mem mem = bc->mem;
    long long threads = bc->o.threads;
    printf("model     %s (%.2f GiB, %d layers, %d experts top-%d, vocab %d), loaded in %.2f s\n", bc->o.model,
           (double)tb.file_bytes / (1u << 30), hp->n_layer, hp->n_expert, hp->n_expert_used, hp->n_vocab,
           bc->t_load);
    printf("engine    backend %s, %s, CPU kernels %s, %d threads\n", engine_backend_name(bc->b.e), bc->path,
           bc->kernels, threads ? (int)threads : rl_ncpu());
    engine_weights_print(bc->b.e, stdout, "weights   ");
    printf("bytes     per token at ctx 0: %.1f MB (dense %.1f + routed experts %.1f + state %.1f); KV "
           "%.1f KB per "
           "position\n",
           bytes_at(&tb, 0) / 1e6, tb.dense / 1e6, tb.experts / 1e6, tb.state / 1e6, tb.kv_per_pos / 1e3);
    if (bc->have_mem) {
        printf("context   %d positions: KV %s %.2f MiB, state %.2f MiB, scratch %.2f MiB", (int)bc->need + 8,
               bc->kv_fmt, mem.kv_bytes / 1048576.0, mem.state_bytes / 1048576.0,
               mem.scratch_bytes / 1048576.0);
        if (mem.device)
            printf("; device %.2f GiB used of %.2f (weights %.2f GiB, context %.2f GiB)",
                   (mem.dev_total - mem.dev_free_after_ctx) / 1073741824.0, mem.dev_total / 1073741824.0,
                   mem.dev_free_before_weights
                       ? (mem.dev_free_before_weights - mem.dev_free_after_weights) / 1073741824.0
                       : 0.0,
                   (mem.dev_free_after_weights - mem.dev_free_after_ctx) / 1073741824.0);
        printf("\n");
    }
    fflush(stdout);
}

/* Set-up: the options, the model, the session sized for the runs, what the report names.
 * 0, or the command's exit status (the failure already reported); bench_free releases. */
static int bench_setup(bench_cmd *bc, int argc, char **argv) {
    cli_opts *o = &bc->o;
    opts_defaults(o);
    int r = opts_parse(&BENCH, argc, argv, o);
    if (r) return r == OPTS_HELP ? -1 : r;
    long long n_decode = o->n_decode, warmup = o->warmup, depth = o->depth;
    const int *prompts = o->prompts, n_prompts = o->n_prompts;
    bool reference = o->reference;
    if (reference && o->backend && strcmp(o->backend, "cpu"))
        return cli_fail("bench", 2, "--reference is the CPU reference; drop --backend %s", o->backend);
    bench *b = &bc->b;
    double t_load = rl_now();
    if (!(b->m = cli_model_open(o))) return cli_fail("bench", 1, "%s", rl_lasterr());
    b->e = session_model_engine(b->m);
    bc->t_load = rl_now() - t_load;
    const q3n_hparams *hp = bc->hp = engine_hparams(b->e);
    b->n_vocab = hp->n_vocab;
    rl_rng_seed(&b->rng, (uint64_t)o->bench_seed);
    int max_prompt = 0;
    for (int i = 0; i < n_prompts; i++) max_prompt = prompts[i] > max_prompt ? prompts[i] : max_prompt;
    long long need = depth + warmup + n_decode;
    if (need < max_prompt) need = max_prompt;
    bc->need = need;
    if (need > (1 << 24)) return cli_fail("bench", 2, "--depth + --n-decode is too large");

    bc->cpu = !strcmp(engine_backend_name(b->e), "cpu");
    count_bytes(b->e, &bc->tb);
    bc->pdec = (prof){.m = engine_model(b->e)}, bc->ppre = (prof){.m = engine_model(b->e)};
    b->logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    if (!b->logits || !(b->S = cli_session_new(o, b->m, (int)need + 8, (int)o->batch)))
        return cli_fail("bench", 1, "%s", rl_lasterr()[0] ? rl_lasterr() : "out of memory");
    bc->batch = session_n_batch(b->S); /* -b auto: the backend's choice */
    /* the context's KV format sets the bytes attention reads per position; what it allocated */
    bc->kv_fmt = engine_kv_format(session_ctx(b->S));
    if (!strcmp(bc->kv_fmt, "f16")) bc->tb.kv_per_pos /= 2;
    bc->have_mem = engine_mem_info(session_ctx(b->S), &bc->mem) == 0;
    if (!bc->have_mem) rl_clearerr();
    bc->kernels = engine_cpu_kernels(b->e);
    bc->amx = strstr(bc->kernels, "AMX") != NULL; /* AMX tiles in use */
    if (bc->cpu)
        snprintf(bc->path, sizeof bc->path, "%s",
                 reference ? "reference (double precision)" : "fast kernels");
    else /* the state format names the attention arithmetic where it is the backend's choice */
        snprintf(bc->path, sizeof bc->path, "device%s",
                 strstr(engine_state_format(session_ctx(b->S)), "-tc") ? ", attention on tensor cores" : "");
    return 0;
}

/* Decode at position 0, then at --depth over a context filled once and restored before every run.
 * 0 or -1 (rl_lasterr). */
static int bench_decode(bench_cmd *bc) {
    bench *b = &bc->b;
    long long n_decode = bc->o.n_decode, reps = bc->o.reps, warmup = bc->o.warmup, depth = bc->o.depth;
    engine_reset(b->c);
    if (warmup && decode_run(b, (int)warmup, NULL) < 0) return -1;
    for (int d = 0; d < (depth ? 2 : 1); d++) {
        decode_res *r = &bc->dec[bc->n_dec++];
        r->depth = d ? (int)depth : 0;
        r->reps = (int)reps;
        r->pos_avg = r->depth + 0.5 * (double)n_decode;
        if (d) { /* fill the context once, then restore it before every run */
            int32_t *tok = malloc(sizeof(int32_t) * (size_t)depth);
            if (!tok) return -1;
            for (int i = 0; i < depth; i++) tok[i] = rand_tok(b);
            engine_reset(b->c);
            int e = engine_prefill(b->c, tok, (int)depth, b->logits);
            free(tok);
            if (e || !(bc->snap = engine_snapshot_new(b->c)) || engine_snapshot_save(b->c, bc->snap))
                return -1;
        }
        expert_cache *ec = session_expert_cache(b->S);
        ec_stats s0 = {0}, s1 = {0};
        if (ec) expert_cache_get_stats(ec, &s0);
        for (int k = 0; k < reps; k++) {
            if (d ? engine_snapshot_restore(b->c, bc->snap) : (engine_reset(b->c), 0)) return -1;
            if ((r->all[k] = decode_run(b, (int)n_decode, NULL)) < 0) return -1;
        }
        if (ec) expert_cache_get_stats(ec, &s1);
        r->ec_hits = s1.hits - s0.hits, r->ec_lookups = s1.lookups - s0.lookups;
        r->tok_s = median(r->all, (int)reps);
        if (!bc->o.json) {
            printf(
                "decode    ctx %-6d %8.3f tok/s  %9.2f ms/tok  %7.2f GB/s   (median of %d x %lld tokens)\n",
                r->depth, r->tok_s, 1e3 / r->tok_s, bytes_at(&bc->tb, r->pos_avg) * r->tok_s / 1e9, r->reps,
                n_decode);
            fflush(stdout);
        }
    }
    return 0;
}

/* Each --prompts size: the median prefill speed. 0 or -1 (rl_lasterr). */
static int bench_prompts(bench_cmd *bc) {
    long long reps = bc->o.reps;
    for (int i = 0; i < bc->o.n_prompts; i++) {
        prompt_res *r = &bc->pr[i];
        r->n = bc->o.prompts[i];
        r->reps = (int)reps;
        for (int k = 0; k < reps; k++)
            if ((r->all[k] = prefill_run(&bc->b, r->n, NULL)) < 0) return -1;
        r->tok_s = median(r->all, (int)reps);
        if (!bc->o.json) {
            printf("prompt    %-10d %8.2f tok/s  %9.2f s         (median of %d, batch %lld)\n", r->n,
                   r->tok_s, r->n / r->tok_s, r->reps, bc->batch);
            fflush(stdout);
        }
    }
    return 0;
}

/* --profile: the stage profiles of decode and of the first prompt, and the products tables.
 * 0 or -1 (rl_lasterr). */
static int bench_profile(bench_cmd *bc) {
    bench *b = &bc->b;
    long long n_decode = bc->o.n_decode, depth = bc->o.depth;
    const int *prompts = bc->o.prompts, n_prompts = bc->o.n_prompts;
    prof_begin(b->S, &bc->pdec);
    engine_reset(b->c);
    if (decode_run(b, (int)n_decode, &bc->pdec) < 0) return -1;
    prof_begin(b->S, &bc->ppre);
    if (n_prompts && prefill_run(b, prompts[0], &bc->ppre) < 0) return -1;
    prof_end(b->S);
    /* the products and threads of decode (CPU: written now, printed after the decode stages) and
     * of a prompt, without the observers (they make DeltaNet run row by row) */
    if (bc->cpu && !bc->o.json) {
        bc->dec_ops = open_memstream(&bc->dec_ops_txt, &bc->dec_ops_len);
        engine_prof_begin(b->e);
        engine_reset(b->c);
        if (decode_run(b, (int)n_decode, NULL) < 0) return -1;
        engine_prof_end(b->e);
        if (bc->dec_ops) {
            engine_prof_print(b->e, bc->dec_ops, "decode", (double)n_decode);
            if (bc->snap) { /* --depth: the same table over the filled context (attention's share grows) */
                if (engine_snapshot_restore(b->c, bc->snap)) return -1;
                engine_prof_begin(b->e);
                if (decode_run(b, (int)n_decode, NULL) < 0) return -1;
                engine_prof_end(b->e);
                char t[64];
                snprintf(t, sizeof t, "decode at depth %lld", depth);
                engine_prof_print(b->e, bc->dec_ops, t, (double)n_decode);
            }
            fclose(bc->dec_ops);
            bc->dec_ops = NULL;
        }
    }
    engine_prof_begin(b->e);
    if (n_prompts && prefill_run(b, prompts[0], NULL) < 0) return -1;
    engine_prof_end(b->e);
    return 0;
}

/* ---- what a JSON record says about the run (bench/charts.py, docs/INSTALL.md) ---------------- */

#ifndef RL_COMMIT /* the Makefile passes `git describe --always --dirty` */
#define RL_COMMIT "unknown"
#endif

/* "<CPU model name>, N CPUs, X GiB RAM" (+ ", GPU X GiB" on a device backend): the machine as far as
 * this process can tell (the scripts may name it better, e.g. the GPU's name from nvidia-smi). */
static void machine_desc(const bench_cmd *bc, char *out, size_t n) {
    char cpu[128] = "unknown CPU", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !c) continue;
        c += 1 + strspn(c + 1, " \t");
        c[strcspn(c, "\n")] = 0;
        snprintf(cpu, sizeof cpu, "%s", c);
        break;
    }
    if (f) fclose(f);
    const double ram = (double)rl_phys_ram() / 1073741824.0, lim = (double)rl_total_ram() / 1073741824.0;
    int k = lim < ram ? snprintf(out, n, "%s, %d CPUs, %.0f GiB RAM (%.1f GiB cgroup limit)", cpu, rl_ncpu(),
                                 ram, lim)
                      : snprintf(out, n, "%s, %d CPUs, %.0f GiB RAM", cpu, rl_ncpu(), ram);
    if (bc->have_mem && bc->mem.device && k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, ", GPU %.0f GiB", bc->mem.dev_total / 1073741824.0);
}

/* A budget option as given: a number of MiB as a number, a word (full, auto, mmap) as a string,
 * not given (NULL) as null. */
static void json_kv_budget(json_writer *j, const char *key, const char *spec) {
    json_key(j, key);
    if (!spec) json_null(j);
    else if (spec[0] && strspn(spec, "0123456789") == strlen(spec)) json_uint(j, strtoull(spec, NULL, 10));
    else json_str(j, spec);
}

/* machine, date (UTC), commit, the memory budgets asked for and the RAM expert cache's plan. */
static void bench_json_provenance(const bench_cmd *bc, json_writer *j) {
    char m[256], date[32];
    machine_desc(bc, m, sizeof m);
    json_kv_str(j, "machine", m);
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    json_kv_str(j, "date", date);
    json_kv_str(j, "commit", RL_COMMIT);
    json_key(j, "budget");
    json_obj_begin(j);
    json_kv_budget(j, "cache_mib", bc->o.cache_spec);
    json_kv_budget(j, "vram_mib", bc->o.vram_spec);
    json_obj_end(j);
    expert_cache *ec = session_expert_cache(bc->b.S);
    if (ec) {
        ec_stats st;
        expert_cache_get_stats(ec, &st);
        json_key(j, "expert_cache");
        json_obj_begin(j);
        json_kv_str(j, "mode", ec_mode_name(st.mode));
        json_kv_uint(j, "budget_bytes", st.budget);
        json_kv_uint(j, "slots", st.n_slots);
        json_obj_end(j);
    }
}

/* The JSON report's description of the run: model, engine, hyperparameters, bytes, memory. */
static void bench_json_setup(const bench_cmd *bc, json_writer *j) {
    const q3n_hparams *hp = bc->hp;
    const token_bytes tb = bc->tb;
    const engine_mem mem = bc->mem;
    long long threads = bc->o.threads;
    json_kv_str(j, "model", bc->o.model);
    json_kv_uint(j, "file_bytes", tb.file_bytes);
    bench_json_provenance(bc, j);
    json_kv_str(j, "backend", engine_backend_name(bc->b.e));
    json_kv_str(j, "path", bc->path);
    json_kv_str(j, "cpu_kernels", engine_cpu_level(bc->b.e));
    json_kv_bool(j, "cpu_amx", bc->amx);
    json_kv_int(j, "threads", threads ? threads : rl_ncpu());
    print_tuning(j);
    json_kv_num(j, "load_seconds", bc->t_load);
    json_key(j, "hparams");
    json_obj_begin(j);
    json_kv_int(j, "n_layer", hp->n_layer);
    json_kv_int(j, "n_embd", hp->n_embd);
    json_kv_int(j, "n_expert", hp->n_expert);
    json_kv_int(j, "n_expert_used", hp->n_expert_used);
    json_kv_int(j, "n_vocab", hp->n_vocab);
    json_obj_end(j);
    json_key(j, "bytes_per_token");
    json_obj_begin(j);
    json_kv_num(j, "dense", tb.dense);
    json_kv_num(j, "routed_experts", tb.experts);
    json_kv_num(j, "state", tb.state);
    json_kv_num(j, "kv_per_position", tb.kv_per_pos);
    json_kv_num(j, "total_ctx0", bytes_at(&tb, 0));
    json_obj_end(j);
    json_key(j, "memory"); /* the context's allocations (engine_mem_info); device: cudaMemGetInfo */
    json_obj_begin(j);
    json_kv_str(j, "kv_format", bc->kv_fmt);
    json_kv_int(j, "n_ctx", bc->need + 8);
    if (bc->have_mem) {
        json_kv_uint(j, "kv_bytes", mem.kv_bytes);
        json_kv_uint(j, "state_bytes", mem.state_bytes);
        json_kv_uint(j, "scratch_bytes", mem.scratch_bytes);
        if (mem.device) {
            json_kv_uint(j, "device_total_bytes", mem.dev_total);
            json_kv_uint(j, "device_free_before_weights", mem.dev_free_before_weights);
            json_kv_uint(j, "device_free_after_weights", mem.dev_free_after_weights);
            json_kv_uint(j, "device_free_after_context", mem.dev_free_after_ctx);
            if (mem.dev_free_before_weights)
                json_kv_uint(j, "device_weights_bytes",
                             mem.dev_free_before_weights - mem.dev_free_after_weights);
            json_kv_uint(j, "device_context_bytes", mem.dev_free_after_weights - mem.dev_free_after_ctx);
        }
    }
    json_obj_end(j);
    char wl[640];
    if (engine_weights_describe(bc->b.e, wl, sizeof wl)) json_kv_str(j, "weights", wl);
}

/* The VRAM tier's host->device copies over the whole run (warm-ups and every measurement, the
 * prompts' included): bytes, the copy stream's time for them (the emulated link's holds included)
 * and their rate; the RL_VRAM_LINK_GBS cap and the real link's rate measured at creation (null
 * when no cap). */
static void json_vram_link(json_writer *j, const engine_mem *gm) {
    json_key(j, "vram_link");
    json_obj_begin(j);
    json_kv_uint(j, "bytes", gm->h2d_bytes);
    json_kv_num(j, "seconds", gm->h2d_seconds);
    json_key(j, "gb_s");
    if (gm->h2d_seconds > 0) json_num(j, (double)gm->h2d_bytes / gm->h2d_seconds / 1e9);
    else json_null(j);
    json_key(j, "cap_gb_s");
    if (gm->h2d_cap_gbs > 0) json_num(j, gm->h2d_cap_gbs);
    else json_null(j);
    json_key(j, "raw_gb_s");
    if (gm->h2d_raw_gbs > 0) json_num(j, gm->h2d_raw_gbs);
    else json_null(j);
    json_obj_end(j);
}

/* The JSON report: the run's description, then the measurements. 0, or 1 (reported). */
static int bench_report_json(const bench_cmd *bc) {
    long long n_decode = bc->o.n_decode;
    const int *prompts = bc->o.prompts, n_prompts = bc->o.n_prompts;
    const decode_res *dec = bc->dec;
    const prompt_res *pr = bc->pr;
    json_writer j;
    json_init(&j, stdout, 2);
    json_obj_begin(&j);
    bench_json_setup(bc, &j);
    json_key(&j, "decode");
    json_arr_begin(&j);
    for (int d = 0; d < bc->n_dec; d++) {
        json_obj_begin(&j);
        json_kv_int(&j, "depth", dec[d].depth);
        json_kv_int(&j, "n_tokens", n_decode);
        json_kv_num(&j, "tok_s", dec[d].tok_s);
        json_kv_num(&j, "ms_per_token", 1e3 / dec[d].tok_s);
        json_kv_num(&j, "gb_s", bytes_at(&bc->tb, dec[d].pos_avg) * dec[d].tok_s / 1e9);
        if (dec[d].ec_lookups) { /* the RAM expert cache over the timed runs */
            json_kv_uint(&j, "cache_hits", dec[d].ec_hits);
            json_kv_uint(&j, "cache_lookups", dec[d].ec_lookups);
            json_kv_num(&j, "cache_hit_rate", (double)dec[d].ec_hits / (double)dec[d].ec_lookups);
        }
        json_key(&j, "runs_tok_s");
        json_arr_begin(&j);
        for (int k = 0; k < dec[d].reps; k++) json_num(&j, dec[d].all[k]);
        json_arr_end(&j);
        json_obj_end(&j);
    }
    json_arr_end(&j);
    engine_mem gm; /* after the decode runs: the CUDA decode graph (captured on the first step) */
    const bool have_gm = engine_mem_info(session_ctx(bc->b.S), &gm) == 0;
    if (have_gm && gm.decode_graph_nodes) {
        json_key(&j, "decode_graph");
        json_obj_begin(&j);
        json_kv_int(&j, "nodes", gm.decode_graph_nodes);
        json_kv_int(&j, "kernels", gm.decode_graph_kernels);
        json_obj_end(&j);
    } else if (!have_gm) {
        rl_clearerr();
    }
    if (have_gm && gm.h2d) json_vram_link(&j, &gm);
    json_key(&j, "prompt");
    json_arr_begin(&j);
    for (int i = 0; i < n_prompts; i++) {
        json_obj_begin(&j);
        json_kv_int(&j, "n_tokens", pr[i].n);
        json_kv_int(&j, "batch", bc->batch);
        json_kv_num(&j, "tok_s", pr[i].tok_s);
        json_key(&j, "runs_tok_s");
        json_arr_begin(&j);
        for (int k = 0; k < pr[i].reps; k++) json_num(&j, pr[i].all[k]);
        json_arr_end(&j);
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_kv_uint(&j, "peak_rss_bytes", bc->rss);
    if (bc->o.profile) {
        json_key(&j, "profile");
        json_obj_begin(&j);
        print_profile("decode", &bc->pdec, (double)n_decode, &bc->tb, &j);
        if (n_prompts) print_profile("prompt", &bc->ppre, (double)prompts[0], NULL, &j);
        json_obj_end(&j);
    }
    json_obj_end(&j);
    if (json_finish(&j)) return cli_fail("bench", 1, "error writing the JSON output");
    return 0;
}

/* The text report's closing lines: memory, tuning, the decode graph, the profiles. */
static void bench_report_text(const bench_cmd *bc) {
    long long n_decode = bc->o.n_decode;
    const int *prompts = bc->o.prompts, n_prompts = bc->o.n_prompts;
    printf("memory    peak RSS %.2f GiB\n", (double)bc->rss / (1u << 30));
    print_tuning(NULL);
    engine_mem gm;
    if (engine_mem_info(session_ctx(bc->b.S), &gm) == 0 && gm.decode_graph_nodes)
        printf("graph     decode step: %d nodes (%d kernels)\n", gm.decode_graph_nodes,
               gm.decode_graph_kernels);
    else rl_clearerr();
    if (bc->o.profile) {
        print_profile("decode", &bc->pdec, (double)n_decode, &bc->tb, NULL);
        if (bc->dec_ops_txt) fputs(bc->dec_ops_txt, stdout);
        if (n_prompts) {
            char t[64];
            snprintf(t, sizeof t, "prompt of %d tokens", prompts[0]);
            print_profile(t, &bc->ppre, (double)prompts[0], NULL, NULL);
            if (bc->cpu) engine_prof_print(bc->b.e, stdout, t, (double)prompts[0]);
        }
    }
}

static void bench_free(bench_cmd *bc) {
    if (bc->dec_ops) fclose(bc->dec_ops);
    free(bc->dec_ops_txt);
    engine_snapshot_free(bc->snap);
    session_free(bc->b.S);
    session_model_close(bc->b.m);
    free(bc->b.logits);
}

/* The measurements: decode, prompts, the optional profile. 0 or -1 (rl_lasterr). */
static int bench_measure(bench_cmd *bc) {
    bc->b.c = session_ctx(bc->b.S);
    if (bench_decode(bc) || bench_prompts(bc)) return -1;
    if (bc->o.profile && bench_profile(bc)) return -1;
    return 0;
}

int cmd_bench(int argc, char **argv) {
    bench_cmd *bc = calloc(1, sizeof *bc);
    if (!bc) return cli_fail("bench", 1, "out of memory");
    int rc = bench_setup(bc, argc, argv);
    if (rc) {
        bench_free(bc);
        free(bc);
        return rc < 0 ? 0 : rc;
    }
    if (!bc->o.json) bench_print_header(bc);
    if (bench_measure(bc)) {
        rc = cli_fail("bench", 1, "%s", rl_lasterr());
    } else {
        bc->rss = rl_peak_rss();
        /* expert cache / VRAM tier counters on stderr, also with --json (bench/vram_bench.sh parses them) */
        if (bc->o.verbose)
            session_print_cache_stats(bc->b.S, stderr, false); /* weights: in the table above */
        if (bc->o.json) rc = bench_report_json(bc);
        else bench_report_text(bc);
    }
    bench_free(bc);
    free(bc);
    return rc;
}
