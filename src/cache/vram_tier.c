/* vram_tier.c — see vram_tier.h. Host code of the CUDA backend (compiled with CUDA=1 only). */
#ifdef RL_CUDA
#include "cache/vram_tier.h"
#include "cache/vram_tier_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"

static void *pinned(size_t n, int *err) {
    void *p = NULL;
    if (*err || CU_CHECK(cudaMallocHost(&p, n ? n : 1))) {
        *err = 1;
        return NULL;
    }
    return p;
}

static void *dev(size_t n, int *err) {
    void *p = NULL;
    if (*err || CU_CHECK(cudaMalloc(&p, n ? n : 1))) {
        *err = 1;
        return NULL;
    }
    return p;
}

vram_tier *vram_tier_new(const q3n_model *m, const vram_plan *plan, int n_batch, pool *p, vram_pin_mode pin,
                         vram_miss_mode miss, const vram_tier_opts *o) {
    const q3n_hparams *hp = &m->hp;
    vram_tier *vt = rl_calloc(1, sizeof *vt, "VRAM tier");
    if (!vt) return NULL;
    vt->m = m;
    vt->plan = *plan;
    vt->n_batch = n_batch;
    vt->pool = p;
    vt->pin = pin;
    vt->miss = miss;
    for (int il = 0; il < hp->n_layer; il++) vt->n_exact += vt->cpu_exact[il] = o->cpu_exact[il];
    vt->K = hp->n_expert_used;
    vt->E = hp->n_expert;
    vt->prefetch = o->prefetch;
    vt->fault_at = o->fault_at;
    vt->overlap = o->overlap;
    vt->warm = o->warm;
    vt->stream = o->stream;
    vt->graph_bytes = (o->graph_mib > 0 ? o->graph_mib : VRAM_GRAPH_MIB) * 1048576.0;
    vt->graph_limit = vt->graph_bytes;
    vt->graph_fixed = o->graph_mib > 0;
    /* --vram-miss cpu asks for CPU-computed misses, which only the own path does */
    vt->graph_want = o->graph && !o->fault_at && miss != VRAM_MISS_CPU;
    vt->link_gbs = o->link_gbs;
    uint64_t bytes[Q3N_MAX_LAYERS], total = 0, maxslot = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        if (vram_layout_of(m, il, &vt->ly[il])) goto fail;
        bytes[il] = vram_layout_copy_bytes(&vt->ly[il]);
        total += (uint64_t)plan->slots[il] * vt->ly[il].slot_bytes;
        if (vt->ly[il].slot_bytes > maxslot) maxslot = vt->ly[il].slot_bytes;
    }
    if (!(vt->slots = vram_slots_new(hp->n_layer, vt->E, plan->slots, bytes))) goto fail;
    vram_slots_set_stream(vt->slots, vt->stream);
    if (cudaMalloc((void **)&vt->arena, total) != cudaSuccess) {
        (void)cudaGetLastError();
        rl_seterr("cannot allocate %.0f MiB of VRAM expert slots (lower --vram-mib or use auto)",
                  total / 1048576.0);
        goto fail;
    }
    {
        uint64_t off = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            vt->base[il] = vt->arena + off;
            off += (uint64_t)plan->slots[il] * vt->ly[il].slot_bytes;
        }
    }
    int err = 0;
    const size_t TK = (size_t)n_batch * vt->K;
    vt->max_tiles = (int)(TK + (size_t)vt->E + 1);
    vt->stage_bytes = maxslot > VT_STAGE_MIN ? maxslot : VT_STAGE_MIN;
    for (int i = 0; i < VT_NSTAGE; i++) vt->stage[i] = pinned(vt->stage_bytes, &err);
    vt->h_tiles = pinned(sizeof(cu_tile) * (size_t)vt->max_tiles, &err);
    vt->h_pin = pinned(4 * TK, &err);
    vt->h_pout = pinned(4 * TK, &err);
    vt->h_ntiles = pinned(4 * ((size_t)vt->E + 1), &err);
    vt->h_ids = pinned(4 * TK, &err);
    vt->h_pred = pinned(4 * TK, &err);
    vt->d_tiles = dev(sizeof(cu_tile) * (size_t)vt->max_tiles, &err);
    vt->d_pin = dev(4 * TK, &err);
    vt->d_pout = dev(4 * TK, &err);
    vt->d_ntiles = dev(4 * ((size_t)vt->E + 1), &err);
    vt->d_pred = dev(4 * TK, &err);
    vt->d_predw = dev(4 * TK, &err);
    if (err) goto fail;
    vt->uni = rl_malloc(4 * (size_t)vt->E, "VRAM tier");
    vt->cnt = rl_calloc((size_t)vt->E, 4, "VRAM tier");
    vt->first = rl_malloc(4 * (size_t)vt->E, "VRAM tier");
    vt->order = rl_malloc(4 * TK, "VRAM tier");
    vt->bslot = rl_malloc(4 * (size_t)vt->E, "VRAM tier");
    vt->bmiss = rl_malloc(4 * (size_t)vt->E, "VRAM tier");
    vt->pf_slot = rl_malloc(4 * TK, "VRAM tier");
    vt->pf_e = rl_malloc(4 * TK, "VRAM tier");
    vt->hg = rl_malloc(sizeof(void *) * TK, "VRAM tier");
    vt->hu = rl_malloc(sizeof(void *) * TK, "VRAM tier");
    vt->hd = rl_malloc(sizeof(void *) * TK, "VRAM tier");
    vt->hs = rl_malloc(sizeof(void *) * TK, "VRAM tier");
    vt->keep_l = rl_malloc(4 * (TK + (size_t)vt->E), "VRAM tier");
    vt->keep_e = rl_malloc(4 * (TK + (size_t)vt->E), "VRAM tier");
    {
        size_t ns = 0;
        for (int il = 0; il < hp->n_layer; il++) ns += (size_t)plan->slots[il];
        if (!(vt->seq_arena = rl_malloc(sizeof(int64_t) * (ns ? ns : 1), "VRAM tier"))) goto fail;
        for (size_t i = 0; i < ns; i++) vt->seq_arena[i] = -1;
        for (int il = 0, o = 0; il < hp->n_layer; il++) {
            vt->slot_seq[il] = vt->seq_arena + o;
            o += plan->slots[il];
        }
    }
    if (!vt->uni || !vt->cnt || !vt->first || !vt->order || !vt->bslot || !vt->bmiss || !vt->pf_slot ||
        !vt->pf_e || !vt->hg || !vt->hu || !vt->hd || !vt->hs || !vt->keep_l || !vt->keep_e)
        goto fail;
    if (miss != VRAM_MISS_COPY) { /* the CPU path's buffers (decode / small verifies only) */
        const size_t P = VT_CPU_PAIRS, D = (size_t)hp->n_embd, ff = (size_t)hp->n_ff_exp;
        vt->h_xn = pinned(4 * (size_t)(n_batch < VRAM_CPU_MAX_T ? n_batch : VRAM_CPU_MAX_T) * D, &err);
        vt->h_eo = pinned(4 * P * D, &err);
        if (err) goto fail;
        vt->xg = rl_malloc(4 * P * D, "VRAM tier CPU experts");
        vt->gb = rl_malloc(4 * P * 2 * ff, "VRAM tier CPU experts");
        vt->ub = rl_malloc(4 * P * ff, "VRAM tier CPU experts");
        vt->mats = rl_malloc(sizeof(ops_mat) * 3 * P, "VRAM tier CPU experts");
        vt->tasks = rl_malloc(sizeof(ops_mm_task) * 2 * P, "VRAM tier CPU experts");
        vt->cpu_e = rl_malloc(4 * (size_t)vt->E, "VRAM tier CPU experts");
        vt->cpu_pair = rl_malloc(4 * P, "VRAM tier CPU experts");
        if (!vt->xg || !vt->gb || !vt->ub || !vt->mats || !vt->tasks || !vt->cpu_e || !vt->cpu_pair)
            goto fail;
        for (int il = 0; il < hp->n_layer; il++) { /* cost classes: the layers' expert types */
            const q3n_layer *L = &m->layers[il];
            int k = 0;
            while (k < vt->n_kind &&
                   (vt->kind_gate[k] != L->gate_exps.type || vt->kind_down[k] != L->down_exps.type))
                k++;
            if (k == vt->n_kind && k < VT_MAX_KINDS) {
                vt->kind_gate[k] = L->gate_exps.type;
                vt->kind_down[k] = L->down_exps.type;
                vt->n_kind++;
            }
            vt->kind[il] = k < vt->n_kind ? k : vt->n_kind - 1;
        }
    }
    if (CU_CHECK(cudaStreamCreateWithFlags(&vt->cp, cudaStreamNonBlocking)) ||
        CU_CHECK(cudaEventCreateWithFlags(&vt->ev_copy, cudaEventDisableTiming)) ||
        CU_CHECK(cudaEventCreateWithFlags(&vt->ev_used, cudaEventDisableTiming)) ||
        CU_CHECK(cudaEventCreateWithFlags(&vt->ev_dma, cudaEventDisableTiming)))
        goto fail;
    for (int i = 0; i < VT_NSTAGE; i++)
        if (CU_CHECK(cudaEventCreateWithFlags(&vt->sev[i], cudaEventDisableTiming))) goto fail;
    for (int i = 0; i < VT_NRING; i++)
        if (CU_CHECK(cudaEventCreateWithFlags(&vt->ring[i], cudaEventDisableTiming))) goto fail;
    /* the probe copies into the arena: no slot is valid yet */
    if (!(vt->link = vram_link_new(vt->cp, o->link_gbs, vt->arena, vt->stage[0],
                                   total < vt->stage_bytes ? total : vt->stage_bytes)))
        goto fail;
    return vt;
