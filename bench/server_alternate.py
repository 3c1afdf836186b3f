#!/usr/bin/env python3
"""`redlite serve`: two long agent conversations alternating turns (issue 46's target: every turn after
the first evaluates only its new tokens, in memory and across a restart).

    bench/server_alternate.py [-m MODEL] [--tokens 20000] [--turns 3] [--parallel 1,2] [-t THREADS]
                              [--out FILE.md] [-- serve flags]

For each --parallel value: server A (--state-dir) runs conversations X and Y (each a system prompt and
a ~N-token user message, different texts) turn by turn, X, Y, X, Y, ...; every turn appends the
previous answer and a short user message. A stops (checkpoints flushed); server B on the same
--state-dir continues both for two more turns each. Per turn: prompt tokens, reused (cached) tokens,
evaluated = prompt - reused, and new = this prompt - the previous prompt of the same conversation.
A turn "re-prefills" when it evaluates more than its new tokens + 1 (a prefix restored from a checkpoint
ends one token early: the last stored token is evaluated again for its logits). At the end the last turn of each
conversation is sent to a cold server: the answers must be identical (greedy).
Writes bench/results/<date>-server-alternate.md (and prints it); exit 1 on a re-prefill or a
different answer.
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
import openai  # noqa: E402
from server_util import Server  # noqa: E402
from server_reuse import count_tokens, ttft  # noqa: E402

QUESTIONS = ["Which function has the largest scale? Answer briefly.", "Name one function to rename.",
             "Is any function unused? One line.", "Suggest a docstring for the first function.",
             "Which two functions could be merged?", "What would you test first?"]


def long_conversation(base, target, tag):
    """System + user message of about `target` tokens; `tag` makes the two conversations differ."""
    lines, i = [], 0
    while True:
        lines += [f"def {tag}_{i + k}(values, scale={k}):\n    return [v * scale + {k} for v in values]"
                  for k in range(50)]
        i += 50
        msgs = [{"role": "system", "content": f"You review the {tag} module."},
                {"role": "user", "content": "Review this module:\n\n" + "\n\n".join(lines)}]
        if count_tokens(base, msgs) >= target:
            return msgs


def run_turn(client, conv, name, turn, rows, prev_prompt):
    t, text, u, _ = ttft(client, conv)
    cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
    new = u.prompt_tokens - prev_prompt.get(name, 0)
    ev = u.prompt_tokens - cached
    rows.append((name, turn, u.prompt_tokens, cached, ev, new, t))
    prev_prompt[name] = u.prompt_tokens
    conv += [{"role": "assistant", "content": text},
             {"role": "user", "content": QUESTIONS[(turn + len(name)) % len(QUESTIONS)]}]
    return text


def one_setting(a, parallel, flags):
    state = tempfile.mkdtemp(prefix="redlite-alt-state-")
    rows, prev, last = [], {}, {}
    common = [*flags, "--parallel", str(parallel), "--state-dir", state, "--state-min-tokens", "1"]
    with Server(*common) as s:
        c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=7200, max_retries=0)
        convs = {"X": long_conversation(s.base, a.tokens, "alpha"), "Y": long_conversation(s.base, a.tokens, "beta")}
        for turn in range(1, a.turns + 1):
            for name in ("X", "Y"):
                run_turn(c, convs[name], name, turn, rows, prev)
        assert s.stop() == 0
    with Server(*common) as s:  # restart on the same --state-dir
        c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=7200, max_retries=0)
        for turn in range(a.turns + 1, a.turns + 3):
            for name in ("X", "Y"):
                snapshot = list(convs[name])
                last[name] = (snapshot, run_turn(c, convs[name], name, turn, rows, prev))
    same = {}
    with Server(*flags) as s:  # cold: the last turns again, full prefill
        c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=7200, max_retries=0)
        for name, (conv, text) in last.items():
            same[name] = ttft(c, conv)[1] == text
    subprocess.run(["rm", "-rf", state])
    return rows, same


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=str(REPO / "models" / "default.gguf"))
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--parallel", default="1,2")
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*", help="more `redlite serve` flags (after --)")
    a = ap.parse_args()
    os.environ["RL_CHAT_MODEL"] = a.model
    flags = ["-t", a.threads, "--temp", "0", "--ctx", str(a.tokens + 6144), *a.extra]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip()
    out = [f"# Two long conversations alternating turns, {datetime.date.today()}", "",
           f"`bench/server_alternate.py`, commit {commit}, model `{os.path.basename(a.model)}` "
           f"({os.path.getsize(a.model) / 2**20:.0f} MiB), flags `{' '.join(flags)}`, {os.cpu_count()} CPUs visible, "
           f"loopback, greedy, streaming, max 8 tokens an answer. Turns {a.turns + 1}-{a.turns + 2} run on a "
           "restarted server (same --state-dir).", ""]
    ok = True
    for p in [int(x) for x in a.parallel.split(",")]:
        t0 = time.time()
        rows, same = one_setting(a, p, flags)
        out += [f"## --parallel {p} ({time.time() - t0:.0f} s)", "",
                "| conversation | turn | prompt tokens | reused | evaluated | new since its last turn | TTFT (s) | only new evaluated |",
                "|---|---:|---:|---:|---:|---:|---:|---|"]
        for name, turn, pt, cached, ev, new, t in rows:
            good = turn == 1 or ev <= new + 1
            ok &= good
            out.append(f"| {name} | {turn}{' (restarted)' if turn > a.turns else ''} | {pt} | {cached} | {ev} | "
                       f"{new if turn > 1 else '-'} | {t:.2f} | {'-' if turn == 1 else 'yes' if good else 'NO'} |")
        out += ["", "Last turns identical to a cold server's answer: " +
                ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items()), ""]
        ok &= all(same.values())
    text = "\n".join(out) + "\n"
    print(text)
    path = Path(a.out) if a.out else REPO / "bench" / "results" / f"{datetime.date.today()}-server-alternate.md"
    path.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
