/* vram_gtab.c — see vram_gtab.h. Host code of the CUDA backend (compiled with CUDA=1 only). */
#ifdef RL_CUDA
#include "cache/vram_gtab.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "cuda/cuda_ops.h"
#include "model/experts.h"

#define GT_RING 4 /* fill generations in flight (an event each) before a step waits for the oldest */

typedef struct {
    int il, e, s, gen;
    uint32_t seq; /* the fill's number: its entry moves only if it is still its slot's latest fill */
} gt_fill;

struct vram_gtab {
    vram_gtab_src src;
    int L, E, K, max_slots;
    const uint8_t **h_tab; /* page-locked mirror of the device tables: [L][3][E] */
    const uint8_t **d_tab;
    int32_t *d_ids, *h_ids; /* a forward of T rows: [L][T * K] (room for GT_ROWS rows) */
    int32_t *mirror;        /* [L][max_slots]: the expert the tables know in each slot (-1 none) */
    uint32_t *last_fill;    /* [L][max_slots]: the number of the slot's latest fill (gt_fill.seq) */
    uint32_t fill_seq;
    bool *dirty;   /* [L]: the layer's table changed since its last upload */
    gt_fill *fill; /* copies in flight (their entries still point at host bytes) */
    int n_fill, cap_fill;
    cudaEvent_t ev[GT_RING];
    int gen_head, gen_tail; /* generations gen_tail .. gen_head - 1 are in flight */
    bool ready;
    int32_t *uni, *slot, *miss; /* [GT_ROWS * K] scratch */
    uint8_t *seen;              /* [E] scratch of step_layer's union (all 0 between calls) */
    vram_gtab_stats st;
    unsigned long long *d_held; /* emulated link: cu_link_hold's counters (experts, ns at the cap, ns held) */
    double *hold_ns;            /* [L]: ns a read over the link is held for (the expert's bytes at the cap) */
};

static const uint8_t *dev_of(const vram_gtab *g, const uint8_t *p) { return g->src.dev_lo + (p - g->src.lo); }

static void host_ptrs(const vram_gtab *g, int il, int e, const uint8_t *p[3]) {
    q3n_expert_rows(&g->src.m->hp, &g->src.m->layers[il], e, &p[0], &p[1], &p[2]);
}

static void slot_ptrs(const vram_gtab *g, int il, int s, const uint8_t *p[3]) {
    const vram_layout *ly = &g->src.ly[il];
    const uint8_t *b = g->src.base[il] + (size_t)s * ly->slot_bytes;
    p[0] = b + ly->gate_off;
    p[1] = b + ly->up_off;
    p[2] = b + ly->down_off;
}

static void set_entry(vram_gtab *g, int il, int e, const uint8_t *const p[3]) {
    for (int w = 0; w < 3; w++) g->h_tab[((size_t)il * 3 + w) * g->E + e] = p[w];
    g->dirty[il] = true;
}

/* Entry of (il, e) back to the expert's host bytes (as device addresses). */
static void set_host(vram_gtab *g, int il, int e) {
    const uint8_t *p[3];
    host_ptrs(g, il, e, p);
    for (int w = 0; w < 3; w++) p[w] = dev_of(g, p[w]);
    set_entry(g, il, e, p);
}

static bool at_slot(const vram_gtab *g, int il, int e) {
    const uint8_t *p = g->h_tab[(size_t)il * 3 * g->E + e], *b = g->src.base[il];
    return b && p >= b && p < b + (size_t)g->max_slots * g->src.ly[il].slot_bytes;
}

