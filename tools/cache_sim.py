#!/usr/bin/env python3
"""Replay an expert route trace against cache policies and print hit rates.

A trace comes from `redlite dump --route-trace FILE` (or RL_ROUTE_TRACE=FILE with any command
that attaches the expert cache). Its first line is a header with the geometry
({"header": {"n_layer", "n_expert", "top_k", "budget", "slot_bytes": [per layer]}}), then one
line per acquire: {"f": forward, "l": layer, "n": rows, "ids": [experts]} — the union of the
experts that layer selected for that forward, which is exactly what the cache is asked for.

Policies (same rules as src/cache/expert_cache.c: all experts of one acquire must be resident at
once, so none of them can be a victim for another):
  lru          one pool of uniform slots of the largest slot size (budget // max size)
  class-lru    one LRU per slot size class; each class gets the same slots per layer
               (budget // sum of slot sizes, at most n_expert) times its layer count
  belady       uniform slots, evict the expert used farthest in the future (the optimum
               for a fixed slot count; unreachable online)
  class-belady Belady inside each size class
  scan-lru, class-scan-lru  the cache as built since 2026-12-07: LRU, except that an acquire of a
               forward of >= SCAN_ROWS rows (a prompt chunk: a scan) puts its misses at the least
               recent end afterwards, the last one first out (SLOT_SCAN_ROWS, docs/EXPERT_CACHE.md)
Prefetch is not simulated: these are the demand misses of each policy alone.

usage: tools/cache_sim.py TRACE [--budget-mib N ...] [--json]
       tools/cache_sim.py TRACE --stats [--frac 0.1 0.2 ...] [--json]

--stats describes the routing itself (needs a trace of one token per forward: `--batch 1`):
per layer the expert-usage entropy (bits; 2^H = the "effective" number of experts; normalised
by log2 E), the share of a token's experts that the previous token also used, and the reuse
distance (tokens since the same layer last used the expert; first uses excluded); then LRU and
Belady hit rates with uniform slots holding --frac of all the traced layers' experts, and
per-layer LRU hit rates with --layer-slots slots per layer (default 64 128: llama.cpp's
expert-cache model, whose published 512-expert top-10 numbers are LRU-64 ~67 %, LRU-128 ~81 %).
"""
import argparse
import heapq
import json
import sys
from collections import OrderedDict


def load(path):
    header, reqs = None, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if "header" in d:
                header = d["header"]
                continue
            reqs.append((d["l"], d.get("n", 1), d["ids"]))
    if header is None:
        sys.exit(f"{path}: no header line (not a Red Lite route trace?)")
    return header, reqs


