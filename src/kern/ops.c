/* ops.c — see ops.h. Reference implementations: clarity first, double reductions. */
#include "kern/ops.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "kern/kern.h"
#include "kern/vec.h"
#include "gguf/quant.h"

size_t ops_actq_bytes(const ops_mat *W, int T) { return kern_act_size(W->type, W->n_in) * (size_t)T; }

/* One product = a batch of one task: the same blocks, threads and arithmetic. */
void ops_matmul_ref(pool *p, const ops_mat *W, const float *x, int T, float *y) {
    ops_mm_task t = {W, x, T, y, NULL};
    ops_matmul_batch(p, &t, 1, false);
}

void ops_matmul_fast(pool *p, const ops_mat *W, const float *x, int T, float *y, void *actq) {
    ops_mm_task t = {W, x, T, y, actq};
    ops_matmul_batch(p, &t, 1, true);
}

/* ---- shadow check of the fast path (ops_fast_check_enable; redlite dump --check-fast) -------------
 * Every fast product is recomputed from the SAME quantised activation bytes, dequantised, with
 * double accumulation, and compared element by element. Unlike an end-to-end comparison this
 * cannot be thrown off by a rounding flip upstream: both sides see identical inputs. */
typedef struct {
    bool on;
    long checked, bad;
    double worst; /* max |fast - ref| / (sum |w a| + 1e-30) */
} check_state;

static void check_fast(check_state *cs, const ops_mm_task *tasks, const void *const *actq, int n_tasks) {
    float row[OPS_MAX_ROW], act[OPS_MAX_ROW];
    for (int i = 0; i < n_tasks; i++) {
        const ops_mat *W = tasks[i].W;
        const quant_traits *wt = quant_get(W->type), *at = quant_get((uint32_t)kern_act_type(W->type));
        size_t ab = kern_act_size(W->type, W->n_in);
        for (int t = 0; t < tasks[i].T; t++) {
            at->to_float((const uint8_t *)actq[i] + ab * t, act, W->n_in);
            for (int64_t r = 0; r < W->n_out; r++) {
                wt->to_float(W->data + (size_t)r * W->row_bytes, row, W->n_in);
                double s = 0, mag = 0;
                for (int64_t k = 0; k < W->n_in; k++) {
                    s += (double)row[k] * act[k];
                    mag += fabs((double)row[k] * act[k]);
                }
                double err = fabs(tasks[i].y[(size_t)t * W->n_out + r] - s) / (mag + 1e-30);
                cs->checked++;
                /* float epilogues and lane sums: ~n * 2^-24 relative to sum |w a| at worst */
                if (!(err <= 1e-5 + (double)W->n_in * 6e-8)) cs->bad++;
                if (!(err <= cs->worst)) cs->worst = isnan(err) ? INFINITY : err;
            }
        }
    }
}

/* ---- profile (ops_prof_begin/end/print) ------------------------------------------------------- */
enum {
    OC_DN_PROJ,
    OC_DN_OUT,
    OC_ATT_QKV,
    OC_ATT_OUT,
    OC_ROUTER,
    OC_EXP_GU,
    OC_EXP_DOWN,
    OC_SHARED,
    OC_HEAD,
    OC_OTHER,
    OC_N
};
static const char *const oc_names[OC_N] = {
    "deltanet projections",   "deltanet ssm_out", "attention q/k/v",
    "attention output",       "moe router",       "experts gate+up (+shared)",
    "experts down (+shared)", "shared expert",    "output head",
    "other products"};

typedef struct {
    bool on;
    pool *p; /* the pool the products ran on (profiling switched on at its first product) */
    int nth;
    double t0, t1;
    double wall[OC_N], busy[OC_N], busy_max[OC_N], quant[OC_N], macs[OC_N],
        bytes[OC_N]; /* bytes: weights read */
    long calls[OC_N];
    double inline_wall;   /* products and quantisations run on the calling thread alone */
    double pool_mm_wall;  /* pool_run time of products and their quantisation */
    pool_stat pool_total; /* every pool_run while on */
    /* labelled loops and jobs (ops_parallel_for, ops_run): wall, busy, slowest thread; inline: the
     * part that ran on the calling thread alone (below the dispatch threshold) */
    struct {
        const char *label;
        long calls;
        double wall, busy, busy_max, inl, pool_wall;
    } job[24];
    int n_job;
} prof_state;

