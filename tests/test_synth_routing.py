"""`redlite synth --routing uniform|calibrated|skewed` (src/model/synth_gen.c synth_gen_router).

Small files (hidden 256, 2 layers, 512 experts top-10: the expert count and top-k of the real
model, where the hit-rate statistics live) of each routing mode run a fixed byte prompt through
`redlite generate --route-trace`; the trace is replayed with tools/cache_sim.py's per-layer LRU
(llama.cpp's expert-cache model) at 64 and 128 slots per layer. Checks:
- ordering at the same slots: uniform < calibrated < skewed;
- calibrated within a stated band of the targets (a 512-expert top-10 model: LRU-64 ~67 %,
  LRU-128 ~81 %): [55 %, 80 %] at 64 slots and [72 %, 95 %] at 128 on this fixed seed and prompt
  (the full-size calibration, bench/results/routing-synth-2026-12-01.md, got 60-64 % / 84-87 %;
  lognormal popularity makes the LRU curve steeper than the real one, hence the wide upper band);
- uniform is near chance (LRU-64 < 25 %: 64 of 512 experts resident = 12.5 % by chance);
- every mode is deterministic (same bytes twice) and non-uniform modes change only the routers;
- a bad --routing value exits 2 with a one-line error, and the default is unchanged (uniform).
"""
import json
import os
import subprocess
import sys

import pytest

from oracle_util import file_sha256 as sha256

gguf = pytest.importorskip("gguf")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import cache_sim  # noqa: E402

GEOM = "hidden=256,layers=2,vocab=512,experts=512,top_k=10,expert_ff=256,ctx=1024"
PROMPT = ("The quick brown fox jumps over the lazy dog. Caches love locality, and routing decides "
          "everything about a mixture of experts: which weights are read, and how often.")
BANDS = {64: (0.55, 0.80), 128: (0.72, 0.95)}


def redlite(*args, timeout=300):
    return subprocess.run([BIN, *args], capture_output=True, text=True, errors="replace", timeout=timeout)


def synth(path, mode):
    r = redlite("synth", "--preset", "tiny", "--geometry", GEOM, "--routing", mode, "--seed", "7",
                "-t", "2", "--quiet", "-o", str(path))
    assert r.returncode == 0, r.stderr
    assert f"{mode} routing" in r.stdout
    return path


@pytest.fixture(scope="module")
def rates(tmp_path_factory):
    d = tmp_path_factory.mktemp("routing")
    out = {}
    for mode in ("uniform", "calibrated", "skewed"):
        model = synth(d / f"{mode}.gguf", mode)
        trace = d / f"{mode}.trace"
        r = redlite("generate", "-m", str(model), "--raw", "-p", PROMPT, "-n", "16", "-b", "1", "-t", "2",
                    "--temp", "0", "--cache-mib", "full", "--route-trace", str(trace))
        assert r.returncode == 0, r.stderr
        header, reqs = cache_sim.load(str(trace))
        assert header["n_expert"] == 512 and header["top_k"] == 10
        assert all(n == 1 and len(ids) == 10 for _, n, ids in reqs)
        assert len(reqs) >= 2 * 100  # 2 layers x (prompt + generated) tokens
        st = cache_sim.routing_stats(header, reqs)
        out[mode] = {s: cache_sim.per_layer_lru(reqs, 512, s) for s in (64, 128)}
        out[mode]["entropy_norm"] = sum(L["entropy_norm"] for L in st["layers"]) / len(st["layers"])
    print(json.dumps(out))
    return out


def test_ordering(rates):
    for s in (64, 128):
        assert rates["uniform"][s] < rates["calibrated"][s] < rates["skewed"][s], (s, rates)
    # static skew grows with the mode as well (normalised expert-usage entropy falls)
    assert rates["uniform"]["entropy_norm"] > rates["calibrated"]["entropy_norm"] > rates["skewed"]["entropy_norm"]


def test_calibrated_band(rates):
    for s, (lo, hi) in BANDS.items():
        assert lo <= rates["calibrated"][s] <= hi, (s, rates["calibrated"])


def test_uniform_near_chance(rates):
    assert rates["uniform"][64] < 0.25, rates["uniform"]


