/* expert_cache.c — slots, size classes, the two-phase acquire, pre-gated prefetch and the
 * q3n_expert_src callbacks (design: docs/EXPERT_CACHE.md). Which slot a (layer, expert) takes,
 * the LRU order, pins and the prefetch protection are the shared slot policy's (slot_policy.h:
 * one pool per size class, key = layer * E + expert); this file holds the bytes and load states.
 *
 * Invariants (checked by expert_cache_check):
 *   - the policy's own (index, free stacks, LRU lists, pins: slot_policy_check);
 *   - a slot holds a key in the policy  <=>  it is LOADING, VALID or FAILED (else FREE); the
 *     LRU list holds VALID entries, prefetches still LOADING and FAILED prefetches;
 *   - a slot being filled by an I/O thread is LOADING and never reassigned until it is not;
 *   - only the inference thread calls the policy (under mu), so every decision is a
 *     deterministic function of the call sequence; I/O threads only move LOADING -> VALID/FAILED.
 */
#include "cache/expert_cache.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/common.h"
#include "cache/expert_cache_int.h"
#include "gguf/quant.h"
#include "model/experts.h"

const char *ec_mode_name(ec_mode m) { return m == EC_BOUNDED ? "bounded" : m == EC_FULL ? "full" : "mmap"; }

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
static int cache_layers(const q3n_model *m) { return m->hp.n_layer + m->hp.n_nextn; }
/* Prefetch margin each class needs beyond one whole layer. */
static int class_margin(const q3n_model *m) {
    int a = m->hp.n_expert / 8, b = m->hp.n_expert_used;
    return a > b ? a : b;
}

/* ---- layer geometry ------------------------------------------------------------------ */

static int layer_geometry(const q3n_model *m, int il, bool direct, ec_layer *out) {
    const q3n_layer *L = &m->layers[il];
    const ops_mat *mats[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    int nr = L->fused_gate_up ? 2 : 3;
    if (L->fused_gate_up) mats[1] = &L->down_exps;
    memset(out, 0, sizeof *out);
    out->n_ranges = nr;
    uint64_t dst = 0;
    for (int i = 0; i < nr; i++) {
        const gguf_tensor *t = m->gguf ? gguf_find_tensor(m->gguf, mats[i]->name ? mats[i]->name : "") : NULL;
        if (!t || !mats[i]->data)
            return rl_seterr("layer %d: expert tensor not found for the expert cache", il);
        uint64_t stride = t->nbytes / (uint64_t)m->hp.n_expert;
        if (stride * (uint64_t)m->hp.n_expert != t->nbytes || stride % mats[i]->row_bytes)
            return rl_seterr("%s: %s is not %d equal expert slices", m->gguf->path, t->name, m->hp.n_expert);
        out->r[i] = (ec_range){t->part, t->file_off, stride, (uint32_t)dst};
        dst += direct ? align_up(stride, EC_ALIGN) + EC_ALIGN : align_up(stride, 64);
    }
    /* the file's slices must be the slabs q3n_expert_slice_of describes (each tensor's own row bytes;
     * a tensor repacked at load, expert_repack.h, has another type and is served from memory) */
    const q3n_expert_slice sl = q3n_expert_slice_of(&m->hp, L, 0);
    const uint64_t want[3] = {sl.gate_stride, nr == 2 ? sl.down_stride : sl.up_stride, sl.down_stride};
    for (int i = 0; i < nr; i++)
        if (gguf_find_tensor(m->gguf, mats[i]->name)->type == mats[i]->type && out->r[i].stride != want[i])
            return rl_seterr("%s: %s holds %llu bytes per expert, its shape says %llu", m->gguf->path,
                             mats[i]->name, (unsigned long long)out->r[i].stride,
                             (unsigned long long)want[i]);
    out->up_off = sl.fused ? sl.up_off - sl.gate_off : 0;
    out->slot_bytes = align_up(dst, EC_ALIGN);
    if (out->slot_bytes > UINT32_MAX) return rl_seterr("layer %d: expert slices too large for a slot", il);
    return 0;
}

uint64_t expert_cache_slot_bytes(const q3n_model *m, int il, bool direct_io) {
    ec_layer ly;
    return layer_geometry(m, il, direct_io, &ly) ? 0 : ly.slot_bytes;
}

static uint64_t max_slot(const q3n_model *m, bool direct) {
    uint64_t mx = 0;
    for (int il = 0; il < cache_layers(m); il++) {
        uint64_t b = expert_cache_slot_bytes(m, il, direct);
        if (b > mx) mx = b;
    }
    return mx;
}

uint64_t expert_cache_min_budget(const q3n_model *m, bool direct_io) {
    return (uint64_t)(m->hp.n_expert + class_margin(m)) * max_slot(m, direct_io);
}

uint64_t expert_cache_full_bytes(const q3n_model *m, bool direct_io) {
    uint64_t s = 0;
    for (int il = 0; il < cache_layers(m); il++) s += expert_cache_slot_bytes(m, il, direct_io);
    return s * (uint64_t)m->hp.n_expert;
}

/* Classes: one per distinct slot size, the same slot count per layer (budget / sum of the
 * layers' slot sizes, at most n_expert), used when every class then holds a whole layer plus
 * the prefetch margin (or all of its layers' experts); otherwise one uniform class of the
 * largest size. */
static int setup_classes(expert_cache *ec) {
    const q3n_model *m = ec->m;
    int nl = ec->n_layer, E = ec->E, need = E + class_margin(m);
    uint64_t sizes[Q3N_MAX_LAYERS], sum = 0, mx = 0;
    int n_distinct = 0;
    for (int il = 0; il < nl; il++) {
        uint64_t b = ec->layers[il].slot_bytes;
        sum += b;
        if (b > mx) mx = b;
        bool seen = false;
        for (int c = 0; c < n_distinct; c++) seen |= sizes[c] == b;
        if (!seen) sizes[n_distinct++] = b;
    }
    if (!sum) return rl_seterr("expert cache: the model has no routed expert bytes to cache");
    uint64_t per_layer = ec->p.budget / sum;
    if (per_layer > (uint64_t)E) per_layer = (uint64_t)E;
    bool use_classes = !ec->p.uniform && n_distinct > 1;
    for (int c = 0; c < n_distinct && use_classes; c++) {
        int nlc = 0;
        for (int il = 0; il < nl; il++) nlc += ec->layers[il].slot_bytes == sizes[c];
        uint64_t need_c = (uint64_t)E * nlc < (uint64_t)need ? (uint64_t)E * nlc : (uint64_t)need;
        if (per_layer * (uint64_t)nlc < need_c) use_classes = false;
    }
    ec->n_cls = use_classes ? n_distinct : 1;
    ec->cls = rl_calloc((size_t)ec->n_cls, sizeof(ec_class), "expert cache classes");
    if (!ec->cls) return -1;
    uint64_t total = 0;
    for (int c = 0; c < ec->n_cls; c++) {
        ec_class *C = &ec->cls[c];
        C->slot_bytes = use_classes ? sizes[c] : mx;
        for (int il = 0; il < nl; il++)
            if (!use_classes || ec->layers[il].slot_bytes == sizes[c]) {
                ec->layers[il].cls = c;
                C->n_layers++;
            }
        uint64_t n = use_classes ? per_layer * (uint64_t)C->n_layers : ec->p.budget / mx;
        uint64_t cap = (uint64_t)E * (uint64_t)C->n_layers;
        if (n > cap) n = cap;
        if (n < (uint64_t)need && n < cap)
            return rl_seterr(
                "expert cache budget %.1f MiB is below the minimum %.1f MiB (%d slots of %.0f KiB: one "
                "layer's %d experts plus a prefetch margin); raise --cache-mib",
                ec->p.budget / 1048576.0, expert_cache_min_budget(m, ec->direct) / 1048576.0, need,
                mx / 1024.0, E);
        C->first = (int)total;
        C->n = (int)n;
        total += n;
    }
    if (total > (1u << 30)) return rl_seterr("expert cache: too many slots");
    ec->n_slots = (int)total;
    return 0;
}

static int alloc_slots(expert_cache *ec) {
    ec->slots = rl_calloc((size_t)ec->n_slots, sizeof(ec_slot), "expert cache slots");
    ec->arenas = rl_calloc((size_t)ec->n_cls, sizeof(uint8_t *), "expert cache arenas");
    ec->arena_len = rl_calloc((size_t)ec->n_cls, sizeof(uint64_t), "expert cache arenas");
    if (!ec->slots || !ec->arenas || !ec->arena_len) return -1;
    for (int c = 0; c < ec->n_cls; c++) {
        ec_class *C = &ec->cls[c];
        uint64_t len = C->slot_bytes * (uint64_t)C->n;
        if (len == 0) continue;
        /* anonymous memory is committed page by page as slots fill, so RSS follows use */
        void *a = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a == MAP_FAILED)
            return rl_seterr("expert cache: cannot reserve %.1f MiB of slots: %s (lower --cache-mib)",
                             len / 1048576.0, strerror(errno));
        ec->arenas[c] = a;
        ec->arena_len[c] = len;
        ec->n_arenas = c + 1;
        for (int i = 0; i < C->n; i++)
            ec->slots[C->first + i].mem = (uint8_t *)a + (uint64_t)i * C->slot_bytes;
    }
    /* the policy: one pool per class, numbered as the classes' slots are */
    int nk = ec->n_layer * ec->E;
    int *kp = rl_malloc(sizeof(int) * (size_t)(nk + ec->n_cls), "expert cache keys");
    if (!kp) return -1;
    int *nc = kp + nk; /* slots per class */
    for (int k = 0; k < nk; k++) kp[k] = ec->layers[ec_layer_of(ec, k)].cls;
    for (int c = 0; c < ec->n_cls; c++) nc[c] = ec->cls[c].n;
    ec->sp = slot_policy_new(ec->n_cls, nc, nk, kp);
    free(kp);
    return ec->sp ? 0 : -1;
}

