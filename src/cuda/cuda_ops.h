/* cuda_ops.h — the C interface of the CUDA kernels (src/cuda/ *.cu), used by the CUDA
 * backend (backend_cuda*.c) and tests/cuda. Self-contained (C and C++): the .cu files include no other
 * project header.
 *
 * Conventions
 *   - Every pointer is device memory unless named h_*; activations are float32 row-major
 *     [rows][ld]. Every launcher enqueues on `s`, checks the launch and returns 0, or -1 with
 *     one line in rl_lasterr ("CUDA error <name> (<text>) in <what> at file:line").
 *   - Row positions come from device memory (`pos0`: row t sits at *pos0 + t) so that a
 *     captured decode graph replays at any position.
 *   - Batch invariance: every kernel computes a row's result with the same arithmetic
 *     whatever the number of rows T (the backend contract: multi-row verify == single
 *     steps, bit for bit). Matmuls split the input dimension over the 32 lanes of a warp in
 *     units of 8 values (lane L owns units L, L+32, ...), accumulate each unit sequentially
 *     with fmaf and reduce the lanes with one fixed butterfly; tiling over rows and tokens
 *     never changes that order. Decode (split-K) and prefill attention share the per-chunk
 *     partial and the in-order merge.
 *   - Dequantisation is bit-exact with the CPU's quant_traits.to_float (same float ops, no
 *     contraction: the .cu files are compiled with -fmad=false; fused multiply-adds appear
 *     only where written as fmaf).
 */
#ifndef RL_CUDA_OPS_H
#define RL_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cuda/cuda_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

int rl_seterr(const char *fmt, ...);

/* Report a failed CUDA call: one line naming the error, the call and file:line; returns -1.
 * Also clears the (non-sticky) last error. */
int cu_fail(cudaError_t e, const char *what, const char *file, int line);
static inline int cu_check_(cudaError_t e, const char *what, const char *file, int line) {
    return e == cudaSuccess ? 0 : cu_fail(e, what, file, line);
}
#define CU_CHECK(call) cu_check_((call), #call, __FILE__, __LINE__)

/* ---- the device and the stream a launch goes to ----------------------------------------------- */

/* Fill d for device `ordinal` (its facts from cudaGetDeviceProperties) under the switches t; the
 * launches of a context then read the device only through it. 0, or -1 with rl_lasterr. */
int cu_dev_init(cu_dev *d, int ordinal, const cu_tuning *t);
/* Where a launch goes: the stream, and the device (facts, switches, per-kernel launch state) of the
 * context that owns it. One host thread at a time launches on a context's streams. */
typedef struct {
    cudaStream_t s;
    cu_dev *dev;
} cu_stream;
/* Let kernel fn take smem bytes of dynamic shared memory (the opt-in attribute above 48 KiB, once
 * per size per kernel): 0, or -1 with rl_lasterr naming the kernel `what`, the bytes needed and the
 * bytes this device allows (d->smem_max). */
int cu_dev_smem(cu_dev *d, const void *fn, size_t smem, const char *what);
/* Whether a block of smem bytes of dynamic shared memory fits this device (the launches choose
 * their shape with it). */
static inline bool cu_dev_fits(const cu_dev *d, size_t smem) { return smem <= d->smem_max; }

/* Device copies of the IQ lookup grids (from quant_tables.c) on the current device, one per device
 * (a launch reads the copy of its cu_stream's device). Idempotent, thread-safe; 0 or -1. */
#define CU_MAX_DEVICES 64
int cu_tables_init(void);
/* true if the matmul / row-gather kernels decode this ggml type */
bool cu_type_supported(uint32_t type);

/* out[t][0..n_in) = row rows[t] of W (dequantised), t < T. (Embedding lookup; tests.) */
int cu_get_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int n_in, const int32_t *rows, int T,
                float *out, int ldo, cu_stream s);

/* ---- matmul: y[t][r] = sum_i W[r][i] * x[t][i] ------------------------------------------ */

enum { CU_EPI_STORE = 0, CU_EPI_CONV = 1 };

