/* test_expert_cache.c — the bounded expert cache against the mapped source.
 *
 * A tiny Qwen3-Next GGUF is written here with gguf_writer (4 layers: DeltaNet/attention
 * alternating, 16 experts top-4; experts Q8_0 and Q4_0, separate and fused gate_up, so there
 * are two slot size classes and both layouts). Every cached run must give logits bit-identical
 * to the mapped source over 64 tokens; eviction, prefetch, abort and fault paths are checked
 * through the counters. If tests/fixtures/tiny-a.gguf exists it is checked the same way. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "run/engine.h"
#include "cache/expert_cache.h"
#include "gguf/gguf.h"
#include "gguf/quant.h"
#include "model/experts.h"
#include "run/session.h"

#define D 64
#define V 64
#define NL 4
#define E 16
#define K 4
#define FF 32
#define NTOK 64

static char g_path[256];
static int32_t g_tokens[NTOK];

/* ---- building the tiny model ---------------------------------------------------------- */

typedef struct {
    void **bufs;
    int n;
    rl_rng rng;
    float router_base[D * E];
} builder;

static const void *keep(builder *b, void *p) {
    b->bufs = realloc(b->bufs, sizeof(void *) * (size_t)(b->n + 1));
    b->bufs[b->n++] = p;
    return p;
}

/* n_in x n_rows(x n_exp) random values of the given std, quantised to type. */
static void add_mat(gguf_writer *w, builder *b, const char *name, uint32_t type, int64_t n_in, int64_t n_out,
                    int64_t n_exp, float std, const float *base) {
    int64_t n = n_in * n_out * (n_exp ? n_exp : 1);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = std * rl_rng_normal(&b->rng) + (base ? base[i] : 0.0f);
    size_t bytes = quant_row_size(type, n_in) * (size_t)(n / n_in);
    void *q = malloc(bytes);
    quant_get(type)->from_float(x, q, n);
    free(x);
    int64_t ne[3] = {n_in, n_out, n_exp};
    gguf_writer_add_tensor(w, name, type, n_exp ? 3 : 2, ne, keep(b, q));
}

static void add_vec(gguf_writer *w, builder *b, const char *name, int64_t n, float mean, float std) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = mean + std * rl_rng_normal(&b->rng);
    gguf_writer_add_tensor(w, name, QT_F32, 1, &n, keep(b, x));
}

static int write_tiny(const char *path) {
    gguf_writer *w = gguf_writer_new();
    builder b = {0};
    rl_rng_seed(&b.rng, 1234);
    gguf_writer_set_str(w, "general.architecture", "qwen3next");
    gguf_writer_set_u32(w, "qwen3next.embedding_length", D);
    gguf_writer_set_u32(w, "qwen3next.block_count", NL);
    gguf_writer_set_u32(w, "qwen3next.attention.head_count", 2);
    gguf_writer_set_u32(w, "qwen3next.attention.head_count_kv", 1);
    gguf_writer_set_u32(w, "qwen3next.attention.key_length", 32);
    gguf_writer_set_u32(w, "qwen3next.rope.dimension_count", 16);
    gguf_writer_set_u32(w, "qwen3next.expert_count", E);
    gguf_writer_set_u32(w, "qwen3next.expert_used_count", K);
    gguf_writer_set_u32(w, "qwen3next.expert_feed_forward_length", FF);
    gguf_writer_set_u32(w, "qwen3next.expert_shared_feed_forward_length", FF);
    gguf_writer_set_u32(w, "qwen3next.ssm.conv_kernel", 4);
    gguf_writer_set_u32(w, "qwen3next.ssm.state_size", 16);
    gguf_writer_set_u32(w, "qwen3next.ssm.group_count", 2);
    gguf_writer_set_u32(w, "qwen3next.ssm.time_step_rank", 4);
    gguf_writer_set_u32(w, "qwen3next.ssm.inner_size", 64);
    gguf_writer_set_u32(w, "qwen3next.full_attention_interval", 2);
    gguf_writer_set_f32(w, "qwen3next.rope.freq_base", 10000.0f);
    add_mat(w, &b, "token_embd.weight", QT_F32, D, V, 0, 1.0f, NULL);
    add_vec(w, &b, "output_norm.weight", D, 1.0f, 0.1f);
    add_mat(w, &b, "output.weight", QT_F32, D, V, 0, 0.125f, NULL);
    /* routers share a base so layer l+1's router on layer l's input predicts well */
    for (int i = 0; i < D * E; i++) b.router_base[i] = 0.5f * rl_rng_normal(&b.rng);
    char nm[128];
#define NAME(fmt) (snprintf(nm, sizeof nm, fmt, il), nm)
    for (int il = 0; il < NL; il++) {
        add_vec(w, &b, NAME("blk.%d.attn_norm.weight"), D, 1.0f, 0.1f);
        add_vec(w, &b, NAME("blk.%d.post_attention_norm.weight"), D, 1.0f, 0.1f);
        if (il % 2 == 1) {
            add_mat(w, &b, NAME("blk.%d.attn_q.weight"), QT_F32, D, 2 * 2 * 32, 0, 0.125f, NULL);
            add_mat(w, &b, NAME("blk.%d.attn_k.weight"), QT_F32, D, 32, 0, 0.125f, NULL);
            add_mat(w, &b, NAME("blk.%d.attn_v.weight"), QT_F32, D, 32, 0, 0.125f, NULL);
            add_mat(w, &b, NAME("blk.%d.attn_output.weight"), QT_F32, 64, D, 0, 0.125f, NULL);
            add_vec(w, &b, NAME("blk.%d.attn_q_norm.weight"), 32, 1.0f, 0.1f);
            add_vec(w, &b, NAME("blk.%d.attn_k_norm.weight"), 32, 1.0f, 0.1f);
        } else {
            add_mat(w, &b, NAME("blk.%d.attn_qkv.weight"), QT_F32, D, 128, 0, 0.125f, NULL);
            add_mat(w, &b, NAME("blk.%d.attn_gate.weight"), QT_F32, D, 64, 0, 0.125f, NULL);
            add_mat(w, &b, NAME("blk.%d.ssm_ba.weight"), QT_F32, D, 8, 0, 0.125f, NULL);
            add_vec(w, &b, NAME("blk.%d.ssm_conv1d.weight"), 4 * 128, 0.0f, 0.5f);
            add_vec(w, &b, NAME("blk.%d.ssm_dt.bias"), 4, 0.0f, 0.5f);
            add_vec(w, &b, NAME("blk.%d.ssm_a"), 4, -1.0f, 0.2f);
            add_vec(w, &b, NAME("blk.%d.ssm_norm.weight"), 16, 1.0f, 0.1f);
            add_mat(w, &b, NAME("blk.%d.ssm_out.weight"), QT_F32, 64, D, 0, 0.125f, NULL);
        }
        add_mat(w, &b, NAME("blk.%d.ffn_gate_inp.weight"), QT_F32, D, E, 0, 0.25f, b.router_base);
        /* experts: Q8_0 separate, Q4_0 fused, Q8_0 fused, Q4_0 separate */
        uint32_t et = il % 2 ? QT_Q4_0 : QT_Q8_0;
        if (il == 1 || il == 2) {
            add_mat(w, &b, NAME("blk.%d.ffn_gate_up_exps.weight"), et, D, 2 * FF, E, 0.125f, NULL);
        } else {
            add_mat(w, &b, NAME("blk.%d.ffn_gate_exps.weight"), et, D, FF, E, 0.125f, NULL);
            add_mat(w, &b, NAME("blk.%d.ffn_up_exps.weight"), et, D, FF, E, 0.125f, NULL);
        }
        add_mat(w, &b, NAME("blk.%d.ffn_down_exps.weight"), et, FF, D, E, 0.18f, NULL);
        add_mat(w, &b, NAME("blk.%d.ffn_gate_shexp.weight"), QT_F32, D, FF, 0, 0.125f, NULL);
        add_mat(w, &b, NAME("blk.%d.ffn_up_shexp.weight"), QT_F32, D, FF, 0, 0.125f, NULL);
        add_mat(w, &b, NAME("blk.%d.ffn_down_shexp.weight"), QT_F32, FF, D, 0, 0.18f, NULL);
        add_vec(w, &b, NAME("blk.%d.ffn_gate_inp_shexp.weight"), D, 0.0f, 0.1f);
    }
#undef NAME
    int rc = gguf_writer_write(w, path);
    gguf_writer_free(w);
    for (int i = 0; i < b.n; i++) free(b.bufs[i]);
    free(b.bufs);
    return rc;
}

