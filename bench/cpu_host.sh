#!/usr/bin/env bash
# bench/cpu_host.sh — Red Lite vs llama.cpp on the CPU of a many-core host (the 16-core H200 host), one
# call of at most ~9 minutes: synthesise the mixes, then per mix and thread count decode (at depth 0 and
# 4096) and prompt 512 / 2048 with both tools, interleaved, in rounds (medians); STREAM
# (bench/stream.c) at the same thread counts; the per-stage prompt profile at the most threads.
#
#   bench/cpu_host.sh [OUTDIR]          OUTDIR defaults to $OUT (the device tool's folder) or /tmp/rl_cpu_host
#
# env:
#   LLB       llama-bench binary (default .llb/llama-bench, else ../.llb/llama-bench: static, CPU only,
#             GGML_NATIVE=ON, built and carried by the caller; missing -> Red Lite alone is measured).
#             Build it on the host itself (bench/lcpp_baseline.sh does, in parallel with its CUDA build):
#             one cross-built on the AMD dev VM with explicit AVX-512 / AMX flags died with SIGILL there
#             (2026-12-02, bench/results/2026-12-02-cpu-host-h200-threads.md)
#   REDLITE   redlite binary (default: build/redlite if it runs here, else build/cuda/redlite, else make;
#             .cudabin/{lib,include} (here or in ..) are used for the libraries, as bench/cuda_check.sh does)
#   MIXES     presets (default "q4_k_m cf2 iq2_xxs"); LAYERS geometry subset (default 12; see below)
#   THREADS   main thread counts (default "16 2"), run in every round; XTHREADS extra ones (default
#             "8 4"), one round of the cheap cells (tg at depth 0, pp512) when the budget allows
#   ROUNDS    rounds of the main cells (default 3; medians over the rounds that ran). Round 1 runs every
#             cell (tg16 at depth 0 and DEPTH, pp512, pp2048; depth and pp2048 at 2 threads last, as the
#             budget allows); later rounds repeat tg16 at depth 0, pp512 and (16 threads) pp2048
#   NGEN      decode tokens per run (default 16); DEPTH context for the second decode (default 4096)
#   P1 P2     the two prompt lengths (default 512 and 2048)
#   BUDGET    seconds after which no new run starts (default 470: with the per-run caps the call ends
#             by ~9 minutes); FILES where the GGUFs go (/tmp/rl_cpu_files)
#   MM512     the AVX-512 batched core: auto (default: if test_kern passes with both cores, a pp512 of
#             the first mix at the most threads with each picks the faster for every run), 0 or 1
#
# Files: `redlite synth --preset MIX --geometry layers=$LAYERS --routing calibrated` with the real
# Qwen3 vocabulary (tests/fixtures/qwen3-vocab.gguf). A subset of the 48 layers keeps the files small
# enough to write, load and page-cache, and the 2-thread prompts short enough, for one call. The
# per-layer cost ratio is what carries over to the full model (every 4 layers = 3 DeltaNet + 1
# attention, the model's repeating unit), but the output head (151,936 x 2,048; Q6_K / Q5_K) is per
# token: at 4 layers it was ~60 % of the bytes a q4_k_m decode token reads (the ratios then compare
# mostly the head kernels), at 12 layers ~32 % (q4_k_m 11.6 GiB, cf2 4.7, iq2_xxs 5.1), at 48
# layers ~12 %. LAYERS=12 is the default: 3x the work of 4 layers per token, which the budget below
# was sized for (prompt ingestion is not distorted either way: the head runs on the last row only).
# A llama-bench that fails on a mix (e.g. a crash of an AMX path) leaves that mix's llama.cpp cells empty.
# Routing is `calibrated` (real-model-like expert reuse); every expert is resident (page cache for
# llama.cpp, the mapping/cache for Red Lite): these are compute/bandwidth numbers, not cache numbers.
#
# First, if build/tests/test_kern was carried (or built), it runs once: the kernel tests at every level the
# host's CPU supports (the AVX-512 paths cannot run on the 2-core development VM).
# Both tools: random token ids; decode tg$NGEN from an empty context and after DEPTH tokens; prompts of
# 512 and 2048 tokens (Red Lite in batches of 512 rows, llama-bench with its defaults: batch 2048,
# ubatch 512); llama.cpp with its defaults (repacking on, as users run it), 1 repetition after its
# warm-up; per (mix, threads) the redlite run right after the llama-bench run (interleaved). Writes
# OUTDIR/cpu_host.md (table: medians over rounds, ratios, decode GB/s as % of STREAM), cpu_host.jsonl
# (raw rows), profile.txt (redlite bench --profile of the first mix at the most threads: decode stages,
# prompt stages, and the prompt's products/threads table), stream.txt and cpu_host.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-/tmp/rl_cpu_host}}
LLB=${LLB:-.llb/llama-bench}
[ ! -x "$LLB" ] && [ -x ../.llb/llama-bench ] && LLB=../.llb/llama-bench
MIXES=${MIXES:-q4_k_m cf2 iq2_xxs}
LAYERS=${LAYERS:-12}
THREADS=${THREADS:-16 2}
XTHREADS=${XTHREADS:-8 4}
ROUNDS=${ROUNDS:-3}
NGEN=${NGEN:-16}
DEPTH=${DEPTH:-4096}
P1=${P1:-512}
P2=${P2:-2048}
BUDGET=${BUDGET:-470}
MM512=${MM512:-auto}
FILES=${FILES:-/tmp/rl_cpu_files}
case "${1:-}" in -h|--help) sed -n '2,49p' "$0" | sed 's/^# \{0,1\}//'; exit 0;; esac
mkdir -p "$OUTDIR" "$FILES"
LOG="$OUTDIR/cpu_host.log" RAW="$OUTDIR/cpu_host.jsonl"
: >"$RAW"
T0=$(date +%s)
say() { echo "[cpu_host +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG" >&2; }
left() { [ $(( $(date +%s) - T0 )) -lt "$BUDGET" ]; }
# seconds a run may take: what is left of the budget plus 40 s of grace (so the call ends by BUDGET + ~60 s)
cap() { local c=$(( BUDGET + 40 - ($(date +%s) - T0) )); [ "$c" -gt 5 ] && echo "$c" || echo 5; }