/* The runtime (ops.h): one per engine, riding on its pool (pool_owner). */
struct ops_rt {
    kern_cfg kern;
    const vec_ops *vec;
    check_state check;
    prof_state prof;
};

ops_rt *ops_rt_new(const kern_opts *kern, int vec_level) {
    ops_rt *rt = rl_calloc(1, sizeof *rt, "ops runtime");
    if (!rt) return NULL;
    if (kern_cfg_init(&rt->kern, kern)) {
        free(rt);
        return NULL;
    }
    rt->vec = vec_for_level(vec_level >= 0 ? vec_level : rt->kern.level);
    return rt;
}

void ops_rt_free(ops_rt *rt) { free(rt); }
void ops_rt_attach(ops_rt *rt, pool *p) { pool_set_owner(p, rt); }
ops_rt *ops_rt_of(const pool *p) { return pool_owner(p); }
kern_cfg *ops_rt_kern(ops_rt *rt) { return &rt->kern; }

const kern_cfg *ops_kern(const pool *p) {
    const ops_rt *rt = pool_owner(p);
    return rt ? &rt->kern : kern_cfg_default();
}

const vec_ops *ops_vec(const pool *p) {
    const ops_rt *rt = pool_owner(p);
    return rt ? rt->vec : vec_for_level(kern_cfg_default()->level);
}

void ops_fast_check_enable(ops_rt *rt, bool on) { rt->check.on = on; }

void ops_fast_check_report(const ops_rt *rt, long *checked, long *bad, double *worst) {
    *checked = rt->check.checked;
    *bad = rt->check.bad;
    *worst = rt->check.worst;
}

/* The profile of the runtime riding on p while it is on, else NULL. */
static prof_state *prof_of(pool *p) {
    ops_rt *rt = pool_owner(p);
    return rt && rt->prof.on ? &rt->prof : NULL;
}

/* The first profiled call on a pool switches the pool's own profiling on (the engine owns the pool). */
static void prof_attach(prof_state *g, pool *p) {
    if (g && !g->p && p) {
        g->p = p;
        g->nth = pool_size(p);
        pool_prof(p, 1);
    }
}

static void prof_job(prof_state *g, const char *label, pool *p, double t0, bool dispatched) {
    const double dt = rl_now() - t0;
    int k = 0;
    while (k < g->n_job && strcmp(g->job[k].label, label)) k++;
    if (k == g->n_job) {
        if (k == (int)(sizeof g->job / sizeof g->job[0])) return;
        g->job[g->n_job++].label = label;
    }
    g->job[k].calls++;
    g->job[k].wall += dt;
    if (dispatched) {
        const pool_stat st = pool_prof_last(p);
        g->job[k].busy += st.busy;
        g->job[k].busy_max += st.busy_max;
        g->job[k].pool_wall += dt;
    } else {
        g->job[k].busy += dt;
        g->job[k].busy_max += dt;
        g->job[k].inl += dt;
    }
}

static int op_class(const char *name) {
    if (!name) return OC_OTHER;
    if (strstr(name, "_exps")) return strstr(name, "down") ? OC_EXP_DOWN : OC_EXP_GU;
    if (strstr(name, "shexp")) return OC_SHARED;
    if (strstr(name, "ssm_out")) return OC_DN_OUT;
    if (strstr(name, "ssm_in") || strstr(name, "attn_qkv") || strstr(name, "attn_gate") ||
        strstr(name, "ssm_ba"))
        return OC_DN_PROJ;
    if (strstr(name, "attn_output")) return OC_ATT_OUT;
    if (strstr(name, "attn_q.") || strstr(name, "attn_k.") || strstr(name, "attn_v.")) return OC_ATT_QKV;
    if (strstr(name, "ffn_gate_inp")) return OC_ROUTER;
    if (!strncmp(name, "output", 6)) return OC_HEAD;
    return OC_OTHER;
}

