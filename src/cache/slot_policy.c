/* slot_policy.c — see slot_policy.h. Per slot: its key, pin count, prefetch mark and links of a
 * doubly linked recency list per pool (head = most recent, tail = the next victim); per pool: a
 * free stack; per key: the slot holding it (a dense index: a perfect hash of (layer, expert)),
 * its pool and its protected flag.
 *
 * A prefetch's victim search walks from the tail past protected entries. So that a burst of
 * prefetches does not walk the same protected run again and again, each pool remembers the
 * newest entry known to be protected with everything older than it protected too (bound). It
 * stays true while the protected set only grows and entries only enter at the head; an unlink of
 * the bound moves it one older; slot_policy_protect_clear forgets it. A cache of the walk, not a
 * decision: the victim is the same as a walk from the tail would find. */
#include "cache/slot_policy.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"

struct slot_policy {
    int n_pools, n_slots, n_keys;
    int *first, *size, *nfree;           /* per pool */
    int32_t *head, *tail, *bound;        /* per pool: recency list ends, protected-run bound */
    int32_t *freel;                      /* per slot: pool p's free stack in [first, first + nfree) */
    int32_t *key, *newer, *older, *pins; /* per slot */
    int32_t *pool;                       /* per slot */
    uint8_t *pf;                         /* per slot: prefetched, not hit yet */
    int32_t *index, *kpool;              /* per key */
    uint8_t *prot;                       /* per key */
    int32_t *plist;                      /* the protected keys (to clear them) */
    int nprot;
    slot_stats st;
};

slot_policy *slot_policy_new(int n_pools, const int *pool_slots, int n_keys, const int *key_pool) {
    if (n_pools < 0 || n_keys < 0) {
        rl_seterr("slot policy: %d pools, %d keys (internal)", n_pools, n_keys);
        return NULL;
    }
    slot_policy *sp = rl_calloc(1, sizeof *sp, "slot policy");
    if (!sp) return NULL;
    sp->n_pools = n_pools;
    sp->n_keys = n_keys;
    int64_t total = 0;
    for (int p = 0; p < n_pools; p++) {
        if (pool_slots[p] < 0) {
            rl_seterr("slot policy: pool %d has %d slots (internal)", p, pool_slots[p]);
            goto fail;
        }
        total += pool_slots[p];
    }
    if (total > INT32_MAX / 2) {
        rl_seterr("slot policy: too many slots");
        goto fail;
    }
    sp->n_slots = (int)total;
    size_t np = (size_t)(n_pools ? n_pools : 1), ns = (size_t)(total ? total : 1),
           nk = (size_t)(n_keys ? n_keys : 1);
    sp->first = rl_malloc(np * sizeof(int), "slot policy");
    sp->size = rl_malloc(np * sizeof(int), "slot policy");
    sp->nfree = rl_malloc(np * sizeof(int), "slot policy");
    sp->head = rl_malloc(np * 4, "slot policy");
    sp->tail = rl_malloc(np * 4, "slot policy");
    sp->bound = rl_malloc(np * 4, "slot policy");
    sp->freel = rl_malloc(ns * 4, "slot policy");
    sp->key = rl_malloc(ns * 4, "slot policy");
    sp->newer = rl_malloc(ns * 4, "slot policy");
    sp->older = rl_malloc(ns * 4, "slot policy");
    sp->pins = rl_calloc(ns, 4, "slot policy");
    sp->pool = rl_malloc(ns * 4, "slot policy");
    sp->pf = rl_calloc(ns, 1, "slot policy");
    sp->index = rl_malloc(nk * 4, "slot policy");
    sp->kpool = rl_malloc(nk * 4, "slot policy");
    sp->prot = rl_calloc(nk, 1, "slot policy");
    sp->plist = rl_malloc(nk * 4, "slot policy");
    if (!sp->first || !sp->size || !sp->nfree || !sp->head || !sp->tail || !sp->bound || !sp->freel ||
        !sp->key || !sp->newer || !sp->older || !sp->pins || !sp->pool || !sp->pf || !sp->index ||
        !sp->kpool || !sp->prot || !sp->plist)
        goto fail;
    int f = 0;
    for (int p = 0; p < n_pools; p++) {
        int n = pool_slots[p];
        sp->first[p] = f;
        sp->size[p] = sp->nfree[p] = n;
        sp->head[p] = sp->tail[p] = sp->bound[p] = -1;
        for (int i = 0; i < n; i++) {
            int32_t s = f + i;
            sp->key[s] = sp->newer[s] = sp->older[s] = -1;
            sp->pool[s] = p;
            sp->freel[f + i] = f + n - 1 - i; /* stack: the pool's lowest slot on top */
        }
        f += n;
    }
    for (int k = 0; k < n_keys; k++) {
        if (key_pool[k] < 0 || key_pool[k] >= n_pools) {
            rl_seterr("slot policy: key %d in pool %d of %d (internal)", k, key_pool[k], n_pools);
            goto fail;
        }
        sp->index[k] = -1;
        sp->kpool[k] = key_pool[k];
    }
    return sp;
fail:
    slot_policy_free(sp);
    return NULL;
}

