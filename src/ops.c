/* ops.c — see ops.h. Reference implementations: clarity first, double reductions. */
#include "ops.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kern.h"
#include "quant.h"


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
static struct {
    bool on;
    long checked, bad;
    double worst; /* max |fast - ref| / (sum |w a| + 1e-30) */
} g_check;

void ops_fast_check_enable(bool on) { g_check.on = on; }

void ops_fast_check_report(long *checked, long *bad, double *worst) {
    *checked = g_check.checked;
    *bad = g_check.bad;
    *worst = g_check.worst;
}

static void check_fast(const ops_mm_task *tasks, const void *const *actq, int n_tasks) {
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
                g_check.checked++;
                /* float epilogues and lane sums: ~n * 2^-24 relative to sum |w a| at worst */
                if (!(err <= 1e-5 + (double)W->n_in * 6e-8)) g_check.bad++;
                if (!(err <= g_check.worst)) g_check.worst = isnan(err) ? INFINITY : err;
            }
        }
    }
}

typedef struct {
    const ops_mm_task *tasks;
    int n_tasks;
    const long *first_blk; /* prefix sums of blocks per task, n_tasks + 1 entries */
    const void *const *actq; /* per task: its quantised activations (shared between tasks with
                                the same input) */
    bool fast;
    long chunk;          /* blocks per claim */
    atomic_long next;    /* next unclaimed block */
} batch_job;

#define BATCH_BLOCK 16

/* Threads claim chunks of blocks from a shared counter instead of fixed ranges: a worker that
 * wakes late, or shares its core with a busy sibling, simply computes fewer blocks. Every block
 * writes only its own outputs, so which thread computes it never changes a result. */
static void batch_worker(void *arg, int ith, int nth) {
    batch_job *j = arg;
    (void)ith, (void)nth;
    const long total = j->first_blk[j->n_tasks];
    int ti = 0;
    float row[OPS_MAX_ROW];
    for (;;) {
        long lo = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (lo >= total) break;
        long hi = lo + j->chunk < total ? lo + j->chunk : total;
        /* the claimed blocks, one call per task they cover */
        for (long b = lo; b < hi;) {
            while (b >= j->first_blk[ti + 1]) ti++;
            const long b1 = hi < j->first_blk[ti + 1] ? hi : j->first_blk[ti + 1];
            const ops_mm_task *tk = &j->tasks[ti];
            const ops_mat *W = tk->W;
            int64_t r0 = (b - j->first_blk[ti]) * BATCH_BLOCK, r1 = (b1 - j->first_blk[ti]) * BATCH_BLOCK;
            if (r1 > W->n_out) r1 = W->n_out;
            b = b1;
            if (j->fast) {
                /* all T activation rows against these weight rows: kern_matmul decodes each weight
                 * block once for several rows, bit-identical to kern_matvec per row */
                kern_matmul(W->type, W->data + (size_t)r0 * W->row_bytes, r1 - r0, W->n_in, j->actq[ti], tk->T,
                            tk->y + r0, W->n_out);
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
 * input; the others share it), rows split over the threads (prefill and verify quantise hundreds of rows per product). */
typedef struct {
    const ops_mm_task *tasks;
    const int *owners;
    int n_owners;
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
                kern_quantize_act(W->type, tk->x + (size_t)t * W->n_in, W->n_in, (uint8_t *)tk->actq + ab * t);
    }
}

void ops_matmul_batch(pool *p, const ops_mm_task *tasks, int n_tasks, bool fast) {
    long first[OPS_MAX_TASKS + 1];
    const void *actq[OPS_MAX_TASKS];
    int owners[OPS_MAX_TASKS], n_owners = 0;
    RL_ASSERT(n_tasks <= OPS_MAX_TASKS); /* n_expert <= Q3N_MAX_EXPERTS, checked at open */
    first[0] = 0;
    int64_t work = 0, qvals = 0;
    for (int i = 0; i < n_tasks; i++) {
        const ops_mat *W = tasks[i].W;
        RL_ASSERT(W->n_in <= OPS_MAX_ROW && quant_get(W->type)); /* checked when the model is opened */
        first[i + 1] = first[i] + (long)((W->n_out + BATCH_BLOCK - 1) / BATCH_BLOCK);
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
    if (fast) {
        quant_job q = {tasks, owners, n_owners};
        /* a dispatch costs more than quantising a few thousand values (the tiny models' 16 expert
         * rows of 256 at a 4-row verify paid one per product: 4 rows cost 0.7 steps more than 3) */
        if (qvals >= 65536)
            pool_run(p, quant_worker, &q);
        else
            quant_worker(&q, 0, 1);
    }
    int nth = pool_size(p);
    batch_job j = {tasks, n_tasks, first, actq, fast, 1, 0};
    j.chunk = first[n_tasks] / (8L * nth);
    if (j.chunk < 1) j.chunk = 1;
    if (work < 32768)
        batch_worker(&j, 0, 1);
    else
        pool_run(p, batch_worker, &j);
    if (fast && g_check.on) check_fast(tasks, actq, n_tasks);
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

void ops_rope_neox(float *x, int n_rot, int pos, float base) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        /* inv_freq in float32 as the reference computes it: base^(-(2i)/n_rot) */
        float inv_freq = (float)(1.0 / pow((double)base, (double)(2 * i) / (double)n_rot));
        float theta = (float)pos * inv_freq;
        float c = cosf(theta), s = sinf(theta);
        float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
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

void ops_conv_step(const float *state, float *state_out, const float *w, const float *u, int C, int kw, float *out) {
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int j = 0; j < kw - 1; j++) s += (double)w[(size_t)c * kw + j] * state[(size_t)j * C + c];
        s += (double)w[(size_t)c * kw + kw - 1] * u[c];
        out[c] = ops_silu((float)s);
    }
    if (kw > 1) {
        memmove(state_out, state + C, sizeof(float) * (size_t)C * (kw - 2));
        memcpy(state_out + (size_t)C * (kw - 2), u, sizeof(float) * C);
    }
}

void ops_delta_step(const float *S_in, float *S, const float *q, const float *k, const float *v, float alpha, float beta,
                    int dk, int dv, float *out) {
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
