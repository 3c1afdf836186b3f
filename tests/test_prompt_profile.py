"""`redlite bench --prompt N --profile`: the decode's and the prompt's products-and-threads tables
(ops_prof, pool_prof).

A synthetic model (tiny preset at 64 experts top-8, so the prompt's row loops are split over the
threads) is benchmarked with 2 threads; the text output must end with the table: one row per class of
product that ran (DeltaNet projections, experts gate+up, ...), the labelled loops between them
(norms, DeltaNet conv and recurrence, MoE routing, ...), then the totals, whose shares must add up to
the whole prompt (products + other parallel jobs + the labelled inline parts + serial = 100 %). The
decode table (printed after the decode stages) must add up the same way, and every product class of
both tables has a GB/s column (a rate: never asserted positive, it rounds to 0.0 under load).
The build is build/redlite (override with REDLITE_BIN).
"""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))


def test_prompt_profile_table(tmp_path):
    path = str(tmp_path / "m.gguf")
    subprocess.run([BIN, "synth", "--preset", "tiny", "--geometry", "experts=64,top_k=8", "-o", path, "--quiet"],
                   check=True, capture_output=True, timeout=120)
    r = subprocess.run([BIN, "bench", "-m", path, "-t", "2", "--n-decode", "2", "--reps", "1", "--warmup", "1",
                        "--prompt", "128", "--profile"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "profile: prompt of 128 tokens, products and threads (2 threads" in out, out[-3000:]
    assert "profile: decode, products and threads (2 threads" in out, out[-3000:]
    # the decode table comes first (after the decode stages), then the prompt's
    dec = out[out.index("profile: decode, products and threads"):]
    dec = dec[:dec.index("\nprofile: ")]
    check_table(out[out.index("profile: prompt of 128 tokens, products and threads"):], "products, all")
    check_table(dec, "products, all", decode=True)


def test_depth_profile_table(tmp_path):
    """--depth with --profile adds the decode table over the filled context; at 300 positions (two
    attention chunks of vec.h) a 2-thread decode row takes chunk items, so "attention fold" appears."""
    path = str(tmp_path / "m.gguf")
    subprocess.run([BIN, "synth", "--preset", "tiny", "--geometry", "experts=64,top_k=8", "-o", path, "--quiet"],
                   check=True, capture_output=True, timeout=120)
    r = subprocess.run([BIN, "bench", "-m", path, "-t", "2", "--n-decode", "2", "--reps", "1", "--warmup", "1",
                        "--prompt", "0", "--depth", "300", "--profile"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    head = "profile: decode at depth 300, products and threads (2 threads"
    assert head in out and "profile: decode, products and threads (2 threads" in out, out[-3000:]
    dep = out[out.index(head):]
    dep = dep.split("\nprofile: ")[0]
    check_table(dep, "products, all", decode=True)
    assert re.search(r"^  attention fold\s", dep, re.M), dep
    dec = out[out.index("profile: decode, products and threads"):]
    assert "attention fold" not in dec[:dec.index(head)], dec  # depth 0: one chunk, no fold


def check_table(table, *_, decode=False):
    """One products-and-threads table: its rows, the shares adding up to the whole, GB/s of the products."""
    rows, gbs = {}, {}
    for line in table.splitlines()[2:]:
        # (the calls column, when there, is digits then blanks: "3.320" must not split into 3 and .320)
        m = re.match(r"^  (\S.*?)\s{2,}(?:(\d+)\s+)?([\d.]+)\s+([\d.]+)%", line)
        if m:
            rows[m.group(1).strip()] = (float(m.group(3)), float(m.group(4)))
        # a product class: calls, ms, %, GMAC/s, busy %, imbalance, dispatch, quantisation, weight GB/s
        p = re.match(r"^  (\S.*?)\s{2,}\d+\s+[\d.]+\s+[\d.]+%\s+[\d.]+\s+[\d.]+%(\s+-?[\d.]+){4}$", line)
        if p:
            gbs[p.group(1).strip()] = float(line.split()[-1])
    stages = ["deltanet projections", "experts gate+up (+shared)", "experts down (+shared)", "moe router",
              "deltanet recurrence", "deltanet conv", "moe routing", "norms+residuals", "attention core",
              "products, all", "other parallel jobs", "serial"]
    if decode:
        stages.append("output head")  # a prompt's head runs on its last row only; decode's on every token
    for stage in stages:
        assert stage in rows, f"{stage} missing:\n{table}"
    # the labelled inline parts: "(on the calling thread alone: X)" in ms per token
    inl = sum(float(x) for x in re.findall(r"on the calling thread alone: ([\d.]+)\)", table))
    ms = rows["products, all"][0] + rows["other parallel jobs"][0] + inl + rows["serial"][0]
    total = float(re.search(r"products and threads \(2 threads, ([\d.]+) ms per token\)", table).group(1))
    assert abs(ms - total) <= 0.02 * total + 0.01, (ms, total, table)
    assert rows["products, all"][0] > 0 and rows["serial"][1] < 50, table
    # every product class reports its weight rate. The cell is bytes / time printed to one decimal, so
    # a small product on a loaded machine prints 0.0: a rate is never asserted positive (a test must not
    # depend on the machine's load); what the code computes is, below: the columns are there and sane.
    assert len(gbs) > 5 and all(0 <= v < 10000 for v in gbs.values()), (gbs, table)
    # load-independent: each product class ran a whole number of calls, at least one
    for name in gbs:
        assert name in rows, (name, table)
