#!/usr/bin/env bash
# The whole test suite: C unit tests and Python oracle tests, run by pytest.
# Python test tools live in a virtual environment in build/venv (created on first use from
# tests/requirements.txt; PyPI only). Set RL_TEST_PYTHON to use another interpreter instead.
set -euo pipefail
cd "$(dirname "$0")/.."
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
# no arguments: the whole suite; otherwise pytest's own arguments (files, -k, ...)
[ $# -eq 0 ] && set -- tests
exec "$PY" -m pytest -q -ra "$@"
