/* test_kern.c — the SIMD mat-vec kernels (src/kern*.c) against the scalar reference, at every
 * kernel level this CPU supports:
 *   - kern_quantize_act must be byte-identical to the activation type's scalar from_float
 *     (including all-zero blocks, +-amax ties and exact .5 rounding ties);
 *   - kern_matvec on random valid weights (odd row counts, several widths, NaN-poisoned output)
 *     must match quant_traits.vec_dot row by row. Tolerance, relative to M = sum_i |w_i a_i|
 *     over the dequantised row and activation: K and IQ kernels compute the same integer sums
 *     and the same float epilogue as the scalar code, so they should be exact; we allow 1e-6*M
 *     for safety. F32/F16 and the 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) sum
 *     floats in SIMD lanes in another order (and with FMA): each lane adds about n/8 terms, so
 *     |error| <= (n/8 + 16) * 2^-24 * M. Q4_1/Q5_1's min term m*s is summed in float as in scalar.
 * With RL_KERN_BENCH=1 it also prints mat-vec throughput (GB/s of weights) per type and level and
 * the batched kernels' speedup over per-row mat-vecs (RL_KERN_BENCH=mm: only the latter).
 * Run: make all && build/tests/test_kern
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "check.h"
#include "base/common.h"
#include "kern/kern.h"
#include "kern_bench.h"
#include "kern_mm_check.h"
#include "gguf/quant.h"
#include "quant_rand.h"

static const uint32_t types[] = {
    QT_IQ1_M,  QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_Q2_K,  QT_Q4_K,
    QT_Q5_K,   QT_Q6_K,    QT_Q8_0,   QT_F32,   QT_F16,     QT_BF16,  QT_Q3_K,  QT_IQ1_S,
    QT_IQ4_XS, QT_IQ4_NL,  QT_Q4_0,   QT_Q4_1,  QT_Q5_0,    QT_Q5_1,  QT_MXFP4,
};
#define N_TYPES (sizeof types / sizeof types[0])

static bool lane_summed(uint32_t t) {
    return t == QT_F32 || t == QT_F16 || t == QT_BF16 || t == QT_Q8_0 || t == QT_Q4_0 || t == QT_Q5_0 ||
           t == QT_IQ4_NL || t == QT_Q4_1 || t == QT_Q5_1 || t == QT_MXFP4;
}

static void test_quantize(int level, rl_rng *r) {
    const uint32_t acts[] = {QT_Q8_K, QT_Q8_0, QT_Q8_1, QT_F16, QT_BF16, QT_F32};
    const uint32_t wt_for[] = {QT_Q4_K, QT_Q8_0, QT_Q4_1, QT_F16, QT_BF16, QT_F32};
    const int64_t n = 4 * QK_K;
    float x[4 * QK_K];
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
        const quant_traits *ta = quant_get(acts[k]);
        for (int rep = 0; rep < 8; rep++) {
            fill_x(x, n, r);
            if (rep == 1) /* all-zero block */
                for (int i = 0; i < QK_K; i++) x[i] = 0.0f;
            if (rep == 2) {
                x[5] = 3.0f;
                x[9] = -3.0f;
                x[300] = -2.0f;
                x[301] = 2.0f;
            }             /* +-amax ties */
            if (rep == 3) /* amax 127 -> Q8_0 d = 1 exactly; k + 0.5 are rounding ties */
                for (int64_t i = 0; i < n; i++)
                    x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(i % 61) - 30) + 0.5f;
            const size_t sz = quant_row_size(acts[k], n);
            uint8_t *a = malloc(sz), *b = malloc(sz);
            memset(a, 0xAB, sz);
            memset(b, 0xCD, sz);
            ta->from_float(x, a, n);
            kern_quantize_act(TK(), wt_for[k], x, n, b);
            CHECK(memcmp(a, b, sz) == 0, "%s: quantize_act %s differs from scalar (rep %d)",
                  kern_level_name(level), ta->name, rep);
            free(a);
            free(b);
        }
    }
}

