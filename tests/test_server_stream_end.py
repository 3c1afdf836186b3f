"""How `redlite serve` ends answers it cannot finish (issue 45): a stream cut by a shutdown (SIGTERM)
ends at once with the API's error event and never as a finished answer: Anthropic `event: error`
(never `stop_reason: end_turn`), Responses `response.failed` (never `response.completed` /
`response.incomplete`). Chat completions: test_server_protocol.py::test_graceful_shutdown. Official
clients, real binary, scripted test backend."""

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
