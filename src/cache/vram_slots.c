/* vram_slots.c — see vram_slots.h. Per layer: a key per slot, a doubly linked LRU list of the
 * valid unpinned slots (head = most recent), a stack of free slots (slot 0 first), and a dense
 * index expert -> slot (n_expert entries per layer: a perfect hash). */
#include "cache/vram_slots.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"

typedef struct {
    int cap;
    uint64_t bytes;
    int32_t *key, *prev, *next, *freel, *index, *pins, *pmiss;
    uint8_t *pinned, *pf, *pred, *seen;
    int head, tail, nfree, npins, nmiss;
    bool open, has_pred;
} vlayer;

struct vram_slots {
    int n_layer, n_expert, first;
    vlayer *L;
    vram_stats st;
};

static void lru_unlink(vlayer *l, int s) {
    if (l->prev[s] >= 0) l->next[l->prev[s]] = l->next[s];
    else if (l->head == s) l->head = l->next[s];
    if (l->next[s] >= 0) l->prev[l->next[s]] = l->prev[s];
    else if (l->tail == s) l->tail = l->prev[s];
    l->prev[s] = l->next[s] = -1;
}

static void lru_push_head(vlayer *l, int s) {
    l->prev[s] = -1;
    l->next[s] = l->head;
    if (l->head >= 0) l->prev[l->head] = s;
    l->head = s;
    if (l->tail < 0) l->tail = s;
}

static bool in_lru(const vlayer *l, int s) { return l->key[s] >= 0 && !l->pinned[s]; }

vram_slots *vram_slots_new(int n_layer, int n_expert, const int *slots, const uint64_t *bytes) {
    vram_slots *vs = rl_calloc(1, sizeof *vs, "VRAM slot table");
    if (!vs) return NULL;
    vs->n_layer = n_layer;
    vs->n_expert = n_expert;
    vs->first = -1;
    if (!(vs->L = rl_calloc((size_t)n_layer, sizeof *vs->L, "VRAM slot table"))) goto fail;
    for (int il = 0; il < n_layer; il++) {
        vlayer *l = &vs->L[il];
        int c = slots[il] < 0 ? 0 : slots[il] > n_expert ? n_expert : slots[il];
        size_t cs = (size_t)(c ? c : 1), es = (size_t)n_expert;
        l->cap = c;
        l->bytes = bytes ? bytes[il] : 0;
        l->head = l->tail = -1;
        if (c && vs->first < 0) vs->first = il;
        l->key = rl_malloc(cs * 4, "slots");
        l->prev = rl_malloc(cs * 4, "slots");
        l->next = rl_malloc(cs * 4, "slots");
        l->freel = rl_malloc(cs * 4, "slots");
        l->pins = rl_malloc(cs * 4, "slots");
        l->pmiss = rl_malloc(cs * 4, "slots");
        l->index = rl_malloc(es * 4, "slots");
        l->pinned = rl_calloc(cs, 1, "slots");
        l->pf = rl_calloc(cs, 1, "slots");
        l->pred = rl_calloc(es, 1, "slots");
        l->seen = rl_calloc(es, 1, "slots");
        if (!l->key || !l->prev || !l->next || !l->freel || !l->pins || !l->pmiss || !l->index ||
            !l->pinned || !l->pf || !l->pred || !l->seen)
            goto fail;
        for (int e = 0; e < n_expert; e++) l->index[e] = -1;
        for (int s = 0; s < c; s++) {
            l->key[s] = l->prev[s] = l->next[s] = -1;
            l->freel[s] = c - 1 - s; /* stack: slot 0 is taken first */
        }
        l->nfree = c;
    }
    return vs;
fail:
    vram_slots_free(vs);
    return NULL;
}

