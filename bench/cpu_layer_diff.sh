#!/usr/bin/env bash
# bench/cpu_layer_diff.sh — a file too big for this machine, scaled from two layer cuts (CPU, Red Lite vs
# llama.cpp): both cuts of a preset are written with `redlite synth --geometry layers=N[,...]`, then each
# round runs llama-bench and `redlite bench` (decode only) on the small cut and on the big one, minutes
# apart; the per-layer cost is the difference of the two cuts' ms per token, the whole file's estimate
# t(small) + (LAYERS - N_small) * per-layer. Prints every round and the medians; appends JSON lines to $OUT.
#
#   bench/cpu_layer_diff.sh PRESET GEOM_SMALL GEOM_BIG LAYERS [ROUNDS]
#   e.g. bench/cpu_layer_diff.sh 397b-a17b-q4_k_m layers=4,experts=128 layers=8,experts=128 60 4
#
# Env: LB (llama-bench; default build/llama.cpp/bin/llama-bench: tools/build_llama_cpp.sh's), T (threads,
# 2), ND (decode tokens, 32), VOCAB (tests/fixtures/qwen3-vocab.gguf), OUT (/tmp/layer_diff.jsonl), DIR (/tmp).
# Keep both cuts in the copied regime (each under ~65 % of RAM): past it `auto` serves the experts from the
# page cache and the difference mixes two regimes. Session 36's record: bench/results/2026-12-07-qwen35-layer-diff-cpu2.md.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
P=$1 GA=$2 GB=$3 NL=$4 R=${5:-4}
LB=${LB:-build/llama.cpp/bin/llama-bench}; T=${T:-2}; ND=${ND:-32}; OUT=${OUT:-/tmp/layer_diff.jsonl}
DIR=${DIR:-/tmp}; VOCAB=${VOCAB:-tests/fixtures/qwen3-vocab.gguf}; RL=build/redlite
[ -x "$LB" ] && [ -x $RL ] || { echo "cpu_layer_diff: need $LB and $RL (make; tools/build_llama_cpp.sh)" >&2; exit 2; }
la() { sed 's/.*layers=\([0-9]*\).*/\1/' <<<"$1"; }
for g in "$GA" "$GB"; do
    f=$DIR/ld-$P-${g//[=,]/_}.gguf
    [ -s "$f" ] || $RL synth --preset "$P" --routing calibrated --vocab "$VOCAB" --geometry "$g" -o "$f" --quiet || exit 1
done
for r in $(seq 1 "$R"); do
    for g in "$GA" "$GB"; do
        f=$DIR/ld-$P-${g//[=,]/_}.gguf
        l=$($LB -m "$f" -t "$T" -p 0 -n "$ND" -r 2 -o json 2>/dev/null |
            python3 -c "import json, sys; print([x['avg_ts'] for x in json.load(sys.stdin) if x['n_gen']][0])")
        m=$($RL bench -m "$f" -t "$T" --n-decode "$ND" --reps 2 --prompt 0 --json 2>/dev/null |
            python3 -c "import json, sys; print(json.load(sys.stdin)['decode'][0]['tok_s'])")
        echo "{\"preset\": \"$P\", \"geometry\": \"$g\", \"layers\": $(la "$g"), \"round\": $r, \"llama\": ${l:-null}, \"redlite\": ${m:-null}, \"threads\": $T}" | tee -a "$OUT"
    done
done
python3 - "$OUT" "$P" "$(la "$GA")" "$(la "$GB")" "$NL" <<'EOF'
import json, statistics as st, sys
out, p, na, nb, nl = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(l) for l in open(out) if l.strip()]
rows = [x for x in rows if x.get("preset") == p]
per = {"llama": [], "redlite": []}
full = {"llama": [], "redlite": []}
for r in sorted({x["round"] for x in rows}):
    a = [x for x in rows if x["round"] == r and x["layers"] == na]
    b = [x for x in rows if x["round"] == r and x["layers"] == nb]
    if not a or not b: continue
    for e in per:
        if not a[-1][e] or not b[-1][e]: continue
        ta, tb = 1e3 / a[-1][e], 1e3 / b[-1][e]
        d = (tb - ta) / (nb - na)
        per[e].append(d); full[e].append(ta + (nl - na) * d)
for e in per:
    print(f"{e:8s} per-layer ms {[round(x, 2) for x in per[e]]} median {st.median(per[e]):.2f}; "
          f"whole file {nl} layers ~{1e3 / st.median(full[e]):.2f} tok/s")
print(f"per-layer ratio (llama.cpp / Red Lite time) per round {[round(l / m, 2) for l, m in zip(per['llama'], per['redlite'])]}, "
      f"of the medians {st.median(per['llama']) / st.median(per['redlite']):.2f}x")
EOF
