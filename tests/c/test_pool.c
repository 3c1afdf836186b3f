/* test_pool.c — the thread pool: every job runs exactly once on every thread, in order, whether
 * workers are spinning (jobs back to back) or asleep (gaps longer than the spin); and
 * ops_matmul_batch's claimed blocks are all computed exactly once, independent of threads. */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "base/common.h"
#include "kern/kern.h"
#include "kern/ops.h"
#include "base/pool.h"

typedef struct {
    int nth;
    long job;     /* job number the caller posted */
    long runs[8]; /* per thread: jobs run */
    long last[8]; /* per thread: last job number seen */
    atomic_int out_of_order;
    atomic_long total;
} count_job;

static void count_fn(void *arg, int ith, int nth) {
    count_job *c = arg;
    if (nth != c->nth || ith < 0 || ith >= nth) atomic_fetch_add(&c->out_of_order, 1);
    if (c->last[ith] != c->job - 1) atomic_fetch_add(&c->out_of_order, 1);
    c->last[ith] = c->job;
    c->runs[ith]++;
    atomic_fetch_add(&c->total, 1);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void test_jobs(int nth) {
    pool *p = pool_new(nth);
    CHECK(p && pool_size(p) == nth, "pool of %d", nth);
    count_job c = {.nth = nth};
    for (int i = 0; i < 8; i++) c.last[i] = 0;
    long n = 0;
    /* back to back (workers spin), with 2 ms gaps (workers sleep between jobs), then mixed */
    const int jobs[3] = {5000, 100, 5000};
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < jobs[round]; i++) {
            c.job = ++n;
            pool_run(p, count_fn, &c);
            if (round == 1 || (round == 2 && i % 97 == 0)) sleep_us(2000);
        }
    for (int t = 0; t < nth; t++)
        CHECK(c.runs[t] == n, "nth %d: thread %d ran %ld of %ld jobs", nth, t, c.runs[t], n);
    CHECK(atomic_load(&c.total) == n * nth, "nth %d: total %ld", nth, atomic_load(&c.total));
    CHECK(atomic_load(&c.out_of_order) == 0, "nth %d: %d jobs out of order", nth,
          atomic_load(&c.out_of_order));
    pool_free(p);
}

/* ops_matmul_batch: blocks are claimed dynamically; outputs must equal the one-thread run bit for
 * bit, every element written (poisoned before), for tasks of different sizes and shared inputs. */
