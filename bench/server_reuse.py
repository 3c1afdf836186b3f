#!/usr/bin/env python3
"""`redlite serve`: time to first token of a second turn that extends a ~4K-token conversation,
against the cold prefill, in memory and after a restart with --state-dir.

    bench/server_reuse.py [-m MODEL] [--tokens 4096] [-t THREADS] [--out FILE.md] [-- serve flags]

Steps (greedy, loopback, streaming; TTFT = request sent -> first chunk with content):
  1. server A (--state-dir, saves after every request): turn 1 = the ~4K-token conversation, cold;
  2. turn 2 on A = turn 1 + its answer + a short user message (prefix held in memory);
  3. A stops (checkpoint flushed); server B on the same --state-dir: turn 2 again (restored from disk);
  4. a cold server without state: turn 2 again (full prefill) — also checks the answers are identical.
Writes bench/results/<date>-server-reuse.md (and prints it). Needs the `openai` client
(tests/requirements.txt; build/venv has it after `make test`).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import openai  # noqa: E402
from server_util import Server  # noqa: E402


def count_tokens(base, msgs):
    req = urllib.request.Request(base + "/v1/messages/count_tokens", method="POST",
                                 data=json.dumps({"model": "m", "system": msgs[0]["content"],
                                                  "messages": msgs[1:]}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["input_tokens"]


def conversation(base, target):
    """System + user message of about `target` prompt tokens (measured with count_tokens)."""
    lines, n = [], 0
    i = 0
    while True:
        chunk = [f"def helper_{i + k}(values, scale={k}):\n    return [v * scale + {k} for v in values]"
                 for k in range(40)]
        i += 40
        lines += chunk
        msgs = [{"role": "system", "content": "You are a careful code reviewer."},
                {"role": "user", "content": "Review this module:\n\n" + "\n\n".join(lines)}]
        n = count_tokens(base, msgs)
        if n >= target:
            return msgs, n


def ttft(client, msgs, max_tokens=8):
    t0 = time.perf_counter()
    first, text, usage = None, "", None
    for ch in client.chat.completions.create(model="m", messages=msgs, max_tokens=max_tokens, temperature=0,
                                             stream=True, stream_options={"include_usage": True}):
        if ch.choices and (ch.choices[0].delta.content or ch.choices[0].finish_reason) and first is None:
            first = time.perf_counter() - t0
        if ch.choices:
            text += ch.choices[0].delta.content or ""
        if ch.usage:
            usage = ch.usage
    return first, text, usage, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=str(REPO / "models" / "default.gguf"))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*", help="more `redlite serve` flags (after --)")
    a = ap.parse_args()
    os.environ["RL_CHAT_MODEL"] = a.model
    flags = ["-t", a.threads, "--temp", "0", "--ctx", str(a.tokens * 2 + 1024), *a.extra]
    state = tempfile.mkdtemp(prefix="redlite-bench-state-")
    rows = []
    with Server(*flags, "--state-dir", state, "--state-min-tokens", "1") as s:
        c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=3600, max_retries=0)
        conv, n = conversation(s.base, a.tokens)
        t1, text1, u1, _ = ttft(c, conv)
        rows.append(("turn 1, cold prefill", u1.prompt_tokens, u1.prompt_tokens_details.cached_tokens, t1))
        conv2 = conv + [{"role": "assistant", "content": text1},
                        {"role": "user", "content": "Which helper has the largest scale? Answer briefly."}]
        t2, text2, u2, _ = ttft(c, conv2)
        rows.append(("turn 2, prefix held in memory", u2.prompt_tokens, u2.prompt_tokens_details.cached_tokens, t2))
        assert s.stop() == 0
    with Server(*flags, "--state-dir", state) as s:
        c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=3600, max_retries=0)
        t3, text3, u3, _ = ttft(c, conv2)
        rows.append(("turn 2 after a restart, from --state-dir", u3.prompt_tokens,
                     u3.prompt_tokens_details.cached_tokens, t3))
    with Server(*flags) as s:
        c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=3600, max_retries=0)
        t4, text4, u4, _ = ttft(c, conv2)
        rows.append(("turn 2 on a cold server (full prefill)", u4.prompt_tokens,
                     u4.prompt_tokens_details.cached_tokens, t4))
    same = text2 == text3 == text4
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    out = [f"# Server prefix reuse, {datetime.date.today()}",
           "",
           f"`bench/server_reuse.py`, commit {commit}, model `{a.model}` ({os.path.getsize(a.model) / 2**20:.0f} MiB), "
           f"flags `{' '.join(flags)}`, {os.cpu_count()} CPUs visible, loopback, greedy, streaming.",
           "TTFT = request sent until the first chunk with content.",
           "",
           "| request | prompt tokens | cached (reused) | TTFT (s) | vs cold |",
           "|---|---:|---:|---:|---:|"]
    cold = rows[-1][3]
    for name, p, cached, t in rows:
        out.append(f"| {name} | {p} | {cached} | {t:.3f} | {100 * t / cold:.1f} % |")
    out += ["", f"Turn-2 answers identical (memory / disk / cold): {'yes' if same else 'NO'}.",
            f"Target (issue 14): turn 2 TTFT <= 10 % of the cold prefill: memory {100 * t2 / t4:.1f} %, "
            f"after restart {100 * t3 / t4:.1f} %."]
    text = "\n".join(out) + "\n"
    print(text)
    path = Path(a.out) if a.out else REPO / "bench" / "results" / f"{datetime.date.today()}-server-reuse.md"
    path.write_text(text)
    subprocess.run(["rm", "-rf", state])
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