static void test_matvec(int level, uint32_t type, int64_t n_rows, int64_t n_cols, rl_rng *r) {
    const quant_traits *t = quant_get(type);
    const quant_traits *ta = quant_get((uint32_t)t->vec_dot_type);
    const size_t rb = quant_row_size(type, n_cols);
    uint8_t *W = malloc(rb * (size_t)(n_rows ? n_rows : 1));
    float *x = malloc((size_t)n_cols * sizeof(float)), *out = malloc((size_t)(n_rows + 1) * sizeof(float));
    float *wf = malloc((size_t)n_cols * sizeof(float)), *af = malloc((size_t)n_cols * sizeof(float));
    void *act = malloc(kern_act_size(type, n_cols));
    fill_random_blocks(type, W, (int64_t)(rb / t->type_size) * n_rows, r);
    fill_x(x, n_cols, r);
    kern_quantize_act(TK(), type, x, n_cols, act);
    ta->to_float(act, af, n_cols);
    check_poison(out, (size_t)n_rows + 1);
    kern_matvec(TK(), type, W, n_rows, n_cols, act, out);
    int bad = 0, exact = 0;
    for (int64_t row = 0; row < n_rows; row++) {
        const void *w = W + (size_t)row * rb;
        const double ref = t->vec_dot(n_cols, w, act);
        t->to_float(w, wf, n_cols);
        double mag = 0;
        for (int64_t i = 0; i < n_cols; i++) mag += fabs((double)wf[i] * af[i]);
        const double tol = lane_summed(type) ? ((double)n_cols / 8 + 16) * 0x1p-24 * mag : 1e-6 * mag;
        exact += out[row] == (float)ref;
        if (!(fabs(out[row] - ref) <= tol + 1e-30)) {
            if (bad++ < 3)
                fprintf(stderr, "  %s %s row %lld/%lld n=%lld: %.9g vs scalar %.9g (tol %.3g)\n",
                        kern_level_name(level), t->name, (long long)row, (long long)n_rows, (long long)n_cols,
                        out[row], ref, tol);
        }
    }
    CHECK(bad == 0, "%s %s: %d of %lld rows out of tolerance", kern_level_name(level), t->name, bad,
          (long long)n_rows);
    CHECK(isnan(out[n_rows]), "%s %s: wrote past n_rows", kern_level_name(level), t->name);
    if (!lane_summed(type))
        CHECK(exact == n_rows, "%s %s: only %d of %lld rows bit-identical to scalar", kern_level_name(level),
              t->name, exact, (long long)n_rows);
    free(W);
    free(x);
    free(out);
    free(wf);
    free(af);
    free(act);
}

/* GB/s of weight bytes for one type at one level: best of `reps` mat-vecs over `bytes` of rows.
 * Large matrices are filled with 4 MiB of random blocks repeated (the data do not matter to the
 * speed, the filling would dominate the run). */
static double bench_one(uint32_t type, int level, size_t bytes, int reps, rl_rng *r) {
    const int64_t n_cols = 2048;
    const quant_traits *t = quant_get(type);
    const size_t rb = quant_row_size(type, n_cols);
    const int64_t n_rows = (int64_t)(bytes / rb),
                  fill_rows = n_rows < (4 << 20) / (int64_t)rb ? n_rows : (4 << 20) / (int64_t)rb;
    uint8_t *W = rl_aligned_alloc(rb * (size_t)n_rows, "bench W");
    if (W) madvise(W, rb * (size_t)n_rows, MADV_HUGEPAGE); /* as the engine's weight copies (resident.h) */
    float *x = malloc((size_t)n_cols * sizeof(float)), *out = malloc((size_t)n_rows * sizeof(float));
    void *act = rl_aligned_alloc(kern_act_size(type, n_cols), "bench act");
    fill_random_blocks(type, W, (int64_t)(rb / t->type_size) * fill_rows, r);
    repeat_rows(W, rb, fill_rows, n_rows);
    fill_x(x, n_cols, r);
    kern_cfg_set_level(TK(), level);
    kern_quantize_act(TK(), type, x, n_cols, act);
    const double best = matvec_best(type, W, n_rows, n_cols, act, out, reps);
    free(W);
    free(x);
    free(out);
    free(act);
    return (double)rb * (double)n_rows / best / 1e9;
}

/* RL_KERN_BENCH=1: single-thread mat-vec throughput, 2048 columns; "hot" = 512 KiB of weights
 * (cache resident: kernel compute speed), "cold" = RL_KERN_BENCH_MIB MiB (default 512, more than
 * this machine's 300 MiB L3: streams from DRAM). RL_KERN_BENCH_TYPES=Q4_K,IQ1_M limits the types. */
static void bench(void) {
    rl_rng r;
    rl_rng_seed(&r, 99);
    const char *mib_env = getenv("RL_KERN_BENCH_MIB"), *types_env = getenv("RL_KERN_BENCH_TYPES");
    const size_t mib = mib_env && atoi(mib_env) > 0 ? (size_t)atoi(mib_env) : 512;
    printf("single-thread mat-vec, 2048 cols, GB/s of weight bytes (hot 512 KiB / cold %zu MiB), per "
           "CPU-second\n%-8s",
           mib, "type");
    for (int l = 0; l < KERN_NLEVELS; l++)
        if (kern_level_supported(l)) printf(" %15s", kern_level_name(l));
    printf("\n");
    for (size_t k = 0; k < N_TYPES; k++) {
        if (types_env && *types_env) {
            char want[64];
            snprintf(want, sizeof want, ",%s,", quant_name(types[k]));
            char list[256];
            snprintf(list, sizeof list, ",%s,", types_env);
            if (!strstr(list, want)) continue;
        }
        printf("%-8s", quant_name(types[k]));
        for (int l = 0; l < KERN_NLEVELS; l++) {
            if (!kern_level_supported(l)) continue;
            const double hot = bench_one(types[k], l, 512u << 10, l == 0 ? 3 : 50, &r);
            const double cold = l == 0 ? NAN : bench_one(types[k], l, mib << 20, 3, &r);
            printf(" %7.2f/%7.2f", hot, cold);
            fflush(stdout);
        }
        printf("\n");
    }
}