fail:
    vram_tier_free(vt);
    return NULL;
}

void vram_tier_free(vram_tier *vt) {
    if (!vt) return;
    if (vt->cp) cudaStreamSynchronize(vt->cp);
    vram_gtab_free(vt->gt);
    for (int i = 0; i < vt->n_span; i++) cudaHostUnregister(vt->span[i].lo);
    if (vt->h_xn) cudaFreeHost(vt->h_xn);
    if (vt->h_eo) cudaFreeHost(vt->h_eo);
    free(vt->xg), free(vt->gb), free(vt->ub), free(vt->actq), free(vt->mats), free(vt->tasks),
        free(vt->cpu_e);
    free(vt->cpu_pair);
    if (vt->arena) cudaFree(vt->arena);
    for (int i = 0; i < VT_NSTAGE; i++) {
        if (vt->stage[i]) cudaFreeHost(vt->stage[i]);
        if (vt->sev[i]) cudaEventDestroy(vt->sev[i]);
    }
    void *hp[] = {vt->h_tiles, vt->h_pin, vt->h_pout, vt->h_ntiles, vt->h_ids, vt->h_pred};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        if (hp[i]) cudaFreeHost(hp[i]);
    void *dp[] = {vt->d_tiles, vt->d_pin, vt->d_pout, vt->d_ntiles, vt->d_pred, vt->d_predw};
    for (size_t i = 0; i < sizeof dp / sizeof dp[0]; i++)
        if (dp[i]) cudaFree(dp[i]);
    for (int i = 0; i < VT_NRING; i++)
        if (vt->ring[i]) cudaEventDestroy(vt->ring[i]);
    vram_link_free(vt->link);
    free(vt->seq_arena);
    if (vt->ev_copy) cudaEventDestroy(vt->ev_copy);
    if (vt->ev_used) cudaEventDestroy(vt->ev_used);
    if (vt->ev_dma) cudaEventDestroy(vt->ev_dma);
    if (vt->cp) cudaStreamDestroy(vt->cp);
    vram_slots_free(vt->slots);
    free(vt->uni), free(vt->cnt), free(vt->first), free(vt->order), free(vt->bslot), free(vt->bmiss);
    free(vt->pf_slot), free(vt->pf_e), free(vt->hg), free(vt->hu), free(vt->hd), free(vt->hs);
    free(vt->keep_l), free(vt->keep_e);
    free(vt);
}

static void pin_drop(vram_tier *vt);

void vram_tier_set_host_src(vram_tier *vt, const q3n_expert_src *src) {
    if (vt->cp) cudaStreamSynchronize(vt->cp); /* no copy from the old source in flight */
    pin_drop(vt);
    if (src) vt->src = *src;
    else memset(&vt->src, 0, sizeof vt->src);
    if (src) vt_pin_resolve(vt); /* NULL: the probe before the real source; resolved at first use */
}

/* Host->device bytes so far: the own path's (demand + prefetch) and the graph steps' fills. */
static uint64_t link_bytes(const vram_tier *vt) {
    vram_stats s;
    vram_slots_get_stats(vt->slots, &s);
    uint64_t b = s.bytes_demand + s.bytes_prefetch;
    if (vt->gt) {
        vram_gtab_stats g;
        vram_gtab_get_stats(vt->gt, &g);
        b += g.fill_bytes;
    }
    return b;
}

bool vram_tier_graph_next(const vram_tier *vt, int T) {
    return vram_graph_take(vt->step_ema * T, vt->graph_limit);
}

