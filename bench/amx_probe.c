/* amx_probe.c — can this process use Intel AMX (int8 tiles), and how fast is it next to AVX-512
 * VNNI? A probe for issue 17's prompt path (not a test: it prints what it finds and exits 0 when
 * AMX works, 3 when the CPU or the kernel refuses it).
 *
 * Steps: CPUID leaf 7 (AMX-TILE, AMX-INT8), the Linux permission request for the tile data state
 * (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18; a sandbox kernel may refuse it), one
 * 16 x 64 by 64 x 16 TDPBUSD checked against the scalar sum, then the rate of TDPBUSD and of
 * 512-bit VPDPBUSD in int8 MACs per second on one thread (independent accumulators, operands in
 * registers / L1: the instruction ceiling, not a kernel).
 *
 * build: cc -std=c11 -O2 -D_GNU_SOURCE -mamx-tile -mamx-int8 -mavx512f -mavx512vnni -o amx_probe bench/amx_probe.c
 */
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette, start_row, pad[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        printf("amx: cpuid leaf 7 missing\n");
        return 3;
    }
    const int tile = (d >> 24) & 1, i8 = (d >> 25) & 1, bf16 = (d >> 22) & 1;
    printf("cpuid: amx-tile %d amx-int8 %d amx-bf16 %d avx512-vnni %d\n", tile, i8, bf16, (c >> 11) & 1);
    if (!tile || !i8) return 3;
    long r = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    printf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) = %ld\n", r);
    if (r != 0) return 3;

    static tilecfg cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);

    /* C[m][n] = sum_k A[m][k] * B[k][n]: A 16 x 64 u8, B 64 x 16 s8 in the VNNI layout
     * Bv[k/4][n][k%4] */
    static uint8_t A[16][64] __attribute__((aligned(64)));
    static int8_t B[64][16], Bv[16][64] __attribute__((aligned(64)));
    static int32_t C[16][16] __attribute__((aligned(64)));
    uint32_t s = 12345;
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 64; k++) s = s * 1664525u + 1013904223u, A[m][k] = (uint8_t)(s >> 24);
    for (int k = 0; k < 64; k++)
        for (int n = 0; n < 16; n++) s = s * 1664525u + 1013904223u, B[k][n] = (int8_t)(s >> 24);
    for (int k = 0; k < 64; k++)
        for (int n = 0; n < 16; n++) Bv[k / 4][n * 4 + k % 4] = B[k][n];
    _tile_zero(0);
    _tile_loadd(1, A, 64);
    _tile_loadd(2, Bv, 64);
    _tile_dpbusd(0, 1, 2);
    _tile_stored(0, C, 64);
    int bad = 0;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t ref = 0;
            for (int k = 0; k < 64; k++) ref += (int32_t)A[m][k] * B[k][n];
            bad += ref != C[m][n];
        }
    printf("tdpbusd 16x64x16: %s (%d of 256 wrong)\n", bad ? "WRONG" : "exact", bad);

    const long N = 2000000;
    double t0 = now();
    for (long i = 0; i < N; i++) {
        _tile_dpbusd(0, 1, 2);
        _tile_dpbusd(3, 1, 2);
        _tile_dpbusd(4, 1, 2);
        _tile_dpbusd(5, 1, 2);
    }
    double t1 = now();
    _tile_stored(0, C, 64);
    const double amx = 4.0 * N * 16 * 16 * 64 / (t1 - t0);
    _tile_release();

    __m512i acc[8], x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
    for (int k = 0; k < 8; k++) acc[k] = _mm512_set1_epi32(C[0][k]);
    t0 = now();
    for (long i = 0; i < 8 * N; i++) {
        for (int k = 0; k < 8; k++) acc[k] = _mm512_dpbusd_epi32(acc[k], x, y);
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]), "+v"(acc[5]), "+v"(acc[6]), "+v"(acc[7]));
    }
    t1 = now();
    const double vnni = 8.0 * 8 * N * 64 / (t1 - t0);
    int32_t sink[16];
    _mm512_storeu_si512(sink, acc[7]);
    printf("one thread: tdpbusd %.0f GMAC/s, vpdpbusd zmm %.0f GMAC/s (x%.1f) [%d]\n", amx * 1e-9, vnni * 1e-9, amx / vnni,
           sink[0] & 1);
    return bad ? 1 : 0;
}
