/* test_vram_gtab.c — the VRAM tier's decode-graph tables (src/cache/vram_gtab.c) without a GPU.
 *
 * The tables are the graph path's whole exactness argument: a kernel reads expert e where the table
 * says, so every entry must hold e's bytes at every forward — its host bytes, or a VRAM slot whose copy
 * has run. Here "device" memory is host memory (tests/c/mock_cuda/cuda_runtime_api.h, implemented
 * below): copies on the tier's copy stream run only when an event recorded after them is waited for,
 * polled (sometimes), or the stream is synchronised, so an entry moved to its slot too early reads
 * stale bytes (the third layer's experts are a fused gate_up slab). A random run of decode steps (1 row) and
 * verifies (4 and 16 rows, whose experts outnumber a layer's slots: the policy takes them in batches) on a
 * small fake model checks before every forward that each table entry of every expert holds that expert's
 * bytes, that no two experts of a layer share a slot, and, after a quiesce and rebuild, that exactly the slot
 * index's residents point at their slots. Under an emulated link the fills are the link's segments (their
 * bytes add up) and a forward's hold covers its T x K (row, expert) pairs at the expert's bytes over the cap.
 * The CUDA build skips (exit 77): test_cuda_vram runs the tables on the device. */
#include "check.h"

#ifdef RL_CUDA
int main(void) {
    return check_skip("test_vram_gtab", "CUDA build (tests/cuda/test_cuda_vram.c runs the tables)");
}
#else
#define RL_CUDA 1
#include <stdlib.h>
#include <string.h>

#include "../../src/cache/vram_gtab.c" /* the unit under test, compiled here against the mock runtime */

/* ---- the mock runtime ------------------------------------------------------------------------- */

typedef struct {
    void *dst;
    const void *src;
    size_t n;
} mock_op;
struct mock_stream {
    bool deferred; /* the copy stream: copies wait for a wait; others run at once */
    mock_op *q;
    long n_q, n_run, cap_q;
};
struct mock_event {
    cudaStream_t s;
    long upto;
};
static bool g_lazy;       /* cudaEventQuery sometimes answers "not ready" (copies still in flight) */
static rl_rng g_rng;      /* the run's randomness (the polls too) */
static long g_copies_run; /* deferred copies executed (a run's) */

static void run_to(cudaStream_t s, long upto) {
    for (; s->n_run < upto; s->n_run++) {
        memcpy(s->q[s->n_run].dst, s->q[s->n_run].src, s->q[s->n_run].n);
        g_copies_run++;
    }
}
cudaError_t cudaMallocHost(void **p, size_t n) {
    return (*p = malloc(n ? n : 1)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMalloc(void **p, size_t n) { return cudaMallocHost(p, n); }
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) { return cudaFreeHost(p); }
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
    (void)k;
    if (!s || !s->deferred) {
        memcpy(dst, src, n);
        return cudaSuccess;
    }
    if (s->n_q == s->cap_q) {
        s->cap_q = s->cap_q ? 2 * s->cap_q : 64;
        s->q = realloc(s->q, sizeof(mock_op) * (size_t)s->cap_q);
    }
    s->q[s->n_q++] = (mock_op){dst, src, n};
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    return cudaMemcpyAsync(dst, src, n, k, NULL);
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s) run_to(s, s->n_q);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    (void)flags;
    return (*e = calloc(1, sizeof **e)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    e->s = s;
    e->upto = s ? s->n_q : 0;
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e->s || e->s->n_run >= e->upto) return cudaSuccess;
    if (g_lazy && (uint32_t)rl_rng_u64(&g_rng) % 3 != 0) return cudaErrorNotReady;
    run_to(e->s, e->upto);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e->s) run_to(e->s, e->upto);
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "mock error"; }
int cu_fail(cudaError_t e, const char *what, const char *file, int line) {
    return rl_seterr("%s: %s (%s:%d)", what, cudaGetErrorString(e), file, line);
}

/* cu_link_hold: what the kernel would count (pairs whose entry is host memory) and hold */
static long g_hold_calls, g_hold_ids;
static double g_hold_ns_per_expert;
int cu_link_hold(const int32_t *ids, int K, const uint8_t *const *tab, const uint8_t *lo, size_t span,
                 double ns_per_expert, unsigned long long *acc, cu_stream s) {
    (void)s;
    int n = 0;
    for (int k = 0; k < K; k++) n += (size_t)((uintptr_t)tab[ids[k]] - (uintptr_t)lo) < span;
    acc[0] += (unsigned long long)n;
    acc[1] += (unsigned long long)(n * ns_per_expert);
    acc[2] += (unsigned long long)(n * ns_per_expert);
    g_hold_calls++;
    g_hold_ids += K;
    g_hold_ns_per_expert = ns_per_expert;
    return 0;
}

