/* kern.c — CPUID dispatch for the mat-vec kernels (see kern.h) and the scalar generic level,
 * which simply calls the quant traits (vec_dot per row, from_float for activations).
 * The per-level tables are built once: scalar entries first, then each higher level copies the
 * level below and overrides what its ISA file implements.
 */
#include "kern/kern.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "base/common.h"
#include "gguf/quant_tables.h"

/* The CPU's facts and the per-level tables as filled: written once under pthread_once (init) from
 * CPUID and the ISA files, read-only afterwards. A configuration (kern_cfg) copies the table of its
 * level and applies its switches to the copy, so these are never modified after init and any number
 * of configurations (one per engine) coexist. */
static kern_table tables[KERN_NLEVELS];
static bool has_simd[KERN_NLEVELS][QT_COUNT];
static bool supported[KERN_NLEVELS];
static bool amx_ok;  /* CPU + OS + permission (detect) */
static bool cpu_amd; /* CPUID vendor AuthenticAMD (detect): picks the IQ2 mat-vecs, see kern_cfg_init */
static kern_cfg default_cfg; /* kern_opts_default() applied (kern_cfg_default) */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int cfg_init(kern_cfg *c, const kern_opts *o);

static void scalar_matvec_impl(uint32_t wtype, const void *W, size_t row_bytes, int64_t n_rows,
                               int64_t n_cols, const void *act, float *out) {
    const quant_traits *t = quant_get(wtype);
    for (int64_t r = 0; r < n_rows; r++)
        out[r] = t->vec_dot(n_cols, (const uint8_t *)W + (size_t)r * row_bytes, act);
}

/* The table stores plain function pointers, so the scalar level needs one per type: generate
 * them with a macro over the type ids that have a vec_dot. */
#define SCALAR_MV(ID)                                                                                        \
    static void scalar_mv_##ID(const void *W, size_t rb, int64_t nr, int64_t nc, const void *a, float *o) {  \
        scalar_matvec_impl(ID, W, rb, nr, nc, a, o);                                                         \
    }
// clang-format off (a list of macro expansions: one per line)
SCALAR_MV(0)
SCALAR_MV(1)
SCALAR_MV(2)
SCALAR_MV(3)
SCALAR_MV(6)
SCALAR_MV(7)
SCALAR_MV(8)
SCALAR_MV(10)
SCALAR_MV(11)
SCALAR_MV(12)
SCALAR_MV(13)
SCALAR_MV(14)
SCALAR_MV(16)
SCALAR_MV(17)
SCALAR_MV(18)
SCALAR_MV(19)
SCALAR_MV(20)
SCALAR_MV(21)
SCALAR_MV(22)
SCALAR_MV(23)
SCALAR_MV(29)
SCALAR_MV(30)
SCALAR_MV(39)
SCALAR_MV(48)
SCALAR_MV(49)
// clang-format on
/* 39: QT_MXFP4; 48, 49: QT_IQ2_LF, QT_IQ1_LF */
#define SET_MV(ID) t->matvec[ID] = scalar_mv_##ID

static void fill_scalar(kern_table *t) {
    SET_MV(0);
    SET_MV(1);
    SET_MV(2);
    SET_MV(3);
    SET_MV(6);
    SET_MV(7);
    SET_MV(8);
    SET_MV(10);
    SET_MV(11);
    SET_MV(12);
    SET_MV(13);
    SET_MV(14);
    SET_MV(16);
    SET_MV(17);
    SET_MV(18);
    SET_MV(19);
    SET_MV(20);
    SET_MV(21);
    SET_MV(22);
    SET_MV(23);
    SET_MV(29);
    SET_MV(30);
    SET_MV(39);
    SET_MV(48);
    SET_MV(49);
    for (uint32_t ty = 0; ty < QT_COUNT; ty++) {
        const quant_traits *q = quant_get(ty);
        if (q && q->from_float) t->quant[ty] = q->from_float;
        /* every type with a vec_dot must have a scalar mat-vec above */
        RL_ASSERT(!q || !q->vec_dot || t->matvec[ty]);
    }
}

/* CPU + OS support from CPUID directly (GCC's and clang's __builtin_cpu_supports differ in the
 * feature names they accept, e.g. clang lacks "f16c"). XGETBV checks that the OS saves the
 * YMM (and for AVX-512 the ZMM/opmask) state. */
