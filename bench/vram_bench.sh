#!/usr/bin/env bash
# bench/vram_bench.sh — the VRAM expert tier on one GPU in one call (issue 16, item 5), <= 9 minutes
# on the H200 host (16 cores, 125 GiB RAM, 64 GB disk). Device tool: carry .cudabin (and .lcc when a
# CUDA llama-bench is there); the redlite binary is built here unless $B already runs.
#
#   1. CF2 (redlite synth --preset cf2 --routing calibrated, 19.3 GB) at --vram-mib 4096, 8192, 16384,
#      each with --vram-miss copy (exact) and auto (CPU-computed misses by the cost model), host tier
#      --cache-mib full, --vram-pin auto: decode 3 x 64 (after 4 warm-up tokens) and prompt 2048 (one
#      chunk), medians; from the tier's counters: hits, demand fills/token, PCIe MiB/token, CPU-computed
#      experts/token, what was page-locked.
#   2. If .lcc/llama-bench exists (a CUDA llama-bench): llama.cpp on the same file, -fa 1 -ngl 99
#      -ncmoe N, for each budget the N from LCPP_N (budget:N pairs) whose VRAM use (nvidia-smi, the
#      peak while it runs) is reported next to the budget; interleaved with ours (ours 4 GiB, theirs,
#      ours 8 GiB, theirs, ...), same file. Its configuration is the best a user would pick:
#      LCPP_ARGS (default `-t 16 -lm none -ub 512,2048`): 16 threads, **no mmap** (`-lm none`) — llama.cpp keeps
#      CPU-side weights in page-locked (CUDA host) buffers only without mmap (with mmap they stay in
#      the file's pageable pages, and prompt ingestion copies every CPU expert over PCIe at pageable
#      speed), and the better of the two micro-batches per row (prompt 512 and 2048, decode 64).
#      LCPP_CHECK (ncmoe:load-mode pairs, default "48:none 30:mmap") adds prompt-512/decode runs that
#      compare with anchors.md's figures (-ncmoe 48: 29.4 tok/s; -ncmoe 30: 50.6, prompt 512 1,063)
#      and show what mmap costs.
#   3. CF2 deleted, the Q4_K_M preset written (45 GB, --routing calibrated) and run at each budget of
#      Q4_BUDGETS (default 4096 8192 16384) with the whole file as the host tier (--cache-mib full,
#      page-locked) against llama.cpp at LCPP_Q4_N, then at --vram-mib 16384 with a RAM tier below the
#      file size (--cache-mib $Q4_CACHE_MIB, default 32768, page cache dropped first): decode 2 x 32,
#      prompt 2048 twice.
# Output: $OUT/vram_bench.md (one table), $OUT/vram_bench.jsonl (one line per run), $OUT/records.jsonl (every
# measurement of both tools as a benchmark record, bench/records.py: machine, date, commit, file, threads,
# budget, rate; llama.cpp's with vram_used_mib: what bench/charts.py --vram draws), vram_bench.log, and
# every run's full output in $OUT/logs.tar.xz (the device tool returns at most 8 files).
# Knobs: LIMIT (seconds), CF2, Q4, Q4_CACHE_MIB, LCPP_N, LCPP_Q4_N, LCPP_ARGS, LCPP_CHECK, AUTO_BUDGETS,
# Q4_BUDGETS, B, SKIP_CF2=1, SKIP_Q4=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rl_vram_out}
LOGS=${LOGS:-/tmp/rl_vram_logs}
mkdir -p "$OUT" "$LOGS"
T0=$(date +%s)
LIMIT=${LIMIT:-520}                       # seconds: stop starting runs after this
CF2=${CF2:-/tmp/cf2.gguf}
Q4=${Q4:-/tmp/q4km.gguf}
Q4_CACHE_MIB=${Q4_CACHE_MIB:-32768}
LCPP_N=${LCPP_N:-"4096:43 8192:30 16384:10"} # budget MiB : -ncmoe (experts of N layers on the CPU)
LCPP_Q4_N=${LCPP_Q4_N:-"4096:46 8192:41 16384:33"} # the same for the Q4_K_M file (~0.9 GiB of experts a layer)
LCPP_ARGS=${LCPP_ARGS:-"-t 16 -lm none -ub 512,2048"}
LCPP_CHECK=${LCPP_CHECK:-"48:none 30:mmap"}
Q4_BUDGETS=${Q4_BUDGETS:-"4096 8192 16384"}
B=${B:-build/cuda/redlite}
AUTO_BUDGETS=${AUTO_BUDGETS:-"4096 8192 16384"} # budgets also run with --vram-miss auto
MD=$OUT/vram_bench.md
JL=$OUT/vram_bench.jsonl
: >"$JL"
: >"$OUT/records.jsonl"
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/vram_bench.log"; }
left() { [ $(($(date +%s) - T0)) -lt "$LIMIT" ]; }
export LD_LIBRARY_PATH="$PWD/.cudabin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

