"""--vram-mib on the command line (the VRAM expert tier; docs/EXPERT_CACHE.md "VRAM tier").

Without a GPU only the front door can be checked here: the syntax (exit 2, one line), the CPU
backend refusing the option (exit 1, one line saying to use --backend cuda or --cache-mib), and
that every command taking a model lists it in --help. The tier itself runs in
tests/cuda/test_cuda_vram.c on a GPU (bench/cuda_check.sh vram).
"""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("RL_BUILD", REPO / "build"))
BIN = BUILD / "redlite"
MODEL = REPO / "tests" / "fixtures" / "tiny-a.gguf"


def rl(*args):
    if not BIN.exists():
        pytest.fail(f"{BIN} is not built (make)")
    return subprocess.run([str(BIN), *args], capture_output=True, cwd=REPO, timeout=120)


def last_line(r):
    lines = r.stderr.decode(errors="replace").strip().splitlines()
    assert lines, "no error message"
    return lines[-1]


@pytest.mark.parametrize("bad", ["0", "-3", "12x", "lots", ""])
def test_vram_mib_syntax_is_a_usage_error(bad):
    r = rl("generate", "-m", str(MODEL), "--vram-mib", bad, "-p", "hi", "-n", "1")
    assert r.returncode == 2, r.stderr
    line = last_line(r)
    assert line.startswith("redlite generate: ") and "--vram-mib" in line and "auto, full" in line, line


@pytest.mark.parametrize("cmd", ["generate", "dump", "bench"])
def test_vram_mib_on_the_cpu_backend_is_refused(cmd):
    extra = {"generate": ["-p", "hi", "-n", "1"], "dump": ["--tokens", "1,2"], "bench": ["--prompt", "0", "--n-decode", "1"]}
    r = rl(cmd, "-m", str(MODEL), "--backend", "cpu", "--vram-mib", "4096", *extra[cmd])
    assert r.returncode == 1, r.stderr
    line = last_line(r)
    assert line.startswith(f"redlite {cmd}: ") and "--vram-mib needs a GPU backend" in line, line


@pytest.mark.parametrize("cmd", ["generate", "chat", "bench", "dump", "perplexity"])
def test_vram_mib_in_help(cmd):
    r = rl(cmd, "--help")
    assert r.returncode == 0
    assert "--vram-mib N|auto|full" in r.stdout.decode(), cmd
