/* vram_slots.c — see vram_slots.h. The replacement itself (index, recency, pins, free slots,
 * victims, prefetch protection) is the shared slot policy (slot_policy.h): one pool per layer,
 * key = layer * n_expert + expert, layer l's slot s = the policy's slot first(l) + s. What stays
 * here is the VRAM tier's protocol around it: a selection prepared in batches, committed or
 * aborted, released; the predicted set of the pre-gated prefetch; the byte and batch counters. */
#include "cache/vram_slots.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "cache/slot_policy.h"

typedef struct {
    int cap, first; /* slots, and the policy's number of slot 0 */
    uint64_t bytes;
    int32_t *pins, *pmiss; /* policy slots pinned by the open prepare; those it filled (misses) */
    int32_t *gone;         /* [cap]: the expert the last fill of each slot evicted (-1: none) */
    uint8_t *pred, *seen;  /* [n_expert]: predicted by the last prefetch; scratch of one call */
    uint32_t *sfs;         /* [cap]: when this forward filled the slot, if it did (0: not; streaming) */
    uint32_t sf_seq;       /* the stamps' counter, this forward (0: no stamp) */
    int npins, nmiss, rows;
    bool open, has_pred;
} vlayer;

struct vram_slots {
    int n_layer, n_expert, first;
    int stream; /* vram_slots_set_stream's pool (0: plain LRU in scans too) */
    vlayer *L;
    slot_policy *sp;
    vram_stats st; /* the tier's own counters; the policy's are merged in vram_slots_get_stats */
};

vram_slots *vram_slots_new(int n_layer, int n_expert, const int *slots, const uint64_t *bytes) {
    vram_slots *vs = rl_calloc(1, sizeof *vs, "VRAM slot table");
    if (!vs) return NULL;
    vs->n_layer = n_layer;
    vs->n_expert = n_expert;
    vs->first = -1;
    int *cap = rl_malloc(sizeof(int) * (size_t)(n_layer ? n_layer : 1), "VRAM slot table");
    const int nk = n_layer * n_expert;
    int *kpool = rl_malloc(sizeof(int) * (size_t)(nk > 0 ? nk : 1), "VRAM slot table");
    if (!cap || !kpool || !(vs->L = rl_calloc((size_t)n_layer, sizeof *vs->L, "VRAM slot table"))) goto fail;
    for (int il = 0; il < n_layer; il++) {
        cap[il] = slots[il] < 0 ? 0 : slots[il] > n_expert ? n_expert : slots[il];
        for (int e = 0; e < n_expert; e++) kpool[il * n_expert + e] = il;
    }
    if (!(vs->sp = slot_policy_new(n_layer, cap, nk, kpool))) goto fail;
    for (int il = 0; il < n_layer; il++) {
        vlayer *l = &vs->L[il];
        size_t cs = (size_t)(cap[il] ? cap[il] : 1), es = (size_t)n_expert;
        l->cap = cap[il];
        l->first = slot_policy_first(vs->sp, il);
        l->bytes = bytes ? bytes[il] : 0;
        if (l->cap && vs->first < 0) vs->first = il;
        l->pins = rl_malloc(cs * 4, "slots");
        l->pmiss = rl_malloc(cs * 4, "slots");
        l->gone = rl_malloc(cs * 4, "slots");
        l->pred = rl_calloc(es, 1, "slots");
        l->seen = rl_calloc(es, 1, "slots");
        l->sfs = rl_calloc(cs, 4, "slots");
        if (!l->pins || !l->pmiss || !l->gone || !l->pred || !l->seen || !l->sfs) goto fail;
        for (int s = 0; s < l->cap; s++) l->gone[s] = -1;
    }
    free(cap);
    free(kpool);
    return vs;
fail:
    free(cap);
    free(kpool);
    vram_slots_free(vs);
    return NULL;
}

