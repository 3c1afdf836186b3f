"""Several `redlite serve` replicas behind nginx (docs/SERVER.md, "Deployment: several replicas").
The nginx configuration is examples/nginx-redlite.conf as shipped, with only the replicas' and the
listener's addresses replaced.

- affinity: every key source the configuration reads (the X-RedLite-Conversation header, Claude
  Code's X-Claude-Code-Session-Id, Codex's session_id header, the body's prompt_cache_key and
  user) sends a conversation id to the replica the explicit header sends it to, for ids that hash
  to either replica; the explicit header wins over the others; a client that sends no key sticks
  to one replica;
- a conversation that moves between two replicas sharing one --state-dir (turns alternating
  between them, forced by the affinity key, then the replica of the last turn stopped so that
  nginx fails over) gets the answers one server gives, and every turn after the first evaluates
  only its new tokens: usage cached_tokens covers the previous prompt, restored from the
  checkpoint the other replica wrote (the replicas' disk restore counters say so).

nginx runs as the test user from a temporary directory (daemon off, master_process off, loopback
ports, stopped at the end, every wait bounded). Skipped when nginx is not installed (CI installs
it: scripts/install-deps.sh); RL_NGINX names another nginx binary.
"""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time

import openai
import pytest

from server_util import REPO, Server, script_file

CONF = REPO / "examples" / "nginx-redlite.conf"


def nginx_binary():
    p = os.environ.get("RL_NGINX") or shutil.which("nginx")
    if not p and os.access("/usr/sbin/nginx", os.X_OK):
        p = "/usr/sbin/nginx"
    if not p:
        pytest.skip("nginx is not installed (apt-get install nginx; CI installs it with scripts/install-deps.sh)")
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx with examples/nginx-redlite.conf in front of the given replica ports."""

    def __init__(self, tmp, ports, start_timeout=20.0):
        binary = nginx_binary()
        self.dir = tmp / "nginx"
        (self.dir / "tmp").mkdir(parents=True)
        self.port = free_port()
        site = CONF.read_text()
        it = iter(ports)
        site, n_srv = re.subn(r"(?m)^(    server )127\.0\.0\.1:808[12]( .*)$",
                              lambda m: f"{m.group(1)}127.0.0.1:{next(it)}{m.group(2)}", site)
        assert n_srv == 2, "examples/nginx-redlite.conf: the two upstream server lines changed"
        site, n_listen = re.subn(r"listen 127\.0\.0\.1:8080;", f"listen 127.0.0.1:{self.port};", site)
        assert n_listen == 1, "examples/nginx-redlite.conf: the listen line changed"
        (self.dir / "redlite.conf").write_text(site)
        d = self.dir
        (d / "nginx.conf").write_text(f"""daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    include {d}/redlite.conf;
}}
""")
        self.proc = subprocess.Popen([binary, "-p", str(d), "-e", str(d / "error.log"), "-c", str(d / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=open(d / "stderr.log", "w"))
        deadline = time.time() + start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited {self.proc.returncode}: {self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx did not start in {start_timeout} s: {self.log()}")

    def log(self):
        out = ""
        for name in ("stderr.log", "error.log"):
            p = self.dir / name
            if p.exists():
                out += p.read_text(errors="replace")[-4000:]
        return out

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def request(self, method, path, headers=None, body=None):
        """(status, replica port, body) of one request through nginx."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            data = json.dumps(body).encode() if body is not None else None
            h = {"Content-Type": "application/json"} if data is not None else {}
            c.request(method, path, body=data, headers={**h, **(headers or {})})
            r = c.getresponse()
            text = r.read()
            replica = r.getheader("X-RedLite-Replica") or ""
            return r.status, int(replica.rsplit(":", 1)[1]) if ":" in replica else None, text
        finally:
            c.close()

    def replica_of(self, headers=None, body_extra=None):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **(body_extra or {})}
        status, port, text = self.request("POST", "/v1/chat/completions", headers, body)
        assert status == 200, (status, text, self.log())
        return port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def test_affinity_key_sources(tmp_path):
    nginx_binary()
    script = script_file(tmp_path, ["ok"])
    with Server("--test-script", script) as a, Server("--test-script", script) as b, \
            Nginx(tmp_path, [a.port, b.port]) as ng:
        seen = set()
        for i in range(12):
            k = f"conversation-{i}"
            r = ng.replica_of({"X-RedLite-Conversation": k})
            assert r in (a.port, b.port)
            seen.add(r)
            for how, hdr, body in [("X-Claude-Code-Session-Id", {"X-Claude-Code-Session-Id": k}, None),
                                   ("session_id header", {"session_id": k}, None),
                                   ("prompt_cache_key", None, {"prompt_cache_key": k}),
                                   ("user", None, {"user": k})]:
                assert ng.replica_of(hdr, body) == r, f"{how} {k!r} went elsewhere than the explicit header"
            # the explicit header wins over the agents' own keys
            other = "x" + k
            assert ng.replica_of({"X-RedLite-Conversation": k, "X-Claude-Code-Session-Id": other,
                                  "session_id": other}, {"prompt_cache_key": other}) == r
        assert seen == {a.port, b.port}, "the ids all hashed to one replica: the key is not used"
        # a quoted "user" inside a message's text is not a key
        k = "conversation-0"
        assert ng.replica_of({"X-RedLite-Conversation": k}) == ng.replica_of(
            None, {"messages": [{"role": "user", "content": 'say "user": "zz" and "prompt_cache_key": "q"'}], "user": k})
        # no key at all: the client's address, so one client sticks to one replica
        first = ng.replica_of()
        assert all(ng.replica_of() == first for _ in range(4))


