/* stream.c — a STREAM-like memory bandwidth probe for the kernel benchmarks (not a test).
 *
 * Measures, with 1..N threads over buffers larger than the last-level cache:
 *   read   sum of 64-bit words (what a mat-vec does to its weights)
 *   copy   memcpy (read + write, counted as 2x the bytes)
 * Each thread works on its own buffer. Two rates, best of --reps:
 *   wall   bytes of all threads / wall clock from a barrier to the last thread done;
 *   cpu    sum over threads of bytes / that thread's CPU time (CLOCK_THREAD_CPUTIME_ID): what the
 *          threads get while they run, which on a shared, oversubscribed machine is the number
 *          comparable with the kernels' GB/s per CPU-second (tests/c/test_kern.c).
 * Buffers are touched first (page faults are not measured).
 *
 * build: cc -std=c11 -O2 -D_GNU_SOURCE -pthread -o build/stream bench/stream.c
 * usage: stream [--mib N (per thread, default 512)] [--threads N (max, default 2)] [--reps N]
 * Prints one line per (kind, threads): GB/s (1e9 bytes/s), wall and per CPU-second.
 */
#include <emmintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clk(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) { return clk(CLOCK_MONOTONIC); }

typedef struct {
    uint64_t *src, *dst;
    size_t n; /* words */
    int kind; /* 0 read, 1 copy */
    pthread_barrier_t *bar;
    double t_end, cpu;
    uint64_t sink;
} job;

static void *run(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    const double c0 = clk(CLOCK_THREAD_CPUTIME_ID);
    if (j->kind == 0) {
        /* SSE2 (x86-64 baseline): 64 bytes per iteration in 4 independent accumulators */
        __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
        const __m128i *p = (const __m128i *)j->src;
        for (size_t i = 0; i + 4 <= j->n / 2; i += 4) {
            a = _mm_add_epi64(a, _mm_load_si128(p + i));
            b = _mm_xor_si128(b, _mm_load_si128(p + i + 1));
            c = _mm_add_epi64(c, _mm_load_si128(p + i + 2));
            d = _mm_xor_si128(d, _mm_load_si128(p + i + 3));
        }
        j->sink = (uint64_t)_mm_cvtsi128_si64(_mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d)));
    } else {
        memcpy(j->dst, j->src, j->n * 8);
    }
    j->t_end = now();
    j->cpu = clk(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

int main(int argc, char **argv) {
    size_t mib = 512;
    int max_threads = 2, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mib")) mib = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) max_threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    }
    const size_t n = mib * ((size_t)1 << 20) / 8;
    uint64_t **src = calloc((size_t)max_threads, sizeof *src), **dst = calloc((size_t)max_threads, sizeof *dst);
    for (int t = 0; t < max_threads; t++) {
        src[t] = aligned_alloc(64, n * 8);
        dst[t] = aligned_alloc(64, n * 8);
        if (!src[t] || !dst[t]) {
            fprintf(stderr, "stream: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < n; i++) src[t][i] = i * 0x9e3779b97f4a7c15ULL;
        memset(dst[t], 1, n * 8);
    }
    printf("stream: %zu MiB per thread, best of %d\n", mib, reps);
    uint64_t sink = 0;
    for (int kind = 0; kind < 2; kind++) {
        for (int nt = 1; nt <= max_threads; nt++) {
            double best = 1e30, best_cpu = 0;
            for (int r = 0; r < reps; r++) {
                pthread_barrier_t bar;
                pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
                job jobs[64];
                pthread_t th[64];
                for (int t = 0; t < nt && t < 64; t++) {
                    jobs[t] = (job){ src[t], dst[t], n, kind, &bar, 0, 0, 0 };
                    pthread_create(&th[t], NULL, run, &jobs[t]);
                }
                pthread_barrier_wait(&bar);
                const double t0 = now();
                double t1 = t0, rate_cpu = 0;
                for (int t = 0; t < nt && t < 64; t++) {
                    pthread_join(th[t], NULL);
                    t1 = jobs[t].t_end > t1 ? jobs[t].t_end : t1;
                    sink += jobs[t].sink;
                    rate_cpu += (double)n * 8 * (kind ? 2 : 1) / jobs[t].cpu;
                }
                best_cpu = rate_cpu > best_cpu ? rate_cpu : best_cpu;
                pthread_barrier_destroy(&bar);
                best = t1 - t0 < best ? t1 - t0 : best;
            }
            const double bytes = (double)n * 8 * nt * (kind ? 2 : 1);
            printf("%-5s threads %d: %6.2f GB/s wall  %6.2f GB/s per CPU-second\n", kind ? "copy" : "read", nt,
                   bytes / best / 1e9, best_cpu / 1e9);
            fflush(stdout);
        }
    }
    return (int)(sink & 0);
}