# ---- binaries ------------------------------------------------------------------------------------
# the shared libraries (utf8proc, cjson, microhttpd) and their headers, where carried as for the CUDA
# scripts (.cudabin/lib, .cudabin/include)
# (in this tree, or one level up: a stage folder inside the repository root the device tool ships)
. bench/env_cudabin.sh # (the script has cd-ed to the tree root above)
if [ -z "${REDLITE:-}" ]; then
    for c in build/redlite build/cuda/redlite; do
        if [ -x "$c" ] && "$c" --help >/dev/null 2>&1; then REDLITE=$c; break; fi
    done
fi
if [ -z "${REDLITE:-}" ]; then
    say "no runnable redlite binary: make -j$(nproc)"
    make -j"$(nproc)" build/redlite build/tests/test_kern >>"$LOG" 2>&1 && REDLITE=build/redlite || { say "build failed (see $LOG)"; exit 1; }
fi
if [ ! -x build/tests/test_kern ] && [ "$REDLITE" = build/redlite ]; then
    make -j"$(nproc)" build/tests/test_kern >>"$LOG" 2>&1 || say "test_kern: build failed"
fi
HAVE_LLB=1
if [ ! -x "$LLB" ] || ! "$LLB" --help >/dev/null 2>&1; then
    say "llama-bench not runnable at $LLB: measuring Red Lite only"
    HAVE_LLB=0
fi
{
    echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_vnni|avx512vnni|avx512_bf16|amx_int8|avx_vnni)$' | tr '\n' ' ')"
    echo "redlite: $REDLITE ($(git rev-parse --short HEAD 2>/dev/null || echo '?')); llama-bench: $LLB (present: $HAVE_LLB)"
} | tee -a "$LOG" >&2

# ---- kernel check: every level this CPU has (AVX-512 included, which the 2-core dev VM lacks), both
# batched cores at the AVX-512 level --------------------------------------------------------------
KERN_OK=0
for c in build/tests/test_kern build/cuda/tests/test_kern; do
    if [ -x "$c" ]; then
        timeout 90 "$c" >"$OUTDIR/test_kern.log" 2>&1 && KERN_OK=1
        say "kernels: $(tail -1 "$OUTDIR/test_kern.log") ($c; bit-exactness vs the scalar reference, both batched cores)"
        grep -m3 FAIL "$OUTDIR/test_kern.log" >&2
        break
    fi