static void bench_mm(void) {
    rl_rng r;
    rl_rng_seed(&r, 77);
    if (TK()->level == KERN_AVX512 && getenv("RL_KERN_MM"))
        kern_cfg_set_mm512(TK(), !strcmp(getenv("RL_KERN_MM"), "512"));
    printf("batched kernel (level %s%s), 256 x 2048 weights in 16-row blocks: speedup over T mat-vecs, "
           "G multiply-adds per CPU-second\n%-8s %22s %22s %22s %22s %22s\n",
           kern_level_name(TK()->level), TK()->mm512 ? ", 512-bit core" : "", "type", "T=2", "T=4", "T=8",
           "T=64", "T=512");
    const char *types_env = getenv("RL_KERN_BENCH_TYPES"); /* as in bench() */
    for (size_t k = 0; k < N_TYPES; k++) {
        if (!kern_has_matmul(TK()->level, types[k])) continue;
        if (types_env && *types_env) {
            char want[64], list[256];
            snprintf(want, sizeof want, ",%s,", quant_name(types[k]));
            snprintf(list, sizeof list, ",%s,", types_env);
            if (!strstr(list, want)) continue;
        }
        printf("%-8s", quant_name(types[k]));
        for (int T = 2; T <= 512; T *= T >= 8 ? 8 : 2) {
            double g;
            const double sp = bench_mm_one(types[k], T, 16, &g, &r);
            printf("   %6.2fx %7.1f GMAC/s", sp, g);
            fflush(stdout);
        }
        printf("\n");
    }
}

