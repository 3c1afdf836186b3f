#!/usr/bin/env bash
# bench/cuda_session.sh — one full GPU-machine call, the parts in order of importance: llama-bench
# builds in the background while redlite builds and the GPU tests run; then a decode profile; then
# the interleaved llama.cpp comparison (2 rounds, decode at depth $DEPTH in the first).
# $OUT gets summary.txt, prof.txt, compare.txt and logs.tgz (every log).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/rl_cuda_out} LOGS=${LOGS:-/tmp/rl_logs}
DEPTH=${DEPTH:-32768}
mkdir -p "$OUT" "$LOGS"
bash bench/cuda_compare.sh 0 >"$LOGS/lcpp_build.txt" 2>&1 &
LB=$!
bash bench/cuda_check.sh "${STAGES:-build,ops,engine,fixtures,synth}"
PROF_PREFILL=0 timeout 120 bash bench/cuda_profile.sh >/dev/null 2>&1
head -22 "$OUT/prof.txt"
wait $LB
cat "$LOGS/lcpp_build.txt"
timeout 400 bash bench/cuda_compare.sh 2 "$DEPTH"
tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
