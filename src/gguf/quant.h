/* quant.h — GGML tensor types as one traits table.
 *
 * Every type real Qwen3-Next GGUF files use is decoded bit-exactly (same float32 results as
 * ggml's dequantize_row_* / the `gguf` PyPI package's numpy implementation).
 * The lookup grids (IQ2/IQ3/IQ1 codebooks, IQ4_NL and MXFP4 values, sign tables) are format data,
 * generated into quant_tables.c by tools/gen_quant_tables.py from the `gguf` package.
 *
 * Three ways to multiply a weight row by an activation vector:
 *   quant_dot_ref    dequantise, then accumulate in double — the oracle;
 *   traits->vec_dot  scalar reference of the quantized-activation path: the activation row
 *                    is quantized once to traits->vec_dot_type (Q8_K / Q8_0 / F32 ...) with
 *                    traits->from_float of that type, then integer dot products per block,
 *                    as ggml's CPU backend does; fast SIMD kernels are checked against it.
 */
#ifndef RL_QUANT_H
#define RL_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include "base/common.h"

/* ggml type ids (GGUF tensor type field). */
enum {
    QT_F32 = 0,
    QT_F16 = 1,
    QT_Q4_0 = 2,
    QT_Q4_1 = 3,
    QT_Q5_0 = 6,
    QT_Q5_1 = 7,
    QT_Q8_0 = 8,
    QT_Q8_1 = 9,
    QT_Q2_K = 10,
    QT_Q3_K = 11,
    QT_Q4_K = 12,
    QT_Q5_K = 13,
    QT_Q6_K = 14,
    QT_Q8_K = 15,
    QT_IQ2_XXS = 16,
    QT_IQ2_XS = 17,
    QT_IQ3_XXS = 18,
    QT_IQ1_S = 19,
    QT_IQ4_NL = 20,
    QT_IQ3_S = 21,
    QT_IQ2_S = 22,
    QT_IQ4_XS = 23,
    QT_I8 = 24,
    QT_I16 = 25,
    QT_I32 = 26,
    QT_I64 = 27,
    QT_F64 = 28,
    QT_IQ1_M = 29,
    QT_BF16 = 30,
    QT_MXFP4 = 39,
    QT_COUNT = 64
};

#define QK_K 256

typedef struct {
    const char *name; /* "Q4_K" */
    int blck;         /* values per block (1 for F32/F16/BF16) */
    size_t type_size; /* bytes per block */
    /* dequantize n values (n % blck == 0) from src into dst (scalar reference, bit-exact) */
    void (*to_float)(const void *src, float *dst, int64_t n);
    /* quantize n floats into this type (NULL if not supported; needed for activation types
     * Q8_K, Q8_0, Q8_1, F16, BF16, F32, and for the writer/synth of weight types where
     * implemented) */
    void (*from_float)(const float *src, void *dst, int64_t n);
    int vec_dot_type; /* the activation type vec_dot expects */
    /* dot of n values: weight row (this type) . activation row (vec_dot_type) */
    float (*vec_dot)(int64_t n, const void *w, const void *act);
} quant_traits;

/* NULL for unknown / unsupported ids (callers report "unsupported tensor type N"). */
const quant_traits *quant_get(uint32_t type);
const char *quant_name(uint32_t type); /* "?" if unknown */
/* Bytes of a row of n values; 0 if n is not a multiple of the block size or type unknown. */
size_t quant_row_size(uint32_t type, int64_t n);
/* Oracle dot product: dequantise w, accumulate w[i]*x[i] in double. */
double quant_dot_ref(uint32_t type, const void *w, const float *x, int64_t n);

#endif
