"""Helpers for the `redlite serve` tests: start the real binary on a free loopback port, wait until
it answers /health, and always kill it at the end (bounded waits everywhere)."""

import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("RL_BUILD", REPO / "build"))
BIN = BUILD / "redlite"
MODEL = Path(os.environ.get("RL_CHAT_MODEL", REPO / "models" / "default.gguf"))


def need_binary():
    if not BIN.exists():
        pytest.skip(f"{BIN} not built")
    if not MODEL.exists():
        pytest.skip(f"{MODEL} does not exist (make builds it)")


class Server:
    """A running `redlite serve` (port chosen by the server, read from its stderr)."""

    def __init__(self, *args, start_timeout=60.0, env=None):
        need_binary()
        self.log = tempfile.NamedTemporaryFile(prefix="redlite-serve-", suffix=".log", delete=False)
        cmd = [str(BIN), "serve", "-m", str(MODEL), "--port", "0", "-v", *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, cwd=REPO,
                                     env={**os.environ, **(env or {})})
        self.port = None
        deadline = time.time() + start_timeout
        while time.time() < deadline:
            text = self.stderr()
            m = re.search(r"listening on http://[\d.]+:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"redlite serve exited {self.proc.returncode}: {text}")
            time.sleep(0.05)
        if self.port is None:
            self.kill()
            raise RuntimeError(f"redlite serve did not start in {start_timeout} s: {self.stderr()}")
        self.base = f"http://127.0.0.1:{self.port}"

    def stderr(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def url(self, path):
        return self.base + path

    def alive(self):
        try:
            with urllib.request.urlopen(self.url("/health"), timeout=5) as r:
                return r.status == 200
        except Exception:
            return False

    def metrics(self):
        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=20.0):
        """Graceful stop; returns the exit status (kills after timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError(f"redlite serve did not stop within {timeout} s")
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        try:
            os.unlink(self.log.name)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


def script_file(tmp_path, answers):
    p = tmp_path / "script.txt"
    p.write_text("\n---\n".join(answers))
    return p
