#!/usr/bin/env bash
# bench/cuda_check.sh — what one call on the GPU machine does: take the carried binaries (or build
# them there), run the GPU tests and the CUDA benchmarks, and write every log under $OUT.
#
#   bench/cuda_check.sh [STAGES]      STAGES: comma list of
#     build     use build/cuda binaries carried from the dev machine if they run, else make CUDA=1
#     ops       build/cuda/tests/test_cuda_ops      (every kernel vs the CPU reference)
#     engine    build/cuda/tests/test_cuda_engine   (exactness contract on the tiny fixture)
#     kquant    test_cuda_engine MODEL on two small synthetic K-quant models (the int8 K-quant path: contract,
#               40-row verify == steps, vs the CPU backend), with the default tiles, with 1 token tile
#               per warp, with the float path (RL_CUDA_MMQ=0), with the unstaged prefill tiles (RL_CUDA_MMQ_TC=0) and
#               with the staged prefill attention (RL_CUDA_ATTN_PF=staged, the previous default) and with
#               the FP32 attention kernels under the f16 cache (RL_CUDA_ATTN_TC=0)
#     iq        the IQ types' integer path (RL_CUDA_MMQ=2): test_cuda_engine on the tiny CF2-typed model,
#               then prompt 2048 / decode A/B against RL_CUDA_MMQ=1 on $CF2 (needs `synth` first)
#     pfab      prompt 2048 / 8192 (PFAB_PROMPTS, e.g. 2048,32768) on $CF2: the prefill options (PFAB_SETS; default:
#               unstaged prefill attention RL_CUDA_ATTN_PF=unstaged, the defaults, and the staged prefill attention RL_CUDA_ATTN_PF=staged, the previous default)
#     fixtures  tests/cuda/test_cuda_fixtures.py     (greedy vs transformers, logits vs CPU, routes)
#     long      the 16K-position CPU-vs-CUDA check   (RL_CUDA_LONG=1)
#     spec      verify-check --backend cuda on the fixtures and $SPEC_MODEL (default: the default model) (K-row verifies
#               and rollbacks == single steps, bit for bit), and greedy generate with --spec lookup
#               == --spec none on CUDA (identical stdout) on a repetitive code prompt
#     specunit  build/cuda/tests/test_cuda_verify (verify sizes 1..20 == steps, rollback at every row from
#               device snapshot slots, slot reuse, the MTP head == single calls and ~ the CPU) and
#               test_cuda_spec (tests/c/test_spec.c's identity and stop tests on CUDA)
#     specid    generate on $SPEC_MODEL with every --spec mode (none lookup mtp auto) x greedy and seeded
#               sampling x 3 prompts (a repeated source file, prose, an agent turn): stdout identical to none
#     specbench bench/spec_bench.py --backend cuda on $SPEC_MODEL (rewrite / agent / prose: tok/s, acceptance)
#     vcost     redlite synth --preset cf2 --mtp -> $CF2M, then verify-check --timing (K-row verify vs one
#               step at full size) and generate --spec none|mtp on it
#     tune      on $CF2M: the MTP head's call times (test_cuda_verify MODEL), and verify-check --timing under
#               each small-batch tuning knob (RL_CUDA_SMALL_TT, RL_CUDA_SMALL_MOE, no graphs)
#     default   redlite bench --backend cuda on models/default.gguf (the trained default model)
#     synth     redlite synth --preset cf2 -> $CF2 (default /tmp/cf2.gguf)
#     bench     redlite bench --backend cuda on $CF2 (decode, prompt 512/2048)
#     depth     redlite bench --backend cuda --depth 32768 (decode slope at long context)
#     vram      the VRAM expert tier: build/cuda/tests/test_cuda_vram (tiny fixtures, a few slots per layer:
#               bit-identical to full residency, verify, injected fill failure), then on $CF2 (needs
#               `synth` first): dump --greedy 64 logits at --vram-mib $VRAM_CHECK_MIB (default 4096) == full
#               residency (cmp; page-locked by default, also with --vram-pin off), and redlite bench at
#               --vram-mib 4096, 8192, 16384 (--verbose: plan and counters), at 8192 with --vram-pin off and
#               with --vram-miss auto (the full comparison with llama.cpp: bench/vram_bench.sh)
#     decodeab  decode A/B on $CF2 (synth it first; `synth` with SYNTH_ROUTING=calibrated for the issue-15
#               figures): redlite bench --json, decode 128 x 3 after 8 warm-up, under RL_CUDA_MM_STAGE /
#               RL_CUDA_FUSE settings (the old kernels first: "before"); tok/s, ms/token
#               and the decode graph's node count per setting into the summary, the JSON lines in decodeab.jsonl
#     profab    Nsight Compute per-kernel time of 2 decode tokens (graphs off) on $CF2, before (RL_CUDA_MM_STAGE=0
#               RL_CUDA_FUSE=0) and after (defaults): prof_before.txt, prof_after.txt (bench/cuda_profile.sh)
#   default: build,ops,engine,kquant,fixtures,synth,bench,long   (the VRAM tier alone: build,synth,vram)
# Carry (device tool): build/cuda/redlite, build/cuda/tests, .cudabin (shared libs + headers for a
# build there) and, for bench/cuda_compare.sh, .lcp.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rl_cuda_out}
LOGS=${LOGS:-$OUT} # full logs (the device tool returns at most 8 files from $OUT)
mkdir -p "$OUT" "$LOGS"
STAGES=${1:-build,ops,engine,kquant,fixtures,synth,bench,long}
CF2=${CF2:-/tmp/cf2.gguf}
S=$OUT/summary.txt
T0=$(date +%s)
has() { [[ ",$STAGES," == *",$1,"* ]]; }
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$S"; }
run() { # run NAME TIMEOUT CMD...: log to $OUT/NAME.log, tail into the summary
    local name=$1 to=$2
    shift 2
    say "--- $name: $*"
    timeout "$to" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$LOGS/$name.log" | tee -a "$S"
    say "--- $name: exit $rc"
    return $rc
}