/* ---- slots ---------------------------------------------------------------------------- */

static void wait_loaded(expert_cache *ec, int32_t s) {
    while (ec->slots[s].state == EC_S_LOADING) pthread_cond_wait(&ec->cv_done, &ec->mu);
}

/* What a slot is taken for: a demand load, a prefetch, or a faster tier's write-back (keep). */
typedef enum { TAKE_DEMAND, TAKE_PREFETCH, TAKE_KEPT } take_kind;

/* The policy's slot for key in class c (demand and kept: pinned; prefetch: at the MRU end, never a
 * protected entry), to be loaded: its state becomes LOADING. A resident victim is waited for (its
 * bytes may still be arriving); one whose load failed leaves by slot_policy_drop, not counted as
 * an eviction. -1 if the policy has no slot. */
static int32_t take_slot(expert_cache *ec, int c, int32_t key, take_kind kind) {
    int32_t s = slot_policy_victim(ec->sp, c, kind == TAKE_PREFETCH);
    if (s < 0) return -1;
    if (slot_policy_key(ec->sp, s) >= 0) {
        wait_loaded(ec, s);
        if (ec->slots[s].state == EC_S_FAILED) slot_policy_drop(ec->sp, s);
    }
    if (kind == TAKE_KEPT) slot_policy_fill_kept(ec->sp, s, key);
    else slot_policy_fill(ec->sp, s, key, kind == TAKE_PREFETCH);
    ec->slots[s].state = EC_S_LOADING;
    if (kind != TAKE_KEPT) ec->read_fwd[key] = ec->fwd;
    return s;
}

/* A slot whose earlier (prefetch) load failed loads its key again, in the same slot. */
static void reload(expert_cache *ec, int32_t s, bool prefetch) {
    int32_t key = slot_policy_key(ec->sp, s);
    slot_policy_drop(ec->sp, s); /* on top of the free stack: the fill below takes it back */
    slot_policy_fill(ec->sp, s, key, prefetch);
    ec->slots[s].state = EC_S_LOADING;
    ec->read_fwd[key] = ec->fwd;
}

/* ---- q3n_expert_src callbacks ---------------------------------------------------------- */

