"""The memory a process may use is its control group's limit where one is set (a container's
--memory, a systemd MemoryMax): `redlite info` run inside a memory cgroup of 6 GiB plans with 6 GiB
and says so, and serve's slot estimate stays below the limit.

Needs root and a writable cgroup hierarchy (v2 with the memory controller, or v1's memory
controller); elsewhere the test is skipped, with the reason. The unit test of the parser is
tests/c/test_ctx_plan.c (a made-up hierarchy). The binary is build/redlite (REDLITE_BIN).
"""
import json
import os
import subprocess
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))
MODEL = os.path.join(ROOT, "models", "redlite-coder-tiny-q8_0.gguf")
LIMIT = 6 << 30


def make_group():
    """A fresh memory cgroup limited to LIMIT (its path); skip where none can be made."""
    name = "redlite-test-" + uuid.uuid4().hex[:8]
    v2 = "/sys/fs/cgroup/cgroup.controllers"
    candidates = []
    if os.path.exists(v2) and "memory" in open(v2).read().split():
        candidates.append((os.path.join("/sys/fs/cgroup", name), "memory.max"))
    if os.path.isdir("/sys/fs/cgroup/memory"):
        candidates.append((os.path.join("/sys/fs/cgroup/memory", name), "memory.limit_in_bytes"))
    why = "no cgroup memory controller mounted"
    for path, limit_file in candidates:
        try:
            os.mkdir(path)
        except OSError as e:
            why = f"cannot create {path}: {e}"
            continue
        try:
            with open(os.path.join(path, limit_file), "w") as f:
                f.write(str(LIMIT))
            return path
        except OSError as e:
            why = f"cannot set {limit_file} in {path}: {e}"
            os.rmdir(path)
    pytest.skip(why)


@pytest.fixture
def group():
    path = make_group()
    yield path
    os.rmdir(path)


def run_in(group_path, *args):
    """BIN with args, started by a shell that first moves itself into the group."""
    script = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
    return subprocess.run(["sh", "-c", script, group_path, BIN, *args], capture_output=True, text=True,
                          timeout=120)


def test_info_plans_with_the_group_limit(group):
    if not os.path.exists(MODEL):
        pytest.skip("the bundled model is missing (make)")
    r = run_in(group, "info", MODEL)
    assert r.returncode == 0, r.stderr
    verdict = [line for line in r.stdout.splitlines() if line.startswith("verdict")]
    assert verdict and "6.00 GiB of RAM (this process's control group limit)" in verdict[0], r.stdout
    # outside the group the machine's RAM is used, without the note (unless this test itself runs in
    # a group with a limit)
    out = subprocess.run([BIN, "info", MODEL], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "6.00 GiB of RAM (this" not in out.stdout
    j = run_in(group, "info", MODEL, "--json")
    assert j.returncode == 0, j.stderr
    avail = json.loads(j.stdout)["memory"]["serve_slots"]["mem_available_bytes"]
    assert 0 < avail <= LIMIT, avail
