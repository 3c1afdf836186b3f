/* test_pool.c — the thread pool: every job runs exactly once on every thread, in order, whether
 * workers are spinning (jobs back to back) or asleep (gaps longer than the spin); and
 * ops_matmul_batch's claimed blocks are all computed exactly once, independent of threads. */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "common.h"
#include "kern.h"
#include "ops.h"
#include "pool.h"

typedef struct {
    int nth;
    long job;               /* job number the caller posted */
    long runs[8];           /* per thread: jobs run */
    long last[8];           /* per thread: last job number seen */
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
    for (int t = 0; t < nth; t++) CHECK(c.runs[t] == n, "nth %d: thread %d ran %ld of %ld jobs", nth, t, c.runs[t], n);
    CHECK(atomic_load(&c.total) == n * nth, "nth %d: total %ld", nth, atomic_load(&c.total));
    CHECK(atomic_load(&c.out_of_order) == 0, "nth %d: %d jobs out of order", nth, atomic_load(&c.out_of_order));
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
        m[k] = (ops_mat){.type = QT_F32, .data = (const uint8_t *)w[k], .n_in = NIN, .n_out = nout[k],
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
                CHECK(!isnan(yn[k][i]) && memcmp(&y1[k][i], &yn[k][i], 4) == 0, "fast %d nth %d task %d elem %d", fast,
                      nth, k, i);
                y1[k][i] = yn[k][i] = NAN;
            }
    }
    for (int k = 0; k < NT; k++) free(w[k]), free(y1[k]), free(yn[k]), free(aq1[k]), free(aqn[k]);
    free(x);
    pool_free(p1);
    pool_free(pn);
}

int main(void) {
    for (int nth = 2; nth <= 4; nth++) test_jobs(nth);
    for (int nth = 2; nth <= 4; nth++) test_batch(nth);
    return check_done("test_pool");
}