static void slot_ptrs(const expert_cache *ec, const ec_layer *ly, const uint8_t *mem, int e,
                      const uint8_t **g, const uint8_t **u, const uint8_t **d) {
    *g = mem + ly->r[0].dst + ec_pad(ec, &ly->r[0], e);
    if (ly->n_ranges == 2) {
        *u = *g + ly->up_off;
        *d = mem + ly->r[1].dst + ec_pad(ec, &ly->r[1], e);
    } else {
        *u = mem + ly->r[1].dst + ec_pad(ec, &ly->r[1], e);
        *d = mem + ly->r[2].dst + ec_pad(ec, &ly->r[2], e);
    }
}

/* Full and mapped modes: expert e's slices where the model's views are (the file mapping, or the
 * copies in memory of resident.h: the same bytes). */
static void mapped_ptrs(const expert_cache *ec, int il, int e, const uint8_t **g, const uint8_t **u,
                        const uint8_t **d) {
    q3n_expert_rows(&ec->m->hp, &ec->m->layers[il], e, g, u, d);
}

static void trace_and_count(expert_cache *ec, int il, const int32_t *ids, int n) {
    ec->st.acquires++;
    ec->st.lookups += (uint64_t)n;
    if (ec->has_pred && ec->has_pred[il]) {
        ec->st.pf_used_total += (uint64_t)n;
        for (int i = 0; i < n; i++) ec->st.pf_predicted_used += ec->pred[(size_t)il * ec->E + ids[i]];
        memset(ec->pred + (size_t)il * ec->E, 0, (size_t)ec->E);
        ec->has_pred[il] = 0;
    }
    if (ec->trace) {
        fprintf(ec->trace, "{\"f\":%llu,\"l\":%d,\"n\":%d,\"ids\":[", (unsigned long long)ec->fwd, il,
                ec->rows);
        for (int i = 0; i < n; i++) fprintf(ec->trace, "%s%d", i ? "," : "", ids[i]);
        fputs("]}\n", ec->trace);
    }
}

/* Roll back an acquire: pinned hits go back to the LRU, slots whose load failed (or never
 * completed) go back to the free list; nothing half-loaded stays indexed. */
static void abort_acquire(expert_cache *ec, const int32_t *slot_of, int n) {
    for (int i = 0; i < n; i++) {
        int32_t s = slot_of[i];
        if (s < 0) continue;
        wait_loaded(ec, s);
        if (slot_policy_pins(ec->sp, s) > 1 || ec->slots[s].state == EC_S_VALID) {
            slot_policy_unpin(ec->sp, s);
        } else {
            slot_policy_drop(ec->sp, s);
            ec->slots[s].state = EC_S_FREE;
        }
    }
    ec->st.aborts++;
}

static int acquire_bounded(expert_cache *ec, int il, const int32_t *ids, int n, const uint8_t **gate,
                           const uint8_t **up, const uint8_t **down) {
    int32_t slot_of[EC_MAX_SEL];
    uint8_t demand[EC_MAX_SEL];
    const ec_layer *ly = &ec->layers[il];
    int E = ec->E, rc = 0;
    pthread_mutex_lock(&ec->mu);
    RL_ASSERT(ec->n_pinned[il] == 0);
    /* phase 1: reserve the hits first, so no miss below can evict an expert of this selection */
    for (int i = 0; i < n; i++) {
        RL_ASSERT(ids[i] >= 0 && ids[i] < E);
        int32_t s = slot_policy_lookup(ec->sp, il * E + ids[i]);
        slot_of[i] = -1;
        demand[i] = 0;
        if (s < 0 || ec->slots[s].state == EC_S_FAILED) continue;
        slot_policy_hit(ec->sp, s); /* pinned; a prefetch's first use counted */
        slot_of[i] = s;
        if (ec->slots[s].state == EC_S_LOADING) { /* a prefetch on its way: needed now */
            ec->st.hits_inflight++;
            ec_io_promote(ec, s);
        } else {
            ec->st.hits++;
        }
    }
    /* phase 2: victims for the misses, loaded in parallel by the I/O threads */
    for (int i = 0; i < n; i++) {
        if (slot_of[i] >= 0) continue;
        int32_t key = il * E + ids[i], s = slot_policy_lookup(ec->sp, key);
        if (s >= 0 && ec->slots[s].state != EC_S_FAILED) { /* a duplicate id: already ours */
            slot_policy_pin(ec->sp, s);
            slot_of[i] = s;
            continue;
        }
        if (s >= 0) reload(ec, s, false); /* FAILED earlier (prefetch): reload in place */
        else s = take_slot(ec, ly->cls, key, TAKE_DEMAND);
        if (s < 0) {
            const ec_class *C = &ec->cls[ly->cls];
            rl_seterr(
                "expert cache too small: layer %d needs %d experts at once but its class has %d slots of "
                "%.0f KiB (raise --cache-mib or lower --batch)",
                il, n, C->n, C->slot_bytes / 1024.0);
            abort_acquire(ec, slot_of, n);
            pthread_mutex_unlock(&ec->mu);
            return -1;
        }
        slot_of[i] = s;
        demand[i] = 1;
        ec->st.misses++;
        ec_io_submit(ec, s, true);
    }
    /* wait; a prefetch that failed gets one demand retry before the error counts */
    double t0 = rl_now();
    for (;;) {
        bool again = false;
        for (int i = 0; i < n; i++) wait_loaded(ec, slot_of[i]);
        for (int i = 0; i < n && rc == 0; i++) {
            ec_slot *sl = &ec->slots[slot_of[i]];
            if (sl->state != EC_S_FAILED) continue;
            if (!demand[i]) {
                demand[i] = 1;
                sl->state = EC_S_LOADING;
                ec->st.misses++;
                ec_io_submit(ec, slot_of[i], true);
                again = true;
            } else {
                rc = ec_io_error(ec, slot_of[i]);
            }
        }
        if (!again || rc) break;
    }
    ec->st.io_wait_s += rl_now() - t0;
    if (rc) {
        abort_acquire(ec, slot_of, n);
        pthread_mutex_unlock(&ec->mu);
        return -1;
    }
    /* commit: every slot of the selection is valid and pinned until release */
    for (int i = 0; i < n; i++) {
        ec->pinned[(size_t)il * E + ec->n_pinned[il]++] = slot_of[i];
        slot_ptrs(ec, ly, ec->slots[slot_of[i]].mem, ids[i], &gate[i], &up[i], &down[i]);
    }
    pthread_mutex_unlock(&ec->mu);
    return 0;
}

