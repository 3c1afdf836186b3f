#!/usr/bin/env python3
"""Speculative decoding bench: decode speed and acceptance with and without speculation, and
the cost of a K-row verify relative to one step (docs/SPECULATION.md).

Scenarios (greedy, each mode run on the same prompt; the generated ids must be identical):
  rewrite  rewrite a ~1,500-token C source file of this repository with one small edit
           (prompt lookup's home ground: the answer copies the prompt)
  agent    an agent-style multi-turn coding conversation (system prompt, a tool call that read
           a file, the tool result, a follow-up request)
  prose    an open prose question (little to copy; MTP's case)

Modes: none, lookup, mtp (models with an MTP head), auto. Output: a markdown report (tok/s,
speed-up over none, drafted / accepted, tokens per verify) and the raw JSON lines. With
--verify-model, `redlite verify-check` on that model gives the step and K-row verify times
(K = 1..9 rows), from which the speed-up at that size follows from a measured acceptance:
  tokens per verify = 1 + accepted drafts per verify;  speed-up = tokens per verify / (t_K / t_1).

usage: bench/spec_bench.py [-m MODEL] [-n N] [--rounds R] [-t T] [--cache-mib X]
                           [--verify-model GGUF --verify-n N --verify-cache-mib X] [--out FILE.md]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def chatml(turns):
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns) + "<|im_start|>assistant\n"


def scenarios():
    src = (REPO / "src" / "base" / "pool.c").read_text()
    rewrite = chatml([
        ("system", "You are a careful programmer. Answer with code only."),
        ("user", "Rewrite this file with the function `pool_new` renamed to `pool_create` (update every use). "
                 "Output the whole file, unchanged otherwise.\n\n```c\n" + src + "```"),
    ])
    json_c = (REPO / "src" / "base" / "json.c").read_text().splitlines()
    excerpt = "\n".join(json_c[:80])
    agent = chatml([
        ("system", "You are a coding agent. You can call tools: read_file(path), write_file(path, text). "
                   "Think briefly, then act."),
        ("user", "The JSON writer prints -0 as 0. Find where numbers are written in src/base/json.c and fix it."),
        ("assistant", '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/base/json.c"}}\n</tool_call>'),
        ("user", "<tool_response>\n" + excerpt + "\n</tool_response>"),
        ("assistant", "The numbers are written by json_num. I will keep the sign of negative zero."),
        ("user", "Good. Now write the corrected json_num function in full, then explain the change in one line."),
    ])
    prose = chatml([
        ("user", "Write a short essay about the history of lighthouses: how they were lit, who kept them, "
                 "and why most of them are automated today."),
    ])
    return {"rewrite": rewrite, "agent": agent, "prose": prose}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def has_mtp(binary, model, backend=None):
    extra = ["--backend", backend] if backend else []
    r = subprocess.run([binary, "generate", "-m", model, "-p", "x", "-n", "1", "--spec", "mtp", *extra], capture_output=True,
                       text=True, cwd=REPO)
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=str(REPO / "models" / "default.gguf"))
    ap.add_argument("--bin", default=str(REPO / "build" / "redlite"))
    ap.add_argument("-n", type=int, default=256, help="tokens to generate per run (default 256)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (default 1)")
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--backend", default=None, help="cpu | cuda | auto (default: the binary's, cpu)")
    ap.add_argument("--cache-mib", default=None)
    ap.add_argument("--scenarios", default="rewrite,agent,prose")
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--draft-min", type=int, default=None,
                    help="passed to the speculative modes (default: the binary's, 0 = cost-aware K)")
    ap.add_argument("--verify-model", default=None, help="GGUF for the K-row verify cost (verify-check)")
    ap.add_argument("--verify-n", type=int, default=200)
    ap.add_argument("--verify-cache-mib", default=None)
    ap.add_argument("--verify-rounds", type=int, default=5, help="timing rounds of verify-check (default 5)")
    ap.add_argument("--out", default=None, help="markdown report (default: print)")
    a = ap.parse_args()

    common = ["--raw", "--json", "-n", str(a.n), "--draft-max", str(a.draft_max)]
    if a.threads:
        common += ["-t", str(a.threads)]
    if a.cache_mib:
        common += ["--cache-mib", a.cache_mib]
    if a.backend:
        common += ["--backend", a.backend]
    modes = ["none", "lookup"] + (["mtp"] if has_mtp(a.bin, a.model, a.backend) else []) + ["auto"]
    spec_extra = ["--draft-min", str(a.draft_min)] if a.draft_min is not None else []
    sc = scenarios()
    names = [s for s in a.scenarios.split(",") if s]
    rows, raw = [], []
    for name in names:
        res = {m: [] for m in modes}
        for rnd in range(a.rounds):
            for mode in modes:
                extra = spec_extra if mode != "none" else []
                out = json.loads(run([a.bin, "generate", "-m", a.model, "-p", sc[name], "--spec", mode, *common,
                                      *extra]).stdout)
                out.update(scenario=name, mode=mode, round=rnd)
                raw.append({k: v for k, v in out.items() if k not in ("prompt_ids", "text")})
                res[mode].append(out)
                print(f"{name:8s} {mode:6s} round {rnd}: {out['decode_tok_s']:.2f} tok/s, {out['n_generated']} tok, "
                      f"{out['n_accepted']}/{out['n_drafted']} accepted, {out['n_verifies']} verifies",
                      file=sys.stderr)
        base = res["none"]
        # medians: on a shared machine a mean is pulled by the slowest run; the speed-up is the
        # median over rounds of the ratio to the same round's plain run (interleaved, so the two
        # saw similar load)
        for mode in modes:
            os_ = res[mode]
            tps = median([o["decode_tok_s"] for o in os_])
            ratio = median([o["decode_tok_s"] / b["decode_tok_s"] for o, b in zip(os_, base)])
            # CPU seconds per token (all threads; generate --json decode_cpu_s): the work, which
            # other load on a shared machine hardly changes; the CPU speed-up is its ratio
            cpt = median([o["decode_cpu_s"] / max(o["n_generated"], 1) for o in os_]) if "decode_cpu_s" in os_[0] else 0
            cpt0 = median([b["decode_cpu_s"] / max(b["n_generated"], 1) for b in base]) if "decode_cpu_s" in base[0] else 0
            same = all(o["generated_ids"] == b["generated_ids"] for o, b in zip(os_, base))
            dr = sum(o["n_drafted"] for o in os_)
            ac = sum(o["n_accepted"] for o in os_)
            ver = sum(o["n_verifies"] for o in os_)
            rows.append((name, mode, os_[0]["n_prompt"], os_[0]["n_generated"], tps, ratio, dr, ac,
                         (ac + ver) / ver if ver else 0.0, same, 1e3 * cpt, cpt0 / cpt if cpt else 0))

    verify = None
    if a.verify_model:
        cmd = [a.bin, "verify-check", "-m", a.verify_model, "--json", "-n", str(a.verify_n), "--timing",
               str(a.verify_rounds)]
        if a.threads:
            cmd += ["-t", str(a.threads)]
        if a.verify_cache_mib:
            cmd += ["--cache-mib", a.verify_cache_mib]
        if a.backend:
            cmd += ["--backend", a.backend]
        verify = json.loads(run(cmd).stdout)
        raw.append({"verify_check": verify})

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [f"# Speculative decoding bench ({now})", "",
             f"Model `{a.model}` ({os.path.getsize(a.model) / 2**20:.0f} MiB); `{a.bin}`; greedy, -n {a.n}, "
             f"--draft-max {a.draft_max}"
             f"{'' if a.draft_min is None else f', --draft-min {a.draft_min}'}, {a.rounds} round(s) (medians; "
             f"speed-up: median of per-round ratios), threads {a.threads or 'all'}, cache "
             f"{a.cache_mib or 'auto'}; backend {a.backend or 'cpu'}; CPU: {cpu or '?'} ({os.cpu_count()} CPUs, shared).", "",
             "| scenario | mode | prompt tok | generated | decode tok/s (median) | vs none | CPU ms/token | "
             "vs none (CPU) | drafted | accepted | tokens/verify | ids identical |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, mode, npr, ngen, tps, sp, dr, ac, tpv, same, cms, csp in rows:
        acc = f"{ac} ({100 * ac / dr:.0f} %)" if dr else "0"
        lines.append(f"| {name} | {mode} | {npr} | {ngen} | {tps:.2f} | {sp:.2f}x | {cms:.2f} | {csp:.2f}x | {dr} | "
                     f"{acc} | {tpv:.2f} | {'yes' if same else '**NO**'} |")
    if verify:
        lines += ["", f"K-row verify cost (`redlite verify-check -m {a.verify_model} -n {a.verify_n}`, cache "
                      f"{verify['cache']}, bit-identical: {verify['ok']}): one step {verify['step_ms']:.1f} ms mean, "
                      f"{verify['step_min_ms']:.1f} ms min. The minimum is the better estimate of the cost on a "
                      "shared machine (interference only adds).", "",
                  "| rows | verify ms (mean) | / step (mean) | verify ms (min) | / step (min) |",
                  "|---:|---:|---:|---:|---:|"]
        for k, ms in sorted(verify["verify_ms"].items(), key=lambda kv: int(kv[0])):
            mn = verify["verify_min_ms"][k]
            lines.append(f"| {k} | {ms:.1f} | {ms / verify['step_ms']:.2f} | {mn:.1f} | "
                         f"{mn / verify['step_min_ms']:.2f} |")
        t = verify.get("timing")
        if t:
            lines += ["", f"Timing rounds at one position ({t['rounds']} rounds, rows interleaved, snapshots as the "
                          "loop takes them: rows 0..K-1):", "",
                      "| rows | median ms | / step | min ms | / step |", "|---:|---:|---:|---:|---:|"]
            m1, n1 = t["median_ms"]["1"], t["min_ms"]["1"]
            for k in sorted(t["median_ms"], key=int):
                lines.append(f"| {k} | {t['median_ms'][k]:.1f} | {t['median_ms'][k] / m1:.2f} | "
                             f"{t['min_ms'][k]:.1f} | {t['min_ms'][k] / n1:.2f} |")
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
        Path(a.out).with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
        print(f"wrote {a.out}", file=sys.stderr)
    else:
        print(text)
    if not all(r[9] for r in rows):
        sys.exit("a speculative run changed the generated ids")


if __name__ == "__main__":
    main()