void vram_slots_free(vram_slots *vs) {
    if (!vs) return;
    for (int il = 0; vs->L && il < vs->n_layer; il++) {
        vlayer *l = &vs->L[il];
        free(l->key), free(l->prev), free(l->next), free(l->freel), free(l->pins), free(l->pmiss),
            free(l->index);
        free(l->pinned), free(l->pf), free(l->pred), free(l->seen);
    }
    free(vs->L);
    free(vs);
}

int vram_slots_capacity(const vram_slots *vs, int layer) {
    return layer >= 0 && layer < vs->n_layer ? vs->L[layer].cap : 0;
}

void vram_slots_begin(vram_slots *vs, int layer, const int32_t *ids, int n, int rows) {
    vlayer *l = &vs->L[layer];
    if (layer == vs->first) vs->st.tokens += (uint64_t)rows;
    vs->st.lookups += (uint64_t)n;
    if (!l->has_pred) return;
    vs->st.pf_used_total += (uint64_t)n;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vs->n_expert && l->pred[ids[i]]) vs->st.pf_predicted_used++;
    memset(l->pred, 0, (size_t)vs->n_expert);
    l->has_pred = false;
}

/* Take a slot for a new key: a free one, else the LRU tail unless it is protected (pred).
 * -1 if none. The victim leaves the index. */
static int take_slot(vram_slots *vs, vlayer *l, bool protect_pred) {
    if (l->nfree) return l->freel[--l->nfree];
    int s = l->tail;
    if (s < 0 || (protect_pred && l->pred[l->key[s]])) return -1;
    lru_unlink(l, s);
    l->index[l->key[s]] = -1;
    l->key[s] = -1;
    vs->st.evictions++;
    if (l->pf[s]) vs->st.pf_loads_wasted++;
    l->pf[s] = 0;
    return s;
}

int vram_slots_prepare(vram_slots *vs, int layer, const int32_t *ids, int n, int32_t *slot, int32_t *miss) {
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
    /* hits first: pinned before any miss may evict */
    for (int i = 0; i < n; i++) {
        int s = l->index[ids[i]];
        slot[i] = s;
        if (s < 0) continue;
        lru_unlink(l, s);
        l->pinned[s] = 1;
        vs->st.hits++;
        if (l->pf[s]) {
            vs->st.hits_prefetched++;
            l->pf[s] = 0;
        }
    }
    int m = 0;
    l->nmiss = 0;
    for (int i = 0; i < n; i++) {
        if (slot[i] >= 0) continue;
        int s = take_slot(vs, l, false); /* cannot fail: cap - pinned >= misses */
        RL_ASSERT(s >= 0);
        l->key[s] = ids[i];
        l->index[ids[i]] = s;
        l->pinned[s] = 1;
        slot[i] = s;
        l->pmiss[l->nmiss++] = s;
        miss[m++] = i;
        vs->st.misses++;
        vs->st.bytes_demand += l->bytes;
    }
    for (int i = 0; i < n; i++) l->pins[i] = slot[i];
    l->npins = n;
    l->open = true;
    vs->st.batches++;
    return m;
}

void vram_slots_commit(vram_slots *vs, int layer) { vs->L[layer].open = false; }

void vram_slots_abort(vram_slots *vs, int layer) {
    vlayer *l = &vs->L[layer];
    for (int i = 0; i < l->nmiss; i++) { /* the misses' slots were never filled: free again */
        int s = l->pmiss[i];
        l->index[l->key[s]] = -1;
        l->key[s] = -1;
        l->pinned[s] = 0;
        l->freel[l->nfree++] = s;
    }
    for (int i = 0; i < l->npins; i++)
        if (l->pinned[l->pins[i]]) {
            l->pinned[l->pins[i]] = 0;
            lru_push_head(l, l->pins[i]);
        }
    l->nmiss = l->npins = 0;
    l->open = false;
    vs->st.aborts++;
}