void vram_tier_forward_done(vram_tier *vt, bool step, bool in_graph) {
    const uint64_t b = link_bytes(vt), d = b >= vt->last_bytes ? b - vt->last_bytes : 0;
    vt->last_bytes = b;
    if (!step) return;
    vt->step_ema = vram_graph_ema(vt->step_ema, d);
    if (vt->gt && !vt->graph_fixed) { /* only the graph's choice reads the limit */
        vram_link_stats ls;
        vram_link_get_stats(vt->link, &ls);
        if (ls.bytes >= VT_LINK_SEEN && ls.seconds > 0) { /* the rate over the run so far */
            vt->link_seen = (double)ls.bytes / ls.seconds * 1e-9;
            vt->graph_limit = vram_graph_limit(vt->graph_bytes, vt->link_seen);
        }
    }
    if (in_graph) vt->graph_steps++;
    else vt->own_steps++;
    vt->graph_switches += (in_graph != vt->last_graph) && vt->graph_steps + vt->own_steps > 1;
    vt->last_graph = in_graph;
}

vram_gtab *vram_tier_graph(vram_tier *vt) {
    if (vt->gt || vt->graph_tried || !vt->graph_want) return vt->gt;
    if (!vt->pin_resolved) vt_pin_resolve(vt);
    vt->graph_tried = true;
    /* every expert in one page-locked span that is never rewritten: the pinned file mapping. A
     * source without spans serves the mapping's own slices (q3n_expert_src), so its acquire only
     * counts and traces (the expert cache's mmap / full modes): the graph's steps bypass it, as
     * the tier's hits always do; a source with spans (the RAM cache) is volatile. */
    if (vt->n_span != 1 || vt->volatile_src) return NULL;
    void *dev = NULL;
    if (cudaHostGetDevicePointer(&dev, vt->span[0].lo, 0) != cudaSuccess || !dev) {
        (void)cudaGetLastError();
        return NULL;
    }
    const vram_gtab_src gs = {.m = vt->m,
                              .slots = vt->slots,
                              .base = vt->base,
                              .ly = vt->ly,
                              .lo = vt->span[0].lo,
                              .hi = vt->span[0].hi,
                              .dev_lo = (const uint8_t *)dev,
                              .cp = vt->cp,
                              .link_gbs = vt->link_gbs,
                              .link = vt->link_gbs > 0 ? vt->link : NULL};
    if (!(vt->gt = vram_gtab_new(&gs))) rl_clearerr(); /* out of memory for the tables: the own path */
    return vt->gt;
}

int32_t *vram_tier_pred_ids(vram_tier *vt) { return vt->prefetch ? vt->d_pred : NULL; }
float *vram_tier_pred_w(vram_tier *vt) { return vt->prefetch ? vt->d_predw : NULL; }
const vram_plan *vram_tier_plan(const vram_tier *vt) { return &vt->plan; }
void vram_tier_get_stats(const vram_tier *vt, vram_stats *out) { vram_slots_get_stats(vt->slots, out); }

/* Host pointers of experts ids[0..n) of layer il: the host source's (acquire; the caller
 * releases) or the mapped file's slices. */
int vt_host_rows(vram_tier *vt, int il, const int32_t *ids, int n) {
    if (vt->src.acquire) return vt->src.acquire(vt->src.ud, il, ids, n, vt->hg, vt->hu, vt->hd);
    for (int i = 0; i < n; i++)
        q3n_expert_rows(&vt->m->hp, &vt->m->layers[il], ids[i], &vt->hg[i], &vt->hu[i], &vt->hd[i]);
    return 0;
}

/* End the use of the last vt_host_rows. A DMA from the RAM cache's page-locked slots must be done
 * before they may be reused (dma_pending: vt_fill_slots queued one): the host waits for the copy
 * stream here. The mapping is never rewritten, so its copies are not waited for. */
int vt_host_release(vram_tier *vt, int il) {
    int rc = 0;
    if (vt->dma_pending) {
        double t0 = rl_now();
        rc = CU_CHECK(cudaEventRecord(vt->ev_dma, vt->cp)) || CU_CHECK(cudaEventSynchronize(vt->ev_dma)) ? -1
                                                                                                         : 0;
        vt->wait_s += rl_now() - t0;
        vt->dma_pending = false;
    }
    for (int i = 0; i < vt->n_keep; i++) /* the write-backs are in (or failed) */
        vt->src.kept(vt->src.ud, vt->keep_l[i], vt->keep_e[i], rc == 0 && !vt->keep_err);
    vt->kept += rc == 0 && !vt->keep_err ? (uint64_t)vt->n_keep : 0;
    vt->n_keep = 0;
    vt->keep_err = false;
    if (vt->src.acquire && vt->src.release) vt->src.release(vt->src.ud, il);
    return rc;
}

/* Experts ids[0..n) of layer il are now in VRAM slots (their copies queued, the source released):
 * the host source may evict them first (q3n_expert_src.demote: RAM and VRAM then hold different
 * experts, as llama.cpp's split of layers between host and device does). */
static void host_moved(vram_tier *vt, int il, const int32_t *ids, int n) {
    if (n > 0 && vt->src.demote) vt->src.demote(vt->src.ud, il, ids, n);
}

/* --vram-pin (vram_plan.h). Registers the host tier's memory so fills from it are DMA: the RAM
 * cache's arenas (the source's span callback), else one span of the file mapping covering every
 * expert tensor (cudaHostRegisterReadOnly: the page cache is never written through it). auto
 * locks the mapping only when that span is at most VRAM_PIN_RAM_SHARE of RAM (it stays resident
 * while locked). A failure leaves the staging ring, with one stderr line saying why. */
static void pin_drop(vram_tier *vt) {
    vram_gtab_free(vt->gt); /* its tables point into the spans */
    vt->gt = NULL;
    vt->graph_tried = false;
    for (int i = 0; i < vt->n_span; i++) cudaHostUnregister(vt->span[i].lo);
    vt->n_span = 0;
    vt->pin_resolved = vt->volatile_src = false;
    vt->pin_bytes = 0;
}

static bool pin_add(vram_tier *vt, void *p, uint64_t n, unsigned flags, const char *what) {
    const uintptr_t pg = 4096, a = (uintptr_t)p & ~(pg - 1), b = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
    if (vt->n_span == VT_MAX_SPANS) return false;
    double t0 = rl_now();
    cudaError_t e = cudaHostRegister((void *)a, b - a, flags);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(vt->pin_msg, sizeof vt->pin_msg,
                 "cannot page-lock %.2f GiB of %s (%s): fills use the staging ring",
                 (double)(b - a) / 1073741824.0, what, cudaGetErrorName(e));
        fprintf(stderr, "redlite: --vram-pin: %s\n", vt->pin_msg);
        return false;
    }
    vt->span[vt->n_span].lo = (uint8_t *)a;
    vt->span[vt->n_span++].hi = (uint8_t *)b;
    vt->pin_s += rl_now() - t0;
    vt->pin_bytes += b - a;
    return true;
}