say "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo ?) ($(git status --porcelain 2>/dev/null | wc -l) files differ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | tee -a "$S"
echo "cpus $(nproc); $(free -g | awk '/Mem:/{print $2" GiB RAM"}'); nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*')" | tee -a "$S"

export LD_LIBRARY_PATH="$PWD/.cudabin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B=build/cuda
if has build; then
    if [ -x $B/redlite ] && $B/redlite --version >/dev/null 2>&1 && [ -x $B/tests/test_cuda_ops ]; then
        say "using the carried binaries ($($B/redlite --version))"
    else
        say "carried binaries missing or not runnable here: building"
        export C_INCLUDE_PATH="$PWD/.cudabin/include" LIBRARY_PATH="$PWD/.cudabin/lib"
        run build 500 make -j"$(nproc)" CUDA=1 BUILD=$B $B/redlite $B/tests/test_cuda_ops $B/tests/test_cuda_engine \
            $B/tests/test_cuda_vram $B/tests/test_cuda_verify $B/tests/test_cuda_spec
    fi
fi
has ops && run ops 120 $B/tests/test_cuda_ops
# the non-default decode kernels (staging of every type; the fused tails at the engine level): same bits
has ops && RL_CUDA_MM_STAGE=1 run ops-stage-all 120 $B/tests/test_cuda_ops
# the decode GEMVs with the next step's weights in flight, and with row sets for short rows (both written
# 2026-12-02, not yet run): same bits
has ops && RL_CUDA_MMQ_ST=0 run ops-mmq-st0 120 $B/tests/test_cuda_ops # direct weight loads (the default stages decode rows in shared memory)
has ops && RL_CUDA_MMQ_SM=0 run ops-mmq-sm0 120 $B/tests/test_cuda_ops # dense one-token launches one block per row block (the default streams them)
has ops && RL_CUDA_PDL=0 run ops-pdl0 120 $B/tests/test_cuda_ops # launches without PDL (the default launches with it)
has specunit && run test_cuda_verify 120 $B/tests/test_cuda_verify
has specunit && run test_cuda_spec 300 $B/tests/test_cuda_spec
has engine && run engine 120 $B/tests/test_cuda_engine
has engine && RL_CUDA_FUSE=all RL_CUDA_MM_STAGE=1 run engine-fused 120 $B/tests/test_cuda_engine
has engine && RL_CUDA_ATTN_DB=0 RL_CUDA_PDL=0 run engine-db0-pdl0 120 $B/tests/test_cuda_engine # one staged K/V slice, no PDL
if has kquant; then # the integer K-quant path end to end: two small synthetic K-quant models, NR 2 and 1
    V=tests/fixtures/qwen3-vocab.gguf
    $B/redlite synth --preset tiny --vocab $V -o /tmp/t_cf2.gguf --quiet
    $B/redlite synth --preset q4_k_m --vocab $V -o /tmp/t_q4.gguf --quiet --geometry \
        hidden=256,layers=4,heads=4,kv_heads=2,head_dim=64,rope_dims=16,experts=16,top_k=4,expert_ff=256,shared_ff=256,inner=256,state=64,groups=2,dt_rank=4
    for m in t_cf2 t_q4; do
        run kquant-$m 120 $B/tests/test_cuda_engine /tmp/$m.gguf
        RL_CUDA_MMQ_SM=0 run kquant-$m-sm0 120 $B/tests/test_cuda_engine /tmp/$m.gguf # dense decode GEMVs not streamed
        RL_CUDA_DN_SPLIT=0 run kquant-$m-dn1 120 $B/tests/test_cuda_engine /tmp/$m.gguf # the DeltaNet step in one block per head
        RL_CUDA_MMQ_NT=1 run kquant-$m-nt1 120 $B/tests/test_cuda_engine /tmp/$m.gguf
        RL_CUDA_MMQ=0 run kquant-$m-float 120 $B/tests/test_cuda_engine /tmp/$m.gguf # the float path's contract
        RL_CUDA_MMQ_TC=0 run kquant-$m-tc0 120 $B/tests/test_cuda_engine /tmp/$m.gguf # unstaged prefill tiles
        RL_CUDA_ATTN_PF=staged run kquant-$m-attn-staged 120 $B/tests/test_cuda_engine /tmp/$m.gguf # the previous prefill attention
        RL_CUDA_ATTN_TC=0 run kquant-$m-attn-fp32 120 $B/tests/test_cuda_engine /tmp/$m.gguf # FP32 attention with the f16 cache
    done
