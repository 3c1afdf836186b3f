/* test_slot_policy.c — the slot policy both expert cache tiers share (src/cache/slot_policy.c) on
 * hand-worked traces: every expected slot, victim and recency order below is worked out by hand
 * in the comment beside it (orders are written most recent first). Then a random trace against
 * an independent reference (timestamps instead of lists, a linear scan instead of the walk with
 * its remembered bound): the same victim at every step. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "cache/slot_policy.h"

/* A demand use of key in pool (the current token needs it): a hit pins the resident slot, a miss
 * fills the policy's victim (pinned). Returns the slot, or -1 when every slot is pinned. */
static int32_t use(slot_policy *sp, int pool, int32_t key) {
    int32_t s = slot_policy_lookup(sp, key);
    if (s >= 0) {
        slot_policy_hit(sp, s);
        return s;
    }
    s = slot_policy_victim(sp, pool, false);
    if (s >= 0) slot_policy_fill(sp, s, key, false);
    return s;
}

/* A prefetch of key: the victim (never a protected entry) filled, unpinned at the MRU end. */
static int32_t prefetch(slot_policy *sp, int pool, int32_t key) {
    int32_t s = slot_policy_victim(sp, pool, true);
    if (s >= 0) slot_policy_fill(sp, s, key, true);
    return s;
}

/* The recency list of pool as "k k k", most recent first. */
static const char *order(const slot_policy *sp, int pool) {
    static char buf[256];
    int32_t keys[32];
    int n = slot_policy_order(sp, pool, keys, 32), o = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "%s%d", i ? " " : "", keys[i]);
    return buf;
}

#define ORDER(sp, pool, want)                                                                                \
    CHECK(!strcmp(order(sp, pool), want), "order '%s', want '%s'", order(sp, pool), want)
#define OK(sp) CHECK(slot_policy_check(sp) == 0, "check: %s", rl_lasterr())

static slot_policy *one_pool(int slots, int n_keys) {
    int kp[64] = {0}; /* every key in pool 0 */
    slot_policy *sp = slot_policy_new(1, &slots, n_keys, kp);
    CHECK(sp != NULL, "new: %s", rl_lasterr());
    return sp;
}

