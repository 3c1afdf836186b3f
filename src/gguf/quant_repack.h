/* quant_repack.h — lookup-free in-memory layouts for the IQ expert types (opt-in: --iq-repack).
 *
 * Why: IQ2_XXS / IQ2_XS store each group of 8 weights as an index into a 256/512-entry table of
 * 8-byte grid vectors plus a 7-bit sign index. On x86 every 8 weights then cost a scalar table
 * load (AVX2 gathers are slower still on Zen 3), so their mat-vec decodes ~11 G weights/s per core
 * whatever the source: 17 % of the memory bandwidth (bench/results/2026-12-01-cpu-mixes.md).
 *
 * The layout (internal type IQ2_LF, "lookup-free"; IQ1_M's form IQ1_LF below): every grid byte of
 * IQ2_XXS / IQ2_XS is one of the magnitudes 8, 25, 43 (checked when the repack tables are built,
 * and by tests/c/test_repack.c), so a weight with its sign folded in is one of six integers. Each weight
 * becomes a 4-bit code into one 16-byte value table, which one pshufb decodes for 32 weights at a time; the
 * fp16 super-block scale and the 4-bit half-block scales are kept as they are:
 *
 *     | d fp16 | scales[8] | qs[128] |                                   138 bytes / 256 weights
 *     scales[b]: low nibble s of values 32b..32b+15, high nibble of 32b+16..32b+31 (IQ2_XS's own
 *                layout; IQ2_XXS's single scale of block b is written into both nibbles)
 *     qs[32p + j]: low nibble = code of value 64p + j, high nibble = code of value 64p + 32 + j
 *     code c: bits 0-1 magnitude index (8, 25, 43), bit 2 sign (1 = negative): iq2lf_values[c]
 *
 * Exactness: the dot product with a Q8_K activation row forms, per 16 values, the same integer
 * sum sum(grid * sign * q8) as the original type, multiplies it by the same integer (2s+1), adds
 * the integers of the super-block (integer addition is exact in any grouping: IQ2_XXS's sum per 32
 * values equals the sum of its two halves), and applies the original float epilogue
 * (d * y.d * isum summed over super-blocks, times 0.125 at the end). So quant_vec_dot_iq2_lf on a
 * repacked row returns exactly the bits of quant_vec_dot_iq2_xxs / _iq2_xs on the original row,
 * and quant_to_float_iq2_lf the bits of the original to_float (d*(0.5+s)*0.25 * (+-g) equals
 * (d*(0.5+s)*0.25 * g) * (+-1): rounding is sign-symmetric). tests/c/test_repack.c checks both, and
 * the SIMD kernels (src/kern/kern_x86_repack.h) against them.
 *
 * Cost: 138 / 66 = 2.09x the bytes of IQ2_XXS (4.31 vs 2.06 bits per weight), 138 / 74 = 1.86x
 * IQ2_XS. The decode is then bound by memory bandwidth instead of table loads.
 *
 * IQ1_LF (IQ1_M repacked), the same block: IQ1_M's weight is d * (2s+1) * (grid + delta) with grid
 * in {-1, 0, +1} (11-bit index into a 2048-entry table) and delta = +-1/8 per group of 8, i.e. in
 * units of 1/8 one of the six integers +-7, +-9, +-1: a 4-bit code again (iq1lf_values). d is the
 * fp16 IQ1_M assembles from its scale words' top nibbles, the 3-bit scales (2s+1, one per 16 values)
 * are the nibbles of scales[]. IQ1_M's dot product keeps sumi1 = sum (2s+1) grid q8 and
 * sumi2 = sum (2s+1) delta*8 q8 apart and ends with (float)sumi1 + 0.125f * (float)sumi2; IQ1_LF forms
 * isum = 8 sumi1 + sumi2 and ends with 0.125f * (float)isum. Both are exact (|sumi1|, |sumi2| <=
 * 256 * 128 * 15 < 2^19, so every value and the sum (8 sumi1 + sumi2) / 8 < 2^22 are floats without
 * rounding), hence equal: the results are again bit-identical. Cost: 138 / 56 = 2.46x IQ1_M's bytes
 * (4.31 vs 1.75 bits per weight).
 *
 * These type ids are never valid in a file (gguf.c refuses them): they exist only in memory,
 * where the model's IQ matrices were repacked at load (src/cache/expert_repack.c).
 */
#ifndef RL_QUANT_REPACK_H
#define RL_QUANT_REPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/quant.h"

enum {
    QT_INTERNAL_FIRST = 48, /* ids >= this are in-memory layouts only */
    QT_IQ2_LF = 48,         /* IQ2_XXS / IQ2_XS repacked: 4-bit codes, no grid lookups */
    QT_IQ1_LF = 49,         /* IQ1_M repacked, same block layout */
};

/* The block of both lookup-free types (the layout above). */
typedef struct {
    uint16_t d;
    uint8_t scales[8];
    uint8_t qs[128];
} blk_iq_lf; /* 138 B */
typedef blk_iq_lf blk_iq2_lf, blk_iq1_lf;
_Static_assert(sizeof(blk_iq_lf) == 138, "IQ*_LF block size");

/* code -> signed value in the type's integer unit; unused codes 0.
 * IQ2_LF: the grid byte times its sign (+-8, +-25, +-43).
 * IQ1_LF: 8 * grid + delta in units of 1/8 (+-7, +-9, +-1): code bits 0-1 = grid + 1 (grid -1, 0, +1),
 * bit 2 = delta sign (1: -1/8). */
extern const int8_t iq2lf_values[16];
extern const int8_t iq1lf_values[16];

static inline bool quant_is_internal(uint32_t type) { return type >= QT_INTERNAL_FIRST && type < QT_COUNT; }

/* The lookup-free type `src` repacks into, or -1 if there is none: IQ2_XXS, IQ2_XS -> IQ2_LF,
 * IQ1_M -> IQ1_LF. */
int quant_repack_type(uint32_t src);
/* Repack n_rows rows of n_cols values (n_cols % 256 == 0) of type src (row stride
 * quant_row_size(src, n_cols)) into dst (row stride quant_row_size(quant_repack_type(src), n_cols)).
 * Pure, thread-safe; rows are independent (split them across threads freely). */
void quant_repack_rows(uint32_t src, const void *in, void *out, int64_t n_rows, int64_t n_cols);
/* Bytes of the repacked form of n_rows x n_cols values of type src (0 if src has no repacked type). */
uint64_t quant_repack_bytes(uint32_t src, int64_t n_rows, int64_t n_cols);

/* Scalar references (the quant_traits entries of QT_IQ2_LF, QT_IQ1_LF). */
void quant_to_float_iq2_lf(const void *src, float *dst, int64_t n);
float quant_vec_dot_iq2_lf(int64_t n, const void *w, const void *act);
void quant_to_float_iq1_lf(const void *src, float *dst, int64_t n);
float quant_vec_dot_iq1_lf(int64_t n, const void *w, const void *act);

#endif