void ops_prof_begin(ops_rt *rt) {
    prof_state *g = &rt->prof;
    memset(g, 0, sizeof *g);
    g->on = true;
    g->t0 = rl_now();
}

void ops_prof_end(ops_rt *rt) {
    prof_state *g = &rt->prof;
    g->t1 = rl_now();
    g->on = false;
    if (g->p) {
        g->pool_total = pool_prof_total(g->p);
        pool_prof(g->p, 0);
    }
}

void ops_prof_print(const ops_rt *rt, FILE *f, const char *title, double per) {
    const prof_state *g = &rt->prof;
    const double tot = g->t1 - g->t0, k = 1e3 / per;
    const int nth = g->nth ? g->nth : 1;
    fprintf(f, "\nprofile: %s, products and threads (%d threads, %.3f ms per token)\n", title, nth, tot * k);
    fprintf(f, "  %-26s %6s %9s %6s %8s %7s %9s %9s %8s %7s\n", "stage", "calls", "ms/token", "%", "GMAC/s",
            "busy%", "imbal ms", "dispat ms", "quant ms", "GB/s");
    double mm = 0;
    for (int c = 0; c < OC_N; c++) {
        if (!g->calls[c]) continue;
        const double w = g->wall[c] + g->quant[c];
        mm += w;
        fprintf(f, "  %-26s %6ld %9.3f %5.1f%% %8.1f %6.1f%% %9.3f %9.3f %8.3f %7.1f\n", oc_names[c],
                g->calls[c], w * k, 100 * w / tot, g->macs[c] / (g->wall[c] > 0 ? g->wall[c] : 1) / 1e9,
                g->wall[c] > 0 ? 100 * g->busy[c] / (nth * g->wall[c]) : 0,
                (g->busy_max[c] - g->busy[c] / nth) * k, (g->wall[c] - g->busy_max[c]) * k, g->quant[c] * k,
                g->bytes[c] / (w > 0 ? w : 1) / 1e9);
    }
    const pool_stat *pt = &g->pool_total;
    double other = pt->wall - g->pool_mm_wall, inl = 0, labelled = 0;
    if (other < 0) other = 0;
    for (int j = 0; j < g->n_job; j++) {
        const double w = g->job[j].wall;
        inl += g->job[j].inl;
        labelled += g->job[j].pool_wall;
        fprintf(f,
                "  %-26s %6ld %9.3f %5.1f%% %8s %6.1f%% %9.3f %9.3f   (on the calling thread alone: %.3f)\n",
                g->job[j].label, g->job[j].calls, w * k, 100 * w / tot, "",
                w > 0 ? 100 * g->job[j].busy / (nth * w) : 0, (g->job[j].busy_max - g->job[j].busy / nth) * k,
                (w - g->job[j].busy_max) * k, g->job[j].inl * k);
    }
    const double unl = other - labelled > 0 ? other - labelled : 0;
    double serial = tot - mm - other - inl;
    fprintf(f, "  %-26s %6s %9.3f %5.1f%%\n", "products, all", "", mm * k, 100 * mm / tot);
    fprintf(f, "  %-26s %6ld %9.3f %5.1f%%          (all pool jobs: %.1f%% of thread time busy)\n",
            "other parallel jobs", pt->jobs, other * k, 100 * other / tot,
            pt->wall > 0 ? 100 * pt->busy / (nth * pt->wall) : 0);
    fprintf(f, "  %-26s %6s %9.3f %5.1f%%\n", "  of which unlabelled", "", unl * k, 100 * unl / tot);
    fprintf(f, "  %-26s %6s %9.3f %5.1f%%          (the calling thread alone, outside the rows above)\n",
            "serial", "", serial * k, 100 * serial / tot);
}

