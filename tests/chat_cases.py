"""The conversations the chat rendering tests run (tests/test_chat_template.py) and that
tools/make_chat_oracle.py renders with transformers' apply_chat_template: plain data and generators,
no pytest, so that the oracle tool can import them where pytest is not installed."""

import random

# name -> (template fixture in tests/fixtures/templates/, family and think flag chat.c detects)
TEMPLATES = {
    "hybrid": ("Qwen3-hybrid.jinja", "hermes", 1),
    "nothink": ("Qwen3-Instruct-nothink.jinja", "hermes", 0),
    "coder": ("Qwen3-Coder.jinja", "coder", 0),
    "qwen35": ("Qwen3.5.jinja", "qwen35", 1),
}


# ---- conversations ---------------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "  Get the current weather for a city.\n",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_files",
        "description": "Search files.\u3000Returns matches\u00a0",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "regex ‘quoted’ \"x\""},
                "paths": {"type": "array", "items": {"type": "string"}, "description": "where"},
                "options": {
                    "type": "object",
                    "properties": {"case": {"type": "boolean"}, "max": {"type": "number"}},
                    "additionalProperties": False,
                },
                "limit": {"type": ["integer", "null"], "description": "max hits"},
                "ratio": {"type": "number", "default": 0.5, "exclusiveMinimum": 0},
                "big": {"type": "integer", "default": 123456789012345678901234567890},
                "tiny": {"type": "number", "default": 1e-07, "multipleOf": 1e16},
            },
            "required": ["query", "paths"],
        },
        "strict": True,
    },
}
BARE = {"name": "ping", "description": "no wrapper, no parameters"}
ODD = {
    "type": "function",
    "function": {
        "name": "odd",
        "parameters": {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                                                         "y": {"description": "no type", "examples": ["a", 1, None, True]}}},
        "x-extra": {"nested": [1, 2.5, "é"]},
        "x-none": None,
    },
}


def call(name, args):
    return {"id": "call_" + name, "type": "function", "function": {"name": name, "arguments": args}}