static int ec_acquire(void *ud, int il, const int32_t *ids, int n, const uint8_t **gate, const uint8_t **up,
                      const uint8_t **down) {
    expert_cache *ec = ud;
    RL_ASSERT(il >= 0 && il < ec->n_layer && n >= 0 && n <= EC_MAX_SEL);
    trace_and_count(ec, il, ids, n);
    if (ec->mode == EC_BOUNDED) return acquire_bounded(ec, il, ids, n, gate, up, down);
    for (int i = 0; i < n; i++) mapped_ptrs(ec, il, ids[i], &gate[i], &up[i], &down[i]);
    ec->st.hits += (uint64_t)n;
    return 0;
}

/* Release: the selection's entries go to the most recent end; in a scan (a forward of at least
 * SLOT_SCAN_ROWS rows), those this forward loaded (demand or prefetch) then go to the least recent
 * end, where the last one put there leaves first. So a prompt chunk streams its misses through
 * the cache's tail and keeps what was resident before it (the next chunk's hits: for a cycle
 * longer than the cache, evicting the most recent is the optimal choice, plain LRU the worst),
 * while its hits stay recent. Decode and verify rows are plain LRU. Order only: no entry changes
 * bytes, so results do not depend on it. */
/* a scan forward: a prompt chunk of at least SLOT_SCAN_ROWS rows, unless RL_CACHE_SCAN=0 */
static bool in_scan(const expert_cache *ec) { return !ec->p.no_scan && ec->rows >= SLOT_SCAN_ROWS; }

static void ec_release(void *ud, int il) {
    expert_cache *ec = ud;
    if (ec->mode != EC_BOUNDED) return;
    pthread_mutex_lock(&ec->mu);
    int32_t *pin = ec->pinned + (size_t)il * ec->E;
    const bool scan = in_scan(ec);
    for (int i = 0; i < ec->n_pinned[il]; i++) {
        RL_ASSERT(ec->slots[pin[i]].state == EC_S_VALID);
        slot_policy_unpin(ec->sp, pin[i]); /* to the MRU end when its last pin goes */
        if (scan && ec->read_fwd[slot_policy_key(ec->sp, pin[i])] == ec->fwd &&
            !slot_policy_pins(ec->sp, pin[i])) {
            slot_policy_demote(ec->sp, pin[i]); /* a repeated id: at its last pin, once */
            ec->st.scan_demoted++;
        }
    }
    ec->n_pinned[il] = 0;
    pthread_mutex_unlock(&ec->mu);
}

/* Start loading the predicted experts order[0..np) of layer nl (their pred[] flags set by the
 * caller) on the I/O threads, protecting layers il (the current selection, not pinned yet) and nl
 * from the evictions the loads make. Best effort: a prediction without an evictable slot is
 * counted and dropped. */
static void submit_prefetch(expert_cache *ec, int il, int nl, const int32_t *order, int np) {
    const int E = ec->E;
    ec->has_pred[nl] = 1;
    ec->st.pf_predicted += (uint64_t)np;
    pthread_mutex_lock(&ec->mu);
    int c = ec->layers[nl].cls;
    /* protected this step: every entry of layers il (the current selection, not yet pinned) and
     * nl (the predictions themselves) */
    slot_policy_protect_clear(ec->sp);
    slot_policy_protect_range(ec->sp, il * E, E);
    slot_policy_protect_range(ec->sp, nl * E, E);
    for (int i = 0; i < np; i++) {
        int32_t key = nl * E + order[i], s = slot_policy_lookup(ec->sp, key);
        if (s >= 0 && ec->slots[s].state != EC_S_FAILED) continue; /* resident or on its way */
        if (s >= 0) reload(ec, s, true); /* a failed earlier prefetch: retry in the same slot */
        else s = take_slot(ec, c, key, TAKE_PREFETCH);
        if (s < 0) {
            ec->st.pf_no_slot += (uint64_t)(np - i);
            break;
        }
        ec_io_submit(ec, s, false);
    }
    slot_policy_protect_clear(ec->sp);
    pthread_mutex_unlock(&ec->mu);
}

/* Pre-gating: layer il+1's router applied to layer il's MoE input predicts il+1's experts;
 * the misses among them are planned here (deterministically) and loaded by the I/O threads
 * while layer il computes. Never evicts entries of layers il and il+1 (the current
 * selection, not yet pinned, and the predictions themselves). xn NULL (a GPU's VRAM tier streaming
 * its prompt chunks, vram_tier_opts.stream; its input is on the device): only the rows are counted. */
static void ec_hint(void *ud, int il, const float *xn, int T) {
    expert_cache *ec = ud;
    if (il == 0) {
        ec->st.tokens += (uint64_t)T;
        ec->fwd++;
    }
    ec->rows = T;
    int nl = il + 1, E = ec->E;
    if (!xn || ec->mode != EC_BOUNDED || ec->p.no_prefetch || nl >= ec->m->hp.n_layer) return;
    int pk = ec->pk;
    double t0 = rl_now();
    if (T > ec->rbuf_rows) {
        free(ec->rbuf);
        free(ec->topk);
        ec->rbuf = rl_malloc(sizeof(float) * (size_t)T * E, "router scratch");
        ec->topk =
            rl_malloc(sizeof(int32_t) * (size_t)T * pk + sizeof(int32_t) * (size_t)E, "router scratch");
        ec->rbuf_rows = ec->rbuf && ec->topk ? T : 0;
        if (!ec->rbuf_rows) return; /* prefetch is an optimisation: skip it */
    }
    /* the SIMD path where the router type has one: a prediction needs no oracle precision */
    const ops_mat *R = &ec->m->layers[nl].router;
    size_t ab = ops_actq_bytes(R, T);
    if (ab > ec->actq_bytes) {
        free(ec->actq);
        ec->actq = rl_aligned_alloc(ab, "router scratch");
        ec->actq_bytes = ec->actq ? ab : 0;
    }
    if (ab && ec->actq) ops_matmul_fast(ec->pool, R, xn, T, ec->rbuf, ec->actq);
    else ops_matmul_ref(ec->pool, R, xn, T, ec->rbuf);
    /* softmax is monotonic, so the top-k of the logits is the top-k of the probabilities */
    uint8_t *pred = ec->pred + (size_t)nl * E;
    int32_t *order = ec->topk + (size_t)T * pk;
    int np = 0;
    for (int t = 0; t < T; t++) ops_topk(ec->rbuf + (size_t)t * E, E, pk, ec->topk + (size_t)t * pk);
    for (int k = 0; k < pk; k++) /* rank-major order: every row's best guess first */
        for (int t = 0; t < T; t++) {
            int32_t e = ec->topk[(size_t)t * pk + k];
            if (!pred[e]) {
                pred[e] = 1;
                order[np++] = e;
            }
        }
    submit_prefetch(ec, il, nl, order, np);
    ec->st.hint_s += rl_now() - t0;
}

