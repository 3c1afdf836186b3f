#!/usr/bin/env bash
# Install the coding agents of tests/test_agents.py (versions: tests/requirements-agents.txt) into
# build/venv-agents (claude-agent-sdk with its bundled Claude Code, openai-agents, openai-codex) and
# build/venv-aider (aider-chat pins its own dependency tree). RL_AGENTS_LATEST=1: newest releases.
set -euo pipefail
cd "$(dirname "$0")/.."
req=tests/requirements-agents.txt
pins() { grep -v '^#' "$req" | sed 's/ *#.*//' | grep -v '^$' | { if [ "${RL_AGENTS_LATEST:-}" = 1 ]; then sed 's/==.*//'; else cat; fi; }; }
py=${PYTHON:-python3}
[ -x build/venv-agents/bin/python ] || "$py" -m venv build/venv-agents
[ -x build/venv-aider/bin/python ] || "$py" -m venv build/venv-aider
build/venv-agents/bin/pip install -q --upgrade $(pins | grep -v '^aider-chat')
build/venv-aider/bin/pip install -q --upgrade $(pins | grep '^aider-chat')
echo "agents installed: build/venv-agents, build/venv-aider"
