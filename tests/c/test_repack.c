/* test_repack.c — the lookup-free IQ layouts (src/gguf/quant_repack.h, src/kern/kern_x86_repack.h):
 *   - the premise: every grid byte of IQ2_XXS / IQ2_XS is 8, 25 or 43, every IQ1 grid byte -1, 0, 1;
 *   - repacking random valid IQ2_XXS / IQ2_XS rows into IQ2_LF and IQ1_M rows into IQ1_LF keeps
 *     to_float and the scalar vec_dot against Q8_K rows bit for bit (exact equality of the float
 *     bits: the integer sums and the float epilogue are the original type's);
 *   - at every kernel level this CPU supports, kern_matvec(TK(), IQ*_LF) equals the ORIGINAL type's
 *     scalar vec_dot bit for bit (1, 3, 6, 13, 37 rows; 1 to 19 super-blocks per row; outputs
 *     NaN-poisoned), and kern_matmul equals it bit for bit for T = 1..12 and 17 (ldo > rows: the
 *     padding stays poisoned) — at the AVX-512 level also on the AMX tiles, emulated (every AVX-512
 *     CPU) and real (where the CPU has them), from one activation row on;
 *   - extreme blocks (every weight +-43 / +-9, every scale 15, activations -128 / 127): no saturation,
 *     kernels equal the scalar reference;
 *   - internal type ids are refused in files (gguf.c), and quant_repack_bytes is the layout's.
 * RL_KERN_BENCH=1 prints the mat-vec speed of IQ2_XXS / IQ2_XS / IQ1_M against their repacked form (GB/s of
 * bytes read and G weights/s, hot = 512 KiB, cold = RL_KERN_BENCH_MIB MiB, per CPU-second, best of
 * the runs), the repack's own speed (MB of source per CPU-second) and the batched kernel's speed at
 * T = 2, 8, 64.
 * Run: make all && build/tests/test_repack
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "base/common.h"
#include "kern/kern.h"
#include "kern_bench.h"
#include "gguf/quant.h"
#include "quant_rand.h"
#include "gguf/quant_repack.h"
#include "gguf/quant_tables.h"

static const uint32_t srcs[] = {QT_IQ2_XXS, QT_IQ2_XS, QT_IQ1_M};

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_grids(void) {
    int bad = 0;
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 8; j++) {
            const int g = (int)(uint8_t)(iq2xxs_grid[i] >> (8 * j));
            bad += g != 8 && g != 25 && g != 43;
        }
    for (int i = 0; i < 512; i++)
        for (int j = 0; j < 8; j++) {
            const int g = (int)(uint8_t)(iq2xs_grid[i] >> (8 * j));
            bad += g != 8 && g != 25 && g != 43;
        }
    CHECK(bad == 0, "%d grid bytes outside {8, 25, 43}", bad);
    bad = 0;
    for (int i = 0; i < 2048; i++)
        for (int j = 0; j < 8; j++) {
            const int g = (int)(int8_t)(iq1s_grid[i] >> (8 * j));
            bad += g < -1 || g > 1;
        }
    CHECK(bad == 0, "%d IQ1 grid bytes outside {-1, 0, 1}", bad);
}

/* One matrix of n_rows x nb super-blocks of type src: repack, compare with the original. */
static void test_rows(uint32_t src, int64_t n_rows, int64_t nb, rl_rng *r) {
    const int64_t n = nb * QK_K;
    const uint32_t lf = src == QT_IQ1_M ? QT_IQ1_LF : QT_IQ2_LF;
    const quant_traits *ts = quant_get(src), *tl = quant_get(lf), *tq = quant_get(QT_Q8_K);
    const size_t rbs = quant_row_size(src, n), rbl = quant_row_size(lf, n), ab = quant_row_size(QT_Q8_K, n);
    CHECK(quant_repack_type(src) == (int)lf && rbl == (size_t)nb * 138, "row size");
    CHECK(quant_repack_bytes(src, n_rows, n) == (uint64_t)rbl * (uint64_t)n_rows, "repack bytes");
    uint8_t *W = malloc(rbs * (size_t)n_rows + 1), *L = malloc(rbl * (size_t)n_rows + 1);
    fill_random_blocks(src, W, nb * n_rows, r);
    memset(L, 0x5a, rbl * (size_t)n_rows);
    quant_repack_rows(src, W, L, n_rows, n);

    /* to_float: bit-identical */
    float *f0 = malloc(sizeof(float) * (size_t)n), *f1 = malloc(sizeof(float) * (size_t)n);
    int fbad = 0;
    for (int64_t row = 0; row < n_rows; row++) {
        check_poison(f1, (size_t)n);
        ts->to_float(W + (size_t)row * rbs, f0, n);
        tl->to_float(L + (size_t)row * rbl, f1, n);
        for (int64_t i = 0; i < n; i++) fbad += fbits(f0[i]) != fbits(f1[i]);
    }
    CHECK(fbad == 0, "%s: %d dequantised values differ after repacking", quant_name(src), fbad);

    /* T activation rows (T = 17 covers the batched tails) */
    const int T = 17;
    uint8_t *act = malloc(ab * T);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int t = 0; t < T; t++) {
        fill_x(x, n, r);
        if (t == 1) /* activations at the Q8_K extremes: the max-abs value quantises to -128 */
            for (int64_t i = 0; i < n; i++) x[i] = (i % 3 == 0) ? -100.0f : (float)(i % 5);
        tq->from_float(x, act + (size_t)t * ab, n);
    }
    /* scalar: repacked vec_dot == original vec_dot, bit for bit */
    float *ref = malloc(sizeof(float) * (size_t)(n_rows * T + 1));
    int dbad = 0;
    for (int t = 0; t < T; t++)
        for (int64_t row = 0; row < n_rows; row++) {
            const float a = ts->vec_dot(n, W + (size_t)row * rbs, act + (size_t)t * ab);
            const float b = tl->vec_dot(n, L + (size_t)row * rbl, act + (size_t)t * ab);
            ref[t * n_rows + row] = a;
            dbad += fbits(a) != fbits(b);
        }
    CHECK(dbad == 0, "%s: %d scalar %s dots differ from the original", quant_name(src), dbad, quant_name(lf));

    /* kernels at every supported level */
    float *out = malloc(sizeof(float) * (size_t)(n_rows * T + 1)),
          *mm = malloc(sizeof(float) * (size_t)((n_rows + 3) * T + 1));
    for (int level = 0; level < KERN_NLEVELS; level++) {
        if (!kern_level_supported(level)) continue;
        kern_cfg_set_level(TK(), level);
        int mbad = 0;
        for (int t = 0; t < T; t++) {
            check_poison(out, (size_t)n_rows);
            kern_matvec(TK(), lf, L, n_rows, n, act + (size_t)t * ab, out);
            for (int64_t row = 0; row < n_rows; row++)
                mbad += fbits(out[row]) != fbits(ref[t * n_rows + row]);
        }
        CHECK(mbad == 0, "%s level %s rows %lld nb %lld: %d mat-vec values differ from the original vec_dot",
              quant_name(src), kern_level_name(level), (long long)n_rows, (long long)nb, mbad);
        const int64_t ldo = n_rows + 3;
        /* the AVX-512 level's batched cores: 256-bit, then the AMX tiles emulated and, where the CPU
         * has them, real, from one activation row on (small batches padded to one tile, 17 rows an
         * overlapped last tile) */
        static const char *const amx_name[] = {"off", "on", "emulated"};
        const int amx0 = TK()->amx;
        for (int amx = KERN_AMX_OFF; amx <= KERN_AMX_EMUL; amx++) {
            if (amx != KERN_AMX_OFF &&
                (level != KERN_AVX512 || (amx == KERN_AMX_ON && !kern_amx_supported())))
                continue;
            if (level == KERN_AVX512) {
                CHECK(kern_cfg_set_amx(TK(), amx) == 0 &&
                          kern_cfg_set_amx_rows(TK(), amx == KERN_AMX_OFF ? 0 : 1) == 0,
                      "amx %s", amx_name[amx]);
            }
            for (int TT = 1; TT <= T; TT += TT == 12 ? 5 : 1) {
                check_poison(mm, (size_t)(ldo * TT));
                kern_matmul(TK(), lf, L, n_rows, n, act, TT, mm, ldo);
                int bbad = 0, pad = 0;
                for (int t = 0; t < TT; t++) {
                    for (int64_t row = 0; row < n_rows; row++)
                        bbad += fbits(mm[t * ldo + row]) != fbits(ref[t * n_rows + row]);
                    if (t + 1 < TT)
                        for (int64_t row = n_rows; row < ldo; row++) pad += !isnan(mm[t * ldo + row]);
                }
                CHECK(bbad == 0 && pad == 0,
                      "%s level %s amx %s T %d rows %lld: %d batched values differ, %d padding written",
                      quant_name(src), kern_level_name(level), amx_name[amx], TT, (long long)n_rows, bbad,
                      pad);
            }
        }
        if (level == KERN_AVX512) kern_cfg_set_amx(TK(), amx0), kern_cfg_set_amx_rows(TK(), 0);
    }
    free(W);
    free(L);
    free(f0);
    free(f1);
    free(act);
    free(x);
    free(ref);
    free(out);
    free(mm);
}