void vram_slots_release(vram_slots *vs, int layer) {
    vlayer *l = &vs->L[layer];
    for (int i = 0; i < l->npins; i++) {
        l->pinned[l->pins[i]] = 0;
        lru_push_head(l, l->pins[i]);
    }
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
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= vs->n_expert || l->pred[e]) continue;
        l->pred[e] = 1;
        vs->st.pf_predicted++;
        int s = l->index[e];
        if (s >= 0 && in_lru(l, s)) { /* resident: to the MRU end, away from the victims */
            lru_unlink(l, s);
            lru_push_head(l, s);
        }
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= vs->n_expert || l->index[e] >= 0 || l->seen[e]) continue;
        l->seen[e] = 1; /* once per expert */
        int s = take_slot(vs, l, true);
        if (s < 0) {
            vs->st.pf_no_slot++;
            continue;
        }
        l->key[s] = e;
        l->index[e] = s;
        l->pf[s] = 1;
        lru_push_head(l, s);
        slot_out[k] = s;
        e_out[k++] = e;
        vs->st.pf_loads++;
        vs->st.bytes_prefetch += l->bytes;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vs->n_expert) l->seen[ids[i]] = 0;
    return k;
}

void vram_slots_drop(vram_slots *vs, int layer, int s) {
    vlayer *l = &vs->L[layer];
    if (s < 0 || s >= l->cap || l->key[s] < 0 || l->pinned[s]) return;
    lru_unlink(l, s);
    l->index[l->key[s]] = -1;
    l->key[s] = -1;
    l->pf[s] = 0;
    l->freel[l->nfree++] = s;
}

int vram_slots_lookup(const vram_slots *vs, int layer, int expert) {
    if (layer < 0 || layer >= vs->n_layer || expert < 0 || expert >= vs->n_expert) return -1;
    return vs->L[layer].index[expert];
}

int vram_slots_key(const vram_slots *vs, int layer, int slot) {
    if (layer < 0 || layer >= vs->n_layer || slot < 0 || slot >= vs->L[layer].cap) return -1;
    return vs->L[layer].key[slot];
}

void vram_slots_get_stats(const vram_slots *vs, vram_stats *out) { *out = vs->st; }
void vram_slots_reset_stats(vram_slots *vs) { memset(&vs->st, 0, sizeof vs->st); }

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
    for (int il = 0; il < vs->n_layer; il++) {
        const vlayer *l = &vs->L[il];
        int nlru = 0, npin = 0, nvalid = 0;
        for (int s = l->head, p = -1; s >= 0; p = s, s = l->next[s]) {
            if (l->prev[s] != p) return rl_seterr("layer %d: LRU links broken at slot %d", il, s);
            if (!in_lru(l, s))
                return rl_seterr("layer %d: slot %d in the LRU list but free or pinned", il, s);
            if (++nlru > l->cap) return rl_seterr("layer %d: LRU list loops", il);
            if (l->next[s] < 0 && l->tail != s) return rl_seterr("layer %d: LRU tail wrong", il);
        }
        for (int s = 0; s < l->cap; s++) {
            if (l->key[s] >= 0) {
                nvalid++;
                if (l->index[l->key[s]] != s) return rl_seterr("layer %d: slot %d not in the index", il, s);
            } else if (l->pinned[s]) return rl_seterr("layer %d: free slot %d pinned", il, s);
            npin += l->pinned[s];
        }
        for (int e = 0; e < vs->n_expert; e++)
            if (l->index[e] >= 0 && (l->index[e] >= l->cap || l->key[l->index[e]] != e))
                return rl_seterr("layer %d: index of expert %d wrong", il, e);
        if (nvalid + l->nfree != l->cap)
            return rl_seterr("layer %d: %d valid + %d free != %d slots", il, nvalid, l->nfree, l->cap);
        for (int i = 0; i < l->nfree; i++)
            if (l->key[l->freel[i]] >= 0) return rl_seterr("layer %d: valid slot on the free list", il);
        if (nlru + npin != nvalid)
            return rl_seterr("layer %d: %d in LRU + %d pinned != %d valid", il, nlru, npin, nvalid);
    }
    return 0;
}
