#!/usr/bin/env bash
# bench/gpu_bundle.sh — get this tree's CUDA tests and binaries onto the GPU machine (device tool) in one
# call under its 64 MiB limit, compiling here and only linking there (~60 s there instead of a ~90 s
# 16-core build, and no nvcc time on the device's clock). The tree with its fixtures is ~100 MB, so:
#
#   here:   bench/gpu_bundle.sh pack      sm_90 objects (debug info stripped, no archive) -> .gpu/objs.tar.xz,
#                                         .cudabin (libraries + headers the GPU image lacks) -> .gpu/cudabin.tar.xz,
#                                         tiny-a / tiny-b .gguf -> .gfx/*.xz (tiny-a.npz without its full
#                                         prompt logits), pytest wheels -> .whl; all git-ignored
#           bench/gpu_bundle.sh prep      move the big tracked files the GPU run does not need out of the
#                                         tree (to /tmp/rl-stash) before a device call ...
#           bench/gpu_bundle.sh unprep    ... and back (before any commit: else git sees them deleted)
#   device: carry [".gpu", ".gfx", ".whl"], then
#           bench/gpu_bundle.sh setup     unpack, link /tmp/trb/build/{redlite,tests/test_cuda_*}; idempotent
#           bench/gpu_bundle.sh tests     every CUDA test program, the engine / verify / vram ones also with
#                                         RL_CUDA_PDL=0, and tests/cuda/test_cuda_fixtures.py; log /tmp/g/tests.txt,
#                                         one line per program in /tmp/g/summary.txt, touches /tmp/g/tests.done
#
# A second call on the same lease re-sends the tree without the uncompressed fixtures (they are deleted
# here): run `setup` again first (it restores them). Objects are linked there with the same flags
# (obj/.flags): a different compiler there would rebuild everything (still correct, just slower).
set -uo pipefail
cd "$(dirname "$0")/.."
ARCH="-gencode arch=compute_90,code=sm_90"
PROGS="test_cuda_engine test_cuda_verify test_cuda_vram test_cuda_spec test_cuda_ops test_cuda_rows test_cuda_mgpu"
BIG="models/redlite-coder-tiny-q8_0.gguf tests/fixtures/tiny-a.gguf tests/fixtures/tiny-b.gguf tests/fixtures/tiny-a.npz
     tests/fixtures/qwen3-vocab.gguf tests/fixtures/tokenizer_oracle.json.gz tests/fixtures/tokenizer_corpus.jsonl
     bench/data/heldout-code.txt"
STASH=/tmp/rl-stash
case "${1:-}" in
pack)
    for d in /.gpu/ /.gfx/ /.whl/ /.cudabin/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >>.git/info/exclude; done
    mkdir -p .gpu .gfx .whl /tmp/trb
    make -s -j"$(nproc)" CUDA=1 BUILD=/tmp/trb/build OBJ=/tmp/trb/obj CUDA_ARCH="$ARCH" /tmp/trb/build/redlite \
        $(for p in $PROGS; do printf '/tmp/trb/build/tests/%s ' $p; done) || exit 1
    rm -rf /tmp/trb/objs && cp -a /tmp/trb/obj /tmp/trb/objs && rm -f /tmp/trb/objs/libredlite.a &&
        find /tmp/trb/objs -name '*.o' -exec strip --strip-debug {} + &&
        tar -C /tmp/trb -cf - objs | xz -T0 -6 >.gpu/objs.tar.xz || exit 1
    rm -rf .cudabin && mkdir -p .cudabin/lib .cudabin/include
    L=/usr/lib/x86_64-linux-gnu
    cp -a $L/libcjson.so* $L/libutf8proc.so* $L/libmicrohttpd.so* .cudabin/lib/
    for l in $(ldd build/redlite | awk '$3 ~ /^\// {print $3}' | grep -v 'libc.so\|libm.so\|cjson\|utf8proc\|microhttpd'); do
        cp -L "$l" .cudabin/lib/; done
    cp -a /usr/include/cjson /usr/include/utf8proc.h /usr/include/microhttpd.h .cudabin/include/
    tar -cf - .cudabin | xz -T0 -6 >.gpu/cudabin.tar.xz
    for f in tiny-a tiny-b; do xz -T0 -6 -c tests/fixtures/$f.gguf >.gfx/$f.gguf.xz; done
    python3 -c "import numpy as np; z = np.load('tests/fixtures/tiny-a.npz'); np.savez_compressed('.gfx/tiny-a.npz', **{k: z[k] for k in z.files if k != 'p0.prompt_logits'})" || exit 1
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 -d .whl pytest pluggy iniconfig packaging pygments || exit 1
    du -sh .gpu .gfx .whl
    ;;
