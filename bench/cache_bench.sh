#!/usr/bin/env bash
# Expert-cache benchmark matrix (not a test). Builds bench/cache_bench against
# build/cache/libredlite.a and runs it for each setting; JSON lines go to $OUT (default
# bench/results/cache-raw-<date>.jsonl), and each as a benchmark record (bench/records.py: machine, date,
# commit, file, threads, budget, hit rate, decode rate; what bench/charts.py --cache draws) to $RECORDS
# (default: $OUT with -records before .jsonl). Usage:
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
RECORDS=${RECORDS:-${OUT%.jsonl}-records.jsonl}
mkdir -p "$(dirname "$OUT")"
MACHINE="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB RAM"
COMMIT=$(git describe --always --dirty 2>/dev/null || echo unknown)
# one cache_bench JSON line (stdin) -> one record (stdout); the threads: -t N among the extra args, else all
record() {
    python3 -c '
import json, sys
w, (machine, commit, model, threads, opt) = json.loads(sys.stdin.read()), sys.argv[1:6]
spec = w["spec"]
r = {"machine": machine, "date": __import__("datetime").date.today().isoformat(), "commit": commit,
     "file": model, "engine": "redlite", "backend": "cpu", "threads": int(threads),
     "budget": {"cache_mib": int(spec) if spec.isdigit() else spec, "vram_mib": None}, "kind": "decode",
     "depth": w["prefill_tokens"], "n_tokens": w["decode_tokens"], "tok_s": w["decode_tok_s"],
     "hit_rate": w.get("hit_rate"), "tag": w["label"], "source": "bench/cache_bench.sh"}
if opt:
    r["config"] = opt
print(json.dumps(r))' "$MACHINE" "$COMMIT" "$MODEL" "$1" "$2"
}
THREADS=$(nproc)
prev=""
for a in "$@"; do [ "$prev" = "-t" ] && THREADS=$a; prev=$a; done
for s in ${SETTINGS:-4096 4096:direct 4096:noprefetch full mmap}; do
  spec=${s%%:*}; opt=${s#*:}; [ "$opt" = "$s" ] && opt=""
  env=()
  case "$opt" in
    direct) env+=(RL_CACHE_DIRECT=1) ;;
    noprefetch) env+=(RL_CACHE_PREFETCH=0) ;;
    uniform) env+=(RL_CACHE_CLASSES=0) ;;
  esac
  echo "== $s" >&2
  line=$(env "${env[@]}" build/cache/cache_bench -m "$MODEL" --cache-mib "$spec" --label "$s" \
    --prompt "${PROMPT:-16}" --decode "${DECODE:-32}" --drop-cache "$@") || exit 1
  echo "$line" | tee -a "$OUT"
  echo "$line" | record "$THREADS" "$opt" >>"$RECORDS"
done