/* Hand-built extreme IQ2_LF blocks against the scalar reference and an int64 oracle. */
static void test_extremes(uint32_t lf, rl_rng *r) {
    enum { NB = 4, ROWS = 5 };
    /* the largest magnitudes: IQ2_LF codes 2 / 6 (+-43), IQ1_LF codes 2 / 4 (+9 / -9) */
    const uint8_t hi = 0x22, lo = lf == QT_IQ2_LF ? 0x66 : 0x44;
    const int64_t n = NB * QK_K;
    blk_iq2_lf *L = malloc(sizeof(blk_iq2_lf) * NB * ROWS);
    for (int k = 0; k < NB * ROWS; k++) {
        L[k].d = rl_fp32_to_fp16(0.0625f);
        memset(L[k].scales, 0xff, 8);
        for (int j = 0; j < 128; j++)
            L[k].qs[j] = (k % 3 == 0) ? hi : (k % 3 == 1) ? lo : (uint8_t)rl_rng_u64(r) & 0x77;
    }
    const size_t ab = quant_row_size(QT_Q8_K, n);
    uint8_t *act = malloc(ab);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (i % 2) ? -1.0f : 0.999f; /* -1 -> -128 */
    quant_get(QT_Q8_K)->from_float(x, act, n);
    float ref[ROWS], out[ROWS];
    int obad = 0;
    for (int row = 0; row < ROWS; row++) {
        ref[row] = quant_get(lf)->vec_dot(n, L + row * NB, act);
        /* oracle: dequantised weights (exact here: d*(0.5+15)*0.25 * v) times the Q8_K values in double */
        double s = 0;
        float w[NB * QK_K], a[NB * QK_K];
        quant_get(lf)->to_float(L + row * NB, w, n);
        quant_get(QT_Q8_K)->to_float(act, a, n);
        for (int64_t i = 0; i < n; i++) s += (double)w[i] * a[i];
        obad += fabs(s - ref[row]) > 1e-6 * fabs(s) + 1e-3;
    }
    CHECK(obad == 0, "extreme blocks: scalar %s dot differs from the dequantised oracle", quant_name(lf));
    for (int level = 1; level < KERN_NLEVELS; level++) {
        if (!kern_level_supported(level)) continue;
        kern_cfg_set_level(TK(), level);
        CHECK(kern_has_simd(level, lf) && kern_has_matmul(level, lf), "level %s has %s kernels",
              kern_level_name(level), quant_name(lf));
        check_poison(out, ROWS);
        kern_matvec(TK(), lf, L, ROWS, n, act, out);
        int bad = 0;
        for (int row = 0; row < ROWS; row++) bad += fbits(out[row]) != fbits(ref[row]);
        CHECK(bad == 0, "extreme blocks %s level %s: %d rows differ", quant_name(lf), kern_level_name(level),
              bad);
    }
    free(L);
    free(act);
    free(x);
}

