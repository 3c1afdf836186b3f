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
    extra = {"generate": ["-p", "hi", "-n", "1"], "dump": ["--tokens", "1,2", "--json"], "bench": ["--prompt", "0", "--n-decode", "1"]}
    r = rl(cmd, "-m", str(MODEL), "--backend", "cpu", "--vram-mib", "4096", *extra[cmd])
    assert r.returncode == 1, r.stderr
    line = last_line(r)
    assert line.startswith(f"redlite {cmd}: ") and "--vram-mib needs a GPU backend" in line, line


@pytest.mark.parametrize("cmd", ["generate", "chat", "bench", "dump", "perplexity"])
def test_vram_mib_in_help(cmd):
    r = rl(cmd, "--help")
    assert r.returncode == 0
    assert "--vram-mib N|auto|full" in r.stdout.decode(), cmd


@pytest.mark.parametrize("flag,bad,choices", [("--vram-pin", "yes", "auto, on or off"), ("--vram-pin", "", "auto, on or off"),
                                              ("--vram-miss", "gpu", "copy, cpu or auto")])
def test_vram_pin_miss_syntax_is_a_usage_error(flag, bad, choices):
    r = rl("generate", "-m", str(MODEL), flag, bad, "-p", "hi", "-n", "1")
    assert r.returncode == 2, r.stderr
    line = last_line(r)
    assert line.startswith("redlite generate: ") and flag in line and choices in line, line


@pytest.mark.parametrize("cmd", ["generate", "chat", "bench", "dump", "perplexity", "serve"])
def test_vram_options_in_help(cmd):
    r = rl(cmd, "--help")
    assert r.returncode == 0
    out = r.stdout.decode()
    for opt in ("--vram-mib N|auto|full", "--vram-pin auto|on|off", "--vram-miss copy|cpu|auto"):
        assert opt in out, (cmd, opt)
    # every --vram-miss mode is exact (the CPU takes only experts it gives the GPU's bits), and the help
    # says so instead of the old warning
    assert "same output" in out and "CHANGE OUTPUTS" not in out


def test_serve_vram_mib_reaches_the_session():
    """serve passes --vram-mib down to the session like the other commands: on the CPU backend
    the engine refuses it (exit 1, one line) before the server listens."""
    r = rl("serve", "-m", str(MODEL), "--backend", "cpu", "--vram-mib", "4096", "--vram-miss", "cpu", "--port", "0")
    assert r.returncode == 1, r.stderr
    line = last_line(r)
    assert line.startswith("redlite serve: ") and "--vram-mib needs a GPU backend" in line, line


@pytest.mark.parametrize("cmd", ["chat", "perplexity"])
def test_vram_mib_reaches_the_session_in_chat_and_perplexity(cmd, tmp_path):
    extra = {"chat": [], "perplexity": ["-f", str(REPO / "README.md")]}
    r = subprocess.run([str(BIN), cmd, "-m", str(MODEL), "--backend", "cpu", "--vram-mib", "2048", *extra[cmd]],
                       capture_output=True, cwd=REPO, timeout=120, input=b"")
    assert r.returncode == 1, r.stderr
    line = last_line(r)
    assert line.startswith(f"redlite {cmd}: ") and "--vram-mib needs a GPU backend" in line, line
