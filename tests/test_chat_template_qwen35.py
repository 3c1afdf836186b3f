"""Qwen3.5's chat format end to end in `redlite serve`: a GGUF carrying the real Qwen3.5 template
(tests/fixtures/templates/Qwen3.5.jinja written into a copy of the test model models/default.gguf, a
tiny model with the whole Qwen3 vocabulary: <think> and </think> are single tokens there, as in
Qwen3.5's; the tiny-q35 fixtures have a 2,048-token vocabulary without them) answers with scripted
text in the format that template teaches the model: reasoning closed by </think> (the generation prompt opened the block), then text, then XML
tool calls. The official clients must get the reasoning, the text and typed call arguments apart,
and a conversation fed back must re-render the answer as generated (the server holds the prefix).
The rendering itself is compared with transformers in tests/test_chat_template.py."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402
from server_util import BIN, Server, script_file  # noqa: E402

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "tests" / "fixtures" / "templates" / "Qwen3.5.jinja"

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                    "hourly": {"type": "boolean"}},
                   "required": ["city"]}}}]
ANT_TOOLS = [{"name": "get_weather", "description": "Weather forecast",
              "input_schema": TOOLS[0]["function"]["parameters"]}]
REASON1 = "The user asks for the weather in Paris.\nI should call the tool."
CALL1 = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
         "</parameter>\n</function>\n</tool_call>")
ANSWER1 = REASON1 + "\n</think>\n\nLet me check.\n\n" + CALL1
ARGS1 = {"city": "Paris", "days": 3}
REASON2 = "The tool says sunny."
ANSWER2 = REASON2 + "\n</think>\n\nIt is sunny in Paris."
# two calls, no text, a boolean and a multi-line string (typed by the schema); a boolean is not
# fed back as generated: the template renders Python's str(False) = "False", as transformers does
ANSWER3 = ("Two cities.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
           "<parameter=hourly>\nfalse\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
           "<parameter=city>\nNew\nYork\n</parameter>\n</function>\n</tool_call>")
ARGS3 = [{"city": "Oslo", "hourly": False}, {"city": "New\nYork"}]


def gguf_with_template(src, dst, template):
    """A copy of the GGUF src whose tokenizer.chat_template is `template` (metadata rewritten, tensor
    infos unchanged, the data realigned: offsets are relative to the data section)."""
    buf = Path(src).read_bytes()
    magic, version, n_t, n_kv = struct.unpack_from("<IIQQ", buf, 0)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t, pos):
        if t == 8:
            return pos + 8 + struct.unpack_from("<Q", buf, pos)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if et in sizes:
                return pos + sizes[et] * n
            for _ in range(n):
                pos = skip(et, pos)
            return pos
        return pos + sizes[t]

    def gstr(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    pos, kvs, align = 24, [], 32
    for _ in range(n_kv):
        kend = skip(8, pos)
        key = buf[pos + 8:kend].decode()
        t = struct.unpack_from("<I", buf, kend)[0]
        vend = skip(t, kend + 4)
        if key == "general.alignment":
            align = struct.unpack_from("<I", buf, kend + 4)[0]
        if key != "tokenizer.chat_template":
            kvs.append(buf[pos:vend])
        pos = vend
    kvs.append(gstr("tokenizer.chat_template") + struct.pack("<I", 8) + gstr(template))
    tstart = pos
    for _ in range(n_t):
        pos = skip(8, pos)
        (nd,) = struct.unpack_from("<I", buf, pos)
        pos += 4 + 8 * nd + 4 + 8
    infos = buf[tstart:pos]
    data = buf[(pos + align - 1) // align * align:]
    head = struct.pack("<IIQQ", magic, version, n_t, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * (-len(head) % align)
    Path(dst).write_bytes(head + data)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    server_util.need_binary()
    p = tmp_path_factory.mktemp("q35") / "qwen35-template.gguf"
    gguf_with_template(server_util.MODEL, p, TEMPLATE.read_text())
    return p


@pytest.fixture
def srv(model, tmp_path, monkeypatch):
    monkeypatch.setattr(server_util, "MODEL", model)
    with Server("--test-script", script_file(tmp_path, [ANSWER1, ANSWER2, ANSWER3, ANSWER1, ANSWER2])) as s:
        yield s


def test_copy_is_the_model_with_the_qwen35_template(model):
    """The rewritten file loads, carries the template byte for byte, and its weights are the
    model's (the same greedy tokens)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_tokenizer import read_gguf_kv

    assert read_gguf_kv(str(model))["tokenizer.chat_template"] == TEMPLATE.read_text()
    outs = []
    for p in (server_util.MODEL, model):
        r = subprocess.run([str(BIN), "dump", "-m", str(p), "--tokens", "100,11,200", "--greedy", "4", "--json"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout)["generated"])
    assert outs[0] == outs[1] and len(outs[0]) == 4


def test_openai_reasoning_text_and_xml_call(srv):
    c = openai.OpenAI(base_url=srv.url("/v1"), api_key="none", timeout=60, max_retries=0)
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    r = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=200)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content == "Let me check."
    assert getattr(ch.message, "reasoning_content", None) == REASON1
    (call,) = ch.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == ARGS1
    msgs += [ch.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny"}'}]
    r2 = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=200)
    m2 = r2.choices[0].message
    assert m2.content == "It is sunny in Paris." and r2.choices[0].finish_reason == "stop"
    assert getattr(m2, "reasoning_content", None) == REASON2
    # the fed-back answer (reasoning kept: it follows the last user query) re-renders as generated
    print(f"prompt 1: {r.usage.prompt_tokens} + {r.usage.completion_tokens} generated; "
          f"prompt 2 cached {r2.usage.prompt_tokens_details.cached_tokens} of {r2.usage.prompt_tokens}")
    assert r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens + r.usage.completion_tokens - 1

    # streamed: reasoning deltas, then the two calls as OpenAI sends them
    chunks = list(c.chat.completions.create(model="m", messages=msgs[:1], tools=TOOLS, stream=True))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    assert reasoning == "Two cities." and not "".join(d.content or "" for d in deltas).strip()
    calls = {}
    for d in deltas:
        for tc in d.tool_calls or []:
            calls.setdefault(tc.index, []).append(tc.function.arguments or "")
    assert [json.loads("".join(calls[i])) for i in sorted(calls)] == ARGS3
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["tool_calls"]
    # Anthropic: a thinking block, a text block and a tool_use block
    a = anthropic.Anthropic(base_url=srv.url(""), api_key="none", timeout=60, max_retries=0)
    m = a.messages.create(model="m", max_tokens=200, messages=msgs[:1], tools=ANT_TOOLS)
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"] and m.stop_reason == "tool_use"
    assert m.content[0].thinking == REASON1 and m.content[1].text == "Let me check."
    assert m.content[2].name == "get_weather" and m.content[2].input == ARGS1
    # thinking off (chat_template_kwargs): the generation prompt closes an empty block, so no
    # reasoning is split off the answer
    r = c.chat.completions.create(model="m", messages=msgs[:1], max_tokens=200,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].message.content == ANSWER2
    assert getattr(r.choices[0].message, "reasoning_content", None) is None