/* ---- running ------------------------------------------------------------------------ */

typedef struct {
    engine *e;
    float *ref;     /* NTOK x n_vocab logits of the mapped source, token by token */
    float *ref_pre; /* NTOK x n_vocab logits of engine_verify in chunks of 8 */
    int nv;
} fixture;

/* A context for the runs below whose routed experts come from ec (NULL: the mapping). */
static engine_ctx *ctx_new(engine *e, expert_cache *ec) {
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = NTOK + 8, .n_batch = 8});
    if (c && ec) {
        q3n_expert_src src = expert_cache_src(ec);
        engine_set_expert_src(c, &src);
    }
    return c;
}

static int run_steps(engine *e, expert_cache *ec, float *out, int n, int nv) {
    engine_ctx *c = ctx_new(e, ec);
    if (!c) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = engine_step(c, g_tokens[i], out + (size_t)i * nv);
    engine_ctx_free(c);
    return rc;
}

static int run_verify(engine *e, expert_cache *ec, float *out, int nv) {
    engine_ctx *c = ctx_new(e, ec);
    if (!c) return -1;
    int rc = 0;
    for (int i = 0; i < NTOK && !rc; i += 8)
        rc = engine_verify(c, g_tokens + i, 8, out + (size_t)i * nv, NULL);
    engine_ctx_free(c);
    return rc;
}

static bool same(const float *a, const float *b, size_t n) { return memcmp(a, b, sizeof(float) * n) == 0; }

static expert_cache *mk(fixture *fx, ec_mode mode, ec_params p) {
    expert_cache *ec = expert_cache_new(engine_model(fx->e), mode, &p);
    CHECK(ec != NULL, "expert_cache_new: %s", rl_lasterr());
    return ec;
}

/* One cached configuration: bit-identical logits step by step; returns the stats. */
static ec_stats check_config(fixture *fx, const char *what, ec_mode mode, ec_params p) {
    ec_stats st = {0};
    expert_cache *ec = mk(fx, mode, p);
    if (!ec) return st;
    float *out = malloc(sizeof(float) * (size_t)NTOK * fx->nv);
    check_poison(out, (size_t)NTOK * fx->nv);
    int rc = run_steps(fx->e, ec, out, NTOK, fx->nv);
    CHECK(rc == 0, "%s: step failed: %s", what, rl_lasterr());
    CHECK(same(out, fx->ref, (size_t)NTOK * fx->nv), "%s: logits differ from the mapped source", what);
    CHECK(expert_cache_check(ec) == 0, "%s: %s", what, rl_lasterr());
    expert_cache_get_stats(ec, &st);
    CHECK(st.tokens == NTOK, "%s: counted %llu tokens", what, (unsigned long long)st.tokens);
    if (getenv("VERBOSE")) {
        printf("[%s]\n", what);
        expert_cache_print_stats(ec, stdout);
    }
    expert_cache_free(ec);
    free(out);
    return st;
}

static uint64_t slot_sum(const q3n_model *m, bool direct) {
    uint64_t s = 0;
    for (int il = 0; il < m->hp.n_layer; il++) s += expert_cache_slot_bytes(m, il, direct);
    return s;
}

static void test_modes(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    CHECK(expert_cache_slot_bytes(m, 0, false) == 8192 && expert_cache_slot_bytes(m, 1, false) == 4096,
          "slot sizes %llu %llu", (unsigned long long)expert_cache_slot_bytes(m, 0, false),
          (unsigned long long)expert_cache_slot_bytes(m, 1, false));
    uint64_t per10 = 10 * slot_sum(m, false); /* 10 slots per layer: 40 of the 64 experts */

    ec_stats a = check_config(fx, "bounded, classes, prefetch", EC_BOUNDED,
                              (ec_params){.budget = per10, .io = EC_IO_BUFFERED});
    CHECK(a.n_classes == 2 && a.n_slots == 40, "classes %llu slots %llu", (unsigned long long)a.n_classes,
          (unsigned long long)a.n_slots);
    CHECK(a.misses > 0 && a.hits > 0 && a.evictions > 0, "misses %llu hits %llu evictions %llu",
          (unsigned long long)a.misses, (unsigned long long)a.hits, (unsigned long long)a.evictions);
    CHECK(a.pf_loads > 0 && a.pf_loads_used > 0 && a.pf_predicted_used > 0, "prefetch loads %llu used %llu",
          (unsigned long long)a.pf_loads, (unsigned long long)a.pf_loads_used);
    CHECK(a.lookups == (uint64_t)NTOK * NL * K, "lookups %llu", (unsigned long long)a.lookups);
    CHECK(a.bytes_demand + a.bytes_prefetch > 0 && a.io_errors == 0 && a.aborts == 0, "bytes/errors");
    CHECK(a.pf_used_total == (uint64_t)NTOK * (NL - 1) * K, "pf_used_total %llu",
          (unsigned long long)a.pf_used_total);

    /* decisions never depend on I/O timing: a second run counts exactly the same */
    ec_stats a2 = check_config(fx, "bounded, classes, prefetch (again)", EC_BOUNDED,
                               (ec_params){.budget = per10, .io = EC_IO_BUFFERED});
    /* (only the split of hits into "loaded" and "still in flight" depends on timing) */
    CHECK(a2.misses == a.misses && a2.evictions == a.evictions && a2.pf_loads == a.pf_loads &&
              a2.pf_loads_used == a.pf_loads_used && a2.hits_inflight + a2.hits == a.hits_inflight + a.hits,
          "stats differ between identical runs");

    ec_stats b = check_config(fx, "bounded, uniform, no prefetch, 1 I/O thread", EC_BOUNDED,
                              (ec_params){.budget = 24 * 8192,
                                          .uniform = true,
                                          .no_prefetch = true,
                                          .io_threads = 1,
                                          .io = EC_IO_BUFFERED});
    CHECK(b.n_classes == 1 && b.n_slots == 24 && b.pf_loads == 0 && b.evictions > 0, "uniform: %llu classes",
          (unsigned long long)b.n_classes);
    CHECK(b.misses + b.hits == b.lookups && b.hits_inflight == 0, "uniform: hits + misses != lookups");

    /* prefetch makes demand misses rarer than without it at the same budget */
    ec_stats c = check_config(fx, "bounded, classes, no prefetch", EC_BOUNDED,
                              (ec_params){.budget = per10, .no_prefetch = true, .io = EC_IO_BUFFERED});
    CHECK(a.misses < c.misses, "prefetch did not reduce misses (%llu vs %llu)", (unsigned long long)a.misses,
          (unsigned long long)c.misses);

    /* a budget holding everything: after the first touch, never a miss */
    ec_stats d = check_config(fx, "bounded, everything fits", EC_BOUNDED, (ec_params){.budget = 1 << 24});
    /* fewer predictions per row: fewer prefetch loads */
    ec_stats k2 = check_config(fx, "bounded, prefetch top-2", EC_BOUNDED,
                               (ec_params){.budget = per10, .io = EC_IO_BUFFERED, .prefetch_k = 2});
    CHECK(k2.pf_predicted == (uint64_t)NTOK * (NL - 1) * 2 && k2.pf_loads < a.pf_loads,
          "prefetch_k: %llu predicted", (unsigned long long)k2.pf_predicted);
    CHECK(d.evictions == 0 && d.misses + d.pf_loads <= (uint64_t)NL * E, "everything fits: %llu evictions",
          (unsigned long long)d.evictions);

    int fd = open(g_path, O_RDONLY | O_DIRECT);
    if (fd >= 0) {
        close(fd);
        uint64_t ds = expert_cache_slot_bytes(m, 0, true);
        ec_stats x = check_config(fx, "bounded, O_DIRECT", EC_BOUNDED,
                                  (ec_params){.budget = 24 * ds, .io = EC_IO_DIRECT});
        CHECK(x.misses > 0 && x.evictions > 0, "direct: no misses");
    } else {
        printf("note: O_DIRECT not supported here (%s), direct test skipped\n", strerror(errno));
    }

    ec_stats f = check_config(fx, "full", EC_FULL, (ec_params){0});
    CHECK(f.misses == 0 && f.hits == f.lookups, "full: misses");
    check_config(fx, "mmap", EC_MMAP, (ec_params){0});

    /* too small: one layer plus the margin must fit */
    uint64_t minb = expert_cache_min_budget(m, false);
    CHECK(minb == (uint64_t)(E + K) * 8192, "min budget %llu", (unsigned long long)minb);
    expert_cache *ec =
        expert_cache_new(m, EC_BOUNDED, &(ec_params){.budget = minb - 1, .io = EC_IO_BUFFERED});
    CHECK(!ec && strstr(rl_lasterr(), "minimum"), "too small accepted: %s", rl_lasterr());
    expert_cache_free(ec);
}

