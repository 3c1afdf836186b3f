#!/usr/bin/env python3
"""bench/cuda_files_table.py — the issue-15 table (Red Lite ÷ llama.cpp on the same full files) from the
records bench/cuda_files.sh writes: one JSON object a line, {"tool": "redlite" | "llama-bench", "tag", "args",
"result"} where result is `redlite bench --json` or `llama-bench -o json` output.

Tags read (PRESET = cf2, iq2_xxs, q4_k_m, ...): PRESET-rN (round N: llama-bench pp2048 + tg128 at -ub 512 and
2048; redlite prompt 2048, decode at 0 and 8K), PRESET-depth (llama-bench tg64 at -d 8192,32768), PRESET-d32k
(redlite decode at 32K), PRESET-p32k (both: prompt 32768). Other tags (A/B variants) are ignored.

Per round, llama.cpp's figure is its best micro-batch (what a user would pick); each cell is the median over
rounds of each tool, and the ratio is Red Lite's median over llama.cpp's.

  bench/cuda_files_table.py RECORDS.jsonl [--json]
"""
import json
import statistics
import sys
from collections import defaultdict

# issue 15's targets, per measure (None: no target)
TARGETS = {"decode 0": 2.0, "decode 8K": None, "decode 32K": 1.5, "prompt 2K": 4.0, "prompt 32K": 4.0}


def lc_values(rows, measure):
    """llama-bench rows -> the best avg_ts (over micro-batches) of one measure, or None."""
    out = []
    for r in rows if isinstance(rows, list) else []:
        p, n, d = r.get("n_prompt", 0), r.get("n_gen", 0), r.get("n_depth", 0)
        if ((measure == "decode 0" and n > 0 and p == 0 and d == 0) or
                (measure == "decode 8K" and n > 0 and p == 0 and d == 8192) or
                (measure == "decode 32K" and n > 0 and p == 0 and d == 32768) or
                (measure == "prompt 2K" and p == 2048 and n == 0) or
                (measure == "prompt 32K" and p == 32768 and n == 0)):
            out.append(r["avg_ts"])
    return max(out) if out else None


def rl_value(j, measure):
    """redlite bench --json -> tok/s of one measure, or None."""
    if not isinstance(j, dict):
        return None
    if measure.startswith("decode"):
        depth = {"decode 0": 0, "decode 8K": 8192, "decode 32K": 32768}[measure]
        return next((x["tok_s"] for x in j.get("decode", []) if x.get("depth") == depth), None)
    n = {"prompt 2K": 2048, "prompt 32K": 32768}[measure]
    return next((x["tok_s"] for x in j.get("prompt", []) if x.get("n_tokens") == n), None)


def table(records):
    """{preset: {measure: {"rl": [...], "lc": [...], "ratio": x}}} from the records."""
    cells = defaultdict(lambda: defaultdict(lambda: {"rl": [], "lc": []}))
    for rec in records:
        tag, tool, res = rec.get("tag", ""), rec.get("tool"), rec.get("result")
        preset, _, kind = tag.rpartition("-")
        if not preset or not (kind in ("depth", "d32k", "p32k") or (kind[:1] == "r" and kind[1:].isdigit())):
            continue
        side = "rl" if tool == "redlite" else "lc" if tool == "llama-bench" else None
        if side is None:
            continue
        for m in TARGETS:
            v = rl_value(res, m) if side == "rl" else lc_values(res, m)
            # decode at 0 from the depth / 32K runs is a by-product (fewer steps): only the rounds count for it
            if v is not None and not (m == "decode 0" and kind in ("depth", "d32k", "p32k")):
                cells[preset][m][side].append(v)
    for preset in cells:
        for m, c in cells[preset].items():
            c["ratio"] = (statistics.median(c["rl"]) / statistics.median(c["lc"])
                          if c["rl"] and c["lc"] else None)
    return cells


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    try:
        with open(argv[1]) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        print(f"cuda_files_table: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 1
    cells = table(records)
    if "--json" in argv:
        print(json.dumps(cells, indent=1))
        return 0
    print("| file | " + " | ".join(TARGETS) + " |")
    print("|---|" + "---:|" * len(TARGETS))
    for preset, row in cells.items():
        out = []
        for m, target in TARGETS.items():
            c = row.get(m)
            if not c or c["ratio"] is None:
                out.append("—")
                continue
            mark = "" if target is None else (" met" if c["ratio"] >= target else " not met")
            out.append(f"{c['ratio']:.2f}×{mark} ({statistics.median(c['rl']):,.0f} / "
                       f"{statistics.median(c['lc']):,.0f})")
        print(f"| {preset} | " + " | ".join(out) + " |")
    print("| target | " + " | ".join(f"≥ {t}×" if t else "—" for t in TARGETS.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
