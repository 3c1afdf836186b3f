"""Real coding agents against `redlite serve` (issue 45): Claude Code (the CLI bundled in PyPI's
claude-agent-sdk), the Codex CLI (PyPI's openai-codex-cli-bin), the openai-agents SDK and aider,
each through a tool loop on loopback (read a file, run a command, edit a file, answer) with the TEST-ONLY scripted backend so the
"model" turns are fixed, plus one short turn of the real model (models/default.gguf).

The agents live in their own venvs (tests/agents_venv.sh, versions pinned in
tests/requirements-agents.txt); a missing venv is installed on first use. Without network
the tests skip saying so, except in CI (CI or RL_AGENTS_REQUIRED set), where they fail.
Rerun against the newest releases: RL_AGENTS_LATEST=1 tests/agents_venv.sh && ./tests/run.sh tests/test_agents.py
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from server_util import REPO, Server, script_file

VENV = REPO / "build" / "venv-agents"
AIDER = REPO / "build" / "venv-aider" / "bin" / "aider"
REQUIRED = bool(os.environ.get("CI") or os.environ.get("RL_AGENTS_REQUIRED"))


@pytest.fixture(scope="module")
def agents():
    py = VENV / "bin" / "python"
    if not (py.exists() and AIDER.exists()):
        r = subprocess.run([str(REPO / "tests" / "agents_venv.sh")], capture_output=True, text=True, timeout=900)
        if r.returncode:
            why = f"cannot install the agents (tests/agents_venv.sh: {r.stderr.strip().splitlines()[-1:]})"
            if REQUIRED:
                pytest.fail(why)
            pytest.skip(why + "; no network? set RL_AGENTS_REQUIRED=1 to make this a failure")
    return py


def run_py(py, code, timeout=240, cwd=None):
    r = subprocess.run([str(py), "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout,
                       cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def no_protocol_errors(srv):
    """Every request the agent made was answered 2xx, none cut or failed, no unknown field."""
    m = srv.metrics()
    bad = {k: v for k, v in m.items() if k.startswith("redlite_http_responses_total") and not '"2' in k and v}
    assert not bad, (bad, srv.stderr()[-3000:])
    assert m["redlite_requests_failed_total"] == 0 and m["redlite_requests_cancelled_total"] == 0
    return m


def call(name, **args):
    import json
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def loop_files(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("alpha line\n")
    return work


def test_claude_code_tool_loop(agents, tmp_path):
    work = loop_files(tmp_path)
    notes, out = work / "notes.txt", work / "out.txt"
    answers = [call("Read", file_path=str(notes)),
               call("Bash", command=f"echo ran > {out}", description="write out.txt"),
               call("Edit", file_path=str(notes), old_string="alpha", new_string="beta"),
               "Done: notes.txt now says beta."]
    with Server("--test-script", script_file(tmp_path, answers)) as s:
        rc, so, se = run_py(agents, f"""
            import anyio
            from claude_agent_sdk import query, ClaudeAgentOptions, ResultMessage
            async def main():
                opts = ClaudeAgentOptions(cwd={str(work)!r}, permission_mode="acceptEdits",
                    allowed_tools=["Read", "Bash", "Edit"], max_turns=8,
                    env={{"ANTHROPIC_BASE_URL": {s.base!r}, "ANTHROPIC_API_KEY": "none",
                          "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1"}})
                async for m in query(prompt="Read notes.txt, run a command, edit it, answer.", options=opts):
                    if isinstance(m, ResultMessage):
                        print("RESULT", m.subtype, m.is_error, m.num_turns, repr(m.result))
            anyio.run(main)
        """)
        assert rc == 0 and "RESULT success False 4 'Done: notes.txt now says beta.'" in so, (so[-2000:], se[-2000:])
        assert notes.read_text() == "beta line\n" and out.read_text() == "ran\n"
        m = no_protocol_errors(s)
        assert m['redlite_requests_total{api="messages"}'] == 4


AGENTS_DRIVER = """
    import asyncio, subprocess, sys
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
    from agents import OpenAIChatCompletionsModel, ModelSettings
    from openai import AsyncOpenAI
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=BASE + "/v1", api_key="none", max_retries=0)
    set_default_openai_client(client)

    @function_tool
    def read_file(path: str) -> str:
        "Read a text file."
        return open(path).read()

    @function_tool
    def run_command(command: str) -> str:
        "Run a shell command."
        return subprocess.run(command, shell=True, capture_output=True, text=True).stdout

    @function_tool
    def edit_file(path: str, old: str, new: str) -> str:
        "Replace text in a file."
        t = open(path).read()
        open(path, "w").write(t.replace(old, new))
        return "edited"

    model = OpenAIChatCompletionsModel(model="m", openai_client=client) if API == "chat" else "m"
    agent = Agent(name="coder", instructions="You are a coding agent.", model=model,
                  tools=[read_file, run_command, edit_file], model_settings=ModelSettings(max_tokens=MAXTOK))
    r = asyncio.run(Runner.run(agent, PROMPT, max_turns=8))
    print("FINAL", repr(r.final_output))
