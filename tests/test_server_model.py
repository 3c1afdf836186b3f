"""`redlite serve` on the real model path (models/default.gguf through the session layer), driven
with the official `openai` and `anthropic` clients on loopback. The default model may be a random
tiny model or a trained one, so these tests assert protocol and consistency, never text:

- greedy streaming == greedy non-streaming, in each API; usage numbers add up; max_tokens gives
  exactly that many tokens and finish_reason "length"; a stop string cuts the greedy text;
- prefix reuse: a second request extending the first reports cached tokens and gives exactly
  the greedy answer a cold server gives;
- --state-dir: after a restart the extended conversation is restored from disk (far fewer tokens
  evaluated) and the answer is identical to a cold server's;
- concurrency: more clients than the queue get 503s, the rest complete; a client that
  disconnects mid-stream stops its generation.
"""

import json
import socket
import threading
import time

import anthropic
import openai
import pytest

from server_util import Server

THREADS = ("-t", "2", "--temp", "0")  # greedy unless a request says otherwise


def oai(s):
    return openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=120, max_retries=0)


def ant(s):
    return anthropic.Anthropic(base_url=s.url(""), api_key="none", timeout=120, max_retries=0)


CONV = [{"role": "system", "content": "You are a helpful coding assistant."},
        {"role": "user", "content": "Write a Python function that reverses a string, then explain it."}]


@pytest.fixture(scope="module")
def srv():
    with Server(*THREADS) as s:
        yield s


def chat(s, msgs, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 24)
    return oai(s).chat.completions.create(model="m", messages=msgs, **kw)


