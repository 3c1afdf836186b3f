/* test_cuda_rows.c — continuous batching on the CUDA backend (issue 46 item 2): the decode steps of
 * several contexts as the rows of one forward (backend_cuda.forward_rows) must give every row the
 * bits of that context's single step, whatever runs beside it.
 *   1. direct, per fixture and KV format: 4 sequences brought to different positions by prompts of
 *      1, 7, 40 and 300 tokens (300: past one 256-position attention chunk), in contexts of 512,
 *      768, 1024 and 1280 positions (each row's own cache geometry), each with a twin
 *      context that takes the same tokens alone (the backend forward of one token: engine_step's
 *      call, its decode graph). Then rounds of forward_rows over 1, 2, 3, 4 of the sequences in
 *      rotating order (a sequence sits at another row and has other neighbours each round), every
 *      row's logits and final-norm hidden state memcmp'd with its twin's step (NaN-poisoned first;
 *      some rows ask for no logits); at the end each sequence's DeltaNet states and KV rows equal
 *      its twin's byte for byte;
 *   2. refusals: a context twice, a position past the context, a token outside the vocabulary
 *      (-1, nothing changed: the rounds after them still match), more rows than the first
 *      context's n_batch and contexts of a VRAM expert tier (1: the engine runs them one by one);
 *   3. through the engine: N threads decoding together (engine_ctx_decoding; their prompts and
 *      a side prefill interleaved) == each context run alone, with steps sharing forwards; the
 *      same with VRAM-tier contexts (refused: turns, still exact).
   Part 1 runs on the rows graphs with the batched DeltaNet (backend_cuda_rows.c, src/cuda/rows.cu), then
 *      with RL_CUDA_ROWS_GRAPH=0 (direct launches) and with RL_CUDA_ROWS_BATCH=0 too (the DeltaNet row by row
 *      with the single step's launches: the first version, the reference);
 *   4. the rows graphs' cache: one ordered set replayed at new tokens and positions, without logits (a
 *      graph without the head), the same contexts in other orders, a context freed and a new one (other
 *      KV format and size, often at the old one's address) in its place, more orderings than the cache
 *      holds (LRU); every row == its twin's single step, the captures / launches / graphs held counted.
 * `test_cuda_rows MODEL` instead times 1, 2, 4, 8 contexts decoding on MODEL: rows of one forward per
 * step (graph or direct launches, batched DeltaNet or row by row: TMODES) against one forward per context
 * (turns), aggregate tok/s, the last logits compared.
 * Without a GPU: prints "test_cuda_rows: skipped: ..." and exits 77. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/backend_cuda_int.h" /* cuda_rows_stats */
#include "base/common.h"
#include "check.h"
#include "run/engine.h"

#define NS 4       /* sequences */
#define ROUNDS 12  /* forward_rows calls of the direct test */
#define NCTX 512   /* positions per context (the direct test: + 256 per sequence) */
#define NB 64      /* rows per context (prompt chunks, rows of a forward) */
#define SE 20      /* engine test: steps per context */
#define SIDE_N 100 /* engine test: the side prompt */

static const int LENS[NS] = {1, 7, 40, 300};

static int32_t tok_of(int seq, int k, int V) {
    return (int32_t)((seq * 97 + k * 131 + 11) % (V < 400 ? V : 400));
}

/* Prompt of sequence seq (LENS[seq] tokens) into backend context b, in chunks of NB rows. */
static int prompt(backend_ctx *b, int seq, int V) {
    int32_t t[NB];
    for (int p0 = 0; p0 < LENS[seq]; p0 += NB) {
        int n = LENS[seq] - p0 < NB ? LENS[seq] - p0 : NB;
        for (int i = 0; i < n; i++) t[i] = tok_of(seq, p0 + i, V);
        if (backend_cuda.forward(b, t, n, p0, NULL, false, NULL, NULL)) return -1;
    }
    return 0;
}