/* Cache-aware routing (changes outputs): rank by log p + bias for resident experts. */
static void ec_bias(void *ud, int il, float *scores, int n) {
    expert_cache *ec = ud;
    pthread_mutex_lock(&ec->mu);
    for (int e = 0; e < n; e++) {
        int32_t s = slot_policy_lookup(ec->sp, il * ec->E + e);
        bool res = s >= 0 && ec->slots[s].state != EC_S_FAILED;
        scores[e] = logf(scores[e]) + (res ? ec->p.route_bias : 0.0f);
    }
    ec->st.bias_calls++;
    pthread_mutex_unlock(&ec->mu);
}

/* A faster tier's predictions (a GPU tier's pre-gated router on the device): experts ids[0..n) of
 * layer il will likely be needed soon, so their reads start now, beside this layer's demand reads,
 * instead of when the tier asks for them (q3n_expert_src.prefetch). */
static void ec_prefetch(void *ud, int il, const int32_t *ids, int n) {
    expert_cache *ec = ud;
    if (ec->mode != EC_BOUNDED || ec->p.no_prefetch || il < 0 || il >= ec->m->hp.n_layer || n <= 0) return;
    const double t0 = rl_now();
    const int E = ec->E;
    uint8_t *pred = ec->pred + (size_t)il * E;
    int32_t *order = ec->pf_ids, np = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < E && !pred[ids[i]]) pred[ids[i]] = 1, order[np++] = ids[i];
    if (np) submit_prefetch(ec, il > 0 ? il - 1 : 0, il, order, np);
    ec->st.hint_s += rl_now() - t0;
}

/* A faster tier took these experts: their unpinned, loaded entries become the next victims. */
static void ec_demote(void *ud, int il, const int32_t *ids, int n) {
    expert_cache *ec = ud;
    if (ec->mode != EC_BOUNDED) return;
    pthread_mutex_lock(&ec->mu);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= ec->E) continue;
        const int32_t s = slot_policy_lookup(ec->sp, il * ec->E + ids[i]);
        if (s < 0 || ec->slots[s].state != EC_S_VALID || slot_policy_pins(ec->sp, s)) continue;
        slot_policy_demote(ec->sp, s);
        ec->st.demoted++;
    }
    pthread_mutex_unlock(&ec->mu);
}

/* Victim caching (q3n_expert_src.keep): a VRAM tier evicts expert e of layer il and offers its
 * bytes back. A key already here is only moved to the recent end; else the least recently used
 * unpinned slot takes it, pinned and loading until kept (no I/O thread ever sees it: it is not
 * queued), and the tier's device-to-host copy fills it. So the two tiers together hold the hottest
 * experts of both, not the same ones twice (tools/tier_sim.py: 96 % of VRAM misses served from RAM
 * where plain LRU serves 73 %). */
static int ec_keep(void *ud, int il, int e, uint8_t **g, uint8_t **u, uint8_t **d) {
    expert_cache *ec = ud;
    if (ec->mode != EC_BOUNDED || il < 0 || il >= ec->n_layer || e < 0 || e >= ec->E) return 0;
    const int32_t key = il * ec->E + e;
    int rc = 0;
    pthread_mutex_lock(&ec->mu);
    int32_t s = slot_policy_lookup(ec->sp, key);
    if (in_scan(ec) && ec->read_fwd[key] == ec->fwd) {
        /* a streaming VRAM tier's prompt chunk hands back what the chunk itself read from disk: the
         * next chunk needs it last (a cycle), so it stays where the scan put it, the least recent
         * end, or out (tools/tier_sim.py's stream policy); what it found here comes back recent */
        ec->st.kept_declined++;
        ec->st.scan_declined++;
    } else if (s >= 0) { /* held (or on its way): keep it, most recent */
        if (ec->slots[s].state == EC_S_VALID) slot_policy_touch(ec->sp, s);
        ec->st.kept_declined++;
    } else if ((s = take_slot(ec, ec->layers[il].cls, key, TAKE_KEPT)) < 0) {
        ec->st.kept_declined++; /* every slot pinned by the selection in use */
    } else {
        ec->slots[s].ext = 1;
        const uint8_t *cg, *cu, *cd;
        slot_ptrs(ec, &ec->layers[il], ec->slots[s].mem, e, &cg, &cu, &cd);
        *g = (uint8_t *)cg, *u = (uint8_t *)cu, *d = (uint8_t *)cd; /* the slot's own memory */
        ec->st.kept++;
        rc = 1;
    }
    pthread_mutex_unlock(&ec->mu);
    return rc;
}

