#!/usr/bin/env bash
# bench/cpu_host.sh — Red Lite vs llama.cpp on the CPU of a many-core host (the 16-core H200 host), one
# call of at most ~6 minutes: synthesise the mixes, then per mix and thread count decode and prompt
# 512 with both tools, interleaved; STREAM (bench/stream.c) at the same thread counts.
#
#   bench/cpu_host.sh [OUTDIR]          OUTDIR defaults to $OUT (the device tool's folder) or /tmp/rl_cpu_host
#
# env:
#   LLB       llama-bench binary (default .llb/llama-bench: static, CPU only, GGML_NATIVE=ON, built and
#             carried by the caller; missing -> Red Lite alone is measured, and the table says so)
#   REDLITE   redlite binary (default: build/redlite if it runs here, else build/cuda/redlite, else make;
#             .cudabin/{lib,include} are used for the libraries when present, as bench/cuda_check.sh does)
#   MIXES     presets (default "q4_k_m cf2 iq2_xxs"); LAYERS geometry subset (default 4; see below)
#   THREADS   thread counts (default "16 8 4 2": fastest first, so a cut-off run keeps the most)
#   NGEN      decode tokens per run (default 16); NPROMPT prompt length (default 512)
#   BUDGET    seconds after which no new run starts (default 320); FILES where the GGUFs go (/tmp/rl_cpu_files)
#
# Files: `redlite synth --preset MIX --geometry layers=$LAYERS --routing calibrated` with the real
# Qwen3 vocabulary (tests/fixtures/qwen3-vocab.gguf). A subset of the 48 layers keeps the files small
# enough to write, load and page-cache, and the 2-thread prompts short enough, for one call (q4_k_m:
# 4.1 GiB at 4 layers vs 45 GiB): the per-layer cost ratio is what carries over to the full model (4
# layers = 3 DeltaNet + 1 attention, the model's repeating unit), but the output head (151,936 x 2,048;
# Q6_K / Q5_K) and the embedding are per token, not per layer, so their share of a decode token is ~12x
# larger here than in the 48-layer file (q4_k_m, 4 layers: the head is ~60 % of the bytes a token reads;
# prompt ingestion is not affected: the head runs on the last row only).
# A llama-bench that fails on a mix (e.g. a crash of an AMX path) leaves that mix's llama.cpp cells empty.
# Routing is `calibrated` (real-model-like expert reuse); every expert is resident (page cache for
# llama.cpp, the mapping/cache for Red Lite): these are compute/bandwidth numbers, not cache numbers.
#
# First, if build/tests/test_kern was carried (or built), it runs once: the kernel tests at every level the
# host's CPU supports (the AVX-512 paths cannot run on the 2-core development VM).
# Both tools: random token ids, decode from an empty context, prompt NPROMPT in one batch of 512 rows;
# llama.cpp with its defaults (repacking on, as users run it), 1 repetition each after a warm-up; the
# redlite run right after the llama-bench run of the same mix (interleaved per mix; the host is not
# shared, so one round is the measurement). Writes OUTDIR/cpu_host.md (table + ratios), cpu_host.jsonl
# (raw rows), profile.txt (per-stage decode profile of the first mix at the most threads), stream.txt
# and cpu_host.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-/tmp/rl_cpu_host}}
LLB=${LLB:-.llb/llama-bench}
MIXES=${MIXES:-q4_k_m cf2 iq2_xxs}
LAYERS=${LAYERS:-4}
THREADS=${THREADS:-16 8 4 2}
NGEN=${NGEN:-16}
NPROMPT=${NPROMPT:-512}
BUDGET=${BUDGET:-320}
FILES=${FILES:-/tmp/rl_cpu_files}
case "${1:-}" in -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0;; esac
mkdir -p "$OUTDIR" "$FILES"
LOG="$OUTDIR/cpu_host.log" RAW="$OUTDIR/cpu_host.jsonl"
: >"$RAW"
T0=$(date +%s)
say() { echo "[cpu_host +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG" >&2; }
left() { [ $(( $(date +%s) - T0 )) -lt "$BUDGET" ]; }

