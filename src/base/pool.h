/* pool.h — a small persistent thread pool: run fn(ctx, ith, nth) on nth threads and wait.
 *
 * Contract: pool_run is called from one thread at a time (the inference thread); the
 * calling thread takes part as ith = 0. Work is split by the callee from (ith, nth), as in
 * ggml's compute params, so results never depend on scheduling (deterministic given nth).
 */
#ifndef RL_POOL_H
#define RL_POOL_H

typedef struct pool pool;
typedef void (*pool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means all online CPUs. NULL on failure (rl_lasterr). */
pool *pool_new(int n_threads);
void pool_free(pool *p);
int pool_size(const pool *p);
void pool_run(pool *p, pool_fn fn, void *ctx);
/* A context of the pool's owner that travels with it to everything the pool is passed to (the
 * CPU ops read their runtime from it: ops.h ops_rt_attach). Set between jobs; NULL when unset
 * (and for a NULL pool). */
void pool_set_owner(pool *p, void *ctx);
void *pool_owner(const pool *p);

/* Profiling (bench --profile): while on, every pool_run times each thread's share of the job.
 * wall: the caller's time in pool_run (post, its own share, the wait for the others); busy: the
 * sum over threads of the time spent in fn; busy_max: the slowest thread's. wall - busy_max is
 * the dispatch cost (wake-up and join), nth * busy_max - busy the time threads waited for the
 * slowest one (imbalance). Off by default; switch only between jobs. */
typedef struct {
    double wall, busy, busy_max;
    long jobs;
} pool_stat;
void pool_prof(pool *p, int on);
/* The last job's times (jobs = 1), valid after a pool_run with profiling on. */
pool_stat pool_prof_last(const pool *p);
/* The sums over every job since profiling was switched on (pool_prof(p, 1) resets them). */
pool_stat pool_prof_total(const pool *p);

/* Split [0, n) into nth nearly equal ranges; range ith is [*lo, *hi). */
static inline void pool_range(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}
#endif
