#!/usr/bin/env python3
"""Build tiny random Qwen3-Next-family checkpoints (qwen3_next, qwen3_5_moe, qwen3_5), convert them with llama.cpp's own converter and record
oracle outputs with HF transformers (and, optionally, llama.cpp through llama-cpp-python).

Developer tool: run it on a developer machine, never in CI.  Needs torch + transformers (>= 5, with
Qwen3-Next), numpy, safetensors, tokenizers, and a llama.cpp source tree that contains
`convert_hf_to_gguf.py` + `gguf-py/` (used as an external tool, never committed; see tools/README.md,
`--fetch-converter` downloads llama-cpp-python's sdist with pip and unpacks the converter from it).

Pipeline (one model per run; see tests/fixtures/README.md for the file format):

 1. build a random `Qwen3NextForCausalLM` (fp32) with our own initialisation (non-trivial norms,
    A_log, dt_bias, conv weights; logit/router scales chosen so greedy paths are not degenerate);
 2. round every weight to the type the GGUF will store: Q8_0 (quantise+dequantise with gguf-py along
    the input dim) for the matrices the converter quantises, F32 for the rest;
 3. save safetensors + config.json + tokenizer files (+ our own random `mtp.*` block with --mtp);
 4. run `convert_hf_to_gguf.py --outtype q8_0`, then read the GGUF back and check that every tensor
    dequantises bit-exactly to the HF weight after the converter's documented transforms;
 5. record the oracle with transformers (fp32, eager attention, eager experts): prompt logits,
    32 greedy tokens decoded step by step with the cache, per-step logits summaries and margins,
    router top-k ids/probs/gaps, per-layer hidden states of the first prompt, MTP head outputs;
 6. optionally replay the same prompts through llama.cpp (llama-cpp-python) and store its logits
    summaries, greedy tokens and the difference to transformers.

Example:
    python3 tools/make_fixtures.py --preset tiny-a --out tests/fixtures \
        --llama-cpp-src /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TOKENIZER_DIR = Path("/work/shared/data/qwen3-tokenizer")
LCP_VERSION = "0.3.36"  # llama-cpp-python release whose sdist carries the converter we use
VOCAB = 151936          # rows of token_embd / output in every Qwen3-Next checkpoint
TOPK_STORE = 16         # how many top logits are stored per position

PRESETS = {
    # 4 layers (3 Gated DeltaNet + 1 full attention), 16 experts top-4, no MTP.
    "tiny-a": dict(seed=1, hidden=64, layers=4, experts=16, topk=4, moe_ff=32, shared_ff=32,
                   heads=4, kv_heads=2, head_dim=64, lin_k_heads=4, lin_v_heads=8,
                   lin_k_dim=32, lin_v_dim=32, full_interval=4, rope_theta=1e7, mtp=False,
                   full_logits_prompts=[0]),
    # 8 layers (layers 3 and 7 full attention), 32 experts top-8, MTP block. Dimensions chosen to differ
    # from each other (hidden 32, head_dim 256 as in the real model, GQA 4, linear head dim 64, moe_ff 96,
    # shared_ff 128) so a loader that mixes two of them up cannot pass by accident. Linear key and value
    # head dims are equal, as in the real model: llama.cpp (0c1e5709) sizes attn_qkv from ssm.state_size
    # alone and refuses dk != dv. Hidden is 32 (not 96/128) to keep the Q8_0 embedding + output
    # (2 x 151936 rows) inside the repository size budget.
    "tiny-b": dict(seed=2, hidden=32, layers=8, experts=32, topk=8, moe_ff=96, shared_ff=128,
                   heads=8, kv_heads=2, head_dim=256, lin_k_heads=4, lin_v_heads=8,
                   lin_k_dim=64, lin_v_dim=64, full_interval=4, rope_theta=5e6, mtp=True,
                   full_logits_prompts=[]),
    # Qwen3.5 MoE (transformers qwen3_5_moe, GGUF qwen35moe): separate in_proj_b / in_proj_a, value heads
    # reordered to tiled by the converter (4 value heads per key head, so tiled != grouped), multi-section
    # RoPE, MTP block. The vocabulary is trimmed after conversion to keep the fixture small (see trim_vocab).
    "tiny-q35moe": dict(seed=3, hidden=64, layers=4, experts=16, topk=4, moe_ff=32, shared_ff=64,
                        heads=4, kv_heads=2, head_dim=64, lin_k_heads=2, lin_v_heads=8,
                        lin_k_dim=32, lin_v_dim=32, full_interval=4, rope_theta=1e7, mtp=True,
                        arch="qwen3_5_moe", dense_ff=0, keep_vocab=2048, full_logits_prompts=[0]),
    # Qwen3.5 dense (transformers qwen3_5, GGUF qwen35): dense SwiGLU FFN instead of the MoE.
    "tiny-q35": dict(seed=4, hidden=64, layers=4, experts=0, topk=0, moe_ff=0, shared_ff=0,
                     heads=4, kv_heads=2, head_dim=64, lin_k_heads=2, lin_v_heads=8,
                     lin_k_dim=32, lin_v_dim=32, full_interval=4, rope_theta=1e7, mtp=False,
                     arch="qwen3_5", dense_ff=96, keep_vocab=2048, full_logits_prompts=[0]),
}
# Defaults of the keys the Qwen3.5 presets added (the Qwen3-Next presets predate them).
PRESET_DEFAULTS = dict(arch="qwen3_next", dense_ff=0, keep_vocab=0)

DEFAULT_PROMPTS = [
    # prompt 0 is kept short: its full logits (T x 151936 fp32) are stored verbatim.
    {"name": "code", "text": "def fibonacci(n):\n    if n < 2:\n        return n"},
    {"name": "prose", "text": "The old lighthouse keeper climbed the spiral stairs every evening, "
                              "counting each of the one hundred and twelve steps"},
    {"name": "unicode", "text": "Grüße aus Köln! 日本語のテキスト、中文字符，한국어 문장. "
                                "Emoji: 🚀🔥👍🏽 — «ελληνικά», русский текст, العربية, naïve café ﬁ Å"},
    {"name": "chatml", "text": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                               "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n"
                               "<|im_start|>assistant\n"},
    # > 128 tokens: prefill crosses the 64-token chunk boundaries of the chunked delta rule twice.
    {"name": "long", "text": (
        "In the beginning the project was only a small C program that read a file, split it into "
        "tokens and printed them again. Over the following months it grew a tokenizer with byte-level "
        "BPE, a reader for the GGUF container, quantised matrix kernels for several CPU instruction "
        "sets, a recurrent state cache for the linear-attention layers, and finally a full mixture of "
        "experts forward pass. Every piece was tested against an independent oracle:\n"
        "```python\nfor step in range(32):\n    logits = model(ids)[-1]\n    ids.append(int(logits.argmax()))\n```\n"
        "The numbers 3.14159, 2.71828 and 1.41421 appear in the tests, as do the words café, naïve and "
        "Zürich, because digits and accents are where tokenizers usually break.")},
]


# ----------------------------------------------------------------------------------------------
# small helpers

def log(msg: str) -> None:
    print(f"[make_fixtures {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def import_gguf(llama_src: Path | None):
    """Prefer the gguf-py that ships with the converter (it knows the newest keys)."""
    if llama_src is not None and (llama_src / "gguf-py").is_dir():
        sys.path.insert(0, str(llama_src / "gguf-py"))
    import gguf  # noqa: E402
    return gguf


def git_commit(path: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=30)
        if out.returncode == 0:
            return out.stdout.strip()
    except Exception:
        pass
    return None


def fetch_converter(cache: Path) -> Path:
    """pip-download llama-cpp-python's sdist and unpack it; returns vendor/llama.cpp."""
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / f"llama_cpp_python-{LCP_VERSION}"
    src = root / "vendor" / "llama.cpp"
    if (src / "convert_hf_to_gguf.py").is_file():
        return src
    tarball = cache / f"llama_cpp_python-{LCP_VERSION}.tar.gz"
    if not tarball.is_file():
        log(f"downloading llama-cpp-python=={LCP_VERSION} sdist with pip")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        f"llama-cpp-python=={LCP_VERSION}", "-d", str(cache)], check=True)
    with tarfile.open(tarball) as tf:
        tf.extractall(cache)
    return src


# ----------------------------------------------------------------------------------------------
# 1. model construction

def hf_module(a):
    """transformers' modelling module of the preset's architecture."""
    if a.arch == "qwen3_5_moe":
        from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as M
    elif a.arch == "qwen3_5":
        from transformers.models.qwen3_5 import modeling_qwen3_5 as M
    else:
        from transformers.models.qwen3_next import modeling_qwen3_next as M
    return M


def hf_causal_lm(a):
    M = hf_module(a)
    return {"qwen3_5_moe": "Qwen3_5MoeForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM"}.get(
        a.arch, "Qwen3NextForCausalLM"), M


def make_config(a):
    if a.arch in ("qwen3_5_moe", "qwen3_5"):
        return make_config_q35(a)
    from transformers import Qwen3NextConfig
    cfg = Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=a.hidden, intermediate_size=4 * a.hidden,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": float(a.rope_theta),
                         "partial_rotary_factor": 0.25},
        linear_conv_kernel_dim=4, linear_key_head_dim=a.lin_k_dim, linear_value_head_dim=a.lin_v_dim,
        linear_num_key_heads=a.lin_k_heads, linear_num_value_heads=a.lin_v_heads,
        moe_intermediate_size=a.moe_ff, shared_expert_intermediate_size=a.shared_ff,
        num_experts=a.experts, num_experts_per_tok=a.topk, norm_topk_prob=True, decoder_sparse_step=1,
        full_attention_interval=a.full_interval, max_position_embeddings=4096,
        tie_word_embeddings=False, rms_norm_eps=1e-6,
        bos_token_id=151643, eos_token_id=151645, pad_token_id=None,
    )
    return cfg