/* One output segment of a launch: n_out rows of W (all segments of a launch share the type,
 * n_in and the input rows). For grouped (expert) launches, expert e's rows start at
 * w + e * expert_stride, or where the device table wt[e] (wt2[e] for w2) points when wt is given
 * (the VRAM tier inside the decode graph: a slot in VRAM, or the expert's page-locked host bytes
 * read over the link; the same bytes, so the same bits). gate/up launches: w = gate rows, w2 = up
 * rows, y = silu(g) * u. */
typedef struct {
    const uint8_t *w, *w2;
    const uint8_t *const *wt, *const *wt2; /* NULL, or device tables of one pointer per expert */
    size_t row_bytes, expert_stride;
    int n_out;
    float *y;
    int ldy;
    int epi; /* CU_EPI_STORE, or CU_EPI_CONV (T = 1 only): y = silu(causal conv) with state shift */
} cu_seg;

/* Conv epilogue of the DeltaNet qkv projection: channel r = output row r. */
typedef struct {
    const float *w; /* [C][kw] */
    float *state;   /* [kw-1][C], oldest first */
    int kw, C;
} cu_conv;

/* A tile of up to `tt` pairs of one expert: pairs start..start+count-1 of the plan. */
typedef struct {
    int32_t expert, start, count, pad;
} cu_tile;

/* Grouped launch: tiles from the MoE plan (count in device memory), pair p reads input row
 * pair_in[p] and writes output row pair_out[p] (NULL = identity). tt: tokens per tile the
 * plan was built for (1 or CU_TT). */
typedef struct {
    const cu_tile *tiles;
    const int *n_tiles;
    int max_tiles, tt;
    const int32_t *pair_in, *pair_out;
    int x_rows; /* rows of x that pairs read (pair_in's range, else the number of pairs); 0: not given
                 * (then prefill tiles of the integer path quantise inside each block, no scratch) */
} cu_group;

#define CU_TT 8 /* tokens per tile of the batched (prefill) matmul */
/* Up to this many rows (a verify, a short chunk) run the decode-shaped kernels: dense matmuls
 * with one weight row per warp and tiles of 2, 4 or 8 tokens, and the MoE as one tile per
 * (row, expert) pair. Same bits as any other shape (batch invariance); fewer wasted lanes. */
#define CU_SMALL_T 16

/* Dense when g == NULL (T input rows, tiles of CU_TT tokens, or 1 when T == 1).
 * gateup: segment 0 holds w (gate) and w2 (up). ws: device scratch of cu_matmul_ws_bytes(n_in, rows)
 * bytes (rows: T, or g->x_rows), or NULL; the integer path's prefill tiles quantise the input rows
 * into it once and stage weights and codes through shared memory (the same bits as without it; one
 * launch at a time per scratch). Returns 0 or -1. */
int cu_matmul(uint32_t type, int n_in, const cu_seg *segs, int nseg, const float *x, int ldx, int T,
              const cu_group *g, bool gateup, const cu_conv *conv, void *ws, cu_stream s);
size_t cu_matmul_ws_bytes(int n_in, int rows);
/* Pairs per tile the grouped prefill launches of weight type `type` take on d (the MoE plan's tt): 2 * CU_TT
 * where the staged integer tiles run them, else CU_TT. cu_matmul accepts
 * 2 * CU_TT only for such launches (with a scratch). */
int cu_matmul_group_tt(const cu_dev *d, uint32_t type);

/* The integer path of the matmuls (src/cuda/mmq.cuh): in every shape (decode, verify, prefill tiles,
 * grouped experts) each activation row is quantised to Q8_K as the CPU does and each output is
 * quant_traits.vec_dot(row, q8_K(x)) bit for bit — the CPU backend's value — with dp4a for one-row
 * and small launches and int8 tensor cores (mma.sync) for prefill tiles. mode 0: the float path
 * above; 1: the K-quants (Q2_K-Q6_K), and the 32-value types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * MXFP4 (mmq_b32.cuh: activations per 32 values to Q8_0 / Q8_1, output == vec_dot(row, q8_0(x) or
 * q8_1(x))); 2: also the IQ types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS:
 * mmq_iq.cuh).
 * Per device struct: the initial mode is d->tune.mmq (RL_CUDA_MMQ=0|1|2, default 2). Set it before the
 * context runs (a context's prefill and steps must use one arithmetic). Returns the previous mode. */
