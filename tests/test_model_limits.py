"""File-derived limits (src/model/qwen3next.c, HP_KEYS and load_hparams; src/model/qwen3next.h Q3N_MAX_*).

Every hyperparameter that sizes a buffer, a loop or a kernel comes from the GGUF file, so each is
checked when the model is opened. A file with a value out of range must be refused by both
`redlite info` (which otherwise describes files without binding them) and `redlite generate`,
with exit status 1 and one line on stderr naming the file, the key and the value — never an
assert, a crash or a silent overflow.

The files are a synthetic tiny model with its MTP block (`redlite synth --preset tiny --mtp`) with one metadata value
rewritten in place by gguf-py (GGUFReader in r+ mode), so everything else stays valid.
"""
import os
import shutil
import subprocess

import pytest

gguf = pytest.importorskip("gguf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))

# tiny preset: hidden 256, 4 layers + MTP block, heads 4/2, head_dim 64, rope 16, 16 experts top-4, expert ff
# 256, ssm groups 2 / dt_rank 4 / state 64 / inner 256, conv 4
CASES = [
    ("expert_count", 2000, "qwen3next.expert_count = 2000 is out of range (1..1024)"),
    ("expert_count", 0, "qwen3next.expert_count = 0 is out of range (1..1024)"),
    ("expert_used_count", 17, "qwen3next.expert_used_count = 17 exceeds expert_count"),
    ("attention.key_length", 4096, "qwen3next.attention.key_length = 4096 is out of range (2..1024)"),
    ("attention.key_length", 63, "qwen3next.attention.key_length = 63 must be even"),
    ("block_count", 1000, "qwen3next.block_count = 1000 is out of range (1..128)"),
    ("embedding_length", 0, "qwen3next.embedding_length = 0 is out of range (1..8192)"),
    ("embedding_length", 4000000000, "qwen3next.embedding_length = 4000000000 is out of range"),
    ("attention.head_count", 3, "qwen3next.attention.head_count = 3 is not a multiple of head_count_kv"),
    ("ssm.time_step_rank", 3, "qwen3next.ssm.time_step_rank = 3 is not a multiple of ssm.group_count"),
    ("ssm.inner_size", 250, "qwen3next.ssm.inner_size = 250 is not a multiple of ssm.time_step_rank"),
    ("rope.dimension_count", 15, "qwen3next.rope.dimension_count = 15 must be even and at most key_length"),
    ("rope.dimension_count", 128, "qwen3next.rope.dimension_count = 128 must be even and at most key_length"),
    ("nextn_predict_layers", 2, "qwen3next.nextn_predict_layers = 2 is out of range (0..1)"),
    ("expert_feed_forward_length", 20000, "qwen3next.expert_feed_forward_length = 20000 is out of range"),
    ("ssm.conv_kernel", 1, "qwen3next.ssm.conv_kernel = 1 is out of range (2..64)"),
    ("ssm.state_size", 5000, "qwen3next.ssm.state_size = 5000 is out of range (1..1024)"),
    ("attention.head_count", 512, "tensor attn_output.weight would have rows of 32768 values, more than the "
     "kernels' 16384"),
    ("full_attention_interval", 0, "qwen3next.full_attention_interval = 0 is out of range (1..128)"),
    ("context_length", 0, "qwen3next.context_length = 0 is out of range"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("lim") / "tiny.gguf"
    r = subprocess.run([BIN, "synth", "--preset", "tiny", "--mtp", "-o", str(path), "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return path


def with_value(src, dst, key, value):
    shutil.copy(src, dst)
    r = gguf.GGUFReader(str(dst), "r+")
    f = r.fields["qwen3next." + key]
    f.parts[f.data[0]][0] = value
    del r  # flush the memory map
    return str(dst)


def refused(args, path, msg):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, f"{args[0]} exit {r.returncode}, stderr: {r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"{args[0]}: expected one line, got: {r.stderr}"
    assert lines[0].startswith(f"redlite {args[0]}: {path}: ") and msg in lines[0], lines[0]


@pytest.mark.parametrize("key,value,msg", CASES, ids=[f"{k}={v}" for k, v, _ in CASES])
def test_out_of_range_refused(tmp_path, tiny, key, value, msg):
    path = with_value(tiny, tmp_path / "bad.gguf", key, value)
    refused(["info", path], path, msg)
    refused(["generate", "-m", path, "-p", "hi", "-n", "1"], path, msg)


def test_unmodified_file_is_accepted(tiny):
    """The control: the same file without the rewrite opens (so the refusals above are the values)."""
    r = subprocess.run([BIN, "info", str(tiny)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([BIN, "generate", "-m", str(tiny), "-p", "hi", "-n", "1"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_shape_disagreeing_with_metadata_refused_at_binding(tmp_path, tiny):
    """In range but inconsistent with the tensors: info describes it with a "does not run" verdict
    naming the tensor (exit 1), generate refuses it."""
    path = with_value(tiny, tmp_path / "ff.gguf", "expert_feed_forward_length", 512)
    r = subprocess.run([BIN, "info", path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "architecture" in r.stdout, r.stderr
    assert "tensor blk.0.ffn_gate_exps.weight has shape {256,256,16}, expected {256,512,16}" in r.stdout + r.stderr
    refused(["generate", "-m", path, "-p", "hi", "-n", "1"], path,
            "tensor blk.0.ffn_gate_exps.weight has shape {256,256,16}, expected {256,512,16}")