def make_config_q35(a):
    """Qwen3.5 text configs: no norm_topk_prob / decoder_sparse_step (always renormalised, MoE on every
    layer), mrope_section given explicitly: the rotary pairs (head_dim / 8) split t/h/w like [11, 11, 10]."""
    from transformers import Qwen3_5MoeTextConfig, Qwen3_5TextConfig
    half = int(a.head_dim * 0.25) // 2
    third = (half + 2) // 3
    common = dict(
        vocab_size=VOCAB, hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": float(a.rope_theta), "partial_rotary_factor": 0.25,
                         "mrope_section": [third, third, half - 2 * third], "mrope_interleaved": True},
        linear_conv_kernel_dim=4, linear_key_head_dim=a.lin_k_dim, linear_value_head_dim=a.lin_v_dim,
        linear_num_key_heads=a.lin_k_heads, linear_num_value_heads=a.lin_v_heads,
        full_attention_interval=a.full_interval, max_position_embeddings=4096, tie_word_embeddings=False,
        rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151645, pad_token_id=None)
    if a.arch == "qwen3_5":
        return Qwen3_5TextConfig(intermediate_size=a.dense_ff, **common)
    return Qwen3_5MoeTextConfig(moe_intermediate_size=a.moe_ff, shared_expert_intermediate_size=a.shared_ff,
                                num_experts=a.experts, num_experts_per_tok=a.topk, **common)


def is_moe(cfg) -> bool:
    return getattr(cfg, "num_experts", 0) not in (0, None) if hasattr(cfg, "num_experts") else False


def check_dims(cfg) -> None:
    """Every matrix input dim must be a multiple of 32 (Q8_0 block)."""
    ins = {
        "hidden": cfg.hidden_size,
        "attn heads*head_dim (o_proj in)": cfg.num_attention_heads * cfg.head_dim,
        "linear value dim (out_proj in)": cfg.linear_num_value_heads * cfg.linear_value_head_dim,
    }
    if is_moe(cfg):
        ins["moe_intermediate (expert down in)"] = cfg.moe_intermediate_size
        ins["shared_expert_intermediate (down in)"] = cfg.shared_expert_intermediate_size
    else:
        ins["intermediate (ffn down in)"] = cfg.intermediate_size
    for k, v in ins.items():
        if v % 32:
            raise SystemExit(f"make_fixtures: {k} = {v} is not a multiple of 32 (Q8_0 blocks)")
    if cfg.linear_num_value_heads % cfg.linear_num_key_heads:
        raise SystemExit("make_fixtures: linear value heads must be a multiple of linear key heads")
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise SystemExit("make_fixtures: attention heads must be a multiple of KV heads")
    if int(cfg.head_dim * 0.25) % 2:
        raise SystemExit("make_fixtures: head_dim * 0.25 must be even (NeoX RoPE pairs)")


# Which HF tensors end up Q8_0 in the GGUF for `--outtype q8_0` (decided by the converter:
# every tensor with >= 2 dims except norms, routers `ffn_gate_inp`, `ffn_gate_inp_shexp` and
# `ssm_conv1d`, which stay F32; all 1-D tensors are F32). Checked against the GGUF after conversion.
def will_be_q8(name: str, ndim: int) -> bool:
    if ndim < 2:
        return False
    if name.endswith("norm.weight"):
        return False
    if name.endswith("mlp.gate.weight") or name.endswith("shared_expert_gate.weight"):
        return False
    if "conv1d" in name:
        return False
    return True


def q8_round(t, gguf):
    """Quantise to Q8_0 along the last (input) axis and dequantise again."""
    import torch
    arr = t.detach().to(torch.float32).cpu().numpy()
    q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
    d = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(arr.shape)
    return torch.from_numpy(np.ascontiguousarray(d, dtype=np.float32))


class Init:
    """Our own random initialisation (HF's would give zero norms, all-ones dt_bias, tiny logits)."""

    def __init__(self, seed: int, a):
        import torch
        self.g = torch.Generator().manual_seed(seed)
        self.a = a

    def normal(self, shape, std, mean=0.0):
        import torch
        return torch.randn(shape, generator=self.g, dtype=torch.float32) * std + mean

    def uniform(self, shape, lo, hi):
        import torch
        return torch.rand(shape, generator=self.g, dtype=torch.float32) * (hi - lo) + lo

    def tensor(self, name: str, shape):
        a = self.a
        fan_in = shape[-1]
        if name.endswith("embed_tokens.weight"):
            return self.normal(shape, 1.0)
        if name.endswith("lm_head.weight"):
            return self.normal(shape, a.logit_gain / math.sqrt(fan_in))
        if name.endswith("linear_attn.norm.weight"):          # gated norm, plain weight (not +1)
            return self.normal(shape, a.norm_std, mean=1.0)
        if name.endswith("norm.weight"):                       # zero-centred RMSNorm (HF adds 1)
            return self.normal(shape, a.norm_std)
        if name.endswith("A_log"):                             # A in [0.05, 8): slow and fast decays
            return self.uniform(shape, math.log(0.05), math.log(8.0))
        if name.endswith("dt_bias"):
            return self.uniform(shape, -2.5, 1.0)
        if "conv1d" in name:                                   # [C, 1, K]
            return self.normal(shape, 0.5)
        if name.endswith("mlp.gate.weight"):                   # router
            return self.normal(shape, a.router_gain / math.sqrt(fan_in))
        if name.endswith("shared_expert_gate.weight"):
            return self.normal(shape, 1.0 / math.sqrt(fan_in))
        # every other matrix: [.., out, in] (experts: [E, out, in])
        return self.normal(shape, a.mat_gain / math.sqrt(fan_in))


def mtp_tensor_shapes(cfg) -> dict[str, tuple]:
    """Shapes of the `mtp.*` block (spec F.1), HF layout, per-expert tensors like the real checkpoint."""
    D = cfg.hidden_size
    H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    s = {
        "mtp.fc.weight": (D, 2 * D),
        "mtp.pre_fc_norm_embedding.weight": (D,),
        "mtp.pre_fc_norm_hidden.weight": (D,),
        "mtp.norm.weight": (D,),
        "mtp.layers.0.input_layernorm.weight": (D,),
        "mtp.layers.0.post_attention_layernorm.weight": (D,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * H * hd, D),
        "mtp.layers.0.self_attn.k_proj.weight": (Hkv * hd, D),
        "mtp.layers.0.self_attn.v_proj.weight": (Hkv * hd, D),
        "mtp.layers.0.self_attn.o_proj.weight": (D, H * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
    }
    if not is_moe(cfg):  # dense FFN (qwen3_5)
        F = cfg.intermediate_size
        s.update({"mtp.layers.0.mlp.gate_proj.weight": (F, D), "mtp.layers.0.mlp.up_proj.weight": (F, D),
                  "mtp.layers.0.mlp.down_proj.weight": (D, F)})
        return s
    E, I, Is = cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
    s.update({
        "mtp.layers.0.mlp.gate.weight": (E, D),
        "mtp.layers.0.mlp.shared_expert.gate_proj.weight": (Is, D),
        "mtp.layers.0.mlp.shared_expert.up_proj.weight": (Is, D),
        "mtp.layers.0.mlp.shared_expert.down_proj.weight": (D, Is),
        "mtp.layers.0.mlp.shared_expert_gate.weight": (1, D),
    })
    for e in range(E):
        s[f"mtp.layers.0.mlp.experts.{e}.gate_proj.weight"] = (I, D)
        s[f"mtp.layers.0.mlp.experts.{e}.up_proj.weight"] = (I, D)
        s[f"mtp.layers.0.mlp.experts.{e}.down_proj.weight"] = (D, I)
    return s


def build_model(a, cfg, gguf):
    import torch
    cls_name, M = hf_causal_lm(a)
    torch.manual_seed(a.seed)
    model = getattr(M, cls_name)(cfg).to(torch.float32).eval()
    init = Init(a.seed, a)
    n_q8 = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = init.tensor(name, tuple(p.shape))
            if will_be_q8(name, p.dim()):
                t = q8_round(t, gguf)
                n_q8 += 1
            p.copy_(t)
    mtp = {}
    if a.mtp:
        for name, shape in mtp_tensor_shapes(cfg).items():
            t = init.tensor(name, shape)
            if will_be_q8(name, len(shape)):
                t = q8_round(t, gguf)
            mtp[name] = t.contiguous()
    log(f"model built: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M params, "
        f"{n_q8} Q8_0-rounded tensors, {len(mtp)} mtp tensors")
    return model, mtp


def save_checkpoint(model, mtp: dict, cfg, a, ckpt: Path, tokenizer_dir: Path) -> None:
    from safetensors.torch import load_file, save_file
    ckpt.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(ckpt, safe_serialization=True)
    files = sorted(ckpt.glob("*.safetensors"))
    if len(files) != 1:
        raise SystemExit(f"make_fixtures: expected one safetensors file, got {files}")
    if mtp:
        sd = load_file(str(files[0]))
        sd.update(mtp)
        save_file(sd, str(files[0]), metadata={"format": "pt"})
    # Mirror the real config.json, which also carries full_attention_interval.
    cj = json.loads((ckpt / "config.json").read_text())
    cj["full_attention_interval"] = a.full_interval
    (ckpt / "config.json").write_text(json.dumps(cj, indent=2) + "\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / fn, ckpt / fn)


# ----------------------------------------------------------------------------------------------
# 2. conversion + read-back verification

def convert(ckpt: Path, out_gguf: Path, llama_src: Path, extra: list[str], outtype: str = "q8_0") -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(llama_src / "gguf-py") + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_LOCAL_GGUF"] = ""
    cmd = [sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(ckpt), "--outtype", outtype,
           "--outfile", str(out_gguf), *extra]
    log("converting: " + " ".join(cmd[1:]))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-5000:] + r.stderr[-5000:])
        raise SystemExit("make_fixtures: convert_hf_to_gguf.py failed")
    return r.stdout + r.stderr