int cu_dev_set_int8(cu_dev *d, int mode);
/* Whether launches of a matrix of `type`, rows x n_in, take the integer path on d in its current mode
 * (every shape of a matrix takes the same path): then each output is quant_traits.vec_dot's bits. */
bool cu_matmul_integer(const cu_dev *d, uint32_t type, int n_in, int rows);

/* The activation quantiser of the 32-value types' integer path (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * MXFP4 weights; mode >= 1), run exactly as the matmuls run it (the same device function, row
 * addressing and block shape): T rows of n_in values at x (stride ldx floats, a multiple of 4; x
 * 16-byte aligned; n_in a multiple of 32) into dst, T rows of quant_row_size(type, n_in) bytes in the
 * CPU's block layout of type QT_Q8_0 or QT_Q8_1, byte for byte quant_traits.from_float's (tests). */
int cu_quantise_q8(uint32_t type, const float *x, int ldx, int T, int n_in, void *dst, cu_stream s);

/* A tail of a one-row dense launch (decode): the block that finishes last (an atomic counter,
 * zero before the launch and reset by that block) runs one more per-row step on the launch's
 * output (segment 0's row, n_out values), with the same device function as the stand-alone
 * kernel, so the bits are those of the two launches:
 *   CU_TAIL_ADD_NORM  x += y; out = rmsnorm(x) * w          (cu_add_rmsnorm on the output)
 *   CU_TAIL_ROUTER    softmax / top-k / decode plan           (cu_router on the output, T = 1)
 * Saves one launch and its gap per use. */
enum { CU_TAIL_NONE = 0, CU_TAIL_ADD_NORM = 1, CU_TAIL_ROUTER = 2 };
typedef struct {
    int kind;
    unsigned *counter; /* device, 0 before the launch; the last block puts it back to 0 */
    float *x, *out;    /* ADD_NORM */
    const float *w;
    float eps;
    int K; /* ROUTER (E = n_out): outputs as cu_router's */
    int32_t *ids, *pair_in, *pair_out;
    float *wts, *probs;
    cu_tile *tiles;
    int *n_tiles;
} cu_tail;

/* cu_matmul of one dense input row (T = 1, no gate/up, no conv) followed by `tail`. */
int cu_matmul_tail(uint32_t type, int n_in, const cu_seg *segs, int nseg, const float *x, const cu_tail *tail,
                   cu_stream s);

/* ---- norms -------------------------------------------------------------------------------- */

/* Per row t < T: if y: x += y (float adds, in place); if out: out = rmsnorm(x) * w. */
int cu_add_rmsnorm(float *x, const float *y, const float *w, float *out, int n, int T, float eps,
                   cu_stream s);

/* ---- MoE ------------------------------------------------------------------------------------ */

/* Router on logits [T][E]: softmax, top-k (ties: lower id), renormalised weights.
 * ids/w/p: [T][K] (p = the selected softmax probabilities, for route hooks).
 * If tiles != NULL: also writes the decode plan (decode and small verify batches): one tile
 * per (row, slot) pair p = t*K + k: expert ids[p], pair_in = t, pair_out = p; *n_tiles = T*K
 * (tiles / pair_in / pair_out hold T*K entries). */
int cu_router(const float *logits, int E, int K, int T, int32_t *ids, float *w, float *p, cu_tile *tiles,
              int *n_tiles, int32_t *pair_in, int32_t *pair_out, cu_stream s);
/* Group the T*K (row, slot) pairs by expert: tiles of <= tt pairs; pair_in = row t,
 * pair_out = t*K + k. counts: E ints of scratch. One block; T*K <= 65536. */
int cu_moe_plan(const int32_t *ids, int T, int K, int E, int tt, cu_tile *tiles, int *n_tiles,
                int32_t *pair_in, int32_t *pair_out, int *counts, cu_stream s);