done
if grep -q '^flags.*avx512_vnni' /proc/cpuinfo && [ "$KERN_OK" = 1 ]; then HAVE512=1; else HAVE512=0; fi
[ "$MM512" = auto ] && [ "$HAVE512" = 0 ] && MM512=0

# ---- STREAM at each thread count ------------------------------------------------------------------
cc -std=c11 -O2 -D_GNU_SOURCE -pthread -o "$FILES/stream" bench/stream.c 2>>"$LOG" || say "stream: compile failed"
MAXT=$(echo $THREADS $XTHREADS | tr ' ' '\n' | sort -n | tail -1)
if [ -x "$FILES/stream" ]; then
    timeout 40 "$FILES/stream" --mib 256 --threads "$MAXT" --reps 2 >"$OUTDIR/stream.txt" 2>&1
    say "stream: $(grep '^read' "$OUTDIR/stream.txt" | awk "{print \$3, \$4}" | tr '\n' ' ')"
fi

# ---- files ---------------------------------------------------------------------------------------
# the real vocabulary (copy tests/fixtures/qwen3-vocab.gguf into a stage: *.gguf are not staged by
# default); without it synth's byte-level vocabulary of the same size (151,936: the same head)
VOCAB=()
if [ -s tests/fixtures/qwen3-vocab.gguf ]; then VOCAB=(--vocab tests/fixtures/qwen3-vocab.gguf)
else say "tests/fixtures/qwen3-vocab.gguf missing: synthetic byte vocabulary (same size, same head)"; fi
for m in $MIXES; do
    f="$FILES/$m-l$LAYERS.gguf"
    [ -s "$f" ] && continue
    say "synth $m, layers=$LAYERS"
    "$REDLITE" synth --preset "$m" "${VOCAB[@]}" --geometry "layers=$LAYERS" \
        --routing calibrated --quiet -o "$f" >>"$LOG" 2>&1 || { say "synth $m failed"; rm -f "$f"; }
    say "synth $m: $(du -h "$f" 2>/dev/null | cut -f1)"
done

# ---- the 512-bit batched core: pick it only if it passed test_kern and is faster here ---------------
m1=$(echo $MIXES | cut -d' ' -f1)
f1="$FILES/$m1-l$LAYERS.gguf"
pp512() { # env..., prints redlite's pp512 tok/s at MAXT threads
    env "$@" timeout "$(cap)" "$REDLITE" bench -m "$f1" -t "$MAXT" --reps 1 --warmup 1 --n-decode 1 --prompt "$P1" --json 2>>"$LOG" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt"][0]["tok_s"])' 2>/dev/null || echo 0
}
if [ "$MM512" = auto ] && [ -s "$f1" ]; then
    a=$(pp512 RL_KERN_MM=256); b=$(pp512 RL_KERN_MM=512) # (pp512: --prompt P1)
    MM512=$(python3 -c "print(1 if float('$b') > 1.02 * float('$a') else 0)")
    say "batched core: pp512 $m1 t=$MAXT 256-bit $a tok/s, 512-bit $b tok/s -> MM512=$MM512"
    echo "{\"tool\": \"redlite-core\", \"mix\": \"$m1\", \"threads\": $MAXT, \"mm256\": $a, \"mm512\": $b}" >>"$RAW"
fi
if [ "$MM512" = 1 ]; then export RL_KERN_MM=512; else export RL_KERN_MM=256; fi