def classes_for(header, budget, uniform):
    """Return (class of each layer, capacity of each class) following setup_classes()."""
    sizes = header["slot_bytes"]
    E = header["n_expert"]
    nl = len(sizes)
    mx = max(sizes)
    distinct = sorted(set(sizes))
    margin = max(E // 8, header["top_k"])
    per_layer = min(budget // sum(sizes), E)
    count = {d: sum(1 for s in sizes if s == d) for d in distinct}
    use = not uniform and len(distinct) > 1 and all(
        per_layer * count[d] >= min(E + margin, E * count[d]) for d in distinct)
    if not use:
        return [0] * nl, [min(budget // mx, E * nl)]
    cls = [distinct.index(s) for s in sizes]
    cap = [min(per_layer * cls.count(c), E * cls.count(c)) for c in range(len(distinct))]
    return cls, cap


SCAN_ROWS = 64  # src/cache/slot_policy.h SLOT_SCAN_ROWS (tools/tier_sim.py imports it)


def sim_lru(reqs, E, cls, cap, scan=False):
    pools = [OrderedDict() for _ in cap]
    hits = misses = 0
    for layer, rows, ids in reqs:
        pool = pools[cls[layer]]
        keys = [layer * E + e for e in ids]
        for k in keys:
            if k in pool:
                hits += 1
                pool.move_to_end(k)
        need = [k for k in keys if k not in pool]
        misses += len(need)
        if len(keys) > cap[cls[layer]]:
            return None
        cur = set(keys)
        for k in need:
            while len(pool) >= cap[cls[layer]]:
                # least recently used that is not part of the current selection
                for victim in pool:
                    if victim not in cur:
                        break
                del pool[victim]
            pool[k] = True
        if scan and rows >= SCAN_ROWS:  # the release of a scan: its loads to the least recent end
            for k in need:
                pool.move_to_end(k, last=False)
    return hits, misses


def sim_scan_lru(reqs, E, cls, cap):
    return sim_lru(reqs, E, cls, cap, scan=True)


def sim_belady(reqs, E, cls, cap):
    # next use of each access, walking backwards over the flattened request stream
    flat = [(layer * E + e) for layer, _, ids in reqs for e in ids]
    nxt = [0] * len(flat)
    last = {}
    for i in range(len(flat) - 1, -1, -1):
        nxt[i] = last.get(flat[i], float("inf"))
        last[flat[i]] = i
    resident = [dict() for _ in cap]   # key -> next use
    heaps = [[] for _ in cap]          # (-next use, key), lazily invalidated
    hits = misses = 0
    pos = 0
    for layer, _, ids in reqs:
        c = cls[layer]
        res, heap = resident[c], heaps[c]
        keys = [layer * E + e for e in ids]
        if len(keys) > cap[c]:
            return None
        cur = set(keys)
        for j, k in enumerate(keys):
            if k in res:
                hits += 1
            else:
                misses += 1
                held = []
                while len(res) >= cap[c]:
                    negu, victim = heapq.heappop(heap)
                    if res.get(victim) != -negu:
                        continue  # stale entry
                    if victim in cur:
                        held.append((negu, victim))
                        continue
                    del res[victim]
                for h in held:
                    heapq.heappush(heap, h)
            res[k] = nxt[pos + j]
            heapq.heappush(heap, (-res[k], k))
        pos += len(keys)
    return hits, misses


def routing_stats(header, reqs):
    """Per-layer statistics of a one-token-per-forward trace (see the module docstring)."""
    import math
    E, K = header["n_expert"], header["top_k"]
    layers = sorted({layer for layer, _, _ in reqs})
    per = {}
    for L in layers:
        seq = [ids for layer, _, ids in reqs if layer == L]
        cnt = [0] * E
        for ids in seq:
            for e in ids:
                cnt[e] += 1
        tot = sum(cnt)
        h = -sum(c / tot * math.log2(c / tot) for c in cnt if c)
        overlap = [len(set(a) & set(b)) / len(b) for a, b in zip(seq, seq[1:])]
        last, dist = {}, []
        for t, ids in enumerate(seq):
            for e in ids:
                if e in last:
                    dist.append(t - last[e])
                last[e] = t
        dist.sort()
        per[L] = {"layer": L, "tokens": len(seq), "entropy_bits": h, "entropy_norm": h / math.log2(E),
                  "effective_experts": 2 ** h, "max_share": max(cnt) / tot, "unused": cnt.count(0),
                  "prev_token_overlap": sum(overlap) / len(overlap) if overlap else 0.0,
                  "reuse_d1": sum(d == 1 for d in dist) / len(dist) if dist else 0.0,
                  "reuse_le4": sum(d <= 4 for d in dist) / len(dist) if dist else 0.0,
                  "reuse_le16": sum(d <= 16 for d in dist) / len(dist) if dist else 0.0,
                  "reuse_median": dist[len(dist) // 2] if dist else None,
                  "reuse_mean": sum(dist) / len(dist) if dist else None}
    return {"n_expert": E, "top_k": K, "layers": [per[L] for L in layers]}


def frac_runs(header, reqs, fracs):
    """LRU / Belady hit rates with uniform slots = frac of the traced layers' experts."""
    E = header["n_expert"]
    nl = len({layer for layer, _, _ in reqs})
    lookups = sum(len(ids) for _, _, ids in reqs)
    tokens = sum(n for layer, n, _ in reqs if layer == min(r[0] for r in reqs)) or 1
    out = []
    for f in fracs:
        slots = int(round(f * E * nl))
        cls, cap = [0] * len(header["slot_bytes"]), [slots]
        for name, sim in (("lru", sim_lru), ("belady", sim_belady)):
            r = sim(reqs, E, cls, cap)
            if r is None:
                out.append({"frac": f, "slots": slots, "policy": name, "error": "a selection exceeds the slots"})
            else:
                out.append({"frac": f, "slots": slots, "policy": name, "hit_rate": r[0] / max(lookups, 1),
                            "misses_per_token": r[1] / tokens})
    return out


def per_layer_lru(reqs, E, slots):
    """Per-layer LRU with `slots` entries per layer (llama.cpp's expert-cache model): hit rate."""
    pools, hits, misses = {}, 0, 0
    for layer, _, ids in reqs:
        pool = pools.setdefault(layer, OrderedDict())
        cur = set(ids)
        for e in ids:
            if e in pool:
                hits += 1
                pool.move_to_end(e)
        for e in ids:
            if e in pool:
                continue
            misses += 1
            while len(pool) >= max(slots, len(cur)):
                for victim in pool:
                    if victim not in cur:
                        break
                del pool[victim]
            pool[e] = True
    return hits / max(hits + misses, 1)


def print_stats(path, header, reqs, fracs, as_json, layer_slots=None):
    if any(n != 1 for _, n, _ in reqs):
        sys.exit(f"{path}: --stats needs one token per forward (record the trace with --batch 1)")
    st = routing_stats(header, reqs)
    st["cache"] = frac_runs(header, reqs, fracs)
    st["per_layer_lru"] = [{"slots": s, "hit_rate": per_layer_lru(reqs, header["n_expert"], s)}
                           for s in (layer_slots or [])]
    if as_json:
        print(json.dumps(st))
        return
    L = st["layers"]
    print(f"{path}: {L[0]['tokens'] if L else 0} tokens, {len(L)} layers, {st['n_expert']} experts, top-{st['top_k']}")
    print("layer  entropy bits (norm)  effective  max share  unused  prev-token overlap  reuse d=1  d<=4  d<=16  median")
    for r in L:
        print(f"{r['layer']:5d}  {r['entropy_bits']:6.3f} ({r['entropy_norm']:.3f})  {r['effective_experts']:9.1f}  "
              f"{r['max_share']:9.3f}  {r['unused']:6d}  {r['prev_token_overlap']:18.3f}  {r['reuse_d1']:9.3f}  "
              f"{r['reuse_le4']:.3f}  {r['reuse_le16']:.3f}  {r['reuse_median']}")
    for r in st["cache"]:
        if "error" in r:
            print(f"  {100 * r['frac']:4.0f}% of experts ({r['slots']} slots)  {r['policy']:<7} {r['error']}")
        else:
            print(f"  {100 * r['frac']:4.0f}% of experts ({r['slots']} slots)  {r['policy']:<7} hit rate "
                  f"{100 * r['hit_rate']:5.1f}%  misses/token {r['misses_per_token']:7.2f}")
    for r in st["per_layer_lru"]:
        print(f"  per-layer LRU, {r['slots']} slots per layer: hit rate {100 * r['hit_rate']:5.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--budget-mib", type=float, nargs="*", help="budgets to simulate (default: the trace's)")
    ap.add_argument("--json", action="store_true", help="one JSON object per budget and policy")
    ap.add_argument("--stats", action="store_true", help="routing statistics (entropy, reuse) and hit rates "
                    "at --frac of the experts")
    ap.add_argument("--frac", type=float, nargs="*", default=[0.1, 0.2, 0.3, 0.4, 0.5],
                    help="with --stats: cache sizes as fractions of all experts (default 0.1 .. 0.5)")
    ap.add_argument("--layer-slots", type=int, nargs="*", default=[64, 128],
                    help="with --stats: per-layer LRU hit rates at these slots per layer (default 64 128)")
    a = ap.parse_args()
    header, reqs = load(a.trace)
    if a.stats:
        if not reqs:
            sys.exit(f"{a.trace}: no routing lines")
        print_stats(a.trace, header, reqs, a.frac, a.json, a.layer_slots)
        return
    E = header["n_expert"]
    tokens = sum(n for layer, n, _ in reqs if layer == 0) or 1
    lookups = sum(len(ids) for _, _, ids in reqs)
    budgets = [int(b * 1048576) for b in a.budget_mib] if a.budget_mib else [header["budget"]]
    if not budgets[0]:
        sys.exit("the trace has no budget (full/mmap run): pass --budget-mib")
    if not a.json:
        print(f"{a.trace}: {len(reqs)} acquires, {tokens} tokens, {lookups} expert lookups, "
              f"{len(set(header['slot_bytes']))} slot sizes")
    for b in budgets:
        for name, sim, uniform in (("lru", sim_lru, True), ("class-lru", sim_lru, False),
                                   ("belady", sim_belady, True), ("class-belady", sim_belady, False),
                                   ("scan-lru", sim_scan_lru, True), ("class-scan-lru", sim_scan_lru, False)):
            cls, cap = classes_for(header, b, uniform)
            r = sim(reqs, E, cls, cap)
            if r is None:
                res = {"budget_mib": b / 1048576, "policy": name, "error": "a selection exceeds a class"}
            else:
                hits, misses = r
                res = {"budget_mib": round(b / 1048576, 1), "policy": name, "slots": sum(cap), "classes": len(cap),
                       "hit_rate": hits / max(lookups, 1), "misses_per_token": misses / tokens}
            if a.json:
                print(json.dumps(res))
            elif "error" in res:
                print(f"  {b / 1048576:8.1f} MiB  {name:<12} {res['error']}")
            else:
                print(f"  {b / 1048576:8.1f} MiB  {name:<12} {res['slots']:6d} slots in {res['classes']} "
                      f"class(es): hit rate {100 * res['hit_rate']:5.1f}%  misses/token {res['misses_per_token']:7.2f}")


if __name__ == "__main__":
    main()