static void detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) cpu_amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx) return;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 0x6) != 0x6) return;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    const bool avx2 = b & (1u << 5), f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
               vl = b & (1u << 31), vnni = c & (1u << 11);
    supported[KERN_AVX2] = avx2 && fma && f16c;
    supported[KERN_AVX512] = supported[KERN_AVX2] && (xlo & 0xe0) == 0xe0 && f && dq && bw && vl && vnni;
#if defined(__linux__) && defined(__x86_64__)
    /* AMX-TILE (edx 24) + AMX-INT8 (edx 25), the OS enables XTILECFG/XTILEDATA (XCR0 bits 17, 18), and
     * Linux grants this process the tile data state (ARCH_REQ_XCOMP_PERM = 0x1023, XTILEDATA = 18):
     * without the grant the first tile instruction faults */
    const bool tiles = (d >> 24 & 1) && (d >> 25 & 1) && (xlo & 0x60000) == 0x60000;
    amx_ok = supported[KERN_AVX512] && tiles && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
#endif
}

/* The AVX-512 level's batched kernels of configuration c: the 256-bit core as filled, the 512-bit
 * one (mm512), the AMX tiles or their emulation (amx) where the level has them. */
static void select_mm(kern_cfg *c) {
    if (c->level != KERN_AVX512) return;
    const kern_table *base = &tables[KERN_AVX512];
    kern_table *t = &c->t;
    for (int ty = 0; ty < QT_COUNT; ty++) {
        kern_matmul_fn m = base->matmul[ty];
        if (m && c->mm512 && t->matmul_w[ty]) m = t->matmul_w[ty];
        /* below amx_from activation rows the tiles' per-call preparation of the weights costs more
         * than they save: the core chosen above takes those batches */
        t->matmul_lo[ty] = m;
        t->amx_from[ty] = 0;
        kern_matmul_fn x = c->amx == KERN_AMX_ON     ? t->matmul_x[ty]
                           : c->amx == KERN_AMX_EMUL ? t->matmul_xe[ty]
                                                     : NULL;
        if (m && x) {
            t->amx_from[ty] = c->amx_rows > 0 ? c->amx_rows : t->amx_min[ty];
            m = x;
        }
        t->matmul[ty] = m;
    }
}

uint64_t kern_iq1_fold[4096], kern_iq1_fold_nq[4096];

/* kern_iq1_fold[(index << 1) | neg]: the bytes 8*grid + (neg ? -1 : +1) + 9 of IQ1 grid entry index
 * (kern_x86_iq.h says why); kern_iq1_fold_nq the same re-indexed by the raw qs byte and qh nibble
 * (kern_x86_512.h). */
static void iq1_tables_init(void) {
    for (int i = 0; i < 4096; i++) {
        const uint64_t g = iq1s_grid[i >> 1];
        uint64_t v = 0;
        for (int j = 0; j < 8; j++)
            v |= (uint64_t)(8 * (int)(int8_t)(g >> (8 * j)) + ((i & 1) ? -1 : 1) + 9) << (8 * j);
        kern_iq1_fold[i] = v;
    }
    for (int k = 0; k < 4096; k++)
        kern_iq1_fold_nq[k] = kern_iq1_fold[((k & 255) << 1) | ((k >> 8) & 7) << 9 | (k >> 11)];
}

static void init_tables(void) {
    detect();
    iq1_tables_init();
    supported[KERN_SCALAR] = true;
    fill_scalar(&tables[KERN_SCALAR]);
    /* The fill functions are compiled with their ISA's flags: the compiler may use those
     * instructions even in them, so only call them when the CPU has the ISA. */
    tables[KERN_AVX2] = tables[KERN_SCALAR];
    if (supported[KERN_AVX2]) kern_fill_avx2(&tables[KERN_AVX2]);
    tables[KERN_AVX512] = tables[KERN_AVX2];
    if (supported[KERN_AVX512]) kern_fill_avx512(&tables[KERN_AVX512]);
    for (int l = 1; l < KERN_NLEVELS; l++)
        for (int ty = 0; ty < QT_COUNT; ty++) {
            has_simd[l][ty] = tables[l].matvec[ty] != tables[KERN_SCALAR].matvec[ty];
            /* a matmul inherited from the level below next to this level's own matvec could
             * round differently (float-lane types): fall back to the matvec loop */
            if (tables[l].matvec[ty] != tables[l - 1].matvec[ty] &&
                tables[l].matmul[ty] == tables[l - 1].matmul[ty])
                tables[l].matmul[ty] = NULL;
        }

    const kern_opts o = kern_opts_default();
    cfg_init(&default_cfg, &o);
}

