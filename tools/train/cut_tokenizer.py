#!/usr/bin/env python3
"""Cut the Qwen byte-level BPE tokenizer to a small vocabulary for the trained default model.

Keeps the first N regular tokens (Qwen's BPE ids are in merge/frequency order, and ids 0..255 are the
256 byte symbols, so every byte string stays encodable), only the merges whose two parts and result
are all kept, and every added (ChatML / tool / FIM / think) token of the original, renumbered to
N, N+1, ... in the original order. Normaliser (NFC), the qwen2 pre-tokenizer regex and the byte-level
decoder are copied unchanged. The chat template written into tokenizer_config.json is the Qwen3-Coder
template (XML tool calls), which Red Lite's renderer recognises.

Usage: cut_tokenizer.py --src DIR --out DIR [--n-regular 8166] [--template FILE]
Writes OUT/tokenizer.json and OUT/tokenizer_config.json and prints a one-line JSON summary.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cut(src: Path, out: Path, n: int, template: str) -> dict:
    tj = json.loads((src / "tokenizer.json").read_text())
    tc = json.loads((src / "tokenizer_config.json").read_text())
    model = tj["model"]
    if model["type"] != "BPE":
        raise SystemExit("cut_tokenizer: source is not a BPE tokenizer")
    vocab = model["vocab"]
    if n < 256 or n > len(vocab):
        raise SystemExit(f"cut_tokenizer: --n-regular must be in 256..{len(vocab)}")
    keep = {s: i for s, i in vocab.items() if i < n}
    if len(keep) != n:
        raise SystemExit("cut_tokenizer: source ids are not dense 0..N-1")
    merges = []
    for m in model["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in keep and b in keep and (a + b) in keep:
            merges.append([a, b])
    # every kept multi-symbol token must be producible by some kept merge, else BPE can never emit it
    produced = {a + b for a, b in merges}
    byte_syms = [s for s, i in keep.items() if i < 256]
    unreachable = [s for s in keep if s not in produced and s not in byte_syms]
    model["vocab"] = keep
    model["merges"] = merges
    remap = {}
    added = []
    for k, t in enumerate(sorted(tj["added_tokens"], key=lambda t: t["id"])):
        remap[t["id"]] = n + k
        t = dict(t)
        t["id"] = n + k
        added.append(t)
    tj["added_tokens"] = added
    tc["added_tokens_decoder"] = {str(remap[int(k)]): v for k, v in tc["added_tokens_decoder"].items()}
    tc["chat_template"] = template
    tc["model_max_length"] = 4096
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(tc, ensure_ascii=False, indent=2))
    return {"n_regular": n, "n_added": len(added), "vocab_size": n + len(added), "merges": len(merges),
            "unreachable_tokens": len(unreachable),
            "tokenizer_json_sha256": hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=Path("/work/shared/data/qwen3-tokenizer"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n-regular", type=int, default=8166, help="regular tokens kept (default 8166: "
                    "with the 26 added tokens the vocabulary is exactly 8192)")
    ap.add_argument("--template", type=Path, default=REPO / "tests/fixtures/templates/Qwen3-Coder.jinja")
    a = ap.parse_args()
    if not (a.src / "tokenizer.json").is_file():
        print(f"cut_tokenizer: {a.src}/tokenizer.json not found (pass --src DIR)", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(cut(a.src, a.out, a.n_regular, a.template.read_text())))


if __name__ == "__main__":
    main()
