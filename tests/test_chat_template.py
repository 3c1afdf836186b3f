"""Chat rendering (src/text/chat.c) against jinja2 in Hugging Face's apply_chat_template environment.

Every conversation is rendered by jinja2 from the template fixtures (tests/fixtures/templates/)
and by our C renderer (through build/tools/rl_chat_render), and the bytes must be identical.
The jinja2 environment mirrors transformers' `_compile_jinja_template`: ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loopcontrols extension, `tojson` overridden by
json.dumps(ensure_ascii=False), and `raise_exception` as a global.

Also checks the tool-call parser on the assistant turns those templates render (a call rendered
by the template must parse back to the same name and arguments), plus slips and streaming.
"""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("RL_BUILD", REPO / "build"))
TOOL = BUILD / "tools" / "rl_chat_render"
TPL = REPO / "tests" / "fixtures" / "templates"
SHARED_CONFIG = Path("/work/shared/data/qwen3-tokenizer/tokenizer_config.json")

from chat_cases import BARE, ODD, SEARCH, TEMPLATES, WEATHER, all_cases, call  # noqa: E402


def hf_env():
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def jinja_render(template_text, case):
    kw = {
        "messages": case["messages"],
        "tools": case.get("tools"),
        "add_generation_prompt": case.get("add_generation_prompt", False),
    }
    if "enable_thinking" in case:
        kw["enable_thinking"] = case["enable_thinking"]
    return compiled(template_text).render(**kw)


_COMPILED = {}


def compiled(template_text):
    if template_text not in _COMPILED:
        _COMPILED[template_text] = hf_env().from_string(template_text)
    return _COMPILED[template_text]


def c_render(template_path, cases):
    lines = "".join(json.dumps(c, ensure_ascii=(i % 2 == 0)) + "\n" for i, c in enumerate(cases))
    r = subprocess.run([str(TOOL), str(template_path)], input=lines.encode(), capture_output=True, check=True)
    out = r.stdout
    head, _, out = out.partition(b"\n")
    res = []
    for _ in cases:
        line, _, out = out.partition(b"\n")
        if line.startswith(b"ERR"):
            res.append(line.decode(errors="replace"))
            continue
        n = int(line)
        res.append(out[:n].decode())
        out = out[n + 1:]
    return head.decode(), res




@pytest.fixture(scope="module")
def tool():
    assert TOOL.exists(), f"{TOOL} not built (run make)"  # make test builds it first
    return TOOL


def test_hybrid_fixture_is_the_qwen3_template():
    """The fixture is Qwen3's own template: equal to the one the committed vocabulary GGUF carries
    (tools/make_vocab_gguf.py copied it from the same tokenizer_config.json), and to that file
    itself where it is present (CI's shared data), so the check needs nothing outside the repo."""
    from test_tokenizer import VOCAB, read_gguf_kv

    fixture = (TPL / "Qwen3-hybrid.jinja").read_text()
    assert fixture == read_gguf_kv(VOCAB)["tokenizer.chat_template"]
    if SHARED_CONFIG.exists():  # an extra check where the original exists, not the only one
        assert fixture == json.loads(SHARED_CONFIG.read_text())["chat_template"]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_render_matches_jinja(tool, name):
    fname, family, think = TEMPLATES[name]
    text = (TPL / fname).read_text()
    cases = all_cases(name)
    expected, skipped = [], 0
    for c in cases:
        try:
            expected.append(jinja_render(text, c))
        except Exception:  # the template itself fails on this input (e.g. None content)
            expected.append(None)
            skipped += 1
    head, got = c_render(TPL / fname, cases)
    assert head == f"family={family} think={think} known=1"
    bad = []
    for i, (e, g) in enumerate(zip(expected, got)):
        if e is not None and e != g:
            bad.append((i, cases[i], e, g))
    same = len(cases) - skipped - len(bad)
    print(f"{name}: {same}/{len(cases) - skipped} conversations byte-identical ({skipped} rejected by jinja2)")
    if bad:
        i, c, e, g = bad[0]
        pytest.fail(f"{len(bad)} mismatches; first #{i}: {json.dumps(c, ensure_ascii=False)}\n"
                    f"--- jinja2:\n{e!r}\n--- ours:\n{g!r}")
    assert skipped <= len(cases) // 10


