"""Synth determinism: the bytes of `redlite synth` are a contract (src/model/synth.h, "Determinism";
src/model/synth_gen.c, "Determinism across compilers and flags").

A synthetic model stands in for a real one in benchmarks, cache simulations and bug reports, so
two people (or one person with two builds) must get the same file from the same preset, geometry
and seed. This used to fail: an ASan/UBSan build wrote other IQ2_XS scale nibbles than the normal
build (two random draws in one expression, whose order C leaves unspecified), and a build allowed
to fuse a*b+c into FMAs (-march=native -ffp-contract=fast, clang) wrote other norm vectors.

Checks:
- thread counts 1, 2 and 3 give the same bytes, and the tiny preset's sha256 is the committed
  one below. That checksum is not a hard-coded result of a computation under test: it is the
  determinism contract itself (any change of the generator that changes the bytes must update
  it knowingly; a compiler, flag set or platform that changes them is a bug). It assumes IEEE
  binary32/64 and glibc's libm (logf/expf/expm1f/cosf feed the norm and SSM vectors).
- the synth modules compiled by themselves (tests/c/tool_synth.c + synth, synth_gen, qwen3next
  (the tensor table), gguf, gguf_meta, gguf_write, quant*, pool, common; the rest linked from
  build/libredlite.a) under other flag sets and compilers write the same bytes as build/redlite,
  for the tiny, iq2_xxs and q4_k_m presets (the last two at a small geometry): -O0; -O3
  -march=native -ffp-contract=fast; -O1 with UBSan (aborting on any finding); clang -O2
  -march=native -ffp-contract=fast when clang is installed.
"""
import glob
import hashlib
import os
import shutil
import subprocess

import pytest

from oracle_util import file_sha256 as sha256

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))

# sha256 of `redlite synth --preset tiny --seed 1` (the determinism contract, see above)
TINY_SHA256 = "a7d24666138d0e5a916351b2cf664eede0a5d52cfc998253f960a3881ffa723a"

SMALL = ("hidden=256,layers=4,vocab=1024,ff=512,heads=4,kv_heads=2,head_dim=64,rope_dims=16,"
         "experts=8,top_k=2,expert_ff=256,shared_ff=256,state=64,groups=2,dt_rank=4,inner=256")
PRESETS = [("tiny", None), ("iq2_xxs", SMALL), ("q4_k_m", SMALL)]
# compiled under the flag set: everything synth's bytes pass through (of qwen3next, the tensor
# table in qwen3next.c; the forward pass is qwen3next_forward.c); the rest comes from
# build/libredlite.a
SRCS = ["tests/c/tool_synth.c", "src/model/synth.c", "src/model/synth_gen.c", "src/model/qwen3next.c", "src/base/common.c",
        "src/gguf/gguf.c", "src/gguf/gguf_meta.c", "src/gguf/gguf_write.c", "src/base/pool.c", "src/gguf/quant.c", "src/gguf/quant_iq.c",
        "src/gguf/quant_k.c", "src/gguf/quant_tables.c"]
LIB = os.path.join(ROOT, "build", "libredlite.a")


def synth_cli(path, preset, geometry, threads):
    args = [BIN, "synth", "--preset", preset, "-o", str(path), "--quiet", "-t", str(threads)]
    if geometry:
        args += ["--geometry", geometry]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return sha256(path)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """sha256 per preset from build/redlite (3 threads)."""
    d = tmp_path_factory.mktemp("ref")
    return {p: synth_cli(d / f"{p}.gguf", p, g, 3) for p, g in PRESETS}


def test_tiny_matches_contract_at_every_thread_count(tmp_path):
    shas = {t: synth_cli(tmp_path / f"t{t}.gguf", "tiny", None, t) for t in (1, 2, 3)}
    assert len(set(shas.values())) == 1, f"thread count changes the bytes: {shas}"
    assert shas[1] == TINY_SHA256, (
        "synth --preset tiny no longer writes the committed bytes: a generator change must update "
        "TINY_SHA256 knowingly; otherwise this build (compiler, flags, libm) is not deterministic")


def test_other_presets_thread_count(tmp_path, reference):
    for p, g in PRESETS[1:]:
        assert synth_cli(tmp_path / f"{p}.gguf", p, g, 1) == reference[p], p


FLAG_SETS = [
    ("cc", ["-O0"]),
    ("cc", ["-O3", "-march=native", "-ffp-contract=fast"]),
    ("cc", ["-O1", "-fsanitize=undefined", "-fno-sanitize-recover=all"]),
    ("clang", ["-O2", "-march=native", "-ffp-contract=fast"]),
]


def built(cmd, tmp_path):
    """The tool built by cmd (+ -o), kept in build/synth-flags under a hash of everything the build
    reads: the command, the compiler's identity (--version), this CPU's flags (-march=native), the
    sources, every header of src/ and tests/c/, and the library's bytes. The same inputs give the same binary, so a rerun of the suite
    does not compile the four flag sets again (~2-4 s each on 2 cores); any change compiles afresh."""
    h = hashlib.sha256(repr(cmd).encode())
    h.update(subprocess.run([cmd[0], "--version"], capture_output=True).stdout)
    try:  # -march=native: the CPU is an input too
        h.update(next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).encode())
    except (OSError, StopIteration):
        pass
    deps = sorted({*SRCS, *(os.path.relpath(p, ROOT) for d in ("src", "tests/c")
                            for p in glob.glob(os.path.join(ROOT, d, "**", "*.h"), recursive=True))})
    for f in deps + [LIB]:
        h.update(f.encode())
        h.update(open(os.path.join(ROOT, f), "rb").read())
    exe = os.path.join(ROOT, "build", "synth-flags", h.hexdigest()[:32], "tool_synth")
    if not os.path.exists(exe):
        tmp = str(tmp_path / "tool_synth")
        r = subprocess.run(cmd + ["-o", tmp], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{' '.join(cmd[:8])} failed to build the synth modules:\n{r.stderr[-3000:]}"
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        shutil.copy2(tmp, exe + ".tmp")
        os.replace(exe + ".tmp", exe)  # whole or absent
    return exe


@pytest.mark.parametrize("cc,flags", FLAG_SETS, ids=[f"{c} {' '.join(f)}" for c, f in FLAG_SETS])
def test_same_bytes_under_other_flags(tmp_path, reference, cc, flags):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    cmd = [cc, "-std=c11", *flags, "-g0", "-D_GNU_SOURCE", "-pthread", "-Isrc", *SRCS, LIB, "-lutf8proc", "-lcjson",
           "-lm"]
    exe = built(cmd, tmp_path)
    for p, g in PRESETS:
        out = tmp_path / f"{p}.gguf"
        r = subprocess.run([str(exe), p, "1", "2", str(out)] + ([g] if g else []), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"{p}: {r.stderr[-2000:]}"
        assert sha256(out) == reference[p], f"{cc} {' '.join(flags)} writes other bytes for preset {p}"
