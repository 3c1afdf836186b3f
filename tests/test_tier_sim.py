"""tools/tier_sim.py (VRAM slots over a RAM cache, four RAM policies) on traces whose answer is known
by hand: one layer, top-1, one VRAM slot and one RAM slot."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "tier_sim.py")


def sim(tmp_path, experts, vram=1, ram=1, skip=0):
    p = tmp_path / "t.jsonl"
    lines = [json.dumps({"header": {"n_layer": 1, "n_expert": 4, "top_k": 1}})]
    lines += [json.dumps({"f": i, "l": 0, "n": 1, "ids": [e]}) for i, e in enumerate(experts)]
    p.write_text("\n".join(lines) + "\n")
    r = subprocess.run([sys.executable, TOOL, str(p), "--vram-slots", str(vram), "--ram-slots", str(ram),
                        "--skip", str(skip), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return {o["policy"]: o for o in json.loads(r.stdout)}


def test_alternating_pair(tmp_path):
    # 0,1,0,1,...: VRAM (1 slot) always holds the other one. Inclusive and demote keep in RAM what VRAM
    # just took, so every token reads the disk; a victim cache holds what VRAM evicted: from the third
    # token on every miss is a RAM hit.
    r = sim(tmp_path, [0, 1] * 3)
    for pol in ("inclusive", "demote"):
        assert (r[pol]["vram"], r[pol]["ram"], r[pol]["disk"]) == (0, 0, 6), r[pol]
    assert (r["victim"]["vram"], r["victim"]["ram"], r["victim"]["disk"]) == (0, 4, 2), r["victim"]


def test_cycle_of_three(tmp_path):
    # 0,1,2,...: one VRAM slot and two RAM slots hold three experts only if RAM keeps none of what
    # VRAM holds. The victim cache does (every miss from the fourth token on is a RAM hit); its
    # write-backs without the leaving (victim_incl) keep a copy of what VRAM took and lose the third
    # expert every time, as inclusive does; demotion alone catches a third.
    r = sim(tmp_path, [0, 1, 2] * 3, ram=2)
    got = {p: (r[p]["vram"], r[p]["ram"], r[p]["disk"]) for p in r}
    assert got == {"inclusive": (0, 0, 9), "demote": (0, 3, 6), "victim": (0, 6, 3), "victim_incl": (0, 0, 9),
                   "victim_scan": (0, 6, 3), "stream": (0, 6, 3)}, got  # decode only: both are the victim cache


def test_prompt_chunks_scan(tmp_path):
    # three prompt chunks (64 rows) each asking for experts 0..3 of the one layer; one VRAM slot, two RAM
    # slots. The victim cache writes back what VRAM evicts to RAM's recent end: a cycle of four over
    # two, every lookup from disk (12). Scanning, RAM keeps expert 0 from the first chunk on (its reads
    # pass through the least recent end) and VRAM's write-backs are ignored: 4 + 3 + 3 = 10.
    p = tmp_path / "t.jsonl"
    lines = [json.dumps({"header": {"n_layer": 1, "n_expert": 4, "top_k": 1}})]
    lines += [json.dumps({"f": f, "l": 0, "n": 64, "ids": [0, 1, 2, 3]}) for f in range(3)]
    p.write_text("\n".join(lines) + "\n")
    r = subprocess.run([sys.executable, TOOL, str(p), "--vram-slots", "1", "--ram-slots", "2", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = {o["policy"]: (o["prompt_lookups"], o["prompt_disk"], o["lookups"]) for o in json.loads(r.stdout)}
    assert got["victim"] == (12, 12, 0) and got["victim_scan"] == (12, 10, 0), got


def test_repeats_hit_vram_and_skip(tmp_path):
    r = sim(tmp_path, [2, 2, 2, 3], skip=1)  # the first token is not counted
    for pol in r.values():
        assert (pol["lookups"], pol["vram"], pol["ram"], pol["disk"]) == (3, 2, 0, 1), pol


def test_partial_last_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"header": {"n_layer": 1, "n_expert": 4, "top_k": 1}}) + "\n" +
                 json.dumps({"f": 0, "l": 0, "n": 1, "ids": [1]}) + "\n" + '{"f": 1, "l"')
    r = subprocess.run([sys.executable, TOOL, str(p), "--vram-slots", "1", "--ram-slots", "1", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)[0]["lookups"] == 1, r.stderr


def test_prompt_chunks_stream(tmp_path):
    # two decode tokens (experts 0, 1) then four prompt chunks cycling over 8 experts, 3 VRAM and 3 RAM
    # slots: a cycle of 8 over an exclusive chain of 6. The victim cache thrashes: the first chunk hits
    # 0 and 1 in VRAM, every other lookup is read from disk (6 + 3 x 8 = 30). Streaming, each tier keeps
    # what it held and streams through one slot: VRAM keeps V - 1 = 2 (hits 2 a chunk), RAM from the
    # second chunk on R - 1 = 2, so a chunk reads 8 - 2 - 2 = 4 from disk after the first's 6: 18.
    p = tmp_path / "t.jsonl"
    lines = [json.dumps({"header": {"n_layer": 1, "n_expert": 8, "top_k": 1}})]
    lines += [json.dumps({"f": f, "l": 0, "n": 1, "ids": [f]}) for f in (0, 1)]
    lines += [json.dumps({"f": f, "l": 0, "n": 64, "ids": list(range(8))}) for f in range(2, 6)]
    p.write_text("\n".join(lines) + "\n")

    def run(pool):
        r = subprocess.run([sys.executable, TOOL, str(p), "--vram-slots", "3", "--ram-slots", "3", "--json",
                            "--stream-pool", str(pool)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return {o["policy"]: (o["prompt_vram"], o["prompt_ram"], o["prompt_disk"]) for o in json.loads(r.stdout)}

    got = run(1)
    assert got["victim"] == (2, 0, 30) and got["stream"] == (8, 6, 18), got
    # a pool of every VRAM slot (the tier's batches today): VRAM keeps nothing from chunk to chunk (its two
    # hits are the first chunk's), RAM still keeps R - 1 = 2: 6 + 3 x (8 - 2) = 24 reads
    got = run(3)
    assert got["stream"] == (2, 6, 24), got