def test_detection_of_other_templates(tool, tmp_path):
    p = tmp_path / "llama.jinja"
    p.write_text("{% for m in messages %}<|start_header_id|>{{ m.role }}{% endfor %}")
    head, got = c_render(p, [{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}])
    assert head == "family=chatml think=0 known=0"
    assert got == ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]
    plain = tmp_path / "chatml.jinja"
    plain.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    head, _ = c_render(plain, [])
    assert head == "family=chatml think=0 known=0"


# ---- tool-call parsing ------------------------------------------------------------------

def c_parse(tools, texts, tmp_path):
    tp = tmp_path / "tools.json"
    tp.write_text(json.dumps(tools))
    inp = "".join(json.dumps(t) + "\n" for t in texts)
    r = subprocess.run([str(TOOL), "--parse", str(tp)], input=inp.encode(), capture_output=True, check=True)
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def assistant_part(rendered):
    """The generated part of the last assistant turn (after '<|im_start|>assistant', up to <|im_end|>)."""
    s = rendered[rendered.rindex("<|im_start|>assistant") + len("<|im_start|>assistant"):]
    s = s[:s.index("<|im_end|>")]
    s = s[1:] if s.startswith("\n") else s
    if s.startswith("<think>"):  # the hybrid template's empty think block of the last turn
        s = s[s.index("</think>") + len("</think>\n\n"):]
    return s


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_rendered_calls_parse_back(tool, name, tmp_path):
    """A call rendered by the template parses back to the same call (XML values typed by schema)."""
    text = (TPL / TEMPLATES[name][0]).read_text()
    tools = [WEATHER, SEARCH, BARE, ODD]
    calls = [
        ("get_weather", {"city": "Paris", "unit": "celsius", "days": 3}),
        ("search_files", {"query": "a\"b\\c\n\ttab", "paths": ["src/", "é"], "options": {"case": True, "max": 1.5},
                          "limit": None, "ratio": 0.25}),
        ("search_files", {"query": "x", "paths": [], "limit": 7}),
        ("ping", {}),
        ("odd", {"x": "text", "y": "free text\nwith lines"}),
    ]
    texts, want = [], []
    for k in range(len(calls)):
        chosen = calls[k:] + calls[:k]
        chosen = chosen[: 1 + k % 3]
        prefix = ["", "I'll look that up.", "Sure:\n"][k % 3]
        msgs = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": prefix, "tool_calls": [call(n, a) for n, a in chosen]}]
        rendered = jinja_render(text, {"messages": msgs, "tools": tools})
        texts.append(assistant_part(rendered))
        want.append((prefix.strip(), [(n, a) for n, a in chosen]))
    got = c_parse(tools, texts, tmp_path)
    for t, (prefix, calls_want), g in zip(texts, want, got):
        assert g["failed"] == 0, t
        assert g["text"] == prefix, t
        assert [(c["name"], json.loads(c["arguments"])) for c in g["calls"]] == calls_want, t
        for c, (_, a) in zip(g["calls"], calls_want):  # json.dumps form, so re-rendering matches
            assert c["arguments"] == json.dumps(a, ensure_ascii=False)


