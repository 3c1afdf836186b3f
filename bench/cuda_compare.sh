#!/usr/bin/env bash
# bench/cuda_compare.sh — llama.cpp's CUDA llama-bench against `redlite bench --backend cuda` on the
# same synthetic file (PRESET=cf2 by default; iq2_xxs, q4_k_m, ...), interleaved, with the ratios. Runs on
# the GPU machine (device tool):
#
#   carry: .lcp (llama.cpp.tar.xz: the llama-cpp-python sdist's vendor/llama.cpp without docs,
#          models, tests and other backends), build/cuda/redlite, .cudabin
#   bench/cuda_compare.sh [ROUNDS] [DEPTH]    (default 2 rounds; DEPTH > 0 adds decode at that depth,
#                                             in the first round only; ROUNDS 0 = build llama-bench only)
#
# llama.cpp: sm_90-only build of llama-bench (-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90, no curl),
# -ngl 99 -fa 1, pp2048 and tg128 at micro-batch 512 (its default) and 2048, 3 repetitions; the
# better micro-batch is the baseline (bench/results/2026-12-01-lcpp-baseline-h200.md: on a uniformly
# routed file the default -ub 512 gives half of -ub 2048). The file is written with calibrated
# routing (ROUTING=uniform|calibrated|skewed to change it): llama.cpp's prompt speed depends on it.
# PROMPT=N (default 2048) sets the prompt length of both tools (32768: the long-prompt row).
# redlite: the prompt in 2048-row chunks,
# 128 decode steps, median of 5. Logs and JSON under $OUT; the table at the end; every run of both tools as
# benchmark records (bench/records.py: machine, date, commit, file, threads, budget, depth, rate) in
# $OUT/records.jsonl, what bench/charts.py --depth draws.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rl_cuda_out}
LOGS=${LOGS:-$OUT}
PRESET=${PRESET:-cf2}
PROMPT=${PROMPT:-2048}
CF2=${CF2:-/tmp/$PRESET.gguf}
ROUTING=${ROUTING:-calibrated}
ROUNDS=${1:-2}
DEPTH=${2:-0}
LCP=/tmp/lcpp
mkdir -p "$OUT" "$LOGS" "$LCP"
export LD_LIBRARY_PATH="$PWD/.cudabin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/compare.txt"; }

if [ ! -x $LCP/build/bin/llama-bench ]; then
    say "building llama-bench (sm_90 only)"
    tar -xJf .lcp/llama.cpp.tar.xz -C $LCP || exit 1
    cmake -S $LCP/llama.cpp -B $LCP/build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON >"$LOGS/lcpp_cmake.log" 2>&1 || { tail -30 "$LOGS/lcpp_cmake.log"; exit 1; }
    cmake --build $LCP/build --target llama-bench -j"$(($(nproc) - 1))" >"$LOGS/lcpp_build.log" 2>&1 ||
        { tail -30 "$LOGS/lcpp_build.log"; exit 1; }
    say "llama-bench built"
fi
[ "$ROUNDS" -gt 0 ] || exit 0
if [ ! -s "$CF2" ]; then
    say "writing $CF2"
    build/cuda/redlite synth --preset "$PRESET" --routing "$ROUTING" -o "$CF2" --quiet || exit 1
