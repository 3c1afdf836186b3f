#!/usr/bin/env bash
# bench/gpu_bisect.sh — CF2 speed of several prebuilt trees side by side on the GPU machine (device
# tool), interleaved, to find which commit moved decode or prompt speed (issue 44: within 2 %).
#
#   carry: .cudabin (the shared libraries the GPU image lacks), .bisect (one folder per revision,
#          each holding redlite.xz: `make CUDA=1 CUDA_ARCH="-gencode arch=compute_90,code=sm_90"
#          build/cuda/redlite` of `git archive REV`, built anywhere nvcc runs)
#   bench/gpu_bisect.sh [ROUNDS]   (default 2)
#
#   BISECT=DIR reads the revisions from DIR instead of .bisect; NEW=BIN adds a binary built on the
#   machine (e.g. build/cuda/redlite) as the revision "znew" (old vs new in one call: issue 44).
#
# The CF2 file is written once by the newest binary (sorted last by name: name the folders so);
# every binary then runs `bench --backend cuda --n-decode 128 --warmup 8 --prompt 2048 --reps 3` in
# each round, in the same order, so drift of the machine touches every revision alike. Results in
# $OUT/summary.txt (one line per run) and $OUT/<rev>_<round>.json.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/env_cudabin.sh
OUT=${OUT:-/tmp/bisect_out}
mkdir -p "$OUT" /tmp/bisect
S=$OUT/summary.txt
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$S"; }
B=${BISECT:-.bisect}
for r in $(ls "$B"); do xz -dc "$B/$r/redlite.xz" >/tmp/bisect/$r && chmod +x /tmp/bisect/$r; done
[ -n "${NEW:-}" ] && cp "$NEW" /tmp/bisect/znew
REVS=$(ls /tmp/bisect)
LAST=$(echo "$REVS" | tail -1)
say "revisions: $(echo $REVS); $(nvidia-smi --query-gpu=name --format=csv,noheader)"
[ -s /tmp/cf2.gguf ] || /tmp/bisect/$LAST synth --preset cf2 --routing calibrated -o /tmp/cf2.gguf --quiet
say "cf2 written: $(stat -c %s /tmp/cf2.gguf) bytes"
for round in $(seq 1 "${1:-2}"); do
    for r in $REVS; do
        /tmp/bisect/$r bench -m /tmp/cf2.gguf --backend cuda --n-decode 128 --warmup 8 --prompt 2048 --reps 3 \
            --json >"$OUT/${r}_$round.json" 2>"$OUT/${r}_$round.err"
        say "round $round $r: $(python3 -c "import json; d = json.load(open('$OUT/${r}_$round.json'))
print('decode', round(d['decode'][0]['tok_s'], 1), 'prompt', round(d['prompt'][0]['tok_s'], 1))" 2>&1 | tail -1)"
    done
done
say "done"
