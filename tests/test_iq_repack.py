"""--iq-repack (src/cache/expert_repack.c, src/gguf/quant_repack.h): the IQ2_XXS / IQ2_XS / IQ1_M matrices (routed
experts, and the dense ones unless RL_REPACK_DENSE=0) repacked at load into the lookup-free IQ2_LF /
IQ1_LF layouts must change no result, bit for bit.

- A small IQ2_XXS-mix model (`redlite synth --preset iq2_xxs`, tiny geometry, MTP block) and the
  tiny CF2 model (IQ2_XS experts on its last layer, IQ1_M on the others) are run by `redlite dump`
  with and without --iq-repack: the float32 logits of every prompt row (batched
  prefill: the batched kernels, batch 5 so chunks of 5 and 2 rows) and of greedy steps (one row:
  the mat-vec kernels) must be byte-identical, on the fast path (the SIMD kernels), the scalar
  kernels (RL_KERN=scalar), the double-precision reference (IQ2_LF's to_float), and with the
  experts alone repacked.
- The repack really happened: --stats names the tensors (4 layers + the MTP block, 3 experts each,
  and the dense IQ2_XXS projections) and the 2.09x memory cost.
- Refusals, exit 1 with one line: a bounded --cache-mib, a model whose experts have no lookup-free
  form (the Q4_K_M preset), and a RAM too small (RL_REPACK_RAM_MIB).
"""

import os
import subprocess

import pytest

from oracle_util import REDLITE

GEOM = ("hidden=256,layers=4,experts=16,top_k=4,expert_ff=256,shared_ff=256,vocab=512,heads=4,kv_heads=2,"
        "head_dim=64,rope_dims=32,state=32,groups=2,dt_rank=4,inner=256")
TOKENS = "1,2,3,4,5,6,7,8,9,10,11,12,300,301,17"


def rl(*args, env=None):
    assert os.path.exists(REDLITE), f"{REDLITE} not built (make)"
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([REDLITE, *args], capture_output=True, text=True, timeout=600, env=e)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("iqrepack")
    out = {}
    for name, preset in (("iq2", "iq2_xxs"), ("cf2", "tiny"), ("q4", "q4_k_m")):
        path = str(d / f"{name}.gguf")
        args = ["synth", "--preset", preset, "-o", path]
        if preset != "tiny":  # the tiny preset has its own small geometry
            args += ["--geometry", GEOM, "--mtp"]
        r = rl(*args)
        assert r.returncode == 0, r.stderr
        out[name] = path
    out["dir"] = d
    return out


def dump_logits(models, tag, *extra, model="iq2", env=None):
    path = str(models["dir"] / f"{tag}-{model}.bin")
    r = rl("dump", "-m", models[model], "--tokens", TOKENS, "--greedy", "4", "-b", "5", "--logits", path, *extra,
           env=env)
    assert r.returncode == 0, r.stderr
    data = open(path, "rb").read()
    assert len(data) == (15 + 4) * (512 if model == "iq2" else 4096) * 4
    return data, r.stderr


# 4 layers + the MTP block: 3 expert tensors each; dense IQ2_XXS: the iq2_xxs preset's projections
EXPECT = {"iq2": ("iq-repack: 15 expert + 31 dense tensors (IQ2_XXS->IQ2_LF)", "2.09x"),
          "cf2": ("iq-repack: 12 expert + 0 dense tensors (IQ1_M->IQ1_LF, IQ2_XS->IQ2_LF)",),
          "experts": ("iq-repack: 15 expert + 0 dense tensors (IQ2_XXS->IQ2_LF)",)}


@pytest.mark.parametrize("model", ["iq2", "cf2"])
@pytest.mark.parametrize("mode", ["fast", "scalar", "reference", "experts"])
def test_repack_bit_identical(models, model, mode):
    extra, env = (["--fast"], None) if mode != "reference" else ([], None)
    if mode == "scalar":
        env = {"RL_KERN": "scalar"}
    if mode == "experts":  # the routed experts only, the dense IQ matrices stay in the file's layout
        env = {"RL_REPACK_DENSE": "0"}
    base, _ = dump_logits(models, f"{mode}-file", *extra, model=model, env=env)
    rep, err = dump_logits(models, f"{mode}-repack", *extra, "--iq-repack", "--stats", model=model, env=env)
    for want in EXPECT["experts" if mode == "experts" and model == "iq2" else model]:
        assert want in err, err
    assert rep == base, f"{model} {mode}: logits differ with --iq-repack"


def test_repack_fast_matches_reference_not(models):
    """The comparison above can fail: the fast path and the reference differ (quantised activations),
    so identical files mean the same arithmetic, not an unused option."""
    fast, _ = dump_logits(models, "x-fast", "--fast")
    ref, _ = dump_logits(models, "x-ref")
    assert fast != ref


def test_repack_refusals(models):
    r = rl("dump", "-m", models["iq2"], "--tokens", "1,2", "--fast", "--iq-repack", "--cache-mib", "64",
           "--json")
    assert r.returncode == 1 and "--iq-repack keeps every repacked expert resident" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
    r = rl("dump", "-m", models["q4"], "--tokens", "1,2", "--fast", "--iq-repack", "--json")
    assert r.returncode == 1 and "no routed expert of this model has a lookup-free layout" in r.stderr, r.stderr
    r = rl("dump", "-m", models["iq2"], "--tokens", "1,2", "--fast", "--iq-repack", "--json", env={"RL_REPACK_RAM_MIB": "4"})
    assert r.returncode == 1 and "more than 70% of this machine's" in r.stderr, r.stderr
    r = rl("bench", "-m", models["iq2"], "--iq-repack", "--prompt", "0", "--n-decode", "2", "--reps", "1", "--json")
    assert r.returncode == 0, r.stderr
