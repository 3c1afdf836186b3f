"""End-to-end checks of the CUDA backend on the committed tiny oracle fixture (tiny-a: a random
Qwen3-Next converted by llama.cpp, greedy ids and logits recorded with transformers), run on a
GPU machine by bench/cuda_check.sh and by `make test` after tests/test_cuda_build.py has built
build/cuda (tests/run.sh runs this directory last). Skipped, saying why, only where nvcc (hence the
binary) or a device is missing; a binary that fails for another reason fails the tests:

  - greedy ids of every prompt identical to transformers' (up to the first near-tie of the
    oracle's margin, after which a flip is legitimate);
  - logits of every position within BOUND of the CPU reference backend (`redlite dump
    --backend cuda` vs `--backend cpu` on the same ids);
  - router ids identical to the CPU path except at near-ties (oracle router_gap < GAP);
  - batch invariance: --batch 1 (decode graph) and --batch 64 (prefill kernels) give
    bit-identical logits and routes;
  - the Qwen3.5 family (issue 47): tiny-q35moe (qwen35moe: separate beta/alpha, tiled value heads,
    MTP) and tiny-q35 (dense qwen35: SwiGLU FFN) pass the same greedy / logits / router checks and
    batch invariance;
  - RL_CUDA_LONG=1: a 16K-position prompt on a synthetic model (`redlite synth --preset tiny`),
    CPU and CUDA within the same relative bound at the last positions.

Why BOUND: the CPU reference accumulates every dot product in double; the GPU in float32 with a
fixed lane tree (relative error ~ sqrt(n) * 2^-24 ~ 3e-6 for n <= 4096 products) and float
softmax/attention sums. Through 4 layers the hidden state differs by ~1e-6 relative, and the
logits (|z| ~ 30, row norm ~ 2e3) by ~ 1e-6 * 2e3 ~ 2e-3 at worst; BOUND = 1e-2 absolute leaves
a 5x margin and is still 1000x below the logit spread (an argmax flip needs a margin < BOUND).
"""
import json
import os
import re
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("RL_CUDA_BIN", os.path.join(ROOT, "build", "cuda", "redlite"))
FIX = os.path.join(ROOT, "tests", "fixtures", "tiny-a")
BOUND = 1e-2  # max |logit_cuda - logit_cpu|, see the docstring
GAP = 1e-4    # router near-tie: oracle prob gap between the k-th and (k+1)-th expert
NEAR_TIE = 2 * BOUND
# The checks against the CPU reference (float activations) run CUDA's float path: every tensor of the
# fixtures is Q8_0, whose default CUDA path (the integer path, activations quantised to Q8_0 as the
# CPU's fast kernels do) differs from the reference by the quantisation itself — 0.46-1.08 logits on
# these fixtures, as much as the CPU's own `--fast` does. The integer path is checked against its own
# oracle instead (test_integer_path_vs_scalar_oracle).
FLOAT = {"RL_CUDA_MMQ": "0"}


def run(args, timeout=1800, env=None):
    return subprocess.run([BIN] + args, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **env) if env else None)


@pytest.fixture(scope="module")
def fx():
    if not os.path.exists(BIN):
        # tests/test_cuda_build.py builds it where nvcc is on PATH (and fails if it cannot)
        pytest.skip(f"no CUDA build at {os.path.relpath(BIN, ROOT)}: nvcc not on PATH, or build it with "
                    f"make CUDA=1 BUILD=build/cuda")
    r = run(["dump", "-m", FIX + ".gguf", "--tokens", "1", "--backend", "cuda", "--json"])
    if r.returncode != 0:
        # only a missing device is a skip; a CUDA build that exists and fails otherwise is a failure
        assert "no CUDA device" in r.stderr, f"the CUDA build fails (exit {r.returncode}): {r.stderr.strip()}"
        pytest.skip("needs a GPU: " + r.stderr.strip())
    return json.load(open(FIX + ".json")), np.load(FIX + ".npz")


