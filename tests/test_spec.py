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


@pytest.mark.parametrize("inner,state,dt_rank", [(512, 64, 4), (2048, 128, 16)], ids=["dk64", "dk128-1MiB-state"])
def test_verify_check_wide_value_heads(tmp_path, inner, state, dt_rank):
    """Value heads of 128 columns and 64-wide keys, as the 80B's shapes (the fixtures' heads are 32 x 32): the
    rows of a verify (the delta rule's in-cache 4-column kernel after the first row, the head items of the
    threaded loops) must equal single steps bit for bit at 2 threads. The second geometry has the 80B's
    128 x 128 heads, 16 of them: a 1 MiB recurrent state per layer, which the CPU backend allocates in
    huge pages (backend_cpu.c, state_alloc), so the state swaps and snapshots run on that memory too."""
    m = tmp_path / "dv128.gguf"
    rl("synth", "--preset", "q4_k_m", "--vocab", REPO / "tests" / "fixtures" / "qwen3-vocab.gguf", "-o", m, "--quiet",
       "--geometry", "hidden=256,layers=4,heads=4,kv_heads=2,head_dim=64,rope_dims=16,experts=16,top_k=4,"
       f"expert_ff=256,shared_ff=256,inner={inner},state={state},groups=2,dt_rank={dt_rank}")
    r = rl("verify-check", "-m", m, "-n", "60", "--draft", "8", "-t", "2")
    assert b"verify-check: OK" in r.stdout and b"bit-identical" in r.stdout, r.stdout


PROMPTS = {
    "prose": "The history of the lighthouse begins with fires lit on hills to guide ships home at night.",
    "code": "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint(fib(10))\n",
    "repetitive": "int a0 = 0; int a1 = 1; int a2 = 2; int a3 = 3; int a4 = 4; int a5 = 5; int a6 = 6;",
}
SAMPLERS = {
    "greedy": [],
    "sampled": ["--temp", "0.8", "--top-k", "40", "--top-p", "0.9", "--min-p", "0.02", "--repeat-penalty", "1.1",
                "--frequency-penalty", "0.1", "--seed", "42"],
}
# Random models never repeat themselves over a 152K vocabulary; a repeat "penalty" below 1 and a
# negative presence penalty (real sampler settings) make them reuse the tokens seen: the text
# lookup copies from.
REPEAT = ["--repeat-penalty", "0.01", "--presence-penalty", "-2", "--repeat-last-n", "64"]


def gen(model, mode, args):
    r = rl("generate", "-m", model, "--raw", "--json", "-t", "1", "--spec", mode, *args)
    return json.loads(r.stdout)


CASES = [(m, c, p, s) for m in ("tiny-a", "tiny-b") for c in ("full", "1") for p in PROMPTS for s in SAMPLERS
         if c == "full" or p == "repetitive"]


@pytest.mark.parametrize("model,cache,prompt,smp", CASES,
                         ids=[f"{m}-{'full' if c == 'full' else 'bounded'}-{p}-{s}" for m, c, p, s in CASES])
def test_generate_identity(model, cache, prompt, smp):
    path = TINY_A if model == "tiny-a" else TINY_B
    args = ["-p", PROMPTS[prompt], "-n", "40", "--cache-mib", cache, *SAMPLERS[smp]]
    if prompt == "repetitive":
        args += REPEAT
    plain = gen(path, "none", args)
    assert plain["n_generated"] == 40 and plain["n_drafted"] == 0 and plain["n_verifies"] == 0
    modes = ["lookup", "auto"] + (["mtp"] if model == "tiny-b" else [])
    for mode in modes:
        for k in (("2", "8") if prompt == "repetitive" else ("8",)):
            # --draft-min 1: every source with drafts drafts, so the verify paths run (the cost-aware
            # default may draft nothing on these models); the default must give the same tokens too
            out = gen(path, mode, args + ["--draft-max", k, "--draft-min", "1"])
            assert out["generated_ids"] == plain["generated_ids"], f"--spec {mode} --draft-max {k} changed the tokens"
            assert out["text"] == plain["text"] and out["stop_reason"] == plain["stop_reason"]
            assert out["n_accepted"] <= out["n_drafted"]
            if prompt == "repetitive" and mode == "lookup":
                assert out["n_accepted"] > 0, "lookup accepted nothing on repetitive text: the identity proves little"
            if mode == "mtp":
                assert out["n_drafted"] > 0 and out["n_verifies"] > 0
        auto_k = gen(path, mode, args)
        assert auto_k["generated_ids"] == plain["generated_ids"], f"--spec {mode} (cost-aware K) changed the tokens"
        assert auto_k["text"] == plain["text"] and auto_k["stop_reason"] == plain["stop_reason"]


def test_default_is_lookup():
    out = json.loads(rl("generate", "-m", TINY_B, "--raw", "-p", "a b a b a b", "-n", "4", "--json").stdout)
    assert out["spec"] == "lookup"


def test_spec_usage_errors():
    r = rl("generate", "-m", TINY_A, "-p", "hi", "--spec", "mtp", check=False)
    assert r.returncode == 2 and b"no MTP head" in r.stderr
    r = rl("generate", "-m", TINY_A, "-p", "hi", "--spec", "fast", check=False)
    assert r.returncode == 2 and b"--spec" in r.stderr
    r = rl("generate", "-m", TINY_A, "-p", "hi", "--draft-max", "9", check=False)
    assert r.returncode == 2
    for bad in ("9", "-1", "x"):
        r = rl("generate", "-m", TINY_A, "-p", "hi", "--draft-min", bad, check=False)
        assert r.returncode == 2 and b"--draft-min" in r.stderr
    r = rl("generate", "-m", TINY_B, "-p", "hi", "--spec", "lookup", "--cache-mib", "1", "--route-bias", "0.5",
           check=False)
    assert r.returncode == 1 and b"exact routing" in r.stderr
    for spec in (["--spec", "none"], []):  # the default (lookup) steps aside for cache-aware routing
        out = json.loads(rl("generate", "-m", TINY_B, "-p", "hi", *spec, "--cache-mib", "1", "--route-bias", "0.5",
                            "-n", "4", "--json").stdout)
        assert out["n_generated"] == 4 and out["spec"] == "none"