say "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$OUT/vram_bench.log"
# the records' machine: the GPU's name and the host's CPU, the same for both tools
MACHINE="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs"
echo "cpus $(nproc); $(free -g | awk '/Mem:/{print $2" GiB RAM"}'); $(df -h /tmp | tail -1)" | tee -a "$OUT/vram_bench.log"
if ! "$B" --version >/dev/null 2>&1; then
    export C_INCLUDE_PATH="$PWD/.cudabin/include" LIBRARY_PATH="$PWD/.cudabin/lib"
    say "building $B"
    make -j"$(nproc)" CUDA=1 BUILD=build/cuda build/cuda/redlite >"$LOGS/build.log" 2>&1 || { say "build failed"; tail -20 "$LOGS/build.log"; exit 1; }
    B=build/cuda/redlite
fi

# One redlite bench run: NAME FILE then bench options. Appends a JSON line: the bench's medians and
# the tier's counters (parsed from its --verbose lines).
ours() {
    local name=$1 file=$2
    shift 2
    left || { say "time: skipped $name"; return; }
    say "redlite $name: $*"
    "$B" bench -m "$file" --backend cuda --json --verbose "$@" >"$LOGS/$name.json" 2>"$LOGS/$name.err"
    local rc=$?
    python3 - "$name" "$LOGS/$name.json" "$LOGS/$name.err" "$rc" "$*" >>"$JL" <<'EOF'
import json, re, sys
name, js, err, rc, args = sys.argv[1:6]
r = {"run": name, "engine": "redlite", "args": args, "rc": int(rc)}
try:
    b = json.load(open(js))
    r["decode_tok_s"] = b["decode"][0]["tok_s"] if b.get("decode") else None
    r["prompt_tok_s"] = b["prompt"][0]["tok_s"] if b.get("prompt") else None
    r["peak_rss_gib"] = round(b.get("peak_rss_bytes", 0) / 2**30, 2)
except Exception as e:
    r["error"] = "no JSON: %s" % e
t = open(err, errors="replace").read()
def num(pat):
    m = re.search(pat, t)
    return float(m.group(1)) if m else None
r["plan"] = (re.search(r"vram tier: (\d.*slots per layer[^\n]*)", t) or [None, None])[1]
r["hits_pct"] = num(r"lookups: ([\d.]+)% hits")
r["fills_per_token"] = num(r"demand fills ([\d.]+)/token")
r["pcie_mib_per_token"] = num(r"host->device ([\d.]+) MiB/token")
r["cpu_experts_per_token"] = num(r"CPU-computed experts ([\d.]+)/token")
r["pin"] = (re.search(r"vram tier: host tier --vram-pin \w+: (?!not resolved)([^\n]*)", t) or [None, None])[1]
if rc != "0":
    r["error"] = (t.strip().splitlines() or ["?"])[-1]
print(json.dumps(r))
EOF
    tail -n 1 "$JL" | tee -a "$OUT/vram_bench.log"
    [ "$rc" = 0 ] && python3 bench/records.py redlite "$LOGS/$name.json" --set machine="$MACHINE" \
        --set file="$(basename "$file")" --set tag="$name" >>"$OUT/records.jsonl"
}

