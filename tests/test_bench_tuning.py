"""`redlite bench` records the tuning switches of its run (the RL_* variables of the environment,
docs/CUDA.md and docs/CPU.md): every A/B in bench/results compares such settings, so a result must say
which were set. --json: an object "tuning" of name -> value (empty when none is set); the table: a
line "tuning    NAME=VALUE ..." only when one is set. The build is build/redlite (override with
REDLITE_BIN).
"""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("REDLITE_BIN", os.path.join(ROOT, "build", "redlite"))
MODEL = os.path.join(ROOT, "tests", "fixtures", "tiny-a.gguf")
ARGS = ["bench", "-m", MODEL, "-t", "2", "--n-decode", "2", "--reps", "1", "--warmup", "0", "--prompt", "0"]


def bench(extra_env, *flags):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_")}
    env.update(extra_env)
    r = subprocess.run([BIN, *ARGS, *flags], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_json_records_the_switches():
    j = json.loads(bench({"RL_CUDA_PDL": "0", "RL_KERN_Q6K_MV": "4"}, "--json"))
    assert j["tuning"] == {"RL_CUDA_PDL": "0", "RL_KERN_Q6K_MV": "4"}, j["tuning"]
    assert json.loads(bench({}, "--json"))["tuning"] == {}


def test_table_prints_them_only_when_set():
    out = bench({"RL_CUDA_ATTN": "per-warp"})
    lines = [l for l in out.splitlines() if l.startswith("tuning")]
    assert lines == ["tuning    RL_CUDA_ATTN=per-warp"], out[-800:]
    assert not any(l.startswith("tuning") for l in bench({}).splitlines())
