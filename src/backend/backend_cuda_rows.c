/* backend_cuda_rows.c — the CUDA backend's forward_rows (backend.h; issue 46 item 2, continuous
 * batching): one decode step of each of n contexts as the rows of one forward, and the CUDA graphs that
 * replay it.
 *
 * The forward (enqueue with the rows' contexts, backend_cuda_forward.c): the embedding, every matmul
 * (mixer projections, router, routed experts grouped over the rows' union, shared expert, lm head), the
 * norms and the combine run over the n rows at once: every kernel computes a row with the same arithmetic
 * whatever the number of rows (cuda_ops.h, batch invariance; the rule that makes verify rows == steps).
 * The parts that hold a sequence's state run on the row's own context, with the arithmetic of that
 * context's single step: the DeltaNet conv and fused step on its conv / recurrent state, the
 * attention's q/k norm, RoPE and K/V store and the split decode attention over its KV cache at its
 * position (its own attention partials buffer). So each row gets the bits of engine_step on that context.
 * The DeltaNet conv and step of all the rows run as one launch each (cu_rows_dn_conv / cu_rows_dn_step,
 * src/cuda/rows.cu: row r's blocks on rc[r]'s state, with the single row's device functions: the same
 * bits; RL_CUDA_ROWS_BATCH=0 launches them row by row, as the first version did). The attention still runs
 * row by row (its launches per row: q/k norm + RoPE + store, split attention, merge).
 *
 * Graphs: a forward of n rows is ~1,500 launches at 8 rows on the 48-layer models (the per-row mixers), so
 * it is captured once per ordered set of contexts and replayed. A graph bakes in every pointer of its
 * launches: the first context's scratch and streams, and each row's states, KV cache, position cell
 * (pos0) and attention partials. What changes from one replay to the next is read from device memory:
 * the tokens and positions are uploaded as one array (rows->in) and spread by the graph's first kernel
 * (cu_rows_inputs) into the first context's token rows and each row's pos0, which the captured kernels
 * read (the single step's graph reads its token and position the same way). The key is n, the lm head
 * in or not, the DeltaNet batched or not, and each row's context by address and rows_id: ids come from a
 * counter of the model upload (dmodel.rows_ids), so a context freed and a new one at the same address (whose
 * buffers may be others) never replays the first one's graph; a graph naming a freed context is never
 * launched again and leaves the cache by LRU (ROWS_GRAPHS per first context, each a few MB at most). A
 * context's buffers never move while it lives (one allocation at ctx_new; the verify slots, which do move,
 * are not used by rows). The graph's launches are the direct path's (RL_CUDA_GRAPHS=0 or
 * RL_CUDA_ROWS_GRAPH=0, the reference), plus the inputs kernel for the direct path's position copies: the
 * same bits.
 *
 * 1 (the engine then runs the steps one by one): contexts of different uploads, a VRAM expert tier (its
 * slots are planned per context: a batch would need one plan for the rows' union; not done), more rows
 * than the first context's n_batch, RL_CUDA_ROWS=0 (A/B against turns). Bad positions, tokens or a context
 * twice: -1 before any launch (every context as it was). A device error part-way is reported like a failed
 * forward. Graphs up to CU_ROWS_MAX rows (the MoE's direct plan, which graphs already replay in verify);
 * more rows run the direct path.
 */
#ifdef RL_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_cuda_int.h"
#include "cuda/rows.h"

#define ROWS_GRAPHS 8 /* captured rows graphs kept per first context (LRU) */

typedef struct {
    cudaGraphExec_t exec; /* NULL: a free entry */
    int n;
    bool head;    /* the lm head of every row is in the graph */
    bool batched; /* the DeltaNet of all rows in one launch each (cuda_rows.batched at capture) */
    backend_ctx *cs[CU_ROWS_MAX];
    uint64_t ids[CU_ROWS_MAX];
    uint64_t used; /* cuda_rows.tick of the last replay */
} rows_graph;

typedef struct cuda_rows {
    int32_t *in;      /* device [2 * CU_ROWS_MAX]: a replay's tokens [n], then its positions [n] */
    unsigned *dn_ctr; /* device [CU_ROWS_MAX * ssm_hv], zeroed: the batched split DeltaNet step's counters */
    bool batched;     /* this forward's DeltaNet in one launch per kernel for all rows (RL_CUDA_ROWS_BATCH=0:
                         row by row, the same bits) */
    uint64_t tick;
    long captures, launches;
    rows_graph g[ROWS_GRAPHS];
} cuda_rows;

