"""Exit codes and the first things a new user sees, on the real binary and the bundled tiny model.

Contract (src/cli/opts.h): 0 success, 1 runtime error, 2 usage error, each error one line on
stderr starting with "redlite CMD: ". Also: `redlite help [CMD]`, the progress line of a long
prompt (on a terminal only, never with --json) and the trained-context warning.
"""

import os
import pty
import subprocess
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
    if not MODEL.exists():
        pytest.fail(f"{MODEL} is missing (make builds it from tests/fixtures/tiny-a.gguf)")
    return str(MODEL)


def rl(*args, stdin=b""):
    return subprocess.run([str(BIN), *args], input=stdin, capture_output=True, cwd=REPO, timeout=300)


def one_line_error(r, cmd):
    lines = r.stderr.decode(errors="replace").strip().splitlines()
    assert lines, "no error message"
    assert lines[-1].startswith(f"redlite {cmd}: "), lines[-1]
    return lines[-1]


# ---- usage errors: exit 2 -------------------------------------------------------------------

USAGE = [
    ("generate", ["-p", "x", "--top-p", "2"], "--top-p"),
    ("generate", ["-p", "x", "--temp", "-1"], "--temp"),
    ("generate", ["-p", "x", "--min-p", "2"], "--min-p"),
    ("generate", ["-p", "x", "--top-k", "-3"], "--top-k"),
    ("generate", ["-p", "x", "--repeat-penalty", "0"], "--repeat-penalty"),
    ("generate", ["-p", "x", "--presence-penalty", "3"], "--presence-penalty"),
    ("generate", ["-p", "x", "--seed", "-1"], "--seed"),
    ("generate", ["-p", "x", "--cache-mib", "0"], "--cache-mib"),
    ("generate", ["-p", "x", "--cache-mib", "lots"], "--cache-mib"),
    ("generate", ["-p", "x", "--backend", "gpu"], "--backend"),
    ("generate", ["-p", "x", "-n"], "-n"),
    ("generate", ["-p", "x", "--bogus"], "--bogus"),
    ("generate", ["-p", "x", "stray"], "stray"),
    ("generate", [], "-p"),
    ("generate", ["-p", "x", "-f", "y"], "-f"),
    ("generate", ["--raw", "--system", "s", "-p", "x"], "--system"),
    ("chat", ["--top-p", "2"], "--top-p"),
    ("chat", ["--temp", "-1"], "--temp"),
    ("chat", ["--cache-mib", "0"], "--cache-mib"),
    ("bench", ["--cache-mib", "0"], "--cache-mib"),
    ("bench", ["--prompt", "12,x"], "--prompt"),
    ("bench", ["--reps", "0"], "--reps"),
    ("bench", ["--weights", "hugepages"], "--weights"),
    ("generate", ["-p", "x", "--weights", ""], "--weights"),
    ("dump", ["--tokens", "1,2", "--cache-mib", "0"], "--cache-mib"),
    ("dump", ["--tokens", "1,2", "--layers", "x"], "--layers"),
    ("dump", [], "--tokens"),
    ("dump", ["--tokens", "1,2"], "nothing to write"),  # no output flag: it would print nothing
]


@pytest.mark.parametrize("cmd,args,word", USAGE, ids=[f"{c}-{'_'.join(a) or 'none'}" for c, a, _ in USAGE])
def test_usage_error_exits_2(model, cmd, args, word):
    r = rl(cmd, "-m", model, *args)
    assert r.returncode == 2, r.stderr
    assert r.stdout == b""
    line = one_line_error(r, cmd)
    assert word in line
    assert len(r.stderr.decode().strip().splitlines()) == 1  # nothing loaded, nothing else printed


@pytest.mark.parametrize("cmd", ["generate", "chat", "bench", "dump"])
def test_missing_model_flag_exits_2(cmd):
    r = rl(cmd)
    assert r.returncode == 2
    assert "-m MODEL" in one_line_error(r, cmd)


def test_unknown_command_exits_2():
    r = rl("frobnicate")
    assert r.returncode == 2 and b"unknown command" in r.stderr
    assert rl().returncode == 2  # no command: the usage on stderr


# ---- runtime errors: exit 1 -----------------------------------------------------------------