/* Every DeltaNet state and KV row [0, pos) of a and b equal, byte for byte. */
static bool same_state(const q3n_hparams *hp, backend_ctx *a, backend_ctx *b, int pos) {
    const size_t nc = q3n_conv_floats(hp), ns = q3n_ssm_floats(hp), kb = backend_cuda.kv_row_bytes(a) * pos;
    const size_t kf = (kb + 3) / 4, n = nc + ns > 2 * kf ? nc + ns : 2 * kf; /* floats: K then V */
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    bool same = x && y;
    for (int il = 0; same && il < hp->n_layer; il++) {
        if (hp->is_attn[il])
            same = !backend_cuda.kv_get(a, il, pos, x, x + kf) &&
                   !backend_cuda.kv_get(b, il, pos, y, y + kf) && !memcmp(x, y, kb) &&
                   !memcmp(x + kf, y + kf, kb);
        else
            same = !backend_cuda.state_get(a, il, x, x + nc) && !backend_cuda.state_get(b, il, y, y + nc) &&
                   !memcmp(x, y, sizeof(float) * (nc + ns));
    }
    free(x);
    free(y);
    return same;
}

/* Part 1 and 2 on one fixture and KV format. */
static void direct(engine *e, const char *model, backend_kv kv) {
    const q3n_model *m = engine_model(e);
    const q3n_hparams *hp = &m->hp;
    const int V = hp->n_vocab, D = hp->n_embd;
    const char *kvs = kv == BACKEND_KV_F16 ? "f16" : "f32";
    backend_ctx *rows[NS] = {0}, *alone[NS] = {0};
    int pos[NS], k[NS]; /* position and tokens taken of each sequence */
    float *lr = malloc(sizeof(float) * (size_t)V * NS), *la = malloc(sizeof(float) * V);
    float *hr = malloc(sizeof(float) * (size_t)D * NS), *ha = malloc(sizeof(float) * D);
    bool ok = lr && la && hr && ha;
    for (int s = 0; ok && s < NS; s++) {
        /* contexts of different sizes: each row's attention must use its own cache geometry */
        rows[s] = backend_cuda.ctx_new(m, NULL, NCTX + 256 * s, NB, kv);
        alone[s] = backend_cuda.ctx_new(m, NULL, NCTX + 256 * s, NB, kv);
        ok = rows[s] && alone[s] && !prompt(rows[s], s, V) && !prompt(alone[s], s, V);
        pos[s] = k[s] = LENS[s];
    }
    CHECK(ok, "%s KV %s: contexts and prompts: %s", model, kvs, rl_lasterr());
    int rounds = 0, rows_run = 0, bad = 0;
    for (int r = 0; ok && r < ROUNDS; r++) {
        const int n = r % NS + 1;
        backend_ctx *cs[NS];
        int32_t t[NS];
        int p[NS], seq[NS];
        float *lg[NS], *hd[NS];
        for (int j = 0; j < n; j++) {
            seq[j] = (r + (r & 1 ? n - 1 - j : j)) % NS;
            cs[j] = rows[seq[j]];
            t[j] = tok_of(seq[j], k[seq[j]], V);
            p[j] = pos[seq[j]];
            lg[j] = r % 5 == 2 && j == 0 ? NULL : lr + (size_t)j * V; /* a row that asks no logits */
            hd[j] = hr + (size_t)j * D;
        }
        check_poison(lr, (size_t)V * NS);
        check_poison(hr, (size_t)D * NS);
        if (r == 5) { /* bad input first: -1, and nothing may change (the round below still matches) */
            backend_ctx *twice[2] = {cs[0], cs[0]};
            int32_t tt[2] = {t[0], t[0]};
            int pp[2] = {p[0], p[0]};
            CHECK(backend_cuda.forward_rows(twice, tt, pp, 2, lg, hd) == -1, "%s: a context twice accepted",
                  model);
            int far[NS];
            memcpy(far, p, sizeof far);
            far[n - 1] = NCTX + 256 * NS;
            CHECK(backend_cuda.forward_rows(cs, t, far, n, lg, hd) == -1 &&
                      strstr(rl_lasterr(), "context is full"),
                  "%s: a position past the context: %s", model, rl_lasterr());
            int32_t badt[NS];
            memcpy(badt, t, sizeof badt);
            badt[0] = V;
            CHECK(backend_cuda.forward_rows(cs, badt, p, n, lg, hd) == -1, "%s: token %d accepted", model, V);
        }
        if (backend_cuda.forward_rows(cs, t, p, n, lg, hd) != 0) {
            CHECK(0, "%s KV %s round %d (%d rows): %s", model, kvs, r, n, rl_lasterr());
            ok = false;
            break;
        }
        for (int j = 0; j < n; j++) {
            const int s = seq[j];
            check_poison(la, (size_t)V);
            check_poison(ha, (size_t)D);
            if (backend_cuda.forward(alone[s], &t[j], 1, p[j], la, false, ha, NULL)) {
                CHECK(0, "%s: alone step: %s", model, rl_lasterr());
                ok = false;
                break;
            }
            bool same =
                !memcmp(hd[j], ha, sizeof(float) * D) && (!lg[j] || !memcmp(lg[j], la, sizeof(float) * V));
            bad += !same;
            CHECK(same,
                  "%s KV %s round %d: row %d of %d (sequence %d at position %d) differs from its single step",
                  model, kvs, r, j, n, s, p[j]);
            pos[s]++, k[s]++;
            rows_run++;
        }
        rounds++;
    }
    for (int s = 0; ok && s < NS; s++)
        CHECK(same_state(hp, rows[s], alone[s], pos[s]),
              "%s KV %s: sequence %d's state differs from its twin's", model, kvs, s);
    if (ok) { /* refusals: 1, the engine then runs the steps one by one */
        backend_ctx *small = backend_cuda.ctx_new(m, NULL, 64, 2, kv);
        backend_ctx *three[3] = {small, rows[0], rows[1]};
        int32_t t3[3] = {1, 2, 3};
        int p3[3] = {0, pos[0], pos[1]};
        float *l3[3] = {NULL, NULL, NULL};
        CHECK(small && backend_cuda.forward_rows(three, t3, p3, 3, l3, l3) == 1,
              "%s: 3 rows on a context of n_batch 2 not refused", model);
        backend_cuda.ctx_free(small);
        if (hp->moe) {
            setenv("RL_VRAM_SLOTS", "2", 1);
            backend_ctx *tier = backend_cuda.ctx_new_opts(m, NULL, 64, NB,
                                                          &(backend_ctx_opts){.vram_spec = "auto", .kv = kv});
            unsetenv("RL_VRAM_SLOTS");
            backend_ctx *two[2] = {rows[0], tier}, *two_b[2] = {tier, rows[0]};
            int p2[2] = {pos[0], 0}, p2b[2] = {0, pos[0]};
            CHECK(tier && backend_cuda.forward_rows(two, t3, p2, 2, l3, l3) == 1 &&
                      backend_cuda.forward_rows(two_b, t3, p2b, 2, l3, l3) == 1,
                  "%s: rows with a VRAM-tier context not refused: %s", model, rl_lasterr());
            backend_cuda.ctx_free(tier);
        }
    }
    const char *g = getenv("RL_CUDA_GRAPHS"), *rg = getenv("RL_CUDA_ROWS_GRAPH"),
               *rb = getenv("RL_CUDA_ROWS_BATCH");
    const bool direct_path = (g && !strcmp(g, "0")) || (rg && !strcmp(rg, "0")),
               by_row = rb && !strcmp(rb, "0");
    printf("  %s KV %s (%s, %s): %d rounds of 1..%d rows, %d rows == single steps (%d differ)\n", model, kvs,
           direct_path ? "direct launches" : "rows graphs",
           by_row ? "DeltaNet row by row" : "batched DeltaNet", rounds, NS, rows_run, bad);
    for (int s = 0; s < NS; s++) {
        backend_cuda.ctx_free(rows[s]);
        backend_cuda.ctx_free(alone[s]);
    }
    free(lr);
    free(la);
    free(hr);
    free(ha);
}

