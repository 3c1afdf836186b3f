#!/usr/bin/env python3
"""Write compile_commands.json (clang-tidy, editors) from the commands make itself would run.

`make -n -B` prints every compile command of the CPU build (its own build directory, so the real
build/ is not touched); each `cc ... -c SRC -o OBJ` line becomes one entry. No bear, no
compiler wrapper: what make runs is what the database says. Usage: tools/compile_commands.py [OUT]
"""
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "compile_commands.json")
    dry = subprocess.run(["make", "-n", "-B", "BUILD=build/ccdb", "all"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    entries = []
    for line in dry.splitlines():
        words = shlex.split(line) if " -c " in line else []
        if not words or words[0] not in ("cc", "gcc", "clang", os.environ.get("CC", "cc")):
            continue
        src = words[words.index("-c") + 1]
        if not src.endswith(".c"):
            continue
        entries.append({"directory": ROOT, "file": os.path.join(ROOT, src), "arguments": words})
    with open(out, "w") as f:
        json.dump(entries, f, indent=1)
    print(f"{out}: {len(entries)} entries")
    return 0 if entries else 1


if __name__ == "__main__":
    sys.exit(main())
