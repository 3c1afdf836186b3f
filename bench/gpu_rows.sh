#!/usr/bin/env bash
# bench/gpu_rows.sh — the CUDA backend's forward_rows (issue 46 item 2: continuous batching) on the GPU
# machine, from the repository root, logs under $OUT (default /tmp/gpu_rows), about 6-8 minutes:
#   1. build (make -j16 CUDA=1, sm_90) redlite and the GPU tests;
#   2. tests: test_cuda_rows (forward_rows over 1..4 contexts == each context's single step, bit for
#      bit; refusals; engine threads together == alone), then the existing test_cuda_engine,
#      test_cuda_verify, test_cuda_spec (the exactness contract the change must not move);
#   3. a CF2 synthetic file (redlite synth --preset cf2 --routing calibrated, ~19 GB, ~1 min), then
#      the aggregate decode of `redlite serve --backend cuda --parallel S` at 1, 4 and 8 greedy streams
#      (bench/gpu_rows_load.py: each answer checked against the conversation run alone), and the same
#      8 streams with forward_rows refused (RL_CUDA_ROWS=0: the slots take turns) and with the rows
#      forward's graphs off (RL_CUDA_ROWS_GRAPH=0: its direct launches) for the ratios; before that
#      `test_cuda_rows CF2`: 1, 2, 4, 8 contexts stepped as rows of one forward (its graph or its direct
#      launches, the DeltaNet batched or row by row) vs one by one, without the server (aggregate tok/s,
#      the last logits compared).
# Carry .cudabin (the libraries the GPU image lacks; bench/env_cudabin.sh). summary.txt holds the
# lines that matter; each step's full output is in its own file.
set -uo pipefail
source bench/env_cudabin.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_rows}
mkdir -p "$OUT"
S=$OUT/summary.txt
: >"$S"
B=build/cuda
ARCH="-gencode arch=compute_90,code=sm_90"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$S" 2>&1
t=$(date +%s)
make -s -j16 CUDA=1 BUILD=$B OBJ=build/obj-cuda CUDA_ARCH="$ARCH" $B/redlite \
    $B/tests/test_cuda_{rows,engine,verify,spec} >"$OUT/build.txt" 2>&1
rc=$?
echo "build rc=$rc $(($(date +%s) - t))s" >>"$S"
[ $rc -eq 0 ] || { tail -30 "$OUT/build.txt" >>"$S"; cat "$S"; exit 1; }
for tp in test_cuda_rows test_cuda_engine test_cuda_verify test_cuda_spec; do
    t=$(date +%s)
    timeout 200 $B/tests/$tp >"$OUT/$tp.txt" 2>&1
    rc=$?
    echo "$tp rc=$rc $(($(date +%s) - t))s: $(grep -E 'passed' "$OUT/$tp.txt" | tail -1)" >>"$S"
done
grep -h '^  ' "$OUT/test_cuda_rows.txt" >>"$S"
grep -h 'FAIL' "$OUT"/test_cuda_*.txt | head -20 >>"$S"
CF2=/tmp/cf2.gguf
t=$(date +%s)
[ -s $CF2 ] || $B/redlite synth --preset cf2 --routing calibrated -o $CF2 >"$OUT/synth.txt" 2>&1
echo "synth rc=$? $(($(date +%s) - t))s" >>"$S"
# forward_rows alone (no server): 1, 2, 4, 8 contexts, rows of one forward vs one forward each
t=$(date +%s)
timeout 240 $B/tests/test_cuda_rows $CF2 >"$OUT/rows_timing.txt" 2>&1
echo "rows timing rc=$? $(($(date +%s) - t))s" >>"$S"
grep -h -E '^  |FAIL|passed' "$OUT/rows_timing.txt" >>"$S"
# --ctx 4096: 8 slots' KV caches stay small
SERVE=(--backend cuda --ctx 4096 -t 8)
t=$(date +%s)
timeout 240 python3 bench/gpu_rows_load.py $B/redlite $CF2 --streams 1,4,8 --tokens 128 --reps 2 -- "${SERVE[@]}" \
    >"$OUT/slots.txt" 2>&1
echo "slots (forward_rows) rc=$? $(($(date +%s) - t))s" >>"$S"
cat "$OUT/slots.txt" >>"$S"
t=$(date +%s)
RL_CUDA_ROWS=0 timeout 120 python3 bench/gpu_rows_load.py $B/redlite $CF2 --streams 8 --tokens 128 --reps 1 \
    -- "${SERVE[@]}" >"$OUT/slots_turns.txt" 2>&1
echo "slots (turns, RL_CUDA_ROWS=0) rc=$? $(($(date +%s) - t))s" >>"$S"
cat "$OUT/slots_turns.txt" >>"$S"
t=$(date +%s)
RL_CUDA_ROWS_GRAPH=0 timeout 120 python3 bench/gpu_rows_load.py $B/redlite $CF2 --streams 8 --tokens 128 --reps 1 \
    -- "${SERVE[@]}" >"$OUT/slots_nograph.txt" 2>&1
echo "slots (rows without graphs, RL_CUDA_ROWS_GRAPH=0) rc=$? $(($(date +%s) - t))s" >>"$S"
cat "$OUT/slots_nograph.txt" >>"$S"
cat "$S"