static void test_lru_and_pins(void) {
    slot_policy *sp = one_pool(3, 10);
    if (!sp) return;
    /* free slots are taken lowest first: keys 1, 2, 3 miss into slots 0, 1, 2, no eviction;
     * each released at once (a one-expert selection), so the last one is the most recent */
    CHECK(use(sp, 0, 1) == 0, "1 -> slot 0");
    slot_policy_unpin(sp, 0);
    CHECK(use(sp, 0, 2) == 1, "2 -> slot 1");
    slot_policy_unpin(sp, 1);
    CHECK(use(sp, 0, 3) == 2, "3 -> slot 2");
    slot_policy_unpin(sp, 2);
    ORDER(sp, 0, "3 2 1");
    OK(sp);
    /* re-touch: key 1 hits slot 0 and, released, becomes the most recent */
    CHECK(use(sp, 0, 1) == 0, "1 hits slot 0");
    slot_policy_unpin(sp, 0);
    ORDER(sp, 0, "1 3 2");
    /* full: key 4 evicts the LRU tail, key 2 (slot 1); then key 5 evicts key 3 (slot 2) */
    CHECK(use(sp, 0, 4) == 1 && slot_policy_lookup(sp, 2) == -1, "4 evicts 2 from slot 1");
    slot_policy_unpin(sp, 1);
    CHECK(use(sp, 0, 5) == 2 && slot_policy_lookup(sp, 3) == -1, "5 evicts 3 from slot 2");
    slot_policy_unpin(sp, 2);
    ORDER(sp, 0, "5 4 1");
    OK(sp);
    /* a selection {1, 6}: the hit on 1 pins it first (it leaves the list), so the miss 6 cannot
     * take it although 1 was the LRU tail: 6 evicts 4 (slot 1) */
    CHECK(use(sp, 0, 1) == 0 && slot_policy_pins(sp, 0) == 1, "1 pinned");
    ORDER(sp, 0, "5 4");
    CHECK(use(sp, 0, 6) == 1 && slot_policy_lookup(sp, 4) == -1, "6 evicts 4, not the pinned 1");
    ORDER(sp, 0, "5");
    OK(sp);
    /* a repeated id pins twice: the first release keeps it pinned */
    slot_policy_pin(sp, 0);
    slot_policy_unpin(sp, 0);
    CHECK(slot_policy_pins(sp, 0) == 1, "still pinned once");
    ORDER(sp, 0, "5");
    /* release in selection order, 1 then 6: 6 ends the most recent */
    slot_policy_unpin(sp, 0);
    slot_policy_unpin(sp, 1);
    ORDER(sp, 0, "6 1 5");
    /* a selection as large as the pool, {7, 8, 9}: each miss pinned as it fills, so the victims
     * come in LRU order: 5 (slot 2), 1 (slot 0), 6 (slot 1) */
    CHECK(use(sp, 0, 7) == 2 && use(sp, 0, 8) == 0 && use(sp, 0, 9) == 1, "7 8 9 -> slots 2 0 1");
    ORDER(sp, 0, "");
    /* a fourth expert while every slot is pinned: no victim, demand or prefetch (the tier reports
     * its capacity error; the refused prefetch is counted) */
    CHECK(slot_policy_victim(sp, 0, false) == -1, "demand: nothing to evict");
    CHECK(slot_policy_victim(sp, 0, true) == -1, "prefetch: nothing to evict");
    OK(sp);
    slot_policy_unpin(sp, 2); /* 7, 8, 9 released in selection order */
    slot_policy_unpin(sp, 0);
    slot_policy_unpin(sp, 1);
    ORDER(sp, 0, "9 8 7");
    /* hits: 1 twice; misses: 1 2 3 4 5 6 7 8 9; evictions: 2 3 4 5 1 6 */
    slot_stats st;
    slot_policy_get_stats(sp, &st);
    CHECK(st.hits == 2 && st.misses == 9 && st.evictions == 6 && st.pf_refused == 1 && st.pf_loads == 0,
          "hits %llu misses %llu evictions %llu refused %llu", (unsigned long long)st.hits,
          (unsigned long long)st.misses, (unsigned long long)st.evictions, (unsigned long long)st.pf_refused);
    OK(sp);
    slot_policy_free(sp);
}

/* Keys 10 11 12 13 by demand into slots 0 1 2 3 of a 4-slot pool, each released at once. */
static void fill_10_to_13(slot_policy *sp) {
    for (int k = 10; k < 14; k++) {
        CHECK(use(sp, 0, k) == k - 10, "%d -> slot %d", k, k - 10);
        slot_policy_unpin(sp, k - 10);
    }
    ORDER(sp, 0, "13 12 11 10");
}

