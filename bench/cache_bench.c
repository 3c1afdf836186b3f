/* cache_bench.c — expert-cache benchmark: decode speed, misses, bytes read, prefetch quality,
 * peak RSS and page-cache growth for one --cache-mib setting. Not a test.
 *
 * build: bench/cache_bench.sh builds it against build/cache/libredlite.a
 * usage: cache_bench -m MODEL [--cache-mib SPEC] [--prompt N] [--decode N] [--batch N] [--fast]
 *                    [-t N] [--drop-cache] [--trace FILE] [--label TEXT] [--route-bias L]
 *
 * Memory is sampled every 50 ms by a thread: the process's VmRSS (peak) and the system's
 * "Cached" from /proc/meminfo (growth over the value at start). --drop-cache first evicts
 * the model file from the page cache (posix_fadvise DONTNEED over the whole file) so a run
 * starts cold. Decode statistics cover the decode steps only (stats reset after the prompt).
 * Prints a human summary on stderr and one JSON line on stdout. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/common.h"
#include "run/engine.h"
#include "cache/expert_cache.h"
#include "run/session.h"

static uint64_t meminfo_kib(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    uint64_t v = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') v = strtoull(line + n + 1, NULL, 10);
    if (f) fclose(f);
    return v;
}

static atomic_bool g_stop;
static atomic_uint_fast64_t g_peak_rss, g_peak_cached;

static void *mem_sampler(void *arg) {
    (void)arg;
    while (!atomic_load(&g_stop)) {
        uint64_t r = rl_cur_rss(), c = meminfo_kib("Cached") * 1024;
        if (r > atomic_load(&g_peak_rss)) atomic_store(&g_peak_rss, r);
        if (c > atomic_load(&g_peak_cached)) atomic_store(&g_peak_cached, c);
        usleep(50000);
    }
    return NULL;
}

/* Bytes of the model file's expert tensors / other tensors now in the page cache (mincore). */
static void file_residency(gguf_file *f, double *experts, double *other) {
    long pg = sysconf(_SC_PAGESIZE);
    *experts = *other = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint8_t *map = f->parts[t->part].map;
        uint64_t beg = t->file_off / (uint64_t)pg * (uint64_t)pg, end = t->file_off + t->nbytes;
        size_t npg = (size_t)((end - beg + (uint64_t)pg - 1) / (uint64_t)pg);
        unsigned char *v = malloc(npg);
        if (!v || mincore((void *)(map + beg), (size_t)(end - beg), v) != 0) {
            free(v);
            continue;
        }
        double n = 0;
        for (size_t k = 0; k < npg; k++) n += v[k] & 1;
        *(strstr(t->name, "_exps.") ? experts : other) += n * (double)pg;
        free(v);
    }
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *model = NULL, *spec = NULL, *trace = NULL, *label = "";
    int prompt = 16, decode = 32, batch = 64, threads = 0;
    bool fast = false, drop = false;
    float bias = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model = argv[++i];
        else if (!strcmp(a, "--cache-mib") && v) spec = argv[++i];
        else if (!strcmp(a, "--prompt") && v) prompt = atoi(argv[++i]);
        else if (!strcmp(a, "--decode") && v) decode = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && v) batch = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--trace") && v) trace = argv[++i];
        else if (!strcmp(a, "--label") && v) label = argv[++i];
        else if (!strcmp(a, "--route-bias") && v) bias = (float)atof(argv[++i]);
        else if (!strcmp(a, "--fast")) fast = true;
        else if (!strcmp(a, "--drop-cache")) drop = true;
        else {
            fprintf(stderr, "cache_bench: bad argument '%s' (see the header of bench/cache_bench.c)\n", a);
            return 2;
        }
    }
    if (!model || prompt < 1 || decode < 1) {
        fprintf(stderr, "cache_bench: need -m MODEL, --prompt >= 1, --decode >= 1\n");
        return 2;
    }
    if (drop) {
        int fd = open(model, O_RDONLY);
        if (fd >= 0) {
            fdatasync(fd);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    }
    uint64_t cached0 = meminfo_kib("Cached") * 1024;
    atomic_store(&g_peak_cached, cached0);
    pthread_t th;
    pthread_create(&th, NULL, mem_sampler, NULL);

    double t0 = rl_now();
    session_model *sm = session_model_open(&(session_model_params){.model_path = model, .n_threads = threads,
                                                                    .reference = !fast});
    if (!sm) {
        fprintf(stderr, "cache_bench: %s\n", rl_lasterr());
        return 1;
    }
    engine *e = session_model_engine(sm);
    double t_open = rl_now() - t0;
    const q3n_hparams *hp = engine_hparams(e);
    t0 = rl_now();
    session *S = session_new(sm, &(session_params){.n_ctx = prompt + decode + 8, .n_batch = batch,
                                                   .cache_spec = spec ? spec : "mmap", .route_trace = trace,
                                                   .route_bias = bias, .verbose = true});
    if (!S || !session_expert_cache(S)) {
        fprintf(stderr, "cache_bench: %s\n", S ? "the backend takes no expert cache" : rl_lasterr());
        return 1;
    }
    engine_ctx *c = session_ctx(S);
    double t_attach = rl_now() - t0;
    expert_cache *ec = session_expert_cache(S);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)prompt);
    rl_rng r;
    rl_rng_seed(&r, 7);
    for (int i = 0; i < prompt; i++) toks[i] = (int32_t)(rl_rng_u64(&r) % (uint64_t)(hp->n_vocab < 32000 ? hp->n_vocab : 32000));
    float *lg = malloc(sizeof(float) * (size_t)hp->n_vocab);
    t0 = rl_now();
    if (engine_prefill(c, toks, prompt, lg)) {
        fprintf(stderr, "cache_bench: prefill: %s\n", rl_lasterr());
        return 1;
    }
    double t_prefill = rl_now() - t0;
    ec_stats sp;
    expert_cache_get_stats(ec, &sp);
    expert_cache_reset_stats(ec);
    double *dt = malloc(sizeof(double) * (size_t)decode);
    int next = argmax(lg, hp->n_vocab);
    uint64_t hash = 1469598103934665603ull;
    t0 = rl_now();
    for (int i = 0; i < decode; i++) {
        double ts = rl_now();
        if (engine_step(c, next, lg)) {
            fprintf(stderr, "cache_bench: step %d: %s\n", i, rl_lasterr());
            return 1;
        }
        dt[i] = rl_now() - ts;
        next = argmax(lg, hp->n_vocab);
        hash = (hash ^ (uint64_t)next) * 1099511628211ull;
    }
    double t_decode = rl_now() - t0;
    ec_stats sd;
    expert_cache_get_stats(ec, &sd);
    atomic_store(&g_stop, true);
    pthread_join(th, NULL);
    double res_exp, res_other;
    file_residency(engine_gguf(e), &res_exp, &res_other);
    qsort(dt, (size_t)decode, sizeof(double), cmp_d);
    double med = dt[decode / 2], MiB = 1048576.0, GiB = 1024 * MiB;
    double tok = sd.tokens ? (double)sd.tokens : 1;
    double cached_growth = (double)(atomic_load(&g_peak_cached) - cached0);
    fprintf(stderr, "[%s] open %.2f s, attach %.2f s, prefill %d tokens %.2f s (%.2f tok/s)\n", label, t_open, t_attach,
            prompt, t_prefill, prompt / t_prefill);
    fprintf(stderr, "[%s] decode %d tokens: %.3f tok/s (mean), %.3f tok/s (median step)\n", label, decode,
            decode / t_decode, 1.0 / med);
    expert_cache_print_stats(ec, stderr);
    fprintf(stderr, "[%s] peak RSS %.2f GiB (sampled %.2f), page cache growth %.2f GiB; model file in page cache: "
            "experts %.2f GiB, other tensors %.2f GiB\n", label, rl_peak_rss() / GiB, atomic_load(&g_peak_rss) / GiB,
            cached_growth / GiB, res_exp / GiB, res_other / GiB);
    printf("{\"label\":\"%s\",\"spec\":\"%s\",\"fast\":%s,\"open_s\":%.3f,\"attach_s\":%.3f,\"prefill_tokens\":%d,"
           "\"prefill_s\":%.3f,\"decode_tokens\":%d,\"decode_s\":%.3f,\"decode_tok_s\":%.4f,\"median_step_s\":%.4f,"
           "\"misses_per_token\":%.3f,\"mib_read_per_token\":%.3f,\"mib_demand_per_token\":%.3f,"
           "\"hit_rate\":%.4f,\"pf_precision\":%.4f,\"pf_recall\":%.4f,\"pf_load_use\":%.4f,\"io_wait_s\":%.3f,"
           "\"hint_s\":%.3f,\"prefill_mib_read\":%.1f,\"peak_rss_gib\":%.3f,\"cached_growth_gib\":%.3f,"
           "\"file_cached_experts_gib\":%.3f,\"file_cached_other_gib\":%.3f,\"tokens_hash\":\"%016llx\"}\n",
           label, spec ? spec : "mmap", fast ? "true" : "false", t_open, t_attach, prompt, t_prefill, decode, t_decode,
           decode / t_decode, med, sd.misses / tok, (sd.bytes_demand + sd.bytes_prefetch) / MiB / tok,
           sd.bytes_demand / MiB / tok, sd.lookups ? (double)(sd.hits + sd.hits_inflight) / sd.lookups : 0,
           sd.pf_predicted ? (double)sd.pf_predicted_used / sd.pf_predicted : 0,
           sd.pf_used_total ? (double)sd.pf_predicted_used / sd.pf_used_total : 0,
           sd.pf_loads ? (double)sd.pf_loads_used / sd.pf_loads : 0, sd.io_wait_s, sd.hint_s,
           (sp.bytes_demand + sp.bytes_prefetch) / MiB, rl_peak_rss() / GiB, cached_growth / GiB,
           res_exp / GiB, res_other / GiB, (unsigned long long)hash);
    free(dt);
    free(lg);
    free(toks);
    session_free(S);
    session_model_close(sm);
    return 0;
}