/* ---- part 4: the rows graphs (backend_cuda_rows.c) ---------------------------------------- */

/* The graph test's sequences: a context for rows and its twin stepping alone, and where they are. */
typedef struct {
    backend_ctx *rows, *alone;
    int seq, pos, k, n_ctx;
    backend_kv kv;
} gseq;

static bool gseq_open(const q3n_model *m, gseq *q, int seq, int n_ctx, backend_kv kv) {
    *q = (gseq){.seq = seq, .pos = LENS[seq], .k = LENS[seq], .n_ctx = n_ctx, .kv = kv};
    q->rows = backend_cuda.ctx_new(m, NULL, n_ctx, NB, kv);
    q->alone = backend_cuda.ctx_new(m, NULL, n_ctx, NB, kv);
    return q->rows && q->alone && !prompt(q->rows, seq, m->hp.n_vocab) &&
           !prompt(q->alone, seq, m->hp.n_vocab);
}

/* One forward_rows over the sequences ord[0..n) (every row's hidden state, and its logits if logits), each
 * row memcmp'd with its twin's single step; false on a failure or a difference (reported). */
static bool gstep(const q3n_model *m, gseq *q, const int *ord, int n, bool logits, const char *what) {
    const int V = m->hp.n_vocab, D = m->hp.n_embd;
    backend_ctx *cs[8];
    int32_t t[8];
    int p[8];
    float *lg[8], *hd[8];
    float *lr = malloc(sizeof(float) * (size_t)V * (n + 1)),
          *hr = malloc(sizeof(float) * (size_t)D * (n + 1));
    bool ok = lr && hr;
    for (int j = 0; ok && j < n; j++) {
        gseq *s = &q[ord[j]];
        cs[j] = s->rows;
        t[j] = tok_of(s->seq, s->k, V);
        p[j] = s->pos;
        lg[j] = logits ? lr + (size_t)j * V : NULL;
        hd[j] = hr + (size_t)j * D;
    }
    if (ok) {
        check_poison(lr, (size_t)V * (n + 1));
        check_poison(hr, (size_t)D * (n + 1));
        ok = backend_cuda.forward_rows(cs, t, p, n, lg, hd) == 0;
        CHECK(ok, "graphs, %s: forward_rows: %s", what, rl_lasterr());
    }
    for (int j = 0; ok && j < n; j++) {
        gseq *s = &q[ord[j]];
        float *la = lr + (size_t)n * V, *ha = hr + (size_t)n * D;
        ok = !backend_cuda.forward(s->alone, &t[j], 1, p[j], la, false, ha, NULL);
        CHECK(ok, "graphs, %s: alone step: %s", what, rl_lasterr());
        bool same =
            ok && (!lg[j] || !memcmp(lg[j], la, sizeof(float) * V)) && !memcmp(hd[j], ha, sizeof(float) * D);
        CHECK(same, "graphs, %s: row %d of %d (sequence %d at position %d) differs from its single step",
              what, j, n, s->seq, p[j]);
        ok = ok && same;
        s->pos++, s->k++;
    }
    free(lr);
    free(hr);
    return ok;
}