/* Per row t: y = sum_k w[t][k] * eo[t*K+k] + gate[t] * sh[t] with gate[t] = sigmoid(sh_gate . xn[t])
 * (double accumulation as the CPU reference; sh / sh_gate may be NULL; g: the gates made beforehand
 * by cu_moe_sh_gate, or NULL to reduce them here: the same bits), x += y, then
 * out = rmsnorm(x) * w_next (out may alias xn; NULL out skips the norm). */
int cu_moe_combine(const float *eo, const float *w, int K, const float *sh, const float *sh_gate,
                   const float *g, const float *xn, float *y, float *x, const float *w_next, float *out,
                   int D, int T, float eps, cu_stream s);

/* The same for one row (decode) with the norm (out != NULL) in the last block of the combine
 * launch (counter: device, 0, put back by that block): one launch, the bits of cu_moe_combine. */
int cu_moe_combine_norm1(const float *eo, const float *w, int K, const float *sh, const float *sh_gate,
                         const float *g, const float *xn, float *y, float *x, const float *w_next, float *out,
                         int D, float eps, unsigned *counter, cu_stream s);

/* g[t] = sigmoid(sh_gate . xn[t]) for t < T: the combine's shared-expert gate, made where xn is ready
 * (the shared expert's branch, st2) so the combine need not reduce it (the same bits). */
int cu_moe_sh_gate(const float *sh_gate, const float *xn, float *g, int D, int T, cu_stream s);

/* The emulated link inside the decode graph (vram_gtab.h, RL_VRAM_LINK_GBS): queued after a layer's
 * expert launches, one thread that holds the stream for ns_per_expert times the number of the forward's
 * router ids ids[0..K) (T x top-k: each (row, expert) pair, as a one-row tile reads its expert once)
 * whose table entry tab[id] lies in [lo, lo + span),
 * i.e. was read over the link by those launches rather than from a VRAM slot: what a link of the cap
 * would have taken for their bytes. The hold comes after the reads, which ran at this machine's own
 * speed, so the emulation errs slow. acc (device, 3 counters, added to): experts held, the ns their
 * bytes take at the cap, the ns actually held (the timer's ticks: at least the former). */
int cu_link_hold(const int32_t *ids, int K, const uint8_t *const *tab, const uint8_t *lo, size_t span,
                 double ns_per_expert, unsigned long long *acc, cu_stream s);

/* ---- gated full attention ----------------------------------------------------------------- */

typedef struct {
    int H, Hkv, hd, n_rot, n_ctx;
    float eps, scale;
    const float *inv_freq; /* [n_rot/2] */
    bool kv_f16;
    bool split_per_warp; /* decode: the previous split kernel (each warp reads the KV rows of its
                            own head) instead of the grouped one (RL_CUDA_ATTN=per-warp); same bits */
    bool prefill_staged; /* prefill: K/V slices staged in shared memory once per block for its heads
                            (RL_CUDA_ATTN_PF=staged; =unstaged: false); same bits */
    bool prefill_tiled;  /* prefill: the register-tiled kernel (32 rows x a chunk per block; the default,
                            RL_CUDA_ATTN_PF=staged|unstaged turn it off); same bits, precedes prefill_staged */
    bool tc;             /* decode, verify and prefill on tensor cores (attn_tc.cu: f16 q and weights, f32
                            accumulation; its own numerics, shared by all three, so their rows stay
                            bit-identical); needs kv_f16 and H / Hkv <= 16 */
    bool split_db;       /* decode on tensor cores: the split kernel with two staged K/V slices, loads
                            running under the block's arithmetic (the backend's default; RL_CUDA_ATTN_DB=0:
                            one slice at a time); same bits */
    int rope_delta;      /* RoPE position = KV slot + rope_delta (0; 1 for the MTP layer, whose pair
                            (h_p, x_{p+1}) sits in slot p at position p+1) */
} cu_attn_dims;

/* q (in qg [T][H][2*hd], first half of each head) and k [T][Hkv*hd]: per-head RMSNorm then
 * partial NeoX RoPE at *pos0 + t; k and v are stored into the caches at that position. */
int cu_qk_norm_rope_store(const cu_attn_dims *a, float *qg, float *k, const float *v, const float *q_norm,
                          const float *k_norm, const int *pos0, int T, void *kc, void *vc, cu_stream s);