static void test_prefill(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    expert_cache *ec =
        mk(fx, EC_BOUNDED, (ec_params){.budget = 10 * slot_sum(m, false), .io = EC_IO_BUFFERED});
    if (!ec) return;
    float *out = malloc(sizeof(float) * (size_t)NTOK * fx->nv);
    check_poison(out, (size_t)NTOK * fx->nv);
    CHECK(run_verify(fx->e, ec, out, fx->nv) == 0, "verify: %s", rl_lasterr());
    CHECK(same(out, fx->ref_pre, (size_t)NTOK * fx->nv), "8-row verify logits differ from the mapped source");
    ec_stats st;
    expert_cache_get_stats(ec, &st);
    CHECK(st.tokens == NTOK && st.acquires == (uint64_t)NTOK / 8 * NL && st.lookups > st.acquires * K,
          "prefill: %llu acquires %llu lookups", (unsigned long long)st.acquires,
          (unsigned long long)st.lookups);
    CHECK(expert_cache_check(ec) == 0, "prefill: %s", rl_lasterr());
    expert_cache_free(ec);
    free(out);
}

/* Scans (SLOT_SCAN_ROWS): a prompt chunk's loads go to the least recent end, so a cycle over every
 * layer's experts keeps what was resident instead of evicting it first. Hand-worked, uniform slots,
 * 2E + K of them, four layers of E experts each acquired whole once per forward (what a long prompt
 * chunk does), the forward's rows given by the hint (no prefetch: the hint only counts).
 *   scan: after forward 0 the cache holds layer 0 (E), layer 1's first K and layer 3 (E, at the
 *         tail); every later forward hits layer 0 and layer 1's K, and loads the rest: 3E - K misses.
 *   plain LRU (RL_CACHE_SCAN=0): every entry is evicted before its next use: 4E misses a forward.
 *   a decode-sized forward (1 row) is plain LRU even with scans on. */
static uint64_t scan_misses(fixture *fx, bool no_scan, int rows, uint64_t *demoted) {
    const q3n_model *m = engine_model(fx->e);
    const uint64_t slot = expert_cache_min_budget(m, false) / (E + K);
    expert_cache *ec = mk(fx, EC_BOUNDED,
                          (ec_params){.budget = (2 * E + K) * slot,
                                      .uniform = true,
                                      .no_prefetch = true,
                                      .no_scan = no_scan,
                                      .io = EC_IO_BUFFERED});
    if (!ec) return 0;
    q3n_expert_src src = expert_cache_src(ec);
    const uint8_t *g[E], *u[E], *d[E];
    int32_t ids[E];
    for (int i = 0; i < E; i++) ids[i] = i;
    ec_stats st;
    uint64_t before = 0, per = 0;
    for (int f = 0; f < 3; f++) {
        src.hint(src.ud, 0, NULL, rows);
        for (int il = 0; il < NL; il++) {
            CHECK(src.acquire(src.ud, il, ids, E, g, u, d) == 0, "acquire: %s", rl_lasterr());
            const uint8_t *fg, *fu, *fd;
            q3n_expert_rows(&m->hp, &m->layers[il], E - 1, &fg, &fu, &fd);
            CHECK(memcmp(g[E - 1], fg, 16) == 0 && memcmp(d[E - 1], fd, 16) == 0,
                  "scan: layer %d expert %d: other bytes than the file's", il, E - 1);
            src.release(src.ud, il);
        }
        expert_cache_get_stats(ec, &st);
        if (f) { /* forwards 1 and 2 must agree: the state after each is the same */
            CHECK(f == 1 || st.misses - before == per, "scan: forward %d missed %llu, forward 1 %llu", f,
                  (unsigned long long)(st.misses - before), (unsigned long long)per);
            per = st.misses - before;
        }
        before = st.misses;
    }
    CHECK(expert_cache_check(ec) == 0, "scan: %s", rl_lasterr());
    *demoted = st.scan_demoted;
    expert_cache_free(ec);
    return per;
}

static void test_scan(fixture *fx) {
    uint64_t dem = 0;
    const uint64_t scan = scan_misses(fx, false, SLOT_SCAN_ROWS, &dem);
    CHECK(scan == 3 * E - K && dem > 0, "scan: %llu misses a forward (want %d), %llu demoted",
          (unsigned long long)scan, 3 * E - K, (unsigned long long)dem);
    const uint64_t lru = scan_misses(fx, true, SLOT_SCAN_ROWS, &dem);
    CHECK(lru == 4 * E && dem == 0, "RL_CACHE_SCAN=0: %llu misses a forward (want %d), %llu demoted",
          (unsigned long long)lru, 4 * E, (unsigned long long)dem);
    const uint64_t step = scan_misses(fx, false, 1, &dem);
    CHECK(step == 4 * E && dem == 0,
          "1-row forwards: %llu misses a forward (want %d, plain LRU), %llu demoted",
          (unsigned long long)step, 4 * E, (unsigned long long)dem);

    /* through the engine: a 64-row prompt in one forward over a cache that holds 10 of 16 experts a
     * layer, twice (the second over what the first left): the last row's logits are the steps' */
    const q3n_model *m = engine_model(fx->e);
    expert_cache *ec =
        mk(fx, EC_BOUNDED,
           (ec_params){.budget = expert_cache_min_budget(m, false) * 3 / 2, .io = EC_IO_BUFFERED});
    if (!ec) return;
    engine_ctx *c = engine_ctx_new(fx->e, &(engine_ctx_params){.n_ctx = NTOK + 8, .n_batch = NTOK});
    CHECK(c != NULL, "context: %s", rl_lasterr());
    if (c) {
        q3n_expert_src src = expert_cache_src(ec);
        engine_set_expert_src(c, &src);
        float *lg = malloc(sizeof(float) * (size_t)fx->nv);
        for (int r = 0; r < 2; r++) {
            engine_reset(c);
            check_poison(lg, (size_t)fx->nv);
            CHECK(engine_prefill(c, g_tokens, NTOK, lg) == 0, "prefill: %s", rl_lasterr());
            CHECK(same(lg, fx->ref + (size_t)(NTOK - 1) * fx->nv, (size_t)fx->nv),
                  "scan prefill %d: the last row's logits differ from the steps'", r);
        }
        ec_stats st;
        expert_cache_get_stats(ec, &st);
        CHECK(st.scan_demoted > 0 && st.evictions > 0, "engine scan: %llu demoted, %llu evictions",
              (unsigned long long)st.scan_demoted, (unsigned long long)st.evictions);
        CHECK(expert_cache_check(ec) == 0, "engine scan: %s", rl_lasterr());
        free(lg);
        engine_ctx_free(c);
    }
    expert_cache_free(ec);
}