def test_slips_and_plain_text(tool, tmp_path):
    tools = [WEATHER, SEARCH]
    cases = [
        # (generated text, expected text, expected calls, expected failed)
        ("Just text, no calls.\n", "Just text, no calls.\n", [], 0),
        ("a < b and <tool but not a tag", "a < b and <tool but not a tag", [], 0),
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>", "",
         [("get_weather", {"city": "Paris"})], 0),
        ("<tool_call>\n<function=get_weather>\n<city>\nParis\n</city>\n<days>\n4\n</parameter>\n</function>\n</tool_call>",
         "", [("get_weather", {"city": "Paris", "days": 4})], 0),
        ("<tool_call>\n<function=get_weather>\n<city>\nParis\n<days>\n4\n</function>", "",
         [("get_weather", {"city": "Paris", "days": 4})], 0),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"]}\n</tool_call>', "",
         [("get_weather", {"city": "Paris"})], 0),
        ('<tool_call>\n{"name": "search_files", "arguments": {"query": "x", "paths": ["a", "b"}}\n</tool_call>', "",
         [("search_files", {"query": "x", "paths": ["a", "b"]})], 0),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}}\n</tool_call>', "",
         [("get_weather", {"city": "Oslo"})], 0),
        ('<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}\n</tool_call>', "",
         [("get_weather", {"city": "Rome"})], 0),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}\n</tool_call>', "",
         [("get_weather", {"city": "Lima"})], 0),
        ('Text first.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bergen"}}\n</tool_call>\nTrailing words.',
         "Text first.\nTrailing words.", [("get_weather", {"city": "Bergen"})], 0),
        ("<tool_call>\nnot a call at all\n</tool_call>", "<tool_call>\nnot a call at all\n</tool_call>", [], 1),
        ("<tool_call>\n{\"oops\": 1}\n</tool_call> after", "<tool_call>\n{\"oops\": 1}\n</tool_call> after", [], 1),
        ("unterminated <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"", "unterminated",
         [("get_weather", {"city": "Oslo"})], 0),
        # calls that do not fit the declared tools are text: an undeclared tool, a required
        # argument missing, an argument of the wrong type (issue 45)
        ('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>',
         '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', [], 1),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"days": 2}}\n</tool_call>',
         '<tool_call>\n{"name": "get_weather", "arguments": {"days": 2}}\n</tool_call>', [], 1),
        ("<tool_call>\n<function=search_files>\n<parameter=query>\nfoo\n</parameter>\n<parameter=paths>\nnot json\n"
         "</parameter>\n</function>\n</tool_call>", "<tool_call>\n<function=search_files>\n<parameter=query>\nfoo\n"
         "</parameter>\n<parameter=paths>\nnot json\n</parameter>\n</function>\n</tool_call>", [], 1),
        ("<function=get_weather>\n<parameter=city>\nBern\n</parameter>\n</function>", "",
         [("get_weather", {"city": "Bern"})], 0),
        ("<tool_call>\n<function=search_files>\n<parameter=query>\nfoo\n</parameter>\n<parameter=options>\n"
         "{\"case\": false, \"max\": 2}\n</parameter>\n<parameter=limit>\nnull\n</parameter>\n<parameter=paths>\n"
         "[\"a\"]\n</parameter>\n</function>\n</tool_call>", "",
         [("search_files", {"query": "foo", "options": {"case": False, "max": 2}, "limit": None, "paths": ["a"]})], 0),
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\n<b>Paris</b>\n</parameter>\n</function>\n</tool_call>"
         "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
         "</function>\n</tool_call>\n", "",
         [("get_weather", {"city": "<b>Paris</b>"}), ("get_weather", {"city": "Rome", "days": 2})], 0),
    ]
    got = c_parse(tools, [c[0] for c in cases], tmp_path)
    for (src, text, calls, failed), g in zip(cases, got):
        assert g["text"] == text, src
        assert [(c["name"], json.loads(c["arguments"])) for c in g["calls"]] == calls, src
        assert g["failed"] == failed, src


