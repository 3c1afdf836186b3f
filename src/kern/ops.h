/* ops.h — generic CPU reference ops used by the architecture file's forward pass
 * (qwen3next_forward.c).
 *
 * These are the oracle: straightforward loops, double accumulation for every reduction,
 * float32 storage (the precision of the Hugging Face reference). Faster kernels (SIMD, CUDA)
 * are checked against them and never replace them.
 */
#ifndef RL_OPS_H
#define RL_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include "base/pool.h"
#include "kern/kern.h"
#include "kern/vec.h"

/* ---- the runtime: kernel configuration, profile, shadow check ----------------------------------
 * Everything the CPU ops keep between calls belongs to an ops_rt: the kernel level and its switches
 * (kern_cfg), the vector table (vec.h), the profile (ops_prof_*) and the fast-path shadow check.
 * An engine creates one with its thread pool and attaches it to the pool (ops_rt_attach), so every
 * op run on that pool uses it; two engines in one process keep their own level, profile and
 * counters. Ops on a pool without one run the default configuration (kern_cfg_default, the best
 * level the CPU has) with no profile and no check. */
typedef struct ops_rt ops_rt;
/* kern (NULL: kern_opts_default()); vec_level: the widest vector table (KERN_*), -1: the kernel
 * level's. NULL with rl_lasterr on an invalid option. */
ops_rt *ops_rt_new(const kern_opts *kern, int vec_level);
void ops_rt_free(ops_rt *rt);
/* Attach rt to p (between jobs; rt outlives the pool's use of it). */
void ops_rt_attach(ops_rt *rt, pool *p);
/* The runtime attached to p, or NULL. */
ops_rt *ops_rt_of(const pool *p);
/* rt's kernel configuration: changed only between forwards (tests, bench A/B). */
kern_cfg *ops_rt_kern(ops_rt *rt);
/* What ops on p run: the attached runtime's configuration / vector table, else the defaults. */
const kern_cfg *ops_kern(const pool *p);
const vec_ops *ops_vec(const pool *p);

/* A weight matrix view: n_out rows of n_in values in ggml type `type`, row r at
 * data + r * row_bytes (GGUF ne = {n_in, n_out}). */
/* Longest matrix row (n_in) the kernels take: their row buffers live on the worker's stack.
 * Qwen3-Next's widest is 4096 (the MTP eh_proj, attention output, ssm_out); q3n_load refuses a
 * file whose rows would be longer. */
#define OPS_MAX_ROW 16384

typedef struct {
    const char *name;
    uint32_t type;
    int64_t n_in, n_out;
    size_t row_bytes;
    const uint8_t *data;
} ops_mat;

/* y[t][r] = sum_i W[r][i] * x[t][i] for t < T, r < n_out; x is T x n_in, y is T x n_out.
 * Each weight row is dequantised once and dotted with all T inputs in double precision, so
 * the result of a row does not depend on T (batched prefill == single steps, bit for bit).
 * Rows are split over the pool's threads. */
void ops_matmul_ref(pool *p, const ops_mat *W, const float *x, int T, float *y);

/* Fast path (kern.h): each input row is quantised once to the weight type's activation
 * type (Q8_K / Q8_0 / F32 ...) into `actq` (caller scratch of at least
 * T * kern_act_size(W->type, W->n_in) bytes), then SIMD integer dot products; rows split
 * over the pool's threads in blocks so a block of weights is reused for all T inputs.
 * Differs from the reference only by the activation rounding (see tests/c/test_kern.c). */
void ops_matmul_fast(pool *p, const ops_mat *W, const float *x, int T, float *y, void *actq);
/* Bytes of actq ops_matmul_fast needs for T rows of W. */
size_t ops_actq_bytes(const ops_mat *W, int T);

/* Several independent products in ONE pool dispatch (e.g. the gate and up projections of every
 * selected expert of a layer): the tasks' rows are cut into blocks and the blocks spread over
 * the threads. Each row's arithmetic is exactly that of ops_matmul_ref (fast = false) or
 * ops_matmul_fast (fast = true), so batching never changes a result. In fast mode each task's
 * `actq` must hold ops_actq_bytes(W, T) bytes (quantised here, before the dispatch; tasks with
 * the same x, T and activation format share one quantisation, so only the first of such a run
 * of tasks has its actq written). Threads claim chunks of blocks from a shared counter, so a
 * late or slowed thread computes fewer blocks; the result does not depend on who computes what. */
/* Tasks per dispatch: a layer's gate and up of up to 1024 distinct experts plus the shared
 * expert's (a 512-expert model in a long prefill chunk selects all 512). */
#define OPS_MAX_TASKS 2050

typedef struct {
    const ops_mat *W;
    const float *x; /* T x W->n_in */
    int T;
    float *y;   /* T x W->n_out */
    void *actq; /* fast mode only */
} ops_mm_task;
void ops_matmul_batch(pool *p, const ops_mm_task *tasks, int n_tasks, bool fast);
/* Shadow check of the fast path (tests; redlite dump --check-fast): after every fast product on a pool
 * carrying rt, recompute it from the same quantised activation bytes in double and count elements
 * whose error exceeds 1e-5 + n_in * 6e-8 relative to sum |w a|. Slow; single inference thread only. */
