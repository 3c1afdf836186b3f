#!/usr/bin/env bash
# Expert-cache benchmark on a machine that has none of the build tools' libraries: uses the
# static binaries build/dev/cache_synth and build/dev/cache_bench (built by the commands in
# bench/results/cache-*.md). Writes the cf2 model to $DIR, results to $OUT (JSON lines + log).
set -u
DIR=${DIR:-/tmp/rl}; OUT=${OUT:-bench/results/device}; mkdir -p "$DIR" "$OUT"
{ date -u; nproc; grep -m1 "model name" /proc/cpuinfo; free -g; df -h "$DIR"; uname -r;
  cat /sys/block/*/queue/read_ahead_kb 2>/dev/null | head -3; } > "$OUT/machine.txt" 2>&1
if [ ! -f "$DIR/cf2.gguf" ]; then
  /usr/bin/time -v build/dev/cache_synth cf2 "$DIR/cf2.gguf" > "$OUT/synth.txt" 2>&1 || exit 1
fi
if [ -n "${DISK_TEST:-}" ]; then  # raw read bandwidth: 1 and 8 parallel O_DIRECT streams of 1 MiB blocks
  { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    dd if="$DIR/cf2.gguf" of=/dev/null bs=1M count=2048 iflag=direct 2>&1 | tail -1
    t0=$(date +%s.%N)
    for k in 0 1 2 3 4 5 6 7; do dd if="$DIR/cf2.gguf" of=/dev/null bs=1M count=512 skip=$((2048 + k * 1024)) iflag=direct 2>/dev/null & done; wait
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "8 streams x 512 MiB: %.0f MiB/s\n", 4096 / (b - a) }'
    t0=$(date +%s.%N)
    for k in $(seq 0 31); do dd if="$DIR/cf2.gguf" of=/dev/null bs=224K count=256 skip=$((k * 3000)) iflag=direct 2>/dev/null & done; wait
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "32 streams x 256 x 224 KiB: %.0f MiB/s\n", 32 * 256 * 224 / 1024 / (b - a) }'
  } > "$OUT/disk.txt" 2>&1
fi
for s in ${SETTINGS:-4096 4096:pk5 4096:pk3 4096:noprefetch 4096:buffered 8192 8192:noprefetch 2048 full}; do
  spec=${s%%:*}
  env=()
  IFS=: read -ra opts <<< "${s#"$spec"}"
  for o in "${opts[@]}"; do
    case "$o" in
      direct) env+=(RL_CACHE_DIRECT=1) ;;
      buffered) env+=(RL_CACHE_DIRECT=0) ;;
      noprefetch) env+=(RL_CACHE_PREFETCH=0) ;;
      pk*) env+=(RL_CACHE_PREFETCH_K=${o#pk}) ;;
      io*) env+=(RL_CACHE_IO_THREADS=${o#io}) ;;
    esac
  done
  extra=()
  [ "$s" = "${TRACE_SETTING:-4096}" ] && extra=(--trace "$OUT/trace-$spec.jsonl")
  echo "== $s" >> "$OUT/log.txt"
  env "${env[@]}" timeout "${LIMIT:-150}" build/dev/cache_bench -m "$DIR/cf2.gguf" --cache-mib "$spec" --label "$s" \
    --prompt "${PROMPT:-16}" --decode "${DECODE:-32}" --fast --drop-cache "${extra[@]}" >> "$OUT/results.jsonl" 2>> "$OUT/log.txt"
  echo "rc=$?" >> "$OUT/log.txt"
done