/* vram_link (the fills' segments under an emulated link): counted */
struct vram_link {
    int open;
};
static long g_seg_begin, g_seg_end;
static uint64_t g_seg_bytes;
int vram_link_begin(vram_link *l) {
    g_seg_begin += !l->open;
    l->open = 1;
    return 0;
}
void vram_link_add(vram_link *l, uint64_t bytes) {
    CHECK(l->open, "vram_link_add outside a segment");
    g_seg_bytes += bytes;
}
int vram_link_end(vram_link *l) {
    g_seg_end += l->open;
    l->open = 0;
    return 0;
}

/* ---- a fake model: L layers of E experts (split gate / up / down of odd sizes) ----------------- */

#define L 3
#define E 16
#define K 4
static const int g_cap[L] = {4, 6, 5}; /* slots per layer: top_k, more, one more */

typedef struct {
    q3n_model *m;
    uint8_t *host; /* every layer's experts, one span (the "pinned mapping") */
    size_t host_bytes;
    vram_layout ly[L];
    uint8_t *base[L];
    vram_slots *slots;
    struct mock_stream st, cp;
} fake;

static int fake_make(fake *f) {
    memset(f, 0, sizeof *f);
    f->cp.deferred = true;
    f->m = calloc(1, sizeof *f->m);
    if (!f->m) return -1;
    q3n_hparams *hp = &f->m->hp;
    hp->n_layer = L, hp->n_expert = E, hp->n_expert_used = K, hp->n_ff_exp = 8, hp->n_embd = 16;
    const size_t rb[3] = {24, 20, 12}, rows[3] = {8, 8, 16}; /* gate / up rows of ff, down rows of D */
    const size_t per_layer =
        E * (2 * rows[0] * rb[0] + rows[1] * rb[1] + rows[2] * rb[2]); /* room for either form */
    f->host_bytes = L * per_layer;
    f->host = malloc(f->host_bytes);
    if (!f->host) return -1;
    for (size_t i = 0; i < f->host_bytes; i++) f->host[i] = (uint8_t)(i * 2654435761u >> 13);
    uint64_t bytes[L];
    for (int il = 0; il < L; il++) {
        q3n_layer *ly = &f->m->layers[il];
        uint8_t *p = f->host + il * per_layer;
        ops_mat *t[3] = {&ly->gate_exps, &ly->up_exps, &ly->down_exps};
        ly->fused_gate_up = il == 2; /* the last layer: gate_up_exps, up inside the gate slab */
        for (int w = 0; w < 3; w++) {
            if (w == 1 && ly->fused_gate_up) continue;
            const size_t n_rows = rows[w] * (w == 0 && ly->fused_gate_up ? 2 : 1);
            t[w]->data = p;
            t[w]->row_bytes = rb[w];
            t[w]->n_out = (int64_t)(n_rows * E);
            p += E * n_rows * rb[w];
        }
        if (vram_layout_of(f->m, il, &f->ly[il])) return -1;
        bytes[il] = vram_layout_copy_bytes(&f->ly[il]);
        f->base[il] = malloc((size_t)g_cap[il] * f->ly[il].slot_bytes);
        if (!f->base[il]) return -1;
        memset(f->base[il], 0xEE, (size_t)g_cap[il] * f->ly[il].slot_bytes); /* poison: no expert's bytes */
    }
    f->slots = vram_slots_new(L, E, g_cap, bytes);
    return f->slots ? 0 : -1;
}

static void fake_free(fake *f) {
    vram_slots_free(f->slots);
    for (int il = 0; il < L; il++) free(f->base[il]);
    free(f->host);
    free(f->m);
    free(f->st.q);
    free(f->cp.q);
}

/* Every entry of every expert holds that expert's bytes (what a forward's kernels would read now);
 * at most one expert per slot. Returns the entries at slots. */
static int check_tables(const fake *f, const vram_gtab *g, const char *when) {
    int at_slots = 0;
    for (int il = 0; il < L; il++) {
        const vram_layout *ly = &f->ly[il];
        int owner[8];
        for (int s = 0; s < 8; s++) owner[s] = -1;
        for (int e = 0; e < E; e++) {
            const uint8_t *h[3];
            q3n_expert_rows(&f->m->hp, &f->m->layers[il], e, &h[0], &h[1], &h[2]);
            const q3n_expert_slice sl = q3n_expert_slice_of(&f->m->hp, &f->m->layers[il], e);
            const size_t nb[3] = {sl.gate_bytes, sl.up_bytes, sl.down_bytes};
            for (int w = 0; w < 3; w++) {
                const uint8_t *p = vram_gtab_table(g, il, w)[e];
                if (memcmp(p, h[w], nb[w])) {
                    CHECK(0, "%s: layer %d expert %d matrix %d: the table's bytes are not the expert's (%s)",
                          when, il, e, w, p >= f->host && p < f->host + f->host_bytes ? "host" : "slot");
                    return -1;
                }
            }
            const uint8_t *p = vram_gtab_table(g, il, 0)[e];
            if (p >= f->base[il] && p < f->base[il] + (size_t)g_cap[il] * ly->slot_bytes) {
                const int s = (int)((size_t)(p - f->base[il]) / ly->slot_bytes);
                CHECK(owner[s] < 0, "%s: layer %d slot %d named by experts %d and %d", when, il, s, owner[s],
                      e);
                owner[s] = e;
                at_slots++;
            }
        }
    }
    return at_slots;
}

