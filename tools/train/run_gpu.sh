#!/bin/bash
# Driver for the one training run on a GPU machine (see tools/train/README.md).
#   run_gpu.sh smoke   full data preparation started in the background (setsid) + a small data
#                      preparation and a 50-step smoke run of the real configuration in the foreground
#   run_gpu.sh start   start the full run in the background (waits for / redoes the data preparation)
#   run_gpu.sh poll S  print progress for up to S seconds (returns early when the run is finished)
#   run_gpu.sh collect copy the results into $OUT
# Work directory: $RL (default /tmp/rl). Python: python3 (torch + transformers with Qwen3Next).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RL=${RL:-/tmp/rl}
TOK=${TOK:-$HERE/tok}
BUDGET=${BUDGET:-17}
export PYTHONUNBUFFERED=1
mkdir -p "$RL"
prep_full() {
    echo $$ > "$RL/prep.pid"
    python3 "$HERE/prep_data.py" --tokenizer-dir "$TOK" --out "$RL/full" --max-total-mb 400 && touch "$RL/full/DONE"
    touch "$RL/prep.end"
}
prep_running() {   # a background preparation started by 'smoke' is still going
    [ -f "$RL/prep.pid" ] && [ ! -f "$RL/prep.end" ] && kill -0 "$(cat "$RL/prep.pid")" 2>/dev/null
}
case "${1:-}" in
smoke)
    nvidia-smi --query-gpu=name,memory.total --format=csv
    python3 -c "import torch, transformers, tokenizers; print(torch.__version__, transformers.__version__, tokenizers.__version__)"
    if [ ! -f "$RL/full/DONE" ] && ! prep_running; then
        setsid nohup bash -c "$(declare -f prep_full prep_running); HERE=$HERE; RL=$RL; TOK=$TOK; prep_full" \
            > "$RL/prep_full.log" 2>&1 < /dev/null &
    fi
    python3 "$HERE/prep_data.py" --tokenizer-dir "$TOK" --out "$RL/small" --max-total-mb 12 \
        --stdlib-cap-mb 6 --n-tool-convs 50 || exit 1
    python3 "$HERE/train.py" --data "$RL/small" --out "$RL/smoke" --max-steps 50 --log-every 10 \
        --eval-windows 16 --final-eval-windows 32 --eval-every-s 1000 || exit 1
    ls -la "$RL/smoke"; echo "--- full prep log:"; cat "$RL/prep_full.log"
    ;;
start)
    START=$(date +%s)
    setsid nohup bash -c "
        $(declare -f prep_full prep_running); HERE=$HERE; RL=$RL; TOK=$TOK
        while [ ! -f $RL/full/DONE ] && prep_running; do sleep 2; done
        [ -f $RL/full/DONE ] || prep_full || exit 1
        python3 $HERE/train.py --data $RL/full --out $RL/run --start-ts $START --budget-min $BUDGET && touch $RL/run/DONE
        touch $RL/run/FINISHED" > "$RL/run.log" 2>&1 < /dev/null &
    sleep 5; cat "$RL/run.log"
    ;;
poll)
    END=$(( $(date +%s) + ${2:-560} ))
    while [ "$(date +%s)" -lt "$END" ]; do
        [ -f "$RL/run/FINISHED" ] && break
        sleep 20
        echo "== $(date +%H:%M:%S)"; tail -n 2 "$RL/run.log"
    done
    echo "== log tail"; tail -n 25 "$RL/run.log"; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
    ;;
collect)
    [ -f "$RL/run/DONE" ] || { echo "run not finished successfully"; tail -n 40 "$RL/run.log"; }
    cp "$RL"/run/weights-*.safetensors "$RL/run/meta.json" "$RL/run/train_log.jsonl" "$OUT/" 2>/dev/null
    cp "$RL/full/manifest.json" "$RL/full/heldout.txt" "$OUT/" 2>/dev/null
    ls -la "$OUT"
    ;;
*)
    echo "usage: run_gpu.sh smoke|start|poll [S]|collect" >&2; exit 2 ;;
esac
