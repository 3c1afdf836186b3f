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
_READ = {}


def gguf_read(gguf_path):
    """gguf-py's reading of a GGUF, once per file for the whole session: (fields, tensors), where
    fields holds every field that is not an array (the hyperparameters; the big tokenizer arrays
    are left out) and tensors is the reader's tensor list. gguf-py takes ~8 s on this machine for a
    file with a 151,936-token vocabulary (an object per token) and the oracle tests and test_info.py
    read the same fixtures, so they share this one read; the arrays' objects (~0.5 GB) are not kept."""
    import gguf
    key = os.path.realpath(gguf_path)
    if key not in _READ:
        r = gguf.GGUFReader(gguf_path)
        fields = {k: f for k, f in r.fields.items() if f.types[:1] != [gguf.GGUFValueType.ARRAY]}
        _READ[key] = (fields, list(r.tensors))
    return _READ[key]


CACHE = os.path.join(ROOT, "build", "oracle-cache")


def file_sha256(path):
    """sha256 of a file's bytes (hex), read in 4 MiB blocks so a multi-GiB synthetic file is never
    held in memory whole."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def cached(gguf_path, what, compute, kind="npy"):
    """compute() (an array for kind "npy", a JSON value for "json") for a GGUF, kept across runs in
    build/oracle-cache under the sha256 of the file's bytes and the gguf package's version: what
    gguf-py reads from a file is a function of those two, and reading a fixture with the full
    151,936-token vocabulary costs it ~8 s (tiny-a and tiny-b: ~16 s of every run). A new or changed
    file, or another gguf version, is read again; `make clean` empties the cache."""
    import gguf
    digest = file_sha256(gguf_path)
    version = getattr(gguf, "__version__", None)
    if version is None:
        from importlib.metadata import version as pkg_version
        version = pkg_version("gguf")
    path = os.path.join(CACHE, f"{digest}-gguf{version}-{what}.{kind}")
    if os.path.exists(path):
        if kind == "npy":
            return np.load(path)
        with open(path) as f:
            return json.load(f)
    value = compute()
    os.makedirs(CACHE, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    if kind == "npy":
        with open(tmp, "wb") as f:
            np.save(f, value)
    else:
        with open(tmp, "w") as f:
            json.dump(value, f)
    os.replace(tmp, path)  # whole or absent, whatever else runs
    return value


def output_matrix(gguf_path):
    """Dequantised output.weight [V, D] in float64 (the same numbers transformers used)."""
    if gguf_path not in _W:
        import gguf

        def dequantized():  # in gguf-py's own dtype (float32): the cache keeps it exact
            t = next(t for t in gguf_read(gguf_path)[1] if t.name == "output.weight")
            w = gguf.quants.dequantize(t.data, t.tensor_type)
            return np.asarray(w).reshape(int(t.shape[1]), int(t.shape[0]))
        _W[gguf_path] = cached(gguf_path, "output", dequantized).astype(np.float64)
    return _W[gguf_path]


def run_dump(gguf_path, ids, n_greedy, extra=(), env=None, stderr=None):
    """Run redlite dump; returns (generated ids, logits [T+G, V], routes list). A list given as
    stderr gets the run's stderr lines appended (dump --check-fast reports there)."""
    with tempfile.TemporaryDirectory() as td:
        lf, rf = os.path.join(td, "logits.f32"), os.path.join(td, "routes.jsonl")
        cmd = [REDLITE, "dump", "-m", gguf_path, "--tokens", ",".join(map(str, ids)),
               "--greedy", str(n_greedy), "--logits", lf, "--routes", rf, "--json", *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                           env={**os.environ, **(env or {})})
        assert r.returncode == 0, f"{' '.join(cmd)} failed: {r.stderr}"
        out = json.loads(r.stdout)
        if stderr is not None:
            stderr.extend(r.stderr.splitlines())
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
