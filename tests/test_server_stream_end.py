"""How `redlite serve` ends answers it cannot finish (issue 45): a stream cut by a shutdown (SIGTERM)
ends at once with the API's error event and never as a finished answer: Anthropic `event: error`
(never `stop_reason: end_turn`), Responses `response.failed` (never `response.completed` /
`response.incomplete`). Chat completions: test_server_protocol.py::test_graceful_shutdown. Official
clients, real binary, scripted test backend. Also: non-streaming answers that take long get
whitespace keep-alives, and a cut after those is an error object in the body."""

import json
import socket
import time

import anthropic
import openai
import pytest

from server_util import Server, script_file

LONG = " ".join(["word"] * 400)
USER = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def slow(tmp_path):
    s = Server("--test-script", script_file(tmp_path, [LONG]), "--test-delay-ms", "20")
    yield s
    s.kill()


def stop_and_check(s, t0):
    """The server stopped cleanly (within seconds of the signal: it does not wait for the answer)."""
    assert s.proc.wait(timeout=15) == 0
    assert "stopped" in s.stderr() and "cancelled" in s.stderr()


def test_anthropic_stream_cut_by_shutdown(slow):
    c = anthropic.Anthropic(base_url=slow.url(""), api_key="none", timeout=30, max_retries=0)
    events = []
    with pytest.raises(anthropic.APIError) as ei:
        with c.messages.stream(model="m", max_tokens=1000, messages=USER) as stream:
            for ev in stream:
                events.append(ev)
                if sum(e.type == "content_block_delta" for e in events) == 3:
                    t0 = time.time()
                    slow.proc.send_signal(15)
    stop_and_check(slow, t0)
    types = [e.type for e in events]
    assert types[0] == "message_start" and "content_block_delta" in types
    # no end: neither a message_delta with a stop reason nor message_stop
    assert "message_stop" not in types and not any(e.type == "message_delta" for e in events), types
    assert "cancelled" in str(ei.value) and "overloaded" in str(ei.value).lower() + repr(ei.value.body).lower()


def test_responses_stream_cut_by_shutdown(slow):
    c = openai.OpenAI(base_url=slow.url("/v1"), api_key="none", timeout=30, max_retries=0)
    events, t0 = [], None
    for ev in c.responses.create(model="m", input="Say hello.", max_output_tokens=1000, stream=True):
        events.append(ev)
        if t0 is None and sum(e.type == "response.output_text.delta" for e in events) == 3:
            t0 = time.time()
            slow.proc.send_signal(15)
    stop_and_check(slow, t0)
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.failed", types[-5:]
    assert not {"response.completed", "response.incomplete"} & set(types), types
    failed = events[-1].response
    assert failed.status == "failed" and failed.error and "cancelled" in failed.error.message
    # what was generated before the cut is there, marked as part of a failed response
    assert failed.output and failed.output[0].content[0].text.startswith("word word")


# ---- non-streaming answers: whitespace keep-alives --------------------------------------------
# An answer not ready after RL_SERVE_JSON_KEEPALIVE_S (default 30 s; 0.3 here) is sent as a 200
# at once, newlines while it is produced (JSON allows leading whitespace), then the body.

@pytest.fixture
def ws(tmp_path):
    s = Server("--test-script", script_file(tmp_path, [LONG]), "--test-delay-ms", "10",
               env={"RL_SERVE_JSON_KEEPALIVE_S": "0.3"})
    yield s
    s.kill()


def _post(s, path, body):
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n" % (path.encode(), len(data)) + data)
    return sock, sock.makefile("rb")


def _dechunk(f):
    """Headers (dict) and the body of a chunked or plain HTTP/1.1 answer."""
    status = f.readline().decode()
    h = {}
    while (ln := f.readline().decode().strip()):
        k, v = ln.split(":", 1)
        h[k.strip().lower()] = v.strip()
    if h.get("transfer-encoding") == "chunked":
        body = b""
        while (n := int(f.readline().strip(), 16)):
            body += f.read(n)
            f.readline()
        return status, h, body
    return status, h, f.read(int(h["content-length"]))


def test_nonstream_whitespace_keepalives(ws):
    before = ws.metrics()['redlite_requests_total{api="chat"}']
    sock, f = _post(ws, "/v1/chat/completions", {"messages": USER, "max_tokens": 300})
    status = f.readline().decode()
    # the status line came before the answer was finished (the counter moves when it is)
    assert status.startswith("HTTP/1.1 200") and ws.metrics()['redlite_requests_total{api="chat"}'] == before
    h = {}
    while (ln := f.readline().decode().strip()):
        k, v = ln.split(":", 1)
        h[k.strip().lower()] = v.strip()
    assert h["content-type"] == "application/json" and h["x-redlite-max-tokens"] == "300"
    body = b""
    while (n := int(f.readline().strip(), 16)):
        body += f.read(n)
        f.readline()
    sock.close()
    lead = len(body) - len(body.lstrip())
    assert lead >= 2 and body[:lead].strip() == b"", body[:20]  # newlines about once a second (3 s of answer)
    d = json.loads(body)
    assert d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 300
    # the official clients read such a body as usual, on every API
    c = openai.OpenAI(base_url=ws.url("/v1"), api_key="none", timeout=30, max_retries=0)
    r = c.chat.completions.create(model="m", messages=USER, max_tokens=100)
    assert r.choices[0].message.content.startswith("word word") and r.usage.completion_tokens == 100
    r = c.responses.create(model="m", input="hi", max_output_tokens=100)
    assert r.status == "incomplete" and r.output_text.startswith("word word")
    a = anthropic.Anthropic(base_url=ws.url(""), api_key="none", timeout=30, max_retries=0)
    m = a.messages.create(model="m", max_tokens=100, messages=USER)
    assert m.stop_reason == "max_tokens" and m.content[0].text.startswith("word word")
    # an answer ready before the wait is over is a plain body with its Content-Length
    sock, f = _post(ws, "/v1/chat/completions", {"messages": USER, "max_tokens": 2})
    status, h, body = _dechunk(f)
    sock.close()
    assert "content-length" in h and body[:1] == b"{", (h, body[:20])
    assert no_protocol_errors(ws)


def no_protocol_errors(s):
    m = s.metrics()
    return m["redlite_requests_failed_total"] == 0 and m["redlite_requests_cancelled_total"] == 0


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 1000}),
    ("/v1/messages", {"model": "m", "messages": USER, "max_tokens": 1000}),
    ("/v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 1000})], ids=["chat", "messages", "responses"])
def test_nonstream_cut_after_keepalives_is_an_error_body(ws, path, body):
    """Once the 200 is out, a shutdown cut is reported in the body: the API's error object, never
    an answer that looks finished."""
    sock, f = _post(ws, path, body)
    assert f.readline().startswith(b"HTTP/1.1 200")
    while f.readline().strip():
        pass
    n = int(f.readline().strip(), 16)
    assert f.read(n).strip() == b""  # a keep-alive newline: the answer is under way
    f.readline()
    ws.proc.send_signal(15)
    rest = b""
    while (n := int(f.readline().strip(), 16)):
        rest += f.read(n)
        f.readline()
    sock.close()
    d = json.loads(rest)
    assert "error" in d and d.get("type", "error") == "error" and "cancelled" in json.dumps(d), d
    assert not {"choices", "content", "output", "stop_reason", "status"} & set(d), d
    assert ws.proc.wait(timeout=15) == 0
