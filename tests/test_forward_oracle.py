"""The CPU forward pass against transformers (and llama.cpp) on the committed fixtures.

Each fixture (tools/make_fixtures.py) is a tiny random Qwen3-Next converted by llama.cpp's own
convert_hf_to_gguf.py, with transformers' greedy tokens, its final hidden states along the
greedy path (logits = hidden @ output.weight, rebuilt here in float64), the top-2 margins and
the router choices of every layer.

Bounds, reference path (double accumulation, float32 storage): both sides compute in float32 on
identical weights, so differences come only from rounding and summation order: relative error
~1e-7..1e-6 per op, compounded over a few layers, on logits of magnitude ~50 -> ~1e-4 expected.
We allow max |dlogit| <= 2e-3 per position (a real bug moves logits by O(1)), and KL(ref||ours)
<= 1e-6 (for a perturbation d of the logits KL ~ Var_p(d)/2 <= max|d|^2/2 = 2e-6).
A greedy divergence is accepted only where the oracle's own top-2 margin is below twice the
largest logit error we measured (a flip is then possible); the run stops comparing there.
Router top-k sets must match wherever transformers' k-th/(k+1)-th probability gap is >= 1e-5.

Fast path (--fast: SIMD kernels; activations quantised to Q8_0/Q8_K before each projection, as
ggml's CPU backend does): judged by a shadow check of every product against the reference on the
same quantised activations (see test_fast_path).
"""
import os

import numpy as np
import pytest

from oracle_util import fixtures, kl_rows, output_matrix, run_dump

FIX = fixtures()
CASES = [(d, m, pi) for d, m in FIX for pi in range(len(m["prompts"]))]
IDS = [f"{m['name']}-{m['prompts'][pi]['name']}" for d, m, pi in CASES]

BOUNDS = (2e-3, 1e-6)
ROUTER_TIE = 1e-5
REPORT = []


def test_fixtures_present():
    assert FIX, "no oracle fixtures found in tests/fixtures (tools/make_fixtures.py makes them)"


@pytest.mark.parametrize("fdir,meta,pi", CASES, ids=IDS)
def test_against_transformers(fdir, meta, pi):
    mode = "reference"
    import numpy as np
    npz = np.load(os.path.join(fdir, meta["npz"]["file"]))
    gguf_path = os.path.join(fdir, meta["gguf"]["file"])
    pr = meta["prompts"][pi]
    P = f"p{pi}."
    ids, hf_gen = list(pr["ids"]), list(pr["greedy_ids"])
    T, G = len(ids), len(hf_gen)
    gen, logits, routes = run_dump(gguf_path, ids, G)
    W = output_matrix(gguf_path)
    V = W.shape[0]
    logits = logits.reshape(-1, V)
    assert logits.shape[0] == T + G
    ref = npz[P + "hidden"].astype(np.float64) @ W.T  # [T+G-1, V] along transformers' greedy path
    margin = npz[P + "margin"].astype(np.float64)

    # greedy tokens: identical, or a divergence where the oracle itself is at a near-tie
    agree = 0
    while agree < G and gen[agree] == hf_gen[agree]:
        agree += 1
    n_cmp = T + agree if agree < G else T + G - 1  # rows computed on the same token path
    ours = logits[:n_cmp].astype(np.float64)
    dabs = np.abs(ours - ref[:n_cmp]).max(-1)
    kl = kl_rows(ref[:n_cmp], ours)
    max_d, max_kl = BOUNDS
    REPORT.append((meta["name"], pr["name"], mode, float(dabs.max()), float(kl.max()), agree, G))
    print(f"{meta['name']}/{pr['name']} [{mode}]: greedy {agree}/{G}, max|dlogit| {dabs.max():.3e} "
          f"(pos {int(dabs.argmax())}), max KL {kl.max():.3e}, mean KL {kl.mean():.3e}")
    if agree < G:
        m = margin[T - 1 + agree]
        assert m < 2 * dabs.max(), (
            f"greedy diverges at step {agree} (ours {gen[agree]}, transformers {hf_gen[agree]}) "
            f"where the oracle margin {m:.3e} exceeds 2x our max logit error {dabs.max():.3e}")
    assert dabs.max() <= max_d, f"max |dlogit| {dabs.max():.3e} > {max_d} at position {int(dabs.argmax())}"
    assert kl.max() <= max_kl, f"max KL {kl.max():.3e} > {max_kl}"

    # router: top-k sets identical wherever transformers' choice is not a near-tie
    if P + "router_ids" not in npz:  # a dense model (qwen35): no router, and none may be reported
        assert not routes, f"a dense model reported {len(routes)} router choices"
        return
    r_ids, r_gap = npz[P + "router_ids"], npz[P + "router_gap"]  # [L, N, k], [L, N]
    ours_r = {(r["layer"], r["pos"]): sorted(r["ids"]) for r in routes}
    checked = skipped = 0
    for layer in range(r_ids.shape[0]):
        for pos in range(min(n_cmp, r_ids.shape[1])):
            if r_gap[layer, pos] < ROUTER_TIE:
                skipped += 1
                continue
            want = sorted(int(x) for x in r_ids[layer, pos])
            got = ours_r.get((layer, pos))
            assert got == want, f"router layer {layer} pos {pos}: ours {got}, transformers {want} " \
                                f"(gap {r_gap[layer, pos]:.2e})"
            checked += 1
    print(f"router: {checked} (layer, position) choices identical, {skipped} near-ties skipped")
    assert checked > 0


