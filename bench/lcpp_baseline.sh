#!/usr/bin/env bash
# bench/lcpp_baseline.sh — why llama.cpp's CUDA prompt speed on our synthetic CF2 file differs from
# the anchor (issue 15, item 5). Runs on the GPU machine (device tool), carry: .lcp, .cudabin.
#
# Builds llama-bench (CUDA, sm_90, as bench/cuda_compare.sh does) and, in parallel, a static CPU-only
# llama-bench (GGML_NATIVE, as a user builds it) that is returned as $OUT/llama-bench-cpu.xz for later
# CPU comparisons; writes CF2 files with each routing model of `redlite synth --routing` and runs
# llama-bench pp2048 (micro-batch 512 = its default, and 2048) + tg128, and redlite bench on each.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rl_out}; mkdir -p "$OUT"
LCP=/tmp/lcpp; mkdir -p $LCP
export C_INCLUDE_PATH=$PWD/.cudabin/include LIBRARY_PATH=$PWD/.cudabin/lib LD_LIBRARY_PATH=$PWD/.cudabin/lib
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/baseline.txt"; }
tar -xJf .lcp/llama.cpp.tar.xz -C $LCP || exit 1
(cmake -S $LCP/llama.cpp -B $LCP/bcuda -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DGGML_NATIVE=ON >$OUT/cmake_cuda.log 2>&1 && cmake --build $LCP/bcuda --target llama-bench -j11 >$OUT/build_cuda.log 2>&1;
 echo "cuda build rc=$?" >>$OUT/baseline.txt) &
(cmake -S $LCP/llama.cpp -B $LCP/bcpu -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DGGML_NATIVE=ON >$OUT/cmake_cpu.log 2>&1 && nice cmake --build $LCP/bcpu --target llama-bench -j3 >$OUT/build_cpu.log 2>&1 &&
 xz -T4 -c $LCP/bcpu/bin/llama-bench >$OUT/llama-bench-cpu.xz; echo "cpu build rc=$?" >>$OUT/baseline.txt) &
make -j2 CUDA=1 BUILD=build/cuda build/cuda/redlite >$OUT/rl_build.log 2>&1 || { say "redlite build failed"; tail -20 $OUT/rl_build.log; }
say "redlite built"
for r in uniform skewed; do build/cuda/redlite synth --preset cf2 --routing $r -o /tmp/cf2-$r.gguf --quiet; done
say "synth done"; df -h /tmp | tail -1
wait
say "builds done"; cat $OUT/baseline.txt
LB=$LCP/bcuda/bin/llama-bench
for r in uniform skewed; do
    say "llama.cpp $r"
    $LB -m /tmp/cf2-$r.gguf -ngl 99 -fa 1 -p 2048 -n 128 -ub 512,2048 -r 2 -o md 2>>$OUT/lcpp.err | tee -a $OUT/baseline.txt
    say "redlite $r"
    build/cuda/redlite bench -m /tmp/cf2-$r.gguf --backend cuda --n-decode 128 --reps 2 --warmup 8 --prompt 2048 --batch 2048 \
        --json 2>>$OUT/rl.err | tee -a $OUT/baseline.txt
done
say "done"