void slot_policy_free(slot_policy *sp) {
    if (!sp) return;
    free(sp->first), free(sp->size), free(sp->nfree), free(sp->head), free(sp->tail), free(sp->bound);
    free(sp->freel), free(sp->key), free(sp->newer), free(sp->older), free(sp->pins), free(sp->pool);
    free(sp->pf), free(sp->index), free(sp->kpool), free(sp->prot), free(sp->plist);
    free(sp);
}

int slot_policy_n_slots(const slot_policy *sp) { return sp->n_slots; }
int slot_policy_first(const slot_policy *sp, int pool) { return sp->first[pool]; }
int slot_policy_size(const slot_policy *sp, int pool) { return sp->size[pool]; }
int slot_policy_pool_of(const slot_policy *sp, int32_t key) { return sp->kpool[key]; }
int32_t slot_policy_lookup(const slot_policy *sp, int32_t key) { return sp->index[key]; }
int32_t slot_policy_key(const slot_policy *sp, int32_t slot) { return sp->key[slot]; }
int slot_policy_pins(const slot_policy *sp, int32_t slot) { return sp->pins[slot]; }
bool slot_policy_prefetched(const slot_policy *sp, int32_t slot) { return sp->pf[slot] != 0; }

/* ---- recency lists ----------------------------------------------------------------------- */

static void lru_unlink(slot_policy *sp, int32_t s) {
    int p = sp->pool[s];
    if (sp->bound[p] == s) sp->bound[p] = sp->older[s]; /* everything older is still protected */
    if (sp->newer[s] >= 0) sp->older[sp->newer[s]] = sp->older[s];
    else sp->head[p] = sp->older[s];
    if (sp->older[s] >= 0) sp->newer[sp->older[s]] = sp->newer[s];
    else sp->tail[p] = sp->newer[s];
    sp->newer[s] = sp->older[s] = -1;
}

static void lru_push_head(slot_policy *sp, int32_t s) {
    int p = sp->pool[s];
    sp->newer[s] = -1;
    sp->older[s] = sp->head[p];
    if (sp->head[p] >= 0) sp->newer[sp->head[p]] = s;
    else sp->tail[p] = s;
    sp->head[p] = s;
}

static void lru_push_tail(slot_policy *sp, int32_t s) {
    int p = sp->pool[s];
    sp->older[s] = -1;
    sp->newer[s] = sp->tail[p];
    if (sp->tail[p] >= 0) sp->older[sp->tail[p]] = s;
    else sp->head[p] = s;
    sp->tail[p] = s;
}

/* ---- a selection ------------------------------------------------------------------------- */

bool slot_policy_hit(slot_policy *sp, int32_t s) {
    RL_ASSERT(sp->key[s] >= 0);
    if (sp->pins[s]++ == 0) lru_unlink(sp, s);
    sp->st.hits++;
    if (!sp->pf[s]) return false;
    sp->pf[s] = 0;
    sp->st.pf_used++;
    return true;
}

void slot_policy_pin(slot_policy *sp, int32_t s) {
    RL_ASSERT(sp->key[s] >= 0 && sp->pins[s] > 0);
    sp->pins[s]++;
}