def dump(tmp, backend, ids, greedy, batch, tag, model=None, extra=(), with_routes=True, env=None):
    """Logits of every position (and routes: with them the backend serves a route observer,
    without them a CUDA single-row step runs as the captured graph); env: extra environment."""
    lp, rp = os.path.join(tmp, tag + ".logits"), os.path.join(tmp, tag + ".routes")
    tok = os.path.join(tmp, tag + ".ids")
    with open(tok, "w") as f:
        f.write(",".join(str(int(i)) for i in ids))
    r = run(["dump", "-m", model or FIX + ".gguf", "--tokens", "@" + tok, "--greedy", str(greedy), "--batch",
             str(batch), "--logits", lp, "--json", "--backend", backend, *(["--routes", rp] if with_routes else []),
             "--kv", "f32", *extra], env=env)  # CUDA vs the CPU reference on the same KV format (the default differs)
    assert r.returncode == 0, r.stderr
    js = json.loads(r.stdout.strip().splitlines()[-1])
    routes = {}
    for line in open(rp) if with_routes else []:
        d = json.loads(line)
        routes[(d["layer"], d["pos"])] = d
    return js, np.fromfile(lp, dtype=np.float32), routes


def prompts(meta):
    return range(len(meta["prompts"]))


def test_greedy_logits_routes(fx, tmp_path):
    meta, z = fx
    tmp = str(tmp_path)
    report = []
    for i in prompts(meta):
        ids = z[f"p{i}.ids"]
        want = z[f"p{i}.greedy_ids"]
        G, T = len(want), len(ids)
        jc, lc, rc = dump(tmp, "cuda", ids, G, 64, f"c{i}", env=FLOAT)
        jr, lr, rr = dump(tmp, "cpu", ids, G, 64, f"r{i}")
        V = lc.size // (T + G)
        lc, lr = lc.reshape(T + G, V), lr.reshape(T + G, V)
        got = np.array(jc["generated"])
        # greedy vs transformers, up to the oracle's first near-tie
        margin = z[f"p{i}.margin"][T - 1:]
        tie = next((s for s in range(G) if margin[s] < NEAR_TIE), G)
        same = int(np.argmax(got != want)) if (got != want).any() else G
        assert same >= tie, f"prompt {i}: greedy differs from transformers at step {same} (first near-tie {tie})"
        # logits vs the CPU reference on identical inputs (prompt rows + the common greedy prefix)
        common = int(np.argmax(got != np.array(jr["generated"]))) if (got != np.array(jr["generated"])).any() else G
        rows = T + common
        d = np.abs(lc[:rows].astype(np.float64) - lr[:rows])
        assert np.isfinite(lc[:rows]).all()
        assert d.max() <= BOUND, f"prompt {i}: max |logit diff| {d.max():.3g} > {BOUND}"
        # logits vs transformers' top-16 at every position the oracle ran
        n_or = min(rows, z[f"p{i}.top_ids"].shape[0])
        top_ids, top_lg = z[f"p{i}.top_ids"][:n_or], z[f"p{i}.top_logits"][:n_or]
        dt = np.abs(np.take_along_axis(lc[:n_or], top_ids.astype(np.int64), 1) - top_lg).max()
        # router ids vs the CPU path; mismatches only at oracle near-ties (prompt rows)
        gap = z[f"p{i}.router_gap"]
        mism, ties = 0, 0
        for (layer, pos), a in rc.items():
            b = rr[(layer, pos)]
            if pos >= rows or a["ids"] == b["ids"]:
                continue
            if pos < gap.shape[1] and gap[layer, pos] < GAP:
                ties += 1
            else:
                mism += 1
        assert mism == 0, f"prompt {i}: {mism} router choices differ from the CPU away from near-ties"
        report.append(f"p{i}: T={T} greedy {same}/{G} equal to transformers (first near-tie {tie}); "
                      f"logits vs cpu max {d.max():.2e} mean {d.mean():.2e}; top-16 vs transformers max {dt:.2e}; "
                      f"router mismatches {mism} (+{ties} at near-ties)")
    print("\n" + "\n".join(report))


