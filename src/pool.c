/* pool.c — see pool.h.
 *
 * A job is posted by bumping a generation counter; workers that finished the previous job spin
 * on it for a while (POOL_SPIN pause loops, ~50-100 us) before sleeping on a condition
 * variable, and the caller spins the same way on the countdown of unfinished workers. Decode
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
#include "pool.h"

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

#include "common.h"

#define POOL_SPIN 2000 /* pause iterations before sleeping (pause ~ 30-140 cycles) */

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
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
};

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
        for (int i = 0; i < POOL_SPIN && atomic_load(&p->gen) == seen && !atomic_load(&p->quit); i++) cpu_relax();
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!atomic_load(&p->quit) && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->cv_job, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = atomic_load(&p->gen);
        p->fn(p->ctx, ith, p->n); /* fn/ctx were written before gen (seq_cst store) */
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
    if (!p->threads) {
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
    free(p);
}

int pool_size(const pool *p) { return p ? p->n : 1; }

void pool_run(pool *p, pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
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
    fn(ctx, 0, p->n);
    for (int i = 0; i < POOL_SPIN && atomic_load(&p->pending) > 0; i++) cpu_relax();
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeps, 1);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->caller_sleeps, 0);
        pthread_mutex_unlock(&p->mu);
    }
}
