#!/usr/bin/env bash
# Install the Debian 12 packages Red Lite needs to build and test (C libraries from Debian only;
# Python test tools come from PyPI into build/venv, see tests/run.sh). nginx: the load balancer of
# tests/test_server_replicas.py (the tests run their own nginx on loopback ports; the system one
# is not used).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
# cppcheck, clang-tidy, clang-format: make lint (tools/lint.sh); nginx: the replica tests
PKGS="build-essential pkg-config libutf8proc-dev libcjson-dev libmicrohttpd-dev python3 python3-venv python3-pip tmux clang
      cppcheck clang-tidy clang-format nginx"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq $missing
fi
