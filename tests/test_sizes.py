"""Files and functions a reader can hold (tools/check_sizes.py): the real tree passes, and a tree
with a 1,001-line file or a 151-line function fails, naming it; 150 lines, bodies inside comments
or strings, struct initialisers and extern "C" blocks are measured as they should be."""
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOOL = os.path.join(ROOT, "tools", "check_sizes.py")


def run(root, *args):
    return subprocess.run([sys.executable, TOOL, root, *args], capture_output=True, text=True)


def func(name, lines):
    """A C function of exactly `lines` lines (signature line to closing brace)."""
    body = [f"    x += {i};" for i in range(lines - 3)]
    return "\n".join([f"int {name}(int x)", "{"] + body + ["}"]) if lines >= 3 else ""


def tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


def test_tree_keeps_sizes():
    r = run(ROOT)
    assert r.returncode == 0, r.stdout


def test_limits_pass_at_the_edge(tmp_path):
    src = func("edge", 150) + "\n"
    src += "\n" * (1000 - src.count("\n"))
    t = tree(tmp_path, {"src/base/a.c": src})
    r = run(t)
    assert r.returncode == 0, r.stdout


def test_long_file_fails(tmp_path):
    t = tree(tmp_path, {"src/base/big.c": "int x;\n" * 1001})
    r = run(t)
    assert r.returncode == 1 and "src/base/big.c: 1001 lines" in r.stdout, r.stdout


def test_long_function_fails_with_its_line(tmp_path):
    src = "#include <stdio.h>\n/* a { comment */\nstatic const char *s = \"}{\";\n" + func("too_long", 151) + "\n"
    t = tree(tmp_path, {"src/run/b.c": src})
    r = run(t)
    assert r.returncode == 1, r.stdout
    assert "src/run/b.c:4: too_long is 151 lines" in r.stdout, r.stdout


def test_tables_and_extern_blocks(tmp_path):
    table = "static const int tab[] = {\n" + "    1,\n" * 200 + "};\n"
    struct = "typedef struct {\n" + "    int a;\n" * 200 + "} big_t;\n"
    cuda = ('extern "C" {\n' + "template <int N>\n__global__ void __launch_bounds__(256) kern(const float *x)\n{\n"
            + "    x += 1;\n" * 160 + "}\n}\n")
    t = tree(tmp_path, {"src/base/t.c": table + struct, "src/cuda/k.cu": cuda})
    r = run(t)
    assert r.returncode == 1, r.stdout
    assert "src/cuda/k.cu:3: kern is 163 lines" in r.stdout, r.stdout
    assert "t.c" not in r.stdout, r.stdout
