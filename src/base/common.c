/* common.c — see common.h. */
#include "base/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_err[512];

/* the name in parentheses: common.h makes rl_seterr a macro for the static analyzer */
int(rl_seterr)(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *rl_lasterr(void) { return g_err; }
void rl_clearerr(void) { g_err[0] = 0; }

void rl_assert_fail(const char *expr, const char *file, int line, const char *fn) {
    fprintf(stderr, "redlite: internal error: assertion `%s` failed at %s:%d (%s)\n", expr, file, line, fn);
    fflush(stderr);
    abort();
}

void *rl_malloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) rl_seterr("out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *rl_calloc(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) rl_seterr("out of memory allocating %zu x %zu bytes for %s", count, size, what);
    return p;
}

static size_t huge_len(size_t bytes) { return (bytes + RL_HUGE_PAGE - 1) & ~(RL_HUGE_PAGE - 1); }

void *rl_huge_alloc(size_t bytes, const char *what) {
    /* map 2 MiB more, keep the aligned len bytes inside, give back the rest (sizes whose rounding
     * would wrap fail as too large) */
    const bool fits = bytes <= SIZE_MAX - 2 * RL_HUGE_PAGE;
    const size_t len = fits ? huge_len(bytes ? bytes : 1) : 0;
    uint8_t *m =
        fits ? mmap(NULL, len + RL_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
             : MAP_FAILED;
    if (m == MAP_FAILED) {
        rl_seterr("out of memory for %.1f MiB of %s", (fits ? len : bytes) / 1048576.0, what);
        return NULL;
    }
    uint8_t *a = (uint8_t *)(((uintptr_t)m + RL_HUGE_PAGE - 1) & ~(uintptr_t)(RL_HUGE_PAGE - 1));
    if (a > m) munmap(m, (size_t)(a - m));
    if (m + len + RL_HUGE_PAGE > a + len) munmap(a + len, (size_t)(m + len + RL_HUGE_PAGE - (a + len)));
    madvise(a, len, MADV_HUGEPAGE); /* best effort: THP "never" leaves 4 KiB pages */
    return a;
}

void rl_huge_free(void *p, size_t bytes) {
    if (p) munmap(p, huge_len(bytes ? bytes : 1));
}

void *rl_aligned_alloc(size_t n, const char *what) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        rl_seterr("out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
    return p;
}

float rl_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            man &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union {
        uint32_t u;
        float f;
    } v = {.u = bits};
    return v.f;
}

uint16_t rl_fp32_to_fp16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    uint32_t x = v.u;
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000) { /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
    }
    if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* overflow to inf */
    if (absx < 0x38800000) {                                  /* subnormal or zero */
        if (absx < 0x33000000) return (uint16_t)sign;
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

uint16_t rl_fp32_to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    if ((v.u & 0x7fffffff) > 0x7f800000) return (uint16_t)((v.u >> 16) | 64); /* quiet nan */
    return (uint16_t)((v.u + (0x7fff + ((v.u >> 16) & 1))) >> 16);
}

double rl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kl = strlen(key);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0) {
            v = strtoull(line + kl, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v * 1024;
}

uint64_t rl_peak_rss(void) { return status_kib("VmHWM:"); }
uint64_t rl_cur_rss(void) { return status_kib("VmRSS:"); }
uint64_t rl_anon_rss(void) { return status_kib("RssAnon:"); }

uint64_t rl_phys_ram(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

/* one limit file: a number of bytes; "max", a missing file or v1's "no limit" (~2^63) give 0 */
static uint64_t limit_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    const int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    return ok && v < (1ull << 60) ? (uint64_t)v : 0;
}

/* the smallest limit along dir and its ancestors down to (and including) base */
static uint64_t limit_walk(const char *base, const char *rel, const char *file) {
    char dir[1024], path[1100];
    uint64_t best = 0;
    if (snprintf(dir, sizeof dir, "%s%s", base, rel) >= (int)sizeof dir) return 0;
    for (size_t nb = strlen(base);;) {
        size_t n = strlen(dir);
        while (n > nb && dir[n - 1] == '/') dir[--n] = 0;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        const uint64_t v = limit_file(path);
        if (v && (!best || v < best)) best = v;
        char *slash = strrchr(dir, '/');
        if (n <= nb || !slash || (size_t)(slash - dir) < nb) break;
        *slash = 0;
    }
    return best;
}

uint64_t rl_cgroup_limit(const char *root, const char *self) {
    FILE *f = fopen(self, "r");
    if (!f) return 0;
    char line[1024], base[1024];
    uint64_t best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        uint64_t v = 0;
        if (!strcmp(line, "0:")) { /* v2: "0::/path" */
            v = limit_walk(root, c2 + 1, "memory.max");
        } else { /* v1: "N:memory[,...]:/path" */
            char ctl[256];
            snprintf(ctl, sizeof ctl, ",%s,", c1 + 1);
            if (!strstr(ctl, ",memory,")) continue;
            snprintf(base, sizeof base, "%s/memory", root);
            v = limit_walk(base, c2 + 1, "memory.limit_in_bytes");
        }
        if (v && (!best || v < best)) best = v;
    }
    fclose(f);
    return best;
}

uint64_t rl_mem_limit(void) { return rl_cgroup_limit("/sys/fs/cgroup", "/proc/self/cgroup"); }

uint64_t rl_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    uint64_t avail = (uint64_t)kb << 10;
    /* inside a control group the limit counts, less this process's own anonymous memory (its
     * file pages are the kernel's to reclaim, as MemAvailable counts them) */
    const uint64_t lim = rl_mem_limit(), anon = rl_anon_rss();
    if (lim) {
        const uint64_t left = lim > anon ? lim - anon : 0;
        if (!avail || left < avail) avail = left;
    }
    return avail;
}

uint64_t rl_total_ram(void) {
    const uint64_t phys = rl_phys_ram(), lim = rl_mem_limit();
    return lim && (!phys || lim < phys) ? lim : phys;
}

int rl_ncpu(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void rl_progress_start(rl_progress *p, const char *label, uint64_t total) {
    const char *env = getenv("RL_PROGRESS");
    p->label = label;
    p->total = total ? total : 1;
    p->t0 = p->last = rl_now();
    p->enabled = env ? atoi(env) != 0 : isatty(2);
    if (p->enabled) rl_progress_update(p, 0);
}

void rl_progress_update(rl_progress *p, uint64_t done) {
    if (!p->enabled) return;
    double now = rl_now();
    if (done != 0 && done < p->total && now - p->last < 0.1) return;
    p->last = now;
    double frac = (double)done / (double)p->total;
    if (frac > 1) frac = 1;
    int w = 30, fill = (int)(frac * w);
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
    bar[w] = 0;
    double el = now - p->t0;
    double eta = frac > 0 ? el * (1 - frac) / frac : 0;
    fprintf(stderr, "\r%-12s [%s] %5.1f%%  %5.1fs elapsed  eta %5.1fs ", p->label, bar, 100 * frac, el, eta);
    fflush(stderr);
}

void rl_progress_end(rl_progress *p) {
    if (!p->enabled) return;
    rl_progress_update(p, p->total);
    fputc('\n', stderr);
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rl_rng_seed(rl_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rl_rng_u64(rl_rng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

float rl_rng_f32(rl_rng *r) { return (float)(rl_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float rl_rng_normal(rl_rng *r) {
    float u1 = rl_rng_f32(r), u2 = rl_rng_f32(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}