fi
if has fixtures; then
    RL_CUDA_BIN=$PWD/$B/redlite run fixtures 240 python3 -m pytest -q -s -p no:cacheprovider \
        tests/cuda/test_cuda_fixtures.py -k "not long"
fi
if has synth && [ ! -s "$CF2" ]; then
    run synth 200 $B/redlite synth --preset cf2 ${SYNTH_ROUTING:+--routing $SYNTH_ROUTING} -o "$CF2" --quiet
    ls -la "$CF2" | tee -a "$S"
fi
if has iq; then # the integer path of the IQ types (RL_CUDA_MMQ=2): the tiny CF2-typed model (IQ1_M/IQ2_XS
    # experts), then prompt/decode A/B on $CF2 (synth it first) against the float IQ path
    V=tests/fixtures/qwen3-vocab.gguf
    [ -s /tmp/t_cf2.gguf ] || $B/redlite synth --preset tiny --vocab $V -o /tmp/t_cf2.gguf --quiet
    RL_CUDA_MMQ=2 run iq-t_cf2 120 $B/tests/test_cuda_engine /tmp/t_cf2.gguf
    if [ -s "$CF2" ]; then
        for r in 1 2; do
            for m in 1 2; do
                timeout 150 env RL_CUDA_MMQ=$m $B/redlite bench -m "$CF2" --backend cuda --n-decode 64 --reps 3 \
                    --warmup 8 --prompt 2048 --batch 2048 --json >"$LOGS/iq_$m.json" 2>"$LOGS/iq_$m.err"
                say "iq A/B RL_CUDA_MMQ=$m round $r: $(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("prompt", d["prompt"][0]["tok_s"], "decode", d["decode"][0]["tok_s"])' "$LOGS/iq_$m.json" 2>&1 | tail -1)"
            done
        done
    fi