static void test_prefetch_protection(void) {
    slot_policy *sp = one_pool(4, 20);
    if (!sp) return;
    fill_10_to_13(sp);
    /* the next layer's predictions {10, 11, 14, 15}: protected this step (not touched here: moving
     * resident predictions to the MRU end is the tier's choice) */
    slot_policy_protect(sp, 10);
    slot_policy_protect(sp, 11);
    slot_policy_protect(sp, 14);
    slot_policy_protect(sp, 15);
    /* prefetch 14: the tail 10 and the next 11 are predictions; the oldest unprotected entry is
     * 12 (slot 2); 14 goes in at the MRU end, marked as a prefetch */
    CHECK(prefetch(sp, 0, 14) == 2 && slot_policy_lookup(sp, 12) == -1, "14 evicts 12 from slot 2");
    CHECK(slot_policy_prefetched(sp, 2) && slot_policy_pins(sp, 2) == 0, "14 marked, unpinned");
    ORDER(sp, 0, "14 13 11 10");
    OK(sp);
    /* prefetch 15: past 10 and 11 again, 13 (slot 3) */
    CHECK(prefetch(sp, 0, 15) == 3, "15 evicts 13 from slot 3");
    ORDER(sp, 0, "15 14 11 10");
    /* prefetch 16, predicted too: every entry is now a prediction: refused, nothing changes
     * (a prefetch never evicts a prediction) */
    slot_policy_protect(sp, 16);
    CHECK(prefetch(sp, 0, 16) == -1 && slot_policy_lookup(sp, 16) == -1, "16 refused");
    ORDER(sp, 0, "15 14 11 10");
    OK(sp);
    /* a demand load is not bound by the protection: 16 needed now evicts the tail 10 (slot 0) */
    CHECK(use(sp, 0, 16) == 0 && slot_policy_lookup(sp, 10) == -1, "16 on demand evicts 10");
    slot_policy_unpin(sp, 0);
    ORDER(sp, 0, "16 15 14 11");
    /* 14 is hit: its first hit counts the prefetch used (and clears the mark), a second does not */
    CHECK(slot_policy_lookup(sp, 14) == 2 && slot_policy_hit(sp, 2), "14: a prefetch used");
    slot_policy_unpin(sp, 2);
    CHECK(!slot_policy_hit(sp, 2), "14 again: no longer a prefetch");
    slot_policy_unpin(sp, 2);
    ORDER(sp, 0, "14 16 15 11");
    OK(sp);
    /* the step ends: the protection is cleared; prefetch 17 takes the tail 11 (slot 1) */
    slot_policy_protect_clear(sp);
    CHECK(!slot_policy_protected(sp, 11), "cleared");
    CHECK(prefetch(sp, 0, 17) == 1, "17 evicts 11 from slot 1");
    /* prefetch 18 evicts 15 (slot 3), a prefetch never hit: wasted */
    CHECK(prefetch(sp, 0, 18) == 3, "18 evicts 15 from slot 3");
    ORDER(sp, 0, "18 17 14 16");
    OK(sp);
    /* prefetch loads 14 15 17 18; used 14; wasted 15; refused 16; evictions 12 13 10 11 15;
     * misses 10 11 12 13 16; hits 14 twice */
    slot_stats st;
    slot_policy_get_stats(sp, &st);
    CHECK(st.pf_loads == 4 && st.pf_used == 1 && st.pf_wasted == 1 && st.pf_refused == 1,
          "prefetch loads %llu used %llu wasted %llu refused %llu", (unsigned long long)st.pf_loads,
          (unsigned long long)st.pf_used, (unsigned long long)st.pf_wasted,
          (unsigned long long)st.pf_refused);
    CHECK(st.evictions == 5 && st.misses == 5 && st.hits == 2, "evictions %llu misses %llu hits %llu",
          (unsigned long long)st.evictions, (unsigned long long)st.misses, (unsigned long long)st.hits);
    slot_policy_free(sp);
}

/* The walk remembers the newest protected entry with only protected ones behind it (the bound);
 * pinning that entry or touching entries must not change which victim is found. */