typedef struct {
    const ops_mm_task *tasks;
    int n_tasks;
    const void *const *actq; /* per task: its quantised activations (shared between tasks with
                                the same input) */
    bool fast;
    const kern_cfg *kern;   /* the runtime's kernel configuration */
    const long *first_unit; /* prefix sums of claim units per task, n_tasks + 1 entries */
    const long *unit_blk;   /* blocks per claim unit of each task (the last unit may be shorter) */
    atomic_long next;       /* next unclaimed unit */
} batch_job;

#define BATCH_BLOCK 16

/* Threads claim units of blocks from a shared counter instead of fixed ranges: a worker that
 * wakes late, or shares its core with a busy sibling, simply computes fewer blocks. A unit lies in
 * one task and holds about the same number of multiply-adds as any other (a block of a task with T
 * activation rows costs T times a block of a one-row task): with units counted in blocks, the 64
 * blocks of a prompt's shared expert (T = 512) fell into one claim and one thread computed them
 * while fifteen waited (the 16-thread prompt profile: experts 49 % busy). Every block writes only
 * its own outputs, so which thread computes it never changes a result. */
static void batch_worker(void *arg, int ith, int nth) {
    batch_job *j = arg;
    (void)ith, (void)nth;
    const long total = j->first_unit[j->n_tasks];
    int ti = 0;
    float row[OPS_MAX_ROW];
    for (;;) {
        const long u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= total) break;
        while (u >= j->first_unit[ti + 1]) ti++; /* a thread's claims only grow */
        {
            const ops_mm_task *tk = &j->tasks[ti];
            const ops_mat *W = tk->W;
            const long b0 = (u - j->first_unit[ti]) * j->unit_blk[ti];
            int64_t r0 = b0 * BATCH_BLOCK, r1 = (b0 + j->unit_blk[ti]) * BATCH_BLOCK;
            if (r1 > W->n_out) r1 = W->n_out;
            if (j->fast) {
                /* all T activation rows against these weight rows: kern_matmul decodes each weight
                 * block once for several rows, bit-identical to kern_matvec per row */
                kern_matmul(j->kern, W->type, W->data + (size_t)r0 * W->row_bytes, r1 - r0, W->n_in,
                            j->actq[ti], tk->T, tk->y + r0, W->n_out);
            } else {
                const quant_traits *qt = quant_get(W->type);
                for (int64_t r = r0; r < r1; r++) {
                    qt->to_float(W->data + (size_t)r * W->row_bytes, row, W->n_in);
                    for (int t = 0; t < tk->T; t++) {
                        const float *x = tk->x + (size_t)t * W->n_in;
                        double s = 0;
                        for (int64_t i = 0; i < W->n_in; i++) s += (double)row[i] * (double)x[i];
                        tk->y[(size_t)t * W->n_out + r] = (float)s;
                    }
                }
            }
        }
    }
}

/* Activation quantisation of the tasks that own their buffer (the first task of each distinct
 * input; the others share it), rows split over the threads (prefill and verify quantise hundreds of rows per
 * product). */
typedef struct {
    const ops_mm_task *tasks;
    const int *owners;
    int n_owners;
    const kern_cfg *kern;
} quant_job;

static void quant_worker(void *arg, int ith, int nth) {
    quant_job *q = arg;
    long rows = 0;
    for (int k = 0; k < q->n_owners; k++) rows += q->tasks[q->owners[k]].T;
    long lo, hi, base = 0;
    pool_range(rows, ith, nth, &lo, &hi);
    for (int k = 0; k < q->n_owners; k++) {
        const ops_mm_task *tk = &q->tasks[q->owners[k]];
        const ops_mat *W = tk->W;
        size_t ab = kern_act_size(W->type, W->n_in);
        for (int t = 0; t < tk->T; t++, base++)
            if (base >= lo && base < hi)
                kern_quantize_act(q->kern, W->type, tk->x + (size_t)t * W->n_in, W->n_in,
                                  (uint8_t *)tk->actq + ab * t);
    }
}