void cuda_rows_free(backend_ctx *c) {
    cuda_rows *r = c ? c->rows : NULL;
    if (!r) return;
    for (int i = 0; i < ROWS_GRAPHS; i++)
        if (r->g[i].exec) cudaGraphExecDestroy(r->g[i].exec);
    if (r->in) cudaFree(r->in);
    if (r->dn_ctr) cudaFree(r->dn_ctr);
    free(r);
    c->rows = NULL;
}

void cuda_rows_stats(const backend_ctx *c, long *captures, long *launches, int *cached) {
    const cuda_rows *r = c->rows;
    *captures = r ? r->captures : 0;
    *launches = r ? r->launches : 0;
    *cached = 0;
    for (int i = 0; r && i < ROWS_GRAPHS; i++) *cached += r->g[i].exec != NULL;
}

/* c's rows state (graphs, inputs, counters), made on first use. */
static int rows_get(backend_ctx *c) {
    if (c->rows) return 0;
    cuda_rows *r = rl_calloc(1, sizeof *r, "CUDA rows graphs");
    if (!r) return -1;
    const size_t nctr = (size_t)CU_ROWS_MAX * (c->hp->ssm_hv > 0 ? c->hp->ssm_hv : 1);
    if (CU_CHECK(cudaMalloc((void **)&r->in, sizeof(int32_t) * 2 * CU_ROWS_MAX)) ||
        CU_CHECK(cudaMalloc((void **)&r->dn_ctr, sizeof(unsigned) * nctr)) ||
        CU_CHECK(cudaMemsetAsync(r->dn_ctr, 0, sizeof(unsigned) * nctr, c->st))) {
        if (r->in) cudaFree(r->in);
        if (r->dn_ctr) cudaFree(r->dn_ctr);
        free(r);
        return -1;
    }
    c->rows = r;
    return 0;
}

int cuda_rows_deltanet(backend_ctx *c, const cu_dn_dims *d, int il, int T, backend_ctx *const *rc) {
    const q3n_hparams *hp = c->hp;
    const int C = d->C, hv2 = 2 * hp->ssm_hv, inner = hp->ssm_hv * hp->ssm_dv;
    if (c->rows && c->rows->batched && T <= CU_ROWS_MAX) {
        cu_rows_ptrs conv, ssm;
        for (int t = 0; t < T; t++) {
            conv.p[t] = rc[t]->conv[il];
            ssm.p[t] = rc[t]->ssm[il];
        }
        TRY(cu_rows_dn_conv(d, c->big, C, c->u, &conv, T, c->ks));
        return cu_rows_dn_step(d, c->u, c->ba, c->kvb, &ssm, c->o, c->dn_split ? c->rows->dn_ctr : NULL, T,
                               c->ks);
    }
    for (int t = 0; t < T; t++) {
        float *u = c->u + (size_t)t * C;
        TRY(cu_dn_conv(d, c->big + (size_t)t * C, C, u, rc[t]->conv[il], 1, c->ks));
        TRY(cu_dn_step(d, u, c->ba + (size_t)t * hv2, c->kvb + (size_t)t * inner, rc[t]->ssm[il],
                       c->o + (size_t)t * inner, c->dn_split ? c->ctr + CU_CTR_DN : NULL, c->ks));
    }
    return 0;
}

/* The graph of exactly these rows (contexts in this order, each still the context it was), or NULL. */
static rows_graph *rows_find(cuda_rows *r, backend_ctx *const *cs, int n, bool head) {
    for (int i = 0; i < ROWS_GRAPHS; i++) {
        rows_graph *g = &r->g[i];
        if (!g->exec || g->n != n || g->head != head || g->batched != r->batched) continue;
        int j = 0;
        while (j < n && g->cs[j] == cs[j] && g->ids[j] == cs[j]->rows_id) j++;
        if (j == n) return g;
    }
    return NULL;
}

/* A free entry, or the least recently replayed one emptied. */
static rows_graph *rows_victim(cuda_rows *r) {
    rows_graph *v = &r->g[0];
    for (int i = 0; i < ROWS_GRAPHS; i++) {
        if (!r->g[i].exec) return &r->g[i];
        if (r->g[i].used < v->used) v = &r->g[i];
    }
    cudaGraphExecDestroy(v->exec);
    v->exec = NULL;
    return v;
}