/* ---- RL_KERN_BENCH=1 --------------------------------------------------------------------------- */

/* seconds per mat-vec (best of reps) over `bytes` of type-`src` rows, run as `type` (src or its
 * repacked type); 4 MiB of random blocks repeated */
static double bench_one(uint32_t src, bool repacked, size_t bytes, int reps, int64_t *n_weights, rl_rng *r) {
    const int64_t n_cols = 2048;
    const uint32_t type = repacked ? (uint32_t)quant_repack_type(src) : src;
    const size_t rbs = quant_row_size(src, n_cols), rb = quant_row_size(type, n_cols);
    const int64_t n_rows = (int64_t)(bytes / rb),
                  fill = n_rows < (4 << 20) / (int64_t)rb ? n_rows : (4 << 20) / (int64_t)rb;
    uint8_t *S = malloc(rbs * (size_t)fill), *W = rl_aligned_alloc(rb * (size_t)n_rows, "bench W");
    fill_random_blocks(src, S, (int64_t)(n_cols / QK_K) * fill, r);
    if (repacked) quant_repack_rows(src, S, W, fill, n_cols);
    else memcpy(W, S, rbs * (size_t)fill);
    repeat_rows(W, rb, fill, n_rows);
    float *x = malloc(sizeof(float) * n_cols), *out = malloc(sizeof(float) * (size_t)n_rows);
    void *act = rl_aligned_alloc(kern_act_size(type, n_cols), "bench act");
    fill_x(x, n_cols, r);
    kern_quantize_act(TK(), type, x, n_cols, act);
    const double best = matvec_best(type, W, n_rows, n_cols, act, out, reps);
    *n_weights = n_rows * n_cols;
    free(S);
    free(W);
    free(x);
    free(out);
    free(act);
    return best;
}