/* (captures, launches, graphs held) of c's rows graphs == the expected ones. */
static bool gstats(backend_ctx *c, long cap, long rep, int held, const char *what) {
    long a = 0, b = 0;
    int h = 0;
    cuda_rows_stats(c, &a, &b, &h);
    CHECK(a == cap && b == rep && h == held,
          "graphs, %s: %ld captures, %ld launches, %d held; expected %ld, %ld, %d", what, a, b, h, cap, rep,
          held);
    return a == cap && b == rep && h == held;
}

/* Rows graphs: repeated replays with changing tokens and positions == single steps; the same contexts
 * in another order (the same graph: rows are taken in one canonical order); a context freed and a new one
 * (other geometry and KV format, often at the same address) in its place (a new graph, never the old one's);
 * more orderings than the cache holds (LRU: at most 8 held, an evicted one captured again). Graphs forced on
 * (RL_CUDA_GRAPHS and RL_CUDA_ROWS_GRAPH unset here). */
static void graphs(engine *e, const char *model, backend_kv kv) {
    const q3n_model *m = engine_model(e);
    const char *kvs = kv == BACKEND_KV_F16 ? "f16" : "f32";
    char *g0 = getenv("RL_CUDA_GRAPHS") ? strdup(getenv("RL_CUDA_GRAPHS")) : NULL,
         *g1 = getenv("RL_CUDA_ROWS_GRAPH") ? strdup(getenv("RL_CUDA_ROWS_GRAPH")) : NULL;
    unsetenv("RL_CUDA_GRAPHS");
    unsetenv("RL_CUDA_ROWS_GRAPH");
    gseq q[NS] = {0};
    bool ok = true;
    for (int s = 0; ok && s < NS; s++) ok = gseq_open(m, &q[s], s, NCTX + 256 * s, kv);
    CHECK(ok, "%s KV %s graphs: contexts and prompts: %s", model, kvs, rl_lasterr());
    static const int A[NS] = {0, 1, 2, 3}, B[NS] = {0, 2, 1, 3}, R[NS] = {3, 2, 1, 0};
    int steps = 0, rows = 0;
    /* 1. one ordered set replayed: one capture, then replays at new positions and tokens */
    for (int i = 0; ok && i < 5; i++, steps++, rows += NS)
        ok = gstep(m, q, A, NS, true, "replays of one set");
    ok = ok && gstats(q[0].rows, 1, 5, 1, "replays of one set");
    /* no row asks for logits: a graph without the head (another key) */
    for (int i = 0; ok && i < 2; i++, steps++, rows += NS) ok = gstep(m, q, A, NS, false, "no logits");
    ok = ok && gstats(q[0].rows, 2, 7, 2, "no logits");
    /* 2. the same contexts in other orders: B and R are taken in the canonical order (ascending rows
     * ids: here A's), so they replay A's graph: no capture, no cache on another first context */
    for (int i = 0; ok && i < 6; i++, steps++, rows += NS)
        ok = gstep(m, q, i % 3 == 0 ? A : i % 3 == 1 ? B : R, NS, true, "orders");
    ok = ok && gstats(q[0].rows, 2, 13, 2, "other orders") && gstats(q[3].rows, 0, 0, 0, "reversed order");
    /* 3. sequence 2 freed (the twin first, so the new rows context likely takes its address), a new one
     * with another KV format and context size in its place (a new, largest id: canonical order 0 1 3 2): A's
     * key names the old one, so the set captures anew, once (B is the same set) */
    backend_ctx *old = q[2].rows;
    backend_cuda.ctx_free(q[2].alone);
    backend_cuda.ctx_free(q[2].rows);
    const backend_kv kv2 = kv == BACKEND_KV_F16 ? BACKEND_KV_F32 : BACKEND_KV_F16;
    if (ok) {
        ok = gseq_open(m, &q[2], 2, NCTX + 128, kv2);
        CHECK(ok, "graphs: the new context: %s", rl_lasterr());
    } else {
        q[2].rows = q[2].alone = NULL;
    }
    const bool same_addr = q[2].rows == old;
    for (int i = 0; ok && i < 3; i++, steps++, rows += NS)
        ok = gstep(m, q, i == 1 ? B : A, NS, true, "a context replaced");
    ok = ok && gstats(q[0].rows, 3, 16, 3, "a context replaced");
    /* 4. more keys than the cache holds: 2, 3 and 4 rows behind sequence 0, 12 orderings of 7 sets (the
     * 4-row set already cached by part 3; 6 new), twice: 6 captures, the 9th graph evicts the least
     * recently used (part 1's head-less one), the second round all replays: 8 held */
    static const int P[12][NS] = {{0, 1},    {0, 2},    {0, 3},    {0, 1, 2},    {0, 2, 1},    {0, 1, 3},
                                  {0, 3, 1}, {0, 2, 3}, {0, 3, 2}, {0, 1, 3, 2}, {0, 3, 1, 2}, {0, 3, 2, 1}};
    static const int PN[12] = {2, 2, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4};
    for (int i = 0; ok && i < 24; i++) {
        ok = gstep(m, q, P[i % 12], PN[i % 12], true, "LRU");
        steps++, rows += PN[i % 12];
    }
    long cap = 0, rep = 0;
    int held = 0;
    if (ok) cuda_rows_stats(q[0].rows, &cap, &rep, &held);
    CHECK(!ok || (held == 8 && cap == 3 + 6 && rep == 16 + 24),
          "graphs, LRU: %ld captures, %ld launches, %d held", cap, rep, held);
    for (int s = 0; ok && s < NS; s++)
        CHECK(same_state(&m->hp, q[s].rows, q[s].alone, q[s].pos),
              "%s KV %s graphs: sequence %d's state differs", model, kvs, s);
    printf("  %s KV %s rows graphs: %d forwards, %d rows == single steps; a replaced context %s; LRU %ld "
           "captures, %ld launches, %d held\n",
           model, kvs, steps, rows, same_addr ? "at the same address" : "at another address", cap, rep, held);
    for (int s = 0; s < NS; s++) {
        backend_cuda.ctx_free(q[s].rows);
        backend_cuda.ctx_free(q[s].alone);
    }
    if (g0) setenv("RL_CUDA_GRAPHS", g0, 1);
    if (g1) setenv("RL_CUDA_ROWS_GRAPH", g1, 1);
    free(g0);
    free(g1);
}