void ops_matmul_batch(pool *p, const ops_mm_task *tasks, int n_tasks, bool fast) {
    const void *actq[OPS_MAX_TASKS];
    int owners[OPS_MAX_TASKS], n_owners = 0;
    RL_ASSERT(n_tasks <= OPS_MAX_TASKS); /* n_expert <= Q3N_MAX_EXPERTS, checked at open */
    int64_t work = 0, qvals = 0;
    for (int i = 0; i < n_tasks; i++) {
        const ops_mat *W = tasks[i].W;
        RL_ASSERT(W->n_in <= OPS_MAX_ROW && quant_get(W->type)); /* checked when the model is opened */
        work += W->n_out * W->n_in * tasks[i].T;
        actq[i] = tasks[i].actq;
        if (fast) {
            RL_ASSERT(kern_act_size(W->type, W->n_in) > 0 && tasks[i].actq);
            /* tasks reading the same input in the same activation format share one quantisation
             * (an MoE layer's gate and up products, the DeltaNet projections); sharers are adjacent, so
             * only the last few owners are compared */
            int share = -1;
            for (int k = n_owners - 1; k >= 0 && k >= n_owners - 4 && share < 0; k--) {
                const ops_mm_task *o = &tasks[owners[k]];
                if (o->x == tasks[i].x && o->T == tasks[i].T && o->W->n_in == W->n_in &&
                    kern_act_type(o->W->type) == kern_act_type(W->type))
                    share = owners[k];
            }
            if (share >= 0) {
                actq[i] = tasks[share].actq;
            } else {
                owners[n_owners++] = i;
                qvals += tasks[i].T * W->n_in;
            }
        }
    }
    ops_rt *rt = pool_owner(p);
    const kern_cfg *kc = rt ? &rt->kern : kern_cfg_default();
    prof_state *g = prof_of(p);
    const int pc = g ? op_class(tasks[0].W->name) : 0;
    double pt0 = 0;
    if (g) {
        prof_attach(g, p);
        pt0 = rl_now();
    }
    if (fast) {
        quant_job q = {tasks, owners, n_owners, kc};
        /* a dispatch costs more than quantising a few thousand values (the tiny models' 16 expert
         * rows of 256 at a 4-row verify paid one per product: 4 rows cost 0.7 steps more than 3) */
        if (qvals >= 65536) pool_run(p, quant_worker, &q);
        else quant_worker(&q, 0, 1);
    }
    double pt1 = 0;
    if (g) {
        pt1 = rl_now();
        g->quant[pc] += pt1 - pt0;
        if (qvals >= 65536) g->pool_mm_wall += pt1 - pt0;
        else g->inline_wall += pt1 - pt0;
    }
    /* claim units of ~1/8 of a thread's share of the multiply-adds each (see batch_worker) */
    const int nth = pool_size(p) > 0 ? pool_size(p) : 1;
    long first_unit[OPS_MAX_TASKS + 1], unit_blk[OPS_MAX_TASKS];
    const double target = (double)work / (8.0 * nth);
    first_unit[0] = 0;
    for (int i = 0; i < n_tasks; i++) {
        const long nb = (long)((tasks[i].W->n_out + BATCH_BLOCK - 1) / BATCH_BLOCK);
        const double wblk =
            (double)BATCH_BLOCK * (double)tasks[i].W->n_in * (double)(tasks[i].T > 0 ? tasks[i].T : 1);
        long c = (long)(target / wblk);
        if (c < 1) c = 1;
        if (c > nb) c = nb > 0 ? nb : 1;
        unit_blk[i] = c;
        first_unit[i + 1] = first_unit[i] + (nb + c - 1) / c;
    }
    batch_job j = {tasks, n_tasks, actq, fast, kc, first_unit, unit_blk, 0};
    if (work < 32768) batch_worker(&j, 0, 1);
    else pool_run(p, batch_worker, &j);
    if (g) {
        const double dt = rl_now() - pt1;
        g->calls[pc]++;
        g->wall[pc] += dt;
        g->macs[pc] += (double)work;
        for (int i = 0; i < n_tasks; i++)
            g->bytes[pc] += (double)tasks[i].W->row_bytes * (double)tasks[i].W->n_out;
        if (work < 32768 || !p) {
            g->busy[pc] += dt; /* one thread busy, the others idle */
            g->busy_max[pc] += dt;
            g->inline_wall += dt;
        } else {
            const pool_stat st = pool_prof_last(p);
            g->busy[pc] += st.busy;
            g->busy_max[pc] += st.busy_max;
            g->pool_mm_wall += dt;
        }
    }
    if (fast && rt && rt->check.on) check_fast(&rt->check, tasks, actq, n_tasks);
}