static void test_touch_and_bound(void) {
    slot_policy *sp = one_pool(4, 8);
    if (!sp) return;
    for (int k = 0; k < 4; k++) use(sp, 0, k), slot_policy_unpin(sp, k); /* key k in slot k */
    ORDER(sp, 0, "3 2 1 0");
    /* touch (what the VRAM tier does to a resident prediction): 0 to the MRU end */
    slot_policy_touch(sp, 0);
    ORDER(sp, 0, "0 3 2 1");
    slot_policy_touch(sp, 0);
    ORDER(sp, 0, "0 3 2 1");
    /* protect {1, 2}: the prefetch victim is 3 (slot 3); the walk stopped its bound at 2 */
    slot_policy_protect(sp, 1);
    slot_policy_protect(sp, 2);
    CHECK(slot_policy_victim(sp, 0, true) == 3, "victim 3");
    OK(sp);
    /* 2 (the bound) is pinned by a hit: it leaves the list; the victim is still 3 */
    slot_policy_hit(sp, 2);
    ORDER(sp, 0, "0 3 1");
    OK(sp);
    CHECK(slot_policy_victim(sp, 0, true) == 3, "victim 3 after the bound left");
    /* released, 2 is the most recent; 3 is still the oldest unprotected */
    slot_policy_unpin(sp, 2);
    ORDER(sp, 0, "2 0 3 1");
    CHECK(slot_policy_victim(sp, 0, true) == 3, "victim 3 again");
    /* a touch of the unprotected 3 leaves 0 the oldest unprotected one */
    slot_policy_touch(sp, 3);
    ORDER(sp, 0, "3 2 0 1");
    CHECK(slot_policy_victim(sp, 0, true) == 0, "victim 0");
    /* a demand victim ignores protection: the tail 1 */
    CHECK(slot_policy_victim(sp, 0, false) == 1, "demand victim 1");
    OK(sp);
    slot_policy_free(sp);
}

static void test_capacity_one(void) {
    const int slots[2] = {1, 0};
    const int kp[5] = {0, 0, 0, 0, 1};
    slot_policy *sp = slot_policy_new(2, slots, 5, kp);
    CHECK(sp != NULL, "new: %s", rl_lasterr());
    if (!sp) return;
    CHECK(slot_policy_first(sp, 1) == 1 && slot_policy_size(sp, 1) == 0 && slot_policy_n_slots(sp) == 1,
          "pools");
    /* 0 takes the only slot; while it is pinned nothing else fits, demand or prefetch */
    CHECK(use(sp, 0, 0) == 0, "0 -> slot 0");
    CHECK(slot_policy_victim(sp, 0, false) == -1 && prefetch(sp, 0, 1) == -1, "pinned: no victim");
    slot_policy_unpin(sp, 0);
    /* 0 is this step's prediction: the prefetch of 1 may not take its slot */
    slot_policy_protect(sp, 0);
    CHECK(prefetch(sp, 0, 1) == -1 && slot_policy_lookup(sp, 0) == 0, "0 protected");
    /* next step: 1 is prefetched into slot 0, then hit: a prefetch used */
    slot_policy_protect_clear(sp);
    CHECK(prefetch(sp, 0, 1) == 0 && slot_policy_lookup(sp, 0) == -1, "1 evicts 0");
    CHECK(slot_policy_hit(sp, 0), "1 hit: used");
    /* the same key again while pinned is one more pin, not a second slot */
    CHECK(use(sp, 0, 1) == 0 && slot_policy_pins(sp, 0) == 2, "1 pinned twice");
    slot_policy_unpin(sp, 0);
    slot_policy_unpin(sp, 0);
    ORDER(sp, 0, "1");
    /* a pool of no slots has no victim at all */
    CHECK(slot_policy_victim(sp, 1, false) == -1 && slot_policy_victim(sp, 1, true) == -1, "empty pool");
    slot_stats st;
    slot_policy_get_stats(sp, &st);
    /* refused: 1 while 0 pinned, 1 while 0 protected, the empty pool's prefetch */
    CHECK(st.pf_refused == 3 && st.pf_loads == 1 && st.pf_used == 1 && st.evictions == 1 && st.hits == 2,
          "refused %llu loads %llu used %llu evictions %llu hits %llu", (unsigned long long)st.pf_refused,
          (unsigned long long)st.pf_loads, (unsigned long long)st.pf_used, (unsigned long long)st.evictions,
          (unsigned long long)st.hits);
    OK(sp);
    slot_policy_free(sp);
}