/* Inject a failing read; the step fails with a clear error, the cache stays consistent, and the
 * retried step and all later ones match the reference: with `restore`, after restoring a
 * snapshot taken before the step; without, as is (a failed step commits no recurrent state and
 * does not advance the position, so nothing needs undoing). */
static void run_fault(fixture *fx, ec_fault kind, uint64_t nth, bool prefetch, const char *want, ec_io io,
                      bool restore) {
    const q3n_model *m = engine_model(fx->e);
    uint64_t budget = io == EC_IO_DIRECT ? 24 * expert_cache_slot_bytes(m, 0, true) : 10 * slot_sum(m, false);
    expert_cache *ec = mk(fx, EC_BOUNDED, (ec_params){.budget = budget, .no_prefetch = !prefetch, .io = io});
    if (!ec) return;
    engine_ctx *c = ctx_new(fx->e, ec);
    engine_snapshot *snap = engine_snapshot_new(c);
    float *lg = malloc(sizeof(float) * (size_t)fx->nv);
    int failures = 0, mismatches = 0;
    for (int i = 0; i < NTOK; i++) {
        if (i == 5) expert_cache_set_fault(ec, kind, nth);
        engine_snapshot_save(c, snap);
        check_poison(lg, (size_t)fx->nv);
        if (engine_step(c, g_tokens[i], lg) != 0) {
            failures++;
            CHECK(strstr(rl_lasterr(), "reading expert ") && strstr(rl_lasterr(), g_path) &&
                      strstr(rl_lasterr(), want),
                  "error message: %s", rl_lasterr());
            CHECK(expert_cache_check(ec) == 0, "after abort: %s", rl_lasterr());
            CHECK(engine_pos(c) == i, "position advanced on failure");
            if (restore) engine_snapshot_restore(c, snap);
            CHECK(engine_step(c, g_tokens[i], lg) == 0, "retry failed: %s", rl_lasterr());
        }
        mismatches += !same(lg, fx->ref + (size_t)i * fx->nv, (size_t)fx->nv);
    }
    ec_stats st;
    expert_cache_get_stats(ec, &st);
    CHECK(mismatches == 0, "%d steps differ from the reference after a fault (%s)", mismatches,
          restore ? "snapshot restored" : "no restore");
    CHECK(st.io_errors >= 1, "fault %d@%llu: no read error counted", kind, (unsigned long long)nth);
    if (!prefetch) /* a demand read failed: exactly one step failed and was rolled back */
        CHECK(failures == 1 && st.aborts == 1, "failures %d aborts %llu", failures,
              (unsigned long long)st.aborts);
    else /* a failed prefetch is retried on demand; only a failed demand read aborts */
        CHECK(failures == (int)st.aborts && failures <= 1, "failures %d aborts %llu", failures,
              (unsigned long long)st.aborts);
    CHECK(expert_cache_check(ec) == 0, "end: %s", rl_lasterr());
    free(lg);
    engine_snapshot_free(snap);
    engine_ctx_free(c);
    expert_cache_free(ec);
}

static void test_faults(fixture *fx) {
    run_fault(fx, EC_FAULT_EIO, 3, false, "Input/output error", EC_IO_BUFFERED, true);
    run_fault(fx, EC_FAULT_EIO, 3, false, "Input/output error", EC_IO_BUFFERED, false);
    run_fault(fx, EC_FAULT_EOF, 7, false, "unexpected end of file", EC_IO_BUFFERED, false);
    for (uint64_t n = 1; n <= 9; n += 4)
        run_fault(fx, EC_FAULT_EIO, n, true, "Input/output error", EC_IO_BUFFERED, n % 2 == 1 && n > 1);
    int fd = open(g_path, O_RDONLY | O_DIRECT);
    if (fd >= 0) {
        close(fd);
        run_fault(fx, EC_FAULT_EIO, 4, false, "Input/output error", EC_IO_DIRECT, false);
        run_fault(fx, EC_FAULT_EOF, 2, true, "unexpected end of file", EC_IO_DIRECT, true);
    }
    /* short and interrupted reads are absorbed */
    const q3n_model *m = engine_model(fx->e);
    expert_cache *ec =
        mk(fx, EC_BOUNDED, (ec_params){.budget = 10 * slot_sum(m, false), .io = EC_IO_BUFFERED});
    if (!ec) return;
    float *out = malloc(sizeof(float) * (size_t)NTOK * fx->nv);
    for (int pass = 0; pass < 2; pass++) {
        expert_cache_set_fault(ec, pass ? EC_FAULT_EINTR : EC_FAULT_SHORT, 2);
        check_poison(out, (size_t)NTOK * fx->nv);
        CHECK(run_steps(fx->e, ec, out, NTOK, fx->nv) == 0, "short/eintr: %s", rl_lasterr());
        CHECK(same(out, fx->ref, (size_t)NTOK * fx->nv), "short/eintr reads changed the logits");
    }
    ec_stats st;
    expert_cache_get_stats(ec, &st);
    CHECK(st.short_reads > 0 && st.eintr > 0 && st.io_errors == 0, "short %llu eintr %llu errors %llu",
          (unsigned long long)st.short_reads, (unsigned long long)st.eintr, (unsigned long long)st.io_errors);
    expert_cache_free(ec);
    free(out);
}

static void test_route_bias(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    uint64_t budget = 10 * slot_sum(m, false);
    float *o1 = malloc(sizeof(float) * (size_t)NTOK * fx->nv),
          *o2 = malloc(sizeof(float) * (size_t)NTOK * fx->nv);
    ec_stats s1, s2;
    expert_cache *ec =
        mk(fx, EC_BOUNDED, (ec_params){.budget = budget, .route_bias = 3.0f, .io = EC_IO_BUFFERED});
    CHECK(expert_cache_src(ec).bias != NULL, "bias hook not installed");
    CHECK(run_steps(fx->e, ec, o1, NTOK, fx->nv) == 0, "bias run: %s", rl_lasterr());
    expert_cache_get_stats(ec, &s1);
    expert_cache_free(ec);
    ec = mk(fx, EC_BOUNDED, (ec_params){.budget = budget, .route_bias = 3.0f, .io = EC_IO_BUFFERED});
    CHECK(run_steps(fx->e, ec, o2, NTOK, fx->nv) == 0, "bias run: %s", rl_lasterr());
    expert_cache_get_stats(ec, &s2);
    expert_cache_free(ec);
    CHECK(same(o1, o2, (size_t)NTOK * fx->nv), "cache-aware routing is not deterministic");
    CHECK(s1.bias_calls == (uint64_t)NTOK * NL && s1.misses == s2.misses, "bias calls %llu",
          (unsigned long long)s1.bias_calls);
    ec = mk(fx, EC_BOUNDED, (ec_params){.budget = budget, .io = EC_IO_BUFFERED});
    CHECK(expert_cache_src(ec).bias == NULL, "exact routing must not install the bias hook");
    run_steps(fx->e, ec, o2, NTOK, fx->nv);
    ec_stats s0;
    expert_cache_get_stats(ec, &s0);
    expert_cache_free(ec);
    CHECK(s1.misses < s0.misses, "bias did not reduce misses: %llu vs %llu", (unsigned long long)s1.misses,
          (unsigned long long)s0.misses);
    free(o1);
    free(o2);
}