vram_gtab *vram_gtab_new(const vram_gtab_src *src) {
    vram_gtab *g = rl_calloc(1, sizeof *g, "VRAM graph tables");
    if (!g) return NULL;
    g->src = *src;
    g->L = src->m->hp.n_layer;
    g->E = src->m->hp.n_expert;
    g->K = src->m->hp.n_expert_used;
    for (int il = 0; il < g->L; il++) {
        const int c = vram_slots_capacity(src->slots, il);
        g->max_slots = c > g->max_slots ? c : g->max_slots;
    }
    const size_t nt = (size_t)g->L * 3 * g->E, ni = (size_t)g->L * GT_ROWS * g->K;
    g->cap_fill = g->L * GT_ROWS * g->K * GT_RING;
    g->mirror =
        rl_malloc(sizeof(int32_t) * (size_t)g->L * (g->max_slots ? g->max_slots : 1), "VRAM graph tables");
    g->last_fill =
        rl_calloc((size_t)g->L * (g->max_slots ? g->max_slots : 1), sizeof(uint32_t), "VRAM graph tables");
    g->dirty = rl_calloc((size_t)g->L, sizeof(bool), "VRAM graph tables");
    g->fill = rl_malloc(sizeof(gt_fill) * (size_t)g->cap_fill, "VRAM graph tables");
    g->uni = rl_malloc(sizeof(int32_t) * 3 * GT_ROWS * (size_t)g->K, "VRAM graph tables");
    g->seen = rl_calloc((size_t)g->E, 1, "VRAM graph tables");
    if (!g->mirror || !g->last_fill || !g->dirty || !g->fill || !g->uni || !g->seen) goto fail;
    g->slot = g->uni + GT_ROWS * g->K;
    g->miss = g->slot + GT_ROWS * g->K;
    if (CU_CHECK(cudaMallocHost((void **)&g->h_tab, sizeof(void *) * nt)) ||
        CU_CHECK(cudaMalloc((void **)&g->d_tab, sizeof(void *) * nt)) ||
        CU_CHECK(cudaMallocHost((void **)&g->h_ids, sizeof(int32_t) * ni)) ||
        CU_CHECK(cudaMalloc((void **)&g->d_ids, sizeof(int32_t) * ni)))
        goto fail;
    for (int i = 0; i < GT_RING; i++)
        if (CU_CHECK(cudaEventCreateWithFlags(&g->ev[i], cudaEventDisableTiming))) goto fail;
    if (src->link_gbs > 0) { /* GB/s = bytes per ns */
        if (!(g->hold_ns = rl_malloc(sizeof(double) * (size_t)g->L, "VRAM graph tables")) ||
            CU_CHECK(cudaMalloc((void **)&g->d_held, 3 * sizeof(unsigned long long))) ||
            CU_CHECK(cudaMemset(g->d_held, 0, 3 * sizeof(unsigned long long))))
            goto fail;
        for (int il = 0; il < g->L; il++)
            g->hold_ns[il] = (double)vram_layout_copy_bytes(&src->ly[il]) / src->link_gbs;
    }
    return g;
fail:
    vram_gtab_free(g);
    return NULL;
}

void vram_gtab_free(vram_gtab *g) {
    if (!g) return;
    cudaFreeHost(g->h_tab);
    cudaFree(g->d_tab);
    cudaFreeHost(g->h_ids);
    cudaFree(g->d_ids);
    cudaFree(g->d_held);
    free(g->hold_ns);
    for (int i = 0; i < GT_RING; i++)
        if (g->ev[i]) cudaEventDestroy(g->ev[i]);
    free(g->mirror), free(g->last_fill), free(g->dirty), free(g->fill), free(g->uni), free(g->seen);
    free(g);
}

const uint8_t *const *vram_gtab_table(const vram_gtab *g, int il, int which) {
    return g->d_tab + ((size_t)il * 3 + which) * g->E;
}

int32_t *vram_gtab_ids(const vram_gtab *g, int il, int T) { return g->d_ids + (size_t)il * T * g->K; }

void vram_gtab_get_stats(const vram_gtab *g, vram_gtab_stats *out) { *out = g->st; }

int vram_gtab_hold(const vram_gtab *g, int il, const int32_t *ids, int T, cu_stream s) {
    if (!g->hold_ns || !g->src.base[il]) return 0; /* no cap, or a layer without slots (all resident) */
    return cu_link_hold(ids, T * g->K, vram_gtab_table(g, il, 0), g->src.dev_lo,
                        (size_t)(g->src.hi - g->src.lo), g->hold_ns[il], g->d_held, s);
}

int vram_gtab_get_held(const vram_gtab *g, uint64_t *experts, double *target_s, double *held_s) {
    unsigned long long h[3] = {0, 0, 0};
    if (g->d_held && CU_CHECK(cudaMemcpy(h, g->d_held, sizeof h, cudaMemcpyDeviceToHost))) return -1;
    *experts = h[0];
    *target_s = (double)h[1] * 1e-9;
    *held_s = (double)h[2] * 1e-9;
    return 0;
}

