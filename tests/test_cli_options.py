"""Commands that behave alike (issue 49 item 4, issue 44 item 4), on the real binary.

One option table serves every command (src/cli/opts.c): llama.cpp's spellings are accepted where
they mean the same and answered with a one-line pointer where another option does it; environment
variables mirror the flags users expect (the flag wins); generate, chat and serve share one set of
sampling defaults; `redlite version` names the commit and the CPU features detected at run time;
every usage conflict exits 2 with one line; warnings for a context past the trained one and for a
server reachable from the network without a key; progress of a long prompt as log lines when
stderr is not a terminal.
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("RL_BUILD", REPO / "build"))
BIN = BUILD / "redlite"
MODEL = REPO / "models" / "default.gguf"


@pytest.fixture(scope="module")
def model():
    if not BIN.exists():
        pytest.fail(f"{BIN} is not built (make)")
    return str(MODEL)


def rl(*args, env=None, stdin=b""):
    e = {k: v for k, v in os.environ.items() if not k.startswith("REDLITE_")}
    e.update(env or {})
    return subprocess.run([str(BIN), *map(str, args)], input=stdin, capture_output=True, cwd=REPO, env=e,
                          timeout=300)


def gen_json(model, *args, env=None):
    r = rl("generate", "-m", model, "--json", *args, env=env)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout), r.stderr.decode()


def one_line(r, cmd):
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"redlite {cmd}: "), lines
    return lines[0]


# ---- llama.cpp spellings ---------------------------------------------------------------------


def test_llama_aliases_mean_the_same(model):
    base, _ = gen_json(model, "-p", "hi", "-n", "3", "-c", "256")
    same, err = gen_json(model, "-p", "hi", "--n-predict", "3", "--ctx-size", "256", "--threads", "2", "--no-mmap")
    assert same["generated_ids"] == base["generated_ids"]
    assert err == ""  # exact aliases say nothing
    # -sys is --system: the same prompt ids
    a, _ = gen_json(model, "-p", "hi", "-n", "1", "--system", "Be brief.")
    b, _ = gen_json(model, "-p", "hi", "-n", "1", "-sys", "Be brief.")
    assert a["prompt_ids"] == b["prompt_ids"]


def test_mmap_spellings_set_the_weights_option(model):
    common = ["bench", "-m", model, "--prompt", "0", "--n-decode", "2", "--reps", "1", "--warmup", "0", "--json"]

    def weights(*flags):  # where the weights live, without the copy's time
        return re.sub(r"[\d.]+ s\b", "", json.loads(rl(*common, *flags).stdout)["weights"])

    w_map, w_copy = weights("--mmap"), weights("--mlock")
    assert "--weights map" in w_map and w_map == weights("--weights", "map")
    assert w_copy == weights("--weights", "copy") == weights("--no-mmap") != w_map


@pytest.mark.parametrize("args", [["-fa"], ["-fa", "on"], ["--flash-attn", "auto"], ["--flash-attn=off"]])
def test_flash_attn_is_ignored_with_a_note(model, args):
    r = rl("generate", "-m", model, "-p", "hi", "-n", "1", *args)
    assert r.returncode == 0, r.stderr  # its optional value is taken, not left as a stray argument
    assert r.stderr.decode().count("note: -fa is ignored" if args[0] == "-fa" else "note: --flash-attn") == 1


HINTS = [
    (["-ngl", "99"], ["--backend cuda", "--vram-mib"]),
    (["--n-gpu-layers", "99"], ["--backend cuda", "--vram-mib"]),
    (["--n-cpu-moe", "20"], ["--vram-mib"]),
    (["-ctk", "q8_0"], ["--kv f16|f32"]),
    (["-ub", "512"], ["-b N"]),
    (["-hf", "Qwen/x"], ["hf download"]),
]


@pytest.mark.parametrize("cmd", ["generate", "serve", "bench"])
@pytest.mark.parametrize("args,words", HINTS, ids=[h[0][0] for h in HINTS])
def test_llama_flags_without_equivalent_get_a_pointer(model, cmd, args, words):
    extra = ["-p", "x"] if cmd == "generate" else []
    r = rl(cmd, "-m", model, *extra, *args)
    assert r.returncode == 2 and r.stdout == b""
    line = one_line(r, cmd)
    assert line.startswith(f"redlite {cmd}: {args[0]} is llama.cpp's: "), line
    for w in words:
        assert w in line, line


def test_help_lists_the_spellings_and_environment(model):
    out = rl("generate", "--help").stdout.decode()
    assert "llama.cpp spellings" in out and "-ngl, --n-gpu-layers" in out and "--no-mmap, --mlock" in out
    assert "[env REDLITE_MODEL]" in out and "[env REDLITE_THREADS]" in out
    serve = rl("serve", "--help").stdout.decode()
    for var in ("REDLITE_HOST", "REDLITE_PORT", "REDLITE_API_KEY", "REDLITE_MODEL"):
        assert var in serve


# ---- environment mirrors -----------------------------------------------------------------------


def test_environment_mirrors_and_the_flag_wins(model):
    env = {"REDLITE_MODEL": model}
    a, _ = gen_json(model, "-p", "hi", "-n", "2")
    r = rl("generate", "--json", "-p", "hi", "-n", "2", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["generated_ids"] == a["generated_ids"]
    assert rl("tokenize", "--text", "hi", env=env).returncode == 0
    assert rl("info", env=env).returncode == 2  # info alone prints its usage (what to give)
    assert rl("info", "--json", env=env).returncode == 0
    # the flag wins over the variable
    r = rl("generate", "-m", model, "-p", "hi", "-n", "1", env={"REDLITE_MODEL": "/nonexistent.gguf"})
    assert r.returncode == 0, r.stderr
    # a bad value is a usage error naming the variable
    r = rl("generate", "-m", model, "-p", "hi", env={"REDLITE_THREADS": "many"})
    assert r.returncode == 2 and "REDLITE_THREADS" in one_line(r, "generate")
    r = rl("generate", "-m", model, "-p", "hi", env={"REDLITE_BACKEND": "gpu"})
    assert r.returncode == 2 and "REDLITE_BACKEND" in one_line(r, "generate")


# ---- one set of sampling defaults ---------------------------------------------------------------


def help_default(text, head):
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("  " + head))
    j = i + 1
    while j < len(lines) and lines[j].startswith(" " * 27):
        j += 1
    m = re.search(r"\(default ([^)]*)\)", " ".join(lines[i:j]))
    return m.group(1) if m else None


def test_sampling_defaults_are_shared(model):
    helps = {c: rl(c, "--help").stdout.decode() for c in ("generate", "chat", "serve")}
    for c, h in helps.items():
        assert help_default(h, "--top-k") == "20", c
        assert help_default(h, "--top-p") == "0.8", c
        assert help_default(h, "--min-p") == "0", c
    assert help_default(helps["chat"], "--temp") == help_default(helps["serve"], "--temp") == "0.7"
    # generate stays greedy (the oracle tests and the README's examples rely on a reproducible answer)
    assert help_default(helps["generate"], "--temp") == "0"
    assert "top-k 20, top-p 0.8, min-p 0" in helps["generate"]
    # and generate --temp 0.7 samples with exactly those: the same ids as spelling them out
    a, _ = gen_json(model, "--raw", "-p", "Once upon", "-n", "12", "--temp", "0.7", "--seed", "5")
    b, _ = gen_json(model, "--raw", "-p", "Once upon", "-n", "12", "--temp", "0.7", "--seed", "5", "--top-k", "20",
                    "--top-p", "0.8", "--min-p", "0")
    c, _ = gen_json(model, "--raw", "-p", "Once upon", "-n", "12", "--temp", "0.7", "--seed", "5", "--top-k", "1")
    assert a["generated_ids"] == b["generated_ids"]
    assert c["generated_ids"] == gen_json(model, "--raw", "-p", "Once upon", "-n", "12")[0]["generated_ids"]


# ---- version -----------------------------------------------------------------------------------


def cpu_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def test_version_names_commit_and_detected_features():
    r = rl("version")
    assert r.returncode == 0 and r.stdout == rl("--version").stdout
    out = r.stdout.decode()
    m = re.match(r"redlite \S+ \(commit (\S+)\)\n", out)
    assert m, out
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode == 0:
        assert m.group(1).startswith(head.stdout.strip()[:7]), (m.group(1), head.stdout)
    cpu = re.search(r"^cpu: AVX2 (yes|no)  AVX-512/VNNI (yes|no)  AMX (yes|no)  \(detected; kernels: (\w+)\)$",
                    out, re.M)
    assert cpu, out
    flags = cpu_flags()
    if flags is not None:  # what this CPU has, not what the build compiled
        assert (cpu.group(1) == "yes") == ("avx2" in flags)
        if cpu.group(2) == "yes":
            assert {"avx512f", "avx512bw", "avx512_vnni"} <= flags
        if cpu.group(3) == "yes":
            assert "amx_tile" in flags
    assert rl("version", "extra").returncode == 2


# ---- usage conflicts exit 2, one line ----------------------------------------------------------

CONFLICTS = [
    ("generate", ["-p", "x", "-f", "y"]),
    ("tokenize", ["--text", "x", "--file", "y"]),
    ("tokenize", ["--jsonl", "x", "--bench"]),
    ("tokenize", ["--jsonl", "x", "--json"]),
    ("tokenize", ["--bogus"]),
    ("synth", ["-o", "/tmp/never.gguf"]),
    ("synth", ["--preset", "tiny", "--routing", "zipf"]),
    ("synth", ["--preset", "tiny", "--seed", "-1"]),
    ("info", ["--ctx", "0"]),
    ("info", ["--bogus"]),
    ("verify-check", ["--draft", "9"]),
    ("verify-check", ["--kv", "f8"]),
    ("verify-check", ["--cache-mib", "lots"]),
    ("verify-check", ["-n", "1"]),
    ("serve", ["--stop", "x"]),
    ("serve", ["--host", "not-an-address"]),
    ("serve", ["--port", "70000"]),
    ("dump", ["--tokens", "1"]),
    ("dump", ["--tokens", "1", "--json", "--check-fast"]),
    ("bench", ["--reference", "--backend", "cuda"]),
    ("perplexity", []),
]


@pytest.mark.parametrize("cmd,args", CONFLICTS, ids=[f"{c}-{'_'.join(a) or 'none'}" for c, a in CONFLICTS])
def test_usage_conflicts_exit_2(model, cmd, args):
    pre = [] if cmd == "synth" else ["-m", model]
    r = rl(cmd, *pre, *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == b""
    one_line(r, cmd)


def test_serve_names_the_host_not_the_port(model):
    r = rl("serve", "-m", model, "--host", "192.0.2.1")  # TEST-NET-1: on no machine's interface
    assert r.returncode == 2
    line = one_line(r, "serve")
    assert "--host 192.0.2.1" in line and "no such address" in line and "--port" not in line


# ---- warnings ----------------------------------------------------------------------------------


def test_context_beyond_the_trained_one_warns(model):
    r = rl("generate", "-m", model, "-p", "hi", "-n", "1", "-c", "8192")
    assert r.returncode == 0 and b"-c 8192 is larger than the 4096 tokens the model was trained on" in r.stderr
    r = rl("generate", "-m", model, "-p", "hi", "-n", "1", "-c", "2048")
    assert r.returncode == 0 and b"trained on" not in r.stderr


def serve_start_lines(model, *args, env=None):
    """Start serve (scripted answers: nothing is evaluated) on a free port; the stderr lines up to
    the 'listening' line, then stop it."""
    script = REPO / "build" / "serve-options-script.txt"
    script.parent.mkdir(exist_ok=True)
    script.write_text("ok\n")
    e = {k: v for k, v in os.environ.items() if not k.startswith("REDLITE_")}
    e.update(env or {})
    p = subprocess.Popen([str(BIN), "serve", "-m", model, "--port", "0", "--test-script", str(script), *args],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=REPO, env=e)
    lines = []
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            line = p.stderr.readline().decode()
            if not line:
                break
            lines.append(line)
            if "listening on" in line:
                break
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
    return lines


def test_network_host_without_key_warns(model):
    lines = serve_start_lines(model, "--host", "0.0.0.0")
    assert any("listening on http://0.0.0.0:" in l for l in lines), lines
    assert any("warning: --host 0.0.0.0 is reachable from the network and no API key is set" in l for l in lines)
    for quiet in (["--host", "0.0.0.0", "--api-key", "k"], ["--host", "127.0.0.1"]):
        lines = serve_start_lines(model, *quiet)
        assert any("listening on" in l for l in lines) and not any("warning" in l for l in lines), lines
    lines = serve_start_lines(model, "--host", "0.0.0.0", env={"REDLITE_API_KEY": "k"})
    assert not any("warning" in l for l in lines) and any("API key required" in l for l in lines), lines


def test_host_and_port_from_the_environment(model):
    lines = serve_start_lines(model, env={"REDLITE_HOST": "127.0.0.1"})
    assert any("listening on http://127.0.0.1:" in l for l in lines), lines
    r = rl("serve", "-m", model, env={"REDLITE_PORT": "99999"})
    assert r.returncode == 2 and "REDLITE_PORT" in one_line(r, "serve")


# ---- progress of a long prompt without a terminal ------------------------------------------------

LONG = " ".join(f"word{i}" for i in range(600))


def test_progress_log_lines_without_a_terminal(model):
    """Not a terminal: plain lines (no carriage return), each with done/total, rate and ETA; at
    most one per REDLITE_PROGRESS_SECONDS (0 here: every chunk) and none by default for a short step."""
    r = rl("generate", "-m", model, "--raw", "-p", LONG, "-n", "1", "-b", "64",
           env={"REDLITE_PROGRESS_SECONDS": "0"})
    assert r.returncode == 0
    err = r.stderr.decode()
    lines = [l for l in err.splitlines() if l.startswith("redlite: prompt ")]
    assert len(lines) >= 3 and b"\r" not in r.stderr, err
    nums = [tuple(map(int, re.match(r"redlite: prompt (\d+)/(\d+) tokens \(\d+ %\), [\d.]+ tok/s", l).groups()))
            for l in lines]
    totals = {t for _, t in nums}
    assert len(totals) == 1 and [d for d, _ in nums] == sorted(d for d, _ in nums)
    assert all(d % 64 == 0 for d, _ in nums[:-1]) and "ETA" in lines[0]
    quiet = rl("generate", "-m", model, "--raw", "-p", LONG, "-n", "1", "-b", "64")
    assert b"redlite: prompt " not in quiet.stderr  # a few seconds at most: under the 10 s default


def test_seed_bounds_up_to_int64_max(model, tmp_path):
    """--seed of bench / synth takes 0..2^63-1 (the table's INT64_MAX bound must not overflow)."""
    r = rl("bench", "-m", model, "--seed", "9223372036854775807", "--prompt", "0", "--n-decode", "1", "--reps", "1",
           "--warmup", "0")
    assert r.returncode == 0, r.stderr
    assert rl("synth", "--preset", "tiny", "--seed", "7", "--list").returncode == 0
    assert rl("synth", "--preset", "tiny", "--seed", "9223372036854775808", "--list").returncode == 2