def test_stream_equals_nonstream(srv):
    r = chat(srv, CONV)
    text = r.choices[0].message.content
    assert r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    chunks = list(chat(srv, CONV, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert fin == [r.choices[0].finish_reason]
    a = ant(srv)
    m = a.messages.create(model="m", max_tokens=24, system=CONV[0]["content"], messages=CONV[1:])
    with a.messages.stream(model="m", max_tokens=24, system=CONV[0]["content"],
                           messages=CONV[1:]) as st:
        streamed = "".join(st.text_stream)
    mtext = "".join(b.text for b in m.content if b.type == "text")
    assert streamed == mtext
    # the same conversation through the Anthropic mapping renders the same prompt: same greedy text
    assert mtext == text
    c = oai(srv)
    rr = c.responses.create(model="m", instructions=CONV[0]["content"], input=CONV[1]["content"],
                            max_output_tokens=24, temperature=0)
    assert rr.output_text == text
    ev = list(c.responses.create(model="m", instructions=CONV[0]["content"], input=CONV[1]["content"],
                                 max_output_tokens=24, temperature=0, stream=True))
    assert ev[-1].response.output_text == text


def test_length_and_stop(srv):
    r = chat(srv, CONV, max_tokens=7)
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == 7
    full = chat(srv, CONV, max_tokens=40).choices[0].message.content
    if len(full) < 8:
        pytest.skip("the model's greedy answer is too short to cut")  # cannot happen with a random model
    stop = full[len(full) // 2:len(full) // 2 + 3]
    cut = chat(srv, CONV, max_tokens=40, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[:full.index(stop)]
    m = ant(srv).messages.create(model="m", max_tokens=40, system=CONV[0]["content"],
                                 messages=CONV[1:], stop_sequences=[stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == full[:full.index(stop)] if full.index(stop) else m.content == []


def test_prefix_reuse_equals_cold(srv):
    r1 = chat(srv, CONV, max_tokens=16)
    conv2 = CONV + [{"role": "assistant", "content": r1.choices[0].message.content},
                    {"role": "user", "content": "Now make it handle None."}]
    r2 = chat(srv, conv2, max_tokens=16)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= r1.usage.prompt_tokens, (cached, r1.usage.prompt_tokens)
    assert cached < r2.usage.prompt_tokens
    with Server(*THREADS) as cold:
        c2 = chat(cold, conv2, max_tokens=16)
        assert c2.usage.prompt_tokens_details.cached_tokens == 0
        assert c2.choices[0].message.content == r2.choices[0].message.content
        assert c2.usage.completion_tokens == r2.usage.completion_tokens


def test_restart_with_state_dir(tmp_path):
    long_user = "Here is my code:\n" + "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}" for i in range(40))
    conv = [{"role": "system", "content": "You review code."}, {"role": "user", "content": long_user}]
    state = tmp_path / "state"
    with Server(*THREADS, "--state-dir", state, "--state-min-tokens", "1") as a:
        r1 = chat(a, conv, max_tokens=8)
        assert r1.usage.prompt_tokens > 300
        assert a.stop() == 0
    assert list(state.glob("*.rlstate")), "no checkpoint written"
    conv2 = conv + [{"role": "assistant", "content": r1.choices[0].message.content},
                    {"role": "user", "content": "Which function is wrong?"}]
    with Server(*THREADS, "--state-dir", state) as b:
        r2 = chat(b, conv2, max_tokens=12)
        m = b.metrics()
        assert m["redlite_disk_checkpoint_restores_total"] == 1
        cached = r2.usage.prompt_tokens_details.cached_tokens
        assert cached >= r1.usage.prompt_tokens - 1  # saved: the first prompt but its last token
        assert m["redlite_prompt_tokens_evaluated_total"] < r2.usage.prompt_tokens / 4
    with Server(*THREADS) as cold:
        c2 = chat(cold, conv2, max_tokens=12)
    assert c2.choices[0].message.content == r2.choices[0].message.content
    assert c2.usage.completion_tokens == r2.usage.completion_tokens
    # a checkpoint of another model is ignored safely: corrupt the header's model fingerprint
    f = sorted(state.glob("*.rlstate"))[0]
    data = bytearray(f.read_bytes())
    data[16] ^= 0xFF
    f.write_bytes(bytes(data))
    with Server(*THREADS, "--state-dir", state) as c:
        r3 = chat(c, conv2, max_tokens=12)
        assert c.metrics()["redlite_disk_checkpoint_restores_total"] == 0
        assert r3.choices[0].message.content == c2.choices[0].message.content
    assert f.exists()  # not ours: left alone


def test_queue_503_and_disconnect():
    with Server(*THREADS, "--queue", "1") as s:
        results = []

        def one():
            try:
                r = chat(s, CONV, max_tokens=200)
                results.append(200 if r.choices else 0)
            except openai.APIStatusError as e:
                results.append(e.status_code)

        ts = [threading.Thread(target=one) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        assert len(results) == 8 and set(results) <= {200, 503} and results.count(200) >= 2, results
        assert 503 in results
        assert s.alive()
        # disconnect mid-stream: generation stops long before max_tokens
        before = s.metrics()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        body = json.dumps({"messages": CONV, "max_tokens": 20000, "temperature": 0, "stream": True}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while got.count(b"data: ") < 4:
            got += sock.recv(4096)
        sock.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            m = s.metrics()
            if m["redlite_requests_cancelled_total"] > before["redlite_requests_cancelled_total"]:
                break
            time.sleep(0.1)
        assert m["redlite_requests_cancelled_total"] == before["redlite_requests_cancelled_total"] + 1
        assert m["redlite_generated_tokens_total"] - before["redlite_generated_tokens_total"] < 20000
        assert chat(s, CONV, max_tokens=3).usage.completion_tokens <= 3


def test_speculation_never_changes_the_answer(srv):
    """The server's default speculation (lookup) against --spec none: the same greedy answers."""
    conv = CONV + [{"role": "assistant", "content": "def rev(s):\n    return s[::-1]"},
                   {"role": "user", "content": "Repeat that function exactly, then add a docstring to it."}]
    spec = [chat(srv, c, max_tokens=48).choices[0].message.content for c in (CONV, conv)]
    m = srv.metrics()
    assert m["redlite_spec_accepted_tokens_total"] <= m["redlite_spec_drafted_tokens_total"]
    with Server(*THREADS, "--spec", "none") as plain:
        assert [chat(plain, c, max_tokens=48).choices[0].message.content for c in (CONV, conv)] == spec
        assert plain.metrics()["redlite_spec_drafted_tokens_total"] == 0
