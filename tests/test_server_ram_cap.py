"""`redlite serve --ram-states-mib N`: the RAM tier (conversations a slot gave up, docs/SERVER.md
"Slots") is capped in bytes as well as in entries.

One slot, three short conversations A, B, C taking turns: each one the slot takes evicts the one
it held into the RAM tier. Uncapped (8 entries), A and B are both kept and both resume (their
second turn reuses the whole first prompt). With a 1 MiB cap, which holds one of these states
(~0.9 MiB on the default model) but not two, B's entry pushes A's (the least recently used) out:
the tier holds one entry of at most 1 MiB, B resumes and A is evaluated again. A conversation whose
state alone exceeds the cap is not kept at all. With the cap alone (no --ram-states) the entry
count is the bytes' to decide: more than the default one per slot.
"""

import openai

from server_util import Server

MIB = 1 << 20
SHORT = [
    [{"role": "user", "content": "Name a prime number."}],
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Name a fruit."}],
]


def turn(s, msgs):
    c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", timeout=300, max_retries=0)
    r = c.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0)
    return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens, r.choices[0].message.content


def run_abc(s):
    """A, B, C once, then B and A again (B first: taking it back from the tier evicts C, which
    must not push A out before A is asked); returns the first and second turns' (prompt, cached,
    text) and /metrics after C."""
    first = {}
    for k in range(3):
        first[k] = turn(s, SHORT[k])
    m = s.metrics()
    again = {}
    for k in (1, 0):
        msgs = SHORT[k] + [{"role": "assistant", "content": first[k][2]}, {"role": "user", "content": "Another one."}]
        again[k] = turn(s, msgs)
    return first, again, m


def test_ram_tier_byte_cap():
    with Server("-t", "2", "--parallel", "1", "--ram-states", "8") as s:
        first, again, m = run_abc(s)
    # precondition of the capped run: each state fits 1 MiB, two do not
    assert m["redlite_ram_checkpoints"] == 2, m
    assert MIB < m["redlite_ram_checkpoint_bytes"] <= 2 * MIB, m
    for k in (0, 1):
        assert again[k][1] >= first[k][0] - 1, ("uncapped: both resume", k, first, again)

    with Server("-t", "2", "--parallel", "1", "--ram-states", "8", "--ram-states-mib", "1") as s:
        first, again, m = run_abc(s)
    assert m["redlite_ram_checkpoints"] == 1, m
    assert 0 < m["redlite_ram_checkpoint_bytes"] <= MIB, m
    assert again[1][1] >= first[1][0] - 1, ("B was kept and resumes", first, again)
    assert again[0][1] < first[0][0] - 1, ("A was pushed out by the cap and is evaluated again", first, again)


def test_ram_cap_alone_state_larger_than_the_cap():
    long_conv = [{"role": "system", "content": "You are a meticulous assistant who checks every step. " * 250},
                 {"role": "user", "content": "Say hi."}]
    with Server("-t", "2", "--parallel", "1", "--ram-states-mib", "2") as s:
        p, _, _ = turn(s, long_conv)
        assert p > 1500, p  # its state: 1 KiB a token + 0.8 MiB of recurrent state > 2 MiB
        turn(s, SHORT[0])  # evicts the long conversation: larger than the cap, not kept
        m = s.metrics()
        assert m["redlite_ram_checkpoints"] == 0 and m["redlite_ram_checkpoint_saves_total"] == 0, m
        turn(s, SHORT[1])  # evicts A: kept
        turn(s, SHORT[2])  # evicts B: kept too (no --ram-states: not one per slot, the bytes decide)
        m = s.metrics()
        assert m["redlite_ram_checkpoints"] == 2 and m["redlite_ram_checkpoint_saves_total"] == 2, m
        assert m["redlite_ram_checkpoint_bytes"] <= 2 * MIB, m
