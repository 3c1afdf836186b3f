#!/usr/bin/env bash
# bench/vram_link_sweep.sh — the VRAM tier's budget sweep at a consumer card's link, on the GPU machine
# (issue 48, item 4), in one call of < 5 minutes (the file already written; `synth` adds ~1-2 min).
#
#   bench/vram_link_sweep.sh            budgets 4 / 8 / 12 / 16 / 24 GiB on CF2 (calibrated routing), each:
#                                       redlite bench --vram-mib B, decode 64 (after 4 warm-up tokens) and a
#                                       2048-token prompt, under RL_VRAM_LINK_GBS=$LINK_GBS; then, when
#                                       llama-bench is there, llama.cpp's best-fitting -ncmoe at that budget
#
# The link: RL_VRAM_LINK_GBS holds the tier's copy stream so its host->device copies run no faster than
# LINK_GBS (docs/CUDA.md, "Emulating a consumer link"). Default 25 GB/s = PCIe 4.0 x16: 16 GT/s x 16
# lanes with 128b/130b coding is 31.5 GB/s raw per direction; pinned host->device copies measure
# ~25-26 GB/s on such boards (TLP headers and DMA overheads), which is what a consumer RTX 3090 / 4090
# gets. The GPU machine's own link (PCIe 5, ~50 GB/s pinned) is faster, so the cap binds. Each run
# reports the rate the tier actually obtained (`vram_link.gb_s` of bench --json: bytes over the copy
# stream's time for them, the holds included) beside the cap and the real link's measured rate.
#
# llama.cpp (-ncmoe N: the routed experts of N layers stay in host memory and run on the CPU) does not
# move experts over the link to decode, so its decode figures here are its real ones on a consumer link
# too: the emulation applies to Red Lite alone. Its prompt may differ: for batches of >= 32 rows ggml
# offloads matmuls of host-resident weights to the GPU (unless they sit in a repacked CPU buffer), copying
# the CPU layers' experts over the link per micro-batch at this machine's real link speed, not at
# LINK_GBS; llama.cpp's prompt figure here is then an upper bound of what it does on a PCIe 4 board (the
# table says so beside the prompt ratios). LINK_GBS=0 runs
# the sweep with no cap (the tier on this machine's own link). N is the smallest count whose GPU-side
# experts fit the budget after the dense weights (which both engines keep on the GPU):
# N = NL - floor((B - dense) / per_layer_experts); LCPP_NCMOE=q35 uses bench/gpu_lcpp.sh q35's count
# (NL - floor(B / per_layer_experts), ignoring the dense part: llama.cpp then gets more VRAM than B).
# With LCPP_FIT=1 (default) N then grows by one while llama.cpp's measured VRAM peak exceeds Red Lite's
# at that budget (at most 4 more): the ratio is against the best count that uses no more of the GPU.
# Both engines' whole-process VRAM use is sampled (nvidia-smi) during each run and printed beside the
# rates, so "same budget" is checked, not assumed.
#
# Environment: RL (redlite binary, default build/cuda/redlite), M (default /tmp/cf2.gguf, written by
# `redlite synth --preset cf2 --routing calibrated` if missing), BUDGETS (GiB, default "4 8 12 16 24"),
# LINK_GBS (default 25), RL_ARGS (more redlite bench options, e.g. "--cache-mib 16384" to bound the
# host tier under a memory limit), REPS (default 1), N_DECODE (default 64), LB (llama-bench, default
# /tmp/lcpp/build/bin/llama-bench as bench/gpu_lcpp.sh setup builds it; skipped when absent or LCPP=0),
# NT (llama.cpp threads, default nproc), LIMIT_S (no new run after this many seconds, default 270), RL_RUN=0
# (keep the Red Lite runs already in $OUT: llama.cpp only).
# Output under $OUT (default /tmp/link_out): link_sweep.md (the table), link_sweep.jsonl (a line per
# run), the logs and JSON of every run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
[ -f bench/env_cudabin.sh ] && source bench/env_cudabin.sh
OUT=${OUT:-/tmp/link_out}; mkdir -p "$OUT"
RL=${RL:-build/cuda/redlite}
M=${M:-/tmp/cf2.gguf}
BUDGETS=${BUDGETS:-"4 8 12 16 24"}
LINK_GBS=${LINK_GBS:-25}
REPS=${REPS:-1}
N_DECODE=${N_DECODE:-64}
RL_ARGS=${RL_ARGS:-}
LB=${LB:-/tmp/lcpp/build/bin/llama-bench}
LCPP=${LCPP:-1}
LCPP_NCMOE=${LCPP_NCMOE:-dense}
NT=${NT:-$(nproc)}
LIMIT_S=${LIMIT_S:-270}
JL=$OUT/link_sweep.jsonl; : >"$JL"
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/link_sweep.log"; }
left() { [ $(($(date +%s) - T0)) -lt "$LIMIT_S" ]; }

