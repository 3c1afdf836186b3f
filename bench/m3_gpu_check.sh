#!/usr/bin/env bash
# bench/m3_gpu_check.sh STAGE — the milestone-3 checks on the GPU machine, as two device calls on one
# warm machine (each call must end inside the device tool's 10 minutes):
#   tests   build this tree (build/cuda) and the baseline tree carried in .old/ (git archive of the
#           commit before milestone 3; build .old/build/cuda), both for sm_90 only, in parallel;
#           then every CUDA test program of this tree, and the ops / engine tests under the
#           portable path (RL_CUDA_PDL=0)
#   speed   redlite synth --preset cf2 (full 48-layer, calibrated routing) -> /tmp/cf2.gguf, then
#           redlite bench --backend cuda on it, old and new interleaved, two rounds (decode 128 after
#           warm-up, prompt 2048): the "within 2 % of the previous main" check of issue 44
# Logs under $OUT (summary.txt first). Carry: .cudabin (libraries the GPU image lacks), .old (a carried
# folder replaces the one there, builds included: carry it in the first call only).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/env_cudabin.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/m3_out}; mkdir -p "$OUT"
S=$OUT/summary.txt
ARCH="-gencode arch=compute_90,code=sm_90"
note() { echo "$*" | tee -a "$S"; }
case "${1:-tests}" in
tests)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$S" 2>&1
    t=$(date +%s)
    (make -s -j10 CUDA=1 BUILD=build/cuda OBJ=build/obj-cuda CUDA_ARCH="$ARCH" build/cuda/redlite \
        build/cuda/tests/test_cuda_{ops,engine,vram,verify,spec} >"$OUT/build_new.txt" 2>&1; echo "new rc=$?" >"$OUT/rc_new") &
    (cd .old && make -s -j6 CUDA=1 BUILD=build/cuda CUDA_ARCH="$ARCH" build/cuda/redlite >"$OUT/build_old.txt" 2>&1; echo "old rc=$?" >"$OUT/rc_old") &
    wait
    note "builds: $(cat "$OUT/rc_new") $(cat "$OUT/rc_old") in $(( $(date +%s) - t )) s"
    make -s default-model >/dev/null 2>&1
    for tp in test_cuda_engine test_cuda_verify test_cuda_spec test_cuda_vram test_cuda_ops; do
        t=$(date +%s); timeout 240 build/cuda/tests/$tp >"$OUT/$tp.txt" 2>&1; rc=$?
        note "$tp rc=$rc $(( $(date +%s) - t ))s: $(grep -E 'passed|FAIL' "$OUT/$tp.txt" | tail -1)"
    done
    for tp in test_cuda_engine test_cuda_verify; do
        t=$(date +%s); RL_CUDA_PDL=0 timeout 120 build/cuda/tests/$tp >"$OUT/${tp}_nopdl.txt" 2>&1; rc=$?
        note "$tp (RL_CUDA_PDL=0) rc=$rc $(( $(date +%s) - t ))s: $(tail -1 "$OUT/${tp}_nopdl.txt")"
    done
    grep -h -B2 -A8 'FAIL' "$OUT"/test_cuda_*.txt | head -60 >"$OUT/fails.txt"
    ;;
speed)
    # a fresh machine (or a carried .old, which replaces the folder there) has lost the builds
    t=$(date +%s)
    [ -x build/cuda/redlite ] || (make -s -j10 CUDA=1 BUILD=build/cuda OBJ=build/obj-cuda CUDA_ARCH="$ARCH" \
        build/cuda/redlite >"$OUT/build_new.txt" 2>&1) &
    [ -x .old/build/cuda/redlite ] || (cd .old && make -s -j6 CUDA=1 BUILD=build/cuda CUDA_ARCH="$ARCH" \
        build/cuda/redlite >"$OUT/build_old.txt" 2>&1) &
    wait
    note "builds ready in $(( $(date +%s) - t )) s: $(ls build/cuda/redlite .old/build/cuda/redlite 2>&1 | tr '\n' ' ')"
    t=$(date +%s)
    [ -f /tmp/cf2.gguf ] || build/cuda/redlite synth --preset cf2 --routing calibrated -o /tmp/cf2.gguf >"$OUT/synth.txt" 2>&1
    note "synth cf2 rc=$? $(( $(date +%s) - t )) s, $(stat -c %s /tmp/cf2.gguf 2>/dev/null) bytes"
    for round in 1 2; do
        for side in old new; do
            bin=build/cuda/redlite; [ $side = old ] && bin=.old/build/cuda/redlite
            $bin bench -m /tmp/cf2.gguf --backend cuda --n-decode 128 --warmup 8 --prompt 2048 --reps 3 --json \
                >"$OUT/bench_${side}_$round.json" 2>"$OUT/bench_${side}_$round.err"
            note "round $round $side rc=$?: $(tr -d '\n' <"$OUT/bench_${side}_$round.json" | head -c 600)"
        done
    done
    ;;
esac
