"""`redlite info` says how many `redlite serve` slots fit, with the estimate `--parallel auto` uses
(src/serve/slot_plan.h; the arithmetic: tests/c/test_slot_plan.c):

- the per-slot cost info computes from the model's hyperparameters (nothing loaded) equals, to the
  byte, what serve measures from the first slot's allocated context, at two context sizes;
- the count follows memory: a small context fits the --parallel auto maximum here, a context whose
  slot is larger than the machine's free memory fits the first slot only.
"""

import json
import re
import subprocess
import time

import pytest

from server_util import BIN, MODEL, REPO, need_binary


def info_slots(*args):
    r = subprocess.run([str(BIN), "info", str(MODEL), "--json", *args], capture_output=True, text=True, timeout=60)
    d = json.loads(r.stdout)
    # exit 0 only when the model runs here (info's verdict); a context too large for this machine
    # is a "does not run" verdict, exit 1, and the slot figures are still reported
    assert r.returncode == (0 if d["verdict"]["runs"] else 1), r.stderr
    return d["memory"]["serve_slots"]


def serve_per_slot(ctx):
    """The per-slot bytes `redlite serve -v --parallel auto` prints, then the server is stopped."""
    p = subprocess.Popen([str(BIN), "serve", "-m", str(MODEL), "--port", "0", "-v", "-t", "1", "--ctx", str(ctx)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.time() + 60
        err = ""
        while time.time() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            err += line
            m = re.search(r"--parallel auto: (\d+) slots? \([\d.]+ MiB = (\d+) bytes each", line)
            if m:
                return int(m.group(1)), int(m.group(2))
        raise AssertionError(f"serve printed no --parallel auto plan: {err}")
    finally:
        p.kill()
        p.wait(timeout=10)


@pytest.mark.parametrize("ctx", [2048, 8192])
def test_info_per_slot_equals_serve(ctx):
    need_binary()
    got = info_slots("--ctx", str(ctx))
    n, per = serve_per_slot(ctx)
    assert got["bytes_per_slot"] == per, (got, per)
    assert 1 <= got["fit"] <= got["auto_max"] and 1 <= n <= got["auto_max"]
    # the parts add up: context + (checkpoints + the resume point) recurrent states + a RAM state
    assert per == got["context_bytes"] + (got["checkpoints"] + 1) * got["checkpoint_bytes"] + got["ram_state_bytes"]


def expected_fit(s):
    """The documented rule (docs/SERVER.md, "Slots"): the first slot, then as many as 80 % of the
    memory left after the weights and the first slot holds, at least 1, at most auto_max."""
    free = max(0, s["mem_available_bytes"] - s["weights_bytes"] - s["bytes_per_slot"])
    return max(1, min(s["auto_max"], free // 5 * 4 // s["bytes_per_slot"] + 1))


def test_info_fit_follows_memory():
    need_binary()
    small = info_slots("--ctx", "2048")
    huge = info_slots("--ctx", str(1 << 24))  # this model's KV cache at 16M positions: 16 GiB a slot
    for s in (small, huge):
        assert s["fit"] == expected_fit(s), s
    assert huge["bytes_per_slot"] > 1000 * small["bytes_per_slot"]
    if huge["mem_available_bytes"] < 2 * huge["bytes_per_slot"]:  # machines with less than ~70 GB free
        assert huge["fit"] == 1
    if small["mem_available_bytes"] > 8 * small["auto_max"] * small["bytes_per_slot"]:
        assert small["fit"] == small["auto_max"], small
    # the text output says it too
    r = subprocess.run([str(BIN), "info", str(MODEL), "--ctx", "2048"], capture_output=True, text=True, timeout=60)
    assert re.search(r"serve slots\s+%d fit here \(--parallel auto, at most %d\)" % (small["fit"], small["auto_max"]),
                     r.stdout), r.stdout