static void test_batch(int nth) {
    enum { NIN = 512, NT = 5 };
    const int nout[NT] = {16, 1, 300, 64, 1000};
    pool *p1 = pool_new(1), *pn = pool_new(nth);
    float *w[NT], *x = malloc(sizeof(float) * NIN * 3), *y1[NT], *yn[NT];
    srand(7);
    for (int i = 0; i < NIN * 3; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    ops_mat m[NT];
    ops_mm_task t1[NT], tn[NT];
    void *aq1[NT], *aqn[NT];
    for (int k = 0; k < NT; k++) {
        w[k] = malloc(sizeof(float) * NIN * nout[k]);
        for (int i = 0; i < NIN * nout[k]; i++) w[k][i] = (float)rand() / RAND_MAX - 0.5f;
        m[k] = (ops_mat){.type = QT_F32,
                         .data = (const uint8_t *)w[k],
                         .n_in = NIN,
                         .n_out = nout[k],
                         .row_bytes = sizeof(float) * NIN};
        y1[k] = malloc(sizeof(float) * 3 * nout[k]);
        yn[k] = malloc(sizeof(float) * 3 * nout[k]);
        for (int i = 0; i < 3 * nout[k]; i++) y1[k][i] = yn[k][i] = NAN;
        aq1[k] = malloc(ops_actq_bytes(&m[k], 3));
        aqn[k] = malloc(ops_actq_bytes(&m[k], 3));
        /* tasks 1 and 2 share task 0's input (shared quantisation), the others have their own */
        const float *xi = k <= 2 ? x : x + NIN * (k - 2) % (NIN * 2);
        int T = k == 3 ? 1 : 3;
        t1[k] = (ops_mm_task){&m[k], xi, T, y1[k], aq1[k]};
        tn[k] = (ops_mm_task){&m[k], xi, T, yn[k], aqn[k]};
    }
    for (int fast = 0; fast < 2; fast++) {
        ops_matmul_batch(p1, t1, NT, fast);
        ops_matmul_batch(pn, tn, NT, fast);
        for (int k = 0; k < NT; k++)
            for (int i = 0; i < t1[k].T * nout[k]; i++) {
                CHECK(!isnan(yn[k][i]) && memcmp(&y1[k][i], &yn[k][i], 4) == 0,
                      "fast %d nth %d task %d elem %d", fast, nth, k, i);
                y1[k][i] = yn[k][i] = NAN;
            }
    }
    for (int k = 0; k < NT; k++) free(w[k]), free(y1[k]), free(yn[k]), free(aq1[k]), free(aqn[k]);
    free(x);
    pool_free(p1);
    pool_free(pn);
}

/* pool_prof: per-job busy time of every thread, the slowest one, the wall time, totals that reset when
 * profiling is switched on again; thread ith sleeps (ith + 1) ms, so the sums are known from below. */
typedef struct {
    int unused;
} sleep_job;

static void sleep_fn(void *arg, int ith, int nth) {
    (void)arg, (void)nth;
    sleep_us(1000L * (ith + 1));
}

static void test_prof(int nth) {
    pool *p = pool_new(nth);
    sleep_job sj = {0};
    pool_prof(p, 1);
    pool_run(p, sleep_fn, &sj);
    pool_stat s = pool_prof_last(p);
    const double want = 1e-3 * nth * (nth + 1) / 2; /* sum of the sleeps */
    CHECK(s.jobs == 1 && s.busy >= want && s.busy < want + 2.0 * nth, "nth %d: busy %.4f s (sleeps %.4f)",
          nth, s.busy, want);
    CHECK(s.busy_max >= 1e-3 * nth && s.busy_max <= s.wall && s.wall < 10.0,
          "nth %d: busy_max %.4f wall %.4f", nth, s.busy_max, s.wall);
    for (int i = 0; i < 4; i++) pool_run(p, sleep_fn, &sj);
    pool_stat t = pool_prof_total(p);
    CHECK(t.jobs == 5 && t.busy >= 5 * want && t.wall >= t.busy_max, "nth %d: totals %ld jobs busy %.4f", nth,
          t.jobs, t.busy);
    pool_prof(p, 0);
    pool_run(p, sleep_fn, &sj); /* not counted */
    CHECK(pool_prof_total(p).jobs == 5, "nth %d: a job with profiling off counted", nth);
    pool_prof(p, 1);
    CHECK(pool_prof_total(p).jobs == 0, "nth %d: switching profiling on resets the totals", nth);
    pool_prof(p, 0);
    pool_free(p);
}

/* ops_parallel_for: every index exactly once, inline below the threshold and split into claimed chunks above
 * it */
typedef struct {
    atomic_int *hits;
    atomic_int calls;
} pfor_ctx;

static void pfor_fn(void *arg, long lo, long hi) {
    pfor_ctx *c = arg;
    atomic_fetch_add(&c->calls, 1);
    for (long i = lo; i < hi; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void test_parallel_for(int nth) {
    pool *p = pool_new(nth);
    const long ns[] = {0, 1, 7, 1000, 70000};
    const long costs[] = {1, 1000};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 2; b++) {
            const long n = ns[a];
            pfor_ctx c = {calloc((size_t)n + 1, sizeof(atomic_int)), 0};
            ops_parallel_for(p, n, costs[b], pfor_fn, &c, "test");
            long bad = 0;
            for (long i = 0; i < n; i++) bad += atomic_load(&c.hits[i]) != 1;
            const bool split = n >= 2 && (double)n * costs[b] >= 65536.0;
            CHECK(bad == 0, "nth %d n %ld cost %ld: %ld indices not run exactly once", nth, n, costs[b], bad);
            /* split: the threads claim chunks of ~1/4 of a thread's share, so 2 .. 4 * nth ranges; inline:
             * one */
            const int calls = atomic_load(&c.calls);
            CHECK(n == 0  ? calls == 0
                  : split ? calls >= 2 && calls <= 4 * nth
                          : calls == 1,
                  "nth %d n %ld cost %ld: %d calls", nth, n, costs[b], calls);
            free(c.hits);
        }
    pool_free(p);
}

int main(void) {
    for (int nth = 1; nth <= 4; nth++) test_prof(nth);
    for (int nth = 2; nth <= 4; nth++) test_parallel_for(nth);
    for (int nth = 2; nth <= 4; nth++) test_jobs(nth);
    for (int nth = 2; nth <= 4; nth++) test_batch(nth);
    return check_done("test_pool");
}
