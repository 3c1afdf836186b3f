#!/usr/bin/env python3
"""`redlite serve --parallel`: aggregate decode rate of 1, 2, 4 concurrent greedy streams.

    bench/server_slots.py [-m MODEL] [-t THREADS] [--tokens 128] [--streams 1,2,4] [--reps 2]
                          [--out FILE.md] [-- serve flags]

For each stream count S: a server with --parallel S; S different conversations sent at once
(streaming, greedy, max_tokens = --tokens); per stream the decode time is first content chunk ->
last chunk; the aggregate rate is all streams' completion tokens over the span from the earliest
first chunk to the latest last chunk (prompt ingestion excluded). Each answer is checked against the
same conversation run alone on a one-slot server (bit-identical text is the contract). The best of
--reps runs is kept. Also the decode forwards / rows counters (rows per forward = the mean batch).
Writes bench/results/<date>-server-slots.md (and prints it) with the date, machine and commit.
Needs the `openai` client (tests/requirements.txt).
"""
import argparse
import datetime
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import openai  # noqa: E402
from server_util import Server  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from gpu_rows_load import conv  # noqa: E402  (the same conversations as the GPU machine's load)


def stream_one(base, i, tokens, out):
    c = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=1200, max_retries=0)
    first = last = None
    text, usage = "", None
    for ch in c.chat.completions.create(model="m", messages=conv(i), max_tokens=tokens, temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        now = time.perf_counter()
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
            first = first or now
            last = now
        if ch.usage:
            usage = ch.usage
    out[i] = {"text": text, "first": first, "last": last, "tokens": usage.completion_tokens if usage else 0}


def run(base, S, tokens):
    out = [None] * S
    ts = [threading.Thread(target=stream_one, args=(base, i, tokens, out)) for i in range(S)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    firsts = [o["first"] for o in out if o["first"]]
    lasts = [o["last"] for o in out if o["last"]]
    n = sum(o["tokens"] for o in out)
    span = max(lasts) - min(firsts) if firsts else 0
    return out, n, span


def git(*a):
    try:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return "?"


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=str(REPO / "models" / "default.gguf"))
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("serve", nargs="*", help="extra serve flags (after --)")
    a = ap.parse_args()
    counts = [int(x) for x in a.streams.split(",")]
    base_args = ["-m", a.model, "-t", a.threads, *a.serve]
    # the answers alone (one slot, one request at a time): the reference texts
    with Server(*base_args, "--parallel", "1") as s:
        alone = {}
        for i in range(max(counts)):
            o = [None] * (i + 1)
            stream_one(s.base, i, a.tokens, o)
            alone[i] = o[i]["text"]
    rows = []
    for S in counts:
        best = None
        with Server(*base_args, "--parallel", str(S)) as s:
            for _ in range(a.reps):
                m0 = s.metrics()
                out, n, span = run(s.base, S, a.tokens)
                m1 = s.metrics()
                same = all(out[i]["text"] == alone[i] for i in range(S))
                fw = m1.get("redlite_decode_forwards_total", 0) - m0.get("redlite_decode_forwards_total", 0)
                rw = m1.get("redlite_decode_rows_total", 0) - m0.get("redlite_decode_rows_total", 0)
                rate = n / span if span > 0 else 0
                if not best or rate > best["rate"]:
                    best = {"S": S, "tokens": n, "span": span, "rate": rate, "same": same,
                            "batch": rw / fw if fw else 0}
        rows.append(best)
    base_rate = rows[0]["rate"] if rows and rows[0]["S"] == 1 else None
    date = datetime.date.today().isoformat()
    lines = [f"# `redlite serve --parallel`: aggregate decode, {', '.join(map(str, counts))} greedy streams", "",
             f"- date: {date}; commit {git('rev-parse', '--short', 'HEAD')}"
             f"{' (uncommitted changes)' if git('status', '--porcelain', '--untracked-files=no') else ''}",
             f"- machine: {cpu_name()}, {os.cpu_count()} CPUs online, {platform.system()} {platform.release()}; "
             f"load average at the end {os.getloadavg()[0]:.1f}",
             f"- model: {Path(a.model).name}; serve flags: -t {a.threads} {' '.join(a.serve)}; "
             f"max_tokens {a.tokens}; best of {a.reps}",
             "- aggregate = all streams' completion tokens / (latest last chunk - earliest first chunk)", "",
             "| streams | tokens | decode span (s) | aggregate tok/s | vs 1 stream | rows per forward | texts == alone |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = f"{r['rate'] / base_rate:.2f}x" if base_rate else "-"
        lines.append(f"| {r['S']} | {r['tokens']} | {r['span']:.2f} | {r['rate']:.1f} | {ratio} | {r['batch']:.2f} | "
                     f"{'yes' if r['same'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(a.out) if a.out else REPO / "bench" / "results" / f"{date}-server-slots.md"
    out.write_text(text)
    print(f"written to {out}")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
