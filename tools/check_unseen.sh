#!/usr/bin/env bash
# Check Red Lite against a Qwen3-Next GGUF the tests never saw: build a fresh random model with
# transformers (new seed, sizes and prompts), convert it with llama.cpp's own converter, record
# transformers' greedy tokens and logits (tools/make_fixtures.py), then run the forward-pass
# oracle test on it. Developer tool (needs torch + transformers; not run in CI).
#
#   tools/check_unseen.sh [--seed N] [--hidden N] [--layers N] [--experts N] [--topk N] [--prompts FILE] ...
#
# Any make_fixtures.py option can be passed. The default is a random seed and a geometry unlike
# the committed fixtures (hidden 96, 8 layers, 32 experts top-6).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/redlite-unseen-XXXXXX)
seed=${RANDOM}
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--seed "$seed" --hidden 96 --layers 8 --experts 32 --topk 6 --no-llama-cpp)
echo "check_unseen: making a fresh fixture in $out (${args[*]})"
python3 tools/make_fixtures.py --name unseen --out "$out" --fetch-converter "${args[@]}"
make -s
RL_FIXTURE_DIR="$out" ./tests/run.sh tests/test_forward_oracle.py -k "not llama" -s
echo "check_unseen: passed on $out"