fi
for r in $(seq 1 "$ROUNDS"); do
    say "round $r: llama.cpp"
    $LCP/build/bin/llama-bench -m "$CF2" -ngl 99 -fa 1 -p "$PROMPT" -n 128 -ub 512,2048 -r 3 -o json >"$LOGS/lcpp_$r.json" 2>"$LOGS/lcpp_$r.err"
    if [ "$DEPTH" -gt 0 ] && [ "$r" = 1 ]; then
        $LCP/build/bin/llama-bench -m "$CF2" -ngl 99 -fa 1 -p 0 -n 64 -d "$DEPTH" -r 1 -o json \
            >"$LOGS/lcpp_depth_$r.json" 2>>"$LOGS/lcpp_$r.err"
    fi
    say "round $r: redlite"
    build/cuda/redlite bench -m "$CF2" --backend cuda --n-decode 128 --reps 3 --warmup 8 --prompt "$PROMPT" --batch 2048 \
        --json >"$LOGS/rl_$r.json" 2>"$LOGS/rl_$r.err"
    if [ "$DEPTH" -gt 0 ] && [ "$r" = 1 ]; then
        build/cuda/redlite bench -m "$CF2" --backend cuda --n-decode 64 --reps 2 --warmup 4 --depth "$DEPTH" \
            --prompt 0 --batch 2048 --json >"$LOGS/rl_depth_$r.json" 2>>"$LOGS/rl_$r.err"
    fi
done
python3 - "$LOGS" "$ROUNDS" "$DEPTH" "$PROMPT" "$PRESET" <<'EOF' | tee -a "$OUT/compare.txt"
import json, sys, statistics as st
out, rounds, depth, prompt, preset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def lc(path, key):
    try:
        rows = json.load(open(path))
    except Exception as e:
        return None
    # the best over the micro-batch sizes run (the configuration a user would pick)
    v = [r["avg_ts"] for r in rows
         if (key == "pp" and r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0)
         or (key == "tg" and r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0)]
    return max(v) if v else None
def rl(path, key, d=0):
    try:
        j = json.load(open(path))
    except Exception:
        return None
    if key == "pp": return next((p["tok_s"] for p in j.get("prompt", [])), None)
    return next((x["tok_s"] for x in j.get("decode", []) if x["depth"] == d), None)
res = {}
for r in range(1, rounds + 1):
    res.setdefault("lc_pp", []).append(lc(f"{out}/lcpp_{r}.json", "pp"))
    res.setdefault("lc_tg", []).append(lc(f"{out}/lcpp_{r}.json", "tg"))
    res.setdefault("rl_pp", []).append(rl(f"{out}/rl_{r}.json", "pp"))
    res.setdefault("rl_tg", []).append(rl(f"{out}/rl_{r}.json", "tg"))
    if depth and r == 1:
        res.setdefault("lc_tgd", []).append(lc(f"{out}/lcpp_depth_{r}.json", "tg"))
        res.setdefault("rl_tgd", []).append(rl(f"{out}/rl_depth_{r}.json", "tg", depth))
def med(v):
    v = [x for x in v if x]
    return st.median(v) if v else float("nan")
print(f"{preset:24s} {'llama.cpp':>10s} {'redlite':>10s} {'ratio':>7s}   (tok/s, median of {rounds} interleaved rounds)")
for name, a, b in [(f"prompt {prompt}", "lc_pp", "rl_pp"), ("decode tg128 ctx 0", "lc_tg", "rl_tg")] + \
        ([(f"decode at depth {depth}", "lc_tgd", "rl_tgd")] if depth else []):
    x, y = med(res[a]), med(res[b])
    print(f"{name:24s} {x:10.1f} {y:10.1f} {y / x if x == x and x else float('nan'):7.2f}x   runs: lc {res[a]} rl {res[b]}")
EOF
# the records: one machine string for both tools (the GPU's name, the host's CPU)
MACHINE="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs"
for f in "$LOGS"/lcpp_*.json; do
    [ -s "$f" ] && python3 bench/records.py llama-bench "$f" --set machine="$MACHINE" --set file="$PRESET ($ROUTING routing)" \
        --set tag="$(basename "$f" .json)" >>"$OUT/records.jsonl"
done
for f in "$LOGS"/rl_*.json; do
    [ -s "$f" ] && python3 bench/records.py redlite "$f" --set machine="$MACHINE" --set file="$PRESET ($ROUTING routing)" \
        --set tag="$(basename "$f" .json)" >>"$OUT/records.jsonl"
done
say "== done"
