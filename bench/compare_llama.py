#!/usr/bin/env python3
"""Red Lite vs llama.cpp on the same GGUF, same threads, runs interleaved.

    bench/compare_llama.py MODEL.gguf --preset NAME [-t THREADS] [--rounds 2] [--reps 3]
                           [--n-decode 32] [--prompt 512] [--depth 0] [--out FILE.md]
                           [--llama-bench PATH]

--llama-bench PATH uses an already built llama-bench (e.g. the GGML_NATIVE=ON CPU build of
tools/build_llama_cpp.sh at /work/llama.cpp-build/bin/llama-bench) instead of building one under
vendor/ with the flags below.

Each round runs llama.cpp's `llama-bench` and then `redlite bench` on the model (so drifts in
machine load hit both alike); the medians over rounds are compared. Writes
bench/results/<date>-cpu-<preset>.md (date, CPU, Red Lite commit, llama.cpp version, numbers) and, beside
it, <same name>.jsonl: every round's measurements of both tools as benchmark records (bench/records.py:
machine, date, commit, file, backend, threads, budget, depth, rate), what bench/charts.py --depth draws.

llama-bench is built once from the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI
(`pip download --no-binary :all: --no-deps llama-cpp-python`), unpacked to vendor/llama.cpp
(git-ignored; never committed), with AMX off: the AMX path crashed on IQ files on this CPU.
CMAKE_FLAGS assume an AVX-512 (VNNI, VBMI, BF16) x86 host like the development VM; edit them
for another CPU.
Only the llama-bench target is built, niced, with -j2 (--build-jobs).
The machine's memory bandwidth is measured in the same run (bench/stream.c, read kernel, same
thread count, before and after the rounds) and decode is reported as a percentage of it.

Python standard library only.
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import records  # noqa: E402  (bench/records.py)
VENDOR = os.path.join(ROOT, "vendor", "llama.cpp")
BUILD = os.path.join(VENDOR, "build-bench")
LLAMA_BENCH = os.path.join(BUILD, "bin", "llama-bench")
# AMX off. With GGML_NATIVE=ON the GGML_AMX_* switches are ignored (-march=native turns AMX on
# and the AMX kernels die with SIGILL here), so the native ISA is spelled out minus AMX; only
# the ggml-cpu target depends on these flags.
CMAKE_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
               "-DGGML_F16C=ON", "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON",
               "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON",
               "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DCMAKE_BUILD_TYPE=Release"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fetch_llama_cpp():
    """vendor/llama.cpp from an already unpacked sdist in /tmp, or from PyPI."""
    if os.path.isdir(VENDOR):
        return
    for cand in sorted(glob.glob("/tmp/*/llama_cpp_python-*/vendor/llama.cpp")):
        log(f"using the unpacked sdist at {cand}")
        shutil.copytree(cand, VENDOR, symlinks=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "-d", tmp, "llama-cpp-python"], check=True)
        sdist = glob.glob(os.path.join(tmp, "llama_cpp_python-*.tar.gz"))[0]
        with tarfile.open(sdist) as tf:
            tf.extractall(tmp)
        src = glob.glob(os.path.join(tmp, "llama_cpp_python-*", "vendor", "llama.cpp"))[0]
        shutil.copytree(src, VENDOR, symlinks=True)


def build_llama_bench(jobs):
    if os.path.exists(LLAMA_BENCH):
        return
    fetch_llama_cpp()
    subprocess.run(["cmake", "-S", VENDOR, "-B", BUILD, *CMAKE_FLAGS], check=True)
    subprocess.run(["nice", "cmake", "--build", BUILD, "--target", "llama-bench", "-j", str(jobs)], check=True)


def llama_version():
    """'<sdist version> (build <number>, commit <hash>)' as far as known."""
    pkg = glob.glob(os.path.join(VENDOR, "..", "..", "PKG-INFO"))
    ver = "llama.cpp vendored in llama-cpp-python"
    for p in glob.glob("/tmp/*/llama_cpp_python-*/PKG-INFO") + pkg:
        for line in open(p):
            if line.startswith("Version:"):
                return f"{ver} {line.split()[1]}"
    return ver


def run_llama(model, a):
    cmd = [a.llama_bench, "-m", model, "-t", str(a.threads), "-r", str(a.reps), "-o", "json",
           "-p", ",".join(str(p) for p in a.prompt) if a.prompt else "0", "-n", str(a.n_decode)]
    if a.depth:
        cmd += ["-d", f"0,{a.depth}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({r.returncode}):\n{r.stderr[-3000:]}")
    rows = json.loads(r.stdout)
    out = {"decode": {}, "prompt": {}, "build": "", "rows": rows}
    for row in rows:
        depth = row.get("n_depth", 0)
        if row["n_gen"] > 0:
            out["decode"][depth] = row["avg_ts"]
        elif row["n_prompt"] > 0 and depth == 0:
            out["prompt"][row["n_prompt"]] = row["avg_ts"]
        out["build"] = f"build {row.get('build_number', '?')}, commit {row.get('build_commit', '?')}"
        out["cpu"] = row.get("cpu_info", "")
        out["batch"] = f"n_batch {row.get('n_batch', '?')} / n_ubatch {row.get('n_ubatch', '?')}"
        out["model_type"] = row.get("model_type", "")
    return out


def run_redlite(model, a):
    cmd = [a.redlite, "bench", "-m", model, "-t", str(a.threads), "--reps", str(a.reps), "--n-decode",
           str(a.n_decode), "--prompt", ",".join(str(p) for p in a.prompt) if a.prompt else "0", "--json"]
    if a.depth:
        cmd += ["--depth", str(a.depth)]
    if a.reference:
        cmd += ["--reference"]
    if a.iq_repack:
        cmd += ["--iq-repack"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"redlite bench failed ({r.returncode}):\n{r.stderr[-3000:]}")
    j = json.loads(r.stdout)
    return {"decode": {d["depth"]: d["tok_s"] for d in j["decode"]},
            "prompt": {p["n_tokens"]: p["tok_s"] for p in j["prompt"]},
            "gb_s": {d["depth"]: d["gb_s"] for d in j["decode"]},
            "path": f'{j["backend"]} {j["path"]} ({j["cpu_kernels"]})' + (", --iq-repack" if a.iq_repack else ""),
            "rss": j["peak_rss_bytes"],
            "json": j,
            "batch": j["prompt"][0].get("batch", "?") if j["prompt"] else "-"}


def run_stream(threads, mib=512, reps=3):
    """STREAM-like read bandwidth with the same thread count (bench/stream.c, compiled here):
    returns (wall GB/s, per-CPU-second GB/s) of the read kernel at `threads` threads."""
    exe = os.path.join(tempfile.gettempdir(), "redlite-stream")
    src = os.path.join(ROOT, "bench", "stream.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        subprocess.run(["cc", "-std=c11", "-O2", "-D_GNU_SOURCE", "-pthread", "-o", exe, src], check=True)
    r = subprocess.run([exe, "--mib", str(mib), "--threads", str(threads), "--reps", str(reps)],
                       capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        parts = line.split()
        if parts[:3] == ["read", "threads", f"{threads}:"]:
            return float(parts[3]), float(parts[6])
    raise RuntimeError(f"stream: no read line for {threads} threads:\n{r.stdout}")


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def git_commit():
    if os.environ.get("RL_COMMIT"):  # a copied tree whose .git is not the source's (the device machine)
        return os.environ["RL_COMMIT"]
    c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    d = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                       text=True)
    return c.stdout.strip() + ("+dirty" if d.stdout.strip() else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--preset", required=True, help="name for the results file (cf2, tiny, ...)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n-decode", type=int, default=32)
    ap.add_argument("--prompt", type=lambda s: [int(x) for x in s.split(",") if int(x) > 0], default=[512])
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--reference", action="store_true", help="redlite: the double-precision reference path")
    ap.add_argument("--iq-repack", action="store_true",
                    help="redlite: the lookup-free IQ layout (--iq-repack; the results file says so in its path line)")
    ap.add_argument("--redlite", default=os.path.join(ROOT, "build", "redlite"))
    ap.add_argument("--build-jobs", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--note", default="", help="free text added to the results file")
    ap.add_argument("--llama-bench", default=None, help="a built llama-bench binary (default: build one under vendor/)")
    a = ap.parse_args()

    if a.llama_bench:
        if not os.access(a.llama_bench, os.X_OK):
            sys.exit(f"compare_llama: --llama-bench {a.llama_bench} is not an executable file")
        llama_desc = (f"llama-bench `{a.llama_bench}` (as given; for /work/llama.cpp-build: the llama-cpp-python sdist's "
                      "vendor/llama.cpp, CPU, Release, static, GGML_NATIVE=ON, default repacking)")
    else:
        build_llama_bench(a.build_jobs)
        a.llama_bench = LLAMA_BENCH
        llama_desc = (f"{llama_version()}, llama-bench built with AMX off "
                      "(the AMX path crashed on IQ files on this CPU): GGML_NATIVE=OFF with the native ISA minus AMX "
                      "(AVX2, FMA, F16C, BMI2, AVX-VNNI, AVX-512 F/CD/VL/DQ/BW/VBMI/VNNI/BF16), because with "
                      "GGML_NATIVE=ON -march=native re-enables AMX whatever GGML_AMX_* say")
    load0 = os.getloadavg()
    log(f"memory bandwidth: stream read, {a.threads} threads")
    streams = [run_stream(a.threads)]
    rounds = []
    loads = []
    for i in range(a.rounds):
        loads.append(os.getloadavg()[0])
        log(f"round {i + 1}/{a.rounds}: llama-bench (load {loads[-1]:.1f})")
        ll = run_llama(a.model, a)
        log(f"round {i + 1}/{a.rounds}: redlite bench")
        rl = run_redlite(a.model, a)
        rounds.append((ll, rl))
    streams.append(run_stream(a.threads))

    def med(side, kind, key):
        vals = [r[side][kind][key] for r in rounds if key in r[side][kind]]
        return statistics.median(vals) if vals else float("nan")

    rows = []
    for depth in [0] + ([a.depth] if a.depth else []):
        rows.append((f"decode tg{a.n_decode} @ depth {depth}", med(0, "decode", depth), med(1, "decode", depth)))
    for p in a.prompt:
        rows.append((f"prompt pp{p}", med(0, "prompt", p), med(1, "prompt", p)))
    load1 = os.getloadavg()
    ll0, rl0 = rounds[-1]
    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(ROOT, "bench", "results", f"{date}-cpu-{a.preset}.md")
    lines = [
        f"# Red Lite vs llama.cpp, CPU, preset `{a.preset}` ({date})",
        "",
        f"- model: `{os.path.basename(a.model)}` ({os.path.getsize(a.model) / 2**30:.2f} GiB; llama.cpp says "
        f"{ll0.get('model_type', '?')})",
        f"- machine: {cpu_model()}, {os.cpu_count()} CPUs, {a.threads} threads for both",
        f"- Red Lite commit {git_commit()}, path: {rl0['path']}",
        f"- llama.cpp ({ll0['build']}): {llama_desc}",
        f"- method: {a.rounds} interleaved rounds (llama-bench, then redlite bench), each {a.reps} repetitions; "
        f"medians over rounds; decode = {a.n_decode} tokens, random token ids",
        f"- prompt batch: Red Lite {rl0['batch']} rows per forward (`redlite bench` default: --batch auto), "
        f"llama.cpp {ll0.get('batch', '?')} (llama-bench defaults)",
        f"- machine load (1-minute load average) before / after: {load0[0]:.1f} / {load1[0]:.1f} "
        "(the machine is shared; with load above the CPU count both tools lose time slices)",
        "",
        "| measurement | llama.cpp tok/s | Red Lite tok/s | Red Lite / llama.cpp |",
        "|---|---:|---:|---:|",
    ]
    for name, ll, rl in rows:
        ratio = rl / ll if ll and ll == ll and rl == rl else float("nan")
        lines.append(f"| {name} | {ll:.2f} | {rl:.2f} | {ratio:.3f} |")
    gbs = statistics.median(r[1]['gb_s'][0] for r in rounds)
    bw = max(w for w, _ in streams)
    lines += ["", f"Memory bandwidth of this machine (bench/stream.c read, {a.threads} threads, 512 MiB per thread, "
              f"best of 3, measured before and after the rounds): "
              + ", ".join(f"{w:.2f} GB/s wall ({c:.2f} per CPU-second)" for w, c in streams) + ".",
              f"Red Lite effective bandwidth at depth 0 (bytes a token must read / time): {gbs:.2f} GB/s = "
              f"**{100 * gbs / bw:.0f} % of the measured {bw:.2f} GB/s**; llama.cpp on the same bytes: "
              f"{100 * gbs * (med(0, 'decode', 0) / med(1, 'decode', 0)) / bw:.0f} %; peak RSS {rl0['rss'] / 2**30:.2f} GiB.",
              ""]
    lines += ["Per round (llama.cpp / Red Lite tok/s):", ""]
    for i, (ll, rl) in enumerate(rounds):
        parts = [f"tg@{d} {ll['decode'].get(d, float('nan')):.2f} / {rl['decode'].get(d, float('nan')):.2f}"
                 for d in sorted(rl["decode"])]
        parts += [f"pp{p} {ll['prompt'].get(p, float('nan')):.2f} / {rl['prompt'].get(p, float('nan')):.2f}"
                  for p in a.prompt]
        lines.append(f"- round {i + 1} (load {loads[i]:.1f}): " + ", ".join(parts))
    if a.note:
        lines += ["", a.note]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    # the records: both tools on one machine string; llama.cpp ran with its defaults (no budget, mmap)
    machine = f"{cpu_model()}, {os.cpu_count()} CPUs"
    recs = []
    for i, (ll, rl) in enumerate(rounds, 1):
        recs += records.from_llama_bench(ll["rows"], {"machine": machine, "file": os.path.basename(a.model),
                                                      "budget.cache_mib": "mmap", "tag": f"round {i}"})
        recs += records.from_redlite(rl["json"], {"machine": machine, "file": os.path.basename(a.model),
                                                  "tag": f"round {i}"})
    with open(os.path.splitext(out)[0] + ".jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    print("\n".join(lines))
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
