#!/usr/bin/env bash
# bench/disk_bound.sh — a model larger than RAM, read from disk: Red Lite's bounded expert cache against
# llama.cpp's mmap, both held to the same RAM by a memory cgroup (issue 47 item 5: the 397B-class run).
#
#   bench/disk_bound.sh MODEL.gguf            (run as root: it creates a memory cgroup)
#
# Environment: RAM_MIB (the cgroup's limit, page cache included; default 6144), CACHE_MIB (Red Lite's
# --cache-mib; default RAM_MIB - dense - 1024, printed), T (threads, default nproc), N (decode tokens per
# run, default 8), ROUNDS (default 2), LB (llama-bench, default build/llama.cpp/bin/llama-bench),
# RL (default build/redlite), OUT (default /tmp/disk_bound).
#
# Same RAM for both: each run is started inside one cgroup-v1 memory group whose limit counts the
# process's anonymous memory AND the page cache it brings in (a mapping's pages, buffered reads), so
# llama.cpp's mmap can keep no more of the file than Red Lite's cache holds. Between runs the group's
# pages are reclaimed (memory.force_empty) and the page cache dropped, so no run starts with the file
# cached by the one before. Bytes read: the disk's sectors read (/proc/diskstats, the device holding the
# model) over each run divided by the tokens it decoded, load included; that counter is machine-wide,
# so other work reading the disk would count too (on a quiet machine it is the run's own reads).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
M=${1:?usage: bench/disk_bound.sh MODEL.gguf}
RL=${RL:-build/redlite}
LB=${LB:-build/llama.cpp/bin/llama-bench}
RAM_MIB=${RAM_MIB:-6144}
T=${T:-$(nproc)}
N=${N:-8}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-/tmp/disk_bound}
mkdir -p "$OUT"
CG=/sys/fs/cgroup/memory/redlite_disk_bound
[ -d /sys/fs/cgroup/memory ] || { echo "disk_bound: no cgroup-v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 2; }
mkdir -p "$CG" || { echo "disk_bound: cannot create $CG (run as root)" >&2; exit 2; }
echo $((RAM_MIB << 20)) >"$CG/memory.limit_in_bytes"
# the block device under the model file, for /proc/diskstats
DEV=$(df --output=source "$M" | tail -1); DEV=${DEV#/dev/}
sectors() { awk -v d="$DEV" '$3 == d {print $6}' /proc/diskstats; }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
FILE_B=$(stat -c %s "$M")
# dense bytes and routed-expert bytes per token (all misses), from `redlite info --json`
read -r DENSE_B ACTIVE_B < <("$RL" info "$M" --json 2>/dev/null |
    python3 -c "import json, sys; b = json.load(sys.stdin)['bytes']; print(b['dense'], b['active_per_token'])")
[ -n "${DENSE_B:-}" ] || { echo "disk_bound: redlite info $M failed" >&2; exit 1; }
CACHE_MIB=${CACHE_MIB:-$((RAM_MIB - DENSE_B / 1048576 - 1024))}
[ "$CACHE_MIB" -gt 0 ] || { echo "disk_bound: RAM_MIB $RAM_MIB leaves no room for a cache beside the dense weights and 1 GiB: raise RAM_MIB or set CACHE_MIB" >&2; exit 2; }
say "model $M: $FILE_B bytes; dense $DENSE_B bytes; RAM limit $RAM_MIB MiB (file / RAM = $(awk -v f="$FILE_B" -v r="$RAM_MIB" 'BEGIN {printf "%.1f", f / (r * 1048576)}')); redlite --cache-mib $CACHE_MIB; $T threads; $N decode tokens; device $DEV; active bytes per token (dense + the routed experts of one row) $ACTIVE_B"
fresh() { echo 1 >"$CG/memory.force_empty" 2>/dev/null; sync; echo 3 >/proc/sys/vm/drop_caches; }
run_in_cg() { sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$CG" "$@"; }
for r in $(seq 1 "$ROUNDS"); do
    fresh; s0=$(sectors); t0=$(date +%s.%N)
    run_in_cg "$RL" bench -m "$M" --backend cpu -t "$T" --cache-mib "$CACHE_MIB" --prompt 0 --n-decode "$N" \
        --warmup 2 --reps 1 --json >"$OUT/rl_$r.json" 2>"$OUT/rl_$r.err"
    rc=$?; s1=$(sectors); t1=$(date +%s.%N); peak=$(cat "$CG/memory.max_usage_in_bytes"); echo 0 >"$CG/memory.max_usage_in_bytes"
    tok=$(python3 -c "import json; print(round(json.load(open('$OUT/rl_$r.json'))['decode'][0]['tok_s'], 3))" 2>/dev/null)
    say "round $r redlite rc=$rc decode $tok tok/s; disk read $(((s1 - s0) * 512 >> 20)) MiB in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s for $((N + 2)) tokens + load; cgroup peak $((peak >> 20)) MiB"
    fresh; s0=$(sectors); t0=$(date +%s.%N)
    run_in_cg "$LB" -m "$M" -t "$T" -p 0 -n "$N" -r 1 -o json >"$OUT/lcpp_$r.json" 2>"$OUT/lcpp_$r.err"
    rc=$?; s1=$(sectors); t1=$(date +%s.%N); peak=$(cat "$CG/memory.max_usage_in_bytes"); echo 0 >"$CG/memory.max_usage_in_bytes"
    tok=$(python3 -c "import json; print(round(json.load(open('$OUT/lcpp_$r.json'))[0]['avg_ts'], 3))" 2>/dev/null)
    say "round $r llama.cpp (mmap) rc=$rc decode $tok tok/s; disk read $(((s1 - s0) * 512 >> 20)) MiB in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s for $N tokens (+ its warm-up run) + load; cgroup peak $((peak >> 20)) MiB"
done
fresh
rmdir "$CG" 2>/dev/null
say "done"