/* After a quiesce and a rebuild: exactly the slot index's residents point at their slots. */
/* What the tier's own path (a prompt chunk, a hooked forward) does to the slots between graph forwards,
 * after vram_gtab_quiesce: its own selection through the policy, each miss copied before its slot is
 * read (here at once, as the own path's kernels wait for the copy). */
static void own_path(fake *f) {
    for (int il = 0; il < L; il++) {
        int32_t ids[8], slot[8], miss[8];
        const int n = 1 + (int)(rl_rng_u64(&g_rng) % (uint64_t)g_cap[il]);
        for (int i = 0; i < n; i++) {
            bool dup;
            do {
                ids[i] = (int32_t)(rl_rng_u64(&g_rng) % E);
                dup = false;
                for (int j = 0; j < i; j++) dup |= ids[j] == ids[i];
            } while (dup);
        }
        vram_slots_begin(f->slots, il, ids, n, 64);
        const int nm = vram_slots_prepare(f->slots, il, ids, n, slot, miss);
        CHECK(nm >= 0, "own path: %s", rl_lasterr());
        for (int j = 0; j < nm; j++) {
            const vram_layout *ly = &f->ly[il];
            const uint8_t *h[3];
            q3n_expert_rows(&f->m->hp, &f->m->layers[il], ids[miss[j]], &h[0], &h[1], &h[2]);
            uint8_t *b = f->base[il] + (size_t)slot[miss[j]] * ly->slot_bytes;
            const uint64_t off[3] = {ly->gate_off, ly->up_off, ly->down_off};
            for (int w = 0; w < 3; w++)
                if (ly->src_bytes[w]) memcpy(b + off[w], h[w], ly->src_bytes[w]);
        }
        vram_slots_commit(f->slots, il);
        vram_slots_release(f->slots, il);
    }
}

static void check_rebuilt(fake *f, vram_gtab *g) {
    CHECK(vram_gtab_quiesce(g) == 0, "quiesce: %s", rl_lasterr());
    if (rl_rng_u64(&g_rng) % 2) own_path(f);
    CHECK(vram_gtab_prepare(g, &f->st) == 0, "rebuild: %s", rl_lasterr());
    for (int il = 0; il < L; il++)
        for (int e = 0; e < E; e++) {
            const int s = vram_slots_lookup(f->slots, il, e);
            const uint8_t *p = vram_gtab_table(g, il, 0)[e];
            const uint8_t *want =
                s >= 0 ? f->base[il] + (size_t)s * f->ly[il].slot_bytes + f->ly[il].gate_off : NULL;
            if (s >= 0)
                CHECK(p == want, "rebuilt: layer %d expert %d resident in slot %d, table elsewhere", il, e,
                      s);
            else
                CHECK(p >= f->host && p < f->host + f->host_bytes,
                      "rebuilt: layer %d expert %d not resident, table "
                      "not on its host bytes",
                      il, e);
        }
    check_tables(f, g, "after the rebuild");
}

/* One forward of T rows: each row K distinct experts, skewed towards low ids (hits and misses). */
static void forward_ids(vram_gtab *g, int T) {
    for (int il = 0; il < L; il++) {
        int32_t *ids = vram_gtab_ids(g, il, T);
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) {
                int32_t e;
                bool dup;
                do {
                    const uint32_t r = (uint32_t)rl_rng_u64(&g_rng);
                    e = (int32_t)(r % 3 ? r / 3 % 7 : r / 3 % E); /* 2/3 from experts 0..6 */
                    dup = false;
                    for (int j = 0; j < k; j++) dup |= ids[t * K + j] == e;
                } while (dup);
                ids[t * K + k] = e;
            }
    }
}

