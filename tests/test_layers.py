"""The include arrows of src/ run one way (tools/check_layers.py): the real tree passes, and a
tree with an upward include, a bare include or a stray top-level file fails."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOOL = os.path.join(ROOT, "tools", "check_layers.py")


def run(root):
    return subprocess.run([sys.executable, TOOL, root], capture_output=True, text=True)


def test_tree_keeps_layer_order():
    r = run(ROOT)
    assert r.returncode == 0, r.stdout


def _mini(tmp_path):
    for d in ("base", "gguf", "run"):
        (tmp_path / "src" / d).mkdir(parents=True)
    (tmp_path / "src" / "base" / "common.h").write_text("/* base */\n")
    (tmp_path / "src" / "gguf" / "gguf.h").write_text('#include "base/common.h"\n')
    (tmp_path / "src" / "run" / "engine.h").write_text('#include "gguf/gguf.h"\n')
    return tmp_path


def test_mini_tree_passes(tmp_path):
    assert run(str(_mini(tmp_path))).returncode == 0


def test_upward_include_fails(tmp_path):
    t = _mini(tmp_path)
    (t / "src" / "gguf" / "gguf.c").write_text('#include "gguf/gguf.h"\n#include "run/engine.h"\n')
    r = run(str(t))
    assert r.returncode == 1 and "src/gguf/gguf.c:2" in r.stdout


def test_bare_include_and_top_level_file_fail(tmp_path):
    t = _mini(tmp_path)
    (t / "src" / "run" / "engine.c").write_text('#include "engine.h"\n')
    (t / "src" / "stray.c").write_text("int x;\n")
    r = run(str(t))
    assert r.returncode == 1
    assert "without its folder" in r.stdout and "src/stray.c" in r.stdout
