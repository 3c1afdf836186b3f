#!/usr/bin/env python3
"""Red Lite with and without --iq-repack on the same files, interleaved (bench/results/*iq-repack*).

    bench/iq_repack.py FILE... [-t 1,2] [--rounds 3] [--n-decode 16] [--prompt 512] [--out X.json]
    bench/iq_repack.py FILE... --cpu [--rounds 2] [--n-decode 32] [--prompt 512]
    (RL_BENCH_REDLITE: the binary to run, default build/redlite)

Each round runs, for every file and thread count, `redlite bench` once per mode: without
--iq-repack ("off"), with it for the routed experts only (RL_REPACK_DENSE=0, "experts") and for
every IQ matrix ("all"), in an order rotating between rounds, one timed repetition each
(--reps 1): the medians over rounds are reported with every round's value and the 1-minute load
average before each run, so a noisy shared machine shows in the numbers.

--cpu: one thread, CPU seconds instead of wall time (a run's user time from the kernel's
accounting, which time slices lost to other processes do not inflate; system time is left out: the
page faults of loading and repacking vary by seconds from run to run and would not cancel): per mode three
runs, B = load + 1 decode step, D = B + n_decode steps, P = B + a prompt of --prompt tokens;
(D - B) / n_decode is the CPU time per decoded token and (P - B) / prompt per prompt token, so the
load (and the repack) cancels out. Reported as tokens per CPU-second.
"""
import resource
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDLITE = os.environ.get("RL_BENCH_REDLITE", os.path.join(ROOT, "build", "redlite"))


MODES = ("off", "experts", "all")
MODES = tuple(os.environ.get("RL_BENCH_MODES", ",".join(MODES)).split(","))  # e.g. off,all


def run(path, threads, mode, args):
    cmd = [REDLITE, "bench", "-m", path, "-t", str(threads), "--prompt", str(args.prompt), "--n-decode",
           str(args.n_decode), "--reps", "1", "--json"] + (["--iq-repack"] if mode != "off" else [])
    env = dict(os.environ, RL_REPACK_DENSE="0" if mode == "experts" else "1")
    load = os.getloadavg()[0]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    j = json.loads(r.stdout)
    return {"load": load, "decode": j["decode"][0]["tok_s"], "prompt": j["prompt"][0]["tok_s"] if j["prompt"] else None,
            "load_s": j["load_seconds"], "rss": j.get("peak_rss_bytes")}


def cpu_run(path, mode, extra):
    cmd = [REDLITE, "bench", "-m", path, "-t", "1", "--reps", "1", "--json"] + extra + \
          (["--iq-repack"] if mode != "off" else [])
    env = dict(os.environ, RL_REPACK_DENSE="0" if mode == "experts" else "1")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r1.ru_utime - r0.ru_utime


def cpu_main(args):
    res = {}
    for rnd in range(args.rounds):
        for f in args.files:
            for k in range(len(MODES)):
                mode = MODES[(k + rnd) % len(MODES)]
                b = cpu_run(f, mode, ["--prompt", "0", "--n-decode", "1", "--warmup", "0"])
                d = cpu_run(f, mode, ["--prompt", "0", "--n-decode", str(args.n_decode), "--warmup", "1"])
                p = cpu_run(f, mode, ["--prompt", str(args.prompt), "--n-decode", "1", "--warmup", "0"])
                dec, pro = args.n_decode / (d - b), args.prompt / (p - b)
                res.setdefault((f, mode), []).append((dec, pro))
                print(f"round {rnd} {os.path.basename(f)} {mode:8}: decode {dec:.2f} prompt {pro:.2f} tok per CPU-s "
                      f"(CPU s: base {b:.1f}, decode {d:.1f}, prompt {p:.1f}), load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\n{'file':20} | decode tok/CPU-s: {' '.join(MODES)} (x vs the first) | prompt tok/CPU-s: the same")
    out = []
    for f in args.files:
        md = [statistics.median(x[0] for x in res[(f, m)]) for m in MODES]
        mp = [statistics.median(x[1] for x in res[(f, m)]) for m in MODES]
        print(f"{os.path.basename(f):20} | " + " ".join(f"{v:6.2f} ({v / md[0]:.2f})" for v in md) + " | " +
              " ".join(f"{v:6.2f} ({v / mp[0]:.2f})" for v in mp))
        out.append({"file": f, "runs": {m: res[(f, m)] for m in MODES}, "decode_median": dict(zip(MODES, md)),
                    "prompt_median": dict(zip(MODES, mp))})
    if args.out:
        json.dump(out, open(args.out, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("-t", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-decode", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--out")
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args()
    if args.cpu:
        return cpu_main(args)
    threads = [int(t) for t in args.t.split(",")]
    res = {}
    for rnd in range(args.rounds):
        for f in args.files:
            for t in threads:
                for k in range(len(MODES)):
                    mode = MODES[(k + rnd) % len(MODES)]
                    r = run(f, t, mode, args)
                    res.setdefault((f, t, mode), []).append(r)
                    print(f"round {rnd} {os.path.basename(f)} t={t} {mode:8}: decode {r['decode']:.2f} "
                          f"prompt {r['prompt']:.2f} tok/s, load {r['load']:.1f}, loaded in {r['load_s']:.1f} s, "
                          f"peak RSS {r['rss'] / 2**30:.2f} GiB", flush=True)
    out = []
    print(f"\n{'file':20} {'t':>2} | decode tok/s: off experts (x) all (x) | prompt tok/s: off experts (x) all (x) | load")
    for f in args.files:
        for t in threads:
            v = [res[(f, t, m)] for m in MODES]
            md = [statistics.median(x["decode"] for x in r) for r in v]
            mp = [statistics.median(x["prompt"] for x in r) for r in v]
            loads = [x["load"] for r in v for x in r]
            print(f"{os.path.basename(f):20} {t:2} | {md[0]:6.2f} {md[1]:6.2f} ({md[1] / md[0]:.2f}) {md[2]:6.2f} "
                  f"({md[2] / md[0]:.2f}) | {mp[0]:6.2f} {mp[1]:6.2f} ({mp[1] / mp[0]:.2f}) {mp[2]:6.2f} "
                  f"({mp[2] / mp[0]:.2f}) | {min(loads):.1f}-{max(loads):.1f}")
            out.append({"file": f, "threads": t, "runs": dict(zip(MODES, v)), "decode_median": dict(zip(MODES, md)),
                        "prompt_median": dict(zip(MODES, mp))})
    if args.out:
        json.dump(out, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