@pytest.mark.parametrize("fdir,meta,pi", CASES, ids=IDS)
def test_fast_path(fdir, meta, pi):
    """--fast (SIMD kernels on quantised activations) checked by `dump --check-fast`: every fast
    product of the run is recomputed from the SAME quantised activation bytes in double and must
    agree to 1e-5 + n_in * 6e-8 relative to sum |w a| (K/IQ integer sums are exact; only float
    epilogues and lane sums differ). An end-to-end comparison cannot do this job: on these random
    models a value that lands within rounding of a quantisation step flips, and the flip spreads.
    The distance to transformers is reported (activation quantisation costs what it costs
    llama.cpp too: see the fixture's llama_cpp.vs_fp32 numbers). One run gives both: the shadow check
    only reads the fast path's values, so its logits are those of a plain --fast run (the same bytes)."""
    gguf_path = os.path.join(fdir, meta["gguf"]["file"])
    pr = meta["prompts"][pi]
    ids, G = list(pr["ids"]), len(pr["greedy_ids"])
    err = []
    gen_f, lf, _ = run_dump(gguf_path, ids, G, ["--fast", "--check-fast"], stderr=err)  # asserts exit 0
    line = [x for x in err if x.startswith("fast-check:")]
    assert line, "\n".join(err)
    print(f"{meta['name']}/{pr['name']} [fast] {line[0]}")
    checked = int(line[0].split()[1])
    assert " 0 beyond tolerance" in line[0] and checked > 0, "\n".join(err)
    W = output_matrix(gguf_path)
    lf = lf.reshape(-1, W.shape[0]).astype(np.float64)
    agree = 0
    while agree < G and gen_f[agree] == pr["greedy_ids"][agree]:
        agree += 1
    k = len(ids) + agree if agree < G else len(ids) + G - 1
    ref = np.load(os.path.join(fdir, meta["npz"]["file"]))[f"p{pi}.hidden"][:k].astype(np.float64) @ W.T
    print(f"    vs transformers: greedy {agree}/{G}, max|dlogit| {np.abs(lf[:k] - ref).max():.3e}, "
          f"max KL {kl_rows(ref, lf[:k]).max():.3e}")


