#!/usr/bin/env bash
# bench/gpu_q35_speed.sh — Red Lite alone on the Qwen3.5 35B-A3B synthetic preset on the GPU machine:
# full residency and VRAM budgets of 4 and 8 GiB (decode 64 after warm-up, prompt 2048). No llama.cpp
# in this script: its numbers are ours only, not a comparison. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/env_cudabin.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/q35_out}; mkdir -p "$OUT"
S=$OUT/summary.txt
[ -x build/cuda/redlite ] || make -s -j16 CUDA=1 BUILD=build/cuda OBJ=build/obj-cuda \
    CUDA_ARCH="-gencode arch=compute_90,code=sm_90" build/cuda/redlite >"$OUT/build.txt" 2>&1
M=/tmp/q35.gguf
t=$(date +%s)
build/cuda/redlite synth --preset 35b-a3b-q4_k_m --routing calibrated -o $M --quiet >"$OUT/synth.txt" 2>&1
echo "synth 35b-a3b-q4_k_m rc=$? $(( $(date +%s) - t )) s $(stat -c %s $M) bytes" >>"$S"
for v in full 8192 4096; do
    build/cuda/redlite bench -m $M --backend cuda --vram-mib $v --n-decode 64 --warmup 8 --prompt 2048 --reps 3 \
        --json >"$OUT/bench_$v.json" 2>"$OUT/bench_$v.err"
    echo "vram $v rc=$?: $(python3 -c "import json,sys; d=json.load(open('$OUT/bench_$v.json')); print('decode', round(d['decode'][0]['tok_s'],1), 'prompt2048', round(d['prompt'][0]['tok_s'],1))" 2>&1 | tail -1)" >>"$S"
done
cat "$S"
