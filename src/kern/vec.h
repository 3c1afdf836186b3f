/* vec.h — float32 vector primitives for the fast CPU path (DeltaNet state update, attention),
 * with a portable table, an AVX2+FMA and an AVX-512F one picked at run time by the kernel level of
 * the engine's ops runtime (ops_vec: a level of scalar takes the portable one, avx2 the AVX2 one;
 * the tuning switch RL_VEC the same for this table alone). Float accumulation in 8 (or 16) lanes: results
 * differ from the double-precision reference ops (ops.h) only by rounding; tests/c/test_vec.c bounds it. */
#ifndef RL_VEC_H
#define RL_VEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    float (*dot)(const float *a, const float *b, int n);
    /* y += a * x */
    void (*axpy)(float *y, float a, const float *x, int n);
    /* one token of the gated delta rule for one value head (see ops_delta_step: reads S_in,
     * writes S, which may be S_in) */
    void (*delta_step)(const float *S_in, float *S, const float *q, const float *k, const float *v,
                       float alpha, float beta, int dk, int dv, float *out);
    /* the same, bit for bit, for a state that is in cache (the rows after the first of a prefill:
     * each reads the state the row before wrote); faster there, slower on a state read from memory */
    void (*delta_step_hot)(const float *S_in, float *S, const float *q, const float *k, const float *v,
                           float alpha, float beta, int dk, int dv, float *out);
    /* the same two with the second operand an IEEE half row (an f16 KV cache): the halves are
     * widened exactly (F16C on AVX2), then the arithmetic is that of dot / axpy, so
     * dot_f16(a, h) == dot(a, widen(h)) bit for bit within one table (tests/c/test_vec.c) */
    float (*dot_f16)(const float *a, const uint16_t *b, int n);
    void (*axpy_f16)(float *y, float a, const uint16_t *x, int n);
    /* The two halves of an attention block over nb cached rows (K, V: f32 rows, or f16 halves when
     * f16; row p at p*stride elements), for G query heads; defined as loops over this table's own
     * dot/axpy (or their f16 twins) and equal to those loops bit for bit (tests/c/test_vec.c):
     *   attn_scores: e[g*es + p] = dot(q + g*qstride, K_p, hd) * scale       (g < G, p < nb)
     *   attn_mix:    for p in order, for g: axpy(out + g*ostride, e[g*es + p], V_p, hd)
     * The fast versions tile heads x rows so each K / V row is loaded (and widened) once for
     * several heads and the outputs stay in registers across rows; a score's lanes, chains and
     * reduction are dot's, an output element's updates axpy's in row order, whatever the tile. */
    void (*attn_scores)(const float *q, size_t qstride, int G, const void *K, bool f16, size_t stride, int nb,
                        int hd, float scale, float *e, int es);
    void (*attn_mix)(float *out, size_t ostride, int G, const float *e, int es, const void *V, bool f16,
                     size_t stride, int nb, int hd);
    /* The online-softmax step of one head over a block's nb scores e (nb >= 1), with its running max
     * *m, sum *l and unnormalised output o[hd]: bm = max of e; if bm > *m, o and *l are scaled by
     * expf(*m - bm) and *m = bm; then e[p] = exp(e[p] - *m) and *l += e[p] in position order. The
     * portable table is that loop with libm expf; the SIMD ones take exp in lanes (exp8 of the gates,
     * an element's value independent of its position), the max and the sum as the loop does. */
    void (*attn_softmax)(float *e, int nb, float *m, float *l, float *o, int hd);
    /* Gates of the fast path. silu_mul: y[i] = silu(g[i]) * u[i] (u NULL: y[i] = silu(g[i])), with
     * silu(x) = x / (1 + exp(-x)); sigmoid_mul: y[i] *= 1 / (1 + exp(-g[i])). y may be g or u. The
     * portable table is ops_silu / ops_sigmoid's expression (libm expf); the SIMD tables evaluate
     * exp in 8 lanes (Cody-Waite reduction, degree-6 Taylor, ~2 ulp; tests/c/test_vec.c bounds it)
     * and put a tail through the same lanes padded, so an element's result does not depend on its
     * position or on n: a row's gates are the same bits in a prefill chunk and in a decode step. */
    void (*silu_mul)(float *y, const float *g, const float *u, int n);
    void (*sigmoid_mul)(float *y, const float *g, int n);
    /* acc[i] += w * (double)x[i]: a double product then a double sum, each rounded once (no FMA), so
     * every table gives the portable loop's bits — the reference path's MoE combine uses it too */
    void (*axpy_d)(double *acc, double w, const float *x, int n);
} vec_ops;

/* The best implementation this CPU runs at kernel level `level` (kern.h KERN_*: scalar -> the
 * portable table, avx2 -> AVX2, avx512 -> AVX-512; each falling back to what the CPU has). */
