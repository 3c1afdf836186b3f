#!/usr/bin/env bash
# The grammar mask's cost per token (bench/grammar_bench.c says what is measured), on the default
# model's tokenizer and on the 80B models' (tests/fixtures/qwen3-vocab.gguf). Builds the CPU library
# first. Usage: bench/grammar_bench.sh [tokens per schema (400)] > bench/results/DATE-grammar-mask.md
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -j2 build/libredlite.a >&2
cc -std=c11 -O2 -D_GNU_SOURCE -Isrc -o build/grammar_bench bench/grammar_bench.c build/libredlite.a \
   -lutf8proc -lcjson -lm -pthread
n=${1:-400}
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
echo
for f in models/default.gguf tests/fixtures/qwen3-vocab.gguf; do
    [ -f "$f" ] && ./build/grammar_bench "$f" "$n" && echo
done