# ---- runs ----------------------------------------------------------------------------------------
# llama.cpp: one llama-bench process per (mix, threads, part); parts: "pp" = -p PROMPTS -n NGEN (depth
# 0), "depth" = -p 0 -n NGEN -d DEPTH. Red Lite: one redlite bench process with the same cells.
llb() { # mix threads round prompts depth ngen
    local m=$1 t=$2 r=$3 p=$4 d=$5 n=${6:-$NGEN} f="$FILES/$1-l$LAYERS.gguf"
    [ "$HAVE_LLB" = 1 ] || return
    local extra=()
    [ "$d" -gt 0 ] && extra=(-d "$d")
    timeout "$(cap)" "$LLB" -m "$f" -t "$t" -p "$p" -n "$n" "${extra[@]}" -r 1 -o jsonl 2>>"$LOG" |
        python3 -c '
import json, sys
m, t, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"): continue
    x = json.loads(line)
    dec = x["n_gen"] > 0
    print(json.dumps({"tool": "llama.cpp", "mix": m, "threads": t, "round": r, "kind": "decode" if dec else "prompt",
                      "n": x.get("n_depth", 0) if dec else x["n_prompt"], "tok_s": x["avg_ts"],
                      "cpu": x.get("cpu_info", ""), "build": x.get("build_commit", "")}))
' "$m" "$t" "$r" >>"$RAW"
}
rlb() { # mix threads round prompts depth
    local m=$1 t=$2 r=$3 p=$4 d=$5 f="$FILES/$1-l$LAYERS.gguf"
    timeout "$(cap)" "$REDLITE" bench -m "$f" -t "$t" --reps 1 --warmup 2 --n-decode "$NGEN" --prompt "$p" \
        --depth "$d" --json 2>>"$LOG" |
        python3 -c '
import json, sys
m, t, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
j = json.load(sys.stdin)
for d in j["decode"]:
    print(json.dumps({"tool": "redlite", "mix": m, "threads": t, "round": r, "kind": "decode", "n": d["depth"],
                      "tok_s": d["tok_s"], "gb_s": d.get("gb_s"), "mm": sys.argv[4]}))
for p in j["prompt"]:
    print(json.dumps({"tool": "redlite", "mix": m, "threads": t, "round": r, "kind": "prompt", "n": p["n_tokens"],
                      "tok_s": p["tok_s"], "mm": sys.argv[4]}))
' "$m" "$t" "$r" "$RL_KERN_MM" >>"$RAW"
}
have() { [ -s "$FILES/$1-l$LAYERS.gguf" ]; }
cheap() { # mix threads round [prompts]: tg at depth 0 and pp P1 (and P2 if asked), both tools
    have "$1" || return
    left || { say "budget reached: skipping $1 t=$2 round $3"; return; }
    say "$1 t=$2 round $3: tg$NGEN @0, pp ${4:-$P1}"
    llb "$1" "$2" "$3" "${4:-$P1}" 0
    left && rlb "$1" "$2" "$3" "${4:-$P1}" 0
}
dear() { # mix threads round: pp P2 and tg at depth DEPTH, both tools (the table keeps the first row per round)
    have "$1" || return
    left || { say "budget reached: skipping $1 t=$2 pp $P2 / depth $DEPTH"; return; }
    say "$1 t=$2 round $3: pp $P2, tg$NGEN @$DEPTH"
    llb "$1" "$2" "$3" "$P2" 0 0
    left && llb "$1" "$2" "$3" 0 "$DEPTH"
    left && rlb "$1" "$2" "$3" "$P2" "$DEPTH"
}
TMAIN=$(echo $THREADS | tr ' ' '\n' | sort -rn | head -1)
TREST=$(echo $THREADS | tr ' ' '\n' | sort -rn | tail -n +2)
# 1. round 1, cheap cells, every main thread count; 2. the prompt profile; 3. the expensive cells at the
# most threads; 4. rounds 2.. at the most threads; 5. the expensive cells at the other thread counts;
# 6. rounds 2.. there; 7. the extra thread counts
for t in $THREADS; do for m in $MIXES; do cheap "$m" "$t" 1; done; done
if [ -s "$f1" ] && left; then
    say "profile: redlite bench $m1 -t $TMAIN --prompt "$P1" --profile (RL_KERN_MM=$RL_KERN_MM)"
    timeout "$(cap)" "$REDLITE" bench -m "$f1" -t "$TMAIN" --reps 1 --n-decode "$NGEN" --prompt "$P1" --profile \
        >"$OUTDIR/profile.txt" 2>>"$LOG"
fi
for m in $MIXES; do dear "$m" "$TMAIN" 1; done
for r in $(seq 2 "$ROUNDS"); do for m in $MIXES; do cheap "$m" "$TMAIN" "$r" "$P1,$P2"; done; done
for t in $TREST; do for m in $MIXES; do dear "$m" "$t" 1; done; done
for r in $(seq 2 "$ROUNDS"); do for t in $TREST; do for m in $MIXES; do cheap "$m" "$t" "$r"; done; done; done
for t in $XTHREADS; do for m in $MIXES; do cheap "$m" "$t" 1; done; done

