"""`redlite serve` during a long real prefill (issue 45): the stream's first byte arrives while the
prefill still has work left (ordering, not a timing threshold: /metrics read after the first byte
shows tokens remaining), keep-alives keep coming while it runs, and its progress moves chunk by
chunk in /metrics and the -v log. Real binary, real model (models/default.gguf), all three APIs.
The timings themselves: bench/ttfb.py and bench/results/2026-12-06-ttfb.md."""

import json
import re
import socket
import time
import urllib.request

import pytest

from server_util import REPO, Server


def code_text(n_chars):
    out = []
    for p in sorted((REPO / "src").rglob("*.c")):
        out.append(p.read_text(errors="replace"))
        if sum(map(len, out)) >= n_chars:
            break
    return "".join(out)[:n_chars]


def gauges(s):
    m = s.metrics()
    return m["redlite_prefill_evaluated_tokens"], m["redlite_prefill_remaining_tokens"]


APIS = [("/v1/chat/completions", "chat", 'data: {"id"', ": keep-alive", '"delta":{"content"'),
        ("/v1/messages", "messages", "event: message_start", "event: ping", "content_block_delta"),
        ("/v1/responses", "responses", "event: response.created", ": keep-alive", "response.output_text.delta")]


@pytest.fixture(scope="module")
def srv():
    with Server("--ctx", "32768", "-t", "2", "--temp", "0", start_timeout=120) as s:
        yield s


PREFILL_S = 6.0  # the prefill each test aims at: several keep-alives (one a second) while it runs


@pytest.fixture(scope="module")
def prompt_chars(srv):
    """Characters of code whose prefill takes about PREFILL_S seconds on this machine: measured
    with a 2K-token request first, so the test holds on a slow shared VM and a fast host alike
    (longer prompts are slower per token, so the estimate errs on the long side)."""
    body = {"model": "m", "prompt": "calibrate\n" + code_text(5000), "max_tokens": 1}
    req = urllib.request.Request(srv.url("/v1/completions"), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        n = json.load(r)["usage"]["prompt_tokens"]
    tps = srv.metrics()["redlite_prompt_tokens_per_second"]
    want = int(min(max(tps * PREFILL_S, 2000), 28000))  # tokens (the context holds 32768)
    return int(want * 5000 / n)


@pytest.mark.parametrize("path,api,first,ka,content", APIS, ids=[a[1] for a in APIS])
def test_first_byte_before_prefill_ends_and_keepalives_during_it(srv, prompt_chars, path, api, first, ka, content):
    # code whose prefill takes ~PREFILL_S s, distinct from the first token on (no prefix reuse)
    text = f"{api}: read this code.\n" + code_text(prompt_chars)
    body = {"model": "m", "max_tokens": 1, "stream": True}
    if api == "responses":
        body = {"model": "m", "input": text, "max_output_tokens": 1, "stream": True}
    else:
        body["messages"] = [{"role": "user", "content": text}]
    data = json.dumps(body).encode()
    key = 'redlite_requests_total{api="%s"}' % api
    before = srv.metrics()[key]
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=300)
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (path.encode(), len(data)) + data)
    f = sock.makefile("rb")
    assert f.readline().startswith(b"HTTP/1.1 200")
    # the first byte is here; from now on the request's prefill must be seen running (tokens left)
    # before the request finishes: then the first byte came before the prefill ended. The job may
    # still be queued or tokenizing its prompt when the first byte arrives (no prefill yet: under a
    # loaded machine the first /metrics read can land there), so /metrics is read until the prefill
    # shows or the request ends -- an order of events, not a time limit (the prefill takes seconds,
    # the reads are 0.1 s apart).
    for _ in range(3000):
        m = srv.metrics()
        if m[key] != before or m["redlite_prefill_remaining_tokens"] > 0:
            break
        time.sleep(0.1)
    assert m[key] == before and m["redlite_prefill_remaining_tokens"] > 0, m
    opened, during, seen = False, 0, set()
    while True:
        ln = f.readline().decode()
        assert ln, "the stream ended before any content"
        if ln.startswith(first):
            opened = True
        if ln.startswith(ka):
            assert opened, "a keep-alive before the opening event"
            done, left = gauges(srv)
            if left > 0:  # this keep-alive came while the prefill was running
                during += 1
                seen.add(done)
        if content in ln:
            break
    sock.close()
    assert opened
    # the prefill (~PREFILL_S seconds) was filled with keep-alives about once a
    # second, and its progress moved chunk by chunk (512-row chunks; values seen at keep-alives)
    assert during >= 2, during
    assert len(seen) >= 2 and max(seen) > 0, seen
    assert gauges(srv) == (0, 0)  # none running now
    log = srv.stderr()
    assert re.search(rf"serve: {api} accepted: \d+ prompt tokens, parsed and tokenised in [\d.]+ ms, stream opened",
                     log)
    assert re.search(rf"serve: {api} prefill \d+/\d+ tokens \(\d+%\)", log), log[-2000:]