def test_batch_invariance(fx, tmp_path):
    meta, z = fx
    tmp = str(tmp_path)
    for i in prompts(meta):
        ids = z[f"p{i}.ids"]
        a = dump(tmp, "cuda", ids, 8, 1, f"b1_{i}", with_routes=False)  # decode graph, row by row
        b = dump(tmp, "cuda", ids, 8, 64, f"b64_{i}", with_routes=False)  # prefill kernels
        c = dump(tmp, "cuda", ids, 8, 5, f"b5_{i}", with_routes=False)
        ar = dump(tmp, "cuda", ids, 8, 1, f"r1_{i}")  # observers: no graph
        br = dump(tmp, "cuda", ids, 8, 64, f"r64_{i}")
        assert a[0]["generated"] == b[0]["generated"] == c[0]["generated"]
        assert np.array_equal(a[1], b[1]) and np.array_equal(a[1], c[1]), \
            f"prompt {i}: logits depend on the batch (max {np.abs(a[1] - b[1]).max():.3g})"
        assert np.array_equal(a[1], ar[1]) and np.array_equal(a[1], br[1]), f"prompt {i}: observers change logits"
        assert ar[2] == br[2], f"prompt {i}: routes depend on the batch"
    print("\nbatch 1 (graph) / 5 / 64, with and without observers: logits and routes bit-identical")


def test_graphs_off_identical(fx, tmp_path):
    meta, z = fx
    ids = z["p0.ids"]
    a = dump(str(tmp_path), "cuda", ids, 8, 1, "g1", with_routes=False)
    os.environ["RL_CUDA_GRAPHS"] = "0"
    try:
        b = dump(str(tmp_path), "cuda", ids, 8, 1, "g0", with_routes=False)
    finally:
        del os.environ["RL_CUDA_GRAPHS"]
    assert np.array_equal(a[1], b[1])


@pytest.mark.skipif(os.environ.get("RL_CUDA_LONG") != "1", reason="needs a GPU and RL_CUDA_LONG=1 (16K-position check, slow on the CPU side)")
def test_long_context(fx, tmp_path):
    n = int(os.environ.get("RL_CUDA_LONG_N", "16384"))
    model = os.path.join(str(tmp_path), "long.gguf")
    r = run(["synth", "--preset", "tiny", "-o", model, "--quiet", "--geometry", f"ctx={n + 64}"])
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 4096, n)
    G = 8
    jc, lc, _ = dump(str(tmp_path), "cuda", ids, G, 512, "lc", model, with_routes=False)
    jr, lr, _ = dump(str(tmp_path), "cpu", ids, G, 512, "lr", model, with_routes=False)
    V = lc.size // (n + G)
    lc, lr = lc.reshape(n + G, V), lr.reshape(n + G, V)
    tail = slice(n - 64, n)
    d = np.abs(lc[tail].astype(np.float64) - lr[tail])
    scale = np.abs(lr[tail]).max()
    print(f"\nlong context {n}: last 64 positions max |diff| {d.max():.3e} (logit scale {scale:.3g}, "
          f"relative {d.max() / scale:.2e}); greedy cuda {jc['generated']} cpu {jr['generated']}")
    assert d.max() <= 1e-3 * scale, "CPU and CUDA disagree at long context"
    assert (lc[tail].argmax(1) == lr[tail].argmax(1)).mean() >= 0.98


