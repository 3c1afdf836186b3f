"""`redlite synth`: synthetic Qwen3-Next GGUF files (src/model/synth.c, src/model/synth_gen.c).

Only the tiny preset is written here (CI budget); the full-size presets are checked through
`--list` (their type census and data size are pure arithmetic). The binary is build/redlite
(override with REDLITE_BIN).

Checks: gguf-py reads the file and every tensor has the type and shape of the preset table
(re-stated below independently of the C code); dequantised values are finite with the intended
spread; `redlite info` (if built) agrees; the engine runs it with finite logits and routing that
varies across tokens; the same seed gives the same bytes whatever the thread count, another seed
different bytes; --mtp adds the nextn block; --geometry overrides and is validated.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from oracle_util import file_sha256 as sha256

gguf = pytest.importorskip("gguf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))
VOCAB = os.path.join(ROOT, "tests", "fixtures", "qwen3-vocab.gguf")

# tiny geometry (synth.c synth_geom_default)
D, LAYERS, EXPERTS, TOP_K, FF_EXP, FF_SH = 256, 4, 16, 4, 256, 256
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
STATE, GROUPS, DT_RANK, INNER, CONV = 64, 2, 4, 256, 4
CONV_DIM = 2 * GROUPS * STATE + INNER


def redlite(*args, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


def synth(path, *extra):
    r = redlite("synth", "--preset", "tiny", "-o", str(path), "--quiet", *extra)
    assert r.returncode == 0, r.stderr
    assert "bytes" in r.stdout and "MB/s" in r.stdout
    return path


def cf2_type(name, layer, n_layer=LAYERS, n_precise=1):
    """The CF2 table (also the tiny preset's), restated from redlite-reference §2/§3."""
    if name == "token_embd.weight":
        return "Q2_K"
    if name == "output.weight":
        return "Q5_K"
    short = name.split(".", 2)[2] if name.startswith("blk.") else name
    if short in ("ffn_gate_inp.weight",):
        return "F32"
    if short.endswith("norm.weight") or short in ("ssm_a", "ssm_dt.bias", "ssm_conv1d.weight",
                                                  "ffn_gate_inp_shexp.weight"):
        return "F32"
    if short in ("attn_k.weight", "attn_v.weight", "ffn_down_shexp.weight"):
        return "Q6_K"
    if short == "ssm_ba.weight":
        return "Q8_0"
    if short.endswith("_exps.weight"):
        return "IQ2_XS" if layer >= n_layer - n_precise else "IQ1_M"
    return "Q4_K"


def expected_tiny(mtp=False, n_vocab=4096):
    """name -> (type, shape in ggml order) for the tiny preset."""
    t = {"token_embd.weight": (D, n_vocab), "output_norm.weight": (D,), "output.weight": (D, n_vocab)}
    for il in range(LAYERS + (1 if mtp else 0)):
        b = f"blk.{il}."
        t[b + "attn_norm.weight"] = (D,)
        t[b + "post_attention_norm.weight"] = (D,)
        if il >= LAYERS or (il + 1) % 4 == 0:
            t[b + "attn_q.weight"] = (D, 2 * HEADS * HEAD_DIM)
            t[b + "attn_k.weight"] = (D, KV_HEADS * HEAD_DIM)
            t[b + "attn_v.weight"] = (D, KV_HEADS * HEAD_DIM)
            t[b + "attn_output.weight"] = (HEADS * HEAD_DIM, D)
            t[b + "attn_q_norm.weight"] = (HEAD_DIM,)
            t[b + "attn_k_norm.weight"] = (HEAD_DIM,)
        else:
            t[b + "attn_qkv.weight"] = (D, CONV_DIM)
            t[b + "attn_gate.weight"] = (D, INNER)
            t[b + "ssm_ba.weight"] = (D, 2 * DT_RANK)
            t[b + "ssm_conv1d.weight"] = (CONV, CONV_DIM)
            t[b + "ssm_dt.bias"] = (DT_RANK,)
            t[b + "ssm_a"] = (DT_RANK,)
            t[b + "ssm_norm.weight"] = (INNER // DT_RANK,)
            t[b + "ssm_out.weight"] = (INNER, D)
        t[b + "ffn_gate_inp.weight"] = (D, EXPERTS)
        t[b + "ffn_gate_exps.weight"] = (D, FF_EXP, EXPERTS)
        t[b + "ffn_up_exps.weight"] = (D, FF_EXP, EXPERTS)
        t[b + "ffn_down_exps.weight"] = (FF_EXP, D, EXPERTS)
        t[b + "ffn_gate_inp_shexp.weight"] = (D,)
        t[b + "ffn_gate_shexp.weight"] = (D, FF_SH)
        t[b + "ffn_up_shexp.weight"] = (D, FF_SH)
        t[b + "ffn_down_shexp.weight"] = (FF_SH, D)
        if il >= LAYERS:
            t[b + "nextn.eh_proj.weight"] = (2 * D, D)
            for n in ("enorm", "hnorm", "shared_head_norm"):
                t[b + f"nextn.{n}.weight"] = (D,)
    out = {}
    for name, shape in t.items():
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        out[name] = (cf2_type(name, layer), shape)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny preset with the default byte-level vocabulary of 4096 tokens (fast to check)."""
    assert os.path.exists(BIN), f"{BIN} not built: run make"  # make test builds it first
    return synth(tmp_path_factory.mktemp("synth") / "tiny.gguf")


def test_gguf_types_shapes_values(tiny):
    r = gguf.GGUFReader(str(tiny))
    want = expected_tiny()
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(want)
    for name, (typ, shape) in want.items():
        t = got[name]
        assert t.tensor_type.name == typ, name
        assert tuple(int(x) for x in t.shape) == shape, name
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        assert np.all(np.isfinite(x)), name
        if typ != "F32" or name.endswith("ffn_gate_inp.weight"):  # matrices: std ~ 0.02*sqrt(2048/n_in)
            n_in = shape[0]
            sigma = 0.02 if name in ("token_embd.weight", "output.weight") else 0.02 * (2048 / n_in) ** 0.5
            assert 0.7 * sigma < x.std() < 1.4 * sigma, (name, x.std(), sigma)
            assert abs(x.mean()) < 0.1 * sigma, name
    f = r.fields
    assert bytes(f["general.architecture"].parts[-1]).decode() == "qwen3next"
    assert int(f["qwen3next.block_count"].parts[-1][0]) == LAYERS
    assert int(f["qwen3next.expert_count"].parts[-1][0]) == EXPERTS
    assert len(f["tokenizer.ggml.tokens"].data) == 4096
    assert int(f["tokenizer.ggml.eos_token_id"].parts[-1][0]) == 4095


def test_real_vocab_info_and_dump(tmp_path):
    """With --vocab the tokenizer.* keys are copied; `redlite info` agrees on
    everything; the brief's smoke command runs."""
    assert os.path.exists(BIN), f"{BIN} not built: run make"  # make test builds it first
    p = synth(tmp_path / "tiny-vocab.gguf", "--vocab", VOCAB)
    d = redlite("dump", "-m", str(p), "--tokens", "1,2,3", "--greedy", "4", "--json", timeout=300)
    assert d.returncode == 0, d.stderr
    assert len(json.loads(d.stdout)["generated"]) == 4
    r = redlite("info", str(p), "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["architecture"] == "qwen3next"
    assert j["layers"]["n_deltanet"] == 3 and j["layers"]["n_attention"] == 1
    counts = {t["type"]: t["count"] for t in j["tensor_types"]}
    want = {}
    for typ, _ in expected_tiny(n_vocab=151936).values():
        want[typ] = want.get(typ, 0) + 1
    assert counts == want
    tok = j["tokenizer"]
    assert (tok["model"], tok["pre"], tok["vocab_size"], tok["merges"]) == ("gpt2", "qwen2", 151936, 151387)
    assert tok["eos_token_id"] == 151645 and tok["chat_template"]


def test_engine_runs_finite_varied_routing(tiny, tmp_path):
    routes, logits = tmp_path / "routes.jsonl", tmp_path / "logits.bin"
    r = redlite("dump", "-m", str(tiny), "--tokens", "1,2,3,1000,2000", "--greedy", "4", "--json",
                "--routes", str(routes), "--logits", str(logits), timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["generated"]) == 4
    lg = np.fromfile(logits, dtype=np.float32).reshape(-1, 4096)
    assert lg.shape[0] == 5 + 4
    assert np.all(np.isfinite(lg))
    assert lg.std(axis=1).min() > 0.05  # not flat
    rows = [json.loads(line) for line in open(routes)]
    assert rows and all(len(x["ids"]) == TOP_K for x in rows)
    for layer in range(LAYERS):
        sel = [tuple(sorted(x["ids"])) for x in rows if x["layer"] == layer]
        assert len(set(sel)) > 1, f"layer {layer}: every token picked the same experts"
        used = {e for s in sel for e in s}
        assert len(used) > TOP_K + 2, f"layer {layer}: only {len(used)} experts ever used"
        w = [x["w"] for x in rows if x["layer"] == layer]
        assert all(abs(sum(ws) - 1) < 1e-4 and max(ws) < 0.99 for ws in w)  # not one-hot


def test_deterministic(tmp_path):
    assert os.path.exists(BIN), f"{BIN} not built: run make"  # make test builds it first
    a = synth(tmp_path / "a.gguf", "--seed", "7", "-t", "1")
    b = synth(tmp_path / "b.gguf", "--seed", "7", "-t", "3")
    c = synth(tmp_path / "c.gguf", "--seed", "8")
    assert sha256(a) == sha256(b)
    assert sha256(a) != sha256(c)
    assert os.path.getsize(a) == os.path.getsize(c)


def test_mtp_block(tmp_path):
    assert os.path.exists(BIN), f"{BIN} not built: run make"  # make test builds it first
    p = synth(tmp_path / "mtp.gguf", "--mtp")
    r = gguf.GGUFReader(str(p))
    want = expected_tiny(mtp=True)
    got = {t.name: t.tensor_type.name for t in r.tensors}
    assert got == {k: v[0] for k, v in want.items()}
    assert int(r.fields["qwen3next.block_count"].parts[-1][0]) == LAYERS + 1
    assert int(r.fields["qwen3next.nextn_predict_layers"].parts[-1][0]) == 1
    d = redlite("dump", "-m", str(p), "--tokens", "5,6", "--json", timeout=300)
    assert d.returncode == 0, d.stderr


def test_geometry_override_and_errors(tmp_path):
    assert os.path.exists(BIN), f"{BIN} not built: run make"  # make test builds it first
    p = synth(tmp_path / "g.gguf", "--geometry", "layers=8,experts=32,top_k=6,precise=2")
    r = gguf.GGUFReader(str(p))
    names = {t.name: t for t in r.tensors}
    assert "blk.7.attn_q.weight" in names and "blk.6.attn_qkv.weight" in names
    assert tuple(int(x) for x in names["blk.0.ffn_gate_exps.weight"].shape) == (D, FF_EXP, 32)
    assert names["blk.5.ffn_up_exps.weight"].tensor_type.name == "IQ1_M"
    assert names["blk.6.ffn_up_exps.weight"].tensor_type.name == "IQ2_XS"
    assert int(r.fields["qwen3next.expert_used_count"].parts[-1][0]) == 6
    bad = redlite("synth", "--preset", "tiny", "-o", str(tmp_path / "x.gguf"), "--geometry", "hidden=300")
    assert bad.returncode == 2 and "not a multiple" in bad.stderr
    assert not os.path.exists(tmp_path / "x.gguf")
    bad = redlite("synth", "--preset", "tiny", "-o", str(tmp_path / "x.gguf"), "--geometry", "bogus=1")
    assert bad.returncode == 2 and "unknown key" in bad.stderr
    bad = redlite("synth", "--preset", "nope", "-o", str(tmp_path / "x.gguf"))
    assert bad.returncode == 2 and "unknown preset" in bad.stderr


def census(preset, *extra):
    r = redlite("synth", "--preset", preset, "--list", *extra)
    assert r.returncode == 0, r.stderr
    c, total = {}, None
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[2] == "tensors":
            c[parts[0]] = (int(parts[1]), int(parts[3]))
        if "bytes of tensor data" in line:
            total = int(line.split("tensors, ")[1].split()[0])
    return c, total


def test_full_size_censuses():
    assert os.path.exists(BIN), f"{BIN} not built: run make"  # make test builds it first
    c, total = census("cf2")
    # + ~6 MB of metadata = 19,319,619,264 B, the published CF2 size (redlite-reference §3)
    assert total == 19313630208
    assert c["Q4_K"] == (228, 864 << 20)  # "reads 864 MiB of Q4_K dense weights per token"
    assert c["IQ2_XS"][0] == 3 * 8 and c["IQ1_M"][0] == 3 * 40
    assert c["Q2_K"][0] == 1 and c["Q5_K"][0] == 1 and c["Q8_0"][0] == 36
    c, _ = census("q4_k_m")
    # spec §B.3: 391 Q4_K + 55 Q6_K + 48 F16 + 313 F32 in the 807-tensor generation; the split
    # attn_qkv/attn_gate generation has 36 more Q4_K tensors
    assert c["Q6_K"][0] == 55 and c["Q4_K"][0] == 391 + 36 and c["F16"][0] == 48 and c["F32"][0] == 313
    c, _ = census("iq2_xxs")
    assert c["Q2_K"][0] == 1 + 6 and c["Q4_K"][0] == 12 + 36 and c["Q5_K"][0] == 1
    c, _ = census("cf2", "--mtp")
    assert c["IQ2_XS"][0] == 3 * 9
    c, _ = census("cf2", "--geometry", "layers=24,experts=256,hidden=1024")
    assert c["IQ2_XS"][0] == 3 * 4 and c["IQ1_M"][0] == 3 * 20  # precise layers follow: 24 / 6


def test_bench_json(tiny):
    r = redlite("bench", "-m", str(tiny), "--n-decode", "4", "--reps", "2", "--warmup", "1", "--depth", "8",
                "--prompt", "16,32", "--batch", "16", "--json", "--profile", "-t", "2", timeout=300)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert [d["depth"] for d in j["decode"]] == [0, 8]
    assert all(d["tok_s"] > 0 and d["gb_s"] > 0 and len(d["runs_tok_s"]) == 2 for d in j["decode"])
    assert [p["n_tokens"] for p in j["prompt"]] == [16, 32] and all(p["tok_s"] > 0 for p in j["prompt"])
    bpt = j["bytes_per_token"]
    assert bpt["routed_experts"] > 0 and bpt["dense"] > bpt["routed_experts"]  # tiny: the head dominates
    assert j["peak_rss_bytes"] > 0 and j["backend"] == "cpu"
    stages = {s["stage"]: s for s in j["profile"]["decode"]}
    assert stages["moe experts"]["ms_per_token"] > 0 and stages["output head"]["ms_per_token"] > 0
    assert abs(sum(s["pct"] for s in j["profile"]["decode"]) - 100) < 0.01
    bad = redlite("bench", "-m", str(tiny), "--prompt", "x")
    assert bad.returncode == 2


def test_all_experts_in_one_prefill_chunk(tmp_path):
    """A 512-expert top-10 model and a 1024-row prefill chunk: every expert of a layer is selected in one
    forward (2 x 512 + 2 projections in one dispatch); regression test for a task-count limit.
    The chunked prefill must end with the same logits as a one-row-at-a-time run."""
    path = str(tmp_path / "e512.gguf")
    subprocess.run([BIN, "synth", "--preset", "tiny", "--geometry", "experts=512,top_k=10,layers=2", "-o", path],
                   check=True, capture_output=True)
    ids = ",".join(str((i * 7919) % 4000 + 10) for i in range(1024))
    outs = []
    for batch in ("1024", "1"):
        lf = str(tmp_path / f"l{batch}.f32")
        r = subprocess.run([BIN, "dump", "-m", path, "--tokens", ids, "--batch", batch, "--fast", "--logits", lf,
                            "--routes", str(tmp_path / "r.jsonl")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs.append(np.fromfile(lf, dtype=np.float32))
    used = {e for line in open(tmp_path / "r.jsonl") for e in json.loads(line)["ids"] if json.loads(line)["layer"] == 0}
    assert len(used) == 512
    assert np.array_equal(outs[0], outs[1])


def test_expert_type_mxfp4(tmp_path):
    """--expert-type MXFP4 (issue 47): the routed experts are MXFP4 (every other tensor as the
    preset), their values decode in gguf-py with the intended spread, and the CPU engine runs the
    file: finite logits, and K-row verifies bit-identical to single steps (verify-check)."""
    assert os.path.exists(BIN), f"{BIN} not built: run make"  # make test builds it first
    p = synth(tmp_path / "mxfp4.gguf", "--expert-type", "MXFP4")
    want = expected_tiny()
    got = {t.name: t for t in gguf.GGUFReader(str(p)).tensors}
    assert set(got) == set(want)
    n_mx = 0
    for name, (typ, shape) in want.items():
        t = got[name]
        if "_exps." in name:
            assert t.tensor_type.name == "MXFP4", name
            x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            sigma = 0.02 * (2048 / shape[0]) ** 0.5
            assert np.all(np.isfinite(x)) and 0.7 * sigma < x.std() < 1.4 * sigma, (name, x.std(), sigma)
            n_mx += 1
        else:
            assert t.tensor_type.name == typ, name
    assert n_mx == 3 * LAYERS
    lg = tmp_path / "logits.bin"
    r = redlite("dump", "-m", str(p), "--tokens", "1,2,3,1000", "--greedy", "3", "--json", "--logits", str(lg),
                timeout=300)
    assert r.returncode == 0, r.stderr
    x = np.fromfile(lg, dtype=np.float32).reshape(-1, 4096)
    assert x.shape[0] == 4 + 3 and np.all(np.isfinite(x)) and x.std(axis=1).min() > 0.05
    r = redlite("verify-check", "-m", str(p), "-n", "12", "--draft", "3", "-t", "2", timeout=300)
    assert r.returncode == 0 and "verify-check: OK" in r.stdout, r.stdout + r.stderr
    r = redlite("info", str(p), "--json")
    assert r.returncode == 0, r.stderr
    assert {t["type"]: t["count"] for t in json.loads(r.stdout)["tensor_types"]}["MXFP4"] == 3 * LAYERS
    bad = redlite("synth", "--preset", "tiny", "-o", str(tmp_path / "x.gguf"), "--expert-type", "NOPE")
    assert bad.returncode == 2 and "unknown type" in bad.stderr
    bad = redlite("synth", "--preset", "tiny", "-o", str(tmp_path / "x.gguf"), "--expert-type", "Q5_1")
    assert bad.returncode == 2 and "no block generator" in bad.stderr and not (tmp_path / "x.gguf").exists()
    assert "IQ4_XS" in bad.stderr  # the message lists the generators


@pytest.mark.parametrize("typ", ["IQ2_S", "IQ3_S", "IQ4_XS", "IQ1_S", "Q3_K"])
def test_expert_type_generators(tmp_path, typ):
    """The block generators of the published files' other expert types (the exact hybrid's tests on
    the GPU write them): every routed expert of that type decodes in gguf-py with the intended
    spread and mean near 0, and the CPU engine runs the file with K-row verifies bit-identical to
    single steps."""
    assert os.path.exists(BIN), f"{BIN} not built: run make"
    p = synth(tmp_path / f"{typ}.gguf", "--expert-type", typ)
    n = 0
    for t in gguf.GGUFReader(str(p)).tensors:
        if "_exps." not in t.name:
            continue
        assert t.tensor_type.name == typ, t.name
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        sigma = 0.02 * (2048 / t.shape[0]) ** 0.5
        assert np.all(np.isfinite(x)) and 0.9 * sigma < x.std() < 1.1 * sigma, (t.name, x.std(), sigma)
        assert abs(x.mean()) < 0.05 * sigma, (t.name, x.mean())
        n += 1
    assert n == 3 * LAYERS
    r = redlite("verify-check", "-m", str(p), "-n", "8", "--draft", "3", "-t", "2", timeout=300)
    assert r.returncode == 0 and "verify-check: OK" in r.stdout, r.stdout + r.stderr