fi
if has pfab && [ -s "$CF2" ]; then # prompt A/B of the prefill options (same bits each)
    for r in 1 2; do
        for v in ${PFAB_SETS:-"RL_CUDA_ATTN_PF=unstaged" \
            "RL_CUDA_DEFAULTS=1" "RL_CUDA_ATTN_PF=staged"}; do
            v=${v//+/ }
            timeout 200 env $v $B/redlite bench -m "$CF2" --backend cuda --n-decode 8 --reps 3 --warmup 2 \
                --prompt "${PFAB_PROMPTS:-2048,8192}" --batch 2048 --json >"$LOGS/pfab.json" 2>"$LOGS/pfab.err"
            say "pfab [$v] round $r: $(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print([(p["n_tokens"], round(p["tok_s"], 1)) for p in d["prompt"]])' "$LOGS/pfab.json" 2>&1 | tail -1)"
        done
    done
fi
if has bench; then
    RL_CUDA_VERBOSE=1 run bench 240 $B/redlite bench -m "$CF2" --backend cuda --n-decode 128 --reps 5 --warmup 8 \
        --prompt 512,2048 --batch 2048
fi
if has decodeab; then
    for v in ${DECODEAB_SETS:-"RL_CUDA_MM_STAGE=0 RL_CUDA_FUSE=0" "RL_CUDA_FUSE=0" "RL_CUDA_MM_STAGE=0" \
        "RL_CUDA_DEFAULTS=1" "RL_CUDA_MMQ_ST=0" "RL_CUDA_MMQ_SM=0" "RL_CUDA_DN_SPLIT=0" "RL_CUDA_MMQ_SM=0+RL_CUDA_DN_SPLIT=0"} ${DECODEAB_EXTRA:-}; do
        v=${v//+/ } # DECODEAB_EXTRA: settings joined by '+'
        timeout 120 env $v $B/redlite bench -m "$CF2" --backend cuda --n-decode 128 --reps 3 --warmup 8 \
            --prompt "${DECODEAB_PROMPT:-0}" --batch 2048 --json >"$LOGS/ab.json" 2>"$LOGS/ab.err"
        say "decodeab [$v]: $(python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); dec = d["decode"][0]; g = d.get("decode_graph", {})
pr = " ".join("prompt %d: %.1f tok/s" % (p["n_tokens"], p["tok_s"]) for p in d.get("prompt", []))
print("decode %.1f tok/s (%.3f ms/token, runs %s), graph %s nodes / %s kernels %s" % (dec["tok_s"], dec["ms_per_token"],
      " ".join("%.1f" % r for r in dec["runs_tok_s"]), g.get("nodes", "?"), g.get("kernels", "?"), pr))' "$LOGS/ab.json" 2>&1 | tail -1)"
        { printf '{"env": "%s", "result": ' "$v"; tr -d '\n' <"$LOGS/ab.json"; printf '}\n'; } >>"$OUT/decodeab.jsonl"
    done
fi
if has profab; then
    for side in before after; do
        if [ $side = before ]; then e="RL_CUDA_MM_STAGE=0 RL_CUDA_FUSE=0"; else e="RL_CUDA_DEFAULTS=1"; fi
        say "--- profab $side ($e)"
        mkdir -p /tmp/prof_$side
        env $e OUT=/tmp/prof_$side LOGS=/tmp/prof_$side PROF_PREFILL=0 CF2="$CF2" timeout 200 bash bench/cuda_profile.sh \
            >/tmp/prof_$side.log 2>&1
        cp /tmp/prof_$side/prof.txt "$OUT/prof_$side.txt" 2>/dev/null || tail -5 /tmp/prof_$side.log | tee -a "$S"
        head -12 "$OUT/prof_$side.txt" 2>/dev/null | tee -a "$S"
    done
fi
if has depth; then
    RL_CUDA_VERBOSE=1 run depth 300 $B/redlite bench -m "$CF2" --backend cuda --n-decode 64 --reps 3 --warmup 4 \
        --depth 32768 --prompt 0 --batch 2048
fi
if has spec; then
    for m in tests/fixtures/tiny-a.gguf tests/fixtures/tiny-b.gguf ${SPEC_MODEL:-models/default.gguf}; do
        run "verify-$(basename "$m" .gguf)" 120 $B/redlite verify-check -m "$m" --backend cuda -n 200 --draft 8
    done
    P=$LOGS/spec_prompt.txt
    { sed -n 1,60p tools/cache_sim.py; printf '\n# The same file again, unchanged:\n'; sed -n 1,20p tools/cache_sim.py; } >"$P"
    for mode in none lookup; do
        run "gen-$mode" 120 $B/redlite generate -m "${SPEC_MODEL:-models/default.gguf}" --backend cuda --raw -f "$P" -n 200 \
            --spec $mode --stats
    done
    $B/redlite generate -m "${SPEC_MODEL:-models/default.gguf}" --backend cuda --raw -f "$P" -n 200 --spec none >"$LOGS/g0.txt" 2>/dev/null
    $B/redlite generate -m "${SPEC_MODEL:-models/default.gguf}" --backend cuda --raw -f "$P" -n 200 --spec lookup >"$LOGS/g1.txt" 2>/dev/null
    if cmp -s "$LOGS/g0.txt" "$LOGS/g1.txt" && [ -s "$LOGS/g0.txt" ]; then say "spec identity (CUDA, lookup vs none): identical"
    else say "spec identity (CUDA, lookup vs none): DIFFERENT or empty"; fi
fi
SM=${SPEC_MODEL:-models/default.gguf}
if has specid; then
    P1=$LOGS/p_rewrite.txt P2=$LOGS/p_prose.txt P3=$LOGS/p_agent.txt
    { sed -n 1,60p tools/cache_sim.py; printf '\n# The same file again, unchanged:\n'; sed -n 1,40p tools/cache_sim.py; } >"$P1"
    printf '<|im_start|>user\nWrite a short essay about lighthouses and the people who kept them.<|im_end|>\n<|im_start|>assistant\n' >"$P2"
    { printf '<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\nFix the bug in this function:\n'
      sed -n 1,40p src/base/json.c; printf '<|im_end|>\n<|im_start|>assistant\n'; } >"$P3"
    nid=0 nbad=0
    for p in "$P1" "$P2" "$P3"; do
        for samp in "--temp 0" "--temp 0.8 --seed 7 --top-k 40"; do
            $B/redlite generate -m "$SM" --backend cuda --raw -f "$p" -n 96 $samp --spec none >"$LOGS/id0.txt" 2>/dev/null
            for mode in lookup mtp auto; do
                $B/redlite generate -m "$SM" --backend cuda --raw -f "$p" -n 96 $samp --spec $mode --draft-max 8 \
                    --stats >"$LOGS/id1.txt" 2>"$LOGS/id1.err"
                nid=$((nid + 1))
                if [ -s "$LOGS/id0.txt" ] && cmp -s "$LOGS/id0.txt" "$LOGS/id1.txt"; then r=identical; else r=DIFFERENT; nbad=$((nbad + 1)); fi
                say "specid $(basename "$p") [$samp] $mode: $r; $(grep -o 'speculation.*verifies' "$LOGS/id1.err" | head -1); $(grep -o 'decode [^|]*tok/s' "$LOGS/id1.err" | head -1)"
            done
        done
    done
    say "specid: $nid runs, $nbad differ from --spec none"
fi
if has specbench; then
    run specbench 400 python3 bench/spec_bench.py --bin $B/redlite --backend cuda -m "$SM" -n "${SPEC_N:-128}" \
        --rounds "${SPEC_ROUNDS:-2}" \
        --out "$OUT/spec_bench.md"
fi
if has vcost; then
    CF2M=${CF2M:-/tmp/cf2m.gguf}
    [ -s "$CF2M" ] || run synth_mtp 200 $B/redlite synth --preset cf2 --mtp -o "$CF2M" --quiet
    run vcost 300 $B/redlite verify-check -m "$CF2M" --backend cuda -n 48 --draft 8 --timing 10 --json
    cp "$LOGS/vcost.log" "$OUT/vcost.json" 2>/dev/null
    for mode in none mtp; do
        run "cf2-gen-$mode" 120 $B/redlite generate -m "$CF2M" --backend cuda --raw -p "The history of the lighthouse" \
            -n 64 --spec $mode --json
    done
fi
if has tune; then # the MTP call cost, and the verify cost under the small-batch tuning knobs (same bits)
    CF2M=${CF2M:-/tmp/cf2m.gguf}
    [ -s "$CF2M" ] || run synth_mtp 200 $B/redlite synth --preset cf2 --mtp -o "$CF2M" --quiet
    run mtp-cost 120 $B/tests/test_cuda_verify "$CF2M"
    for v in "" RL_CUDA_SMALL_TT=4 RL_CUDA_SMALL_MOE=4 RL_CUDA_GRAPHS=0; do
        name=tune-${v:-default}
        timeout 60 env $v $B/redlite verify-check -m "$CF2M" --backend cuda -n 24 --draft 8 --timing 8 --json \
            >"$LOGS/$name.json" 2>&1
        say "$name: $(python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); t = d["timing"]["median_ms"]; ks = sorted(t, key=int)
print("bit-identical" if d["ok"] else "MISMATCH", "median ms", " ".join("%s:%.2f" % (k, t[k]) for k in ks),
      "| / step", " ".join("%.2f" % (t[k] / t["1"]) for k in ks))' "$LOGS/$name.json" 2>&1 | tail -1)"
    done
fi
if has default; then
    RL_CUDA_VERBOSE=1 run default 120 $B/redlite bench -m models/default.gguf --backend cuda --n-decode 128 --reps 5 \
        --warmup 8 --prompt 512,2048 --batch 2048
fi
if has vram; then
    run vram-tiny 300 $B/tests/test_cuda_vram
    if [ -s "$CF2" ]; then
        TOK=$(seq -s, 101 37 2000) # 54 prompt ids: chunks of 20, 20 (tiles of 8 pairs) and 14 (one pair per tile) at -b 20
        V=${VRAM_CHECK_MIB:-4096}
        run vram-full 300 $B/redlite dump -m "$CF2" --backend cuda -b 20 --tokens "$TOK" --greedy 64 \
            --logits "$OUT/vram_full.f32" --json
        run vram-$V 300 $B/redlite dump -m "$CF2" --backend cuda -b 20 --tokens "$TOK" --greedy 64 \
            --logits "$OUT/vram_$V.f32" --json --vram-mib "$V" --cache-mib full --stats
        if [ -s "$OUT/vram_full.f32" ] && cmp -s "$OUT/vram_full.f32" "$OUT/vram_$V.f32"; then
            say "vram identity (CF2, --vram-mib $V vs full residency, 54 + 64 positions): identical logits"
        else say "vram identity (CF2, --vram-mib $V vs full residency): DIFFERENT or missing"; fi
        run vram-$V-nopin 300 $B/redlite dump -m "$CF2" --backend cuda -b 20 --tokens "$TOK" --greedy 64 \
            --logits "$OUT/vram_${V}_pin.f32" --json --vram-mib "$V" --cache-mib full --vram-pin off --stats
        if [ -s "$OUT/vram_full.f32" ] && cmp -s "$OUT/vram_full.f32" "$OUT/vram_${V}_pin.f32"; then
            say "vram identity (CF2, --vram-mib $V, --vram-pin off: the staging ring): identical logits"
        else say "vram identity (CF2, --vram-mib $V, --vram-pin off): DIFFERENT or missing"; fi
        rm -f "$OUT"/vram_*.f32
        for v in 4096 8192 16384; do
            run "vram-bench-$v" 400 $B/redlite bench -m "$CF2" --backend cuda --vram-mib $v --cache-mib full \
                --n-decode 64 --reps 3 --warmup 4 --prompt 2048 --batch 2048 --verbose
        done
        run "vram-bench-8192-nopin" 400 $B/redlite bench -m "$CF2" --backend cuda --vram-mib 8192 --vram-pin off \
            --cache-mib full --n-decode 64 --reps 3 --warmup 4 --prompt 2048 --batch 2048 --verbose
        run "vram-bench-8192-miss-auto" 400 $B/redlite bench -m "$CF2" --backend cuda --vram-mib 8192 --vram-miss auto \
            --cache-mib full --n-decode 64 --reps 3 --warmup 4 --prompt 2048 --batch 2048 --verbose
    else
        say "vram: no $CF2 (run the synth stage first): only the tiny-fixture test ran"
    fi
fi
if has long; then
    RL_CUDA_BIN=$PWD/$B/redlite RL_CUDA_LONG=1 run long 400 python3 -m pytest -q -s -p no:cacheprovider \
        tests/cuda/test_cuda_fixtures.py -k long
fi
say "== done"