void vram_slots_free(vram_slots *vs) {
    if (!vs) return;
    for (int il = 0; vs->L && il < vs->n_layer; il++) {
        vlayer *l = &vs->L[il];
        free(l->pins), free(l->pmiss), free(l->gone), free(l->pred), free(l->seen), free(l->sfs);
    }
    slot_policy_free(vs->sp);
    free(vs->L);
    free(vs);
}

int vram_slots_capacity(const vram_slots *vs, int layer) {
    return layer >= 0 && layer < vs->n_layer ? vs->L[layer].cap : 0;
}

static int32_t key_of(const vram_slots *vs, int layer, int e) { return (int32_t)layer * vs->n_expert + e; }

void vram_slots_set_stream(vram_slots *vs, int pool) { vs->stream = pool > 0 ? pool : 0; }

void vram_slots_begin(vram_slots *vs, int layer, const int32_t *ids, int n, int rows) {
    vlayer *l = &vs->L[layer];
    l->rows = rows;
    if (l->sf_seq) { /* a new forward of this layer: no fills of it yet */
        memset(l->sfs, 0, 4 * (size_t)(l->cap ? l->cap : 1));
        l->sf_seq = 0;
    }
    if (layer == vs->first) vs->st.tokens += (uint64_t)rows;
    vs->st.lookups += (uint64_t)n;
    if (!l->has_pred) return;
    vs->st.pf_used_total += (uint64_t)n;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vs->n_expert && l->pred[ids[i]]) vs->st.pf_predicted_used++;
    memset(l->pred, 0, (size_t)vs->n_expert);
    l->has_pred = false;
}

/* -1 (rl_lasterr) unless ids are n distinct experts in range, n within the layer's slots and no
 * prepare open. */
static int check_ids(vram_slots *vs, int layer, const int32_t *ids, int n) {
    if (layer < 0 || layer >= vs->n_layer) return rl_seterr("VRAM slots: layer %d out of range", layer);
    vlayer *l = &vs->L[layer];
    if (l->open || l->npins)
        return rl_seterr("VRAM slots: layer %d prepared twice without release (internal)", layer);
    if (n > l->cap)
        return rl_seterr("VRAM slots: layer %d needs %d experts at once, it has %d slots (internal)", layer,
                         n, l->cap);
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++) {
        if (ids[i] < 0 || ids[i] >= vs->n_expert || l->seen[ids[i]]) bad = i;
        else l->seen[ids[i]] = 1;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vs->n_expert) l->seen[ids[i]] = 0;
    if (bad >= 0)
        return rl_seterr("VRAM slots: expert id %d repeated or out of range (layer %d)", ids[bad], layer);
    return 0;
}

/* The victim of a scan's miss (streaming, vram_slots_set_stream): once this forward has filled the
 * pool's worth of slots of the layer, the one it filled longest ago that is not pinned, so the
 * layer's other slots keep their experts through the chunk (tools/tier_sim.py's stream policy);
 * before that, or with every such slot pinned, -1: the least recent slot, as always. */
static int32_t stream_victim(const vram_slots *vs, const vlayer *l) {
    int32_t best = -1;
    int filled = 0;
    for (int s = 0; s < l->cap; s++) {
        if (!l->sfs[s]) continue;
        filled++;
        if (!slot_policy_pins(vs->sp, l->first + s) && slot_policy_key(vs->sp, l->first + s) >= 0 &&
            (best < 0 || l->sfs[s] < l->sfs[best])) /* (a slot freed since, by an abort or a drop: not) */
            best = s;
    }
    return filled < vs->stream || best < 0 ? -1 : l->first + best;
}

/* Before policy slot s of layer l is filled: which expert leaves it (victim caching). */
static void note_gone(const vram_slots *vs, vlayer *l, int32_t s) {
    const int32_t k = slot_policy_key(vs->sp, s);
    l->gone[s - l->first] = k < 0 ? -1 : k % vs->n_expert;
}