void vt_pin_resolve(vram_tier *vt) {
    vt->pin_resolved = true;
    if (vt->pin == VRAM_PIN_OFF) {
        snprintf(vt->pin_msg, sizeof vt->pin_msg, "off (--vram-pin off): fills use the staging ring");
        return;
    }
    void *p;
    uint64_t n;
    if (vt->src.span && vt->src.span(vt->src.ud, 0, &p, &n)) { /* the RAM cache's arenas */
        bool ok = true;
        for (int i = 0; ok && vt->src.span(vt->src.ud, i, &p, &n); i++)
            ok = pin_add(vt, p, n, cudaHostRegisterDefault, "the RAM cache");
        if (!ok) {
            pin_drop(vt);
            vt->pin_resolved = true;
            return;
        }
        vt->volatile_src = true;
        snprintf(vt->pin_msg, sizeof vt->pin_msg,
                 "the RAM cache's %.2f GiB page-locked in %.1f s: fills are DMA",
                 vt->pin_bytes / 1073741824.0, vt->pin_s);
        return;
    }
    const uint8_t *lo = NULL, *hi = NULL;
    for (int il = 0; il < vt->m->hp.n_layer; il++) {
        const ops_mat *ms[3] = {&vt->m->layers[il].gate_exps, &vt->m->layers[il].up_exps,
                                &vt->m->layers[il].down_exps};
        for (int k = 0; k < 3; k++) {
            if (!ms[k]->data) continue;
            const uint8_t *a = ms[k]->data, *b = a + ms[k]->row_bytes * (size_t)ms[k]->n_out;
            if (!lo || a < lo) lo = a;
            if (!hi || b > hi) hi = b;
        }
    }
    if (!lo) return;
    const uint64_t span = (uint64_t)(hi - lo);
    const uint64_t ram = rl_total_ram(); /* a control group's limit counts locked pages too */
    if (vt->pin == VRAM_PIN_AUTO && !vram_pin_mapping_ok(span, ram)) {
        snprintf(vt->pin_msg, sizeof vt->pin_msg,
                 "the mapping's experts (%.1f GiB) are more than %.0f %% of RAM (%.1f GiB): not page-locked, "
                 "fills use "
                 "the staging ring (--vram-pin on forces it)",
                 span / 1073741824.0, 100 * VRAM_PIN_RAM_SHARE, ram / 1073741824.0);
        fprintf(stderr, "redlite: --vram-pin auto: %s\n", vt->pin_msg);
        return;
    }
    /* mapped too: the decode graph's tables read experts there (vram_gtab.h) */
    if (pin_add(vt, (void *)lo, span, cudaHostRegisterReadOnly | cudaHostRegisterMapped, "the mapping"))
        snprintf(vt->pin_msg, sizeof vt->pin_msg,
                 "%.2f GiB of the mapping page-locked in %.1f s: fills are DMA", vt->pin_bytes / 1073741824.0,
                 vt->pin_s);
}

static bool in_pin(const vram_tier *vt, const uint8_t *p, uint64_t n) {
    for (int i = 0; i < vt->n_span; i++)
        if (p >= vt->span[i].lo && p + n <= vt->span[i].hi) return true;
    return false;
}

/* The staging memcpy of a group of experts, split over the pool by region (deterministic: each
 * region is one plain memcpy, whichever thread does it). */
typedef struct {
    vram_tier *vt;
    const vram_layout *ly;
    int i0, n;
} stage_job;

static void stage_run(void *ctx, int ith, int nth) {
    const stage_job *j = ctx;
    const vram_layout *ly = j->ly;
    long lo, hi;
    pool_range(3L * j->n, ith, nth, &lo, &hi);
    for (long x = lo; x < hi; x++) {
        const int i = j->i0 + (int)(x / 3), r = (int)(x % 3);
        const uint8_t *src = r == 0 ? j->vt->hg[i] : r == 1 ? j->vt->hu[i] : j->vt->hd[i];
        const uint64_t off = r == 0 ? ly->gate_off : r == 1 ? ly->up_off : ly->down_off;
        if (ly->src_bytes[r]) memcpy(j->vt->hs[i] + off, src, ly->src_bytes[r]);
    }
}

/* An expert's host rows (gate or fused gate_up, up, down) all in page-locked spans. */
static bool rows_pinned(const vram_tier *vt, const vram_layout *ly, const uint8_t *g, const uint8_t *u,
                        const uint8_t *d) {
    return in_pin(vt, g, ly->src_bytes[0]) && (!ly->src_bytes[1] || in_pin(vt, u, ly->src_bytes[1])) &&
           in_pin(vt, d, ly->src_bytes[2]);
}

static bool pinned_src(const vram_tier *vt, const vram_layout *ly, int i) {
    return rows_pinned(vt, ly, vt->hg[i], vt->hu[i], vt->hd[i]);
}

/* The copies of one expert's regions between its host rows g/u/d and the device slot dev (the
 * layout's offsets), on the copy stream: host to device (a fill) or back (a write-back). */