static void run(bool link, bool lazy) {
    fake f;
    CHECK(fake_make(&f) == 0, "fake model: %s", rl_lasterr());
    struct vram_link lk = {0};
    const double gbs = 2.5;
    const vram_gtab_src src = {.m = f.m,
                               .slots = f.slots,
                               .base = f.base,
                               .ly = f.ly,
                               .lo = f.host,
                               .hi = f.host + f.host_bytes,
                               .dev_lo = f.host,
                               .cp = &f.cp,
                               .link_gbs = link ? gbs : 0,
                               .link = link ? &lk : NULL};
    vram_gtab *g = vram_gtab_new(&src);
    CHECK(g != NULL, "vram_gtab_new: %s", rl_lasterr());
    if (!g) return;
    g_lazy = lazy;
    g_hold_calls = g_hold_ids = g_seg_begin = g_seg_end = g_copies_run = 0;
    g_seg_bytes = 0;
    CHECK(vram_gtab_prepare(g, &f.st) == 0, "prepare: %s", rl_lasterr());
    static const int rows[] = {1, 1, 1, 4, 1, 16, 1, 1};
    int n_fwd = 400, verifies = 0, max_at_slots = 0;
    long rebuilt = 0;
    for (int i = 0; i < n_fwd; i++) {
        const int T = rows[(uint32_t)rl_rng_u64(&g_rng) % 8];
        verifies += T > 1;
        forward_ids(g, T);
        const int at = check_tables(&f, g, T > 1 ? "before a verify" : "before a step");
        if (at < 0) break;
        max_at_slots = at > max_at_slots ? at : max_at_slots;
        const cu_stream ks = {&f.st, NULL};
        for (int il = 0; il < L; il++)
            CHECK(vram_gtab_hold(g, il, vram_gtab_ids(g, il, T), T, ks) == 0, "hold");
        vram_gtab_stats before;
        vram_gtab_get_stats(g, &before);
        const uint64_t seg0 = g_seg_bytes;
        const long end0 = g_seg_end;
        if (vram_gtab_step(g, &f.st, T)) {
            CHECK(0, "forward %d (%d rows): %s", i, T, rl_lasterr());
            break;
        }
        vram_gtab_stats after;
        vram_gtab_get_stats(g, &after);
        if (link) {
            CHECK(g_seg_bytes - seg0 == after.fill_bytes - before.fill_bytes,
                  "the fills' bytes are not the segment's");
            CHECK(g_seg_end - end0 == (after.fills > before.fills), "one segment a forward with fills");
            CHECK(!lk.open, "a segment left open after the forward");
        }
        if ((uint32_t)rl_rng_u64(&g_rng) % 4 == 0)
            cudaStreamSynchronize(&f.cp); /* the copies land, sometimes */
        if ((uint32_t)rl_rng_u64(&g_rng) % 40 == 0) {
            check_rebuilt(&f, g);
            rebuilt++;
        }
    }
    vram_gtab_stats st;
    vram_gtab_get_stats(g, &st);
    CHECK(st.steps == (uint64_t)n_fwd && st.verifies == (uint64_t)verifies,
          "stats: %llu forwards (%llu verifies)", (unsigned long long)st.steps,
          (unsigned long long)st.verifies);
    CHECK(max_at_slots > 0 && st.fills > 0, "the tables never pointed at a slot (%d, %llu fills)",
          max_at_slots, (unsigned long long)st.fills);
    uint64_t held = 0;
    double due = 0, held_s = 0;
    CHECK(vram_gtab_get_held(g, &held, &due, &held_s) == 0, "held");
    if (link) {
        const vram_layout *last = &f.ly[L - 1]; /* the last hold: the last layer of the last forward */
        const double want = (double)(last->src_bytes[0] + last->src_bytes[1] + last->src_bytes[2]) / gbs;
        CHECK(g_hold_calls == (long)n_fwd * L && held > 0, "holds: %ld calls, %llu experts", g_hold_calls,
              (unsigned long long)held);
        CHECK(g_hold_ns_per_expert > 0.999 * want && g_hold_ns_per_expert < 1.001 * want,
              "ns per expert %g, want %g", g_hold_ns_per_expert, want);
        CHECK(g_seg_begin > 0 && g_seg_begin == g_seg_end, "segments %ld begun, %ld ended", g_seg_begin,
              g_seg_end);
    } else {
        CHECK(g_hold_calls == 0 && held == 0, "a hold without an emulated link");
    }
    check_rebuilt(&f, g);
    printf("  link %s, lazy copies %s: %d forwards (%d verifies of 4 / 16 rows), %llu fills, up to %d "
           "entries at "
           "slots, %ld rebuilds, %ld copies run late: every table entry held its expert's bytes\n",
           link ? "emulated" : "off", lazy ? "on" : "off", n_fwd, verifies, (unsigned long long)st.fills,
           max_at_slots, rebuilt, g_copies_run);
    vram_gtab_free(g);
    fake_free(&f);
}

int main(void) {
    rl_rng_seed(&g_rng, 20261207);
    run(false, false);
    run(false, true);
    run(true, true);
    return check_done("test_vram_gtab");
}
#endif