static void bench(void) {
    rl_rng r;
    rl_rng_seed(&r, 99);
    const char *mib_env = getenv("RL_KERN_BENCH_MIB");
    const size_t mib = mib_env && atoi(mib_env) > 0 ? (size_t)atoi(mib_env) : 512;
    printf("single-thread mat-vec (level %s), 2048 cols, hot 512 KiB / cold %zu MiB of weight bytes, per "
           "CPU-second\n"
           "%-9s %-8s %17s %17s %17s %17s\n",
           kern_level_name(TK()->level), mib, "source", "layout", "hot GB/s", "hot Gweights/s", "cold GB/s",
           "cold Gweights/s");
    for (size_t k = 0; k < sizeof srcs / sizeof srcs[0]; k++)
        for (int rp = 0; rp < 2; rp++) {
            int64_t nw;
            const uint32_t type = rp ? (uint32_t)quant_repack_type(srcs[k]) : srcs[k];
            const double rb = (double)quant_row_size(type, 2048) / 2048;
            const double hot = bench_one(srcs[k], rp, 512u << 10, 50, &nw, &r), hw = (double)nw / hot / 1e9;
            const double cold = bench_one(srcs[k], rp, mib << 20, 3, &nw, &r), cw = (double)nw / cold / 1e9;
            printf("%-9s %-8s %17.2f %17.2f %17.2f %17.2f\n", quant_name(srcs[k]), quant_name(type), hw * rb,
                   hw, cw * rb, cw);
            fflush(stdout);
        }
    /* the repack itself (load time of --iq-repack): MB of source per CPU-second, 64 MiB of rows */
    printf("repack (quant_repack_rows), 64 MiB of source rows, MB of source per CPU-second:");
    for (size_t k = 0; k < sizeof srcs / sizeof srcs[0]; k++) {
        const int64_t nc = 2048;
        const size_t rbs = quant_row_size(srcs[k], nc),
                     rbl = quant_row_size((uint32_t)quant_repack_type(srcs[k]), nc);
        const int64_t nr = (int64_t)((64u << 20) / rbs);
        uint8_t *S = malloc(rbs * (size_t)nr), *D = malloc(rbl * (size_t)nr);
        fill_random_blocks(srcs[k], S, nr * nc / QK_K, &r);
        memset(D, 0, rbl * (size_t)nr);
        double best = 1e30;
        for (int it = 0; it < 3; it++) {
            const double t0 = cpu_now();
            quant_repack_rows(srcs[k], S, D, nr, nc);
            const double dt = cpu_now() - t0;
            best = dt < best ? dt : best;
        }
        printf(" %s %.0f", quant_name(srcs[k]), (double)rbs * (double)nr / best / 1e6);
        free(S);
        free(D);
    }
    printf("\n");
    /* batched: 256 x 2048 weights, T activation rows, G multiply-adds per CPU-second */
    printf("batched kernel, 256 x 2048 weights in 16-row blocks, G multiply-adds per CPU-second\n%-9s %-8s "
           "%10s %10s %10s\n",
           "source", "layout", "T=2", "T=8", "T=64");
    for (size_t k = 0; k < sizeof srcs / sizeof srcs[0]; k++)
        for (int rp = 0; rp < 2; rp++) {
            const uint32_t type = rp ? (uint32_t)quant_repack_type(srcs[k]) : srcs[k];
            const int64_t nc = 2048, nr = 256;
            const size_t rbs = quant_row_size(srcs[k], nc), rb = quant_row_size(type, nc),
                         ab = kern_act_size(type, nc);
            uint8_t *S = malloc(rbs * nr), *W = rl_aligned_alloc(rb * nr, "W"),
                    *act = rl_aligned_alloc(ab * 64, "act");
            float *x = malloc(sizeof(float) * nc), *out = malloc(sizeof(float) * nr * 64);
            fill_random_blocks(srcs[k], S, nr * nc / QK_K, &r);
            if (rp) quant_repack_rows(srcs[k], S, W, nr, nc);
            else memcpy(W, S, rbs * nr);
            for (int t = 0; t < 64; t++) {
                fill_x(x, nc, &r);
                kern_quantize_act(TK(), type, x, nc, act + (size_t)t * ab);
            }
            printf("%-9s %-8s", quant_name(srcs[k]), quant_name(type));
            for (int T = 2; T <= 64; T *= T == 2 ? 4 : 8) {
                double best = 1e30;
                for (int it = 0; it < (T == 64 ? 5 : 20); it++) {
                    const double t0 = cpu_now();
                    for (int64_t r0 = 0; r0 < nr; r0 += 16)
                        kern_matmul(TK(), type, W + (size_t)r0 * rb, 16, nc, act, T, out + r0, nr);
                    const double dt = cpu_now() - t0;
                    best = dt < best ? dt : best;
                }
                printf(" %10.1f", (double)nr * nc * T / best / 1e9);
            }
            printf("\n");
            free(S);
            free(W);
            free(act);
            free(x);
            free(out);
        }
}