static void ec_kept(void *ud, int il, int e, bool ok) {
    expert_cache *ec = ud;
    if (ec->mode != EC_BOUNDED || il < 0 || il >= ec->n_layer || e < 0 || e >= ec->E) return;
    pthread_mutex_lock(&ec->mu);
    const int32_t s = slot_policy_lookup(ec->sp, il * ec->E + e);
    if (s >= 0 && ec->slots[s].ext) {
        ec->slots[s].ext = 0;
        if (ok) {
            ec->slots[s].state = EC_S_VALID;
            slot_policy_unpin(ec->sp, s); /* to the most recent end */
        } else {
            slot_policy_drop(ec->sp, s);
            ec->slots[s].state = EC_S_FREE;
        }
        pthread_cond_broadcast(&ec->cv_done);
    }
    pthread_mutex_unlock(&ec->mu);
}

/* The slot arenas (bounded mode; the other modes serve the mapping): a GPU tier page-locks them. */
static int ec_span(void *ud, int i, void **p, uint64_t *n) {
    expert_cache *ec = ud;
    if (ec->mode != EC_BOUNDED || i < 0 || i >= ec->n_arenas || !ec->arenas[i]) return 0;
    *p = ec->arenas[i];
    *n = ec->arena_len[i];
    return 1;
}

q3n_expert_src expert_cache_src(expert_cache *ec) {
    q3n_expert_src s = {
        .acquire = ec_acquire, .release = ec_release, .hint = ec_hint, .span = ec_span, .ud = ec};
    if (ec->mode == EC_BOUNDED && ec->p.route_bias > 0) s.bias = ec_bias;
    if (ec->mode == EC_BOUNDED && (ec->p.demote || !ec->p.no_victim)) s.demote = ec_demote;
    if (ec->mode == EC_BOUNDED && !ec->p.no_victim) s.keep = ec_keep, s.kept = ec_kept;
    if (ec->mode == EC_BOUNDED && ec->pred) s.prefetch = ec_prefetch;
    return s;
}

ec_mode expert_cache_mode(const expert_cache *ec) { return ec->mode; }
bool expert_cache_direct_io(const expert_cache *ec) { return ec->direct; }

bool expert_cache_resident(expert_cache *ec, int layer, int expert) {
    if (ec->mode != EC_BOUNDED) return true;
    pthread_mutex_lock(&ec->mu);
    int32_t s = slot_policy_lookup(ec->sp, layer * ec->E + expert);
    bool r = s >= 0 && ec->slots[s].state != EC_S_FAILED;
    pthread_mutex_unlock(&ec->mu);
    return r;
}

/* ---- full residency: preload the mapping ----------------------------------------------- */

static int preload_mapping(expert_cache *ec) {
    if (ec->m->experts_copied) return 0; /* served from the copies in memory (resident.h) */
    uint64_t total = 0, done = 0;
    for (int il = 0; il < ec->n_layer; il++)
        for (int i = 0; i < ec->layers[il].n_ranges; i++)
            total += ec->layers[il].r[i].stride * (uint64_t)ec->E;
    rl_progress pr;
    if (ec->p.progress) rl_progress_start(&pr, "experts", total); /* (it draws at once) */
    else pr = (rl_progress){.enabled = false};
    volatile uint8_t sink = 0;
    for (int il = 0; il < ec->n_layer; il++)
        for (int i = 0; i < ec->layers[il].n_ranges; i++) {
            const ec_range *r = &ec->layers[il].r[i];
            const struct gguf_part *p = &ec->f->parts[r->part];
            uint64_t len = r->stride * (uint64_t)ec->E, beg = r->base - r->base % EC_ALIGN;
            if (p->fd >= 0) madvise((void *)(p->map + beg), (size_t)(r->base + len - beg), MADV_WILLNEED);
            for (uint64_t off = 0; off < len; off += EC_ALIGN) {
                sink ^= p->map[r->base + off];
                if ((off & ((64u << 20) - 1)) == 0) rl_progress_update(&pr, done + off);
            }
            done += len;
        }
    (void)sink;
    rl_progress_end(&pr);
    return 0;
}

/* Bounded mode: the page cache must not fill with expert pages behind the budget. Our reads
 * bypass the mapping, but a fault on a dense page makes the kernel read around it (up to
 * read_ahead_kb, often several MiB) and the dense tensors sit between expert tensors in the
 * file. So the whole mapping is first marked MADV_RANDOM (no read-around, no async readahead
 * triggered by touching a readahead marker), the dense tensors are read once (MADV_WILLNEED
 * over each one's exact range, then one touch per page) and get MADV_NORMAL back; the expert
 * ranges stay MADV_RANDOM, so a stray touch reads one page, not a window. */
static void prepare_mapping(expert_cache *ec) {
    gguf_file *f = ec->f;
    uint64_t total = 0, done = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (!q3n_tensor_is_routed(f->tensors[i].name)) total += f->tensors[i].nbytes;
    rl_progress pr;
    if (ec->p.progress) rl_progress_start(&pr, "dense", total); /* (it draws at once) */
    else pr = (rl_progress){.enabled = false};
    volatile uint8_t sink = 0;
    for (int i = 0; i < f->n_parts; i++)
        if (f->parts[i].fd >= 0) madvise((void *)f->parts[i].map, (size_t)f->parts[i].size, MADV_RANDOM);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const struct gguf_part *p = &f->parts[t->part];
        if (p->fd < 0 || !t->nbytes || q3n_tensor_is_routed(t->name)) continue;
        /* copied to memory (resident.h): only the embedding's rows are still read here */
        if (ec->m->dense_copied && q3n_tensor_lookup(t->name, NULL) != Q3N_T_TOKEN_EMBD) continue;
        uint64_t beg = t->file_off - t->file_off % EC_ALIGN, end = t->file_off + t->nbytes;
        madvise((void *)(p->map + beg), (size_t)(end - beg), MADV_WILLNEED);
        for (uint64_t off = beg; off < end; off += EC_ALIGN)
            sink ^= p->map[off < t->file_off ? t->file_off : off];
        madvise((void *)(p->map + beg), (size_t)(end - beg), MADV_NORMAL);
        done += t->nbytes;
        rl_progress_update(&pr, done);
    }
    (void)sink;
    rl_progress_end(&pr);
}

/* ---- lifetime ------------------------------------------------------------------------ */