void slot_policy_unpin(slot_policy *sp, int32_t s) {
    RL_ASSERT(sp->key[s] >= 0 && sp->pins[s] > 0);
    if (--sp->pins[s] == 0) lru_push_head(sp, s);
}

void slot_policy_touch(slot_policy *sp, int32_t s) {
    if (sp->key[s] < 0 || sp->pins[s]) return;
    lru_unlink(sp, s);
    lru_push_head(sp, s);
}

void slot_policy_demote(slot_policy *sp, int32_t s) {
    if (sp->key[s] < 0 || sp->pins[s]) return;
    lru_unlink(sp, s);
    lru_push_tail(sp, s);
    sp->bound[sp->pool[s]] = -1; /* the new tail may be unprotected: a prefetch's search starts over */
}

/* ---- replacement ------------------------------------------------------------------------- */

int32_t slot_policy_victim(slot_policy *sp, int p, bool prefetch) {
    if (sp->nfree[p]) return sp->freel[sp->first[p] + sp->nfree[p] - 1];
    if (!prefetch) return sp->tail[p];
    int32_t s = sp->bound[p] >= 0 ? sp->newer[sp->bound[p]] : sp->tail[p];
    while (s >= 0 && sp->prot[sp->key[s]]) {
        sp->bound[p] = s;
        s = sp->newer[s];
    }
    if (s < 0) sp->st.pf_refused++;
    return s;
}

/* Key k into slot s (a free slot on top of the stack, or an unpinned resident entry, evicted). */
static void place(slot_policy *sp, int32_t s, int32_t k) {
    int p = sp->pool[s];
    RL_ASSERT(sp->kpool[k] == p && sp->index[k] < 0 && sp->pins[s] == 0);
    if (sp->key[s] < 0) { /* free: the top of the stack (victim, or just dropped) */
        RL_ASSERT(sp->nfree[p] > 0 && sp->freel[sp->first[p] + sp->nfree[p] - 1] == s);
        sp->nfree[p]--;
    } else { /* an unpinned resident entry: evicted */
        lru_unlink(sp, s);
        sp->index[sp->key[s]] = -1;
        sp->st.evictions++;
        if (sp->pf[s]) sp->st.pf_wasted++;
    }
    sp->key[s] = k;
    sp->index[k] = s;
}

void slot_policy_fill(slot_policy *sp, int32_t s, int32_t k, bool prefetch) {
    place(sp, s, k);
    sp->pf[s] = prefetch;
    if (prefetch) {
        lru_push_head(sp, s);
        sp->st.pf_loads++;
    } else {
        sp->pins[s] = 1;
        sp->st.misses++;
    }
}

void slot_policy_fill_kept(slot_policy *sp, int32_t s, int32_t k) {
    place(sp, s, k);
    sp->pf[s] = false;
    sp->pins[s] = 1;
    sp->st.kept++;
}

void slot_policy_drop(slot_policy *sp, int32_t s) {
    if (sp->key[s] < 0) return;
    int p = sp->pool[s];
    if (sp->pins[s] == 0) lru_unlink(sp, s);
    sp->index[sp->key[s]] = -1;
    sp->key[s] = -1;
    sp->pins[s] = 0;
    if (sp->pf[s]) sp->st.pf_wasted++;
    sp->pf[s] = 0;
    sp->freel[sp->first[p] + sp->nfree[p]++] = s;
}

/* ---- the protected set ------------------------------------------------------------------- */

void slot_policy_protect(slot_policy *sp, int32_t k) {
    if (sp->prot[k]) return;
    sp->prot[k] = 1;
    sp->plist[sp->nprot++] = k;
}

void slot_policy_protect_range(slot_policy *sp, int32_t k0, int n) {
    for (int i = 0; i < n; i++) slot_policy_protect(sp, k0 + i);
}

void slot_policy_protect_clear(slot_policy *sp) {
    for (int i = 0; i < sp->nprot; i++) sp->prot[sp->plist[i]] = 0;
    sp->nprot = 0;
    for (int p = 0; p < sp->n_pools; p++) sp->bound[p] = -1;
}

bool slot_policy_protected(const slot_policy *sp, int32_t k) { return sp->prot[k] != 0; }

/* ---- observability ----------------------------------------------------------------------- */