@pytest.mark.parametrize("cmd", ["generate", "chat", "bench", "dump"])
def test_missing_model_file_exits_1(cmd):
    extra = {"generate": ["-p", "x"], "chat": ["-p", "x"], "bench": [], "dump": ["--tokens", "1", "--json"]}[cmd]
    r = rl(cmd, "-m", "/nonexistent.gguf", *extra)
    assert r.returncode == 1
    assert "nonexistent" in one_line_error(r, cmd)


def test_chat_prompt_overflowing_context_exits_1(model):
    r = rl("chat", "-m", model, "-c", "16", "-p", "a long text that does not fit in sixteen tokens of context at all")
    assert r.returncode == 1
    assert "no longer fits the context" in r.stderr.decode()


def test_chat_history_write_failure_exits_1(model, tmp_path):
    hist = tmp_path / "missing-dir" / "h.txt"
    r = rl("chat", "-m", model, "-n", "3", "--temp", "0", "-p", "hi", "--history", str(hist))
    assert r.returncode == 1
    assert "cannot append to" in one_line_error(r, "chat")
    # interactive: the turns go on, the status says the history was not written
    r = rl("chat", "-m", model, "-n", "3", "--temp", "0", "--history", str(hist), stdin=b"hi\nagain\n")
    assert r.returncode == 1
    assert r.stderr.decode().count("[prompt ") == 2


def test_cache_below_minimum_exits_1(model):
    # the syntax is fine (a number of MiB): the planner refuses it for this model at run time
    r = rl("generate", "-m", model, "-p", "x", "--cache-mib", "0.001")
    assert r.returncode == 1
    assert "below the minimum" in one_line_error(r, "generate")


def test_bad_token_file_dump_exits_2(model, tmp_path):
    r = rl("dump", "-m", model, "--tokens", "1,x")
    assert r.returncode == 2
    one_line_error(r, "dump")


# ---- success: exit 0 ------------------------------------------------------------------------


def test_success_exits_0(model, tmp_path):
    assert rl("generate", "-m", model, "-p", "hi", "-n", "2").returncode == 0
    assert rl("chat", "-m", model, "-n", "2", "-p", "hi").returncode == 0
    assert rl("chat", "-m", model, "-n", "2", stdin=b"hi\n").returncode == 0
    assert rl("bench", "-m", model, "--n-decode", "2", "--reps", "1", "--warmup", "0", "--prompt", "8").returncode == 0
    assert rl("dump", "-m", model, "--tokens", "1,2,3", "--greedy", "1", "--json").returncode == 0
    h = tmp_path / "h.txt"
    r = rl("chat", "-m", model, "-n", "2", "-p", "hi", "--history", str(h))
    assert r.returncode == 0 and h.read_text().startswith("user: hi\nassistant: ")


def test_stats_prints_what_help_says(model):
    r = rl("generate", "-m", model, "-p", "hi", "-n", "2", "--stats")
    assert r.returncode == 0
    err = r.stderr.decode()
    assert "expert cache:" in err and "prompt" in err and "decode" in err and "peak RSS" in err
    assert "weights: dense weights: " in err
    # without --stats / --verbose the expert-cache plan stays quiet
    r = rl("generate", "-m", model, "-p", "hi", "-n", "2")
    assert r.returncode == 0 and "expert cache" not in r.stderr.decode()
    assert "expert cache:" in rl("generate", "-m", model, "-p", "hi", "-n", "2", "--verbose").stderr.decode()


# ---- help ------------------------------------------------------------------------------------


def test_bench_reports_the_weight_copies(model):
    """--weights copy (the default) says what went to huge-page memory (the tiny model fits, so the
    expert plan is full residency and the experts are copied too); map says the mapping serves it."""
    import json
    r = rl("bench", "-m", model, "-t", "2", "--prompt", "0", "--n-decode", "2", "--reps", "1", "--warmup", "0")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.decode().splitlines() if l.startswith("weights ")]
    try:
        never = "[never]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        never = False
    said = "in the file mapping (transparent huge pages are off" if never else "copied to memory"
    assert len(lines) == 2 and "dense weights: " in lines[0] and said in lines[0], lines
    assert "routed experts: " in lines[1] and said in lines[1], lines
    r = rl("bench", "-m", model, "-t", "2", "--prompt", "0", "--n-decode", "2", "--reps", "1", "--warmup", "0",
           "--weights", "map", "--json")
    assert r.returncode == 0, r.stderr
    w = json.loads(r.stdout)["weights"]
    assert w.startswith("dense weights: in the file mapping (") and "--weights map" in w, w


