#!/usr/bin/env bash
# bench/gpu_lcpp.sh — Red Lite against llama.cpp on the GPU machine (device tool), same files, one call.
#
#   carry: .cudabin, .lcp (llama.cpp.tar.xz = the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp, and
#          optionally libggml-cuda.so.xz = its CUDA backend built elsewhere for sm_90 as a loadable module:
#          `cmake -DGGML_BACKEND_DL=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_SERVER=OFF`,
#          target ggml-cuda; 1,902 s on the 2-core development machine, 39 MB compressed; with
#          llama-bin.tar.xz beside it, the tools and CPU variants built there too: nothing is compiled
#          on the GPU machine; `bench/gpu_lcpp.sh pack-lcpp` makes both)
#   bench/gpu_lcpp.sh pack-lcpp        (here, not there) build the llama.cpp tools and CUDA module into .lcp
#   bench/gpu_lcpp.sh lcpp             only llama.cpp: unpack (or build) it, check it sees the GPU
#   bench/gpu_lcpp.sh setup            build llama-bench + llama-server, redlite and its CUDA tests (sm_90), and
#                                      the previous main carried in .old/ (if there); write the files
#   bench/gpu_lcpp.sh tests            every CUDA test; then the portable configuration (PDL off, shared
#                                      memory capped at 99 KiB as on sm_86/89/120) on the ones that launch
#                                      the big kernels
#   bench/gpu_lcpp.sh cf2              CF2 full residency: prompt 2048 + decode vs llama.cpp (baseline check),
#                                      and this tree vs .old (issue 44: within 2 %), interleaved
#   bench/gpu_lcpp.sh q35              35B-A3B Q4_K_M-like: full residency, then VRAM budgets 8 and 4 GiB
#                                      against llama.cpp's best-fitting --n-cpu-moe
#   bench/gpu_lcpp.sh rows             aggregate decode at 1 / 4 / 8 streams on CF2: redlite serve --parallel
#                                      vs llama-server -np (bench/gpu_rows_load.py)
#
# llama.cpp as a user builds it for this machine: Release, CUDA for sm_90, CPU backend -march=native
# (GGML_NATIVE). With a carried libggml-cuda.so the CUDA module is not recompiled here (it takes ~400 s
# of GPU-machine time): the CPU backend and the tools are built native (GGML_BACKEND_DL: ggml loads
# both modules from the tools' folder at start). Same source, same ggml ABI.
#
# Budgets: Red Lite's --vram-mib B is its whole device budget (dense + context + expert slots);
# llama.cpp's --n-cpu-moe N keeps the routed experts of N layers in host memory. N starts at the smallest
# count whose GPU-resident experts fit B beside the dense weights and grows by one while llama.cpp's
# measured peak exceeds Red Lite's at B (the best-fitting -ncmoe: fewer CPU layers is faster); both engines' whole-GPU
# VRAM use is sampled with nvidia-smi during each run and printed beside the rates, so "same budget" is
# checked, not assumed. Files: `redlite synth --routing calibrated` (a stand-in for trained routing).
# Logs and JSON under $OUT; the summary in $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source bench/env_cudabin.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/lcpp_out}; mkdir -p "$OUT"
LCP=/tmp/lcpp; mkdir -p $LCP
S=$OUT/summary.txt
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$S"; }
RL=build/cuda/redlite
ARCH="-gencode arch=compute_90,code=sm_90"
TPROGS="test_cuda_engine test_cuda_verify test_cuda_spec test_cuda_vram test_cuda_rows test_cuda_mgpu test_cuda_ops"
TESTS=$(for t in $TPROGS; do printf 'build/cuda/tests/%s ' $t; done)
SMEM_CAP_ENV=${SMEM_CAP_ENV:-RL_CUDA_SMEM_LIMIT=99K}
LB=$LCP/build/bin/llama-bench
NT=${NT:-$(nproc)}
# llama.cpp's configuration, as a user builds it; with a separately built CUDA module (GGML_BACKEND_DL)
# GGML_NATIVE is refused: every CPU variant is built and ggml loads the best one this CPU runs (the
# native build's code in effect)
LCPP_FLAGS="-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF"
LCPP_CPU_DL="-DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=ON -DGGML_BACKEND_DL=ON -DGGML_CUDA=OFF"

# the module links libnccl.so.2 where the build machine had it: find the GPU machine's copy; then check
# that llama-bench lists the CUDA device
lcpp_check() {
    local nc
    nc=$(find /usr /opt -name 'libnccl.so.2' 2>/dev/null | head -1)
    echo "$LCP/build/bin${nc:+:$(dirname "$nc")}" >$LCP/ld_path
    LD_LIBRARY_PATH=$(cat $LCP/ld_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} $LB --list-devices 2>&1 |
        grep CUDA >/dev/null || { echo "llama.cpp: the CUDA module does not load" >&2; return 1; }
}