# llama.cpp on the same file: NAME FILE NCMOE BUDGET_MIB [llama-bench options replacing LCPP_ARGS and the
# prompt sizes], the peak VRAM sampled every 0.2 s. Each row keeps the best micro-batch.
theirs() {
    local name=$1 file=$2 n=$3 budget=$4 LB=.lcc/llama-bench
    local args=${5:-"$LCPP_ARGS -p 512,2048"}
    [ -x "$LB" ] || return
    left || { say "time: skipped $name"; return; }
    say "llama.cpp $name: -ncmoe $n $args"
    local base
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; sleep 0.2; done) >"$LOGS/$name.vram" &
    local mon=$!
    # shellcheck disable=SC2086 # $args is a list of options
    timeout 300 "$LB" -m "$file" -fa 1 -ngl 99 -ncmoe "$n" $args -n 64 -r 3 -o json >"$LOGS/$name.json" 2>"$LOGS/$name.err"
    local rc=$?
    kill "$mon" 2>/dev/null
    wait "$mon" 2>/dev/null
    python3 - "$name" "$LOGS/$name.json" "$LOGS/$name.vram" "$rc" "$n" "$budget" "$base" "$args" >>"$JL" <<'EOF'
import json, sys
name, js, vr, rc, n, budget, base, args = sys.argv[1:9]
r = {"run": name, "engine": "llama.cpp", "ncmoe": int(n), "budget_mib": int(budget), "rc": int(rc), "args": args}
try:
    for t in json.load(open(js)):   # the best micro-batch per measurement
        key = ("prompt%d_tok_s" % t["n_prompt"]) if t.get("n_prompt", 0) > 0 else "decode_tok_s"
        if t.get("avg_ts") and t["avg_ts"] > (r.get(key) or 0):
            r[key], r[key.replace("tok_s", "ub")] = t["avg_ts"], t.get("n_ubatch")
    r["prompt_tok_s"] = r.get("prompt2048_tok_s")
except Exception as e:
    r["error"] = "no JSON: %s" % e
v = [int(x) for x in open(vr).read().split() if x.isdigit()]
r["vram_peak_mib"] = max(v) - int(base) if v else None
r["fits_budget"] = r["vram_peak_mib"] is not None and r["vram_peak_mib"] <= int(budget)
print(json.dumps(r))
EOF
    tail -n 1 "$JL" | tee -a "$OUT/vram_bench.log"
    local used
    used=$(tail -n 1 "$JL" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("vram_peak_mib") or "null")')
    [ "$rc" = 0 ] && [ "$budget" != 0 ] && python3 bench/records.py llama-bench "$LOGS/$name.json" --set machine="$MACHINE" \
        --set file="$(basename "$file")" --set tag="$name (-ncmoe $n)" --set budget.vram_mib="$budget" \
        --set vram_used_mib="$used" >>"$OUT/records.jsonl"
}

