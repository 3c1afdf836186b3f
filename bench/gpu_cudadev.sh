#!/usr/bin/env bash
# bench/gpu_cudadev.sh — the CUDA tests of the per-device struct / portable launch shapes change (issues 44
# item 2-3, 48 item 1) on the GPU machine, in one device call (about 5-6 minutes on an H100/H200):
#   1. build this tree for sm_90 (build/cuda, make -j16) with the CUDA test programs;
#   2. run every CUDA test program twice, the two passes side by side on the one GPU:
#        default   the device's own shapes (sm_90: 227 KiB of shared memory per block, PDL on)
#        portable  RL_CUDA_SMEM_LIMIT=99K RL_CUDA_PDL=0: the launch shapes of a 99 KiB GPU without PDL
#                  (sm_86 / sm_89 / sm_120; docs/CUDA.md "Which GPUs run which path")
#      test_cuda_ops also compares the 99 KiB shapes with the device's own bit for bit in each pass
#      (test_smem_portable).
# Logs under $OUT: summary.txt (one line per build / program / pass), <test>_<pass>.txt, fails.txt.
# Carry: .cudabin (libraries the GPU image lacks). Usage: OUT=... bench/gpu_cudadev.sh
set -uo pipefail
cd "$(dirname "$0")/.."
[ -f bench/env_cudabin.sh ] && source bench/env_cudabin.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_cudadev_out}
mkdir -p "$OUT"
S=$OUT/summary.txt
note() { echo "$*" | tee -a "$S"; }
TESTS="test_cuda_ops test_cuda_engine test_cuda_verify test_cuda_spec test_cuda_vram"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$S" 2>&1
t=$(date +%s)
make -s -j16 CUDA=1 "CUDA_ARCH=-gencode arch=compute_90,code=sm_90" BUILD=build/cuda build/cuda/redlite \
    $(for tp in $TESTS; do printf 'build/cuda/tests/%s ' "$tp"; done) >"$OUT/build.txt" 2>&1
rc=$?
note "build rc=$rc in $(($(date +%s) - t)) s"
[ $rc -eq 0 ] || { tail -40 "$OUT/build.txt" >"$OUT/fails.txt"; exit 1; }
make -s default-model >/dev/null 2>&1

# one program, one pass: PASS (default | portable), the environment of the pass set by the caller
run1() {
    local tp=$1 pass=$2 t rc
    t=$(date +%s)
    timeout 200 "build/cuda/tests/$tp" >"$OUT/${tp}_$pass.txt" 2>&1
    rc=$?
    echo "$tp [$pass] rc=$rc $(($(date +%s) - t))s: $(grep -E 'passed|skipped|FAIL' "$OUT/${tp}_$pass.txt" | tail -1)" \
        >"$OUT/.${tp}_$pass.line"
}
for tp in $TESTS; do
    run1 "$tp" default &
    RL_CUDA_SMEM_LIMIT=99K RL_CUDA_PDL=0 run1 "$tp" portable &
    wait
    cat "$OUT/.${tp}_default.line" "$OUT/.${tp}_portable.line" | tee -a "$S"
    rm -f "$OUT/.${tp}_default.line" "$OUT/.${tp}_portable.line"
done
grep -h -E '99 KiB launch shapes|device [0-9]+: sm_' "$OUT"/test_cuda_ops_*.txt | tee -a "$S"
grep -h -B2 -A8 'FAIL' "$OUT"/test_cuda_*.txt | head -80 >"$OUT/fails.txt"
note "total $(($(date +%s) - t)) s of tests; failures (if any) in fails.txt"