int vram_slots_prepare(vram_slots *vs, int layer, const int32_t *ids, int n, int32_t *slot, int32_t *miss) {
    if (check_ids(vs, layer, ids, n)) return -1;
    vlayer *l = &vs->L[layer];
    /* hits first: pinned before any miss may evict */
    for (int i = 0; i < n; i++) {
        int32_t s = slot_policy_lookup(vs->sp, key_of(vs, layer, ids[i]));
        slot[i] = s;
        if (s >= 0) slot_policy_hit(vs->sp, s);
    }
    int m = 0;
    l->nmiss = 0;
    const bool stream = vs->stream && l->rows >= SLOT_SCAN_ROWS;
    for (int i = 0; i < n; i++) {
        if (slot[i] >= 0) continue;
        int32_t s = slot_policy_victim(vs->sp, layer, false); /* cannot fail: cap - pinned >= misses */
        RL_ASSERT(s >= 0);
        if (stream && slot_policy_key(vs->sp, s) >= 0) { /* no free slot: the pool's oldest, if full */
            const int32_t f = stream_victim(vs, l);
            s = f >= 0 ? f : s;
        }
        if (stream) l->sfs[s - l->first] = ++l->sf_seq; /* a scan's fill: the newest */
        note_gone(vs, l, s);
        slot_policy_fill(vs->sp, s, key_of(vs, layer, ids[i]), false);
        slot[i] = s;
        l->pmiss[l->nmiss++] = s;
        miss[m++] = i;
        vs->st.bytes_demand += l->bytes;
    }
    for (int i = 0; i < n; i++) {
        l->pins[i] = slot[i];
        slot[i] -= l->first;
    }
    l->npins = n;
    l->open = true;
    vs->st.batches++;
    return m;
}

void vram_slots_commit(vram_slots *vs, int layer) { vs->L[layer].open = false; }

void vram_slots_abort(vram_slots *vs, int layer) {
    vlayer *l = &vs->L[layer];
    for (int i = 0; i < l->nmiss; i++) slot_policy_drop(vs->sp, l->pmiss[i]); /* never filled: free again */
    for (int i = 0; i < l->npins; i++)
        if (slot_policy_pins(vs->sp, l->pins[i])) slot_policy_unpin(vs->sp, l->pins[i]);
    l->nmiss = l->npins = 0;
    l->open = false;
    vs->st.aborts++;
}

void vram_slots_release(vram_slots *vs, int layer) {
    vlayer *l = &vs->L[layer];
    for (int i = 0; i < l->npins; i++) slot_policy_unpin(vs->sp, l->pins[i]);
    l->npins = l->nmiss = 0;
    l->open = false;
}

int vram_slots_prefetch(vram_slots *vs, int layer, const int32_t *ids, int n, int32_t *slot_out,
                        int32_t *e_out) {
    if (layer < 0 || layer >= vs->n_layer) return 0;
    vlayer *l = &vs->L[layer];
    if (!l->cap || l->open || l->npins) return 0;
    memset(l->pred, 0, (size_t)vs->n_expert);
    l->has_pred = true;
    slot_policy_protect_clear(vs->sp);
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= vs->n_expert || l->pred[e]) continue;
        l->pred[e] = 1;
        vs->st.pf_predicted++;
        slot_policy_protect(vs->sp, key_of(vs, layer, e));
        int32_t s = slot_policy_lookup(vs->sp, key_of(vs, layer, e));
        if (s >= 0) slot_policy_touch(vs->sp, s); /* resident: to the MRU end, away from the victims */
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= vs->n_expert || l->seen[e] || slot_policy_lookup(vs->sp, key_of(vs, layer, e)) >= 0)
            continue;
        l->seen[e] = 1;                                      /* once per expert */
        int32_t s = slot_policy_victim(vs->sp, layer, true); /* never a prediction (refusal counted) */
        if (s < 0) continue;
        note_gone(vs, l, s);
        slot_policy_fill(vs->sp, s, key_of(vs, layer, e), true);
        slot_out[k] = s - l->first;
        e_out[k++] = e;
        vs->st.bytes_prefetch += l->bytes;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vs->n_expert) l->seen[ids[i]] = 0;
    slot_policy_protect_clear(vs->sp);
    return k;
}

