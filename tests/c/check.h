/* check.h — minimal assertion helpers for the C unit tests.
 * Each test binary runs its cases, prints one line per failure and a closing
 * "N passed, N failed" line, and exits non-zero if anything failed. tests/test_c_units.py
 * runs every binary under pytest. A binary that cannot run here at all (no GPU) returns
 * check_skip(name, why): it prints "NAME: skipped: WHY" and exits 77, which the wrapper reports as
 * a pytest skip with that reason (never a pass). */
#ifndef RL_CHECK_H
#define RL_CHECK_H
#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_pass, check_fail;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            check_pass++;                                                                                    \
        } else {                                                                                             \
            check_fail++;                                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
        }                                                                                                    \
    } while (0)

static inline int check_done(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_pass, check_fail);
    return check_fail ? 1 : 0;
}

#define CHECK_SKIP 77
static inline int check_skip(const char *name, const char *why) {
    printf("%s: skipped: %s\n", name, why);
    return CHECK_SKIP;
}

/* NaN poison for outputs so unwritten elements fail comparisons. */
static inline void check_poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
#endif