def chat_turns(base_url, n_turns, keys=None, before_turn=None):
    """One conversation of n_turns greedy turns; returns [(text, prompt_tokens, cached_tokens,
    replica port or None)]. keys[t]: the X-RedLite-Conversation header of turn t."""
    c = openai.OpenAI(base_url=base_url, api_key="none", timeout=300, max_retries=0)
    msgs = [{"role": "system", "content": "You are a careful coding assistant."},
            {"role": "user", "content": "Write a C function that returns the larger of two ints."}]
    out = []
    for t in range(n_turns):
        if before_turn:
            before_turn(t)
        raw = c.chat.completions.with_raw_response.create(
            model="m", messages=msgs, max_tokens=24, temperature=0,
            extra_headers={"X-RedLite-Conversation": keys[t]} if keys else None)
        r = raw.parse()
        rep = raw.headers.get("x-redlite-replica")
        out.append((r.choices[0].message.content, r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens,
                    int(rep.rsplit(":", 1)[1]) if rep else None))
        msgs = msgs + [{"role": "assistant", "content": r.choices[0].message.content},
                       {"role": "user", "content": f"Now make it handle case {t} differently."}]
    return out


def test_conversation_moves_between_replicas(tmp_path):
    nginx_binary()
    turns = 5
    with Server("-t", "1", "--parallel", "1") as one:
        alone = chat_turns(one.url("/v1"), turns)
    state = tmp_path / "state"
    common = ("-t", "1", "--parallel", "1", "--state-dir", state, "--state-min-tokens", "1")
    with Server(*common) as a, Server(*common) as b, Nginx(tmp_path, [a.port, b.port]) as ng:
        # affinity keys that land on a and on b
        key = {}
        for i in range(64):
            status, port, _ = ng.request("GET", "/health", {"X-RedLite-Conversation": f"k{i}"})
            assert status == 200
            key.setdefault(port, f"k{i}")
            if len(key) == 2:
                break
        assert set(key) == {a.port, b.port}, key
        # turns 0-3 alternate a, b, a, b; before turn 4, b (which served turn 3) stops and its
        # key's requests fail over to a
        order = [a.port, b.port, a.port, b.port, b.port]
        metrics_b = {}

        def before(t):
            if t == 4:
                metrics_b.update(b.metrics())
                assert b.stop() == 0

        got = chat_turns(ng.url("/v1"), turns, keys=[key[p] for p in order], before_turn=before)
        metrics_a = a.metrics()
    served = [g[3] for g in got]
    assert served == [a.port, b.port, a.port, b.port, a.port], (served, ng.log())
    for t in range(turns):
        assert got[t][0] == alone[t][0], f"turn {t}: the answer differs from one server's"
        assert got[t][1] == alone[t][1]
    assert got[0][2] == 0
    for t in range(1, turns):
        # the new replica resumed from the other's checkpoint: the previous prompt but its last
        # token (the resume point) is reused, only the new tokens are evaluated
        assert got[t][2] >= got[t - 1][1] - 1, (t, got)
    assert metrics_a["redlite_disk_checkpoint_restores_total"] >= 2, metrics_a  # turns 2 and 4
    assert metrics_b["redlite_disk_checkpoint_restores_total"] >= 1, metrics_b  # turn 1 (turn 3: too)
    assert metrics_a["redlite_disk_checkpoint_rejected_total"] == 0
