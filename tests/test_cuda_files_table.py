"""bench/cuda_files_table.py: the issue-15 ratio table from bench/cuda_files.sh's records.

The table's cells are recomputed here from the raw records by their definition (llama.cpp: the best micro-batch
of a round, then the median over rounds; Red Lite: the median over rounds; A/B variants ignored), on session 24's
recorded run and on small made-up records where the definition matters (the slower -ub, an A/B tag, decode at 0
measured by a depth run)."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "cuda_files_table.py"
RECORDED = ROOT / "bench" / "results" / "2026-12-04-session24-h200.jsonl"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def table_json(path):
    r = run(path, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def lc_rec(tag, rows):
    return {"tool": "llama-bench", "tag": tag, "args": "", "result": rows}


def rl_rec(tag, decode=(), prompt=()):
    return {"tool": "redlite", "tag": tag, "args": "",
            "result": {"decode": [{"depth": d, "tok_s": v} for d, v in decode],
                       "prompt": [{"n_tokens": n, "tok_s": v} for n, v in prompt]}}


def test_recorded_session24_cells_match_their_definition():
    recs = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    by = {(r["tool"], r["tag"]): r["result"] for r in recs}
    t = table_json(RECORDED)
    assert set(t) == {"cf2", "iq2_xxs", "q4_k_m"}
    for p in t:
        # decode at 32K: one run each
        rl32 = next(x["tok_s"] for x in by[("redlite", f"{p}-d32k")]["decode"] if x["depth"] == 32768)
        lc32 = next(x["avg_ts"] for x in by[("llama-bench", f"{p}-depth")] if x["n_depth"] == 32768)
        assert abs(t[p]["decode 32K"]["ratio"] - rl32 / lc32) < 1e-12
        # decode at 0: the rounds only, llama.cpp's best -ub per round
        rl0 = statistics.median(next(x["tok_s"] for x in by[("redlite", f"{p}-r{r}")]["decode"] if x["depth"] == 0)
                                for r in (1, 2))
        lc0 = statistics.median(max(x["avg_ts"] for x in by[("llama-bench", f"{p}-r{r}")] if x["n_gen"] > 0)
                                for r in (1, 2))
        assert abs(t[p]["decode 0"]["ratio"] - rl0 / lc0) < 1e-12
        assert len(t[p]["decode 0"]["rl"]) == 2 and len(t[p]["decode 0"]["lc"]) == 2
    # the figures the results file quotes
    assert round(t["cf2"]["decode 32K"]["ratio"], 2) == round(267.0 / 170.5, 2)
    out = run(RECORDED).stdout
    assert "| q4_k_m | 1.62× not met" in out and "1.65× met" in out


def test_best_microbatch_ab_tags_and_depth_runs(tmp_path):
    recs = [
        # round 1: -ub 512 is the faster prompt here; round 2 the other way round
        lc_rec("x-r1", [{"n_prompt": 2048, "n_gen": 0, "n_depth": 0, "n_ubatch": 512, "avg_ts": 1000.0},
                        {"n_prompt": 2048, "n_gen": 0, "n_depth": 0, "n_ubatch": 2048, "avg_ts": 800.0},
                        {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "n_ubatch": 512, "avg_ts": 100.0}]),
        lc_rec("x-r2", [{"n_prompt": 2048, "n_gen": 0, "n_depth": 0, "n_ubatch": 512, "avg_ts": 700.0},
                        {"n_prompt": 2048, "n_gen": 0, "n_depth": 0, "n_ubatch": 2048, "avg_ts": 1200.0},
                        {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "n_ubatch": 512, "avg_ts": 110.0}]),
        rl_rec("x-r1", decode=[(0, 200.0), (8192, 190.0)], prompt=[(2048, 4400.0)]),
        rl_rec("x-r2", decode=[(0, 180.0)], prompt=[(2048, 4600.0)]),
        # an A/B variant and a depth run: neither may enter decode at 0
        rl_rec("x-d32k-scan", decode=[(0, 9999.0), (32768, 1.0)]),
        rl_rec("x-d32k", decode=[(0, 5000.0), (32768, 150.0)]),
        lc_rec("x-depth", [{"n_prompt": 0, "n_gen": 64, "n_depth": 32768, "n_ubatch": 2048, "avg_ts": 100.0}]),
    ]
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    t = table_json(f)["x"]
    assert t["prompt 2K"]["lc"] == [1000.0, 1200.0]
    assert abs(t["prompt 2K"]["ratio"] - 4500.0 / 1100.0) < 1e-12
    assert t["decode 0"]["rl"] == [200.0, 180.0] and abs(t["decode 0"]["ratio"] - 190.0 / 105.0) < 1e-12
    assert t["decode 32K"]["rl"] == [150.0] and abs(t["decode 32K"]["ratio"] - 1.5) < 1e-12
    assert t["decode 8K"]["ratio"] is None  # no llama.cpp figure at 8K: no ratio
    out = run(f).stdout
    assert "1.81× not met" in out and "1.50× met" in out and "4.09× met" in out and "—" in out


def test_bad_input():
    r = run("/nonexistent/records.jsonl")
    assert r.returncode == 1 and "cannot read" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run()
    assert r.returncode == 2