static int upload(vram_gtab *g, cudaStream_t st) {
    const size_t n = sizeof(void *) * 3 * (size_t)g->E;
    for (int il = 0; il < g->L; il++) {
        if (!g->dirty[il]) continue;
        const size_t o = (size_t)il * 3 * g->E;
        if (CU_CHECK(cudaMemcpyAsync((void *)(g->d_tab + o), g->h_tab + o, n, cudaMemcpyHostToDevice, st)))
            return -1;
        g->dirty[il] = false;
        g->st.table_bytes += n;
    }
    return 0;
}

int vram_gtab_sync(vram_gtab *g, cudaStream_t st) {
    if (CU_CHECK(cudaStreamSynchronize(g->src.cp)) || CU_CHECK(cudaStreamSynchronize(st))) return -1;
    g->n_fill = 0;
    g->gen_tail = g->gen_head;
    for (size_t i = 0; i < (size_t)g->L * (g->max_slots ? g->max_slots : 1); i++) g->mirror[i] = -1;
    for (int il = 0; il < g->L; il++)
        for (int e = 0; e < g->E; e++) {
            const int s = g->src.base[il] ? vram_slots_lookup(g->src.slots, il, e) : -1;
            if (s < 0) {
                set_host(g, il, e);
                continue;
            }
            const uint8_t *p[3];
            slot_ptrs(g, il, s, p);
            set_entry(g, il, e, p);
            g->mirror[(size_t)il * g->max_slots + s] = e;
        }
    g->ready = true;
    return upload(g, st);
}

/* Entries of the fills whose copies are done move to their slots (unless evicted meanwhile); with
 * every generation in flight, the oldest is waited for first. */
static int retire(vram_gtab *g, bool need_room) {
    while (g->gen_tail < g->gen_head) {
        cudaEvent_t ev = g->ev[g->gen_tail % GT_RING];
        if (need_room && g->gen_head - g->gen_tail == GT_RING) {
            if (CU_CHECK(cudaEventSynchronize(ev))) return -1;
        } else {
            const cudaError_t q = cudaEventQuery(ev);
            if (q == cudaErrorNotReady) break;
            if (CU_CHECK(q)) return -1;
        }
        int keep = 0;
        for (int i = 0; i < g->n_fill; i++) {
            const gt_fill f = g->fill[i];
            if (f.gen != g->gen_tail) {
                g->fill[keep++] = f;
                continue;
            }
            /* not the slot's latest fill: evicted since, or the slot refilled since (also by the same
             * expert, which left and came back: the later copy, still in flight, would overwrite
             * what this one wrote). Every change of the slot's expert is a new fill (step_layer) or
             * follows a sync, which drops the fills in flight, so this covers the mirror too. */
            if (g->last_fill[(size_t)f.il * g->max_slots + f.s] != f.seq) continue;
            const uint8_t *p[3];
            slot_ptrs(g, f.il, f.s, p);
            set_entry(g, f.il, f.e, p);
        }
        g->n_fill = keep;
        g->gen_tail++;
    }
    return 0;
}

/* Layer il's experts of a forward (ids: n = T x K of them) through the slot policy: their union in
 * batches of at most the layer's slots (one batch for a decode step); a miss's copy queued on the copy
 * stream (its entry stays on the host bytes until retire), an evicted expert's entry back on its host
 * bytes. A later batch may evict an expert an earlier one just filled: its copy and the later one go
 * to the slot in queue order, and retire moves only the entry of the slot's latest fill. */
