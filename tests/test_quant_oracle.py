"""Bit-exact oracle test of our dequantisers (src/quant*.c) against the `gguf` package.

For every type that gguf.quants can dequantise we build random blocks whose fp16 scale fields
hold random finite normal values (|d| in 1e-3 .. 1e-1, random sign) and whose other bytes are
random, dequantise them with gguf's numpy code and with our C code (through the
$(BUILD)/tools/rl_dequant bridge, tests/c/tool_dequant.c), and require the float32 results to be
BIT-identical (compared as uint32); MXFP4's E8M0 exponent byte gets realistic values plus the
subnormal and largest finite scales. Quantisers that gguf also implements (Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1, BF16, F16, MXFP4) are checked byte-for-byte the same way. Finally the generated lookup
tables (src/quant_tables.{h,c}) must equal a fresh run of tools/gen_quant_tables.py.

The build directory defaults to build/ (what `make test` uses); set RL_BUILD to test another.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402
import gguf.quants as gq  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("RL_BUILD", os.path.join(ROOT, "build"))
TOOL = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "tools", "rl_dequant")

N_BLOCKS = 64
SEEDS = [1, 2, 3, 4]

# Byte offsets (inside one block) of the fp16 scale fields: they get realistic finite values.
FP16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "IQ4_NL": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_XS": [0], "IQ3_XXS": [0], "IQ3_S": [0], "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0],
    "IQ1_S": [0], "IQ1_M": [],  # IQ1_M: d is spread over the scale words, see random_blocks
    "MXFP4": [],  # MXFP4: an E8M0 exponent byte, see random_blocks
}
QUANT_TYPES = list(FP16_FIELDS)
# Types our C code can quantise that gguf can too (bit-exact reference quantisers).
FROM_FLOAT_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "MXFP4"]


def run_tool(args, stdin):
    assert os.path.exists(TOOL), f"{TOOL} missing: run `make all` (or set RL_BUILD)"
    r = subprocess.run([TOOL, *args], input=stdin, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def random_fp16(rng, n):
    """n random finite normal fp16 values with |v| in [1e-3, 1e-1], random sign, as uint16."""
    mag = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), n)).astype(np.float16)
    sign = rng.choice(np.array([-1, 1], dtype=np.float16), n)
    return (mag * sign).astype(np.float16).view(np.uint16)


def random_blocks(name, seed, n_blocks=N_BLOCKS):
    qtype = T[name]
    _, type_size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed * 1000 + int(qtype))
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in FP16_FIELDS[name]:
        blocks[:, off:off + 2] = random_fp16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if name == "IQ1_M":
        # scales = four LE u16 at byte 48; their top nibbles form d (nibble k = bits 4k..4k+3).
        d = random_fp16(rng, n_blocks).astype(np.uint16)
        sc = blocks[:, 48:56].copy().view(np.uint16).reshape(n_blocks, 4)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
        blocks[:, 48:56] = sc.view(np.uint8).reshape(n_blocks, 8)
    if name == "MXFP4":
        # byte 0 = E8M0 exponent e (the halved scale 2^(e-128)): realistic 2^-24 .. 2^4, plus the
        # subnormal e = 0, 1, 2 and the largest e whose values stay finite (12 * 2^124) in the first blocks
        blocks[:, 0] = rng.integers(104, 133, size=n_blocks, dtype=np.uint8)
        blocks[:4, 0] = [0, 1, 2, 252][:min(4, n_blocks)]
    return blocks


def c_dequant(name, blocks):
    block_size, _ = GGML_QUANT_SIZES[T[name]]
    n = blocks.shape[0] * block_size
    out = run_tool([name, str(n)], blocks.tobytes())
    return np.frombuffer(out, dtype=np.float32)


def assert_bits_equal(ours, ref, what):
    ref = np.ascontiguousarray(ref, dtype=np.float32).reshape(-1)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs {ref.shape}"
    assert np.all(np.isfinite(ref)), f"{what}: reference has non-finite values (bad test input)"
    diff = np.nonzero(ours.view(np.uint32) != ref.view(np.uint32))[0]
    assert diff.size == 0, (f"{what}: {diff.size} of {ref.size} values differ; first at {diff[0]}: "
                            f"ours {ours[diff[0]]!r} ref {ref[diff[0]]!r}")


def test_sizes_match_gguf():
    """Our block sizes (through the tool's row-size check) agree with gguf's table."""
    for name in QUANT_TYPES:
        block_size, type_size = GGML_QUANT_SIZES[T[name]]
        out = run_tool([name, str(block_size)], bytes(random_blocks(name, 0, 1).tobytes()))
        assert len(out) == 4 * block_size, name


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", QUANT_TYPES)
def test_dequant_bit_exact(name, seed):
    blocks = random_blocks(name, seed)
    ref = gq.dequantize(blocks, T[name])
    assert_bits_equal(c_dequant(name, blocks), ref, name)


@pytest.mark.parametrize("name", ["F32", "F16", "BF16"])
def test_float_types_bit_exact(name):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(4096) * np.exp(rng.uniform(-8, 8, 4096))).astype(np.float32)
    if name == "F32":
        raw = x.view(np.uint8)
        ref = x
    elif name == "F16":
        h = x.astype(np.float16)
        h = np.where(np.isfinite(h), h, np.float16(1.5))
        raw, ref = h.view(np.uint8), h.astype(np.float32)
    else:
        raw = gq.quantize(x, T.BF16)
        ref = gq.dequantize(raw, T.BF16)
    out = run_tool([name, str(x.size)], raw.tobytes())
    assert_bits_equal(np.frombuffer(out, dtype=np.float32), ref, name)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", FROM_FLOAT_TYPES + ["F16"])
def test_from_float_bit_exact(name, seed):
    rng = np.random.default_rng(seed)
    n = 32 * N_BLOCKS
    x = (rng.standard_normal(n) * np.repeat(np.exp(rng.uniform(-6, 3, N_BLOCKS)), 32)).astype(np.float32)
    x[:32] = 0.0  # an all-zero block (d = 0 path)
    if name == "F16":
        ref = x.astype(np.float16).view(np.uint8)
    else:
        ref = gq.quantize(x, T[name]).reshape(-1)
    ours = np.frombuffer(run_tool(["-q", name, str(n)], x.tobytes()), dtype=np.uint8)
    assert ours.size == ref.size, name
    bad = np.nonzero(ours != ref)[0]
    assert bad.size == 0, f"{name}: {bad.size} bytes differ, first at {bad[0]}"


def test_tables_match_package(tmp_path):
    """src/quant_tables.* equal a fresh generation from the installed gguf package."""
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_quant_tables.py"), "--out", str(tmp_path)],
                   check=True)
    for f in ("quant_tables.h", "quant_tables.c"):
        with open(os.path.join(ROOT, "src", "gguf", f)) as a, open(tmp_path / f) as b:
            assert a.read() == b.read(), f"src/gguf/{f} is stale: rerun tools/gen_quant_tables.py"


def test_tables_decode_like_package():
    """Independent check of the table encoding: parse src/gguf/quant_tables.c and compare each grid
    entry's bytes with gguf's expanded float grid (catches a wrong byte order in the generator)."""
    import re
    src = open(os.path.join(ROOT, "src", "gguf", "quant_tables.c")).read()

    def arr(name):
        m = re.search(r"\b" + name + r"\[\d+\] = \{(.*?)\};", src, re.S)
        assert m, name
        return [int(v, 0) for v in m.group(1).replace("\n", " ").split(",") if v.strip()]

    for name, cls, k in [("iq2xxs_grid", gq.IQ2_XXS, 8), ("iq2xs_grid", gq.IQ2_XS, 8), ("iq2s_grid", gq.IQ2_S, 8),
                         ("iq3xxs_grid", gq.IQ3_XXS, 4), ("iq3s_grid", gq.IQ3_S, 4), ("iq1s_grid", gq.IQ1_S, 8)]:
        cls.init_grid()
        ref = np.asarray(cls.grid).reshape(cls.grid_shape)
        vals = arr(name)
        assert len(vals) == ref.shape[0], name
        got = np.array([[np.int8(np.uint8((v >> (8 * j)) & 0xFF)) for j in range(k)] for v in vals], dtype=np.float32)
        assert np.array_equal(got, ref), name
    assert arr("ksigns_iq2xs") == list(gq.IQ2_XXS.ksigns)
    assert arr("kvalues_iq4nl") == list(gq.IQ4_NL.kvalues)
    assert arr("kvalues_mxfp4") == list(gq.MXFP4.kvalues)
    assert arr("kmask_iq2xs") == [1 << j for j in range(8)]
