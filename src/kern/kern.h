/* kern.h — fast CPU mat-vec kernels over quantised weights, picked at run time by CPUID.
 *
 * A weight matrix is n_rows contiguous rows of n_cols values in type `wtype` (row stride
 * quant_row_size(wtype, n_cols)). The activation vector is quantised ONCE per mat-vec into the
 * weight type's vec_dot_type (Q8_K for K/IQ quants, Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4, ...) with
 * kern_quantize_act, then every row is an integer dot product against it:
 *
 *     void *aq = rl_aligned_alloc(kern_act_size(wtype, n_cols), "act");
 *     kern_quantize_act(wtype, x, n_cols, aq);
 *     kern_matvec(wtype, W, n_rows, n_cols, aq, out);            // out[r] = W[r,:] . x
 *
 * Levels: KERN_SCALAR (quant_traits vec_dot / from_float: always present, the reference),
 * KERN_AVX2 (AVX2+FMA+F16C), KERN_AVX512 (AVX-512 F/BW/VL/DQ + VNNI). Which level and which
 * batched cores run is a configuration (kern_cfg) owned by whoever runs kernels — an engine's ops
 * runtime (ops.h) — and passed to every call; there is no process-wide setting. The default
 * configuration is the best level the CPU supports (kern_opts.level asks for a lower one; a level
 * the CPU lacks falls back to the best supported one). Types without a SIMD kernel at a level use
 * the next lower level's kernel, ultimately the scalar one.
 *
 * Every type quant.h can vec_dot has a SIMD kernel at the AVX2 and AVX-512 levels. Results match
 * the scalar vec_dot: for K and IQ types the integer sums are identical and the float operations
 * per super-block are the scalar ones, so results are bit-identical (tests/c/test_kern.c checks
 * it); F32, F16, BF16 and the 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4)
 * accumulate floats in SIMD lanes, so only the float summation order differs.
 * The AVX-512 level has its own 512-bit mat-vecs for the hot decode types (IQ1_M, IQ2_XXS, IQ2_XS,
 * IQ3_XXS, IQ3_S, Q2_K, Q4_K, Q5_K, Q6_K: src/kern/kern_x86_512.h; grids by gather (IQ3_XXS: by
 * permutes), VNNI vpdpwssd;
 * IQ1_M, the IQ2/IQ3 types and Q4_K run four rows at a time, sharing activation loads, the
 * reductions and a 4-lane float epilogue that keeps each row's scalar arithmetic),
 * 512-bit F32/F16 loops and VNNI for the int8 dots; the other types share the AVX2 source
 * (src/kern/kern_x86.h, kern_x86_k.h, kern_x86_iq.h) with EVEX encodings. At the AVX2 level Q4_K, Q6_K
 * and Q8_0 run four weight rows at a time too (scale unpacking shared, one transposed reduction, the
 * scalar epilogue in 4 float lanes; Q8_0 keeps each row's float lanes of the one-row kernel).
 * The one-row mat-vecs prefetch the weight stream 2 KiB ahead (the hardware streamer stops at 4 KiB
 * pages); the 4-row ones take rows a quarter of the call's rows apart (g, g + q, g + 2q, g + 3q):
 * four sequential streams, each prefetched the same way (kern_x86.h MV4_ROW / PF_ROWS4).
 *
 * Internal in-memory types (quant_repack.h: IQ2_LF, IQ1_LF, the lookup-free forms --iq-repack makes
 * at load) have scalar, AVX2 and batched kernels like the file types (kern_x86_repack.h), each
 * bit-identical to the original type's vec_dot on the rows before repacking.
 *
 * Threading: all functions are thread-safe; the only process state is the CPU's facts and the
 * per-level tables as filled (initialised once, on first use, read-only afterwards). A kern_cfg is
 * read by the kernels and written only by its owner between kernel calls. Split rows across threads
 * by calling kern_matvec on disjoint row ranges (W + r0 * row_bytes, out + r0).
 * Tested by tests/c/test_kern.c (every level the CPU supports); RL_KERN_BENCH=1 makes it print
 * GB/s per type and level and the batched kernels' speedups (bench/results/kernels-*.md).
 */
#ifndef RL_KERN_H
#define RL_KERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/quant.h"

enum { KERN_SCALAR = 0, KERN_AVX2 = 1, KERN_AVX512 = 2, KERN_NLEVELS = 3 };