/* ---- part 3: through the engine (test_engine_rows.c's shape) ------------------------------ */

typedef struct {
    engine_ctx *c;
    int seq, V;
    float *logits; /* [SE + 1][V] */
    bool together;
    int rc;
    pthread_barrier_t *bar;
} run_arg;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void *drive(void *p) {
    run_arg *a = p;
    int32_t t[300];
    for (int i = 0; i < LENS[a->seq]; i++) t[i] = tok_of(a->seq, i, a->V);
    if (a->bar) pthread_barrier_wait(a->bar);
    a->rc = engine_prefill(a->c, t, LENS[a->seq], a->logits);
    if (a->bar) pthread_barrier_wait(a->bar);
    if (a->together) engine_ctx_decoding(a->c, true);
    for (int s = 0; s < SE && !a->rc; s++)
        a->rc =
            engine_step(a->c, argmax(a->logits + (size_t)s * a->V, a->V), a->logits + (size_t)(s + 1) * a->V);
    if (a->together) engine_ctx_decoding(a->c, false);
    if (a->rc) fprintf(stderr, "drive %d: %s\n", a->seq, rl_lasterr());
    return NULL;
}

static void *side(void *p) {
    engine *e = p;
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 256, .n_batch = 8});
    int32_t t[SIDE_N];
    for (int i = 0; i < SIDE_N; i++) t[i] = (int32_t)(i * 37 % 200 + 5);
    bool ok = c && engine_prefill(c, t, SIDE_N, NULL) == 0;
    engine_ctx_free(c);
    static int failed;
    return ok ? NULL : &failed;
}

