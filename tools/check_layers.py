#!/usr/bin/env python3
"""check_layers.py — the include arrows of src/ run one way.

Each folder of src/ is one layer; a file may include headers of its own layer or of a layer
below it, never above. The order (bottom first) is LAYERS below, and docs/DESIGN.md draws the
same picture. Every quoted include must name its folder ("gguf/gguf.h", not "gguf.h"), so the
layer of every dependency is visible where it is used.

Exit 0 when every include keeps to the order, 1 with one line per offending include.
    python3 tools/check_layers.py [ROOT]
"""
import os
import re
import sys

# Bottom first. Layers on one rank do not include each other (kern, cuda and text are peers).
LAYERS = [
    ("base",),                   # common, json writer, thread pool
    ("gguf",),                   # GGUF reader / writer, quant formats and tables
    ("kern", "cuda", "text"),    # CPU kernels + ops, CUDA kernels, tokenizer / chat / sampler
    ("model",),                  # the architecture description (+ synth)
    ("cache",),                  # RAM expert cache, VRAM tier
    ("backend",),                # the CPU and CUDA backends (forward passes)
    ("run",),                    # engine, session, speculation, state files
    ("serve",),                  # HTTP server and the API modules
    ("cli",),                    # the redlite command
]
RANK = {d: r for r, ds in enumerate(LAYERS) for d in ds}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SRC_EXT = (".c", ".h", ".cu", ".cuh")


def check(root):
    bad = []
    src = os.path.join(root, "src")
    for d in sorted(os.listdir(src)):
        path = os.path.join(src, d)
        if not os.path.isdir(path):
            bad.append(f"src/{d}: a file at the top of src/ (every module lives in a layer folder)")
            continue
        if d not in RANK:
            bad.append(f"src/{d}/: folder not in tools/check_layers.py LAYERS")
            continue
        for f in sorted(os.listdir(path)):
            if not f.endswith(SRC_EXT):
                continue
            rel = f"src/{d}/{f}"
            for n, line in enumerate(open(os.path.join(path, f), errors="replace"), 1):
                m = INC.match(line)
                if not m:
                    continue
                inc = m.group(1)
                if "/" not in inc:
                    bad.append(f"{rel}:{n}: include \"{inc}\" without its folder")
                    continue
                tgt = inc.split("/")[0]
                if tgt not in RANK:
                    bad.append(f"{rel}:{n}: include \"{inc}\" of an unknown folder")
                elif not os.path.exists(os.path.join(src, inc)):
                    bad.append(f"{rel}:{n}: include \"{inc}\" does not exist")
                elif tgt != d and RANK[tgt] >= RANK[d]:
                    bad.append(f"{rel}:{n}: {d} (rank {RANK[d]}) includes {inc} (rank {RANK[tgt]}): "
                               "an arrow upward or sideways")
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = check(root)
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} include(s) break the layer order (tools/check_layers.py)")
        return 1
    print("check_layers: every include runs downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