int main(void) {
    const int initial = TK()->level;
    printf("test_repack: CPU best level %s\n", kern_level_name(initial));
    rl_rng r;
    rl_rng_seed(&r, 1717);
    test_grids();
    CHECK(quant_is_internal(QT_IQ2_LF) && !quant_is_internal(QT_IQ1_M) && quant_get(QT_IQ2_LF) &&
              quant_get(QT_IQ2_LF)->vec_dot_type == QT_Q8_K && kern_act_type(QT_IQ2_LF) == QT_Q8_K,
          "IQ2_LF is an internal type with a Q8_K vec_dot");
    CHECK(quant_is_internal(QT_IQ1_LF) && quant_get(QT_IQ1_LF) && kern_act_type(QT_IQ1_LF) == QT_Q8_K,
          "IQ1_LF");
    CHECK(quant_repack_type(QT_Q4_K) == -1 && quant_repack_bytes(QT_Q4_K, 4, 256) == 0, "no repack of Q4_K");
    const int64_t rows[] = {1, 3, 6, 13, 37}, nbs[] = {1, 2, 8, 19, 8};
    for (size_t k = 0; k < sizeof srcs / sizeof srcs[0]; k++)
        for (int i = 0; i < 5; i++) test_rows(srcs[k], rows[i], nbs[i], &r);
    test_extremes(QT_IQ2_LF, &r);
    test_extremes(QT_IQ1_LF, &r);
    kern_cfg_set_level(TK(), initial);
    const char *b = getenv("RL_KERN_BENCH");
    if (b && *b == '1') bench();
    return check_done("test_repack");
}
