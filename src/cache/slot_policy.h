/* slot_policy.h — the one slot replacement policy of both expert cache tiers: the RAM cache
 * (expert_cache.c: slots in host memory, filled by pread) and the VRAM tier (vram_slots.c: slots
 * in device memory, filled by copies). The policy only decides; it holds no payload and does no
 * I/O. A tier keeps its own storage and load states, asks the policy which slot a key goes to,
 * and moves the bytes itself. Hand-worked traces: tests/c/test_slot_policy.c. Design:
 * docs/EXPERT_CACHE.md, "One slot policy".
 *
 * Keys are 0..n_keys-1 (a tier's (layer, expert) pair: layer * n_expert + expert). Slots are
 * 0..n_slots-1, grouped into pools (a RAM size class, a VRAM layer): pool p owns the slots
 * [first(p), first(p) + size(p)) and every key belongs to one pool (key_pool), whose slots are
 * the only ones it can take. Per pool, each slot is in exactly one of three places:
 *   free     on the pool's free stack (the lowest slot first at the start; a freed slot is
 *            taken next: last in, first out);
 *   LRU      holds a key, unpinned, in the pool's recency list (most recently used first);
 *   pinned   holds a key in use by the current selection (a count: a repeated id pins twice);
 *            never a victim and out of the recency list until unpinned.
 *
 * Victims: a new key takes a free slot if there is one, else the least recently used unpinned
 * entry of its pool. A demand load (the current token needs it now) may evict any unpinned
 * entry. A prefetch may not evict a protected key (the "protected this step" set: the tier marks
 * the predictions, or whole layers, before planning its prefetches): it takes the least recently
 * used unprotected entry, or is refused. Prefetched entries go to the most recent end unpinned
 * and carry a mark until their first hit (used) or until they leave unused (wasted).
 *
 * Every decision is a deterministic function of the call sequence. Nothing here is thread-safe:
 * a tier that shares the state with other threads holds its own lock around every call. */
#ifndef RL_SLOT_POLICY_H
#define RL_SLOT_POLICY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct slot_policy slot_policy;

typedef struct {
    uint64_t hits;       /* slot_policy_hit calls */
    uint64_t misses;     /* demand fills */
    uint64_t evictions;  /* fills that replaced a resident key */
    uint64_t pf_loads;   /* prefetch fills */
    uint64_t pf_used;    /* ... hit before they left (counted at the first hit) */
    uint64_t pf_wasted;  /* ... evicted or dropped before any hit */
    uint64_t pf_refused; /* prefetch victim searches refused: every unpinned entry protected */
    uint64_t kept;       /* fills with a key a faster tier handed back (slot_policy_fill_kept) */
} slot_stats;

/* n_pools pools of pool_slots[p] slots each (0 allowed), numbered pool after pool; key k
 * belongs to pool key_pool[k]. NULL with rl_lasterr on bad input or out of memory. */
slot_policy *slot_policy_new(int n_pools, const int *pool_slots, int n_keys, const int *key_pool);
void slot_policy_free(slot_policy *sp);
int slot_policy_n_slots(const slot_policy *sp);
int slot_policy_first(const slot_policy *sp, int pool); /* first slot of pool */
int slot_policy_size(const slot_policy *sp, int pool);  /* slots of pool */
int slot_policy_pool_of(const slot_policy *sp, int32_t key);

/* ---- queries ----------------------------------------------------------------------------- */
int32_t slot_policy_lookup(const slot_policy *sp, int32_t key); /* slot holding key, or -1 */
int32_t slot_policy_key(const slot_policy *sp, int32_t slot);   /* key in slot, or -1 if free */
int slot_policy_pins(const slot_policy *sp, int32_t slot);
bool slot_policy_prefetched(const slot_policy *sp, int32_t slot); /* a prefetch not hit yet */

/* ---- a selection: hits, pins, release ------------------------------------------------- */
/* The selection needs the key of this resident slot: pin it (out of the recency list), count a
 * hit; the first hit on a prefetched entry counts it used and clears the mark (returns true). */
bool slot_policy_hit(slot_policy *sp, int32_t slot);
/* One more pin on a slot already pinned (a repeated id of the selection); counts nothing. */
void slot_policy_pin(slot_policy *sp, int32_t slot);
/* One pin less; at zero the entry goes to the most recent end (in the order of the calls). */
void slot_policy_unpin(slot_policy *sp, int32_t slot);
/* An unpinned entry to the most recent end (e.g. a prediction already resident); pinned: no-op. */
void slot_policy_touch(slot_policy *sp, int32_t slot);
/* An unpinned entry to the least recent end: the pool's next victim (a key a faster tier now holds,
 * so this tier keeps the others first); pinned: no-op. Entries demoted one after another leave in
 * the reverse order (the last demoted first). */
void slot_policy_demote(slot_policy *sp, int32_t slot);

/* A forward of at least this many rows is a scan: a prompt chunk touches most experts of every layer
 * in layer order, a cycle longer than a bounded tier, which plain LRU answers by evicting exactly what
 * the next chunk needs first. Decode (1 row) and verify rows (<= 16) are not. One threshold for both
 * tiers: the RAM cache's scans (expert_cache.h) and the VRAM slots' streaming (vram_slots.h). */
#define SLOT_SCAN_ROWS 64

/* ---- replacement ----------------------------------------------------------------------- */
/* The slot a new key of pool should take: the top of the free stack, else the least recently
 * used unpinned entry; prefetch: skipping protected keys. -1 if none (a refused prefetch is
 * counted). Changes no entry: the tier may wait for the victim's I/O before slot_policy_fill. */
int32_t slot_policy_victim(slot_policy *sp, int pool, bool prefetch);
/* Put key (not resident) into slot: the victim just returned, or a slot just dropped (then on
 * top of the free stack). A resident victim leaves (an eviction; a wasted prefetch if it was
 * one). Demand: the new entry is pinned once and counted a miss. Prefetch: it goes to the most
 * recent end, marked, counted a prefetch load. */
void slot_policy_fill(slot_policy *sp, int32_t slot, int32_t key, bool prefetch);
/* As a demand fill (pinned once; the caller unpins it when its bytes are in), for a key a faster
 * tier handed back (victim caching): counted kept, not a miss. */
void slot_policy_fill_kept(slot_policy *sp, int32_t slot, int32_t key);
/* The entry of slot leaves (its load failed, or was rolled back), pinned or not; the slot goes
 * on top of the free stack. A prefetched entry never hit counts wasted. */
void slot_policy_drop(slot_policy *sp, int32_t slot);

/* ---- the protected set (prefetch never evicts these) ---------------------------------- */
void slot_policy_protect(slot_policy *sp, int32_t key);
void slot_policy_protect_range(slot_policy *sp, int32_t key0, int n); /* keys key0..key0+n-1 */
void slot_policy_protect_clear(slot_policy *sp);
bool slot_policy_protected(const slot_policy *sp, int32_t key);

/* ---- observability --------------------------------------------------------------------- */
/* The keys of pool's recency list, most recent first (at most max of them); returns how many
 * are listed (tests, debugging). */
int slot_policy_order(const slot_policy *sp, int pool, int32_t *keys, int max);
void slot_policy_get_stats(const slot_policy *sp, slot_stats *out);
/* Zero the counters and the prefetch marks (so later counts are of new loads only). */
void slot_policy_reset_stats(slot_policy *sp);
/* Consistency of the index, the free stacks, the recency lists and the pins (tests): 0 or -1
 * (rl_lasterr names the broken invariant). */
int slot_policy_check(const slot_policy *sp);

#endif