/* o[t][h*hd..] = softmax(q k^T * scale) v * sigmoid(gate) over positions 0..*pos0+t.
 * split: chunk partials in `part` (cu_attn_part_floats), then an in-order merge (few rows, long
 * contexts: one block per (chunk, KV head, row), so a long context spreads over the SMs; the
 * block stages each 32-position slice of K, then of V, in shared memory with coalesced 16-byte
 * loads, once for all the query heads of its group); otherwise one block per (row tile, KV
 * head) walks the chunks itself. All give the same bits (the same per-chunk arithmetic in the
 * same order, merged in chunk order). */
#define CU_ATTN_CHUNK 256
#define CU_ATTN_SPLIT_MAX_T 4
size_t cu_attn_part_floats(const cu_attn_dims *a, int T);
/* Whether the attention kernels support these dimensions (head_dim hd, H query and Hkv KV heads,
 * n_rot rotated dims): 0, or -1 with one line naming the limit (rl_lasterr). Host only, no device. */
int cu_attn_check(int hd, int H, int Hkv, int n_rot);
int cu_attention(const cu_attn_dims *a, const float *qg, const void *kc, const void *vc, const int *pos0,
                 int T, bool split, float *part, float *o, cu_stream s);

/* ---- Gated DeltaNet ----------------------------------------------------------------------- */

typedef struct {
    int C, kw, dk, dv, hk, hv;
    float eps;
    const float *conv_w;          /* [C][kw] */
    const float *ssm_a, *dt_bias; /* [hv] */
    const float *ssm_norm;        /* [dv] */
    int v_tiled;                  /* value head h reads key head h % hk (Qwen3.5 files); 0: h / (hv / hk) */
    int ba_split; /* a row of ba is [beta x hv | alpha x hv] (ssm_beta, ssm_alpha); 0: the fused
                     ssm_ba layout, per key head [b x hv/hk | a x hv/hk] */
} cu_dn_dims;

/* Causal conv + SiLU over T rows (sequential per channel): in [T][ldi] -> u [T][C], state shifts. */
int cu_dn_conv(const cu_dn_dims *d, const float *in, int ldi, float *u, float *state, int T, cu_stream s);
/* Prefill pieces: (1) l2norm + scale q, l2norm k in u (in place), gates ab [T][2][hv] from ba;
 * (2) the delta rule over the T rows (state in registers), raw outputs o [T][hv*dv];
 * (3) gated RMSNorm with z [T][ldz]: o = rmsnorm(o_h) * ssm_norm * silu(z_h). */
int cu_dn_prep(const cu_dn_dims *d, float *u, const float *ba, float *ab, int T, cu_stream s);
int cu_dn_scan(const cu_dn_dims *d, const float *u, const float *ab, float *ssm, float *o, int T,
               cu_stream s);
int cu_dn_gnorm(const cu_dn_dims *d, float *o, const float *z, int ldz, int T, cu_stream s);
/* The same with per-row snapshots (verify rows): where row_slot[t] >= 0 (device ints, T of
 * them; NULL = none), the conv window / recurrent state after row t is also written to
 * snap + row_slot[t] * stride (floats; snap is the layer's state in slot 0, laid out as
 * `state` / `ssm`). The outputs and the live state are those of the plain calls. */
int cu_dn_conv_snap(const cu_dn_dims *d, const float *in, int ldi, float *u, float *state, int T, float *snap,
                    size_t stride, const int *row_slot, cu_stream s);
int cu_dn_scan_snap(const cu_dn_dims *d, const float *u, const float *ab, float *ssm, float *o, int T,
                    float *snap, size_t stride, const int *row_slot, cu_stream s);
/* Decode (T = 1): prep + delta rule + gated norm in one kernel, the same arithmetic. ctr NULL: one
 * block per value head; else d->hv counters (zeroed; each launch puts them back): the head spread over
 * 4 blocks, the last one normalising (same bits; the backend's default, RL_CUDA_DN_SPLIT=0 one block). */
int cu_dn_step(const cu_dn_dims *d, const float *u, const float *ba, const float *z, float *ssm, float *o,
               unsigned *ctr, cu_stream s);

#ifdef __cplusplus
}
#endif
#endif
