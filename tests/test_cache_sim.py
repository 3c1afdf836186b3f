"""tools/cache_sim.py on small hand-made traces: policy invariants and exact counts."""
import json
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "cache_sim.py")


def write_trace(path, n_layer, E, K, slot_bytes, steps, seed=1):
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write(json.dumps({"header": {"mode": "mmap", "n_layer": n_layer, "n_expert": E, "top_k": K,
                                       "budget": 0, "slot_bytes": slot_bytes}}) + "\n")
        for t in range(steps):
            for l in range(n_layer):
                hot = list(range(K + 2))  # some locality: a hot set plus random picks
                ids = rng.sample(hot, K // 2) + rng.sample(range(E), K)
                ids = list(dict.fromkeys(ids))[:K]
                f.write(json.dumps({"f": t + 1, "l": l, "n": 1, "ids": ids}) + "\n")


def run(path, *budgets):
    out = subprocess.run([sys.executable, TOOL, path, "--json", "--budget-mib", *map(str, budgets)],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines()]


def test_policies(tmp_path):
    p = str(tmp_path / "t.jsonl")
    E, K, nl = 32, 4, 4
    sizes = [8192, 8192, 4096, 4096]
    write_trace(p, nl, E, K, sizes, 300)
    lookups = 300 * nl * K
    res = run(p, 0.2, 0.5, 100)
    by = {(r["budget_mib"], r["policy"]): r for r in res}
    for b in (0.2, 0.5):
        # Belady is optimal for a fixed slot count; classes only change the slot counts
        assert by[(b, "belady")]["hit_rate"] >= by[(b, "lru")]["hit_rate"]
        assert by[(b, "class-belady")]["hit_rate"] >= by[(b, "class-lru")]["hit_rate"]
    # 0.5 MiB: 512 KiB / 24 KiB per layer set = 21 slots per layer, >= E/8 + ... so classes apply
    assert by[(0.5, "class-lru")]["classes"] == 2 and by[(0.5, "lru")]["classes"] == 1
    assert by[(0.5, "class-lru")]["slots"] > by[(0.5, "lru")]["slots"]
    # everything fits: only compulsory misses, identical for every policy
    first = len({(l, e) for l in range(nl) for e in range(E)})
    for pol in ("lru", "class-lru", "belady", "class-belady"):
        r = by[(100.0, pol)]
        assert r["hit_rate"] <= 1 and r["misses_per_token"] * 300 <= first
    assert len({by[(100.0, pol)]["hit_rate"] for pol in ("lru", "class-lru", "belady", "class-belady")}) == 1
    assert all(0 < r["hit_rate"] < 1 for r in res if "hit_rate" in r)
    assert lookups > 0


def test_too_small(tmp_path):
    p = str(tmp_path / "t.jsonl")
    write_trace(p, 2, 16, 4, [4096, 4096], 10)
    # 8 KiB holds 2 slots: a 4-expert selection cannot be resident at once
    res = run(p, 8 / 1024)
    assert all("error" in r for r in res)


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