int main(void) {
    const int initial = TK()->level;
    printf("test_kern: CPU best level %s\n", kern_level_name(initial));
    CHECK(kern_level_supported(KERN_SCALAR), "scalar always supported");
    CHECK(kern_act_type(QT_IQ2_XXS) == QT_Q8_K && kern_act_type(QT_Q8_0) == QT_Q8_0 &&
              kern_act_type(QT_F16) == QT_F16,
          "act types");
    CHECK(kern_act_type(QT_Q8_K) == -1 && kern_act_type(5) == -1,
          "no kernel for activation-only/unknown types");
    CHECK(kern_act_size(QT_IQ1_M, 2048) == 8 * 292, "act size");
    rl_rng r;
    rl_rng_seed(&r, 4242);
    for (int level = 0; level < KERN_NLEVELS; level++) {
        if (!kern_level_supported(level)) {
            printf("  level %s not supported by this CPU: skipped\n", kern_level_name(level));
            CHECK(kern_cfg_set_level(TK(), level) == -1, "setting an unsupported level fails");
            continue;
        }
        CHECK(kern_cfg_set_level(TK(), level) == 0 && TK()->level == level, "set level %s",
              kern_level_name(level));
        int n_simd = 0, n_mm = 0;
        for (size_t k = 0; k < N_TYPES; k++) {
            n_simd += kern_has_simd(level, types[k]);
            n_mm += kern_has_matmul(level, types[k]);
        }
        printf("  level %s: %d of %zu types have SIMD kernels, %d batched kernels\n", kern_level_name(level),
               n_simd, N_TYPES, n_mm);
        test_quantize(level, &r);
        for (size_t k = 0; k < N_TYPES; k++) {
            const quant_traits *t = quant_get(types[k]);
            const int64_t b = t->blck == 1 ? 1 : t->blck;
            const int64_t widths[] = {b == 1 ? 37 : b, 2048, b == 1 ? 4096 + 13 : 4096 + 3 * b};
            const int64_t rows[] = {1, 37, 3};
            for (int i = 0; i < 3; i++) test_matvec(level, types[k], rows[i], widths[i], &r);
            test_matvec(level, types[k], 0, widths[1], &r); /* zero rows: writes nothing */
            /* the 4-row mat-vecs: whole groups, each remainder (nr % 4 = 1..3 rows of the one-row
             * dot after them) and 1..7 blocks a row */
            for (int64_t nr = 4; nr <= 11; nr++)
                test_matvec(level, types[k], nr, b == 1 ? 29 + 8 * nr : (nr - 3) * b, &r);
            /* the AVX-512 level has three batched cores: 256-bit, 512-bit (kern_cfg.mm512) and AMX tiles
             * (kern_cfg_set_amx; here with the tile operations emulated, so every AVX-512 CPU checks the
             * digits, layouts and epilogue; tests/c/test_kern_amx.c runs the tiles where the CPU has
             * them): each must equal the mat-vec */
            for (int w = 0; w < (level == KERN_AVX512 ? 3 : 1); w++) {
                if (level == KERN_AVX512) {
                    CHECK(kern_cfg_set_mm512(TK(), w > 0) == 0 && TK()->mm512 == (w > 0), "mm512 %d", w);
                    CHECK(kern_cfg_set_amx(TK(), w == 2 ? KERN_AMX_EMUL : KERN_AMX_OFF) == 0, "amx %d", w);
                    /* the tiles from one activation row on, so the small batches below (padded to one
                     * tile) take them too */
                    CHECK(kern_cfg_set_amx_rows(TK(), w == 2 ? 1 : 0) == 0, "amx rows");
                }
                for (int T = 1; T <= 12; T++)
                    test_matmul(level, types[k], T % 2 ? 13 : 6, widths[T % 3], T, &r);
                test_matmul(level, types[k], 37, widths[1], 17, &r);
                test_matmul(level, types[k], 19, widths[2], 23, &r); /* odd rows per group, 3 tiles */
                test_matmul(level, types[k], 0, widths[1], 4, &r);
                if (w == 2) { /* whole tiles, an overlapped last tile, a partial row tile, two passes */
                    test_matmul(level, types[k], 16, widths[0], 64, &r);
                    test_matmul(level, types[k], 21, widths[1], 73, &r);
                    test_matmul(level, types[k], 5, widths[1], 100, &r);
                    test_matmul(level, types[k], 3, widths[0], 1030, &r); /* a second pass of 6 rows */
                }
            }
            if (level == KERN_AVX512)
                kern_cfg_set_mm512(TK(), false), kern_cfg_set_amx(TK(), KERN_AMX_OFF),
                    kern_cfg_set_amx_rows(TK(), 0);
        }
    }
    /* the IQ2_XXS / IQ2_XS / IQ3_S mat-vecs of the AVX-512 level: the AVX2 ones (AMD's default) and
     * the level's own (everyone else's), each forced through kern_opts.iq_mv: both bit-identical
     * (IQ3_XXS: the level's permute kernel either way, checked here too) */
    if (kern_level_supported(KERN_AVX512)) {
        const kern_cfg saved = *TK();
        for (int mv = 256; mv <= 512; mv += 256) {
            kern_opts o = kern_opts_default();
            o.iq_mv = mv;
            CHECK(kern_cfg_init(TK(), &o) == 0 && TK()->level == KERN_AVX512, "iq_mv %d", mv);
            const uint32_t iq[] = {QT_IQ2_XXS, QT_IQ2_XS, QT_IQ3_XXS, QT_IQ3_S};
            for (int k = 0; k < 4; k++)
                for (int64_t nr = 1; nr <= 9; nr += 4) test_matvec(KERN_AVX512, iq[k], nr, 2048, &r);
        }
        kern_opts o = kern_opts_default();
        o.iq_mv = 384;
        CHECK(kern_cfg_init(TK(), &o) == -1, "iq_mv 384 refused");
        *TK() = saved;
    }
    if (!kern_level_supported(KERN_AVX512)) {
        CHECK(kern_cfg_set_mm512(TK(), true) == -1 && !TK()->mm512, "no 512-bit core without AVX-512");
        CHECK(kern_cfg_set_amx(TK(), KERN_AMX_EMUL) == -1 && TK()->amx == KERN_AMX_OFF,
              "no emulated AMX without AVX-512");
        CHECK(kern_cfg_set_amx_rows(TK(), -1) == -1, "a negative AMX row threshold is refused");
    }
    if (!kern_amx_supported())
        CHECK(kern_cfg_set_amx(TK(), KERN_AMX_ON) == -1 && TK()->amx != KERN_AMX_ON,
              "no AMX tiles without AMX");
    printf("  AMX tiles %s\n", kern_amx_supported()
                                   ? "usable here (tests/c/test_kern_amx.c checks them)"
                                   : "not usable on this CPU: only the emulated kernel was checked");
    kern_cfg_set_level(TK(), initial);
    const char *bench_env = getenv("RL_KERN_BENCH");
    if (bench_env && *bench_env == '1') bench();
    if (bench_env && (*bench_env == '1' || !strcmp(bench_env, "mm"))) bench_mm();
    return check_done("test_kern");
}