/* A failed load drops its entry: the slot goes on top of the free stack and is taken next. */
static void test_drop(void) {
    slot_policy *sp = one_pool(3, 8);
    if (!sp) return;
    CHECK(use(sp, 0, 0) == 0 && use(sp, 0, 1) == 1, "0 1 -> slots 0 1");
    /* 1's load failed (still pinned by the selection): it leaves; slot 1 is free again and is
     * taken before slot 2, which was never used (last in, first out) */
    slot_policy_drop(sp, 1);
    CHECK(slot_policy_lookup(sp, 1) == -1 && slot_policy_key(sp, 1) == -1, "1 dropped");
    CHECK(slot_policy_victim(sp, 0, false) == 1, "slot 1 next");
    OK(sp);
    CHECK(use(sp, 0, 2) == 1, "2 -> slot 1");
    slot_policy_unpin(sp, 0);
    slot_policy_unpin(sp, 1);
    ORDER(sp, 0, "2 0");
    /* a prefetch of 3 takes slot 2; its load fails: dropped before any hit, it counts wasted */
    CHECK(prefetch(sp, 0, 3) == 2, "3 -> slot 2");
    slot_policy_drop(sp, 2);
    ORDER(sp, 0, "2 0");
    /* the failed prefetch retried in the same slot (drop, then fill the slot just freed) */
    CHECK(slot_policy_victim(sp, 0, true) == 2, "slot 2 free again");
    slot_policy_fill(sp, 2, 3, true);
    slot_policy_drop(sp, 2);
    slot_policy_fill(sp, 2, 3, false); /* ... and then on demand */
    CHECK(slot_policy_lookup(sp, 3) == 2 && slot_policy_pins(sp, 2) == 1, "3 in slot 2, pinned");
    slot_stats st;
    slot_policy_get_stats(sp, &st);
    CHECK(st.pf_loads == 2 && st.pf_wasted == 2 && st.evictions == 0 && st.misses == 4,
          "loads %llu wasted %llu evictions %llu misses %llu", (unsigned long long)st.pf_loads,
          (unsigned long long)st.pf_wasted, (unsigned long long)st.evictions, (unsigned long long)st.misses);
    /* reset: the counters and the marks (a later hit is not a prefetch's first use) */
    /* (3 is pinned in slot 2; the tail of "2 0" is 0, in slot 0) */
    CHECK(prefetch(sp, 0, 4) == 0 && slot_policy_prefetched(sp, 0), "4 prefetched into slot 0 (evicts 0)");
    slot_policy_reset_stats(sp);
    CHECK(!slot_policy_prefetched(sp, 0) && !slot_policy_hit(sp, 0), "reset clears the marks");
    slot_policy_get_stats(sp, &st);
    CHECK(st.hits == 1 && st.pf_used == 0 && st.evictions == 0, "counters from zero");
    OK(sp);
    slot_policy_free(sp);
}

/* Pools (RAM size classes, VRAM layers): a key only ever takes its own pool's slots. */
static void test_pools(void) {
    const int slots[2] = {2, 1};
    const int kp[6] = {0, 0, 0, 0, 1, 1};
    slot_policy *sp = slot_policy_new(2, slots, 6, kp);
    CHECK(sp != NULL, "new: %s", rl_lasterr());
    if (!sp) return;
    CHECK(slot_policy_first(sp, 1) == 2 && slot_policy_pool_of(sp, 5) == 1, "pool 1 = slot 2");
    CHECK(use(sp, 0, 0) == 0 && use(sp, 0, 1) == 1, "0 1 -> slots 0 1");
    slot_policy_unpin(sp, 0);
    slot_policy_unpin(sp, 1);
    /* 4 takes pool 1's own slot; 5 then evicts 4, never pool 0's tail 0 (older as it is) */
    CHECK(use(sp, 1, 4) == 2, "4 -> slot 2");
    slot_policy_unpin(sp, 2);
    CHECK(use(sp, 1, 5) == 2 && slot_policy_lookup(sp, 4) == -1 && slot_policy_lookup(sp, 0) == 0,
          "5 evicts 4");
    slot_policy_unpin(sp, 2);
    ORDER(sp, 0, "1 0");
    ORDER(sp, 1, "5");
    OK(sp);
    slot_policy_free(sp);
    const int bad[2] = {0, 2};
    CHECK(slot_policy_new(2, slots, 2, bad) == NULL && strstr(rl_lasterr(), "pool 2"), "key of no pool: %s",
          rl_lasterr());
}