/* Threads claim chunks of ~1/4 of a thread's share from a shared counter (as the products' blocks):
 * with fixed ranges, one worker that woke late or lost its core to another process held up the whole
 * loop (16-thread decode on the shared H200 host: the expert sum's dispatch 0.7 ms a token under load). */
typedef struct {
    long n, chunk;
    ops_range_fn fn;
    void *ctx;
    atomic_long next; /* next unclaimed chunk */
} pfor_job;

static void pfor_worker(void *arg, int ith, int nth) {
    pfor_job *j = arg;
    (void)ith, (void)nth;
    for (;;) {
        const long lo = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed) * j->chunk;
        if (lo >= j->n) break;
        j->fn(j->ctx, lo, lo + j->chunk < j->n ? lo + j->chunk : j->n);
    }
}

void ops_parallel_for(pool *p, long n, long cost, ops_range_fn fn, void *ctx, const char *label) {
    if (n <= 0) return;
    prof_state *g = prof_of(p);
    prof_attach(g, p);
    const double t0 = g ? rl_now() : 0;
    const bool inl = !p || pool_size(p) == 1 || n < 2 || (double)n * (double)cost < 65536.0;
    if (inl) {
        fn(ctx, 0, n);
    } else {
        const long per = 4L * pool_size(p);
        pfor_job j = {n, (n + per - 1) / per, fn, ctx, 0};
        pool_run(p, pfor_worker, &j);
    }
    if (g && label) prof_job(g, label, p, t0, !inl && p == g->p);
}

void ops_run(pool *p, pool_fn fn, void *ctx, const char *label) {
    prof_state *g = prof_of(p);
    prof_attach(g, p);
    const double t0 = g ? rl_now() : 0;
    pool_run(p, fn, ctx);
    if (g && label) prof_job(g, label, p, t0, p && p == g->p);
}

void ops_rmsnorm(const float *x, const float *w, int n, float eps, float *y) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

void ops_l2norm(float *x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss + eps));
    for (int i = 0; i < n; i++) x[i] *= scale;
}

void ops_rope_table(int n_rot, int pos, float base, float *c, float *s) {
    for (int i = 0; i < n_rot / 2; i++) {
        /* inv_freq in float32 as the reference computes it: base^(-(2i)/n_rot) */
        float inv_freq = (float)(1.0 / pow((double)base, (double)(2 * i) / (double)n_rot));
        float theta = (float)pos * inv_freq;
        c[i] = cosf(theta), s[i] = sinf(theta);
    }
}

void ops_rope_apply(float *x, int n_rot, const float *c, const float *s) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
    }
}