def test_mxfp4_experts(fx, tmp_path):
    """Issue 47: a synthetic model whose routed experts are MXFP4 (`redlite synth --expert-type MXFP4`)
    runs on the CUDA backend: logits of every position within the long-context test's relative bound of
    the CPU reference with the same greedy ids, and batch 1 (decode graph) / 64 (prefill) bit-identical,
    on CUDA's float path as every comparison with the float reference here (FLOAT: the default integer
    path quantises activations, which on this random tiny model, whose logits span ~1.6, moves them by
    ~2 and flips greedy ids, as the CPU's own `--fast` does: measured 2026-12-07, H100); the default path's
    batch invariance too. (The kernels of Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 themselves:
    test_cuda_ops.)"""
    model = os.path.join(str(tmp_path), "mxfp4.gguf")
    r = run(["synth", "--preset", "tiny", "-o", model, "--quiet", "--expert-type", "MXFP4"])
    assert r.returncode == 0, r.stderr
    ids = np.random.default_rng(11).integers(0, 4096, 40)
    G = 8
    jc, lc, _ = dump(str(tmp_path), "cuda", ids, G, 64, "mc", model, with_routes=False, env=FLOAT)
    jr, lr, _ = dump(str(tmp_path), "cpu", ids, G, 64, "mr", model, with_routes=False)
    V = lc.size // (len(ids) + G)
    lc, lr = lc.reshape(-1, V), lr.reshape(-1, V)
    assert np.isfinite(lc).all()
    assert jc["generated"] == jr["generated"]
    d, scale = np.abs(lc.astype(np.float64) - lr).max(), np.abs(lr).max()
    assert d <= 1e-3 * scale, f"MXFP4 experts: CPU and CUDA logits differ by {d:.3g} (scale {scale:.3g})"
    a = dump(str(tmp_path), "cuda", ids, G, 1, "m1", model, with_routes=False, env=FLOAT)
    assert a[0]["generated"] == jc["generated"] and np.array_equal(a[1], lc.reshape(-1)), \
        "MXFP4 experts: batch 1 and batch 64 differ on CUDA (float path)"
    i64, i1 = (dump(str(tmp_path), "cuda", ids, G, b, f"i{b}", model, with_routes=False) for b in (64, 1))
    assert i1[0]["generated"] == i64[0]["generated"] and np.array_equal(i1[1], i64[1]), \
        "MXFP4 experts: batch 1 and batch 64 differ on CUDA (default integer path)"
    print(f"\nMXFP4 experts: logits vs cpu max {d:.2e} (scale {scale:.3g}); batch 1 == 64 bit for bit")


Q35 = ["tiny-q35moe", "tiny-q35"]


@pytest.fixture(params=Q35)
def fxq(request, fx):
    """A Qwen3.5-family fixture (fx: the same skips when there is no binary or no device)."""
    path = os.path.join(ROOT, "tests", "fixtures", request.param)
    return request.param, path + ".gguf", json.load(open(path + ".json")), np.load(path + ".npz")


def test_qwen35_family(fxq, tmp_path):
    """Issue 47 item 4: qwen35moe (ssm_beta/ssm_alpha into the split gate layout, value head h on
    key head h % hk) and qwen35 (the dense FFN in the shared expert's launches, combined without
    routed experts) on the CUDA backend: greedy ids as transformers' up to the first near-tie,
    logits within BOUND of the CPU reference, router ids as the CPU's away from near-ties (MoE),
    and batch 1 (decode graph) / 5 / 64 (prefill) bit-identical."""
    name, model, meta, z = fxq
    tmp = str(tmp_path)
    report = []
    for i in prompts(meta):
        ids, want = z[f"p{i}.ids"], z[f"p{i}.greedy_ids"]
        G, T = len(want), len(ids)
        jc, lc, rc = dump(tmp, "cuda", ids, G, 64, f"c{i}", model, env=FLOAT)
        jr, lr, rr = dump(tmp, "cpu", ids, G, 64, f"r{i}", model)
        V = lc.size // (T + G)
        lc, lr = lc.reshape(T + G, V), lr.reshape(T + G, V)
        got = np.array(jc["generated"])
        margin = z[f"p{i}.margin"][T - 1:]
        tie = next((s for s in range(G) if margin[s] < NEAR_TIE), G)
        same = int(np.argmax(got != want)) if (got != want).any() else G
        assert same >= tie, f"{name} prompt {i}: greedy differs from transformers at step {same} (near-tie {tie})"
        common = int(np.argmax(got != np.array(jr["generated"]))) if (got != np.array(jr["generated"])).any() else G
        rows = T + common
        d = np.abs(lc[:rows].astype(np.float64) - lr[:rows])
        assert np.isfinite(lc[:rows]).all()
        assert d.max() <= BOUND, f"{name} prompt {i}: max |logit diff| vs cpu {d.max():.3g} > {BOUND}"
        mism = 0
        if f"p{i}.router_gap" in z.files:
            gap = z[f"p{i}.router_gap"]
            assert len(rc) > 0, f"{name}: no routes from the CUDA backend"
            for (layer, pos), a in rc.items():
                if pos < rows and a["ids"] != rr[(layer, pos)]["ids"] and not (pos < gap.shape[1] and gap[layer, pos] < GAP):
                    mism += 1
        assert mism == 0, f"{name} prompt {i}: {mism} router choices differ from the CPU away from near-ties"
        a = dump(tmp, "cuda", ids, 8, 1, f"b1_{i}", model, with_routes=False)
        b = dump(tmp, "cuda", ids, 8, 64, f"b64_{i}", model, with_routes=False)
        c = dump(tmp, "cuda", ids, 8, 5, f"b5_{i}", model, with_routes=False)
        assert a[0]["generated"] == b[0]["generated"] == c[0]["generated"]
        assert np.array_equal(a[1], b[1]) and np.array_equal(a[1], c[1]), f"{name} prompt {i}: logits depend on the batch"
        report.append(f"{name} p{i}: greedy {same}/{G} = transformers (near-tie {tie}); logits vs cpu max {d.max():.2e}")
    print("\n" + "\n".join(report))


