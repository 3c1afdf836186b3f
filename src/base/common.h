/* common.h — small utilities shared by every Red Lite module.
 *
 * Errors (two tiers, see docs/DESIGN.md):
 *   - recoverable failures (bad file, bad argument, out of memory) are reported by
 *     returning NULL / a negative status AND calling rl_seterr() with one line that
 *     says what is wrong and what to do. The caller prints rl_lasterr().
 *     The error buffer is thread-local, so the server's threads do not race.
 *   - broken invariants use RL_ASSERT, which prints the expression and aborts.
 */
#ifndef RL_COMMON_H
#define RL_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define RL_VERSION "0.1.0"

#if defined(__GNUC__)
#define RL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define RL_UNUSED __attribute__((unused))
#else
#define RL_PRINTF(a, b)
#define RL_UNUSED
#endif

/* Set the calling thread's last error (one line, no trailing newline). Returns -1 so
 * callers can write `return rl_seterr(...)`. */
int rl_seterr(const char *fmt, ...) RL_PRINTF(1, 2);
#ifdef __clang_analyzer__
/* make lint's static analyzer does not look into variadic functions, so it takes `return
 * rl_seterr(...)` for a possible 0 and reports impossible paths behind it: it is shown the contract
 * (always -1) here. Compilers build the plain call. */
#define rl_seterr(...) (rl_seterr(__VA_ARGS__), -1)
#endif
/* The calling thread's last error, "" if none. Valid until the next rl_seterr. */
const char *rl_lasterr(void);
void rl_clearerr(void);

#define RL_ASSERT(x)                                                                                         \
    do {                                                                                                     \
        if (!(x)) rl_assert_fail(#x, __FILE__, __LINE__, __func__);                                          \
    } while (0)
/* the attribute as well as _Noreturn: cppcheck 2.10 (make lint) knows only the attribute */
_Noreturn void rl_assert_fail(const char *expr, const char *file, int line, const char *fn)
    __attribute__((noreturn));

/* Allocation helpers: return NULL and set an error naming `what` on failure. */
void *rl_malloc(size_t n, const char *what);
void *rl_calloc(size_t count, size_t size, const char *what);
/* 64-byte aligned allocation, freed with free(). */
void *rl_aligned_alloc(size_t n, const char *what);
/* Memory for the large arrays the kernels stream (resident weights, repacked experts, recurrent
 * states): fresh anonymous pages (zeroed), 2 MiB-aligned, the length rounded up to 2 MiB, with
 * MADV_HUGEPAGE (best effort: one TLB entry per 2 MiB where the kernel's THP mode allows it).
 * NULL and "out of memory for <MiB> of <what>" on failure. Freed with rl_huge_free(p, bytes), the same
 * bytes (NULL is a no-op). */
#define RL_HUGE_PAGE ((size_t)2 << 20)
void *rl_huge_alloc(size_t bytes, const char *what);
void rl_huge_free(void *p, size_t bytes);

/* Overflow-checked arithmetic: return false on overflow. */
static inline bool rl_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rl_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* IEEE half / bfloat16 conversions (exact, round-to-nearest-even for fp32->fp16). */
float rl_fp16_to_fp32(uint16_t h);
uint16_t rl_fp32_to_fp16(float f);
static inline float rl_bf16_to_fp32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}
uint16_t rl_fp32_to_bf16(float f);

/* Little-endian loads from possibly unaligned memory. */
static inline uint16_t rl_le16(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | (b[1] << 8));
}
static inline uint32_t rl_le32(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
static inline uint64_t rl_le64(const void *p) {
    return (uint64_t)rl_le32(p) | ((uint64_t)rl_le32((const uint8_t *)p + 4) << 32);
}

/* Monotonic wall clock in seconds. */
double rl_now(void);

/* Peak resident set size of this process in bytes (from /proc/self/status VmHWM). */
uint64_t rl_peak_rss(void);
/* Current resident set size in bytes (VmRSS). */
uint64_t rl_cur_rss(void);
/* Anonymous resident memory in bytes (RssAnon: what the kernel cannot reclaim without swap). */
uint64_t rl_anon_rss(void);
/* The memory this process may use, in bytes: physical RAM, or less where a control group limits
 * it (a container's --memory, a systemd MemoryMax, a batch job's cgroup): what every planner must
 * fit in. rl_phys_ram is the machine's RAM alone. */
uint64_t rl_total_ram(void);
uint64_t rl_phys_ram(void);
/* The smallest memory limit of the control group a process is in and of its ancestors, read from
 * `self` (a /proc/PID/cgroup file) under the hierarchy mounted at `root` (/sys/fs/cgroup): cgroup v2
 * memory.max, v1 memory/.../memory.limit_in_bytes; 0 when none is set or nothing can be read.
 * Split from rl_total_ram so a test can give it a made-up hierarchy. */
uint64_t rl_cgroup_limit(const char *root, const char *self);
/* rl_cgroup_limit of this process (/proc/self/cgroup under /sys/fs/cgroup); 0: no limit. */
uint64_t rl_mem_limit(void);
/* What the kernel could give now, in bytes: MemAvailable of /proc/meminfo, or less inside a control
 * group (its limit less this process's anonymous memory); 0 if unknown. */
uint64_t rl_mem_available(void);

/* Progress bar on stderr, drawn only when stderr is a terminal (or RL_PROGRESS=1).
 * Usage: rl_progress p; rl_progress_start(&p, "loading", total); rl_progress_update(&p, done);
 * rl_progress_end(&p). Updates are rate-limited to ~10 Hz. */
typedef struct {
    const char *label;
    uint64_t total;
    double t0, last;
    bool enabled;
} rl_progress;
void rl_progress_start(rl_progress *p, const char *label, uint64_t total);
void rl_progress_update(rl_progress *p, uint64_t done);
void rl_progress_end(rl_progress *p);

/* Deterministic PRNG (xoshiro256**-style splitmix seeding): used by synth and tests. */
typedef struct {
    uint64_t s[4];
} rl_rng;
void rl_rng_seed(rl_rng *r, uint64_t seed);
uint64_t rl_rng_u64(rl_rng *r);
/* uniform in [0,1) with 24 random bits */
float rl_rng_f32(rl_rng *r);
/* standard normal (Box-Muller) */
float rl_rng_normal(rl_rng *r);

/* Number of online CPUs (at least 1). */
int rl_ncpu(void);

#endif