/* ---- random trace against a reference --------------------------------------------------- */

/* The reference: per slot its key, pins, mark and last-use time; free slots as a plain stack;
 * the victim by a linear scan for the oldest unpinned (and, prefetching, unprotected) entry. */
typedef struct {
    int key[16], pins[16], pf[16];
    uint64_t t[16], now;
    int freel[16], nfree;
    uint8_t prot[64];
} ref;

static int ref_victim(const ref *r, int n, bool prefetch) {
    if (r->nfree) return r->freel[r->nfree - 1];
    int best = -1;
    for (int s = 0; s < n; s++)
        if (r->key[s] >= 0 && !r->pins[s] && !(prefetch && r->prot[r->key[s]]) &&
            (best < 0 || r->t[s] < r->t[best]))
            best = s;
    return best;
}

static void test_random_vs_reference(void) {
    enum { N = 6, NK = 24 };
    slot_policy *sp = one_pool(N, NK);
    if (!sp) return;
    ref r = {.nfree = N};
    for (int s = 0; s < N; s++) r.key[s] = -1, r.freel[s] = N - 1 - s;
    uint64_t x = 12345;
    int bad = 0, pinned[64], np = 0;
    for (int it = 0; it < 20000 && !bad; it++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int op = (int)((x >> 33) % 10), k = (int)((x >> 40) % NK);
        int32_t s = slot_policy_lookup(sp, k);
        if (op < 4) { /* a demand use (kept pinned until a release op) */
            if (s >= 0 && np < 60) {
                slot_policy_hit(sp, s);
                r.pins[s]++, r.pf[s] = 0;
                pinned[np++] = s;
            } else if (s < 0 && np < 60) {
                int v = slot_policy_victim(sp, 0, false), w = ref_victim(&r, N, false);
                if (v != w) bad = 1;
                else if (v >= 0) {
                    slot_policy_fill(sp, v, k, false);
                    if (r.key[v] < 0) r.nfree--;
                    r.key[v] = k, r.pins[v] = 1, r.pf[v] = 0;
                    pinned[np++] = v;
                }
            }
        } else if (op < 6 && np) { /* release everything, in order */
            for (int i = 0; i < np; i++) {
                slot_policy_unpin(sp, pinned[i]);
                if (--r.pins[pinned[i]] == 0) r.t[pinned[i]] = ++r.now;
            }
            np = 0;
        } else if (op < 8 && s < 0) { /* a prefetch */
            int v = slot_policy_victim(sp, 0, true), w = ref_victim(&r, N, true);
            if (v != w) bad = 2;
            else if (v >= 0) {
                slot_policy_fill(sp, v, k, true);
                if (r.key[v] < 0) r.nfree--;
                r.key[v] = k, r.pf[v] = 1, r.t[v] = ++r.now;
            }
        } else if (op == 8) { /* the protected set grows, or a new step clears it */
            if ((x >> 20) % 4) slot_policy_protect(sp, k), r.prot[k] = 1;
            else slot_policy_protect_clear(sp), memset(r.prot, 0, sizeof r.prot);
        } else if (s >= 0 && !r.pins[s]) { /* a touch, or now and then a failed load (drop) */
            if ((x >> 20) % 3) {
                slot_policy_touch(sp, s);
                r.t[s] = ++r.now;
            } else {
                slot_policy_drop(sp, s);
                r.key[s] = -1, r.pf[s] = 0, r.freel[r.nfree++] = s;
            }
        }
        if (slot_policy_check(sp)) bad = 3;
        for (int t = 0; t < N && !bad; t++)
            if (slot_policy_key(sp, t) != r.key[t] || slot_policy_pins(sp, t) != r.pins[t]) bad = 4;
        if (bad)
            fprintf(stderr, "random trace: step %d op %d key %d: failure %d (%s)\n", it, op, k, bad,
                    rl_lasterr());
    }
    CHECK(!bad, "the policy and the reference disagree");
    slot_policy_free(sp);
}