kern_opts kern_opts_default(void) {
    return (kern_opts){.level = KERN_NLEVELS - 1, .mm512 = true, .amx = true, .amx_rows = 0, .iq_mv = 0};
}

/* The IQ2_XXS / IQ2_XS / IQ3_S mat-vecs at the AVX-512 level: the 4-row 512-bit kernels gather the
 * grid entries (vpgatherdq / vpgatherdd), which Intel runs fast and Zen 4 slowly (measurements:
 * docs/TUNING.md, bench/results/kernels-2026-11-30.md; IQ3_S on a Zen 4 VM, 2026-12-07: 4.26 (AVX2)
 * vs 3.59 GB/s), so AMD CPUs take the AVX2 ones unless iq_mv says otherwise. (IQ3_XXS's 512-bit
 * kernel looks its grid up with permutes, no gather: every CPU keeps it.)
 * Same results either way: both equal the scalar vec_dot bit for bit. The batched kernels are the
 * level's own in both cases. */
static void select_iq_mv(kern_cfg *c) {
    if (c->level != KERN_AVX512) return;
    const bool mv256 = c->iq_mv ? c->iq_mv == 256 : cpu_amd;
    const kern_table *src = &tables[mv256 ? KERN_AVX2 : KERN_AVX512];
    c->t.matvec[QT_IQ2_XXS] = src->matvec[QT_IQ2_XXS];
    c->t.matvec[QT_IQ2_XS] = src->matvec[QT_IQ2_XS];
    c->t.matvec[QT_IQ3_S] = src->matvec[QT_IQ3_S];
}

int kern_cfg_init(kern_cfg *c, const kern_opts *o) {
    pthread_once(&once, init_tables);
    const kern_opts d = kern_opts_default();
    return cfg_init(c, o ? o : &d);
}

/* kern_cfg_init once the tables exist (init_tables builds the default configuration with it). */
static int cfg_init(kern_cfg *c, const kern_opts *o) {
    if (o->amx_rows < 0)
        return rl_seterr("kernel options: %d AMX rows (0 for the per-type thresholds)", o->amx_rows);
    if (o->iq_mv && o->iq_mv != 256 && o->iq_mv != 512)
        return rl_seterr("kernel options: IQ mat-vec width %d (256 or 512, 0 by CPU vendor)", o->iq_mv);
    int level = o->level < 0 ? 0 : o->level >= KERN_NLEVELS ? KERN_NLEVELS - 1 : o->level;
    while (level > 0 && !supported[level]) level--; /* a level the CPU lacks: the best below it */
    memset(c, 0, sizeof *c);
    c->level = level;
    c->mm512 = o->mm512 && supported[KERN_AVX512];
    c->amx = o->amx && amx_ok ? KERN_AMX_ON : KERN_AMX_OFF;
    c->amx_rows = o->amx_rows;
    c->iq_mv = o->iq_mv;
    c->t = tables[level];
    select_iq_mv(c);
    select_mm(c);
    return 0;
}

const kern_cfg *kern_cfg_default(void) {
    pthread_once(&once, init_tables);
    return &default_cfg;
}

const char *kern_level_name(int level) {
    static const char *const names[KERN_NLEVELS] = {"scalar", "avx2", "avx512"};
    return level >= 0 && level < KERN_NLEVELS ? names[level] : "?";
}

bool kern_level_supported(int level) {
    pthread_once(&once, init_tables);
    return level >= 0 && level < KERN_NLEVELS && supported[level];
}

int kern_best_level(void) {
    pthread_once(&once, init_tables);
    int l = KERN_NLEVELS - 1;
    while (l > 0 && !supported[l]) l--;
    return l;
}

int kern_cfg_set_level(kern_cfg *c, int level) {
    if (!kern_level_supported(level))
        return rl_seterr("kernel level %s is not supported by this CPU", kern_level_name(level));
    c->level = level;
    c->t = tables[level];
    select_iq_mv(c);
    select_mm(c);
    return 0;
}

bool kern_has_simd(int level, uint32_t wtype) {
    pthread_once(&once, init_tables);
    return level > 0 && level < KERN_NLEVELS && wtype < QT_COUNT && has_simd[level][wtype];
}

