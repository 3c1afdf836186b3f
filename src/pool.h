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

/* Split [0, n) into nth nearly equal ranges; range ith is [*lo, *hi). */
static inline void pool_range(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}
#endif
