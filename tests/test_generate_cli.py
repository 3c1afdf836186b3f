"""`redlite generate` and piped `redlite chat` on the bundled tiny model (gibberish text, exact ids).

- generate --raw --json: special tokens in the prompt are parsed, greedy is deterministic, the
  JSON object has the prompt ids, generated ids and text, and the text is the ids decoded;
- the chat template mode renders what jinja2 renders from the GGUF's own template;
- sampler flags: a seed reproduces, --stop cuts the text, bad values are usage errors (exit 2);
- chat keeps its context between turns: the second greedy answer equals `generate --raw` on the
  whole conversation rendered by jinja2 (so the reused context holds exactly those tokens).
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("RL_BUILD", REPO / "build"))
BIN = BUILD / "redlite"
MODEL = Path(os.environ.get("RL_CHAT_MODEL", REPO / "models" / "default.gguf"))


@pytest.fixture(scope="module")
def model():
    # `make` builds both (tests/run.sh runs it first): a missing one is a failure, not a skip
    assert BIN.exists(), f"{BIN} not built: run make"
    assert MODEL.exists(), f"{MODEL} does not exist (make copies it from models/redlite-coder-tiny-q8_0.gguf)"
    return str(MODEL)


def rl(*args, stdin=None, check=True):
    r = subprocess.run([str(BIN), *args], input=stdin, capture_output=True, cwd=REPO)
    if check and r.returncode != 0:
        pytest.fail(f"redlite {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r


def gen_json(model, *args, stdin=None):
    r = rl("generate", "-m", model, "--json", *args, stdin=stdin)
    return json.loads(r.stdout)


_TEMPLATES = {}


def gguf_template(path):
    if path not in _TEMPLATES:
        _TEMPLATES[path] = read_template(path)
    return _TEMPLATES[path]


def read_template(path):
    tool = BUILD / "tools" / "rl_chat_render"
    assert tool.exists(), f"{tool} not built: run make"
    r = subprocess.run([str(tool), "--gguf-template", path], capture_output=True)
    if r.returncode == 3:
        pytest.skip("the model has no chat template")
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


def jinja(template, messages, add_generation_prompt=True):
    from test_chat_template import hf_env  # the same HF environment as the rendering tests

    return hf_env().from_string(template).render(messages=messages, tools=None,
                                                 add_generation_prompt=add_generation_prompt)


def special_id(model, text):
    """The id of an added token in this model's vocabulary (the default model has a cut vocabulary,
    so <|im_end|> is not Qwen's 151645 there)."""
    ids = json.loads(rl("tokenize", "-m", model, "--json", "--text", text).stdout)["ids"]
    assert len(ids) == 1, f"{text} is not one token: {ids}"
    return ids[0]


def test_generate_raw_json(model):
    out = gen_json(model, "--raw", "-p", "Hello<|im_end|>\n<|im_start|>assistant", "-n", "10")
    im_end, im_start = special_id(model, "<|im_end|>"), special_id(model, "<|im_start|>")
    assert im_end in out["prompt_ids"] and im_start in out["prompt_ids"]  # parsed as special tokens
    assert out["prompt_ids"].index(im_end) < out["prompt_ids"].index(im_start)
    assert out["n_prompt"] == len(out["prompt_ids"]) and out["n_generated"] == len(out["generated_ids"])
    assert out["stop_reason"] in ("length", "eog")
    again = gen_json(model, "--raw", "-p", "Hello<|im_end|>\n<|im_start|>assistant", "-n", "10", "--temp", "0")
    assert again["generated_ids"] == out["generated_ids"] and again["text"] == out["text"]  # greedy default
    plain = rl("generate", "-m", model, "--raw", "-p", "Hello<|im_end|>\n<|im_start|>assistant", "-n", "10")
    assert plain.stdout.decode() == out["text"] + "\n"


def test_generate_chat_template(model):
    tmpl = gguf_template(model)
    out = gen_json(model, "-p", "What is 2+2?", "--system", "Be brief.", "-n", "1")
    want = jinja(tmpl, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}])
    raw = gen_json(model, "--raw", "-p", want, "-n", "1")
    assert out["prompt_ids"] == raw["prompt_ids"]