static cudaError_t copy_rows(vram_tier *vt, const vram_layout *ly, uint8_t *dev, const uint8_t *g,
                             const uint8_t *u, const uint8_t *d, bool to_host) {
    const uint8_t *h[3] = {g, u, d};
    const uint64_t off[3] = {ly->gate_off, ly->up_off, ly->down_off};
    for (int r = 0; r < 3; r++) {
        if (!ly->src_bytes[r]) continue; /* fused gate_up: no separate up region */
        const cudaError_t e =
            to_host ? cudaMemcpyAsync((void *)h[r], dev + off[r], ly->src_bytes[r], cudaMemcpyDeviceToHost,
                                      vt->cp)
                    : cudaMemcpyAsync(dev + off[r], h[r], ly->src_bytes[r], cudaMemcpyHostToDevice, vt->cp);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* Copy experts 0..n-1 of the last vt_host_rows (ids e[], for messages) into slots s[] of layer il
 * on the copy stream: by DMA from the page-locked mapping (RL_VRAM_PIN), else through the
 * staging ring, a chunk's group of experts staged in parallel on the pool. *done: experts whose
 * copy was queued. RL_VRAM_FAULT counts demand fills only (a failed prefetch is dropped silently,
 * so it would test nothing). 0 or -1 (rl_lasterr). */
static int fill_queue(vram_tier *vt, int il, const int32_t *s, const int32_t *e, int n, bool demand,
                      int *done) {
    const vram_layout *ly = &vt->ly[il];
    int i = 0;
    *done = 0;
    while (i < n) {
        if (pinned_src(vt, ly, i)) {
            if (demand && vt->fault_at && ++vt->fills == vt->fault_at) goto fault;
            uint8_t *dst = vt->base[il] + (size_t)s[i] * ly->slot_bytes;
            if (vram_link_begin(vt->link)) return -1;
            vram_link_add(vt->link, vram_layout_copy_bytes(ly));
            if (CU_CHECK(copy_rows(vt, ly, dst, vt->hg[i], vt->hu[i], vt->hd[i], false))) return -1;
            vt->dma_pending |= vt->volatile_src;
            *done = ++i;
            continue;
        }
        int j = i;
        size_t pos = vt->spos;
        while (j < n && !pinned_src(vt, ly, j) && pos + ly->slot_bytes <= vt->stage_bytes) {
            vt->hs[j] = vt->stage[vt->scur] + pos;
            pos += ly->slot_bytes; /* slot sizes are multiples of VRAM_ALIGN */
            j++;
        }
        if (vram_link_end(vt->link)) return -1; /* host work next: the copies so far are one segment */
        if (j == i) { /* the chunk is full: the next one, once its earlier copies are done */
            if (CU_CHECK(cudaEventRecord(vt->sev[vt->scur], vt->cp))) return -1;
            vt->scur = (vt->scur + 1) % VT_NSTAGE;
            vt->spos = 0;
            double t0 = rl_now();
            if (CU_CHECK(cudaEventSynchronize(vt->sev[vt->scur]))) return -1;
            vt->wait_s += rl_now() - t0;
            continue;
        }
        for (int k = i; k < j; k++)
            if (demand && vt->fault_at && ++vt->fills == vt->fault_at) {
                i = k;
                goto fault;
            }
        double t0 = rl_now();
        stage_job job = {vt, ly, i, j - i};
        if (vt->pool && (uint64_t)(j - i) * ly->slot_bytes >= ((uint64_t)4 << 20))
            pool_run(vt->pool, stage_run, &job);
        else stage_run(&job, 0, 1);
        vt->stage_s += rl_now() - t0;
        if (vram_link_begin(vt->link)) return -1;
        vram_link_add(vt->link, (uint64_t)(j - i) * ly->slot_bytes);
        for (int k = i; k < j; k++)
            if (CU_CHECK(cudaMemcpyAsync(vt->base[il] + (size_t)s[k] * ly->slot_bytes, vt->hs[k],
                                         ly->slot_bytes, cudaMemcpyHostToDevice, vt->cp)))
                return -1;
        vt->spos = pos;
        *done = i = j;
    }
    return 0;
fault:
    return rl_seterr("copying expert %d/%d to the GPU failed (injected by RL_VRAM_FAULT=%llu)", il, e[i],
                     (unsigned long long)vt->fault_at);
}

/* Victim caching (q3n_expert_src.keep): the experts slots s[0..n) of layer il held before this fill
 * go back to the host tier, a device-to-host copy each on the copy stream, queued before the fills
 * that overwrite them (one stream: in order). Only into page-locked memory (the RAM cache's arenas,
 * its spans): a copy to pageable memory would stall the host. Answered (kept) in vt_host_release
 * after its wait for the copy stream; a failed copy gives the room back. */
static void keep_victims(vram_tier *vt, int il, const int32_t *s, int n) {
    if (!vt->src.keep || !vt->src.kept || !vt->volatile_src) return;
    const vram_layout *ly = &vt->ly[il];
    for (int i = 0; i < n; i++) {
        const int e = vram_slots_evicted(vt->slots, il, s[i]);
        uint8_t *g, *u, *d;
        if (e < 0 || !vt->src.keep(vt->src.ud, il, e, &g, &u, &d)) continue;
        if (!rows_pinned(vt, ly, g, u, d)) {
            vt->src.kept(vt->src.ud, il, e, false);
            continue;
        }
        vt->keep_err |=
            copy_rows(vt, ly, vt->base[il] + (size_t)s[i] * ly->slot_bytes, g, u, d, true) != cudaSuccess;
        vt->keep_l[vt->n_keep] = il;
        vt->keep_e[vt->n_keep++] = e;
        vt->kept_bytes += vram_layout_copy_bytes(ly);
        vt->dma_pending = true;
    }
    if (vt->keep_err) (void)cudaGetLastError();
}

/* fill_queue, its last run of copies closed as a segment (the emulated link's hold behind it). */
int vt_fill_slots(vram_tier *vt, int il, const int32_t *s, const int32_t *e, int n, bool demand, int *done) {
    const int rc = fill_queue(vt, il, s, e, n, demand, done);
    return vram_link_end(vt->link) || rc ? -1 : 0;
}

/* Layer il: the free slots filled with the first non-resident experts (batches of at most the
 * host pointer arrays' size). Returns the experts filled. */
static int warm_layer(vram_tier *vt, int il) {
    const int cap = vram_slots_capacity(vt->slots, il);
    int nfree = 0, got = 0;
    for (int s = 0; s < cap; s++) nfree += vram_slots_key(vt->slots, il, s) < 0;
    for (int e = 0; e < vt->E && nfree > 0;) {
        int n = 0;
        for (; e < vt->E && n < nfree && n < vt->n_batch * vt->K; e++) /* hg/hu/hd hold n_batch x K */
            if (vram_slots_lookup(vt->slots, il, e) < 0) vt->uni[n++] = e;
        if (!n) break;
        vram_slots_begin(vt->slots, il, vt->uni, n, 0);
        const int nm = vram_slots_prepare(vt->slots, il, vt->uni, n, vt->bslot, vt->bmiss);
        if (nm < 0) break; /* (cannot happen: n distinct free-slot misses) */
        int done = 0;
        if (nm == n && vt_host_rows(vt, il, vt->uni, n) == 0) {
            vt_fill_slots(vt, il, vt->bslot, vt->uni, n, false, &done);
            if (vt_host_release(vt, il)) done = 0;
        }
        if (done == n) vram_slots_commit(vt->slots, il);
        else vram_slots_abort(vt->slots, il);
        vram_slots_release(vt->slots, il);
        if (done != n) break;
        got += n;
        nfree -= n;
        vt->warm_bytes += (uint64_t)n * vram_layout_copy_bytes(&vt->ly[il]);
    }
    return got;
}

void vram_tier_warm(vram_tier *vt) {
    if (vt->warmed || vt->open) return;
    vt->warmed = true;
    if (!vt->pin_resolved) vt_pin_resolve(vt);
    if (!vt->warm || vt->n_span != 1 || vt->volatile_src) return; /* only by DMA from the mapping */
    const double t0 = rl_now();
    for (int il = 0; il < vt->m->hp.n_layer; il++)
        if (vt->base[il]) vt->warm_experts += (uint64_t)warm_layer(vt, il);
    if (CU_CHECK(cudaStreamSynchronize(vt->cp))) { /* unknown state: start over with empty slots */
        for (int il = 0; il < vt->m->hp.n_layer; il++)
            for (int s = 0; vt->base[il] && s < vram_slots_capacity(vt->slots, il); s++)
                if (vram_slots_key(vt->slots, il, s) >= 0) vram_slots_drop(vt->slots, il, s);
        vt->warm_experts = vt->warm_bytes = 0;
    }
    rl_clearerr();
    vram_slots_reset_stats(vt->slots); /* the counters describe the forwards */
    vt->warm_s = rl_now() - t0;
}

int vram_tier_layer(vram_tier *vt, int il, const int32_t *d_ids, const int32_t *d_pred, const float *d_xn,
                    int T, int tt, cudaStream_t st) {
    const int K = vt->K, E = vt->E, TK = T * K;
    if (vt->open) return rl_seterr("VRAM tier: layer %d started inside another (internal)", il);
    if (vt->gt && vram_gtab_quiesce(vt->gt)) return -1; /* the graph steps' fills done, tables stale */
    /* streaming: the host source learns the rows (a RAM cache then declines a chunk's own disk reads
     * among the write-backs, expert_cache.h) */
    if (vt->stream && vt->src.hint) vt->src.hint(vt->src.ud, il, NULL, T);
    if (!vt->pin_resolved) vt_pin_resolve(vt);
    if (vt->miss != VRAM_MISS_COPY && vt->n_exact && !vt->calibrated) vt_calibrate(vt);
    const bool hyb = vt->miss != VRAM_MISS_COPY && vt->cpu_exact[il] && T <= VRAM_CPU_MAX_T && d_xn;
    vt->n_cpu = 0;
    if (CU_CHECK(cudaMemcpyAsync(vt->h_ids, d_ids, 4 * (size_t)TK, cudaMemcpyDeviceToHost, st))) return -1;
    if (d_pred && CU_CHECK(cudaMemcpyAsync(vt->h_pred, d_pred, 4 * (size_t)TK, cudaMemcpyDeviceToHost, st)))
        return -1;
    if (hyb && CU_CHECK(cudaMemcpyAsync(vt->h_xn, d_xn, sizeof(float) * (size_t)T * vt->m->hp.n_embd,
                                        cudaMemcpyDeviceToHost, st)))
        return -1;
    double t0 = rl_now();
    if (CU_CHECK(cudaStreamSynchronize(st))) return -1;
    vt->wait_s += rl_now() - t0;
    /* the host source starts reading layer il+1's predicted experts that VRAM lacks now, beside
     * this layer's demand reads, not when prefetch_next asks for them (q3n_expert_src.prefetch) */
    if (d_pred && vt->src.prefetch && il + 1 < vt->m->hp.n_layer) {
        int np = 0;
        for (int p = 0; p < TK; p++) {
            const int e = vt->h_pred[p];
            if (e >= 0 && e < E && vram_slots_lookup(vt->slots, il + 1, e) < 0) vt->pf_e[np++] = e;
        }
        vt->src.prefetch(vt->src.ud, il + 1, vt->pf_e, np);
    }
    /* pairs grouped by expert (pair order inside an expert: ascending, as read) */
    memset(vt->cnt, 0, 4 * (size_t)E);
    for (int p = 0; p < TK; p++) {
        if (vt->h_ids[p] < 0 || vt->h_ids[p] >= E)
            return rl_seterr("VRAM tier: router chose expert %d (internal)", vt->h_ids[p]);
        vt->cnt[vt->h_ids[p]]++;
    }
    int n = 0, o = 0;
    for (int e = 0; e < E; e++) { /* resident experts first, so later batches cannot evict them first */
        vt->first[e] = o;
        o += vt->cnt[e];
        if (vt->cnt[e] && vram_slots_lookup(vt->slots, il, e) >= 0) vt->uni[n++] = e;
    }
    for (int e = 0; e < E; e++)
        if (vt->cnt[e] && vram_slots_lookup(vt->slots, il, e) < 0) vt->uni[n++] = e;
    memset(vt->cnt, 0, 4 * (size_t)E);
    for (int p = 0; p < TK; p++) {
        int e = vt->h_ids[p];
        vt->order[vt->first[e] + vt->cnt[e]++] = p;
    }
    vram_slots_begin(vt->slots, il, vt->uni, n, T);
    if (hyb) {
        int nres = 0;
        while (nres < n && vram_slots_lookup(vt->slots, il, vt->uni[nres]) >= 0) nres++;
        if (nres < n) n = vt_choose_cpu(vt, il, nres, n);
    }
    const int cap = vram_slots_capacity(vt->slots, il);
    if (cap <= 0) return rl_seterr("VRAM tier: layer %d has no slots (internal)", il);
    vt->il = il;
    vt->T = T;
    vt->tt = tt == 1 ? 1 : CU_TT;
    vt->n_union = n;
    vt->bcap = vt->overlap && n > cap && cap >= 2 ? cap / 2 : cap;
    if (vt->stream && T >= SLOT_SCAN_ROWS) { /* batches within the streaming pool (half: the overlap) */
        const int sb = vt->overlap ? vt->stream / 2 : vt->stream;
        vt->bcap = sb < 1 ? 1 : sb < vt->bcap ? sb : vt->bcap;
    }
    vt->n_batches = (n + vt->bcap - 1) / vt->bcap; /* 0: every expert on the CPU */
    vt->cur_b = -1;
    vt->tile_off = vt->pair_off = 0;
    vt->pf_pending = d_pred && il + 1 < vt->m->hp.n_layer;
    vt->n_pred = vt->pf_pending ? TK : 0;
    return vt->n_batches;
}

/* Make the copy stream wait until no queued launch reads slots[0..n) of layer il any more. */
static int wait_slots(vram_tier *vt, int il, const int32_t *slots, const int32_t *idx, int n) {
    if (!vt->overlap) return vt->used_recorded ? CU_CHECK(cudaStreamWaitEvent(vt->cp, vt->ev_used, 0)) : 0;
    int64_t need = -1;
    for (int j = 0; j < n; j++) {
        int64_t q = vt->slot_seq[il][slots[idx ? idx[j] : j]];
        need = q > need ? q : need;
    }
    return need < 0 ? 0 : CU_CHECK(cudaStreamWaitEvent(vt->cp, vt->ring[need % VT_NRING], 0));
}

/* Queue the copies of layer il+1's predicted experts (best effort: a failure drops them). */
static void prefetch_next(vram_tier *vt) {
    const int l = vt->il + 1;
    int k = vram_slots_prefetch(vt->slots, l, vt->h_pred, vt->n_pred, vt->pf_slot, vt->pf_e);
    if (k <= 0) return;
    int done = 0;
    if (wait_slots(vt, l, vt->pf_slot, NULL, k) == 0 && vt_host_rows(vt, l, vt->pf_e, k) == 0) {
        keep_victims(vt, l, vt->pf_slot, k);
        vt_fill_slots(vt, l, vt->pf_slot, vt->pf_e, k, false, &done);
        if (vt_host_release(vt, l)) done = 0; /* the copies' state is unknown: none counts */
        host_moved(vt, l, vt->pf_e, done);
    }
    for (int i = done; i < k; i++) vram_slots_drop(vt->slots, l, vt->pf_slot[i]);
    rl_clearerr();
}

int vram_tier_batch(vram_tier *vt, int b, cudaStream_t st, vram_batch *out) {
    const int il = vt->il, cap = vt->bcap;
    const int i0 = b * cap, nb = vt->n_union - i0 < cap ? vt->n_union - i0 : cap;
    if (b < 0 || b >= vt->n_batches || vt->open)
        return rl_seterr("VRAM tier: batch %d out of order (internal)", b);
    const int32_t *ids = vt->uni + i0;
    int nm = vram_slots_prepare(vt->slots, il, ids, nb, vt->bslot, vt->bmiss);
    if (nm < 0) return -1;
    vt->open = true;
    vt->cur_b = b;
    if (nm && wait_slots(vt, il, vt->bslot, vt->bmiss, nm)) goto fail;
    if (nm) {
        int32_t *mids = vt->pf_e, *ms = vt->pf_slot; /* scratch: the misses (no prefetch list in use) */
        for (int j = 0; j < nm; j++) {
            mids[j] = ids[vt->bmiss[j]];
            ms[j] = vt->bslot[vt->bmiss[j]];
        }
        if (vt_host_rows(vt, il, mids, nm)) goto fail;
        keep_victims(vt, il, ms, nm);
        int done, rc = vt_fill_slots(vt, il, ms, mids, nm, true, &done);
        if (vt_host_release(vt, il)) rc = -1;
        if (rc) goto fail;
        host_moved(vt, il, mids, nm);
        vt->fills_demand += (uint64_t)nm;
    }
    if (CU_CHECK(cudaEventRecord(vt->sev[vt->scur], vt->cp)) ||
        CU_CHECK(cudaEventRecord(vt->ev_copy, vt->cp)) || CU_CHECK(cudaStreamWaitEvent(st, vt->ev_copy, 0)))
        goto fail;
    vram_slots_commit(vt->slots, il);
    if (b == 0 && vt->pf_pending) {
        vt->pf_pending = false;
        prefetch_next(vt);
    }
    /* the batch's tile plan: per expert its pairs in tiles of tt (decode: one pair per tile) */
    const int K = vt->K, tt = vt->tt;
    cu_tile *tl = vt->h_tiles + vt->tile_off;
    int32_t *pin = vt->h_pin + vt->pair_off, *pout = vt->h_pout + vt->pair_off;
    int nt = 0, np = 0;
    for (int i = 0; i < nb; i++) {
        const int e = ids[i], c = vt->cnt[e];
        for (int j = 0; j < c; j += tt) {
            tl[nt++] = (cu_tile){vt->bslot[i], np + j, c - j < tt ? c - j : tt, 0};
        }
        for (int j = 0; j < c; j++) {
            const int p = vt->order[vt->first[e] + j];
            pin[np + j] = p / K;
            pout[np + j] = p;
        }
        np += c;
    }
    vt->h_ntiles[b] = nt;
    if (vt->tile_off + nt > vt->max_tiles || vt->pair_off + np > vt->n_batch * K) {
        rl_seterr("VRAM tier: plan overflow (internal)");
        goto fail;
    }
    if (CU_CHECK(cudaMemcpyAsync(vt->d_tiles + vt->tile_off, tl, sizeof(cu_tile) * (size_t)nt,
                                 cudaMemcpyHostToDevice, st)) ||
        CU_CHECK(
            cudaMemcpyAsync(vt->d_pin + vt->pair_off, pin, 4 * (size_t)np, cudaMemcpyHostToDevice, st)) ||
        CU_CHECK(
            cudaMemcpyAsync(vt->d_pout + vt->pair_off, pout, 4 * (size_t)np, cudaMemcpyHostToDevice, st)) ||
        CU_CHECK(cudaMemcpyAsync(vt->d_ntiles + b, vt->h_ntiles + b, 4, cudaMemcpyHostToDevice, st)))
        goto fail_committed;
    const vram_layout *ly = &vt->ly[il];
    out->gate = vt->base[il] + ly->gate_off;
    out->up = vt->base[il] + ly->up_off;
    out->down = vt->base[il] + ly->down_off;
    out->stride = ly->slot_bytes;
    out->g = (cu_group){.tiles = vt->d_tiles + vt->tile_off,
                        .n_tiles = vt->d_ntiles + b,
                        .max_tiles = nt,
                        .tt = tt,
                        .pair_in = vt->d_pin + vt->pair_off,
                        .pair_out = vt->d_pout + vt->pair_off};
    vt->tile_off += nt;
    vt->pair_off += np;
    return 0;
fail:
    vram_slots_abort(vt->slots, il);
    vt->open = false;
    return -1;
fail_committed: /* the slots are filled (or being filled): they stay valid, only unpinned */
    vram_slots_release(vt->slots, il);
    vt->open = false;
    return -1;
}

int vram_tier_batch_end(vram_tier *vt, cudaStream_t st) {
    if (!vt->open) return 0;
    const int cap = vt->bcap, i0 = vt->cur_b * cap, nb = vt->n_union - i0 < cap ? vt->n_union - i0 : cap;
    const int64_t q = vt->seq++;
    for (int i = 0; i < nb; i++) vt->slot_seq[vt->il][vt->bslot[i]] = q;
    vram_slots_release(vt->slots, vt->il);
    vt->open = false;
    if (CU_CHECK(cudaEventRecord(vt->ring[q % VT_NRING], st)) || CU_CHECK(cudaEventRecord(vt->ev_used, st)))
        return -1;
    vt->used_recorded = true;
    return 0;
}

int vram_tier_cpu(vram_tier *vt, float *d_eo, cudaStream_t st) {
    if (vt->pf_pending) { /* every expert on the CPU: no batch 0 queued the prefetch */
        vt->pf_pending = false;
        prefetch_next(vt);
    }
    if (!vt->n_cpu) return 0;
    const int il = vt->il, D = vt->m->hp.n_embd, K = vt->K;
    int32_t c[VT_CPU_PAIRS] = {0};
    int np = 0;
    double t0 = rl_now();
    for (int j = 0; j < vt->n_cpu; j++) { /* gather: expert j's pairs, in pair order */
        const int e = vt->cpu_e[j];
        c[j] = vt->cnt[e];
        for (int i = 0; i < vt->cnt[e]; i++) {
            const int p = vt->order[vt->first[e] + i];
            vt->cpu_pair[np] = p;
            memcpy(vt->xg + (size_t)np * D, vt->h_xn + (size_t)(p / K) * D, sizeof(float) * D);
            np++;
        }
    }
    if (vt_cpu_compute(vt, il, vt->cpu_e, c, vt->n_cpu)) return -1;
    for (int i = 0; i < np; i++) /* row i -> eo row of pair cpu_pair[i]: the combine weighs it */
        if (CU_CHECK(cudaMemcpyAsync(d_eo + (size_t)vt->cpu_pair[i] * D, vt->h_eo + (size_t)i * D,
                                     sizeof(float) * D, cudaMemcpyHostToDevice, st)))
            return -1;
    const double t = rl_now() - t0, per = (t - vt->cpu_fixed_s) / vt->n_cpu;
    double *est = &vt->cpu_s[vt->kind[il]];
    if (per > 0) *est = (1 - VT_EMA) * *est + VT_EMA * per;
    vt->cpu_experts += (uint64_t)vt->n_cpu;
    vt->cpu_pairs_total += (uint64_t)np;
    vt->cpu_layers++;
    vt->cpu_total_s += t;
    vt->n_cpu = 0;
    return 0;
}

void vram_tier_abort(vram_tier *vt) {
    if (!vt->open) return;
    vram_slots_release(vt->slots, vt->il); /* filled slots stay valid: their copies were queued */
    vt->open = false;
}

void vram_tier_link_stats(vram_tier *vt, vram_link_stats *out) { vram_link_get_stats(vt->link, out); }

void vram_tier_print(vram_tier *vt, FILE *f) {
    fprintf(f, "vram tier: %s\n", vt->plan.reason);
    fprintf(f, "vram tier: host tier --vram-pin %s: %s\n", vram_pin_name(vt->pin),
            vt->pin_msg[0] ? vt->pin_msg : "not resolved yet (first forward)");
    if (vt->warm_experts)
        fprintf(f,
                "vram tier: warm-up: %llu experts (%.2f GiB) copied into free slots in %.2f s before the "
                "first forward\n",
                (unsigned long long)vt->warm_experts, vt->warm_bytes / 1073741824.0, vt->warm_s);
    if (vt->gt) {
        char why[120];
        if (vt->graph_fixed) snprintf(why, sizeof why, "RL_VRAM_GRAPH_MIB");
        else
            snprintf(why, sizeof why, "%.0f MiB at %.0f GB/s, scaled to the copies' %.1f GB/s",
                     vt->graph_bytes / 1048576.0, VRAM_GRAPH_REF_GBS, vt->link_seen);
        fprintf(f,
                "vram tier: decode steps: %llu in the graph, %llu on the own path (%llu switches; the graph "
                "while <= %.1f MiB per token cross the link (%s), now %.1f)\n",
                (unsigned long long)vt->graph_steps, (unsigned long long)vt->own_steps,
                (unsigned long long)vt->graph_switches, vt->graph_limit / 1048576.0, why,
                vt->step_ema / 1048576.0);
    }
    if (vt->gt) {
        vram_gtab_stats g;
        vram_gtab_get_stats(vt->gt, &g);
        const double n = g.steps ? (double)g.steps : 1.0;
        fprintf(f,
                "vram tier: in the decode graph: %llu steps (%llu verifies), experts read over the link "
                "%.2f/step, fills %.2f/step (%.2f MiB/step), tables %.1f KiB/step; between steps the host "
                "waited %.3f ms/step for the forward and worked %.3f ms/step\n",
                (unsigned long long)g.steps, (unsigned long long)g.verifies, (double)g.host_reads / n,
                (double)g.fills / n, (double)g.fill_bytes / n / 1048576.0, (double)g.table_bytes / n / 1024.0,
                g.wait_s * 1e3 / n, g.host_s * 1e3 / n);
        uint64_t held = 0;
        double target_s = 0, held_s = 0;
        if (vt->link_gbs > 0 && vram_gtab_get_held(vt->gt, &held, &target_s, &held_s) == 0)
            fprintf(
                f,
                "vram tier: emulated link, graph forwards: reads over the link held %.4f ms/step for "
                "%.4f ms/step of bytes at %g GB/s (%.2f experts/step; after the reads; the fills are held "
                "as the copies below)\n",
                held_s * 1e3 / n, target_s * 1e3 / n, vt->link_gbs, (double)held / n);
    } else if (vt->graph_tried || !vt->graph_want) {
        fprintf(f, "vram tier: decode steps outside the graph (%s)\n",
                !vt->graph_want ? "RL_VRAM_GRAPH=0, --vram-miss cpu or an injected fault"
                                : "the host tier is not one page-locked mapping");
    }
    if (vt->miss != VRAM_MISS_COPY) {
        fprintf(f,
                "vram tier: --vram-miss %s (forwards of <= %d rows; the CPU computes the experts of %d of %d "
                "layers, with the GPU's bits; the other layers copy): fill %.3f ms per MiB (%.1f GB/s incl. "
                "staging)",
                vram_miss_name(vt->miss), VRAM_CPU_MAX_T, vt->n_exact, vt->m->hp.n_layer,
                vt->copy_s_per_byte * 1048576.0 * 1e3,
                vt->copy_s_per_byte > 0 ? 1e-9 / vt->copy_s_per_byte : 0.0);
        for (int k = 0; k < vt->n_kind; k++)
            fprintf(f, "; CPU expert %s/%s %.3f ms", quant_name(vt->kind_gate[k]),
                    quant_name(vt->kind_down[k]), vt->cpu_s[k] * 1e3);
        fprintf(f, " + %.3f ms per layer\n", vt->cpu_fixed_s * 1e3);
    }
    vram_stats s;
    vram_slots_get_stats(vt->slots, &s);
    if (!s.tokens) return;
    vram_stats_print(&s, f);
    const double tok = (double)s.tokens;
    fprintf(
        f,
        "vram tier: demand fills %.2f/token, CPU-computed experts %.2f/token (%llu in %llu layers, %.3f s)\n",
        (double)vt->fills_demand / tok, (double)vt->cpu_experts / tok, (unsigned long long)vt->cpu_experts,
        (unsigned long long)vt->cpu_layers, vt->cpu_total_s);
    fprintf(
        f,
        "vram tier: host waits %.3f s (router sync + staging ring + RAM-cache DMA), staging memcpy %.3f s\n",
        vt->wait_s, vt->stage_s);
    if (vt->kept)
        fprintf(f,
                "vram tier: victim cache: %.2f evictions/token copied back to the RAM cache (%.1f MiB/token "
                "device->host)\n",
                (double)vt->kept / tok, (double)vt->kept_bytes / 1048576.0 / tok);
    vram_link_stats l;
    vram_tier_link_stats(vt, &l);
    fprintf(
        f, "vram tier: host->device copies %.2f GB/s measured (%.1f MiB in %.3f s of copy stream, %llu runs)",
        l.seconds > 0 ? (double)l.bytes / l.seconds / 1e9 : 0.0, (double)l.bytes / 1048576.0, l.seconds,
        (unsigned long long)l.segments);
    if (l.cap_gbs > 0)
        fprintf(f, "; emulated link RL_VRAM_LINK_GBS=%g (this GPU's real copies %.1f GB/s%s)", l.cap_gbs,
                l.raw_gbs, l.raw_gbs <= l.cap_gbs ? ": at or below the cap, nothing held" : "");
    fputc('\n', f);
}
#else
typedef int vram_tier_unused; /* ISO C wants a declaration in every translation unit */
#endif
