"""`redlite info` against tiny Qwen3-Next GGUF files written by the `gguf` PyPI package.

Both converter generations (split attn_qkv + attn_gate, legacy fused ssm_in), with and without
an MTP block (blk.N.nextn.*), F32/F16/Q8_0 tensors, a file without full_attention_interval, a
split model written by gguf-py's own sharding, error messages, and the committed converter
fixtures (tests/fixtures/*.gguf) when present.

The binary is build/redlite (override with REDLITE_BIN).
"""
import functools
import glob
import json
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from oracle_util import cached, gguf_read  # noqa: E402 (after the importorskip)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))
Q8 = gguf.GGMLQuantizationType.Q8_0

# tiny hyperparameters
D, N_EXP, N_USED, FF_EXP, FF_SH, VOCAB = 64, 4, 2, 32, 32, 16
HEADS, HEADS_KV, HEAD_DIM = 2, 1, 32
SSM_STATE, SSM_GROUPS, SSM_DT_RANK, SSM_INNER, CONV = 16, 2, 4, 64, 4


def run(*args):
    return subprocess.run([BIN, "info", *args], capture_output=True, text=True, timeout=60)


class Model:
    """Builds the tensor list of a tiny Qwen3-Next and records what `info` should report."""

    def __init__(self, path, generation="split", mtp=False, n_layer=4, interval=4, write_interval=True,
                 split_max_tensors=0, drop=()):
        self.drop = drop  # tensor names left out of the file
        self.w = gguf.GGUFWriter(path, "qwen3next", split_max_tensors=split_max_tensors)
        self.rng = np.random.default_rng(0)
        self.types = {}  # type name -> [count, bytes]
        self.total = 0
        self.routed = 0
        self.n_tensors = 0
        self.mtp_tensors = 0
        self.mtp_bytes = 0
        self._cur_layer_mtp = False
        w = self.w
        n_blocks = n_layer + (1 if mtp else 0)
        w.add_context_length(4096)
        w.add_embedding_length(D)
        w.add_block_count(n_blocks)
        w.add_feed_forward_length(128)
        w.add_head_count(HEADS)
        w.add_head_count_kv(HEADS_KV)
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(1e7)
        w.add_rope_dimension_count(16)
        w.add_expert_count(N_EXP)
        w.add_expert_used_count(N_USED)
        w.add_expert_feed_forward_length(FF_EXP)
        w.add_expert_shared_feed_forward_length(FF_SH)
        w.add_ssm_conv_kernel(CONV)
        w.add_ssm_state_size(SSM_STATE)
        w.add_ssm_group_count(SSM_GROUPS)
        w.add_ssm_time_step_rank(SSM_DT_RANK)
        w.add_ssm_inner_size(SSM_INNER)
        if write_interval:
            w.add_full_attention_interval(interval)
        if mtp:
            w.add_nextn_predict_layers(1)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list([f"t{i}" for i in range(VOCAB)])
        w.add_token_merges(["t 0", "t 1", "t1 0"])
        w.add_eos_token_id(15)
        w.add_bos_token_id(14)
        w.add_pad_token_id(14)
        w.add_chat_template("{{ messages }}")

        self.tensor("token_embd.weight", (VOCAB, D), "Q8_0")
        self.tensor("output_norm.weight", (D,), "F32")
        self.tensor("output.weight", (VOCAB, D), "Q8_0")
        for i in range(n_blocks):
            is_mtp = mtp and i == n_layer
            self._cur_layer_mtp = is_mtp
            attention = is_mtp or (i + 1) % interval == 0
            p = f"blk.{i}."
            self.tensor(p + "attn_norm.weight", (D,), "F32")
            self.tensor(p + "post_attention_norm.weight", (D,), "F32")
            if attention:
                self.tensor(p + "attn_q.weight", (2 * HEADS * HEAD_DIM, D), "Q8_0")
                self.tensor(p + "attn_k.weight", (HEADS_KV * HEAD_DIM, D), "Q8_0")
                self.tensor(p + "attn_v.weight", (HEADS_KV * HEAD_DIM, D), "Q8_0")
                self.tensor(p + "attn_output.weight", (D, HEADS * HEAD_DIM), "Q8_0")
                self.tensor(p + "attn_q_norm.weight", (HEAD_DIM,), "F32")
                self.tensor(p + "attn_k_norm.weight", (HEAD_DIM,), "F32")
            else:
                conv_ch = 2 * SSM_GROUPS * SSM_STATE + SSM_INNER
                if generation == "split":
                    self.tensor(p + "attn_qkv.weight", (conv_ch, D), "Q8_0")
                    self.tensor(p + "attn_gate.weight", (SSM_INNER, D), "Q8_0")
                else:
                    self.tensor(p + "ssm_in.weight", (conv_ch + SSM_INNER, D), "Q8_0")
                self.tensor(p + "ssm_ba.weight", (2 * SSM_DT_RANK, D), "F32")
                self.tensor(p + "ssm_conv1d.weight", (conv_ch, CONV), "F32")
                self.tensor(p + "ssm_dt.bias", (SSM_DT_RANK,), "F32")
                self.tensor(p + "ssm_a", (SSM_DT_RANK,), "F32")
                self.tensor(p + "ssm_norm.weight", (SSM_STATE,), "F32")
                self.tensor(p + "ssm_out.weight", (D, SSM_INNER), "Q8_0")
            self.tensor(p + "ffn_gate_inp.weight", (N_EXP, D), "F16")
            self.tensor(p + "ffn_gate_exps.weight", (N_EXP, FF_EXP, D), "Q8_0")
            self.tensor(p + "ffn_up_exps.weight", (N_EXP, FF_EXP, D), "Q8_0")
            self.tensor(p + "ffn_down_exps.weight", (N_EXP, D, FF_EXP), "F16")
            self.tensor(p + "ffn_gate_inp_shexp.weight", (D,), "F32")
            self.tensor(p + "ffn_gate_shexp.weight", (FF_SH, D), "Q8_0")
            self.tensor(p + "ffn_up_shexp.weight", (FF_SH, D), "Q8_0")
            self.tensor(p + "ffn_down_shexp.weight", (D, FF_SH), "Q8_0")
            if is_mtp:
                self.tensor(p + "nextn.eh_proj.weight", (D, 2 * D), "Q8_0")
                self.tensor(p + "nextn.enorm.weight", (D,), "F32")
                self.tensor(p + "nextn.hnorm.weight", (D,), "F32")
                self.tensor(p + "nextn.shared_head_norm.weight", (D,), "F32")

    def tensor(self, name, shape, ty):
        """shape in PyTorch order (ne reversed)."""
        if name in self.drop:
            return
        x = self.rng.standard_normal(shape).astype(np.float32)
        if ty == "F32":
            data, nbytes = x, x.nbytes
            self.w.add_tensor(name, x)
        elif ty == "F16":
            data = x.astype(np.float16)
            nbytes = data.nbytes
            self.w.add_tensor(name, data)
        else:
            data = gguf.quants.quantize(x, Q8)
            nbytes = data.nbytes
            self.w.add_tensor(name, data, raw_dtype=Q8)
        c = self.types.setdefault(ty, [0, 0])
        c[0] += 1
        c[1] += nbytes
        self.total += nbytes
        self.n_tensors += 1
        if "_exps." in name:
            self.routed += nbytes
        if self._cur_layer_mtp:
            self.mtp_tensors += 1
            self.mtp_bytes += nbytes

    def write(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self


def info_json(path, runs=True):
    """The --json description; the exit status is 0 exactly when the verdict says the model runs."""
    r = run(path, "--json")
    assert r.returncode == (0 if runs else 1), r.stderr
    d = json.loads(r.stdout)
    assert d["verdict"]["runs"] is runs
    if not runs:  # the one line on stderr is the verdict
        assert r.stderr == f"redlite info: {d['verdict']['line']}\n"
    return d


Q8_ROW = lambda n: n // 32 * 34  # noqa: E731


@pytest.mark.parametrize("generation", ["split", "legacy"])
@pytest.mark.parametrize("mtp", [False, True])
def test_info_json(tmp_path, generation, mtp):
    path = str(tmp_path / "m.gguf")
    m = Model(path, generation=generation, mtp=mtp, n_layer=8).write()
    d = info_json(path)
    assert d["architecture"] == "qwen3next"
    assert d["file"]["gguf_version"] == 3 and d["file"]["parts"] == 1 and d["file"]["alignment"] == 32
    assert d["file"]["n_tensors"] == m.n_tensors
    assert d["file"]["size_bytes"] == os.path.getsize(path)
    hp = d["hparams"]
    assert hp["embedding_length"] == D and hp["block_count"] == 8 + mtp and hp["context_length"] == 4096
    assert hp["head_count"] == HEADS and hp["head_count_kv"] == HEADS_KV
    assert hp["key_length"] == HEAD_DIM and hp["value_length"] == HEAD_DIM
    assert hp["rope_freq_base"] == 1e7 and hp["rope_dimension_count"] == 16
    assert abs(hp["rms_norm_eps"] - 1e-6) < 1e-12
    assert hp["expert_count"] == N_EXP and hp["expert_used_count"] == N_USED
    assert hp["expert_feed_forward_length"] == FF_EXP and hp["expert_shared_feed_forward_length"] == FF_SH
    assert hp["ssm_conv_kernel"] == CONV and hp["ssm_state_size"] == SSM_STATE
    assert hp["ssm_group_count"] == SSM_GROUPS and hp["ssm_time_step_rank"] == SSM_DT_RANK
    assert hp["ssm_inner_size"] == SSM_INNER
    assert hp["full_attention_interval"] == 4 and d["full_attention_interval_default"] is False
    assert hp["nextn_predict_layers"] == (1 if mtp else None)

    L = d["layers"]
    kinds = ["deltanet", "deltanet", "deltanet", "attention"] * 2 + (["mtp"] if mtp else [])
    assert L["kinds"] == kinds
    assert L["n_layer"] == 8 + mtp and L["n_main"] == 8
    assert L["n_deltanet"] == 6 and L["n_attention"] == 2 and L["n_mtp"] == int(mtp) and L["n_unknown"] == 0
    assert L["attention_layers"] == [3, 7]
    assert L["interval_mismatch"] == []
    assert d["generation"] == generation

    hist = {t["type"]: (t["count"], t["bytes"]) for t in d["tensor_types"]}
    assert hist == {k: tuple(v) for k, v in m.types.items()}
    assert d["bytes"]["total"] == m.total
    assert d["bytes"]["routed_experts"] == m.routed
    assert d["bytes"]["dense"] == m.total - m.routed
    assert d["bytes"]["active_per_token"] > 0

    assert len(d["experts"]) == 8 + mtp
    for e in d["experts"]:
        assert e["n_expert"] == N_EXP and e["fused_gate_up"] is False and e["gate_up"] is None
        assert e["gate"] == {"type": "Q8_0", "bytes": FF_EXP * Q8_ROW(D)}
        assert e["up"] == {"type": "Q8_0", "bytes": FF_EXP * Q8_ROW(D)}
        assert e["down"] == {"type": "F16", "bytes": D * FF_EXP * 2}
        assert e["expert_bytes"] == 2 * FF_EXP * Q8_ROW(D) + D * FF_EXP * 2

    assert d["mtp"]["present"] is mtp
    assert d["mtp"]["layers"] == ([8] if mtp else [])
    assert d["mtp"]["n_tensors"] == m.mtp_tensors and d["mtp"]["bytes"] == m.mtp_bytes

    t = d["tokenizer"]
    assert t["model"] == "gpt2" and t["pre"] == "qwen2"
    assert t["vocab_size"] == VOCAB and t["merges"] == 3
    assert (t["eos_token_id"], t["bos_token_id"], t["padding_token_id"]) == (15, 14, 14)
    assert t["chat_template"] is True and t["chat_template_bytes"] == len("{{ messages }}")


def test_info_text(tmp_path):
    path = str(tmp_path / "m.gguf")
    Model(path, generation="legacy", mtp=True, n_layer=4).write()
    r = run(path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "architecture       qwen3next" in out
    assert "layers             5: 3 Gated DeltaNet, 1 full attention, 1 MTP" in out
    assert "DDDA M" in out
    assert "legacy fused ssm_in" in out
    assert "layers 0-4" in out and "gate Q8_0" in out and "down F16" in out
    assert "mtp                present: layer 4" in out
    assert "gpt2 / qwen2, 16 tokens, 3 merges" in out
    assert "eos/bos/pad      15 / 14 / 14" in out
    lines = [line for line in out.splitlines() if line.startswith("  ssm_inner_size")]
    assert len(lines) == 1, out  # the hyperparameter table is aligned
    assert lines[0].split() == ["ssm_inner_size", str(SSM_INNER)] and lines[0].index(str(SSM_INNER)) == 38


def test_interval_default_and_mismatch(tmp_path):
    path = str(tmp_path / "m.gguf")
    Model(path, n_layer=8, interval=2, write_interval=False).write()  # attention every 2nd layer
    d = info_json(path, runs=False)  # described, but the engine would look for DeltaNet tensors in layer 1
    assert d["verdict"]["line"] == "does not run: missing tensor blk.1.attn_qkv.weight"
    assert d["hparams"]["full_attention_interval"] == 4 and d["full_attention_interval_default"] is True
    assert d["layers"]["attention_layers"] == [1, 3, 5, 7]
    assert d["layers"]["interval_mismatch"] == [1, 5]  # interval 4 expects 3 and 7 only
    r = run(path)
    assert "(default: key absent or invalid)" in r.stdout
    assert "2 layer(s) disagree with full_attention_interval 4" in r.stdout


def test_split_model_from_gguf_py(tmp_path):
    path = tmp_path / "s.gguf"
    m = Model(str(path), n_layer=4, split_max_tensors=40).write()
    parts = sorted(glob.glob(str(tmp_path / "s-*-of-*.gguf")))
    assert len(parts) >= 2
    d = info_json(parts[0])
    assert d["file"]["parts"] == len(parts)
    assert d["file"]["n_tensors"] == m.n_tensors
    assert d["bytes"]["total"] == m.total
    assert d["file"]["size_bytes"] == sum(os.path.getsize(p) for p in parts)
    # entering through another part, and a missing part
    r = run(parts[1])
    assert r.returncode == 1 and "this is part 2 of a" in r.stderr and "-00001-of-" in r.stderr
    os.rename(parts[-1], str(tmp_path / "away"))
    r = run(parts[0])
    n = len(parts)
    assert r.returncode == 1 and f"split part {n} of {n} is missing" in r.stderr


def test_errors(tmp_path):
    r = run(str(tmp_path / "nope.gguf"))
    assert r.returncode == 1
    assert r.stderr.startswith("redlite info: ") and "nope.gguf: cannot open" in r.stderr
    assert r.stderr.count("\n") == 1

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 64)
    r = run(str(bad))
    assert r.returncode == 1 and "bad.gguf: not a GGUF file (bad magic" in r.stderr

    good = tmp_path / "good.gguf"
    Model(str(good), n_layer=4).write()
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[:-100])
    r = run(str(trunc))
    assert r.returncode == 1 and "trunc.gguf: tensor" in r.stderr and "extends past the end" in r.stderr
    assert r.stderr.count("\n") == 1

    r = run()
    assert r.returncode == 2 and "usage: redlite info" in r.stderr
    r = run(str(good), "--bogus")
    assert r.returncode == 2 and "unknown option '--bogus'" in r.stderr
    r = run(str(good), str(good))
    assert r.returncode == 2
    r = run("--help")
    assert r.returncode == 0 and "--json" in r.stdout