# ---- binaries ------------------------------------------------------------------------------------
# the shared libraries (utf8proc, cjson, microhttpd) and their headers, where carried as for the CUDA
# scripts (.cudabin/lib, .cudabin/include)
if [ -d .cudabin ]; then
    export C_INCLUDE_PATH=$PWD/.cudabin/include LIBRARY_PATH=$PWD/.cudabin/lib LD_LIBRARY_PATH=$PWD/.cudabin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ -z "${REDLITE:-}" ]; then
    for c in build/redlite build/cuda/redlite; do
        if [ -x "$c" ] && "$c" --help >/dev/null 2>&1; then REDLITE=$c; break; fi
    done
fi
if [ -z "${REDLITE:-}" ]; then
    say "no runnable redlite binary: make -j$(nproc)"
    make -j"$(nproc)" build/redlite build/tests/test_kern >>"$LOG" 2>&1 && REDLITE=build/redlite || { say "build failed (see $LOG)"; exit 1; }
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

# ---- kernel check: every level this CPU has (AVX-512 included, which the 2-core dev VM lacks) -------
for c in build/tests/test_kern build/cuda/tests/test_kern; do
    if [ -x "$c" ]; then
        say "kernels: $(timeout 60 "$c" 2>&1 | tail -1) ($c; bit-exactness vs the scalar reference)"
        break
    fi
done

# ---- STREAM at each thread count ------------------------------------------------------------------
cc -std=c11 -O2 -D_GNU_SOURCE -pthread -o "$FILES/stream" bench/stream.c 2>>"$LOG" || say "stream: compile failed"
MAXT=$(echo $THREADS | tr ' ' '\n' | sort -n | tail -1)
if [ -x "$FILES/stream" ]; then
    timeout 40 "$FILES/stream" --mib 256 --threads "$MAXT" --reps 2 >"$OUTDIR/stream.txt" 2>&1
    say "stream: $(grep '^read' "$OUTDIR/stream.txt" | awk "{print \$3, \$4}" | tr '\n' ' ')"
fi

# ---- files ---------------------------------------------------------------------------------------
for m in $MIXES; do
    f="$FILES/$m-l$LAYERS.gguf"
    [ -s "$f" ] && continue
    say "synth $m, layers=$LAYERS"
    "$REDLITE" synth --preset "$m" --vocab tests/fixtures/qwen3-vocab.gguf --geometry "layers=$LAYERS" \
        --routing calibrated --quiet -o "$f" >>"$LOG" 2>&1 || { say "synth $m failed"; rm -f "$f"; }
done

# ---- runs ----------------------------------------------------------------------------------------
for m in $MIXES; do
    f="$FILES/$m-l$LAYERS.gguf"
    [ -s "$f" ] || continue
    if [ "$HAVE_LLB" = 1 ] && left; then
        say "llama-bench $m, threads $THREADS"
        # -r 1 after llama-bench's own warm-up run; all thread counts in one process (loaded once)
        timeout $(( BUDGET + 60 - ($(date +%s) - T0) )) "$LLB" -m "$f" -t "$(echo $THREADS | tr ' ' ',')" \
            -p "$NPROMPT" -n "$NGEN" -r 1 -o jsonl 2>>"$LOG" |
            python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"): continue
    r = json.loads(line)
    kind = "decode" if r["n_gen"] > 0 else "prompt"
    print(json.dumps({"tool": "llama.cpp", "mix": sys.argv[1], "threads": r["n_threads"], "kind": kind,
                      "tok_s": r["avg_ts"], "cpu": r.get("cpu_info", ""), "build": r.get("build_commit", "")}))