[ -x "$RL" ] || { echo "vram_link_sweep: no redlite binary at $RL (build with make CUDA=1, or set RL=)" >&2; exit 2; }
if [ ! -s "$M" ]; then
    say "writing $M (redlite synth --preset cf2 --routing calibrated)"
    "$RL" synth --preset cf2 --routing calibrated -o "$M" --quiet || { say "synth failed"; exit 1; }
    T0=$(date +%s) # the time limit counts the measurements only
fi
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader \
    | tee -a "$OUT/link_sweep.log"
read -r NL PER DENSE < <("$RL" info "$M" --json | python3 -c "
import json, sys; d = json.load(sys.stdin); e = d['experts']
print(len(e), max(x['n_expert'] * x['expert_bytes'] for x in e), d['bytes']['dense'])")
say "$M: $NL layers, $PER routed-expert bytes per layer at most, $DENSE dense bytes; link cap $LINK_GBS GB/s"
have_lcpp=0
[ "$LCPP" != 0 ] && [ -x "$LB" ] && have_lcpp=1
[ $have_lcpp = 1 ] || say "llama.cpp: not run (LCPP=$LCPP, $LB $( [ -x "$LB" ] && echo present || echo absent))"

# vram_run TAG CMD...: CMD with the GPU's memory in use sampled every 0.25 s; the peak (MiB, less what was
# in use before) into $OUT/vram_TAG.peak
vram_run() {
    local tag=$1; shift
    local base
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; sleep 0.25; done) \
        >"$OUT/vram_$tag.txt" &
    local mon=$!
    "$@"
    local rc=$?
    kill $mon 2>/dev/null; wait $mon 2>/dev/null
    echo $(( $(sort -n "$OUT/vram_$tag.txt" | tail -1) - base )) >"$OUT/vram_$tag.peak"
    return $rc
}

for G in $BUDGETS; do
    B=$((G * 1024))
    if [ "${RL_RUN:-1}" = 0 ]; then
        say "redlite $G GiB: kept from an earlier run in $OUT (RL_RUN=0)"
    elif left; then
        say "redlite --vram-mib $B, RL_VRAM_LINK_GBS=$LINK_GBS"
        RL_VRAM_LINK_GBS=$LINK_GBS vram_run "rl_$G" timeout 200 "$RL" bench -m "$M" --backend cuda --vram-mib $B \
            --n-decode "$N_DECODE" --warmup 4 --prompt 2048 --reps "$REPS" --json --verbose $RL_ARGS \
            >"$OUT/rl_$G.json" 2>"$OUT/rl_$G.err"
        say "redlite $G GiB rc=$? $(grep 'host->device copies' "$OUT/rl_$G.err" | tail -1)"
    else
        say "time: skipped redlite $G GiB"
    fi
    [ $have_lcpp = 1 ] || continue
    if [ "$LCPP_NCMOE" = q35 ]; then N=$(python3 -c "print(max(0, $NL - ($B << 20) // $PER))")
    else N=$(python3 -c "print(min($NL, max(0, $NL - max(0, ($B << 20) - $DENSE) // $PER)))"); fi
    # that count ignores llama.cpp's own buffers (it used 0.7-1.9 GiB more than Red Lite in sessions 28 / 36):
    # with LCPP_FIT=1 (default) one more CPU layer while its measured peak exceeds Red Lite's at this
    # budget, at most 4 more (each try kept as lcpp_G_ncmoeN.json)
    for _ in 0 1 2 3 4; do
        if ! left; then say "time: skipped llama.cpp $G GiB (-ncmoe $N)"; break; fi
        echo "$N" >"$OUT/lcpp_$G.ncmoe"
        say "llama.cpp -ncmoe $N ($((NL - N)) layers' experts on the GPU), $NT threads"
        vram_run "lcpp_$G" timeout 200 "$LB" -m "$M" -ngl 99 -fa 1 -ncmoe "$N" -t "$NT" -p 2048 -n "$N_DECODE" \
            -ub 2048 -r "$REPS" -o json >"$OUT/lcpp_$G.json" 2>"$OUT/lcpp_$G.err"
        say "llama.cpp $G GiB rc=$? peak $(cat "$OUT/vram_lcpp_$G.peak") MiB (Red Lite $(cat "$OUT/vram_rl_$G.peak" 2>/dev/null))"
        cp "$OUT/lcpp_$G.json" "$OUT/lcpp_${G}_ncmoe$N.json" 2>/dev/null
        if [ "${LCPP_FIT:-1}" = 1 ] && [ -s "$OUT/vram_rl_$G.peak" ] && [ "$N" -lt "$NL" ] &&
            [ "$(cat "$OUT/vram_lcpp_$G.peak")" -gt "$(cat "$OUT/vram_rl_$G.peak")" ]; then
            N=$((N + 1))
        else
            break
        fi
    done
