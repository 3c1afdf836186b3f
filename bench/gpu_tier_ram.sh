#!/usr/bin/env bash
# bench/gpu_tier_ram.sh — the VRAM tier over a RAM cache smaller than the experts (issue 47): the Qwen3.5
# 122B-A10B preset at a 16 GiB VRAM budget, the process and its page cache held to RAM_GIB by a memory
# cgroup, for each RAM_GIB given: Red Lite with the victim cache (default), llama.cpp's -ncmoe 31 (the
# best-fitting count at 16 GiB, session 29), Red Lite without the victim cache (RL_CACHE_VICTIM=0),
# interleaved, the page cache dropped before each run. Run as root on the GPU machine after
# `bench/gpu_lcpp.sh setup` (build/cuda/redlite, $LCP/build/bin/llama-bench):
#
#   bench/gpu_tier_ram.sh synth            /tmp/q122.gguf (36.6 GiB, calibrated routing; ~30 s on an H100 host)
#   bench/gpu_tier_ram.sh run 24 16 12     one round per RAM_GIB (~2 min of Red Lite, ~2-3 of llama.cpp each)
#
# Env: ND (decode tokens, 256), WARM (decode tokens before them, 128: the caches fill from a dropped page cache
# first; WARM=4 times that fill, session 36), NCMOE (31), LCP (/tmp/lcpp, gpu_lcpp.sh's), M (/tmp/q122.gguf), SECOND (the
# third run: lru = RL_CACHE_VICTIM=0, the default; copy = --vram-miss copy, no CPU-computed misses; none). Red Lite's RAM cache is
# --cache-mib auto (70 % of the group less 0.5 GiB under a VRAM budget). Logs and JSON under $OUT, the
# summary in $OUT/summary.txt. Session 33 (H100, 24 GiB, one run each): victim 20.62 / 787.8 tok/s decode /
# prompt 2048, LRU 21.00 / 631.5 (bench/results/2026-12-07-m3-session33-h100.md).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -f bench/env_cudabin.sh ] && source bench/env_cudabin.sh
OUT=${OUT:-/tmp/tier_ram}; mkdir -p "$OUT"
S=$OUT/summary.txt
M=${M:-/tmp/q122.gguf}; RL=build/cuda/redlite; LCP=${LCP:-/tmp/lcpp}; LB=$LCP/build/bin/llama-bench
# gpu_lcpp.sh's build with a carried CUDA module notes where the GPU machine keeps libnccl.so.2
[ -f $LCP/ld_path ] && export LD_LIBRARY_PATH=$(cat $LCP/ld_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
say() { echo "$*" | tee -a "$S"; }
case "${1:-}" in
synth)
    t=$(date +%s)
    $RL synth --preset 122b-a10b-ud-iq2_xxs --routing calibrated -o "$M" --quiet >"$OUT/synth.txt" 2>&1
    say "synth rc=$? $(( $(date +%s) - t )) s $(stat -c %s "$M") bytes"
    ;;
run)
    shift
    [ $# -gt 0 ] || { echo "usage: bench/gpu_tier_ram.sh run RAM_GIB..." >&2; exit 2; }
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        CG=/sys/fs/cgroup/rl_tier_ram; LIM=memory.max; PEAK=memory.peak
    else
        CG=/sys/fs/cgroup/memory/rl_tier_ram; LIM=memory.limit_in_bytes; PEAK=memory.max_usage_in_bytes
    fi
    mkdir -p $CG || { echo "gpu_tier_ram: cannot create $CG (run as root)" >&2; exit 2; }
    fresh() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; echo 0 >$CG/$PEAK 2>/dev/null; }
    in_cg() { sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG" "$@"; }
    peak() { echo $(( $(cat $CG/$PEAK 2>/dev/null || echo 0) >> 20 )); }
    rl() { # rl TAG [ENV=V ...]
        local tag=$1; shift; fresh; local t=$(date +%s)
        in_cg env "$@" $RL bench -m "$M" --backend cuda --vram-mib 16384 ${RL_ARGS:-} -b 2048 --n-decode "${ND:-256}" --warmup "${WARM:-128}" \
            --prompt 2048 --reps 1 --json --verbose >"$OUT/rl_$tag.json" 2>"$OUT/rl_$tag.err"
        say "RAM $g GiB redlite $tag rc=$? $(( $(date +%s) - t )) s: $(python3 -c "import json; d=json.load(open('$OUT/rl_$tag.json')); print('decode', round(d['decode'][0]['tok_s'], 2), 'prompt2048', round(d['prompt'][0]['tok_s'], 1))" 2>&1 | tail -1); cgroup peak $(peak) MiB"
        grep -E "under a GPU|victim cache|waited on I/O|vram tier:" "$OUT/rl_$tag.err" | sed 's/^/    /' >>"$S"
    }
    for g in "$@"; do
        echo $((g << 30)) >$CG/$LIM
        rl "victim_$g"
        if [ -x $LB ]; then
            fresh; t=$(date +%s)
            in_cg $LB -m "$M" -ngl 99 -fa 1 -ncmoe "${NCMOE:-31}" -ub 2048 -t "$(nproc)" -p 2048 -n 128 -r 1 -o json \
                >"$OUT/lcpp_$g.json" 2>"$OUT/lcpp_$g.err"
            say "RAM $g GiB llama.cpp -ncmoe ${NCMOE:-31} rc=$? $(( $(date +%s) - t )) s: $(python3 -c "import json; print([(r['n_prompt'], r['n_gen'], round(r['avg_ts'], 2)) for r in json.load(open('$OUT/lcpp_$g.json'))])" 2>&1 | tail -1); cgroup peak $(peak) MiB"
        fi
        case "${SECOND:-lru}" in
        lru) rl "lru_$g" RL_CACHE_VICTIM=0 ;;
        copy) RL_ARGS="--vram-miss copy" rl "copy_$g" ;;
        none) ;;
        *) echo "gpu_tier_ram: SECOND=$SECOND: lru, copy or none" >&2 ;;
        esac
    done
    rmdir $CG 2>/dev/null
    ;;
*)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    case "${1:-}" in -h | --help) exit 0 ;; *) exit 2 ;; esac
    ;;
esac