/* Capture the forward of rows cs (inputs from r->in, the head of every row if head) into g. */
static int rows_capture(cuda_rows *r, rows_graph *g, backend_ctx *const *cs, int n, bool head) {
    backend_ctx *c = cs[0];
    cu_rows_dst dst = {{0}};
    for (int i = 0; i < n; i++) dst.pos[i] = cs[i]->pos0;
    cudaGraph_t gr = NULL;
    TRY(CU_CHECK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal)));
    int rc = cu_rows_inputs(r->in, n, c->tok, &dst, c->ks) || cuda_enqueue_rows(c, n, cs) ||
             (head && cuda_head(c, 0, n));
    cudaError_t e = cudaStreamEndCapture(c->st, &gr);
    if (rc || e != cudaSuccess) {
        if (gr) cudaGraphDestroy(gr);
        return rc ? -1 : cu_fail(e, "cudaStreamEndCapture (rows)", __FILE__, __LINE__);
    }
    e = cudaGraphInstantiate(&g->exec, gr, 0);
    cudaGraphDestroy(gr);
    if (e != cudaSuccess) {
        g->exec = NULL;
        return cu_fail(e, "cudaGraphInstantiate (rows)", __FILE__, __LINE__);
    }
    g->n = n;
    g->head = head;
    g->batched = r->batched;
    for (int i = 0; i < n; i++) {
        g->cs[i] = cs[i];
        g->ids[i] = cs[i]->rows_id;
    }
    r->captures++;
    return 0;
}

/* The rows forward as a graph (captured on first use of these rows): tokens and positions uploaded,
 * the graph launched (the head of every row in it if head). */
static int rows_graph_run(backend_ctx *const *cs, const int32_t *tokens, const int *pos, int n, bool head) {
    backend_ctx *c = cs[0];
    cuda_rows *r = c->rows;
    int32_t *h = c->h_tok; /* 2n <= 2 n_batch + 1 entries, pinned */
    memcpy(h, tokens, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) h[n + i] = pos[i];
    TRY(CU_CHECK(cudaMemcpyAsync(r->in, h, sizeof(int32_t) * 2 * (size_t)n, cudaMemcpyHostToDevice, c->st)));
    rows_graph *g = rows_find(r, cs, n, head);
    if (!g) {
        g = rows_victim(r);
        TRY(rows_capture(r, g, cs, n, head));
    }
    g->used = ++r->tick;
    r->launches++;
    return CU_CHECK(cudaGraphLaunch(g->exec, c->st));
}

/* Captured graphs are keyed on the ordered rows and cached on the first row's context: the server
 * hands the rows in whatever order its slots come, so the graph path takes them in one canonical order
 * (ascending rows_id, ids handed out on first use) and every set of contexts maps to one graph. A row's
 * bits do not depend on its place among the rows (each row's arithmetic is its own), so the order is
 * free. */
static bool rows_sorted(backend_ctx *const *cs, int n) {
    for (int i = 0; i < n; i++)
        if (!cs[i]->rows_id) cs[i]->rows_id = __atomic_add_fetch(&cs[0]->dm->rows_ids, 1, __ATOMIC_RELAXED);
    for (int i = 1; i < n; i++)
        if (cs[i - 1]->rows_id > cs[i]->rows_id) return false;
    return true;
}