def test_deterministic_and_only_routers_change(tmp_path):
    a = synth(tmp_path / "a.gguf", "calibrated")
    b = synth(tmp_path / "b.gguf", "calibrated")
    assert sha256(a) == sha256(b)
    u = synth(tmp_path / "u.gguf", "uniform")
    ra, ru = gguf.GGUFReader(str(a)), gguf.GGUFReader(str(u))
    changed = [t.name for t, v in zip(ra.tensors, ru.tensors) if bytes(t.data.tobytes()) != bytes(v.data.tobytes())]
    assert changed and all(n.endswith("ffn_gate_inp.weight") for n in changed), changed
    import numpy as np
    w = np.asarray(ra.tensors[[t.name for t in ra.tensors].index(changed[0])].data, dtype=np.float64)
    norms = np.linalg.norm(w.reshape(512, -1), axis=1)
    assert np.isfinite(w).all() and norms.std() / norms.mean() > 0.3  # lognormal row norms (beta 0.65)
    f = ra.fields["redlite.synth.routing"]
    assert bytes(f.parts[f.data[0]]).decode() == "calibrated"
    assert "redlite.synth.routing" not in ru.fields  # uniform keeps the pre-option bytes


def test_bad_routing_exit_2(tmp_path):
    r = redlite("synth", "--preset", "tiny", "--routing", "zipf", "-o", str(tmp_path / "x.gguf"))
    assert r.returncode == 2
    assert "routing" in r.stderr and "uniform, calibrated or skewed" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "x.gguf")
    r = redlite("synth", "--preset", "tiny", "--routing")
    assert r.returncode == 2


def test_per_layer_lru_by_hand():
    # slots 2 per layer: [1,2] 2 misses; [1,3] hit 1, miss 3 (evicts 2); [2,1] hit 1, miss 2
    # (evicts 3); layer 1 has its own pool: 2 misses. 2 hits of 8 lookups.
    reqs = [(0, 1, [1, 2]), (0, 1, [1, 3]), (0, 1, [2, 1]), (1, 1, [1, 2])]
    assert cache_sim.per_layer_lru(reqs, 4, 2) == 0.25
    # a selection larger than the slots is held whole (all experts of one acquire resident)
    assert cache_sim.per_layer_lru([(0, 1, [0, 1, 2]), (0, 1, [0, 1, 2])], 4, 2) == 0.5


SMALL_Q4 = ("hidden=256,layers=2,vocab=512,ctx=1024,ff=640,heads=4,kv_heads=2,head_dim=64,rope_dims=16,"
            "experts=64,top_k=4,expert_ff=256,shared_ff=256,state=64,groups=2,dt_rank=4,inner=256")


def test_f16_routers_and_threads(tmp_path):
    # q4_k_m stores routers as F16: the routing model writes them in that type, and the bytes do
    # not depend on the generator's thread count
    paths = []
    for t in ("1", "3"):
        p = tmp_path / f"q{t}.gguf"
        r = redlite("synth", "--preset", "q4_k_m", "--geometry", SMALL_Q4, "--routing", "skewed", "-t", t,
                    "--quiet", "-o", str(p))
        assert r.returncode == 0, r.stderr
        paths.append(p)
    assert sha256(paths[0]) == sha256(paths[1])
    import numpy as np
    rd = gguf.GGUFReader(str(paths[0]))
    routers = [t for t in rd.tensors if t.name.endswith("ffn_gate_inp.weight")]
    assert len(routers) == 2 and all(t.tensor_type.name == "F16" for t in routers)
    w = np.asarray(routers[0].data, dtype=np.float64).reshape(64, 256)
    norms = np.linalg.norm(w, axis=1)
    assert np.isfinite(w).all()
    # skewed: beta 1.5, row norms spread over orders of magnitude; E[s^2] = 1 keeps the mean
    # squared element at sigma^2 = 0.02^2 * 2048/256 within sampling error of 64 lognormal rows
    assert norms.max() / norms.min() > 20
    assert 0.1 < (w ** 2).mean() / (0.02 ** 2 * 2048 / 256) < 3