/* The fault injection p->fault names (expert_cache_set_fault); an unknown spec injects nothing. */
static void set_fault_spec(expert_cache *ec, const char *v) {
    if (!v || !*v) return;
    static const struct {
        const char *name;
        ec_fault f;
    } kinds[] = {
        {"eio", EC_FAULT_EIO}, {"eof", EC_FAULT_EOF}, {"short", EC_FAULT_SHORT}, {"eintr", EC_FAULT_EINTR}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i].name);
        if (!strncmp(v, kinds[i].name, n) && (v[n] == '@' || v[n] == '%'))
            expert_cache_set_fault(ec, kinds[i].f, strtoull(v + n + 1, NULL, 10));
    }
}

expert_cache *expert_cache_new(const q3n_model *m, ec_mode mode, const ec_params *p) {
    expert_cache *ec = rl_calloc(1, sizeof *ec, "expert cache");
    if (!ec) return NULL;
    ec->m = m;
    ec->f = m->gguf;
    ec->mode = mode;
    if (p) ec->p = *p;
    if (ec->p.io_threads <= 0) ec->p.io_threads = 4;
    if (ec->p.io_threads > 64) ec->p.io_threads = 64;
    ec->n_layer = cache_layers(m);
    ec->E = m->hp.n_expert;
    ec->K = m->hp.n_expert_used;
    ec->pk = ec->p.prefetch_k > 0 && ec->p.prefetch_k < ec->K ? ec->p.prefetch_k : ec->K;
    /* AUTO: direct when the file system takes it and its block padding costs under 5 % of the
     * slot bytes (large experts; a tiny model's few-KiB slices would double in size) */
    if (mode == EC_BOUNDED && ec->f)
        ec->direct = ec->p.io == EC_IO_DIRECT ||
                     (ec->p.io == EC_IO_AUTO &&
                      expert_cache_full_bytes(m, true) * 100 <= expert_cache_full_bytes(m, false) * 105 &&
                      ec_io_probe_direct(ec->f));
    pthread_mutex_init(&ec->mu, NULL);
    pthread_cond_init(&ec->cv_job, NULL);
    pthread_cond_init(&ec->cv_done, NULL);
    atomic_init(&ec->reads, 0);
    if (!ec->f) {
        rl_seterr("expert cache: the model has no GGUF file");
        goto fail;
    }
    ec->layers = rl_calloc((size_t)ec->n_layer, sizeof(ec_layer), "expert cache layers");
    if (!ec->layers) goto fail;
    for (int il = 0; il < ec->n_layer; il++)
        if (layer_geometry(m, il, ec->direct, &ec->layers[il])) goto fail;
    size_t nk = (size_t)ec->n_layer * ec->E;
    if (mode == EC_BOUNDED) {
        if (setup_classes(ec) || alloc_slots(ec)) goto fail;
        ec->pinned = rl_malloc(sizeof(int32_t) * nk, "expert cache pins");
        ec->n_pinned = rl_calloc((size_t)ec->n_layer, sizeof(int), "expert cache pins");
        ec->qd = rl_malloc(sizeof(int32_t) * (size_t)ec->n_slots, "expert I/O queue");
        ec->qp = rl_malloc(sizeof(int32_t) * (size_t)ec->n_slots, "expert I/O queue");
        ec->read_fwd = rl_calloc(nk, sizeof(uint64_t), "expert cache reads");
        if (!ec->pinned || !ec->n_pinned || !ec->qd || !ec->qp || !ec->read_fwd) goto fail;
        if (ec_io_start(ec)) goto fail;
        prepare_mapping(ec);
        if (!ec->p.no_prefetch) {
            ec->pred = rl_calloc(nk, 1, "prefetch predictions");
            ec->has_pred = rl_calloc((size_t)ec->n_layer, 1, "prefetch predictions");
            ec->pf_ids = rl_malloc(sizeof(int32_t) * (size_t)ec->E, "prefetch predictions");
            ec->pool = pool_new(rl_ncpu() < 8 ? rl_ncpu() : 8);
            if (!ec->pred || !ec->has_pred || !ec->pf_ids || !ec->pool) goto fail;
        }
        set_fault_spec(ec, ec->p.fault);
    } else if (mode == EC_FULL) {
        if (preload_mapping(ec)) goto fail;
    }
    if (ec->p.trace_path) {
        ec->trace = fopen(ec->p.trace_path, "w");
        if (!ec->trace) {
            rl_seterr("cannot write route trace %s: %s", ec->p.trace_path, strerror(errno));
            goto fail;
        }
        /* header: what tools/cache_sim.py needs to replay the trace under other budgets */
        fprintf(ec->trace,
                "{\"header\":{\"mode\":\"%s\",\"n_layer\":%d,\"n_expert\":%d,\"top_k\":%d,"
                "\"budget\":%llu,\"slot_bytes\":[",
                ec_mode_name(mode), ec->n_layer, ec->E, ec->K, (unsigned long long)ec->p.budget);
        for (int il = 0; il < ec->n_layer; il++)
            fprintf(ec->trace, "%s%llu", il ? "," : "",
                    (unsigned long long)expert_cache_slot_bytes(m, il, false));
        fputs("]}}\n", ec->trace);
    }
    ec->st.budget = mode == EC_BOUNDED ? ec->p.budget : 0;
    return ec;
fail:
    expert_cache_free(ec);
    return NULL;
}

void expert_cache_free(expert_cache *ec) {
    if (!ec) return;
    ec_io_stop(ec);
    if (ec->trace) fclose(ec->trace);
    for (int c = 0; c < ec->n_arenas; c++)
        if (ec->arenas[c]) munmap(ec->arenas[c], (size_t)ec->arena_len[c]);
    pool_free(ec->pool);
    free(ec->arenas);
    free(ec->arena_len);
    free(ec->slots);
    free(ec->cls);
    free(ec->layers);
    slot_policy_free(ec->sp);
    free(ec->pinned);
    free(ec->n_pinned);
    free(ec->qd);
    free(ec->qp);
    free(ec->pred);
    free(ec->read_fwd);
    free(ec->has_pred);
    free(ec->pf_ids);
    free(ec->rbuf);
    free(ec->topk);
    free(ec->actq);
    pthread_mutex_destroy(&ec->mu);
    pthread_cond_destroy(&ec->cv_job);
    pthread_cond_destroy(&ec->cv_done);
    free(ec);
}