/* "scalar", "avx2", "avx512" ("?" for an invalid level). */
const char *kern_level_name(int level);
/* Whether this CPU (and OS) can run `level`. KERN_SCALAR is always supported. */
bool kern_level_supported(int level);
/* The best level this CPU supports. */
int kern_best_level(void);
/* Whether `level` has its own (non-fallback) kernel for weight type `wtype`. */
bool kern_has_simd(int level, uint32_t wtype);

/* The activation type kernels for `wtype` expect, -1 if wtype is unknown. */
int kern_act_type(uint32_t wtype);
/* Whether every kernel of weight type wtype (every level, the batched cores and the AMX tiles) gives
 * quant_traits.vec_dot's bits: the K and IQ types (activations Q8_K: integer sums per super-block,
 * then the scalar float epilogue), not F32/F16/BF16 or the 32-value block types (float sums in
 * lanes). The exact CPU+GPU hybrid (src/cache/vram_tier.c) computes only such experts on the CPU. */
bool kern_type_exact(uint32_t wtype);
/* Bytes of the quantised activation for a row of n_cols values; 0 if not representable. */
size_t kern_act_size(uint32_t wtype, int64_t n_cols);
/* The kernels below take the configuration to run (NULL: kern_cfg_default()). */
typedef struct kern_cfg kern_cfg;
/* Quantise x[n] (n a multiple of the activation block size) into kern_act_type(wtype).
 * Byte-identical to quant_get(kern_act_type(wtype))->from_float at every level. */
void kern_quantize_act(const kern_cfg *c, uint32_t wtype, const float *x, int64_t n, void *act_q);
/* out[r] = dot(row r of W, activation) for r in [0, n_rows). W's rows are contiguous. */
void kern_matvec(const kern_cfg *c, uint32_t wtype, const void *W, int64_t n_rows, int64_t n_cols,
                 const void *act_q, float *out);
/* Batched mat-vec (prefill, verify, experts over their gathered rows): T activation rows, each
 * kern_act_size(wtype, n_cols) bytes, back to back in act_q (as kern_quantize_act wrote them):
 *     out[t * ldo + r] = dot(row r of W, activation row t)   for t < T, r < n_rows.
 * Each weight super-block is decoded once and applied to up to 8 activation rows at a time
 * (kern_x86_mm.h; kern_cfg.mm512 below selects the AVX-512 level's 512-bit core). Every value is
 * bit-identical to kern_matvec's for that activation row at the same level: batching never changes a result
 * (tests/c/test_kern.c checks T = 1..12 and 17). Types without a batched kernel at a level call kern_matvec
 * once per activation row. */
void kern_matmul(const kern_cfg *c, uint32_t wtype, const void *W, int64_t n_rows, int64_t n_cols,
                 const void *act_q, int T, float *out, int64_t ldo);
/* Whether `level` has a real batched kernel (not the loop over kern_matvec) for `wtype`. */
bool kern_has_matmul(int level, uint32_t wtype);
/* The AVX-512 level's 512-bit batched core (kern_x86_mm.h: 2 weight rows x 8 activation rows per
 * register tile) instead of its 256-bit one: kern_opts.mm512, on by default where the CPU has the
 * level (measured on the H200 host: +14.5 % prompt at 16 threads; docs/TUNING.md). Both are
 * bit-identical to the mat-vec.
 * Intel AMX int8 tiles for the batched K and IQ kernels at the AVX-512 level (src/kern/kern_x86_amx.h):
 * from a per-type number of activation rows on (kern_table.amx_min), each 16 x 16 x 64 tile product
 * replaces 512 VNNI instructions; same integer sums and float epilogue, so bit-identical to the
 * mat-vec like the other cores. Used where the CPU has AMX-TILE + AMX-INT8, the OS enables the tile
 * state and grants this process its use (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked once at
 * initialisation); kern_opts.amx = false switches it off there. KERN_AMX_EMUL runs the same kernel
 * with the tile operations done in C (slow: for tests on CPUs without AMX; it needs the AVX-512
 * level). */
enum { KERN_AMX_OFF = 0, KERN_AMX_ON = 1, KERN_AMX_EMUL = 2 };
bool kern_amx_supported(void);

/* ---- the configuration: the kernel level and its switches -------------------------------------
 * kern_opts are the switches as asked for (the tuning table, docs/TUNING.md; parsed from the
 * environment in one place, run/tuning.c); kern_cfg_init resolves them against this CPU into a
 * kern_cfg: the level's dispatch table with the switches applied. */
