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
