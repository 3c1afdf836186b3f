"""bench/charts.py and bench/records.py (issue 49, item 7): the benchmark records and the charts.

- each chart renders from a small synthetic record set into tmp_path as a valid PNG of the expected size,
  and names a series its records lack ("no llama.cpp prompt records ...") instead of drawing one;
- a record file with a missing field is refused: exit 2, one line naming the file, the line and the field;
- `redlite bench --json` of the real binary carries machine, date, commit (the binary's own), budget, and,
  with a bounded RAM expert cache, a hit rate per decode depth that equals hits / lookups; its records
  (bench/records.py) pass the same check, and the cache chart renders from the bench documents themselves.
"""
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHARTS = REPO / "bench" / "charts.py"
RECORDS = REPO / "bench" / "records.py"
BIN = REPO / "build" / "redlite"
MODEL = REPO / "models" / "default.gguf"


def rec(**kw):
    r = {"machine": "test box, 2 CPUs", "date": "2026-12-06", "commit": "abc1234", "file": "tiny.gguf",
         "engine": "redlite", "backend": "cpu", "threads": 2, "budget": {"cache_mib": None, "vram_mib": None},
         "kind": "decode", "depth": 0, "n_tokens": 32, "tok_s": 10.0}
    r.update(kw)
    return r


def write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def run(*args):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=300)


def png_size(path):
    """(width, height) of a PNG file, after checking its signature and IHDR chunk."""
    data = path.read_bytes()
    assert len(data) > 1000, f"{path} is only {len(data)} bytes"
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def synthetic(tmp_path):
    depth = [rec(engine=e, depth=d, tok_s=t) for e, base in (("redlite", 300.0), ("llama.cpp", 200.0))
             for d, t in ((0, base), (8192, base * 0.95), (32768, base * 0.9))]
    depth += [rec(kind="prompt", n_tokens=n, tok_s=t) for n, t in ((2048, 8000.0), (32768, 6000.0))]  # no llama.cpp
    vram = [rec(backend="cuda", budget={"cache_mib": "full", "vram_mib": v}, tok_s=50.0 + v / 100, hit_rate=0.5)
            for v in (4096, 8192, 16384)]
    vram += [rec(engine="llama.cpp", backend="cuda", budget={"cache_mib": None, "vram_mib": v}, vram_used_mib=v + 900,
                 tok_s=30.0 + v / 1000) for v in (4096, 8192)]
    vram += [rec(kind="prompt", n_tokens=2048, backend="cuda", budget={"cache_mib": "full", "vram_mib": v},
                 tok_s=1500.0 + v / 10) for v in (4096, 8192)]
    cache = [rec(budget={"cache_mib": b, "vram_mib": None}, hit_rate=h, tok_s=t)
             for b, h, t in ((2048, 0.75, 3.8), (4096, 0.79, 4.0), (8192, 0.85, 4.7), ("full", 1.0, 12.1))]
    return (write(tmp_path / "depth.jsonl", depth), write(tmp_path / "vram.jsonl", vram),
            write(tmp_path / "cache.jsonl", cache))


def test_each_chart_renders_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in tests/requirements.txt")
    d, v, c = synthetic(tmp_path)
    out = tmp_path / "out"
    r = run(CHARTS, "--out-dir", out, "--depth", d, "--vram", v, "--cache", c)
    assert r.returncode == 0, r.stderr
    for name in ("depth", "vram", "cache"):
        w, h = png_size(out / f"chart-{name}.png")
        assert (w, h) == (1320, 660), (name, w, h)  # 12 x 6 in at 110 dpi
        assert f"chart-{name}.png" in r.stdout
    # the prompt panel has no llama.cpp records: said on the chart, not drawn; the cache chart has no llama.cpp
    assert "note: no llama.cpp prompt records in depth.jsonl" in r.stdout
    assert "note: no Red Lite" not in r.stdout
    assert "note: llama.cpp: no expert cache" in r.stdout
    # only the charts asked for are drawn
    r = run(CHARTS, "--out-dir", tmp_path / "one", "--cache", c)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["chart-cache.png"]