def test_32_query_and_2_kv_heads(fx, tmp_path):
    """The attention geometry of Qwen3.5-122B-A10B and 397B-A17B: 32 query + 2 KV heads, more heads than
    one block of k_qk_norm_rope's 32 warps (it takes them 32 per block). A cut of the 122B preset
    (`synth --geometry layers=4,vocab=4096,experts=16`: full width, 3 DeltaNet layers and 1 attention
    layer), 24 prompt tokens in one forward then 8 greedy steps: CUDA's float path (RL_CUDA_MMQ=0: the
    same arithmetic as the reference up to float32 sums) against the CPU reference, every logit within
    BOUND up to the first greedy disagreement (this random model's margins can be ~1e-2), and batch 1
    (every token a step) bit-identical to the one-forward prompt."""
    tmp = str(tmp_path)
    model = os.path.join(tmp, "c122.gguf")
    r = run(["synth", "--preset", "122b-a10b-ud-iq2_xxs", "--geometry", "layers=4,vocab=4096,experts=16", "-o",
             model, "--quiet"])
    assert r.returncode == 0, r.stderr
    info = run(["info", model, "--json"])
    assert info.returncode == 0, info.stderr
    ids = [(i * 7919 + 101) % 4096 for i in range(24)]
    G, T = 8, len(ids)
    jc, lc, _ = dump(tmp, "cuda", ids, G, 64, "c", model, with_routes=False, env={"RL_CUDA_MMQ": "0"})
    jr, lr, _ = dump(tmp, "cpu", ids, G, 64, "r", model, with_routes=False)
    j1, l1, _ = dump(tmp, "cuda", ids, G, 1, "c1", model, with_routes=False, env={"RL_CUDA_MMQ": "0"})
    V = lc.size // (T + G)
    lc, lr, l1 = lc.reshape(T + G, V), lr.reshape(T + G, V), l1.reshape(T + G, V)
    gc, gr = np.array(jc["generated"]), np.array(jr["generated"])
    common = int(np.argmax(gc != gr)) if (gc != gr).any() else G
    rows = T + common
    assert np.isfinite(lc[:rows]).all()
    d = np.abs(lc[:rows].astype(np.float64) - lr[:rows]).max()
    assert d <= BOUND, f"32 + 2 heads: max |logit diff| vs the CPU reference {d:.3g} > {BOUND}"
    assert np.array_equal(lc[:T], l1[:T]), "32 + 2 heads: --batch 1 prompt logits differ from --batch 64"
    print(f"\n32 + 2 heads (122B cut): logits vs cpu max {d:.2e} over {rows} rows, greedy {common}/{G} equal")