static void test_plan_attach_trace(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    ec_plan p;
    CHECK(expert_cache_plan(m, 64ull << 30, 64ull << 30, 4096, 0, "auto", EC_IO_AUTO, false, &p) == 0 &&
              p.mode == EC_FULL,
          "auto, big RAM: %s", p.reason);
    CHECK(expert_cache_plan(m, 1 << 20, 1 << 20, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 &&
              p.mode == EC_BOUNDED && p.budget == expert_cache_min_budget(m, true) &&
              strstr(p.reason, "tight"),
          "auto, tiny RAM: %s", p.reason);
    /* the context's scratch is kept out of the budget: a 2 GiB scratch + 256 MiB slack replaces the 0.5 GiB
     * floor */
    CHECK(expert_cache_plan(m, 1 << 20, 1 << 20, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 &&
              strstr(p.reason, "0.5 GiB reserve"),
          "reserve: %s", p.reason);
    CHECK(expert_cache_plan(m, 1 << 20, 1 << 20, 4096, 2ull << 30, NULL, EC_IO_AUTO, false, &p) == 0 &&
              strstr(p.reason, "2.2 GiB reserve"),
          "reserve with scratch: %s", p.reason);
    /* under a VRAM tier (device) the dense weights, the state and the scratch are the GPU's: a RAM
     * that holds the experts but not the dense weights beside them is full residency there, bounded
     * on the CPU; the scratch is not reserved */
    const uint64_t all = m->bytes_experts + m->bytes_dense + expert_cache_state_bytes(m, 4096);
    const uint64_t mid = (uint64_t)((double)(m->bytes_experts + all) / 2 / EC_RAM_SHARE);
    CHECK(m->bytes_dense > 0 && expert_cache_plan(m, mid, mid, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 &&
              p.mode == EC_BOUNDED,
          "host tier, RAM between experts and experts + dense: bounded (%s)", p.reason);
    CHECK(expert_cache_plan(m, mid, mid, 4096, 0, NULL, EC_IO_AUTO, true, &p) == 0 && p.mode == EC_FULL &&
              strstr(p.reason, "on the GPU"),
          "device tier, same RAM: full (%s)", p.reason);
    CHECK(expert_cache_plan(m, 1024, 1024, 4096, 2ull << 30, NULL, EC_IO_AUTO, true, &p) == 0 &&
              p.mode == EC_BOUNDED && strstr(p.reason, "0.5 GiB reserve") && strstr(p.reason, "on the GPU"),
          "device tier: the scratch is the GPU's (%s)", p.reason);
    /* between 70 % and 90 % of RAM (everything + the 0.5 GiB reserve): full residency in the page cache
     * when that much is free now, else bounded; never under a VRAM tier; above 90 %: bounded. The
     * tiny model's bytes are scaled to a 35B-A3B Q4_K_M file's (18.2 + 1.2 GiB; the planner reads the
     * layers only for a bounded budget's clamps) */
    q3n_model big = *m;
    big.bytes_experts = (uint64_t)(18.2 * (1 << 30));
    big.bytes_dense = (uint64_t)(1.2 * (1 << 30));
    const uint64_t need = big.bytes_experts + big.bytes_dense + expert_cache_state_bytes(m, 4096) +
                          (512ull << 20),
                   r85 = (uint64_t)((double)need / 0.85), r95 = (uint64_t)((double)need / 0.95);
    CHECK(expert_cache_plan(&big, r85, r85, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 && p.mode == EC_FULL &&
              p.mapped && strstr(p.reason, "page cache"),
          "85%%, free: mapped (%s)", p.reason);
    CHECK(expert_cache_plan(&big, r85, need - 1, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 &&
              p.mode == EC_BOUNDED && !p.mapped,
          "85%%, less free than needed: bounded (%s)", p.reason);
    CHECK(expert_cache_plan(&big, r85, need, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 && p.mapped,
          "85%%, exactly enough free: mapped (%s)", p.reason);
    CHECK(expert_cache_plan(&big, r95, r95, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 &&
              p.mode == EC_BOUNDED,
          "95%%: bounded (%s)", p.reason);
    CHECK(expert_cache_plan(&big, r85, r85, 4096, 0, NULL, EC_IO_AUTO, true, &p) == 0 && !p.mapped,
          "85%%, VRAM tier: not mapped (%s)", p.reason);
    CHECK(expert_cache_plan(&big, 64ull << 30, 64ull << 30, 4096, 0, NULL, EC_IO_AUTO, false, &p) == 0 &&
              p.mode == EC_FULL && !p.mapped,
          "big RAM: copied, not mapped (%s)", p.reason);
    CHECK(expert_cache_plan(m, 0, 0, 4096, 0, "full", EC_IO_AUTO, false, &p) == 0 && p.mode == EC_FULL &&
              !p.mapped,
          "full");
    CHECK(expert_cache_plan(m, 0, 0, 4096, 0, "mmap", EC_IO_AUTO, false, &p) == 0 && p.mode == EC_MMAP,
          "mmap");
    CHECK(expert_cache_plan(m, 0, 0, 4096, 0, "0.5", EC_IO_AUTO, false, &p) == 0 && p.mode == EC_BOUNDED &&
              p.budget == 524288,
          "0.5 MiB");
    CHECK(expert_cache_plan(m, 0, 0, 4096, 0, "4096", EC_IO_AUTO, false, &p) == 0 &&
              p.budget == expert_cache_full_bytes(m, true),
          "capped at full");
    CHECK(expert_cache_plan(m, 0, 0, 4096, 0, "0.1", EC_IO_AUTO, false, &p) == -1 &&
              strstr(rl_lasterr(), "minimum"),
          "below min: %s", rl_lasterr());
    CHECK(expert_cache_plan(m, 0, 0, 4096, 0, "lots", EC_IO_AUTO, false, &p) == -1 &&
              strstr(rl_lasterr(), "--cache-mib"),
          "bad spec");
    CHECK(expert_cache_state_bytes(m, 100) == 100ull * 2 * 2 * 32 * 4 + 2ull * (3 * 128 + 4 * 16 * 16) * 4,
          "state bytes %llu", (unsigned long long)expert_cache_state_bytes(m, 100));

    /* the session owns the cache it plans (here 0.5 MiB), with a route trace */
    char trace[300];
    snprintf(trace, sizeof trace, "%s.trace", g_path);
    session_model *sm = session_model_open(&(session_model_params){.model_path = g_path, .n_threads = 2});
    CHECK(sm != NULL, "session model: %s", rl_lasterr());
    session *S =
        sm ? session_new(sm,
                         &(session_params){
                             .n_ctx = NTOK + 8, .n_batch = 8, .cache_spec = "0.5", .route_trace = trace})
           : NULL;
    CHECK(S != NULL, "session with a cache: %s", rl_lasterr());
    CHECK(S && session_expert_cache(S) && expert_cache_mode(session_expert_cache(S)) == EC_BOUNDED,
          "owned cache");
    float *lg = malloc(sizeof(float) * (size_t)fx->nv);
    int bad = 0;
    for (int i = 0; S && i < 16; i++) {
        check_poison(lg, (size_t)fx->nv);
        CHECK(session_feed(S, g_tokens, i + 1, NULL, NULL) == 0, "feed: %s", rl_lasterr());
        bad += !session_logits(S) || !same(session_logits(S), fx->ref + (size_t)i * fx->nv, (size_t)fx->nv);
    }
    CHECK(bad == 0, "session cache: %d steps differ", bad);
    session_gen_result gr;
    CHECK(S && session_generate(S, &(session_gen_params){.n_predict = 2}, &gr) == -1 &&
              strstr(rl_lasterr(), "tokenizer"),
          "no tokenizer in this file: generate refuses (%s)", rl_lasterr());
    if (S) session_gen_result_free(&gr);
    session_free(S);
    CHECK(sm && session_new(sm, &(session_params){.cache_spec = "lots"}) == NULL, "a bad spec");
    session_model_close(sm);
    FILE *f = fopen(trace, "r");
    int lines = 0, ch;
    while (f && (ch = fgetc(f)) != EOF) lines += ch == '\n';
    if (f) fclose(f);
    CHECK(lines == 1 + 16 * NL, "trace has %d lines", lines);
    unlink(trace);
    free(lg);
}

/* Bytes served for expert e of layer il equal the file's. */
static bool file_bytes(const q3n_model *m, int il, int e, const uint8_t *g, const uint8_t *u,
                       const uint8_t *d) {
    const q3n_layer *L = &m->layers[il];
    const q3n_expert_slice sl = q3n_expert_slice_of(&m->hp, L, e);
    const uint8_t *mg, *mu, *md;
    q3n_expert_rows(&m->hp, L, e, &mg, &mu, &md);
    return !memcmp(g, mg, sl.gate_bytes) && !memcmp(u, mu, sl.up_bytes) && !memcmp(d, md, sl.down_bytes);
}

/* Write expert e of layer il's bytes from the file where a write-back goes (as a tier's copy would). */
static void put_file_bytes(const q3n_model *m, int il, int e, uint8_t *g, uint8_t *u, uint8_t *d) {
    const q3n_layer *L = &m->layers[il];
    const q3n_expert_slice sl = q3n_expert_slice_of(&m->hp, L, e);
    const uint8_t *mg, *mu, *md;
    q3n_expert_rows(&m->hp, L, e, &mg, &mu, &md);
    memcpy(g, mg, sl.gate_bytes), memcpy(u, mu, sl.up_bytes), memcpy(d, md, sl.down_bytes);
}

/* A faster tier's predictions (q3n_expert_src.prefetch): the named experts are read by the I/O
 * threads without a demand; the acquire that follows finds them (hits, or waits for the load in
 * flight) and counts no miss; the bytes served are the file's. Off with no_prefetch. */
static void test_tier_prefetch(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    expert_cache *ec = mk(fx, EC_BOUNDED,
                          (ec_params){.budget = expert_cache_min_budget(m, false) * 2, .io = EC_IO_BUFFERED});
    if (!ec) return;
    q3n_expert_src src = expert_cache_src(ec);
    CHECK(src.prefetch != NULL, "bounded mode: no prefetch callback");
    CHECK(src.demote != NULL && src.keep != NULL && src.kept != NULL,
          "the victim cache (keep + demote) is on by default");
    const uint8_t *g[E], *u[E], *d[E];
    const int32_t ids[K] = {3, 7, 3, 11}; /* a duplicate: one load */
    ec_stats st;
    src.prefetch(src.ud, 2, ids, K);
    expert_cache_get_stats(ec, &st);
    CHECK(st.pf_loads == 3 && st.pf_predicted == 3, "prefetch loads %llu predicted %llu, want 3",
          (unsigned long long)st.pf_loads, (unsigned long long)st.pf_predicted);
    const int32_t uniq[3] = {3, 7, 11};
    CHECK(src.acquire(src.ud, 2, uniq, 3, g, u, d) == 0, "acquire: %s", rl_lasterr());
    expert_cache_get_stats(ec, &st);
    CHECK(st.misses == 0 && st.hits + st.hits_inflight == 3 && st.pf_loads_used == 3,
          "after the prefetch: misses %llu hits %llu + %llu used %llu", (unsigned long long)st.misses,
          (unsigned long long)st.hits, (unsigned long long)st.hits_inflight,
          (unsigned long long)st.pf_loads_used);
    for (int i = 0; i < 3; i++)
        CHECK(file_bytes(m, 2, uniq[i], g[i], u[i], d[i]),
              "prefetched expert %d: bytes differ from the file's", uniq[i]);
    src.release(src.ud, 2);
    CHECK(expert_cache_check(ec) == 0, "check: %s", rl_lasterr());
    expert_cache_free(ec);
    ec = mk(fx, EC_BOUNDED, (ec_params){.budget = expert_cache_min_budget(m, false), .no_prefetch = true});
    if (!ec) return;
    src = expert_cache_src(ec);
    CHECK(src.prefetch == NULL, "no_prefetch: a prefetch callback");
    expert_cache_free(ec);
}

/* Exclusive caching (q3n_expert_src.demote): an entry a faster tier took is the next victim. One
 * uniform pool of E + K slots filled by layer 0's E experts, then layer 1's first K; demoting the
 * most recent (1, K-1) makes it, not the least recent (0, 0), the victim of the next new key. */
static void test_demote(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    expert_cache *ec = mk(fx, EC_BOUNDED,
                          (ec_params){.budget = expert_cache_min_budget(m, false),
                                      .uniform = true,
                                      .no_prefetch = true,
                                      .demote = true,
                                      .io = EC_IO_BUFFERED});
    if (!ec) return;
    q3n_expert_src src = expert_cache_src(ec);
    CHECK(src.demote != NULL, "bounded mode with demote: no demote callback");
    const uint8_t *g[E], *u[E], *d[E];
    int32_t ids[E];
    ec_stats st;
    expert_cache_get_stats(ec, &st);
    CHECK(st.n_slots == E + K, "slots %llu, want %d", (unsigned long long)st.n_slots, E + K);
    for (int i = 0; i < E; i++) ids[i] = i;
    for (int b = 0; b < E; b += K) { /* layer 0: experts 0..E-1, oldest first */
        CHECK(src.acquire(src.ud, 0, ids + b, K, g, u, d) == 0, "acquire: %s", rl_lasterr());
        src.release(src.ud, 0);
    }
    CHECK(src.acquire(src.ud, 1, ids, K, g, u, d) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 1);
    const int32_t last = K - 1, fresh = K;
    src.demote(src.ud, 1, &last, 1);
    CHECK(src.acquire(src.ud, 1, &fresh, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 1);
    expert_cache_get_stats(ec, &st);
    CHECK(st.demoted == 1 && st.evictions == 1 && st.misses == E + K + 1,
          "demoted %llu evictions %llu misses %llu", (unsigned long long)st.demoted,
          (unsigned long long)st.evictions, (unsigned long long)st.misses);
    const int32_t oldest = 0;
    CHECK(src.acquire(src.ud, 0, &oldest, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 0);
    expert_cache_get_stats(ec, &st);
    CHECK(st.misses == E + K + 1, "the least recent (0, 0) was evicted instead of the demoted (1, %d)", last);
    CHECK(src.acquire(src.ud, 1, &last, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 1);
    expert_cache_get_stats(ec, &st);
    CHECK(st.misses == E + K + 2, "the demoted (1, %d) is still resident", last);
    CHECK(expert_cache_check(ec) == 0, "check: %s", rl_lasterr());
    expert_cache_free(ec);
}

/* Victim caching (q3n_expert_src.keep / kept): what a faster tier evicts comes back into a slot the
 * cache gives out; after kept(ok) an acquire serves it from there as a hit (no read), after
 * kept(false) the room is free again and the key is read from the file. A held key, or no unpinned
 * slot, is declined. RL_CACHE_VICTIM=0 (no_victim): neither keep nor demote. */
static void test_victim(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    const ec_params base = {.budget = expert_cache_min_budget(m, false),
                            .uniform = true,
                            .no_prefetch = true,
                            .io = EC_IO_BUFFERED};
    ec_params p = base;
    p.no_victim = true;
    expert_cache *ec = mk(fx, EC_BOUNDED, p);
    if (!ec) return;
    q3n_expert_src src = expert_cache_src(ec);
    CHECK(src.keep == NULL && src.kept == NULL && src.demote == NULL, "no_victim: keep/kept/demote served");
    expert_cache_free(ec);
    if (!(ec = mk(fx, EC_BOUNDED, base))) return;
    src = expert_cache_src(ec);
    const uint8_t *g[E], *u[E], *d[E];
    int32_t ids[E];
    ec_stats st;
    for (int i = 0; i < E; i++) ids[i] = i;
    CHECK(src.acquire(src.ud, 0, ids, E, g, u, d) == 0, "acquire: %s", rl_lasterr()); /* E of E + K slots */
    src.release(src.ud, 0);
    uint8_t *wg, *wu, *wd;
    const int32_t five = 5, six = 6;
    CHECK(src.keep(src.ud, 1, five, &wg, &wu, &wd) == 1, "keep (1, 5): declined with free slots");
    put_file_bytes(m, 1, five, wg, wu, wd);
    CHECK(expert_cache_check(ec) == 0, "check while a write-back is loading: %s", rl_lasterr());
    src.kept(src.ud, 1, five, true);
    CHECK(src.acquire(src.ud, 1, &five, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    expert_cache_get_stats(ec, &st);
    CHECK(st.misses == E && st.kept == 1 && st.hits == 1, "after kept(ok): misses %llu kept %llu hits %llu",
          (unsigned long long)st.misses, (unsigned long long)st.kept, (unsigned long long)st.hits);
    CHECK(g[0] == wg && u[0] == wu && d[0] == wd, "the hit is not served from the kept slot");
    src.release(src.ud, 1);
    CHECK(src.keep(src.ud, 1, five, &wg, &wu, &wd) == 0, "keep of a held key not declined");
    CHECK(src.keep(src.ud, 1, six, &wg, &wu, &wd) == 1, "keep (1, 6): declined");
    memset(wg, 0xA5, 16); /* a copy that failed half-way */
    src.kept(src.ud, 1, six, false);
    CHECK(src.acquire(src.ud, 1, &six, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    CHECK(file_bytes(m, 1, six, g[0], u[0], d[0]), "after kept(false): expert (1, 6) is not the file's");
    src.release(src.ud, 1);
    expert_cache_get_stats(ec, &st);
    CHECK(st.misses == E + 1 && st.kept == 2 && st.kept_declined == 1, "misses %llu kept %llu declined %llu",
          (unsigned long long)st.misses, (unsigned long long)st.kept, (unsigned long long)st.kept_declined);
    /* every slot pinned (layer 0's E and layer 2's K): no room */
    CHECK(src.acquire(src.ud, 0, ids, E, g, u, d) == 0, "acquire: %s", rl_lasterr());
    const uint8_t *g2[K], *u2[K], *d2[K];
    CHECK(src.acquire(src.ud, 2, ids, K, g2, u2, d2) == 0, "acquire: %s", rl_lasterr());
    CHECK(src.keep(src.ud, 3, five, &wg, &wu, &wd) == 0, "keep with every slot pinned not declined");
    src.release(src.ud, 2);
    src.release(src.ud, 0);
    CHECK(expert_cache_check(ec) == 0, "check: %s", rl_lasterr());
    /* no hint ran (a VRAM tier's use): no rows counted, so the stats give totals, not x/token */
    char *txt = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&txt, &len);
    if (mf) {
        expert_cache_print_stats(ec, mf);
        fclose(mf);
        CHECK(txt && strstr(txt, "rows counted there") && !strstr(txt, "/token") &&
                  strstr(txt, "2 VRAM evictions kept"),
              "stats without rows: %s", txt ? txt : "(none)");
        free(txt);
    }
    expert_cache_free(ec);
}

/* A streaming VRAM tier (vram_tier_opts.stream) says its rows with a NULL input: in a forward of >= 64
 * rows a write-back of what that forward read from disk is declined (the chunk needs it last), while
 * one of a key read earlier is kept as always. The NULL input predicts nothing (no crash, no load). */
static void test_stream_keep(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    expert_cache *ec = mk(fx, EC_BOUNDED,
                          (ec_params){.budget = expert_cache_min_budget(m, false) * 2, .io = EC_IO_BUFFERED});
    if (!ec) return;
    q3n_expert_src src = expert_cache_src(ec);
    const uint8_t *g[1], *u[1], *d[1];
    uint8_t *wg, *wu, *wd;
    ec_stats st;
    const int32_t three = 3, four = 4, five = 5;
    src.hint(src.ud, 0, NULL, 1); /* forward 1, a decode step: reads (2, 4) */
    CHECK(src.acquire(src.ud, 2, &four, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 2);
    src.hint(src.ud, 0, NULL, SLOT_SCAN_ROWS); /* forward 2, a prompt chunk: reads (0, 3) */
    CHECK(src.acquire(src.ud, 0, &three, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 0);
    src.demote(src.ud, 0, &three, 1); /* VRAM took it */
    expert_cache_get_stats(ec, &st);
    CHECK(st.pf_loads == 0, "a NULL input predicted %llu loads", (unsigned long long)st.pf_loads);
    CHECK(src.keep(src.ud, 0, three, &wg, &wu, &wd) == 0, "the chunk's own read (0, 3) kept");
    CHECK(src.keep(src.ud, 1, five, &wg, &wu, &wd) == 1, "(1, 5), never read, declined in a chunk");
    put_file_bytes(m, 1, five, wg, wu, wd);
    src.kept(src.ud, 1, five, true);
    src.demote(src.ud, 2, &four, 1);
    src.hint(src.ud, 0, NULL, 1); /* forward 3, a decode step: the same write-back is kept */
    expert_cache_get_stats(ec, &st);
    const uint64_t declined = st.scan_declined;
    CHECK(declined == 1, "%llu write-backs declined as a chunk's own reads, want 1",
          (unsigned long long)declined);
    CHECK(src.keep(src.ud, 0, three, &wg, &wu, &wd) == 0, "(0, 3) is still held: declined as held");
    expert_cache_get_stats(ec, &st);
    CHECK(st.scan_declined == declined, "a decode step's write-back counted as a chunk's own read");
    CHECK(expert_cache_check(ec) == 0, "check: %s", rl_lasterr());
    expert_cache_free(ec);

    /* RL_CACHE_SCAN=0: no forward is a scan, so no write-back is declined as a chunk's own read */
    ec = mk(
        fx, EC_BOUNDED,
        (ec_params){.budget = expert_cache_min_budget(m, false) * 2, .io = EC_IO_BUFFERED, .no_scan = true});
    if (!ec) return;
    src = expert_cache_src(ec);
    src.hint(src.ud, 0, NULL, SLOT_SCAN_ROWS);
    CHECK(src.acquire(src.ud, 0, &three, 1, g, u, d) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 0);
    src.demote(src.ud, 0, &three, 1);
    src.keep(src.ud, 0, three, &wg, &wu, &wd); /* held: declined as held, not as a scan's read */
    expert_cache_get_stats(ec, &st);
    CHECK(st.scan_declined == 0 && st.scan_demoted == 0,
          "RL_CACHE_SCAN=0: %llu declined, %llu demoted as a scan", (unsigned long long)st.scan_declined,
          (unsigned long long)st.scan_demoted);
    CHECK(expert_cache_check(ec) == 0, "check: %s", rl_lasterr());
    expert_cache_free(ec);

    /* where it stays: E + K uniform slots, layer 0's E read by a decode step, layer 1's first K by a
     * chunk (the cache is full); VRAM takes (1, K-1) (demoted) and hands it back: declined, it stays the
     * next victim, so the chunk's next read (2, 0) evicts it (kept, it would have gone to the recent end) */
    ec = mk(fx, EC_BOUNDED,
            (ec_params){.budget = expert_cache_min_budget(m, false),
                        .uniform = true,
                        .no_prefetch = true,
                        .io = EC_IO_BUFFERED});
    if (!ec) return;
    src = expert_cache_src(ec);
    const uint8_t *g4[E], *u4[E], *d4[E];
    int32_t ids[E];
    for (int i = 0; i < E; i++) ids[i] = i;
    src.hint(src.ud, 0, NULL, 1);
    for (int b = 0; b < E; b += K) {
        CHECK(src.acquire(src.ud, 0, ids + b, K, g4, u4, d4) == 0, "acquire: %s", rl_lasterr());
        src.release(src.ud, 0);
    }
    src.hint(src.ud, 0, NULL, SLOT_SCAN_ROWS);
    CHECK(src.acquire(src.ud, 1, ids, K, g4, u4, d4) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 1);
    const int32_t last = K - 1, zero = 0;
    src.demote(src.ud, 1, &last, 1);
    CHECK(src.keep(src.ud, 1, last, &wg, &wu, &wd) == 0, "(1, K-1) kept");
    CHECK(src.acquire(src.ud, 2, &zero, 1, g4, u4, d4) == 0, "acquire: %s", rl_lasterr());
    src.release(src.ud, 2);
    CHECK(!expert_cache_resident(ec, 1, last), "the chunk's own read (1, %d) went back to the recent end",
          last);
    CHECK(expert_cache_resident(ec, 1, K - 2), "(1, %d) was evicted instead", K - 2);
    CHECK(expert_cache_check(ec) == 0, "check: %s", rl_lasterr());
    expert_cache_free(ec);
}

/* The victim cache under load, as a VRAM tier drives it: random selections of random layers (acquire,
 * then keep of other experts with their bytes written as the tier's copy would, kept ok or failed, then
 * release), tier predictions read by the I/O threads at the same time (prefetch), over a cache of the
 * minimum size (every slot contended). Every acquire serves the file's bytes and the cache stays
 * consistent (a failed copy's garbage is never served). */
static void test_victim_random(fixture *fx) {
    const q3n_model *m = engine_model(fx->e);
    expert_cache *ec =
        mk(fx, EC_BOUNDED,
           (ec_params){.budget = expert_cache_min_budget(m, false) * 3 / 2, .io = EC_IO_BUFFERED});
    if (!ec) return;
    q3n_expert_src src = expert_cache_src(ec);
    rl_rng r;
    rl_rng_seed(&r, 7);
    const uint8_t *g[K], *u[K], *d[K];
    int bad = 0;
    for (int step = 0; step < 400 && !bad; step++) {
        const int il = (int)(rl_rng_u64(&r) % NL);
        int32_t ids[K], n = 0;
        while (n < K) { /* K distinct experts */
            const int32_t e = (int32_t)(rl_rng_u64(&r) % E);
            bool dup = false;
            for (int i = 0; i < n; i++) dup |= ids[i] == e;
            if (!dup) ids[n++] = e;
        }
        if (src.acquire(src.ud, il, ids, K, g, u, d)) {
            CHECK(0, "step %d acquire: %s", step, rl_lasterr());
            break;
        }
        for (int i = 0; i < K; i++) bad += !file_bytes(m, il, ids[i], g[i], u[i], d[i]);
        for (int k = 0; k < 2; k++) { /* two evictions handed back, one of them failing now and then */
            const int e = (int)(rl_rng_u64(&r) % E);
            uint8_t *wg, *wu, *wd;
            if (!src.keep(src.ud, il, e, &wg, &wu, &wd)) continue;
            const bool ok = rl_rng_u64(&r) % 5 != 0;
            put_file_bytes(m, il, e, wg, wu, wd);
            if (!ok) /* a copy that broke off: never to be served */
                memset(wd, 0x5A, q3n_expert_slice_of(&m->hp, &m->layers[il], e).down_bytes);
            src.kept(src.ud, il, e, ok);
        }
        src.release(src.ud, il);
        const int32_t pf[2] = {(int32_t)(rl_rng_u64(&r) % E), (int32_t)(rl_rng_u64(&r) % E)};
        src.prefetch(src.ud, (il + 1) % NL, pf, 2);
        if (expert_cache_check(ec)) {
            CHECK(0, "step %d: %s", step, rl_lasterr());
            break;
        }
    }
    ec_stats st;
    expert_cache_get_stats(ec, &st);
    CHECK(bad == 0, "%d experts served with bytes other than the file's", bad);
    CHECK(st.kept > 0 && st.kept_declined > 0 && st.evictions > 0 && st.pf_loads > 0,
          "the run exercised nothing: kept %llu declined %llu evictions %llu prefetch loads %llu",
          (unsigned long long)st.kept, (unsigned long long)st.kept_declined, (unsigned long long)st.evictions,
          (unsigned long long)st.pf_loads);
    if (getenv("VERBOSE")) expert_cache_print_stats(ec, stdout);
    expert_cache_free(ec);
}

static void test_fixture(void) {
    const char *path = "tests/fixtures/tiny-a.gguf";
    if (access(path, R_OK) != 0) { /* committed: missing means a broken checkout or the wrong cwd */
        CHECK(0, "%s is missing (run from the repository root)", path);
        return;
    }
    engine *e = engine_open(path, &(engine_params){.n_threads = 2});
    CHECK(e != NULL, "open %s: %s", path, rl_lasterr());
    if (!e) return;
    const q3n_model *m = engine_model(e);
    int nv = m->hp.n_vocab;
    float *ref = malloc(sizeof(float) * (size_t)NTOK * nv), *out = malloc(sizeof(float) * (size_t)NTOK * nv);
    for (int i = 0; i < NTOK; i++) g_tokens[i] %= nv;
    CHECK(run_steps(e, NULL, ref, NTOK, nv) == 0, "fixture ref: %s", rl_lasterr());
    uint64_t budget = expert_cache_min_budget(m, true);
    if (budget < expert_cache_full_bytes(m, true) / 2) budget = expert_cache_full_bytes(m, true) / 2;
    expert_cache *ec = expert_cache_new(m, EC_BOUNDED, &(ec_params){.budget = budget});
    CHECK(ec != NULL, "fixture cache: %s", rl_lasterr());
    if (ec) {
        check_poison(out, (size_t)NTOK * nv);
        CHECK(run_steps(e, ec, out, NTOK, nv) == 0, "fixture bounded: %s", rl_lasterr());
        CHECK(same(out, ref, (size_t)NTOK * nv), "fixture: bounded logits differ from the mapped source");
        ec_stats st;
        expert_cache_get_stats(ec, &st);
        CHECK(st.misses > 0, "fixture: no misses");
        if (getenv("VERBOSE")) expert_cache_print_stats(ec, stdout);
        expert_cache_free(ec);
    }
    free(ref);
    free(out);
    engine_close(e);
}

int main(void) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_path, sizeof g_path, "%s/rl-test-expert-cache-%d.gguf", tmp, (int)getpid());
    if (write_tiny(g_path)) {
        fprintf(stderr, "cannot write %s: %s\n", g_path, rl_lasterr());
        return 1;
    }
    rl_rng r;
    rl_rng_seed(&r, 99);
    for (int i = 0; i < NTOK; i++) g_tokens[i] = (int32_t)(rl_rng_u64(&r) % V);
    fixture fx = {0};
    fx.e = engine_open(g_path, &(engine_params){.n_threads = 2});
    CHECK(fx.e != NULL, "engine_open: %s", rl_lasterr());
    if (fx.e) {
        fx.nv = engine_hparams(fx.e)->n_vocab;
        fx.ref = malloc(sizeof(float) * (size_t)NTOK * fx.nv);
        fx.ref_pre = malloc(sizeof(float) * (size_t)NTOK * fx.nv);
        CHECK(run_steps(fx.e, NULL, fx.ref, NTOK, fx.nv) == 0, "reference: %s", rl_lasterr());
        CHECK(run_verify(fx.e, NULL, fx.ref_pre, fx.nv) == 0, "reference verify: %s", rl_lasterr());
        test_modes(&fx);
        test_prefill(&fx);
        test_scan(&fx);
        test_faults(&fx);
        test_route_bias(&fx);
        test_tier_prefetch(&fx);
        test_demote(&fx);
        test_victim(&fx);
        test_stream_keep(&fx);
        test_victim_random(&fx);
        test_plan_attach_trace(&fx);
        free(fx.ref);
        free(fx.ref_pre);
        engine_close(fx.e);
    }
    unlink(g_path);
    test_fixture();
    return check_done("test_expert_cache");
}