int kern_act_type(uint32_t wtype) {
    const quant_traits *t = quant_get(wtype);
    return t && t->vec_dot ? t->vec_dot_type : -1;
}

bool kern_type_exact(uint32_t wtype) { return kern_act_type(wtype) == QT_Q8_K; }

size_t kern_act_size(uint32_t wtype, int64_t n_cols) {
    const int a = kern_act_type(wtype);
    return a < 0 ? 0 : quant_row_size((uint32_t)a, n_cols);
}

void kern_quantize_act(const kern_cfg *c, uint32_t wtype, const float *x, int64_t n, void *act_q) {
    const int a = kern_act_type(wtype);
    RL_ASSERT(a >= 0 && quant_row_size((uint32_t)a, n) > 0);
    (c ? c : kern_cfg_default())->t.quant[a](x, act_q, n);
}

void kern_matvec(const kern_cfg *c, uint32_t wtype, const void *W, int64_t n_rows, int64_t n_cols,
                 const void *act_q, float *out) {
    const size_t rb = quant_row_size(wtype, n_cols);
    RL_ASSERT(kern_act_type(wtype) >= 0 && rb > 0 && n_rows >= 0);
    (c ? c : kern_cfg_default())->t.matvec[wtype](W, rb, n_rows, n_cols, act_q, out);
}

void kern_matmul(const kern_cfg *c, uint32_t wtype, const void *W, int64_t n_rows, int64_t n_cols,
                 const void *act_q, int T, float *out, int64_t ldo) {
    const size_t rb = quant_row_size(wtype, n_cols), ab = kern_act_size(wtype, n_cols);
    RL_ASSERT(kern_act_type(wtype) >= 0 && rb > 0 && n_rows >= 0 && T >= 0 && (T <= 1 || ldo >= n_rows));
    const kern_table *tb = &(c ? c : kern_cfg_default())->t;
    if (T == 1 || !tb->matmul[wtype]) {
        for (int t = 0; t < T; t++)
            tb->matvec[wtype](W, rb, n_rows, n_cols, (const uint8_t *)act_q + (size_t)t * ab,
                              out + (size_t)t * ldo);
        return;
    }
    const kern_matmul_fn mm = T < tb->amx_from[wtype] ? tb->matmul_lo[wtype] : tb->matmul[wtype];
    mm(W, rb, n_rows, n_cols, act_q, ab, T, out, (size_t)ldo);
}

bool kern_has_matmul(int level, uint32_t wtype) {
    pthread_once(&once, init_tables);
    return level > 0 && level < KERN_NLEVELS && wtype < QT_COUNT && tables[level].matmul[wtype] != NULL;
}

int kern_cfg_set_mm512(kern_cfg *c, bool on) {
    if (!kern_level_supported(KERN_AVX512))
        return rl_seterr("the 512-bit batched core needs AVX-512 (F/BW/VL/DQ + VNNI), which this CPU lacks");
    c->mm512 = on;
    select_mm(c);
    return 0;
}

bool kern_amx_supported(void) {
    pthread_once(&once, init_tables);
    return amx_ok;
}

int kern_cfg_set_amx(kern_cfg *c, int mode) {
    pthread_once(&once, init_tables);
    if (mode == KERN_AMX_ON && !amx_ok)
        return rl_seterr(
            "AMX tiles are not usable here (the CPU lacks AMX-TILE/AMX-INT8, or the OS does not grant them)");
    if (mode == KERN_AMX_EMUL && !supported[KERN_AVX512])
        return rl_seterr("the emulated AMX kernels need the AVX-512 level, which this CPU lacks");
    if (mode < KERN_AMX_OFF || mode > KERN_AMX_EMUL)
        return rl_seterr("kern_cfg_set_amx: unknown mode %d", mode);
    c->amx = mode;
    select_mm(c);
    return 0;
}

int kern_cfg_set_amx_rows(kern_cfg *c, int rows) {
    if (rows < 0) return rl_seterr("kern_cfg_set_amx_rows: %d rows (0 for the per-type thresholds)", rows);
    c->amx_rows = rows;
    select_mm(c);
    return 0;
}

const char *kern_cfg_describe(const kern_cfg *c) {
    return c->level == KERN_AVX512 && c->amx == KERN_AMX_ON ? "avx512 + AMX tiles"
                                                            : kern_level_name(c->level);
}
