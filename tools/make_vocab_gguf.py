#!/usr/bin/env python3
"""Write a vocab-only GGUF (no tensors) for the Qwen3 tokenizer: tests/fixtures/qwen3-vocab.gguf.

Source: the HF tokenizer files (tokenizer.json + tokenizer_config.json), by default from
<repo>/../shared/data/qwen3-tokenizer/. Output keys, as a llama.cpp conversion of a Qwen3-Next
checkpoint writes them (spec §B.1):

  general.architecture       "qwen3next"
  tokenizer.ggml.model       "gpt2"
  tokenizer.ggml.pre         "qwen2"
  tokenizer.ggml.tokens      151936 strings: the BPE vocab by id, the added tokens at their ids,
                             and "[PAD<id>]" for every id up to the embedding size
  tokenizer.ggml.token_type  1 normal, 3 control (added token marked special, or shaped like
                             "<|...|>"), 4 user-defined (other added tokens), 5 unused ([PAD<id>])
  tokenizer.ggml.merges      "left right", in rank order
  tokenizer.ggml.eos_token_id 151645, padding/bos 151643, add_bos_token false
  tokenizer.chat_template    from tokenizer_config.json

The output is deterministic (same inputs -> same bytes).

usage: tools/make_vocab_gguf.py [--src DIR] [--out PATH] [--n-vocab N]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def looks_like_control(text):
    """Added tokens written as <|name|> are treated as control tokens even when the HF config
    does not flag them special (e.g. Qwen's <|fim_prefix|>, <|file_sep|>)."""
    return text.startswith("<|") and text.endswith("|>")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "qwen3-vocab.gguf"))
    ap.add_argument("--n-vocab", type=int, default=151936, help="pad the vocab to this many ids")
    args = ap.parse_args()

    try:
        import gguf
    except ImportError:
        sys.exit("make_vocab_gguf: the 'gguf' package is missing (build/venv/bin/pip install gguf)")

    with open(os.path.join(args.src, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(args.src, "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)

    model = tj["model"]
    if model.get("type") != "BPE":
        sys.exit("make_vocab_gguf: tokenizer.json model is not BPE")
    by_id = {}
    for text, i in model["vocab"].items():
        by_id[i] = (text, TOKEN_NORMAL)
    for at in tj["added_tokens"]:
        text = at["content"]
        special = at.get("special", False)
        cfg = tc.get("added_tokens_decoder", {}).get(str(at["id"]))
        if cfg is not None:
            special = special or cfg.get("special", False)
        ttype = TOKEN_CONTROL if (special or looks_like_control(text)) else TOKEN_USER_DEFINED
        by_id[at["id"]] = (text, ttype)

    n = max(args.n_vocab, max(by_id) + 1)
    tokens, types = [], []
    for i in range(n):
        text, ttype = by_id.get(i, ("[PAD%d]" % i, TOKEN_UNUSED))
        tokens.append(text)
        types.append(ttype)

    merges = []
    for m in model["merges"]:
        merges.append(m if isinstance(m, str) else "%s %s" % (m[0], m[1]))

    text_to_id = {t: i for i, t in enumerate(tokens)}

    def token_id(key):
        v = tc.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return text_to_id.get(v) if v else None

    eos = token_id("eos_token")
    pad = token_id("pad_token")
    if eos is None or pad is None:
        sys.exit("make_vocab_gguf: eos_token / pad_token missing from tokenizer_config.json")
    bos = pad  # Qwen has no BOS token; llama.cpp conversions store the pad id (<|endoftext|>)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    w = gguf.GGUFWriter(args.out, "qwen3next")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(eos)
    w.add_pad_token_id(pad)
    w.add_bos_token_id(bos)
    w.add_add_bos_token(bool(tc.get("add_bos_token", False)))
    if tc.get("chat_template"):
        w.add_chat_template(tc["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    n_ctl = types.count(TOKEN_CONTROL)
    n_usr = types.count(TOKEN_USER_DEFINED)
    print("wrote %s: %d tokens (%d control, %d user-defined, %d unused), %d merges, eos %d, pad/bos %d"
          % (args.out, n, n_ctl, n_usr, types.count(TOKEN_UNUSED), len(merges), eos, pad))


if __name__ == "__main__":
    main()
