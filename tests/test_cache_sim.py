"""tools/cache_sim.py: exact hit and miss counts on traces small enough to work out by hand, the
same counts from an independent reference implementation of the policies (written here, not the
tool's code) on a random trace, and the policy invariants."""
import json
import math
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "cache_sim.py")
POLICIES = ("lru", "class-lru", "belady", "class-belady", "scan-lru", "class-scan-lru")


def write_trace(path, n_expert, top_k, slot_bytes, acquires, rows=1):
    """acquires: (layer, ids) in order; each layer-0 acquire is one forward of `rows` rows."""
    with open(path, "w") as f:
        f.write(json.dumps({"header": {"mode": "mmap", "n_layer": len(slot_bytes), "n_expert": n_expert,
                                       "top_k": top_k, "budget": 0, "slot_bytes": slot_bytes}}) + "\n")
        for t, (layer, ids) in enumerate(acquires):
            f.write(json.dumps({"f": t + 1, "l": layer, "n": rows, "ids": ids}) + "\n")


def run(path, *budgets_bytes):
    """The tool's results keyed by (budget bytes, policy), with exact counts recovered from its
    rates: hits = hit_rate * lookups, misses = misses_per_token * tokens."""
    mib = [b / 1048576 for b in budgets_bytes]  # power-of-two fractions: exact in the tool's int(b * 2^20)
    out = subprocess.run([sys.executable, TOOL, path, "--json", "--budget-mib", *map(repr, mib)],
                         capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == len(budgets_bytes) * len(POLICIES), out
    return {(budgets_bytes[i // len(POLICIES)], r["policy"]): r for i, r in enumerate(rows)}


def counts(r, lookups, tokens):
    hits, misses = r["hit_rate"] * lookups, r["misses_per_token"] * tokens
    assert math.isclose(hits, round(hits), abs_tol=1e-6) and math.isclose(misses, round(misses), abs_tol=1e-6)
    return round(hits), round(misses)


def test_cyclic_trace_by_hand(tmp_path):
    """One layer, 4 experts, top-1, 3 slots; experts 0 1 2 3 0 1 2 3 (one per token).
    LRU: a cycle one longer than the cache misses every time: 0 hits, 8 misses.
    Belady: 0 1 2 miss; 3 misses and evicts 2 (next use farthest: 0 at 4, 1 at 5, 2 at 6); 0 and 1
    hit; 2 misses and evicts 0 or 1 (never used again); 3 hits: 3 hits, 5 misses."""
    p = str(tmp_path / "cyc.jsonl")
    write_trace(p, 4, 1, [1024], [(0, [e]) for e in (0, 1, 2, 3, 0, 1, 2, 3)])
    res = run(p, 3 * 1024)
    for pol in POLICIES:  # one slot size: the class policies are the uniform ones
        assert res[(3072, pol)]["slots"] == 3 and res[(3072, pol)]["classes"] == 1
    assert counts(res[(3072, "lru")], 8, 8) == (0, 8)
    assert counts(res[(3072, "class-lru")], 8, 8) == (0, 8)
    assert counts(res[(3072, "belady")], 8, 8) == (3, 5)
    assert counts(res[(3072, "class-belady")], 8, 8) == (3, 5)


def test_group_acquires_by_hand(tmp_path):
    """One layer, 4 experts, top-2, 3 slots: all experts of an acquire must be resident together,
    so none of them can be the victim. Acquires [0,1] [2,0] [3,1] [0,2] [1,3] [0,1] under LRU:
      [0,1] miss miss                      order 0 1
      [2,0] 0 hits; 2 misses               order 1 0 2
      [3,1] 1 hits; 3 misses, evicts 0     order 2 1 3
      [0,2] 2 hits; 0 misses, evicts 1     order 3 2 0
      [1,3] 3 hits; 1 misses, evicts 2     order 0 3 1
      [0,1] both hit                       -> 6 hits, 6 misses.
    Belady (next uses in the flat sequence 0 1 2 0 3 1 0 2 1 3 0 1) gives 6 and 6 too: at [3,1]
    it evicts 2 (next at 7), at [0,2] it evicts 3 (0 is pinned although used later), at [1,3] it
    evicts 2 (never used again), and the last acquire hits twice."""
    p = str(tmp_path / "grp.jsonl")
    write_trace(p, 4, 2, [1024], [(0, ids) for ids in ([0, 1], [2, 0], [3, 1], [0, 2], [1, 3], [0, 1])])
    res = run(p, 3 * 1024, 1024)
    for pol in POLICIES:
        assert counts(res[(3072, pol)], 12, 6) == (6, 6), pol
        assert "error" in res[(1024, pol)]  # one slot cannot hold a top-2 selection


def test_size_classes_by_hand(tmp_path):
    """Two layers with 2 KiB and 1 KiB experts, 4 experts each, top-1, budget 12 KiB, trace
    L0:0..3, L1:0..3 twice (16 lookups, 8 tokens). Uniform slots: 12 KiB / 2 KiB = 6 shared by 8
    keys. Classes: 12 KiB / (2+1) KiB = 4 slots per layer, >= n_expert (4 <= 4 + margin) so each
    class holds its whole layer: 4 + 4 slots.
      lru (6 slots, a cycle of 8): 0 hits, 16 misses.
      class-lru / class-belady (everything fits): 8 compulsory misses, 8 hits.
      belady (6 slots): keys 0..5 miss; key 6 evicts 5 (farthest next use), key 7 evicts 6; the
      second pass hits 0..4, misses 5 and 6 (evicting keys that are done), hits 7: 6 hits, 10 misses."""
    p = str(tmp_path / "cls.jsonl")
    acq = [(layer, [e]) for _ in range(2) for layer in (0, 1) for e in range(4)]
    write_trace(p, 4, 1, [2048, 1024], acq)
    res = run(p, 12 * 1024)
    B = 12 * 1024
    assert res[(B, "lru")]["slots"] == 6 and res[(B, "lru")]["classes"] == 1
    assert res[(B, "class-lru")]["slots"] == 8 and res[(B, "class-lru")]["classes"] == 2
    assert counts(res[(B, "lru")], 16, 8) == (0, 16)
    assert counts(res[(B, "belady")], 16, 8) == (6, 10)
    assert counts(res[(B, "class-lru")], 16, 8) == (8, 8)
    assert counts(res[(B, "class-belady")], 16, 8) == (8, 8)


# --- an independent reference of the two policies for one pool of `cap` slots ------------------

def ref_lru(acquires, E, cap):
    order, hits, misses = [], 0, 0  # order[0] = least recently used
    for layer, ids in acquires:
        keys = [layer * E + e for e in ids]
        for k in keys:
            if k in order:
                hits += 1
                order.remove(k)
                order.append(k)
        for k in keys:
            if k in order:
                continue
            misses += 1
            if len(order) == cap:
                order.remove(next(v for v in order if v not in keys))
            order.append(k)
    return hits, misses


def ref_belady(acquires, E, cap):
    flat = [layer * E + e for layer, ids in acquires for e in ids]

    def next_use(key, after):
        return next((q for q in range(after + 1, len(flat)) if flat[q] == key), math.inf)

    res, hits, misses, pos = set(), 0, 0, 0
    for layer, ids in acquires:
        keys = [layer * E + e for e in ids]
        for j, k in enumerate(keys):
            if k in res:
                hits += 1
                continue
            misses += 1
            if len(res) == cap:
                res.remove(max((v for v in res if v not in keys), key=lambda v: next_use(v, pos + j)))
            res.add(k)
        pos += len(keys)
    return hits, misses


def test_random_trace_matches_reference(tmp_path):
    """A random trace with locality (a hot set plus random picks) through one pool of slots: the
    tool's exact counts equal the reference's at several budgets; Belady never misses more than LRU."""
    rng = random.Random(5)
    E, K, nl, steps = 16, 4, 3, 120
    acq = []
    for _ in range(steps):
        for layer in range(nl):
            ids = list(dict.fromkeys(rng.sample(range(K + 2), K // 2) + rng.sample(range(E), K)))[:K]
            acq.append((layer, ids))
    p = str(tmp_path / "rnd.jsonl")
    write_trace(p, E, K, [4096] * nl, acq)
    lookups = sum(len(ids) for _, ids in acq)
    slots = (6, 12, 24, 40)
    res = run(p, *(s * 4096 for s in slots))
    for s in slots:
        lru, bel = counts(res[(s * 4096, "lru")], lookups, steps), counts(res[(s * 4096, "belady")], lookups, steps)
        assert lru == ref_lru(acq, E, s), f"{s} slots: lru"
        assert bel == ref_belady(acq, E, s), f"{s} slots: belady"
        assert bel[1] <= lru[1] and sum(lru) == sum(bel) == lookups
        assert lru[0] < lookups
    assert counts(res[(slots[-1] * 4096, "lru")], lookups, steps)[0] > lookups // 2  # the hot set hits
    # more slots never hurt either policy on this trace
    assert [counts(res[(s * 4096, "belady")], lookups, steps)[1] for s in slots] == \
        sorted((counts(res[(s * 4096, "belady")], lookups, steps)[1] for s in slots), reverse=True)


def test_everything_fits(tmp_path):
    """A budget above every expert: only compulsory misses (one per distinct expert), every policy."""
    rng = random.Random(9)
    E, nl = 8, 2
    acq = [(layer, rng.sample(range(E), 3)) for _ in range(40) for layer in range(nl)]
    distinct = len({(layer, e) for layer, ids in acq for e in ids})
    p = str(tmp_path / "fit.jsonl")
    write_trace(p, E, 3, [4096, 2048], acq)
    res = run(p, 1 << 20)
    for pol in POLICIES:
        assert counts(res[(1 << 20, pol)], 3 * len(acq), 40) == (3 * len(acq) - distinct, distinct), pol


def test_too_small(tmp_path):
    p = str(tmp_path / "t.jsonl")
    write_trace(p, 16, 4, [4096, 4096], [(layer, [0, 1, 2, 3]) for _ in range(3) for layer in (0, 1)])
    # 8 KiB holds 2 slots: a 4-expert selection cannot be resident at once
    res = run(p, 8 * 1024)
    assert all("error" in r for r in res.values())


def test_routing_stats_exact(tmp_path):
    """--stats on a hand-made one-layer trace whose numbers are worked out by hand."""
    import math
    p = str(tmp_path / "s.jsonl")
    seq = [[0, 1], [0, 1], [2, 3], [0, 1]]
    with open(p, "w") as f:
        f.write(json.dumps({"header": {"mode": "mmap", "n_layer": 1, "n_expert": 4, "top_k": 2, "budget": 0,
                                       "slot_bytes": [4096]}}) + "\n")
        for t, ids in enumerate(seq):
            f.write(json.dumps({"f": t + 1, "l": 0, "n": 1, "ids": ids}) + "\n")
    out = json.loads(subprocess.run([sys.executable, TOOL, p, "--stats", "--json", "--frac", "0.5", "1.0"],
                                    capture_output=True, text=True, check=True).stdout)
    (L,) = out["layers"]
    # uses: experts 0 and 1 three times, 2 and 3 once (8 picks)
    h = -(2 * 3 / 8 * math.log2(3 / 8) + 2 * 1 / 8 * math.log2(1 / 8))
    assert math.isclose(L["entropy_bits"], h) and math.isclose(L["entropy_norm"], h / 2)
    assert math.isclose(L["max_share"], 3 / 8) and L["unused"] == 0
    # the previous token holds 2/2, 0/2, 0/2 of a token's experts
    assert math.isclose(L["prev_token_overlap"], 1 / 3)
    # reuse distances: token 1 -> 1, 1; token 3 -> 2, 2 (experts 2, 3 are first uses)
    assert L["reuse_d1"] == 0.5 and L["reuse_le4"] == 1.0 and L["reuse_mean"] == 1.5
    by = {(r["frac"], r["policy"]): r for r in out["cache"]}
    # 2 slots (half of 4 experts): LRU hits only on token 1; Belady also only on token 1 (the
    # pair {2,3} must evict {0,1}); 4 slots: only the 4 compulsory misses
    assert by[(0.5, "lru")]["hit_rate"] == 2 / 8 and by[(0.5, "belady")]["hit_rate"] == 2 / 8
    assert by[(1.0, "lru")]["hit_rate"] == 4 / 8 == by[(1.0, "belady")]["hit_rate"]
    # a batched trace (rows > 1 per acquire) cannot give per-token statistics
    with open(p, "a") as f:
        f.write(json.dumps({"f": 9, "l": 0, "n": 3, "ids": [0]}) + "\n")
    r = subprocess.run([sys.executable, TOOL, p, "--stats"], capture_output=True, text=True)
    assert r.returncode != 0 and "--batch 1" in r.stderr


def test_scan_cycle_by_hand(tmp_path):
    """The C test's cycle (tests/c/test_expert_cache.c test_scan): 4 layers of 16 experts, top-4, 2E + K =
    36 uniform slots, 3 forwards each acquiring every expert of every layer. Prompt-sized forwards (512
    rows): LRU evicts each entry before its next use, 64 misses a forward; scan-LRU keeps layer 0 and
    layer 1's first 4 from the first forward on, 3E - K = 44 misses a forward after it (64 + 44 + 44).
    Decode-sized forwards (1 row): scan-LRU is LRU."""
    E, K, L = 16, 4, 4
    acq = [(il, list(range(E))) for _ in range(3) for il in range(L)]
    B = (2 * E + K) * 1024
    for rows, scan_misses in ((512, 64 + 2 * 44), (1, 3 * 64)):
        p = str(tmp_path / f"scan{rows}.jsonl")
        write_trace(p, E, K, [1024] * L, acq, rows=rows)
        res = run(p, B)
        lookups, tokens = 3 * L * E, 3 * rows
        assert counts(res[(B, "lru")], lookups, tokens) == (0, 3 * 64)
        assert counts(res[(B, "scan-lru")], lookups, tokens) == (lookups - scan_misses, scan_misses), rows
        assert counts(res[(B, "class-scan-lru")], lookups, tokens) == (lookups - scan_misses, scan_misses)