def expected_gguf_tensors(sd: dict, mtp: dict, cfg) -> dict[str, np.ndarray]:
    """Our own statement of what the converter must write (numpy, HF/PyTorch axis order), derived
    from the spec (§B.3/§B.4/§F.3): names, +1 on zero-centred norms, -exp(A_log), de-interleaved
    in_proj_qkvz, stacked experts, MTP block appended as block n_layer."""
    import torch
    L = cfg.num_hidden_layers
    Hk, Hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    E = getattr(cfg, "num_experts", 0) if is_moe(cfg) else 0
    f = lambda t: t.detach().to(torch.float32).cpu().numpy()
    r_v = Hv // Hk

    def tiled(x: np.ndarray, head: int, axis: int = 0) -> np.ndarray:
        """Qwen3.5: value heads from HF's grouped order (key head g's r heads together) to tiled order:
        tiled head v*Hk + g = grouped head g*r + v (docs/QWEN35.md), blocks of `head` along `axis`."""
        x = np.moveaxis(x, axis, 0)
        y = x.reshape(Hk, r_v, head, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
        return np.moveaxis(y, 0, axis)
    exp: dict[str, np.ndarray] = {
        "token_embd.weight": f(sd["model.embed_tokens.weight"]),
        "output.weight": f(sd["lm_head.weight"]),
        "output_norm.weight": f(sd["model.norm.weight"] + 1),
    }

    def layer(src: dict, pre: str, n: int, kind: str):
        b = f"blk.{n}."
        exp[b + "attn_norm.weight"] = f(src[pre + "input_layernorm.weight"] + 1)
        exp[b + "post_attention_norm.weight"] = f(src[pre + "post_attention_layernorm.weight"] + 1)
        if pre + "mlp.gate_proj.weight" in src:  # dense FFN (qwen3_5)
            for w in ("gate", "up", "down"):
                exp[b + f"ffn_{w}.weight"] = f(src[pre + f"mlp.{w}_proj.weight"])
        else:
            moe(src, pre, b)
        if kind == "full_attention":
            for t, h in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("output", "o_proj")):
                exp[b + f"attn_{t}.weight"] = f(src[pre + f"self_attn.{h}.weight"])
            exp[b + "attn_q_norm.weight"] = f(src[pre + "self_attn.q_norm.weight"] + 1)
            exp[b + "attn_k_norm.weight"] = f(src[pre + "self_attn.k_norm.weight"] + 1)
        elif pre + "linear_attn.in_proj_qkv.weight" in src:  # Qwen3.5: separate projections, tiled heads
            la = pre + "linear_attn."
            qkv = f(src[la + "in_proj_qkv.weight"])
            nqk = 2 * Hk * dk
            exp[b + "attn_qkv.weight"] = np.concatenate([qkv[:nqk], tiled(qkv[nqk:], dv)], axis=0)
            exp[b + "attn_gate.weight"] = tiled(f(src[la + "in_proj_z.weight"]), dv)
            exp[b + "ssm_beta.weight"] = tiled(f(src[la + "in_proj_b.weight"]), 1)
            exp[b + "ssm_alpha.weight"] = tiled(f(src[la + "in_proj_a.weight"]), 1)
            conv = f(src[la + "conv1d.weight"]).squeeze(1)
            exp[b + "ssm_conv1d.weight"] = np.concatenate([conv[:nqk], tiled(conv[nqk:], dv)], axis=0)
            exp[b + "ssm_dt.bias"] = tiled(f(src[la + "dt_bias"]), 1)
            exp[b + "ssm_a"] = tiled(f(-torch.exp(src[la + "A_log"].float())), 1)
            exp[b + "ssm_norm.weight"] = f(src[la + "norm.weight"])
            exp[b + "ssm_out.weight"] = tiled(f(src[la + "out_proj.weight"]), dv, axis=1)
        else:
            linear_q3n(src, pre, b)

    def moe(src: dict, pre: str, b: str):
        exp[b + "ffn_gate_inp.weight"] = f(src[pre + "mlp.gate.weight"])
        exp[b + "ffn_gate_inp_shexp.weight"] = f(src[pre + "mlp.shared_expert_gate.weight"])
        for w, g in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            exp[b + f"ffn_{w}_shexp.weight"] = f(src[pre + f"mlp.shared_expert.{g}.weight"])
            if pre + "mlp.experts.gate_up_proj" in src:   # fused in-memory layout [E, 2I, D]
                if w == "down":
                    exp[b + "ffn_down_exps.weight"] = f(src[pre + "mlp.experts.down_proj"])
                else:
                    gu = src[pre + "mlp.experts.gate_up_proj"]
                    half = gu.shape[1] // 2
                    exp[b + f"ffn_{w}_exps.weight"] = f(gu[:, :half] if w == "gate" else gu[:, half:])
            else:
                exp[b + f"ffn_{w}_exps.weight"] = np.stack(
                    [f(src[pre + f"mlp.experts.{e}.{g}.weight"]) for e in range(E)])

    def linear_q3n(src: dict, pre: str, b: str):
        if True:
            la = pre + "linear_attn."
            w = f(src[la + "in_proj_qkvz.weight"])                 # [Hk*(2dk+2r dv), D]
            r = Hv // Hk
            grp = w.reshape(Hk, 2 * dk + 2 * r * dv, -1)
            q = grp[:, :dk]; k = grp[:, dk:2 * dk]
            v = grp[:, 2 * dk:2 * dk + r * dv]; z = grp[:, 2 * dk + r * dv:]
            D = w.shape[-1]
            exp[b + "attn_qkv.weight"] = np.concatenate(
                [q.reshape(-1, D), k.reshape(-1, D), v.reshape(-1, D)], axis=0)
            exp[b + "attn_gate.weight"] = z.reshape(-1, D)
            exp[b + "ssm_ba.weight"] = f(src[la + "in_proj_ba.weight"])
            exp[b + "ssm_conv1d.weight"] = f(src[la + "conv1d.weight"]).squeeze(1)
            exp[b + "ssm_dt.bias"] = f(src[la + "dt_bias"])
            exp[b + "ssm_a"] = f(-torch.exp(src[la + "A_log"].float()))
            exp[b + "ssm_norm.weight"] = f(src[la + "norm.weight"])
            exp[b + "ssm_out.weight"] = f(src[la + "out_proj.weight"])

    for n in range(L):
        layer(sd, f"model.layers.{n}.", n, cfg.layer_types[n])
    if mtp:
        layer(mtp, "mtp.layers.0.", L, "full_attention")
        b = f"blk.{L}."
        exp[b + "nextn.eh_proj.weight"] = f(mtp["mtp.fc.weight"])
        exp[b + "nextn.enorm.weight"] = f(mtp["mtp.pre_fc_norm_embedding.weight"] + 1)
        exp[b + "nextn.hnorm.weight"] = f(mtp["mtp.pre_fc_norm_hidden.weight"] + 1)
        exp[b + "nextn.shared_head_norm.weight"] = f(mtp["mtp.norm.weight"] + 1)
    return exp


def read_gguf(path: Path, gguf):
    rd = gguf.GGUFReader(str(path))
    kv = {}
    for fld in rd.fields.values():
        if fld.name.startswith("tokenizer.ggml.") and fld.name not in (
                "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.padding_token_id",
                "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"):
            kv[fld.name] = f"<array of {len(fld.data)}>"
            continue
        if fld.name == "tokenizer.chat_template":
            kv[fld.name] = f"<string of {len(bytes(fld.parts[-1]))} bytes>"
            continue
        try:
            v = fld.contents()
        except Exception:
            v = "<unreadable>"
        if isinstance(v, (np.generic,)):
            v = v.item()
        kv[fld.name] = v
    return rd, kv


def verify_gguf(path: Path, exp: dict[str, np.ndarray], gguf) -> dict:
    rd, kv = read_gguf(path, gguf)
    types: dict[str, str] = {}
    census: dict[str, int] = {}
    names = set()
    worst = 0.0
    for t in rd.tensors:
        names.add(t.name)
        tname = gguf.GGMLQuantizationType(t.tensor_type).name
        types[t.name] = tname
        census[tname] = census.get(tname, 0) + 1
        shape = tuple(int(x) for x in reversed(list(t.shape)))  # PyTorch order
        deq = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType(t.tensor_type))
        deq = np.asarray(deq, dtype=np.float32).reshape(shape)
        if t.name not in exp:
            raise SystemExit(f"make_fixtures: GGUF has an unexpected tensor {t.name}")
        e = exp[t.name].reshape(shape) if exp[t.name].size == deq.size else None
        if e is None:
            raise SystemExit(f"make_fixtures: {t.name}: shape {shape} vs expected {exp[t.name].shape}")
        d = float(np.max(np.abs(deq - e))) if deq.size else 0.0
        worst = max(worst, d)
        if d != 0.0:
            raise SystemExit(f"make_fixtures: {t.name} ({tname}) differs from the HF weight by {d}")
    missing = sorted(set(exp) - names)
    if missing:
        raise SystemExit(f"make_fixtures: GGUF lacks tensors {missing[:8]}")
    log(f"GGUF read back: {len(names)} tensors, all bit-exact to the (rounded) HF weights; types {census}")
    return {"tensor_types": types, "type_census": census, "n_tensors": len(names), "metadata": kv,
            "readback_max_abs_diff": worst}


