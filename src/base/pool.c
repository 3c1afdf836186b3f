/* pool.c — see pool.h.
 *
 * A job is posted by bumping a generation counter; workers that finished the previous job spin
 * on it for a while (POOL_SPIN_S, 100 us by the clock) before sleeping on a condition variable,
 * and the caller spins the same way on the countdown of unfinished workers. The budget is time,
 * not pause instructions: `pause` takes ~11 ns on recent Xeons (~140 cycles on Skylake-SP), so
 * 2,000 of them were 22 us there, shorter than the serial gaps of a 16-thread decode token, and
 * the workers slept through them (the job after the DeltaNet conv lost ~26 us a layer to wake-ups). Decode
 * posts ~300 jobs per token a few hundred microseconds apart: with sleeping workers every job
 * paid a futex wake-up (tens of microseconds in a VM, where the other vCPU may be halted) and
 * the caller's share finished first, so the second thread idled 10-15 % of a token. The spin is
 * bounded, so an idle engine (chat waiting for input) or an overloaded machine still sleeps
 * instead of burning CPU the way an always-spinning pool would.
 *
 * Sleep/wake uses the Dekker pattern on seq_cst atomics: a sleeper increments `sleepers` and
 * then re-reads the generation under the mutex; a poster bumps the generation and then reads
 * `sleepers`; at least one of the two sees the other's store, so no wake-up is lost. The same
 * holds for the caller waiting on `pending` (flag `caller_sleeps`). */
#include "base/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#include "base/common.h"

#define POOL_SPIN_S 100e-6 /* seconds of spinning before sleeping (the clock read every 64 pauses) */

/* Every 64 pauses of a spin: start the budget (*until == 0) or tell whether it is spent. The clock is
 * not read before the first 64 pauses, since most waits of a busy pool end sooner (a decode token
 * posts thousands of jobs at 16 threads). */
static bool spin_expired(double *until) {
    const double now = rl_now();
    if (*until == 0) {
        *until = now + POOL_SPIN_S;
        return false;
    }
    return now > *until;
}

/* The spun-on words live on their own cache lines: every worker decrements `pending` when it
 * finishes while the others still spin on `gen`; on one line, each decrement invalidated the line
 * in every spinning core (false sharing that grows with the thread count). `gen` shares its line
 * only with what is read together with it (fn, ctx, quit: written before gen is bumped). */
#define POOL_LINE 64
struct pool {
    _Alignas(POOL_LINE) atomic_ulong gen;
    pool_fn fn;
    void *ctx;
    atomic_int quit;
    _Alignas(POOL_LINE) atomic_int pending;
    atomic_int caller_sleeps;
    _Alignas(POOL_LINE) atomic_int sleepers;
    int n;
    int prof;     /* pool_prof: time each thread's share (written between jobs only) */
    void *owner;  /* pool_set_owner: the owner's context riding with the pool */
    double *busy; /* per thread, POOL_LINE apart: seconds in fn during the last job */
    pool_stat last, total;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
};

#define BUSY_STRIDE (POOL_LINE / sizeof(double))

typedef struct {
    pool *p;
    int ith;
} worker_arg;

static void *worker(void *arg) {
    worker_arg *wa = arg;
    pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned long seen = 0;
    for (;;) {
        double until = 0; /* the clock starts after the first 64 pauses: most waits end before */
        for (unsigned i = 1; atomic_load(&p->gen) == seen && !atomic_load(&p->quit); i++) {
            cpu_relax();
            if ((i & 63) == 0 && spin_expired(&until)) break;
        }
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!atomic_load(&p->quit) && atomic_load(&p->gen) == seen)
                pthread_cond_wait(&p->cv_job, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = atomic_load(&p->gen);
        if (p->prof) {
            const double t0 = rl_now();
            p->fn(p->ctx, ith, p->n);
            p->busy[ith * BUSY_STRIDE] = rl_now() - t0;
        } else {
            p->fn(p->ctx, ith, p->n); /* fn/ctx/prof were written before gen (seq_cst store) */
        }
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

pool *pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = rl_ncpu();
    pool *p = rl_aligned_alloc(sizeof *p, "thread pool"); /* the cache-line alignment above */
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_job, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->threads = rl_calloc((size_t)n_threads, sizeof(pthread_t), "thread pool");
    p->busy = rl_calloc((size_t)n_threads * BUSY_STRIDE, sizeof(double), "thread pool");
    if (!p->threads || !p->busy) {
        free(p->threads);
        free(p->busy);
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->n = i;
            break;
        }
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i;
            break;
        }
    }
    return p;
}

void pool_free(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->busy);
    free(p);
}

void pool_prof(pool *p, int on) {
    if (!p) return;
    if (on && !p->prof) p->total = (pool_stat){0};
    p->prof = on;
}

pool_stat pool_prof_last(const pool *p) { return p ? p->last : (pool_stat){0}; }
pool_stat pool_prof_total(const pool *p) { return p ? p->total : (pool_stat){0}; }

int pool_size(const pool *p) { return p ? p->n : 1; }

void pool_set_owner(pool *p, void *ctx) { p->owner = ctx; }
void *pool_owner(const pool *p) { return p ? p->owner : NULL; }

static void run_job(pool *p, pool_fn fn, void *ctx);

void pool_run(pool *p, pool_fn fn, void *ctx) {
    if (!p || !p->prof) {
        run_job(p, fn, ctx);
        return;
    }
    const double t0 = rl_now();
    run_job(p, fn, ctx);
    pool_stat s = {rl_now() - t0, 0, 0, 1};
    for (int i = 0; i < p->n; i++) {
        const double b = p->busy[i * BUSY_STRIDE];
        s.busy += b;
        s.busy_max = b > s.busy_max ? b : s.busy_max;
    }
    p->last = s;
    p->total.wall += s.wall;
    p->total.busy += s.busy;
    p->total.busy_max += s.busy_max;
    p->total.jobs++;
}

static void run_job(pool *p, pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        const double t0 = p && p->prof ? rl_now() : 0;
        fn(ctx, 0, 1);
        if (p && p->prof) p->busy[0] = rl_now() - t0;
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_job);
        pthread_mutex_unlock(&p->mu);
    }
    const double t0 = p->prof ? rl_now() : 0;
    fn(ctx, 0, p->n);
    if (p->prof) p->busy[0] = rl_now() - t0;
    double until = 0;
    for (unsigned i = 1; atomic_load(&p->pending) > 0; i++) {
        cpu_relax();
        if ((i & 63) == 0 && spin_expired(&until)) break;
    }
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeps, 1);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->caller_sleeps, 0);
        pthread_mutex_unlock(&p->mu);
    }
}