"""


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_agents_tool_loop(agents, tmp_path, api):
    work = loop_files(tmp_path)
    notes, out = work / "notes.txt", work / "out.txt"
    answers = [call("read_file", path=str(notes)), call("run_command", command=f"echo ran > {out}"),
               call("edit_file", path=str(notes), old="alpha", new="beta"), "Done: notes.txt now says beta."]
    with Server("--test-script", script_file(tmp_path, answers)) as s:
        code = (f"BASE = {s.base!r}\nAPI = {api!r}\nMAXTOK = 200000\nPROMPT = 'Fix notes.txt.'\n"
                + textwrap.dedent(AGENTS_DRIVER))
        rc, so, se = run_py(agents, code)
        assert rc == 0 and "FINAL 'Done: notes.txt now says beta.'" in so, (so[-2000:], se[-3000:])
        assert notes.read_text() == "beta line\n" and out.read_text() == "ran\n"
        m = no_protocol_errors(s)
        assert m['redlite_requests_total{api="%s"}' % api] == 4


def codex_bin(py):
    rc, so, se = run_py(py, "import codex_cli_bin; print(codex_cli_bin.bundled_codex_path())", timeout=60)
    assert rc == 0, se
    return so.strip()


def codex_home(tmp_path, base, ctx):
    """A CODEX_HOME whose config names redlite as the model provider (docs/AGENTS.md)."""
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(textwrap.dedent(f"""\
        model = "redlite"
        model_provider = "redlite"
        model_context_window = {ctx}
        check_for_update_on_startup = false

        [analytics]
        enabled = false

        [model_providers.redlite]
        name = "redlite"
        base_url = "{base}/v1"
        wire_api = "responses"
        """))
    return home


def test_codex_tool_loop(agents, tmp_path):
    """The Codex CLI (openai-codex-cli-bin) over the Responses API: it reads a file and runs a
    command with its exec_command tool and edits with apply_patch (which Codex runs itself when
    the model calls it through exec_command), then answers."""
    work = loop_files(tmp_path)
    notes, out = work / "notes.txt", work / "out.txt"
    patch = ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: notes.txt\n@@\n-alpha line\n+beta line\n"
             "*** End Patch\nEOF\n")
    answers = [call("exec_command", cmd="cat notes.txt"), call("exec_command", cmd="echo ran > out.txt"),
               call("exec_command", cmd=patch), "Done: notes.txt now says beta."]
    with Server("--test-script", script_file(tmp_path, answers), "--ctx", "32768") as s:
        home = codex_home(tmp_path, s.base, 32768)
        env = {**os.environ, "CODEX_HOME": str(home), "HOME": str(tmp_path)}
        env.pop("OPENAI_API_KEY", None)
        r = subprocess.run([codex_bin(agents), "exec", "--skip-git-repo-check", "--json", "--ephemeral",
                            "--dangerously-bypass-approvals-and-sandbox", "Fix notes.txt."],
                           cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
        import json
        events = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        kinds = [(e["type"], e.get("item", {}).get("type")) for e in events]
        assert r.returncode == 0 and ("turn.completed", None) in kinds, (r.stdout[-3000:], r.stderr[-2000:])
        done = [e["item"] for e in events if e["type"] == "item.completed"]
        cmds = [i for i in done if i["type"] == "command_execution"]
        assert [i["exit_code"] for i in cmds] == [0, 0] and "alpha line" in cmds[0]["aggregated_output"], done
        assert [i["status"] for i in done if i["type"] == "file_change"] == ["completed"], done
        assert done[-1] == {**done[-1], "type": "agent_message", "text": "Done: notes.txt now says beta."}
        assert not [e for e in events if e["type"] in ("error", "turn.failed")], events
        assert notes.read_text() == "beta line\n" and out.read_text() == "ran\n"
        m = no_protocol_errors(s)
        assert m['redlite_requests_total{api="responses"}'] == 4


def test_aider_edit(agents, tmp_path):
    """aider edits by text (its 'whole' edit format), over chat completions."""
    work = loop_files(tmp_path)
    answers = ["notes.txt\n```\nbeta line\n```\n"]
    with Server("--test-script", script_file(tmp_path, answers)) as s:
        env = {**os.environ, "OPENAI_API_BASE": s.base + "/v1", "OPENAI_API_KEY": "none", "HOME": str(tmp_path)}
        r = subprocess.run([str(AIDER), "--model", "openai/redlite", "--edit-format", "whole", "--no-git",
                            "--yes-always", "--no-check-update", "--no-show-model-warnings", "--no-stream",
                            "--no-analytics", "--map-tokens", "0", "--message", "Change alpha to beta.",
                            "notes.txt"], cwd=work, env=env, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
        assert (work / "notes.txt").read_text() == "beta line\n", r.stdout[-2000:]
        m = no_protocol_errors(s)
        assert m['redlite_requests_total{api="chat"}'] >= 1


def test_real_model_turn(agents, tmp_path):
    """One short turn of the real model through the openai-agents SDK (chat completions: a short
    answer cut by max_tokens is still an answer there; the Responses API raises on 'incomplete')."""
    with Server("--ctx", "4096", start_timeout=120) as s:
        code = (f"BASE = {s.base!r}\nAPI = 'chat'\nMAXTOK = 32\nPROMPT = 'Say hi.'\n"
                + textwrap.dedent(AGENTS_DRIVER))
        rc, so, se = run_py(agents, code, timeout=300)
        assert rc == 0 and "FINAL" in so, (so[-2000:], se[-3000:])
        m = no_protocol_errors(s)
        assert m["redlite_generated_tokens_total"] >= 1
