#!/usr/bin/env bash
# The whole test suite: C unit tests and Python oracle tests, run by pytest.
# Python test tools live in a virtual environment in build/venv (created on first use from
# tests/requirements.txt; PyPI only). Set RL_TEST_PYTHON to use another interpreter instead.
set -euo pipefail
cd "$(dirname "$0")/.."
# the configuration comes from make: `make CUDA=1 test` passes CUDA=1 down (MAKEFLAGS), so the
# CUDA build is the one tested; ./tests/run.sh alone tests the CPU build
make -s all
if [ -n "${RL_TEST_PYTHON:-}" ]; then
    PY="$RL_TEST_PYTHON"
else
    PY=build/venv/bin/python
    if [ ! -x "$PY" ] || ! cmp -s tests/requirements.txt build/venv/requirements.txt; then
        python3 -m venv build/venv
        "$PY" -m pip install -q --disable-pip-version-check -r tests/requirements.txt
        cp tests/requirements.txt build/venv/requirements.txt
    fi
fi
# No arguments: the whole suite, in an explicit order (pytest runs its arguments in the order
# given): the test files of tests/ (test_cuda_build.py among them builds build/cuda where nvcc
# is on PATH), then every test directory, tests/cuda/ last because its fixture tests use that
# build. Otherwise pytest's own arguments (files, -k, ...).
if [ $# -eq 0 ]; then
    set -- tests/test_*.py
    for d in tests/*/; do
        d=${d%/}
        case $d in tests/c | tests/fixtures | tests/cuda | */__pycache__) ;; *) set -- "$@" "$d" ;; esac
    done
    set -- "$@" tests/cuda
fi
# Where nvcc is on PATH and tests/test_cuda_build.py will run: its CUDA build (build/cuda from the
# per-configuration objects build/obj-cuda), the other targets' objects (cuda-archcheck) and
# bench/cuda_persist.cu (cuda-persist), once, on every core, before pytest starts, so no test's time
# is the compiler's; make keeps them, so a later run recompiles only what changed. A failure here is
# left for the test to report (it runs the same make, with the same configuration).
case " $* " in
    *" tests/test_cuda_build.py"* | *" tests/cuda"*)
        if command -v nvcc >/dev/null 2>&1; then
            make -s -k CUDA=1 BUILD=build/cuda OBJ=build/obj-cuda CUDA_ARCH="$(make -s print-cuda-test-arch)" -j"$(nproc)" build/cuda/redlite \
                build/cuda/tests/test_cuda_{ops,engine,vram,verify,spec,rows,mgpu} cuda-archcheck cuda-persist >/dev/null 2>&1 || true
        fi ;;
esac
exec "$PY" -m pytest -q -ra "$@"