done

# shellcheck disable=SC2086 # the budgets, one argument each
python3 - "$OUT" "$LINK_GBS" $BUDGETS <<'EOF' | tee "$OUT/link_sweep.md"
import json, math, os, sys
out, cap, budgets = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
nan = float("nan")
def load(p):
    try: return json.load(open(p))
    except Exception: return None
def peak(tag):
    try: return int(open(f"{out}/vram_{tag}.peak").read())
    except Exception: return None
def rl(g):
    j = load(f"{out}/rl_{g}.json")
    if not j: return {}
    link = j.get("vram_link") or {}
    return {"tg": j["decode"][0]["tok_s"] if j.get("decode") else nan,
            "pp": j["prompt"][0]["tok_s"] if j.get("prompt") else nan,
            "gbs": link.get("gb_s"), "raw": link.get("raw_gb_s"), "gib": (link.get("bytes") or 0) / 2**30}
def lc(g):
    rows = load(f"{out}/lcpp_{g}.json")
    if not rows: return {}
    tg = [r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0]
    pp = [r["avg_ts"] for r in rows if r.get("n_gen", 0) == 0]
    try: n = int(open(f"{out}/lcpp_{g}.ncmoe").read())
    except Exception: n = None
    return {"tg": max(tg) if tg else nan, "pp": max(pp) if pp else nan, "ncmoe": n}
f = lambda v, d=1: "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"
print(f"# VRAM tier at an emulated {cap:g} GB/s host->device link (RL_VRAM_LINK_GBS), {os.path.basename(os.environ.get('M', 'cf2'))}\n")
print("| budget | Red Lite decode tok/s | prompt 2048 tok/s | link GB/s obtained (real link) | GiB copied | VRAM peak MiB "
      "| llama.cpp -ncmoe | decode | prompt 2048 | VRAM peak MiB | decode x | prompt x |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
jl = open(f"{out}/link_sweep.jsonl", "a")
for g in budgets:
    a, b = rl(g), lc(g)
    r = lambda x, y: x / y if x and y and not math.isnan(x) and not math.isnan(y) else None
    print(f"| {g} GiB | {f(a.get('tg'))} | {f(a.get('pp'))} | {f(a.get('gbs'), 2)} ({f(a.get('raw'))}) | "
          f"{f(a.get('gib'), 2)} | {peak('rl_' + g) or '—'} | {b.get('ncmoe', '—')} | {f(b.get('tg'))} | {f(b.get('pp'))} | "
          f"{peak('lcpp_' + g) or '—'} | {f(r(a.get('tg'), b.get('tg')), 2)} | {f(r(a.get('pp'), b.get('pp')), 2)} |")
    jl.write(json.dumps({"budget_gib": int(g), "link_cap_gbs": cap, "redlite": a, "llama_cpp": b,
                         "vram_peak_mib": {"redlite": peak("rl_" + g), "llama_cpp": peak("lcpp_" + g)}}) + "\n")
print(f"\nRed Lite's host->device copies held to {cap:g} GB/s (link GB/s obtained: bytes over the copy stream's "
      "time, holds included; in brackets the machine's real link). llama.cpp's decode does not use the link for "
      "experts (its figures are its real ones at any link); its prompt may copy the CPU layers' experts to the GPU "
      "(ggml's offload of large batches) at this machine's real link speed, so its prompt figure is an upper bound "
      "for a PCIe 4 board. VRAM peak: "
      "whole process, nvidia-smi, less what was in use before.")
EOF
say "done ($OUT)"
