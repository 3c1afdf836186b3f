#!/usr/bin/env python3
"""`redlite serve`: time to first byte of a long streamed prompt on each API (issue 45 target:
first byte < 100 ms after the request is accepted, whatever the prefill takes).

    bench/ttfb.py [-m MODEL] [--tokens 30000] [--ctx 32768] [-t THREADS] [--out FILE.md]

Raw HTTP over loopback, one request per API (the prompt: this repository's C source) (chat completions, Anthropic messages, Responses),
each prompt distinct from its first token (no prefix reuse), max 1 answer token. Per request:
  first byte   = last request byte written -> first response byte (headers);
  first event  = -> the API's opening event (role chunk, message_start, response.created);
  first token  = -> the first content event (after the whole prefill);
  keep-alives  = SSE comments / ping events received before the first token;
  accepted     = the server's own figure (-v log): body read -> stream opened (parse, render, tokenise).
Prints a Markdown table (and writes it to --out).
"""
import argparse
import datetime
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from server_util import Server  # noqa: E402



def code_text(n_tok):
    """Real source text (this repository's C files), about n_tok tokens (~2.5 characters each: 2.48 on this code)."""
    out, want = [], int(n_tok * 2.5)
    for p in sorted((REPO / "src").rglob("*.c")):
        out.append(f"// {p.relative_to(REPO)}\n" + p.read_text(errors="replace"))
        if sum(map(len, out)) >= want:
            break
    return "".join(out)[:want]


def body_for(api, text, n_tok):
    if api == "chat":
        return "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": text}],
                                        "max_tokens": 1, "stream": True, "temperature": 0}
    if api == "messages":
        return "/v1/messages", {"model": "m", "messages": [{"role": "user", "content": text}],
                                "max_tokens": 1, "stream": True, "temperature": 0}
    return "/v1/responses", {"model": "m", "input": text, "max_output_tokens": 1, "stream": True, "temperature": 0}


def measure(port, path, body, first_marker, content_marker, ka_marker, limit_s=1800):
    sock = socket.create_connection(("127.0.0.1", port), timeout=limit_s)
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (path.encode(), len(data)) + data)
    t0 = time.perf_counter()
    f = sock.makefile("rb")
    first_byte = f.read(1)
    t_byte = time.perf_counter() - t0
    t_first = t_content = None
    kas = 0
    buf = first_byte
    while t_content is None:
        ln = f.readline()
        if not ln:
            break
        buf += ln
        line = ln.decode(errors="replace")
        now = time.perf_counter() - t0
        if t_first is None and line.startswith(first_marker):
            t_first = now
        if line.startswith(ka_marker):
            kas += 1
        if content_marker in line:
            t_content = now
    sock.close()
    return {"byte": t_byte, "event": t_first, "token": t_content, "keepalives": kas,
            "status": buf.split(b"\r\n", 1)[0].decode()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=str(REPO / "models" / "default.gguf"))
    ap.add_argument("--tokens", type=int, default=30000)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--out")
    a = ap.parse_args()
    code = code_text(a.tokens)
    rows = []
    with Server("-m", a.model, "--ctx", a.ctx, "-t", a.threads, start_timeout=300) as s:
        apis = [("chat", 'data: {"id"', '"content":', ": keep-alive"),
                ("messages", "event: message_start", "content_block_delta", "event: ping"),
                ("responses", "event: response.created", "response.output_text.delta", ": keep-alive")]
        for k, (api, first, content, ka) in enumerate(apis):
            text = f"Request {k} ({api}). Review this code:\n" + code  # distinct from the first token: no reuse
            path, body = body_for(api, text, a.tokens)
            if api == "chat":
                content = '"delta":{"content"'
            r = measure(s.port, path, body, first, content, ka)
            log = s.stderr()
            acc = re.findall(rf"serve: {api} accepted: (\d+) prompt tokens, parsed and tokenised in ([\d.]+) ms", log)
            r["n_prompt"], r["accepted_ms"] = (int(acc[-1][0]), float(acc[-1][1])) if acc else (None, None)
            rows.append((api, r))
            print(api, r, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    out = [f"# Time to first byte, long prompts, `redlite serve` ({datetime.date.today()})", "",
           f"Commit {commit}; {Path(a.model).name}; --ctx {a.ctx}, -t {a.threads}; CPU: {cpu}, "
           f"{len(open('/proc/cpuinfo').read().split('processor')) - 1} logical CPUs (shared with other work)."
           " Raw HTTP on loopback; times from the last request byte written. Command: "
           f"`bench/ttfb.py --tokens {a.tokens} --ctx {a.ctx} -t {a.threads}`.", "",
           "| API | prompt tokens | server: accepted (parse+tokenise) ms | first byte ms | first event ms "
           "| first token s (prefill) | keep-alives before it |", "|---|---:|---:|---:|---:|---:|---:|"]
    for api, r in rows:
        ev = f"{r['event'] * 1e3:.1f}" if r["event"] is not None else "-"
        tok = f"{r['token']:.1f}" if r["token"] is not None else "-"
        out.append(f"| {api} | {r['n_prompt']} | {r['accepted_ms']} | {r['byte'] * 1e3:.1f} | {ev} | {tok} "
                   f"| {r['keepalives']} |")
    text = "\n".join(out) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
