"""Structured outputs on the real server (models/default.gguf), with the official clients:

- 20 JSON schemas x 10 seeds through response_format json_schema: every one of the 200 outputs
  finishes ("stop") and is valid against its schema (checked with the `jsonschema` package);
  json_object mode gives objects; Responses text.format too;
- speculation stays exact under a grammar: --spec lookup and --spec mtp give the same outputs as
  --spec none, greedy and seeded;
- tool_choice required / named (OpenAI chat, streamed and not; Responses) and Anthropic any / tool:
  the answer is a tool call; strict tools' arguments follow their schema;
- unsupported schema keywords and unknown tool names are 400s naming them;
- logprobs / top_logprobs on chat completions: shape, greedy tokens on top, streamed == not,
  bytes rebuild the text, and the reported probability matches the sampler's frequency.

The tiny model writes junk: the grammar alone makes the outputs valid, and its length budget
makes them finish within max_tokens.
"""

import json
import math

import anthropic
import jsonschema
import openai
import pytest

from server_util import Server

MAX_TOKENS = 48
CALL_TOKENS = 96  # a call's markup alone is ~60 bytes: the budget guarantees an end within max_tokens >= bytes

OBJ = {"type": "object", "additionalProperties": False}


def obj(props, required=None):
    return {**OBJ, "properties": props, "required": list(props) if required is None else required}


SCHEMAS = [
    obj({"name": {"type": "string"}, "age": {"type": "integer"}}),
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"ok": {"type": "boolean"}, "note": {"type": ["string", "null"]}}),
    obj({"xs": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}}),
    obj({"point": obj({"x": {"type": "number"}, "y": {"type": "number"}})}),
    obj({"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}),
    obj({"kind": {"const": "event"}, "id": {"type": "integer"}}),
    {"$defs": {"tag": {"type": "string", "maxLength": 8}},
     **obj({"tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 3}})},
    obj({"a": {"type": "integer"}, "b": {"type": "string"}}, required=[]),
    obj({"code": {"type": "string", "minLength": 2, "maxLength": 4}}),
    obj({"items": {"type": "array", "items": obj({"n": {"type": "string"}, "q": {"type": "integer"}}), "maxItems": 2}}),
    {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
    {"enum": [1, 2.5, -3, "x"]},
    {"title": "T", "description": "annotations are ignored",
     **obj({"s": {"type": "string", "description": "a string", "default": "a"}})},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"$defs": {"node": obj({"v": {"type": "integer"},
                            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}})},
     "$ref": "#/$defs/node"},
    {"oneOf": [obj({"cat": {"type": "string"}}), obj({"dog": {"type": "integer"}})]},
    obj({"x": {"type": ["number", "boolean", "null"]}}),
    obj({"scores": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
         "label": {"enum": ["lo", "hi"]}}),
    {"allOf": [obj({"q": {"type": "string", "maxLength": 5}})]},
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city", "strict": True,
        "parameters": obj({"city": {"type": "string", "maxLength": 20},
                           "unit": {"enum": ["c", "f"]}})}},
    {"type": "function", "function": {
        "name": "add", "description": "Add numbers",
        "parameters": obj({"a": {"type": "integer"}, "b": {"type": "integer"}})}},
]

MSGS = [{"role": "user", "content": "Answer with JSON describing a small thing."}]


def oai(s):
    return openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=120, max_retries=0)