@pytest.mark.parametrize("field", ["machine", "date", "commit", "budget", "tok_s", "depth"])
def test_a_record_without_a_field_is_refused(tmp_path, field):
    d, _, _ = synthetic(tmp_path)
    recs = [json.loads(line) for line in d.read_text().splitlines()]
    del recs[2][field]
    bad = write(tmp_path / "bad.jsonl", recs)
    out = tmp_path / "out"
    r = run(CHARTS, "--out-dir", out, "--depth", bad)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"bad.jsonl:3: the record lacks '{field}'" in lines[0], lines[0]
    assert not out.exists() or not any(out.iterdir())  # nothing drawn from a bad file
    r = run(RECORDS, "check", bad)
    assert r.returncode == 2 and f"lacks '{field}'" in r.stderr


def test_bad_values_and_files_are_refused(tmp_path):
    for recs, why in (([rec(tok_s=0)], "'tok_s' is not a positive number"),
                      ([rec(kind="verify")], "'kind' is 'verify'"),
                      ([rec(budget={"cache_mib": 4096})], "'budget' is not an object with"),
                      ([rec(hit_rate=1.5)], "'hit_rate' is not a fraction")):
        r = run(CHARTS, "--out-dir", tmp_path, "--cache", write(tmp_path / "x.jsonl", recs))
        assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    (tmp_path / "empty.jsonl").write_text("")
    r = run(CHARTS, "--out-dir", tmp_path, "--vram", tmp_path / "empty.jsonl")
    assert r.returncode == 2 and "no records" in r.stderr
    r = run(CHARTS, "--out-dir", tmp_path, "--vram", tmp_path / "missing.jsonl")
    assert r.returncode == 2 and "cannot read" in r.stderr


def bench_json(*args):
    r = subprocess.run([str(BIN), "bench", "-m", str(MODEL), "--json", "-t", "1", "--prompt", "16", "--n-decode", "4",
                        "--reps", "2", "--warmup", "1", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def binary():
    if not BIN.exists() or not MODEL.exists():
        pytest.skip("build/redlite or models/default.gguf missing (make)")
    return BIN


def test_bench_json_names_machine_date_commit_budget(binary, tmp_path):
    j = bench_json("--cache-mib", "8", "--depth", "8")
    commit = re.search(r"\(commit (\S+)\)", subprocess.run([str(BIN), "version"], capture_output=True,
                                                            text=True).stdout).group(1)
    assert j["commit"] == commit
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", j["date"])
    assert f"{os.cpu_count()} CPUs" in j["machine"] and "GiB RAM" in j["machine"]
    assert j["budget"] == {"cache_mib": 8, "vram_mib": None}
    assert j["expert_cache"]["mode"] == "bounded" and j["expert_cache"]["budget_bytes"] == 8 << 20
    hp = j["hparams"]
    for d in j["decode"]:  # 2 runs x 4 steps x layers x top-k experts looked up; the rate is their ratio
        assert d["cache_lookups"] == 2 * 4 * hp["n_layer"] * hp["n_expert_used"], d
        assert 0 <= d["cache_hits"] <= d["cache_lookups"]
        assert d["cache_hit_rate"] == d["cache_hits"] / d["cache_lookups"]
    (tmp_path / "b.json").write_text(json.dumps(j))
    r = run(RECORDS, "redlite", tmp_path / "b.json")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["kind"], x["depth"], x["n_tokens"]) for x in recs] == [("decode", 0, 4), ("decode", 8, 4),
                                                                      ("prompt", 0, 16)]
    assert all(x["commit"] == commit and x["budget"]["cache_mib"] == 8 and x["threads"] == 1 for x in recs)
    assert recs[0]["hit_rate"] == j["decode"][0]["cache_hit_rate"]
    # all experts resident: every lookup hits; the budget word is kept as a word
    j = bench_json("--cache-mib", "full")
    assert j["budget"]["cache_mib"] == "full" and j["decode"][0]["cache_hit_rate"] == 1


def test_cache_chart_from_bench_documents(binary, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in tests/requirements.txt")
    files = []
    for b in ("8", "16", "full"):
        p = tmp_path / f"bench-{b}.json"
        p.write_text(json.dumps(bench_json("--cache-mib", b)))
        files.append(p)
    r = run(CHARTS, "--out-dir", tmp_path / "out", "--cache", *files)
    assert r.returncode == 0, r.stderr
    assert png_size(tmp_path / "out" / "chart-cache.png") == (1320, 660)
    assert "(6 records)" in r.stdout  # 3 documents x (decode at depth 0 + prompt 16), the prompt ones unused