const vec_ops *vec_for_level(int level);
/* vec_for_level(KERN_AVX512): the best this CPU runs (tests). */
const vec_ops *vec_get(void);
/* The portable implementation (tests compare against it). */
const vec_ops *vec_portable(void);
/* NULL if the CPU lacks AVX2+FMA. */
const vec_ops *vec_avx2(void);
/* NULL if the CPU lacks AVX-512F (or AVX2+FMA+F16C): 16-lane dot/axpy and attention blocks (a
 * rounding-level different arithmetic from the AVX2 table's; the delta rule and the gates are AVX2's). The
 * default where present; the avx2 level keeps the AVX2 table, scalar the portable one. */
const vec_ops *vec_avx512(void);

/* Decode attention with float math and an online softmax (fast path twin of ops_attn_head), for
 * G query heads that share one KV head (grouped-query attention; G = 1 for a single head): head
 * g's query at q + g*qstride, its output at out + g*ostride (G <= VEC_ATTN_MAX_G). Positions go in
 * blocks of VEC_ATTN_BLOCK: all G x B scores first (independent dot products, each K row read once
 * for the G heads), one max/rescale per block, then each V row read once for the G outputs. A
 * head's result does not depend on G. */
#define VEC_ATTN_MAX_G 16
#define VEC_ATTN_BLOCK 128
/* Positions per chunk (a multiple of VEC_ATTN_BLOCK). A row attending to n positions has the chunks
 * [c*C, min((c+1)*C, n)); each chunk's online softmax starts afresh (vec_attn_chunk_kv) and the
 * chunks are folded in order, the first as it is and each later one by vec_attn_merge, then
 * normalised (vec_attn_normalize). Every function below computes a row that way, so a decode step may
 * spread one row's chunks over threads and fold them after: the same bits as a prefill's rows (the
 * exactness contract). Rows of at most C positions are one chunk: no merge. */
#define VEC_ATTN_CHUNK 256
void vec_attn_group(const vec_ops *v, const float *q, size_t qstride, int G, const float *K, const float *V,
                    int n_kv, size_t stride, int hd, float scale, float *out, size_t ostride);
/* The same over a KV cache of f32 rows (f16 false: K, V are float) or f16 rows (K, V are
 * uint16_t halves; stride and offsets count elements). An f16 cache gives exactly the result
 * of an f32 cache holding the widened halves. */
void vec_attn_group_kv(const vec_ops *v, const float *q, size_t qstride, int G, const void *K, const void *V,
                       bool f16, int n_kv, size_t stride, int hd, float scale, float *out, size_t ostride);
/* Prefill: R consecutive query rows at once, row r (r < R) with its G heads at q + r*qrow (+ g*qstride)
 * attending to n_kv0 + r positions, its outputs at out + r*orow (+ g*ostride). Each K and V row is
 * read once for all R x G heads where the rows share a block, so long prompts move R times fewer
 * cache bytes; every row's result is that of vec_attn_group_kv on it alone, bit for bit (the same
 * blocks, scores, softmax steps and per-output update order; tests/c/test_vec.c). R * G <=
 * VEC_ATTN_MAX_RG and hd <= VEC_ATTN_ROWS_HD, else the rows go one at a time. */
/* One chunk: positions p0..p1-1 (p0 a multiple of VEC_ATTN_CHUNK, p1 - p0 <= it) for G heads from
 * scratch: unnormalised outputs at o + g*ostride, running max m[g] and sum l[g]. */
void vec_attn_chunk_kv(const vec_ops *v, const float *q, size_t qstride, int G, const void *K, const void *V,
                       bool f16, int p0, int p1, size_t stride, int hd, float scale, float *o, size_t ostride,
                       float *m, float *l);
/* Fold the next chunk (o2, m2, l2) into the running one (o, m, l), for G heads: M = max(m, m2), then
 * o = o*expf(m - M) + o2*expf(m2 - M) element by element (no fused multiply-add), l likewise, m = M. */
void vec_attn_merge(int G, int hd, float *o, size_t ostride, float *m, float *l, const float *o2,
                    size_t o2stride, const float *m2, const float *l2);
/* out[g][j] = o[g][j] * (1 / l[g]) (out may be o). */
void vec_attn_normalize(int G, int hd, const float *o, size_t ostride, const float *l, float *out,
                        size_t outstride);
#define VEC_ATTN_MAX_RG 64
#define VEC_ATTN_ROWS_HD 256
void vec_attn_rows_kv(const vec_ops *v, const float *q, size_t qrow, int R, size_t qstride, int G,
                      const void *K, const void *V, bool f16, int n_kv0, size_t stride, int hd, float scale,
                      float *out, size_t orow, size_t ostride);
#endif