/* Demote: an unpinned entry to the LRU end, the next victim; a pinned one stays; a prefetch's
 * protected-tail bound is reset (the demoted tail may be unprotected). */
static void test_demote(void) {
    slot_policy *sp = one_pool(4, 20);
    if (!sp) return;
    fill_10_to_13(sp);
    slot_policy_demote(sp, 3); /* 13 */
    ORDER(sp, 0, "12 11 10 13");
    slot_policy_demote(sp, 1); /* 11: the last demoted leaves first */
    ORDER(sp, 0, "12 10 13 11");
    OK(sp);
    CHECK(use(sp, 0, 14) == 1 && slot_policy_lookup(sp, 11) == -1, "14 evicts the demoted 11");
    slot_policy_demote(sp, 1); /* 14 is pinned: no-op */
    CHECK(slot_policy_pins(sp, 1) == 1, "a pinned entry is not demoted");
    slot_policy_unpin(sp, 1);
    ORDER(sp, 0, "14 12 10 13");
    /* a prefetch scan leaves its bound past protected tail entries; a demote puts an unprotected
     * entry behind it, which the next prefetch must take */
    slot_policy_protect(sp, 13);
    slot_policy_protect(sp, 10);
    CHECK(prefetch(sp, 0, 15) == 2 && slot_policy_lookup(sp, 12) == -1, "15 evicts 12 past protected 13 10");
    ORDER(sp, 0, "15 14 10 13");
    slot_policy_demote(sp, 1); /* 14 (slot 1), unprotected, to the tail */
    ORDER(sp, 0, "15 10 13 14");
    OK(sp);
    CHECK(prefetch(sp, 0, 16) == 1 && slot_policy_lookup(sp, 14) == -1, "16 evicts the demoted 14");
    slot_policy_protect_clear(sp);
    slot_policy_demote(sp, 3); /* 13 again, to the tail */
    CHECK(slot_policy_victim(sp, 0, false) == 3, "the demoted 13 is the demand victim");
    OK(sp);
    slot_policy_free(sp);
}

/* A key a faster tier handed back (victim caching): placed like a demand fill (pinned, may evict
 * the LRU tail) but counted kept, not a miss; unpinned it goes to the most recent end. */
static void test_fill_kept(void) {
    slot_policy *sp = one_pool(4, 20);
    if (!sp) return;
    fill_10_to_13(sp);
    slot_stats st0, st;
    slot_policy_get_stats(sp, &st0);
    const int32_t v = slot_policy_victim(sp, 0, false);
    CHECK(slot_policy_key(sp, v) == 10, "victim %d, want the LRU tail 10", slot_policy_key(sp, v));
    slot_policy_fill_kept(sp, v, 15);
    CHECK(slot_policy_pins(sp, v) == 1 && slot_policy_lookup(sp, 15) == v && slot_policy_lookup(sp, 10) == -1,
          "kept 15 pinned in 10's slot");
    slot_policy_get_stats(sp, &st);
    CHECK(st.kept == st0.kept + 1 && st.misses == st0.misses && st.evictions == st0.evictions + 1,
          "kept %llu misses %llu evictions %llu", (unsigned long long)st.kept, (unsigned long long)st.misses,
          (unsigned long long)st.evictions);
    slot_policy_unpin(sp, v);
    ORDER(sp, 0, "15 13 12 11");
    OK(sp);
    slot_policy_free(sp);
}

int main(void) {
    test_fill_kept();
    test_demote();
    test_lru_and_pins();
    test_prefetch_protection();
    test_touch_and_bound();
    test_capacity_one();
    test_drop();
    test_pools();
    test_random_vs_reference();
    return check_done("test_slot_policy");
}
