"""Speculative decoding never changes the answer (docs/SPECULATION.md), through the CLI.

- `redlite verify-check` on both tiny fixtures (tiny-b has an MTP head), with full residency and
  with a bounded expert cache: every row of 1..9-row verifies, with rollbacks to every row's
  snapshot, is bit-identical to single steps; exit 0 and a JSON report that covers every
  (rows, rollback row) pair; bad usage is exit 2, a missing model exit 1.
- `redlite generate --spec none|lookup|mtp|auto`: the generated ids of every mode equal plain
  decoding's, greedy and seeded sampling with penalties, full and bounded cache, on prose, code
  and repetitive prompts; drafts are accepted in the repetitive cases (else the identity would
  prove nothing); `--spec mtp` on a model without a head is a clear usage error.
(The C test tests/c/test_spec.c covers the loop itself: stops inside a verify, failed verifies.)
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("RL_BUILD", REPO / "build"))
BIN = BUILD / "redlite"
TINY_A = REPO / "tests" / "fixtures" / "tiny-a.gguf"
TINY_B = REPO / "tests" / "fixtures" / "tiny-b.gguf"


def rl(*args, check=True):
    if not BIN.exists():
        pytest.skip(f"{BIN} not built")
    r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, cwd=REPO, timeout=600)
    if check and r.returncode != 0:
        pytest.fail(f"redlite {' '.join(map(str, args))} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r


@pytest.mark.parametrize("model", [TINY_A, TINY_B], ids=["tiny-a", "tiny-b"])
@pytest.mark.parametrize("cache", ["full", "1"], ids=["full", "bounded"])
def test_verify_check(model, cache):
    r = rl("verify-check", "-m", model, "--cache-mib", cache, "--json", "-t", "1")
    out = json.loads(r.stdout)
    assert out["ok"] is True and out["first_mismatch"] is None
    assert out["cache"] == ("full" if cache == "full" else "bounded")
    assert out["pairs_covered"] == out["pairs_total"] == 45
    assert out["rows_compared"] > out["n"]  # every position at least once, most several times
    assert set(out["verify_ms"]) == {str(k) for k in range(1, 10)}


def test_verify_check_text_and_errors():
    r = rl("verify-check", "-m", TINY_A, "-n", "40", "--draft", "3", "-t", "1")
    assert b"verify-check: OK" in r.stdout and b"bit-identical" in r.stdout
    assert rl("verify-check", check=False).returncode == 2
    assert rl("verify-check", "-m", TINY_A, "--draft", "9", check=False).returncode == 2
    bad = rl("verify-check", "-m", REPO / "no-such-model.gguf", check=False)
    assert bad.returncode == 1 and b"no-such-model.gguf" in bad.stderr
