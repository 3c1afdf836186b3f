#!/usr/bin/env python3
"""`redlite serve` soak: N requests from C concurrent clients on loopback, bounded in time.

    bench/server_soak.py [-m MODEL] [-n 1000] [-c 8] [--max-tokens 16] [-t THREADS] [--timeout 1800]
                         [--hostile H] [--out FILE.md] [-- serve flags]

Each client runs its own growing conversation (chat completions, streaming every other request,
tools on every third, a fresh conversation every 8 turns) so the server sees prefix reuse,
tool parsing, SSE and plain JSON. The queue (--queue, default 16) is larger than the client
count, so every request must succeed: any failure is reported (503s are counted separately).
Peak and current RSS of the server are read from /proc at 100, 1000 and N requests.

--hostile H adds H hostile threads (loopback only, running while the ordinary clients run, each
action bounded in time): requests dropped at a random moment (queued, streaming or not),
slowloris headers (a byte every 0.5 s until the server cuts them), idle connections, and
malformed bodies (truncated / invalid JSON, deep nesting, a max-size body of small numbers,
text/plain, a huge Content-Length, a foreign Host). A malformed request must get its 4xx; any
other answer, or an ordinary client failing, is a failure. The ordinary clients' worst latency
is reported.
Writes bench/results/<date>-server-soak.md (and prints it).
"""
import argparse
import datetime
import json
import os
import random
import socket
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