setup_lcpp() {
    [ -x $LB ] && return 0
    if [ -f .lcp/llama-bin.tar.xz ] && [ -f .lcp/libggml-cuda.so.xz ]; then
        # everything built elsewhere (`bench/gpu_lcpp.sh pack-lcpp`): no compiler time here at all
        mkdir -p $LCP/build/bin && tar -xJf .lcp/llama-bin.tar.xz -C $LCP/build/bin &&
            xz -dc .lcp/libggml-cuda.so.xz >$LCP/build/bin/libggml-cuda.so && lcpp_check
        return
    fi
    tar -xJf .lcp/llama.cpp.tar.xz -C $LCP || return 1
    local common=$LCPP_FLAGS server=llama-server
    # the llama-cpp-python sdist leaves out tools/ui, without which llama-server does not configure
    [ -d $LCP/llama.cpp/tools/ui ] || { common="$common -DLLAMA_BUILD_SERVER=OFF"; server=; }
    if [ -f .lcp/libggml-cuda.so.xz ]; then
        cmake -S $LCP/llama.cpp -B $LCP/build $common $LCPP_CPU_DL >"$LCP/lcpp_cmake.log" 2>&1 || return 1
        cmake --build $LCP/build --target llama-bench $server -j"$NT" >"$LCP/lcpp_build.log" 2>&1 || return 1
        xz -dc .lcp/libggml-cuda.so.xz >$LCP/build/bin/libggml-cuda.so && lcpp_check || return 1
    else
        cmake -S $LCP/llama.cpp -B $LCP/build $common -DGGML_NATIVE=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
            >"$LCP/lcpp_cmake.log" 2>&1 || return 1
        cmake --build $LCP/build --target llama-bench $server -j"$NT" >"$LCP/lcpp_build.log" 2>&1 || return 1
    fi
}

# vram_peak CMD...: run CMD while sampling the GPU's memory in use; prints "peak MiB" to stderr's log
vram_run() {
    local tag=$1; shift
    (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null; sleep 0.25; done) \
        >"$OUT/vram_$tag.txt" &
    local mon=$!
    "$@"
    local rc=$?
    kill $mon 2>/dev/null; wait $mon 2>/dev/null
    echo "$tag peak VRAM $(sort -n "$OUT/vram_$tag.txt" | tail -1) MiB" >>"$S"
    return $rc
}

# wait for the detached llama.cpp build (at most $1 s)
wait_lcpp() {
    local t=0
    while [ ! -f $LCP/build.rc ] && [ $t -lt "$1" ]; do sleep 5; t=$((t + 5)); done
    cp $LCP/lcpp_*.log "$OUT/" 2>/dev/null
    if [ -f $LCP/ld_path ]; then
        LD_LIBRARY_PATH=$(cat $LCP/ld_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
    fi
    if [ "$(cat $LCP/build.rc 2>/dev/null)" = 0 ] && $LB --help >/dev/null 2>&1; then return 0; fi
    say "llama.cpp not ready (rc $(cat $LCP/build.rc 2>/dev/null), waited $t s): $(tail -3 $LCP/lcpp_build.log 2>/dev/null)"
    return 1
}

case "${1:-}" in
pack-lcpp)
    # here, on the development machine (no GPU needed; ~45 min on 2 cores): the tools with every CPU
    # variant and the CUDA module, from .lcp/llama.cpp.tar.xz, into .lcp/llama-bin.tar.xz and
    # .lcp/libggml-cuda.so.xz (git-ignored; carry .lcp)
    W=${W:-/tmp/lcpp-pack}; mkdir -p $W && tar -xJf .lcp/llama.cpp.tar.xz -C $W || exit 1
    common="$LCPP_FLAGS -DLLAMA_BUILD_SERVER=OFF"
    cmake -S $W/llama.cpp -B $W/cpu $common $LCPP_CPU_DL >$W/cpu.log 2>&1 &&
        cmake --build $W/cpu --target llama-bench -j"$NT" >>$W/cpu.log 2>&1 || exit 1
    cmake -S $W/llama.cpp -B $W/cuda $common -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 >$W/cuda.log 2>&1 &&
        cmake --build $W/cuda --target ggml-cuda -j"$NT" >>$W/cuda.log 2>&1 || exit 1
    tar -C $W/cpu/bin -cf - --exclude=libggml-cuda.so . | xz -T0 -6 >.lcp/llama-bin.tar.xz &&
        xz -T0 -6 -c $W/cuda/bin/libggml-cuda.so >.lcp/libggml-cuda.so.xz && ls -la .lcp
    exit
    ;;
