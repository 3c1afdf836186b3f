#!/usr/bin/env python3
"""Turn the training run's fp16 shards into a Hugging Face Qwen3-Next checkpoint (with the mtp.*
block) and GGUF files made by llama.cpp's own converter (convert_hf_to_gguf.py, used as an external
tool as tools/make_fixtures.py does).

The cut tokenizer is not in the converter's table of known pre-tokenizer hashes (its ids differ from
the full Qwen vocabulary), so before running the converter this script checks that the tokenizer's
normaliser / pre-tokenizer / decoder are exactly Qwen2's (same regex, ByteLevel without prefix space)
and then answers the converter's pre-tokenizer question with "qwen2" -- the only change made to the
converter's behaviour.

Usage:
  export.py --run DIR --tokenizer-dir DIR --llama-cpp-src DIR --out DIR [--types f32,f16,q8_0]
    DIR of --run: meta.json + weights-NN.safetensors (the files the training run returned)
Writes OUT/hf/ (checkpoint) and OUT/<name>-<type>.gguf.
"""
import argparse
import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

QWEN2_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
               "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def check_qwen2_pretokenizer(tok_json: Path) -> None:
    t = json.loads(tok_json.read_text())
    pt = t["pre_tokenizer"]
    ok = (t["normalizer"] == {"type": "NFC"} and pt["type"] == "Sequence"
          and pt["pretokenizers"][0]["type"] == "Split"
          and pt["pretokenizers"][0]["pattern"] == {"Regex": QWEN2_REGEX}
          and pt["pretokenizers"][0]["behavior"] == "Isolated"
          and pt["pretokenizers"][1]["type"] == "ByteLevel"
          and pt["pretokenizers"][1]["add_prefix_space"] is False
          and t["decoder"]["type"] == "ByteLevel" and t["model"]["type"] == "BPE")
    if not ok:
        raise SystemExit("export: the tokenizer's pre-tokenizer is not exactly Qwen2's; refusing to label it qwen2")


def build_checkpoint(run: Path, tok_dir: Path, ckpt: Path) -> dict:
    import train as tr
    import model as tm
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    meta = json.loads((run / "meta.json").read_text())
    cd = dict(meta["config"])
    cfg = Qwen3NextConfig.from_dict(cd)
    sd = tr.load_shards([run / s for s in meta["shards"]])
    trunk = {k: v.float() for k, v in sd.items() if not k.startswith("mtp.")}
    mtp = {k: v.float().contiguous() for k, v in sd.items() if k.startswith("mtp.")}
    model = Qwen3NextForCausalLM(cfg).float()
    missing, unexpected = model.load_state_dict(trunk, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        raise SystemExit(f"export: state mismatch missing={missing[:5]} unexpected={unexpected[:5]}")
    if ckpt.exists():
        shutil.rmtree(ckpt)
    ckpt.mkdir(parents=True)
    model.save_pretrained(ckpt, safe_serialization=True)
    files = sorted(ckpt.glob("*.safetensors"))
    if len(files) != 1:
        raise SystemExit(f"export: expected one safetensors file, got {files}")
    full = load_file(str(files[0]))
    full.update(mtp)
    save_file(full, str(files[0]), metadata={"format": "pt"})
    cj = json.loads((ckpt / "config.json").read_text())
    lt = cfg.layer_types
    if any((t == "full_attention") != ((i + 1) % 4 == 0) for i, t in enumerate(lt)):
        raise SystemExit("export: layer types do not follow the 3:1 pattern")
    cj["full_attention_interval"] = 4
    (ckpt / "config.json").write_text(json.dumps(cj, indent=2) + "\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / fn, ckpt / fn)
    return meta


def convert(ckpt: Path, out: Path, llama_src: Path, outtype: str, name: str) -> None:
    """Runs the converter in a child process (its own argv / logging), with the pre-tokenizer answer."""
    code = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(llama_src)!r}); sys.path.insert(1, {str(llama_src / 'gguf-py')!r})\n"
        "import conversion.base as B\n"
        "B.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'qwen2'\n"
        f"sys.argv = ['convert_hf_to_gguf.py', {str(ckpt)!r}, '--outtype', {outtype!r}, '--outfile', {str(out)!r},"
        f" '--model-name', {name!r}]\n"
        f"runpy.run_path({str(llama_src / 'convert_hf_to_gguf.py')!r}, run_name='__main__')\n")
    env = dict(os.environ, NO_LOCAL_GGUF="")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit(f"export: convert_hf_to_gguf.py failed for {outtype}")
    print(f"export: wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--tokenizer-dir", type=Path, required=True)
    ap.add_argument("--llama-cpp-src", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", default="redlite-coder-tiny")
    ap.add_argument("--types", default="f32,f16,q8_0")
    a = ap.parse_args()
    if not (a.llama_cpp_src / "convert_hf_to_gguf.py").is_file():
        print("export: --llama-cpp-src has no convert_hf_to_gguf.py (see tools/README.md)", file=sys.stderr)
        sys.exit(2)
    check_qwen2_pretokenizer(a.tokenizer_dir / "tokenizer.json")
    a.out.mkdir(parents=True, exist_ok=True)
    build_checkpoint(a.run, a.tokenizer_dir, a.out / "hf")
    for t in a.types.split(","):
        convert(a.out / "hf", a.out / f"{a.name}-{t}.gguf", a.llama_cpp_src, t, a.name)


if __name__ == "__main__":
    main()