def test_parser_never_loses_text(tool, tmp_path):
    """Random text made of tag fragments (but unable to form a call: no '=' and no '"') comes out
    byte for byte, whatever the chunking."""
    rng = random.Random(99)
    pieces = ["<", ">", "/", "tool_call", "<tool_call>", "</tool_call>", "<function", "</function>", "<parameter",
              "{", "}", "[", "]", "\n", " ", "  \n", "text", "é", "🎉", "<b>", "name", ":", ","]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(400)]
    got = c_parse([WEATHER], texts, tmp_path)
    for t, g in zip(texts, got):
        assert g["calls"] == [] and g["text"] == t, t


# ---- transformers' own apply_chat_template ------------------------------------------------------

HF_ORACLE = TPL / "hf_apply_chat_template.json.gz"


@pytest.fixture(scope="module")
def hf_oracle():
    import gzip

    with gzip.open(HF_ORACLE, "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_render_matches_transformers(tool, hf_oracle, name):
    """Red Lite's rendering against transformers' apply_chat_template itself, recorded by
    tools/make_chat_oracle.py (transformers 5.25, which drops None-valued message keys and aliases
    reasoning fields before rendering: the mirror above does neither) on the same conversations:
    every one the template accepts is byte-identical, and so is the jinja2 mirror's rendering."""
    fname, _, _ = TEMPLATES[name]
    rec = hf_oracle["templates"][name]
    text = (TPL / fname).read_text()
    import hashlib

    assert rec["sha256"] == hashlib.sha256(text.encode()).hexdigest(), "template changed: rerun the tool"
    cases = all_cases(name)
    # (the same conversations, key order included: the renderers keep it)
    assert json.dumps(rec["cases"]) == json.dumps(cases), "cases changed: rerun tools/make_chat_oracle.py"
    _, got = c_render(TPL / fname, cases)
    bad, mirror_bad, n = [], [], 0
    for i, (c, want, g) in enumerate(zip(cases, rec["rendered"], got)):
        if want is None:
            continue
        n += 1
        if g != want:
            bad.append(i)
        if jinja_render(text, c) != want:
            mirror_bad.append(i)
    print(f"{name}: {n - len(bad)}/{n} conversations byte-identical with transformers "
          f"{hf_oracle['versions']['transformers']} ({len(cases) - n} refused by the template)")
    if bad:
        i = bad[0]
        pytest.fail(f"{len(bad)} mismatches; first #{i}: {json.dumps(cases[i], ensure_ascii=False)}\n"
                    f"--- transformers:\n{rec['rendered'][i]!r}\n--- ours:\n{got[i]!r}")
    assert not mirror_bad, f"the jinja2 mirror differs from transformers on {mirror_bad[:10]}"
    assert n >= len(cases) - len(cases) // 10


@pytest.mark.parametrize("name", ["coder", "qwen35"])
def test_string_arguments_render_as_objects(tool, hf_oracle, name):
    """OpenAI clients send a call's arguments as a JSON string; the XML templates iterate over them
    as a mapping (`arguments|items`: transformers refuses a string). Red Lite parses the string, so
    a conversation with string arguments renders as transformers renders the object form."""
    fname, _, _ = TEMPLATES[name]
    rec = hf_oracle["templates"][name]
    picked, want = [], []
    for c, r in zip(all_cases(name), rec["rendered"]):
        if r is None or not any(m.get("tool_calls") for m in c["messages"]):
            continue
        c = json.loads(json.dumps(c))
        for m in c["messages"]:
            for tc in m.get("tool_calls") or []:
                tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"], ensure_ascii=False)
        picked.append(c)
        want.append(r)
    assert len(picked) > 40
    _, got = c_render(TPL / fname, picked)
    bad = [i for i, (w, g) in enumerate(zip(want, got)) if w != g]
    assert not bad, f"{len(bad)}/{len(picked)} differ; first: {json.dumps(picked[bad[0]])[:300]}\n" \
                    f"--- transformers (object arguments):\n{want[bad[0]]!r}\n--- ours:\n{got[bad[0]]!r}"
