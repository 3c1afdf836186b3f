"""`redlite serve` against hostile and careless clients (issue 46, items 3, 4, 6): the real binary
on loopback, raw sockets for the hostile cases, the official openai client for the ordinary one.

Connections: idle and slow clients cannot lock ordinary ones out (per-peer / global caps with
eviction of idle connections, total header and body deadlines, a keep-alive idle timeout);
abandoned queued requests leave the queue at once. Cost before parsing: 413 from Content-Length
without reading the body, the JSON pre-scan refuses a max-size body of small numbers quickly and
without RSS growth, 401 before the body. Browsers: Host / Origin allow-lists, CORS preflight,
text/plain refused. Signals and flags: SIGHUP drains (the running answer completes), --api-key ""
is a usage error, --host 0.0.0.0 without a key warns. Checkpoints (real model): a GGUF with the
same layout and other weights does not restore the other's checkpoint; a FIFO in --state-dir does
not hang start-up; two servers share one --state-dir. Observability: /slots, the JSON log line.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import openai
import pytest

from server_util import BIN, MODEL, Server, need_binary, script_file

HELLO = "Hello there, friend! How are you today?"
LONG = " ".join(["word"] * 400)
USER = [{"role": "user", "content": "Say hello."}]


def oai(srv, key="none"):
    return openai.OpenAI(base_url=srv.url("/v1"), api_key=key, timeout=20, max_retries=0)


def rss(pid):
    """(current, peak) resident bytes of a process, from /proc."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out["VmRSS"], out["VmHWM"]