static int step_layer(vram_gtab *g, int il, const int32_t *ids, int n_ids, int T) {
    int n = 0;
    for (int k = 0; k < n_ids; k++) { /* the union, in first-seen order */
        if (ids[k] < 0 || ids[k] >= g->E) {
            for (int j = 0; j < n; j++) g->seen[g->uni[j]] = 0;
            return rl_seterr("VRAM graph tables: router chose expert %d", ids[k]);
        }
        if (!g->seen[ids[k]]) g->seen[ids[k]] = 1, g->uni[n++] = ids[k];
    }
    for (int j = 0; j < n; j++) g->seen[g->uni[j]] = 0;
    for (int j = 0; j < n; j++) g->st.host_reads += !at_slot(g, il, g->uni[j]);
    const vram_layout *ly = &g->src.ly[il];
    const int cap = vram_slots_capacity(g->src.slots, il);
    vram_slots_begin(g->src.slots, il, g->uni, n, T);
    for (int b0 = 0; b0 < n; b0 += cap) {
        const int nb = n - b0 < cap ? n - b0 : cap;
        const int nm = vram_slots_prepare(g->src.slots, il, g->uni + b0, nb, g->slot, g->miss);
        if (nm < 0) return -1;
        for (int j = 0; j < nm; j++) {
            const int e = g->uni[b0 + g->miss[j]], s = g->slot[g->miss[j]];
            int32_t *mo = &g->mirror[(size_t)il * g->max_slots + s];
            if (*mo >= 0 && *mo != e) set_host(g, il, *mo);
            *mo = e;
            const uint8_t *h[3], *d[3];
            host_ptrs(g, il, e, h);
            slot_ptrs(g, il, s, d);
            if (g->src.link && vram_link_begin(g->src.link)) { /* emulated link: the fills are its segment */
                vram_slots_abort(g->src.slots, il);
                return -1;
            }
            for (int r = 0; r < 3; r++) {
                if (!ly->src_bytes[r]) continue; /* fused: up lives in the gate region */
                if (CU_CHECK(cudaMemcpyAsync((void *)d[r], h[r], ly->src_bytes[r], cudaMemcpyHostToDevice,
                                             g->src.cp))) {
                    vram_slots_abort(g->src.slots, il);
                    return -1;
                }
                g->st.fill_bytes += ly->src_bytes[r];
                if (g->src.link) vram_link_add(g->src.link, ly->src_bytes[r]);
            }
            const uint32_t seq = ++g->fill_seq;
            g->last_fill[(size_t)il * g->max_slots + s] = seq;
            g->fill[g->n_fill++] = (gt_fill){il, e, s, g->gen_head, seq};
            g->st.fills++;
        }
        vram_slots_commit(g->src.slots, il);
        vram_slots_release(g->src.slots, il);
    }
    return 0;
}

int vram_gtab_prepare(vram_gtab *g, cudaStream_t st) { return g->ready ? 0 : vram_gtab_sync(g, st); }

int vram_gtab_quiesce(vram_gtab *g) {
    if (g->gen_tail < g->gen_head && CU_CHECK(cudaStreamSynchronize(g->src.cp))) return -1;
    g->n_fill = 0;
    g->gen_tail = g->gen_head;
    g->ready = false;
    return 0;
}

int vram_gtab_step(vram_gtab *g, cudaStream_t st, int T) {
    if (!g->ready) return rl_seterr("VRAM graph tables: a step before the tables were made (internal)");
    if (T < 1 || T > GT_ROWS) return rl_seterr("VRAM graph tables: a forward of %d rows (internal)", T);
    const size_t ni = (size_t)g->L * T * g->K; /* this forward's ids only */
    const double t0 = rl_now();
    if (CU_CHECK(cudaMemcpyAsync(g->h_ids, g->d_ids, sizeof(int32_t) * ni, cudaMemcpyDeviceToHost, st)) ||
        CU_CHECK(cudaStreamSynchronize(st)))
        return -1;
    const double t1 = rl_now();
    g->st.wait_s += t1 - t0;
    g->st.steps++;
    g->st.verifies += T > 1;
    if (retire(g, true)) return -1;
    const int before = g->n_fill;
    for (int il = 0; il < g->L; il++)
        if (g->src.base[il] && step_layer(g, il, g->h_ids + (size_t)il * T * g->K, T * g->K, T)) return -1;
    if (g->n_fill > before) { /* this step's copies: one generation, one event (after the link's hold) */
        if (g->src.link && vram_link_end(g->src.link)) return -1;
        if (CU_CHECK(cudaEventRecord(g->ev[g->gen_head % GT_RING], g->src.cp))) return -1;
        g->gen_head++;
    }
    const int rc = upload(g, st);
    g->st.host_s += rl_now() - t1;
    return rc;
}
#endif