static void through_engine(engine *e, const char *model, const char *vram) {
    const int V = engine_hparams(e)->n_vocab;
    engine_ctx_params cp = {.n_ctx = NCTX, .n_batch = 16, .vram_spec = vram};
    if (vram) setenv("RL_VRAM_SLOTS", "2", 1);
    run_arg alone[NS], tog[NS];
    bool ok = true;
    for (int i = 0; i < NS; i++) {
        alone[i] = (run_arg){.seq = i, .V = V, .c = engine_ctx_new(e, &cp)};
        tog[i] = (run_arg){.seq = i, .V = V, .c = engine_ctx_new(e, &cp), .together = true};
        alone[i].logits = malloc(sizeof(float) * (size_t)(SE + 1) * V);
        tog[i].logits = malloc(sizeof(float) * (size_t)(SE + 1) * V);
        ok = ok && alone[i].c && tog[i].c && alone[i].logits && tog[i].logits;
    }
    if (vram) unsetenv("RL_VRAM_SLOTS");
    CHECK(ok, "%s: engine contexts: %s", model, rl_lasterr());
    long long f0 = 0, r0 = 0, f1 = 0, r1 = 0;
    if (ok) {
        for (int i = 0; i < NS; i++) {
            check_poison(alone[i].logits, (size_t)(SE + 1) * V);
            check_poison(tog[i].logits, (size_t)(SE + 1) * V);
            drive(&alone[i]);
            CHECK(alone[i].rc == 0, "%s: alone %d", model, i);
        }
        engine_batch_stats(e, &f0, &r0);
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, NS);
        pthread_t th[NS], st;
        for (int i = 0; i < NS; i++) {
            tog[i].bar = &bar;
            pthread_create(&th[i], NULL, drive, &tog[i]);
        }
        pthread_create(&st, NULL, side, e);
        void *side_rc = NULL;
        for (int i = 0; i < NS; i++) pthread_join(th[i], NULL);
        pthread_join(st, &side_rc);
        pthread_barrier_destroy(&bar);
        engine_batch_stats(e, &f1, &r1);
        CHECK(side_rc == NULL, "%s: the side prefill failed", model);
        int bad = 0;
        for (int i = 0; i < NS; i++) {
            CHECK(tog[i].rc == 0, "%s: together %d", model, i);
            for (int s = 0; s <= SE; s++) {
                const size_t o = (size_t)s * V;
                bool same = !memcmp(alone[i].logits + o, tog[i].logits + o, sizeof(float) * (size_t)V);
                bad += !same;
                CHECK(same, "%s%s: context %d (prompt %d) stage %d: logits differ from the context run alone",
                      model, vram ? " (VRAM tier)" : "", i, LENS[i], s);
            }
        }
        CHECK(r1 - r0 == (long long)NS * SE, "%s: %lld step rows counted, expected %d", model, r1 - r0,
              NS * SE);
        CHECK(f1 - f0 < r1 - r0, "%s: no two steps shared a forward (%lld forwards for %lld rows)", model,
              f1 - f0, r1 - r0);
        printf("  %s%s through the engine: %lld steps in %lld batches, %d stages differ from alone\n", model,
               vram ? " (VRAM tier: refused, turns)" : "", r1 - r0, f1 - f0, bad);
    }
    for (int i = 0; i < NS; i++) {
        engine_ctx_free(alone[i].c);
        engine_ctx_free(tog[i].c);
        free(alone[i].logits);
        free(tog[i].logits);
    }
}