typedef struct {
    int level;    /* the widest level to use (KERN_*; default the widest: the best the CPU has) */
    bool mm512;   /* AVX-512 level: the 512-bit batched core (default) instead of the 256-bit one */
    bool amx;     /* AMX tiles where the CPU grants them (default) */
    int amx_rows; /* > 0: the tiles from this many activation rows on for every type (measuring
                     thresholds); 0: each type's own (kern_table.amx_min, measured) */
    int iq_mv;    /* AVX-512 IQ2_XXS / IQ2_XS / IQ3_S mat-vecs: 0 by CPU vendor (AMD: the AVX2 ones),
                      256, 512 */
} kern_opts;
kern_opts kern_opts_default(void);

/* ---- internal: the dispatch table the ISA files fill (kern_avx2.c, kern_avx512.c) ---------- */
typedef void (*kern_matvec_fn)(const void *W, size_t row_bytes, int64_t n_rows, int64_t n_cols,
                               const void *act, float *out);
typedef void (*kern_matmul_fn)(const void *W, size_t row_bytes, int64_t n_rows, int64_t n_cols,
                               const void *act, size_t act_bytes, int T, float *out, size_t ldo);
typedef void (*kern_quant_fn)(const float *x, void *dst, int64_t n);
typedef struct {
    kern_matvec_fn matvec[QT_COUNT];    /* by weight type */
    kern_matmul_fn matmul[QT_COUNT];    /* by weight type; NULL: kern_matvec per activation row */
    kern_matmul_fn matmul_w[QT_COUNT];  /* 512-bit alternatives of matmul (kern_cfg.mm512), or NULL */
    kern_matmul_fn matmul_x[QT_COUNT];  /* AMX tile alternatives (kern_cfg.amx), or NULL */
    kern_matmul_fn matmul_xe[QT_COUNT]; /* the same with the tile operations emulated (tests) */
    int amx_min[QT_COUNT];              /* activation rows from which matmul_x pays (fill_amx) */
    kern_matmul_fn matmul_lo[QT_COUNT]; /* select_mm: the batched kernel below amx_from rows */
    int amx_from[QT_COUNT];             /* select_mm: matmul takes T >= amx_from (0: any T) */
    kern_quant_fn quant[QT_COUNT];      /* by activation type */
} kern_table;
/* Each sets the entries it implements and leaves the others untouched. A level that overrides a
 * type's matvec must override its matmul too (else init() drops the inherited matmul, so a
 * batched result never comes from another level's arithmetic). */
void kern_fill_avx2(kern_table *t);
void kern_fill_avx512(kern_table *t);
/* The IQ1 folded-grid tables the ISA files share (kern_x86_iq.h, kern_x86_512.h): defined once in
 * kern.c and built there before the fill functions run, read-only afterwards. */
extern uint64_t kern_iq1_fold[4096], kern_iq1_fold_nq[4096];

/* A resolved configuration. Owned by its user (an engine's ops runtime, a test); read-only while
 * kernels run with it, changed only through the setters below between kernel calls. */
struct kern_cfg {
    int level;    /* KERN_* in use */
    bool mm512;   /* the AVX-512 level's 512-bit batched core */
    int amx;      /* KERN_AMX_* */
    int amx_rows; /* kern_opts.amx_rows */
    int iq_mv;    /* kern_opts.iq_mv */
    kern_table t; /* the level's table with the switches applied */
};
/* Resolve o (NULL: kern_opts_default()) on this CPU: 0, or -1 with rl_seterr for an invalid value. */
int kern_cfg_init(kern_cfg *c, const kern_opts *o);
/* kern_opts_default() resolved (a read-only configuration built once). */
const kern_cfg *kern_cfg_default(void);
/* Change one switch of c (tests, benchmarks): 0, or -1 with rl_seterr when the CPU cannot run it
 * (the level is not supported, no AVX-512 for the 512-bit core or the emulated tiles, no AMX for
 * KERN_AMX_ON, rows < 0). Not while kernels run with c. */
int kern_cfg_set_level(kern_cfg *c, int level);
int kern_cfg_set_mm512(kern_cfg *c, bool on);
int kern_cfg_set_amx(kern_cfg *c, int mode);
int kern_cfg_set_amx_rows(kern_cfg *c, int rows);
/* "scalar", "avx2", "avx512" or "avx512 + AMX tiles": what c runs (bench reports). */
const char *kern_cfg_describe(const kern_cfg *c);

#endif