lcpp)
    # llama.cpp only (the other stages wait for it; setup starts it detached)
    [ -f $LCP/build.rc ] || { setup_lcpp; echo $? >$LCP/build.rc; }
    say "llama.cpp rc $(cat $LCP/build.rc): $(LD_LIBRARY_PATH=$(cat $LCP/ld_path 2>/dev/null) $LB --list-devices 2>&1 | grep -m1 CUDA)"
    ;;
setup)
    say "setup: llama.cpp + redlite builds, synthetic files"
    # llama.cpp builds detached (it outlives this call on a warm machine; the later stages wait for it)
    if [ ! -f $LCP/build.rc ]; then
        export -f setup_lcpp lcpp_check; export LCP LB NT LCPP_FLAGS LCPP_CPU_DL
        setsid nohup bash -c 'setup_lcpp; echo $? >$LCP/build.rc' >/dev/null 2>&1 &
    fi
    if [ -d .old ] && [ ! -x .old/build/cuda/redlite ]; then
        (cd .old && nice make -s -j4 CUDA=1 BUILD=build/cuda CUDA_ARCH="$ARCH" build/cuda/redlite >"$OUT/old_build.log" 2>&1
         echo "old tree build rc=$?" >>"$S") &
    fi
    make -s -j"$NT" CUDA=1 BUILD=build/cuda OBJ=build/obj-cuda CUDA_ARCH="$ARCH" build/cuda/redlite $TESTS \
        >"$OUT/rl_build.log" 2>&1 || say "redlite build failed: $(tail -3 "$OUT/rl_build.log")"
    make -s default-model >/dev/null 2>&1
    say "redlite built"
    [ -s /tmp/cf2.gguf ] || $RL synth --preset cf2 --routing calibrated -o /tmp/cf2.gguf --quiet
    [ -s /tmp/q35.gguf ] || $RL synth --preset 35b-a3b-q4_k_m --routing calibrated -o /tmp/q35.gguf --quiet
    say "files written: $(ls -la /tmp/cf2.gguf /tmp/q35.gguf | awk '{print $5}' | tr '\n' ' ')"
    wait
    say "setup done (llama.cpp still building: bench stages wait for it)"
    ;;
tests)
    for tp in $TPROGS; do
        t=$(date +%s); timeout 200 build/cuda/tests/$tp >"$OUT/$tp.txt" 2>&1; rc=$?
        say "$tp rc=$rc $(( $(date +%s) - t ))s: $(grep -E 'passed|FAIL' "$OUT/$tp.txt" | tail -1)"
    done
    for tp in test_cuda_engine test_cuda_verify test_cuda_rows test_cuda_vram; do
        t=$(date +%s); env RL_CUDA_PDL=0 $SMEM_CAP_ENV timeout 150 build/cuda/tests/$tp >"$OUT/${tp}_portable.txt" 2>&1; rc=$?
        say "$tp (PDL off, $SMEM_CAP_ENV) rc=$rc $(( $(date +%s) - t ))s: $(grep -E 'passed|FAIL' "$OUT/${tp}_portable.txt" | tail -1)"
    done
    grep -h -B2 -A8 'FAIL' "$OUT"/test_cuda_*.txt | head -60 >"$OUT/fails.txt"
    ;;
cf2)
    wait_lcpp 300 &&
    OUT=$OUT/cf2 CF2=/tmp/cf2.gguf PRESET=cf2 LCP=$LCP bench/cuda_compare.sh 1 2>&1 | tail -4 | tee -a "$S"
    if [ -x .old/build/cuda/redlite ]; then
        for side in old new old new; do
            bin=$RL; [ $side = old ] && bin=.old/build/cuda/redlite
            $bin bench -m /tmp/cf2.gguf --backend cuda --n-decode 128 --warmup 8 --prompt 2048 --reps 3 --json \
                >"$OUT/cf2_$side.json" 2>/dev/null
            say "cf2 $side: $(python3 -c "import json; d = json.load(open('$OUT/cf2_$side.json'))
print('decode', round(d['decode'][0]['tok_s'], 1), 'prompt', round(d['prompt'][0]['tok_s'], 1))" 2>&1 | tail -1)"
        done
    fi
    ;;