# ---- table ---------------------------------------------------------------------------------------
python3 - "$RAW" "$OUTDIR/stream.txt" "$LAYERS" "$NGEN" "$DEPTH" "$P1" "$P2" >"$OUTDIR/cpu_host.md" <<'PYEOF'
import json, statistics, sys
raw, streamf, layers, ngen, depth, p1, p2 = sys.argv[1:8]
rows = [json.loads(l) for l in open(raw) if l.strip()]
core = next((r for r in rows if r["tool"] == "redlite-core"), None)
seen, keep = set(), []
for r in rows: # the first row of each (tool, mix, threads, kind, n, round): a later call of the same round repeats a cell
    if r["tool"] not in ("llama.cpp", "redlite"):  # e.g. the batched-core record: no kind/n
        continue
    k = (r["tool"], r["mix"], r["threads"], r["kind"], r["n"], r.get("round"))
    if k not in seen:
        seen.add(k)
        keep.append(r)
rows = keep
stream = {}
try:
    for l in open(streamf):
        p = l.split()
        if p[:2] == ["read", "threads"]:
            stream[int(p[2].rstrip(":"))] = float(p[3])
except OSError:
    pass
def cell(tool, mix, t, kind, n):
    v = [r for r in rows if r["tool"] == tool and r["mix"] == mix and r["threads"] == t and r["kind"] == kind and r["n"] == n]
    if not v:
        return None
    return {"tok_s": statistics.median(r["tok_s"] for r in v), "k": len(v),
            "gb_s": statistics.median(r["gb_s"] for r in v) if all(r.get("gb_s") for r in v) else None}
mixes = list(dict.fromkeys(r["mix"] for r in rows))
threads = sorted({r["threads"] for r in rows}, reverse=True)
cpu = next((r.get("cpu") for r in rows if r.get("cpu")), "?")
mm = next((r.get("mm") for r in rows if r.get("mm")), "?")
print(f"# Red Lite vs llama.cpp, CPU, many-core host (layers={layers} subsets, tg{ngen} at depth 0 and {depth}, pp{p1}, pp{p2})\n")
print(f"CPU: {cpu}. STREAM read (bench/stream.c, wall GB/s): " + ", ".join(f"{t} threads {v:.1f}" for t, v in sorted(stream.items())) + "\n")
if core:
    print(f"Batched core: pp512 {core['mix']} at {core['threads']} threads: 256-bit {core['mm256']:.1f} tok/s, 512-bit {core['mm512']:.1f} tok/s; runs below with RL_KERN_MM={mm}.\n")
print("Cells: llama.cpp / Red Lite tok/s, medians over rounds (k = rounds), **ratio** = Red Lite / llama.cpp.\n")
cols = [("decode", 0, f"tg{ngen} @0"), ("decode", int(depth), f"tg{ngen} @{depth}"), ("prompt", int(p1), f"pp{p1}"), ("prompt", int(p2), f"pp{p2}")]
print("| mix | threads | " + " | ".join(c[2] for c in cols) + " | Red Lite decode GB/s (% STREAM) |")
print("|---|---:|" + "---:|" * len(cols) + "---:|")
for m in mixes:
    for t in threads:
        out, any_ = [], False
        for kind, n, _ in cols:
            a, b = cell("llama.cpp", m, t, kind, n), cell("redlite", m, t, kind, n)
            any_ |= bool(a or b)
            fa = f"{a['tok_s']:.2f}" if a else "-"
            fb = f"{b['tok_s']:.2f}" if b else "-"
            ra = f" **{b['tok_s'] / a['tok_s']:.2f}x**" if a and b and a["tok_s"] > 0 else ""
            k = max(a["k"] if a else 0, b["k"] if b else 0)
            out.append(f"{fa} / {fb}{ra}" + (f" (k={k})" if k > 1 else ""))
        if not any_:
            continue
        d0 = cell("redlite", m, t, "decode", 0)
        bw = ""
        if d0 and d0["gb_s"]:
            st = stream.get(t)
            bw = f"{d0['gb_s']:.1f}" + (f" ({100 * d0['gb_s'] / st:.0f} %)" if st else "")
        print(f"| {m} | {t} | " + " | ".join(out) + f" | {bw} |")
PYEOF
cat "$OUTDIR/cpu_host.md"
say "done"
