#!/usr/bin/env bash
# bench/cpu_prompt_check.sh — one short call on the 16-core AVX-512 host (issue 17, prompt ingestion):
#   1. build this tree (and, with BASE=DIR, another tree for a before/after comparison);
#   2. test_kern at every level the CPU has (at the AVX-512 level both batched cores: the 256-bit
#      default and the 512-bit one of kern_set_mm512), then the batched kernels' speed with each;
#   3. test_prefill_par (threaded prefill loops == steps, bit for bit);
#   4. a 4-layer q4_k_m file (real geometry, byte vocabulary: the head does not run in a prompt
#      except on its last row) and `redlite bench --prompt 512 --profile` at 16, 8 and 2 threads
#      (the products/threads table), plus 16 threads with the 512-bit core (RL_KERN_MM=512) and BASE.
# Libraries: .cudabin/{include,lib} of the repository root are used when present (the GPU image has
# no cjson/utf8proc/microhttpd headers; carry .cudabin).
# Usage: bench/cpu_prompt_check.sh OUTDIR [BUDGET_S]   (BASE=DIR: a tree to compare against)
# Writes OUTDIR/summary.txt (one line per step), bench.txt (the bench outputs), tests.log, build.log;
# a budget (default 150 s) stops starting steps so it ends in time.
set -uo pipefail
OUT=${1:?usage: bench/cpu_prompt_check.sh OUTDIR [BUDGET_S]}
BUDGET=${2:-150}
mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - T0))); }
log() { echo "[$(($(date +%s) - T0)) s] $*" | tee -a "$OUT/summary.txt"; }
FILE=${FILE:-/tmp/rl_cpp_q4km.gguf}

. "$(dirname "$0")/env_cudabin.sh"
log "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), flags: $(grep -m1 -o 'avx512_vnni\|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
make -j"$(nproc)" >"$OUT/build.log" 2>&1 || { log "build failed"; tail -30 "$OUT/build.log"; exit 1; }
if [ -n "${BASE:-}" ]; then
    (cd "$BASE" && make -j"$(nproc)" BUILD=build/cpp_base build/cpp_base/redlite) >/dev/null 2>&1 &
    BPID=$!
fi
log "built"
build/tests/test_kern >"$OUT/t.log" 2>&1
log "test_kern (both batched cores at AVX-512): rc=$? $(tail -1 "$OUT/t.log")"
grep -m5 FAIL "$OUT/t.log" | tee -a "$OUT/summary.txt"
cat "$OUT/t.log" >>"$OUT/tests.log"
TY=Q4_K,Q5_K,Q6_K,IQ2_XXS,IQ2_XS,IQ1_M
{ echo "== 512-bit core"; RL_KERN_MM=512 RL_KERN_BENCH=mm RL_KERN_BENCH_TYPES=$TY build/tests/test_kern | grep -v "^test_kern\|level"
  echo "== 256-bit core"; RL_KERN_MM=256 RL_KERN_BENCH=mm RL_KERN_BENCH_TYPES=$TY build/tests/test_kern | grep -v "^test_kern\|level"; } \
    >>"$OUT/summary.txt" 2>&1
log "kernel speeds done"
build/tests/test_prefill_par >"$OUT/t.log" 2>&1
log "test_prefill_par: rc=$? $(tail -1 "$OUT/t.log")"
cat "$OUT/t.log" >>"$OUT/tests.log"
rm -f "$OUT/t.log"
[ -s "$FILE" ] || build/redlite synth --preset q4_k_m --geometry layers=4 -o "$FILE" --quiet >>"$OUT/summary.txt" 2>&1
log "file: $(ls -la "$FILE" | awk '{print $5}') bytes"
bench() { # label, threads, [env...] redlite
    local label=$1 t=$2
    shift 2
    [ "$(left)" -gt 12 ] || { log "budget: skipped $label"; return; }
    env "$@" -t "$t" --n-decode 4 --reps 1 --warmup 1 --prompt 512 --profile -m "$FILE" >"$OUT/b.txt" 2>&1
    log "$label: $(grep -E '^(decode|prompt) ' "$OUT/b.txt" | tr -s ' ' | tr '\n' ';')"
    { echo "===== $label: $*"; cat "$OUT/b.txt"; } >>"$OUT/bench.txt"
    rm -f "$OUT/b.txt"
}
bench t16 16 RL_KERN=avx512 build/redlite bench
[ -n "${BASE:-}" ] && wait "$BPID" && bench t16_base 16 RL_KERN=avx512 "$BASE/build/cpp_base/redlite" bench
bench t8 8 RL_KERN=avx512 build/redlite bench
bench t16_mm512 16 RL_KERN_MM=512 build/redlite bench
bench t2 2 RL_KERN=avx512 build/redlite bench
[ -n "${BASE:-}" ] && bench t2_base 2 RL_KERN=avx512 "$BASE/build/cpp_base/redlite" bench
log "done"