/* ---- `test_cuda_rows MODEL`: aggregate decode of n contexts, rows of one forward vs turns ---- */

/* The timing's ways of stepping n contexts: rows of one forward with the environment switches given
 * (NULL: unset), or one forward per context (turns). */
typedef struct {
    const char *name, *graph, *batch; /* RL_CUDA_ROWS_GRAPH, RL_CUDA_ROWS_BATCH */
    bool turns;
} tmode;

static const tmode TMODES[] = {
    {"rows (graph, batched DeltaNet)", NULL, NULL, false},
    {"rows (graph, DeltaNet row by row)", NULL, "0", false},
    {"rows (direct launches, batched DeltaNet)", "0", NULL, false},
    {"rows (direct launches, row by row: the first version)", "0", "0", false},
    {"turns (one forward per context)", NULL, NULL, true},
};
#define MODES (int)(sizeof TMODES / sizeof TMODES[0])

static void set_or_unset(const char *name, const char *v) {
    if (v) setenv(name, v, 1);
    else unsetenv(name);
}

/* n contexts (prompts of 16 different tokens), then TS steps of each in every TMODES way, on fresh contexts
 * each; aggregate tok/s of each, and the last step's logits of every context compared between them (the
 * same bits). */
static void timing(engine *e, const char *model, int n) {
    enum { TS = 32, WARM = 4, PL = 16 };
    const q3n_model *m = engine_model(e);
    const int V = m->hp.n_vocab, D = m->hp.n_embd;
    float *lg = malloc(sizeof(float) * (size_t)V * n * MODES), *hd = malloc(sizeof(float) * (size_t)D * n);
    backend_ctx *cs[MODES][64] = {{0}};
    double rate[MODES] = {0};
    bool ok = lg && hd;
    for (int mode = 0; ok && mode < MODES; mode++) {
        const tmode *tm = &TMODES[mode];
        int32_t t[64], p[64];
        float *lp[64], *hp[64];
        set_or_unset("RL_CUDA_ROWS_GRAPH", tm->graph);
        set_or_unset("RL_CUDA_ROWS_BATCH", tm->batch);
        for (int i = 0; ok && i < n; i++) {
            cs[mode][i] = backend_cuda.ctx_new(m, NULL, 1024, n < 16 ? 16 : n, BACKEND_KV_F16);
            int32_t pr[PL];
            for (int k = 0; k < PL; k++) pr[k] = tok_of(i, k, V);
            ok = cs[mode][i] && !backend_cuda.forward(cs[mode][i], pr, PL, 0, NULL, false, NULL, NULL);
            p[i] = PL;
            lp[i] = lg + ((size_t)mode * n + i) * V;
            hp[i] = hd + (size_t)i * D;
        }
        double t0 = 0;
        for (int s = 0; ok && s < WARM + TS; s++) {
            if (s == WARM) t0 = rl_now();
            for (int i = 0; i < n; i++) t[i] = tok_of(i, PL + s, V);
            if (!tm->turns) ok = backend_cuda.forward_rows(cs[mode], t, p, n, lp, hp) == 0;
            for (int i = 0; tm->turns && ok && i < n; i++)
                ok = !backend_cuda.forward(cs[mode][i], &t[i], 1, p[i], lp[i], false, hp[i], NULL);
            for (int i = 0; i < n; i++) p[i]++;
        }
        rate[mode] = ok ? (double)n * TS / (rl_now() - t0) : 0;
        for (int i = 0; i < n; i++) backend_cuda.ctx_free(cs[mode][i]);
    }
    unsetenv("RL_CUDA_ROWS_GRAPH");
    unsetenv("RL_CUDA_ROWS_BATCH");
    CHECK(ok, "%s timing %d contexts: %s", model, n, rl_lasterr());
    int bad = 0;
    for (int i = 0; ok && i < n; i++)
        for (int mode = 1; mode < MODES; mode++)
            bad += memcmp(lg + (size_t)i * V, lg + ((size_t)mode * n + i) * V, sizeof(float) * V) != 0;
    CHECK(bad == 0, "%s: %d (context, way) logits differ from the first way's", model, bad);
    const double turns = rate[MODES - 1];
    printf("  %s, %d contexts, aggregate decode (last logits %s):\n", model, n, bad ? "DIFFER" : "identical");
    for (int mode = 0; mode < MODES; mode++)
        printf("    %-56s %8.1f tok/s  %.2fx turns\n", TMODES[mode].name, rate[mode],
               turns > 0 ? rate[mode] / turns : 0.0);
    free(lg);
    free(hd);
}

