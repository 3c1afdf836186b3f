"""`redlite serve`'s context window (issue 45): the default --ctx comes from the model's trained
length and the memory plan (run/ctx_plan.h; the arithmetic is tests/c/test_ctx_plan.c) and is
said in one log line; /v1/models reports it and the trained length; a prompt longer than the
trained length is answered with a warning (header, counter, log line). Real binary, real model."""

import json
import re
import subprocess
import urllib.request

import pytest

from server_util import BIN, MODEL, Server, need_binary


def models(s):
    with urllib.request.urlopen(s.url("/v1/models"), timeout=10) as r:
        return json.load(r)["data"][0]


def planned(s):
    m = re.search(r"redlite serve: context (\d+)", s.stderr())
    assert m, s.stderr()
    return int(m.group(1))


def test_default_ctx_is_the_trained_length():
    with Server() as s:  # models/default.gguf: trained on 4096 positions, its KV cache is tiny
        assert "context 4096 = the model's trained length" in s.stderr(), s.stderr()
        m = models(s)
        assert planned(s) == m["context_length"] == m["max_model_len"] == m["meta"]["n_ctx"] == 4096
        assert m["meta"]["n_ctx_train"] == 4096


@pytest.fixture(scope="module")
def long_trained(tmp_path_factory):
    """A synthetic model trained (per its metadata) on 262144 positions, 512 B of KV each."""
    need_binary()
    p = tmp_path_factory.mktemp("ctx") / "long.gguf"
    subprocess.run([str(BIN), "synth", "--preset", "tiny", "--geometry", "ctx=262144", "--vocab", str(MODEL),
                    "-o", str(p), "--quiet"], check=True, capture_output=True, timeout=120)
    return p


def test_default_ctx_is_limited_by_memory(long_trained):
    """With the RAM the plan sees set low (RL_CTX_RAM_MIB), the context is the most that fits
    beside the weights, in steps of 1024; with plenty it is the trained length."""
    with Server("-m", long_trained, env={"RL_CTX_RAM_MIB": "1540"}) as s:
        n = planned(s)
        assert 4096 <= n < 262144 and n % 1024 == 0, s.stderr()
        assert "of the model's trained 262144" in s.stderr() and "fits in 70% of RAM" in s.stderr()
        m = models(s)
        assert m["context_length"] == n and m["meta"]["n_ctx_train"] == 262144
    # 70% of 1540 MiB - 1 GiB reserve - weights leaves ~47 MiB: ~96K positions of 512 B
    assert 80 * 1024 <= n <= 100 * 1024, n
    with Server("-m", long_trained, env={"RL_CTX_RAM_MIB": "1600"}) as s:
        assert n < planned(s), "more memory, a longer context"
    with Server("-m", long_trained, env={"RL_CTX_RAM_MIB": "65536"}) as s:
        assert planned(s) == 262144 and "= the model's trained length" in s.stderr()


def test_explicit_ctx_wins_and_beyond_trained_is_warned():
    with Server("--ctx", "8192", "-t", "2") as s:
        assert "redlite serve: context" not in s.stderr()  # no plan line: --ctx was given
        assert models(s)["context_length"] == 8192
        word = " alpha"
        body = {"prompt": word * 3000, "max_tokens": 1, "temperature": 0}
        req = urllib.request.Request(s.url("/v1/completions"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            w = r.headers.get("X-RedLite-Warning")
            n = json.load(r)["usage"]["prompt_tokens"]
        assert n > 4096 and w and f"{n} tokens" in w and "trained on (4096)" in w, (w, n)
        body["prompt"] = "short"
        req = urllib.request.Request(s.url("/v1/completions"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.headers.get("X-RedLite-Warning") is None
        assert s.metrics()["redlite_prompts_beyond_trained_total"] == 1
        assert "longer than the model's trained context (4096 tokens)" in s.stderr()
