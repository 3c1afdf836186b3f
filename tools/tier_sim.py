#!/usr/bin/env python3
"""Replay an expert route trace against two tiers, VRAM slots over a RAM cache, and print where the
experts of the decode tokens come from.

Model of the CUDA VRAM tier over the bounded RAM cache (docs/EXPERT_CACHE.md): VRAM has a fixed
number of slots per layer with its own LRU (vram_slots); the RAM cache is one LRU over uniform slots
(the synthetic presets' experts of one layer are one size class). A decode token asks each layer for
its experts; a VRAM miss is served from RAM or, failing that, read from disk. Three RAM policies:

  inclusive  RAM keeps what it served at its most recent end (the cache before 2026-12-07)
  demote     exclusive caching as built: what VRAM just took becomes RAM's next victim
             (q3n_expert_src.demote)
  victim     RAM as VRAM's victim cache: a VRAM hit from RAM leaves RAM, and what VRAM evicts goes
             to RAM (a device-to-host copy of the slot; built: q3n_expert_src.keep, with demotion
             standing in for the leaving)
  victim_incl  the victim cache's write-backs without the leaving: RAM also keeps what it served
  victim_scan  the victim cache for decode; a forward of >= 64 rows (a prompt chunk) is a scan as
             the RAM cache alone does it (expert_cache.h): RAM's hits stay, its misses are read to the
             least recent end, and VRAM's demotes and write-backs are ignored (tried under the tier
             2026-12-07, not built: docs/EXPERT_CACHE.md, "Scans")
  stream     the victim cache for decode; in a prompt chunk both tiers keep what they held before it
             and stream the rest (RL_VRAM_STREAM=P, off by default): once a chunk has filled --stream-pool slots of
             a layer, VRAM refills the oldest of them (its other slots keep their experts; pool 1: the
             slot it filled last), RAM's hits move up as in the victim cache and come back to its
             recent end when VRAM evicts them, and what the chunk read from disk goes back to RAM's
             least recent end. The tier's batches today take half a layer's slots each with the next
             batch filling the other half: a pool of the whole layer

The tier's pre-gated prefetch is not simulated (it moves reads earlier, not fewer of them). The
trace (`redlite dump --route-trace FILE`, tools/cache_sim.py describes it) should come from a cut of
the preset (`synth --geometry layers=N`): every layer of a preset has the same calibrated routing, so
slots per layer carry over to the full model. Forwards of more than one row (the prompt) pass through
both tiers; the counts are over the decode forwards after --skip of them, and separately
(prompt_*) over every forward of >= 64 rows: the disk reads of prompt chunks.

usage: tools/tier_sim.py TRACE --vram-slots S --ram-slots R [R ...] [--skip N] [--stream-pool P] [--json]
       (R per layer: a RAM budget / (layers x expert bytes))
"""
import argparse
import json
from collections import OrderedDict

from cache_sim import SCAN_ROWS  # the scripts' folder is on the path when run as tools/tier_sim.py


def load(path):
    header, reqs = None, []
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a trace still being written: its last line is partial
            d = json.loads(line)
            if "header" in d:
                header = d["header"]
            else:
                reqs.append((d["f"], d["l"], d["n"], d["ids"]))
    if header is None:
        raise SystemExit(f"{path}: no header line (not a route trace)")
    return header, reqs


class Lru:
    def __init__(self, cap):
        self.cap, self.d = cap, OrderedDict()

    def __contains__(self, k):
        return k in self.d

    def touch(self, k):
        self.d.move_to_end(k)

    def put(self, k):
        """Insert at the most recent end; returns the evicted key or None."""
        out = None
        if k in self.d:
            self.d.move_to_end(k)
            return None
        if self.cap <= 0:
            return k
        if len(self.d) >= self.cap:
            out, _ = self.d.popitem(last=False)
        self.d[k] = True
        return out

    def demote(self, k):
        if k in self.d:
            self.d.move_to_end(k, last=False)

    def drop(self, k):
        self.d.pop(k, None)


POLICIES = ("inclusive", "demote", "victim", "victim_incl", "victim_scan", "stream")


