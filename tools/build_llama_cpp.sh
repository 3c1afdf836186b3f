#!/usr/bin/env bash
# build_llama_cpp.sh — build llama.cpp's CPU tools (llama-perplexity, llama-quantize, llama-simple,
# llama-tokenize) outside the repository, from the source that llama-cpp-python 0.3.36
# ships (its vendor/llama.cpp is llama.cpp 0c1e5709, the converter version of our fixtures).
#
# The comparison tool for `redlite perplexity`, greedy-token agreement and the quantized variants
# of the trained model. The sdist is fetched with pip (never vendored into this repository).
#
#   tools/build_llama_cpp.sh [DEST]        DEST defaults to build/llama.cpp (where the tests look)
#   env: LCP_VERSION (0.3.36), JOBS (2), LCP_SDIST_DIR (build/lcp)
#
# Result: DEST/bin/llama-{perplexity,quantize,simple,tokenize,bench}; DEST/SOURCE says what was built.
# (llama-bench: the CPU comparison of bench/compare_llama.py --llama-bench DEST/bin/llama-bench.)
set -euo pipefail

DEST=${1:-build/llama.cpp}
VER=${LCP_VERSION:-0.3.36}
JOBS=${JOBS:-2}
SDIR=${LCP_SDIST_DIR:-build/lcp}
TARGETS="llama-perplexity llama-quantize llama-simple llama-tokenize llama-bench"

case "$DEST" in -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0;; esac
command -v cmake >/dev/null || { echo "build_llama_cpp: cmake not found (apt-get install cmake, or pip install cmake)" >&2; exit 1; }
command -v g++ >/dev/null || { echo "build_llama_cpp: g++ not found (apt-get install g++)" >&2; exit 1; }

mkdir -p "$SDIR" "$DEST"
TGZ="$SDIR/llama_cpp_python-$VER.tar.gz"
if [ ! -f "$TGZ" ]; then
    echo "build_llama_cpp: downloading the llama-cpp-python $VER sdist with pip" >&2
    pip download --no-binary :all: --no-deps "llama-cpp-python==$VER" -d "$SDIR"
fi
SRC="$DEST/src"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    echo "build_llama_cpp: unpacking vendor/llama.cpp into $SRC" >&2
    rm -rf "$SRC" && mkdir -p "$SRC"
    tar xzf "$TGZ" -C "$SRC" --strip-components=3 "llama_cpp_python-$VER/vendor/llama.cpp"
fi

# CPU only, Release, static libraries (the binaries run from anywhere); no curl, no server
# web UI, no tests. GGML_NATIVE builds for this CPU (as a user building locally would).
cmake -S "$SRC" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON >&2
for t in $TARGETS; do
    echo "build_llama_cpp: building $t" >&2
    cmake --build "$DEST/build" --config Release -j "$JOBS" --target "$t" >&2 || {
        echo "build_llama_cpp: target $t failed" >&2; exit 1; }
done
mkdir -p "$DEST/bin"
for t in $TARGETS; do cp "$DEST/build/bin/$t" "$DEST/bin/"; done
{ echo "llama-cpp-python $VER sdist, vendor/llama.cpp"; sha256sum "$TGZ"; date -u; } > "$DEST/SOURCE"
echo "build_llama_cpp: done: $DEST/bin" >&2
ls "$DEST/bin"
