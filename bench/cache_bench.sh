#!/usr/bin/env bash
# Expert-cache benchmark matrix (not a test). Builds bench/cache_bench against
# build/cache/libredlite.a and runs it for each setting; JSON lines go to $OUT (default
# bench/results/cache-raw-<date>.jsonl). Usage:
#   bench/cache_bench.sh MODEL [extra cache_bench args...]
# Environment: SETTINGS="4096 4096:direct 4096:noprefetch full mmap" (default), DECODE, PROMPT.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: bench/cache_bench.sh MODEL [args]}
shift
make -s BUILD=build/cache build/cache/libredlite.a
cc -std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Isrc -o build/cache/cache_bench \
  bench/cache_bench.c build/cache/libredlite.a -lutf8proc -lcjson -lm -pthread
OUT=${OUT:-bench/results/cache-raw-$(date +%F).jsonl}
mkdir -p "$(dirname "$OUT")"
for s in ${SETTINGS:-4096 4096:direct 4096:noprefetch full mmap}; do
  spec=${s%%:*}; opt=${s#*:}; [ "$opt" = "$s" ] && opt=""
  env=()
  case "$opt" in
    direct) env+=(RL_CACHE_DIRECT=1) ;;
    noprefetch) env+=(RL_CACHE_PREFETCH=0) ;;
    uniform) env+=(RL_CACHE_CLASSES=0) ;;
  esac
  echo "== $s" >&2
  env "${env[@]}" build/cache/cache_bench -m "$MODEL" --cache-mib "$spec" --label "$s" \
    --prompt "${PROMPT:-16}" --decode "${DECODE:-32}" --drop-cache "$@" | tee -a "$OUT"
done