FIXTURES = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*.gguf")))


@pytest.mark.skipif(not FIXTURES, reason="no committed GGUF fixtures")
@pytest.mark.parametrize("path", FIXTURES, ids=[os.path.basename(p) for p in FIXTURES])
def test_fixtures(path):
    # the vocabulary fixture is metadata only; every other fixture is a whole model
    vocab_only = os.path.basename(path) == "qwen3-vocab.gguf"
    d = info_json(path, runs=not vocab_only)
    if vocab_only:
        assert d["file"]["n_tensors"] == 0
        assert d["verdict"]["line"].startswith("does not run: the file has no tensors")
    else:
        assert d["file"]["n_tensors"] > 0
        assert d["architecture"] in ("qwen3next", "qwen35moe", "qwen35")
        assert d["layers"]["n_unknown"] == 0
        assert d["generation"] in ("split", "legacy")
        assert d["bytes"]["total"] == sum(t["bytes"] for t in d["tensor_types"])
    r = run(path)
    assert r.returncode == (1 if vocab_only else 0) and "tokenizer" in r.stdout
    assert r.stdout.startswith("verdict            " + d["verdict"]["line"] + "\n")


MODELS = [p for p in FIXTURES if os.path.basename(p) != "qwen3-vocab.gguf"]


@functools.lru_cache(maxsize=None)
def expected_memory(path):
    """Figures computed here from the GGUF tensor list with gguf-py (see test_memory_figures); kept in
    build/oracle-cache under the file's sha256 (oracle_util.cached: gguf-py reads a fixture with the
    full vocabulary in ~8 s)."""
    return cached(path, "memory", lambda: compute_memory(path), kind="json")