/* Wait until no load is queued or running (under mu). */
static void drain(expert_cache *ec) {
    for (int s = 0; s < ec->n_slots; s++) wait_loaded(ec, s);
}

void expert_cache_set_fault(expert_cache *ec, ec_fault kind, uint64_t n) {
    if (ec->mode != EC_BOUNDED) return;
    pthread_mutex_lock(&ec->mu);
    drain(ec); /* the I/O threads read these fields after taking mu for their next job */
    ec->fault = kind;
    ec->fault_n = (kind == EC_FAULT_SHORT || kind == EC_FAULT_EINTR) && n < 2 ? 2 : n;
    atomic_store(&ec->reads, 0);
    pthread_mutex_unlock(&ec->mu);
}

/* ---- observability --------------------------------------------------------------------- */

void expert_cache_get_stats(expert_cache *ec, ec_stats *out) {
    pthread_mutex_lock(&ec->mu);
    *out = ec->st;
    if (ec->sp) { /* the replacement counters are the policy's */
        slot_stats p;
        slot_policy_get_stats(ec->sp, &p);
        out->evictions = p.evictions;
        out->pf_loads = p.pf_loads;
        out->pf_loads_used = p.pf_used;
        out->pf_loads_wasted = p.pf_wasted;
    }
    pthread_mutex_unlock(&ec->mu);
    out->mode = ec->mode;
    out->n_slots = (uint64_t)ec->n_slots;
    out->n_classes = (uint64_t)ec->n_cls;
    out->peak_rss = rl_peak_rss();
}

void expert_cache_reset_stats(expert_cache *ec) {
    pthread_mutex_lock(&ec->mu);
    uint64_t budget = ec->st.budget;
    memset(&ec->st, 0, sizeof ec->st);
    ec->st.budget = budget;
    if (ec->sp) slot_policy_reset_stats(ec->sp); /* and its prefetch marks: count only new loads */
    pthread_mutex_unlock(&ec->mu);
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

void expert_cache_print_stats(expert_cache *ec, FILE *out) {
    ec_stats s;
    expert_cache_get_stats(ec, &s);
    double tok = s.tokens ? (double)s.tokens : 1.0, MiB = 1048576.0;
    fprintf(out, "expert cache: %s", ec_mode_name(s.mode));
    if (s.mode == EC_BOUNDED) {
        fprintf(out, ", %.0f MiB in %llu slots (", s.budget / MiB, (unsigned long long)s.n_slots);
        for (int c = 0; c < ec->n_cls; c++)
            fprintf(out, "%s%d x %.0f KiB", c ? ", " : "", ec->cls[c].n, ec->cls[c].slot_bytes / 1024.0);
        fprintf(out, ")%s", ec->direct ? ", O_DIRECT" : ", buffered + FADV_DONTNEED");
    }
    /* rows are counted by the hint, which a GPU's VRAM tier does not call: there the figures are totals */
    const bool rows = s.tokens || !s.lookups;
    const char *per = rows ? "/token" : "";
    char head[64];
    if (rows) snprintf(head, sizeof head, "%llu tokens", (unsigned long long)s.tokens);
    else snprintf(head, sizeof head, "under a GPU's VRAM slots (rows counted there)");
    fprintf(
        out,
        "\n  %s: hits %.1f%% (%llu + %llu in flight of %llu), misses %.2f%s, read %.2f MiB%s (demand %.2f, "
        "prefetch %.2f), evictions %llu\n",
        head, pct(s.hits + s.hits_inflight, s.lookups), (unsigned long long)s.hits,
        (unsigned long long)s.hits_inflight, (unsigned long long)s.lookups, s.misses / tok, per,
        (s.bytes_demand + s.bytes_prefetch) / MiB / tok, per, s.bytes_demand / MiB / tok,
        s.bytes_prefetch / MiB / tok, (unsigned long long)s.evictions);
    if (s.scan_demoted)
        fprintf(out,
                "  prompt chunks (>= %d rows): %llu of their loads streamed through the least recent end\n",
                SLOT_SCAN_ROWS, (unsigned long long)s.scan_demoted);
    if (s.demoted || s.kept || s.kept_declined)
        fprintf(out,
                "  under a GPU's VRAM slots: %llu entries demoted (VRAM took them: evicted first here), %llu "
                "VRAM evictions kept here (%llu declined: held already, no room, or a streamed chunk's own "
                "reads: %llu)\n",
                (unsigned long long)s.demoted, (unsigned long long)s.kept,
                (unsigned long long)s.kept_declined, (unsigned long long)s.scan_declined);
    if (s.pf_predicted)
        fprintf(
            out,
            "  prefetch: predictions precision %.1f%% recall %.1f%%; loads %llu, used %.1f%%, wasted %llu, "
            "no slot %llu\n",
            pct(s.pf_predicted_used, s.pf_predicted), pct(s.pf_predicted_used, s.pf_used_total),
            (unsigned long long)s.pf_loads, pct(s.pf_loads_used, s.pf_loads),
            (unsigned long long)s.pf_loads_wasted, (unsigned long long)s.pf_no_slot);
    fprintf(out,
            "  waited on I/O %.3f s, pre-gating %.3f s, read errors %llu, aborts %llu; peak RSS %.2f GiB\n",
            s.io_wait_s, s.hint_s, (unsigned long long)s.io_errors, (unsigned long long)s.aborts,
            s.peak_rss / (1024.0 * MiB));
}

int expert_cache_check(expert_cache *ec) {
    if (ec->mode != EC_BOUNDED) return 0;
    pthread_mutex_lock(&ec->mu);
    int rc = slot_policy_check(ec->sp);
    for (int s = 0; s < ec->n_slots && !rc; s++) {
        int32_t key = slot_policy_key(ec->sp, s);
        if ((key >= 0) != (ec->slots[s].state != EC_S_FREE))
            rc = rl_seterr("slot %d: key %d in state %d", s, key, ec->slots[s].state);
    }
    pthread_mutex_unlock(&ec->mu);
    return rc;
}