void vram_slots_drop(vram_slots *vs, int layer, int s) {
    vlayer *l = &vs->L[layer];
    if (s < 0 || s >= l->cap || slot_policy_pins(vs->sp, l->first + s)) return;
    slot_policy_drop(vs->sp, l->first + s);
}

int vram_slots_evicted(const vram_slots *vs, int layer, int slot) {
    if (layer < 0 || layer >= vs->n_layer || slot < 0 || slot >= vs->L[layer].cap) return -1;
    return vs->L[layer].gone[slot];
}

int vram_slots_lookup(const vram_slots *vs, int layer, int expert) {
    if (layer < 0 || layer >= vs->n_layer || expert < 0 || expert >= vs->n_expert) return -1;
    int32_t s = slot_policy_lookup(vs->sp, key_of(vs, layer, expert));
    return s < 0 ? -1 : s - vs->L[layer].first;
}

int vram_slots_key(const vram_slots *vs, int layer, int slot) {
    if (layer < 0 || layer >= vs->n_layer || slot < 0 || slot >= vs->L[layer].cap) return -1;
    int32_t k = slot_policy_key(vs->sp, vs->L[layer].first + slot);
    return k < 0 ? -1 : k - layer * vs->n_expert;
}

void vram_slots_get_stats(const vram_slots *vs, vram_stats *out) {
    slot_stats p;
    slot_policy_get_stats(vs->sp, &p);
    *out = vs->st;
    out->hits = p.hits;
    out->misses = p.misses;
    out->evictions = p.evictions;
    out->hits_prefetched = p.pf_used;
    out->pf_loads = p.pf_loads;
    out->pf_loads_wasted = p.pf_wasted;
    out->pf_no_slot = p.pf_refused;
}

void vram_slots_reset_stats(vram_slots *vs) {
    memset(&vs->st, 0, sizeof vs->st);
    slot_policy_reset_stats(vs->sp);
}
void vram_stats_print(const vram_stats *s, FILE *f) {
    double tok = s->tokens ? (double)s->tokens : 1.0, look = s->lookups ? (double)s->lookups : 1.0;
    fprintf(f,
            "vram tier: %llu tokens, %llu lookups: %.1f%% hits (%llu via prefetch), %.2f misses/token, "
            "%llu evictions, %llu batches\n",
            (unsigned long long)s->tokens, (unsigned long long)s->lookups, 100.0 * (double)s->hits / look,
            (unsigned long long)s->hits_prefetched, (double)s->misses / tok, (unsigned long long)s->evictions,
            (unsigned long long)s->batches);
    fprintf(f, "vram tier: host->device %.2f MiB/token (demand %.2f + prefetch %.2f)",
            (double)(s->bytes_demand + s->bytes_prefetch) / tok / 1048576.0,
            (double)s->bytes_demand / tok / 1048576.0, (double)s->bytes_prefetch / tok / 1048576.0);
    if (s->pf_predicted)
        fprintf(f,
                "; prefetch precision %.1f%%, recall %.1f%%, %llu loads (%llu wasted, %llu without a slot)",
                100.0 * (double)s->pf_predicted_used / (double)s->pf_predicted,
                s->pf_used_total ? 100.0 * (double)s->pf_predicted_used / (double)s->pf_used_total : 0.0,
                (unsigned long long)s->pf_loads, (unsigned long long)s->pf_loads_wasted,
                (unsigned long long)s->pf_no_slot);
    if (s->aborts) fprintf(f, "; %llu aborted (copy failures)", (unsigned long long)s->aborts);
    fputc('\n', f);
}

int vram_slots_check(const vram_slots *vs) {
    if (slot_policy_check(vs->sp)) return -1;
    for (int il = 0; il < vs->n_layer; il++) {
        const vlayer *l = &vs->L[il];
        int npin = 0;
        for (int s = 0; s < l->cap; s++) npin += slot_policy_pins(vs->sp, l->first + s) > 0;
        if (npin != l->npins)
            return rl_seterr("layer %d: %d slots pinned, the open prepare pinned %d", il, npin, l->npins);
    }
    return 0;
}