@pytest.mark.parametrize("fdir,meta,pi", CASES, ids=IDS)
def test_against_llama_cpp_record(fdir, meta, pi):
    """llama.cpp (llama-cpp-python, recorded by the fixture tool on the same GGUF) against ours.
    llama.cpp's CPU backend quantises activations (Q8_0), so it is itself off transformers by up to
    a few logits on these models (llama_cpp.vs_fp32); our reference path is within 1e-4. So:
    wherever llama.cpp follows transformers' greedy path, ours follows it too (identical tokens);
    where llama.cpp leaves it, transformers' own margin there must be within llama.cpp's error
    (2 x its max |dlogit|): the divergence is llama.cpp's rounding, not a disagreement about the
    model. On the shared prefix, llama.cpp's top-16 logits must be within its recorded error of ours."""
    info = meta.get("llama_cpp", {})
    if not info.get("available"):
        pytest.skip(f"fixture has no llama.cpp record: {info.get('reason', 'not recorded')}")
    npz = np.load(os.path.join(fdir, meta["npz"]["file"]))
    pr = meta["prompts"][pi]
    rec = info["prompts"][pi]
    lg = list(npz[f"llama.p{pi}.greedy_ids"])
    gguf_path = os.path.join(fdir, meta["gguf"]["file"])
    gen, logits, _ = run_dump(gguf_path, pr["ids"], len(pr["greedy_ids"]))
    agree = 0
    while agree < len(lg) and gen[agree] == lg[agree]:
        agree += 1
    llama_err = rec["vs_fp32"]["max_abs_dlogit"]
    print(f"{meta['name']}/{pr['name']}: greedy agrees with llama.cpp for {agree}/{len(lg)} tokens "
          f"(llama.cpp vs transformers: {rec['greedy_agree_prefix_vs_fp32']}; its max|dlogit| {llama_err:.3f})")
    assert agree >= rec["greedy_agree_prefix_vs_fp32"]
    if agree < len(lg):
        margin = npz[f"p{pi}.margin"][len(pr["ids"]) - 1 + agree]
        assert margin < 2 * llama_err, f"ours and llama.cpp diverge at step {agree} where the margin is {margin:.3e}"
    V = output_matrix(gguf_path).shape[0]
    ours = logits.reshape(-1, V)
    n = min(len(pr["ids"]) + agree, npz[f"llama.p{pi}.top_ids"].shape[0])
    top_ids, top_val = npz[f"llama.p{pi}.top_ids"][:n], npz[f"llama.p{pi}.top_logits"][:n]
    d = np.abs(np.take_along_axis(ours[:n], top_ids, -1) - top_val).max()
    print(f"    llama.cpp top-16 logits vs ours on {n} positions: max |d| {d:.3f}")
    assert d <= llama_err * 1.05 + 1e-3, f"llama.cpp's top logits differ from ours by {d:.3f} (> {llama_err:.3f})"


MTP_CASES = [(d, m, pi) for d, m, pi in CASES if m.get("derived", {}).get("mtp")]


@pytest.mark.parametrize("fdir,meta,pi", MTP_CASES,
                         ids=[f"{m['name']}-{m['prompts'][pi]['name']}" for d, m, pi in MTP_CASES])
def test_mtp_head(fdir, meta, pi, tmp_path):
    """The MTP head (spec F.2) on every pair (h_p, x_{p+1}) of the greedy path against the
    fixture's oracle (transformers' own modules, pair p at RoPE position p+1). Same bounds as the
    main model: the head is one more full-attention + MoE layer on the same float32 arithmetic."""
    gguf_path = os.path.join(fdir, meta["gguf"]["file"])
    pr = meta["prompts"][pi]
    ids, hf_gen = list(pr["ids"]), list(pr["greedy_ids"])
    mtp_file = tmp_path / "mtp.f32"
    gen, _, _ = run_dump(gguf_path, ids, len(hf_gen), ["--mtp", str(mtp_file)])
    assert gen == hf_gen, "main-model greedy path differs; see test_against_transformers"
    W = output_matrix(gguf_path)
    ours = np.fromfile(mtp_file, dtype=np.float32).reshape(-1, W.shape[0]).astype(np.float64)
    ref = np.load(os.path.join(fdir, meta["npz"]["file"]))[f"p{pi}.mtp_hidden"].astype(np.float64) @ W.T
    assert ours.shape == ref.shape
    d = np.abs(ours - ref).max(-1)
    kl = kl_rows(ref, ours)
    agree = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    print(f"{meta['name']}/{pr['name']} [mtp]: {len(d)} drafts, max|dlogit| {d.max():.3e}, max KL {kl.max():.3e}, "
          f"top-1 agreement {agree:.0%}")
    assert d.max() <= BOUNDS[0] and kl.max() <= BOUNDS[1]
