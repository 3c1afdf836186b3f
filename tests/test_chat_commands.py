"""`redlite chat` commands and its --history file, on the real binary with stdin a pipe (the terminal
behaviour, echo and type-ahead, is in tests/test_chat_tmux.py).

- a line whose first word is /NAME is a command, with arguments: `/save FILE`, `/quit ` (trailing
  blank) never reach the model; `//text` sends `/text`; a path (`/usr/bin ...`) is a message;
- `/reset` and `/clear` are written to --history ("/reset") and a later start begins after them;
- a history longer than the context is trimmed on load (oldest turns first) instead of failing;
- an answer stopped by Ctrl-C is recorded as "assistant (interrupted): ...".
The model is the bundled tiny coder (models/default.gguf); what it answers does not matter.
"""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("RL_BUILD", REPO / "build")) / "redlite"
MODEL = REPO / "models" / "default.gguf"


@pytest.fixture(scope="module")
def model():
    assert BIN.exists(), f"{BIN} is not built (make)"
    assert MODEL.exists(), f"{MODEL} is missing (make copies it)"
    return str(MODEL)


def chat(*args, stdin=""):
    return subprocess.run([str(BIN), "chat", *args], input=stdin, capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def speed_lines(err):
    return [l for l in err.splitlines() if l.startswith("[prompt ")]


def test_commands_take_arguments_and_never_reach_the_model(model, tmp_path):
    hist, saved = tmp_path / "h.txt", tmp_path / "saved.txt"
    r = chat("-m", model, "-n", "3", "--temp", "0", "--history", str(hist),
             stdin=f"hello\n/save {saved}\n/frob some args\n/help  \n/quit \nnot sent\n")
    assert r.returncode == 0, r.stderr
    assert len(speed_lines(r.stderr)) == 1, r.stderr  # one turn: "hello"; the rest were commands
    assert f"saved 2 messages to {saved}" in r.stdout
    assert "unknown command /frob" in r.stdout and "/save FILE" in r.stdout  # /help with a trailing blank
    assert saved.read_text().startswith("user: hello\nassistant: ")
    assert hist.read_text() == saved.read_text()  # /save writes the --history format
    assert "not sent" not in hist.read_text()  # "/quit " left before it
    # /save without a file says how to use it; a message can start with "//" or a path
    r = chat("-m", model, "-n", "2", "--temp", "0", "--history", str(hist),
             stdin="/save\n//slash first\n/usr/bin is a path\n")
    assert r.returncode == 0, r.stderr
    assert "usage: /save FILE" in r.stdout and len(speed_lines(r.stderr)) == 2, r.stderr
    text = hist.read_text()
    assert "user: /slash first\n" in text and "user: /usr/bin is a path\n" in text


@pytest.mark.parametrize("cmd", ["/reset", "/clear", "  /clear  "])
def test_reset_is_persisted(model, tmp_path, cmd):
    hist = tmp_path / "h.txt"
    r = chat("-m", model, "-n", "2", "--temp", "0", "--history", str(hist), stdin=f"one\ntwo\n{cmd}\nthree\n")
    assert r.returncode == 0 and "(conversation reset)" in r.stdout, r.stderr
    lines = hist.read_text().splitlines()
    assert lines[0] == "user: one" and "/reset" in lines and lines[-2] == "user: three", lines
    assert lines.index("/reset") == 4  # after the two turns before it
    # a later start continues after the reset: one earlier turn, not three
    r = chat("-m", model, "-n", "2", "--temp", "0", "--history", str(hist), "-p", "four")
    assert r.returncode == 0, r.stderr
    assert "(1 earlier turns from" in r.stderr, r.stderr


def test_long_history_is_trimmed_not_fatal(model, tmp_path):
    hist = tmp_path / "h.txt"
    hist.write_text("".join(f"user: question {i} about sorting lists\\nin python\n"
                            f"assistant: answer {i}: use sorted() with a key function\n" for i in range(80)))
    for ctx in ("256", "64"):
        r = chat("-m", model, "-n", "2", "--temp", "0", "-c", ctx, "--history", str(hist), "-p", "hi")
        assert r.returncode == 0, r.stderr
        assert "dropped to leave half the context free" in r.stderr, r.stderr
        prompt = int(speed_lines(r.stderr)[-1].split()[1])
        assert prompt < int(ctx), r.stderr  # what was kept plus the new turn fits
    # a history that fits is loaded whole
    small = tmp_path / "s.txt"
    small.write_text("user: a\nassistant: b\n")
    r = chat("-m", model, "-n", "2", "--temp", "0", "--history", str(small), "-p", "hi")
    assert r.returncode == 0 and "(1 earlier turns from" in r.stderr and "dropped" not in r.stderr, r.stderr


def test_interrupted_answer_is_recorded_as_interrupted(model, tmp_path):
    hist = tmp_path / "h.txt"
    p = subprocess.Popen([str(BIN), "chat", "-m", model, "-n", "-1", "-c", "16384", "--seed", "3", "--history",
                          str(hist)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        p.stdin.write(b"Write a very long story about a dragon\n")
        p.stdin.flush()
        got = b""
        while len(got) < 40:  # the answer streams: stop it part way
            b = p.stdout.read1(4096)
            if not b:
                break
            got += b
        p.send_signal(signal.SIGINT)
        time.sleep(0.2)
        p.stdin.close()
        p.wait(timeout=120)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    err = err.decode()
    assert p.returncode == 0, err
    if "[stopped]" not in err:
        pytest.skip("the answer ended before the interrupt (an end-of-text token): nothing to check")
    lines = hist.read_text().splitlines()
    assert lines[0] == "user: Write a very long story about a dragon", lines
    assert lines[1].startswith("assistant (interrupted): ") and len(lines[1]) > len("assistant (interrupted): "), lines
    # and a later start loads it as the (partial) answer of that turn
    r = chat("-m", model, "-n", "2", "--temp", "0", "--history", str(hist), "-p", "go on")
    assert r.returncode == 0 and "(1 earlier turns from" in r.stderr, r.stderr
