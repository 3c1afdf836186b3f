#!/usr/bin/env python3
"""Records transformers' own apply_chat_template renderings of the chat test conversations.

Every conversation of tests/chat_cases.py (the cases tests/test_chat_template.py runs: system
prompts, multi-turn, tools, tool calls, tool results, thinking on/off, reasoning content, 150 random
ones per template) is rendered by `PreTrainedTokenizerFast.apply_chat_template(..., tokenize=False)`
with each template fixture of tests/fixtures/templates/ passed as `chat_template`; the results go to
tests/fixtures/templates/hf_apply_chat_template.json.gz, which the test compares with Red Lite's
renderer byte for byte. A conversation the template refuses (raise_exception, or an error inside it)
is recorded as null with the error text.

Rendering with tokenize=False reads nothing of the tokenizer but its chat-template machinery, so
the tokenizer object only has to exist: the Qwen3 tokenizer.json when --tokenizer-dir has one (the
Qwen3.5 tokenizer files are not available offline), else an empty BPE model.

Needs transformers (>= 5) and jinja2; pytest is not needed. Run on a developer machine:

    python tools/make_chat_oracle.py                # writes the fixture
    python tools/make_chat_oracle.py --check        # renders again and compares with the fixture
"""

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from chat_cases import TEMPLATES, all_cases  # noqa: E402

TPL = REPO / "tests" / "fixtures" / "templates"
OUT = TPL / "hf_apply_chat_template.json.gz"


def make_tokenizer(tokenizer_dir):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    f = tokenizer_dir / "tokenizer.json" if tokenizer_dir else None
    tok = Tokenizer.from_file(str(f)) if f and f.is_file() else Tokenizer(models.BPE())
    return PreTrainedTokenizerFast(tokenizer_object=tok), (str(f) if f and f.is_file() else "empty BPE")


def render(tok, template_text, case):
    kw = {}
    if "enable_thinking" in case:
        kw["enable_thinking"] = case["enable_thinking"]
    try:
        out = tok.apply_chat_template(case["messages"], tools=case.get("tools"), chat_template=template_text,
                                      tokenize=False, add_generation_prompt=case.get("add_generation_prompt", False),
                                      **kw)
        return out, None
    except Exception as e:  # the template's own refusal (or a failure inside it)
        return None, f"{type(e).__name__}: {e}"


def record(tokenizer_dir):
    import jinja2
    import transformers

    tok, tok_src = make_tokenizer(tokenizer_dir)
    res = {"what": "transformers PreTrainedTokenizerFast.apply_chat_template(messages, tools=, chat_template=, "
                   "tokenize=False, add_generation_prompt=[, enable_thinking=]) of tests/chat_cases.py",
           "generator": "tools/make_chat_oracle.py",
           "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                        "python": sys.version.split()[0]},
           "tokenizer": Path(tok_src).name if tok_src != "empty BPE" else tok_src,
           "templates": {}}
    for name, (fname, _, _) in sorted(TEMPLATES.items()):
        text = (TPL / fname).read_text()
        cases = all_cases(name)
        rendered, errors = [], []
        for c in cases:
            r, e = render(tok, text, c)
            rendered.append(r)
            errors.append(e)
        res["templates"][name] = {"file": fname, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                                  "cases": cases, "rendered": rendered, "errors": errors}
        n_err = sum(e is not None for e in errors)
        print(f"{name}: {len(cases)} conversations, {n_err} refused by the template")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer-dir", type=Path, default=Path("/work/shared/data/qwen3-tokenizer"),
                    help="folder with a tokenizer.json (optional; default: %(default)s)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with the existing file instead of writing it")
    a = ap.parse_args(argv)
    res = record(a.tokenizer_dir)
    if a.check:
        with gzip.open(a.out, "rt", encoding="utf-8") as f:
            old = json.load(f)
        bad = [n for n in res["templates"] if res["templates"][n] != old["templates"].get(n)]
        print("identical" if not bad else f"differs: {bad}")
        return 1 if bad else 0
    data = json.dumps(res, ensure_ascii=False, indent=0).encode()
    with open(a.out, "wb") as f:  # mtime 0: the same renderings give the same bytes
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as g:
            g.write(data)
    print(f"wrote {a.out} ({a.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
