"""Helpers shared by the forward-pass oracle tests: run `redlite dump`, rebuild the
transformers logits from the stored final hidden states, compare."""
import glob
import json
import os
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDLITE = os.path.join(ROOT, "build", "redlite")


def fixture_dirs():
    """The committed fixtures, plus RL_FIXTURE_DIR (tools/check_unseen.sh points it at fresh ones)."""
    dirs = [os.path.join(ROOT, "tests", "fixtures")]
    if os.environ.get("RL_FIXTURE_DIR"):
        dirs = [os.environ["RL_FIXTURE_DIR"]]
    return dirs


def fixtures():
    out = []
    for d in fixture_dirs():
        for j in sorted(glob.glob(os.path.join(d, "*.json"))):
            try:
                meta = json.load(open(j))
            except Exception:
                continue
            if meta.get("generator") != "tools/make_fixtures.py":
                continue
            out.append((d, meta))
    return out


_W = {}


def output_matrix(gguf_path):
    """Dequantised output.weight [V, D] in float64 (the same numbers transformers used)."""
    if gguf_path not in _W:
        import gguf
        r = gguf.GGUFReader(gguf_path)
        t = next(t for t in r.tensors if t.name == "output.weight")
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        _W[gguf_path] = np.asarray(w, dtype=np.float64).reshape(int(t.shape[1]), int(t.shape[0]))
    return _W[gguf_path]


def run_dump(gguf_path, ids, n_greedy, extra=(), env=None):
    """Run redlite dump; returns (generated ids, logits [T+G, V], routes list)."""
    with tempfile.TemporaryDirectory() as td:
        lf, rf = os.path.join(td, "logits.f32"), os.path.join(td, "routes.jsonl")
        cmd = [REDLITE, "dump", "-m", gguf_path, "--tokens", ",".join(map(str, ids)),
               "--greedy", str(n_greedy), "--logits", lf, "--routes", rf, "--json", *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                           env={**os.environ, **(env or {})})
        assert r.returncode == 0, f"{' '.join(cmd)} failed: {r.stderr}"
        out = json.loads(r.stdout)
        logits = np.fromfile(lf, dtype=np.float32)
        routes = [json.loads(line) for line in open(rf)]
    return out["generated"], logits, routes


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def kl_rows(p_logits, q_logits):
    """KL(P || Q) per row (P = reference)."""
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(-1)