def keep_ids(tok, prompts, n_keep: int) -> list[int]:
    """The vocabulary rows a trimmed fixture keeps, in their original order: every prompt token, the
    ChatML specials, then the lowest other ids up to n_keep."""
    need = {151643, 151644, 151645}
    for pr in prompts:
        need.update(tok.encode(pr["text"], add_special_tokens=False).ids)
    keep = set(need)
    i = 0
    while len(keep) < n_keep:
        keep.add(i)
        i += 1
    return sorted(keep)


def trim_gguf(src: Path, dst: Path, keep: list[int], gguf) -> None:
    """Rewrite src with only the vocabulary rows `keep` (renumbered 0..n-1): token_embd and output rows,
    tokens and token types; merges are dropped (the fixture's prompts are given as ids) and the special
    ids renumbered. Every other key and tensor is copied byte for byte. Keeps the fixture small: the
    architecture under test is in the blocks, not in a 151,936-row embedding."""
    rd = gguf.GGUFReader(str(src))
    arch = rd.fields["general.architecture"].contents()
    new_of = {o: n for n, o in enumerate(keep)}
    w = gguf.GGUFWriter(str(dst), arch)
    for fld in rd.fields.values():
        name = fld.name
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = gguf.GGUFValueType(fld.types[0])
        val = fld.contents()
        if name == "tokenizer.ggml.merges":
            continue
        if name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            val = [val[i] for i in keep]
        if name.endswith("_token_id") and name.startswith("tokenizer.ggml."):
            if int(val) not in new_of:
                continue
            val = new_of[int(val)]
        sub = gguf.GGUFValueType(fld.types[-1]) if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, val, vt, sub_type=sub)
    for t in rd.tensors:
        data = np.asarray(t.data)
        if t.name in ("token_embd.weight", "output.weight"):
            data = np.ascontiguousarray(data[keep])
        qt = gguf.GGMLQuantizationType(t.tensor_type)
        w.add_tensor(t.name, data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def trim_model(model, keep: list[int]):
    """The HF model with only the vocabulary rows `keep` (what trim_gguf leaves in the GGUF)."""
    import torch
    idx = torch.as_tensor(keep, dtype=torch.long)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight[idx].clone()
        head = model.lm_head.weight[idx].clone()
        model.model.embed_tokens = torch.nn.Embedding(len(keep), emb.shape[1])
        model.model.embed_tokens.weight.copy_(emb)
        model.lm_head = torch.nn.Linear(emb.shape[1], len(keep), bias=False)
        model.lm_head.weight.copy_(head)
    model.config.vocab_size = len(keep)
    return model


class RemapTok:
    """The tokenizer seen through a trimmed vocabulary: encode gives the renumbered ids."""

    def __init__(self, tok, keep: list[int]):
        self.tok, self.keep, self.new_of = tok, keep, {o: n for n, o in enumerate(keep)}

    def encode(self, text, add_special_tokens=False):
        ids = self.tok.encode(text, add_special_tokens=add_special_tokens).ids
        return argparse.Namespace(ids=[self.new_of[i] for i in ids])

    def decode(self, ids, skip_special_tokens=False):
        return self.tok.decode([self.keep[i] for i in ids], skip_special_tokens=skip_special_tokens)


# ----------------------------------------------------------------------------------------------
# 3. oracle

def torch_module():
    import torch
    return torch.nn.Module


class Recorder:
    """Forward hooks that collect per-layer activations and router decisions."""

    def __init__(self, model, cfg):
        self.cfg = cfg
        self.on = False
        self.acts: dict[str, list] = {}
        self.router: list[list] = [[] for _ in range(cfg.num_hidden_layers)]
        self.handles = []
        layers = model.model.layers
        for i, lyr in enumerate(layers):
            self.handles.append(lyr.register_forward_hook(self._act(f"l_out.{i}")))
            self.handles.append(lyr.input_layernorm.register_forward_hook(self._act(f"attn_norm.{i}")))
            mixer = lyr.linear_attn if cfg.layer_types[i] == "linear_attention" else lyr.self_attn
            self.handles.append(mixer.register_forward_hook(self._act(f"mixer_out.{i}")))
            self.handles.append(lyr.post_attention_layernorm.register_forward_hook(self._act(f"ffn_inp_norm.{i}")))
            self.handles.append(lyr.mlp.register_forward_hook(self._act(f"ffn_out.{i}")))
            if hasattr(lyr.mlp, "gate") and isinstance(lyr.mlp.gate, torch_module()):  # MoE router
                self.handles.append(lyr.mlp.gate.register_forward_hook(self._route(i)))
        self.handles.append(model.model.embed_tokens.register_forward_hook(self._act("embd")))
        self.handles.append(model.model.norm.register_forward_hook(self._act("out_norm")))

    def _act(self, key):
        def hook(mod, inp, out):
            if not self.on:
                return
            t = out[0] if isinstance(out, tuple) else out
            self.acts.setdefault(key, []).append(t.detach().reshape(-1, t.shape[-1]).float().numpy().copy())
        return hook

    def _route(self, i):
        def hook(mod, inp, out):
            if not self.on:
                return
            logits = out[0].detach().float()
            self.router[i].append(logits.numpy().copy())
        return hook

    def reset(self):
        self.acts = {}
        self.router = [[] for _ in range(self.cfg.num_hidden_layers)]

    def take(self):
        acts = {k: np.concatenate(v, axis=0) for k, v in self.acts.items()}
        router = [np.concatenate(r, axis=0) for r in self.router if r]
        self.reset()
        return acts, router


def router_summary(logits_list, k):
    """[L] x [N, E] router logits -> ids [L,N,k], probs [L,N,k] (full softmax), gap [L,N]."""
    ids, probs, gaps = [], [], []
    for lg in logits_list:
        lg = lg.astype(np.float64)
        p = np.exp(lg - lg.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        order = np.argsort(-p, axis=-1, kind="stable")
        top = order[:, :k + 1]
        pv = np.take_along_axis(p, top, -1)
        ids.append(top[:, :k])
        probs.append(pv[:, :k])
        gaps.append(pv[:, k - 1] - pv[:, k] if p.shape[1] > k else np.full(p.shape[0], np.inf))
    return (np.stack(ids).astype(np.int16), np.stack(probs).astype(np.float32),
            np.stack(gaps).astype(np.float32))


def logit_summary(lg: np.ndarray, k=TOPK_STORE):
    """[N, V] -> top-k ids/values, logsumexp, top1-top2 margin."""
    lg64 = lg.astype(np.float64)
    top = np.argsort(-lg, axis=-1, kind="stable")[:, :k]
    vals = np.take_along_axis(lg, top, -1)
    m = lg64.max(-1, keepdims=True)
    lse = (m[:, 0] + np.log(np.exp(lg64 - m).sum(-1)))
    margin = vals[:, 0].astype(np.float64) - vals[:, 1]
    return top.astype(np.int32), vals.astype(np.float32), lse.astype(np.float32), margin.astype(np.float32)


def kl_rows(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(P || Q) per row, logits in, float64 math."""
    a = p_logits.astype(np.float64); b = q_logits.astype(np.float64)
    la = a - a.max(-1, keepdims=True); la -= np.log(np.exp(la).sum(-1, keepdims=True))
    lb = b - b.max(-1, keepdims=True); lb -= np.log(np.exp(lb).sum(-1, keepdims=True))
    return (np.exp(la) * (la - lb)).sum(-1)


def mtp_forward(model, cfg, mtp: dict, h_post: np.ndarray, next_ids: np.ndarray, pos0: int = 1,
                arch: str = "qwen3_next"):
    """Our own MTP head oracle (spec §F.2, pairing convention of llama.cpp's draft-mtp: pair
    (h_p, x_{p+1}) sits at RoPE position p+1).  Built from transformers' own modules:
    e = RMSNorm_emb(Embed(x)), hn = RMSNorm_hid(h), u = fc([e; hn]), u = full-attention decoder layer
    (causal over the pairs, own KV), out = RMSNorm_mtp(u), logits = lm_head(out)."""
    import copy
    import torch
    M = hf_module(argparse.Namespace(arch=arch))
    pfx = {"qwen3_5_moe": "Qwen3_5Moe", "qwen3_5": "Qwen3_5"}.get(arch, "Qwen3Next")
    c2 = copy.deepcopy(cfg)
    c2.num_hidden_layers = 1
    c2.layer_types = ["full_attention"]
    c2._attn_implementation = "eager"
    c2._experts_implementation = "eager"
    layer = getattr(M, pfx + "DecoderLayer")(c2, 0).to(torch.float32).eval()
    D = cfg.hidden_size
    norm_e = getattr(M, pfx + "RMSNorm")(D, eps=cfg.rms_norm_eps)
    norm_h = getattr(M, pfx + "RMSNorm")(D, eps=cfg.rms_norm_eps)
    norm_o = getattr(M, pfx + "RMSNorm")(D, eps=cfg.rms_norm_eps)
    fc = torch.nn.Linear(2 * D, D, bias=False)
    with torch.no_grad():
        norm_e.weight.copy_(mtp["mtp.pre_fc_norm_embedding.weight"])
        norm_h.weight.copy_(mtp["mtp.pre_fc_norm_hidden.weight"])
        norm_o.weight.copy_(mtp["mtp.norm.weight"])
        fc.weight.copy_(mtp["mtp.fc.weight"])
        sd = {}
        for k, v in mtp.items():
            if k.startswith("mtp.layers.0."):
                sd[k[len("mtp.layers.0."):]] = v
        E = cfg.num_experts if is_moe(cfg) else 0
        if E:
          sd["mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([sd.pop(f"mlp.experts.{e}.gate_proj.weight"), sd.pop(f"mlp.experts.{e}.up_proj.weight")], 0)
             for e in range(E)])
          sd["mlp.experts.down_proj"] = torch.stack([sd.pop(f"mlp.experts.{e}.down_proj.weight") for e in range(E)])
        layer.load_state_dict(sd, strict=True)
        rot = getattr(M, pfx + ("TextRotaryEmbedding" if pfx != "Qwen3Next" else "RotaryEmbedding"))(c2)
        n = h_post.shape[0]
        x = model.model.embed_tokens(torch.as_tensor(next_ids, dtype=torch.long))[None]
        h = torch.as_tensor(h_post, dtype=torch.float32)[None]
        u = fc(torch.cat([norm_e(x), norm_h(h)], dim=-1))
        pos = torch.arange(pos0, pos0 + n)[None]
        pe = rot(u, pos)
        mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
        u = layer(u, position_embeddings=pe, attention_mask=mask, position_ids=pos)
        out = norm_o(u)
        logits = model.lm_head(out)
    return out[0].numpy(), logits[0].numpy()


def run_oracle(model, cfg, a, prompts, tok, mtp: dict):
    import torch
    rec = Recorder(model, cfg)
    arrays: dict[str, np.ndarray] = {}
    meta_prompts = []
    checks = {}
    full_set = set(a.full_logits_prompts)
    for pi, pr in enumerate(prompts):
        ids = tok.encode(pr["text"], add_special_tokens=False).ids
        T = len(ids)
        P = f"p{pi}."
        arrays[P + "ids"] = np.asarray(ids, dtype=np.int32)
        rec.reset(); rec.on = True
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), use_cache=True)
            cache = out.cache
            pl = out.logits[0].float().numpy()
            # post-norm hidden (input of lm_head) of the prompt positions
            acts_prompt, router_prompt = rec.take()
            rec.on = True
            gen, gen_logits, gen_hidden = [], [pl[-1]], []
            tokid = int(np.argmax(pl[-1]))
            for s in range(a.n_gen):
                gen.append(tokid)
                if s == a.n_gen - 1:
                    break
                o = model(input_ids=torch.tensor([[tokid]]), cache=cache, use_cache=True)
                cache = o.cache
                lg = o.logits[0, -1].float().numpy()
                gen_logits.append(lg)
                tokid = int(np.argmax(lg))
            acts_gen, router_gen = rec.take()
            rec.on = False
        gen_logits = np.stack(gen_logits)                          # [G, V]; row s predicts gen[s]
        step_logits = np.concatenate([pl, gen_logits[1:]], 0)        # [T+G-1, V] from the cached path
        # post-norm hidden (input of lm_head) along the same cached path
        hidden = np.concatenate([acts_prompt.pop("out_norm"), acts_gen.pop("out_norm")], 0)
        with torch.no_grad():
            # one uncached forward over prompt + greedy tokens (chunked delta rule) as a cross-check
            ref_logits = model(input_ids=torch.tensor([ids + gen[:-1]]), use_cache=False).logits[0].float().numpy()
        d_chunk = float(np.max(np.abs(ref_logits - step_logits)))
        checks[f"p{pi}.prefill_vs_stepwise_max_abs_dlogit"] = d_chunk
        # the stored hidden state must reproduce the logits through output.weight
        W = model.lm_head.weight.detach().numpy()
        recon = hidden @ W.T
        d_rec = float(np.max(np.abs(recon - step_logits)))
        checks[f"p{pi}.hidden_recon_max_abs_dlogit"] = d_rec

        top_ids, top_vals, lse, margin = logit_summary(step_logits)
        arrays[P + "greedy_ids"] = np.asarray(gen, dtype=np.int32)
        arrays[P + "hidden"] = hidden.astype(np.float32)       # [T+G-1, D], post output_norm
        arrays[P + "top_ids"] = top_ids
        arrays[P + "top_logits"] = top_vals
        arrays[P + "lse"] = lse
        arrays[P + "margin"] = margin
        if pi in full_set:
            arrays[P + "prompt_logits"] = pl.astype(np.float32)  # [T, V] full
        # router decisions along the whole path (prompt prefill + decode steps)
        rlog = [np.concatenate([rp, rg], 0) for rp, rg in zip(router_prompt, router_gen)]
        if rlog:  # MoE architectures (a dense model has no router)
            r_ids, r_probs, r_gap = router_summary(rlog, cfg.num_experts_per_tok)
            arrays[P + "router_ids"] = r_ids
            arrays[P + "router_probs"] = r_probs
            arrays[P + "router_gap"] = r_gap
        else:
            r_gap = np.full(1, np.inf, dtype=np.float32)
        if pi == 0:
            for k, v in acts_prompt.items():
                arrays[P + k] = v.astype(np.float32)
        gmarg = margin[T - 1:]
        meta = {
            "name": pr["name"], "text": pr["text"], "n_prompt": T, "ids": ids, "greedy_ids": gen,
            "greedy_text": tok.decode(gen, skip_special_tokens=False),
            "greedy_margins": [round(float(x), 6) for x in gmarg],
            "min_greedy_margin": float(gmarg.min()), "argmin_greedy_margin": int(gmarg.argmin()),
            "min_prompt_margin": float(margin[:T].min()),
            "min_router_gap": float(r_gap.min()) if rlog else None,
            "router_near_ties_lt_1e-3": int((r_gap < 1e-3).sum()),
            "full_prompt_logits": pi in full_set,
        }
        if mtp:
            seq = np.asarray(ids + gen, dtype=np.int64)
            # pairs (h_p, x_{p+1}) for p = 0 .. len(seq)-2  (hidden has len(seq)-1 rows)
            m_hidden, m_logits = mtp_forward(model, cfg, mtp, hidden, seq[1:], pos0=1, arch=a.arch)
            mi, mv, ml, mm = logit_summary(m_logits)
            arrays[P + "mtp_hidden"] = m_hidden.astype(np.float32)
            arrays[P + "mtp_top_ids"] = mi
            arrays[P + "mtp_top_logits"] = mv
            arrays[P + "mtp_lse"] = ml
            arrays[P + "mtp_margin"] = mm
            m_rec = m_hidden @ W.T
            checks[f"p{pi}.mtp_hidden_recon_max_abs_dlogit"] = float(np.max(np.abs(m_rec - m_logits)))
            meta["mtp_draft_ids"] = [int(x) for x in mi[:, 0]]
            meta["min_mtp_margin"] = float(mm.min())
        meta_prompts.append(meta)
        log(f"prompt {pi} ({pr['name']}): T={T}, greedy min margin {meta['min_greedy_margin']:.4f}, "
            f"router min gap {meta['min_router_gap'] or float('inf'):.2e}, prefill-vs-step {d_chunk:.2e}, recon {d_rec:.2e}")
    for h in rec.handles:
        h.remove()
    return arrays, meta_prompts, checks


# ----------------------------------------------------------------------------------------------
# 4. second oracle: transformers with ggml-style Q8_0 activations

def q8_act_roundtrip(x):
    """What ggml's CPU mat-mul does to the activation row before a Q8_0 x Q8_0 dot product
    (quantize_row_q8_0): per 32 values, d = amax/127 stored as fp16, q = round(x * 127/amax)."""
    import torch
    shp = x.shape
    xb = x.float().reshape(*shp[:-1], shp[-1] // 32, 32)
    amax = xb.abs().amax(-1, keepdim=True)
    q = torch.round(xb * torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax)))
    d = (amax / 127.0).half().float()
    return (q * d).reshape(shp).to(x.dtype)


class Q8Activations:
    """Context manager: every F.linear whose weight is stored Q8_0 in the GGUF sees Q8_0-rounded
    inputs (routers, shared-expert gate and conv stay fp32 as in llama.cpp, where they are F32)."""

    def __init__(self, model):
        self.f32 = {p.untyped_storage().data_ptr() for n, p in model.named_parameters()
                    if not will_be_q8(n, p.dim())}

    def __enter__(self):
        import torch.nn.functional as F
        self.F, self.orig = F, F.linear
        orig, f32 = self.orig, self.f32

        def linear(x, w, b=None):
            if w.untyped_storage().data_ptr() not in f32 and x.shape[-1] % 32 == 0:
                x = q8_act_roundtrip(x)
            return orig(x, w, b)
        F.linear = linear
        return self

    def __exit__(self, *exc):
        self.F.linear = self.orig


def run_q8act(model, meta_prompts, arrays, n_gen):
    """Replays every prompt with Q8_0 activations: teacher-forced over the fp32 greedy path (one
    uncached forward) and free-running greedy (cached, token by token)."""
    import torch
    W = model.lm_head.weight.detach().numpy()
    out, info, full = {}, [], []
    with Q8Activations(model), torch.no_grad():
        for pi, m in enumerate(meta_prompts):
            P = f"p{pi}."
            ids, gen = m["ids"], m["greedy_ids"]
            T = len(ids)
            tf = model(input_ids=torch.tensor([ids + gen[:-1]]), use_cache=False).logits[0].float().numpy()
            ref = arrays[P + "hidden"] @ W.T
            o = model(input_ids=torch.tensor([ids]), use_cache=True)
            cache, lg = o.cache, o.logits[0, -1].float().numpy()
            free = []
            for s in range(n_gen):
                free.append(int(np.argmax(lg)))
                if s == n_gen - 1:
                    break
                o = model(input_ids=torch.tensor([[free[-1]]]), cache=cache, use_cache=True)
                cache, lg = o.cache, o.logits[0, -1].float().numpy()
            ti, tv, tl, tm = logit_summary(tf)
            dabs = np.max(np.abs(tf - ref), -1)
            kl = kl_rows(ref, tf)
            out.update({P + "greedy_ids": np.asarray(free, np.int32), P + "top_ids": ti,
                        P + "top_logits": tv, P + "lse": tl, P + "margin": tm,
                        P + "max_abs_dlogit": dabs.astype(np.float32), P + "kl": kl.astype(np.float32)})
            agree = next((i for i in range(n_gen) if free[i] != gen[i]), n_gen)
            info.append({"name": m["name"], "greedy_agree_prefix": agree,
                         "max_abs_dlogit": float(dabs.max()), "median_abs_dlogit": float(np.median(dabs)),
                         "max_kl": float(kl.max()), "mean_kl": float(kl.mean()),
                         "argmax_agree_teacher_forced": f"{int((tf.argmax(-1) == ref.argmax(-1)).sum())}/{len(ref)}"})
            full.append(tf)
            log(f"q8act prompt {pi}: greedy agrees with fp32 for {agree}/{n_gen}, max|dlogit| {dabs.max():.3f}, "
                f"max KL {kl.max():.2e}")
    return out, info, full


# ----------------------------------------------------------------------------------------------
# 5. llama.cpp cross-check

def open_llama(path: Path, n_ctx: int):
    import llama_cpp
    import llama_cpp.llama as LL
    # No extra buffer types (AMX / CPU_REPACK): llama-cpp-python built with GGML_NATIVE=ON enables the
    # AMX kernels on a CPU that advertises AMX, and they die with SIGILL on our VMs.
    orig = LL.llama_cpp.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    LL.llama_cpp.llama_model_default_params = params
    try:
        return llama_cpp.Llama(model_path=str(path), logits_all=True, n_ctx=n_ctx, n_batch=n_ctx,
                               n_ubatch=n_ctx, n_threads=2, n_threads_batch=2, verbose=False, seed=0,
                               type_k=0, type_v=0, flash_attn=False)   # F32 KV cache
    finally:
        LL.llama_cpp.llama_model_default_params = orig


def run_llama_cpp(gguf_path: Path, meta_prompts: list, refs: dict, n_gen: int, store: bool = True):
    """refs: name -> list (per prompt) of full reference logits [N, V] along the fp32 greedy path.
    Returns (arrays, info). Teacher-forced = one batch over prompt + transformers' greedy tokens;
    free-running = prompt batch, then llama.cpp's own greedy tokens one at a time."""
    try:
        import llama_cpp
    except Exception as e:  # pragma: no cover
        log(f"llama-cpp-python not importable ({e}); skipping the llama.cpp cross-check")
        return {}, {"available": False, "reason": str(e)}
    n_ctx = max(len(m["ids"]) for m in meta_prompts) + n_gen + 16
    llm = open_llama(gguf_path, n_ctx)
    out: dict[str, np.ndarray] = {}
    info = {"available": True, "llama_cpp_python": llama_cpp.__version__, "gguf": gguf_path.name,
            "settings": "use_extra_bufts=false, KV cache F32, flash_attn off, n_threads 2", "prompts": []}
    for pi, m in enumerate(meta_prompts):
        P = f"p{pi}."
        ids, hf_gen = m["ids"], m["greedy_ids"]
        T = len(ids)
        llm.reset()
        llm.eval(ids + hf_gen[:-1])
        tf = np.array(llm.scores[:T + n_gen - 1], dtype=np.float32)
        llm.reset()
        llm.eval(ids)
        lg, gen = np.array(llm.scores[T - 1], dtype=np.float32), []
        for s in range(n_gen):
            gen.append(int(np.argmax(lg)))
            if s == n_gen - 1:
                break
            llm.eval([gen[-1]])
            lg = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        agree = next((i for i in range(n_gen) if gen[i] != hf_gen[i]), n_gen)
        pinfo = {"name": m["name"], "greedy_ids": gen, "greedy_agree_prefix_vs_fp32": agree}
        if agree < n_gen:
            pinfo["fp32_margin_at_first_divergence"] = m["greedy_margins"][agree]
        for rname, rlist in refs.items():
            ref = rlist[pi]
            dabs = np.max(np.abs(tf - ref), -1)
            kl = kl_rows(ref, tf)
            pinfo[f"vs_{rname}"] = {
                "max_abs_dlogit": float(dabs.max()), "median_abs_dlogit": float(np.median(dabs)),
                "max_kl": float(kl.max()), "mean_kl": float(kl.mean()),
                "argmax_agree_teacher_forced": f"{int((tf.argmax(-1) == ref.argmax(-1)).sum())}/{len(ref)}"}
            if store and rname == "fp32":
                out[P + "max_abs_dlogit"] = dabs.astype(np.float32)
                out[P + "kl"] = kl.astype(np.float32)
        if store:
            ti, tv, tl, _ = logit_summary(tf)
            out.update({P + "greedy_ids": np.asarray(gen, np.int32), P + "top_ids": ti,
                        P + "top_logits": tv, P + "lse": tl})
        info["prompts"].append(pinfo)
        log(f"llama.cpp [{gguf_path.name}] prompt {pi}: greedy agrees with fp32 for {agree}/{n_gen}; " +
            ", ".join(f"vs {k}: max|dlogit| {pinfo['vs_' + k]['max_abs_dlogit']:.3g} "
                      f"max KL {pinfo['vs_' + k]['max_kl']:.2g}" for k in refs))
    del llm
    return out, info


def run_llama_mtp(path: Path, meta_prompts: list, arrays: dict, W: np.ndarray) -> dict:
    """llama.cpp's own Qwen3-Next MTP graph (LLAMA_CONTEXT_TYPE_MTP, low-level API) fed with our
    pairs (hidden[p], token[p+1]) at position p+1, compared with our MTP oracle."""
    import ctypes
    import llama_cpp as L
    mp = L.llama_model_default_params()
    mp.use_extra_bufts = False
    mp.load_mtp = True
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path} with load_mtp")
    n_max = max(arrays[f"p{i}.mtp_hidden"].shape[0] for i in range(len(meta_prompts)))
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = n_max + 16
    cp.n_seq_max = 1
    cp.n_threads = cp.n_threads_batch = 2
    cp.ctx_type = L.LLAMA_CONTEXT_TYPE_MTP
    cp.type_k = cp.type_v = 0
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise RuntimeError("llama.cpp could not create an MTP context")
    V = W.shape[0]
    info = {"gguf": path.name, "prompts": []}
    try:
        for pi, m in enumerate(meta_prompts):
            P = f"p{pi}."
            h = np.ascontiguousarray(arrays[P + "hidden"], dtype=np.float32)
            toks = (m["ids"] + m["greedy_ids"])[1:]
            n = h.shape[0]
            L.llama_memory_clear(L.llama_get_memory(ctx), True)
            batch = L.llama_batch_init(n, 0, 1)
            try:
                batch.embd = h.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
                for i in range(n):
                    batch.token[i] = toks[i]
                    batch.pos[i] = i + 1
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = 1
                batch.n_tokens = n
                rc = L.llama_decode(ctx, batch)
                if rc != 0:
                    raise RuntimeError(f"llama_decode (MTP) returned {rc}")
                lg = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(n * V,)).reshape(n, V).copy()
            finally:
                batch.embd = ctypes.POINTER(ctypes.c_float)()   # ours, not llama.cpp's to free
                L.llama_batch_free(batch)
            ref = arrays[P + "mtp_hidden"] @ W.T
            dabs = np.max(np.abs(lg - ref), -1)
            kl = kl_rows(ref, lg)
            info["prompts"].append({
                "name": m["name"], "max_abs_dlogit": float(dabs.max()), "median_abs_dlogit": float(np.median(dabs)),
                "max_kl": float(kl.max()), "mean_kl": float(kl.mean()),
                "argmax_agree": f"{int((lg.argmax(-1) == ref.argmax(-1)).sum())}/{n}"})
            log(f"llama.cpp MTP [{path.name}] prompt {pi}: max|dlogit| {dabs.max():.3g}, max KL {kl.max():.2g}, "
                f"argmax agree {info['prompts'][-1]['argmax_agree']}")
    finally:
        L.llama_free(ctx)
        L.llama_model_free(model)
    return info


# ----------------------------------------------------------------------------------------------

def versions(llama_src: Path | None) -> dict:
    import tokenizers
    import torch
    import transformers
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "transformers": transformers.__version__, "numpy": np.__version__,
         "tokenizers": tokenizers.__version__}
    try:
        import gguf
        v["gguf_py"] = getattr(gguf, "__version__", None) or "see llama.cpp tree"
    except Exception:
        pass
    if llama_src is not None:
        v["llama_cpp_converter_commit"] = git_commit(llama_src)
        v["llama_cpp_converter_source"] = f"llama-cpp-python {LCP_VERSION} sdist, vendor/llama.cpp"
    return v


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), help="start from a named configuration")
    ap.add_argument("--name", help="output base name (default: the preset, else 'tiny-seed<seed>')")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures", help="output directory")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--experts", type=int)
    ap.add_argument("--topk", type=int)
    ap.add_argument("--moe-ff", type=int, dest="moe_ff")
    ap.add_argument("--shared-ff", type=int, dest="shared_ff")
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int, dest="kv_heads")
    ap.add_argument("--head-dim", type=int, dest="head_dim")
    ap.add_argument("--lin-k-heads", type=int, dest="lin_k_heads")
    ap.add_argument("--lin-v-heads", type=int, dest="lin_v_heads")
    ap.add_argument("--lin-k-dim", type=int, dest="lin_k_dim")
    ap.add_argument("--lin-v-dim", type=int, dest="lin_v_dim")
    ap.add_argument("--full-interval", type=int, dest="full_interval")
    ap.add_argument("--rope-theta", type=float, dest="rope_theta")
    ap.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=None,
                    help="add a random mtp.* block (converted into blk.<n_layer>.nextn.*)")
    ap.add_argument("--logit-gain", type=float, default=8.0, dest="logit_gain",
                    help="std of lm_head rows times sqrt(hidden) (sets the logit scale)")
    ap.add_argument("--router-gain", type=float, default=1.5, dest="router_gain")
    ap.add_argument("--mat-gain", type=float, default=0.7, dest="mat_gain",
                    help="std of every other matrix times sqrt(fan_in); 0.7 keeps the random net from "
                         "amplifying Q8_0-activation noise chaotically (at 1.0 fp32 vs Q8_0 activations "
                         "differ by KL ~0.1)")
    ap.add_argument("--norm-std", type=float, default=0.2, dest="norm_std")
    ap.add_argument("--prompts", type=Path, help="JSON list of {name, text} (default: built-in 5 prompts)")
    ap.add_argument("--n-gen", type=int, default=32, dest="n_gen")
    ap.add_argument("--full-logits-prompts", type=int, nargs="*", default=None, dest="full_logits_prompts",
                    help="prompt indices whose full prompt logits are stored verbatim (default: preset, else 0)")
    ap.add_argument("--tokenizer-dir", type=Path, default=DEFAULT_TOKENIZER_DIR, dest="tokenizer_dir")
    ap.add_argument("--llama-cpp-src", type=Path, dest="llama_src",
                    help="llama.cpp tree with convert_hf_to_gguf.py and gguf-py/ (env LLAMA_CPP_SRC)")
    ap.add_argument("--fetch-converter", action="store_true",
                    help=f"pip-download llama-cpp-python=={LCP_VERSION} sdist into ~/.cache/redlite and use it")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip the llama-cpp-python cross-check")
    ap.add_argument("--llama-cpp-only", action="store_true",
                    help="only (re)run the llama.cpp cross-check on existing OUT/NAME.{gguf,npz,json}")
    ap.add_argument("--q8act-dir", type=Path, dest="q8act_dir", help=argparse.SUPPRESS)
    ap.add_argument("--f32-gguf", type=Path, dest="f32_gguf", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help="keep the HF checkpoint here (default: temp dir, deleted)")
    a = ap.parse_args(argv)
    base = dict(PRESET_DEFAULTS, **PRESETS.get(a.preset or "tiny-a"))
    if a.preset is None:
        base["full_logits_prompts"] = [0]
    for k, v in base.items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    if a.name is None:
        a.name = a.preset or f"tiny-seed{a.seed}"
    return a