float ops_silu(float x) { return x / (1.0f + expf(-x)); }
float ops_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float ops_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void ops_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        s += x[i];
    }
    float inv = (float)(1.0 / s);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void ops_topk(const float *x, int n, int k, int32_t *idx) {
    for (int j = 0; j < k; j++) idx[j] = -1;
    for (int i = 0; i < n; i++) {
        /* insertion into the sorted top list; strict > keeps the lower index on ties */
        int pos = k;
        while (pos > 0 && (idx[pos - 1] < 0 || x[i] > x[idx[pos - 1]])) pos--;
        if (pos >= k) continue;
        for (int j = k - 1; j > pos; j--) idx[j] = idx[j - 1];
        idx[pos] = i;
    }
}

void ops_attn_head(const float *q, const float *K, const float *V, int n_kv, size_t stride, int hd,
                   float scale, float *out) {
    ops_attn_head_kv(q, K, V, false, n_kv, stride, hd, scale, out);
}

static inline double kv_at(const void *X, bool f16, size_t i) {
    return f16 ? (double)rl_fp16_to_fp32(((const uint16_t *)X)[i]) : (double)((const float *)X)[i];
}

void ops_attn_head_kv(const float *q, const void *K, const void *V, bool f16, int n_kv, size_t stride, int hd,
                      float scale, float *out) {
    /* two passes: max score, then exp-weighted sum (double) */
    double mx = -INFINITY;
    for (int p = 0; p < n_kv; p++) {
        double s = 0;
        for (int j = 0; j < hd; j++) s += (double)q[j] * kv_at(K, f16, (size_t)p * stride + j);
        s *= scale;
        if (s > mx) mx = s;
    }
    double acc[1024];
    RL_ASSERT(hd <= 1024); /* head_dim <= Q3N_MAX_HEAD_DIM, checked at open */
    for (int j = 0; j < hd; j++) acc[j] = 0;
    double den = 0;
    for (int p = 0; p < n_kv; p++) {
        double s = 0;
        for (int j = 0; j < hd; j++) s += (double)q[j] * kv_at(K, f16, (size_t)p * stride + j);
        double e = exp(s * scale - mx);
        den += e;
        for (int j = 0; j < hd; j++) acc[j] += e * kv_at(V, f16, (size_t)p * stride + j);
    }
    for (int j = 0; j < hd; j++) out[j] = (float)(acc[j] / den);
}

void ops_conv_step(const float *state, float *state_out, const float *w, const float *u, int C, int kw,
                   float *out) {
    ops_conv_step_range(state, state_out, w, u, C, kw, 0, C, true, out);
}

void ops_conv_step_range(const float *state, float *state_out, const float *w, const float *u, int C, int kw,
                         int c0, int c1, bool silu, float *out) {
    for (int c = c0; c < c1; c++) {
        double s = 0;
        for (int j = 0; j < kw - 1; j++) s += (double)w[(size_t)c * kw + j] * state[(size_t)j * C + c];
        s += (double)w[(size_t)c * kw + kw - 1] * u[c];
        out[c] = silu ? ops_silu((float)s) : (float)s;
    }
    /* shift the window by one input: row j <- row j + 1 (in increasing j, so in place is safe) */
    for (int j = 0; j + 1 < kw - 1; j++)
        memmove(state_out + (size_t)j * C + c0, state + (size_t)(j + 1) * C + c0,
                sizeof(float) * (size_t)(c1 - c0));
    if (kw > 1) memcpy(state_out + (size_t)C * (kw - 2) + c0, u + c0, sizeof(float) * (size_t)(c1 - c0));
}

void ops_delta_step(const float *S_in, float *S, const float *q, const float *k, const float *v, float alpha,
                    float beta, int dk, int dv, float *out) {
    for (int c = 0; c < dv; c++) {
        const float *si = S_in + (size_t)c * dk;
        float *s = S + (size_t)c * dk;
        double m = 0;
        for (int i = 0; i < dk; i++) {
            s[i] = si[i] * alpha;
            m += (double)s[i] * k[i];
        }
        float delta = beta * (v[c] - (float)m);
        double o = 0;
        for (int i = 0; i < dk; i++) {
            s[i] += k[i] * delta;
            o += (double)s[i] * q[i];
        }
        out[c] = (float)o;
    }
}