rows)
    for side in redlite llama; do
        [ $side = llama ] && { wait_lcpp 120 || break; }
        extra=(); [ $side = llama ] && extra=(--llama-server "$LCP/build/bin/llama-server")
        timeout 280 python3 bench/gpu_rows_load.py $RL /tmp/cf2.gguf --streams 1,4,8 --tokens 128 --reps 2 "${extra[@]}" \
            -- --backend cuda --ctx 4096 -t 8 >"$OUT/rows_$side.txt" 2>&1
        say "rows $side rc=$?"; cat "$OUT/rows_$side.txt" >>"$S"
    done
    ;;
q35)
    wait_lcpp 300 || exit 1
    M=/tmp/q35.gguf
    say "q35 full residency"
    vram_run lcpp_full $LB -m $M -ngl 99 -fa 1 -p 2048 -n 64 -ub 2048 -r 2 -o json >"$OUT/lcpp_q35_full.json" 2>"$OUT/lcpp_q35_full.err"
    vram_run rl_full $RL bench -m $M --backend cuda --n-decode 64 --warmup 8 --prompt 2048 --reps 3 --json \
        >"$OUT/rl_q35_full.json" 2>"$OUT/rl_q35_full.err"
    read -r NL PER DENSE < <($RL info $M --json | python3 -c "
import json, sys; d = json.load(sys.stdin); e = d['experts']
print(len(e), max(x['n_expert'] * x['expert_bytes'] for x in e), d['bytes']['dense'])")
    say "q35: $NL layers, $PER routed-expert bytes per layer, $DENSE dense bytes"
    for B in 8192 4096; do
        # --vram-mib is Red Lite's whole device budget (dense + context + expert slots): llama.cpp gets
        # the layers' experts that fit beside the same dense weights
        vram_run rl_$B $RL bench -m $M --backend cuda --vram-mib $B --n-decode 64 --warmup 8 --prompt 2048 --reps 3 \
            --json --verbose >"$OUT/rl_q35_$B.json" 2>"$OUT/rl_q35_$B.err"
        grep -E "vram tier: (decode steps|in the decode graph|--vram-miss|demand fills)" "$OUT/rl_q35_$B.err" | sed 's/^/    /' >>"$S"
        rlpk=$(sort -n "$OUT/vram_rl_$B.txt" | tail -1)
        N=$(python3 -c "print(min($NL, max(0, $NL - (($B << 20) - $DENSE) // $PER)))")
        # that count ignores llama.cpp's own buffers (1.4-1.9 GiB more than Red Lite's use in session 36):
        # one more CPU layer while its measured whole-GPU peak exceeds Red Lite's (the same CUDA context
        # counted on both sides), at most 4 more (LCPP_FIT=0: the count as computed); every try is kept
        for _ in 0 1 2 3 4; do
            say "budget $B MiB: llama.cpp --n-cpu-moe $N ($((NL - N)) layers' experts on the GPU), $NT threads"
            vram_run lcpp_$B $LB -m $M -ngl 99 -fa 1 -ncmoe $N -t $NT -p 2048 -n 64 -ub 2048 -r 2 -o json \
                >"$OUT/lcpp_q35_$B.json" 2>"$OUT/lcpp_q35_$B.err"
            pk=$(sort -n "$OUT/vram_lcpp_$B.txt" | tail -1)
            cp "$OUT/lcpp_q35_$B.json" "$OUT/lcpp_q35_${B}_ncmoe$N.json"
            [ "${LCPP_FIT:-1}" = 0 ] || [ "${pk:-0}" -le "${rlpk:-$B}" ] || [ "$N" -ge "$NL" ] && break
            N=$((N + 1))
        done
    done
    python3 - "$OUT" <<'EOF' | tee -a "$S"
import json, sys
out = sys.argv[1]
def lc(tag, key):
    try: rows = json.load(open(f"{out}/lcpp_q35_{tag}.json"))
    except Exception: return float("nan")
    v = [r["avg_ts"] for r in rows if (r["n_gen"] == 0) == (key == "pp")]
    return max(v) if v else float("nan")
def rl(tag, key):
    try: j = json.load(open(f"{out}/rl_q35_{tag}.json"))
    except Exception: return float("nan")
    return (j["prompt"][0] if key == "pp" else j["decode"][0])["tok_s"]
print(f"{'35B-A3B q4_k_m-like':22s} {'lcpp tg':>8s} {'rl tg':>8s} {'ratio':>6s} {'lcpp pp':>8s} {'rl pp':>8s} {'ratio':>6s}")
for tag in ["full", "8192", "4096"]:
    a, b, c, d = lc(tag, "tg"), rl(tag, "tg"), lc(tag, "pp"), rl(tag, "pp")
    print(f"{tag:22s} {a:8.1f} {b:8.1f} {b / a:6.2f} {c:8.1f} {d:8.1f} {d / c:6.2f}")
EOF
    ;;
*) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
say "done: $1"
