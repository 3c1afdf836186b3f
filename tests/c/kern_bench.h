/* kern_bench.h — the mat-vec timing shared by the RL_KERN_BENCH=1 modes of test_kern.c and
 * test_repack.c: thread CPU time, rows repeated from a small random fill, best of N mat-vecs. */
#ifndef RL_KERN_BENCH_H
#define RL_KERN_BENCH_H
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kern/kern.h"

/* The kernel configuration these tests run (kern.h: no process-wide level; each test owns one),
 * built on first use with the defaults: the best level this CPU has. */
static kern_cfg *TK(void) {
    static kern_cfg cfg;
    static int ready;
    if (!ready) ready = kern_cfg_init(&cfg, NULL) == 0;
    return &cfg;
}

/* Thread CPU time: the benchmark measures the kernel, not the scheduler of a shared machine. */
static inline double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rows [fill, n_rows) of W (rb bytes a row) repeat its first `fill` rows. */
static inline void repeat_rows(uint8_t *W, size_t rb, int64_t fill, int64_t n_rows) {
    for (int64_t r0 = fill; r0 < n_rows; r0 += fill)
        memcpy(W + (size_t)r0 * rb, W, rb * (size_t)(n_rows - r0 < fill ? n_rows - r0 : fill));
}

/* One warm-up kern_matvec, then the best (least) CPU seconds of `reps` more. */
static inline double matvec_best(uint32_t type, const void *W, int64_t n_rows, int64_t n_cols,
                                 const void *act, float *out, int reps) {
    kern_matvec(TK(), type, W, n_rows, n_cols, act, out); /* warm */
    double best = 1e30;
    for (int it = 0; it < reps; it++) {
        const double t0 = cpu_now();
        kern_matvec(TK(), type, W, n_rows, n_cols, act, out);
        const double dt = cpu_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

#endif