def dequant_output_weight(path: Path, gguf) -> np.ndarray:
    rd = gguf.GGUFReader(str(path))
    t = next(t for t in rd.tensors if t.name == "output.weight")
    w = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType(t.tensor_type))
    return np.asarray(w, dtype=np.float32).reshape(int(t.shape[1]), int(t.shape[0]))


def llama_loadable(src: Path, dst_dir: Path, gguf) -> tuple[Path, str | None]:
    """The GGUF llama.cpp is run on: src itself, or, for a trimmed vocabulary (trim_gguf drops the
    merges, and llama.cpp refuses a gpt2 vocabulary without a merges key), a copy in dst_dir under the
    same name with tokenizer.ggml.merges added: the Qwen3 merges (tests/fixtures/qwen3-vocab.gguf) whose
    two parts and result are all kept tokens. Merges only drive text tokenization, and the cross-check
    feeds token ids; every other key and every tensor byte is src's (checked here).
    Returns (path, a note for the record or None)."""
    rd = gguf.GGUFReader(str(src))
    if "tokenizer.ggml.merges" in rd.fields or rd.fields["tokenizer.ggml.model"].contents() != "gpt2":
        return src, None
    dst = dst_dir / src.name
    kept = set(rd.fields["tokenizer.ggml.tokens"].contents())
    full = gguf.GGUFReader(str(Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "qwen3-vocab.gguf"))
    merges = [m for m in full.fields["tokenizer.ggml.merges"].contents()
              if {*m.split(" ", 1), m.replace(" ", "", 1)} <= kept]
    w = gguf.GGUFWriter(str(dst), rd.fields["general.architecture"].contents())
    for fld in rd.fields.values():
        if fld.name.startswith("GGUF.") or fld.name == "general.architecture":
            continue
        vt = gguf.GGUFValueType(fld.types[0])
        sub = gguf.GGUFValueType(fld.types[-1]) if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(fld.name, fld.contents(), vt, sub_type=sub)
        if fld.name == "tokenizer.ggml.token_type":
            w.add_key_value("tokenizer.ggml.merges", merges, gguf.GGUFValueType.ARRAY,
                            sub_type=gguf.GGUFValueType.STRING)
    for t in rd.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=gguf.GGMLQuantizationType(t.tensor_type))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    cp = gguf.GGUFReader(str(dst))
    assert [(t.name, t.tensor_type, bytes(np.asarray(t.data).data)) for t in rd.tensors] == \
        [(t.name, t.tensor_type, bytes(np.asarray(t.data).data)) for t in cp.tensors], "tensor copy differs"
    assert {f.name for f in cp.fields.values()} == {f.name for f in rd.fields.values()} | {"tokenizer.ggml.merges"}
    return dst, (f"llama.cpp ran on a copy of the GGUF with tokenizer.ggml.merges added ({len(merges)} Qwen3 "
                 "merges within the kept tokens: the trimmed vocabulary has none and llama.cpp's loader "
                 "requires the key; ids are fed, no text is tokenized); every tensor byte and every other "
                 "key is the committed file's")