prep)
    for f in $BIG $(git ls-files 'bench/results/*.png' 'bench/results/*.jsonl'); do
        [ -f "$f" ] && mkdir -p "$STASH/$(dirname "$f")" && mv "$f" "$STASH/$f"; done
    (git ls-files; git ls-files --others --exclude-standard) | sort -u | while read -r f; do [ -f "$f" ] && stat -c %s "$f"; done |
        awk '{s += $1} END {printf "tree %.1f MiB\n", s / 1048576}'
    du -cb .gpu .gfx .whl 2>/dev/null | tail -1 | awk '{printf "carried %.1f MiB (the sum must stay under 64)\n", $1 / 1048576}'
    ;;
unprep)
    [ -d $STASH ] && (cd $STASH && find . -type f) | while read -r f; do mkdir -p "$(dirname "$f")"; mv "$STASH/$f" "$f"; done
    git status --short | grep '^ D' && echo "gpu_bundle: files above are still missing" >&2
    ;;
setup)
    mkdir -p /tmp/g
    for f in tiny-a tiny-b; do [ -f tests/fixtures/$f.gguf ] || xz -T4 -dc .gfx/$f.gguf.xz >tests/fixtures/$f.gguf; done
    [ -f tests/fixtures/tiny-a.npz ] || cp .gfx/tiny-a.npz tests/fixtures/
    [ -d .cudabin ] || tar -xJf .gpu/cudabin.tar.xz
    if [ ! -d /tmp/trb/obj ]; then # objects newer than the sources sent, the flag stamp older: nothing recompiles
        mkdir -p /tmp/trb && tar -xJmf .gpu/objs.tar.xz -C /tmp/trb && mv /tmp/trb/objs /tmp/trb/obj &&
            touch -d 2020-01-01 /tmp/trb/obj/.flags
    fi
    source bench/env_cudabin.sh
    export PATH=/usr/local/cuda/bin:$PATH
    if [ ! -x /tmp/trb/build/redlite ]; then
        t=$(date +%s)
        make -s -j"$(nproc)" CUDA=1 BUILD=/tmp/trb/build OBJ=/tmp/trb/obj CUDA_ARCH="$ARCH" /tmp/trb/build/redlite \
            $(for p in $PROGS; do printf '/tmp/trb/build/tests/%s ' $p; done) >/tmp/g/build.txt 2>&1
        echo "link rc=$? $(( $(date +%s) - t )) s" >>/tmp/g/summary.txt
    fi
    [ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    ;;
tests)
    "$0" setup || exit 1
    source bench/env_cudabin.sh
    S=/tmp/g/summary.txt L=/tmp/g/tests.txt
    run_t() { local n=$1; shift; local t=$(date +%s); echo "=== $n" >>$L; timeout 400 "$@" >>$L 2>&1; local rc=$?
        echo "$n rc=$rc $(( $(date +%s) - t )) s: $(tail -1 $L | cut -c1-150)" >>$S; }
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>$S 2>&1
    for p in $PROGS; do run_t $p /tmp/trb/build/tests/$p; done
    for p in test_cuda_engine test_cuda_verify test_cuda_vram; do RL_CUDA_PDL=0 run_t "$p PDL=0" /tmp/trb/build/tests/$p; done
    PYTHONPATH=/tmp/site RL_CUDA_BIN=/tmp/trb/build/redlite run_t fixtures python3 -m pytest -q -rs tests/cuda/test_cuda_fixtures.py
    touch /tmp/g/tests.done
    ;;
*)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    case "${1:-}" in -h | --help) exit 0 ;; *) exit 2 ;; esac
    ;;
esac