def hostile(port, stop, stats, lock, seed):
    """One hostile client: random actions until stop is set. Every action is bounded in time."""
    rnd = random.Random(seed)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}).encode()

    def conn():
        s = socket.create_connection(("127.0.0.1", port), timeout=15)
        return s

    def post(payload, ctype=b"application/json", host=b"127.0.0.1", length=None, extra=b""):
        n = len(payload) if length is None else length
        return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + host + b"\r\nContent-Type: " + ctype +
                b"\r\nContent-Length: %d\r\n" % n + extra + b"\r\n" + payload)

    def status_of(s):
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return None
            data += chunk
        return int(data.split(b" ", 2)[1])

    bad = [  # (request bytes, acceptable statuses)
        (post(b'{"messages": ['), {400}),
        (post(b"not json at all"), {400}),
        (post(b'{"messages": "x"}'), {400}),
        (post(b'{"messages": ' + b"[" * 3000 + b"]" * 3000 + b"}"), {413}),
        (post(body, ctype=b"text/plain"), {415}),
        (post(b"", length=1 << 30), {413}),
        (post(body, host=b"evil.example.com"), {403}),
        (post(b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'), {400}),
        (None, {413}),  # a max-size body of small numbers (built below)
    ]
    nums = b'{"messages": [], "stop": [' + b"1," * ((32 << 20) // 2 - 64) + b"1]}"
    idle = []
    while not stop.is_set():
        kind = rnd.choice(["drop", "drop", "slow", "idle", "bad", "bad", "bad"])
        try:
            if kind == "drop":
                s = conn()
                b = json.loads(body)
                b["stream"] = rnd.random() < 0.5
                p = json.dumps(b).encode()
                s.sendall(post(p))
                time.sleep(rnd.random() * 0.5)
                s.close()
            elif kind == "slow":
                s = conn()
                t0 = time.time()
                try:
                    for ch in b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
                        if stop.is_set() or time.time() - t0 > 40:
                            break
                        s.send(bytes([ch]))
                        time.sleep(0.5)
                except OSError:
                    with lock:
                        stats["slow_cut"] += 1
                s.close()
            elif kind == "idle":
                idle.append(conn())
                if len(idle) > 20:
                    idle.pop(0).close()
                time.sleep(0.2)
            else:
                req, ok = rnd.choice(bad)
                if req is None:
                    req = post(nums)
                s = conn()
                try:
                    s.sendall(req)
                except OSError:
                    pass
                st = status_of(s)
                s.close()
                with lock:
                    stats["bad_sent"] += 1
                    if st not in ok:
                        stats["bad_wrong"] += 1
                        stats["errors"].append(f"malformed request answered {st}, expected {sorted(ok)}")
        except OSError as e:
            with lock:
                stats["hostile_oserror"] += 1
            if stats["hostile_oserror"] < 5:
                stats["notes"].append(repr(e)[:120])
        with lock:
            stats["hostile_actions"] += 1
    for s in idle:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=str(REPO / "models" / "default.gguf"))
    ap.add_argument("-n", "--requests", type=int, default=1000)
    ap.add_argument("-c", "--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--hostile", type=int, default=0, help="hostile threads mixed in (0: none)")
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    os.environ["RL_CHAT_MODEL"] = a.model
    flags = ["-t", a.threads, "--ctx", "8192", *a.extra]
    lock = threading.Lock()
    done = {"n": 0, "ok": 0, "fail": 0, "busy": 0, "gen": 0, "cached": 0, "prompt": 0, "errors": [],
            "worst": 0.0, "lat": []}
    hstats = {"slow_cut": 0, "bad_sent": 0, "bad_wrong": 0, "hostile_actions": 0, "hostile_oserror": 0,
              "errors": [], "notes": []}
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
                t_req = time.time()
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
                        done["worst"] = max(done["worst"], time.time() - t_req)
                        done["lat"].append(time.time() - t_req)
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
                    if done["n"] in (100, 1000, a.requests) and done["n"] not in marks:
                        marks[done["n"]] = rss(pid)

        done["inflight"] = 0
        stop = threading.Event()
        hs = [threading.Thread(target=hostile, args=(s.port, stop, hstats, lock, 1000 + i)) for i in range(a.hostile)]
        ts = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        for t in ts + hs:
            t.start()
        for t in ts:
            t.join(timeout=a.timeout + 60)
        stop.set()
        for t in hs:
            t.join(timeout=60)
        wall = time.time() - t0
        m = s.metrics()
        alive = s.alive()
        code = s.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731

    def pct(xs, q):  # the q-th percentile (nearest rank) of the ordinary requests' latencies
        xs = sorted(xs)
        return xs[min(len(xs) - 1, max(0, -(-q * len(xs) // 100) - 1))] if xs else float("nan")
    lines = [f"# Server soak, {datetime.date.today()}", "",
             f"`bench/server_soak.py`, commit {commit}, model `{a.model}` ({os.path.getsize(a.model) / 2**20:.0f} MiB), "
             f"flags `{' '.join(flags)}`, {a.clients} concurrent clients, {a.requests} requests of up to "
             f"{a.max_tokens} tokens, {a.hostile} hostile threads, {os.cpu_count()} CPUs visible (shared machine), "
             "loopback.", "",
             "| | value |", "|---|---:|",
             f"| requests done | {done['n']} |", f"| succeeded | {done['ok']} |",
             f"| 503 (queue full) | {done['busy']} |", f"| other failures | {done['fail']} |",
             f"| wall time | {wall:.1f} s |", f"| requests / s | {done['n'] / wall:.2f} |",
             f"| worst ordinary request latency | {done['worst']:.2f} s |",
             f"| ordinary request latency p50 / p90 / p99 | {pct(done['lat'], 50):.2f} / {pct(done['lat'], 90):.2f} / "
             f"{pct(done['lat'], 99):.2f} s |",
             f"| generated tokens | {done['gen']} |", f"| prompt tokens | {done['prompt']} |",
             f"| prompt tokens reused (cached) | {done['cached']} ({100 * done['cached'] / max(1, done['prompt']):.1f} %) |"]
    for k in sorted(marks):
        cur, peak = marks[k]
        lines.append(f"| RSS after {k} requests (current / peak) | {mib(cur)} / {mib(peak)} MiB |")
    if a.hostile:
        lines += [f"| hostile actions | {hstats['hostile_actions']} |",
                  f"| malformed requests sent / wrongly answered | {hstats['bad_sent']} / {hstats['bad_wrong']} |",
                  f"| slowloris connections cut by the server | {hstats['slow_cut']} |",
                  f"| server: connections evicted / refused | {int(m.get('redlite_connections_evicted_total', 0))} / "
                  f"{int(m.get('redlite_connections_refused_total', 0))} |",
                  f"| server: requests abandoned in the queue / cancelled | "
                  f"{int(m.get('redlite_requests_abandoned_total', 0))} / {int(m.get('redlite_requests_cancelled_total', 0))} |",
                  "| server: connection timeouts (new, headers, body, send, idle) | " +
                  ", ".join(str(int(m.get(f'redlite_connections_timeouts_total{{phase="{p}"}}', 0)))
                            for p in ("new", "headers", "body", "send", "idle")) + " |"]
    lines += [f"| server healthy at the end | {'yes' if alive else 'NO'} |", f"| clean exit on SIGTERM | {'yes' if code == 0 else f'NO ({code})'} |",
              f"| server counters: requests {int(sum(v for k, v in m.items() if k.startswith('redlite_requests_total')))}, "
              f"generated {int(m['redlite_generated_tokens_total'])}, rejected {int(m['redlite_requests_rejected_total'])} | |"]
    if done["errors"] or hstats["errors"]:
        lines += ["", "Failures (first 10):", ""] + [f"- {e}" for e in (done["errors"] + hstats["errors"])[:10]]
    text = "\n".join(lines) + "\n"
    print(text)
    path = Path(a.out) if a.out else REPO / "bench" / "results" / f"{datetime.date.today()}-server-soak.md"
    path.write_text(text)
    return 0 if done["fail"] == 0 and hstats["bad_wrong"] == 0 and alive and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