# 1 + 2: CF2, ours and theirs interleaved per budget; then the baseline checks against anchors.md
if [ "${SKIP_CF2:-0}" != 1 ]; then
    if [ ! -s "$CF2" ]; then
        say "synth CF2"
        timeout 200 "$B" synth --preset cf2 --routing calibrated -o "$CF2" --quiet >"$LOGS/synth_cf2.log" 2>&1 || say "synth CF2 failed"
    fi
    ls -la "$CF2" | tee -a "$OUT/vram_bench.log"
    [ -x .lcc/llama-bench ] && say "llama.cpp: .lcc/llama-bench present" || say "llama.cpp: no .lcc/llama-bench, our runs only"
    RUN="--cache-mib full --n-decode 64 --reps 3 --warmup 4 --prompt 2048 --batch 2048"
    for v in 4096 8192 16384; do
        ours "cf2-$v-copy" "$CF2" --vram-mib $v --vram-miss copy $RUN
        for p in $LCPP_N; do [ "${p%%:*}" = "$v" ] && theirs "lcpp-cf2-$v" "$CF2" "${p##*:}" "$v"; done
        case " $AUTO_BUDGETS " in *" $v "*) ours "cf2-$v-auto" "$CF2" --vram-mib $v --vram-miss auto $RUN ;; esac
    done
    for c in $LCPP_CHECK; do
        theirs "lcpp-cf2-check-ncmoe${c%%:*}-${c##*:}" "$CF2" "${c%%:*}" 0 "-t 16 -lm ${c##*:} -p 512"
    done
fi

# 3: Q4_K_M (45 GB): the budgets with the whole file as host tier, against llama.cpp; then 16 GiB with a
# RAM tier below the file size
if left && [ "${SKIP_Q4:-0}" != 1 ]; then
    rm -f "$CF2"
    if [ ! -s "$Q4" ]; then
        say "synth Q4_K_M"
        timeout 240 "$B" synth --preset q4_k_m --routing calibrated -o "$Q4" --quiet >"$LOGS/synth_q4.log" 2>&1 || say "synth Q4_K_M failed"
    fi
    ls -la "$Q4" | tee -a "$OUT/vram_bench.log"
    for v in $Q4_BUDGETS; do
        ours "q4km-$v-full" "$Q4" --vram-mib $v --cache-mib full --n-decode 32 --reps 2 --warmup 4 --prompt 2048 --batch 2048
        for p in $LCPP_Q4_N; do [ "${p%%:*}" = "$v" ] && theirs "lcpp-q4km-$v" "$Q4" "${p##*:}" "$v" "$LCPP_ARGS -p 2048"; done
    done
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null # the file sits in the page cache: a RAM tier below its size must read it
    ours "q4km-16384-ram$Q4_CACHE_MIB" "$Q4" --vram-mib 16384 --cache-mib "$Q4_CACHE_MIB" --n-decode 32 --reps 2 --warmup 4 --prompt 2048 --batch 2048
    [ "${KEEP_Q4:-0}" = 1 ] || rm -f "$Q4"
fi

# the table
python3 - "$JL" >"$MD" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
f = lambda v, d=1: "—" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
print("# VRAM tier bench (bench/vram_bench.sh)\n")
print("| run | engine | decode tok/s | prompt 2048 tok/s | prompt 512 tok/s | hits % | fills/token | PCIe MiB/token | CPU experts/token | VRAM (llama.cpp) | notes |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    fit = "" if not r.get("budget_mib") else (", fits " if r.get("fits_budget") else ", OVER ") + str(r["budget_mib"])
    vram = "" if r["engine"] != "llama.cpp" else f"{f(r.get('vram_peak_mib'))} MiB (-ncmoe {r['ncmoe']}{fit})"
    note = r.get("error") or r.get("pin") or r.get("args") or ""
    if r["engine"] == "llama.cpp":
        note += " (best ub: decode %s, pp2048 %s, pp512 %s)" % (r.get("decode_ub"), r.get("prompt2048_ub"), r.get("prompt512_ub"))
    print(f"| {r['run']} | {r['engine']} | {f(r.get('decode_tok_s'))} | {f(r.get('prompt_tok_s'))} | {f(r.get('prompt512_tok_s'))} | {f(r.get('hits_pct'))} | "
          f"{f(r.get('fills_per_token'), 2)} | {f(r.get('pcie_mib_per_token'), 2)} | {f(r.get('cpu_experts_per_token'), 2)} | {vram} | {note} |")
EOF
cat "$MD" | tee -a "$OUT/vram_bench.log"
tar -cJf "$OUT/logs.tar.xz" -C "$LOGS" . 2>/dev/null
say "== done"