def compute_memory(path):
    fields, tensors = gguf_read(path)  # gguf-py's reading, shared with the oracle tests (one per file)
    arch = fields["general.architecture"].contents()
    f = lambda key: int(fields[key.replace("qwen3next.", arch + ".")].parts[-1][0])  # noqa: E731
    n_layer, n_nextn = f("qwen3next.block_count"), 0
    if arch + ".nextn_predict_layers" in fields:
        n_nextn = f("qwen3next.nextn_predict_layers")
    hkv, hd = f("qwen3next.attention.head_count_kv"), f("qwen3next.attention.key_length")
    dk, inner = f("qwen3next.ssm.state_size"), f("qwen3next.ssm.inner_size")
    names = {t.name: t for t in tensors}
    attn = [i for i in range(n_layer) if f"blk.{i}.attn_k.weight" in names]
    main_attn = [i for i in attn if i < n_layer - n_nextn]
    dn = [i for i in range(n_layer) if f"blk.{i}.ssm_conv1d.weight" in names]
    conv = names[f"blk.{dn[0]}.ssm_conv1d.weight"].shape  # gguf-py: ne order (kw, channels)
    kw, chans = int(conv[0]), int(conv[1])
    hv = int(names[f"blk.{dn[0]}.ssm_a"].shape[0])
    return dict(n_nextn=n_nextn, hkv=hkv, hd=hd, attn=len(attn), main_attn=len(main_attn), dn=len(dn),
                state=len(dn) * 4 * ((kw - 1) * chans + hv * (inner // hv) * dk),
                weights=sum(int(t.n_bytes) for t in tensors),
                routed=sum(int(t.n_bytes) for t in tensors if "_exps" in t.name),
                ctx_train=f("qwen3next.context_length"))


@pytest.mark.skipif(not MODELS, reason="no committed GGUF model fixtures")
@pytest.mark.parametrize("path", MODELS, ids=[os.path.basename(p) for p in MODELS])
@pytest.mark.parametrize("ctx", [None, 32768])
def test_memory_figures(path, ctx):
    """The memory section against figures computed here from the GGUF tensor list with gguf-py:
    attention layers are the blocks with an attn_k tensor (the MTP block included, counted
    apart), DeltaNet layers those with ssm_conv1d; KV per token = 2 (K, V) x layers x Hkv x hd
    x element size; DeltaNet state = (kw-1) x conv channels (ssm_conv1d's shape) + value heads
    (ssm_a's length) x dv x dk floats; weights = the tensors' byte sizes, routed = *_exps."""
    e = expected_memory(path)
    n_nextn, hkv, hd, state, weights, routed = e["n_nextn"], e["hkv"], e["hd"], e["state"], e["weights"], e["routed"]
    main_attn, n_attn, n_dn = e["main_attn"], e["attn"], e["dn"]
    n_ctx = ctx or e["ctx_train"]
    d = info_json(path) if ctx is None else json.loads(run(path, "--json", "--ctx", str(ctx)).stdout)
    m = d["memory"]
    assert m["n_ctx"] == n_ctx and m["n_batch"] == 512  # the CPU's prompt batch without AMX tiles
    assert m["n_attention_layers"] == main_attn > 0
    assert m["n_mtp_attention_layers"] == n_attn - main_attn == n_nextn
    assert m["n_deltanet_layers"] == n_dn > 0
    for fmt, el in (("f32", 4), ("f16", 2)):
        assert m["kv_bytes_per_token"][fmt] == 2 * main_attn * hkv * hd * el
        assert m["kv_bytes_per_token_mtp"][fmt] == 2 * n_nextn * hkv * hd * el
        assert m["kv_bytes"][fmt] == m["kv_bytes_per_token"][fmt] * n_ctx
        kv_cpu = (m["kv_bytes_per_token"][fmt] + m["kv_bytes_per_token_mtp"][fmt]) * n_ctx
        assert m["cpu"]["total_bytes"][fmt] == weights + kv_cpu + 2 * state + m["cpu"]["scratch_bytes"]
    assert m["kv_bytes"]["f16"] * 2 == m["kv_bytes"]["f32"]
    assert m["deltanet_state_bytes"] == state and m["cpu"]["state_bytes"] == 2 * state
    assert m["weights_bytes"] == weights and m["weights_routed_bytes"] == routed
    assert m["weights_dense_bytes"] == weights - routed
    assert m["cpu"]["scratch_bytes"] > 0
    # a CPU build cannot size the CUDA scratch and says so; a CUDA build gives the context bytes,
    # at least the KV cache and the state it holds
    if m["cuda"]["sized"]:
        for fmt in ("f32", "f16"):
            assert m["cuda"]["context_bytes"][fmt] >= m["kv_bytes"][fmt] + state
            assert m["cuda"]["total_bytes"][fmt] == weights + m["cuda"]["context_bytes"][fmt]
    text = run(path, *(["--ctx", str(ctx)] if ctx else [])).stdout
    assert f"memory             context {n_ctx}, batch 512" in text and "KV / token" in text


def test_memory_usage_errors():
    model = MODELS[0] if MODELS else None
    if model is None:
        pytest.skip("no committed GGUF model fixtures")
    for bad in (["--ctx", "0"], ["--ctx", "x"], ["--batch", "0"], ["--ctx"]):
        r = run(model, *bad)
        assert r.returncode == 2 and r.stderr.startswith("redlite info: ") and r.stderr.count("\n") == 1, bad


# ---- the verdict (issue 49 item 3): where it runs, or the one thing that stops it ----------------


def test_verdict_runs(tmp_path):
    path = str(tmp_path / "m.gguf")
    Model(path, n_layer=4).write()
    d = info_json(path)
    cuda = "cuda" in d["verdict"]["backends"]
    assert d["verdict"]["backends"] == (["cpu", "cuda"] if cuda else ["cpu"])
    line = d["verdict"]["line"]
    assert line.startswith("runs on both cpu and cuda" if cuda else "runs on cpu: every expert resident"), line
    if not cuda:
        assert "make CUDA=1" in line


def test_verdict_too_large_names_the_cache(tmp_path):
    """On a machine of 100 MiB the 512 MiB reserve alone does not fit: the line says what is left
    for the expert cache and the least the cache needs; a machine just big enough gets a bounded cache."""
    path = str(tmp_path / "m.gguf")
    Model(path, n_layer=4).write()
    r = run(path, "--ram-mib", "100")
    assert r.returncode == 1
    assert r.stderr.startswith("redlite info: does not run: too large for this machine even with the expert cache")
    assert "leave 0 B of the 100.00 MiB of RAM for the expert cache, which needs at least" in r.stderr
    assert r.stderr.count("\n") == 1
    big = run(path, "--ram-mib", "1000000", "--json")
    assert big.returncode == 0 and json.loads(big.stdout)["verdict"]["runs"] is True


def test_verdict_other_architecture(tmp_path):
    path = str(tmp_path / "llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(128)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run(path)
    assert r.returncode == 1
    assert r.stdout.startswith("verdict            does not run: architecture 'llama' is not supported")
    assert r.stderr.count("\n") == 1 and "architecture 'llama'" in r.stderr


def test_verdict_missing_tensor(tmp_path):
    """A file without its output norm is described, and the verdict names the missing tensor."""
    path = str(tmp_path / "m.gguf")
    Model(path, n_layer=4, drop=("output_norm.weight",)).write()
    d = info_json(path, runs=False)
    assert d["verdict"]["line"] == "does not run: missing tensor output_norm.weight", d["verdict"]