def ant(s):
    return anthropic.Anthropic(base_url=s.url(""), api_key="none", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def srv():
    with Server("-t", "2") as s:
        yield s


def schema_fmt(schema, name="out"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def ask(s, schema, seed, **kw):
    kw.setdefault("temperature", 0.8)
    return oai(s).chat.completions.create(model="m", messages=MSGS, max_tokens=MAX_TOKENS, seed=seed,
                                          response_format=schema_fmt(schema), **kw)


def test_200_objects_valid(srv):
    valid, bad = 0, []
    for i, schema in enumerate(SCHEMAS):
        for seed in range(10):
            r = ask(srv, schema, seed)
            c = r.choices[0]
            try:
                assert c.finish_reason == "stop", c.finish_reason
                jsonschema.validate(json.loads(c.message.content), schema)
                valid += 1
            except Exception as e:  # collect, report all at the end
                bad.append((i, seed, c.message.content, repr(e)[:200]))
    assert valid == 200, f"{valid} of 200 valid; failures: {bad[:5]}"


def test_json_object_mode_and_stream(srv):
    for seed in range(5):
        kw = dict(model="m", messages=MSGS, max_tokens=MAX_TOKENS, seed=seed, temperature=0.9,
                  response_format={"type": "json_object"})
        r = oai(srv).chat.completions.create(**kw)
        assert r.choices[0].finish_reason == "stop"
        assert isinstance(json.loads(r.choices[0].message.content), dict)
        text = "".join(c.choices[0].delta.content or "" for c in oai(srv).chat.completions.create(stream=True, **kw)
                       if c.choices)
        assert text == r.choices[0].message.content


def test_responses_text_format(srv):
    schema = SCHEMAS[0]
    r = oai(srv).responses.create(model="m", input="A person as JSON.", max_output_tokens=MAX_TOKENS, temperature=0.8,
                                  text={"format": {"type": "json_schema", "name": "p", "schema": schema, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)


def test_refused_schemas(srv):
    for schema, word in [({"type": "string", "pattern": "^a"}, "pattern"),
                         (obj({"n": {"type": "integer", "minimum": 0}}), "minimum"),
                         ({"type": "array", "prefixItems": [{}]}, "prefixItems"),
                         ({"$ref": "#/$defs/missing"}, "$ref")]:
        with pytest.raises(openai.BadRequestError) as ei:
            ask(srv, schema, 1)
        assert word in str(ei.value), str(ei.value)
    with pytest.raises(openai.BadRequestError) as ei:
        oai(srv).chat.completions.create(model="m", messages=MSGS, max_tokens=8,
                                         response_format={"type": "json_schema"})
    assert "json_schema" in str(ei.value)
    assert srv.alive()


# ---- exact speculation under a grammar ------------------------------------------------------------

def outputs(s):
    out = []
    for i in (0, 3, 10, 15, 16):
        for seed, temp in ((1, 0.0), (2, 0.9)):
            r = ask(s, SCHEMAS[i], seed, temperature=temp)
            out.append((r.choices[0].message.content, r.choices[0].finish_reason))
    r = oai(s).chat.completions.create(model="m", messages=MSGS, max_tokens=CALL_TOKENS, seed=3, temperature=0.7,
                                       tools=TOOLS, tool_choice="required")
    out.append(json.dumps([(t.function.name, t.function.arguments) for t in r.choices[0].message.tool_calls]))
    return out


def test_speculation_exact_under_grammar(srv):
    base = outputs(srv)
    for mode in ("lookup", "mtp"):
        with Server("-t", "2", "--spec", mode, "--draft-min", "2") as s:
            got = outputs(s)
            log = s.stderr()
        assert got == base, f"--spec {mode} changed a constrained output"
        assert "error" not in log.lower() or "bug" not in log.lower()


# ---- forced tool calls -----------------------------------------------------------------------------

def check_call(name, args, want=None):
    assert name in ("get_weather", "add") and (want is None or name == want)
    args = json.loads(args) if isinstance(args, str) else args
    assert isinstance(args, dict)
    if name == "get_weather":  # strict: the arguments follow the schema
        jsonschema.validate(args, TOOLS[0]["function"]["parameters"])


def test_openai_tool_choice(srv):
    c = oai(srv).chat.completions
    for seed in range(3):
        r = c.create(model="m", messages=MSGS, max_tokens=CALL_TOKENS, seed=seed, temperature=0.8, tools=TOOLS,
                     tool_choice="required")
        assert r.choices[0].finish_reason == "tool_calls"
        for t in r.choices[0].message.tool_calls:
            check_call(t.function.name, t.function.arguments)
    for want in ("get_weather", "add"):
        r = c.create(model="m", messages=MSGS, max_tokens=CALL_TOKENS, seed=5, temperature=0.8, tools=TOOLS,
                     tool_choice={"type": "function", "function": {"name": want}})
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
        check_call(calls[0].function.name, calls[0].function.arguments, want)
        # streamed: the same call
        chunks = list(c.create(model="m", messages=MSGS, max_tokens=CALL_TOKENS, seed=5, temperature=0.8, tools=TOOLS,
                               tool_choice={"type": "function", "function": {"name": want}}, stream=True))
        name = "".join(d.function.name or "" for ch in chunks if ch.choices for d in ch.choices[0].delta.tool_calls or [])
        args = "".join(d.function.arguments or "" for ch in chunks if ch.choices
                       for d in ch.choices[0].delta.tool_calls or [])
        assert (name, args) == (want, calls[0].function.arguments)
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
    with pytest.raises(openai.BadRequestError) as ei:
        c.create(model="m", messages=MSGS, max_tokens=8, tools=TOOLS,
                 tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "nope" in str(ei.value)
    with pytest.raises(openai.BadRequestError):
        c.create(model="m", messages=MSGS, max_tokens=8, tool_choice="required")


def test_responses_tool_choice(srv):
    flat = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"],
             "strict": t["function"].get("strict", False)} for t in TOOLS]
    r = oai(srv).responses.create(model="m", input="Weather?", max_output_tokens=CALL_TOKENS, temperature=0.8,
                                  tools=flat, tool_choice={"type": "function", "name": "get_weather"})
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1
    check_call(calls[0].name, calls[0].arguments, "get_weather")


def test_anthropic_tool_choice(srv):
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"], **({"strict": True} if t["function"].get("strict") else {})}
             for t in TOOLS]
    a = ant(srv).messages
    for choice, want in (({"type": "any"}, None), ({"type": "tool", "name": "get_weather"}, "get_weather"),
                         ({"type": "tool", "name": "add"}, "add")):
        r = a.create(model="m", max_tokens=CALL_TOKENS, messages=MSGS, tools=tools, tool_choice=choice,
                     extra_body={"temperature": 0.8})
        uses = [b for b in r.content if b.type == "tool_use"]
        assert r.stop_reason == "tool_use" and len(uses) == 1, r
        check_call(uses[0].name, uses[0].input, want)
    with pytest.raises(anthropic.BadRequestError):
        a.create(model="m", max_tokens=8, messages=MSGS, tools=tools, tool_choice={"type": "tool", "name": "nope"})


# ---- logprobs --------------------------------------------------------------------------------------

def test_logprobs_shape_and_values(srv):
    c = oai(srv).chat.completions
    kw = dict(model="m", messages=MSGS, max_tokens=12, temperature=0, logprobs=True, top_logprobs=5)
    r = c.create(**kw)
    ch = r.choices[0]
    lp = ch.logprobs.content
    assert len(lp) == r.usage.completion_tokens
    assert b"".join(bytes(e.bytes) for e in lp).decode() == ch.message.content
    for e in lp:
        assert e.logprob <= 0 and len(e.top_logprobs) == 5
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True) and sum(math.exp(t) for t in tops) <= 1 + 1e-4
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob  # greedy = the top
    chunks = list(c.create(stream=True, **kw))
    slp = [e for k in chunks if k.choices and k.choices[0].logprobs for e in k.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in slp] == [(e.token, e.logprob) for e in lp]
    # without logprobs: null; bad values: 400
    assert c.create(model="m", messages=MSGS, max_tokens=2).choices[0].logprobs is None
    for bad in (dict(logprobs=True, top_logprobs=21), dict(top_logprobs=2)):
        with pytest.raises(openai.BadRequestError):
            c.create(model="m", messages=MSGS, max_tokens=2, **bad)
    # under a grammar the chosen tokens are reported too, never above the model's best
    r = c.create(model="m", messages=MSGS, max_tokens=MAX_TOKENS, temperature=0, logprobs=True, top_logprobs=1,
                 response_format={"type": "json_object"})
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    assert all(e.logprob <= e.top_logprobs[0].logprob + 1e-6 for e in lp)


def test_logprobs_match_sampler(srv):
    """With the whole distribution sampled (temperature 1, no truncation), the first token's
    frequency over seeds matches the probability the server reports for it."""
    c = oai(srv).chat.completions
    kw = dict(model="m", messages=MSGS, max_tokens=1, temperature=1.0, top_p=1.0, extra_body={"top_k": 0, "min_p": 0})
    first = c.create(seed=0, logprobs=True, top_logprobs=3, **kw).choices[0].logprobs.content[0]
    p = {t.token: math.exp(t.logprob) for t in first.top_logprobs}
    n, hits = 60, {}
    for seed in range(n):
        tok = c.create(seed=seed, logprobs=True, **kw).choices[0].logprobs.content[0].token
        hits[tok] = hits.get(tok, 0) + 1
    for tok, prob in p.items():
        freq = hits.get(tok, 0) / n
        assert abs(freq - prob) < 4 * math.sqrt(prob * (1 - prob) / n) + 0.05, (tok, freq, prob)
