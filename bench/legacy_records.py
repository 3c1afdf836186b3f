#!/usr/bin/env python3
"""bench/legacy_records.py: the records (bench/records.py) of three runs measured before `redlite bench
--json` named its machine, date, commit and budget, for bench/charts.py.

    bench/legacy_records.py        writes the three bench/results/*-records-*.jsonl files below

Every rate is copied from the run's raw file; what the raw file did not hold (machine, date, the Red Lite
tree, the file's description, the budget options) is copied from the run's own report (.md), named beside
each source below. Only the default configuration of each run is kept (A/B rows of experimental switches
are left out), as the reports' tables do.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "results")

# 2026-12-04-session24-h200.md: one NVIDIA H200, 16-core host; tree 5a1ee44 (call 75); files
# `redlite synth --preset P --routing calibrated` at full geometry; llama.cpp -ngl 99 -fa 1, -ub 2048 the
# better micro-batch in every row (the baseline).
DEPTH_SRC = "2026-12-04-session24-h200.jsonl"
DEPTH_MACHINE = "NVIDIA H200, Intel(R) Xeon(R) Processor, 16 CPUs"
DEPTH_FILES = {"/tmp/full_cf2.gguf": "synth cf2 (19.3 GB)", "/tmp/full_iq2_xxs.gguf": "synth iq2_xxs (21.1 GB)",
               "/tmp/full_q4_k_m.gguf": "synth q4_k_m (48.3 GB)"}


def depth_records():
    def keep(w):
        args = str(w.get("args", ""))
        return w.get("call") == 75 and not args.startswith("[RL_")  # "[X=1]": the default switches
    out = []
    for r in records.from_wrapped(os.path.join(RESULTS, DEPTH_SRC), {"machine": DEPTH_MACHINE}, keep):
        if r["file"] not in DEPTH_FILES or (r["engine"] == "llama.cpp" and r.get("config") != "-ub 2048"):
            continue
        r.update(file=DEPTH_FILES[r["file"]], source=DEPTH_SRC + "#" + r["tag"])
        r.pop("config", None)
        if r["engine"] == "llama.cpp":  # its build_commit is "unknown": the sdist's source, named in the
            r["commit"] = "0c1e5709"    # VRAM report (2026-12-01-vram-bench-h200-run2.md), same sdist 0.3.36
        else:  # `redlite bench --backend cuda`: every weight on the device
            r.update(date="2026-12-04", commit="5a1ee44", budget={"cache_mib": "auto", "vram_mib": None})
        out.append(r)
    return out


# 2026-12-01-vram-bench-h200-run2.md: one NVIDIA H200 (16-core Xeon host, 125 GiB RAM), tree 3c9b2dc; llama.cpp
# the 0c1e5709 source, -t 16 -lm none, its VRAM the nvidia-smi peak while it ran minus the idle figure.
VRAM_SRC = ("2026-12-01-vram-bench-h200-run2-cf2.jsonl", "2026-12-01-vram-bench-h200-run2-q4km.jsonl")
VRAM_MACHINE = "NVIDIA H200, Intel(R) Xeon(R) Processor, 16 CPUs, 125 GiB RAM"
VRAM_FILES = {"cf2": "synth cf2 (19.3 GB)", "q4km": "synth q4_k_m (48.3 GB)"}


def budget_arg(args, opt):
    m = re.search(rf"{opt} (\S+)", args or "")
    if not m:
        return None
    return int(m.group(1)) if m.group(1).isdigit() else m.group(1)


def vram_records():
    out = []
    for src in VRAM_SRC:
        for i, line in enumerate(open(os.path.join(RESULTS, src)), 1):
            w = json.loads(line)
            if w.get("rc") != 0 or (w["engine"] == "llama.cpp" and not w.get("budget_mib")):
                continue  # the llama.cpp checks against anchors.md have no budget
            base = {"machine": VRAM_MACHINE, "date": "2026-12-01", "file": VRAM_FILES[w["run"].split("-")[w["engine"] == "llama.cpp"]],
                    "engine": w["engine"],
                    "backend": "cuda", "threads": 16, "source": f"{src}#{w['run']}", "tag": w["run"]}
            if w["engine"] == "redlite":
                a = w["args"]
                base.update(commit="3c9b2dc", budget={"cache_mib": budget_arg(a, "--cache-mib"),
                                                       "vram_mib": budget_arg(a, "--vram-mib")})
                if w.get("hits_pct") is not None:
                    base["hit_rate"] = round(w["hits_pct"] / 100, 6)
                cfg = []
                if budget_arg(a, "--vram-miss") == "auto":
                    cfg.append("--vram-miss auto")
                if base["budget"]["cache_mib"] != "full":
                    cfg.append(f"--cache-mib {base['budget']['cache_mib']}")
                if cfg:
                    base["config"] = " ".join(cfg)
                n_dec = budget_arg(a, "--n-decode")
            else:
                base.update(commit="0c1e5709", budget={"cache_mib": None, "vram_mib": w["budget_mib"]},
                            vram_used_mib=w["vram_peak_mib"])
                base["tag"] += f" (-ncmoe {w['ncmoe']})"
                n_dec = 64
            out.append(dict(base, kind="decode", depth=0, n_tokens=n_dec, tok_s=w["decode_tok_s"]))
            p = w.get("prompt2048_tok_s", w.get("prompt_tok_s"))
            if p:
                out.append(dict(base, kind="prompt", depth=0, n_tokens=2048, tok_s=p))
    return out


# cache-2026-11-30.md: CPU only, 16 x Intel Xeon, 125 GiB RAM, a virtual disk (1.2-1.7 GB/s); expert cache at
# commit a032497, fast path; synthetic CF2 (18.0 GiB, experts 16.59 GiB); each run: prefill 16 tokens, then 32
# greedy decode steps on 16 threads, the statistics over the decode steps. Labels: the budget, ":noprefetch"
# with prefetch off; the I/O-thread, buffered and top-k prefetch variants are left out.
CACHE_SRC = "cache-2026-11-30-raw.jsonl"


def cache_records():
    out = []
    for i, line in enumerate(open(os.path.join(RESULTS, CACHE_SRC)), 1):
        w = json.loads(line)
        spec, _, opt = w["label"].partition(":")
        if opt not in ("", "noprefetch") or w["decode_tokens"] != 32:
            continue  # the report's main table: 32 decode tokens (the 160/600-token runs are its notes)
        r = {"machine": "Intel(R) Xeon(R) Processor, 16 CPUs, 125 GiB RAM, virtual disk", "date": "2026-11-30",
             "commit": "a032497", "file": "synth cf2 (18.0 GiB)", "engine": "redlite", "backend": "cpu",
             "threads": 16, "budget": {"cache_mib": int(spec) if spec.isdigit() else spec, "vram_mib": None},
             "kind": "decode", "depth": w["prefill_tokens"], "n_tokens": w["decode_tokens"],
             "tok_s": w["decode_tok_s"], "hit_rate": w["hit_rate"], "source": f"{CACHE_SRC}:{i}",
             "tag": w["label"]}
        if opt:
            r["config"] = "prefetch off"
        out.append(r)
    return out


def main():
    for name, recs in (("2026-12-04-records-depth-h200.jsonl", depth_records()),
                       ("2026-12-01-records-vram-h200.jsonl", vram_records()),
                       ("2026-11-30-records-cache.jsonl", cache_records())):
        for r in recs:
            why = records.validate(r)
            if why:
                sys.exit(f"legacy_records: {name}: {r.get('source')}: the record {why}")
        with open(os.path.join(RESULTS, name), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
        print(f"wrote bench/results/{name} ({len(recs)} records)")


if __name__ == "__main__":
    main()
