#!/usr/bin/env python3
"""`redlite serve` soak: N requests from C concurrent clients on loopback, bounded in time.

    bench/server_soak.py [-m MODEL] [-n 1000] [-c 8] [--max-tokens 16] [-t THREADS] [--timeout 1800]
                         [--out FILE.md] [-- serve flags]

Each client runs its own growing conversation (chat completions, streaming every other request,
tools on every third, a fresh conversation every 8 turns) so the server sees prefix reuse,
tool parsing, SSE and plain JSON. The queue (--queue, default 16) is larger than the client
count, so every request must succeed: any failure is reported (503s are counted separately).
Peak and current RSS of the server are read from /proc at 100 and at N requests.
Writes bench/results/<date>-server-soak.md (and prints it).
"""
import argparse
import datetime
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import openai  # noqa: E402
from server_util import Server  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                          "required": ["path"]}}}]


def rss(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out["VmRSS"], out["VmHWM"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=str(REPO / "models" / "default.gguf"))
    ap.add_argument("-n", "--requests", type=int, default=1000)
    ap.add_argument("-c", "--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    os.environ["RL_CHAT_MODEL"] = a.model
    flags = ["-t", a.threads, "--ctx", "8192", *a.extra]
    lock = threading.Lock()
    done = {"n": 0, "ok": 0, "fail": 0, "busy": 0, "gen": 0, "cached": 0, "prompt": 0, "errors": []}
    marks = {}
    t0 = time.time()
    with Server(*flags) as s:
        pid = s.proc.pid
        marks[0] = rss(pid)

        def client(ci):
            c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=600, max_retries=0)
            conv = []
            turn = 0
            while True:
                with lock:
                    if done["n"] + done["inflight"] >= a.requests or time.time() - t0 > a.timeout:
                        return
                    done["inflight"] += 1
                if turn % 8 == 0:
                    conv = [{"role": "system", "content": f"You are client {ci}'s assistant."}]
                conv.append({"role": "user", "content": f"Turn {turn}: summarise item {ci * 1000 + turn}."})
                kw = {"tools": TOOLS} if turn % 3 == 0 else {}
                try:
                    if turn % 2:
                        text, usage = "", None
                        for ch in c.chat.completions.create(model="m", messages=conv, max_tokens=a.max_tokens,
                                                            stream=True, stream_options={"include_usage": True}, **kw):
                            if ch.choices:
                                text += ch.choices[0].delta.content or ""
                            if ch.usage:
                                usage = ch.usage
                    else:
                        r = c.chat.completions.create(model="m", messages=conv, max_tokens=a.max_tokens, **kw)
                        text, usage = r.choices[0].message.content or "", r.usage
                    conv.append({"role": "assistant", "content": text})
                    with lock:
                        done["ok"] += 1
                        done["gen"] += usage.completion_tokens
                        done["prompt"] += usage.prompt_tokens
                        done["cached"] += usage.prompt_tokens_details.cached_tokens
                except openai.APIStatusError as e:
                    conv.pop()
                    with lock:
                        done["busy" if e.status_code == 503 else "fail"] += 1
                        if e.status_code != 503:
                            done["errors"].append(f"{e.status_code}: {e.message[:120]}")
                except Exception as e:  # connection errors etc.
                    conv.pop()
                    with lock:
                        done["fail"] += 1
                        done["errors"].append(repr(e)[:160])
                turn += 1
                with lock:
                    done["inflight"] -= 1
                    done["n"] += 1
                    if done["n"] in (100, a.requests) and done["n"] not in marks:
                        marks[done["n"]] = rss(pid)

        done["inflight"] = 0
        ts = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=a.timeout + 60)
        wall = time.time() - t0
        m = s.metrics()
        alive = s.alive()
        code = s.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    lines = [f"# Server soak, {datetime.date.today()}", "",
             f"`bench/server_soak.py`, commit {commit}, model `{a.model}` ({os.path.getsize(a.model) / 2**20:.0f} MiB), "
             f"flags `{' '.join(flags)}`, {a.clients} concurrent clients, {a.requests} requests of up to "
             f"{a.max_tokens} tokens, {os.cpu_count()} CPUs visible (shared machine), loopback.", "",
             "| | value |", "|---|---:|",
             f"| requests done | {done['n']} |", f"| succeeded | {done['ok']} |",
             f"| 503 (queue full) | {done['busy']} |", f"| other failures | {done['fail']} |",
             f"| wall time | {wall:.1f} s |", f"| requests / s | {done['n'] / wall:.2f} |",
             f"| generated tokens | {done['gen']} |", f"| prompt tokens | {done['prompt']} |",
             f"| prompt tokens reused (cached) | {done['cached']} ({100 * done['cached'] / max(1, done['prompt']):.1f} %) |"]
    for k in sorted(marks):
        cur, peak = marks[k]
        lines.append(f"| RSS after {k} requests (current / peak) | {mib(cur)} / {mib(peak)} MiB |")
    lines += [f"| server healthy at the end | {'yes' if alive else 'NO'} |", f"| clean exit on SIGTERM | {'yes' if code == 0 else f'NO ({code})'} |",
              f"| server counters: requests {int(sum(v for k, v in m.items() if k.startswith('redlite_requests_total')))}, "
              f"generated {int(m['redlite_generated_tokens_total'])}, rejected {int(m['redlite_requests_rejected_total'])} | |"]
    if done["errors"]:
        lines += ["", "Failures (first 10):", ""] + [f"- {e}" for e in done["errors"][:10]]
    text = "\n".join(lines) + "\n"
    print(text)
    path = Path(a.out) if a.out else REPO / "bench" / "results" / f"{datetime.date.today()}-server-soak.md"
    path.write_text(text)
    return 0 if done["fail"] == 0 and alive and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