def base_cases():
    sysm = {"role": "system", "content": "You are a helpful assistant."}
    u = lambda s: {"role": "user", "content": s}  # noqa: E731
    a = lambda s, calls=None: {"role": "assistant", "content": s, **({"tool_calls": calls} if calls else {})}  # noqa: E731
    t = lambda s: {"role": "tool", "content": s, "tool_call_id": "x"}  # noqa: E731
    cases = []

    def add(msgs, tools=None, gp=True, **kw):
        c = {"messages": msgs, "add_generation_prompt": gp, **kw}
        if tools is not None:
            c["tools"] = tools
        cases.append(c)

    add([u("Hello")])
    add([u("Hello")], gp=False)
    add([sysm, u("Hello")])
    add([sysm, u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")])
    add([sysm, u("Hi"), a("Hello!"), u("x"), a("y")], gp=False)
    add([u("")])
    add([sysm, u(""), a(""), u("")])
    add([{"role": "system", "content": ""}, u("a")])
    add([u("Ünïcödé ✓ 日本語 🎉 \u2028 line\u0085sep"), a("Réponse — «ok»"), u("e\u0301 combining")])
    add([u("a"), {"role": "system", "content": "mid-conversation system"}, u("b")])
    add([u("multi\nline\n\ncontent\n"), a("\n\nleading newlines\n"), u("  spaces  ")])
    add([u("Weather in Paris?")], tools=[WEATHER])
    add([sysm, u("Weather in Paris?")], tools=[WEATHER])
    add([sysm, u("find foo")], tools=[WEATHER, SEARCH, BARE, ODD])
    add([u("hi")], tools=[])
    add([u("Weather?"), a("", [call("get_weather", {"city": "Paris"})]),
         t('{"temp": 21}'), a("It is 21 °C.")], tools=[WEATHER], gp=False)
    add([u("Weather?"), a("Let me check.", [call("get_weather", {"city": "Paris", "unit": "celsius", "days": 3})]),
         t("sunny")], tools=[WEATHER])
    add([sysm, u("two calls"),
         a("", [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Tōkyō"})]),
         t("r1"), t("r2"), u("thanks")], tools=[WEATHER])
    add([u("nested"), a("Searching…", [call("search_files", {
        "query": "a\"b\\c\n\t\u0001", "paths": ["src/", "tests/é"],
        "options": {"case": True, "max": 1.0, "deep": {"x": [1, 2.5, -3e-9, 1e16, 12345678901234567890]}},
        "limit": None, "ratio": 0.1, "flag": False})]), t("[]")], tools=[SEARCH])
    add([u("empty args"), a(None, [call("ping", {})]), t("pong")], tools=[BARE])
    add([u("q"), a("   ", [call("ping", {})]), t("pong"), a("done")], tools=[BARE], gp=False)
    add([u("q"), a("text", [call("odd", {"x": "1", "y": [1, {"k": "v"}]})]), t("")], tools=[ODD])
    add([t("orphan tool message first"), u("then user")])
    add([u("q"), t("r1"), t("r2"), t("r3")], gp=False)
    add([u("<tool_response>\nfake\n</tool_response>"), a("ok")], gp=False)
    add([u("x"), a("y"), u("<tool_response>r</tool_response>"), a("z")], gp=False)
    add([u("x"), a("call", [call("ping", {"a": 1})]), u("<tool_response>r</tool_response>"), a("after")], gp=False)
    return cases


def think_cases():
    u = lambda s: {"role": "user", "content": s}  # noqa: E731
    cases = []
    for gp in (True, False):
        cases.append({"messages": [u("q"), {"role": "assistant", "content": "<think>\nreason\n</think>\n\nanswer"}],
                      "add_generation_prompt": gp})
        cases.append({"messages": [u("q"), {"role": "assistant", "content": "<think>r1</think>a1"}, u("q2"),
                                   {"role": "assistant", "content": "x</think>\n\ny</think>z"}], "add_generation_prompt": gp})
        cases.append({"messages": [u("q"), {"role": "assistant", "content": "ans", "reasoning_content": "\nR\n"}],
                      "add_generation_prompt": gp})
        cases.append({"messages": [u("q"), {"role": "assistant", "content": "ans", "reasoning_content": ""}],
                      "add_generation_prompt": gp})
        cases.append({"messages": [u("q"), {"role": "assistant", "content": "a", "tool_calls": [call("ping", {})]},
                                   {"role": "tool", "content": "r"},
                                   {"role": "assistant", "content": "<think>\nafter tool\n</think>\n\nfinal"}],
                      "tools": [BARE], "add_generation_prompt": gp})
    for et in (True, False):
        cases.append({"messages": [u("q")], "add_generation_prompt": True, "enable_thinking": et})
    return cases


STRINGS = ["", "hi", "a\nb", " lead", "trail ", "\n", "é🎉", "<b>x</b>", "tab\there", "quote ' \" \\", "日本",
           "</think>", "<think>x</think>y", "\u00a0nbsp\u00a0", "1.0", "true"]
VALUES = [0, 1, -1, 2.5, 1e-05, 1e16, 1.0, 123456789012345678901, True, False, None, "s", "", "多", [1, "a"],
          {"k": [True, None]}, {"a": {"b": {"c": 0.1}}}, [], {}]


def random_cases(seed, n, think, need_user=False):
    """need_user: every conversation gets a user query (the Qwen3.5 template refuses one without)."""
    rng = random.Random(seed)
    tools_pool = [WEATHER, SEARCH, BARE, ODD]
    cases = []
    for _ in range(n):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(STRINGS)})
        for _ in range(rng.randint(1, 7)):
            r = rng.random()
            if r < 0.35:
                msgs.append({"role": "user", "content": rng.choice(STRINGS)})
            elif r < 0.7:
                m = {"role": "assistant", "content": rng.choice(STRINGS)}
                if rng.random() < 0.5:
                    m["tool_calls"] = [call(rng.choice(["get_weather", "search_files", "ping"]),
                                            {rng.choice(["a", "city", "query", "x y", "é"]): rng.choice(VALUES)
                                             for _ in range(rng.randint(0, 3))})
                                       for _ in range(rng.randint(1, 3))]
                if think and rng.random() < 0.2:
                    m["reasoning_content"] = rng.choice(STRINGS)
                msgs.append(m)
            else:
                msgs.append({"role": "tool", "content": rng.choice(STRINGS)})
        if msgs[0]["role"] == "system" and len(msgs) == 1:
            msgs.append({"role": "user", "content": "x"})
        if need_user and not any(m["role"] == "user" for m in msgs):
            msgs.insert(rng.randint(1 if msgs[0]["role"] == "system" else 0, len(msgs)),
                        {"role": "user", "content": "query"})
        c = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6}
        if rng.random() < 0.5:
            c["tools"] = rng.sample(tools_pool, rng.randint(0, 3))
        if think and rng.random() < 0.2:
            c["enable_thinking"] = rng.random() < 0.5
        cases.append(c)
    return cases


def qwen35_cases():
    """What the Qwen3.5 template does beyond the others: content as a list of text parts (its
    render_content macro joins them, in every role), a reasoning_content that is not a string (the
    content's own <think> block is used), whitespace-only reasoning, a tool turn first (no
    '<|im_start|>user' before it), user turns that are a bare <tool_response> block before the real
    query, and the thinking switch with tools."""
    parts = lambda *ts: [{"type": "text", "text": t} for t in ts]  # noqa: E731
    u = lambda s: {"role": "user", "content": s}  # noqa: E731
    cases = []

    def add(msgs, tools=None, gp=True, **kw):
        c = {"messages": msgs, "add_generation_prompt": gp, **kw}
        if tools is not None:
            c["tools"] = tools
        cases.append(c)

    add([{"role": "system", "content": parts("Be ", "brief.\n")}, u(parts("Hel", "lo ", "é"))])
    add([{"role": "system", "content": parts(" sys ")}, u("q")], tools=[WEATHER])
    add([{"role": "system", "content": []}, u(parts())], tools=[BARE])
    add([u(parts("a", "\n", "b")), {"role": "assistant", "content": parts("<think>r</think>", "ans")},
         u("next"), {"role": "assistant", "content": parts("x", "y"), "tool_calls": [call("ping", {})]},
         {"role": "tool", "content": parts("res", "ult")}], tools=[BARE])
    add([u("q"), {"role": "assistant", "content": "<think>\nfrom content\n</think>\n\nA", "reasoning_content": None}])
    add([u("q"), {"role": "assistant", "content": "A", "reasoning_content": "  \n\t "}], gp=False)
    add([u("q"), {"role": "assistant", "content": "<think>x</think>A", "reasoning_content": "wins"}], gp=False)
    add([{"role": "tool", "content": "first"}, {"role": "tool", "content": "second"}, u("q")])
    add([u("real query"), u("<tool_response>\nr\n</tool_response>"),
         {"role": "assistant", "content": "after", "reasoning_content": "R"}], gp=False)
    add([u("q"), {"role": "assistant", "content": "", "reasoning_content": "plan",
                  "tool_calls": [call("get_weather", {"city": "Paris", "days": 3}), call("ping", {})]},
         {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "pong"}],
        tools=[WEATHER, BARE], enable_thinking=False)
    add([u("q")], tools=[WEATHER], enable_thinking=True)
    add([u("q")], tools=[WEATHER], enable_thinking=False)
    return cases


def all_cases(name):
    cases = base_cases()
    if name in ("hybrid", "qwen35"):
        cases += think_cases()
    if name == "qwen35":
        cases += qwen35_cases()
    think = name in ("hybrid", "qwen35")
    cases += random_cases({"hybrid": 1, "nothink": 2, "coder": 3, "qwen35": 4}[name], 150, think, name == "qwen35")
    return cases
