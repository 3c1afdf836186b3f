/* test_kern_amx.c — the AMX tile kernels (src/kern/kern_x86_amx.h) on the tiles themselves: kern_matmul with
 * kern_cfg_set_amx(TK(), KERN_AMX_ON) against kern_matvec, bit for bit, for every type that has them, over
 * whole and partial row tiles, whole and overlapped activation-row tiles, 1 / 8 / 16 super-blocks per
 * row, and one wider row that takes the 512-bit core (tests/c/kern_mm_check.h: NaN-poisoned output
 * with gaps, an all-zero activation row). test_kern.c checks the same kernel with emulated tiles on
 * every AVX-512 CPU; this binary needs AMX (exit 77 and why, elsewhere). The tiles are forced from one
 * activation row on (kern_set_amx_rows), so small batches padded to one tile are checked too. With
 * RL_KERN_BENCH=mm it also prints one thread's GMAC/s of the AMX kernels next to the 512-bit core at
 * T = 8..512: the measurement behind each type's threshold (fill_amx).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kern/kern.h"
#include "kern_mm_check.h"

static const uint32_t types[] = {QT_Q4_K, QT_Q6_K, QT_IQ1_M,   QT_IQ2_XXS, QT_IQ2_XS,
                                 QT_Q2_K, QT_Q5_K, QT_IQ3_XXS, QT_IQ3_S};
#define N_TYPES (sizeof types / sizeof types[0])

int main(void) {
    if (!kern_amx_supported()) {
        printf("test_kern_amx: skipped: AMX tiles are not usable on this CPU (AMX-TILE/AMX-INT8 or the OS "
               "grant missing)\n");
        return 77;
    }
    CHECK(kern_cfg_set_level(TK(), KERN_AVX512) == 0, "the AVX-512 level");
    CHECK(kern_cfg_set_amx(TK(), KERN_AMX_ON) == 0 && TK()->amx == KERN_AMX_ON, "AMX on");
    CHECK(kern_cfg_set_amx_rows(TK(), 1) == 0, "tiles from one row");
    rl_rng r;
    rl_rng_seed(&r, 911);
    for (size_t k = 0; k < N_TYPES; k++) {
        CHECK(kern_has_matmul(KERN_AVX512, types[k]), "%s has a batched kernel", quant_get(types[k])->name);
        const int64_t widths[] = {256, 2048, 4096, 4096 + 256};
        for (int w = 0; w < 4; w++) {
            test_matmul(KERN_AVX512, types[k], 16, widths[w], 64, &r);
            test_matmul(KERN_AVX512, types[k], 37, widths[w], 65, &r);
            test_matmul(KERN_AVX512, types[k], 5, widths[w], 90, &r);
        }
        test_matmul(KERN_AVX512, types[k], 64, 2048, 200, &r);
        test_matmul(KERN_AVX512, types[k], 19, 2048, 1030, &r); /* two passes, the second of 6 rows */
        const int small[] = {1, 2, 7, 15, 16, 17, 31, 40};
        for (int i = 0; i < 8; i++)
            test_matmul(KERN_AVX512, types[k], i % 2 ? 21 : 32, 2048, small[i],
                        &r); /* padded / overlapped tiles */
    }
    const char *b = getenv("RL_KERN_BENCH");
    if (b && !strcmp(b, "mm")) {
        printf("one thread, 256 x 2048 weights, one call below 64 rows (an expert), 16-row blocks from 64 "
               "(dense):\n"
               "GMAC/s AMX / 512-bit core\n");
        static const int Ts[] = {8, 12, 16, 24, 32, 48, 64, 128, 512};
        for (size_t k = 0; k < N_TYPES; k++) {
            printf("  %-8s", quant_get(types[k])->name);
            for (size_t j = 0; j < sizeof Ts / sizeof Ts[0]; j++) {
                const int T = Ts[j];
                double g[2];
                for (int v = 0; v < 2; v++) {
                    kern_cfg_set_amx(TK(), v ? KERN_AMX_OFF : KERN_AMX_ON);
                    bench_mm_one(types[k], T, T < 64 ? 256 : 16, &g[v], &r);
                }
                printf("  T=%d %.0f/%.0f", T, g[0], g[1]);
            }
            printf("\n");
        }
        kern_cfg_set_amx(TK(), KERN_AMX_ON);
    }
    return check_done("test_kern_amx");
}
