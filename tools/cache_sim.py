#!/usr/bin/env python3
"""Replay an expert route trace against cache policies and print hit rates.

A trace comes from `redlite dump --route-trace FILE` (or RL_ROUTE_TRACE=FILE with any command
that attaches the expert cache). Its first line is a header with the geometry
({"header": {"n_layer", "n_expert", "top_k", "budget", "slot_bytes": [per layer]}}), then one
line per acquire: {"f": forward, "l": layer, "n": rows, "ids": [experts]} — the union of the
experts that layer selected for that forward, which is exactly what the cache is asked for.

Policies (same rules as src/expert_cache.c: all experts of one acquire must be resident at
once, so none of them can be a victim for another):
  lru          one pool of uniform slots of the largest slot size (budget // max size)
  class-lru    one LRU per slot size class; each class gets the same slots per layer
               (budget // sum of slot sizes, at most n_expert) times its layer count
  belady       uniform slots, evict the expert used farthest in the future (the optimum
               for a fixed slot count; unreachable online)
  class-belady Belady inside each size class
Prefetch is not simulated: these are the demand misses of each policy alone.

usage: tools/cache_sim.py TRACE [--budget-mib N ...] [--json]
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


def sim_lru(reqs, E, cls, cap):
    pools = [OrderedDict() for _ in cap]
    hits = misses = 0
    for layer, _, ids in reqs:
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
    return hits, misses


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--budget-mib", type=float, nargs="*", help="budgets to simulate (default: the trace's)")
    ap.add_argument("--json", action="store_true", help="one JSON object per budget and policy")
    a = ap.parse_args()
    header, reqs = load(a.trace)
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
                                   ("belady", sim_belady, True), ("class-belady", sim_belady, False)):
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
