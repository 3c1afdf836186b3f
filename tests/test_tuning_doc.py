"""docs/TUNING.md is the one table of the RL_* switches: every variable src/ reads has a row, and
every row of the live tables names a variable src/ still reads (deleted ones go to "Deleted variants")."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def src_switches():
    names = set()
    for dp, _, fs in os.walk(os.path.join(ROOT, "src")):
        for f in fs:
            if f.endswith((".c", ".h", ".cu", ".cuh")):
                names |= set(re.findall(r'"(RL_[A-Z0-9_]+)"', open(os.path.join(dp, f), errors="replace").read()))
    return names


def doc_switches():
    text = open(os.path.join(ROOT, "docs", "TUNING.md")).read()
    live, deleted = text.split("## Deleted variants", 1)
    rows = lambda part: {n for line in part.splitlines() if line.startswith("| `")
                         for n in re.findall(r"`(RL_[A-Z0-9_]+)", re.split(r"(?<!\\)\|", line)[1])}
    return rows(live), rows(deleted)


def test_every_switch_in_the_table():
    live, deleted = doc_switches()
    missing = sorted(src_switches() - live)
    assert not missing, f"RL_* variables read in src/ without a row in docs/TUNING.md: {missing}"
    stale = sorted(live - src_switches())
    assert not stale, f"docs/TUNING.md rows for variables src/ no longer reads (move them to Deleted variants): {stale}"
    back = sorted(deleted & src_switches())
    assert not back, f"listed as deleted in docs/TUNING.md but still read in src/: {back}"