int main(int argc, char **argv) {
    const char *why = NULL;
    if (!backend_cuda.available(&why)) return check_skip("test_cuda_rows", why ? why : "no CUDA device");
    if (argc > 1) {
        engine *e = engine_open(argv[1], &(engine_params){.n_threads = 4, .backend = "cuda"});
        CHECK(e != NULL, "open %s: %s", argv[1], rl_lasterr());
        for (int n = 1; e && n <= 8; n *= 2) timing(e, argv[1], n);
        if (e) engine_close(e);
        return check_done("test_cuda_rows");
    }
    const char *models[] = {"tests/fixtures/tiny-a.gguf", "tests/fixtures/tiny-b.gguf",
                            "tests/fixtures/tiny-q35moe.gguf", "tests/fixtures/tiny-q35.gguf"};
    for (int i = 0; i < 4; i++) {
        if (access(models[i], R_OK) != 0) {
            CHECK(0, "fixture %s is missing", models[i]);
            continue;
        }
        engine *e = engine_open(models[i], &(engine_params){.n_threads = 4, .backend = "cuda"});
        CHECK(e != NULL, "open %s: %s", models[i], rl_lasterr());
        if (!e) continue;
        /* rows graphs with the batched DeltaNet unless RL_CUDA_GRAPHS=0 / RL_CUDA_ROWS_GRAPH=0 /
         * RL_CUDA_ROWS_BATCH=0 are set; then the direct launches (batched), and row by row (the reference) */
        direct(e, models[i], BACKEND_KV_F32);
        direct(e, models[i], BACKEND_KV_F16);
        if (!getenv("RL_CUDA_ROWS_GRAPH") && !getenv("RL_CUDA_ROWS_BATCH")) {
            setenv("RL_CUDA_ROWS_GRAPH", "0", 1);
            direct(e, models[i], BACKEND_KV_F16);
            setenv("RL_CUDA_ROWS_BATCH", "0", 1);
            direct(e, models[i], BACKEND_KV_F32);
            unsetenv("RL_CUDA_ROWS_GRAPH");
            unsetenv("RL_CUDA_ROWS_BATCH");
        }
        graphs(e, models[i], BACKEND_KV_F32);
        graphs(e, models[i], BACKEND_KV_F16);
        through_engine(e, models[i], NULL);
        if (i == 0) through_engine(e, models[i], "auto");
        engine_close(e);
    }
    return check_done("test_cuda_rows");
}
