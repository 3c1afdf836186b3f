#!/usr/bin/env bash
# bench/cuda_profile.sh — per-kernel GPU time of a CF2 decode step and of one 2048-row prefill chunk,
# read with Nsight Compute (gpu__time_duration only, clocks left alone), summed by kernel and
# variant. Runs on the GPU machine after bench/cuda_check.sh build,synth. Summaries under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rl_cuda_out}
CF2=${CF2:-/tmp/cf2.gguf}
B=build/cuda
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || ls /usr/local/cuda/bin/ncu 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/.cudabin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
summ() { # summ CSV TITLE: total and top kernels
    python3 - "$1" "$2" <<'EOF'
import csv, sys, re, collections
path, title = sys.argv[1], sys.argv[2]
rows = []
with open(path) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"]
    m = re.match(r"(?:void )?(\w+)(?:<(.*?)>)?\(", name)
    key = (m.group(1) + ("<" + m.group(2) + ">" if m.group(2) else "")) if m else name[:60]
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "ns")
    v = v / 1e3 if unit in ("ns", "nsecond") else v * 1e3 if unit in ("ms", "msecond") else v  # -> us
    rows.append((key, v))
tot = collections.defaultdict(float)
cnt = collections.Counter()
for k, v in rows:
    tot[k] += v
    cnt[k] += 1
T = sum(tot.values())
print(f"== {title}: {len(rows)} kernels, {T / 1e3:.3f} ms GPU time")
for k, v in sorted(tot.items(), key=lambda x: -x[1])[:28]:
    print(f"{v / 1e3:9.3f} ms {100 * v / T:5.1f}%  n={cnt[k]:5d}  avg {v / cnt[k]:8.2f} us  {k}")
EOF
}
if [ -z "$NCU" ]; then echo "no ncu here"; exit 1; fi
echo "ncu: $NCU"
# decode: 2 steps (the graph: capture on the first, replay on the second), graphs off to name every launch
RL_CUDA_GRAPHS=0 timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    $B/redlite bench -m "$CF2" --backend cuda --n-decode 2 --reps 1 --warmup 0 --prompt 0 >"${LOGS:-$OUT}/ncu_decode.csv" 2>/tmp/ncu_decode.err
summ "${LOGS:-$OUT}/ncu_decode.csv" "decode, 2 tokens (graphs off)" | tee "$OUT/prof.txt"
# prefill: one chunk of 2048 rows (PROF_PREFILL=0 skips it)
[ "${PROF_PREFILL:-1}" = 1 ] || exit 0
timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    $B/redlite bench -m "$CF2" --backend cuda --n-decode 1 --reps 1 --warmup 0 \
    --prompt 2048 --batch 2048 >"${LOGS:-$OUT}/ncu_prefill.csv" 2>/tmp/ncu_prefill.err
summ "${LOGS:-$OUT}/ncu_prefill.csv" "decode 1 token + prefill 2048" | tee -a "$OUT/prof.txt"

gzip -f "${LOGS:-$OUT}"/ncu_*.csv
