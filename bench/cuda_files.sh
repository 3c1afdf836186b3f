#!/usr/bin/env bash
# bench/cuda_files.sh — issue 15's full comparison on the GPU machine: llama.cpp's llama-bench against
# `redlite bench --backend cuda` on full-size synthetic files (PRESETS, default "cf2 iq2_xxs q4_k_m"), one
# file at a time, interleaved: decode at 0 / 8K / 32K context and prompts of 2,048 and 32,768 tokens; then the
# ratio table (bench/cuda_files_table.py). Session 24's figures (bench/results/2026-12-04-session24-h200.md)
# were measured with these steps.
#
#   carry: .lcp (llama.cpp.tar.xz, as bench/cuda_compare.sh), .cudabin; build/cuda/redlite and build/redlite
#   are built here if missing
#   bench/cuda_files.sh            OUT=dir (default /tmp/rl_files_out): records.jsonl, table.md, the logs
#
# Per file: `redlite synth --preset P --routing calibrated` (the 64 GB disk holds CF2 + IQ2_XXS, or Q4_K_M alone:
# earlier files are deleted first when the next would not fit); two rounds of llama-bench (-ngl 99 -fa 1,
# pp2048 + tg128 at -ub 512 and 2048, 3 repetitions) and redlite (prompt 2048, decode 128 x 3 after 8 warm-up at
# 0 and 8K); llama-bench tg64 at -d 8192,32768 (-ub 2048 for the fill); redlite decode at 32K; both tools'
# prompt 32768. About 2-4 minutes a file on one H200 after the builds (llama-bench ~4 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rl_files_out}
PRESETS=${PRESETS:-cf2 iq2_xxs q4_k_m}
LB=/tmp/lcpp/build/bin/llama-bench
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.cudabin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/log.txt"; }
[ -x build/redlite ] || make -j"$(nproc)" build/redlite >"$OUT/build_cpu.log" 2>&1 || { say "CPU build failed"; exit 1; }
[ -x build/cuda/redlite ] || make -j"$(nproc)" CUDA=1 BUILD=build/cuda build/cuda/redlite >"$OUT/build_cuda.log" 2>&1 ||
    { say "CUDA build failed (build_cuda.log)"; exit 1; }
[ -x $LB ] || LOGS="$OUT" OUT="$OUT" bash bench/cuda_compare.sh 0 >>"$OUT/log.txt" 2>&1
[ -x $LB ] || { say "llama-bench build failed (lcpp_build.log)"; exit 1; }
REC="$OUT/records.jsonl"
: >"$REC"
# record TOOL TAG FILE ARGS...: one line of records.jsonl from a JSON output file
record() {
    python3 - "$@" <<'EOF' >>"$REC"
import json, sys
tool, tag, path, args = sys.argv[1], sys.argv[2], sys.argv[3], " ".join(sys.argv[4:])
try:
    res = json.load(open(path))
except Exception as e:
    res = {"error": str(e)}
print(json.dumps({"tool": tool, "tag": tag, "args": args, "result": res}))
EOF
}
lc() { # lc TAG ARGS...
    local tag=$1; shift
    $LB -m "$F" -ngl 99 -fa 1 -o json "$@" >"$OUT/lc_$tag.json" 2>"$OUT/lc_$tag.err" ||
        say "llama.cpp $tag FAILED: $(tail -1 "$OUT/lc_$tag.err")"
    record llama-bench "$tag" "$OUT/lc_$tag.json" "$@"
    say "llama.cpp $tag done"
}
rl() { # rl TAG ARGS...
    local tag=$1; shift
    build/cuda/redlite bench -m "$F" --backend cuda --batch 2048 --json "$@" >"$OUT/rl_$tag.json" 2>"$OUT/rl_$tag.err" ||
        say "redlite $tag FAILED: $(tail -1 "$OUT/rl_$tag.err")"
    record redlite "$tag" "$OUT/rl_$tag.json" "$@"
    say "redlite $tag done"
}
for p in $PRESETS; do
    F=/tmp/files_$p.gguf
    need=$(build/redlite synth --preset "$p" --list 2>/dev/null | awk '/bytes of tensor data/ {print $5}')
    free=$(($(df --output=avail -B1 /tmp | tail -1)))
    if [ -n "$need" ] && [ "$need" -gt "$((free - 2000000000))" ]; then rm -f /tmp/files_*.gguf; fi
    [ -s "$F" ] || build/redlite synth --preset "$p" --routing calibrated --quiet -o "$F" || { say "synth $p failed"; exit 1; }
    say "$p: $(stat -c %s "$F") bytes"
    for r in 1 2; do
        lc "$p-r$r" -p 2048 -n 128 -ub 512,2048 -r 3
        rl "$p-r$r" --prompt 2048 --depth 8192 --n-decode 128 --reps 3 --warmup 8
    done
    lc "$p-depth" -p 0 -n 64 -d 8192,32768 -ub 2048 -r 1
    rl "$p-d32k" --prompt 0 --depth 32768 --n-decode 64 --reps 3 --warmup 4
    lc "$p-p32k" -p 32768 -n 0 -ub 2048 -r 1
    rl "$p-p32k" --prompt 32768 --n-decode 8 --reps 2 --warmup 2
done
python3 bench/cuda_files_table.py "$REC" | tee "$OUT/table.md"
say "== done"
