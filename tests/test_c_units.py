"""Run every C unit-test binary (build/tests/test_*) as one pytest case each."""
import glob
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINS = sorted(b for b in glob.glob(os.path.join(ROOT, "build", "tests", "test_*"))
              if "." not in os.path.basename(b) and os.access(b, os.X_OK))


@pytest.mark.parametrize("binary", BINS, ids=[os.path.basename(b) for b in BINS])
def test_c_unit(binary):
    r = subprocess.run([binary], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    print(r.stdout[-4000:])
    print(r.stderr[-4000:])
    assert r.returncode == 0, f"{os.path.basename(binary)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
