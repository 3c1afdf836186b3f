#!/usr/bin/env python3
"""Aggregate decode of `redlite serve --parallel S` at several stream counts, standard library only
(the GPU machine's python has no `openai`; bench/server_slots.py is the same measurement with it).

    bench/gpu_rows_load.py BIN MODEL [--streams 1,4,8] [--tokens 128] [--reps 2] [-- serve flags]

For each S: a server with --parallel S; S different conversations sent at once (streaming, greedy,
max_tokens); the aggregate rate is all streams' completion tokens over the span from the earliest
first content chunk to the latest last chunk (prompt ingestion excluded), best of --reps; each
answer is compared with the same conversation run alone on a one-slot server (bit-identical text
is the contract); rows per forward from /metrics (redlite_decode_rows_total / _forwards_total).
Prints a markdown table; exit 1 if any text differs from alone or a server fails.

--llama-server PATH measures llama.cpp's server the same way instead (`llama-server -np S -ngl 99 -fa on
-c 4096*S`: S slots of 4,096 positions, as `--ctx 4096` gives each of ours): same conversations, same
span; its texts are compared with its own one-slot answers but only reported (llama.cpp does not
promise batch-invariant answers), and it has no rows-per-forward counter.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

TOPICS = ["a Python function that merges two sorted lists", "a C function that reverses a linked list",
          "a shell script that counts lines in every file of a folder", "a Rust function that parses an integer",
          "a SQL query that finds duplicate emails", "a JavaScript debounce helper",
          "a Go HTTP handler that returns JSON", "a Python class for a ring buffer"]


def conv(i):
    return [{"role": "system", "content": "You are a coding assistant. Answer with code and a long explanation."},
            {"role": "user", "content": f"Write {TOPICS[i % len(TOPICS)]}, then explain every line in detail."}]


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def healthy(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        return c.getresponse().status == 200
    except OSError:
        return False


class Server:
    def __init__(self, binary, model, slots, extra, timeout=300, llama=None):
        self.log = tempfile.NamedTemporaryFile(prefix="rows-serve-", suffix=".log", delete=False)
        if llama:
            port = free_port()
            cmd = [llama, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", str(slots), "-ngl", "99",
                   "-fa", "on", "-c", str(4096 * slots)]
        else:
            cmd = [binary, "serve", "-m", model, "--port", "0", "-v", "--parallel", str(slots), *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + timeout
        self.port = None
        while time.time() < deadline and self.port is None:
            m = None if llama else re.search(r"listening on http://[\d.]+:(\d+)", self.text())
            if llama and healthy(port):
                self.port = port
            elif m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: {self.text()[-2000:]}")
            else:
                time.sleep(0.2)
        if self.port is None:
            self.stop()
            raise RuntimeError(f"serve did not start in {timeout} s: {self.text()[-2000:]}")

    def text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def metrics(self):
        if self.proc.args[1] != "serve":
            return {}  # llama-server: no rows counters
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", "/metrics")
        out = {}
        for line in c.getresponse().read().decode().splitlines():
            p = line.split()
            if len(p) == 2 and not line.startswith("#"):
                try:
                    out[p[0]] = float(p[1])
                except ValueError:
                    pass
        return out

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop()


def stream_one(port, i, tokens, out):
    body = json.dumps({"model": "m", "messages": conv(i), "max_tokens": tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = last = None
    text, ntok, err, chunks = "", 0, None, 0
    if r.status != 200:
        err = f"HTTP {r.status}: {r.read()[:300]!r}"
    else:
        for raw in r:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            ch = json.loads(line[5:])
            now = time.perf_counter()
            for choice in ch.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    text += piece
                    first = first or now
                    last = now
                    chunks += 1
            if ch.get("usage"):
                ntok = ch["usage"].get("completion_tokens", 0)
    # without a usage chunk, count content chunks (one token each in both servers' streams)
    out[i] = {"text": text, "first": first, "last": last, "tokens": ntok or chunks, "err": err}


def run(port, S, tokens):
    out = [None] * S
    ts = [threading.Thread(target=stream_one, args=(port, i, tokens, out)) for i in range(S)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    firsts = [o["first"] for o in out if o and o["first"]]
    lasts = [o["last"] for o in out if o and o["last"]]
    span = max(lasts) - min(firsts) if firsts else 0
    return out, sum(o["tokens"] for o in out if o), span


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--llama-server", help="measure llama.cpp's llama-server at this path instead")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.serve = extra  # the serve flags after --
    counts = [int(x) for x in a.streams.split(",")]
    ok = True
    L = a.llama_server
    with Server(a.binary, a.model, 1, a.serve, llama=L) as s:  # the reference texts: each conversation alone
        alone = {}
        for i in range(max(counts)):
            o = {}
            stream_one(s.port, i, a.tokens, o)
            alone[i] = o[i]["text"]
            ok = ok and not o[i]["err"]
    rows = []
    for S in counts:
        best, all_same = None, True
        with Server(a.binary, a.model, S, a.serve, llama=L) as s:
            for _ in range(a.reps):
                m0 = s.metrics()
                out, n, span = run(s.port, S, a.tokens)
                m1 = s.metrics()
                errs = [o["err"] for o in out if o["err"]]
                if errs:
                    print(f"{S} streams: {errs[0]}", file=sys.stderr)
                all_same = all_same and not errs and all(out[i]["text"] == alone[i] for i in range(S))
                fw = m1.get("redlite_decode_forwards_total", 0) - m0.get("redlite_decode_forwards_total", 0)
                rw = m1.get("redlite_decode_rows_total", 0) - m0.get("redlite_decode_rows_total", 0)
                rate = n / span if span > 0 else 0
                if not best or rate > best["rate"]:
                    best = {"S": S, "tokens": n, "span": span, "rate": rate, "batch": rw / fw if fw else 0}
        best["same"] = all_same
        rows.append(best)
        ok = ok and (all_same or bool(L))
    base = rows[0]["rate"] if rows and rows[0]["S"] == 1 else None
    print(f"{'llama-server ' + L if L else 'redlite serve'}: aggregate decode, {os.path.basename(a.model)}, serve flags: {' '.join(a.serve)}; max_tokens {a.tokens}; "
          f"best of {a.reps}\n")
    print("| streams | tokens | decode span (s) | aggregate tok/s | vs 1 stream | rows per forward | texts == alone |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        ratio = f"{r['rate'] / base:.2f}x" if base else "-"
        print(f"| {r['S']} | {r['tokens']} | {r['span']:.2f} | {r['rate']:.1f} | {ratio} | {r['batch']:.2f} | "
              f"{'yes' if r['same'] else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
