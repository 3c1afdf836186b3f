"""Run every C unit-test binary (build/tests/test_*) as one pytest case each.

Exit status contract of a C test (tests/c/check.h):
  0   every check passed;
  77  the whole test cannot run here (the automake convention): the binary prints a line
      "NAME: skipped: REASON" and this wrapper reports a pytest skip with that reason, never a pass;
  any other status (a failed check, a crash, a sanitizer report) is a failure.
A binary that exits 77 without saying why fails too: a skip must be explained.
Set RL_BUILD to test another build directory (default: build).
"""
import glob
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("RL_BUILD", "build"))
BINS = sorted(b for b in glob.glob(os.path.join(BUILD, "tests", "test_*"))
              if "." not in os.path.basename(b) and os.access(b, os.X_OK))
SKIP = 77


def skip_reason(name, stdout):
    """The reason a skipping binary printed ("NAME: skipped: REASON"), or None."""
    m = re.search(r"^" + re.escape(name) + r": skipped: (.+)$", stdout, re.M)
    return m.group(1).strip() if m else None


def test_c_binaries_exist():
    """An empty build/tests would make every case below vanish instead of fail."""
    assert len(BINS) >= 10, f"only {len(BINS)} C test binaries in {BUILD}/tests: run make first"


@pytest.mark.parametrize("binary", BINS, ids=[os.path.basename(b) for b in BINS])
def test_c_unit(binary):
    name = os.path.basename(binary)
    r = subprocess.run([binary], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    print(r.stdout[-4000:])
    print(r.stderr[-4000:])
    if r.returncode == SKIP:
        why = skip_reason(name, r.stdout)
        assert why, f"{name} exited {SKIP} (skip) without a '{name}: skipped: REASON' line:\n{r.stdout[-2000:]}"
        pytest.skip(f"{name}: {why}")
    assert r.returncode == 0, f"{name} failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    # a pass must have run checks: check_done prints "NAME: P passed, 0 failed" with P > 0
    m = re.search(r"^" + re.escape(name) + r": (\d+) passed, (\d+) failed$", r.stdout, re.M)
    assert m, f"{name} exited 0 without its closing 'N passed, N failed' line:\n{r.stdout[-2000:]}"
    assert int(m.group(1)) > 0 and int(m.group(2)) == 0, m.group(0)


# test_kern checks every kernel variant itself through its own kernel configurations (kern_opts:
# the AVX-512 level's IQ2 mat-vecs both ways, each batched core); the RL_* variables are parsed in
# one place (src/run/tuning.c, tests/c/test_runtime.c) and no longer reach the kernels directly.