' "$m" >>"$RAW"
    fi
    for t in $THREADS; do
        left || { say "budget reached: skipping redlite $m t=$t"; continue; }
        say "redlite bench $m -t $t"
        timeout 120 "$REDLITE" bench -m "$f" -t "$t" --reps 1 --warmup 2 --n-decode "$NGEN" --prompt "$NPROMPT" \
            --json 2>>"$LOG" |
            python3 -c '
import json, sys
j = json.load(sys.stdin)
for d in j["decode"]:
    print(json.dumps({"tool": "redlite", "mix": sys.argv[1], "threads": int(sys.argv[2]), "kind": "decode",
                      "tok_s": d["tok_s"], "gb_s": d.get("gb_s")}))
for p in j["prompt"]:
    print(json.dumps({"tool": "redlite", "mix": sys.argv[1], "threads": int(sys.argv[2]), "kind": "prompt",
                      "tok_s": p["tok_s"]}))
' "$m" "$t" >>"$RAW"
    done
done

# ---- per-stage profile of a decode token at the most threads (what bounds it: GB/s per stage) -------
m1=$(echo $MIXES | cut -d' ' -f1)
if [ -s "$FILES/$m1-l$LAYERS.gguf" ] && left; then
    say "profile: redlite bench $m1 -t $MAXT --profile"
    timeout 60 "$REDLITE" bench -m "$FILES/$m1-l$LAYERS.gguf" -t "$MAXT" --reps 1 --n-decode "$NGEN" --prompt 0         --profile >"$OUTDIR/profile.txt" 2>>"$LOG"
fi

# ---- table ---------------------------------------------------------------------------------------
python3 - "$RAW" "$OUTDIR/stream.txt" "$LAYERS" "$NGEN" "$NPROMPT" >"$OUTDIR/cpu_host.md" <<'EOF'
import json, sys
raw, streamf, layers, ngen, npr = sys.argv[1:6]
rows = [json.loads(l) for l in open(raw) if l.strip()]
stream = {}
try:
    for l in open(streamf):
        p = l.split()
        if p[:2] == ["read", "threads"]:
            stream[int(p[2].rstrip(":"))] = float(p[3])
except OSError:
    pass
get = lambda tool, mix, t, kind: next((r for r in rows if r["tool"] == tool and r["mix"] == mix and r["threads"] == t and r["kind"] == kind), None)
mixes = list(dict.fromkeys(r["mix"] for r in rows))
threads = sorted({r["threads"] for r in rows})
cpu = next((r.get("cpu") for r in rows if r.get("cpu")), "?")
print(f"# Red Lite vs llama.cpp, CPU, many-core host (layers={layers} subsets, tg{ngen}, pp{npr})\n")
print(f"CPU: {cpu}. STREAM read (bench/stream.c, wall GB/s): " + ", ".join(f"{t} threads {v:.1f}" for t, v in sorted(stream.items())) + "\n")
print("| mix | threads | decode llama.cpp | decode Red Lite | ratio | Red Lite GB/s (% STREAM) | pp llama.cpp | pp Red Lite | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
f = lambda r: f"{r['tok_s']:.2f}" if r else "-"
def ratio(a, b):
    return f"**{b['tok_s'] / a['tok_s']:.2f}x**" if a and b and a["tok_s"] > 0 else "-"
for m in mixes:
    for t in threads:
        ld, rd, lp, rp = (get(tool, m, t, k) for tool, k in [("llama.cpp", "decode"), ("redlite", "decode"), ("llama.cpp", "prompt"), ("redlite", "prompt")])
        if not any([ld, rd, lp, rp]):
            continue
        bw = ""
        if rd and rd.get("gb_s"):
            st = stream.get(t)
            bw = f"{rd['gb_s']:.1f}" + (f" ({100 * rd['gb_s'] / st:.0f} %)" if st else "")
        print(f"| {m} | {t} | {f(ld)} | {f(rd)} | {ratio(ld, rd)} | {bw} | {f(lp)} | {f(rp)} | {ratio(lp, rp)} |")
EOF
cat "$OUTDIR/cpu_host.md"
say "done"