def test_sampling_flags(model):
    args = ["--raw", "-p", "Once upon a time", "-n", "24", "--temp", "1.0", "--top-k", "50", "--top-p", "0.9",
            "--min-p", "0.01", "--repeat-penalty", "1.1", "--presence-penalty", "0.2", "--frequency-penalty", "0.1"]
    a = gen_json(model, *args, "--seed", "123")
    b = gen_json(model, *args, "--seed", "123")
    c = gen_json(model, *args, "--seed", "124")
    assert a["seed"] == 123 and a["generated_ids"] == b["generated_ids"]
    assert a["generated_ids"] != c["generated_ids"]
    # --stop: cut before the stop string (a piece of the greedy text whose first occurrence is at
    # or after its middle, so there is text to keep and the cut point is known)
    g = gen_json(model, "--raw", "-p", "Once upon a time", "-n", "24")
    text = g["text"]
    at = next((i for i in range(len(text) // 2, len(text) - 2)
               if text[i:i + 3].strip() and text.find(text[i:i + 3]) == i), None)
    assert at is not None, f"no usable stop string in the greedy text {text!r}"
    stop = text[at:at + 3]
    s = gen_json(model, "--raw", "-p", "Once upon a time", "-n", "24", "--stop", stop)
    assert s["stop_reason"] == "stop" and s["text"] == text[:at], (stop, s["text"])


@pytest.mark.parametrize("args", [["--temp", "x"], ["--top-k", "-3"], ["--min-p", "2"], ["--seed", "-1"],
                                  ["--stop"], ["--bogus"]])
def test_usage_errors(model, args):
    r = rl("generate", "-m", model, "-p", "x", *args, check=False)
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith("redlite generate: ")


def test_missing_model():
    assert BIN.exists(), f"{BIN} not built: run make"
    for cmd in ("generate", "chat"):
        r = rl(cmd, "-m", "/nonexistent.gguf", "-p", "x", check=False)
        assert r.returncode == 1
        lines = r.stderr.decode().strip().splitlines()
        assert lines[-1].startswith(f"redlite {cmd}: ") and "nonexistent" in lines[-1]


def test_chat_context_reuse_is_exact(model, tmp_path):
    tmpl = gguf_template(model)
    hist = tmp_path / "hist.txt"
    turns = ["Hello there", "And a second question?", "Third"]
    r = rl("chat", "-m", model, "-n", "12", "--temp", "0", "--history", str(hist), "--system", "Be kind.",
           stdin=("\n".join(turns) + "\n").encode())
    assert r.stderr.decode().count("[prompt ") == 3
    lines = hist.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6
    unesc = lambda s: s.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\")  # noqa: E731
    answers = [unesc(x[len("assistant: "):]) for x in lines[1::2]]
    msgs = [{"role": "system", "content": "Be kind."}]
    for k in range(3):
        msgs.append({"role": "user", "content": turns[k]})
        prompt = jinja(tmpl, msgs)
        (tmp_path / "p.txt").write_text(prompt)
        # raw bytes, decoded like the chat decodes (U+FFFD per maximal ill-formed subpart)
        g = rl("generate", "-m", model, "--raw", "-f", str(tmp_path / "p.txt"), "-n", "12").stdout
        assert g.decode(errors="replace")[:-1] == answers[k], f"turn {k}"
        msgs.append({"role": "assistant", "content": answers[k]})
    # --history reloads the turns: the next answer continues the same conversation
    r2 = rl("chat", "-m", model, "-n", "12", "--temp", "0", "--history", str(hist), "--system", "Be kind.",
            "-p", "Fourth")
    msgs.append({"role": "user", "content": "Fourth"})
    (tmp_path / "p.txt").write_text(jinja(tmpl, msgs))
    g = rl("generate", "-m", model, "--raw", "-f", str(tmp_path / "p.txt"), "-n", "12").stdout
    assert r2.stdout.decode() == g.decode(errors="replace")


def test_default_model_writes_code(model):
    """The bundled default is the trained coder (tools/train/README.md), not a random model: its greedy
    completion of a Python def is indented Python, and a coding request in chat gets a code answer."""
    if Path(model).resolve() != (REPO / "models" / "default.gguf").resolve():
        pytest.skip("RL_CHAT_MODEL points to another model")
    out = gen_json(model, "--raw", "-p", "def quicksort(arr):\n", "-n", "48")
    lines = out["text"].split("\n")
    assert sum(l.startswith("    ") for l in lines) >= 3, out["text"]
    assert any(k in out["text"] for k in ("return", "if ", "for ", "\"\"\"")), out["text"]
    chat = gen_json(model, "-p", "Write a Python function that reverses a string.", "-n", "-1")
    assert chat["stop_reason"] == "eog" and "def " in chat["text"], chat["text"]