/* cuda_forward_rows over the rows permuted into ascending rows_id (n <= CU_ROWS_MAX). */
static int rows_in_order(backend_ctx *const *cs, const int32_t *tokens, const int *pos, int n,
                         float *const *logits, float *const *hidden) {
    int ix[CU_ROWS_MAX], p[CU_ROWS_MAX];
    backend_ctx *c2[CU_ROWS_MAX];
    int32_t t2[CU_ROWS_MAX];
    float *l2[CU_ROWS_MAX], *h2[CU_ROWS_MAX];
    for (int i = 0; i < n; i++) ix[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by rows_id: n is small */
        for (int j = i; j > 0 && cs[ix[j - 1]]->rows_id > cs[ix[j]]->rows_id; j--) {
            int t = ix[j];
            ix[j] = ix[j - 1];
            ix[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        c2[i] = cs[ix[i]];
        t2[i] = tokens[ix[i]];
        p[i] = pos[ix[i]];
        l2[i] = logits ? logits[ix[i]] : NULL;
        h2[i] = hidden ? hidden[ix[i]] : NULL;
    }
    return cuda_forward_rows(c2, t2, p, n, logits ? l2 : NULL, hidden ? h2 : NULL);
}

int cuda_forward_rows(backend_ctx *const *cs, const int32_t *tokens, const int *pos, int n,
                      float *const *logits, float *const *hidden) {
    if (n < 1) return rl_seterr("forward_rows of %d rows: must be 1 or more", n);
    backend_ctx *c = cs[0];
    const q3n_hparams *hp = c->hp;
    const int V = hp->n_vocab, D = hp->n_embd;
    if (n > c->n_batch || !c->tune.rows) return 1; /* RL_CUDA_ROWS=0: turns (A/B) */
    for (int i = 0; i < n; i++) {
        const backend_ctx *r = cs[i];
        if (r->dm != c->dm || r->vt) return 1;
        for (int j = 0; j < i; j++)
            if (cs[j] == r) return rl_seterr("forward_rows: rows %d and %d are one sequence", j, i);
        if (pos[i] < 0 || pos[i] + 1 > r->n_ctx)
            return rl_seterr("context is full: %d + 1 tokens exceed the context size %d (raise --ctx)",
                             pos[i], r->n_ctx);
    }
    if (q3n_check_tokens(tokens, n, V)) return -1;
    if (n == 1) /* one row: the context's own step (its decode graph) */
        return cuda_forward(c, tokens, 1, pos[0], logits ? logits[0] : NULL, false, hidden ? hidden[0] : NULL,
                            NULL);
    /* before any launch or wait: the rows in canonical order for the graph path */
    const bool graph = c->graphs && n <= CU_ROWS_MAX && c->tune.rows_graph;
    if (graph && !rows_sorted(cs, n)) return rows_in_order(cs, tokens, pos, n, logits, hidden);
    int want_logits = 0; /* rows [0, want_logits) hold every row that asks for logits */
    bool want_hidden = false;
    for (int i = 0; i < n; i++) {
        want_hidden |= hidden && hidden[i];
        if (logits && logits[i]) want_logits = i + 1;
    }
    for (int i = 1; i < n; i++) { /* what a row's own stream still holds (a snapshot restore) comes first */
        TRY(CU_CHECK(cudaEventRecord(cs[i]->ev_fork, cs[i]->st)));
        TRY(CU_CHECK(cudaStreamWaitEvent(c->st, cs[i]->ev_fork, 0)));
    }
    c->snap_rows = false;
    TRY(rows_get(c));
    c->rows->batched = c->tune.rows_batch;
    if (graph) {
        TRY(rows_graph_run(cs, tokens, pos, n, want_logits > 0));
    } else { /* direct: the same launches, the inputs copied one by one */
        memcpy(c->h_tok, tokens, sizeof(int32_t) * (size_t)n);
        TRY(CU_CHECK(
            cudaMemcpyAsync(c->tok, c->h_tok, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, c->st)));
        for (int i = 0; i < n; i++) {
            backend_ctx *r = cs[i];
            r->h_tok[r->n_batch] = pos[i];
            TRY(CU_CHECK(
                cudaMemcpyAsync(r->pos0, r->h_tok + r->n_batch, sizeof(int), cudaMemcpyHostToDevice, c->st)));
        }
        TRY(cuda_enqueue_rows(c, n, cs));
    }
    if (graph && want_logits) /* the head ran in the graph: rows' logits out with one copy */
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * (size_t)want_logits * V,
                                     cudaMemcpyDeviceToHost, c->st)));
    if (want_hidden)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_hidden, c->xn, sizeof(float) * (size_t)n * D,
                                     cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaStreamSynchronize(c->st))); /* the rows' contexts are done with before any returns */
    for (int i = 0; want_hidden && i < n; i++)
        if (hidden[i]) memcpy(hidden[i], c->h_hidden + (size_t)i * D, sizeof(float) * D);
    if (!want_logits) return 0;
    if (!graph) return cuda_head_to_host(c, n, logits);
    for (int i = 0; i < want_logits; i++)
        if (logits[i]) memcpy(logits[i], c->h_logits + (size_t)i * V, sizeof(float) * V);
    return 0;
}
#else
typedef int backend_cuda_rows_unused; /* ISO C wants a declaration in every translation unit */
#endif