def test_help():
    r = rl("help")
    assert r.returncode == 0
    out = r.stdout.decode()
    for cmd in ("generate", "chat", "bench", "dump", "info"):
        assert f"  {cmd} " in out
    assert "Exit status" in out


@pytest.mark.parametrize("cmd", ["generate", "chat", "bench", "dump"])
def test_help_cmd(cmd):
    r = rl("help", cmd)
    assert r.returncode == 0
    out = r.stdout.decode()
    assert out.startswith(f"usage: redlite {cmd}")
    assert out == rl(cmd, "--help").stdout.decode()  # the same text both ways
    assert "--cache-mib" in out and "-m, --model FILE" in out and "Exit status" in out


def entry(help_text, head):
    """The help of one option: its line and the continuation lines (indented past the names)."""
    lines = help_text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("  " + head))
    j = i + 1
    while j < len(lines) and lines[j].startswith(" " * 27):
        j += 1
    return " ".join(lines[i:j])


def test_help_shows_each_commands_defaults():
    gen = rl("help", "generate").stdout.decode()
    chat = rl("help", "chat").stdout.decode()
    bench = rl("help", "bench").stdout.decode()
    assert "--temp, --temperature T" in gen
    assert "(default 0)" in entry(gen, "--temp") and "(default 0.7)" in entry(chat, "--temp")
    assert "--stats" in gen and "MiB read per token" in gen
    # generate/chat/serve and bench share the backend's prompt batch; perplexity and dump keep every
    # row's logits, so they stay at 64 rows
    ppl = rl("help", "perplexity").stdout.decode()
    assert "(default auto)" in entry(gen, "-b, --batch") and "(default auto)" in entry(bench, "-b, --batch")
    assert "(default 64)" in entry(ppl, "-b, --batch")


def test_help_unknown_command():
    r = rl("help", "nope")
    assert r.returncode == 2 and b"unknown command" in r.stderr


# ---- what a new user sees while a long prompt is evaluated -----------------------------------


def run_with_tty_stderr(args):
    """Run with stderr on a pseudo-terminal (stdout a pipe); returns (rc, stdout, stderr bytes)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([str(BIN), *args], stdout=subprocess.PIPE, stderr=slave, cwd=REPO)
    os.close(slave)
    err = b""
    while True:
        try:
            d = os.read(master, 65536)
        except OSError:
            break
        if not d:
            break
        err += d
    out = p.stdout.read()
    rc = p.wait(timeout=300)
    os.close(master)
    return rc, out, err


LONG = " ".join(f"word{i}" for i in range(1500))  # ~7,000 tokens: past the tiny model's 4,096


def test_progress_line_on_a_terminal(model):
    rc, out, err = run_with_tty_stderr(["generate", "-m", model, "--raw", "-p", LONG, "-n", "1", "-c", "8192"])
    assert rc == 0
    assert b"\rprompt " in err and b" tokens, " in err and b" tok/s" in err
    assert b"trained on (context_length)" in err  # the warning: more tokens than the model's 4,096


def test_no_progress_line_with_json(model):
    rc, out, err = run_with_tty_stderr(["generate", "-m", model, "--raw", "-p", LONG, "-n", "1", "-c", "8192",
                                        "--json"])
    assert rc == 0
    assert b"\rprompt " not in err and b"experts " not in err
    assert out.startswith(b"{")


def test_no_progress_line_without_a_terminal(model):
    r = rl("generate", "-m", model, "--raw", "-p", LONG, "-n", "1", "-c", "8192")
    assert r.returncode == 0
    assert b"\rprompt " not in r.stderr
    assert b"trained on (context_length)" in r.stderr  # the warning is not progress: always there


def test_no_warning_within_the_trained_context(model):
    r = rl("generate", "-m", model, "--raw", "-p", "hello there", "-n", "1")
    assert r.returncode == 0 and b"context_length" not in r.stderr


def test_bench_verbose_says_where_weights_live_once(model):
    """bench prints the weights lines in its table; --verbose adds the cache's lines without repeating them."""
    r = rl("bench", "-m", model, "--n-decode", "2", "--reps", "1", "--warmup", "0", "--prompt", "8", "--verbose")
    assert r.returncode == 0, r.stderr.decode()
    out = (r.stdout + r.stderr).decode().splitlines()
    dense = [l for l in out if "dense weights: " in l]
    assert len(dense) == 1 and dense[0].startswith("weights   "), dense
    assert any(l.startswith("expert cache: full") for l in out), out