def connect(srv, src="127.0.0.1", timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", srv.port))
    return s


def read_response(sock, limit=1 << 20):
    """Status code and raw bytes of one response (reads until the headers and Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head:
        return None, data
    status = int(head.split(b" ", 2)[1])
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(body) < min(n, limit):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, head + b"\r\n\r\n" + body


def closed_within(sock, seconds):
    """True when the server closes the connection (EOF or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def raw(srv, method, path, body=None, headers=None, timeout=20):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    h = {"Content-Type": "application/json", **(headers or {})}
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


@pytest.fixture
def hello(tmp_path):
    with Server("--test-script", script_file(tmp_path, [HELLO])) as s:
        yield s


# ---- connections -------------------------------------------------------------------------------

@pytest.mark.parametrize("src", ["127.0.0.2", "127.0.0.1"])
def test_idle_connections_do_not_lock_out(tmp_path, src):
    """64 idle connections (from another address, or from the client's own) and an ordinary client
    is still served at once: the idle ones are evicted at the per-peer cap, not counted forever."""
    with Server("--test-script", script_file(tmp_path, [HELLO])) as s:
        idle = [connect(s, src) for _ in range(64)]
        time.sleep(0.3)
        t0 = time.time()
        r = oai(s).chat.completions.create(model="m", messages=USER, max_tokens=50)
        assert r.choices[0].message.content == HELLO
        assert time.time() - t0 < 3
        m = s.metrics()
        assert m["redlite_connections_evicted_total"] >= 64 - 32
        assert sum(v for k, v in m.items() if k.startswith("redlite_connections{")) <= 32 + 2
        for c in idle:
            c.close()


def test_slowloris_and_idle_deadlines(tmp_path):
    """Headers trickled a byte at a time are cut at the total read deadline (activity does not
    extend it); a silent connection and an idle keep-alive one are closed after their timeouts."""
    with Server("--test-script", script_file(tmp_path, [HELLO]), "--read-timeout", "2", "--idle-timeout", "2") as s:
        slow = connect(s)
        req = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 1000
        t0 = time.time()
        cut = None
        for i in range(len(req)):
            try:
                slow.send(req[i:i + 1])
            except OSError:
                cut = time.time() - t0
                break
            time.sleep(0.1)
            if time.time() - t0 > 8:
                break
        if cut is None:
            assert closed_within(slow, 2), "slowloris connection still open after 8 s"
            cut = time.time() - t0
        assert cut < 5, f"slow headers cut after {cut:.1f} s (read timeout 2 s)"
        silent = connect(s)
        t0 = time.time()
        assert closed_within(silent, 6) and time.time() - t0 < 4.5
        # keep-alive: one request, then nothing
        ka = connect(s)
        body = json.dumps({"messages": USER, "max_tokens": 5}).encode()
        ka.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        st, _ = read_response(ka)
        assert st == 200
        t0 = time.time()
        assert closed_within(ka, 6) and time.time() - t0 < 4.5
        # a slow body: the deadline is read timeout + size at 1 MiB/s, not per byte of activity
        sb = connect(s)
        sb.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 1000\r\n\r\n{")
        t0 = time.time()
        try:
            for _ in range(80):
                sb.send(b" ")
                time.sleep(0.1)
        except OSError:
            pass
        assert closed_within(sb, 3) and time.time() - t0 < 6
        m = s.metrics()
        # the slowloris (before or after its request line) and the silent one
        assert (m['redlite_connections_timeouts_total{phase="new"}']
                + m['redlite_connections_timeouts_total{phase="headers"}']) >= 2
        assert m['redlite_connections_timeouts_total{phase="idle"}'] >= 1
        assert m['redlite_connections_timeouts_total{phase="body"}'] >= 1
        assert oai(s).chat.completions.create(model="m", messages=USER).choices[0].message.content == HELLO


def test_abandoned_requests_leave_the_queue(tmp_path):
    """--queue 2, one long answer running: two queued clients hang up; their places are free at
    once (a new request is queued, not refused with 503)."""
    with Server("--test-script", script_file(tmp_path, [LONG]), "--queue", "2", "--test-delay-ms", "20") as s:
        running = connect(s)
        body = json.dumps({"messages": USER, "max_tokens": 300, "stream": True}).encode()
        post = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        running.sendall(post)
        assert running.recv(4096)  # started
        queued = [connect(s) for _ in range(2)]
        for q in queued:
            q.sendall(post)
        deadline = time.time() + 5
        while s.metrics()["redlite_queue_depth"] < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert s.metrics()["redlite_queue_depth"] == 2
        for q in queued:
            q.close()
        t0 = time.time()
        while s.metrics()["redlite_queue_depth"] > 0 and time.time() - t0 < 5:
            time.sleep(0.05)
        # the places freed while the running answer (300 tokens at 20 ms) still runs: an order of
        # events read from the server, not a latency bound (the poll above waits up to 5 s)
        m = s.metrics()
        assert m["redlite_queue_depth"] == 0 and m["redlite_requests_running"] == 1, \
            ("abandoned requests kept their queue places while the answer ran", m)
        assert m["redlite_requests_abandoned_total"] == 2
        # a new request takes a freed place: queued behind the running answer, not refused; then the
        # running client leaves too (no need to wait out its 300 tokens) and the new one is answered
        new = connect(s, timeout=60)
        small = json.dumps({"messages": USER, "max_tokens": 2}).encode()
        new.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(small), small))
        deadline = time.time() + 5
        while s.metrics()["redlite_queue_depth"] < 1 and time.time() < deadline:
            time.sleep(0.05)
        assert s.metrics()["redlite_queue_depth"] == 1 and s.metrics()["redlite_requests_running"] == 1
        running.close()
        st, _ = read_response(new)
        new.close()
        assert st == 200


# ---- cost bounded before parsing ---------------------------------------------------------------

def test_body_size_and_parse_cost(hello):
    s = hello
    # 413 from Content-Length alone: the body is never sent
    c = connect(s)
    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1073741824\r\n\r\n")
    t0 = time.time()
    st, data = read_response(c)
    assert st == 413 and b"--max-body" in data and time.time() - t0 < 2
    c.close()
    # a body of the maximum size made of small numbers: refused fast, RSS does not balloon
    pid = s.proc.pid
    cur0, peak0 = rss(pid)
    n = (32 << 20) - 64
    prefix = b'{"messages": [{"role": "user", "content": "x"}], "stop": ['
    nums = b"1," * ((n - len(prefix) - 4) // 2)
    body = prefix + nums + b"1]}"
    assert len(body) <= 32 << 20
    t0 = time.time()
    st, _, data = raw(s, "POST", "/v1/chat/completions", body, timeout=60)
    dt = time.time() - t0
    cur1, peak1 = rss(pid)
    assert st == 413 and "values" in json.loads(data)["error"]["message"], data[:200]
    assert dt < 5, f"{dt:.1f} s to refuse"
    # the body itself (32 MiB) is held once; parsing it would have cost ~40x
    assert peak1 - peak0 < 96 << 20, f"peak RSS grew {(peak1 - peak0) >> 20} MiB"
    assert cur1 - cur0 < 48 << 20, f"RSS grew {(cur1 - cur0) >> 20} MiB and stayed"
    # nesting
    st, _, data = raw(s, "POST", "/v1/chat/completions", b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert st == 413 and "nests" in json.loads(data)["error"]["message"]
    # still serving; a normal body of many messages passes the pre-scan
    msgs = [{"role": "user", "content": f"message {i}"} for i in range(200)]
    st, _, _ = raw(s, "POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 3})
    assert st == 200


def test_auth_before_body(tmp_path):
    with Server("--test-script", script_file(tmp_path, [HELLO]), "--api-key", "k3y") as s:
        c = connect(s)
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 10000000\r\n\r\n")
        t0 = time.time()
        st, data = read_response(c)
        assert st == 401 and time.time() - t0 < 2  # without waiting for 10 MB that never come
        c.close()
        assert oai(s, key="k3y").chat.completions.create(model="m", messages=USER).choices[0].message.content == HELLO


# ---- browsers: Host, Origin, CORS, content type ------------------------------------------------

def test_host_and_origin(tmp_path):
    with Server("--test-script", script_file(tmp_path, [HELLO])) as s:
        ok = {"messages": USER, "max_tokens": 3}
        chat = "/v1/chat/completions"
        for host in ("localhost", f"localhost:{s.port}", f"127.0.0.1:{s.port}", "[::1]", "app.localhost"):
            st, _, _ = raw(s, "GET", "/v1/models", headers={"Host": host})
            assert st == 200, host
        st, _, data = raw(s, "POST", chat, ok, headers={"Host": "evil.example.com"})
        assert st == 403 and "--allow-host" in json.loads(data)["error"]["message"]
        # browser origins
        st, h, _ = raw(s, "POST", chat, ok, headers={"Origin": "http://localhost:5173"})
        assert st == 200 and h["access-control-allow-origin"] == "http://localhost:5173"
        st, _, data = raw(s, "POST", chat, ok, headers={"Origin": "https://evil.example.com"})
        assert st == 403 and "--allow-origin" in json.loads(data)["error"]["message"]
        st, _, _ = raw(s, "POST", chat, ok, headers={"Origin": "null"})
        assert st == 403
        # CORS preflight
        pre = {"Origin": "http://127.0.0.1:3000", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
        st, h, _ = raw(s, "OPTIONS", chat, headers=pre)
        assert st == 204 and "POST" in h["access-control-allow-methods"]
        assert h["access-control-allow-origin"] == "http://127.0.0.1:3000"
        assert "authorization" in h["access-control-allow-headers"]
        st, h, _ = raw(s, "OPTIONS", chat, headers={**pre, "Origin": "https://evil.example.com"})
        assert st == 403 and "access-control-allow-origin" not in h
        # the simple-request CSRF: text/plain (no preflight) is refused, whoever sends it
        body = json.dumps(ok).encode()
        st, _, data = raw(s, "POST", chat, body, headers={"Content-Type": "text/plain"})
        assert st == 415 and "application/json" in json.loads(data)["error"]["message"]
        st, _, _ = raw(s, "POST", chat, body, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                       "Origin": "http://localhost"})
        assert st == 415
        st, _, _ = raw(s, "POST", chat, body, headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert st == 200  # curl -d without a Content-Type: not a browser
        assert s.metrics()['redlite_http_responses_total{code="403"}'] >= 4
    with Server("--test-script", script_file(tmp_path, [HELLO]), "--allow-host", "gpu.lan,.corp.example",
                "--allow-origin", "https://app.example.com") as s:
        for host in ("gpu.lan", "gpu.lan:8080", "a.corp.example", "corp.example"):
            st, _, _ = raw(s, "GET", "/v1/models", headers={"Host": host})
            assert st == 200, host
        st, _, _ = raw(s, "GET", "/v1/models", headers={"Host": "other.lan"})
        assert st == 403
        st, h, _ = raw(s, "GET", "/v1/models", headers={"Origin": "https://app.example.com"})
        assert st == 200 and h["access-control-allow-origin"] == "https://app.example.com"


# ---- flags and signals -------------------------------------------------------------------------

def test_empty_api_key_and_exposed_warning(tmp_path):
    need_binary()
    r = subprocess.run([str(BIN), "serve", "-m", str(MODEL), "--api-key", ""], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--api-key is empty" in r.stderr and r.stderr.count("\n") == 1
    s = Server("--test-script", script_file(tmp_path, [HELLO]), "--host", "0.0.0.0")
    try:
        assert "without an API key" in s.stderr()
    finally:
        s.kill()
    with Server("--test-script", script_file(tmp_path, [HELLO]), "--host", "0.0.0.0", "--api-key", "k") as s:
        assert "without an API key" not in s.stderr()


def test_sighup_drains(tmp_path):
    """SIGHUP: the running streamed answer completes in full, new connections are refused, the
    process exits 0."""
    s = Server("--test-script", script_file(tmp_path, [" ".join(["word"] * 60)]), "--test-delay-ms", "20")
    try:
        stream = oai(s).chat.completions.create(model="m", messages=USER, max_tokens=1000, stream=True)
        it = iter(stream)
        next(it)
        s.proc.send_signal(signal.SIGHUP)
        text = "".join(ch.choices[0].delta.content or "" for ch in it if ch.choices)
        assert text.split() == ["word"] * 60 or text.split() == ["word"] * 59  # all of it (first chunk aside)
        assert s.proc.wait(timeout=20) == 0
        err = s.stderr()
        assert "SIGHUP: draining" in err and "stopped" in err
    finally:
        s.kill()


# ---- observability -----------------------------------------------------------------------------

def test_slots_and_request_log(tmp_path):
    with Server("--test-script", script_file(tmp_path, [LONG]), "--test-delay-ms", "10") as s:
        st, _, data = raw(s, "GET", "/slots")
        j = json.loads(data)
        assert st == 200 and j["slots"][0]["state"] == "idle" and j["queue"]["waiting"] == 0
        done = threading.Event()

        def run():
            oai(s).chat.completions.create(model="m", messages=USER, max_tokens=100)
            done.set()

        t = threading.Thread(target=run)
        t.start()
        deadline = time.time() + 10
        while time.time() < deadline:
            j = json.loads(raw(s, "GET", "/slots")[2])
            if j["slots"][0]["state"] == "decode":
                break
            time.sleep(0.02)
        assert j["slots"][0]["state"] == "decode" and j["slots"][0]["api"] == "chat"
        assert j["slots"][0]["n_prompt"] > 0 and j["connections"]["work"] >= 1
        t.join(timeout=30)
        m = s.metrics()
        assert m['redlite_slot_state{slot="0",state="idle"}'] == 1
        assert m["redlite_queue_wait_seconds_count"] == 1
        st, h, _ = raw(s, "POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 7})
        rid = h["x-request-id"]
        time.sleep(0.2)
        lines = [json.loads(x) for x in s.stderr().splitlines() if x.startswith('{"event":"request"')]
        mine = [x for x in lines if x["id"] == rid]
        assert len(mine) == 1, lines[-3:]
        x = mine[0]
        assert x["status"] == 200 and x["path"] == "/v1/chat/completions" and x["outcome"] == "length"
        assert x["gen_tokens"] == 7 and x["prompt_tokens"] > 0 and x["body_bytes"] > 0 and x["peer"] == "127.0.0.1"
        # a client-controlled path cannot forge a log line
        c = connect(s)
        c.sendall(b'GET /x%0a{"event":"fake"} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
        read_response(c)
        c.close()
        time.sleep(0.2)
        assert not any(x.startswith('{"event":"fake"') for x in s.stderr().splitlines())


# ---- checkpoints (the real model) --------------------------------------------------------------

THREADS = ("-t", "2", "--temp", "0")
CONV = [{"role": "system", "content": "You review code."},
        {"role": "user", "content": "Here is my code:\n" + "\n".join(f"def f{i}(x):\n    return x * {i}" for i in range(12))}]


def chat(s, msgs, **kw):
    return oai(s).chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=kw.get("n", 6))


def test_checkpoint_of_other_weights_is_not_restored(tmp_path):
    """Two GGUFs with identical layout and different weights: a checkpoint written with one is
    never restored on the other (the fingerprint hashes the tensor data); the same file restores."""
    need_binary()
    other = tmp_path / "other.gguf"
    shutil.copyfile(MODEL, other)
    with open(other, "r+b") as f:  # one byte of the last tensor's data
        f.seek(-5, os.SEEK_END)
        b = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x10]))
    state = tmp_path / "deep" / "er" / "state"  # missing parents are created
    with Server(*THREADS, "--state-dir", state, "--state-min-tokens", "1") as a:
        chat(a, CONV)
        assert a.stop() == 0
    assert list(state.glob("*.rlstate")) and (state / ".model-hashes").exists()
    conv2 = CONV + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "And f3?"}]
    with Server(*THREADS, "--state-dir", state, "-m", other) as b:
        r = chat(b, conv2)
        assert b.metrics()["redlite_disk_checkpoint_restores_total"] == 0
        assert r.usage.prompt_tokens_details.cached_tokens == 0
    with Server(*THREADS, "--state-dir", state) as c:  # positive control: the same weights restore
        r = chat(c, conv2)
        assert c.metrics()["redlite_disk_checkpoint_restores_total"] == 1
        assert r.usage.prompt_tokens_details.cached_tokens > 50
    hashes = (state / ".model-hashes").read_text().splitlines()
    assert len(hashes) == 2  # one line per file, computed once each: the restarts read the cache


def test_fifo_in_state_dir_does_not_hang(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    os.mkfifo(state / "trap.rlstate")
    (state / ".tmp-4242-dead").write_bytes(b"torn write")
    t0 = time.time()
    with Server(*THREADS, "--state-dir", state, start_timeout=30) as s:
        assert time.time() - t0 < 20
        assert s.alive()
        assert not (state / ".tmp-4242-dead").exists()
        assert s.stop() == 0


def test_two_servers_share_one_state_dir(tmp_path):
    """Two servers on one --state-dir with a small cap: both serve, the directory stays within the
    cap, and one restores the checkpoint the other wrote."""
    state = tmp_path / "state"
    with Server(*THREADS, "--state-dir", state, "--state-min-tokens", "1") as a:
        chat(a, CONV)
        a.stop()
    one = max(f.stat().st_size for f in state.glob("*.rlstate"))
    cap_mib = max(1, (one * 2 + one // 2) >> 20)
    for f in state.glob("*.rlstate"):
        f.unlink()
    flags = (*THREADS, "--state-dir", state, "--state-min-tokens", "1", "--state-max-mib", str(cap_mib))
    with Server(*flags) as a, Server(*flags) as b:
        convs = [CONV[:1] + [{"role": "user", "content": f"Task {i}: " + CONV[1]["content"]}] for i in range(4)]
        for i, c in enumerate(convs):
            chat(a if i % 2 == 0 else b, c)
        total = sum(f.stat().st_size for f in state.iterdir() if f.is_file() and not f.name.startswith(".model"))
        assert total <= cap_mib << 20, f"{total} bytes over the {cap_mib} MiB cap"
        # b continues a conversation a saved last (its checkpoint is the newest, so kept)
        conv2 = convs[2] + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Why?"}]
        r = chat(b, conv2)
        assert b.metrics()["redlite_disk_checkpoint_restores_total"] >= 1
        assert r.usage.prompt_tokens_details.cached_tokens > 50
        assert a.alive() and b.alive()
    assert not list(state.glob(".tmp-*"))


def test_short_hostile_soak(tmp_path):
    """bench/server_soak.py, short: ordinary clients (real model) all served while hostile threads
    drop requests, trickle headers, hold idle connections and send malformed bodies; every
    malformed request gets its 4xx; the server is healthy and exits cleanly."""
    need_binary()
    import sys
    from server_util import REPO
    out = tmp_path / "soak.md"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "server_soak.py"), "-m", str(MODEL), "-n", "24", "-c", "3",
                        "--hostile", "2", "--max-tokens", "6", "--timeout", "240", "--out", str(out)],
                       capture_output=True, text=True, timeout=400)
    text = out.read_text() if out.exists() else r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert "| other failures | 0 |" in text and "wrongly answered | " in text
    assert "| server healthy at the end | yes |" in text