int slot_policy_order(const slot_policy *sp, int pool, int32_t *keys, int max) {
    int n = 0;
    for (int32_t s = sp->head[pool]; s >= 0 && n < max; s = sp->older[s]) keys[n++] = sp->key[s];
    return n;
}

void slot_policy_get_stats(const slot_policy *sp, slot_stats *out) { *out = sp->st; }

void slot_policy_reset_stats(slot_policy *sp) {
    memset(&sp->st, 0, sizeof sp->st);
    if (sp->n_slots) memset(sp->pf, 0, (size_t)sp->n_slots);
}

static int check_pool(const slot_policy *sp, int p, uint8_t *seen) {
    const int f = sp->first[p], n = sp->size[p];
    int nlru = 0, npin = 0, nkeyed = 0;
    bool in_bound = sp->bound[p] < 0;
    for (int32_t s = sp->head[p], prev = -1; s >= 0; prev = s, s = sp->older[s]) {
        if (s < f || s >= f + n || sp->newer[s] != prev)
            return rl_seterr("slot policy: pool %d: recency links broken at slot %d", p, s);
        if (sp->key[s] < 0 || sp->pins[s])
            return rl_seterr("slot policy: pool %d: slot %d in the recency list but free or pinned", p, s);
        if (++nlru > n) return rl_seterr("slot policy: pool %d: recency list loops", p);
        if (sp->older[s] < 0 && sp->tail[p] != s) return rl_seterr("slot policy: pool %d: tail wrong", p);
        if (s == sp->bound[p]) in_bound = true; /* from the bound to the tail: all protected */
        if (in_bound && sp->bound[p] >= 0 && !sp->prot[sp->key[s]])
            return rl_seterr("slot policy: pool %d: unprotected slot %d behind the bound", p, s);
    }
    if (!in_bound) return rl_seterr("slot policy: pool %d: bound %d not in the list", p, sp->bound[p]);
    if (sp->head[p] < 0 && sp->tail[p] >= 0)
        return rl_seterr("slot policy: pool %d: tail of an empty list", p);
    for (int i = 0; i < sp->nfree[p]; i++) {
        int32_t s = sp->freel[f + i];
        if (s < f || s >= f + n || sp->key[s] >= 0 || sp->pins[s] || seen[s - f]++)
            return rl_seterr("slot policy: pool %d: free stack entry %d wrong", p, s);
    }
    for (int32_t s = f; s < f + n; s++) {
        if (sp->key[s] < 0) {
            if (sp->pins[s] || sp->pf[s]) return rl_seterr("slot policy: free slot %d pinned or marked", s);
            continue;
        }
        nkeyed++;
        npin += sp->pins[s] > 0;
        if (sp->key[s] >= sp->n_keys || sp->index[sp->key[s]] != s || sp->kpool[sp->key[s]] != p)
            return rl_seterr("slot policy: slot %d holds key %d but the index disagrees", s, sp->key[s]);
    }
    if (nkeyed + sp->nfree[p] != n || nlru + npin != nkeyed)
        return rl_seterr("slot policy: pool %d: %d in the list + %d pinned + %d free != %d slots", p, nlru,
                         npin, sp->nfree[p], n);
    return 0;
}

int slot_policy_check(const slot_policy *sp) {
    for (int k = 0; k < sp->n_keys; k++) {
        int32_t s = sp->index[k];
        if (s >= 0 && (s >= sp->n_slots || sp->key[s] != k))
            return rl_seterr("slot policy: index of key %d -> slot %d is inconsistent", k, s);
    }
    int n_prot = 0;
    for (int k = 0; k < sp->n_keys; k++) n_prot += sp->prot[k];
    if (n_prot != sp->nprot)
        return rl_seterr("slot policy: %d protected keys, list of %d", n_prot, sp->nprot);
    int rc = 0, mx = 1;
    for (int p = 0; p < sp->n_pools; p++)
        if (sp->size[p] > mx) mx = sp->size[p];
    uint8_t *seen = rl_malloc((size_t)mx, "slot policy check");
    if (!seen) return -1;
    for (int p = 0; p < sp->n_pools && !rc; p++) {
        memset(seen, 0, (size_t)mx);
        rc = check_pool(sp, p, seen);
    }
    free(seen);
    return rc;
}
