#!/usr/bin/env python3
"""Cross-check the exported model: Red Lite against transformers on the same weights.

 1. tokenizer: HF `tokenizers` on the cut tokenizer.json vs `redlite tokenize --jsonl` on the GGUF,
    for every string of tests/fixtures/tokenizer_corpus.jsonl plus code/chat strings (ids equal);
 2. trunk: `redlite dump` (CPU reference) on the F32 GGUF vs transformers (fp32, eager) on the HF
    checkpoint: greedy tokens equal, max |dlogit| over prompt + generated positions;
 3. MTP: `redlite dump --mtp` vs tools/make_fixtures.py's `mtp_forward` oracle over the same pairs.
Prints a JSON report; exit 1 if tokens differ or a logit difference exceeds --tol.

Usage: check.py --hf DIR --gguf F32.gguf [--redlite build/redlite] [--n-gen 32] [--tol 1e-3]
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

PROMPTS = [
    "def quicksort(arr):\n",
    "import os\nimport sys\n\n\ndef main():\n    ",
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n",
    "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "class Stack:\n    \"\"\"A simple LIFO stack.\"\"\"\n\n    def __init__(self):\n",
]


def tok_strings():
    out = [json.loads(l)["text"] for l in (REPO / "tests/fixtures/tokenizer_corpus.jsonl").read_text(encoding="utf-8").split("\n") if l.strip()]
    out += PROMPTS
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", type=Path, required=True)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--redlite", type=Path, default=REPO / "build/redlite")
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--max-strings", type=int, default=0)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM
    from safetensors.torch import load_file
    import make_fixtures as mf

    rep = {"ok": True}
    tok = Tokenizer.from_file(str(a.hf / "tokenizer.json"))
    strs = tok_strings()
    if a.max_strings:
        strs = strs[: a.max_strings]
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "s.jsonl"
        p.write_text("".join(json.dumps(s) + "\n" for s in strs))
        r = subprocess.run([str(a.redlite), "tokenize", "-m", str(a.gguf), "--jsonl", str(p)],
                           capture_output=True, text=True)
        if r.returncode:
            raise SystemExit("check: redlite tokenize failed: " + r.stderr[-500:])
        rl = [json.loads(l)["ids"] for l in r.stdout.split("\n") if l.strip()]
    bad = [i for i, s in enumerate(strs) if tok.encode(s, add_special_tokens=False).ids != rl[i]]
    rep["tokenizer"] = {"strings": len(strs), "mismatches": len(bad),
                        "first_mismatch": strs[bad[0]][:80] if bad else None}
    # HF applies NFC before pre-tokenising, llama.cpp/Red Lite do not (spec §E.1 item 6): count only
    # the mismatches that remain on NFC-normalised input as failures
    import unicodedata
    bad_nfc = [i for i in bad if unicodedata.normalize("NFC", strs[i]) == strs[i]]
    rep["tokenizer"]["mismatches_nfc_input"] = len(bad_nfc)
    if bad_nfc:
        rep["ok"] = False

    model = Qwen3NextForCausalLM.from_pretrained(a.hf, dtype=torch.float32, attn_implementation="eager")
    model.set_experts_implementation("eager")
    model.eval()
    cfg = model.config
    sd = load_file(str(sorted(a.hf.glob("*.safetensors"))[0]))
    mtp = {k: v.float() for k, v in sd.items() if k.startswith("mtp.")}
    rep["prompts"] = []
    worst, worst_m = 0.0, 0.0
    for text in PROMPTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        with torch.no_grad():
            seq = list(ids)
            for _ in range(a.n_gen):
                lg = model(input_ids=torch.tensor([seq])).logits[0, -1]
                seq.append(int(lg.argmax()))
            out = model.model(input_ids=torch.tensor([seq[:-1]]))
            h = out.last_hidden_state[0].numpy()
            ref_logits = model.lm_head(out.last_hidden_state)[0].numpy()
        gen_hf = seq[len(ids):]
        with tempfile.TemporaryDirectory() as td:
            lf, mf_ = Path(td) / "l.bin", Path(td) / "m.bin"
            cmd = [str(a.redlite), "dump", "-m", str(a.gguf), "--tokens", ",".join(map(str, ids)),
                   "--greedy", str(a.n_gen), "--logits", str(lf), "--mtp", str(mf_), "--json"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise SystemExit("check: redlite dump failed: " + r.stderr[-800:])
            j = json.loads(r.stdout)
            V = cfg.vocab_size
            rl_logits = np.fromfile(lf, dtype=np.float32).reshape(-1, V)
            rl_mtp = np.fromfile(mf_, dtype=np.float32).reshape(-1, V)
        gen_rl = j["generated"]
        n = min(len(rl_logits), len(ref_logits))
        d = float(np.abs(rl_logits[:n] - ref_logits[:n]).max())
        # MTP oracle over the pairs (h_p, x_{p+1}) of the same sequence
        full = np.asarray(seq, dtype=np.int64)
        nh = rl_mtp.shape[0]
        _, m_logits = mf.mtp_forward(model, cfg, mtp, h[:nh], full[1:nh + 1], pos0=1)
        dm = float(np.abs(rl_mtp - m_logits[:nh]).max())
        agree_m = float((rl_mtp.argmax(-1) == m_logits[:nh].argmax(-1)).mean())
        worst, worst_m = max(worst, d), max(worst_m, dm)
        same = gen_rl == gen_hf
        rep["prompts"].append({"prompt": text[:40], "greedy_equal": same, "max_abs_dlogit": d,
                               "mtp_rows": nh, "mtp_max_abs_dlogit": dm, "mtp_argmax_agree": agree_m,
                               "text": tok.decode(gen_hf)})
        if not same or d > a.tol or dm > a.tol:
            rep["ok"] = False
    rep["max_abs_dlogit"] = worst
    rep["mtp_max_abs_dlogit"] = worst_m
    print(json.dumps(rep, indent=1, ensure_ascii=False))
    sys.exit(0 if rep["ok"] else 1)


if __name__ == "__main__":
    main()