@pytest.mark.parametrize("name", ["tiny-a"] + Q35)
def test_integer_path_vs_scalar_oracle(fx, tmp_path, name):
    """CUDA's default (integer) path for the Q8_0 fixtures against the CPU engine with the same matmul
    arithmetic: `--fast` (activations quantised to Q8_0) with the scalar kernels (RL_KERN=scalar: every
    product is quant_traits.vec_dot, which the CUDA integer path reproduces bit for bit). What still
    differs is the float arithmetic of the other operations (attention, norms, DeltaNet, softmax), a few
    ulps, so position 0 agrees to 1e-3; later positions can see one activation land on the neighbouring
    Q8 code, which these random models amplify (0.35-0.40 between the CPU's AVX-512 and scalar kernels,
    measured), so there the bound is relative: CUDA no farther from the oracle than the float reference
    is (0.54-0.95 on these fixtures)."""
    model = os.path.join(ROOT, "tests", "fixtures", name + ".gguf")
    z = np.load(os.path.join(ROOT, "tests", "fixtures", name + ".npz"))
    tmp, report = str(tmp_path), []
    for i in range(3):
        if f"p{i}.ids" not in z:
            break
        ids = z[f"p{i}.ids"]
        # RL_CUDA_MMQB_ROWS=0: the fixtures' matrices are narrower than the default's 256 rows, which
        # would keep them on the float path
        _, lc, _ = dump(tmp, "cuda", ids, 0, 64, f"i{i}", model, with_routes=False, env={"RL_CUDA_MMQB_ROWS": "0"})
        _, lo, _ = dump(tmp, "cpu", ids, 0, 64, f"o{i}", model, extra=("--fast",), with_routes=False,
                        env={"RL_KERN": "scalar"})
        _, lr, _ = dump(tmp, "cpu", ids, 0, 64, f"f{i}", model, with_routes=False)
        T = len(ids)
        lc, lo, lr = (a.reshape(T, -1).astype(np.float64) for a in (lc, lo, lr))
        assert np.isfinite(lc).all()
        d0, d, dref = np.abs(lc[0] - lo[0]).max(), np.abs(lc - lo).max(), np.abs(lr - lo).max()
        assert d0 <= 1e-3, f"{name} prompt {i}: integer path vs its oracle at position 0: {d0:.3g} > 1e-3"
        assert d <= dref, f"{name} prompt {i}: integer path {d:.3g} from its oracle, the float reference {dref:.3g}"
        report.append(f"{name} p{i}: vs scalar oracle row 0 {d0:.2e}, all rows {d:.2e} (reference {dref:.2e})")
    assert report, f"{name}: no prompts in the fixture"
    print("\n" + "\n".join(report))


@pytest.fixture(scope="module")
def c35(tmp_path_factory):
    """A cut of the Qwen3.5 35B-A3B preset for the tier's tests: 4 layers, 64 experts, vocab 4096."""
    model = str(tmp_path_factory.mktemp("c35") / "c35.gguf")
    r = run(["synth", "--preset", "35b-a3b-q4_k_m", "--geometry", "layers=4,vocab=4096,experts=64", "--routing",
             "calibrated", "-o", model, "--quiet"])
    assert r.returncode == 0, r.stderr
    return model