void ops_fast_check_enable(ops_rt *rt, bool on);
void ops_fast_check_report(const ops_rt *rt, long *checked, long *bad, double *worst);

/* Profile of the products and of the pool (bench --profile, prompt ingestion): between begin and
 * end, every ops_matmul_batch on a pool carrying rt is timed by class (its first task's tensor name: DeltaNet
 * projections, experts gate+up, ...), with its activation quantisation, the threads' busy time
 * (pool_prof) and the multiply-adds; end also takes the pool's totals, so the time in other
 * parallel jobs (attention, the delta rule) and the time the calling thread ran alone (norms,
 * conv, routing, gathers: the serial part) are reported too. ops_prof_print writes the table to
 * f, times per `per` (e.g. tokens). Single inference thread only; costs ~0.1 us per product. */
void ops_prof_begin(ops_rt *rt);
void ops_prof_end(ops_rt *rt);
void ops_prof_print(const ops_rt *rt, FILE *f, const char *title, double per);

/* fn(ctx, lo, hi) over [0, n) in contiguous ranges claimed by the pool's threads (~4 per thread);
 * on the calling thread alone when n * cost (rough operations per item) is below ~64K, where a
 * dispatch would cost more than it saves. For loops whose items are independent (rows of a norm,
 * channels of the conv), so the split never changes a result. `label` (a string literal) names
 * the loop in the profile (ops_prof_print). */
typedef void (*ops_range_fn)(void *ctx, long lo, long hi);
void ops_parallel_for(pool *p, long n, long cost, ops_range_fn fn, void *ctx, const char *label);
/* pool_run(p, fn, ctx), timed under `label` while the profile (ops_prof_begin) is on. */
void ops_run(pool *p, pool_fn fn, void *ctx, const char *label);

/* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL for no weight). In place allowed. */
void ops_rmsnorm(const float *x, const float *w, int n, float eps, float *y);
/* x = x / sqrt(sum(x^2) + eps)  (the Hugging Face l2norm of Gated DeltaNet). */
void ops_l2norm(float *x, int n, float eps);
/* NeoX ("rotate half") RoPE on dims [0, n_rot) of a head: pairs (i, i + n_rot/2),
 * theta_i = pos * base^(-2i/n_rot); dims >= n_rot untouched. ops_rope_table fills c[i] = cos theta_i,
 * s[i] = sin theta_i (i < n_rot/2) for pos, once for all the heads of a position (libm's cosf/sinf
 * cost ~1 us a head); ops_rope_apply rotates one head with them. */
void ops_rope_table(int n_rot, int pos, float base, float *c, float *s);
void ops_rope_apply(float *x, int n_rot, const float *c, const float *s);
float ops_silu(float x);
float ops_sigmoid(float x);
float ops_softplus(float x);
/* In-place softmax over n values (max-subtracted, double sum). */
void ops_softmax(float *x, int n);
/* Indices of the k largest values of x[0..n) in descending order (ties: lower index first). */
void ops_topk(const float *x, int n, int k, int32_t *idx);

/* One query head against n_kv cached positions.
 *   q[hd]; K, V: position-major caches, element (pos, j) at pos * stride + j (head offset
 *   already applied); out[hd]. Softmax over q.k * scale in double. */
void ops_attn_head(const float *q, const float *K, const float *V, int n_kv, size_t stride, int hd,
                   float scale, float *out);
/* The same over f32 (f16 false) or IEEE half (f16 true: K, V are uint16_t) cache rows. */
void ops_attn_head_kv(const float *q, const void *K, const void *V, bool f16, int n_kv, size_t stride, int hd,
                      float scale, float *out);

/* Causal depthwise conv1d step for C channels with kernel width kw:
 *   state: (kw-1) x C previous inputs, oldest first; w: C x kw (GGUF ssm_conv1d, ne = {kw, C});
 *   u: the current input (C). out[c] = silu(sum_j w[c][j] * window[j][c]) where window is
 *   state rows then u. The shifted state (oldest dropped, u appended) goes to state_out, which
 *   may be `state` itself (in place) or another buffer (the engine's uncommitted state). */
void ops_conv_step(const float *state, float *state_out, const float *w, const float *u, int C, int kw,
                   float *out);
/* The same for channels [c0, c1) only (out, state_out and u indexed by channel as above): the
 * channels are independent, so threads may run disjoint ranges of one step (prefill). silu false:
 * out[c] is the window sum before the activation (rounded to float), for a caller that applies its
 * own (the fast path's vec_ops.silu_mul). */
void ops_conv_step_range(const float *state, float *state_out, const float *w, const float *u, int C, int kw,
                         int c0, int c1, bool silu, float *out);

/* Gated delta rule, one token, one value head:
 *   S: dv x dk state with the key index contiguous (element (i, v) at v*dk + i);
 *   S <- alpha S; m = S^T k; delta = beta (v - m); S <- S + k delta^T; out = S^T q.
 * Reads S_in, writes the new state to S (S_in == S: in place). */
void ops_delta_step(const float *S_in, float *S, const float *q, const float *k, const float *v, float alpha,
                    float beta, int dk, int dv, float *out);
#endif