def simulate(header, reqs, vslots, rslots_layer, policy, skip, pool=1):
    n_layer = header["n_layer"]
    vram = [Lru(vslots) for _ in range(n_layer)]
    ram = Lru(rslots_layer * n_layer)
    c = {"lookups": 0, "vram": 0, "ram": 0, "disk": 0,
         "prompt_lookups": 0, "prompt_vram": 0, "prompt_ram": 0, "prompt_disk": 0}
    decode_seen, cur, from_ram, fills = 0, None, set(), {}
    for f, layer, rows, ids in reqs:
        counting = rows == 1 and decode_seen >= skip * n_layer
        if rows == 1:
            decode_seen += 1
        pre = "prompt_" if rows >= SCAN_ROWS else None
        scan = pre and policy == "victim_scan"
        stream = pre and policy == "stream"
        if f != cur:  # a new forward
            cur, from_ram, fills = f, set(), {}
        v = vram[layer]

        def count(what):  # a decode token's lookup (after --skip) and / or a prompt chunk's
            if counting:
                c[what] += 1
            if pre:
                c[pre + what] += 1

        for e in ids:
            key = (layer, e)
            count("lookups")
            if e in v:
                v.touch(e)
                count("vram")
                continue
            hit = key in ram
            count("ram" if hit else "disk")
            if scan:  # hits stay (most recent end), reads stream through the least recent end
                if hit:
                    ram.touch(key)
                else:
                    ram.put(key)
                    ram.demote(key)
            elif stream:
                if hit:
                    ram.drop(key)
                    from_ram.add(key)
                fl = fills.setdefault(layer, [])  # this chunk's fills of the layer, oldest first
                if len(fl) >= pool and len(v.d) >= v.cap:  # refill the oldest slot of the pool
                    lf = fl.pop(0)
                    v.drop(lf)
                    ram.put((layer, lf))
                    if (layer, lf) not in from_ram:
                        ram.demote((layer, lf))
                gone = v.put(e)  # the pool grows into the least recent slots: write-backs
                if gone is not None:
                    ram.put((layer, gone))
                    if gone in fl:
                        fl.remove(gone)
                fl.append(e)
                continue
            elif policy in ("inclusive", "victim_incl"):
                ram.put(key)
            elif policy == "demote":
                ram.put(key)
                ram.demote(key)
            elif hit:  # victim: it moves up to VRAM
                ram.drop(key)
            gone = v.put(e)
            if policy in ("victim", "victim_incl", "victim_scan", "stream") and gone is not None and not scan:
                ram.put((layer, gone))
    n = max(c["lookups"], 1)
    return {k: c[k] for k in c} | {"vram_pct": 100 * c["vram"] / n, "ram_pct": 100 * c["ram"] / n,
                                     "disk_pct": 100 * c["disk"] / n,
                                     "ram_hit_of_vram_misses_pct": 100 * c["ram"] / max(c["ram"] + c["disk"], 1),
                                     "prompt_disk_pct": 100 * c["prompt_disk"] / max(c["prompt_lookups"], 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--vram-slots", type=int, required=True, help="VRAM slots per layer")
    ap.add_argument("--ram-slots", type=int, nargs="+", required=True, help="RAM slots per layer")
    ap.add_argument("--skip", type=int, default=0, help="decode tokens not counted (warm-up)")
    ap.add_argument("--stream-pool", type=int, default=1, help="the stream policy's VRAM slots a layer")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    header, reqs = load(a.trace)
    out = []
    for r in a.ram_slots:
        for pol in POLICIES:
            res = simulate(header, reqs, a.vram_slots, r, pol, a.skip, max(1, a.stream_pool))
            out.append({"vram_slots": a.vram_slots, "ram_slots": r, "policy": pol, **res})
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{'RAM slots/layer':>15} {'policy':>11} {'VRAM %':>7} {'RAM %':>6} {'disk %':>7} "
          f"{'RAM hit of VRAM misses %':>25} {'prompt reads from disk':>23}")
    for o in out:
        print(f"{o['ram_slots']:>15} {o['policy']:>11} {o['vram_pct']:>7.1f} {o['ram_pct']:>6.1f} "
              f"{o['disk_pct']:>7.1f} {o['ram_hit_of_vram_misses_pct']:>25.1f} "
              f"{o['prompt_disk']:>12} ({o['prompt_disk_pct']:4.1f} %)")


if __name__ == "__main__":
    main()