def test_tier_over_a_bounded_ram_cache(fx, c35, tmp_path):
    """A VRAM tier whose host tier is a bounded RAM cache smaller than the experts (a 122B on a 16 GiB
    card with 24 GiB of RAM, in small): the tier's fills come through the cache, which evicts, reads the
    tier's predictions ahead (q3n_expert_src.prefetch) and by default is VRAM's victim cache (what VRAM
    evicts is copied back device-to-host, q3n_expert_src.keep; what VRAM took is demoted). None of that
    may change a bit: a cut of the 35B-A3B preset (4 layers, 64 experts), 40 prompt tokens in one
    forward and 24 greedy steps, logits of every row equal to full residency's with the victim cache
    (default), without it (RL_CACHE_VICTIM=0: plain LRU) and with demotion alone (RL_CACHE_DEMOTE=1);
    and the stats show the cache really evicted, kept, demoted and prefetched as configured (else the
    test checks nothing). A kept expert is served later from the bytes VRAM gave back, so a wrong
    write-back (offsets, a slot already overwritten) changes the logits here."""
    tmp = str(tmp_path)
    model = c35
    ids = [(i * 7919 + 101) % 4096 for i in range(40)]
    G = 24
    jf, lf, _ = dump(tmp, "cuda", ids, G, 64, "full", model, with_routes=False)
    # 10 VRAM slots of 64 per layer; a RAM cache of 200 MiB holds about half of the 256 experts
    tier = ("--vram-mib", "4096", "--cache-mib", "200")
    configs = {"victim": {}, "lru": {"RL_CACHE_VICTIM": "0"}, "demote": {"RL_CACHE_VICTIM": "0", "RL_CACHE_DEMOTE": "1"}}
    for name, extra_env in configs.items():
        env = {"RL_VRAM_SLOTS": "10", **extra_env}
        jt, lt, _ = dump(tmp, "cuda", ids, G, 64, "tier" + name, model, with_routes=False, extra=tier, env=env)
        assert jf["generated"] == jt["generated"]
        assert np.array_equal(lf, lt), f"tier over a RAM cache ({name}): max |diff| {np.abs(lf - lt).max():.3g}"
        r = run(["dump", "-m", model, "--tokens", ",".join(map(str, ids)), "--greedy", str(G), "--backend", "cuda",
                 "--kv", "f32", *tier, "--stats", "--json"], env=env)
        assert r.returncode == 0, r.stderr
        ev = re.search(r"evictions (\d+)", r.stderr)
        tiers = re.search(r"(\d+) entries demoted .*?, (\d+) VRAM evictions kept here", r.stderr)
        pf = re.search(r"prefetch: .* loads (\d+)", r.stderr)
        dm, kp = (int(tiers.group(1)), int(tiers.group(2))) if tiers else (0, 0)
        assert ev and int(ev.group(1)) > 0, "the RAM cache evicted nothing: " + r.stderr[-1500:]
        assert pf and int(pf.group(1)) > 0, "the tier's predictions loaded nothing: " + r.stderr[-1500:]
        assert (dm > 0) == (name != "lru"), f"{name}: demoted {dm}: " + r.stderr[-1500:]
        assert (kp > 0) == (name == "victim"), f"{name}: kept {kp}: " + r.stderr[-1500:]
        print(f"\ntier over a 200 MiB RAM cache, {name}: == full residency; evictions {ev.group(1)}, "
              f"demoted {dm}, kept {kp}, prefetch loads {pf.group(1)}")


def test_verify_check_under_the_tier(fx, c35):
    """Speculation's contract under the VRAM tier: `redlite verify-check` runs K-row verifies (1..9 rows,
    each rolled back to one of its rows' snapshots) and compares every row with the single step at its
    position bit for bit, here with the experts in 10 of 64 VRAM slots per layer (misses filled, slots
    evicted between and inside verifies), on the tier's own path (RL_VRAM_GRAPH_VERIFY=0) and through the
    decode graph's tables (=1; the host tier the page-locked file mapping). Exit 1 names the first row
    that differs. The stats must show the tier and, with the switch, verifies inside the graph (else
    the second run checks nothing new)."""
    for v in ("0", "1"):
        r = run(["verify-check", "-m", c35, "--backend", "cuda", "--vram-mib", "4096", "--cache-mib", "mmap",
                 "-n", "120"], env={"RL_VRAM_SLOTS": "10", "RL_VRAM_GRAPH_VERIFY": v})
        assert r.returncode == 0, f"RL_VRAM_GRAPH_VERIFY={v}: " + r.stderr[-2000:]
        assert re.search(r"vram tier: .*expert slots per layer", r.stderr), r.stderr[-2000:]
        g = re.search(r"in the decode graph: (\d+) steps \((\d+) verifies\)", r.stderr)
        if v == "1":
            assert g and int(g.group(2)) > 0, "no verify ran through the graph's tables: " + r.stderr[-2000:]
        print(f"\nverify-check under the tier, RL_VRAM_GRAPH_VERIFY={v}: every row == its step; "
              f"{g.group(0) if g else 'decode graph not used'}")