def llama_cpp_only(a, gguf) -> int:
    """Runs the llama.cpp cross-check on existing OUT/NAME.{gguf,npz,json} and updates npz + json.
    Run as a separate process by the main pipeline, so a llama.cpp abort cannot lose the oracle."""
    base = a.out / a.name
    gpath, npath, jpath = (base.parent / (base.name + ext) for ext in (".gguf", ".npz", ".json"))
    meta = json.loads(jpath.read_text())
    with np.load(npath) as z:
        arrays = {k: z[k] for k in z.files if not k.startswith("llama.")}
    W = dequant_output_weight(gpath, gguf)
    n = len(meta["prompts"])
    refs = {"fp32": [arrays[f"p{i}.hidden"] @ W.T for i in range(n)]}
    if a.q8act_dir is not None:
        refs["q8act"] = [np.load(a.q8act_dir / f"q8act_p{i}.npy") for i in range(n)]
    tmp = Path(tempfile.mkdtemp(prefix="rl-llama-"))
    try:
        lpath, note = llama_loadable(gpath, tmp, gguf)
        return llama_cpp_record(a, lpath, note, meta, arrays, refs, W, npath, jpath)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def llama_cpp_record(a, gpath, note, meta, arrays, refs, W, npath, jpath) -> int:
    """llama_cpp_only's runs on gpath (the fixture's GGUF or llama_loadable's copy) and the update."""
    la, info = run_llama_cpp(gpath, meta["prompts"], refs, meta["oracle"]["n_gen"])
    if not info.get("available"):
        raise SystemExit("make_fixtures: llama-cpp-python is not available")
    if note:
        info["gguf_note"] = note
    for pi, pinfo in enumerate(info["prompts"]):  # against the Q8_0-activation oracle (llama.cpp's arithmetic)
        q8 = arrays.get(f"p{pi}.q8act.greedy_ids")
        if q8 is not None:
            gen = pinfo["greedy_ids"]
            pinfo["greedy_agree_prefix_vs_q8act"] = next((i for i in range(len(gen)) if gen[i] != int(q8[i])),
                                                         len(gen))
    if a.f32_gguf is not None:
        _, info["f32_gguf"] = run_llama_cpp(a.f32_gguf, meta["prompts"], {"fp32": refs["fp32"]},
                                            meta["oracle"]["n_gen"], store=False)
        info["f32_gguf"]["gguf"] = "same checkpoint converted with --outtype f32 (not kept)"
    if meta["derived"].get("mtp"):
        info["mtp"] = {"what": "llama.cpp MTP graph (ctx_type MTP) on our (hidden[p], token[p+1]) pairs at "
                               "position p+1 vs our MTP oracle"}
        for key, gp in (("q8_0_gguf", gpath), ("f32_gguf", a.f32_gguf)):
            if gp is None:
                continue
            try:
                info["mtp"][key] = run_llama_mtp(gp, meta["prompts"], arrays, W)
            except Exception as e:  # keep the rest of the cross-check
                info["mtp"][key] = {"error": str(e)}
                log(f"llama.cpp MTP check failed on {gp.name}: {e}")
    arrays.update({"llama." + k: v for k, v in la.items()})
    np.savez_compressed(npath, **arrays)
    if a.q8act_dir is None:  # run on its own, on committed files: say how (the pipeline's is in "command")
        info["command"] = "make_fixtures.py --llama-cpp-only --name " + a.name + " (on the committed files; " \
                          "no q8act reference or f32 GGUF: those need the checkpoint)"
    meta["llama_cpp"] = info
    meta["npz"] = {"file": npath.name, "bytes": npath.stat().st_size}
    jpath.write_text(json.dumps(meta, indent=1, ensure_ascii=False, default=str) + "\n")
    log(f"updated {npath} and {jpath} with the llama.cpp cross-check")
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.llama_cpp_only:
        return llama_cpp_only(a, import_gguf(a.llama_src))
    llama_src = a.llama_src or (Path(os.environ["LLAMA_CPP_SRC"]) if os.environ.get("LLAMA_CPP_SRC") else None)
    if a.fetch_converter:
        llama_src = fetch_converter(Path.home() / ".cache" / "redlite")
    if llama_src is None or not (llama_src / "convert_hf_to_gguf.py").is_file():
        raise SystemExit("make_fixtures: need a llama.cpp tree with convert_hf_to_gguf.py: pass "
                         "--llama-cpp-src DIR or --fetch-converter (see tools/README.md)")
    gguf = import_gguf(llama_src)
    import torch
    from tokenizers import Tokenizer
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    prompts = json.loads(a.prompts.read_text()) if a.prompts else DEFAULT_PROMPTS
    tok = Tokenizer.from_file(str(a.tokenizer_dir / "tokenizer.json"))
    cfg = make_config(a)
    check_dims(cfg)
    if a.lin_k_dim != a.lin_v_dim and not a.no_llama_cpp:
        log("note: llama.cpp refuses linear key dim != value dim (it sizes attn_qkv from ssm.state_size); "
            "the llama.cpp cross-check will be recorded as failed")
    model, mtp = build_model(a, cfg, gguf)

    a.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="redlite-fixture-")) if a.workdir is None else a.workdir
    ckpt = tmp / "hf"
    try:
        save_checkpoint(model, mtp, cfg, a, ckpt, a.tokenizer_dir)
        out_gguf = a.out / f"{a.name}.gguf"
        # This converter asserts when a Qwen3-Next checkpoint has no mtp.* tensors unless --no-mtp is
        # given (real checkpoints always ship them); with mtp.* present it appends blk.<n_layer>.nextn.*
        conv_args = ["--model-name", a.name] + ([] if mtp else ["--no-mtp"])
        conv_log = convert(ckpt, out_gguf, llama_src, conv_args)
        (tmp / "convert.log").write_text(conv_log)

        # reload through transformers: the oracle runs on exactly what was saved (mtp.* ignored)
        cls_name, M = hf_causal_lm(a)
        m2 = getattr(M, cls_name).from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
        m2.set_experts_implementation("eager")
        m2.eval()
        sd_mem = model.state_dict()
        for k, v in m2.state_dict().items():
            if not torch.equal(v, sd_mem[k]):
                raise SystemExit(f"make_fixtures: reloaded weight {k} differs")
        model = m2
        sd = {k: v for k, v in model.state_dict().items()}

        exp = expected_gguf_tensors(sd, mtp, cfg)
        ginfo = verify_gguf(out_gguf, exp, gguf)
        names = ginfo["tensor_types"]
        generation = ("split attn_qkv+attn_gate" if any(n.endswith("attn_qkv.weight") for n in names)
                      else "legacy ssm_in" if any(n.endswith("ssm_in.weight") for n in names) else "none")

        trimmed = None
        if a.keep_vocab:  # small fixture: keep a few vocabulary rows (converter output checked above)
            keep = keep_ids(tok, prompts, a.keep_vocab)
            full = tmp / "full.gguf"
            shutil.move(out_gguf, full)
            trim_gguf(full, out_gguf, keep, gguf)
            model = trim_model(model, keep)
            tok = RemapTok(tok, keep)
            exp["token_embd.weight"] = exp["token_embd.weight"][keep]
            exp["output.weight"] = exp["output.weight"][keep]
            ginfo2 = verify_gguf(out_gguf, exp, gguf)
            ginfo["n_tensors"], ginfo["tensor_types"] = ginfo2["n_tensors"], ginfo2["tensor_types"]
            trimmed = {"kept_rows": len(keep), "of": VOCAB, "kept_ids": keep,
                       "what": "vocabulary trimmed after conversion (tools/make_fixtures.py trim_gguf): "
                               "token_embd/output rows and tokens of kept_ids, renumbered; merges dropped; "
                               "prompt ids are the renumbered ones"}
        arrays, meta_prompts, checks = run_oracle(model, cfg, a, prompts, tok, mtp)
        W = model.lm_head.weight.detach().numpy()
        qa, q8info, q8full = run_q8act(model, meta_prompts, arrays, a.n_gen)
        arrays.update({k.replace(".", ".q8act.", 1): v for k, v in qa.items()})
        llama_info = {"available": False, "reason": "--no-llama-cpp" if a.no_llama_cpp else "pending"}
        npz = a.out / f"{a.name}.npz"
        np.savez_compressed(npz, **arrays)
        cj = json.loads((ckpt / "config.json").read_text())
        meta = {
            "name": a.name,
            "format_version": 1,
            "generator": "tools/make_fixtures.py",
            "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:])),
            "seed": a.seed,
            "init": {"logit_gain": a.logit_gain, "router_gain": a.router_gain, "mat_gain": a.mat_gain,
                     "norm_std": a.norm_std},
            "versions": versions(llama_src),
            "hf_config": cj,
            "derived": {
                "n_layer": cfg.num_hidden_layers, "layer_types": cfg.layer_types,
                "full_attention_layers": [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"],
                "rope_dims": int(cfg.head_dim * 0.25), "rope_theta": float(a.rope_theta),
                "attn_scale": 1.0 / math.sqrt(cfg.head_dim),
                "linear_key_dim": cfg.linear_num_key_heads * cfg.linear_key_head_dim,
                "linear_value_dim": cfg.linear_num_value_heads * cfg.linear_value_head_dim,
                "conv_dim": 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim
                            + cfg.linear_num_value_heads * cfg.linear_value_head_dim,
                "mtp": bool(mtp), "mtp_block": cfg.num_hidden_layers if mtp else None,
                "arch": a.arch, "vocab_trim": trimmed,
            },
            "gguf": {
                "file": out_gguf.name, "bytes": out_gguf.stat().st_size, "sha256": sha256_file(out_gguf),
                "converter_args": ["--outtype", "q8_0", *conv_args],
                "linear_attn_generation": generation,
                "n_tensors": ginfo["n_tensors"], "type_census": ginfo["type_census"],
                "tensor_types": ginfo["tensor_types"], "metadata": ginfo["metadata"],
                "readback_max_abs_diff_vs_hf": ginfo["readback_max_abs_diff"],
            },
            "oracle": {
                "engine": f"transformers {hf_causal_lm(a)[0]}, fp32, attn eager, experts eager, CPU",
                "n_gen": a.n_gen, "topk_stored": TOPK_STORE,
                "checks": checks,
                "q8act": {"what": "same model, every activation entering a Q8_0-stored matrix rounded to "
                                  "Q8_0 like ggml's CPU mat-mul (routers/shared gate/conv stay fp32)",
                          "prompts": q8info},
                "min_greedy_margin_all_prompts": min(m["min_greedy_margin"] for m in meta_prompts),
            },
            "prompts": meta_prompts,
            "llama_cpp": llama_info,
            "npz": {"file": npz.name, "bytes": npz.stat().st_size},
        }
        (a.out / f"{a.name}.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False, default=str) + "\n")
        log(f"wrote {out_gguf} ({out_gguf.stat().st_size / 1e6:.1f} MB), {npz} "
            f"({npz.stat().st_size / 1e6:.1f} MB), {a.out / (a.name + '.json')}")
        if not a.no_llama_cpp:
            for i, lg in enumerate(q8full):
                np.save(tmp / f"q8act_p{i}.npy", lg)
            f32 = tmp / f"{a.name}-f32.gguf"
            convert(ckpt, f32, llama_src, conv_args, outtype="f32")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--llama-cpp-only", "--name", a.name,
                   "--out", str(a.out), "--llama-cpp-src", str(llama_src), "--q8act-dir", str(tmp),
                   "--f32-gguf", str(f32)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                sys.stderr.write(r.stderr[-3000:])
                jp = a.out / f"{a.name}.json"
                m = json.loads(jp.read_text())
                m["llama_cpp"] = {"available": False,
                                  "reason": f"llama.cpp cross-check process failed (rc {r.returncode}): "
                                            + r.stderr.strip()[-400:]}
                jp.write_text(json.dumps(m, indent=1, ensure_ascii=False, default=str) + "\n")
                log("llama.cpp cross-check FAILED; fixture kept without it (see llama_cpp.reason)")
    finally:
        if a.workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
